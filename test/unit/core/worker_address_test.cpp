// Unit tests of the worker address wire form (no UCX).
#include <ucx/worker_address.hpp>

#include "util/wire.hpp"

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace {

using bytes = std::vector<std::byte>;

bytes make_payload(std::size_t n, unsigned seed = 1) {
    std::mt19937 rng(seed);
    bytes b(n);
    for (auto& x : b)
        x = static_cast<std::byte>(rng() & 0xFF);
    return b;
}

std::uint32_t get_u32le(const bytes& w, std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i)
        v |= std::to_integer<std::uint32_t>(w[at + i]) << (8 * i);
    return v;
}

void put_u32le(bytes& w, std::size_t at, std::uint32_t v) {
    for (std::size_t i = 0; i < 4; ++i)
        w[at + i] = static_cast<std::byte>(v >> (8 * i));
}

// Independent reference for "is this a valid encoding": the documented layout
// (magic "UCXA", version 1, 3 reserved bytes, u32le length, u32le CRC-32).
bool reference_valid(std::span<const std::byte> w) {
    if (w.size() < 16)
        return false;
    if (std::memcmp(w.data(), "UCXA", 4) != 0 || w[4] != std::byte{1})
        return false;
    const bytes h(w.begin(), w.begin() + 16);
    const std::uint32_t len = get_u32le(h, 8);
    if (len == 0 || w.size() != 16 + std::size_t{len})
        return false;
    return ucx::detail::crc32(w.subspan(16)) == get_u32le(h, 12);
}

// Expects `wire` to be rejected by both overloads.
void expect_rejected(const bytes& wire, const char* what) {
    ucx::error_code ec;
    const ucx::worker_address a = ucx::worker_address::deserialize(wire, ec);
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::malformed_address)) << what;
    EXPECT_TRUE(a.empty()) << what;
    EXPECT_THROW(ucx::worker_address::deserialize(wire), boost::system::system_error) << what;
    try {
        (void)ucx::worker_address::deserialize(wire);
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), ucx::make_error_code(ucx::error::malformed_address)) << what;
    }
}

TEST(WorkerAddress, Crc32CheckValue) {
    constexpr std::string_view check = "123456789";
    const auto* p = reinterpret_cast<const std::byte*>(check.data());
    EXPECT_EQ(ucx::detail::crc32(std::span<const std::byte>(p, check.size())), 0xCBF43926u);
    EXPECT_EQ(ucx::detail::crc32({}), 0u);
    const bytes a{std::byte{'a'}};
    EXPECT_EQ(ucx::detail::crc32(a), 0xE8B7BE43u);
}

TEST(WorkerAddress, RoundTrip) {
    for (std::size_t n : {1u, 2u, 15u, 16u, 17u, 100u, 1000u, 65536u}) {
        const ucx::worker_address a(make_payload(n, static_cast<unsigned>(n)));
        const bytes wire = a.serialize();
        ASSERT_EQ(wire.size(), ucx::worker_address::header_size + n);
        EXPECT_EQ(std::memcmp(wire.data(), "UCXA", 4), 0);
        EXPECT_EQ(wire[4], std::byte{1});
        EXPECT_EQ(get_u32le(wire, 8), n);
        EXPECT_EQ(get_u32le(wire, 12), ucx::detail::crc32(a.ucx_bytes()));

        ucx::error_code ec = ucx::make_error_code(ucx::errc::io_error);
        const ucx::worker_address b = ucx::worker_address::deserialize(wire, ec);
        EXPECT_FALSE(ec) << ec.message();
        EXPECT_EQ(a, b);
        EXPECT_EQ(ucx::worker_address::deserialize(wire), a);
    }
}

TEST(WorkerAddress, EmptyAddressIsNotAValidEncoding) {
    // A zero-length payload is rejected on input, so an empty address does not round-trip.
    const bytes wire = ucx::worker_address{}.serialize();
    EXPECT_EQ(wire.size(), ucx::worker_address::header_size);
    expect_rejected(wire, "empty address");
}

TEST(WorkerAddress, MalformedHeaders) {
    const bytes good = ucx::worker_address(make_payload(40)).serialize();

    expect_rejected({}, "empty input");
    for (std::size_t n = 1; n < ucx::worker_address::header_size; ++n)
        expect_rejected(bytes(good.begin(), good.begin() + n), "truncated header");
    expect_rejected(bytes(good.begin(), good.begin() + 16), "header without payload");
    expect_rejected(bytes(good.begin(), good.end() - 1), "truncated payload");
    {
        bytes w = good;
        w.push_back(std::byte{0});
        expect_rejected(w, "trailing byte");
    }
    {
        bytes w = good;
        w[0] = std::byte{'X'};
        expect_rejected(w, "bad magic");
    }
    {
        bytes w = good;
        std::memcpy(w.data(), "ucxa", 4);
        expect_rejected(w, "lower-case magic");
    }
    for (int v : {0, 2, 255}) {
        bytes w = good;
        w[4] = static_cast<std::byte>(v);
        expect_rejected(w, "wrong version");
    }
    {
        bytes w = good;
        put_u32le(w, 8, 41);
        expect_rejected(w, "length larger than payload");
        put_u32le(w, 8, 39);
        expect_rejected(w, "length smaller than payload");
        put_u32le(w, 8, 0xFFFFFFFFu);
        expect_rejected(w, "huge length");
    }
    {
        // Zero length with a consistent (empty) payload and its CRC.
        bytes w(good.begin(), good.begin() + 16);
        put_u32le(w, 8, 0);
        put_u32le(w, 12, 0);
        expect_rejected(w, "zero length");
    }
    {
        bytes w = good;
        put_u32le(w, 12, get_u32le(w, 12) ^ 0x80000000u);
        expect_rejected(w, "bad crc");
    }
    {
        // Length larger than the library's 1 MiB bound, with a consistent payload.
        const ucx::worker_address big(make_payload((1u << 20) + 1));
        expect_rejected(big.serialize(), "over 1 MiB");
        // The bound itself is accepted.
        const ucx::worker_address max(make_payload(1u << 20));
        ucx::error_code ec;
        EXPECT_EQ(ucx::worker_address::deserialize(max.serialize(), ec), max);
        EXPECT_FALSE(ec);
    }
}

TEST(WorkerAddress, EverySingleBitFlipIsRejected) {
    for (std::size_t n : {1u, 7u, 64u, 300u}) {
        const bytes good = ucx::worker_address(make_payload(n, 7)).serialize();
        std::size_t flips = 0;
        for (std::size_t byte = 0; byte < good.size(); ++byte) {
            if (byte >= 5 && byte <= 7)
                continue; // reserved, not checked
            for (int bit = 0; bit < 8; ++bit) {
                bytes w = good;
                w[byte] ^= static_cast<std::byte>(1u << bit);
                ucx::error_code ec;
                const ucx::worker_address a = ucx::worker_address::deserialize(w, ec);
                ASSERT_EQ(ec, ucx::make_error_code(ucx::error::malformed_address))
                    << "n=" << n << " byte=" << byte << " bit=" << bit;
                ASSERT_TRUE(a.empty());
                ASSERT_THROW(ucx::worker_address::deserialize(w), boost::system::system_error);
                ++flips;
            }
        }
        EXPECT_EQ(flips, (good.size() - 3) * 8);
    }
}

TEST(WorkerAddress, ReservedBytesAreIgnored) {
    const ucx::worker_address a(make_payload(20));
    bytes w = a.serialize();
    EXPECT_EQ(w[5], std::byte{0});
    EXPECT_EQ(w[6], std::byte{0});
    EXPECT_EQ(w[7], std::byte{0});
    w[5] = w[6] = w[7] = std::byte{0xFF};
    EXPECT_EQ(ucx::worker_address::deserialize(w), a);
}

TEST(WorkerAddress, RandomBytesFuzz) {
    std::mt19937_64 rng(0xC0FFEE);
    std::uniform_int_distribution<std::size_t> len_dist(0, 200);
    std::uniform_int_distribution<int> byte_dist(0, 255);
    std::uniform_int_distribution<int> mode_dist(0, 3);
    std::size_t accepted = 0;
    for (int i = 0; i < 100000; ++i) {
        bytes w(len_dist(rng));
        for (auto& b : w)
            b = static_cast<std::byte>(byte_dist(rng));
        // Plain random bytes almost never get past the magic; give some inputs a
        // valid-looking header (magic, version, sometimes length and CRC) so the
        // deeper checks are exercised too.
        const int mode = mode_dist(rng);
        if (mode >= 1 && w.size() >= 16) {
            std::memcpy(w.data(), "UCXA", 4);
            w[4] = std::byte{1};
            if (mode >= 2)
                put_u32le(w, 8, static_cast<std::uint32_t>(w.size() - 16));
            if (mode >= 3)
                put_u32le(w, 12, ucx::detail::crc32(std::span<const std::byte>(w).subspan(16)));
        }
        ucx::error_code ec;
        const ucx::worker_address a = ucx::worker_address::deserialize(w, ec);
        const bool valid = reference_valid(w);
        ASSERT_EQ(!ec, valid) << "iteration " << i << " size " << w.size();
        if (ec) {
            ASSERT_EQ(ec, ucx::make_error_code(ucx::error::malformed_address));
            ASSERT_TRUE(a.empty());
        } else {
            ++accepted;
            ASSERT_EQ(a.ucx_bytes(), bytes(w.begin() + 16, w.end()));
            bytes again = a.serialize();
            again[5] = w[5];
            again[6] = w[6];
            again[7] = w[7];
            ASSERT_EQ(again, w);
        }
    }
    // The valid-header mode must have produced accepted inputs.
    EXPECT_GT(accepted, 1000u);
}

} // namespace
