// ucx::group between workers of one process (one io_context, a memory_store):
// joining, messaging by rank, every collective on every type checked against a
// local computation, over TCP and shared memory, with 2, 3, 4 and 8 ranks;
// split; two groups at once; failure of a rank; bad arguments. The groups of
// separate processes are in group_process_test.cpp.
#include "test_support.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstring>
#include <numeric>

using namespace ucx_test;

namespace {

ucx::worker_options group_worker_options() {
    ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
    o.peer_timeout = std::chrono::milliseconds(1000);
    return o;
}

/// `n` ranks: a worker each, joined through one memory_store.
class ranks_fixture {
public:
    ranks_fixture(transport t, int n, std::string name = "g")
        : ctx_(options_for(t)), store_(io.get_executor()) {
        for (int i = 0; i < n; ++i)
            workers_.push_back(std::make_unique<ucx::worker>(ctx_, io, group_worker_options()));
        join(name);
    }

    void join(const std::string& name) {
        const int n = static_cast<int>(workers_.size());
        std::vector<std::optional<ucx::error_code>> done(n);
        groups.clear();
        groups.resize(n);
        for (int i = 0; i < n; ++i) {
            ucx::group_options o;
            o.rank = i;
            o.size = n;
            o.name = name;
            ucx::async_join(*workers_[i], store_, o, [&, i](ucx::error_code ec, ucx::group g) {
                done[i] = ec;
                groups[i] = std::move(g);
            });
        }
        ASSERT_TRUE(run_until(io, [&] {
            return std::all_of(done.begin(), done.end(), [](auto& d) { return d.has_value(); });
        }));
        for (int i = 0; i < n; ++i) {
            ASSERT_FALSE(*done[i]) << done[i]->message();
            ASSERT_EQ(groups[i].rank(), i);
            ASSERT_EQ(groups[i].size(), n);
        }
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
