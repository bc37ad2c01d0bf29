// io_context::run() returns once nothing needs the workers on it, as it does
// for idle sockets: a worker with no endpoint, listener, acceptor or pending
// operation is not outstanding work. Endpoints, listeners, acceptors and
// pending operations keep it running.
#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <future>
#include <optional>

using namespace ucx_test;

namespace {

/// Runs `io.run()` on another thread; true if it returned within `limit`
/// (else stops the io_context and returns false).
bool run_returns(asio::io_context& io, std::chrono::seconds limit = std::chrono::seconds(20)) {
    io.restart();
    auto done = std::async(std::launch::async, [&] { io.run(); });
    if (done.wait_for(limit) == std::future_status::ready)
        return true;
    io.stop();
    done.wait();
    return false;
}

/// Runs `io` for `d` (on this thread); true if run_for returned because the
/// time was up, not because nothing was left to run.
bool still_running_after(asio::io_context& io, std::chrono::milliseconds d) {
    io.run_for(d);
    const bool running = !io.stopped();
    io.restart();
    return running;
}

class run_returns_test : public testing::TestWithParam<ucx::progress_mode> {
protected:
    ucx::worker_options opts() const { return strict_worker_options(GetParam()); }
    asio::io_context io;
    ucx::context ctx{options_for(transport::tcp)};
};

TEST_P(run_returns_test, a_worker_with_nothing_to_do) {
    ucx::worker w(ctx, io, opts());
    EXPECT_TRUE(run_returns(io));
    EXPECT_TRUE(w.is_open());
    // It still works afterwards: an endpoint and a message bring it back.
    ucx::worker peer(ctx, io, opts());
    ucx::endpoint ep(w, peer.address());
    std::uint64_t v = 7, got = 0;
    ucx::async_tag_recv(peer, asio::buffer(&got, sizeof got), 1, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { EXPECT_FALSE(ec); });
    ucx::async_tag_send(ep, asio::buffer(&v, sizeof v), 1, [&](ucx::error_code ec, std::size_t) {
        EXPECT_FALSE(ec);
        ep.close();
    });
    EXPECT_TRUE(run_returns(io)) << "the endpoint closed and the message arrived";
    EXPECT_EQ(got, 7u) << "peer pending " << peer.pending_operations() << " passes "
                       << peer.stats().passes << " wakeups " << peer.stats().wakeups
                       << " completions " << peer.stats().completions;
}

TEST_P(run_returns_test, after_the_last_endpoint_closes_and_not_before) {
    ucx::worker a(ctx, io, opts()), b(ctx, io, opts());
    std::optional<ucx::endpoint> ab(std::in_place, a, b.address());
    EXPECT_TRUE(still_running_after(io, std::chrono::milliseconds(200)))
        << "an open endpoint keeps its worker running";
    ab->close();
    EXPECT_TRUE(run_returns(io));
}

TEST_P(run_returns_test, a_pending_receive_keeps_it_running_until_cancelled) {
    ucx::worker w(ctx, io, opts());
    asio::cancellation_signal cancel;
    std::uint64_t buf = 0;
    std::optional<ucx::error_code> result;
    ucx::async_tag_recv(
        w, asio::buffer(&buf, sizeof buf), 1, ucx::tag_mask_full,
        asio::bind_cancellation_slot(
            cancel.slot(), [&](ucx::error_code ec, std::size_t, ucx::tag_t) { result = ec; }));
    EXPECT_TRUE(still_running_after(io, std::chrono::milliseconds(200)));
    EXPECT_FALSE(result);
    asio::steady_timer t(io);
    t.expires_after(std::chrono::milliseconds(10));
    t.async_wait([&](const ucx::error_code&) { cancel.emit(asio::cancellation_type::all); });
    EXPECT_TRUE(run_returns(io));
    ASSERT_TRUE(result);
    EXPECT_EQ(*result, asio::error::operation_aborted);
}

TEST_P(run_returns_test, a_listener_keeps_it_running_until_closed) {
    ucx::worker w(ctx, io, opts());
    ucx::listener l(w, {asio::ip::make_address("127.0.0.1"), 0});
    EXPECT_TRUE(still_running_after(io, std::chrono::milliseconds(200)));
    l.close();
    EXPECT_TRUE(run_returns(io));
}

TEST_P(run_returns_test, an_address_acceptor_keeps_it_running_until_closed) {
    ucx::worker w(ctx, io, opts());
    ucx::acceptor a(w);
    EXPECT_TRUE(still_running_after(io, std::chrono::milliseconds(200)));
    a.close();
    EXPECT_TRUE(run_returns(io));
}

// The error path of a program converted from TCP: the connect fails, the
// handler reports it, and run() returns with the worker still open.
TEST_P(run_returns_test, after_a_failed_connect) {
    ucx::worker w(ctx, io, opts());
    // Nothing listens there, and no other test's server bound to port 0 can
    // be given it (it is below the kernel's range for those).
    const unsigned short port = ucx_test::free_port_below_ephemeral();
    std::optional<ucx::error_code> result;
    ucx::async_connect(w, "127.0.0.1", std::to_string(port),
                       [&](ucx::error_code ec, ucx::endpoint) { result = ec; });
    EXPECT_TRUE(run_returns(io));
    ASSERT_TRUE(result);
    EXPECT_TRUE(*result) << "the connect failed";
    EXPECT_TRUE(w.is_open());
}

// A connection from one worker to a listener of another: both run() calls
// go on while the endpoints are open and return once both sides closed.
TEST_P(run_returns_test, a_connection_closed_on_both_sides) {
    ucx::worker server(ctx, io, opts()), client(ctx, io, opts());
    ucx::listener l(server, {asio::ip::make_address("127.0.0.1"), 0});
    std::optional<ucx::endpoint> accepted, connected;
    l.async_accept([&](ucx::error_code ec, ucx::endpoint ep) {
        EXPECT_FALSE(ec) << ec.message();
        accepted.emplace(std::move(ep));
        l.close();
    });
    ucx::async_connect(client, "127.0.0.1", std::to_string(l.local_endpoint().port()),
                       [&](ucx::error_code ec, ucx::endpoint ep) {
                           EXPECT_FALSE(ec) << ec.message();
                           connected.emplace(std::move(ep));
                       });
    EXPECT_TRUE(run_until(io, [&] { return accepted && connected; }));
    ASSERT_TRUE(accepted && connected);
    EXPECT_TRUE(still_running_after(io, std::chrono::milliseconds(100)));
    bool closed_c = false, closed_a = false;
    connected->async_close([&](ucx::error_code) { closed_c = true; });
    accepted->async_close([&](ucx::error_code) { closed_a = true; });
    EXPECT_TRUE(run_returns(io));
    EXPECT_TRUE(closed_c && closed_a);
}

INSTANTIATE_TEST_SUITE_P(all, run_returns_test,
                         testing::Values(ucx::progress_mode::event, ucx::progress_mode::poll,
                                         ucx::progress_mode::hybrid),
                         [](const testing::TestParamInfo<ucx::progress_mode>& i) {
                             return std::string(ucx::to_string(i.param));
                         });

} // namespace
