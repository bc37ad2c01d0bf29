// The pool of a worker's operation states: blocks are reused, sized for the
// largest request, kept up to a limit, and usable as an allocator (without a
// pool, Asio's recycling allocator's). Which handlers an operation runs on
// the worker's executor.
#include <ucx/detail/block_pool.hpp>
#include <ucx/detail/operation.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

namespace {

using ucx::detail::block_pool;
using ucx::detail::pool_allocator;

TEST(block_pool, a_freed_block_is_handed_out_again) {
    block_pool pool;
    void* a = pool.allocate(100);
    std::memset(a, 0xAB, 100);
    pool.deallocate(a, 100);
    EXPECT_EQ(pool.kept(), 1u);
    void* b = pool.allocate(100);
    EXPECT_EQ(a, b);
    EXPECT_EQ(pool.kept(), 0u);
    pool.deallocate(b, 100);
}

TEST(block_pool, blocks_in_flight_at_once_are_distinct_and_all_kept) {
    block_pool pool;
    std::vector<void*> blocks;
    for (int i = 0; i < 5; ++i) {
        blocks.push_back(pool.allocate(64));
        std::memset(blocks.back(), i, 64);
    }
    EXPECT_EQ(std::set<void*>(blocks.begin(), blocks.end()).size(), 5u);
    for (int i = 0; i < 5; ++i) // each block kept its own bytes
        EXPECT_EQ(static_cast<unsigned char*>(blocks[static_cast<std::size_t>(i)])[63], i);
    for (void* b : blocks)
        pool.deallocate(b, 64);
    EXPECT_EQ(pool.kept(), 5u);
    // The same five come back, in some order.
    std::set<void*> again;
    for (int i = 0; i < 5; ++i)
        again.insert(pool.allocate(64));
    EXPECT_EQ(again, std::set<void*>(blocks.begin(), blocks.end()));
    for (void* b : again)
        pool.deallocate(b, 64);
}

TEST(block_pool, a_larger_request_retires_the_smaller_blocks) {
    block_pool pool;
    void* small = pool.allocate(32);
    void* small2 = pool.allocate(32);
    pool.deallocate(small, 32);
    EXPECT_EQ(pool.kept(), 1u);
    void* big = pool.allocate(1000); // the free small block is dropped
    EXPECT_EQ(pool.kept(), 0u);
    std::memset(big, 1, 1000);
    pool.deallocate(small2, 32); // allocated before: freed, not kept
    EXPECT_EQ(pool.kept(), 0u);
    pool.deallocate(big, 1000);
    EXPECT_EQ(pool.kept(), 1u);
    void* next = pool.allocate(10); // a smaller request takes a large block
    EXPECT_EQ(next, big);
    pool.deallocate(next, 10);
}

TEST(block_pool, requests_up_to_the_smallest_block_share_its_size) {
    block_pool pool;
    void* small = pool.allocate(24);
    pool.deallocate(small, 24);
    void* larger = pool.allocate(block_pool::min_block); // no retirement
    EXPECT_EQ(larger, small);
    std::memset(larger, 1, block_pool::min_block);
    pool.deallocate(larger, block_pool::min_block);
    EXPECT_EQ(pool.kept(), 1u);
}

TEST(block_pool, keeps_at_most_its_limit) {
    block_pool pool;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < block_pool::keep_limit + 10; ++i)
        blocks.push_back(pool.allocate(48));
    for (void* b : blocks)
        pool.deallocate(b, 48);
    EXPECT_EQ(pool.kept(), block_pool::keep_limit);
}

TEST(block_pool, blocks_have_the_default_alignment) {
    block_pool pool;
    for (std::size_t n : {1u, 24u, 100u, 300u}) {
        void* p = pool.allocate(n);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % __STDCPP_DEFAULT_NEW_ALIGNMENT__, 0u);
        pool.deallocate(p, n);
    }
}

TEST(pool_allocator, serves_standard_containers_and_compares_by_pool) {
    block_pool pool, other;
    pool_allocator<int> a(&pool);
    pool_allocator<double> b(a);
    EXPECT_TRUE(a == b);
    EXPECT_FALSE(a == pool_allocator<int>(&other));
    {
        std::vector<int, pool_allocator<int>> v(a);
        for (int i = 0; i < 20; ++i)
            v.push_back(i);
        EXPECT_EQ(v[19], 19);
        auto s = std::allocate_shared<std::uint64_t>(a, 7u);
        EXPECT_EQ(*s, 7u);
    }
    EXPECT_GT(pool.kept(), 0u);
}

TEST(pool_allocator, without_a_pool_uses_the_recycling_allocator) {
    pool_allocator<std::uint64_t> a(nullptr);
    EXPECT_TRUE(a == pool_allocator<int>(nullptr));
    std::uint64_t* p = a.allocate(4);
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<std::uint64_t>(i);
    EXPECT_EQ(p[3], 3u);
    a.deallocate(p, 4);
    std::vector<int, pool_allocator<int>> v(pool_allocator<int>(nullptr));
    v.assign(100, 7);
    EXPECT_EQ(v[99], 7);
}

} // namespace

namespace handler_executor_test {

// Whether a handler has an executor of its own, asked through Asio's public
// associator only: a handler without one runs on the worker's executor
// directly; any other is dispatched to its own.
TEST(HandlerExecutor, OnlyAHandlerWithoutAnExecutorOfItsOwnRunsOnTheWorkers) {
    namespace asio = boost::asio;
    auto plain = [](ucx::error_code) {};
    using plain_type = decltype(plain);
    EXPECT_TRUE(ucx::detail::has_no_own_executor<plain_type>);
    asio::cancellation_signal sig;
    EXPECT_TRUE(ucx::detail::has_no_own_executor<decltype(asio::bind_cancellation_slot(sig.slot(),
                                                                                       plain))>);
    EXPECT_TRUE(ucx::detail::has_no_own_executor<decltype(asio::bind_allocator(
                    std::allocator<char>(), plain))>);
    asio::io_context io;
    EXPECT_FALSE(
        ucx::detail::has_no_own_executor<decltype(asio::bind_executor(io.get_executor(), plain))>);
    EXPECT_FALSE(ucx::detail::has_no_own_executor<decltype(asio::bind_executor(
                     asio::any_io_executor(io.get_executor()), plain))>);
    EXPECT_FALSE(ucx::detail::has_no_own_executor<decltype(asio::bind_cancellation_slot(
                     sig.slot(), asio::bind_executor(asio::make_strand(io), plain)))>);
}

} // namespace handler_executor_test
