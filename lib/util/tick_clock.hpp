// A cheap clock for short durations measured on one thread (the latencies of
// a worker's operations): the processor's time-stamp counter where the
// kernel keeps its own time with it, else the steady clock.
//
// Reading std::chrono::steady_clock costs about 30 ns on a virtual machine
// (the kernel's clock read through the vDSO, then scaled), the time-stamp
// counter about 10. Linux uses the counter as its clock source ("tsc" in
// /sys/devices/system/clocksource/clocksource0/current_clocksource) only
// where it is invariant (it ticks at one rate in every power state) and in
// step across the processors, checked at boot: then two readings on
// different processors can be subtracted, as a thread that migrates between
// them needs. Elsewhere (another clock source, another architecture) the
// steady clock is read instead.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace ucx::detail {

class tick_clock {
public:
    /// The process's clock, calibrated on first use (about 2 ms, once).
    static const tick_clock& get();

    /// Now, in ticks.
    std::int64_t now() const noexcept {
#if defined(__x86_64__)
        if (counter_) [[likely]]
            return static_cast<std::int64_t>(__rdtsc());
#endif
        return std::chrono::steady_clock::now().time_since_epoch().count();
    }

    /// `ticks` (a difference of two `now()`) as a duration.
    std::chrono::nanoseconds to_duration(std::int64_t ticks) const noexcept {
        return std::chrono::nanoseconds(
            static_cast<std::int64_t>(static_cast<double>(ticks) * ns_per_tick_));
    }

    /// Whether it reads the time-stamp counter (false: the steady clock).
    bool reads_counter() const noexcept {
        return counter_;
    }

private:
    tick_clock();

    bool counter_ = false;
    /// Nanoseconds per tick (1 for the steady clock, whose ticks are
    /// nanoseconds with libstdc++ and libc++ on Linux).
    double ns_per_tick_ = 1.0;
};

} // namespace ucx::detail
