// Tests of the staging executor (ucx::detail::staging_operation) over a real
// io_context, with the fake copy engine (host memory stands in for the
// device) and transfer functions that move bytes in memory; and of the
// pinned buffer pool and the fake copy engine themselves. Every test checks
// the bytes that arrived and the counts of copies, transfers and buffers.
#include "gpu/copy_engine.hpp"
#include "gpu/pinned_pool.hpp"
#include "gpu/staging.hpp"

#include <ucx/memory_type.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#ifdef UCX_ASIO_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using ucx::error_code;
using ucx::detail::copy_direction;
using ucx::detail::copy_handle;
using ucx::detail::fake_copy_engine;
using ucx::detail::pinned_pool;
using ucx::detail::staging_config;
using ucx::detail::staging_direction;
using ucx::detail::staging_mode;
using ucx::detail::staging_operation;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& b : v)
        b = static_cast<std::uint8_t>(rng());
    return v;
}

staging_config cfg(std::size_t total, std::size_t chunk, unsigned slots, staging_direction d,
                   staging_mode m) {
    staging_config c;
    c.total = total;
    c.chunk = chunk;
    c.slots = slots;
    c.direction = d;
    c.mode = m;
    return c;
}

// The result of one run.
struct outcome {
    unsigned calls = 0;
    error_code ec{};
    std::size_t bytes = 0;
    // Work in flight when the handler ran (must be none).
    std::size_t copies_outstanding = 0;
    std::size_t transfers_outstanding = 0;
    std::size_t buffers_lent = 0;
};

// The peer's side in memory: outgoing transfers land in `remote` at their
// offset, incoming ones read from it. Each completes later, through the
// io_context (as UCX's callbacks do), or at once when `inline_completion`.
struct memory_peer {
    asio::io_context& io;
    std::vector<std::uint8_t> remote;
    std::vector<unsigned> writes;
    bool inline_completion = false;
    // Fail the transfer of this chunk (staging_plan::whole for the message).
    std::optional<std::size_t> fail_chunk{};
    error_code failure = make_error_code(ucx::errc::connection_reset);
    // An incoming whole message shorter than planned.
    std::optional<std::size_t> message_bytes{};
    std::size_t started = 0;
    std::size_t outstanding = 0;
    std::size_t max_outstanding = 0;
    std::vector<std::size_t> order{};
    unsigned whole_transfers = 0;

    memory_peer(asio::io_context& i, std::size_t n) : io(i), remote(n, 0), writes(n, 0) {}

    staging_operation::transfer_function outgoing() {
        return [this](const staging_operation::transfer_request& r,
                      staging_operation::transfer_completion done) {
            begin(r);
            error_code ec;
            if (fail_chunk && *fail_chunk == r.chunk) {
                ec = failure;
            } else {
                for (std::size_t i = 0; i < r.length; ++i) {
                    remote[r.offset + i] = static_cast<std::uint8_t*>(r.data)[i];
                    ++writes[r.offset + i];
                }
            }
            finish(std::move(done), ec, r.length);
        };
    }

    staging_operation::transfer_function incoming() {
        return [this](const staging_operation::transfer_request& r,
                      staging_operation::transfer_completion done) {
            begin(r);
            error_code ec;
            std::size_t n = r.length;
            if (r.whole && message_bytes)
                n = *message_bytes;
            if (fail_chunk && *fail_chunk == r.chunk)
                ec = failure;
            else if (n != 0)
                std::memcpy(r.data, remote.data() + r.offset, n);
            finish(std::move(done), ec, n);
        };
    }

    void begin(const staging_operation::transfer_request& r) {
        ++started;
        order.push_back(r.chunk);
        whole_transfers += r.whole ? 1 : 0;
        max_outstanding = std::max(max_outstanding, ++outstanding);
    }

    void finish(staging_operation::transfer_completion done, error_code ec, std::size_t n) {
        if (inline_completion) {
            --outstanding;
            done(ec, n);
            return;
        }
        asio::post(io, [this, done = std::move(done), ec, n]() mutable {
            --outstanding;
            done(ec, n);
        });
    }
};

// An executor set-up: io_context, fake engine, pool.
struct rig {
    asio::io_context io;
    std::shared_ptr<fake_copy_engine> engine = std::make_shared<fake_copy_engine>();
    std::shared_ptr<pinned_pool> pool;
    outcome result;

    explicit rig(std::size_t buffer_size = 4096, std::size_t max_buffers = 64)
        : pool(std::make_shared<pinned_pool>(buffer_size, max_buffers, false)) {}

    // A handler that records the outcome and the work in flight at that time.
    auto handler(const memory_peer* peer) {
        return [this, peer](error_code ec, std::size_t bytes) {
            ++result.calls;
            result.ec = ec;
            result.bytes = bytes;
            result.copies_outstanding = engine->outstanding();
            result.transfers_outstanding = peer ? peer->outstanding : 0;
            result.buffers_lent = pool->lent();
        };
    }
};

// ---- content through every mode and direction ----

struct content_case {
    staging_direction direction;
    staging_mode mode;
    std::size_t total;
    std::size_t chunk;
    unsigned slots;
    bool inline_completion;
};

class staging_content : public testing::TestWithParam<content_case> {};

TEST_P(staging_content, bytes_arrive_intact) {
    const content_case c = GetParam();
    rig r(c.chunk, 64);
    memory_peer peer(r.io, c.total);
    peer.inline_completion = c.inline_completion;
    const auto source = pattern(c.total, c.total + c.chunk);
    std::vector<std::uint8_t> device(c.total, 0);
    const bool outgoing = c.direction == staging_direction::outgoing;
    if (outgoing)
        device = source;
    else
        peer.remote = source;
    auto op = staging_operation::create(
        r.io.get_executor(), cfg(c.total, c.chunk, c.slots, c.direction, c.mode), device.data(),
        r.engine, r.pool, outgoing ? peer.outgoing() : peer.incoming());
    op->async_run(r.handler(&peer));
    EXPECT_EQ(r.result.calls, 0u) << "never inside async_run";
    r.io.run();

    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec) << r.result.ec.message();
    EXPECT_EQ(r.result.bytes, c.total);
    EXPECT_EQ(r.result.copies_outstanding, 0u);
    EXPECT_EQ(r.result.transfers_outstanding, 0u);
    EXPECT_EQ(r.result.buffers_lent, 0u) << "buffers are returned before the handler runs";
    const std::size_t chunks = (c.total + c.chunk - 1) / c.chunk;
    if (outgoing) {
        EXPECT_EQ(peer.remote, source);
        EXPECT_EQ(r.engine->device_to_host(), chunks);
        EXPECT_EQ(r.engine->host_to_device(), 0u);
    } else {
        EXPECT_EQ(device, source);
        EXPECT_EQ(r.engine->host_to_device(), chunks);
        EXPECT_EQ(r.engine->device_to_host(), 0u);
    }
    EXPECT_EQ(r.engine->bytes_copied(), c.total);
    EXPECT_EQ(r.engine->outstanding(), 0u);
    if (c.mode == staging_mode::whole) {
        EXPECT_EQ(peer.started, 1u);
        EXPECT_EQ(peer.whole_transfers, 1u);
    } else {
        EXPECT_EQ(peer.started, chunks);
        EXPECT_TRUE(std::is_sorted(peer.order.begin(), peer.order.end()));
        EXPECT_LE(peer.max_outstanding, c.slots);
        if (outgoing) {
            for (unsigned w : peer.writes)
                ASSERT_EQ(w, 1u);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    all, staging_content,
    testing::Values(
        content_case{staging_direction::outgoing, staging_mode::chunked, 100000, 4096, 4, false},
        content_case{staging_direction::incoming, staging_mode::chunked, 100000, 4096, 4, false},
        content_case{staging_direction::outgoing, staging_mode::whole, 100000, 4096, 4, false},
        content_case{staging_direction::incoming, staging_mode::whole, 100000, 4096, 4, false},
        content_case{staging_direction::outgoing, staging_mode::chunked, 8192, 4096, 1, true},
        content_case{staging_direction::incoming, staging_mode::chunked, 12288, 1024, 3, true},
        content_case{staging_direction::outgoing, staging_mode::whole, 1, 4096, 2, true},
        content_case{staging_direction::incoming, staging_mode::whole, 4097, 4096, 2, true}),
    [](const testing::TestParamInfo<content_case>& info) {
        const content_case& c = info.param;
        return std::string(c.direction == staging_direction::outgoing ? "outgoing" : "incoming") +
               (c.mode == staging_mode::chunked ? "_chunked_" : "_whole_") +
               std::to_string(c.total) + "_by_" + std::to_string(c.chunk) + "_slots_" +
               std::to_string(c.slots) + (c.inline_completion ? "_inline" : "_posted");
    });

// ---- the poll timer and the io_context ----

// Copies held by the engine are released one at a time by a handler that
// keeps running on the same io_context: the operation waits without blocking
// it, and finds the copies by polling.
TEST(staging, held_copies_are_polled_without_blocking_the_io_context) {
    rig r(1024, 16);
    r.engine->set_mode(fake_copy_engine::mode::held);
    constexpr std::size_t total = 10 * 1024 + 17;
    memory_peer peer(r.io, total);
    auto source = pattern(total, 7);
    auto op = staging_operation::create(
        r.io.get_executor(),
        cfg(total, 1024, 3, staging_direction::outgoing, staging_mode::chunked), source.data(),
        r.engine, r.pool, peer.outgoing());
    op->async_run(r.handler(&peer));
    std::size_t ticks = 0, max_held = 0;
    std::function<void()> releaser = [&] {
        ++ticks;
        max_held = std::max(max_held, r.engine->held());
        r.engine->release(1);
        if (r.result.calls == 0)
            asio::post(r.io, releaser);
    };
    asio::post(r.io, releaser);
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(peer.remote, source);
    EXPECT_GT(ticks, 11u) << "the other handler ran while the copies were held";
    EXPECT_LE(max_held, 3u) << "at most `slots` copies in flight";
    EXPECT_GE(max_held, 2u) << "copies overlap";
    EXPECT_GT(op->poll_rounds(), 0u);
    EXPECT_LE(r.engine->max_outstanding(), 3u);
    EXPECT_EQ(r.pool->lent(), 0u);
}

// An outgoing chunked run of `total` bytes with `o`, its copies held and
// released one at a time by another handler until the run completes (or a
// minute passes). Returns the operation; the outcome is in `r.result`.
std::shared_ptr<staging_operation> run_with_held_copies(rig& r, memory_peer& peer,
                                                        std::vector<std::uint8_t>& source,
                                                        unsigned slots,
                                                        const staging_operation::options& o) {
    r.engine->set_mode(fake_copy_engine::mode::held);
    auto op = staging_operation::create(
        r.io.get_executor(),
        cfg(source.size(), 1024, slots, staging_direction::outgoing, staging_mode::chunked),
        source.data(), r.engine, r.pool, peer.outgoing(), o);
    op->async_run(r.handler(&peer));
    std::function<void()> releaser = [&] {
        r.engine->release(1);
        if (r.result.calls == 0)
            asio::post(r.io, releaser);
    };
    asio::post(r.io, releaser);
    r.io.run_for(std::chrono::seconds(60));
    return op;
}

// Right after copies start or finish they are polled by posting: with a
// timer period of an hour, held copies released one at a time by another
// handler are still found, and the timer never polls.
TEST(staging, copies_are_polled_by_posting_right_after_they_start) {
    rig r(1024, 16);
    auto source = pattern(6 * 1024 + 5, 8);
    memory_peer peer(r.io, source.size());
    staging_operation::options o;
    o.poll_period = std::chrono::hours(1);
    o.spin = std::chrono::seconds(100);
    auto op = run_with_held_copies(r, peer, source, 3, o);
    ASSERT_EQ(r.result.calls, 1u) << "the copies were not found without the timer";
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(peer.remote, source);
    EXPECT_GT(op->poll_rounds(), 0u);
    EXPECT_EQ(op->timer_polls(), 0u);
}

// Without the spin, the timer alone polls (every period).
TEST(staging, without_the_spin_the_timer_polls) {
    rig r(1024, 16);
    auto source = pattern(4 * 1024, 9);
    memory_peer peer(r.io, source.size());
    staging_operation::options o;
    o.poll_period = std::chrono::microseconds(100);
    o.spin = std::chrono::microseconds(0);
    auto op = run_with_held_copies(r, peer, source, 2, o);
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(peer.remote, source);
    EXPECT_GT(op->timer_polls(), 0u);
    EXPECT_EQ(op->poll_rounds(), op->timer_polls()) << "every poll was the timer's";
}

// ---- errors ----

TEST(staging, copy_failure_is_reported_after_the_work_in_flight) {
    for (bool at_start : {false, true}) {
        rig r(1024, 16);
        constexpr std::size_t total = 8 * 1024;
        const error_code failure = make_error_code(ucx::error::cuda_error);
        if (at_start)
            r.engine->fail_start(3, failure);
        else
            r.engine->fail_completion(3, failure);
        memory_peer peer(r.io, total);
        auto source = pattern(total, 11);
        auto op = staging_operation::create(
            r.io.get_executor(),
            cfg(total, 1024, 2, staging_direction::outgoing, staging_mode::chunked), source.data(),
            r.engine, r.pool, peer.outgoing());
        op->async_run(r.handler(&peer));
        r.io.run();
        ASSERT_EQ(r.result.calls, 1u);
        EXPECT_EQ(r.result.ec, failure);
        EXPECT_EQ(r.result.copies_outstanding, 0u);
        EXPECT_EQ(r.result.transfers_outstanding, 0u);
        EXPECT_EQ(r.result.buffers_lent, 0u);
        // Chunk 3 is never sent, nor anything after it; the chunks sent
        // before the failure was seen (chunk 2's copy may be reported in the
        // same poll as chunk 3's failure) are the bytes reported.
        EXPECT_LE(peer.started, 3u);
        EXPECT_GE(peer.started, 2u);
        EXPECT_EQ(r.result.bytes, peer.started * 1024);
        EXPECT_TRUE(std::equal(source.begin(),
                               source.begin() + static_cast<std::ptrdiff_t>(r.result.bytes),
                               peer.remote.begin()));
        EXPECT_TRUE(std::all_of(peer.remote.begin() + 3 * 1024, peer.remote.end(),
                                [](auto b) { return b == 0; }));
        EXPECT_EQ(r.engine->started(), 4u) << "no copy after the failure";
    }
}

TEST(staging, transfer_failure_is_reported) {
    for (auto mode : {staging_mode::chunked, staging_mode::whole}) {
        rig r(1024, 16);
        constexpr std::size_t total = 6 * 1024;
        memory_peer peer(r.io, total);
        peer.fail_chunk = mode == staging_mode::chunked ? 2 : ucx::detail::staging_plan::whole;
        auto source = pattern(total, 13);
        auto op = staging_operation::create(r.io.get_executor(),
                                            cfg(total, 1024, 2, staging_direction::outgoing, mode),
                                            source.data(), r.engine, r.pool, peer.outgoing());
        op->async_run(r.handler(&peer));
        r.io.run();
        ASSERT_EQ(r.result.calls, 1u);
        EXPECT_EQ(r.result.ec, peer.failure);
        EXPECT_EQ(r.result.transfers_outstanding, 0u);
        EXPECT_EQ(r.result.copies_outstanding, 0u);
        EXPECT_EQ(r.result.buffers_lent, 0u);
        if (mode == staging_mode::chunked) {
            EXPECT_EQ(r.result.bytes, 2 * 1024u);
            EXPECT_LE(peer.started, 4u) << "no transfer starts after the failure";
        } else {
            EXPECT_EQ(r.result.bytes, 0u);
            EXPECT_EQ(peer.started, 1u);
        }
    }
}

TEST(staging, pool_exhausted_fails_with_allocation_failed) {
    rig r(1024, 1);
    void* taken = r.pool->acquire();
    ASSERT_NE(taken, nullptr);
    memory_peer peer(r.io, 4096);
    std::vector<std::uint8_t> device(4096, 1);
    auto op = staging_operation::create(
        r.io.get_executor(), cfg(4096, 1024, 2, staging_direction::outgoing, staging_mode::chunked),
        device.data(), r.engine, r.pool, peer.outgoing());
    op->async_run(r.handler(&peer));
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_EQ(r.result.ec, make_error_code(ucx::error::allocation_failed));
    EXPECT_EQ(peer.started, 0u);
    EXPECT_EQ(r.engine->started(), 0u);
    r.pool->release(taken);
}

TEST(staging, a_pool_lending_fewer_buffers_gives_fewer_slots) {
    rig r(1024, 2);
    constexpr std::size_t total = 16 * 1024;
    memory_peer peer(r.io, total);
    auto source = pattern(total, 17);
    auto op = staging_operation::create(
        r.io.get_executor(),
        cfg(total, 1024, 8, staging_direction::outgoing, staging_mode::chunked), source.data(),
        r.engine, r.pool, peer.outgoing());
    op->async_run(r.handler(&peer));
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(op->plan()->config().slots, 2u);
    EXPECT_EQ(peer.remote, source);
    EXPECT_LE(peer.max_outstanding, 2u);
    EXPECT_EQ(r.pool->allocations(), 2u);
}

// ---- cancellation ----

TEST(staging, cancel_waits_for_held_copies_then_aborts) {
    rig r(1024, 16);
    r.engine->set_mode(fake_copy_engine::mode::held);
    constexpr std::size_t total = 8 * 1024;
    memory_peer peer(r.io, total);
    auto source = pattern(total, 19);
    auto op = staging_operation::create(
        r.io.get_executor(),
        cfg(total, 1024, 3, staging_direction::outgoing, staging_mode::chunked), source.data(),
        r.engine, r.pool, peer.outgoing());
    op->async_run(r.handler(&peer));
    r.io.poll();
    ASSERT_EQ(r.engine->held(), 3u);
    op->cancel();
    r.io.poll();
    EXPECT_EQ(r.result.calls, 0u) << "the copies still use the staging buffers";
    EXPECT_EQ(r.pool->lent(), 3u);
    r.engine->release();
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_EQ(r.result.ec, asio::error::operation_aborted);
    EXPECT_EQ(r.result.bytes, 0u);
    EXPECT_EQ(peer.started, 0u) << "nothing is sent after the cancel";
    EXPECT_EQ(r.engine->started(), 3u);
    EXPECT_EQ(r.result.copies_outstanding, 0u);
    EXPECT_EQ(r.result.buffers_lent, 0u);
}

TEST(staging, cancellation_slot_cancels) {
    rig r(1024, 16);
    r.engine->set_mode(fake_copy_engine::mode::held);
    constexpr std::size_t total = 4 * 1024;
    memory_peer peer(r.io, total);
    std::vector<std::uint8_t> device(total, 0);
    peer.remote = pattern(total, 23);
    auto op = staging_operation::create(
        r.io.get_executor(),
        cfg(total, 1024, 2, staging_direction::incoming, staging_mode::chunked), device.data(),
        r.engine, r.pool, peer.incoming());
    asio::cancellation_signal signal;
    op->async_run(asio::bind_cancellation_slot(signal.slot(), r.handler(&peer)));
    // Both chunks' transfers complete; their copies to the device are held.
    r.io.poll();
    ASSERT_EQ(r.engine->held(), 2u);
    signal.emit(asio::cancellation_type::terminal);
    r.engine->release(1);
    r.io.run_one(); // the poll finds chunk 0 on the device
    r.engine->release();
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_EQ(r.result.ec, asio::error::operation_aborted);
    EXPECT_EQ(peer.started, 2u) << "chunks 2 and 3 are not received after the cancel";
    EXPECT_EQ(r.result.buffers_lent, 0u);
}

TEST(staging, cancel_before_run_completes_without_work) {
    rig r(1024, 16);
    memory_peer peer(r.io, 4096);
    std::vector<std::uint8_t> device(4096, 0);
    auto op = staging_operation::create(
        r.io.get_executor(), cfg(4096, 1024, 2, staging_direction::incoming, staging_mode::whole),
        device.data(), r.engine, r.pool, peer.incoming());
    op->cancel();
    op->async_run(r.handler(&peer));
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_EQ(r.result.ec, asio::error::operation_aborted);
    EXPECT_EQ(peer.started, 0u);
    EXPECT_EQ(r.engine->started(), 0u);
    EXPECT_EQ(r.pool->allocations(), 0u);
}

TEST(staging, a_second_run_is_refused) {
    rig r(1024, 16);
    memory_peer peer(r.io, 1024);
    std::vector<std::uint8_t> device(1024, 5);
    auto op = staging_operation::create(
        r.io.get_executor(), cfg(1024, 1024, 1, staging_direction::outgoing, staging_mode::chunked),
        device.data(), r.engine, r.pool, peer.outgoing());
    op->async_run(r.handler(&peer));
    error_code second;
    op->async_run([&](error_code ec, std::size_t) { second = ec; });
    r.io.run();
    EXPECT_EQ(second, asio::error::already_started);
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(peer.remote, device);
}

// ---- lifetime ----

// The handler drops every reference to the operation, the engine and the pool.
TEST(staging, handler_may_destroy_everything) {
    asio::io_context io;
    auto engine = std::make_shared<fake_copy_engine>();
    auto pool = std::make_shared<pinned_pool>(512, 8, false);
    memory_peer peer(io, 2048);
    auto source = pattern(2048, 29);
    auto op = staging_operation::create(
        io.get_executor(), cfg(2048, 512, 2, staging_direction::outgoing, staging_mode::chunked),
        source.data(), engine, pool, peer.outgoing());
    std::weak_ptr<staging_operation> weak = op;
    std::weak_ptr<pinned_pool> weak_pool = pool;
    unsigned calls = 0;
    op->async_run([&](error_code ec, std::size_t n) {
        ++calls;
        EXPECT_FALSE(ec);
        EXPECT_EQ(n, 2048u);
        op.reset();
        engine.reset();
        pool.reset();
    });
    io.run();
    EXPECT_EQ(calls, 1u);
    EXPECT_TRUE(weak.expired());
    EXPECT_TRUE(weak_pool.expired());
    EXPECT_EQ(peer.remote, source);
}

// The io_context ends with copies in flight: the operation abandons them
// (the engine forgets them) and returns its buffers; its handler never runs.
TEST(staging, destroyed_io_context_abandons_copies_in_flight) {
    auto engine = std::make_shared<fake_copy_engine>(fake_copy_engine::mode::held);
    auto pool = std::make_shared<pinned_pool>(512, 8, false);
    std::vector<std::uint8_t> device(2048, 3);
    unsigned calls = 0;
    std::weak_ptr<staging_operation> weak;
    {
        asio::io_context io;
        memory_peer peer(io, 2048);
        auto op = staging_operation::create(
            io.get_executor(),
            cfg(2048, 512, 2, staging_direction::outgoing, staging_mode::chunked), device.data(),
            engine, pool, peer.outgoing());
        weak = op;
        op->async_run([&](error_code, std::size_t) { ++calls; });
        op.reset();
        io.poll();
        EXPECT_EQ(engine->outstanding(), 2u);
        EXPECT_EQ(pool->lent(), 2u);
        EXPECT_FALSE(weak.expired()) << "the poll timer holds the operation";
    }
    EXPECT_TRUE(weak.expired());
    EXPECT_EQ(calls, 0u);
    EXPECT_EQ(engine->outstanding(), 0u);
    EXPECT_EQ(engine->held(), 0u);
    EXPECT_EQ(pool->lent(), 0u);
}

// ---- zero bytes ----

TEST(staging, zero_bytes) {
    for (auto mode : {staging_mode::chunked, staging_mode::whole}) {
        for (auto d : {staging_direction::outgoing, staging_direction::incoming}) {
            rig r(1024, 4);
            memory_peer peer(r.io, 0);
            auto op = staging_operation::create(
                r.io.get_executor(), cfg(0, 1024, 2, d, mode), nullptr, r.engine, r.pool,
                d == staging_direction::outgoing ? peer.outgoing() : peer.incoming());
            op->async_run(r.handler(&peer));
            r.io.run();
            ASSERT_EQ(r.result.calls, 1u);
            EXPECT_FALSE(r.result.ec);
            EXPECT_EQ(r.result.bytes, 0u);
            EXPECT_EQ(r.engine->started(), 0u);
            // A whole message of zero bytes is still one message.
            EXPECT_EQ(peer.started, mode == staging_mode::whole ? 1u : 0u);
        }
    }
}

TEST(staging, whole_incoming_shorter_message) {
    rig r(1024, 16);
    constexpr std::size_t total = 5000;
    memory_peer peer(r.io, total);
    peer.remote = pattern(total, 31);
    peer.message_bytes = 2100;
    std::vector<std::uint8_t> device(total, 0);
    auto op = staging_operation::create(
        r.io.get_executor(), cfg(total, 1024, 2, staging_direction::incoming, staging_mode::whole),
        device.data(), r.engine, r.pool, peer.incoming());
    op->async_run(r.handler(&peer));
    r.io.run();
    ASSERT_EQ(r.result.calls, 1u);
    EXPECT_FALSE(r.result.ec);
    EXPECT_EQ(r.result.bytes, 2100u);
    EXPECT_TRUE(std::equal(device.begin(), device.begin() + 2100, peer.remote.begin()));
    EXPECT_TRUE(std::all_of(device.begin() + 2100, device.end(), [](auto b) { return b == 0; }));
    EXPECT_EQ(r.engine->started(), 3u);
    EXPECT_EQ(r.pool->lent(), 0u);
}

// ---- the pool ----

TEST(staging_pinned_pool, bounded_and_recycled) {
    pinned_pool pool(256, 3, false);
    EXPECT_FALSE(pool.pinned());
    void* a = pool.acquire();
    void* b = pool.acquire();
    void* c = pool.acquire();
    ASSERT_TRUE(a && b && c);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
    EXPECT_EQ(pool.acquire(), nullptr) << "bounded";
    EXPECT_EQ(pool.lent(), 3u);
    std::memset(a, 1, 256);
    pool.release(b);
    void* again = pool.acquire();
    EXPECT_EQ(again, b) << "lent again";
    EXPECT_EQ(pool.allocations(), 3u) << "no allocation after warm-up";
    pool.release(a);
    pool.release(again);
    pool.release(c);
    EXPECT_EQ(pool.lent(), 0u);
    for (int i = 0; i < 100; ++i) {
        void* p = pool.acquire();
        ASSERT_NE(p, nullptr);
        pool.release(p);
    }
    EXPECT_EQ(pool.allocations(), 3u);
}

TEST(staging_pinned_pool, contiguous_buffers_count_against_the_bound) {
    pinned_pool pool(100, 10, false);
    void* small = pool.acquire_contiguous(50);
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(pool.lent(), 1u);
    void* big = pool.acquire_contiguous(650); // 7 buffers' share
    ASSERT_NE(big, nullptr);
    EXPECT_EQ(pool.lent(), 8u);
    std::memset(big, 2, 650);
    EXPECT_EQ(pool.acquire_contiguous(300), nullptr) << "bound: 8 + 3 > 10";
    EXPECT_EQ(pool.acquire_contiguous(1001), nullptr) << "larger than the bound";
    pool.release_contiguous(big, 650);
    EXPECT_EQ(pool.lent(), 1u);
    const std::size_t allocations = pool.allocations();
    void* again = pool.acquire_contiguous(600);
    EXPECT_EQ(again, big) << "the kept buffer is lent again";
    EXPECT_EQ(pool.allocations(), allocations);
    pool.release_contiguous(again, 600);
    // The kept buffer makes room for regular ones when needed.
    std::vector<void*> regular;
    for (int i = 0; i < 9; ++i) {
        void* p = pool.acquire();
        ASSERT_NE(p, nullptr) << i;
        regular.push_back(p);
    }
    EXPECT_EQ(pool.acquire(), nullptr);
    for (void* p : regular)
        pool.release(p);
    pool.release_contiguous(small, 50);
    EXPECT_EQ(pool.lent(), 0u);
}

// ---- the copy engines ----

TEST(staging_fake_copy_engine, held_copies_move_their_bytes_when_released) {
    fake_copy_engine engine(fake_copy_engine::mode::held);
    std::vector<std::uint8_t> src = pattern(64, 37), dst(64, 0);
    copy_handle h{};
    ASSERT_FALSE(engine.start(dst.data(), src.data(), 64, copy_direction::device_to_host, h));
    error_code ec;
    EXPECT_FALSE(engine.poll(h, ec));
    EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](auto b) { return b == 0; }));
    EXPECT_EQ(engine.release(), 1u);
    ASSERT_TRUE(engine.poll(h, ec));
    EXPECT_FALSE(ec);
    EXPECT_EQ(dst, src);
    // A stale handle.
    EXPECT_TRUE(engine.poll(h, ec));
    EXPECT_EQ(ec, make_error_code(ucx::errc::invalid_param));
    EXPECT_EQ(engine.finished(), 1u);
}

TEST(staging_fake_copy_engine, scripted_failures) {
    fake_copy_engine engine;
    const error_code failure = make_error_code(ucx::error::cuda_error);
    engine.fail_start(0, failure);
    engine.fail_completion(1, failure);
    std::vector<std::uint8_t> src(8, 9), dst(8, 0);
    copy_handle h{};
    EXPECT_EQ(engine.start(dst.data(), src.data(), 8, copy_direction::host_to_device, h), failure);
    ASSERT_FALSE(engine.start(dst.data(), src.data(), 8, copy_direction::host_to_device, h));
    error_code ec;
    ASSERT_TRUE(engine.poll(h, ec));
    EXPECT_EQ(ec, failure);
    EXPECT_EQ(dst, std::vector<std::uint8_t>(8, 0)) << "a failed copy moves nothing";
    ASSERT_FALSE(engine.start(dst.data(), src.data(), 8, copy_direction::host_to_device, h));
    ASSERT_TRUE(engine.poll(h, ec));
    EXPECT_FALSE(ec);
    EXPECT_EQ(dst, src);
    EXPECT_EQ(engine.started(), 3u);
}

TEST(staging_cuda_copy_engine, made_only_where_cuda_and_a_device_exist) {
    error_code ec;
    auto engine = ucx::detail::make_cuda_copy_engine(ec);
    if (!ucx::built_with_cuda()) {
        EXPECT_EQ(engine, nullptr);
        EXPECT_EQ(ec, make_error_code(ucx::error::memory_type_not_supported));
    } else if (ucx::cuda_device_count() == 0) {
        EXPECT_EQ(engine, nullptr);
        EXPECT_EQ(ec, make_error_code(ucx::error::cuda_unavailable));
    } else {
        ASSERT_NE(engine, nullptr) << ec.message();
        EXPECT_FALSE(ec);
    }
}

#ifdef UCX_ASIO_TEST_CUDA

// Device memory through the CUDA copy engine and pinned buffers, every mode
// and direction: only where a GPU is present.
TEST(staging_cuda_copy_engine, device_memory_round_trip) {
    if (ucx::cuda_device_count() == 0)
        GTEST_SKIP() << "no CUDA device";
    error_code ec;
    std::shared_ptr<ucx::detail::copy_engine> engine = ucx::detail::make_cuda_copy_engine(ec);
    ASSERT_NE(engine, nullptr) << ec.message();
    auto pool = std::make_shared<pinned_pool>(64 * 1024, 64);
    EXPECT_TRUE(pool->pinned());
    constexpr std::size_t total = 1024 * 1024 + 321;
    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, total), cudaSuccess);
    for (auto mode : {staging_mode::chunked, staging_mode::whole}) {
        asio::io_context io;
        const auto source = pattern(total, 41);
        // In: the peer's bytes land on the device.
        memory_peer in_peer(io, total);
        in_peer.remote = source;
        ASSERT_EQ(cudaMemset(device, 0, total), cudaSuccess);
        unsigned calls = 0;
        auto in = staging_operation::create(
            io.get_executor(), cfg(total, 64 * 1024, 4, staging_direction::incoming, mode), device,
            engine, pool, in_peer.incoming());
        in->async_run([&](error_code e, std::size_t n) {
            ++calls;
            EXPECT_FALSE(e) << e.message();
            EXPECT_EQ(n, total);
        });
        io.run();
        ASSERT_EQ(calls, 1u);
        std::vector<std::uint8_t> back(total, 0);
        ASSERT_EQ(cudaMemcpy(back.data(), device, total, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(back, source);
        // Out: the device's bytes reach the peer.
        io.restart();
        memory_peer out_peer(io, total);
        auto out = staging_operation::create(
            io.get_executor(), cfg(total, 64 * 1024, 4, staging_direction::outgoing, mode), device,
            engine, pool, out_peer.outgoing());
        out->async_run([&](error_code e, std::size_t n) {
            ++calls;
            EXPECT_FALSE(e) << e.message();
            EXPECT_EQ(n, total);
        });
        io.run();
        ASSERT_EQ(calls, 2u);
        EXPECT_EQ(out_peer.remote, source);
        EXPECT_EQ(pool->lent(), 0u);
    }
    (void)cudaFree(device);
}

#endif

} // namespace
