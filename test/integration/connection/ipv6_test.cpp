// IPv6: listeners on ::1 and on ::, connects to ::1 and 127.0.0.1, with each
// connection method, with UCX's TCP transport preferring IPv4 (UCX's default
// TCP_AF_PRIO) and IPv6. The handshake method's TCP part is Asio's, and UCX
// then connects by worker address: any address works with any UCX. The
// socket-address methods (ucx_sockaddr, plain) hand the address to UCX's
// connection manager, which works only when its family is the one UCX's TCP
// transport prefers, and, for the IPv6 loopback and ::, with UCX 1.14 or
// later; the library refuses other addresses up front with
// `address_family_not_supported`. Each case checks what applies to the
// running UCX: the connection works and carries a message, or it is refused
// with that error.
#include "test_support.hpp"

#include <ucx/asio.hpp>

#include <fstream>

using namespace ucx_test;

namespace {

bool has_ipv6_loopback() {
    asio::io_context io;
    asio::ip::tcp::acceptor a(io);
    ucx::error_code ec;
    a.open(asio::ip::tcp::v6(), ec);
    if (!ec)
        a.bind(asio::ip::tcp::endpoint(asio::ip::address_v6::loopback(), 0), ec);
    return !ec;
}

struct method_case {
    const char* name;
    ucx::connection_method method;
    bool prefer_ipv6; ///< UCX_TCP_AF_PRIO=inet6,inet
};

class ipv6 : public testing::TestWithParam<method_case> {
protected:
    void SetUp() override {
        if (!has_ipv6_loopback())
            GTEST_SKIP() << "this machine has no IPv6 loopback (::1)";
    }
    ucx::worker_options options() const {
        ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
        o.method = GetParam().method;
        o.handshake_timeout = std::chrono::seconds(5);
        return o;
    }
    /// The context's options; UCX_TCP_AF_PRIO for the IPv6 cases (UCX reads
    /// the TCP transport's settings from the environment; as a context
    /// setting UCX 1.13 warns that it is invalid for its interfaces).
    static ucx::context_options context_options() {
        if (GetParam().prefer_ipv6)
            ::setenv("UCX_TCP_AF_PRIO", "inet6,inet", 1);
        else
            ::unsetenv("UCX_TCP_AF_PRIO");
        return options_for(transport::tcp, true);
    }
    ~ipv6() override { ::unsetenv("UCX_TCP_AF_PRIO"); }
    bool sockaddr_method() const { return GetParam().method != ucx::connection_method::handshake; }
    /// Whether a connection over `a` is made (else refused up front).
    bool connects_over(const std::string& a) const {
        if (!sockaddr_method())
            return true;
        const auto address = asio::ip::make_address(a);
        if (address.is_v6() != GetParam().prefer_ipv6)
            return false;
        return address.is_v4() || ucx::ucx_runtime_version() >= ucx::ucx_version{1, 14, 0};
    }

    /// The error of a listener on `bind` (none: it listened).
    ucx::error_code listen_error(const asio::ip::tcp::endpoint& bind) {
        try {
            ucx::listener l(server_worker, bind);
            return {};
        } catch (const boost::system::system_error& e) {
            std::printf("%s: a listener on %s: %s\n", GetParam().name,
                        bind.address().to_string().c_str(), e.code().message().c_str());
            return e.code();
        }
    }

    asio::io_context io;
    ucx::context ctx{context_options()};
    ucx::worker server_worker{ctx, io, options()};
    ucx::worker client_worker{ctx, io, options()};

    /// Connects to `host`:`port` of `l`, accepts, and checks a tag message
    /// goes through; returns the connect's error.
    ucx::error_code connect_and_exchange(ucx::listener& l, const std::string& host) {
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted, connected;
        l.async_accept(
            [&](ucx::error_code ec, ucx::endpoint ep) { accepted.emplace(ec, std::move(ep)); });
        ucx::async_connect(
            client_worker, host, std::to_string(l.local_endpoint().port()),
            [&](ucx::error_code ec, ucx::endpoint ep) { connected.emplace(ec, std::move(ep)); });
        EXPECT_TRUE(run_until(io, [&] { return connected.has_value(); }));
        if (!connected || connected->first)
            return connected ? connected->first : asio::error::timed_out;
        EXPECT_TRUE(run_until(io, [&] { return accepted.has_value(); }));
        if (!accepted || accepted->first)
            return accepted ? accepted->first : asio::error::timed_out;
        const auto remote = connected->second.remote_endpoint();
        EXPECT_EQ(remote.port(), l.local_endpoint().port());
        std::printf("%s: connected to %s, remote endpoint %s\n", GetParam().name, host.c_str(),
                    remote.address().to_string().c_str());
        char out[] = "over IPv6", in[sizeof out] = {};
        std::optional<ucx::error_code> r;
        ucx::async_tag_recv(server_worker, asio::buffer(in), 6, ~ucx::tag_t{0},
                            [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; });
        ucx::async_tag_send(connected->second, asio::buffer(out), 6,
                            [](ucx::error_code, std::size_t) {});
        EXPECT_TRUE(run_until(io, [&] { return r.has_value(); }));
        EXPECT_FALSE(r.value_or(asio::error::timed_out));
        EXPECT_STREQ(in, out);
        return {};
    }
};

TEST_P(ipv6, a_listener_on_the_ipv6_loopback) {
    const asio::ip::tcp::endpoint bind(asio::ip::make_address("::1"), 0);
    if (!connects_over("::1")) {
        // Refused on both sides before UCX sees the address.
        EXPECT_EQ(listen_error(bind), asio::error::address_family_not_supported);
        ucx::worker_options o = options();
        o.method = ucx::connection_method::handshake;
        ucx::worker v6_server(ctx, io, o);
        ucx::listener l(v6_server, bind);
        const ucx::error_code ec = connect_and_exchange(l, "::1");
        EXPECT_EQ(ec, asio::error::address_family_not_supported) << ec.message();
        std::printf("%s: UCX %s does not connect over ::1 here (%s)\n", GetParam().name,
                    ucx::ucx_runtime_version().to_string().c_str(), ec.message().c_str());
        return;
    }
    ucx::listener l(server_worker, bind);
    EXPECT_TRUE(l.local_endpoint().address().is_v6());
    const ucx::error_code ec = connect_and_exchange(l, "::1");
    EXPECT_FALSE(ec) << ec.message();
}

TEST_P(ipv6, a_listener_on_every_address) {
    const asio::ip::tcp::endpoint bind(asio::ip::make_address("::"), 0);
    if (!connects_over("::")) {
        EXPECT_EQ(listen_error(bind), asio::error::address_family_not_supported);
        return;
    }
    ucx::listener l(server_worker, bind);
    const ucx::error_code v6 = connect_and_exchange(l, "::1");
    EXPECT_FALSE(v6) << v6.message();
    // IPv4 clients too, where the method takes IPv4 (the handshake method).
    const ucx::error_code v4 = connect_and_exchange(l, "127.0.0.1");
    if (connects_over("127.0.0.1"))
        EXPECT_FALSE(v4) << v4.message();
    else
        EXPECT_EQ(v4, asio::error::address_family_not_supported) << v4.message();
}

TEST_P(ipv6, an_ipv4_listener) {
    const asio::ip::tcp::endpoint bind(asio::ip::make_address("127.0.0.1"), 0);
    if (!connects_over("127.0.0.1")) {
        EXPECT_EQ(listen_error(bind), asio::error::address_family_not_supported);
        return;
    }
    ucx::listener l(server_worker, bind);
    const ucx::error_code ec = connect_and_exchange(l, "127.0.0.1");
    EXPECT_FALSE(ec) << ec.message();
}

INSTANTIATE_TEST_SUITE_P(
    all, ipv6,
    testing::Values(method_case{"handshake", ucx::connection_method::handshake, false},
                    method_case{"ucx_sockaddr", ucx::connection_method::ucx_sockaddr, false},
                    method_case{"plain", ucx::connection_method::plain, false},
                    method_case{"handshake_inet6", ucx::connection_method::handshake, true},
                    method_case{"ucx_sockaddr_inet6", ucx::connection_method::ucx_sockaddr, true},
                    method_case{"plain_inet6", ucx::connection_method::plain, true}),
    [](const auto& info) { return std::string(info.param.name); });

} // namespace
