// Plain UCP connections (connection_method::plain) between two workers of one
// process, over UCX's TCP transport and over shared memory: no library
// protocol on the wire, yet tag, active-message, RMA and ucx::stream
// operations work; what needs the protocol fails with a clear error; a
// connect that UCX cannot make, or that never completes, fails in bounded
// time. The peers that are not this library are in interop_test.cpp.
#include "test_support.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <cstring>

using namespace ucx_test;

namespace {

ucx::worker_options plain_options() {
    ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
    o.method = ucx::connection_method::plain;
    o.handshake_timeout = std::chrono::milliseconds(2000);
    return o;
}

class plain : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, plain_options()};
    ucx::worker client_worker{ctx, io, plain_options()};
    ucx::listener server{server_worker,
                         asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};

    std::string port() { return std::to_string(server.local_endpoint().port()); }

    std::pair<ucx::endpoint, ucx::endpoint> connect_pair() {
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted, connected;
        server.async_accept(
            [&](ucx::error_code ec, ucx::endpoint ep) { accepted.emplace(ec, std::move(ep)); });
        ucx::async_connect(
            client_worker, "127.0.0.1", port(),
            [&](ucx::error_code ec, ucx::endpoint ep) { connected.emplace(ec, std::move(ep)); });
        EXPECT_TRUE(run_until(io, [&] { return accepted && connected; }));
        if (!accepted || !connected)
            return {};
        EXPECT_FALSE(accepted->first) << accepted->first.message();
        EXPECT_FALSE(connected->first) << connected->first.message();
        return {std::move(connected->second), std::move(accepted->second)};
    }

    ucx::error_code connect_error(const std::string& to_port) {
        std::optional<ucx::error_code> r;
        ucx::async_connect(client_worker, "127.0.0.1", to_port,
                           [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
        EXPECT_TRUE(run_until(io, [&] { return r.has_value(); })) << "the connect hung";
        return r.value_or(asio::error::timed_out);
    }

    void tag_exchange(ucx::endpoint& from, ucx::worker& to, std::size_t size, ucx::tag_t tag) {
        auto data = pattern(size, static_cast<std::uint32_t>(tag));
        std::vector<char> in(size + 8);
        std::optional<ucx::error_code> s, r;
        std::size_t n = 0;
        ucx::async_tag_recv(to, asio::buffer(in), tag, ~ucx::tag_t{0},
                            [&](ucx::error_code ec, std::size_t len, ucx::tag_t) {
                                r = ec;
                                n = len;
                            });
        ucx::async_tag_send(from, asio::buffer(data), tag,
                            [&](ucx::error_code ec, std::size_t) { s = ec; });
        expect_delivered(io, s, r, n, in, data);
    }
};

TEST_P(plain, tag_and_active_messages_both_ways_over_the_transport_under_test) {
    auto [client, accepted] = connect_pair();
    ASSERT_TRUE(client.is_open());
    ASSERT_TRUE(accepted.is_open());
    EXPECT_EQ(client.remote_endpoint().port(), server.local_endpoint().port());
    const std::string lanes = endpoint_lanes(client.native_handle());
    if (GetParam() == transport::shared_memory)
        EXPECT_TRUE(lanes.find("posix") != std::string::npos ||
                    lanes.find("sysv") != std::string::npos)
            << lanes;
    else
        EXPECT_EQ(lanes.find("posix"), std::string::npos) << lanes;
    ucx::tag_t tag = 0xCAFE;
    for (std::size_t size :
         {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
        tag_exchange(client, server_worker, size, tag++);
        tag_exchange(accepted, client_worker, size, tag++);
    }
    // Active messages both ways; the server answers on the reply endpoint.
    const auto data = pattern(100000, 7);
    std::optional<ucx::error_code> sent;
    std::optional<std::pair<ucx::error_code, ucx::am_message>> got, answer;
    ucx::async_am_recv(server_worker, 3, [&](ucx::error_code ec, ucx::am_message m) {
        got.emplace(ec, std::move(m));
    });
    ucx::async_am_send(client, 3, asio::buffer("hdr", 3), asio::buffer(data),
                       [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(io, [&] { return sent && got; }));
    ASSERT_FALSE(*sent) << sent->message();
    ASSERT_FALSE(got->first) << got->first.message();
    ASSERT_EQ(got->second.data().size(), data.size());
    EXPECT_EQ(std::memcmp(got->second.data().data(), data.data(), data.size()), 0);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(got->second.header().data()),
                          got->second.header().size()),
              "hdr");
    ucx::async_am_recv(client_worker, 4, [&](ucx::error_code ec, ucx::am_message m) {
        answer.emplace(ec, std::move(m));
    });
    ucx::async_am_send(accepted, 4, asio::const_buffer(), asio::buffer("pong", 4),
                       [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(io, [&] { return answer.has_value(); }));
    ASSERT_FALSE(answer->first);
    EXPECT_EQ(answer->second.data().size(), 4u);
}

TEST_P(plain, rma_put_and_get_with_a_key_sent_as_a_tag_message) {
    auto [client, accepted] = connect_pair();
    auto region = ucx::memory_region::allocate(ctx, 1 << 20);
    const std::vector<std::byte> packed = region.pack_key();
    // The server sends its key over the plain connection.
    std::vector<std::byte> key_bytes(4096);
    std::optional<ucx::error_code> r;
    std::size_t n = 0;
    ucx::async_tag_recv(client_worker, asio::buffer(key_bytes), 9, ~ucx::tag_t{0},
                        [&](ucx::error_code ec, std::size_t len, ucx::tag_t) {
                            r = ec;
                            n = len;
                        });
    ucx::async_tag_send(accepted, asio::buffer(packed), 9, [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    ASSERT_FALSE(*r);
    key_bytes.resize(n);
    ucx::remote_key key(client, key_bytes);
    ASSERT_TRUE(key.valid());
    const auto data = pattern(65537, 3);
    std::optional<ucx::error_code> put, flushed, got;
    ucx::async_put(client, asio::buffer(data), key.address() + 5, key,
                   [&](ucx::error_code ec, std::size_t) { put = ec; });
    ASSERT_TRUE(run_until(io, [&] { return put.has_value(); }));
    ASSERT_FALSE(*put) << put->message();
    ucx::async_flush(client, [&](ucx::error_code ec) { flushed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return flushed.has_value(); }));
    ASSERT_FALSE(*flushed);
    EXPECT_EQ(std::memcmp(static_cast<const char*>(region.data()) + 5, data.data(), data.size()),
              0);
    std::vector<char> back(data.size());
    ucx::async_get(client, asio::buffer(back), key.address() + 5, key,
                   [&](ucx::error_code ec, std::size_t) { got = ec; });
    ASSERT_TRUE(run_until(io, [&] { return got.has_value(); }));
    ASSERT_FALSE(*got) << got->message();
    EXPECT_EQ(back, data);
}

TEST_P(plain, a_stream_has_no_flow_control_and_the_peers_close_is_a_reset) {
    auto [client, accepted] = connect_pair();
    ucx::stream writer(std::move(client)), reader(std::move(accepted));
    // Far more than the library's flow-control window (8 MiB), unread while
    // it is written: a plain peer sends no acknowledgements, so nothing waits
    // for them.
    const auto data = pattern(std::size_t{24} << 20, 11);
    std::vector<char> in(data.size());
    std::optional<ucx::error_code> w, r;
    asio::async_write(writer, asio::buffer(data), [&](ucx::error_code ec, std::size_t) { w = ec; });
    ASSERT_TRUE(run_until(io, [&] { return w.has_value(); })) << "the write waited for acks";
    ASSERT_FALSE(*w) << w->message();
    asio::async_read(reader, asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    ASSERT_FALSE(*r) << r->message();
    EXPECT_EQ(in, data);
    // The writer closes: no goodbye on a plain connection, so the reader
    // cannot tell a close from a crash.
    writer.close();
    std::optional<ucx::error_code> end;
    char byte;
    reader.async_read_some(asio::buffer(&byte, 1),
                           [&](ucx::error_code ec, std::size_t) { end = ec; });
    ASSERT_TRUE(run_until(io, [&] { return end.has_value(); }));
    EXPECT_EQ(*end, asio::error::connection_reset) << end->message();
}

TEST_P(plain, per_endpoint_messaging_needs_the_library_protocol) {
    auto [client, accepted] = connect_pair();
    char buf[8] = {};
    std::optional<ucx::error_code> s, r;
    client.async_send(asio::buffer(buf), [&](ucx::error_code ec, std::size_t) { s = ec; });
    accepted.async_recv(asio::buffer(buf), [&](ucx::error_code ec, std::size_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    EXPECT_EQ(*s, ucx::error::not_connected) << s->message();
    EXPECT_EQ(*r, ucx::error::not_connected) << r->message();
    // The endpoints still work.
    tag_exchange(client, server_worker, 16, 77);
}

TEST_P(plain, a_close_is_reported_to_the_peer_as_a_failure) {
    auto [client, accepted] = connect_pair();
    std::optional<ucx::error_code> closed, seen;
    accepted.async_wait_error([&](ucx::error_code ec) { seen = ec; });
    client.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return closed && seen; }));
    EXPECT_FALSE(*closed) << closed->message();
    EXPECT_TRUE(*seen);
    EXPECT_NE(*seen, asio::error::eof) << "a plain connection has no goodbye";
    std::printf("plain close seen by the peer as: %s\n", seen->message().c_str());
}

TEST_P(plain, nobody_listening_fails_the_connect) {
    // A port nobody listens on: bind one, close it.
    asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const std::string closed_port = std::to_string(a.local_endpoint().port());
    a.close();
    const auto t0 = std::chrono::steady_clock::now();
    const ucx::error_code ec = connect_error(closed_port);
    EXPECT_TRUE(ec);
    std::printf(
        "plain connect to a closed port: %s after %.1f ms\n", ec.message().c_str(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

TEST_P(plain, a_listener_filter_rejects_the_connect) {
    ucx::listener_options lo;
    lo.accept_filter = [](const asio::ip::tcp::endpoint&) { return false; };
    ucx::listener picky(server_worker,
                        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), lo);
    const ucx::error_code ec = connect_error(std::to_string(picky.local_endpoint().port()));
    EXPECT_TRUE(ec);
    std::printf("plain connect rejected by the filter: %s\n", ec.message().c_str());
}

TEST_P(plain, a_server_that_never_answers_fails_the_connect_at_the_deadline) {
    // A TCP port that accepts and then says nothing: UCX's connection
    // manager waits; the worker's handshake timeout (2 s here) bounds it.
    asio::ip::tcp::acceptor mute(io,
                                 asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    std::vector<asio::ip::tcp::socket> held;
    std::function<void()> take = [&] {
        mute.async_accept([&](ucx::error_code ec, asio::ip::tcp::socket s) {
            if (ec)
                return;
            held.push_back(std::move(s));
            take();
        });
    };
    take();
    const auto t0 = std::chrono::steady_clock::now();
    const ucx::error_code ec = connect_error(std::to_string(mute.local_endpoint().port()));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(ec, ucx::error::handshake_timeout) << ec.message();
    std::printf("plain connect to a mute server: %s after %.0f ms\n", ec.message().c_str(), ms);
}

INSTANTIATE_TEST_SUITE_P(all, plain, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
