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

namespace {
#if defined(__x86_64__)
/// Both clocks at one moment: the steady clock read between two readings of
/// the counter, the tightest of a few tries (a preemption between the
/// readings would put the moments apart).
struct clock_pair {
    double counter;
    std::chrono::steady_clock::time_point steady;
};
clock_pair read_both() {
    clock_pair best{};
    std::uint64_t width = ~std::uint64_t{0};
    for (int i = 0; i < 8; ++i) {
        const std::uint64_t before = __rdtsc();
        const auto steady = std::chrono::steady_clock::now();
        const std::uint64_t after = __rdtsc();
        if (after >= before && after - before < width) {
            width = after - before;
            best = {static_cast<double>(before) + static_cast<double>(after - before) / 2, steady};
        }
    }
    return best;
}
#endif
} // namespace

tick_clock::tick_clock() {
    if (!kernel_uses_counter())
        return;
#if defined(__x86_64__)
    // The counter's rate against the steady clock over the same 2 ms: a
    // preemption during the interval lengthens both alike, and each end is
    // one moment of both clocks to within the tightest pair of readings
    // (tens of nanoseconds: 1e-5 of the interval).
    const clock_pair a = read_both();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const clock_pair b = read_both();
    const double ns = std::chrono::duration<double, std::nano>(b.steady - a.steady).count();
    if (b.counter <= a.counter || ns <= 0)
        return;
    ns_per_tick_ = ns / (b.counter - a.counter);
    counter_ = true;
#endif
}

const tick_clock& tick_clock::get() {
    static const tick_clock clock;
    return clock;
}

} // namespace ucx::detail
