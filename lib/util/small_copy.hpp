// Internal: a copy of a few bytes without a call.
//
// The headers and small payloads of active messages are copied once or twice
// per message, with a length known only at run time. std::memcpy then calls
// the C library's routine (a dozen instructions of dispatch before the copy);
// up to 32 bytes, two overlapping fixed-size copies do the same inline.
#pragma once

#include <cstddef>
#include <cstring>

namespace ucx::detail {

/// Copies `n` bytes from `src` to `dst` (not overlapping), as std::memcpy.
inline void copy_small(void* dst, const void* src, std::size_t n) noexcept {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    if (n > 32) [[unlikely]] {
        std::memcpy(d, s, n);
    } else if (n >= 16) {
        std::memcpy(d, s, 16);
        std::memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        std::memcpy(d, s, 8);
        std::memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        std::memcpy(d, s, 4);
        std::memcpy(d + n - 4, s + n - 4, 4);
    } else if (n > 0) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

} // namespace ucx::detail
