// The collectives' plans, run against each other in memory: every rank's plan
// steps through its rounds, messages wait in per-pair queues, and the results
// are checked against a local computation. No UCX.
#include "group/collective_plan.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <random>

namespace coll = ucx::detail::coll;
using ucx::datatype;
using ucx::reduce_op;

namespace {

struct rank_state {
    coll::plan plan;
    std::vector<std::byte> in, out, scratch;
    std::size_t round = 0;
    bool posted = false;
    std::vector<bool> done;
};

std::byte* at(rank_state& r, const coll::region& g) {
    switch (g.buf) {
    case coll::buffer::in:
        return r.in.data() + g.offset;
    case coll::buffer::out:
        return r.out.data() + g.offset;
    case coll::buffer::scratch:
        return r.scratch.data() + g.offset;
    }
    return nullptr;
}

bool overlaps(const coll::region& a, const coll::region& b) {
    return a.buf == b.buf && a.length > 0 && b.length > 0 && a.offset < b.offset + b.length &&
           b.offset < a.offset + a.length;
}

/// Runs every rank's plan to the end; returns the number of steps, or fails
/// the test on a deadlock, a size mismatch or a region sent and received in
/// one round.
void run(std::vector<rank_state>& ranks, datatype t = datatype::uint8,
         reduce_op op = reduce_op::sum) {
    const int n = static_cast<int>(ranks.size());
    std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> wire;
    for (auto& r : ranks) {
        r.scratch.resize(r.plan.scratch_bytes);
        ASSERT_GE(r.out.size(), r.plan.out_bytes);
        for (const auto& c : r.plan.prologue)
            if (c.from.length > 0)
                std::memmove(at(r, c.to), at(r, c.from), c.from.length);
    }
    for (int guard = 0; guard < 100000; ++guard) {
        bool progress = false, all_done = true;
        for (int i = 0; i < n; ++i) {
            rank_state& r = ranks[i];
            if (r.round >= r.plan.rounds.size())
                continue;
            all_done = false;
            const auto& rd = r.plan.rounds[r.round];
            if (!r.posted) {
                r.posted = true;
                r.done.assign(rd.transfers.size(), false);
                for (std::size_t a = 0; a < rd.transfers.size(); ++a) {
                    for (std::size_t b = 0; b < rd.transfers.size(); ++b) {
                        if (rd.transfers[a].send && !rd.transfers[b].send) {
                            ASSERT_FALSE(overlaps(rd.transfers[a].data, rd.transfers[b].data))
                                << "rank " << i << " round " << r.round;
                        }
                    }
                }
                for (std::size_t k = 0; k < rd.transfers.size(); ++k) {
                    const auto& tr = rd.transfers[k];
                    ASSERT_GE(tr.peer, 0);
                    ASSERT_LT(tr.peer, n);
                    ASSERT_NE(tr.peer, i);
                    if (tr.send) {
                        const std::byte* p = at(r, tr.data);
                        wire[{i, tr.peer}].emplace_back(p, p + (p ? tr.data.length : 0));
                        r.done[k] = true;
                    }
                }
                progress = true;
            }
            for (std::size_t k = 0; k < rd.transfers.size(); ++k) {
                const auto& tr = rd.transfers[k];
                if (r.done[k] || tr.send)
                    continue;
                auto& q = wire[{tr.peer, i}];
                if (q.empty())
                    continue;
                ASSERT_EQ(q.front().size(), tr.data.length)
                    << "rank " << i << " round " << r.round << " from " << tr.peer;
                if (tr.data.length > 0)
                    std::memcpy(at(r, tr.data), q.front().data(), tr.data.length);
                q.pop_front();
                r.done[k] = true;
                progress = true;
            }
            if (std::all_of(r.done.begin(), r.done.end(), [](bool b) { return b; })) {
                const std::size_t es = coll::element_size(t);
                for (const auto& c : rd.combines)
                    coll::reduce_elements(t, op, at(r, c.lower), at(r, c.higher), at(r, c.out),
                                          c.out.length / es);
                for (const auto& c : rd.copies)
                    if (c.from.length > 0)
                        std::memmove(at(r, c.to), at(r, c.from), c.from.length);
                ++r.round;
                r.posted = false;
                progress = true;
            }
        }
        if (all_done) {
            for (const auto& [k, q] : wire)
                EXPECT_TRUE(q.empty()) << "messages left from " << k.first << " to " << k.second;
            return;
        }
        ASSERT_TRUE(progress) << "deadlock";
    }
    FAIL() << "did not finish";
}

std::vector<std::byte> pattern(int rank, std::size_t bytes) {
    std::vector<std::byte> v(bytes);
    for (std::size_t i = 0; i < bytes; ++i)
        v[i] = static_cast<std::byte>((rank * 131 + i * 7 + 3) & 0xff);
    return v;
}

const int sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 16};

} // namespace

TEST(CollectivePlan, BarrierHearsFromEveryoneInLog2Rounds) {
    for (int n : sizes) {
        std::vector<rank_state> ranks(n);
        for (int i = 0; i < n; ++i)
            ranks[i].plan = coll::barrier(i, n);
        run(ranks);
        int rounds = 0;
        while ((1 << rounds) < n)
            ++rounds;
        EXPECT_EQ(ranks[0].plan.rounds.size(), static_cast<std::size_t>(rounds)) << n;
        // Dissemination: rank i has heard (transitively) from all after the
        // rounds: the union of offsets 2^k covers 0..n-1.
        std::vector<bool> heard(n, false);
        heard[0] = true;
        for (int k = 1; k < n; k <<= 1) {
            auto next = heard;
            for (int j = 0; j < n; ++j)
                if (heard[j])
                    next[(j + k) % n] = true;
            heard = next;
        }
        EXPECT_TRUE(std::all_of(heard.begin(), heard.end(), [](bool b) { return b; })) << n;
    }
}

TEST(CollectivePlan, BroadcastFromEveryRoot) {
    for (int n : sizes)
        for (int root = 0; root < n; ++root) {
            std::vector<rank_state> ranks(n);
            const auto data = pattern(root, 100);
            for (int i = 0; i < n; ++i) {
                ranks[i].plan = coll::broadcast(i, n, root, 100);
                ranks[i].out = i == root ? data : std::vector<std::byte>(100);
            }
            run(ranks);
            for (int i = 0; i < n; ++i)
                EXPECT_EQ(ranks[i].out, data) << n << " root " << root << " rank " << i;
        }
}

TEST(CollectivePlan, BroadcastTreeStartsWithTheRootsNeighbourAndIsLog2Deep) {
    // Eight ranks, root 0: each rank receives from itself without its
    // highest bit and sends to itself plus each higher bit, the largest
    // subtree first.
    const std::vector<std::vector<int>> sends = {{1, 2, 4}, {3, 5}, {6}, {7}, {}, {}, {}, {}};
    const int parents[] = {-1, 0, 0, 1, 0, 1, 2, 3};
    for (int i = 0; i < 8; ++i) {
        const auto p = coll::broadcast(i, 8, 0, 8);
        std::vector<int> to;
        int from = -1;
        for (const auto& r : p.rounds)
            for (const auto& t : r.transfers)
                (t.send ? to.push_back(t.peer) : void(from = t.peer));
        EXPECT_EQ(to, sends[static_cast<std::size_t>(i)]) << i;
        EXPECT_EQ(from, parents[i]) << i;
    }
    // Every size and root: a rank is at most ceil(log2 n) messages from the
    // root, and the root's first message goes to its neighbour.
    for (int n : sizes)
        for (int root = 0; root < n; ++root) {
            int levels = 0;
            while ((1 << levels) < n)
                ++levels;
            std::vector<int> parent(static_cast<std::size_t>(n), -1);
            for (int i = 0; i < n; ++i) {
                for (const auto& r : coll::broadcast(i, n, root, 8).rounds) {
                    for (const auto& t : r.transfers) {
                        if (!t.send)
                            parent[static_cast<std::size_t>(i)] = t.peer;
                    }
                }
            }
            for (int i = 0; i < n; ++i) {
                int depth = 0;
                for (int j = i; j != root; j = parent[static_cast<std::size_t>(j)]) {
                    ASSERT_LE(++depth, levels) << n << " root " << root << " rank " << i;
                }
            }
            const auto p = coll::broadcast(root, n, root, 8);
            if (n > 1) {
                EXPECT_EQ(p.rounds.front().transfers.front().peer, (root + 1) % n) << n;
            }
        }
}

TEST(CollectivePlan, GatherConcatenatesInRankOrder) {
    for (int n : sizes)
        for (int root : {0, n - 1}) {
            std::vector<rank_state> ranks(n);
            std::vector<std::byte> expected;
            for (int i = 0; i < n; ++i) {
                ranks[i].plan = coll::gather(i, n, root, 12);
                ranks[i].in = pattern(i, 12);
                ranks[i].out.resize(i == root ? 12 * n : 0);
                expected.insert(expected.end(), ranks[i].in.begin(), ranks[i].in.end());
            }
            run(ranks);
            EXPECT_EQ(ranks[root].out, expected) << n;
        }
}

TEST(CollectivePlan, AllgathervRingWithUnequalAndEmptyBlocks) {
    for (int n : sizes) {
        std::vector<std::size_t> blocks(n);
        for (int i = 0; i < n; ++i)
            blocks[i] = static_cast<std::size_t>((i * 5) % 7); // some are 0
        std::vector<std::byte> expected;
        std::vector<rank_state> ranks(n);
        for (int i = 0; i < n; ++i) {
            ranks[i].plan = coll::allgatherv(i, n, blocks);
            ranks[i].in = pattern(i, blocks[i]);
            expected.insert(expected.end(), ranks[i].in.begin(), ranks[i].in.end());
            ranks[i].out.resize(expected.size() + 0);
        }
        for (auto& r : ranks)
            r.out.assign(expected.size(), std::byte{0});
        run(ranks);
        for (int i = 0; i < n; ++i)
            EXPECT_EQ(ranks[i].out, expected) << n << " rank " << i;
    }
}

TEST(CollectivePlan, AllgatherOfSmallBlocksDoublesOnPowersOfTwoAndRingsOtherwise) {
    for (int n : {1, 2, 3, 4, 5, 8, 16}) {
        for (std::size_t block : {std::size_t{0}, std::size_t{8}, coll::small_message / 4}) {
            std::vector<std::size_t> blocks(n, block);
            std::vector<std::byte> expected;
            std::vector<rank_state> ranks(n);
            for (int i = 0; i < n; ++i) {
                ranks[i].plan = coll::allgatherv(i, n, blocks);
                ranks[i].in = pattern(i, block);
                expected.insert(expected.end(), ranks[i].in.begin(), ranks[i].in.end());
            }
            for (auto& r : ranks)
                r.out.assign(expected.size(), std::byte{0});
            const bool doubling = (n & (n - 1)) == 0 && block * n <= coll::small_message;
            EXPECT_EQ(ranks[0].plan.algorithm, doubling ? "recursive doubling" : "ring")
                << n << " ranks, " << block << " B";
            std::size_t steps = 0;
            for (int s = 1; s < n; s <<= 1)
                ++steps;
            EXPECT_EQ(ranks[0].plan.rounds.size(), doubling ? steps : std::size_t(n - 1));
            run(ranks);
            for (int i = 0; i < n; ++i)
                EXPECT_EQ(ranks[i].out, expected) << n << " ranks, " << block << " B, rank " << i;
        }
    }
}

TEST(CollectivePlan, AlltoallTransposesBlocks) {
    for (int n : sizes) {
        const std::size_t block = 5;
        std::vector<rank_state> ranks(n);
        for (int i = 0; i < n; ++i) {
            ranks[i].plan = coll::alltoall(i, n, block);
            ranks[i].in = pattern(i, block * n);
            ranks[i].out.resize(block * n);
        }
        run(ranks);
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j)
                EXPECT_EQ(0, std::memcmp(ranks[i].out.data() + j * block,
                                         ranks[j].in.data() + i * block, block))
                    << n << " " << i << " " << j;
    }
}

namespace {

/// Allreduce or reduce of `count` int64 (rank-dependent values) checked
/// against the local sum, product, min and max.
void check_reduction(bool all, int n, std::size_t count, int root = 0) {
    for (reduce_op op : {reduce_op::sum, reduce_op::prod, reduce_op::min, reduce_op::max}) {
        std::vector<rank_state> ranks(n);
        std::vector<std::int64_t> expected(count);
        for (int i = 0; i < n; ++i) {
            std::vector<std::int64_t> v(count);
            for (std::size_t k = 0; k < count; ++k)
                v[k] = static_cast<std::int64_t>((i + 1) * 3 + k % 5) - 7;
            for (std::size_t k = 0; k < count; ++k) {
                if (i == 0)
                    expected[k] = v[k];
                else if (op == reduce_op::sum)
                    expected[k] += v[k];
                else if (op == reduce_op::prod)
                    expected[k] *= v[k];
                else if (op == reduce_op::min)
                    expected[k] = std::min(expected[k], v[k]);
                else
                    expected[k] = std::max(expected[k], v[k]);
            }
            ranks[i].in.resize(count * 8);
            std::memcpy(ranks[i].in.data(), v.data(), count * 8);
            ranks[i].out.resize(count * 8);
            ranks[i].plan =
                all ? coll::allreduce(i, n, count, 8) : coll::reduce(i, n, root, count, 8);
        }
        run(ranks, datatype::int64, op);
        for (int i = 0; i < n; ++i) {
            if (!all && i != root)
                continue;
            std::vector<std::int64_t> got(count);
            std::memcpy(got.data(), ranks[i].out.data(), count * 8);
            EXPECT_EQ(got, expected) << (all ? "allreduce" : "reduce") << " n=" << n
                                     << " count=" << count << " op=" << static_cast<int>(op)
                                     << " rank " << i << " algorithm " << ranks[i].plan.algorithm;
        }
    }
}

} // namespace

TEST(CollectivePlan, AllreduceRecursiveDoublingMatchesLocalComputation) {
    for (int n : sizes)
        check_reduction(true, n, 3);
    EXPECT_EQ(coll::allreduce(0, 5, 3, 8).algorithm, "recursive doubling");
}

TEST(CollectivePlan, AllreduceRingMatchesLocalComputation) {
    // Above 64 KiB: the ring, with blocks of unequal sizes.
    const std::size_t count = coll::small_message / 8 + 13;
    for (int n : {2, 3, 4, 5, 8})
        check_reduction(true, n, count);
    EXPECT_EQ(coll::allreduce(0, 4, count, 8).algorithm, "ring");
}

TEST(CollectivePlan, ReduceToEveryRoot) {
    for (int n : sizes)
        for (int root = 0; root < n; ++root)
            check_reduction(false, n, 4, root);
}

TEST(CollectivePlan, AllreduceGivesIdenticalFloatBitsOnEveryRank) {
    // Values whose sum depends on the order of additions: every rank must
    // still end with the same bits (and the test keeps them within rounding
    // of the exact sum).
    for (int n : {3, 4, 6, 8})
        for (std::size_t count : {std::size_t{7}, coll::small_message / 4 + 9}) {
            std::vector<rank_state> ranks(n);
            std::mt19937 rng(42);
            std::uniform_real_distribution<float> d(-1e6f, 1e6f);
            std::vector<double> exact(count, 0);
            for (int i = 0; i < n; ++i) {
                std::vector<float> v(count);
                for (auto& x : v)
                    x = d(rng);
                for (std::size_t k = 0; k < count; ++k)
                    exact[k] += v[k];
                ranks[i].in.resize(count * 4);
                std::memcpy(ranks[i].in.data(), v.data(), count * 4);
                ranks[i].out.resize(count * 4);
                ranks[i].plan = coll::allreduce(i, n, count, 4);
            }
            run(ranks, datatype::float32, reduce_op::sum);
            for (int i = 1; i < n; ++i)
                EXPECT_EQ(ranks[i].out, ranks[0].out) << n << " " << count;
            std::vector<float> got(count);
            std::memcpy(got.data(), ranks[0].out.data(), count * 4);
            for (std::size_t k = 0; k < count; ++k)
                ASSERT_NEAR(got[k], exact[k], 1.0) << k;
        }
}

TEST(CollectivePlan, ReduceElementsOnEveryType) {
    auto check = [](auto a, auto b) {
        using T = decltype(a);
        T out{};
        const datatype t = ucx::datatype_of<T>;
        // Integers wrap (modulo 2^bits, C++20's conversion to a signed type).
        T sum{}, prod{};
        if constexpr (std::is_integral_v<T>) {
            sum = static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
            prod = static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
        } else {
            sum = a + b;
            prod = a * b;
        }
        coll::reduce_elements(t, reduce_op::sum, &a, &b, &out, 1);
        EXPECT_EQ(out, sum);
        coll::reduce_elements(t, reduce_op::prod, &a, &b, &out, 1);
        EXPECT_EQ(out, prod);
        coll::reduce_elements(t, reduce_op::min, &a, &b, &out, 1);
        EXPECT_EQ(out, std::min(a, b));
        coll::reduce_elements(t, reduce_op::max, &a, &b, &out, 1);
        EXPECT_EQ(out, std::max(a, b));
        EXPECT_EQ(coll::element_size(t), sizeof(T));
    };
    check(std::int8_t{-3}, std::int8_t{5});
    check(std::uint8_t{200}, std::uint8_t{100}); // wraps
    check(std::int16_t{-300}, std::int16_t{7});
    check(std::uint16_t{65000}, std::uint16_t{2});
    check(std::int32_t{-70000}, std::int32_t{3});
    check(std::uint32_t{4000000000u}, std::uint32_t{5});
    check(std::int64_t{-5000000000}, std::int64_t{3});
    check(std::int32_t{2000000000}, std::int32_t{2000000000}); // overflows: wraps
    check(std::int64_t{1} << 62, std::int64_t{4});
    check(std::uint64_t{1} << 63, std::uint64_t{3});
    check(1.5f, -2.25f);
    check(1e300, -3.5);
}
