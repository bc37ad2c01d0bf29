// ucx::stream in one process (two workers) and two processes: Asio
// algorithms with random chunk and read sizes, buffer sequences, end of
// stream versus reset, cancellation, timeouts, queued reads, the acceptor;
// connections from a worker address (the address acceptor).
#include "child_process.hpp"
#include "connection/control_message.hpp"
#include "sanitizers.hpp"
#include "stream/stream_impl.hpp"
#include "stream_pattern.hpp"
#include "test_support.hpp"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <exception>

using namespace ucx_test;

namespace {

using asio::awaitable;
using asio::use_awaitable;
constexpr auto tuple_awaitable = asio::as_tuple(use_awaitable);

/// Context options for the stream tests; with `detect_failures`, UCX checks
/// its peers every 500 ms (UCX's keepalive): over shared memory nothing else
/// notices a peer that vanished without a word.
ucx::context_options stream_options(transport t, bool detect_failures) {
    auto o = options_for(t, true);
    if (detect_failures)
        o.config["KEEPALIVE_INTERVAL"] = "500ms";
    return o;
}

template <bool DetectFailures>
class stream_fixture : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{stream_options(GetParam(), DetectFailures)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::acceptor acceptor{server_worker,
                           asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};

    /// A connected pair: (client, server).
    std::pair<ucx::stream, ucx::stream> connect_pair() {
        ucx::stream client(client_worker);
        ucx::stream server(server_worker);
        std::optional<ucx::error_code> a, c;
        acceptor.async_accept(server, [&](ucx::error_code ec) { a = ec; });
        client.async_connect("127.0.0.1", std::to_string(acceptor.local_endpoint().port()),
                             [&](ucx::error_code ec) { c = ec; });
        EXPECT_TRUE(run_until(io, [&] { return a && c; }));
        EXPECT_FALSE(a.value_or(asio::error::timed_out));
        EXPECT_FALSE(c.value_or(asio::error::timed_out));
        return {std::move(client), std::move(server)};
    }

    /// Starts stream_peer (`args`: mode, size, options) against the acceptor
    /// and accepts its stream into `s`; false if the accept failed.
    bool accept_peer(std::unique_ptr<child_process>& child, ucx::stream& s,
                     std::vector<std::string> args) {
        args.insert(args.begin(), {UCX_ASIO_STREAM_PEER, to_string(GetParam()),
                                   std::to_string(acceptor.local_endpoint().port())});
        child = std::make_unique<child_process>(args);
        std::optional<ucx::error_code> a;
        acceptor.async_accept(s, [&](ucx::error_code ec) { a = ec; });
        if (!run_until(io, [&] { return a.has_value(); }))
            return false;
        EXPECT_FALSE(*a) << a->message();
        return !*a;
    }

    /// Reads exactly `size` bytes from `s`; the read after them must end with `end`.
    std::vector<char> read_then_end(ucx::stream& s, std::size_t size, ucx::error_code end) {
        std::vector<char> in(size);
        run([&]() -> awaitable<void> {
            co_await asio::async_read(s, asio::buffer(in), use_awaitable);
            char c;
            auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
            EXPECT_EQ(ec, end) << ec.message();
            (void)n;
        }());
        return in;
    }

    /// Runs a coroutine to its end; rethrows its exception.
    void run(awaitable<void> body, std::chrono::seconds limit = std::chrono::seconds(60)) {
        bool done = false;
        std::exception_ptr error;
        asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
            error = e;
            done = true;
        });
        ASSERT_TRUE(run_until(
            io, [&] { return done; }, limit));
        if (error)
            std::rethrow_exception(error);
    }
};

/// Keepalive off (the default): no UCX timer hides a lost wake-up.
class stream_test : public stream_fixture<false> {};
/// Keepalive on: for the tests of a peer that vanished.
class stream_failure_test : public stream_fixture<true> {};

/// Writes `data` in random chunks (1 B to `max_chunk`), mixing single
/// buffers and three-buffer sequences.
awaitable<void> write_random(ucx::stream& s, const std::vector<char>& data, std::size_t max_chunk,
                             std::uint32_t seed) {
    std::mt19937 gen(seed);
    std::size_t off = 0;
    while (off < data.size()) {
        const std::size_t n = std::min(
            data.size() - off, std::uniform_int_distribution<std::size_t>(1, max_chunk)(gen));
        if (n >= 3 && gen() % 2) {
            const std::size_t a = n / 3, b = n / 3;
            std::array<asio::const_buffer, 3> seq{
                asio::buffer(data.data() + off, a), asio::buffer(data.data() + off + a, b),
                asio::buffer(data.data() + off + a + b, n - a - b)};
            co_await asio::async_write(s, seq, use_awaitable);
        } else {
            co_await asio::async_write(s, asio::buffer(data.data() + off, n), use_awaitable);
        }
        off += n;
    }
}

/// Reads exactly `size` bytes with random read sizes; then expects eof if asked.
awaitable<std::vector<char>> read_random(ucx::stream& s, std::size_t size, std::size_t max_read,
                                         std::uint32_t seed, bool expect_eof) {
    std::mt19937 gen(seed);
    std::vector<char> in(size);
    std::size_t off = 0;
    while (off < size) {
        const std::size_t n =
            std::min(size - off, std::uniform_int_distribution<std::size_t>(1, max_read)(gen));
        if (gen() % 2) {
            off += co_await s.async_read_some(asio::buffer(in.data() + off, n), use_awaitable);
        } else {
            co_await asio::async_read(s, asio::buffer(in.data() + off, n), use_awaitable);
            off += n;
        }
    }
    if (expect_eof) {
        char c;
        auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
        EXPECT_EQ(n, 0u);
    }
    co_return in;
}

TEST_P(stream_test, random_chunks_both_ways_at_once_then_eof) {
    auto [client, server] = connect_pair();
    ASSERT_TRUE(client.is_open());
    EXPECT_EQ(client.remote_endpoint().port(), acceptor.local_endpoint().port());
    EXPECT_EQ(server.remote_endpoint().port(), client.local_endpoint().port());
    constexpr std::size_t size = 8u << 20;
    const auto up = pattern(size, 1);
    const auto down = pattern(size, 2);
    std::vector<char> got_up, got_down;
    int finished = 0;
    // Each side writes while it reads; it finishes when both are done.
    auto both = [&](ucx::stream& s, const std::vector<char>& out, std::vector<char>& in,
                    std::uint32_t seed) -> awaitable<void> {
        bool read_done = false;
        asio::steady_timer gate(io, std::chrono::steady_clock::time_point::max());
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                in = co_await read_random(s, size, 1u << 20, seed + 10, false);
                read_done = true;
                gate.cancel();
            },
            [&](std::exception_ptr e) { EXPECT_FALSE(e); });
        co_await write_random(s, out, 1u << 20, seed);
        if (!read_done)
            co_await gate.async_wait(tuple_awaitable);
        ++finished;
    };
    asio::co_spawn(io, both(client, up, got_down, 3),
                   [&](std::exception_ptr e) { EXPECT_FALSE(e); });
    asio::co_spawn(io, both(server, down, got_up, 4),
                   [&](std::exception_ptr e) { EXPECT_FALSE(e); });
    ASSERT_TRUE(run_until(io, [&] { return finished == 2; }));
    EXPECT_TRUE(got_up == up);
    EXPECT_TRUE(got_down == down);
    EXPECT_EQ(client.bytes_written(), size);
    EXPECT_EQ(client.bytes_read(), size);
    // A clean close on one side: the other reads eof, and its writes fail.
    run([&]() -> awaitable<void> {
        co_await client.async_close(use_awaitable);
        char c;
        auto [ec, n] = co_await server.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
        auto [wec, wn] = co_await server.async_write_some(asio::buffer("x", 1), tuple_awaitable);
        EXPECT_EQ(wec, asio::error::broken_pipe) << wec.message();
        (void)n;
        (void)wn;
    }());
}

TEST_P(stream_test, several_streams_on_one_worker_at_once) {
    // Reads of several streams wait on the same worker at the same time.
    constexpr int count = 4;
    std::vector<ucx::stream> clients, servers;
    for (int i = 0; i < count; ++i) {
        auto [c, sv] = connect_pair();
        clients.push_back(std::move(c));
        servers.push_back(std::move(sv));
    }
    int finished = 0;
    std::vector<std::vector<char>> got(2 * count);
    auto pump = [&](ucx::stream& s, int idx, std::uint32_t out_seed) -> awaitable<void> {
        const auto out = pattern(1u << 20, out_seed);
        asio::co_spawn(
            io,
            [&s, &got, idx]() -> awaitable<void> {
                got[idx] = co_await read_random(s, 1u << 20, 100000, idx, false);
            },
            [&](std::exception_ptr e) {
                EXPECT_FALSE(e);
                ++finished;
            });
        co_await write_random(s, out, 65536, out_seed);
    };
    for (int i = 0; i < count; ++i) {
        asio::co_spawn(io, pump(clients[i], i, 100 + i), asio::detached);
        asio::co_spawn(io, pump(servers[i], count + i, 200 + i), asio::detached);
    }
    ASSERT_TRUE(run_until(io, [&] { return finished == 2 * count; }));
    for (int i = 0; i < count; ++i) {
        EXPECT_TRUE(got[i] == pattern(1u << 20, 200 + i)) << i;
        EXPECT_TRUE(got[count + i] == pattern(1u << 20, 100 + i)) << i;
    }
}

TEST_P(stream_test, read_until_and_exact_reads) {
    auto [client, server] = connect_pair();
    run([&]() -> awaitable<void> {
        const std::string msg = "hello\r\nworld\r\n" + std::string(100000, 'z');
        co_await asio::async_write(client, asio::buffer(msg), use_awaitable);
        asio::streambuf sb;
        std::size_t n = co_await asio::async_read_until(server, sb, "\r\n", use_awaitable);
        std::string line(asio::buffers_begin(sb.data()), asio::buffers_begin(sb.data()) + n);
        EXPECT_EQ(line, "hello\r\n");
        sb.consume(n);
        n = co_await asio::async_read_until(server, sb, "\r\n", use_awaitable);
        EXPECT_EQ(std::string(asio::buffers_begin(sb.data()), asio::buffers_begin(sb.data()) + n),
                  "world\r\n");
        sb.consume(n);
        const std::size_t rest = 100000 - sb.size();
        co_await asio::async_read(server, sb, asio::transfer_exactly(rest), use_awaitable);
        EXPECT_EQ(sb.size(), 100000u);
        std::string tail(asio::buffers_begin(sb.data()), asio::buffers_end(sb.data()));
        EXPECT_EQ(tail, std::string(100000, 'z'));
    }());
}

TEST_P(stream_test, data_written_before_close_is_read_after_the_close) {
    auto [client, server] = connect_pair();
    const auto data = pattern(4u << 20, 7);
    bool written = false;
    asio::async_write(client, asio::buffer(data), [&](ucx::error_code ec, std::size_t) {
        EXPECT_FALSE(ec);
        written = true;
        client.close(); // graceful, in the background
    });
    ASSERT_TRUE(run_until(io, [&] { return written; }));
    // Let the goodbye and the disconnect arrive before anything is read.
    asio::steady_timer t(io, std::chrono::milliseconds(200));
    bool waited = false;
    t.async_wait([&](ucx::error_code) { waited = true; });
    ASSERT_TRUE(run_until(io, [&] { return waited; }));
    run([&]() -> awaitable<void> {
        auto in = co_await read_random(server, data.size(), 65536, 9, true);
        EXPECT_TRUE(in == data);
    }());
}

TEST_P(stream_test, half_close_ends_one_direction_only) {
    auto [client, server] = connect_pair();
    run([&]() -> awaitable<void> {
        const auto data = pattern(1u << 20, 5);
        co_await asio::async_write(client, asio::buffer(data), use_awaitable);
        client.shutdown(asio::socket_base::shutdown_send);
        auto [wec, wn] = co_await client.async_write_some(asio::buffer("x", 1), tuple_awaitable);
        EXPECT_EQ(wec, asio::error::broken_pipe);
        // The server reads everything, then eof, and can still answer.
        std::vector<char> in;
        auto dyn = asio::dynamic_buffer(in);
        auto [ec, n] = co_await asio::async_read(server, dyn, tuple_awaitable);
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
        EXPECT_TRUE(in == data);
        co_await asio::async_write(server, asio::buffer("answer", 6), use_awaitable);
        server.close();
        std::string reply;
        auto rdyn = asio::dynamic_buffer(reply);
        std::tie(ec, n) = co_await asio::async_read(client, rdyn, tuple_awaitable);
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
        EXPECT_EQ(reply, "answer");
        (void)wn;
    }());
}

TEST_P(stream_failure_test, abort_gives_the_peer_connection_reset) {
    auto [client, server] = connect_pair();
    run([&]() -> awaitable<void> {
        co_await asio::async_write(client, asio::buffer("abc", 3), use_awaitable);
        client.abort();
        std::array<char, 8> buf{};
        auto [ec, n] = co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
        // The bytes received before the reset are still read, then the reset.
        if (!ec) {
            EXPECT_EQ(std::string(buf.data(), n), "abc");
            std::tie(ec, n) = co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
        }
        EXPECT_EQ(ec, asio::error::connection_reset) << ec.message();
    }());
}

TEST_P(stream_test, cancel_a_pending_read_then_keep_using_the_stream) {
    auto [client, server] = connect_pair();
    run([&]() -> awaitable<void> {
        std::array<char, 16> buf{};
        // Per-operation cancellation.
        asio::cancellation_signal sig;
        std::optional<ucx::error_code> r;
        server.async_read_some(asio::buffer(buf),
                               asio::bind_cancellation_slot(
                                   sig.slot(), [&](ucx::error_code ec, std::size_t) { r = ec; }));
        asio::steady_timer t(io, std::chrono::milliseconds(20));
        co_await t.async_wait(use_awaitable);
        EXPECT_FALSE(r);
        sig.emit(asio::cancellation_type::terminal);
        t.expires_after(std::chrono::milliseconds(20));
        co_await t.async_wait(use_awaitable);
        EXPECT_EQ(r.value_or(ucx::error_code()), asio::error::operation_aborted);
        // cancel() on the stream.
        r.reset();
        server.async_read_some(asio::buffer(buf), [&](ucx::error_code ec, std::size_t) { r = ec; });
        t.expires_after(std::chrono::milliseconds(20));
        co_await t.async_wait(use_awaitable);
        server.cancel();
        t.expires_after(std::chrono::milliseconds(20));
        co_await t.async_wait(use_awaitable);
        EXPECT_EQ(r.value_or(ucx::error_code()), asio::error::operation_aborted);
        // Nothing was lost.
        co_await asio::async_write(client, asio::buffer("0123456789", 10), use_awaitable);
        co_await asio::async_read(server, asio::buffer(buf.data(), 10), use_awaitable);
        EXPECT_EQ(std::string(buf.data(), 10), "0123456789");
    }());
}

TEST_P(stream_test, timeout_ends_a_read_and_the_stream_stays_usable) {
    auto [client, server] = connect_pair();
    run([&]() -> awaitable<void> {
        std::array<char, 16> buf{};
        server.expires_after(std::chrono::milliseconds(50));
        auto [ec, n] = co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::timed_out) << ec.message();
        EXPECT_EQ(n, 0u);
        // Past the deadline, new operations time out at once.
        std::tie(ec, n) = co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::timed_out);
        server.expires_never();
        co_await asio::async_write(client, asio::buffer("abcd", 4), use_awaitable);
        co_await asio::async_read(server, asio::buffer(buf.data(), 4), use_awaitable);
        EXPECT_EQ(std::string(buf.data(), 4), "abcd");
        // A deadline far enough away does not disturb.
        server.expires_after(std::chrono::seconds(30));
        co_await asio::async_write(server, asio::buffer("efgh", 4), use_awaitable);
        co_await asio::async_read(client, asio::buffer(buf.data(), 4), use_awaitable);
        EXPECT_EQ(std::string(buf.data(), 4), "efgh");
    }());
}

TEST_P(stream_test, concurrent_reads_are_queued_in_order) {
    auto [client, server] = connect_pair();
    std::array<char, 4> a{}, b{};
    std::optional<std::size_t> na, nb;
    int order = 0, a_pos = 0, b_pos = 0;
    server.async_read_some(asio::buffer(a), [&](ucx::error_code ec, std::size_t n) {
        EXPECT_FALSE(ec);
        na = n;
        a_pos = ++order;
    });
    server.async_read_some(asio::buffer(b), [&](ucx::error_code ec, std::size_t n) {
        EXPECT_FALSE(ec);
        nb = n;
        b_pos = ++order;
    });
    asio::async_write(client, asio::buffer("abcdefgh", 8), [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(io, [&] { return na && nb; }));
    EXPECT_EQ(a_pos, 1);
    EXPECT_EQ(b_pos, 2);
    EXPECT_EQ(*na, 4u);
    EXPECT_EQ(std::string(a.data(), 4), "abcd");
    EXPECT_EQ(std::string(b.data(), *nb), std::string("efgh").substr(0, *nb));
}

TEST_P(stream_test, operations_after_close_and_on_unconnected_streams_fail_cleanly) {
    ucx::stream lone(client_worker);
    EXPECT_FALSE(lone.is_open());
    run([&]() -> awaitable<void> {
        char c = 0;
        auto [ec, n] = co_await lone.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::not_connected);
        std::tie(ec, n) = co_await lone.async_write_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::not_connected);
        ucx::error_code rec;
        lone.remote_endpoint(rec);
        EXPECT_TRUE(rec);
    }());
    auto [client, server] = connect_pair();
    // Connecting a connected stream.
    run([&]() -> awaitable<void> {
        auto [ec] = co_await client.async_connect(acceptor.local_endpoint(), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::already_open);
    }());
    client.close();
    EXPECT_FALSE(client.is_open());
    run([&]() -> awaitable<void> {
        char c = 0;
        auto [ec, n] = co_await client.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::bad_descriptor);
        std::tie(ec, n) = co_await client.async_write_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::bad_descriptor);
        // Zero-byte operations complete at once.
        std::tie(ec, n) = co_await server.async_write_some(asio::const_buffer(), tuple_awaitable);
        EXPECT_FALSE(ec);
        EXPECT_EQ(n, 0u);
        auto [cec] = co_await client.async_close(tuple_awaitable);
        EXPECT_FALSE(cec);
    }());
    // A nobody-listens connect fails with a clear error.
    ucx::stream orphan(client_worker);
    run([&]() -> awaitable<void> {
        auto [ec] = co_await orphan.async_connect("127.0.0.1", "1", tuple_awaitable);
        EXPECT_TRUE(ec);
    }());
    // The background close finishes while the workers progress.
    EXPECT_TRUE(run_until(io, [&] { return client_worker.pending_operations() == 0; }));
}

/// Counts what a handler's operation allocates and frees.
struct allocation_count {
    int allocated = 0;
    int freed = 0;
};

template <class T>
struct counting_allocator {
    using value_type = T;
    allocation_count* count;
    explicit counting_allocator(allocation_count* c) noexcept : count(c) {}
    template <class U>
    counting_allocator(const counting_allocator<U>& other) noexcept : count(other.count) {}
    T* allocate(std::size_t n) {
        ++count->allocated;
        return std::allocator<T>().allocate(n);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        ++count->freed;
        std::allocator<T>().deallocate(p, n);
    }
    template <class U>
    bool operator==(const counting_allocator<U>& other) const noexcept {
        return count == other.count;
    }
};

TEST(stream_lifetime, operations_started_where_the_io_context_runs_no_more_are_freed_with_it) {
    // Asio destroys the handlers it never ran when its io_context goes: an
    // operation started from outside the io_context's thread, which nobody
    // runs again, goes the same way (its handler is never called), and so
    // does a stream's background close.
    allocation_count count;
    bool called = false;
    {
        asio::io_context io;
        ucx::context ctx(stream_options(transport::tcp, false));
        ucx::worker a(ctx, io), b(ctx, io);
        ucx::acceptor acceptor(a, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        ucx::stream client(b), server(a);
        std::optional<ucx::error_code> accepted, connected;
        acceptor.async_accept(server, [&](ucx::error_code ec) { accepted = ec; });
        client.async_connect("127.0.0.1", std::to_string(acceptor.local_endpoint().port()),
                             [&](ucx::error_code ec) { connected = ec; });
        ASSERT_TRUE(run_until(io, [&] { return accepted && connected; }));
        ASSERT_FALSE(*accepted);
        ASSERT_FALSE(*connected);
        // From here on, nothing runs `io`.
        char buf[16];
        client.async_read_some(
            asio::buffer(buf),
            asio::bind_allocator(counting_allocator<void>(&count),
                                 [&](ucx::error_code, std::size_t) { called = true; }));
        asio::async_write(
            server, asio::buffer(buf),
            asio::bind_allocator(counting_allocator<void>(&count),
                                 [&](ucx::error_code, std::size_t) { called = true; }));
        EXPECT_GE(count.allocated, 2);
        EXPECT_EQ(count.freed, 0);
    }
    EXPECT_FALSE(called);
    EXPECT_EQ(count.freed, count.allocated);
}

TEST_P(stream_test, acceptor_yields_new_streams) {
    std::optional<std::pair<ucx::error_code, ucx::stream>> accepted;
    acceptor.async_accept(
        [&](ucx::error_code ec, ucx::stream s) { accepted.emplace(ec, std::move(s)); });
    ucx::stream client(client_worker);
    std::optional<ucx::error_code> c;
    client.async_connect(acceptor.local_endpoint(), [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_until(io, [&] { return accepted && c; }));
    ASSERT_FALSE(accepted->first);
    ASSERT_FALSE(*c);
    ucx::stream& server = accepted->second;
    run([&]() -> awaitable<void> {
        co_await asio::async_write(server, asio::buffer("ping", 4), use_awaitable);
        std::array<char, 4> b{};
        co_await asio::async_read(client, asio::buffer(b), use_awaitable);
        EXPECT_EQ(std::string(b.data(), 4), "ping");
    }());
    // Closing the acceptor aborts a pending accept.
    std::optional<ucx::error_code> aborted;
    ucx::stream spare(server_worker);
    acceptor.async_accept(spare, [&](ucx::error_code ec) { aborted = ec; });
    io.poll();
    acceptor.close();
    ASSERT_TRUE(run_until(io, [&] { return aborted.has_value(); }));
    EXPECT_EQ(*aborted, asio::error::operation_aborted);
}

#if defined(UCX_ASIO_TEST_ASAN) || defined(UCX_ASIO_TEST_TSAN)
constexpr std::size_t two_process_size = 8u << 20;
#else
constexpr std::size_t two_process_size = 64u << 20;
#endif

/// Waits for the peer's result line (UCX may print its own lines too) while
/// this side keeps progressing (the peer's close needs it).
bool peer_ok(asio::io_context& io, child_process& child) {
    run_until(io, [&] { return child.output_contains("RESULT "); });
    return child.output_contains("RESULT ok");
}

/// Runs a coroutine on `io` to its end; rethrows its exception.
void run_on(asio::io_context& io, awaitable<void> body) {
    bool done = false;
    std::exception_ptr error;
    asio::co_spawn(io, std::move(body), [&](std::exception_ptr e) {
        error = e;
        done = true;
    });
    ASSERT_TRUE(run_until(io, [&] { return done; }));
    if (error)
        std::rethrow_exception(error);
}

/// The parent's side of stream_peer's "exchange": both directions at once
/// with random sizes, content checked, then eof after exactly the peer's bytes.
void exchange_with_peer(asio::io_context& io, ucx::stream& s, child_process& child) {
    const std::size_t size = two_process_size;
    const auto out = stream_pattern(size, 2);
    const auto expected = stream_pattern(size, 1);
    std::vector<char> in(size);
    run_on(io, [&]() -> awaitable<void> {
        bool read_done = false;
        asio::steady_timer gate(io, std::chrono::steady_clock::time_point::max());
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                std::mt19937 gen(3);
                std::size_t off = 0;
                while (off < size) {
                    const std::size_t n = std::min(size - off, random_size(gen, 4u << 20));
                    if (gen() % 2) {
                        off += co_await s.async_read_some(asio::buffer(in.data() + off, n),
                                                          use_awaitable);
                    } else {
                        co_await asio::async_read(s, asio::buffer(in.data() + off, n),
                                                  use_awaitable);
                        off += n;
                    }
                }
                read_done = true;
                gate.cancel();
            },
            [](std::exception_ptr e) { EXPECT_FALSE(e); });
        std::mt19937 gen(4);
        std::size_t off = 0;
        while (off < size) {
            const std::size_t n = std::min(size - off, random_size(gen, 4u << 20));
            co_await asio::async_write(s, asio::buffer(out.data() + off, n), use_awaitable);
            off += n;
        }
        if (!read_done)
            co_await gate.async_wait(tuple_awaitable);
        // The peer closes once it has everything: eof, after exactly its bytes.
        char c;
        auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::eof) << ec.message();
        (void)n;
    }());
    EXPECT_TRUE(in == expected);
    EXPECT_EQ(s.bytes_read(), size);
    EXPECT_TRUE(peer_ok(io, child));
    EXPECT_EQ(child.wait(), 0);
}

TEST_P(stream_test, two_processes_random_chunks_both_ways_at_once) {
    std::unique_ptr<child_process> child;
    ucx::stream s(server_worker);
    ASSERT_TRUE(accept_peer(child, s, {"exchange", std::to_string(two_process_size)}));
    exchange_with_peer(io, s, *child);
}

TEST_P(stream_failure_test, two_processes_a_killed_peer_is_a_reset_not_eof) {
    std::unique_ptr<child_process> child;
    ucx::stream s(server_worker);
    ASSERT_TRUE(accept_peer(child, s, {"hang", "100000", "keepalive"}));
    std::vector<char> in(100000);
    run([&]() -> awaitable<void> {
        co_await asio::async_read(s, asio::buffer(in), use_awaitable);
    }());
    EXPECT_TRUE(in == stream_pattern(100000, 1));
    child->kill_now();
    child->wait();
    run([&]() -> awaitable<void> {
        char c;
        auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::connection_reset) << ec.message();
        (void)n;
    }());
}

TEST_P(stream_failure_test, two_processes_data_that_arrived_before_a_kill_is_read_then_reset) {
    // Nothing reads while the data arrives and while the peer dies: the
    // bytes it wrote are still delivered, then the reset.
    std::unique_ptr<child_process> child;
    ucx::stream s(server_worker);
    ASSERT_TRUE(accept_peer(child, s, {"hang", "100000"}));
    ASSERT_TRUE(run_until(io, [&] { return child->output_contains("WROTE"); }));
    auto settle = [&](std::chrono::milliseconds d) {
        asio::steady_timer t(io, d);
        bool waited = false;
        t.async_wait([&](ucx::error_code) { waited = true; });
        ASSERT_TRUE(run_until(io, [&] { return waited; }));
    };
    settle(std::chrono::milliseconds(200));
    child->kill_now();
    child->wait();
    settle(std::chrono::milliseconds(500)); // the failure is seen meanwhile
    EXPECT_TRUE(read_then_end(s, 100000, asio::error::connection_reset) ==
                stream_pattern(100000, 1));
}

TEST_P(stream_test, twenty_clients_killed_at_once_leave_the_server_serving) {
    // A peer's death never takes the survivor down: 20 clients die at once;
    // each stream reads what its client wrote, then the reset, and the
    // server keeps serving.
    constexpr std::size_t count = 20, size = 1000;
    std::vector<std::unique_ptr<child_process>> children(count);
    std::vector<std::unique_ptr<ucx::stream>> streams;
    for (auto& child : children) {
        streams.push_back(std::make_unique<ucx::stream>(server_worker));
        ASSERT_TRUE(accept_peer(child, *streams.back(), {"hang", std::to_string(size)}));
    }
    for (auto& child : children)
        ASSERT_TRUE(run_until(io, [&] { return child->output_contains("WROTE"); }));
    for (auto& child : children)
        child->kill_now();
    for (auto& child : children)
        child->wait();
    for (auto& s : streams)
        EXPECT_TRUE(read_then_end(*s, size, asio::error::connection_reset) ==
                    stream_pattern(size, 1));
    // The server still takes clients.
    std::unique_ptr<child_process> next;
    ucx::stream s(server_worker);
    ASSERT_TRUE(accept_peer(next, s, {"hang", std::to_string(size)}));
    std::vector<char> in(size);
    run([&]() -> awaitable<void> {
        co_await asio::async_read(s, asio::buffer(in), use_awaitable);
    }());
    EXPECT_TRUE(in == stream_pattern(size, 1));
}

TEST_P(stream_test, two_processes_data_written_before_close_and_exit_is_all_delivered) {
    // The peer writes, calls close() and returns from main at once: its
    // worker's destruction finishes the graceful close, so every byte
    // arrives, then eof (not a reset).
    constexpr std::size_t size = 8u << 20;
    std::unique_ptr<child_process> child;
    ucx::stream s(server_worker);
    ASSERT_TRUE(accept_peer(child, s, {"close_exit", std::to_string(size)}));
    EXPECT_TRUE(read_then_end(s, size, asio::error::eof) == stream_pattern(size, 1));
    EXPECT_TRUE(peer_ok(io, *child));
    EXPECT_EQ(child->wait(), 0);
}

TEST_P(stream_test, flow_control_holds_a_writer_back_until_the_reader_reads) {
    auto [client, server] = connect_pair();
    constexpr std::size_t chunk = 1u << 20, count = 24;
    const auto data = pattern(chunk * count, 21);
    std::size_t written = 0;
    bool write_done = false;
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
            for (std::size_t i = 0; i < count; ++i) {
                co_await asio::async_write(client, asio::buffer(data.data() + i * chunk, chunk),
                                           use_awaitable);
                written += chunk;
            }
            write_done = true;
        },
        [](std::exception_ptr e) { EXPECT_FALSE(e); });
    // Nobody reads: the writer stops once a window's worth is unread, instead
    // of UCX buffering everything on the reading side.
    EXPECT_FALSE(run_until(
        io, [&] { return write_done; }, std::chrono::milliseconds(500)));
    EXPECT_GE(written, ucx::detail::stream_impl::window - chunk);
    EXPECT_LE(written, ucx::detail::stream_impl::window);
    // Reading lets it finish; every byte arrives, in order.
    std::vector<char> in(chunk * count);
    run([&]() -> awaitable<void> {
        co_await asio::async_read(server, asio::buffer(in), use_awaitable);
    }());
    EXPECT_TRUE(run_until(io, [&] { return write_done; }));
    EXPECT_TRUE(in == data);
    EXPECT_EQ(client.bytes_written(), chunk * count);
}

TEST_P(stream_test, small_reads_behind_a_full_window_keep_every_byte_in_order) {
    // The reader first lets a window's worth pile up (held in UCX's chunks),
    // then reads it and everything after in small reads of odd sizes, so
    // that chunks keep arriving while earlier ones are only partly read:
    // the chunks read to their end are dropped from the front of the held
    // list as it fills, and every byte must still come once, in order.
    auto [client, server] = connect_pair();
    constexpr std::size_t chunk = 1u << 20, count = 20;
    const auto data = pattern(chunk * count, 22);
    bool write_done = false;
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
            for (std::size_t i = 0; i < count; ++i)
                co_await asio::async_write(client, asio::buffer(data.data() + i * chunk, chunk),
                                           use_awaitable);
            write_done = true;
        },
        [](std::exception_ptr e) { EXPECT_FALSE(e); });
    EXPECT_FALSE(run_until(
        io, [&] { return write_done; }, std::chrono::milliseconds(300)));
    std::vector<char> in(chunk * count);
    std::size_t got = 0, reads = 0;
    run([&]() -> awaitable<void> {
        constexpr std::size_t sizes[] = {4093, 17, 65536 + 7, 1000, 32768 - 3};
        while (got < in.size()) {
            const std::size_t want = std::min(sizes[reads % std::size(sizes)], in.size() - got);
            got +=
                co_await server.async_read_some(asio::buffer(in.data() + got, want), use_awaitable);
            ++reads;
        }
    }());
    EXPECT_TRUE(run_until(io, [&] { return write_done; }));
    EXPECT_EQ(got, in.size());
    EXPECT_TRUE(in == data);
    EXPECT_GT(reads, count * chunk / 65536);
}

// ---- connections from a worker address (the address acceptor) ----

/// Accepts on `a` while `client` connects to `to`; returns both results.
std::pair<ucx::error_code, ucx::error_code>
connect_by_address(asio::io_context& io, ucx::acceptor& a, ucx::stream& server, ucx::stream& client,
                   const ucx::worker_address& to) {
    std::optional<ucx::error_code> accepted, connected;
    a.async_accept(server, [&](ucx::error_code ec) { accepted = ec; });
    client.async_connect(to, [&](ucx::error_code ec) { connected = ec; });
    EXPECT_TRUE(run_until(io, [&] { return accepted && connected; }));
    return {accepted.value_or(asio::error::timed_out), connected.value_or(asio::error::timed_out)};
}

TEST_P(stream_test, address_connection_echo_then_eof_both_ways) {
    ucx::acceptor by_address(server_worker);
    ASSERT_TRUE(by_address.is_open());
    ASSERT_TRUE(by_address.is_address_acceptor());
    ucx::error_code ec;
    by_address.local_endpoint(ec);
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::no_socket_address));
    ucx::stream client(client_worker), server(server_worker);
    auto [a, c] = connect_by_address(io, by_address, server, client, by_address.local_address());
    ASSERT_FALSE(a) << a.message();
    ASSERT_FALSE(c) << c.message();
    ASSERT_TRUE(client.is_open() && server.is_open());
    client.remote_endpoint(ec);
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::no_socket_address));

    constexpr std::size_t size = 4u << 20;
    const auto up = pattern(size, 5);
    std::vector<char> echoed;
    run([&]() -> awaitable<void> {
        // The server echoes until the client's half close, then closes.
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                std::vector<char> buf(100000);
                for (;;) {
                    auto [rec, n] =
                        co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
                    if (rec) {
                        EXPECT_EQ(rec, asio::error::eof) << rec.message();
                        break;
                    }
                    co_await asio::async_write(server, asio::buffer(buf.data(), n), use_awaitable);
                }
                co_await server.async_close(use_awaitable);
            },
            [](std::exception_ptr e) { EXPECT_FALSE(e); });
        bool written = false;
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                co_await write_random(client, up, 300000, 11);
                client.shutdown(asio::socket_base::shutdown_send);
                written = true;
            },
            [](std::exception_ptr e) { EXPECT_FALSE(e); });
        echoed = co_await read_random(client, size, 200000, 12, true);
        EXPECT_TRUE(written);
    }());
    EXPECT_TRUE(echoed == up);
    EXPECT_EQ(server.bytes_read(), size);
    EXPECT_EQ(server.bytes_written(), size);
}

TEST_P(stream_test, address_connect_is_refused_without_an_open_address_acceptor) {
    { ucx::acceptor opened_then_closed(server_worker); }
    ucx::stream client(client_worker);
    std::optional<ucx::error_code> c;
    client.async_connect(server_worker.address(), [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    EXPECT_EQ(*c, asio::error::connection_refused) << c->message();
    EXPECT_FALSE(client.is_open());

    // One address acceptor per worker; the next connect goes through.
    ucx::acceptor by_address(server_worker);
    ucx::error_code ec;
    ucx::acceptor second(server_worker, 16, ec);
    EXPECT_EQ(ec, asio::error::address_in_use);
    ucx::stream server(server_worker);
    auto [a, c2] = connect_by_address(io, by_address, server, client, server_worker.address());
    EXPECT_FALSE(a) << a.message();
    EXPECT_FALSE(c2) << c2.message();
}

TEST_P(stream_test, address_connect_with_an_empty_or_corrupt_address_fails_cleanly) {
    ucx::acceptor by_address(server_worker);
    ucx::stream client(client_worker);
    std::optional<ucx::error_code> c;
    client.async_connect(ucx::worker_address(), [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    EXPECT_EQ(*c, ucx::make_error_code(ucx::error::empty_address));

    auto wire = server_worker.address().serialize();
    wire[wire.size() / 2] ^= std::byte{0x5a};
    ucx::error_code ec;
    auto corrupt = ucx::worker_address::deserialize(wire, ec);
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::malformed_address));
    c.reset();
    client.async_connect(corrupt, [&](ucx::error_code e) { c = e; });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    EXPECT_EQ(*c, ucx::make_error_code(ucx::error::empty_address));

    // The stream is still usable.
    ucx::stream server(server_worker);
    auto [a, c2] = connect_by_address(io, by_address, server, client, server_worker.address());
    EXPECT_FALSE(a) << a.message();
    EXPECT_FALSE(c2) << c2.message();
}

// A hello whose address does not parse is refused before UCX sees it: UCX's
// address parser aborts the process on bytes like these, and the hello's data
// comes from the peer. Sent with UCX directly: the library only sends valid
// hellos.
TEST_P(stream_test, a_hello_with_a_damaged_address_is_refused_not_handed_to_ucx) {
    ucx::acceptor by_address(server_worker);
    ucx::stream server(server_worker);
    std::optional<ucx::error_code> accepted;
    by_address.async_accept(server, [&](ucx::error_code ec) { accepted = ec; });

    ucx::worker sender(ctx, io, strict_worker_options(ucx::progress_mode::event));
    ucx::endpoint raw(sender, server_worker.address());
    const auto hello = ucx::detail::control_message{ucx::detail::control_type::hello, 1}.encode();
    auto crc_mismatch = sender.address().serialize();
    crc_mismatch.back() ^= std::byte{0x5a};
    for (const std::vector<std::byte>& damaged :
         {std::vector<std::byte>(64, std::byte{0xa5}), crc_mismatch}) {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        ucs_status_ptr_t r =
            ucp_am_send_nbx(raw.native_handle(), ucx::detail::control_am_id, hello.data(),
                            hello.size(), damaged.data(), damaged.size(), &param);
        ASSERT_FALSE(UCS_PTR_IS_ERR(r));
        if (UCS_PTR_IS_PTR(r)) {
            EXPECT_TRUE(
                run_until(io, [&] { return ucp_request_check_status(r) != UCS_INPROGRESS; }));
            ucp_request_free(r);
        }
        // Time for the server to take the hello (and refuse it).
        run_until(
            io, [] { return false; }, std::chrono::milliseconds(200));
    }
    EXPECT_FALSE(accepted);

    // The acceptor still takes a valid connection.
    ucx::stream client(client_worker);
    std::optional<ucx::error_code> connected;
    client.async_connect(server_worker.address(), [&](ucx::error_code ec) { connected = ec; });
    ASSERT_TRUE(run_until(io, [&] { return accepted && connected; }));
    EXPECT_FALSE(*accepted) << accepted->message();
    EXPECT_FALSE(*connected) << connected->message();
}

TEST_P(stream_test, address_connect_to_a_closed_worker_fails) {
    ucx::worker gone(ctx, io, strict_worker_options(ucx::progress_mode::event));
    const auto address = gone.address();
    {
        ucx::acceptor by_address(gone);
        gone.close();
        EXPECT_FALSE(by_address.is_open());
    }
    ucx::stream client(client_worker);
    std::optional<ucx::error_code> c;
    client.async_connect(address, [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    EXPECT_TRUE(*c);
    EXPECT_FALSE(client.is_open());
}

TEST_P(stream_test, address_accepts_are_cancelled_and_aborted_by_close) {
    ucx::acceptor by_address(server_worker);
    ucx::stream server(server_worker);
    std::optional<ucx::error_code> cancelled;
    asio::cancellation_signal sig;
    by_address.async_accept(server, asio::bind_cancellation_slot(
                                        sig.slot(), [&](ucx::error_code ec) { cancelled = ec; }));
    io.poll();
    sig.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(io, [&] { return cancelled.has_value(); }));
    EXPECT_EQ(*cancelled, asio::error::operation_aborted);

    std::optional<ucx::error_code> aborted;
    by_address.async_accept([&](ucx::error_code ec, ucx::stream) { aborted = ec; });
    io.poll();
    by_address.close();
    ASSERT_TRUE(run_until(io, [&] { return aborted.has_value(); }));
    EXPECT_EQ(*aborted, asio::error::operation_aborted);
}

TEST_P(stream_test, two_processes_address_connection_both_ways_at_once) {
    ucx::acceptor by_address(server_worker);
    child_process child({UCX_ASIO_STREAM_PEER, to_string(GetParam()),
                         "addr:" + to_hex(by_address.local_address().serialize()), "exchange",
                         std::to_string(two_process_size)});
    ucx::stream s(server_worker);
    std::optional<ucx::error_code> a;
    by_address.async_accept(s, [&](ucx::error_code ec) { a = ec; });
    ASSERT_TRUE(run_until(io, [&] { return a.has_value(); }));
    ASSERT_FALSE(*a) << a->message();
    exchange_with_peer(io, s, child);
}

TEST_P(stream_failure_test, two_processes_address_connection_killed_peer_is_a_reset) {
    ucx::acceptor by_address(server_worker);
    child_process child({UCX_ASIO_STREAM_PEER, to_string(GetParam()),
                         "addr:" + to_hex(by_address.local_address().serialize()), "hang", "100000",
                         "keepalive"});
    ucx::stream s(server_worker);
    std::optional<ucx::error_code> a;
    by_address.async_accept(s, [&](ucx::error_code ec) { a = ec; });
    ASSERT_TRUE(run_until(io, [&] { return a.has_value(); }));
    ASSERT_FALSE(*a) << a->message();
    std::vector<char> in(100000);
    run([&]() -> awaitable<void> {
        co_await asio::async_read(s, asio::buffer(in), use_awaitable);
    }());
    EXPECT_TRUE(in == stream_pattern(100000, 1));
    child.kill_now();
    child.wait();
    run([&]() -> awaitable<void> {
        char c;
        auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), tuple_awaitable);
        EXPECT_EQ(ec, asio::error::connection_reset) << ec.message();
        (void)n;
        // Writes fail too.
        auto [wec, wn] = co_await asio::async_write(s, asio::buffer("x", 1), tuple_awaitable);
        EXPECT_TRUE(wec);
        (void)wn;
    }());
}

INSTANTIATE_TEST_SUITE_P(transports, stream_test,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });
INSTANTIATE_TEST_SUITE_P(transports, stream_failure_test,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
