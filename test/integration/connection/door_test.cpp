// The front door of host:port connections: a listener is a TCP socket that
// speaks the library's handshake, so bytes from strangers never reach UCX.
// Garbage, silent connections, fake servers and wrong secrets get a clear
// error and leave the listener serving; the handshake's TCP connection is the
// connection's lifeline. Over UCX's TCP transport and over shared memory.
#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <random>
#include <thread>

#include <dirent.h>

using namespace ucx_test;
using namespace std::chrono_literals;
namespace ip = asio::ip;

namespace {

std::size_t open_fds() {
    std::size_t n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d))
            ++n;
        closedir(d);
    }
    return n;
}

ucx::worker_options door_options(std::chrono::milliseconds handshake_timeout = 10s) {
    ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
    o.handshake_timeout = handshake_timeout;
    return o;
}

class door : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam())};

    ip::tcp::endpoint loopback() const { return {ip::make_address("127.0.0.1"), 0}; }

    /// Connects through `l` and echoes one message; the endpoints' error.
    ucx::error_code connect_and_echo(ucx::worker& client, ucx::listener& l) {
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted, connected;
        l.async_accept(
            [&](ucx::error_code ec, ucx::endpoint ep) { accepted.emplace(ec, std::move(ep)); });
        ucx::async_connect(client, l.local_endpoint(), [&](ucx::error_code ec, ucx::endpoint ep) {
            connected.emplace(ec, std::move(ep));
        });
        if (!run_until(
                io, [&] { return connected.has_value(); }, 20s))
            return asio::error::timed_out;
        if (connected->first)
            return connected->first;
        if (!run_until(
                io, [&] { return accepted.has_value(); }, 20s))
            return asio::error::timed_out;
        if (accepted->first)
            return accepted->first;
        std::array<char, 8> out{'d', 'o', 'o', 'r', 0, 1, 2, 3}, in{};
        std::optional<ucx::error_code> sent, received;
        connected->second.async_send(asio::buffer(out), 7,
                                     [&](ucx::error_code ec, std::size_t) { sent = ec; });
        accepted->second.async_recv(asio::buffer(in), 7, ~0u,
                                    [&](ucx::error_code ec, std::size_t n, std::uint32_t) {
                                        received = ec;
                                        EXPECT_EQ(n, in.size());
                                    });
        if (!run_until(
                io, [&] { return sent && received; }, 20s))
            return asio::error::timed_out;
        EXPECT_EQ(in, out);
        // The endpoints know the TCP connection's addresses.
        EXPECT_EQ(connected->second.remote_endpoint().port(), l.local_endpoint().port());
        EXPECT_EQ(accepted->second.local_endpoint().port(), l.local_endpoint().port());
        return *sent ? *sent : *received;
    }

    /// Sends `bytes` to the port over plain TCP, then reads until the
    /// listener closes the connection; how many bytes it answered.
    std::size_t poke(std::uint16_t port, const std::vector<std::uint8_t>& bytes) {
        asio::io_context raw_io;
        ip::tcp::socket s(raw_io);
        s.connect({ip::make_address("127.0.0.1"), port});
        asio::write(s, asio::buffer(bytes));
        std::size_t answered = 0;
        std::array<char, 256> buf;
        std::atomic<bool> closed{false};
        std::thread reader([&] {
            ucx::error_code ec;
            while (!ec)
                answered += s.read_some(asio::buffer(buf), ec);
            closed = true;
        });
        EXPECT_TRUE(run_until(
            io, [&] { return closed.load(); }, 20s))
            << "the listener kept the socket";
        if (!closed)
            s.shutdown(ip::tcp::socket::shutdown_both); // the reader ends
        reader.join();
        return answered;
    }
};

TEST_P(door, connects_and_moves_data) {
    ucx::worker server(ctx, io, door_options()), client(ctx, io, door_options());
    ucx::listener l(server, loopback());
    EXPECT_FALSE(connect_and_echo(client, l));
}

TEST_P(door, garbage_on_the_port_is_refused_and_the_listener_keeps_serving) {
    // Inputs shorter than a header leave the listener waiting: its deadline ends them.
    ucx::worker server(ctx, io, door_options(300ms)), client(ctx, io, door_options());
    ucx::listener l(server, loopback());
    const std::uint16_t port = l.local_endpoint().port();
    const std::size_t fds_before = open_fds();
    // The inputs that abort a process through UCX 1.13's connection manager,
    // an HTTP request, random bytes, and a valid header announcing too much.
    std::vector<std::vector<std::uint8_t>> inputs = {
        std::vector<std::uint8_t>(16, 0xff),
        std::vector<std::uint8_t>(64, 0x00),
        std::vector<std::uint8_t>{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1', '.',
                                  '1', '\r', '\n', '\r', '\n'},
        {'U', 'C', 'X', 'D', 1, 2, 0, 0, 0xff, 0xff, 0xff, 0x7f},
    };
    std::mt19937 gen(7);
    for (int i = 0; i < 20; ++i) {
        std::vector<std::uint8_t> r(1 + gen() % 300);
        for (auto& b : r)
            b = static_cast<std::uint8_t>(gen());
        inputs.push_back(std::move(r));
    }
    for (const auto& in : inputs)
        poke(port, in);
    EXPECT_EQ(l.rejected(), inputs.size());
    EXPECT_FALSE(connect_and_echo(client, l));
    run_until(
        io, [] { return false; }, 100ms);
    EXPECT_LE(open_fds(), fds_before + 2) << "descriptors left behind";
}

TEST_P(door, silent_connections_are_closed_after_the_handshake_timeout) {
    ucx::worker server(ctx, io, door_options(300ms)), client(ctx, io, door_options());
    ucx::listener_options o;
    o.backlog = 8;
    ucx::listener l(server, loopback(), o);
    asio::io_context raw_io;
    std::vector<std::unique_ptr<ip::tcp::socket>> silent;
    for (int i = 0; i < 8; ++i) {
        silent.push_back(std::make_unique<ip::tcp::socket>(raw_io));
        silent.back()->connect(l.local_endpoint());
    }
    // Full: a client is refused at once, with a clear error.
    std::optional<ucx::error_code> refused;
    ucx::async_connect(client, l.local_endpoint(),
                       [&](ucx::error_code ec, ucx::endpoint) { refused = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return refused.has_value(); }, 20s));
    EXPECT_EQ(*refused, asio::error::connection_refused) << refused->message();
    // The silent ones are closed once their time is up; then there is room.
    run_until(
        io, [] { return false; }, 600ms);
    for (auto& s : silent) {
        std::array<char, 64> buf;
        ucx::error_code ec;
        s->non_blocking(true);
        while (!ec)
            s->read_some(asio::buffer(buf), ec); // the greeting, then eof
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
    }
    EXPECT_FALSE(connect_and_echo(client, l));
}

TEST_P(door, a_fake_server_fails_the_connect_cleanly) {
    ucx::worker client(ctx, io, door_options(2s));
    for (const std::vector<std::uint8_t>& answer :
         {std::vector<std::uint8_t>(64, 0x00), std::vector<std::uint8_t>(16, 0xff),
          std::vector<std::uint8_t>{'U', 'C', 'X', 'D', 1, 1, 0, 0, 0xff, 0xff, 0, 0}}) {
        ip::tcp::acceptor fake(io, loopback());
        ip::tcp::socket peer(io);
        fake.async_accept(peer, [&](ucx::error_code ec) {
            if (!ec)
                asio::async_write(peer, asio::buffer(answer), [](ucx::error_code, std::size_t) {});
        });
        std::optional<ucx::error_code> r;
        ucx::async_connect(client, fake.local_endpoint(),
                           [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
        ASSERT_TRUE(run_until(
            io, [&] { return r.has_value(); }, 20s));
        EXPECT_EQ(*r, ucx::error::handshake_failed) << r->message();
    }
    // A server that accepts and says nothing: the handshake deadline.
    ip::tcp::acceptor mute(io, loopback());
    ip::tcp::socket peer(io);
    mute.async_accept(peer, [](ucx::error_code) {});
    std::optional<ucx::error_code> r;
    ucx::async_connect(client, mute.local_endpoint(),
                       [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 20s));
    EXPECT_EQ(*r, ucx::error::handshake_timeout) << r->message();
}

TEST_P(door, nobody_listening_is_connection_refused) {
    ucx::worker client(ctx, io, door_options());
    ip::tcp::endpoint closed;
    {
        ip::tcp::acceptor a(io, loopback());
        closed = a.local_endpoint();
    }
    std::optional<ucx::error_code> r;
    ucx::async_connect(client, closed, [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 20s));
    EXPECT_EQ(*r, asio::error::connection_refused) << r->message();
}

TEST_P(door, a_shared_secret_admits_only_who_knows_it) {
    ucx::worker_options with = door_options();
    with.secret = "correct horse battery staple";
    ucx::worker_options other = door_options();
    other.secret = "wrong";
    ucx::worker server(ctx, io, with), invited(ctx, io, with), stranger(ctx, io, other),
        anonymous(ctx, io, door_options());
    ucx::listener l(server, loopback());
    EXPECT_FALSE(connect_and_echo(invited, l));
    for (ucx::worker* w : {&stranger, &anonymous}) {
        std::optional<ucx::error_code> r;
        ucx::async_connect(*w, l.local_endpoint(),
                           [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
        ASSERT_TRUE(run_until(
            io, [&] { return r.has_value(); }, 20s));
        EXPECT_EQ(*r, ucx::error::authentication_failed) << r->message();
    }
    // The anonymous client gives up at the greeting: the listener sees it close.
    EXPECT_TRUE(run_until(
        io, [&] { return l.rejected() == 2u; }, 5s))
        << l.rejected();
    // A client with a secret does not trust a server without one.
    ucx::listener open(anonymous, loopback());
    std::optional<ucx::error_code> r;
    ucx::async_connect(invited, open.local_endpoint(),
                       [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 20s));
    EXPECT_EQ(*r, ucx::error::authentication_failed) << r->message();
}

TEST_P(door, the_accept_filter_sees_the_tcp_client) {
    ucx::worker server(ctx, io, door_options()), client(ctx, io, door_options());
    ucx::listener_options o;
    std::vector<ip::tcp::endpoint> seen;
    bool admit = false;
    o.accept_filter = [&](const ip::tcp::endpoint& c) {
        seen.push_back(c);
        return admit;
    };
    ucx::listener l(server, loopback(), o);
    std::optional<ucx::error_code> r;
    ucx::async_connect(client, l.local_endpoint(),
                       [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 20s));
    EXPECT_EQ(*r, asio::error::connection_refused);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_TRUE(seen[0].address().is_loopback());
    admit = true;
    EXPECT_FALSE(connect_and_echo(client, l));
}

TEST_P(door, a_cancelled_connect_during_the_handshake_completes_aborted) {
    ucx::worker client(ctx, io, door_options(30s));
    ip::tcp::acceptor mute(io, loopback());
    ip::tcp::socket peer(io);
    mute.async_accept(peer, [](ucx::error_code) {});
    asio::cancellation_signal cancel;
    std::optional<ucx::error_code> r;
    ucx::async_connect(client, mute.local_endpoint(),
                       asio::bind_cancellation_slot(
                           cancel.slot(), [&](ucx::error_code ec, ucx::endpoint) { r = ec; }));
    run_until(
        io, [] { return false; }, 50ms);
    cancel.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 5s));
    EXPECT_EQ(*r, asio::error::operation_aborted);
}

TEST_P(door, closing_the_worker_during_the_handshake_aborts_the_connect) {
    std::optional<ucx::error_code> r;
    {
        ucx::worker client(ctx, io, door_options(30s));
        ip::tcp::acceptor mute(io, loopback());
        ip::tcp::socket peer(io);
        mute.async_accept(peer, [](ucx::error_code) {});
        ucx::async_connect(client, mute.local_endpoint(),
                           [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
        run_until(
            io, [] { return false; }, 50ms);
        client.close();
    }
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, 5s));
    EXPECT_EQ(*r, asio::error::operation_aborted);
}

TEST_P(door, an_ipv6_listener_takes_clients) {
    // The front door is a plain TCP socket, IPv6 included; UCX then connects
    // by worker address.
    ucx::worker server(ctx, io, door_options()), client(ctx, io, door_options());
    ucx::error_code ec;
    ucx::listener l(server, {ip::make_address("::1"), 0}, {}, ec);
    if (ec)
        GTEST_SKIP() << "no IPv6 loopback here: " << ec.message();
    EXPECT_FALSE(connect_and_echo(client, l));
    std::optional<std::pair<ucx::error_code, ucx::endpoint>> named;
    ucx::async_connect(
        client, "::1", std::to_string(l.local_endpoint().port()),
        [&](ucx::error_code e, ucx::endpoint ep) { named.emplace(e, std::move(ep)); });
    std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted;
    l.async_accept(
        [&](ucx::error_code e, ucx::endpoint ep) { accepted.emplace(e, std::move(ep)); });
    ASSERT_TRUE(run_until(
        io, [&] { return named && accepted; }, 20s));
    EXPECT_FALSE(named->first) << named->first.message();
    EXPECT_TRUE(accepted->second.remote_endpoint().address().is_v6());
}

TEST_P(door, a_restarted_server_binds_its_port_while_old_connections_linger) {
    // A server that closed its side of a connection first leaves it in
    // TIME_WAIT on its port: a restarted server binds the port again with
    // reuse_address (the default), as tcp::acceptor does; without it the
    // port is taken.
    std::uint16_t port = 0;
    {
        asio::io_context raw_io;
        // As a listener's acceptor (and Asio's by default), the old server's
        // socket allowed address reuse: its connections inherit that.
        ip::tcp::acceptor a(raw_io, loopback(), true);
        port = a.local_endpoint().port();
        ip::tcp::socket client(raw_io), server(raw_io);
        client.connect(a.local_endpoint());
        a.accept(server);
        server.close(); // the server's side closes first: TIME_WAIT is on `port`
        std::array<char, 1> c;
        ucx::error_code ec;
        client.read_some(asio::buffer(c), ec);
        EXPECT_EQ(ec, asio::error::eof);
    }
    ucx::worker server(ctx, io, door_options()), client(ctx, io, door_options());
    ucx::listener_options strict;
    strict.reuse_address = false;
    ucx::error_code ec;
    ucx::listener taken(server, {ip::make_address("127.0.0.1"), port}, strict, ec);
    EXPECT_EQ(ec, asio::error::address_in_use) << ec.message();
    ucx::listener l(server, {ip::make_address("127.0.0.1"), port}, {}, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(l.local_endpoint().port(), port);
    EXPECT_FALSE(connect_and_echo(client, l));
}

TEST_P(door, the_socket_address_method_still_works) {
    ucx::context sockaddr_ctx(options_for(GetParam(), true));
    ucx::worker_options o = door_options();
    o.method = ucx::connection_method::ucx_sockaddr;
    ucx::worker server(sockaddr_ctx, io, o), client(sockaddr_ctx, io, o);
    ucx::listener l(server, loopback());
    EXPECT_FALSE(connect_and_echo(client, l));
}

INSTANTIATE_TEST_SUITE_P(all, door, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
