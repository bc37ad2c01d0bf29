// Random bytes from the kernel, for nonces, seeds and unique names.
//
// getrandom(2) rather than std::random_device: the kernel's source, without
// an exception where a device is missing, and without the C library symbols
// that std::random_device's implementation needs from a newer glibc than the
// rest of the library (a program linked with the C++ runtime statically runs
// on older hosts: tools/gpu-bundle.sh).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ucx::detail {

/// Fills `n` bytes at `out` from getrandom(2) (the kernel's pool, blocking
/// only until it is first initialised at boot). Where the kernel refuses
/// (a seccomp filter, a kernel before 3.17), the bytes come from the clock,
/// the process id, a counter and an address, mixed: unique, not secret.
void random_bytes(void* out, std::size_t n) noexcept;

/// 64 random bits (random_bytes).
inline std::uint64_t random_u64() noexcept {
    std::uint64_t v = 0;
    random_bytes(&v, sizeof v);
    return v;
}

} // namespace ucx::detail
