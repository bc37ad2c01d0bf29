#include "util/cpu_relax.hpp"

#include "util/tick_clock.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ucx::detail {

namespace {

bool measure_short_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    const tick_clock& clock = tick_clock::get();
    constexpr int pauses = 64;
    // The fastest of a few runs: a preemption or an interrupt lengthens one.
    std::int64_t best = INT64_MAX;
    for (int run = 0; run < 8; ++run) {
        const std::int64_t t0 = clock.now();
        for (int i = 0; i < pauses; ++i)
            cpu_relax();
        best = std::min(best, clock.now() - t0);
    }
    return clock.to_duration(best) <= std::chrono::nanoseconds(35 * pauses);
#else
    return false;
#endif
}

} // namespace

bool short_cpu_relax() noexcept {
    static const bool is_short = measure_short_relax();
    return is_short;
}

} // namespace ucx::detail
