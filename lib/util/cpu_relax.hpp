// Internal: the pause of a thread that polls memory another processor writes.
#pragma once

namespace ucx::detail {

/// Tells the processor that this thread spins on memory: `pause` on x86,
/// `yield` on ARM, nothing elsewhere. A spinning worker polls the queues
/// that its peers write (shared memory); a pause between two polls makes
/// the next poll come a little later, so the writer takes the polled cache
/// lines back less often. How long a pause lasts depends on the processor
/// (about 25 ns on the AMD EPYC benchmark host, about 140 cycles on Intel
/// processors since Skylake), and the gain holds only for a short one: on
/// that host one pause per quiet poll shortened the 8 B round trip between
/// two spinning processes by about 8 %, two pauses lengthened it by 17 %.
/// `short_cpu_relax()` says whether this processor's pause is short.
[[gnu::always_inline]] inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

/// Whether `cpu_relax()` takes at most about 35 ns here (measured once, on
/// first use, over a few runs of 64 pauses; false where it does nothing).
bool short_cpu_relax() noexcept;

} // namespace ucx::detail
