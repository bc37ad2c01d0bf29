// Cancellation of operations that UCX holds and cannot cancel itself (sends,
// stream writes), with a peer that is alive but never receives: what each
// of Asio's cancellation types does, over TCP and shared memory.
#include "test_support.hpp"

#include <ucx/am.hpp>
#include <ucx/memory_region.hpp>
#include <ucx/remote_key.hpp>
#include <ucx/rma.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

using namespace ucx_test;

namespace {

using ct = asio::cancellation_type;

/// Large enough for UCX's rendezvous protocol on every transport: the send
/// stays in UCX's hands until the peer posts a matching receive.
constexpr std::size_t rendezvous_size = 16u << 20;

/// Runs `start(use_awaitable) || timer` on `io` (the timer expiring after
/// `limit`): the index of the winner, 0 for the operation, 1 for the timer
/// (whose win cancels the operation with `terminal`).
template <class Start>
std::optional<std::size_t> race_with_timer(asio::io_context& io, Start start,
                                           std::chrono::milliseconds limit) {
    using namespace asio::experimental::awaitable_operators;
    std::optional<std::size_t> winner;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            asio::steady_timer timer(io, limit);
            auto r = co_await (start(asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
            winner = r.index();
        },
        asio::detached);
    run_until(io, [&] { return winner.has_value(); });
    return winner;
}

class send_cancellation : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::listener listener{server_worker,
                           asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    std::pair<ucx::endpoint, ucx::endpoint> pair = connect_pair(io, listener, client_worker);
    ucx::endpoint& client = pair.first;
    ucx::endpoint& server = pair.second;
    std::vector<char> big = pattern(rendezvous_size, 3);

    /// Starts a rendezvous send the server never receives; checks that it is
    /// in UCX's hands after a while.
    std::optional<ucx::error_code>& start_send(asio::cancellation_signal& signal) {
        client.async_send(
            asio::buffer(big), 1,
            asio::bind_cancellation_slot(signal.slot(),
                                         [this](ucx::error_code ec, std::size_t) { sent = ec; }));
        run_until(
            io, [] { return false; }, std::chrono::milliseconds(50));
        EXPECT_FALSE(sent.has_value()) << "the send did not wait for the receiver";
        return sent;
    }

    std::optional<ucx::error_code> sent;
};

TEST_P(send_cancellation, terminal_ends_a_send_the_peer_never_receives_and_closes_the_endpoint) {
    asio::cancellation_signal signal;
    auto& s = start_send(signal);
    signal.emit(ct::terminal);
    ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
    EXPECT_EQ(*s, asio::error::operation_aborted);
    // As after close(): the endpoint is unusable, and UCX released the buffer
    // before the handler ran (nothing of the worker is left in flight).
    EXPECT_FALSE(client.is_open());
    EXPECT_EQ(client.error(), asio::error::bad_descriptor);
    EXPECT_EQ(client_worker.pending_operations(), 0u);
    // The peer learns that the connection ended.
    std::vector<char> in(16);
    std::optional<ucx::error_code> r;
    server.async_recv(asio::buffer(in), 1, ~0u,
                      [&](ucx::error_code ec, std::size_t, std::uint32_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_TRUE(*r) << "a receive on the peer's side succeeded";
}

TEST_P(send_cancellation, partial_and_total_leave_a_send_that_ucx_holds_alone) {
    asio::cancellation_signal signal;
    auto& s = start_send(signal);
    signal.emit(ct::partial);
    signal.emit(ct::total);
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(50));
    EXPECT_FALSE(s.has_value());
    EXPECT_TRUE(client.is_open());
    // The receiver comes: the send completes, every byte intact.
    std::vector<char> in(rendezvous_size);
    std::optional<ucx::error_code> r;
    server.async_recv(asio::buffer(in), 1, ~0u,
                      [&](ucx::error_code ec, std::size_t, std::uint32_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s.has_value() && r.has_value(); }));
    EXPECT_FALSE(*s) << s->message();
    EXPECT_FALSE(*r) << r->message();
    EXPECT_TRUE(in == big);
}

TEST_P(send_cancellation, every_type_ends_a_send_before_it_reaches_ucx) {
    for (ct type : {ct::terminal, ct::partial, ct::total}) {
        SCOPED_TRACE(static_cast<int>(type));
        asio::cancellation_signal signal;
        char byte = 7;
        std::optional<ucx::error_code> s;
        // Started outside the worker's thread: submitted by a dispatch, which
        // runs after the cancellation.
        client.async_send(asio::buffer(&byte, 1), 2,
                          asio::bind_cancellation_slot(
                              signal.slot(), [&](ucx::error_code ec, std::size_t) { s = ec; }));
        signal.emit(type);
        ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
        EXPECT_EQ(*s, asio::error::operation_aborted);
        EXPECT_TRUE(client.is_open());
    }
    // Nothing of them was sent: the next message is the first the peer gets.
    char out = 9, in = 0;
    std::optional<ucx::error_code> s, r;
    client.async_send(asio::buffer(&out, 1), 2, [&](ucx::error_code ec, std::size_t) { s = ec; });
    server.async_recv(asio::buffer(&in, 1), 2, ~0u,
                      [&](ucx::error_code ec, std::size_t, std::uint32_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    EXPECT_FALSE(*r);
    EXPECT_EQ(in, 9);
}

TEST_P(send_cancellation, a_timer_bounds_a_tag_send_through_the_awaitable_or) {
    const auto winner = race_with_timer(
        io, [&](auto token) { return ucx::async_tag_send(client, asio::buffer(big), 5, token); },
        std::chrono::milliseconds(50));
    ASSERT_TRUE(winner.has_value());
    EXPECT_EQ(*winner, 1u); // the timer won; the send was cancelled
    EXPECT_FALSE(client.is_open());
    ASSERT_TRUE(run_until(io, [&] { return client_worker.pending_operations() == 0; }));
}

INSTANTIATE_TEST_SUITE_P(all, send_cancellation,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// ---- stream writes ----

class write_cancellation : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::acceptor acceptor{server_worker,
                           asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ucx::stream client{client_worker};
    ucx::stream server{server_worker};

    void SetUp() override {
        std::optional<ucx::error_code> a, c;
        acceptor.async_accept(server, [&](ucx::error_code ec) { a = ec; });
        client.async_connect("127.0.0.1", std::to_string(acceptor.local_endpoint().port()),
                             [&](ucx::error_code ec) { c = ec; });
        ASSERT_TRUE(run_until(io, [&] { return a && c; }));
        ASSERT_FALSE(*a);
        ASSERT_FALSE(*c);
    }
};

TEST_P(write_cancellation, any_type_ends_a_write_waiting_for_the_reader_and_the_stream_goes_on) {
    // Twice the flow-control window's 8 MiB, queued at once; the reader reads
    // nothing yet, so the last writes wait for it.
    constexpr std::size_t chunk = 1u << 20, count = 16;
    const auto data = pattern(chunk * count, 8);
    std::vector<std::optional<ucx::error_code>> done(count);
    std::vector<asio::cancellation_signal> signals(count);
    for (std::size_t i = 0; i < count; ++i)
        client.async_write_some(
            asio::buffer(data.data() + i * chunk, chunk),
            asio::bind_cancellation_slot(
                signals[i].slot(), [&done, i](ucx::error_code ec, std::size_t) { done[i] = ec; }));
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(100));
    const std::size_t waiting_first = count - 2, waiting_second = count - 1;
    ASSERT_FALSE(done[waiting_first].has_value());
    ASSERT_FALSE(done[waiting_second].has_value());
    // Each type ends a waiting write at once: nothing of it was sent.
    signals[waiting_first].emit(ct::partial);
    signals[waiting_second].emit(ct::terminal);
    ASSERT_TRUE(run_until(
        io, [&] { return done[waiting_first].has_value() && done[waiting_second].has_value(); }));
    EXPECT_EQ(*done[waiting_first], asio::error::operation_aborted);
    EXPECT_EQ(*done[waiting_second], asio::error::operation_aborted);
    EXPECT_TRUE(client.is_open());

    // The reader gets every other write, in order, and nothing of the two.
    const std::size_t expected = (count - 2) * chunk;
    std::vector<char> in(expected);
    std::optional<ucx::error_code> r;
    asio::async_read(server, asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_FALSE(*r) << r->message();
    EXPECT_TRUE(std::equal(in.begin(), in.end(), data.begin()));
    ASSERT_TRUE(run_until(io, [&] { return all_set(done); }));
    for (std::size_t i = 0; i < count - 2; ++i)
        EXPECT_FALSE(*done[i]) << i << ": " << done[i]->message();
    // The stream goes on.
    const char more[] = "after";
    char got[sizeof more] = {};
    std::optional<ucx::error_code> w, r2;
    asio::async_write(client, asio::buffer(more), [&](ucx::error_code ec, std::size_t) { w = ec; });
    asio::async_read(server, asio::buffer(got), [&](ucx::error_code ec, std::size_t) { r2 = ec; });
    ASSERT_TRUE(run_until(io, [&] { return w && r2; }));
    EXPECT_FALSE(*r2);
    EXPECT_STREQ(got, more);
}

INSTANTIATE_TEST_SUITE_P(all, write_cancellation,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// ---- active messages and puts to a peer whose worker never progresses ----

/// A client and a server on two io_contexts: both run until connected, then
/// only the client's. The server is alive but never receives (as a process
/// stuck in a long computation).
class stuck_peer : public testing::TestWithParam<transport> {
protected:
    asio::io_context io, server_io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, server_io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::listener listener{server_worker,
                           asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ucx::endpoint client, server;
    ucx::memory_region region;
    ucx::remote_key key;

    void SetUp() override {
        std::optional<ucx::error_code> a, c;
        listener.async_accept([&](ucx::error_code ec, ucx::endpoint ep) {
            a = ec;
            server = std::move(ep);
        });
        ucx::async_connect(client_worker, "127.0.0.1",
                           std::to_string(listener.local_endpoint().port()),
                           [&](ucx::error_code ec, ucx::endpoint ep) {
                               c = ec;
                               client = std::move(ep);
                           });
        ASSERT_TRUE(run_until(io, [&] {
            run_server();
            return a && c;
        }));
        ASSERT_FALSE(*a);
        ASSERT_FALSE(*c);
        region = ucx::memory_region::allocate(ctx, put_size);
        key = ucx::remote_key(client, region.pack_key());
        // The key's unpacking and the lanes settle before the server stops.
        run_until(
            io,
            [&] {
                run_server();
                return false;
            },
            std::chrono::milliseconds(20));
    }

    /// Runs one handler of the server's io_context, if one is ready (not
    /// all: a worker with work in flight queues its next progress pass
    /// itself, and `poll()` would run those for as long as the client, which
    /// runs on `io`, does not answer).
    void run_server() {
        server_io.restart();
        server_io.poll_one();
    }

    /// Larger than every socket buffer of the loopback: a put over TCP
    /// cannot be carried without the target.
    static constexpr std::size_t put_size = 64u << 20;
    std::vector<char> big = pattern(rendezvous_size, 4);
};

TEST_P(stuck_peer, terminal_ends_an_active_message_it_never_takes_and_closes_the_endpoint) {
    asio::cancellation_signal signal;
    std::optional<ucx::error_code> sent;
    ucx::async_am_send(client, 7, asio::const_buffer(), asio::buffer(big),
                       asio::bind_cancellation_slot(
                           signal.slot(), [&](ucx::error_code ec, std::size_t) { sent = ec; }));
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(50));
    ASSERT_FALSE(sent.has_value()) << "the send did not wait for the receiver";
    // Partial and total leave it alone: UCX holds it.
    signal.emit(ct::partial);
    signal.emit(ct::total);
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(20));
    EXPECT_FALSE(sent.has_value());
    EXPECT_TRUE(client.is_open());
    signal.emit(ct::terminal);
    ASSERT_TRUE(run_until(io, [&] { return sent.has_value(); }));
    EXPECT_EQ(*sent, asio::error::operation_aborted);
    EXPECT_FALSE(client.is_open());
    EXPECT_EQ(client_worker.pending_operations(), 0u);
}

TEST_P(stuck_peer, a_timer_bounds_an_active_message_through_the_awaitable_or) {
    const auto winner = race_with_timer(
        io,
        [&](auto token) {
            return ucx::async_am_send(client, 7, asio::const_buffer(), asio::buffer(big), token);
        },
        std::chrono::milliseconds(50));
    ASSERT_TRUE(winner.has_value());
    EXPECT_EQ(*winner, 1u);
    EXPECT_FALSE(client.is_open());
    ASSERT_TRUE(run_until(io, [&] { return client_worker.pending_operations() == 0; }));
}

TEST_P(stuck_peer, a_timer_bounds_a_put_the_target_cannot_take) {
    std::vector<char> data(put_size, 'p');
    const auto winner = race_with_timer(
        io,
        [&](auto token) {
            return ucx::async_put(client, asio::buffer(data), key.address(), key, token);
        },
        std::chrono::milliseconds(200));
    ASSERT_TRUE(winner.has_value());
    if (GetParam() == transport::shared_memory) {
        // Over shared memory a put into memory UCX allocated is a copy into
        // the mapped segment: it needs nothing of the target, and completes.
        EXPECT_EQ(*winner, 0u);
        EXPECT_TRUE(client.is_open());
        return;
    }
    // Over TCP the target's worker must read the data: the timer wins, and
    // its terminal cancellation closes the endpoint.
    EXPECT_EQ(*winner, 1u);
    EXPECT_FALSE(client.is_open());
    ASSERT_TRUE(run_until(io, [&] { return client_worker.pending_operations() == 0; }));
}

INSTANTIATE_TEST_SUITE_P(all, stuck_peer, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
