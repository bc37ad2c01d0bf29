// Liveness of connections in one process: a peer whose worker stops
// progressing (as a stopped or hung process does) is reported as
// unresponsive on both sides, deadlines bound the handshake and the close,
// and a live but idle connection stays open. Each side has its own
// io_context, so "stopping" a peer is not running its io_context.
#include "test_support.hpp"

#include <boost/asio/write.hpp>
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>

using namespace ucx_test;
using namespace std::chrono_literals;

namespace {

ucx::worker_options watched(std::chrono::milliseconds peer_timeout,
                            std::chrono::milliseconds handshake_timeout = 10s) {
    ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
    o.peer_timeout = peer_timeout;
    o.handshake_timeout = handshake_timeout;
    return o;
}

/// Runs both io_contexts until `done()` or the deadline.
template <class Pred>
bool run_both_until(asio::io_context& a, asio::io_context& b, Pred done,
                    std::chrono::steady_clock::duration limit = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
        for (asio::io_context* io : {&a, &b}) {
            if (io->stopped())
                io->restart();
            io->run_for(2ms);
        }
    }
    return done();
}

class liveness : public testing::TestWithParam<transport> {
protected:
    asio::io_context server_io, client_io;
    ucx::context ctx{options_for(GetParam(), true)};

    struct pair {
        ucx::endpoint client, accepted;
    };

    /// Connects `client` to `listener`, running both sides.
    pair connect(ucx::worker& client, ucx::listener& listener) {
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted, connected;
        listener.async_accept(
            [&](ucx::error_code ec, ucx::endpoint ep) { accepted.emplace(ec, std::move(ep)); });
        ucx::async_connect(
            client, "127.0.0.1", std::to_string(listener.local_endpoint().port()),
            [&](ucx::error_code ec, ucx::endpoint ep) { connected.emplace(ec, std::move(ep)); });
        EXPECT_TRUE(run_both_until(server_io, client_io, [&] { return accepted && connected; }));
        if (!accepted || !connected)
            return {};
        EXPECT_FALSE(accepted->first) << accepted->first.message();
        EXPECT_FALSE(connected->first) << connected->first.message();
        return {std::move(connected->second), std::move(accepted->second)};
    }

    static asio::ip::tcp::endpoint loopback() { return {asio::ip::make_address("127.0.0.1"), 0}; }
};

TEST_P(liveness, a_peer_that_stops_is_unresponsive_on_both_sides) {
    ucx::worker server_worker(ctx, server_io, watched(400ms));
    ucx::worker client_worker(ctx, client_io, watched(400ms));
    ucx::listener listener(server_worker, loopback());
    auto [client, accepted] = connect(client_worker, listener);
    ASSERT_TRUE(client.is_open() && accepted.is_open());

    std::optional<ucx::error_code> client_failed, client_received, server_failed;
    std::vector<char> in(16);
    client.async_wait_error([&](ucx::error_code ec) { client_failed = ec; });
    client.async_recv(asio::buffer(in),
                      [&](ucx::error_code ec, std::size_t) { client_received = ec; });
    accepted.async_wait_error([&](ucx::error_code ec) { server_failed = ec; });
    // The server "stops": its io_context is not run.
    ASSERT_TRUE(run_until(
        client_io, [&] { return client_failed && client_received; }, 20s));
    EXPECT_EQ(*client_failed, ucx::error::peer_unresponsive) << client_failed->message();
    EXPECT_EQ(*client_received, ucx::error::peer_unresponsive) << client_received->message();
    EXPECT_EQ(client.error(), ucx::error::peer_unresponsive);
    EXPECT_FALSE(client.is_open());
    // Counted: pings the stopped side never answered, one peer unresponsive.
    const ucx::worker_metrics m = client_worker.metrics();
    EXPECT_EQ(m.peers_unresponsive, 1u);
    EXPECT_GE(m.heartbeat_pings, 2u);
    // Later operations fail at once with the same code.
    std::optional<ucx::error_code> late;
    client.async_send(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { late = ec; });
    ASSERT_TRUE(run_until(client_io, [&] { return late.has_value(); }));
    EXPECT_EQ(*late, ucx::error::peer_unresponsive);

    // The stopped side resumes: it learns too, in bounded time (the client
    // closed the connection, or stopped answering).
    ASSERT_TRUE(run_both_until(server_io, client_io, [&] { return server_failed.has_value(); }));
    EXPECT_TRUE(server_failed->failed());
    EXPECT_FALSE(accepted.is_open());
}

TEST_P(liveness, a_live_idle_connection_stays_open) {
    // Pings every 50 ms keep it alive for many timeouts.
    ucx::worker server_worker(ctx, server_io, watched(200ms));
    ucx::worker client_worker(ctx, client_io, watched(200ms));
    ucx::listener listener(server_worker, loopback());
    auto [client, accepted] = connect(client_worker, listener);
    std::optional<ucx::error_code> failed;
    client.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    accepted.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    run_both_until(
        server_io, client_io, [&] { return failed.has_value(); }, 2s);
    ASSERT_FALSE(failed) << failed->message();
    EXPECT_TRUE(client.is_open());
    EXPECT_TRUE(accepted.is_open());
    // And it still carries messages.
    std::vector<char> in(8);
    auto data = pattern(8, 3);
    std::optional<ucx::error_code> s, r;
    accepted.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    client.async_send(asio::buffer(data), [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_both_until(server_io, client_io, [&] { return s && r; }));
    EXPECT_FALSE(*s);
    EXPECT_FALSE(*r);
    EXPECT_EQ(in, data);
    client.close();
    accepted.close();
}

TEST_P(liveness, a_side_that_does_not_watch_still_answers) {
    // The server does not watch its clients; the client watches the server,
    // which answers its pings, so neither fails.
    ucx::worker server_worker(ctx, server_io, watched(0ms));
    ucx::worker client_worker(ctx, client_io, watched(200ms));
    ucx::listener listener(server_worker, loopback());
    auto [client, accepted] = connect(client_worker, listener);
    std::optional<ucx::error_code> failed;
    client.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    accepted.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    run_both_until(
        server_io, client_io, [&] { return failed.has_value(); }, 1500ms);
    ASSERT_FALSE(failed) << failed->message();
    // Stopped, the unwatched server is never reported by the client's side...
    // except by the client's own watch: it is.
    std::optional<ucx::error_code> client_failed;
    client.async_wait_error([&](ucx::error_code ec) { client_failed = ec; });
    ASSERT_TRUE(run_until(
        client_io, [&] { return client_failed.has_value(); }, 20s));
    EXPECT_EQ(*client_failed, ucx::error::peer_unresponsive);
}

TEST_P(liveness, listener_options_override_the_workers_peer_timeout) {
    // The worker does not watch; the listener's connections do.
    ucx::worker server_worker(ctx, server_io, watched(0ms));
    ucx::worker client_worker(ctx, client_io, watched(0ms));
    ucx::listener_options lo;
    lo.peer_timeout = 300ms;
    ucx::listener listener(server_worker, loopback(), lo);
    auto [client, accepted] = connect(client_worker, listener);
    std::optional<ucx::error_code> failed;
    accepted.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    // The client "stops".
    ASSERT_TRUE(run_until(
        server_io, [&] { return failed.has_value(); }, 20s));
    EXPECT_EQ(*failed, ucx::error::peer_unresponsive);
}

TEST_P(liveness, connect_to_a_server_that_does_not_answer_times_out) {
    ucx::worker server_worker(ctx, server_io, watched(0ms));
    ucx::worker client_worker(ctx, client_io, watched(0ms, 300ms));
    ucx::listener listener(server_worker, loopback());
    std::optional<ucx::error_code> connected;
    ucx::async_connect(client_worker, "127.0.0.1", std::to_string(listener.local_endpoint().port()),
                       [&](ucx::error_code ec, ucx::endpoint) { connected = ec; });
    // The server never progresses: no welcome.
    ASSERT_TRUE(run_until(
        client_io, [&] { return connected.has_value(); }, 20s));
    EXPECT_EQ(*connected, ucx::error::handshake_timeout) << connected->message();
}

TEST_P(liveness, a_client_that_never_says_hello_is_closed_unseen) {
    ucx::worker server_worker(ctx, server_io, watched(0ms, 300ms));
    ucx::listener listener(server_worker, loopback());
    // A raw UCP client: connects to the listener, never sends the library's hello.
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h raw = nullptr;
    ASSERT_EQ(ucp_worker_create(ctx.native_handle(), &wp, &raw), UCS_OK);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(listener.local_endpoint().port());
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    bool raw_failed = false;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    ep.sockaddr.addrlen = sizeof(addr);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t) { *static_cast<bool*>(arg) = true; };
    ep.err_handler.arg = &raw_failed;
    ucp_ep_h raw_ep = nullptr;
    ASSERT_EQ(ucp_ep_create(raw, &ep, &raw_ep), UCS_OK);

    std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted;
    listener.async_accept(
        [&](ucx::error_code ec, ucx::endpoint e) { accepted.emplace(ec, std::move(e)); });
    // The server closes the silent connection after its handshake timeout;
    // the raw client sees its endpoint fail.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!raw_failed && std::chrono::steady_clock::now() < deadline) {
        ucp_worker_progress(raw);
        if (server_io.stopped())
            server_io.restart();
        server_io.run_for(2ms);
    }
    EXPECT_TRUE(raw_failed);
    EXPECT_FALSE(accepted.has_value()) << "a connection without a handshake was accepted";

    // A proper client is still accepted after it.
    ucx::worker client_worker(ctx, client_io, watched(0ms));
    std::optional<ucx::error_code> connected;
    ucx::endpoint client;
    ucx::async_connect(client_worker, "127.0.0.1", std::to_string(listener.local_endpoint().port()),
                       [&](ucx::error_code ec, ucx::endpoint e) {
                           connected = ec;
                           client = std::move(e);
                       });
    EXPECT_TRUE(run_both_until(server_io, client_io, [&] { return accepted && connected; }));
    ASSERT_TRUE(accepted && connected);
    EXPECT_FALSE(accepted->first) << accepted->first.message();
    EXPECT_FALSE(*connected) << connected->message();

    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(raw_ep, &cp);
    while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(raw);
    if (UCS_PTR_IS_PTR(r))
        ucp_request_free(r);
    ucp_worker_destroy(raw);
}

TEST_P(liveness, a_close_waiting_on_a_stopped_peer_is_bounded) {
    ucx::worker server_worker(ctx, server_io, watched(400ms));
    ucx::worker client_worker(ctx, client_io, watched(400ms));
    ucx::listener listener(server_worker, loopback());
    auto [client, accepted] = connect(client_worker, listener);
    // A large send (rendezvous) the stopped server never takes, then close.
    auto data = pattern(1 << 20, 9);
    std::optional<ucx::error_code> sent, closed;
    client.async_send(asio::buffer(data), [&](ucx::error_code ec, std::size_t) { sent = ec; });
    client.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(
        client_io, [&] { return sent && closed; }, 20s));
    EXPECT_EQ(*closed, ucx::error::peer_unresponsive) << closed->message();
    EXPECT_TRUE(sent->failed());
}

TEST_P(liveness, a_close_whose_goodbye_is_not_acknowledged_ends_after_the_linger) {
    ucx::worker server_worker(ctx, server_io, watched(0ms));
    ucx::worker client_worker(ctx, client_io, watched(0ms));
    ucx::listener listener(server_worker, loopback());
    auto [client, accepted] = connect(client_worker, listener);
    std::optional<ucx::error_code> closed;
    client.async_close([&](ucx::error_code ec) { closed = ec; });
    // The server is stopped: no goodbye_ack; the linger (5 s) bounds the close.
    ASSERT_TRUE(run_until(
        client_io, [&] { return closed.has_value(); }, 30s));
    EXPECT_EQ(*closed, ucx::error::peer_unresponsive) << closed->message();
}

TEST_P(liveness, a_stream_whose_peer_stops_fails_reads_and_writes) {
    ucx::worker server_worker(ctx, server_io, watched(400ms));
    ucx::worker client_worker(ctx, client_io, watched(400ms));
    ucx::acceptor acceptor(server_worker, loopback());
    ucx::stream client(client_worker), server(server_worker);
    std::optional<ucx::error_code> a, c;
    acceptor.async_accept(server, [&](ucx::error_code ec) { a = ec; });
    client.async_connect("127.0.0.1", std::to_string(acceptor.local_endpoint().port()),
                         [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_both_until(server_io, client_io, [&] { return a && c; }));
    ASSERT_FALSE(*a);
    ASSERT_FALSE(*c);
    // The server stops while the client reads and writes more than the
    // window lets through unacknowledged.
    std::vector<char> in(16), out(32 << 20);
    std::optional<ucx::error_code> read, wrote;
    client.async_read_some(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { read = ec; });
    asio::async_write(client, asio::buffer(out),
                      [&](ucx::error_code ec, std::size_t) { wrote = ec; });
    ASSERT_TRUE(run_until(
        client_io, [&] { return read && wrote; }, 20s));
    EXPECT_EQ(*read, ucx::error::peer_unresponsive) << read->message();
    EXPECT_EQ(*wrote, ucx::error::peer_unresponsive) << wrote->message();
}

INSTANTIATE_TEST_SUITE_P(all, liveness, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
