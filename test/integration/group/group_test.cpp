// ucx::group between workers of one process (one io_context, a memory_store):
// joining, messaging by rank, every collective on every type checked against a
// local computation, over TCP and shared memory, with 2, 3, 4 and 8 ranks;
// split; two groups at once; failure of a rank; bad arguments; receives from
// any rank. The groups of separate processes are in group_process_test.cpp.
#include "fake_device.hpp"
#include "test_support.hpp"

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/copy_engine.hpp"
#include "gpu/device_staging.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <array>
#include <cstring>
#include <functional>
#include <future>
#include <numeric>
#include <set>
#include <thread>

using namespace ucx_test;

namespace {

/// `n` ranks: a worker each, joined through one memory_store.
class ranks_fixture {
public:
    ranks_fixture(transport t, int n, std::string name = "g", bool lazy = false)
        : lazy_(lazy), ctx_(options_for(t)), store_(io.get_executor()) {
        for (int i = 0; i < n; ++i)
            workers_.push_back(std::make_unique<ucx::worker>(ctx_, io, group_worker_options()));
        join(name);
    }

    void join(const std::string& name) {
        ASSERT_TRUE(join_groups(io, store_, workers_, groups, name, lazy_));
    }

    int size() const { return static_cast<int>(groups.size()); }

    /// Starts `f(rank)` (an operation with a `void(error_code)` handler) on
    /// every rank and runs until all completed; returns the codes.
    template <class F>
    std::vector<ucx::error_code> on_all(F f) {
        const int n = size();
        std::vector<std::optional<ucx::error_code>> r(n);
        for (int i = 0; i < n; ++i)
            f(i, [&r, i](ucx::error_code ec) { r[i] = ec; });
        EXPECT_TRUE(run_until(io, [&] {
            return std::all_of(r.begin(), r.end(), [](auto& d) { return d.has_value(); });
        })) << "a collective hung";
        std::vector<ucx::error_code> out;
        for (auto& x : r)
            out.push_back(x.value_or(asio::error::timed_out));
        return out;
    }

    static void expect_ok(const std::vector<ucx::error_code>& r) {
        for (std::size_t i = 0; i < r.size(); ++i)
            EXPECT_FALSE(r[i]) << "rank " << i << ": " << r[i].message();
    }

    bool lazy_ = false;
    asio::io_context io;
    std::vector<ucx::group> groups;

    ucx::context ctx_;
    ucx::memory_store store_;
    std::vector<std::unique_ptr<ucx::worker>> workers_;
};

struct params {
    transport t;
    int n;
};

class group_collectives : public testing::TestWithParam<params> {};

template <class T>
T value_for(int rank, std::size_t k) {
    if constexpr (std::is_floating_point_v<T>)
        return static_cast<T>(static_cast<int>((rank * 7 + k) % 13) - 6) * T(0.5);
    else
        return static_cast<T>((rank * 37 + k * 11 + 1) % 97);
}

template <class T>
void check_allreduce(ranks_fixture& f, std::size_t count) {
    const int n = f.size();
    for (ucx::reduce_op op :
         {ucx::reduce_op::sum, ucx::reduce_op::prod, ucx::reduce_op::min, ucx::reduce_op::max}) {
        std::vector<std::vector<T>> in(n, std::vector<T>(count)), out(n, std::vector<T>(count));
        std::vector<T> expected(count);
        for (int i = 0; i < n; ++i)
            for (std::size_t k = 0; k < count; ++k) {
                in[i][k] = value_for<T>(i, k);
                T& e = expected[k];
                const T v = in[i][k];
                // Integers wrap: computed in 64-bit unsigned, then converted.
                using W = std::conditional_t<std::is_integral_v<T>, std::uint64_t, T>;
                if (i == 0)
                    e = v;
                else if (op == ucx::reduce_op::sum)
                    e = static_cast<T>(static_cast<W>(e) + static_cast<W>(v));
                else if (op == ucx::reduce_op::prod)
                    e = static_cast<T>(static_cast<W>(e) * static_cast<W>(v));
                else if (op == ucx::reduce_op::min)
                    e = std::min(e, v);
                else
                    e = std::max(e, v);
            }
        auto r = f.on_all([&](int i, auto h) {
            f.groups[i].async_allreduce(std::span<const T>(in[i]), std::span<T>(out[i]), op, h);
        });
        ranks_fixture::expect_ok(r);
        for (int i = 0; i < n; ++i) {
            if (std::is_floating_point_v<T> && op == ucx::reduce_op::sum) {
                // Exact in binary: halves of small integers.
                ASSERT_EQ(out[i], expected) << "rank " << i;
            } else {
                ASSERT_EQ(out[i], expected) << "rank " << i << " op " << static_cast<int>(op);
            }
        }
        // Reduce to the last rank.
        const int root = n - 1;
        std::vector<T> at_root(count);
        r = f.on_all([&](int i, auto h) {
            f.groups[i].async_reduce(std::span<const T>(in[i]),
                                     i == root ? std::span<T>(at_root) : std::span<T>(), op, root,
                                     h);
        });
        ranks_fixture::expect_ok(r);
        ASSERT_EQ(at_root, expected);
    }
}

} // namespace

TEST_P(group_collectives, BarrierBroadcastGatherAllgatherAlltoall) {
    ranks_fixture f(GetParam().t, GetParam().n);
    const int n = f.size();
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));

    for (std::size_t bytes : {std::size_t{0}, std::size_t{8}, std::size_t{1} << 20}) {
        const int root = n > 1 ? 1 : 0;
        std::vector<std::vector<char>> data(n);
        for (int i = 0; i < n; ++i)
            data[i] = i == root ? pattern(bytes, 5) : std::vector<char>(bytes);
        ranks_fixture::expect_ok(f.on_all(
            [&](int i, auto h) { f.groups[i].async_broadcast(asio::buffer(data[i]), root, h); }));
        for (int i = 0; i < n; ++i)
            ASSERT_EQ(data[i], pattern(bytes, 5)) << "broadcast of " << bytes << " at rank " << i;
    }

    const std::size_t block = 1000;
    std::vector<std::vector<char>> in(n), out(n, std::vector<char>(block * n));
    std::vector<char> expected;
    for (int i = 0; i < n; ++i) {
        in[i] = pattern(block, 100 + i);
        expected.insert(expected.end(), in[i].begin(), in[i].end());
    }
    std::vector<char> gathered(block * n);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_gather(asio::buffer(in[i]),
                                 i == 0 ? asio::buffer(gathered) : asio::mutable_buffer(), 0, h);
    }));
    EXPECT_EQ(gathered, expected);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_allgather(asio::buffer(in[i]), asio::buffer(out[i]), h);
    }));
    for (int i = 0; i < n; ++i)
        EXPECT_EQ(out[i], expected) << "allgather at rank " << i;

    // allgatherv with blocks of 0 to 3 KiB.
    std::vector<std::size_t> sizes(n);
    for (int i = 0; i < n; ++i)
        sizes[i] = static_cast<std::size_t>(i % 4) * 1024;
    const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
    std::vector<std::vector<char>> vin(n), vout(n, std::vector<char>(total));
    std::vector<char> vexpected;
    for (int i = 0; i < n; ++i) {
        vin[i] = pattern(sizes[i], 300 + i);
        vexpected.insert(vexpected.end(), vin[i].begin(), vin[i].end());
    }
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_allgatherv(asio::buffer(vin[i]), asio::buffer(vout[i]), sizes, h);
    }));
    for (int i = 0; i < n; ++i)
        EXPECT_EQ(vout[i], vexpected) << "allgatherv at rank " << i;

    // alltoall: block j of rank i's input is pattern(i * n + j).
    std::vector<std::vector<char>> ain(n), aout(n, std::vector<char>(block * n));
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
            auto b = pattern(block, 1000 + i * n + j);
            ain[i].insert(ain[i].end(), b.begin(), b.end());
        }
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_alltoall(asio::buffer(ain[i]), asio::buffer(aout[i]), h);
    }));
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
            EXPECT_EQ(
                std::vector<char>(aout[i].begin() + block * j, aout[i].begin() + block * (j + 1)),
                pattern(block, 1000 + j * n + i))
                << "alltoall: rank " << i << " block " << j;
}

TEST_P(group_collectives, AllreduceAndReduceOnEveryTypeAndOperation) {
    ranks_fixture f(GetParam().t, GetParam().n);
    for (std::size_t count : {std::size_t{1}, std::size_t{100}}) {
        check_allreduce<std::int8_t>(f, count);
        check_allreduce<std::uint8_t>(f, count);
        check_allreduce<std::int16_t>(f, count);
        check_allreduce<std::uint16_t>(f, count);
        check_allreduce<std::int32_t>(f, count);
        check_allreduce<std::uint32_t>(f, count);
        check_allreduce<std::int64_t>(f, count);
        check_allreduce<std::uint64_t>(f, count);
        check_allreduce<float>(f, count);
        check_allreduce<double>(f, count);
    }
    // Above 64 KiB: the ring.
    check_allreduce<std::int32_t>(f, 300000);
    check_allreduce<double>(f, 20000);
}

INSTANTIATE_TEST_SUITE_P(ranks, group_collectives,
                         testing::Values(params{transport::tcp, 2}, params{transport::tcp, 3},
                                         params{transport::shared_memory, 4},
                                         params{transport::tcp, 8}),
                         [](const auto& info) {
                             return to_string(info.param.t) + "_" + std::to_string(info.param.n);
                         });

TEST(group, MessagesByRankKeepTheirOrderAndTags) {
    ranks_fixture f(transport::shared_memory, 3);
    std::vector<char> a(64), b(64);
    std::optional<ucx::error_code> r1, r2, s1, s2, s3;
    std::size_t n1 = 0, n2 = 0;
    // Receives posted before the sender ever connected.
    f.groups[2].async_recv(0, asio::buffer(a), 7, [&](ucx::error_code ec, std::size_t n) {
        r1 = ec;
        n1 = n;
    });
    f.groups[2].async_recv(0, asio::buffer(b), 9, [&](ucx::error_code ec, std::size_t n) {
        r2 = ec;
        n2 = n;
    });
    const std::string m9 = "tag nine", m7 = "tag seven, sent second";
    f.groups[0].async_send(2, asio::buffer(m9), 9,
                           [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    f.groups[0].async_send(2, asio::buffer(m7), 7,
                           [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return r1 && r2 && s1 && s2; }));
    EXPECT_FALSE(*r1);
    EXPECT_FALSE(*r2);
    EXPECT_EQ(std::string(a.data(), n1), m7);
    EXPECT_EQ(std::string(b.data(), n2), m9);
    // Bad arguments fail the operation, not the group.
    f.groups[0].async_send(3, asio::buffer(m9), 1,
                           [&](ucx::error_code ec, std::size_t) { s3 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return s3.has_value(); }));
    EXPECT_EQ(*s3, ucx::error::invalid_rank);
    s3.reset();
    f.groups[0].async_send(1, asio::buffer(m9), ucx::group_max_tag + 1,
                           [&](ucx::error_code ec, std::size_t) { s3 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return s3.has_value(); }));
    EXPECT_EQ(*s3, asio::error::invalid_argument);
    // A tag past 32 bits is refused too, not cut to its low bits.
    s3.reset();
    f.groups[0].async_send(1, asio::buffer(m9), (ucx::tag_t{1} << 32) | 1,
                           [&](ucx::error_code ec, std::size_t) { s3 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return s3.has_value(); }));
    EXPECT_EQ(*s3, asio::error::invalid_argument);
    EXPECT_TRUE(f.groups[0].is_open());
    // A collective's wrong sizes are refused at once.
    std::vector<char> in(10), out(10);
    s3.reset();
    f.groups[0].async_allgather(asio::buffer(in), asio::buffer(out),
                                [&](ucx::error_code ec) { s3 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return s3.has_value(); }));
    EXPECT_EQ(*s3, asio::error::invalid_argument);
    EXPECT_TRUE(f.groups[0].is_open());
}

TEST(group, CoroutinesRunCollectivesInOrder) {
    ranks_fixture f(transport::tcp, 4);
    std::vector<std::optional<std::int64_t>> result(4);
    for (int i = 0; i < 4; ++i)
        asio::co_spawn(
            f.io,
            [&, i]() -> asio::awaitable<void> {
                ucx::group& g = f.groups[i];
                std::int64_t acc = 0;
                for (int round = 0; round < 20; ++round) {
                    std::vector<std::int64_t> v{g.rank() + round};
                    co_await g.async_allreduce(std::span<std::int64_t>(v), ucx::reduce_op::sum,
                                               asio::use_awaitable);
                    acc += v[0];
                    co_await g.async_barrier(asio::use_awaitable);
                }
                result[i] = acc;
            },
            asio::detached);
    ASSERT_TRUE(run_until(f.io, [&] {
        return std::all_of(result.begin(), result.end(), [](auto& r) { return r.has_value(); });
    }));
    // sum over rounds of (0+1+2+3 + 4 * round) = 20 * 6 + 4 * 190
    for (auto& r : result)
        EXPECT_EQ(*r, 20 * 6 + 4 * 190);
}

TEST(group, SplitMakesGroupsThatRunBesideTheirParent) {
    ranks_fixture f(transport::tcp, 4);
    std::vector<ucx::group> halves(4);
    // color: even/odd ranks; key: reversed order.
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_split(i % 2, -i, [&, i, h](ucx::error_code ec, ucx::group g) mutable {
            halves[i] = std::move(g);
            h(ec);
        });
    }));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(halves[i].size(), 2);
        EXPECT_EQ(halves[i].rank(), i < 2 ? 1 : 0) << i; // key -i: the higher rank first
    }
    // Allreduces on the halves and on the parent at the same time.
    std::vector<std::vector<int>> hv(4), pv(4);
    std::vector<std::optional<ucx::error_code>> hr(4), pr(4);
    for (int i = 0; i < 4; ++i) {
        hv[i] = {i, 10 * i};
        pv[i] = {i};
        halves[i].async_allreduce(std::span<int>(hv[i]), ucx::reduce_op::sum,
                                  [&, i](ucx::error_code ec) { hr[i] = ec; });
        f.groups[i].async_allreduce(std::span<int>(pv[i]), ucx::reduce_op::max,
                                    [&, i](ucx::error_code ec) { pr[i] = ec; });
    }
    ASSERT_TRUE(run_until(f.io, [&] {
        return std::all_of(hr.begin(), hr.end(), [](auto& r) { return r.has_value(); }) &&
               std::all_of(pr.begin(), pr.end(), [](auto& r) { return r.has_value(); });
    }));
    for (int i = 0; i < 4; ++i) {
        EXPECT_FALSE(*hr[i]);
        EXPECT_FALSE(*pr[i]);
        EXPECT_EQ(hv[i], (i % 2 == 0 ? std::vector<int>{2, 20} : std::vector<int>{4, 40}));
        EXPECT_EQ(pv[i], std::vector<int>{3});
    }
    // A negative color gives an empty group.
    std::vector<ucx::group> none(4);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_split(i == 0 ? 0 : -1, 0,
                                [&, i, h](ucx::error_code ec, ucx::group g) mutable {
                                    none[i] = std::move(g);
                                    h(ec);
                                });
    }));
    EXPECT_EQ(none[0].size(), 1);
    EXPECT_FALSE(none[1].is_open());
    EXPECT_EQ(none[1].size(), 0);
}

TEST(group, TwoGroupsAtOnceThroughOneStore) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::tcp));
    ucx::memory_store store(io.get_executor());
    std::vector<std::unique_ptr<ucx::worker>> workers;
    for (int i = 0; i < 4; ++i)
        workers.push_back(std::make_unique<ucx::worker>(ctx, io, group_worker_options()));
    // Workers 0, 1 in group "a"; 2, 3 in group "b"; both have ranks 0 and 1.
    std::vector<ucx::group> g(4);
    int joined = 0;
    for (int i = 0; i < 4; ++i) {
        ucx::group_options o;
        o.rank = i % 2;
        o.size = 2;
        o.name = i < 2 ? "a" : "b";
        ucx::async_join(*workers[i], store, o, [&, i](ucx::error_code ec, ucx::group gr) {
            EXPECT_FALSE(ec) << ec.message();
            g[i] = std::move(gr);
            ++joined;
        });
    }
    ASSERT_TRUE(run_until(io, [&] { return joined == 4; }));
    std::vector<std::vector<int>> v{{1}, {2}, {30}, {40}};
    int done = 0;
    for (int i = 0; i < 4; ++i)
        g[i].async_allreduce(std::span<int>(v[i]), ucx::reduce_op::sum, [&](ucx::error_code ec) {
            EXPECT_FALSE(ec) << ec.message();
            ++done;
        });
    ASSERT_TRUE(run_until(io, [&] { return done == 4; }));
    EXPECT_EQ(v[0][0], 3);
    EXPECT_EQ(v[1][0], 3);
    EXPECT_EQ(v[2][0], 70);
    EXPECT_EQ(v[3][0], 70);
    // A second join on a worker that has a group is refused.
    std::optional<ucx::error_code> again;
    ucx::group_options o;
    o.rank = 0;
    o.size = 1;
    o.name = "c";
    ucx::async_join(*workers[0], store, o, [&](ucx::error_code ec, ucx::group) { again = ec; });
    ASSERT_TRUE(run_until(io, [&] { return again.has_value(); }));
    EXPECT_EQ(*again, asio::error::address_in_use);
}

TEST(group, AnAbortedRankFailsEveryPendingCollectiveEverywhere) {
    ranks_fixture f(transport::tcp, 4);
    // Everyone has talked to everyone once.
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
    std::vector<std::optional<ucx::error_code>> r(4), waits(4);
    std::vector<std::vector<double>> v(4, std::vector<double>(1000, 1.0));
    for (int i = 0; i < 3; ++i) {
        f.groups[i].async_wait_failure([&, i](ucx::error_code ec) { waits[i] = ec; });
        f.groups[i].async_allreduce(std::span<double>(v[i]), ucx::reduce_op::sum,
                                    [&, i](ucx::error_code ec) { r[i] = ec; });
    }
    // Rank 3 never joins the allreduce: it aborts instead.
    f.groups[3].abort();
    ASSERT_TRUE(run_until(f.io, [&] {
        return r[0] && r[1] && r[2] && waits[0] && waits[1] && waits[2];
    })) << "a rank did not learn of the failure";
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(*r[i], ucx::error::group_failed) << i << ": " << r[i]->message();
        EXPECT_EQ(*waits[i], ucx::error::group_failed) << i;
        EXPECT_FALSE(f.groups[i].is_open());
    }
    // Later operations fail at once.
    std::optional<ucx::error_code> later;
    f.groups[0].async_barrier([&](ucx::error_code ec) { later = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return later.has_value(); }));
    EXPECT_EQ(*later, ucx::error::group_failed);
}

TEST(group, ACollectivePastItsDeadlineFailsTheGroup) {
    ranks_fixture f(transport::tcp, 2);
    f.groups[0].set_timeout(std::chrono::milliseconds(200));
    std::optional<ucx::error_code> r, peer;
    // Rank 1 never calls the barrier.
    f.groups[0].async_barrier([&](ucx::error_code ec) { r = ec; });
    f.groups[1].async_wait_failure([&](ucx::error_code ec) { peer = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return r && peer; }));
    EXPECT_EQ(*r, ucx::error::group_timeout);
    EXPECT_EQ(*peer, ucx::error::group_failed);
}

TEST(group, HundredsOfQueuedCollectivesCompleteInOrderWithTheirOwnResults) {
    // Each rank starts 300 collectives at once (allreduces, with a broadcast
    // every seventh): they queue, run one at a time, reuse the state and
    // buffers of the ones before, and complete in the order called, each
    // with its own result.
    ranks_fixture f(transport::shared_memory, 3);
    const int n = f.size();
    constexpr int calls = 300;
    std::vector<std::vector<std::uint64_t>> in(n, std::vector<std::uint64_t>(calls * 2)),
        out(n, std::vector<std::uint64_t>(calls * 2));
    std::vector<std::vector<int>> order(n);
    int done = 0;
    for (int i = 0; i < n; ++i)
        for (int k = 0; k < calls; ++k) {
            auto h = [&, i, k](ucx::error_code ec) {
                EXPECT_FALSE(ec) << "rank " << i << " call " << k << ": " << ec.message();
                order[i].push_back(k);
                ++done;
            };
            in[i][2 * k] = static_cast<std::uint64_t>(1000 * i + k);
            in[i][2 * k + 1] = static_cast<std::uint64_t>(7 * k + i);
            if (k % 7 == 3) {
                // Broadcast from rank k % n: every rank's `out` gets the root's.
                const int root = k % n;
                if (i == root)
                    std::memcpy(&out[i][2 * k], &in[i][2 * k], 2 * sizeof(std::uint64_t));
                f.groups[i].async_broadcast(asio::buffer(&out[i][2 * k], 2 * sizeof(std::uint64_t)),
                                            root, h);
            } else {
                f.groups[i].async_allreduce(std::span<const std::uint64_t>(&in[i][2 * k], 2),
                                            std::span<std::uint64_t>(&out[i][2 * k], 2),
                                            ucx::reduce_op::sum, h);
            }
        }
    ASSERT_TRUE(run_until(
        f.io, [&] { return done == n * calls; }, std::chrono::seconds(120)));
    for (int i = 0; i < n; ++i) {
        std::vector<int> expected(calls);
        std::iota(expected.begin(), expected.end(), 0);
        EXPECT_EQ(order[i], expected) << "rank " << i;
        for (int k = 0; k < calls; ++k) {
            std::uint64_t a = 0, b = 0;
            if (k % 7 == 3) {
                const int root = k % n;
                a = static_cast<std::uint64_t>(1000 * root + k);
                b = static_cast<std::uint64_t>(7 * k + root);
            } else {
                for (int j = 0; j < n; ++j) {
                    a += static_cast<std::uint64_t>(1000 * j + k);
                    b += static_cast<std::uint64_t>(7 * k + j);
                }
            }
            ASSERT_EQ(out[i][2 * k], a) << "rank " << i << " call " << k;
            ASSERT_EQ(out[i][2 * k + 1], b) << "rank " << i << " call " << k;
        }
    }
}

TEST(group, ACollectiveCompletesOnItsHandlersExecutor) {
    // A handler with no executor of its own runs on the group's (the
    // io_context that runs the workers), inside the completion; one bound
    // to another executor runs there, never on the workers' thread.
    ranks_fixture f(transport::shared_memory, 2);
    asio::io_context other;
    std::array<std::uint32_t, 2> in{3, 4}, plain_out{}, bound_out{};
    int plain = 0, bound = 0;
    for (int i = 0; i < 2; ++i) {
        f.groups[i].async_allreduce(std::span<const std::uint32_t>(&in[i], 1),
                                    std::span<std::uint32_t>(&plain_out[i], 1), ucx::reduce_op::sum,
                                    [&](ucx::error_code ec) {
                                        EXPECT_FALSE(ec) << ec.message();
                                        EXPECT_TRUE(f.io.get_executor().running_in_this_thread());
                                        EXPECT_FALSE(other.get_executor().running_in_this_thread());
                                        ++plain;
                                    });
        f.groups[i].async_allreduce(std::span<const std::uint32_t>(&in[i], 1),
                                    std::span<std::uint32_t>(&bound_out[i], 1), ucx::reduce_op::max,
                                    asio::bind_executor(other, [&](ucx::error_code ec) {
                                        EXPECT_FALSE(ec) << ec.message();
                                        EXPECT_TRUE(other.get_executor().running_in_this_thread());
                                        EXPECT_FALSE(f.io.get_executor().running_in_this_thread());
                                        ++bound;
                                    }));
    }
    ASSERT_TRUE(run_until(f.io, [&] { return plain == 2; }));
    // The bound handlers wait for `other` to run, however long `io` runs.
    EXPECT_TRUE(run_ticks(f.io, 20));
    EXPECT_EQ(bound, 0);
    other.run();
    EXPECT_EQ(bound, 2);
    EXPECT_EQ(plain_out, (std::array<std::uint32_t, 2>{7, 7}));
    EXPECT_EQ(bound_out, (std::array<std::uint32_t, 2>{4, 4}));
}

TEST(group, SmallSendsThatUcxCompletesAtOnceNeedNoOperation) {
    // A root's 8-byte broadcasts to two ranks: each send completes inside
    // UCX's call (its short protocol), with no operation. Chained from their
    // handlers, the root's broadcasts end one after another in one loop, and
    // every 17th from a later pass (one operation): the root's worker
    // delivers about one operation per 17 broadcasts, not one per send, and
    // still gives the thread back. Every broadcast ends outside the call
    // that started it, in order, with every rank's value the root's.
    for (const transport t : {transport::shared_memory, transport::tcp}) {
        SCOPED_TRACE(t == transport::tcp ? "tcp" : "shared memory");
        ranks_fixture f(t, 3);
        std::array<std::uint64_t, 3> buf{7, 0, 0};
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
            f.groups[i].async_broadcast(asio::buffer(&buf[i], sizeof(buf[i])), 0, h);
        }));
        ASSERT_EQ(buf, (std::array<std::uint64_t, 3>{7, 7, 7}));
        constexpr int calls = 300;
        const std::size_t before = f.workers_[0]->stats().completions;
        std::array<std::vector<std::uint64_t>, 3> seen;
        bool inside = false;
        int finished = 0;
        std::function<void(int, int)> step = [&](int i, int k) {
            if (i == 0)
                buf[0] = 1000 + static_cast<std::uint64_t>(k);
            inside = true;
            f.groups[i].async_broadcast(asio::buffer(&buf[i], sizeof(buf[i])), 0,
                                        [&, i, k](ucx::error_code ec) {
                                            EXPECT_FALSE(ec) << ec.message();
                                            EXPECT_FALSE(inside) << "ran inside its initiation";
                                            seen[i].push_back(buf[i]);
                                            if (k + 1 < calls)
                                                step(i, k + 1);
                                            else
                                                ++finished;
                                        });
            inside = false;
        };
        for (int i = 0; i < 3; ++i)
            step(i, 0);
        ASSERT_TRUE(run_until(f.io, [&] { return finished == 3; }));
        for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(seen[i].size(), static_cast<std::size_t>(calls)) << "rank " << i;
            for (int k = 0; k < calls; ++k)
                ASSERT_EQ(seen[i][k], 1000 + static_cast<std::uint64_t>(k))
                    << "rank " << i << " call " << k;
        }
        const std::size_t delivered = f.workers_[0]->stats().completions - before;
        std::printf("root: %zu operations delivered for %d broadcasts to two ranks\n", delivered,
                    calls);
        // Over TCP a send may find the socket busy and go as an operation.
        if (t == transport::shared_memory) {
            EXPECT_LE(delivered, static_cast<std::size_t>(calls / 4));
        }
        EXPECT_GE(delivered, static_cast<std::size_t>(calls / 17));
    }
}

TEST(group, ManyCollectivesQueuedAtARootStartOneAfterAnother) {
    // 5,000 broadcasts started at once on the root, whose sends complete at
    // once: each ends from a later pass and the next starts then (no call
    // nested in the previous one's). The other rank receives them in order.
    ranks_fixture f(transport::shared_memory, 2);
    constexpr int calls = 5000;
    std::vector<std::uint32_t> values(calls), received(calls);
    std::iota(values.begin(), values.end(), 1u);
    int root_done = 0, leaf_done = 0;
    for (int k = 0; k < calls; ++k) {
        f.groups[0].async_broadcast(asio::buffer(&values[k], sizeof(values[k])), 0,
                                    [&, k](ucx::error_code ec) {
                                        EXPECT_FALSE(ec) << ec.message();
                                        EXPECT_EQ(root_done, k);
                                        ++root_done;
                                    });
        f.groups[1].async_broadcast(asio::buffer(&received[k], sizeof(received[k])), 0,
                                    [&](ucx::error_code ec) {
                                        EXPECT_FALSE(ec) << ec.message();
                                        ++leaf_done;
                                    });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return root_done == calls && leaf_done == calls; }));
    EXPECT_EQ(received, values);
}

TEST(group, ADeferredCollectiveHoldsItsGroupUntilLaunched) {
    // A collective made with asio::deferred keeps the group's state: launched
    // later, it runs; launched after its group object was destroyed, it fails
    // with operation_aborted (never a dangling group).
    ranks_fixture f(transport::shared_memory, 2);
    std::uint64_t value = 7, got = 0;
    auto root = f.groups[0].async_broadcast(asio::buffer(&value, sizeof(value)), 0, asio::deferred);
    auto leaf = f.groups[1].async_broadcast(asio::buffer(&got, sizeof(got)), 0, asio::deferred);
    std::optional<ucx::error_code> r0, r1;
    std::move(leaf)([&](ucx::error_code ec) { r1 = ec; });
    std::move(root)([&](ucx::error_code ec) { r0 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return r0.has_value() && r1.has_value(); }));
    EXPECT_FALSE(*r0) << r0->message();
    EXPECT_FALSE(*r1) << r1->message();
    EXPECT_EQ(got, 7u);

    auto late = f.groups[0].async_barrier(asio::deferred);
    f.groups[0] = ucx::group(); // closes rank 0's group
    std::optional<ucx::error_code> r;
    std::move(late)([&](ucx::error_code ec) { r = ec; });
    EXPECT_FALSE(r.has_value()) << "completed inside the launching call";
    ASSERT_TRUE(run_until(f.io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted) << r->message();
}

TEST(group, MoreDistinctCollectivesQueuedThanCachedPlansAllComplete) {
    // The group caches the plans of 4 distinct collectives; 12 distinct ones
    // (allreduces of 1 to 12 elements) queued at once use every slot and
    // then plans of their own. Each result is checked, then the same again
    // from the cache.
    ranks_fixture f(transport::shared_memory, 3);
    constexpr int kinds = 12;
    for (int pass = 0; pass < 2; ++pass) {
        SCOPED_TRACE("pass " + std::to_string(pass));
        std::vector<std::vector<std::int64_t>> in(3 * kinds), out(3 * kinds);
        int done = 0;
        for (int r = 0; r < 3; ++r)
            for (int k = 0; k < kinds; ++k) {
                auto& i = in[static_cast<std::size_t>(r * kinds + k)];
                auto& o = out[static_cast<std::size_t>(r * kinds + k)];
                i.resize(static_cast<std::size_t>(k + 1));
                o.resize(i.size());
                for (std::size_t e = 0; e < i.size(); ++e)
                    i[e] = static_cast<std::int64_t>(100 * r + 10 * k + static_cast<int>(e));
                f.groups[static_cast<std::size_t>(r)].async_allreduce(
                    std::span<const std::int64_t>(i), std::span<std::int64_t>(o),
                    ucx::reduce_op::sum, [&](ucx::error_code ec) {
                        EXPECT_FALSE(ec) << ec.message();
                        ++done;
                    });
            }
        ASSERT_TRUE(run_until(f.io, [&] { return done == 3 * kinds; }));
        for (int r = 0; r < 3; ++r)
            for (int k = 0; k < kinds; ++k)
                for (int e = 0; e <= k; ++e)
                    EXPECT_EQ(
                        out[static_cast<std::size_t>(r * kinds + k)][static_cast<std::size_t>(e)],
                        300 + 30 * k + 3 * e)
                        << "rank " << r << ", " << k + 1 << " elements, element " << e;
    }
}

TEST(group, ABroadcastOfAnotherSizeFailsWithCollectiveMismatch) {
    // The root sends 8 bytes, the other rank expects 16 (or the root 16 and
    // the other 8): the receiving rank's broadcast fails with
    // collective_mismatch, whether the message came before its receive (taken
    // at once when its size matches) or after; the group then fails on both
    // ranks. A broadcast whose sizes match, the message already there, is
    // received at once.
    struct case_t {
        std::size_t root_bytes, other_bytes;
        bool message_first;
    };
    for (const case_t c :
         {case_t{8, 16, true}, case_t{8, 16, false}, case_t{16, 8, true}, case_t{16, 8, false}}) {
        SCOPED_TRACE(std::to_string(c.root_bytes) + " against " + std::to_string(c.other_bytes) +
                     (c.message_first ? ", message first" : ", receive first"));
        ranks_fixture f(transport::shared_memory, 2);
        // Connections made, and a matching broadcast received at once.
        std::array<std::uint64_t, 2> warm{42, 0};
        std::optional<ucx::error_code> w0, w1;
        f.groups[0].async_broadcast(asio::buffer(&warm[0], 8), 0, [&](auto ec) { w0 = ec; });
        ASSERT_TRUE(run_until(f.io, [&] { return w0.has_value(); }));
        ASSERT_TRUE(run_ticks(f.io, 5)); // the message reaches rank 1 first
        f.groups[1].async_broadcast(asio::buffer(&warm[1], 8), 0, [&](auto ec) { w1 = ec; });
        ASSERT_TRUE(run_until(f.io, [&] { return w1.has_value(); }));
        ASSERT_FALSE(*w0);
        ASSERT_FALSE(*w1) << w1->message();
        ASSERT_EQ(warm[1], 42u);

        std::vector<std::byte> root(c.root_bytes, std::byte{1}), other(c.other_bytes);
        std::optional<ucx::error_code> r0, r1, failed0, failed1;
        f.groups[0].async_wait_failure([&](ucx::error_code ec) { failed0 = ec; });
        f.groups[1].async_wait_failure([&](ucx::error_code ec) { failed1 = ec; });
        auto start_other = [&] {
            f.groups[1].async_broadcast(asio::buffer(other), 0,
                                        [&](ucx::error_code ec) { r1 = ec; });
        };
        if (!c.message_first)
            start_other();
        f.groups[0].async_broadcast(asio::buffer(root), 0, [&](ucx::error_code ec) { r0 = ec; });
        if (c.message_first) {
            ASSERT_TRUE(run_ticks(f.io, 5));
            start_other();
        }
        ASSERT_TRUE(run_until(f.io, [&] { return r0 && r1 && failed0 && failed1; }));
        EXPECT_EQ(*r1, ucx::error::collective_mismatch) << r1->message();
        EXPECT_EQ(*failed1, ucx::error::group_failed) << failed1->message();
        EXPECT_EQ(*failed0, ucx::error::group_failed) << failed0->message();
    }
}

/// `n` ranks over shared memory whose groups check every collective's
/// arguments (group_options::verify_collectives) and have no deadline: a
/// collective that hangs fails the test.
struct verified_ranks {
    explicit verified_ranks(int n) : store(io.get_executor()) {
        for (int i = 0; i < n; ++i)
            workers.push_back(std::make_unique<ucx::worker>(ctx, io, group_worker_options()));
        ucx::group_options o;
        o.name = "verified";
        o.verify_collectives = true;
        joined = join_groups(io, store, workers, groups, o);
    }
    asio::io_context io;
    ucx::context ctx{options_for(transport::shared_memory)};
    ucx::memory_store store;
    std::vector<std::unique_ptr<ucx::worker>> workers;
    std::vector<ucx::group> groups;
    bool joined = false;
};

TEST(group, VerifiedCollectivesQueuedBackToBackKeepTheirOrderAndResults) {
    verified_ranks f(3);
    ASSERT_TRUE(f.joined);
    constexpr int rounds = 20;
    std::vector<std::vector<std::int32_t>> v(3 * rounds);
    std::vector<std::int64_t> b(3, 0);
    int done = 0;
    for (int r = 0; r < 3; ++r) {
        for (int k = 0; k < rounds; ++k) {
            auto& x = v[static_cast<std::size_t>(r * rounds + k)];
            x.assign(static_cast<std::size_t>(k + 1), r + k);
            f.groups[r].async_allreduce(std::span<std::int32_t>(x), ucx::reduce_op::sum,
                                        [&](ucx::error_code ec) {
                                            EXPECT_FALSE(ec) << ec.message();
                                            ++done;
                                        });
        }
        b[static_cast<std::size_t>(r)] = r == 1 ? 77 : 0;
        f.groups[r].async_broadcast(asio::buffer(&b[static_cast<std::size_t>(r)], 8), 1,
                                    [&](ucx::error_code ec) {
                                        EXPECT_FALSE(ec) << ec.message();
                                        ++done;
                                    });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return done == 3 * (rounds + 1); }));
    for (int r = 0; r < 3; ++r) {
        for (int k = 0; k < rounds; ++k)
            for (const auto e : v[static_cast<std::size_t>(r * rounds + k)])
                ASSERT_EQ(e, 3 * k + 3) << "rank " << r << ", collective " << k;
        EXPECT_EQ(b[static_cast<std::size_t>(r)], 77);
        EXPECT_TRUE(f.groups[r].is_open());
        // Each collective after its check: checks take the even numbers.
        const ucx::flight_record rec = f.groups[r].flight_record();
        EXPECT_EQ(rec.collectives, 2u * (rounds + 1));
        ASSERT_EQ(rec.events.size(), 2u * (rounds + 1));
        for (std::size_t i = 0; i < rec.events.size(); ++i) {
            const auto& e = rec.events[i];
            EXPECT_EQ(e.kind, i % 2 == 0 ? ucx::flight_event_kind::check
                                         : ucx::flight_event_kind::collective);
            EXPECT_EQ(e.seq, i);
            EXPECT_EQ(e.state, ucx::flight_state::completed);
        }
        // The metrics count the application's collectives only.
        const auto m = f.groups[r].metrics();
        EXPECT_EQ(
            m.collectives[static_cast<std::size_t>(ucx::collective_kind::allreduce)].completed,
            static_cast<std::uint64_t>(rounds));
        EXPECT_EQ(m.collectives[static_cast<std::size_t>(ucx::collective_kind::allgather)].started,
                  0u);
    }
}

TEST(group, VerifiedCollectivesThatDisagreeFailWithCollectiveMismatchOnEveryRank) {
    // Rank 2 allreduces 8 elements where the others allreduce 4; then a
    // broadcast whose root rank 1 sees differently. Without the check the
    // first would fail on some ranks only (a message of the wrong size), the
    // second hang; with it every rank fails at once, and says why.
    struct case_t {
        const char* name;
        std::function<void(ucx::group&, int, std::vector<std::int64_t>&,
                           std::function<void(ucx::error_code)>)>
            call;
        const char* named;
    };
    const std::vector<case_t> cases = {
        {"count",
         [](ucx::group& g, int r, std::vector<std::int64_t>& buf, auto h) {
             buf.assign(r == 2 ? 8 : 4, r);
             g.async_allreduce(std::span<std::int64_t>(buf), ucx::reduce_op::sum, std::move(h));
         },
         "collective 1: ranks 0, 1, 3 called allreduce of 32 bytes int64 sum; rank 2 called "
         "allreduce of 64 bytes int64 sum"},
        {"root",
         [](ucx::group& g, int r, std::vector<std::int64_t>& buf, auto h) {
             buf.assign(2, r);
             g.async_broadcast(asio::buffer(buf), r == 1 ? 1 : 0, std::move(h));
         },
         "collective 1: ranks 0, 2, 3 called broadcast to/from root 0 of 16 bytes; rank 1 "
         "called broadcast to/from root 1 of 16 bytes"},
        {"kind",
         [](ucx::group& g, int r, std::vector<std::int64_t>& buf, auto h) {
             buf.assign(1, r);
             if (r == 3)
                 g.async_barrier(std::move(h));
             else
                 g.async_allreduce(std::span<std::int64_t>(buf), ucx::reduce_op::max, std::move(h));
         },
         "collective 1: ranks 0, 1, 2 called allreduce of 8 bytes int64 max; rank 3 called "
         "barrier"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        verified_ranks f(4);
        ASSERT_TRUE(f.joined);
        std::vector<std::vector<std::int64_t>> bufs(4);
        std::vector<std::optional<ucx::error_code>> r(4), failed(4);
        for (int i = 0; i < 4; ++i) {
            f.groups[i].async_wait_failure([&, i](ucx::error_code ec) { failed[i] = ec; });
            c.call(f.groups[i], i, bufs[i], [&, i](ucx::error_code ec) { r[i] = ec; });
        }
        ASSERT_TRUE(run_until(f.io, [&] { return all_set(r) && all_set(failed); }));
        for (int i = 0; i < 4; ++i) {
            EXPECT_EQ(*r[i], ucx::error::collective_mismatch)
                << "rank " << i << ": " << r[i]->message();
            EXPECT_EQ(*failed[i], ucx::error::collective_mismatch) << "rank " << i;
            const ucx::flight_record rec = f.groups[i].flight_record();
            // A rank that saw the others' fingerprints names the calls (one
            // that heard of the failure from another first does not).
            if (rec.error.find("collective 1:") != std::string::npos) {
                EXPECT_NE(rec.error.find(c.named), std::string::npos) << rec.error;
            }
            ASSERT_EQ(rec.events.size(), 2u);
            EXPECT_EQ(rec.events[0].kind, ucx::flight_event_kind::check);
            EXPECT_EQ(rec.events[1].state, ucx::flight_state::failed);
        }
        // The first rank to compare the fingerprints named the calls.
        int named = 0;
        for (int i = 0; i < 4; ++i)
            named += f.groups[i].flight_record().error.find(c.named) != std::string::npos;
        EXPECT_GE(named, 1);
    }
}

TEST(group, AVerifiedCollectiveOneRankRefusesFailsTheOthersInsteadOfHanging) {
    // Rank 1 names a root the group does not have: it fails its call at
    // once (invalid_rank). Its fingerprint says so, and the others, who
    // would otherwise wait for rank 1 until a deadline (none is set here: a
    // hang fails the test), fail with collective_mismatch.
    verified_ranks f(4);
    ASSERT_TRUE(f.joined);
    std::vector<std::vector<std::int64_t>> bufs(4, std::vector<std::int64_t>(2, 7));
    std::vector<std::optional<ucx::error_code>> r(4), failed(4);
    for (int i = 0; i < 4; ++i) {
        f.groups[i].async_wait_failure([&, i](ucx::error_code ec) { failed[i] = ec; });
        f.groups[i].async_broadcast(asio::buffer(bufs[i]), i == 1 ? 9 : 0,
                                    [&, i](ucx::error_code ec) { r[i] = ec; });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return all_set(r) && all_set(failed); }));
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(*r[i], i == 1 ? ucx::error_code(ucx::error::invalid_rank)
                                : ucx::error_code(ucx::error::collective_mismatch))
            << "rank " << i << ": " << r[i]->message();
        EXPECT_EQ(*failed[i], ucx::error::collective_mismatch) << "rank " << i;
    }
    const std::string named = "collective 1: ranks 0, 2, 3 called broadcast to/from root 0 of 16 "
                              "bytes; rank 1 called broadcast to/from root 9 of 16 bytes, which it "
                              "refused as invalid";
    int naming = 0;
    std::string errors;
    for (int i = 0; i < 4; ++i) {
        naming += f.groups[i].flight_record().error.find(named) != std::string::npos;
        errors += f.groups[i].flight_record().error + "\n";
    }
    EXPECT_GE(naming, 1) << errors;
    const ucx::flight_record rec1 = f.groups[1].flight_record();
    ASSERT_EQ(rec1.events.size(), 2u);
    EXPECT_EQ(rec1.events[0].kind, ucx::flight_event_kind::check);
    EXPECT_EQ(rec1.events[1].state, ucx::flight_state::failed);
    EXPECT_EQ(rec1.events[1].seq, 1u) << "the number the others' collective has";
}

TEST(group, AVerifiedCollectiveEveryRankRefusesAlikeLeavesTheGroupWorking) {
    verified_ranks f(3);
    ASSERT_TRUE(f.joined);
    std::vector<std::vector<std::int64_t>> bufs(3, std::vector<std::int64_t>(3, 1));
    std::vector<std::optional<ucx::error_code>> r(3), b(3);
    for (int i = 0; i < 3; ++i) {
        // 24 bytes into 16: an allreduce whose result does not fit.
        f.groups[i].async_allreduce(std::span<const std::int64_t>(bufs[i]),
                                    std::span<std::int64_t>(bufs[i].data(), 2), ucx::reduce_op::sum,
                                    [&, i](ucx::error_code ec) { r[i] = ec; });
        f.groups[i].async_barrier([&, i](ucx::error_code ec) { b[i] = ec; });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return all_set(r) && all_set(b); }));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(*r[i], asio::error::invalid_argument) << "rank " << i;
        EXPECT_FALSE(*b[i]) << "rank " << i << ": " << b[i]->message();
    }
}

TEST(group, TheFlightRecordShowsMessagesAndCollectivesAsTheyRun) {
    ranks_fixture f(transport::shared_memory, 2);
    std::array<std::uint64_t, 2> word{5, 0};
    std::optional<ucx::error_code> sent, got, barrier0;
    // Rank 1 waits in a receive from rank 0 (tag 9) while rank 0 is in a
    // barrier rank 1 has not called.
    f.groups[1].async_recv(0, asio::buffer(&word[1], 8), 9,
                           [&](ucx::error_code ec, std::size_t) { got = ec; });
    f.groups[0].async_barrier([&](ucx::error_code ec) { barrier0 = ec; });
    ASSERT_TRUE(run_ticks(f.io, 20));
    const ucx::flight_record r0 = f.groups[0].flight_record();
    const ucx::flight_record r1 = f.groups[1].flight_record();
    EXPECT_EQ(r0.reason, "request");
    EXPECT_EQ(r0.group, "g");
    ASSERT_EQ(r0.events.size(), 1u);
    EXPECT_EQ(r0.events[0].state, ucx::flight_state::running);
    EXPECT_EQ(r0.events[0].waiting_for, (std::vector<int>{1}));
    ASSERT_EQ(r1.events.size(), 1u);
    EXPECT_EQ(r1.events[0].kind, ucx::flight_event_kind::recv);
    EXPECT_EQ(r1.events[0].peer, 0);
    EXPECT_EQ(r1.events[0].tag, 9u);
    EXPECT_EQ(r1.events[0].state, ucx::flight_state::running);
    {
        const std::vector<ucx::flight_record> both = {r0, r1};
        const auto d = ucx::diagnose(both);
        EXPECT_EQ(d.culprits, (std::vector<int>{1}));
        ASSERT_FALSE(d.findings.empty());
        EXPECT_EQ(d.findings[0], "rank 1 never called collective 0 (barrier), which rank 0 "
                                 "called (rank 0 waited in it)");
    }
    std::optional<ucx::error_code> barrier1;
    f.groups[0].async_send(1, asio::buffer(&word[0], 8), 9,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    f.groups[1].async_barrier([&](ucx::error_code ec) { barrier1 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent && got && barrier0 && barrier1; }));
    EXPECT_EQ(word[1], 5u);
    const ucx::flight_record after = f.groups[1].flight_record();
    ASSERT_EQ(after.events.size(), 2u);
    EXPECT_EQ(after.events[0].state, ucx::flight_state::completed);
    EXPECT_EQ(after.events[0].out_bytes, 8u);
    EXPECT_GE(after.events[0].end_us, after.events[0].start_us);
    EXPECT_EQ(after.events[1].state, ucx::flight_state::completed);
    EXPECT_TRUE(after.events[1].waiting_for.empty());
    EXPECT_EQ(ucx::group().flight_record().rank, -1);
}

/// Two connected endpoints over shared memory, for the endpoint's sends and
/// receives done inside the call (what a group's collectives use).
class endpoint_at_once : public testing::Test {
protected:
    void SetUp() override {
        std::tie(client, accepted) = connect_pair(io, server, client_worker);
        ASSERT_TRUE(client.is_open() && accepted.is_open());
    }

    asio::io_context io;
    ucx::context ctx{options_for(transport::shared_memory)};
    ucx::worker server_worker{ctx, io};
    ucx::worker client_worker{ctx, io};
    ucx::listener server{server_worker,
                         asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ucx::endpoint client, accepted;
};

TEST_F(endpoint_at_once, SendsASmallMessageInsideTheCallOrNothing) {
    // The immediate send of a connected endpoint: a small message goes inside
    // the call and arrives as a send's would; one above UCX's short limit is
    // not sent at all (false, nothing arrives); a closed endpoint sends none.
    const auto held = ucx::detail::access::get_impl(client); // outlives the close below
    ucx::detail::endpoint_impl& impl = *held;

    const std::uint64_t small = 0x1122334455667788u;
    ASSERT_TRUE(impl.send_now(&small, sizeof(small), 5));
    std::uint64_t in = 0;
    std::optional<ucx::error_code> r;
    std::size_t n = 0;
    std::uint32_t tag = 0;
    accepted.async_recv(asio::buffer(&in, sizeof(in)), 0, 0,
                        [&](ucx::error_code ec, std::size_t len, std::uint32_t sent_tag) {
                            r = ec;
                            n = len;
                            tag = sent_tag;
                        });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_FALSE(*r) << r->message();
    EXPECT_EQ(n, sizeof(small));
    EXPECT_EQ(in, small);
    EXPECT_EQ(tag, 5u);

    // 1 MiB: UCX would need a request (rendezvous), so nothing is sent.
    std::vector<char> big(1 << 20, 'x');
    EXPECT_FALSE(impl.send_now(big.data(), big.size(), 6));
    std::optional<ucx::error_code> probe;
    std::vector<char> sink(big.size());
    accepted.async_recv(asio::buffer(sink), 0, 0,
                        [&](ucx::error_code ec, std::size_t, std::uint32_t) { probe = ec; });
    EXPECT_TRUE(run_ticks(io, 20));
    EXPECT_FALSE(probe.has_value()) << "a message arrived that was not sent";

    client.abort();
    EXPECT_FALSE(impl.send_now(&small, sizeof(small), 5));
    accepted.abort();
    EXPECT_TRUE(run_until(io, [&] { return probe.has_value(); }));
}

TEST_F(endpoint_at_once, ReceivesAMessageAlreadyHereInsideTheCall) {
    // recv_at_once takes a message that UCX already holds inside the call,
    // with no operation, and says its length; a message not there yet is
    // left to an ordinary receive; a longer one than the buffer fails with
    // UCX's truncation, through the operation it is given.
    ucx::detail::endpoint_impl& impl = *ucx::detail::access::get_impl(accepted);
    using namespace ucx::detail;
    auto send = [&](const void* data, std::size_t size, std::uint32_t tag) {
        std::optional<ucx::error_code> sent;
        client.async_send(asio::buffer(data, size), tag,
                          [&](ucx::error_code ec, std::size_t) { sent = ec; });
        EXPECT_TRUE(run_until(io, [&] { return sent.has_value(); }));
        EXPECT_TRUE(run_ticks(io, 5)); // it reaches the other worker
    };

    // Nothing sent yet.
    std::uint64_t in = 0;
    ucs_status_ptr_t pending = nullptr;
    std::size_t length = 0;
    EXPECT_EQ(impl.recv_at_once(&in, sizeof(in), 9, pending, length),
              endpoint_impl::at_once::not_here);
    EXPECT_EQ(pending, nullptr);

    // Here: received in the call, with its length.
    const std::uint64_t value = 0xA1B2C3D4E5F60718u;
    send(&value, sizeof(value), 9);
    ASSERT_EQ(impl.recv_at_once(&in, sizeof(in), 9, pending, length), endpoint_impl::at_once::done);
    EXPECT_EQ(pending, nullptr);
    EXPECT_EQ(length, sizeof(in));
    EXPECT_EQ(in, value);

    // Taken once: a second receive finds nothing.
    EXPECT_EQ(impl.recv_at_once(&in, sizeof(in), 9, pending, length),
              endpoint_impl::at_once::not_here);

    // A shorter message than the buffer: received, its own length said.
    const std::uint64_t short_value = 77;
    send(&short_value, sizeof(short_value), 10);
    std::array<std::uint64_t, 2> wide{};
    ASSERT_EQ(impl.recv_at_once(wide.data(), sizeof(wide), 10, pending, length),
              endpoint_impl::at_once::done);
    EXPECT_EQ(length, sizeof(std::uint64_t));
    EXPECT_EQ(wide[0], 77u);

    // A longer one: taken, and its operation reports the truncation.
    const std::array<std::uint64_t, 2> long_value{1, 2};
    send(long_value.data(), sizeof(long_value), 11);
    ASSERT_EQ(impl.recv_at_once(&in, sizeof(in), 11, pending, length),
              endpoint_impl::at_once::pending);
    EXPECT_EQ(length, sizeof(long_value));
    int called = 0;
    std::optional<ucx::error_code> r;
    auto handler = [&](ucx::error_code ec, std::size_t, std::uint32_t) {
        ++called;
        r = ec;
    };
    using op_type =
        handler_operation<decltype(handler), worker_core::executor_type, endpoint_recv_result>;
    const auto& ex = core_of(*access::get_impl(server_worker)).get_executor();
    impl.adopt_recv(op_type::create(std::move(handler), ex, nullptr), pending);
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, ucx::errc::message_truncated) << r->message();
    EXPECT_TRUE(run_ticks(io, 5));
    EXPECT_EQ(called, 1);
    EXPECT_EQ(impl.recv_at_once(&in, sizeof(in), 11, pending, length),
              endpoint_impl::at_once::not_here);
}

TEST_F(endpoint_at_once, AMessageUcxCannotTakeAtOnceCompletesThroughItsAdoptedOperation) {
    // A rendezvous message (1 MiB) is here, announced with its size: UCX
    // answers the receive with a request. The operation attached to it then
    // completes once, with every byte, as an ordinary receive does.
    ucx::detail::endpoint_impl& impl = *ucx::detail::access::get_impl(accepted);
    using namespace ucx::detail;
    std::vector<std::uint32_t> out(1 << 18), in(out.size());
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = static_cast<std::uint32_t>(i * 2654435761u);
    const std::size_t bytes = out.size() * sizeof(std::uint32_t);
    std::optional<ucx::error_code> sent;
    client.async_send(asio::buffer(out.data(), bytes), 11,
                      [&](ucx::error_code ec, std::size_t) { sent = ec; });
    // The announcement reaches the receiving worker (the data waits for the
    // receive).
    ucs_status_ptr_t pending = nullptr;
    std::size_t length = 0;
    endpoint_impl::at_once got = endpoint_impl::at_once::not_here;
    ASSERT_TRUE(run_until(io, [&] {
        if (got == endpoint_impl::at_once::not_here)
            got = impl.recv_at_once(in.data(), bytes, 11, pending, length);
        return got != endpoint_impl::at_once::not_here;
    }));
    ASSERT_EQ(got, endpoint_impl::at_once::pending);
    ASSERT_NE(pending, nullptr);
    EXPECT_EQ(length, bytes);

    int called = 0;
    std::optional<ucx::error_code> r;
    std::size_t n = 0;
    std::uint32_t tag = 0;
    auto handler = [&](ucx::error_code ec, std::size_t len, std::uint32_t t) {
        ++called;
        r = ec;
        n = len;
        tag = t;
    };
    using op_type =
        handler_operation<decltype(handler), worker_core::executor_type, endpoint_recv_result>;
    const auto& ex = core_of(*access::get_impl(server_worker)).get_executor();
    impl.adopt_recv(op_type::create(std::move(handler), ex, nullptr), pending);
    ASSERT_TRUE(run_until(io, [&] { return r.has_value() && sent.has_value(); }));
    EXPECT_FALSE(*r) << r->message();
    EXPECT_FALSE(*sent) << sent->message();
    EXPECT_EQ(n, bytes);
    EXPECT_EQ(tag, 11u);
    EXPECT_TRUE(in == out) << "the adopted receive lost or changed bytes";
    EXPECT_TRUE(run_ticks(io, 5));
    EXPECT_EQ(called, 1);
}

TEST(group, EachCollectiveHasItsOwnDeadlineThroughOneTimer) {
    // Many collectives shorter than the timeout, then a shorter timeout and a
    // collective that cannot complete: it fails at its own deadline, not at
    // the one armed for an earlier collective.
    ranks_fixture f(transport::shared_memory, 2);
    for (auto& g : f.groups)
        g.set_timeout(std::chrono::seconds(3600));
    int done = 0;
    for (int round = 0; round < 50; ++round)
        for (auto& g : f.groups)
            g.async_barrier([&](ucx::error_code ec) {
                EXPECT_FALSE(ec) << ec.message();
                ++done;
            });
    ASSERT_TRUE(run_until(f.io, [&] { return done == 100; }));
    f.groups[0].set_timeout(std::chrono::milliseconds(200));
    std::optional<ucx::error_code> r, peer;
    const auto start = std::chrono::steady_clock::now();
    f.groups[0].async_barrier([&](ucx::error_code ec) { r = ec; });
    f.groups[1].async_wait_failure([&](ucx::error_code ec) { peer = ec; });
    ASSERT_TRUE(run_until(
        f.io, [&] { return r && peer; }, std::chrono::seconds(60)));
    EXPECT_EQ(*r, ucx::error::group_timeout);
    EXPECT_EQ(*peer, ucx::error::group_failed);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
}

TEST(group, JoinErrors) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::tcp));
    ucx::worker w(ctx, io, group_worker_options());
    ucx::memory_store store(io.get_executor());
    std::optional<ucx::error_code> r;
    ucx::group_options o;
    o.rank = 2;
    o.size = 2;
    ucx::async_join(w, store, o, [&](ucx::error_code ec, ucx::group) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, ucx::error::invalid_rank);
    // A rank that never comes: the store's timeout.
    r.reset();
    store.set_timeout(std::chrono::milliseconds(100));
    o.rank = 0;
    ucx::async_join(w, store, o, [&](ucx::error_code ec, ucx::group) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, ucx::error::store_timeout);
    // The worker can join again afterwards (the failed join released it).
    r.reset();
    o.size = 1;
    o.name = "alone";
    ucx::group g;
    ucx::async_join(w, store, o, [&](ucx::error_code ec, ucx::group gr) {
        r = ec;
        g = std::move(gr);
    });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_FALSE(*r) << r->message();
    std::vector<int> v{5};
    r.reset();
    g.async_allreduce(std::span<int>(v), ucx::reduce_op::sum, [&](ucx::error_code ec) { r = ec; });
    // One rank: nothing to send, yet the handler does not run in the call.
    EXPECT_FALSE(r.has_value());
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_FALSE(*r);
    EXPECT_EQ(v[0], 5);
    // Many in a row from a coroutine: no recursion.
    std::optional<int> rounds;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            int i = 0;
            for (; i < 100000; ++i)
                co_await g.async_allreduce(std::span<int>(v), ucx::reduce_op::max,
                                           asio::use_awaitable);
            rounds = i;
        },
        asio::detached);
    ASSERT_TRUE(run_until(io, [&] { return rounds.has_value(); }));
    EXPECT_EQ(*rounds, 100000);
}

namespace {

/// The result of one `async_recv_from_any`.
struct any_result {
    std::optional<ucx::error_code> ec;
    int from = -2;
    std::size_t n = 0;
    std::vector<char> data;

    explicit any_result(std::size_t size = 64) : data(size) {}
    auto handler() {
        return [this](ucx::error_code e, std::size_t k, int f) {
            ec = e;
            from = f;
            n = k;
        };
    }
    std::string text() const { return std::string(data.data(), n); }
};

std::string message_of(int rank, int k) {
    return "rank " + std::to_string(rank) + " message " + std::to_string(k);
}

} // namespace

TEST(group, ReceiveFromAnyRankTakesEachSendersMessagesInOrder) {
    ranks_fixture f(transport::tcp, 4);
    // Receives posted before anything was sent (and before some connections
    // exist), more than there are messages at first.
    constexpr int per_sender = 5;
    std::vector<std::unique_ptr<any_result>> r;
    for (int k = 0; k < 3 * per_sender; ++k) {
        r.push_back(std::make_unique<any_result>());
        f.groups[0].async_recv_from_any(asio::buffer(r.back()->data), 5, r.back()->handler());
    }
    std::vector<std::string> sent;
    sent.reserve(3 * per_sender); // no reallocation while sends are in flight
    int sends = 0;
    for (int k = 0; k < per_sender; ++k)
        for (int s = 1; s < 4; ++s) {
            sent.push_back(message_of(s, k));
            f.groups[s].async_send(0, asio::buffer(sent.back()), 5,
                                   [&](ucx::error_code ec, std::size_t) {
                                       EXPECT_FALSE(ec) << ec.message();
                                       ++sends;
                                   });
        }
    ASSERT_TRUE(run_until(f.io, [&] {
        return sends == 3 * per_sender &&
               std::all_of(r.begin(), r.end(), [](auto& x) { return x->ec.has_value(); });
    }));
    // The receives match in the order posted: per sender, its messages in
    // the order sent.
    std::vector<int> next(4, 0);
    for (auto& x : r) {
        ASSERT_FALSE(*x->ec) << x->ec->message();
        ASSERT_GE(x->from, 1);
        ASSERT_LE(x->from, 3);
        EXPECT_EQ(x->text(), message_of(x->from, next[x->from]));
        ++next[x->from];
    }
    EXPECT_EQ(next, (std::vector<int>{0, per_sender, per_sender, per_sender}));
}

// The worker's other connections cannot feed a receive from any rank, even
// with the very tag the group's messages carry on the wire: an application's
// listener connection on rank 0's worker sends with tag 5 while rank 0 waits
// for tag 5 from any rank; the application's own receive gets that message,
// the group's gets rank 1's.
TEST(group, ReceiveFromAnyRankIgnoresTheWorkersOtherConnections) {
    ranks_fixture f(transport::tcp, 2);
    ucx::listener app_listener(*f.workers_[0],
                               asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    ucx::worker app_client_worker(f.ctx_, f.io, group_worker_options());
    auto [app_client, app_server] = connect_pair(f.io, app_listener, app_client_worker);
    ASSERT_TRUE(app_client.is_open() && app_server.is_open());

    any_result group_r;
    f.groups[0].async_recv_from_any(asio::buffer(group_r.data), 5, group_r.handler());
    const std::string app_msg = "the application's own message";
    std::optional<ucx::error_code> app_sent;
    app_client.async_send(asio::buffer(app_msg), 5,
                          [&](ucx::error_code ec, std::size_t) { app_sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return app_sent.has_value(); }));
    ASSERT_FALSE(*app_sent);
    // Time for the message to arrive (and, were it matched, to complete the
    // group's receive).
    run_until(
        f.io, [&] { return group_r.ec.has_value(); }, std::chrono::milliseconds(200));
    EXPECT_FALSE(group_r.ec) << "the group's receive took another connection's message: "
                             << group_r.text();
    std::vector<char> app_in(64);
    std::optional<ucx::error_code> app_r;
    std::size_t app_n = 0;
    app_server.async_recv(asio::buffer(app_in), 5, ~std::uint32_t{0},
                          [&](ucx::error_code ec, std::size_t n, std::uint32_t) {
                              app_r = ec;
                              app_n = n;
                          });
    const std::string group_msg = message_of(1, 0);
    f.groups[1].async_send(0, asio::buffer(group_msg), 5, [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(f.io, [&] { return app_r && group_r.ec; }));
    ASSERT_FALSE(*app_r) << app_r->message();
    EXPECT_EQ(std::string(app_in.data(), app_n), app_msg);
    ASSERT_FALSE(*group_r.ec) << group_r.ec->message();
    EXPECT_EQ(group_r.from, 1);
    EXPECT_EQ(group_r.text(), group_msg);
}

TEST(group, ReceiveFromAnyRankOfLargeMessagesAndFromACoroutine) {
    ranks_fixture f(transport::shared_memory, 3);
    // Rendezvous-sized messages from ranks 1 and 2, received in a loop.
    constexpr std::size_t big = 1 << 20;
    std::vector<std::vector<char>> out{{}, pattern(big, 11), pattern(big, 12)};
    std::vector<std::vector<char>> out2{{}, pattern(big / 2, 21), pattern(big / 2, 22)};
    int sends = 0;
    for (int s = 1; s < 3; ++s) {
        f.groups[s].async_send(0, asio::buffer(out[s]), 1, [&](ucx::error_code ec, std::size_t) {
            EXPECT_FALSE(ec) << ec.message();
            ++sends;
        });
        f.groups[s].async_send(0, asio::buffer(out2[s]), 1, [&](ucx::error_code ec, std::size_t) {
            EXPECT_FALSE(ec) << ec.message();
            ++sends;
        });
    }
    std::vector<std::pair<int, std::vector<char>>> got;
    bool done = false;
    asio::co_spawn(
        f.io,
        [&]() -> asio::awaitable<void> {
            std::vector<char> buf(big);
            for (int k = 0; k < 4; ++k) {
                auto [n, from] = co_await f.groups[0].async_recv_from_any(asio::buffer(buf), 1,
                                                                          asio::use_awaitable);
                got.emplace_back(from, std::vector<char>(buf.begin(), buf.begin() + n));
            }
            done = true;
        },
        asio::detached);
    ASSERT_TRUE(run_until(f.io, [&] { return done && sends == 4; }));
    std::vector<int> seen(3, 0);
    for (auto& [from, data] : got) {
        ASSERT_TRUE(from == 1 || from == 2) << from;
        EXPECT_EQ(data, seen[from] == 0 ? out[from] : out2[from]) << "from " << from;
        ++seen[from];
    }
    EXPECT_EQ(seen, (std::vector<int>{0, 2, 2}));
}

TEST(group, ReceiveFromAnyRankTakesOnlyItsTagAndGroup) {
    ranks_fixture f(transport::tcp, 3);
    // A second group over the same ranks (its own id): same user tags.
    std::vector<ucx::group> twin(3);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_split(0, i, [&, i, h](ucx::error_code ec, ucx::group g) mutable {
            twin[i] = std::move(g);
            h(ec);
        });
    }));
    any_result a, b, twin_any;
    f.groups[0].async_recv_from_any(asio::buffer(a.data), 5, a.handler());
    const std::string other_tag = "tag 8 from rank 1", twin_msg = "twin tag 5 from rank 2",
                      mine = "tag 5 from rank 1";
    int sends = 0;
    auto counted = [&](ucx::error_code ec, std::size_t) {
        EXPECT_FALSE(ec) << ec.message();
        ++sends;
    };
    f.groups[1].async_send(0, asio::buffer(other_tag), 8, counted);
    twin[2].async_send(0, asio::buffer(twin_msg), 5, counted);
    ASSERT_TRUE(run_until(f.io, [&] { return sends == 2; }));
    f.groups[1].async_send(0, asio::buffer(mine), 5, counted);
    ASSERT_TRUE(run_until(f.io, [&] { return a.ec.has_value() && sends == 3; }));
    ASSERT_FALSE(*a.ec) << a.ec->message();
    EXPECT_EQ(a.from, 1);
    EXPECT_EQ(a.text(), mine);
    // The other tag's and the other group's messages are still there.
    std::optional<ucx::error_code> r8;
    std::size_t n8 = 0;
    f.groups[0].async_recv(1, asio::buffer(b.data), 8, [&](ucx::error_code ec, std::size_t n) {
        r8 = ec;
        n8 = n;
    });
    twin[0].async_recv_from_any(asio::buffer(twin_any.data), 5, twin_any.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return r8 && twin_any.ec; }));
    EXPECT_FALSE(*r8);
    EXPECT_EQ(std::string(b.data.data(), n8), other_tag);
    ASSERT_FALSE(*twin_any.ec) << twin_any.ec->message();
    EXPECT_EQ(twin_any.from, 2);
    EXPECT_EQ(twin_any.text(), twin_msg);
    // A receive from one rank and one from any rank compete: the first
    // posted takes the message.
    any_result later;
    std::optional<ucx::error_code> first;
    std::size_t first_n = 0;
    f.groups[0].async_recv(2, asio::buffer(b.data), 5, [&](ucx::error_code ec, std::size_t n) {
        first = ec;
        first_n = n;
    });
    f.groups[0].async_recv_from_any(asio::buffer(later.data), 5, later.handler());
    const std::string one = "first from rank 2", two = "second from rank 2";
    f.groups[2].async_send(0, asio::buffer(one), 5, counted);
    f.groups[2].async_send(0, asio::buffer(two), 5, counted);
    ASSERT_TRUE(run_until(f.io, [&] { return first && later.ec && sends == 5; }));
    EXPECT_FALSE(*first);
    EXPECT_EQ(std::string(b.data.data(), first_n), one);
    ASSERT_FALSE(*later.ec);
    EXPECT_EQ(later.from, 2);
    EXPECT_EQ(later.text(), two);
    // A tag above the largest is refused; the group stays usable.
    any_result bad;
    f.groups[0].async_recv_from_any(asio::buffer(bad.data), ucx::group_max_tag + 1, bad.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return bad.ec.has_value(); }));
    EXPECT_EQ(*bad.ec, asio::error::invalid_argument);
    EXPECT_EQ(bad.from, ucx::any_rank);
    EXPECT_TRUE(f.groups[0].is_open());
}

TEST(group, ReceiveFromAnyRankReportsTruncationAndGoesOn) {
    ranks_fixture f(transport::tcp, 3);
    any_result small(10), next;
    f.groups[0].async_recv_from_any(asio::buffer(small.data), 3, small.handler());
    const std::string big(100, 'x'), after = "the next message";
    int sends = 0;
    auto counted = [&](ucx::error_code, std::size_t) { ++sends; };
    f.groups[2].async_send(0, asio::buffer(big), 3, counted);
    ASSERT_TRUE(run_until(f.io, [&] { return small.ec.has_value(); }));
    EXPECT_EQ(*small.ec, ucx::errc::message_truncated) << small.ec->message();
    EXPECT_EQ(small.from, ucx::any_rank);
    EXPECT_EQ(small.n, 0u);
    EXPECT_TRUE(f.groups[0].is_open());
    f.groups[2].async_send(0, asio::buffer(after), 3, counted);
    f.groups[0].async_recv_from_any(asio::buffer(next.data), 3, next.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return next.ec && sends == 2; }));
    ASSERT_FALSE(*next.ec);
    EXPECT_EQ(next.from, 2);
    EXPECT_EQ(next.text(), after);
}

// The former name and completion order, kept for a release: the same
// operation, its handler's associations (here a cancellation slot) kept.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(group, TheDeprecatedReceiveFromAnyRankReportsTheSenderFirst) {
    ranks_fixture f(transport::tcp, 3);
    const std::string m = "from rank 2";
    std::optional<ucx::error_code> sent, got;
    int from = -2;
    std::size_t n = 0;
    std::vector<char> buf(64);
    f.groups[0].async_recv_any(asio::buffer(buf), 4,
                               [&](ucx::error_code ec, int who, std::size_t k) {
                                   got = ec;
                                   from = who;
                                   n = k;
                               });
    f.groups[2].async_send(0, asio::buffer(m), 4,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return got && sent; }));
    ASSERT_FALSE(*got) << got->message();
    EXPECT_EQ(from, 2);
    EXPECT_EQ(std::string(buf.data(), n), m);
    // With a coroutine: the tuple in the former order.
    std::optional<std::tuple<ucx::error_code, int, std::size_t>> co;
    asio::co_spawn(
        f.io,
        [&]() -> asio::awaitable<void> {
            co = co_await f.groups[0].async_recv_any(asio::buffer(buf), 4,
                                                     asio::as_tuple(asio::use_awaitable));
        },
        asio::detached);
    sent.reset();
    f.groups[1].async_send(0, asio::buffer(m), 4,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return co && sent; }));
    EXPECT_FALSE(std::get<0>(*co));
    EXPECT_EQ(std::get<1>(*co), 1);
    EXPECT_EQ(std::get<2>(*co), m.size());
    // The slot of the handler reaches the operation through the adapter.
    asio::cancellation_signal sig;
    got.reset();
    f.groups[0].async_recv_any(
        asio::buffer(buf), 4,
        asio::bind_cancellation_slot(sig.slot(), [&](ucx::error_code ec, int who, std::size_t) {
            got = ec;
            from = who;
        }));
    asio::post(f.io, [&] { sig.emit(asio::cancellation_type::partial); });
    ASSERT_TRUE(run_until(f.io, [&] { return got.has_value(); }));
    EXPECT_EQ(*got, asio::error::operation_aborted);
    EXPECT_EQ(from, ucx::any_rank);
    EXPECT_TRUE(f.groups[0].is_open());
}
#pragma GCC diagnostic pop

// Started from a thread that does not run the worker (here: while nothing
// runs it), a receive reaches the worker later; a cancellation emitted before
// then is delivered once it has started.
TEST(group, ACancellationBeforeTheDispatchedStartIsKept) {
    ranks_fixture f(transport::tcp, 2);
    asio::cancellation_signal by_rank, any;
    std::optional<ucx::error_code> got_rank;
    any_result got_any;
    std::vector<char> buf(16);
    f.groups[0].async_recv(
        1, asio::buffer(buf), 3,
        asio::bind_cancellation_slot(by_rank.slot(),
                                     [&](ucx::error_code ec, std::size_t) { got_rank = ec; }));
    f.groups[0].async_recv_from_any(asio::buffer(got_any.data), 3,
                                    asio::bind_cancellation_slot(any.slot(), got_any.handler()));
    by_rank.emit(asio::cancellation_type::terminal);
    any.emit(asio::cancellation_type::total);
    ASSERT_TRUE(run_until(f.io, [&] { return got_rank && got_any.ec; }));
    EXPECT_EQ(*got_rank, asio::error::operation_aborted);
    EXPECT_EQ(*got_any.ec, asio::error::operation_aborted);
}

TEST(group, ReceiveFromAnyRankIsCancellableAndLosesNothing) {
    ranks_fixture f(transport::tcp, 3);
    asio::cancellation_signal sig;
    any_result cancelled, next;
    f.groups[0].async_recv_from_any(asio::buffer(cancelled.data), 4,
                                    asio::bind_cancellation_slot(sig.slot(), cancelled.handler()));
    // It waits (the other ranks are there), until cancelled.
    asio::post(f.io, [&] { sig.emit(asio::cancellation_type::terminal); });
    ASSERT_TRUE(run_until(f.io, [&] { return cancelled.ec.has_value(); }));
    EXPECT_EQ(*cancelled.ec, asio::error::operation_aborted);
    EXPECT_EQ(cancelled.from, ucx::any_rank);
    EXPECT_TRUE(f.groups[0].is_open());
    // A message sent afterwards goes to the next receive.
    const std::string m = "after the cancel";
    std::optional<ucx::error_code> sent;
    f.groups[1].async_send(0, asio::buffer(m), 4,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    f.groups[0].async_recv_from_any(asio::buffer(next.data), 4, next.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return next.ec && sent; }));
    ASSERT_FALSE(*next.ec);
    EXPECT_EQ(next.from, 1);
    EXPECT_EQ(next.text(), m);
    // Cancelling after the message came changes nothing.
    asio::cancellation_signal late;
    any_result taken;
    const std::string m2 = "taken before the cancel";
    sent.reset();
    f.groups[2].async_send(0, asio::buffer(m2), 4,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent.has_value(); }));
    f.groups[0].async_recv_from_any(asio::buffer(taken.data), 4,
                                    asio::bind_cancellation_slot(late.slot(), taken.handler()));
    ASSERT_TRUE(run_until(f.io, [&] { return taken.ec.has_value(); }));
    late.emit(asio::cancellation_type::terminal);
    ASSERT_FALSE(*taken.ec);
    EXPECT_EQ(taken.from, 2);
    EXPECT_EQ(taken.text(), m2);
}

TEST(group, ReceivesFromAnyRankWaitWhileCollectivesRun) {
    ranks_fixture f(transport::shared_memory, 4);
    // Every rank waits for a user message with tag 0 while collectives (whose
    // sequence numbers start at 0) run.
    std::vector<std::unique_ptr<any_result>> r;
    for (int i = 0; i < 4; ++i) {
        r.push_back(std::make_unique<any_result>());
        f.groups[i].async_recv_from_any(asio::buffer(r[i]->data), 0, r[i]->handler());
    }
    for (int round = 0; round < 3; ++round) {
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
        std::vector<std::vector<int>> v(4, std::vector<int>(1000, round));
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
            f.groups[i].async_allreduce(std::span<int>(v[i]), ucx::reduce_op::sum, h);
        }));
        for (int i = 0; i < 4; ++i)
            EXPECT_EQ(v[i][999], 4 * round);
    }
    for (auto& x : r)
        EXPECT_FALSE(x->ec.has_value()) << "took a collective's message";
    // Each rank sends to the next one.
    std::vector<std::string> msgs;
    for (int i = 0; i < 4; ++i)
        msgs.push_back(message_of(i, 0));
    for (int i = 0; i < 4; ++i)
        f.groups[i].async_send((i + 1) % 4, asio::buffer(msgs[i]), 0,
                               [](ucx::error_code ec, std::size_t) { EXPECT_FALSE(ec); });
    ASSERT_TRUE(run_until(f.io, [&] {
        return std::all_of(r.begin(), r.end(), [](auto& x) { return x->ec.has_value(); });
    }));
    for (int i = 0; i < 4; ++i) {
        ASSERT_FALSE(*r[i]->ec) << r[i]->ec->message();
        EXPECT_EQ(r[i]->from, (i + 3) % 4);
        EXPECT_EQ(r[i]->text(), msgs[(i + 3) % 4]);
    }
}

TEST(group, AFailedGroupEndsItsReceivesFromAnyRank) {
    ranks_fixture f(transport::tcp, 4);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
    std::vector<std::unique_ptr<any_result>> r;
    for (int i = 0; i < 3; ++i) {
        r.push_back(std::make_unique<any_result>());
        f.groups[i].async_recv_from_any(asio::buffer(r[i]->data), 2, r[i]->handler());
    }
    // Rank 3 aborts: the others' groups fail. Rank 0 learns it from the
    // abort notice.
    f.groups[3].abort();
    ASSERT_TRUE(run_until(f.io, [&] {
        return std::all_of(r.begin(), r.end(), [](auto& x) { return x->ec.has_value(); });
    }));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(*r[i]->ec, ucx::error::group_failed) << i << ": " << r[i]->ec->message();
        EXPECT_EQ(r[i]->from, ucx::any_rank);
    }
    // Later ones fail at once.
    any_result later;
    f.groups[0].async_recv_from_any(asio::buffer(later.data), 2, later.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return later.ec.has_value(); }));
    EXPECT_EQ(*later.ec, ucx::error::group_failed);
}

TEST(group, AbortingOrClosingHereEndsReceivesFromAnyRank) {
    // Connections made first: UCX must not tear down a connection whose
    // wireup is still under way.
    ranks_fixture f(transport::tcp, 3);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
    any_result aborted;
    f.groups[1].async_recv_from_any(asio::buffer(aborted.data), 2, aborted.handler());
    f.groups[1].abort();
    EXPECT_FALSE(aborted.ec.has_value()); // never inside abort()
    ASSERT_TRUE(run_until(f.io, [&] { return aborted.ec.has_value(); }));
    EXPECT_EQ(*aborted.ec, asio::error::operation_aborted);

    ranks_fixture g(transport::tcp, 2, "g2");
    ranks_fixture::expect_ok(g.on_all([&](int i, auto h) { g.groups[i].async_barrier(h); }));
    any_result closed, destroyed;
    g.groups[0].async_recv_from_any(asio::buffer(closed.data), 2, closed.handler());
    std::optional<ucx::error_code> close_done;
    g.groups[0].async_close([&](ucx::error_code ec) { close_done = ec; });
    ASSERT_TRUE(run_until(g.io, [&] { return closed.ec && close_done; }));
    EXPECT_EQ(*closed.ec, asio::error::operation_aborted);
    g.groups[1].async_recv_from_any(asio::buffer(destroyed.data), 2, destroyed.handler());
    g.groups[1] = ucx::group();
    ASSERT_TRUE(run_until(g.io, [&] { return destroyed.ec.has_value(); }));
    EXPECT_EQ(*destroyed.ec, asio::error::operation_aborted);
}

TEST(group, ReceiveFromAnyRankWaitsForTheRanksThatStayThenEof) {
    ranks_fixture f(transport::tcp, 3);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
    // Rank 1 sends, then leaves; its message is still received.
    const std::string last = "rank 1's last word", late = "rank 2, after rank 1 left";
    std::optional<ucx::error_code> sent, closed1, eof1;
    f.groups[1].async_send(0, asio::buffer(last), 6,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent.has_value(); }));
    f.groups[1].async_close([&](ucx::error_code ec) { closed1 = ec; });
    std::vector<char> unused(8);
    f.groups[0].async_recv(1, asio::buffer(unused), 99,
                           [&](ucx::error_code ec, std::size_t) { eof1 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return closed1 && eof1; }));
    EXPECT_EQ(*eof1, asio::error::eof);
    any_result first, second, third;
    f.groups[0].async_recv_from_any(asio::buffer(first.data), 6, first.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return first.ec.has_value(); }));
    ASSERT_FALSE(*first.ec) << first.ec->message();
    EXPECT_EQ(first.from, 1);
    EXPECT_EQ(first.text(), last);
    // Rank 2 is still there: the next receive waits for it.
    f.groups[0].async_recv_from_any(asio::buffer(second.data), 6, second.handler());
    sent.reset();
    f.groups[2].async_send(0, asio::buffer(late), 6,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return second.ec && sent; }));
    ASSERT_FALSE(*second.ec) << second.ec->message();
    EXPECT_EQ(second.from, 2);
    EXPECT_EQ(second.text(), late);
    // Once rank 2 leaves too: eof.
    f.groups[0].async_recv_from_any(asio::buffer(third.data), 6, third.handler());
    std::optional<ucx::error_code> closed2;
    f.groups[2].async_close([&](ucx::error_code ec) { closed2 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return third.ec && closed2; }));
    EXPECT_EQ(*third.ec, asio::error::eof) << third.ec->message();
    EXPECT_EQ(third.from, ucx::any_rank);
    // And at once afterwards.
    any_result fourth;
    f.groups[0].async_recv_from_any(asio::buffer(fourth.data), 6, fourth.handler());
    ASSERT_TRUE(run_until(f.io, [&] { return fourth.ec.has_value(); }));
    EXPECT_EQ(*fourth.ec, asio::error::eof);
}

// ---- device buffers ----
//
// Where the library is built with CUDA and a device exists, a collective on
// device memory runs on host copies of it (its arithmetic is the host's):
// here a classifier calls some host buffers device memory and a fake copy
// engine copies them, so the whole path runs without a GPU.

namespace {

/// Every rank of `f` stages the buffers `device` calls device memory, with
/// an engine of its own.
std::vector<std::shared_ptr<ucx::detail::fake_copy_engine>> use_fake_device(ranks_fixture& f,
                                                                            fake_device& device) {
    std::vector<std::shared_ptr<ucx::detail::fake_copy_engine>> engines;
    ucx::detail::device_staging::settings s;
    s.chunk = 4096; // several copies per buffer
    for (auto& w : f.workers_) {
        engines.push_back(std::make_shared<ucx::detail::fake_copy_engine>());
        ucx::detail::use_device_staging(
            *ucx::detail::access::get_impl(*w),
            [&device](const void* p) { return device.classify(p); }, engines.back(), s);
    }
    return engines;
}

} // namespace

TEST(group, CollectivesOnDeviceBuffersRunOnHostCopiesOfThem) {
    for (transport t : {transport::tcp, transport::shared_memory}) {
        SCOPED_TRACE(to_string(t));
        ranks_fixture f(t, 3);
        fake_device device;
        const auto engines = use_fake_device(f, device);
        const int n = f.size();
        constexpr std::size_t count = 3000; // 12 KB of floats: several copies each way

        // Allreduce in place on device memory, and from host into device memory.
        std::vector<std::vector<float>> data(n, std::vector<float>(count));
        std::vector<std::vector<float>> host_in(n, std::vector<float>(count)),
            device_out(n, std::vector<float>(count, -1.0f));
        std::vector<float> expected(count, 0.0f);
        for (int i = 0; i < n; ++i) {
            for (std::size_t k = 0; k < count; ++k) {
                data[i][k] = value_for<float>(i, k);
                host_in[i][k] = data[i][k];
                expected[k] += data[i][k];
            }
            device.mark(data[i]);
            device.mark(device_out[i]);
        }
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
            f.groups[i].async_allreduce(std::span<float>(data[i]), ucx::reduce_op::sum, h);
        }));
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
            f.groups[i].async_allreduce(std::span<const float>(host_in[i]),
                                        std::span<float>(device_out[i]), ucx::reduce_op::sum, h);
        }));
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(data[i], expected) << "rank " << i;
            EXPECT_EQ(device_out[i], expected) << "rank " << i;
        }

        // Broadcast from a device buffer into device buffers.
        std::vector<std::vector<char>> bcast;
        for (int i = 0; i < n; ++i)
            bcast.push_back(device.make(10000, i == 1 ? 77 : 5));
        const std::vector<char> root_data = bcast[1];
        ranks_fixture::expect_ok(f.on_all(
            [&](int i, auto h) { f.groups[i].async_broadcast(asio::buffer(bcast[i]), 1, h); }));
        for (int i = 0; i < n; ++i)
            EXPECT_EQ(bcast[i], root_data) << "rank " << i;

        // Allgather from device memory into host (rank 0) or device memory.
        std::vector<std::vector<char>> blocks, gathered;
        std::vector<char> all;
        for (int i = 0; i < n; ++i) {
            blocks.push_back(device.make(5000, 200 + i));
            all.insert(all.end(), blocks.back().begin(), blocks.back().end());
        }
        for (int i = 0; i < n; ++i)
            gathered.push_back(i == 0 ? std::vector<char>(all.size()) : device.make(all.size(), 0));
        ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
            f.groups[i].async_allgather(asio::buffer(blocks[i]), asio::buffer(gathered[i]), h);
        }));
        for (int i = 0; i < n; ++i)
            EXPECT_EQ(gathered[i], all) << "rank " << i;

        // Every engine copied both ways: the host copies were really used.
        for (int i = 0; i < n; ++i) {
            EXPECT_GT(engines[i]->device_to_host(), 0u) << "rank " << i;
            EXPECT_GT(engines[i]->host_to_device(), 0u) << "rank " << i;
            EXPECT_GT(f.workers_[i]->stats().staged_operations, 0u) << "rank " << i;
        }
    }
}

// A rank whose device input cannot be copied fails its collective with the
// copy's error; the group fails, and every other rank learns it, no one
// waits for the missing contribution.
TEST(group, AFailedDeviceCopyFailsTheCollectiveOnEveryRank) {
    ranks_fixture f(transport::tcp, 3);
    fake_device device;
    const auto engines = use_fake_device(f, device);
    engines[1]->fail_start(0, ucx::make_error_code(ucx::error::cuda_error));
    std::vector<std::vector<double>> data(3, std::vector<double>(100, 1.0));
    device.mark(data[1]);
    const auto r = f.on_all([&](int i, auto h) {
        f.groups[i].async_allreduce(std::span<double>(data[i]), ucx::reduce_op::sum, h);
    });
    EXPECT_EQ(r[1], ucx::error::cuda_error) << r[1].message();
    EXPECT_EQ(r[0], ucx::error::group_failed) << r[0].message();
    EXPECT_EQ(r[2], ucx::error::group_failed) << r[2].message();
    // Nothing half-done is reported as a result.
    EXPECT_EQ(data[1], std::vector<double>(100, 1.0));
}

// Messages by rank into and from device memory, from any rank too.
TEST(group, MessagesByRankFromAndIntoDeviceBuffers) {
    ranks_fixture f(transport::shared_memory, 3);
    fake_device device;
    const auto engines = use_fake_device(f, device);
    std::vector<char> from1 = device.make(20000, 1), from2 = device.make(300, 2);
    std::vector<char> into = device.make(20000, 0), any = device.make(300, 0);
    std::optional<ucx::error_code> sent1, sent2, got, got_any;
    std::size_t n = 0, n_any = 0;
    int from = -1;
    f.groups[0].async_recv(1, asio::buffer(into), 4, [&](ucx::error_code ec, std::size_t len) {
        got = ec;
        n = len;
    });
    f.groups[0].async_recv_from_any(asio::buffer(any), 5,
                                    [&](ucx::error_code ec, std::size_t len, int who) {
                                        got_any = ec;
                                        from = who;
                                        n_any = len;
                                    });
    f.groups[1].async_send(0, asio::buffer(from1), 4,
                           [&](ucx::error_code ec, std::size_t) { sent1 = ec; });
    f.groups[2].async_send(0, asio::buffer(from2), 5,
                           [&](ucx::error_code ec, std::size_t) { sent2 = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent1 && sent2 && got && got_any; }));
    ASSERT_FALSE(*got) << got->message();
    ASSERT_FALSE(*got_any) << got_any->message();
    EXPECT_FALSE(*sent1);
    EXPECT_FALSE(*sent2);
    EXPECT_EQ(n, from1.size());
    EXPECT_EQ(into, from1);
    EXPECT_EQ(from, 2);
    EXPECT_EQ(n_any, from2.size());
    EXPECT_EQ(any, from2);
    EXPECT_GT(engines[0]->host_to_device(), 0u);
    EXPECT_GT(engines[1]->device_to_host(), 0u);
    EXPECT_GT(engines[2]->device_to_host(), 0u);
}

// Connections on first use: after the join no rank holds any; an allreduce
// connects only the pairs its algorithm uses, and every result is right;
// a higher rank's send waits for the lower rank's receive, which connects;
// a receive from any rank connects to the higher ranks so they can send.
// Cancellation of messages by rank: a receive at every type; a send that UCX
// holds only at terminal, which fails the group (its connection closes);
// either one while it waits for its connection at every type, unsent.
TEST(group, MessagesByRankHonourTheirCancellationSlot) {
    ranks_fixture f(transport::tcp, 2);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) { f.groups[i].async_barrier(h); }));
    // A receive, cancelled with partial; a message sent afterwards goes to
    // the next receive.
    asio::cancellation_signal sig;
    std::vector<char> in(64);
    std::optional<ucx::error_code> r;
    f.groups[0].async_recv(
        1, asio::buffer(in), 5,
        asio::bind_cancellation_slot(sig.slot(), [&](ucx::error_code ec, std::size_t) { r = ec; }));
    ASSERT_TRUE(run_ticks(f.io));
    ASSERT_FALSE(r.has_value());
    sig.emit(asio::cancellation_type::partial);
    ASSERT_TRUE(run_until(f.io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    auto msg = pattern(64, 12);
    std::optional<ucx::error_code> sent, got;
    f.groups[1].async_send(0, asio::buffer(msg), 5,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    f.groups[0].async_recv(1, asio::buffer(in), 5,
                           [&](ucx::error_code ec, std::size_t) { got = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent && got; }));
    EXPECT_FALSE(*got) << got->message();
    EXPECT_EQ(in, msg);

    // A rendezvous send rank 1 never receives: partial leaves it, terminal
    // ends it and fails the group on both ranks.
    auto big = pattern(16 << 20, 13);
    asio::cancellation_signal send_sig;
    std::optional<ucx::error_code> big_sent, peer_failure;
    f.groups[1].async_wait_failure([&](ucx::error_code ec) { peer_failure = ec; });
    f.groups[0].async_send(
        1, asio::buffer(big), 6,
        asio::bind_cancellation_slot(send_sig.slot(),
                                     [&](ucx::error_code ec, std::size_t) { big_sent = ec; }));
    ASSERT_TRUE(run_ticks(f.io));
    ASSERT_FALSE(big_sent.has_value()) << "the send did not wait for the receiver";
    send_sig.emit(asio::cancellation_type::partial);
    ASSERT_TRUE(run_ticks(f.io));
    EXPECT_FALSE(big_sent.has_value());
    send_sig.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(f.io, [&] { return big_sent && peer_failure; }));
    EXPECT_TRUE(*big_sent == asio::error::operation_aborted ||
                *big_sent == ucx::error::group_failed)
        << big_sent->message();
    EXPECT_FALSE(f.groups[0].is_open());
    EXPECT_TRUE(*peer_failure) << "rank 1 did not see the group fail";
}

TEST(group, AMessageWaitingForItsConnectionIsCancelledUnsent) {
    ranks_fixture f(transport::tcp, 2, "lazy-cancel", true);
    // Rank 1 to rank 0: the lower rank connects, on its first message to or
    // from rank 1, so this send waits.
    for (auto type : {asio::cancellation_type::partial, asio::cancellation_type::terminal}) {
        asio::cancellation_signal sig;
        char out = 1;
        std::optional<ucx::error_code> s;
        f.groups[1].async_send(0, asio::buffer(&out, 1), 7,
                               asio::bind_cancellation_slot(
                                   sig.slot(), [&](ucx::error_code ec, std::size_t) { s = ec; }));
        ASSERT_TRUE(run_ticks(f.io));
        ASSERT_FALSE(s.has_value());
        EXPECT_EQ(f.groups[1].connections(), 0);
        sig.emit(type);
        ASSERT_TRUE(run_until(f.io, [&] { return s.has_value(); }));
        EXPECT_EQ(*s, asio::error::operation_aborted);
        EXPECT_TRUE(f.groups[1].is_open());
    }
    // Neither was sent: the first message rank 0 gets is the next one.
    char out = 2, in = 0;
    std::optional<ucx::error_code> s, r;
    f.groups[1].async_send(0, asio::buffer(&out, 1), 7,
                           [&](ucx::error_code ec, std::size_t) { s = ec; });
    f.groups[0].async_recv(1, asio::buffer(&in, 1), 7,
                           [&](ucx::error_code ec, std::size_t) { r = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return s && r; }));
    EXPECT_FALSE(*r) << r->message();
    EXPECT_EQ(in, 2);
}

TEST(group, ATimerBoundsACollectiveByAbortingTheGroup) {
    using namespace asio::experimental::awaitable_operators;
    ranks_fixture f(transport::tcp, 2);
    std::optional<std::size_t> winner;
    std::optional<ucx::error_code> peer;
    f.groups[1].async_wait_failure([&](ucx::error_code ec) { peer = ec; });
    // Rank 1 never calls the barrier; rank 0 gives up after 100 ms.
    asio::co_spawn(
        f.io,
        [&]() -> asio::awaitable<void> {
            asio::steady_timer timer(f.io, std::chrono::milliseconds(100));
            auto r = co_await (f.groups[0].async_barrier(asio::use_awaitable) ||
                               timer.async_wait(asio::use_awaitable));
            winner = r.index();
        },
        asio::detached);
    ASSERT_TRUE(run_until(f.io, [&] { return winner && peer; }));
    EXPECT_EQ(*winner, 1u);
    EXPECT_FALSE(f.groups[0].is_open());
    EXPECT_EQ(*peer, ucx::error::group_failed);
    // partial and total leave a collective alone.
    ranks_fixture g(transport::tcp, 2, "g2");
    asio::cancellation_signal sig;
    std::optional<ucx::error_code> b0;
    g.groups[0].async_barrier(
        asio::bind_cancellation_slot(sig.slot(), [&](ucx::error_code ec) { b0 = ec; }));
    ASSERT_TRUE(run_ticks(g.io));
    sig.emit(asio::cancellation_type::partial);
    sig.emit(asio::cancellation_type::total);
    ASSERT_TRUE(run_ticks(g.io));
    EXPECT_FALSE(b0.has_value());
    std::optional<ucx::error_code> b1;
    g.groups[1].async_barrier([&](ucx::error_code ec) { b1 = ec; });
    ASSERT_TRUE(run_until(g.io, [&] { return b0 && b1; }));
    EXPECT_FALSE(*b0) << b0->message();
    EXPECT_FALSE(*b1) << b1->message();
}

// The io_context runs on a thread of its own; every operation starts from
// this one, as the core's may.
TEST(group, OperationsStartFromAnyThread) {
    ranks_fixture f(transport::shared_memory, 2);
    auto work = asio::make_work_guard(f.io);
    std::thread runner([&] { f.io.run(); });
    auto ready = [](auto& fut) {
        return fut.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    };
    std::vector<std::vector<int>> v(2, std::vector<int>(100, 1));
    auto a0 =
        f.groups[0].async_allreduce(std::span<int>(v[0]), ucx::reduce_op::sum, asio::use_future);
    auto a1 =
        f.groups[1].async_allreduce(std::span<int>(v[1]), ucx::reduce_op::sum, asio::use_future);
    const bool reduced = ready(a0) && ready(a1);
    std::vector<char> out = pattern(3000, 5), in(3000);
    auto s = f.groups[0].async_send(1, asio::buffer(out), 3, asio::use_future);
    auto r = f.groups[1].async_recv(0, asio::buffer(in), 3, asio::use_future);
    const bool exchanged = ready(s) && ready(r);
    auto b0 = f.groups[0].async_barrier(asio::use_future);
    auto b1 = f.groups[1].async_barrier(asio::use_future);
    const bool met = ready(b0) && ready(b1);
    work.reset();
    f.io.stop();
    runner.join();
    ASSERT_TRUE(reduced && exchanged && met) << "an operation started here never completed";
    EXPECT_NO_THROW(a0.get());
    EXPECT_NO_THROW(a1.get());
    EXPECT_EQ(v[0], std::vector<int>(100, 2));
    EXPECT_EQ(v[1], std::vector<int>(100, 2));
    EXPECT_EQ(s.get(), out.size());
    EXPECT_EQ(r.get(), in.size());
    EXPECT_EQ(in, out);
    EXPECT_NO_THROW(b0.get());
    EXPECT_NO_THROW(b1.get());
}

TEST(group, LazyConnectionsAreMadeOnFirstUse) {
    ranks_fixture f(transport::tcp, 8, "lazy", true);
    ASSERT_TRUE(run_ticks(f.io));
    for (int i = 0; i < 8; ++i)
        EXPECT_EQ(f.groups[i].connections(), 0) << "rank " << i;

    // Recursive doubling over 8 ranks: each rank talks to 3 partners.
    std::vector<std::vector<int>> v(8, std::vector<int>(4));
    for (int i = 0; i < 8; ++i)
        std::iota(v[i].begin(), v[i].end(), i);
    ranks_fixture::expect_ok(f.on_all([&](int i, auto h) {
        f.groups[i].async_allreduce(std::span<int>(v[i]), ucx::reduce_op::sum, h);
    }));
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(v[i], (std::vector<int>{28, 36, 44, 52})) << "rank " << i;
        EXPECT_EQ(f.groups[i].connections(), 3) << "rank " << i;
    }

    // Rank 6 to rank 1: the send waits until rank 1 receives from 6.
    std::optional<ucx::error_code> sent, got;
    std::vector<char> msg = pattern(5000, 61), in(5000);
    f.groups[6].async_send(1, asio::buffer(msg), 3,
                           [&](ucx::error_code ec, std::size_t) { sent = ec; });
    ASSERT_TRUE(run_ticks(f.io));
    EXPECT_EQ(f.groups[1].connections(), 3);
    f.groups[1].async_recv(6, asio::buffer(in), 3,
                           [&](ucx::error_code ec, std::size_t) { got = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return sent && got; }));
    EXPECT_FALSE(*sent) << sent->message();
    EXPECT_FALSE(*got) << got->message();
    EXPECT_EQ(in, msg);
    EXPECT_EQ(f.groups[1].connections(), 4);

    // A receive from any rank on rank 0 takes higher ranks' messages.
    std::vector<any_result> any(2);
    for (auto& a : any)
        f.groups[0].async_recv_from_any(asio::buffer(a.data), 4, a.handler());
    const std::string texts[] = {message_of(5, 0), message_of(7, 0)};
    f.groups[5].async_send(0, asio::buffer(texts[0]), 4, [](ucx::error_code, std::size_t) {});
    f.groups[7].async_send(0, asio::buffer(texts[1]), 4, [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(f.io, [&] { return any[0].ec && any[1].ec; }));
    std::set<int> senders;
    for (const auto& a : any) {
        ASSERT_FALSE(*a.ec) << a.ec->message();
        EXPECT_EQ(a.text(), message_of(a.from, 0));
        senders.insert(a.from);
    }
    EXPECT_EQ(senders, (std::set<int>{5, 7}));
    EXPECT_EQ(f.groups[0].connections(), 7);
}
