// The control messages ucx::stream relies on: a goodbye and a stream_end carry
// the sender's 64-bit stream byte count; goodbye_ack has none; anything else
// is rejected. Sans-io: encoding and decoding only.
#include "connection/control_message.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

using ucx::detail::control_message;
using ucx::detail::control_type;

namespace {

TEST(stream_control, byte_counts_round_trip_in_every_end_marker) {
    for (control_type t :
         {control_type::goodbye, control_type::stream_end, control_type::goodbye_ack,
          control_type::refused, control_type::stream_ack, control_type::ping, control_type::pong})
        for (std::uint64_t n :
             {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1} << 32, ~std::uint64_t{0}}) {
            const auto wire = control_message{t, n}.encode();
            const auto back = control_message::decode(wire);
            ASSERT_TRUE(back.has_value());
            EXPECT_EQ(back->type, t);
            EXPECT_EQ(back->recv_tag, n);
        }
}

TEST(stream_control, unknown_types_and_bad_sizes_are_rejected) {
    auto wire = control_message{control_type::stream_end, 42}.encode();
    for (std::uint8_t bad : {0, 10, 255}) {
        auto w = wire;
        w[5] = static_cast<std::byte>(bad);
        EXPECT_FALSE(control_message::decode(w).has_value()) << int(bad);
    }
    std::vector<std::byte> shorter(wire.begin(), wire.end() - 1);
    EXPECT_FALSE(control_message::decode(shorter).has_value());
    std::vector<std::byte> longer(wire.begin(), wire.end());
    longer.push_back(std::byte{0});
    EXPECT_FALSE(control_message::decode(longer).has_value());
    auto bad_magic = wire;
    bad_magic[0] = std::byte{'X'};
    EXPECT_FALSE(control_message::decode(bad_magic).has_value());
}

} // namespace
