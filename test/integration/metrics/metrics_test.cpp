// Worker metrics over real UCX traffic (operations, bytes, errors and
// latencies by kind, read from another thread), and the Prometheus exporter
// as an HTTP server, its exposition checked by Prometheus's own promtool.
#include "test_support.hpp"

#include "engine/engine_metrics.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace ucx_test;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

// With latencies, every operation measured (the default measures one in 16).
ucx::worker_options metric_options(bool latency = false, unsigned sampling = 1) {
    auto o = strict_worker_options(ucx::progress_mode::event);
    o.latency_histograms = latency;
    o.latency_sampling = sampling;
    return o;
}

class metrics : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, metric_options(true)};
    ucx::worker client_worker{ctx, io, metric_options()};
    ucx::listener server{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
};

/// Starts a receive on `ep` and cancels it at once: what it completed with.
ucx::error_code cancelled_receive(asio::io_context& io, ucx::endpoint& ep) {
    std::vector<char> buf(16);
    asio::cancellation_signal signal;
    std::optional<ucx::error_code> r;
    ep.async_recv(asio::buffer(buf), 7, ucx::tag_t(-1),
                  asio::bind_cancellation_slot(
                      signal.slot(), [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; }));
    signal.emit(asio::cancellation_type::all);
    EXPECT_TRUE(run_until(io, [&] { return r.has_value(); }));
    return r.value_or(ucx::error_code{});
}

const ucx::operation_counts& of(const ucx::worker_metrics& m, ucx::operation_kind k) {
    return m.of(k);
}

TEST_P(metrics, count_operations_and_bytes_by_kind_on_both_sides) {
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    constexpr std::size_t n = 5, size = 1000;
    for (std::uint32_t i = 0; i < n; ++i)
        exchange(io, client, accepted, size, i);
    exchange(io, accepted, client, 1 << 20, 99); // one rendezvous the other way
    constexpr std::size_t small = 3;             // and small sends, which UCX completes in its call
    for (std::uint32_t i = 0; i < small; ++i)
        exchange(io, accepted, client, 8, 100 + i);

    const ucx::worker_metrics c = client_worker.metrics();
    // The tests build the library with operation metrics (the default).
    ASSERT_TRUE(c.counts_operations);
    EXPECT_EQ(of(c, ucx::operation_kind::connect).started, 1u);
    EXPECT_EQ(of(c, ucx::operation_kind::connect).completed, 1u);
    EXPECT_EQ(of(c, ucx::operation_kind::connect).failed, 0u);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_send).started, n);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_send).completed, n);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_send).failed, 0u);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_send).bytes, n * size);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_recv).completed, 1u + small);
    EXPECT_EQ(of(c, ucx::operation_kind::tag_recv).bytes, (1u << 20) + 8 * small);
    EXPECT_TRUE(c.errors.empty());
    EXPECT_FALSE(c.has_latency);
    EXPECT_GT(c.passes, 0u);
    EXPECT_GT(c.progress_calls, 0u);

    const ucx::worker_metrics s = server_worker.metrics();
    EXPECT_EQ(of(s, ucx::operation_kind::accept).completed, 1u);
    EXPECT_EQ(of(s, ucx::operation_kind::tag_recv).completed, n);
    EXPECT_EQ(of(s, ucx::operation_kind::tag_recv).bytes, n * size);
    EXPECT_EQ(of(s, ucx::operation_kind::tag_send).bytes, (1u << 20) + 8 * small);
    // Latencies on the server only: one measurement per operation.
    ASSERT_TRUE(s.has_latency);
    const auto& h = s.latency[static_cast<std::size_t>(ucx::operation_kind::tag_recv)];
    EXPECT_EQ(h.count, n);
    std::uint64_t in_buckets = 0;
    for (auto b : h.buckets)
        in_buckets += b;
    EXPECT_EQ(in_buckets, n);
    EXPECT_GT(h.sum.count(), 0);
    // Every send too, those done inside UCX's call included.
    const auto& hs = s.latency[static_cast<std::size_t>(ucx::operation_kind::tag_send)];
    EXPECT_EQ(hs.count, 1u + small);
    // What is still in flight: at most the library's own standing waits.
    EXPECT_EQ(s.in_flight, server_worker.pending_operations());
}

// With `latency_sampling`, each operation is measured with probability
// 1 / sampling; every operation is still counted.
TEST_P(metrics, latency_sampling_measures_one_operation_in_n_at_random) {
    ucx::worker sampled_worker{ctx, io, metric_options(true, 4)};
    auto [client, accepted] = connect_pair(io, server, sampled_worker);
    ASSERT_TRUE(client.is_open() && accepted.is_open());
    constexpr std::size_t n = 400;
    for (std::uint32_t i = 0; i < n; ++i)
        exchange(io, accepted, client, 8, i); // received by the sampled worker
    const ucx::worker_metrics m = sampled_worker.metrics();
    ASSERT_TRUE(m.has_latency);
    EXPECT_EQ(m.latency_sampling, 4u);
    EXPECT_EQ(m.of(ucx::operation_kind::tag_recv).completed, n);
    const auto& h = m.latency[static_cast<std::size_t>(ucx::operation_kind::tag_recv)];
    // Binomial(400, 1/4): mean 100, standard deviation 8.7; these bounds are
    // about seven deviations away.
    EXPECT_GE(h.count, 40u);
    EXPECT_LE(h.count, 160u);
    std::uint64_t in_buckets = 0;
    for (auto b : h.buckets)
        in_buckets += b;
    EXPECT_EQ(in_buckets, h.count);

    // The default: one in 16.
    ucx::worker_options defaults = strict_worker_options(ucx::progress_mode::event);
    defaults.latency_histograms = true;
    ucx::worker default_worker{ctx, io, defaults};
    EXPECT_EQ(default_worker.metrics().latency_sampling, 16u);
    EXPECT_EQ(client_worker.metrics().latency_sampling, 0u); // not measuring
}

// The receives that end inside one progress call share one reading of the
// clock for their ends: each is still measured once, and none took less
// than nothing (a reading kept from an earlier call) or longer than the test.
TEST_P(metrics, receives_that_end_together_are_each_measured) {
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open() && accepted.is_open());
    const auto recv_latency = [&] {
        return server_worker.metrics()
            .latency[static_cast<std::size_t>(ucx::operation_kind::tag_recv)];
    };
    constexpr std::size_t n = 32;
    std::vector<std::array<char, 8>> bufs(n);
    const std::array<char, 8> msg{};
    // Rounds: each must take a reading of its own.
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE(round);
        const ucx::latency_histogram before = recv_latency();
        std::size_t received = 0, sent = 0;
        const auto t0 = std::chrono::steady_clock::now();
        // Worker-wide receives: UCX completes them in its callbacks, inside
        // progress calls (an endpoint's receives may end outside them).
        for (std::uint32_t i = 0; i < n; ++i)
            ucx::async_tag_recv(server_worker, asio::buffer(bufs[i]), 500 + i, ~ucx::tag_t(0),
                                [&](ucx::error_code ec, std::size_t, ucx::tag_t) {
                                    EXPECT_FALSE(ec) << ec.message();
                                    ++received;
                                });
        // All sent before the server's worker looks: most end in one call.
        for (std::uint32_t i = 0; i < n; ++i)
            ucx::async_tag_send(client, asio::buffer(msg), 500 + i,
                                [&](ucx::error_code ec, std::size_t) {
                                    EXPECT_FALSE(ec) << ec.message();
                                    ++sent;
                                });
        ASSERT_TRUE(run_until(io, [&] { return received == n && sent == n; }));
        const auto elapsed = std::chrono::steady_clock::now() - t0;

        const ucx::latency_histogram after = recv_latency();
        EXPECT_EQ(after.count - before.count, n);
        std::uint64_t in_buckets = 0;
        for (std::size_t b = 0; b < after.buckets.size(); ++b)
            in_buckets += after.buckets[b] - before.buckets[b];
        EXPECT_EQ(in_buckets, n);
        const auto sum = after.sum - before.sum;
        EXPECT_GT(sum.count(), 0);
        EXPECT_LE(sum, n * std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed));
    }
}

// Each endpoint counts the operations made on it, apart from the worker's
// other endpoints; the worker's counts are their sum.
TEST_P(metrics, each_endpoint_counts_its_own_operations) {
    auto [a, a_accepted] = connect_pair(io, server, client_worker);
    auto [b, b_accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(a.is_open() && b.is_open());
    for (std::uint32_t i = 0; i < 3; ++i)
        exchange(io, a, a_accepted, 1000, i);
    for (std::uint32_t i = 0; i < 2; ++i)
        exchange(io, b, b_accepted, 500, i);
    EXPECT_EQ(cancelled_receive(io, a_accepted), asio::error::operation_aborted);

    using k = ucx::operation_kind;
    const ucx::endpoint_metrics am = a.metrics(), bm = b.metrics();
    EXPECT_EQ(am.of(k::connect), (ucx::operation_counts{1, 1, 0, 0}));
    EXPECT_EQ(am.of(k::tag_send), (ucx::operation_counts{3, 3, 0, 3000}));
    EXPECT_EQ(bm.of(k::tag_send), (ucx::operation_counts{2, 2, 0, 1000}));
    EXPECT_EQ(am.of(k::tag_recv), ucx::operation_counts{});
    const ucx::endpoint_metrics asm_ = a_accepted.metrics(), bsm = b_accepted.metrics();
    EXPECT_EQ(asm_.of(k::tag_recv), (ucx::operation_counts{4, 4, 1, 3000}));
    EXPECT_EQ(bsm.of(k::tag_recv), (ucx::operation_counts{2, 2, 0, 1000}));
    EXPECT_EQ(asm_.of(k::tag_send), ucx::operation_counts{});
    // The worker's counts hold both endpoints'.
    const ucx::worker_metrics c = client_worker.metrics();
    EXPECT_EQ(c.of(k::tag_send).completed, 5u);
    EXPECT_EQ(c.of(k::tag_send).bytes, 4000u);

    // A receive waiting is in flight on its endpoint only.
    const std::uint64_t before = b_accepted.metrics().in_flight;
    EXPECT_EQ(a_accepted.metrics().in_flight, before);
    std::vector<char> in(64);
    std::optional<ucx::error_code> got;
    b_accepted.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { got = ec; });
    EXPECT_TRUE(run_ticks(io, 3));
    EXPECT_EQ(b_accepted.metrics().in_flight, before + 1);
    EXPECT_EQ(a_accepted.metrics().in_flight, before);
    const auto data = pattern(64, 9);
    std::optional<ucx::error_code> sent;
    b.async_send(asio::buffer(data), [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(io, [&] { return got && sent; }));
    EXPECT_EQ(b_accepted.metrics().in_flight, before);
    EXPECT_EQ(b_accepted.metrics().of(k::tag_recv), (ucx::operation_counts{3, 3, 0, 1064}));

    // An active message and a put have their kinds on the endpoint too.
    std::optional<ucx::error_code> am_sent, am_got;
    ucx::async_am_recv(server_worker, 4, [&](ucx::error_code ec, ucx::am_message) { am_got = ec; });
    ucx::async_am_send(a, 4, asio::const_buffer(), asio::buffer(data),
                       [&](ucx::error_code ec, std::size_t) { am_sent = ec; });
    ASSERT_TRUE(run_until(io, [&] { return am_sent && am_got; }));
    EXPECT_EQ(a.metrics().of(k::am_send), (ucx::operation_counts{1, 1, 0, 64}));

    // A closed endpoint keeps its counts; one moved from has none.
    std::optional<ucx::error_code> closed;
    a.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return closed.has_value(); }));
    EXPECT_EQ(a.metrics().of(k::tag_send), (ucx::operation_counts{3, 3, 0, 3000}));
    ucx::endpoint moved = std::move(b);
    EXPECT_EQ(b.metrics(), ucx::endpoint_metrics{}); // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(moved.metrics().of(k::tag_send).completed, 3u);

    // The worker keeps the counts of endpoints that are gone, each counted
    // once, and every operation started there has ended.
    const ucx::worker_metrics with_endpoints = client_worker.metrics();
    { ucx::endpoint gone = std::move(a); }
    { ucx::endpoint gone = std::move(moved); }
    ASSERT_TRUE(run_ticks(io, 3));
    const ucx::worker_metrics without = client_worker.metrics();
    for (const k kind : {k::connect, k::tag_send, k::am_send})
        EXPECT_EQ(without.of(kind), with_endpoints.of(kind)) << ucx::to_string(kind);
    EXPECT_EQ(without.of(k::tag_send), (ucx::operation_counts{6, 6, 0, 4064}));
    EXPECT_EQ(without.of(k::connect), (ucx::operation_counts{2, 2, 0, 0}));
}

TEST_P(metrics, failures_count_by_error_code) {
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    // Two receives cancelled: operation_aborted twice.
    for (int i = 0; i < 2; ++i)
        EXPECT_EQ(cancelled_receive(io, accepted), asio::error::operation_aborted);
    const ucx::worker_metrics s = server_worker.metrics();
    EXPECT_EQ(of(s, ucx::operation_kind::tag_recv).failed, 2u);
    EXPECT_EQ(of(s, ucx::operation_kind::tag_recv).bytes, 0u);
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_EQ(s.errors[0].code, asio::error::operation_aborted);
    EXPECT_EQ(s.errors[0].count, 2u);
}

TEST_P(metrics, active_messages_and_rma_have_their_kinds) {
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    const auto data = pattern(3000, 5);
    std::optional<ucx::error_code> sent, got;
    std::size_t received = 0;
    ucx::async_am_recv(server_worker, 3, [&](ucx::error_code ec, ucx::am_message m) {
        got = ec;
        received = m.size();
    });
    ucx::async_am_send(client, 3, asio::const_buffer(), asio::buffer(data),
                       [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(io, [&] { return sent && got; }));
    ASSERT_FALSE(*sent);
    ASSERT_FALSE(*got);
    EXPECT_EQ(received, data.size());
    EXPECT_EQ(of(client_worker.metrics(), ucx::operation_kind::am_send).bytes, data.size());
    const auto s = server_worker.metrics();
    EXPECT_EQ(of(s, ucx::operation_kind::am_recv).completed, 1u);
    EXPECT_EQ(of(s, ucx::operation_kind::am_recv).bytes, data.size());

    // A put and a get of 64 bytes into the server's memory.
    std::vector<char> target(64), back(64);
    ucx::memory_region region(ctx, target.data(), target.size());
    ucx::remote_key key(client, region.pack_key());
    const auto source = pattern(64, 9);
    std::optional<ucx::error_code> put, get;
    ucx::async_put(client, asio::buffer(source), region.address(), key,
                   [&](ucx::error_code ec, std::size_t) { put = ec; });
    ASSERT_TRUE(run_until(io, [&] { return put.has_value(); }));
    ASSERT_FALSE(*put) << put->message();
    ucx::async_get(client, asio::buffer(back), region.address(), key,
                   [&](ucx::error_code ec, std::size_t) { get = ec; });
    ASSERT_TRUE(run_until(io, [&] { return get.has_value(); }));
    ASSERT_FALSE(*get) << get->message();
    const auto c = client_worker.metrics();
    EXPECT_EQ(of(c, ucx::operation_kind::put).completed, 1u);
    EXPECT_EQ(of(c, ucx::operation_kind::put).bytes, 64u);
    EXPECT_EQ(of(c, ucx::operation_kind::get).bytes, 64u);
}

// Another thread reads the counters while the worker's thread moves messages
// (a data race here fails the ThreadSanitizer build); what it reads only grows.
TEST_P(metrics, read_from_another_thread_while_the_worker_runs) {
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    std::atomic<bool> stop{false};
    std::atomic<bool> monotonic{true};
    std::atomic<std::size_t> reads{0};
    std::thread reader([&] {
        std::uint64_t last = 0;
        while (!stop.load()) {
            const auto m = server_worker.metrics();
            const auto now = of(m, ucx::operation_kind::tag_recv).completed;
            if (now < last || of(m, ucx::operation_kind::tag_recv).started < now)
                monotonic = false;
            last = now;
            ++reads;
            (void)client_worker.stats();
        }
    });
    for (std::uint32_t i = 0; i < 50; ++i)
        exchange(io, client, accepted, 64, i);
    // At least one read overlapped the traffic or followed it.
    while (reads.load() == 0)
        std::this_thread::yield();
    stop = true;
    reader.join();
    EXPECT_TRUE(monotonic.load());
    EXPECT_EQ(of(server_worker.metrics(), ucx::operation_kind::tag_recv).completed, 50u);
}

INSTANTIATE_TEST_SUITE_P(all, metrics, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// A group's collectives by kind on every rank: counts, bytes of the input,
// latencies; a collective with bad arguments counts as failed; the exporter
// serves them labelled with the group's name.
TEST(group_metrics, count_each_rank_s_collectives_by_kind) {
    local_ranks r(3, "metrics", group_worker_options());
    ASSERT_TRUE(r.joined);
    std::vector<std::optional<ucx::error_code>> done(3);
    const auto run_all = [&](auto start) {
        for (auto& d : done)
            d.reset();
        for (int i = 0; i < 3; ++i)
            start(i);
        ASSERT_TRUE(run_until(r.io, [&] { return all_set(done); }));
    };
    std::vector<std::vector<float>> v(3, std::vector<float>(100, 1.0f));
    for (int round = 0; round < 4; ++round)
        run_all([&](int i) {
            r.groups[static_cast<std::size_t>(i)].async_allreduce(
                std::span<float>(v[static_cast<std::size_t>(i)]), ucx::reduce_op::sum,
                [&, i](ucx::error_code ec) { done[static_cast<std::size_t>(i)] = ec; });
        });
    run_all([&](int i) {
        r.groups[static_cast<std::size_t>(i)].async_barrier(
            [&, i](ucx::error_code ec) { done[static_cast<std::size_t>(i)] = ec; });
    });
    for (const auto& d : done)
        ASSERT_FALSE(*d);
    // A broadcast from a root that does not exist: invalid_rank here,
    // without touching the group.
    std::optional<ucx::error_code> bad;
    r.groups[0].async_broadcast(asio::buffer(v[0].data(), 8), 7,
                                [&](ucx::error_code ec) { bad = ec; });
    ASSERT_TRUE(run_until(r.io, [&] { return bad.has_value(); }));
    EXPECT_EQ(*bad, ucx::error::invalid_rank);

    for (int i = 0; i < 3; ++i) {
        const ucx::group_metrics m = r.groups[static_cast<std::size_t>(i)].metrics();
        EXPECT_EQ(m.rank, i);
        EXPECT_EQ(m.size, 3);
        const auto& ar = m.of(ucx::collective_kind::allreduce);
        EXPECT_EQ(ar.started, 4u);
        EXPECT_EQ(ar.completed, 4u);
        EXPECT_EQ(ar.failed, 0u);
        EXPECT_EQ(ar.bytes, 4u * 100 * sizeof(float));
        EXPECT_EQ(m.of(ucx::collective_kind::barrier).completed, 1u);
        EXPECT_EQ(m.in_flight, 0u);
        const auto& h = m.latency[static_cast<std::size_t>(ucx::collective_kind::allreduce)];
        EXPECT_EQ(h.count, 4u);
        EXPECT_GT(h.sum.count(), 0);
    }
    const auto b = r.groups[0].metrics().of(ucx::collective_kind::broadcast);
    EXPECT_EQ(b.started, 1u);
    EXPECT_EQ(b.failed, 1u);
    EXPECT_TRUE(r.groups[0].is_open()); // bad arguments do not fail the group
    EXPECT_EQ(ucx::group().metrics().rank, -1);

    ucx::metrics_exporter ex(r.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(r.groups[1], "world");
    EXPECT_THROW(ex.add(r.groups[2], "world"), boost::system::system_error);
    EXPECT_THROW(ex.add(ucx::group(), "empty"), boost::system::system_error);
    const std::string text = ex.exposition();
    EXPECT_NE(text.find("ucx_collectives_completed_total{group=\"world\",kind=\"allreduce\"} 4\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("ucx_group_rank{group=\"world\"} 1\n"), std::string::npos);
    EXPECT_NE(
        text.find("ucx_collective_duration_seconds_count{group=\"world\",kind=\"barrier\"} 1\n"),
        std::string::npos);
}

TEST(latency_bucket, bounds_double_from_one_microsecond) {
    using std::chrono::nanoseconds;
    using ucx::detail::latency_bucket;
    EXPECT_EQ(latency_bucket(nanoseconds(0)), 0u);
    EXPECT_EQ(latency_bucket(nanoseconds(1000)), 0u);
    EXPECT_EQ(latency_bucket(nanoseconds(1001)), 1u);
    EXPECT_EQ(latency_bucket(nanoseconds(2000)), 1u);
    EXPECT_EQ(latency_bucket(nanoseconds(2001)), 2u);
    EXPECT_EQ(latency_bucket(nanoseconds(8000)), 3u);
    for (std::size_t i = 0; i + 1 < ucx::latency_histogram::bucket_count; ++i) {
        EXPECT_EQ(latency_bucket(ucx::latency_histogram::upper_bound(i)), i);
        EXPECT_EQ(latency_bucket(ucx::latency_histogram::upper_bound(i) + nanoseconds(1)), i + 1);
    }
    EXPECT_EQ(latency_bucket(std::chrono::hours(1)), ucx::latency_histogram::bucket_count - 1);
}

// ---- the exporter ----

struct http_answer {
    unsigned status = 0;
    std::string content_type;
    std::string body;
    std::uint64_t content_length = 0;
};

/// One request to `port` on a thread of its own, while `io` runs the exporter.
http_answer request(asio::io_context& io, std::uint16_t port, http::verb verb,
                    const std::string& target) {
    std::optional<http_answer> answer;
    std::string failure;
    std::atomic<bool> done{false};
    std::thread t([&] {
        try {
            asio::io_context cio;
            tcp::socket s(cio);
            s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
            http::request<http::empty_body> req(verb, target, 11);
            req.set(http::field::host, "127.0.0.1");
            http::write(s, req);
            boost::beast::flat_buffer buf;
            http::response_parser<http::string_body> parser;
            parser.skip(verb == http::verb::head);
            parser.body_limit(64 << 20);
            http::read(s, buf, parser);
            const auto& res = parser.get();
            http_answer a;
            a.status = res.result_int();
            a.content_type = std::string(res[http::field::content_type]);
            a.body = res.body();
            if (res.has_content_length())
                a.content_length = std::stoull(std::string(res[http::field::content_length]));
            answer = a;
        } catch (const std::exception& e) {
            failure = e.what();
            answer = http_answer{};
        }
        done = true;
    });
    run_until(io, [&] { return done.load(); });
    t.join();
    EXPECT_TRUE(failure.empty()) << failure;
    return answer.value_or(http_answer{});
}

bool has_line(const std::string& text, const std::string& line) {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
        if (l == line)
            return true;
    return false;
}

class exporter : public testing::Test {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(transport::shared_memory, true)};
    ucx::worker server_worker{ctx, io, metric_options(true)};
    ucx::worker client_worker{ctx, io, metric_options()};
    ucx::listener server{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ucx::metrics_exporter_options options() {
        ucx::metrics_exporter_options o;
        o.labels = {{"rank", "0"}, {"job", "a \"quoted\" name"}};
        return o;
    }
};

TEST_F(exporter, serves_the_workers_metrics_at_slash_metrics) {
    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), options());
    ex.add(server_worker, "server");
    ex.add(client_worker, "client");
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    for (std::uint32_t i = 0; i < 3; ++i)
        exchange(io, client, accepted, 100, i);

    const auto port = ex.local_endpoint().port();
    const http_answer a = request(io, port, http::verb::get, "/metrics");
    EXPECT_EQ(a.status, 200u);
    EXPECT_EQ(a.content_type, "text/plain; version=0.0.4; charset=utf-8");
    const std::string labels = R"(rank="0",job="a \"quoted\" name",worker=)";
    EXPECT_TRUE(has_line(a.body, "ucx_operations_completed_total{" + labels +
                                     R"("client",kind="tag_send"} 3)"))
        << a.body;
    EXPECT_TRUE(has_line(a.body, "ucx_bytes_received_total{" + labels +
                                     R"("server",kind="tag_recv"} 300)"));
    EXPECT_TRUE(has_line(a.body, "ucx_operation_duration_seconds_count{" + labels +
                                     R"("server",kind="tag_recv"} 3)"));
    // A query string is not part of the path.
    EXPECT_EQ(request(io, port, http::verb::get, "/metrics?x=1").status, 200u);
    // HEAD: the length of what GET answers, no body.
    const http_answer head = request(io, port, http::verb::head, "/metrics");
    EXPECT_EQ(head.status, 200u);
    EXPECT_GT(head.content_length, 0u);
    EXPECT_TRUE(head.body.empty());
    EXPECT_EQ(request(io, port, http::verb::get, "/").status, 404u);
    EXPECT_EQ(request(io, port, http::verb::get, "/metricsx").status, 404u);
    EXPECT_EQ(request(io, port, http::verb::post, "/metrics").status, 405u);
    EXPECT_EQ(request(io, port, http::verb::delete_, "/metrics").status, 405u);

    // A destroyed worker drops out; its name is free again.
    client = {};
    client_worker.close();
    {
        ucx::worker gone(ctx, io, metric_options());
        ex.add(gone, "gone");
        EXPECT_NE(ex.exposition().find(R"(worker="gone")"), std::string::npos);
    }
    EXPECT_EQ(ex.exposition().find(R"(worker="gone")"), std::string::npos);
    ucx::worker again(ctx, io, metric_options());
    ex.add(again, "gone");
    EXPECT_THROW(ex.add(again, "server"), boost::system::system_error);

    ex.close();
    EXPECT_FALSE(ex.is_open());
    EXPECT_THROW((void)ex.local_endpoint(), boost::system::system_error);
    ex.close(); // idempotent
}

TEST_F(exporter, refuses_bad_label_names_and_moved_from_objects) {
    const tcp::endpoint any(asio::ip::make_address("127.0.0.1"), 0);
    for (const char* bad : {"", "9a", "__x", "a-b", "worker", "group", "endpoint", "kind", "le"}) {
        ucx::metrics_exporter_options o;
        o.labels = {{bad, "v"}};
        try {
            ucx::metrics_exporter ex(io, any, o);
            ADD_FAILURE() << "accepted label name \"" << bad << '"';
        } catch (const boost::system::system_error& e) {
            EXPECT_EQ(e.code(), asio::error::invalid_argument) << bad;
        }
    }
    ucx::metrics_exporter ex(io, any);
    ucx::worker moved(std::move(client_worker));
    try {
        ex.add(client_worker, "x");
        ADD_FAILURE() << "added a moved-from worker";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), asio::error::bad_descriptor);
    }
    ucx::metrics_exporter other(std::move(ex));
    EXPECT_FALSE(ex.is_open());
    EXPECT_EQ(ex.exposition(), "");
    EXPECT_TRUE(other.is_open());
    // The port is taken while it listens.
    try {
        ucx::metrics_exporter clash(io, other.local_endpoint());
        ADD_FAILURE() << "two exporters on one port";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), asio::error::address_in_use);
    }
}

/// Whether `s` was closed by the other side: a request written to it gets no answer.
bool closed_by_peer(tcp::socket& s) {
    boost::system::error_code ec;
    asio::write(s, asio::buffer(std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")), ec);
    if (ec)
        return true;
    char c;
    asio::read(s, asio::buffer(&c, 1), ec);
    return ec.failed();
}

// A connection past max_connections is closed at once while the others are
// served; a connection that sends no request is closed after
// request_timeout; garbage ends only its own connection.
TEST_F(exporter, bounds_connections_idle_clients_and_garbage) {
    auto o = options();
    o.max_connections = 2;
    o.request_timeout = std::chrono::minutes(5);
    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), o);
    ex.add(server_worker, "server");
    const auto port = ex.local_endpoint().port();
    o.request_timeout = std::chrono::milliseconds(200);
    ucx::metrics_exporter brief(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), o);
    const auto brief_port = brief.local_endpoint().port();

    std::atomic<bool> ended{false};
    std::vector<std::string> outcomes;
    std::thread t([&] {
        asio::io_context cio;
        const auto to = [](std::uint16_t p) {
            return tcp::endpoint(asio::ip::make_address("127.0.0.1"), p);
        };
        // The exporter takes connections in the order they came: the third is over the limit.
        std::vector<tcp::socket> socks;
        for (int i = 0; i < 3; ++i)
            socks.emplace_back(cio).connect(to(port));
        outcomes.push_back(closed_by_peer(socks[2]) ? "third closed" : "third served");
        outcomes.push_back(closed_by_peer(socks[0]) ? "first closed" : "first served");
        outcomes.push_back(closed_by_peer(socks[1]) ? "second closed" : "second served");
        // Garbage ends its connection.
        tcp::socket g(cio);
        g.connect(to(brief_port));
        asio::write(g, asio::buffer(std::string("\x01\x02 not http\r\n\r\n")));
        char c;
        boost::system::error_code ec;
        asio::read(g, asio::buffer(&c, 1), ec);
        outcomes.push_back(ec ? "garbage closed" : "garbage answered");
        // A client that says nothing is closed after the timeout.
        tcp::socket idle(cio);
        idle.connect(to(brief_port));
        asio::read(idle, asio::buffer(&c, 1), ec);
        outcomes.push_back(ec ? "idle closed" : "idle answered");
        ended = true;
    });
    run_until(
        io, [&] { return ended.load(); }, std::chrono::minutes(2));
    t.join();
    EXPECT_EQ(outcomes, (std::vector<std::string>{"third closed", "first served", "second served",
                                                  "garbage closed", "idle closed"}));
    EXPECT_EQ(request(io, port, http::verb::get, "/metrics").status, 200u);
}

// Prometheus's own checker accepts the exposition, with latency histograms
// and errors in it.
// A listener's counts: a connection accepted, one its filter refused, one
// whose client spoke another protocol; another listener's, one whose client
// said nothing within its handshake timeout (short there only, so that the
// first listener's connection is never refused for its pace); served by the
// exporter with each listener's label.
TEST(listener_metrics, count_accepted_and_refused_connections_by_cause) {
    asio::io_context io;
    ucx::context ctx{options_for(transport::tcp, true)};
    ucx::worker server_worker{ctx, io, metric_options()};
    ucx::worker client_worker{ctx, io, metric_options()};
    bool refuse = false;
    ucx::listener_options lo;
    lo.accept_filter = [&](const tcp::endpoint&) { return !refuse; };
    ucx::listener server{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), lo};
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    EXPECT_EQ(server.metrics().accepted, 1u);

    refuse = true;
    std::optional<ucx::error_code> refused;
    ucx::async_connect(client_worker, server.local_endpoint(),
                       [&](ucx::error_code ec, ucx::endpoint) { refused = ec; });
    ASSERT_TRUE(run_until(io, [&] { return refused.has_value(); }));
    EXPECT_TRUE(refused->failed());
    EXPECT_EQ(server.metrics().of(ucx::refusal_cause::filter), 1u);
    refuse = false;

    // Another protocol: its bytes are not the handshake's.
    tcp::socket garbage(io);
    garbage.connect(server.local_endpoint());
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    asio::write(garbage, asio::buffer(junk));
    ASSERT_TRUE(run_until(
        io, [&] { return server.metrics().of(ucx::refusal_cause::handshake_failed) == 1; }));
    const ucx::listener_metrics m = server.metrics();
    EXPECT_EQ(m.accepted, 1u);
    EXPECT_EQ(m.of(ucx::refusal_cause::backlog_full), 0u);
    EXPECT_EQ(m.of(ucx::refusal_cause::out_of_descriptors), 0u);
    EXPECT_EQ(m.of(ucx::refusal_cause::handshake_timeout), 0u);
    EXPECT_EQ(server.rejected(), 2u);

    // A client that says nothing: refused when the handshake timeout passes.
    ucx::listener_options quick;
    quick.handshake_timeout = std::chrono::milliseconds(300);
    ucx::listener impatient{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0),
                            quick};
    tcp::socket silent(io);
    silent.connect(impatient.local_endpoint());
    ASSERT_TRUE(run_until(
        io, [&] { return impatient.metrics().of(ucx::refusal_cause::handshake_timeout) == 1; }));
    EXPECT_EQ(impatient.rejected(), 1u);
    EXPECT_EQ(impatient.metrics().accepted, 0u);

    // A moved-from listener reports zeros.
    ucx::listener other{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ucx::listener taker = std::move(other);
    EXPECT_EQ(other.metrics().accepted, 0u);
    EXPECT_EQ(other.metrics().of(ucx::refusal_cause::filter), 0u);

    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(server, "door");
    ex.add(impatient, "quick");
    EXPECT_THROW(ex.add(server, "door"), boost::system::system_error);
    EXPECT_THROW(ex.add(other, "none"), boost::system::system_error);
    const std::string text = ex.exposition();
    EXPECT_TRUE(has_line(text, R"(ucx_listener_accepted_total{listener="door"} 1)")) << text;
    EXPECT_TRUE(has_line(text, R"(ucx_listener_refused_total{listener="door",cause="filter"} 1)"));
    EXPECT_TRUE(has_line(
        text, R"(ucx_listener_refused_total{listener="door",cause="handshake_failed"} 1)"));
    EXPECT_TRUE(has_line(
        text, R"(ucx_listener_refused_total{listener="quick",cause="handshake_timeout"} 1)"));
    EXPECT_TRUE(
        has_line(text, R"(ucx_listener_refused_total{listener="door",cause="backlog_full"} 0)"));
    ex.close();
}

// A store's counts: every operation once, a get that times out and a wait
// cancelled (failures), a prefix store counting its own; served by the
// exporter with the store's label.
TEST(store_metrics, count_each_operation_and_its_failures) {
    asio::io_context io;
    ucx::memory_store s(io.get_executor());
    std::vector<std::optional<ucx::error_code>> done;
    const auto track = [&] {
        done.emplace_back();
        return [&, i = done.size() - 1](ucx::error_code ec, auto&&...) { done[i] = ec; };
    };
    s.async_set("a", std::string_view("1"), track());
    s.async_set("b", std::string_view("x"), track());
    s.async_get("a", track());
    s.async_add("n", 5, track());
    s.async_compare_set("b", {}, {}, track());
    s.async_check({"a", "b"}, track());
    s.async_wait({"a"}, track());
    s.async_erase("b", track());
    s.async_num_keys(track());
    ASSERT_TRUE(run_until(io, [&] { return all_set(done); }));
    for (const auto& d : done)
        EXPECT_FALSE(*d);

    // A get of a key nobody sets, past the store's timeout (the operation
    // starts, and reads the timeout, on the executor); a wait cancelled.
    s.set_timeout(std::chrono::milliseconds(50));
    std::optional<ucx::error_code> late, cancelled;
    s.async_get("never", [&](ucx::error_code ec, ucx::store::value_type) { late = ec; });
    EXPECT_EQ(s.metrics().in_flight, 1u);
    ASSERT_TRUE(run_until(io, [&] { return late.has_value(); }));
    EXPECT_EQ(*late, ucx::error::store_timeout);
    s.set_timeout(std::chrono::seconds(300));
    asio::cancellation_signal signal;
    s.async_wait({"never"}, asio::bind_cancellation_slot(
                                signal.slot(), [&](ucx::error_code ec) { cancelled = ec; }));
    EXPECT_TRUE(run_ticks(io, 2)); // the wait reaches the store
    EXPECT_EQ(s.metrics().in_flight, 1u);
    signal.emit(asio::cancellation_type::all);
    ASSERT_TRUE(run_until(io, [&] { return cancelled.has_value(); }));
    EXPECT_EQ(*cancelled, asio::error::operation_aborted);

    const ucx::store_metrics m = s.metrics();
    using op = ucx::store_operation;
    EXPECT_EQ(m.of(op::set).started, 2u);
    EXPECT_EQ(m.of(op::set).completed, 2u);
    EXPECT_EQ(m.of(op::get).started, 2u);
    EXPECT_EQ(m.of(op::get).failed, 1u);
    EXPECT_EQ(m.of(op::wait).completed, 2u);
    EXPECT_EQ(m.of(op::wait).failed, 1u);
    for (const op k : {op::add, op::compare_set, op::check, op::erase, op::num_keys}) {
        EXPECT_EQ(m.of(k).started, 1u) << ucx::to_string(k);
        EXPECT_EQ(m.of(k).completed, 1u) << ucx::to_string(k);
        EXPECT_EQ(m.of(k).failed, 0u) << ucx::to_string(k);
    }
    EXPECT_EQ(m.in_flight, 0u);

    // A prefix store counts its own operations, not its base's.
    ucx::prefix_store p(s, "job");
    std::optional<ucx::error_code> set;
    p.async_set("k", std::string_view("v"), [&](ucx::error_code ec) { set = ec; });
    ASSERT_TRUE(run_until(io, [&] { return set.has_value(); }));
    EXPECT_EQ(p.metrics().of(op::set).completed, 1u);
    EXPECT_EQ(s.metrics().of(op::set).completed, 2u);

    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(s, "rendezvous");
    EXPECT_THROW(ex.add(p, "rendezvous"), boost::system::system_error);
    {
        ucx::memory_store gone(io.get_executor());
        ex.add(gone, "gone");
        EXPECT_NE(ex.exposition().find(R"(store="gone")"), std::string::npos);
    }
    const std::string text = ex.exposition();
    EXPECT_EQ(text.find(R"(store="gone")"), std::string::npos);
    EXPECT_TRUE(
        has_line(text, R"(ucx_store_operations_completed_total{store="rendezvous",op="set"} 2)"))
        << text;
    EXPECT_TRUE(
        has_line(text, R"(ucx_store_operations_failed_total{store="rendezvous",op="get"} 1)"));
    EXPECT_TRUE(has_line(text, R"(ucx_store_operations_in_flight{store="rendezvous"} 0)"));
    ex.close();
}

// Heartbeats: two workers watching an idle connection ping each other, and
// count the pings, the pongs and their round trips; /endpoints shows them
// per endpoint.
TEST(heartbeat_metrics, count_pings_pongs_and_round_trips) {
    asio::io_context io;
    ucx::context ctx{options_for(transport::tcp, true)};
    auto wo = metric_options();
    wo.peer_timeout = std::chrono::milliseconds(300);
    ucx::worker server_worker{ctx, io, wo};
    ucx::worker client_worker{ctx, io, wo};
    ucx::listener server{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    const auto sum = [&](auto get) {
        return get(client_worker.metrics()) + get(server_worker.metrics());
    };
    // Silent ticks come about every 100 ms: wait for a few round trips.
    ASSERT_TRUE(run_until(io, [&] {
        return sum([](const ucx::worker_metrics& m) { return m.heartbeat_round_trip.count; }) >= 3;
    }));
    const auto pings = sum([](const ucx::worker_metrics& m) { return m.heartbeat_pings; });
    const auto pongs = sum([](const ucx::worker_metrics& m) { return m.heartbeat_pongs; });
    EXPECT_GE(pings, 3u);
    EXPECT_GE(pongs, 3u);
    EXPECT_LE(pongs, pings);
    EXPECT_EQ(sum([](const ucx::worker_metrics& m) { return m.peers_unresponsive; }), 0u);
    EXPECT_TRUE(client.is_open());

    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(client_worker, "client");
    ex.add(server_worker, "server");
    const std::string text = ex.exposition();
    EXPECT_NE(text.find("ucx_heartbeat_pings_total{worker=\"client\"} "), std::string::npos);
    EXPECT_NE(text.find("ucx_heartbeat_round_trip_seconds_count{worker=\"server\"} "),
              std::string::npos)
        << text;
    EXPECT_TRUE(has_line(text, R"(ucx_peers_unresponsive_total{worker="client"} 0)"));
    ucx::endpoints_report r;
    ASSERT_FALSE(ucx::from_json(
        request(io, ex.local_endpoint().port(), http::verb::get, "/endpoints").body, r));
    ASSERT_EQ(r.endpoints.size(), 2u);
    std::uint64_t endpoint_pings = 0, endpoint_pongs = 0;
    for (const auto& e : r.endpoints) {
        endpoint_pings += e.pings;
        endpoint_pongs += e.pongs;
        if (e.pongs > 0) {
            EXPECT_GE(e.round_trip_ns, 0);
        }
    }
    EXPECT_GE(endpoint_pings, pings);
    EXPECT_GE(endpoint_pongs, pongs);
    ex.close();
}

// /endpoints: each worker's endpoints with their lanes, as the endpoints
// themselves report them, over TCP and shared memory; a worker whose
// executor does not run is named, and the others still answer.
class exporter_endpoints : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, metric_options()};
    ucx::worker client_worker{ctx, io, metric_options()};
    ucx::listener server{server_worker, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
};

/// An exporter serving `client` and a worker whose io_context (`idle`) does
/// not run, answering within `timeout`.
struct with_stalled_worker {
    with_stalled_worker(ucx::context& ctx, asio::io_context& io, ucx::worker& client,
                        std::chrono::milliseconds timeout)
        : stalled(ctx, idle, metric_options()),
          slow(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), options(timeout)) {
        slow.add(client, "client");
        slow.add(stalled, "stalled");
    }
    static ucx::metrics_exporter_options options(std::chrono::milliseconds timeout) {
        ucx::metrics_exporter_options o;
        o.request_timeout = timeout;
        return o;
    }
    std::uint16_t port() const { return slow.local_endpoint().port(); }

    asio::io_context idle;
    ucx::worker stalled;
    ucx::metrics_exporter slow;
};

std::string address_text(const tcp::endpoint& at) {
    return at.address().to_string() + ":" + std::to_string(at.port());
}

const ucx::endpoint_report* find_endpoint(const ucx::endpoints_report& r,
                                          const std::string& worker) {
    for (const auto& e : r.endpoints)
        if (e.worker == worker)
            return &e;
    return nullptr;
}

TEST_P(exporter_endpoints, serve_each_endpoint_s_lanes_as_the_endpoint_reports_them) {
    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(server_worker, "server");
    ex.add(client_worker, "client");
    const auto port = ex.local_endpoint().port();
    {
        const http_answer none = request(io, port, http::verb::get, "/endpoints");
        EXPECT_EQ(none.status, 200u);
        ucx::endpoints_report r;
        ASSERT_FALSE(ucx::from_json(none.body, r)) << none.body;
        EXPECT_TRUE(r.endpoints.empty()) << none.body;
    }
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    exchange(io, client, accepted, 100, 1);

    const http_answer a = request(io, port, http::verb::get, "/endpoints");
    EXPECT_EQ(a.status, 200u);
    EXPECT_EQ(a.content_type, "application/json");
    ucx::endpoints_report r;
    ASSERT_FALSE(ucx::from_json(a.body, r)) << a.body;
    EXPECT_EQ(r.pid, static_cast<std::int64_t>(getpid()));
    EXPECT_EQ(r.ucx_version, ucx::ucx_runtime_version().to_string());
    EXPECT_TRUE(r.unanswered.empty());
    ASSERT_EQ(r.endpoints.size(), 2u) << a.body;
    const ucx::endpoint_report* c = find_endpoint(r, "client");
    const ucx::endpoint_report* s = find_endpoint(r, "server");
    ASSERT_TRUE(c && s) << a.body;
    EXPECT_EQ(c->role, "client");
    EXPECT_EQ(s->role, "server");
    EXPECT_EQ(c->state, "open");
    EXPECT_EQ(s->state, "open");
    EXPECT_TRUE(c->error.empty());
    EXPECT_FALSE(c->fabric);
    EXPECT_NE(c->id, s->id);
    EXPECT_EQ(c->local, address_text(client.local_endpoint()));
    EXPECT_EQ(c->remote, address_text(client.remote_endpoint()));
    EXPECT_EQ(s->remote, address_text(accepted.remote_endpoint()));
    // The lanes: what each endpoint says of itself, and the transport the
    // test allowed.
    EXPECT_EQ(c->lanes, client.lanes());
    EXPECT_EQ(s->lanes, accepted.lanes());
    ASSERT_FALSE(c->lanes.empty());
    const std::string expected = GetParam() == transport::tcp ? "tcp" : "sysv|posix";
    bool carried = false;
    for (const auto& lane : c->lanes)
        for (const auto& use : lane.uses)
            if (use == "am" && expected.find(lane.transport) != std::string::npos)
                carried = true;
    EXPECT_TRUE(carried) << a.body;
    std::printf("%s", a.body.c_str());

    // A worker whose io_context does not run is named; the others answer.
    with_stalled_worker w(ctx, io, client_worker, std::chrono::seconds(2));
    const http_answer partial = request(io, w.port(), http::verb::get, "/endpoints");
    EXPECT_EQ(partial.status, 200u);
    ucx::endpoints_report pr;
    ASSERT_FALSE(ucx::from_json(partial.body, pr)) << partial.body;
    EXPECT_EQ(pr.unanswered, std::vector<std::string>{"stalled"});
    ASSERT_EQ(pr.endpoints.size(), 1u) << partial.body;
    EXPECT_EQ(pr.endpoints[0].worker, "client");
    // The stalled worker's executor runs at last: the late answer is dropped.
    w.idle.poll();
    EXPECT_TRUE(run_ticks(io, 5));

    // A closed endpoint is no longer listed once it is gone.
    client = {};
    accepted = {};
    EXPECT_TRUE(run_until(io, [&] {
        ucx::endpoints_report now;
        return !ucx::from_json(request(io, port, http::verb::get, "/endpoints").body, now) &&
               now.endpoints.empty();
    }));
    w.slow.close();
    ex.close();
}

/// The sample line of `name` whose labels hold every one of `labels`
/// (`worker="client"`, ...); empty for none.
std::string sample(const std::string& text, const std::string& name,
                   const std::vector<std::string>& labels) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (labels.empty() && line.starts_with(name + " "))
            return line;
        if (!line.starts_with(name + "{"))
            continue;
        const std::string set = line.substr(0, line.rfind('}') + 1);
        bool all = true;
        for (const auto& l : labels)
            all = all && (set.find("{" + l + ",") != std::string::npos ||
                          set.find("," + l + ",") != std::string::npos ||
                          set.find("," + l + "}") != std::string::npos ||
                          set.find("{" + l + "}") != std::string::npos);
        if (all)
            return line;
    }
    return {};
}

/// The value of that sample, or -1.
long long value_of(const std::string& text, const std::string& name,
                   const std::vector<std::string>& labels) {
    const std::string line = sample(text, name, labels);
    return line.empty() ? -1 : std::stoll(line.substr(line.rfind(' ') + 1));
}

// GET /metrics: each endpoint's series (what it is, its lanes, its
// operations), labelled with its worker and id; none with the option off; a
// worker whose executor does not run is counted as unanswered.
TEST_P(exporter_endpoints, serve_each_endpoint_s_operations_and_lanes_as_series) {
    ucx::metrics_exporter_options o;
    o.labels = {{"rank", "0"}};
    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), o);
    ex.add(server_worker, "server");
    ex.add(client_worker, "client");
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    for (std::uint32_t i = 0; i < 4; ++i)
        exchange(io, client, accepted, 300, i);
    ucx::endpoints_report r;
    ASSERT_FALSE(ucx::from_json(
        request(io, ex.local_endpoint().port(), http::verb::get, "/endpoints").body, r));
    const ucx::endpoint_report* c = find_endpoint(r, "client");
    const ucx::endpoint_report* s = find_endpoint(r, "server");
    ASSERT_TRUE(c && s);
    EXPECT_EQ(c->metrics, client.metrics());
    EXPECT_EQ(s->metrics, accepted.metrics());
    const std::string cid = "endpoint=\"" + std::to_string(c->id) + "\"";
    const std::string sid = "endpoint=\"" + std::to_string(s->id) + "\"";

    const http_answer a = request(io, ex.local_endpoint().port(), http::verb::get, "/metrics");
    EXPECT_EQ(a.status, 200u);
    const std::string& t = a.body;
    EXPECT_EQ(value_of(t, "ucx_endpoint_operations_completed_total",
                       {"rank=\"0\"", "worker=\"client\"", cid, "kind=\"tag_send\""}),
              4)
        << t;
    EXPECT_EQ(value_of(t, "ucx_endpoint_bytes_sent_total",
                       {"worker=\"client\"", cid, "kind=\"tag_send\""}),
              1200);
    EXPECT_EQ(value_of(t, "ucx_endpoint_bytes_received_total",
                       {"worker=\"server\"", sid, "kind=\"tag_recv\""}),
              1200);
    EXPECT_EQ(value_of(t, "ucx_endpoint_operations_failed_total",
                       {"worker=\"server\"", sid, "kind=\"tag_recv\""}),
              0);
    // Kinds an endpoint never used have no series.
    EXPECT_EQ(sample(t, "ucx_endpoint_operations_started_total", {cid, "kind=\"get\""}), "");
    EXPECT_EQ(value_of(t, "ucx_endpoint_info",
                       {"worker=\"client\"", cid, "role=\"client\"", "state=\"open\"",
                        "remote=\"" + address_text(client.remote_endpoint()) + "\""}),
              1)
        << t;
    // One lane series per lane the endpoint reports.
    for (const auto& lane : client.lanes()) {
        std::string uses;
        for (const auto& u : lane.uses)
            uses += (uses.empty() ? "" : ",") + u;
        EXPECT_EQ(value_of(t, "ucx_endpoint_lane_info",
                           {"worker=\"client\"", cid, "lane=\"" + std::to_string(lane.index) + "\"",
                            "transport=\"" + lane.transport + "\"",
                            "device=\"" + lane.device + "\"", "uses=\"" + uses + "\""}),
                  1)
            << t;
    }
    EXPECT_EQ(value_of(t, "ucx_exporter_workers_unanswered", {"rank=\"0\""}), 0);
    // exposition() reads counters only.
    EXPECT_EQ(ex.exposition().find("ucx_endpoint_"), std::string::npos);

    // Off: no endpoint series, and no wait.
    ucx::metrics_exporter_options off;
    off.endpoint_series = false;
    ucx::metrics_exporter plain(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), off);
    plain.add(client_worker, "client");
    const std::string pt =
        request(io, plain.local_endpoint().port(), http::verb::get, "/metrics").body;
    EXPECT_NE(pt.find("ucx_operations_started_total{"), std::string::npos);
    EXPECT_EQ(pt.find("ucx_endpoint_"), std::string::npos) << pt;
    EXPECT_EQ(pt.find("ucx_exporter_workers_unanswered"), std::string::npos) << pt;

    // A stalled worker: the others' endpoints are served, it is counted.
    with_stalled_worker w(ctx, io, client_worker, std::chrono::milliseconds(500));
    const std::string st = request(io, w.port(), http::verb::get, "/metrics").body;
    EXPECT_EQ(value_of(st, "ucx_exporter_workers_unanswered", {}), 1) << st;
    EXPECT_EQ(value_of(st, "ucx_endpoint_operations_completed_total",
                       {"worker=\"client\"", cid, "kind=\"tag_send\""}),
              4)
        << st;
    // The worker's own counters are still served.
    EXPECT_NE(sample(st, "ucx_operations_started_total", {"worker=\"stalled\""}), "");
    w.idle.poll();
    EXPECT_TRUE(run_ticks(io, 5));
    w.slow.close();
    plain.close();
    ex.close();
}

INSTANTIATE_TEST_SUITE_P(all, exporter_endpoints,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// Three ranks allreduce, then ranks 0 and 1 call a barrier that rank 2 does
// not: rank 0's flight record, served at /flight/world while the barrier
// waits, shows the barrier running and waiting for rank 2.
TEST(exporter_flight, serves_each_group_s_flight_record_while_a_collective_waits) {
    local_ranks r(3, "flight", group_worker_options());
    ASSERT_TRUE(r.joined);
    std::vector<std::optional<ucx::error_code>> done(3);
    std::vector<std::vector<float>> v(3, std::vector<float>(100, 1.0f));
    for (int i = 0; i < 3; ++i)
        r.groups[static_cast<std::size_t>(i)].async_allreduce(
            std::span<float>(v[static_cast<std::size_t>(i)]), ucx::reduce_op::sum,
            [&, i](ucx::error_code ec) { done[static_cast<std::size_t>(i)] = ec; });
    ASSERT_TRUE(run_until(r.io, [&] { return all_set(done); }));
    std::vector<std::optional<ucx::error_code>> barrier(2);
    for (int i = 0; i < 2; ++i)
        r.groups[static_cast<std::size_t>(i)].async_barrier(
            [&, i](ucx::error_code ec) { barrier[static_cast<std::size_t>(i)] = ec; });

    ucx::metrics_exporter ex(r.io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ex.add(r.groups[0], "world");
    ex.add(r.groups[1], "a \"quoted\" name");
    const auto port = ex.local_endpoint().port();
    const http_answer list = request(r.io, port, http::verb::get, "/flight");
    EXPECT_EQ(list.status, 200u);
    EXPECT_EQ(list.content_type, "application/json");
    EXPECT_EQ(list.body, "{\"groups\":[\"world\",\"a \\\"quoted\\\" name\"]}\n");

    const http_answer a = request(r.io, port, http::verb::get, "/flight/world");
    EXPECT_EQ(a.status, 200u);
    EXPECT_EQ(a.content_type, "application/json");
    ucx::flight_record rec;
    ASSERT_FALSE(ucx::from_json(a.body, rec)) << a.body;
    EXPECT_EQ(rec.rank, 0);
    EXPECT_EQ(rec.size, 3);
    EXPECT_EQ(rec.reason, "request");
    EXPECT_EQ(rec.collectives, 2u) << a.body;
    ASSERT_EQ(rec.events.size(), 2u) << a.body;
    EXPECT_EQ(rec.events[0].collective, ucx::collective_kind::allreduce);
    EXPECT_EQ(rec.events[0].state, ucx::flight_state::completed);
    EXPECT_EQ(rec.events[1].collective, ucx::collective_kind::barrier);
    EXPECT_EQ(rec.events[1].state, ucx::flight_state::running) << a.body;

    const http_answer head = request(r.io, port, http::verb::head, "/flight/world");
    EXPECT_EQ(head.status, 200u);
    EXPECT_GT(head.content_length, 0u);
    EXPECT_TRUE(head.body.empty());
    // The name percent-encoded, as a path segment.
    const http_answer quoted =
        request(r.io, port, http::verb::get, "/flight/a%20%22quoted%22%20name");
    EXPECT_EQ(quoted.status, 200u);
    ucx::flight_record rec1;
    ASSERT_FALSE(ucx::from_json(quoted.body, rec1)) << quoted.body;
    EXPECT_EQ(rec1.rank, 1);
    EXPECT_EQ(request(r.io, port, http::verb::get, "/flight/a%2").status, 404u);
    EXPECT_EQ(request(r.io, port, http::verb::get, "/flight/nobody").status, 404u);
    EXPECT_EQ(request(r.io, port, http::verb::get, "/flight/").status, 404u);
    EXPECT_EQ(request(r.io, port, http::verb::post, "/flight/world").status, 405u);

    // Rank 2 calls the barrier at last: every rank completes it.
    std::optional<ucx::error_code> last;
    r.groups[2].async_barrier([&](ucx::error_code ec) { last = ec; });
    ASSERT_TRUE(run_until(r.io, [&] { return last && all_set(barrier); }));
    EXPECT_FALSE(*last);

    // A group whose executor does not run: the exporter, on an io_context
    // of its own, answers 503 once its request timeout passes.
    asio::io_context other;
    ucx::metrics_exporter_options o;
    o.request_timeout = std::chrono::milliseconds(200);
    ucx::metrics_exporter slow(other, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), o);
    slow.add(r.groups[0], "world");
    EXPECT_EQ(request(other, slow.local_endpoint().port(), http::verb::get, "/flight/world").status,
              503u);
    // The record's answer comes late, to a request already answered.
    EXPECT_TRUE(run_ticks(r.io, 5));
    EXPECT_TRUE(run_ticks(other, 5));
    ex.close();
    slow.close();
    r.io.restart();
    r.io.poll();
    other.restart();
    other.poll();
}

TEST_F(exporter, promtool_accepts_the_exposition) {
    ucx::metrics_exporter ex(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0), options());
    ex.add(server_worker, "server");
    ex.add(client_worker, "client");
    // Groups' families too: two ranks of one group, each run a barrier.
    local_ranks ranks(2, "promtool", group_worker_options());
    ASSERT_TRUE(ranks.joined);
    std::optional<ucx::error_code> b0, b1;
    ranks.groups[0].async_barrier([&](ucx::error_code ec) { b0 = ec; });
    ranks.groups[1].async_barrier([&](ucx::error_code ec) { b1 = ec; });
    ASSERT_TRUE(run_until(ranks.io, [&] { return b0 && b1; }));
    ex.add(ranks.groups[0], "rank0");
    ex.add(ranks.groups[1], "rank1");
    auto [client, accepted] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open());
    exchange(io, client, accepted, 100, 1);
    EXPECT_EQ(cancelled_receive(io, accepted), asio::error::operation_aborted);
    // A scrape's answer, the endpoints' series included.
    const std::string text =
        request(io, ex.local_endpoint().port(), http::verb::get, "/metrics").body;
    ASSERT_NE(text.find("ucx_operation_errors_total{"), std::string::npos);
    ASSERT_NE(text.find("ucx_endpoint_lane_info{"), std::string::npos);
    ASSERT_NE(text.find("ucx_endpoint_operations_failed_total{"), std::string::npos);
    ASSERT_NE(text.find("ucx_collective_duration_seconds_bucket{"), std::string::npos);
    char path[] = "/tmp/ucx-asio-metrics-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    const std::string cmd = std::string("promtool check metrics < ") + path + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr) << "promtool (Debian's prometheus package) is needed";
    std::string out;
    char line[512];
    while (fgets(line, sizeof line, p))
        out += line;
    const int status = pclose(p);
    unlink(path);
    EXPECT_EQ(status, 0) << out;
    EXPECT_EQ(out, "") << out;
}

} // namespace
