// Steady-state tag ping-pong allocates nothing on the heap per operation:
// operation state comes from the handler's (recycling) allocator.
#include "test_support.hpp"

#include <boost/asio/post.hpp>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <span>

namespace {
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};
} // namespace

void* operator new(std::size_t n) {
    if (counting.load(std::memory_order_relaxed))
        allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1))
        return p;
    throw std::bad_alloc();
}
// The nothrow form too (the library uses it), so every new here pairs with
// this file's delete (AddressSanitizer checks the pairing).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    if (counting.load(std::memory_order_relaxed))
        allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}

// Asio's recycling allocator takes a block from aligned_alloc, not operator
// new, when its per-thread cache (two blocks) has none free. The operations'
// states come from their worker's pool instead; what still goes through that
// cache is Asio's own: the event fd's wait, posted handlers. The tag
// ping-pong and the collectives count its misses too
// (`counting_cache_misses`). The active-message loop counts operator new
// only: its two workers share one thread, and the event fd's waits with the
// posts of its push handler overflow the cache in `event` and `hybrid` mode
// (measured: 0.5 and 1.0 blocks per operation; 9 per 40,000 operations in
// `poll` mode, where before the pool it was 0.5 per operation).
std::atomic<bool> counting_cache_misses{false};
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
    if (counting_cache_misses.load(std::memory_order_relaxed))
        allocations.fetch_add(1, std::memory_order_relaxed);
    void* p = nullptr;
    if (posix_memalign(&p, alignment < sizeof(void*) ? sizeof(void*) : alignment, size) != 0)
        return nullptr;
    return p;
}

using namespace ucx_test;

namespace {

class allocations_per_op : public testing::TestWithParam<ucx::progress_mode> {};

TEST_P(allocations_per_op, steady_state_ping_pong_allocates_nothing) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker a(ctx, io, strict_worker_options(GetParam()));
    ucx::worker b(ctx, io, strict_worker_options(GetParam()));
    ucx::endpoint a_to_b(a, b.address()), b_to_a(b, a.address());

    std::uint64_t ping = 0, pong = 0, echo = 0;
    std::size_t done = 0, target = 0;
    bool failed = false;
    struct echo_loop {
        ucx::worker& b;
        ucx::endpoint& ep;
        std::uint64_t& v;
        bool& failed;
        void operator()() {
            ucx::async_tag_recv(b, asio::buffer(&v, sizeof v), 1, ucx::tag_mask_full,
                                [this](ucx::error_code ec, std::size_t, ucx::tag_t) {
                                    if (ec) {
                                        failed = true;
                                        return;
                                    }
                                    ucx::async_tag_send(ep, asio::buffer(&v, sizeof v), 2,
                                                        [this](ucx::error_code ec, std::size_t) {
                                                            if (ec)
                                                                failed = true;
                                                        });
                                    (*this)();
                                });
        }
    } echo_side{b, b_to_a, echo, failed};
    struct ping_loop {
        ucx::worker& a;
        ucx::endpoint& ep;
        std::uint64_t& out;
        std::uint64_t& in;
        std::size_t& done;
        std::size_t& target;
        bool& failed;
        void operator()() {
            ucx::async_tag_recv(a, asio::buffer(&in, sizeof in), 2, ucx::tag_mask_full,
                                [this](ucx::error_code ec, std::size_t, ucx::tag_t) {
                                    if (ec || in != out)
                                        failed = true;
                                    ++done;
                                    if (!failed && done < target) {
                                        ++out;
                                        (*this)();
                                    }
                                });
            ucx::async_tag_send(ep, asio::buffer(&out, sizeof out), 1,
                                [this](ucx::error_code ec, std::size_t) {
                                    if (ec)
                                        failed = true;
                                });
        }
    } ping_side{a, a_to_b, ping, pong, done, target, failed};

    echo_side();
    target = 2000; // warm-up: fills the recycling caches and UCX's pools
    ping_side();
    ASSERT_TRUE(run_until(io, [&] { return done == target || failed; }));
    ASSERT_FALSE(failed);

    target = 12000;
    const ucx::worker_stats sa = a.stats(), sb = b.stats();
    allocations = 0;
    counting = counting_cache_misses = true;
    ++ping;
    ping_side();
    while (done < target && !failed)
        io.run_one();
    counting = counting_cache_misses = false;
    const ucx::worker_stats ea = a.stats(), eb = b.stats();
    ASSERT_FALSE(failed);
    const std::size_t ops = 4 * 10000; // two sends and two receives per round trip
    std::printf("heap allocations during %zu operations: %zu\n", ops, allocations.load());
    // In hybrid mode, each arm of a worker (the spin ended, the thread is to
    // sleep on the event fd) starts a wait on the event fd whose state may miss
    // Asio's recycling cache once; how many there are depends on the
    // scheduling, not on the operations (measured under ThreadSanitizer:
    // allocations = arms + 3 to 7; on a loaded machine 65 allocations). Event
    // mode arms after every pass and allocates nothing for it (6 in all).
    const std::size_t arms =
        GetParam() == ucx::progress_mode::hybrid ? (ea.arms - sa.arms) + (eb.arms - sb.arms) : 0;
    std::printf("hybrid arms meanwhile: %zu\n", arms);
    // A rare cache miss of the recycling allocator is tolerated (measured: 6
    // to 13 with aligned_alloc counted, sanitizers included), and one per arm
    // in hybrid mode; one per operation would be 40,000.
    EXPECT_LE(allocations.load(), 40u + arms) << "per-operation heap allocation";
}

// The same for active messages: a pull receive on one side, a push handler on
// the other, eager 8-byte messages with a 4-byte header.
TEST_P(allocations_per_op, steady_state_active_messages_allocate_nothing) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker a(ctx, io, strict_worker_options(GetParam()));
    ucx::worker b(ctx, io, strict_worker_options(GetParam()));
    ucx::endpoint a_to_b(a, b.address()), b_to_a(b, a.address());

    std::uint64_t out = 0, echo = 0;
    const std::uint32_t header = 0xc0ffee;
    std::size_t done = 0, target = 0;
    bool failed = false;
    ucx::set_am_handler(b, 1, [&](ucx::error_code ec, ucx::am_message m) {
        if (ec || m.size() != sizeof echo) {
            failed = true;
            return;
        }
        std::memcpy(&echo, m.data().data(), sizeof echo);
        ucx::async_am_send(b_to_a, 2, asio::buffer(&header, sizeof header),
                           asio::buffer(&echo, sizeof echo), [&](ucx::error_code ec, std::size_t) {
                               if (ec)
                                   failed = true;
                           });
    });
    struct ping_loop {
        ucx::worker& a;
        ucx::endpoint& ep;
        const std::uint32_t& header;
        std::uint64_t& out;
        std::size_t& done;
        std::size_t& target;
        bool& failed;
        void operator()() {
            ucx::async_am_recv(a, 2, [this](ucx::error_code ec, ucx::am_message m) {
                std::uint64_t in = ~out;
                if (!ec && m.size() == sizeof in)
                    std::memcpy(&in, m.data().data(), sizeof in);
                if (ec || in != out || m.header().size() != sizeof header)
                    failed = true;
                ++done;
                if (!failed && done < target) {
                    ++out;
                    (*this)();
                }
            });
            ucx::async_am_send(ep, 1, asio::buffer(&header, sizeof header),
                               asio::buffer(&out, sizeof out),
                               [this](ucx::error_code ec, std::size_t) {
                                   if (ec)
                                       failed = true;
                               });
        }
    } ping_side{a, a_to_b, header, out, done, target, failed};

    target = 2000; // warm-up: fills the recycling caches and the message pools
    ping_side();
    ASSERT_TRUE(run_until(io, [&] { return done == target || failed; }));
    ASSERT_FALSE(failed);

    target = 12000;
    allocations = 0;
    counting = true;
    ++out;
    ping_side();
    while (done < target && !failed)
        io.run_one();
    counting = false;
    ASSERT_FALSE(failed);
    const std::size_t ops = 4 * 10000;
    std::printf("heap allocations during %zu active-message operations: %zu\n", ops,
                allocations.load());
    EXPECT_LE(allocations.load(), 8u) << "per-operation heap allocation";
}

// A tag_receiver's batches: its receives go back to UCX in the worker's own
// requests and a batch's operation comes from the worker's pool, so nothing
// is allocated per message (sixteen sends in flight, 10,000 messages).
TEST_P(allocations_per_op, steady_state_tag_receiver_allocates_nothing) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker a(ctx, io, strict_worker_options(GetParam()));
    ucx::worker b(ctx, io, strict_worker_options(GetParam()));
    ucx::endpoint a_to_b(a, b.address());
    ucx::tag_receiver rx(b, 5, ucx::tag_mask_full, {32, 8});

    std::uint64_t payload = 42;
    std::size_t sent = 0, received = 0, inflight = 0, target = 0;
    bool failed = false;
    struct send_loop {
        ucx::endpoint& ep;
        std::uint64_t& payload;
        std::size_t &sent, &received, &inflight, &target;
        bool& failed;
        void operator()() {
            while (inflight < 16 && sent < target && sent - received < 32) {
                ++sent;
                ++inflight;
                ucx::async_tag_send(ep, asio::buffer(&payload, sizeof payload), 5,
                                    [this](ucx::error_code ec, std::size_t) {
                                        --inflight;
                                        if (ec)
                                            failed = true;
                                        (*this)();
                                    });
            }
        }
    } sender{a_to_b, payload, sent, received, inflight, target, failed};
    struct receive_loop {
        ucx::tag_receiver& rx;
        send_loop& sender;
        std::size_t& received;
        bool& failed;
        void operator()() {
            rx.async_receive([this](ucx::error_code ec, ucx::tag_batch batch) {
                if (ec) {
                    failed = true;
                    return;
                }
                for (const ucx::tag_message& m : batch)
                    if (m.error || m.data.size() != 8)
                        failed = true;
                received += batch.size();
                batch.release();
                sender();
                if (!failed)
                    (*this)();
            });
        }
    } receiver{rx, sender, received, failed};

    target = 2000; // warm-up: fills the recycling caches and UCX's pools
    receiver();
    sender();
    ASSERT_TRUE(run_until(io, [&] { return received == target || failed; }));
    ASSERT_FALSE(failed);

    // operator new only, as for active messages: with sixteen sends in
    // flight, the two workers' passes posted on their one thread overflow
    // Asio's per-thread cache of handler memory (measured: 0.04 blocks per
    // message in event and poll mode, what a window of plain async_tag_recv
    // costs as well); the sends start on the workers' thread.
    target = 12000;
    allocations = 0;
    counting = true;
    asio::post(io, [&] { sender(); });
    while (received < target && !failed)
        io.run_one();
    counting = false;
    ASSERT_FALSE(failed);
    std::printf("heap allocations during 10000 messages: %zu\n", allocations.load());
    EXPECT_LE(allocations.load(), 8u) << "per-message heap allocation";
}

// A loop of one collective computes its plan once (the group keeps the
// plans of its last few distinct collectives), passes each message's
// completion without a function object, takes the operations of its
// messages from the group's own pool (a broadcast's root has one in flight
// per child), and reuses the state and the scratch buffer of the collective
// before: it allocates nothing per call.
TEST(allocations_per_collective, a_loop_of_collectives_allocates_nothing_per_call) {
    local_ranks ranks(4, "alloc", group_worker_options());
    ASSERT_TRUE(ranks.joined);
    auto& io = ranks.io;
    auto& groups = ranks.groups;
    std::array<std::uint64_t, 4> in{1, 2, 3, 4}, out{};
    enum kind { barrier, allreduce, broadcast };
    for (const kind k : {barrier, allreduce, broadcast}) {
        const int calls = 500;
        int done = 0;
        bool failed = false;
        out = {};
        // Each rank's handler starts its next call, as a program's loop does.
        std::function<void(int, int)> next = [&](int rank, int left) {
            auto h = [&, rank, left](ucx::error_code ec) {
                failed = failed || static_cast<bool>(ec);
                ++done;
                if (left > 1)
                    next(rank, left - 1);
            };
            switch (k) {
            case barrier:
                return groups[rank].async_barrier(h);
            case allreduce:
                return groups[rank].async_allreduce(std::span<const std::uint64_t>(&in[rank], 1),
                                                    std::span<std::uint64_t>(&out[rank], 1),
                                                    ucx::reduce_op::sum, h);
            case broadcast:
                // Rank 0 sends to two ranks at once (a binomial tree of 4).
                if (rank == 0)
                    out[0] = 42;
                return groups[rank].async_broadcast(asio::buffer(&out[rank], sizeof(std::uint64_t)),
                                                    0, h);
            }
        };
        // A first round of each: connections, plans.
        for (int r = 0; r < 4; ++r)
            next(r, 1);
        ASSERT_TRUE(run_until(io, [&] { return done == 4; }));
        done = 0;
        allocations = 0;
        counting = counting_cache_misses = true;
        for (int r = 0; r < 4; ++r)
            next(r, calls);
        const bool finished = run_until(io, [&] { return done == 4 * calls || failed; });
        counting = counting_cache_misses = false;
        ASSERT_TRUE(finished);
        ASSERT_FALSE(failed);
        const double per_call = static_cast<double>(allocations.load()) / (4.0 * calls);
        static const char* const names[] = {"barrier", "allreduce 8 B", "broadcast 8 B"};
        std::printf("%s: %.2f heap allocations per call\n", names[k], per_call);
        // Measured: 0 for each. Before the group's pool, the broadcast took
        // one or more per call (Asio's per-thread cache keeps two blocks);
        // before the reused states, 1 (barrier) and 2 (allreduce); before the
        // plan cache and the templated message completions, 12 and 17 (4
        // ranks). The bound leaves room for the rare growth of a container,
        // not for one block per call.
        EXPECT_LE(per_call, 0.1);
        // The barrier leaves `out` as it was.
        const std::uint64_t expected = k == allreduce ? 10 : k == broadcast ? 42 : 0;
        for (auto v : out)
            EXPECT_EQ(v, expected);
    }
}

INSTANTIATE_TEST_SUITE_P(all, allocations_per_op,
                         testing::Values(ucx::progress_mode::event, ucx::progress_mode::poll,
                                         ucx::progress_mode::hybrid),
                         [](const auto& info) { return std::string(ucx::to_string(info.param)); });

} // namespace
