// Device memory for tests on machines without a GPU: host buffers that a
// classifier calls device memory. Installed on a worker with
// `detail::use_device_staging` and a `fake_copy_engine`, it makes the
// library stage those buffers through host memory exactly as it stages GPU
// memory, with real UCX traffic.
#pragma once

#include "test_support.hpp"

#include <ucx/memory_type.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace ucx_test {

/// Host buffers that the classifier calls device memory.
struct fake_device {
    std::map<const char*, std::size_t> ranges;

    /// A buffer of `n` bytes of pattern `seed` (at least one byte, so that it
    /// has an address), marked as device memory.
    std::vector<char> make(std::size_t n, std::uint32_t seed) {
        std::vector<char> v = pattern(n == 0 ? 1 : n, seed);
        v.resize(n == 0 ? 1 : n);
        ranges[v.data()] = v.size();
        return v;
    }
    /// Marks the `n` bytes at `p` as device memory.
    void mark(const void* p, std::size_t n) { ranges[static_cast<const char*>(p)] = n; }
    template <class T>
    void mark(const std::vector<T>& v) {
        mark(v.data(), v.size() * sizeof(T));
    }
    ucx::memory_type classify(const void* p) const {
        const char* c = static_cast<const char*>(p);
        auto it = ranges.upper_bound(c);
        if (it == ranges.begin())
            return ucx::memory_type::host;
        --it;
        return c < it->first + it->second ? ucx::memory_type::cuda : ucx::memory_type::host;
    }
};

} // namespace ucx_test
