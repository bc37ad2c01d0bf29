// Unit tests of the wire codec helpers (no UCX).
#include "util/wire.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace {

using ucx::detail::crc32;
using ucx::detail::load_le;
using ucx::detail::store_le;

std::span<const std::byte> as_bytes(std::string_view s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST(Wire, StoresLittleEndianAtOffset) {
    std::array<std::byte, 16> b{};
    store_le(b, 2, std::uint32_t{0x11223344});
    store_le(b, 8, std::uint64_t{0x0102030405060708});
    EXPECT_EQ(b[0], std::byte{0});
    EXPECT_EQ(b[1], std::byte{0});
    EXPECT_EQ(b[2], std::byte{0x44});
    EXPECT_EQ(b[3], std::byte{0x33});
    EXPECT_EQ(b[4], std::byte{0x22});
    EXPECT_EQ(b[5], std::byte{0x11});
    EXPECT_EQ(b[6], std::byte{0});
    for (std::size_t i = 0; i < 8; ++i)
        EXPECT_EQ(b[8 + i], static_cast<std::byte>(8 - i));
}

TEST(Wire, LoadsWhatItStores) {
    std::vector<std::byte> b(15);
    store_le(b, 0, std::uint8_t{0xAB});
    store_le(b, 1, std::uint16_t{0xBEEF});
    store_le(b, 3, std::uint32_t{0xFFFFFFFE});
    store_le(b, 7, std::uint64_t{0x8000000000000001});
    EXPECT_EQ(load_le<std::uint8_t>(b, 0), 0xABu);
    EXPECT_EQ(load_le<std::uint16_t>(b, 1), 0xBEEFu);
    EXPECT_EQ(load_le<std::uint32_t>(b, 3), 0xFFFFFFFEu);
    EXPECT_EQ(load_le<std::uint64_t>(b, 7), 0x8000000000000001u);
}

TEST(Wire, Crc32MatchesTheStandardCheckValues) {
    EXPECT_EQ(crc32(as_bytes("123456789")), 0xCBF43926u);
    EXPECT_EQ(crc32({}), 0u);
    EXPECT_EQ(crc32(as_bytes("The quick brown fox jumps over the lazy dog")), 0x414FA339u);
}

TEST(Wire, IsUsableAtCompileTime) {
    constexpr auto round_trip = [] {
        std::array<std::byte, 4> b{};
        store_le(b, 0, std::uint32_t{0xCAFEF00D});
        return load_le<std::uint32_t>(b, 0);
    };
    static_assert(round_trip() == 0xCAFEF00Du);
    SUCCEED();
}

} // namespace
