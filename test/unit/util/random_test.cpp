// Unit tests of the kernel's random bytes (util/random.hpp): every byte of a
// buffer of any size is written, and calls differ.
#include "util/random.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

namespace {

using ucx::detail::random_bytes;
using ucx::detail::random_u64;

TEST(random_bytes, fills_every_byte_of_any_size_and_nothing_past_it) {
    for (std::size_t n :
         {std::size_t(1), std::size_t(3), std::size_t(8), std::size_t(33), std::size_t(4096)}) {
        // A byte stays at its sentinel with probability 1/256 per call: each
        // position is checked over 8 calls, so a byte never written shows.
        std::vector<bool> written(n, false);
        for (int round = 0; round < 8; ++round) {
            std::vector<unsigned char> buf(n + 2, 0xa5);
            random_bytes(buf.data() + 1, n);
            EXPECT_EQ(buf.front(), 0xa5) << n;
            EXPECT_EQ(buf.back(), 0xa5) << n;
            for (std::size_t i = 0; i < n; ++i)
                written[i] = written[i] || buf[i + 1] != 0xa5;
        }
        for (std::size_t i = 0; i < n; ++i)
            EXPECT_TRUE(written[i]) << "byte " << i << " of " << n;
    }
}

TEST(random_bytes, calls_differ) {
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 1000; ++i)
        seen.insert(random_u64());
    EXPECT_EQ(seen.size(), 1000u); // a repeat among 1000 64-bit values: ~3e-14
}

TEST(random_bytes, zero_bytes_is_nothing) {
    std::array<unsigned char, 4> buf{1, 2, 3, 4};
    random_bytes(buf.data(), 0);
    EXPECT_EQ(buf, (std::array<unsigned char, 4>{1, 2, 3, 4}));
}

} // namespace
