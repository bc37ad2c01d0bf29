#include "util/tick_clock.hpp"

#include <fstream>
#include <string>
#include <thread>

namespace ucx::detail {

namespace {

static_assert(std::chrono::steady_clock::period::num == 1 &&
                  std::chrono::steady_clock::period::den == 1'000'000'000,
              "tick_clock's fallback takes the steady clock's ticks for nanoseconds");

/// Whether the kernel keeps its time with the time-stamp counter.
bool kernel_uses_counter() {
#if defined(__x86_64__)
    std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string source;
    return f && (f >> source) && source == "tsc";
#else
    return false;
#endif
}

} // namespace

tick_clock::tick_clock() {
    if (!kernel_uses_counter())
        return;
#if defined(__x86_64__)
    // The counter's rate against the steady clock over the same 2 ms: a
    // preemption between the readings lengthens both alike; the readings'
    // own skew (tens of nanoseconds) is 1e-5 of the interval.
    using steady = std::chrono::steady_clock;
    const auto s0 = steady::now();
    const std::uint64_t t0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto s1 = steady::now();
    const std::uint64_t t1 = __rdtsc();
    const double ns = std::chrono::duration<double, std::nano>(s1 - s0).count();
    if (t1 <= t0 || ns <= 0)
        return;
    ns_per_tick_ = ns / static_cast<double>(t1 - t0);
    counter_ = true;
#endif
}

const tick_clock& tick_clock::get() {
    static const tick_clock clock;
    return clock;
}

} // namespace ucx::detail
