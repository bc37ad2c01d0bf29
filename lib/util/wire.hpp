// Internal: the byte-level codec of the library's wire formats.
//
// Every format the library writes (worker address, control message, remote
// key blob) stores its integers little-endian at fixed offsets and guards its
// payload with a CRC-32. These helpers are the one place that does either;
// the formats themselves stay where they are defined.
#pragma once

#include <cassert>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ucx::detail {

/// Stores `value` little-endian at `out[at, at + sizeof(T))`. The caller has
/// sized `out` for its format.
template <std::unsigned_integral T>
constexpr void store_le(std::span<std::byte> out, std::size_t at, T value) noexcept {
    assert(at <= out.size() && out.size() - at >= sizeof(T));
    for (std::size_t i = 0; i < sizeof(T); ++i)
        out[at + i] = static_cast<std::byte>(value >> (8 * i));
}

/// Reads a little-endian `T` from `in[at, at + sizeof(T))`. The caller has
/// checked the length of `in` against its format.
template <std::unsigned_integral T>
constexpr T load_le(std::span<const std::byte> in, std::size_t at) noexcept {
    assert(at <= in.size() && in.size() - at >= sizeof(T));
    T value = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
        value |= static_cast<T>(std::to_integer<T>(in[at + i]) << (8 * i));
    return value;
}

/// CRC-32 (IEEE 802.3, reflected, as zlib computes it) of a byte range.
constexpr std::uint32_t crc32(std::span<const std::byte> data) noexcept {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (std::byte b : data) {
        crc ^= std::to_integer<std::uint32_t>(b);
        for (int k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

} // namespace ucx::detail
