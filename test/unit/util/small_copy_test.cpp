// Unit tests of copy_small: every length up to 80 bytes, at every alignment
// of source and destination up to 8, copies exactly those bytes and touches
// nothing around them.
#include "util/small_copy.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace {

TEST(small_copy, copies_every_length_and_alignment_exactly) {
    constexpr std::size_t guard = 16;
    for (std::size_t n = 0; n <= 80; ++n) {
        for (std::size_t src_at = 0; src_at < 8; ++src_at) {
            for (std::size_t dst_at = 0; dst_at < 8; ++dst_at) {
                std::vector<unsigned char> src(n + 2 * guard), dst(n + 2 * guard, 0xEE);
                for (std::size_t i = 0; i < src.size(); ++i)
                    src[i] = static_cast<unsigned char>(i * 37 + n);
                ucx::detail::copy_small(dst.data() + guard + dst_at, src.data() + guard + src_at,
                                        n);
                for (std::size_t i = 0; i < dst.size(); ++i) {
                    const bool inside = i >= guard + dst_at && i < guard + dst_at + n;
                    const unsigned char want =
                        inside ? src[i - dst_at + src_at] : static_cast<unsigned char>(0xEE);
                    ASSERT_EQ(dst[i], want) << "length " << n << ", source offset " << src_at
                                            << ", destination offset " << dst_at << ", byte " << i;
                }
            }
        }
    }
}

} // namespace
