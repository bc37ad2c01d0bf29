#include "util/random.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace ucx::detail {

namespace {

/// SplitMix64's finalizer: spreads every input bit over the output.
std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void fallback_bytes(unsigned char* out, std::size_t n) noexcept {
    static std::atomic<std::uint64_t> counter{0};
    std::uint64_t state =
        static_cast<std::uint64_t>(
            std::chrono::high_resolution_clock::now().time_since_epoch().count()) ^
        (static_cast<std::uint64_t>(::getpid()) << 32) ^ reinterpret_cast<std::uintptr_t>(&state) ^
        (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL);
    while (n > 0) {
        state += 0x9e3779b97f4a7c15ULL;
        const std::uint64_t v = mix(state);
        const std::size_t k = n < sizeof v ? n : sizeof v;
        std::memcpy(out, &v, k);
        out += k;
        n -= k;
    }
}

} // namespace

void random_bytes(void* out, std::size_t n) noexcept {
    auto* p = static_cast<unsigned char*>(out);
    while (n > 0) {
        const ssize_t got = ::getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            fallback_bytes(p, n);
            return;
        }
        p += got;
        n -= static_cast<std::size_t>(got);
    }
}

} // namespace ucx::detail
