// Shared by the stream tests and their peer process: fast deterministic
// contents and random sizes from 1 byte to 4 MiB (log-uniform, so small and
// large sizes are both common).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ucx_test {

inline std::vector<char> stream_pattern(std::size_t size, std::uint64_t seed) {
    std::vector<char> v(size);
    std::mt19937_64 gen(seed);
    std::size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        const std::uint64_t x = gen();
        std::memcpy(v.data() + i, &x, 8);
    }
    for (const std::uint64_t x = gen(); i < size; ++i)
        v[i] = static_cast<char>(x >> (8 * (i % 8)));
    return v;
}

/// A random size in [1, max], log-uniform.
inline std::size_t random_size(std::mt19937& gen, std::size_t max) {
    std::uniform_real_distribution<double> d(0.0, std::log(static_cast<double>(max)));
    const auto n = static_cast<std::size_t>(std::exp(d(gen)));
    return n < 1 ? 1 : (n > max ? max : n);
}

} // namespace ucx_test
