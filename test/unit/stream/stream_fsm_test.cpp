// Unit tests of a stream's byte accounting and end of stream
// (ucx::detail::stream_fsm): flow control, acknowledgements, half close, and
// how reads end, step by step and over random sequences. No UCX, no I/O.
#include "stream/stream_fsm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>

namespace {

using ucx::detail::stream_config;
using ucx::detail::stream_fsm;
using ucx::detail::stream_read_end;
using ucx::detail::write_decision;

stream_config small() {
    stream_config c;
    c.window = 100;
    c.ack_every = 10;
    return c;
}

// ---------------------------------------------------------------- writing

TEST(StreamFsm, WritesGoUntilTheWindowIsFull) {
    stream_fsm f(small());
    EXPECT_EQ(f.start_write(60, false), write_decision::go);
    f.on_sent(60);
    EXPECT_FALSE(f.window_full());
    EXPECT_EQ(f.start_write(60, false), write_decision::go); // room left: goes whole
    f.on_sent(60);
    EXPECT_TRUE(f.window_full());
    EXPECT_EQ(f.bytes_written(), 120u);
    EXPECT_EQ(f.start_write(1, false), write_decision::wait);
    // An empty write never waits: it completes at once.
    EXPECT_EQ(f.start_write(0, false), write_decision::go);
    EXPECT_EQ(f.start_write(0, true), write_decision::go);
}

TEST(StreamFsm, WritesWaitBehindEarlierWaitingWrites) {
    stream_fsm f(small());
    EXPECT_EQ(f.start_write(5, true), write_decision::wait);
    EXPECT_EQ(f.start_write(5, false), write_decision::go);
}

TEST(StreamFsm, AcksOpenTheWindowOnlyWhenTheyAreNews) {
    stream_fsm f(small());
    f.on_sent(150);
    EXPECT_TRUE(f.window_full());
    EXPECT_TRUE(f.on_peer_acked(40));
    EXPECT_EQ(f.peer_read(), 40u);
    EXPECT_TRUE(f.window_full());      // 110 unread
    EXPECT_FALSE(f.on_peer_acked(40)); // a duplicate
    EXPECT_FALSE(f.on_peer_acked(30)); // an old one, overtaken
    EXPECT_EQ(f.peer_read(), 40u);
    EXPECT_TRUE(f.on_peer_acked(51));
    EXPECT_FALSE(f.window_full()); // 99 unread
    EXPECT_EQ(f.start_write(1000, false), write_decision::go);
}

TEST(StreamFsm, AnAckBeyondWhatWasWrittenKeepsTheWindowOpen) {
    stream_fsm f(small());
    f.on_sent(10);
    EXPECT_TRUE(f.on_peer_acked(500));
    EXPECT_FALSE(f.window_full());
}

TEST(StreamFsm, HalfCloseOnceThenWritesBreak) {
    stream_fsm f(small());
    f.on_sent(7);
    EXPECT_TRUE(f.shutdown_send());
    EXPECT_TRUE(f.send_shut());
    EXPECT_FALSE(f.shutdown_send());
    EXPECT_EQ(f.start_write(1, false), write_decision::broken_pipe);
    EXPECT_EQ(f.start_write(0, false), write_decision::broken_pipe);
    // Reads go on after a half close of the sending side.
    EXPECT_EQ(f.read_end(true), stream_read_end::none);
}

TEST(StreamFsm, WritesBreakAfterThePeersGoodbyeButNotItsHalfClose) {
    stream_fsm f(small());
    f.on_peer_end(0, false);
    EXPECT_EQ(f.start_write(1, false), write_decision::go);
    f.on_peer_end(0, true);
    EXPECT_EQ(f.start_write(1, false), write_decision::broken_pipe);
}

// ---------------------------------------------------------------- reading

TEST(StreamFsm, AcksAreDueEveryAckEveryBytes) {
    stream_fsm f(small());
    f.on_read(9);
    EXPECT_FALSE(f.ack_due());
    f.on_read(1);
    EXPECT_TRUE(f.ack_due());
    f.on_ack_sent();
    EXPECT_FALSE(f.ack_due());
    f.on_read(25);
    EXPECT_TRUE(f.ack_due());
    f.on_ack_sent();
    EXPECT_EQ(f.bytes_read(), 35u);
    EXPECT_FALSE(f.ack_due());
}

TEST(StreamFsm, ReadsWaitWhileConnectedWithoutAnEnd) {
    stream_fsm f(small());
    EXPECT_EQ(f.read_end(true), stream_read_end::none);
    f.on_read(1000);
    EXPECT_EQ(f.read_end(true), stream_read_end::none);
}

TEST(StreamFsm, EofOnlyAfterExactlyTheAnnouncedBytes) {
    stream_fsm f(small());
    f.on_peer_end(30, true);
    EXPECT_EQ(f.peer_total(), std::optional<std::uint64_t>(30));
    EXPECT_TRUE(f.peer_said_goodbye());
    EXPECT_EQ(f.read_end(true), stream_read_end::none);
    f.on_read(29);
    EXPECT_EQ(f.read_end(true), stream_read_end::none);
    f.on_read(1);
    EXPECT_EQ(f.read_end(true), stream_read_end::eof);
    EXPECT_EQ(f.read_end(false), stream_read_end::eof); // the endpoint may go meanwhile
}

TEST(StreamFsm, ZeroBytesAnnouncedIsAnEofAtOnce) {
    stream_fsm f(small());
    f.on_peer_end(0, false);
    EXPECT_EQ(f.read_end(true), stream_read_end::eof);
}

TEST(StreamFsm, ClosedWithBytesMissingIsAReset) {
    stream_fsm f(small());
    f.on_peer_end(30, true);
    f.on_read(10);
    EXPECT_EQ(f.read_end(false), stream_read_end::reset);
}

TEST(StreamFsm, GoneWithoutAnEndIsAFailure) {
    stream_fsm f(small());
    f.on_read(10);
    EXPECT_EQ(f.read_end(false), stream_read_end::failed);
}

TEST(StreamFsm, TheGoodbyeWinsOverStreamEnd) {
    stream_fsm f(small());
    f.on_peer_end(10, false);
    EXPECT_FALSE(f.peer_said_goodbye());
    f.on_peer_end(12, false); // a later half close marker replaces it
    EXPECT_EQ(f.peer_total(), std::optional<std::uint64_t>(12));
    f.on_peer_end(20, true);
    EXPECT_EQ(f.peer_total(), std::optional<std::uint64_t>(20));
    f.on_peer_end(25, false);
    f.on_peer_end(26, true);
    EXPECT_EQ(f.peer_total(), std::optional<std::uint64_t>(20));
}

TEST(StreamFsm, ResetStartsFromZeroWithTheSameConfig) {
    stream_fsm f(small());
    f.on_sent(500);
    f.on_read(50);
    f.on_peer_end(50, true);
    f.shutdown_send();
    f.reset();
    EXPECT_EQ(f.bytes_written(), 0u);
    EXPECT_EQ(f.bytes_read(), 0u);
    EXPECT_FALSE(f.peer_total());
    EXPECT_FALSE(f.send_shut());
    EXPECT_FALSE(f.peer_said_goodbye());
    EXPECT_EQ(f.config().window, 100u);
}

TEST(StreamFsm, DefaultsMatchTheLibrarysFlowControl) {
    stream_fsm f;
    EXPECT_EQ(f.config().window, std::uint64_t{8} << 20);
    EXPECT_EQ(f.config().ack_every, std::uint64_t{1} << 20);
}

// ---------------------------------------------------------------- properties

// Random reads of what a peer wrote, markers and disconnects: eof comes once
// every announced byte was read and never before; a read that sees eof sees it
// from then on (no data after it); the window never lets more than `window`
// plus one write be unread.
TEST(StreamFsm, RandomSequencesEndExactlyAfterTheAnnouncedBytes) {
    for (unsigned seed = 1; seed <= 2000; ++seed) {
        std::mt19937_64 rng(seed);
        stream_fsm f(small());
        const std::uint64_t total = rng() % 200;
        std::uint64_t delivered = 0; // bytes the peer's data made available here
        bool announced = false;
        bool goodbye = false;
        bool open = true;
        bool saw_eof = false;
        int eof_transitions = 0;
        stream_read_end last = stream_read_end::none;
        for (int step = 0; step < 200; ++step) {
            switch (rng() % 6) {
            case 0:
            case 1: { // data arrives and is read
                const std::uint64_t n = std::min<std::uint64_t>(rng() % 40, total - delivered);
                ASSERT_FALSE(saw_eof && n > 0) << "seed " << seed << ": data after eof";
                delivered += n;
                f.on_read(n);
                if (f.ack_due())
                    f.on_ack_sent();
                ASSERT_FALSE(f.ack_due());
                break;
            }
            case 2: // the peer's end marker (it counts every byte it wrote)
                if (!goodbye) {
                    goodbye = rng() % 2 == 0;
                    f.on_peer_end(total, goodbye);
                    announced = true;
                }
                break;
            case 3: // the connection goes (after a goodbye, or a crash)
                if (rng() % 4 == 0)
                    open = false;
                break;
            default: { // the writer side, unrelated to reading
                const std::uint64_t n = rng() % 80;
                if (f.start_write(n, false) == write_decision::go)
                    f.on_sent(n);
                if (rng() % 3 == 0)
                    f.on_peer_acked(f.peer_read() + rng() % 60);
                ASSERT_LE(f.bytes_written() - std::min(f.bytes_written(), f.peer_read()),
                          f.config().window + 80)
                    << "seed " << seed;
                break;
            }
            }
            const stream_read_end e = f.read_end(open);
            if (e == stream_read_end::eof) {
                ASSERT_TRUE(announced) << "seed " << seed;
                ASSERT_EQ(f.bytes_read(), total) << "seed " << seed << ": eof early";
                if (last != stream_read_end::eof)
                    ++eof_transitions;
                saw_eof = true;
            } else {
                ASSERT_FALSE(saw_eof) << "seed " << seed << ": eof taken back";
                if (announced && f.bytes_read() == total)
                    FAIL() << "seed " << seed << ": every byte read, no eof";
                if (!open)
                    ASSERT_EQ(e, announced ? stream_read_end::reset : stream_read_end::failed);
                else
                    ASSERT_EQ(e, stream_read_end::none);
            }
            last = e;
        }
        EXPECT_LE(eof_transitions, 1) << "seed " << seed;
    }
}

} // namespace
