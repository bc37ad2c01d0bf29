// The clock of the operations' latencies: its durations agree with the
// steady clock's over the same interval, however the machine schedules the
// test (the steady clock's readings bracket the tick clock's).
#include "util/tick_clock.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

namespace {

using ucx::detail::tick_clock;
using steady = std::chrono::steady_clock;

TEST(tick_clock, durations_agree_with_the_steady_clock) {
    const tick_clock& clock = tick_clock::get();
    std::printf("tick_clock reads %s\n",
                clock.reads_counter() ? "the time-stamp counter" : "the steady clock");
    for (auto pause : {std::chrono::microseconds(0), std::chrono::microseconds(300),
                       std::chrono::microseconds(20000)}) {
        const auto outer0 = steady::now();
        const std::int64_t t0 = clock.now();
        const auto inner0 = steady::now();
        if (pause.count() != 0)
            std::this_thread::sleep_for(pause);
        const auto inner1 = steady::now();
        const std::int64_t t1 = clock.now();
        const auto outer1 = steady::now();
        ASSERT_GE(t1, t0);
        const auto d = clock.to_duration(t1 - t0);
        // The calibration's error (1e-5 of the interval) with room to spare,
        // and a microsecond for the conversion's rounding.
        const auto slack =
            std::chrono::duration_cast<std::chrono::nanoseconds>((outer1 - outer0) / 1000) +
            std::chrono::microseconds(1);
        EXPECT_LE(d, outer1 - outer0 + slack);
        EXPECT_GE(d + slack, inner1 - inner0);
    }
}

TEST(tick_clock, is_one_clock_per_process) {
    EXPECT_EQ(&tick_clock::get(), &tick_clock::get());
}

} // namespace
