// The GPU settings of a context and the device memory pool: the pool's
// bookkeeping (memory_arena) step by step, and what a machine without a GPU
// answers (a clear error, never a crash).
#include <ucx/am_allocator.hpp>
#include <ucx/configuration.hpp>
#include <ucx/context.hpp>
#include <ucx/memory_type.hpp>

#include "util/memory_arena.hpp"

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

using ucx::detail::memory_arena;

TEST(memory_arena, blocks_are_aligned_and_disjoint) {
    memory_arena a(4096, 256);
    const auto x = a.allocate(1);
    const auto y = a.allocate(300);
    const auto z = a.allocate(256);
    ASSERT_TRUE(x && y && z);
    EXPECT_EQ(*x % 256, 0u);
    EXPECT_EQ(*y % 256, 0u);
    EXPECT_EQ(*z % 256, 0u);
    EXPECT_EQ(a.block_size(*x), 256u);
    EXPECT_EQ(a.block_size(*y), 512u);
    EXPECT_EQ(a.block_size(*z), 256u);
    EXPECT_EQ(a.in_use(), 1024u);
    // Disjoint: sorted, each ends before the next begins.
    std::vector<std::size_t> v = {*x, *y, *z};
    std::sort(v.begin(), v.end());
    for (std::size_t i = 0; i + 1 < v.size(); ++i)
        EXPECT_LE(v[i] + a.block_size(v[i]), v[i + 1]);
}

TEST(memory_arena, full_arena_refuses_then_serves_after_a_release) {
    memory_arena a(1024, 256);
    std::vector<std::size_t> blocks;
    for (int i = 0; i < 4; ++i) {
        const auto b = a.allocate(200);
        ASSERT_TRUE(b) << i;
        blocks.push_back(*b);
    }
    EXPECT_FALSE(a.allocate(1));
    EXPECT_EQ(a.largest_free(), 0u);
    EXPECT_TRUE(a.deallocate(blocks[2]));
    const auto again = a.allocate(256);
    ASSERT_TRUE(again);
    EXPECT_EQ(*again, blocks[2]);
}

TEST(memory_arena, too_large_and_overflowing_requests_are_refused) {
    memory_arena a(1 << 20, 256);
    EXPECT_FALSE(a.allocate((1 << 20) + 1));
    EXPECT_FALSE(a.allocate(SIZE_MAX));
    EXPECT_FALSE(a.allocate(SIZE_MAX - 100));
    EXPECT_EQ(a.in_use(), 0u);
    EXPECT_TRUE(a.allocate(1 << 20)); // exactly the capacity
    EXPECT_EQ(a.free_blocks(), 0u);
}

TEST(memory_arena, freed_neighbours_merge_in_any_order) {
    memory_arena a(4 * 256, 256);
    const auto b0 = a.allocate(256), b1 = a.allocate(256), b2 = a.allocate(256),
               b3 = a.allocate(256);
    ASSERT_TRUE(b0 && b1 && b2 && b3);
    EXPECT_TRUE(a.deallocate(*b1));
    EXPECT_TRUE(a.deallocate(*b3));
    EXPECT_EQ(a.free_blocks(), 2u);
    EXPECT_FALSE(a.allocate(512));  // fragmented: two separate 256-byte holes
    EXPECT_TRUE(a.deallocate(*b2)); // joins b1 and b3's holes into one
    EXPECT_EQ(a.free_blocks(), 1u);
    EXPECT_EQ(a.largest_free(), 768u);
    EXPECT_TRUE(a.deallocate(*b0));
    EXPECT_EQ(a.free_blocks(), 1u);
    EXPECT_EQ(a.largest_free(), 1024u);
    EXPECT_EQ(a.in_use(), 0u);
}

TEST(memory_arena, best_fit_keeps_the_large_hole) {
    memory_arena a(8 * 256, 256);
    const auto small = a.allocate(256);
    const auto sep1 = a.allocate(256);
    const auto big = a.allocate(4 * 256);
    const auto sep2 = a.allocate(256);
    ASSERT_TRUE(small && sep1 && big && sep2);
    a.deallocate(*small);
    a.deallocate(*big);
    // A 256-byte request takes the 256-byte hole, not a piece of the large one.
    const auto fit = a.allocate(100);
    ASSERT_TRUE(fit);
    EXPECT_EQ(*fit, *small);
    EXPECT_TRUE(a.allocate(4 * 256));
}

TEST(memory_arena, unknown_offsets_and_double_frees_change_nothing) {
    memory_arena a(1024, 256);
    const auto b = a.allocate(256);
    ASSERT_TRUE(b);
    EXPECT_FALSE(a.deallocate(*b + 1));
    EXPECT_FALSE(a.deallocate(4096));
    EXPECT_TRUE(a.deallocate(*b));
    EXPECT_FALSE(a.deallocate(*b));
    EXPECT_EQ(a.in_use(), 0u);
    EXPECT_EQ(a.free_blocks(), 1u);
}

// Seeded random allocations and releases against a byte map of the arena:
// no two live blocks overlap, and once all are freed the arena is whole.
TEST(memory_arena, random_sequences_never_overlap_and_end_whole) {
    for (unsigned seed = 1; seed <= 20; ++seed) {
        std::mt19937 rng(seed);
        constexpr std::size_t capacity = 64 * 1024;
        memory_arena a(capacity, 64);
        std::vector<int> owner(capacity, -1);
        std::vector<std::size_t> live;
        int next_id = 0;
        for (int step = 0; step < 2000; ++step) {
            if (live.empty() || rng() % 3 != 0) {
                const std::size_t n = 1 + rng() % 4096;
                const auto b = a.allocate(n);
                if (!b) {
                    EXPECT_LT(a.largest_free(), n) << "refused with room, seed " << seed;
                    continue;
                }
                const std::size_t size = a.block_size(*b);
                ASSERT_GE(size, n);
                ASSERT_LE(*b + size, capacity);
                for (std::size_t i = *b; i < *b + size; ++i) {
                    ASSERT_EQ(owner[i], -1) << "overlap at " << i << ", seed " << seed;
                    owner[i] = next_id;
                }
                ++next_id;
                live.push_back(*b);
            } else {
                const std::size_t k = rng() % live.size();
                const std::size_t b = live[k];
                const std::size_t size = a.block_size(b);
                for (std::size_t i = b; i < b + size; ++i)
                    owner[i] = -1;
                ASSERT_TRUE(a.deallocate(b));
                live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
            }
        }
        for (std::size_t b : live)
            ASSERT_TRUE(a.deallocate(b));
        EXPECT_EQ(a.in_use(), 0u);
        EXPECT_EQ(a.free_blocks(), 1u) << "seed " << seed;
        EXPECT_EQ(a.largest_free(), capacity);
    }
}

TEST(cuda_pool_allocator, without_a_gpu_it_gives_null_never_a_crash) {
    if (ucx::cuda_device_count() > 0)
        GTEST_SKIP() << "a CUDA device is present: the pool is tested with it elsewhere";
    ucx::cuda_pool_allocator pool(1 << 20);
    EXPECT_EQ(pool.memory_type(), ucx::memory_type::cuda);
    EXPECT_EQ(pool.pool_size(), 1u << 20);
    EXPECT_EQ(pool.allocate(4096), nullptr);
    EXPECT_EQ(pool.bytes_in_use(), 0u);
    EXPECT_EQ(pool.fallbacks(), 0u);
    pool.deallocate(nullptr, 0);
}

TEST(cuda_options, create_context_without_a_gpu_is_a_clear_error) {
    if (ucx::cuda_device_count() > 0)
        GTEST_SKIP() << "a CUDA device is present";
    ucx::context_options o;
    o.cuda.create_context = true;
    ucx::error_code ec;
    ucx::context ctx(o, ec);
    EXPECT_EQ(ec, ucx::error::cuda_unavailable) << ec.message();
    EXPECT_THROW(ucx::context{o}, boost::system::system_error);
}

TEST(cuda_options, a_device_number_past_the_devices_is_a_clear_error) {
    ucx::context_options o;
    o.cuda.create_context = true;
    o.cuda.device = ucx::cuda_device_count(); // one past the last
    ucx::error_code ec;
    ucx::context ctx(o, ec);
    EXPECT_EQ(ec, ucx::error::cuda_unavailable) << ec.message();
    o.cuda.device = -1;
    ucx::context ctx2(o, ec);
    EXPECT_EQ(ec, ucx::error::cuda_unavailable) << ec.message();
}

TEST(cuda_options, a_context_reports_its_settings_and_ucx_memory_support) {
    ucx::context_options o;
    o.cuda.pool_size = 64 << 20;
    ucx::context ctx(o);
    EXPECT_EQ(ctx.cuda().pool_size, 64u << 20);
    EXPECT_FALSE(ctx.cuda().create_context);
    // Whether UCX moves device memory is its build's answer; a UCX without
    // CUDA transports (the one here if it says no) makes the library stage.
    std::printf("UCX moves CUDA memory itself: %s\n",
                ctx.ucx_supports_cuda_memory() ? "yes" : "no");
    if (ucx::cuda_device_count() == 0) {
        EXPECT_FALSE(ctx.ucx_supports_cuda_memory()) << "no device, yet UCX claims CUDA memory";
    }
}

TEST(cuda_options, are_set_by_name) {
    ucx::context_options o;
    EXPECT_FALSE(ucx::set_context_option(o, "create_cuda_context", "yes"));
    EXPECT_TRUE(o.cuda.create_context);
    EXPECT_FALSE(ucx::set_context_option(o, "CUDA_DEVICE", "3"));
    EXPECT_EQ(o.cuda.device, 3);
    EXPECT_FALSE(ucx::set_context_option(o, "cuda_pool_size", "512M"));
    EXPECT_EQ(o.cuda.pool_size, 512u << 20);
    EXPECT_FALSE(ucx::set_context_option(o, "cuda_pool_size", "1GiB"));
    EXPECT_EQ(o.cuda.pool_size, 1u << 30);
    EXPECT_FALSE(ucx::set_context_option(o, "cuda_pool_size", "64kb"));
    EXPECT_EQ(o.cuda.pool_size, 64u << 10);
    EXPECT_FALSE(ucx::set_context_option(o, "cuda_pool_size", "4096"));
    EXPECT_EQ(o.cuda.pool_size, 4096u);
    for (const char* bad : {"", "M", "12T", "-1", "1.5G", "99999999999999999999G"})
        EXPECT_EQ(ucx::set_context_option(o, "cuda_pool_size", bad), ucx::error::invalid_option)
            << bad;
    EXPECT_EQ(o.cuda.pool_size, 4096u); // unchanged by the refused values
    EXPECT_EQ(ucx::set_context_option(o, "cuda_device", "-2"), ucx::error::invalid_option);
    EXPECT_EQ(ucx::set_context_option(o, "cuda_device", "99999999999"), ucx::error::invalid_option);
    EXPECT_EQ(ucx::set_context_option(o, "create_cuda_context", "maybe"),
              ucx::error::invalid_option);
}
