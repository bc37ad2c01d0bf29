// Unit tests of the staging plan (ucx::detail::staging_plan): the order of its
// copies and transfers step by step in both modes and directions, overlap,
// the bound on slots in flight, chunk sizes, errors, cancellation, empty
// messages, and seeded random completion orders that move real bytes through
// simulated staging memory.
#include "gpu/staging_plan.hpp"

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using ucx::detail::copy_direction;
using ucx::detail::staging_action;
using ucx::detail::staging_action_kind;
using ucx::detail::staging_config;
using ucx::detail::staging_direction;
using ucx::detail::staging_mode;
using ucx::detail::staging_plan;
using error_code = boost::system::error_code;

constexpr auto whole = staging_plan::whole;
const error_code ok{};
const error_code copy_error = boost::system::errc::make_error_code(boost::system::errc::io_error);
const error_code transfer_error =
    boost::system::errc::make_error_code(boost::system::errc::connection_reset);
const error_code aborted = boost::asio::error::operation_aborted;

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

// "C<chunk>s<slot>:<offset>+<length>" for a copy (with "@<staging offset>" when
// not 0 and "<" for host to device), "T<chunk>s<slot>:<offset>+<length>" for a
// chunk's transfer, "TW+<length>" for the whole message's, "DONE(<ec>,<bytes>)".
std::string str(const staging_action& a) {
    switch (a.kind) {
    case staging_action_kind::none:
        return "NONE";
    case staging_action_kind::copy: {
        std::string s = std::string(a.direction == copy_direction::host_to_device ? "C<" : "C") +
                        std::to_string(a.chunk) + "s" + std::to_string(a.slot) + ":" +
                        std::to_string(a.offset) + "+" + std::to_string(a.length);
        if (a.staging_offset != 0)
            s += "@" + std::to_string(a.staging_offset);
        return s;
    }
    case staging_action_kind::transfer:
        if (a.chunk == whole)
            return "TW+" + std::to_string(a.length);
        return "T" + std::to_string(a.chunk) + "s" + std::to_string(a.slot) + ":" +
               std::to_string(a.offset) + "+" + std::to_string(a.length);
    case staging_action_kind::complete:
        return "DONE(" +
               std::string(!a.ec             ? "ok"
                           : a.ec == aborted ? "aborted"
                                             : "error") +
               "," + std::to_string(a.bytes) + ")";
    }
    return "?";
}

// Drains the plan: every action until `none`, as one space-separated string.
std::string drain(staging_plan& p) {
    std::string s;
    for (;;) {
        staging_action a = p.next();
        if (a.kind == staging_action_kind::none)
            return s;
        if (!s.empty())
            s += " ";
        s += str(a);
    }
}

// ---- the order of actions, step by step ----

TEST(staging_plan, chunked_outgoing_order) {
    staging_plan p(cfg(10, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    EXPECT_EQ(p.chunks(), 3u);
    EXPECT_EQ(drain(p), "") << "nothing before start";
    ASSERT_TRUE(p.start());
    EXPECT_FALSE(p.start());
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4");
    EXPECT_EQ(p.in_flight(), 2u);
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "T0s0:0+4");
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "T1s1:4+4");
    // Chunk 2 reuses the slot of chunk 0 once chunk 0 is sent, while chunk 1
    // is still on the wire.
    ASSERT_TRUE(p.transfer_done(0, ok));
    EXPECT_EQ(drain(p), "C2s0:8+2");
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "T2s0:8+2");
    ASSERT_TRUE(p.transfer_done(1, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.transfer_done(2, ok));
    EXPECT_EQ(drain(p), "DONE(ok,10)");
    EXPECT_TRUE(p.completed());
    EXPECT_EQ(drain(p), "");
}

TEST(staging_plan, chunked_outgoing_transfers_stay_in_chunk_order) {
    staging_plan p(cfg(12, 4, 3, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4 C2s2:8+4");
    // Copies finish out of order: a chunk's transfer waits for the ones before.
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "T0s0:0+4 T1s1:4+4 T2s2:8+4");
    // Transfers complete out of order.
    ASSERT_TRUE(p.transfer_done(2, ok));
    ASSERT_TRUE(p.transfer_done(0, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.transfer_done(1, ok));
    EXPECT_EQ(drain(p), "DONE(ok,12)");
}

TEST(staging_plan, chunked_incoming_order) {
    staging_plan p(cfg(10, 4, 2, staging_direction::incoming, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "T0s0:0+4 T1s1:4+4");
    // A received chunk goes to the device at once, in whatever order.
    ASSERT_TRUE(p.transfer_done(1, ok));
    EXPECT_EQ(drain(p), "C<1s1:4+4");
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "T2s1:8+2");
    ASSERT_TRUE(p.transfer_done(0, ok));
    ASSERT_TRUE(p.transfer_done(2, ok));
    EXPECT_EQ(drain(p), "C<0s0:0+4 C<2s1:8+2");
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "DONE(ok,10)");
}

TEST(staging_plan, whole_outgoing_order) {
    staging_plan p(cfg(10, 4, 2, staging_direction::outgoing, staging_mode::whole));
    p.start();
    // Copies into one contiguous buffer, at the message's offsets.
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4@4");
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "C2s0:8+2@8");
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "") << "the message goes once every copy is done";
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "TW+10");
    EXPECT_FALSE(p.transfer_done(0, ok)) << "only the whole message is in flight";
    ASSERT_TRUE(p.transfer_done(whole, ok));
    EXPECT_EQ(drain(p), "DONE(ok,10)");
}

TEST(staging_plan, whole_incoming_order) {
    staging_plan p(cfg(10, 4, 2, staging_direction::incoming, staging_mode::whole));
    p.start();
    EXPECT_EQ(drain(p), "TW+10");
    EXPECT_FALSE(p.copy_done(0, ok));
    ASSERT_TRUE(p.transfer_done(whole, ok, 10));
    EXPECT_EQ(drain(p), "C<0s0:0+4 C<1s1:4+4@4");
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "C<2s1:8+2@8");
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "DONE(ok,10)");
}

TEST(staging_plan, whole_incoming_shorter_message_copies_only_what_arrived) {
    staging_plan p(cfg(10, 4, 4, staging_direction::incoming, staging_mode::whole));
    p.start();
    EXPECT_EQ(drain(p), "TW+10");
    ASSERT_TRUE(p.transfer_done(whole, ok, 5));
    EXPECT_EQ(drain(p), "C<0s0:0+4 C<1s1:4+1@4");
    ASSERT_TRUE(p.copy_done(0, ok));
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "DONE(ok,5)");
}

// ---- overlap and the bound on slots ----

TEST(staging_plan, chunked_outgoing_copy_of_next_chunk_overlaps_transfer) {
    constexpr std::size_t n = 8;
    staging_plan p(cfg(n * 16, 16, 2, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    // Completions in the natural order: the oldest copy, then the oldest transfer.
    std::vector<std::size_t> copy_issued(n, SIZE_MAX), transfer_completed(n, SIZE_MAX);
    std::vector<std::size_t> copies, transfers;
    std::size_t clock = 0;
    bool done = false;
    while (!done) {
        for (staging_action a = p.next(); a.kind != staging_action_kind::none; a = p.next()) {
            if (a.kind == staging_action_kind::copy) {
                copy_issued[a.chunk] = clock++;
                copies.push_back(a.chunk);
            } else if (a.kind == staging_action_kind::transfer) {
                transfers.push_back(a.chunk);
            } else {
                done = true;
                EXPECT_FALSE(a.ec);
            }
        }
        if (!copies.empty()) {
            ASSERT_TRUE(p.copy_done(copies.front(), ok));
            copies.erase(copies.begin());
        } else if (!transfers.empty()) {
            transfer_completed[transfers.front()] = clock++;
            ASSERT_TRUE(p.transfer_done(transfers.front(), ok));
            transfers.erase(transfers.begin());
        } else {
            ASSERT_TRUE(done);
        }
    }
    for (std::size_t k = 0; k + 1 < n; ++k)
        EXPECT_LT(copy_issued[k + 1], transfer_completed[k]) << "chunk " << k;
}

TEST(staging_plan, chunked_incoming_transfer_of_next_chunk_overlaps_copy) {
    staging_plan p(cfg(64, 16, 2, staging_direction::incoming, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "T0s0:0+16 T1s1:16+16");
    ASSERT_TRUE(p.transfer_done(0, ok));
    EXPECT_EQ(drain(p), "C<0s0:0+16");
    ASSERT_TRUE(p.transfer_done(1, ok));
    EXPECT_EQ(drain(p), "C<1s1:16+16");
    // Chunk 2's transfer starts as soon as chunk 0 is on the device, while
    // chunk 1 is still being copied.
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "T2s0:32+16");
}

TEST(staging_plan, one_slot_serializes) {
    staging_plan p(cfg(8, 4, 1, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4");
    p.copy_done(0, ok);
    EXPECT_EQ(drain(p), "T0s0:0+4");
    p.transfer_done(0, ok);
    EXPECT_EQ(drain(p), "C1s0:4+4");
    p.copy_done(1, ok);
    EXPECT_EQ(drain(p), "T1s0:4+4");
    p.transfer_done(1, ok);
    EXPECT_EQ(drain(p), "DONE(ok,8)");
}

TEST(staging_plan, slots_are_bounded_by_chunks_and_at_least_one) {
    EXPECT_EQ(staging_plan(cfg(8, 4, 16, staging_direction::outgoing, staging_mode::chunked))
                  .config()
                  .slots,
              2u);
    EXPECT_EQ(staging_plan(cfg(8, 4, 0, staging_direction::outgoing, staging_mode::chunked))
                  .config()
                  .slots,
              1u);
    EXPECT_EQ(
        staging_plan(cfg(0, 4, 4, staging_direction::outgoing, staging_mode::whole)).config().slots,
        1u);
    // A chunk of 0 is one chunk of the whole message.
    staging_plan p(cfg(9, 0, 2, staging_direction::outgoing, staging_mode::chunked));
    EXPECT_EQ(p.chunks(), 1u);
    EXPECT_EQ(p.config().chunk, 9u);
}

// ---- chunk sizes ----

TEST(staging_plan, chunk_lengths) {
    staging_plan p(cfg(10, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    EXPECT_EQ(p.chunk_length(0), 4u);
    EXPECT_EQ(p.chunk_length(1), 4u);
    EXPECT_EQ(p.chunk_length(2), 2u);
    EXPECT_EQ(p.chunk_length(3), 0u);
    staging_plan exact(cfg(12, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    EXPECT_EQ(exact.chunks(), 3u);
    EXPECT_EQ(exact.chunk_length(2), 4u);
}

TEST(staging_plan, size_exactly_a_multiple_of_the_chunk) {
    for (auto m : {staging_mode::chunked, staging_mode::whole}) {
        staging_plan out(cfg(8, 4, 4, staging_direction::outgoing, m));
        out.start();
        EXPECT_EQ(drain(out),
                  m == staging_mode::chunked ? "C0s0:0+4 C1s1:4+4" : "C0s0:0+4 C1s1:4+4@4");
        staging_plan in(cfg(8, 4, 4, staging_direction::incoming, m));
        in.start();
        if (m == staging_mode::chunked) {
            EXPECT_EQ(drain(in), "T0s0:0+4 T1s1:4+4");
        } else {
            EXPECT_EQ(drain(in), "TW+8");
            in.transfer_done(whole, ok, 8);
            EXPECT_EQ(drain(in), "C<0s0:0+4 C<1s1:4+4@4");
        }
    }
}

TEST(staging_plan, one_byte_in_every_mode) {
    {
        staging_plan p(cfg(1, 4, 2, staging_direction::outgoing, staging_mode::chunked));
        p.start();
        EXPECT_EQ(drain(p), "C0s0:0+1");
        p.copy_done(0, ok);
        EXPECT_EQ(drain(p), "T0s0:0+1");
        p.transfer_done(0, ok);
        EXPECT_EQ(drain(p), "DONE(ok,1)");
    }
    {
        staging_plan p(cfg(1, 4, 2, staging_direction::incoming, staging_mode::chunked));
        p.start();
        EXPECT_EQ(drain(p), "T0s0:0+1");
        p.transfer_done(0, ok);
        EXPECT_EQ(drain(p), "C<0s0:0+1");
        p.copy_done(0, ok);
        EXPECT_EQ(drain(p), "DONE(ok,1)");
    }
    {
        staging_plan p(cfg(1, 4, 2, staging_direction::outgoing, staging_mode::whole));
        p.start();
        EXPECT_EQ(drain(p), "C0s0:0+1");
        p.copy_done(0, ok);
        EXPECT_EQ(drain(p), "TW+1");
        p.transfer_done(whole, ok);
        EXPECT_EQ(drain(p), "DONE(ok,1)");
    }
    {
        staging_plan p(cfg(1, 4, 2, staging_direction::incoming, staging_mode::whole));
        p.start();
        EXPECT_EQ(drain(p), "TW+1");
        p.transfer_done(whole, ok, 1);
        EXPECT_EQ(drain(p), "C<0s0:0+1");
        p.copy_done(0, ok);
        EXPECT_EQ(drain(p), "DONE(ok,1)");
    }
}

// ---- zero bytes ----

TEST(staging_plan, zero_bytes_chunked_completes_at_once) {
    for (auto d : {staging_direction::outgoing, staging_direction::incoming}) {
        staging_plan p(cfg(0, 4, 2, d, staging_mode::chunked));
        EXPECT_EQ(p.chunks(), 0u);
        p.start();
        EXPECT_EQ(drain(p), "DONE(ok,0)");
        EXPECT_TRUE(p.completed());
    }
}

TEST(staging_plan, zero_bytes_whole_is_still_one_message) {
    for (auto d : {staging_direction::outgoing, staging_direction::incoming}) {
        staging_plan p(cfg(0, 4, 2, d, staging_mode::whole));
        p.start();
        EXPECT_EQ(drain(p), "TW+0");
        EXPECT_EQ(p.in_flight(), 1u);
        ASSERT_TRUE(p.transfer_done(whole, ok, 0));
        EXPECT_EQ(drain(p), "DONE(ok,0)");
    }
}

// ---- errors ----

TEST(staging_plan, copy_error_in_the_middle_waits_for_in_flight_then_completes_once) {
    staging_plan p(cfg(6, 1, 3, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+1 C1s1:1+1 C2s2:2+1");
    p.copy_done(0, ok);
    EXPECT_EQ(drain(p), "T0s0:0+1");
    ASSERT_TRUE(p.copy_done(1, copy_error));
    EXPECT_EQ(p.error(), copy_error);
    EXPECT_EQ(drain(p), "") << "no new action; T0 and C2 are in flight";
    EXPECT_EQ(p.in_flight(), 2u);
    ASSERT_TRUE(p.copy_done(2, ok));
    EXPECT_EQ(drain(p), "") << "chunk 2 is not sent after the error";
    ASSERT_TRUE(p.transfer_done(0, ok));
    // Chunk 0 made it: one byte.
    EXPECT_EQ(drain(p), "DONE(error,1)");
    EXPECT_FALSE(p.copy_done(2, ok));
    EXPECT_FALSE(p.transfer_done(1, ok));
    p.cancel();
    EXPECT_EQ(drain(p), "");
}

TEST(staging_plan, transfer_error_in_the_middle_first_error_wins) {
    staging_plan p(cfg(16, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4");
    p.copy_done(0, ok);
    p.copy_done(1, ok);
    EXPECT_EQ(drain(p), "T0s0:0+4 T1s1:4+4");
    p.transfer_done(0, ok);
    EXPECT_EQ(drain(p), "C2s0:8+4");
    ASSERT_TRUE(p.transfer_done(1, transfer_error));
    EXPECT_EQ(drain(p), "");
    // A later error, or a cancel, does not replace the first.
    ASSERT_TRUE(p.copy_done(2, copy_error));
    p.cancel();
    EXPECT_EQ(p.error(), transfer_error);
    EXPECT_EQ(drain(p), "DONE(error,4)");
}

TEST(staging_plan, chunked_incoming_transfer_error_waits_for_copies) {
    staging_plan p(cfg(12, 4, 3, staging_direction::incoming, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "T0s0:0+4 T1s1:4+4 T2s2:8+4");
    p.transfer_done(0, ok);
    EXPECT_EQ(drain(p), "C<0s0:0+4");
    ASSERT_TRUE(p.transfer_done(1, transfer_error));
    EXPECT_EQ(drain(p), "");
    // Chunk 2 arrives, but is not copied any more.
    ASSERT_TRUE(p.transfer_done(2, ok));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_EQ(drain(p), "DONE(error,4)");
}

TEST(staging_plan, whole_outgoing_copy_error_sends_nothing) {
    staging_plan p(cfg(12, 4, 2, staging_direction::outgoing, staging_mode::whole));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4@4");
    ASSERT_TRUE(p.copy_done(0, copy_error));
    EXPECT_EQ(drain(p), "");
    ASSERT_TRUE(p.copy_done(1, ok));
    EXPECT_EQ(drain(p), "DONE(error,0)");
}

TEST(staging_plan, whole_transfer_error) {
    for (auto d : {staging_direction::outgoing, staging_direction::incoming}) {
        staging_plan p(cfg(4, 4, 2, d, staging_mode::whole));
        p.start();
        if (d == staging_direction::outgoing) {
            EXPECT_EQ(drain(p), "C0s0:0+4");
            p.copy_done(0, ok);
        }
        EXPECT_EQ(drain(p), "TW+4");
        ASSERT_TRUE(p.transfer_done(whole, transfer_error));
        EXPECT_FALSE(p.transfer_done(whole, ok)) << "reported once";
        EXPECT_EQ(drain(p), "DONE(error,0)");
    }
}

TEST(staging_plan, whole_incoming_copy_error_in_the_middle) {
    staging_plan p(cfg(16, 4, 2, staging_direction::incoming, staging_mode::whole));
    p.start();
    EXPECT_EQ(drain(p), "TW+16");
    p.transfer_done(whole, ok, 16);
    EXPECT_EQ(drain(p), "C<0s0:0+4 C<1s1:4+4@4");
    p.copy_done(0, ok);
    EXPECT_EQ(drain(p), "C<2s0:8+4@8");
    ASSERT_TRUE(p.copy_done(1, copy_error));
    EXPECT_EQ(drain(p), "") << "chunk 2's copy is in flight";
    ASSERT_TRUE(p.copy_done(2, ok));
    // Chunk 1 never reached the device: only chunk 0 counts.
    EXPECT_EQ(drain(p), "DONE(error,4)");
}

TEST(staging_plan, unknown_completions_are_refused) {
    staging_plan p(cfg(8, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    EXPECT_FALSE(p.copy_done(0, ok)) << "before start";
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4");
    EXPECT_FALSE(p.transfer_done(0, ok)) << "chunk 0 is being copied, not sent";
    EXPECT_FALSE(p.copy_done(5, ok));
    EXPECT_FALSE(p.transfer_done(whole, ok));
    ASSERT_TRUE(p.copy_done(0, ok));
    EXPECT_FALSE(p.copy_done(0, ok)) << "twice";
    EXPECT_EQ(p.in_flight(), 1u);
}

// ---- cancellation ----

TEST(staging_plan, cancel_waits_for_in_flight) {
    staging_plan p(cfg(16, 4, 2, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4 C1s1:4+4");
    p.copy_done(0, ok);
    EXPECT_EQ(drain(p), "T0s0:0+4");
    p.cancel();
    EXPECT_EQ(p.error(), aborted);
    EXPECT_EQ(drain(p), "");
    p.copy_done(1, ok);
    EXPECT_EQ(drain(p), "");
    p.transfer_done(0, ok);
    EXPECT_EQ(drain(p), "DONE(aborted,4)");
}

TEST(staging_plan, cancel_before_start_completes_without_actions) {
    staging_plan p(cfg(16, 4, 2, staging_direction::incoming, staging_mode::whole));
    p.cancel();
    EXPECT_EQ(drain(p), "DONE(aborted,0)");
    EXPECT_FALSE(p.start());
    EXPECT_EQ(drain(p), "");
}

TEST(staging_plan, cancel_after_the_work_finished_is_too_late) {
    staging_plan p(cfg(4, 4, 1, staging_direction::outgoing, staging_mode::chunked));
    p.start();
    EXPECT_EQ(drain(p), "C0s0:0+4");
    p.copy_done(0, ok);
    EXPECT_EQ(drain(p), "T0s0:0+4");
    p.transfer_done(0, ok);
    p.cancel();
    EXPECT_EQ(drain(p), "DONE(ok,4)");
    p.cancel();
    EXPECT_EQ(drain(p), "");
}

// ---- seeded random orders over simulated memory ----

// Executes a plan over simulated memory: the source (device memory outgoing,
// the peer's message incoming), the staging memory (slots, or the contiguous
// buffer), and the destination. Each copy and transfer moves its bytes when
// it completes, as the copy engine and UCX would, so a slot reused too early
// shows up as wrong bytes. In-flight actions complete in a random order, some
// with errors when `failure_rate` > 0.
struct simulation {
    staging_config config;
    staging_plan plan;
    std::mt19937_64 rng;
    double failure_rate;
    // Whole incoming: the peer's message may be shorter than planned.
    std::size_t message_bytes;

    std::vector<std::uint8_t> source, staging, destination;
    std::vector<unsigned> writes; // per destination byte
    std::vector<staging_action> pending;
    std::vector<int> slot_users;    // chunks (or lanes) holding each slot
    std::size_t next_transfer = 0;  // chunked: transfers are issued in chunk order
    bool transfer_issued = false;   // whole: the message's transfer was issued
    bool whole_transferred = false; // whole incoming: the message arrived
    unsigned completions = 0;
    error_code first_error{};
    staging_action result{};
    unsigned max_in_flight = 0;

    simulation(const staging_config& c, std::uint64_t seed, double failures, std::size_t received)
        : config(c), plan(c), rng(seed), failure_rate(failures), message_bytes(received),
          source(c.total), destination(c.total, 0), writes(c.total, 0),
          slot_users(plan.config().slots, 0) {
        for (auto& b : source)
            b = static_cast<std::uint8_t>(rng());
        const bool whole_mode = c.mode == staging_mode::whole;
        staging.assign(
            whole_mode ? c.total : std::size_t(plan.config().slots) * plan.config().chunk, 0xEE);
    }

    std::uint8_t* staged(const staging_action& a) {
        return staging.data() + (config.mode == staging_mode::whole
                                     ? a.staging_offset
                                     : std::size_t(a.slot) * plan.config().chunk);
    }

    void write_destination(std::size_t offset, const std::uint8_t* from, std::size_t n) {
        ASSERT_LE(offset + n, destination.size());
        std::copy(from, from + n, destination.begin() + static_cast<std::ptrdiff_t>(offset));
        for (std::size_t i = 0; i < n; ++i)
            ++writes[offset + i];
    }

    void issue(const staging_action& a) {
        ASSERT_EQ(completions, 0u) << "an action after completion";
        ASSERT_FALSE(first_error) << "an action after an error: " << str(a);
        const bool chunked = config.mode == staging_mode::chunked;
        const bool outgoing = config.direction == staging_direction::outgoing;
        if (a.kind == staging_action_kind::copy) {
            ASSERT_LT(a.slot, slot_users.size());
            EXPECT_EQ(a.direction,
                      outgoing ? copy_direction::device_to_host : copy_direction::host_to_device);
            if (chunked) {
                // Outgoing: the copy takes the slot; incoming: the slot is the
                // one its transfer filled.
                if (outgoing) {
                    ASSERT_EQ(slot_users[a.slot], 0) << "slot " << a.slot << " reused while busy";
                } else {
                    ASSERT_EQ(slot_users[a.slot], 1);
                }
                slot_users[a.slot] = 1;
                EXPECT_EQ(a.staging_offset, 0u);
            } else {
                ASSERT_EQ(slot_users[a.slot], 0) << "lane " << a.slot << " reused while busy";
                slot_users[a.slot] = 1;
                EXPECT_EQ(a.staging_offset, a.offset);
                if (!outgoing) {
                    EXPECT_TRUE(whole_transferred) << "a copy before the message arrived";
                } else {
                    EXPECT_FALSE(transfer_issued);
                }
            }
        } else {
            if (chunked) {
                ASSERT_NE(a.chunk, whole);
                EXPECT_EQ(a.chunk, next_transfer) << "transfers out of chunk order";
                next_transfer = a.chunk + 1;
                ASSERT_LT(a.slot, slot_users.size());
                if (outgoing) {
                    ASSERT_EQ(slot_users[a.slot], 1) << "a transfer of a slot not copied";
                } else {
                    ASSERT_EQ(slot_users[a.slot], 0) << "slot " << a.slot << " reused while busy";
                }
                slot_users[a.slot] = 1;
            } else {
                ASSERT_EQ(a.chunk, whole);
                ASSERT_FALSE(transfer_issued) << "the message is sent twice";
                EXPECT_EQ(a.length, config.total);
                transfer_issued = true;
                if (outgoing) {
                    for (int u : slot_users)
                        EXPECT_EQ(u, 0) << "the message is sent while a copy is in flight";
                }
            }
        }
        pending.push_back(a);
        max_in_flight = std::max(max_in_flight, static_cast<unsigned>(pending.size()));
    }

    void drain() {
        for (staging_action a = plan.next(); a.kind != staging_action_kind::none; a = plan.next()) {
            if (a.kind == staging_action_kind::complete) {
                ++completions;
                result = a;
                EXPECT_TRUE(pending.empty()) << "completed with work in flight";
            } else {
                issue(a);
            }
            if (testing::Test::HasFatalFailure())
                return;
        }
    }

    error_code maybe_fail(const error_code& kind) {
        if (failure_rate > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < failure_rate)
            return kind;
        return {};
    }

    // Completes one pending action, chosen at random.
    void complete_one() {
        const std::size_t i =
            std::uniform_int_distribution<std::size_t>(0, pending.size() - 1)(rng);
        const staging_action a = pending[i];
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        const bool chunked = config.mode == staging_mode::chunked;
        const bool outgoing = config.direction == staging_direction::outgoing;
        if (a.kind == staging_action_kind::copy) {
            const error_code ec = maybe_fail(copy_error);
            if (!ec) {
                if (outgoing)
                    std::copy_n(source.data() + a.offset, a.length, staged(a));
                else
                    write_destination(a.offset, staged(a), a.length);
            }
            // Outgoing chunked: the slot stays held until its transfer.
            if (ec || !(chunked && outgoing))
                slot_users[a.slot] = 0;
            if (ec && !first_error)
                first_error = ec;
            ASSERT_TRUE(plan.copy_done(a.chunk, ec));
        } else {
            const error_code ec = maybe_fail(transfer_error);
            std::size_t moved = a.length;
            if (!ec) {
                if (chunked && outgoing) {
                    write_destination(a.offset, staged(a), a.length);
                } else if (chunked) {
                    std::copy_n(source.data() + a.offset, a.length, staged(a));
                } else if (outgoing) {
                    write_destination(0, staging.data(), a.length);
                } else {
                    moved = message_bytes;
                    std::copy_n(source.data(), moved, staging.data());
                    whole_transferred = true;
                }
            }
            // Incoming chunked: the slot stays held until its copy.
            if (chunked && (ec || outgoing))
                slot_users[a.slot] = 0;
            if (ec && !first_error)
                first_error = ec;
            ASSERT_TRUE(plan.transfer_done(a.chunk, ec, moved));
        }
    }

    void run() {
        ASSERT_TRUE(plan.start());
        drain();
        std::size_t steps = 0;
        while (completions == 0 && !testing::Test::HasFatalFailure()) {
            ASSERT_FALSE(pending.empty()) << "stalled: nothing in flight and no completion";
            ASSERT_LT(++steps, 100000u);
            complete_one();
            if (testing::Test::HasFatalFailure())
                return;
            drain();
        }
        EXPECT_EQ(completions, 1u);
        EXPECT_TRUE(pending.empty());
        EXPECT_LE(max_in_flight, plan.config().slots + (config.mode == staging_mode::whole));
        EXPECT_EQ(plan.next().kind, staging_action_kind::none);
    }
};

struct random_case {
    staging_direction direction;
    staging_mode mode;
};

class staging_plan_random : public testing::TestWithParam<random_case> {};

TEST_P(staging_plan_random, every_byte_lands_exactly_once) {
    const auto [direction, mode] = GetParam();
    for (std::uint64_t seed = 1; seed <= 400; ++seed) {
        std::mt19937_64 rng(seed * 7919);
        staging_config c =
            cfg(rng() % 200, 1 + rng() % 32, 1 + static_cast<unsigned>(rng() % 5), direction, mode);
        std::size_t received = c.total;
        if (mode == staging_mode::whole && direction == staging_direction::incoming &&
            rng() % 3 == 0)
            received = c.total == 0 ? 0 : rng() % c.total;
        simulation s(c, seed, 0.0, received);
        s.run();
        if (HasFailure()) {
            ADD_FAILURE() << "seed " << seed << " total " << c.total << " chunk " << c.chunk
                          << " slots " << c.slots;
            return;
        }
        ASSERT_FALSE(s.result.ec) << "seed " << seed;
        ASSERT_EQ(s.result.bytes, received) << "seed " << seed;
        for (std::size_t i = 0; i < c.total; ++i) {
            const unsigned expected = i < received ? 1u : 0u;
            ASSERT_EQ(s.writes[i], expected) << "byte " << i << " seed " << seed;
            if (i < received) {
                ASSERT_EQ(s.destination[i], s.source[i]) << "byte " << i << " seed " << seed;
            }
        }
    }
}

TEST_P(staging_plan_random, errors_complete_once_after_in_flight_with_the_first_error) {
    const auto [direction, mode] = GetParam();
    unsigned failed_runs = 0;
    for (std::uint64_t seed = 1; seed <= 400; ++seed) {
        std::mt19937_64 rng(seed * 104729);
        staging_config c = cfg(1 + rng() % 200, 1 + rng() % 32,
                               1 + static_cast<unsigned>(rng() % 5), direction, mode);
        simulation s(c, seed, 0.1, c.total);
        s.run();
        if (HasFailure()) {
            ADD_FAILURE() << "seed " << seed;
            return;
        }
        ASSERT_EQ(s.result.ec, s.first_error) << "seed " << seed;
        failed_runs += s.first_error ? 1 : 0;
        // The reported prefix holds the message; nothing is written twice.
        ASSERT_LE(s.result.bytes, c.total);
        for (std::size_t i = 0; i < c.total; ++i) {
            ASSERT_LE(s.writes[i], 1u) << "byte " << i << " seed " << seed;
            if (i < s.result.bytes) {
                ASSERT_EQ(s.writes[i], 1u) << "byte " << i << " seed " << seed;
                ASSERT_EQ(s.destination[i], s.source[i]) << "byte " << i << " seed " << seed;
            }
        }
    }
    EXPECT_GT(failed_runs, 50u) << "the failures were exercised";
}

TEST_P(staging_plan_random, cancel_at_a_random_point) {
    const auto [direction, mode] = GetParam();
    for (std::uint64_t seed = 1; seed <= 200; ++seed) {
        std::mt19937_64 rng(seed * 31337);
        staging_config c = cfg(1 + rng() % 100, 1 + rng() % 16,
                               1 + static_cast<unsigned>(rng() % 4), direction, mode);
        simulation s(c, seed, 0.0, c.total);
        ASSERT_TRUE(s.plan.start());
        s.drain();
        const std::size_t cancel_after = rng() % 8;
        for (std::size_t i = 0; i < cancel_after && !s.pending.empty() && s.completions == 0; ++i) {
            s.complete_one();
            s.drain();
        }
        const bool already = s.completions != 0;
        s.plan.cancel();
        s.first_error = s.plan.error();
        if (!already) {
            s.drain();
            while (s.completions == 0) {
                ASSERT_FALSE(s.pending.empty()) << "seed " << seed;
                s.complete_one();
                s.drain();
            }
        }
        ASSERT_EQ(s.completions, 1u) << "seed " << seed;
        ASSERT_TRUE(s.pending.empty());
        if (s.result.ec) {
            ASSERT_EQ(s.result.ec, aborted) << "seed " << seed;
        } else {
            ASSERT_EQ(s.result.bytes, c.total) << "seed " << seed;
        }
        for (std::size_t i = 0; i < s.result.bytes; ++i)
            ASSERT_EQ(s.destination[i], s.source[i]) << "byte " << i << " seed " << seed;
    }
}

INSTANTIATE_TEST_SUITE_P(
    all, staging_plan_random,
    testing::Values(random_case{staging_direction::outgoing, staging_mode::chunked},
                    random_case{staging_direction::incoming, staging_mode::chunked},
                    random_case{staging_direction::outgoing, staging_mode::whole},
                    random_case{staging_direction::incoming, staging_mode::whole}),
    [](const testing::TestParamInfo<random_case>& info) {
        return std::string(info.param.direction == staging_direction::outgoing ? "outgoing"
                                                                               : "incoming") +
               "_" + (info.param.mode == staging_mode::chunked ? "chunked" : "whole");
    });

} // namespace
