#include "connection/control_message.hpp"
#include "util/wire.hpp"

#include <ucx/worker_address.hpp>

#include <cstring>

namespace ucx::detail {
namespace {
constexpr std::array<std::byte, 4> magic{std::byte{'U'}, std::byte{'C'}, std::byte{'X'},
                                         std::byte{'C'}};
constexpr std::byte version{1};
} // namespace

control_message::wire control_message::encode() const noexcept {
    wire w{};
    std::memcpy(w.data(), magic.data(), magic.size());
    w[4] = version;
    w[5] = static_cast<std::byte>(type);
    store_le(w, 8, recv_tag);
    return w;
}

std::optional<control_message> control_message::decode(std::span<const std::byte> b) noexcept {
    if (b.size() != wire_size)
        return std::nullopt;
    if (std::memcmp(b.data(), magic.data(), magic.size()) != 0 || b[4] != version)
        return std::nullopt;
    const auto t = std::to_integer<std::uint8_t>(b[5]);
    if (t < 1 || t > static_cast<std::uint8_t>(last_control_type))
        return std::nullopt;
    control_message m;
    m.type = static_cast<control_type>(t);
    m.recv_tag = load_le<std::uint64_t>(b, 8);
    return m;
}

std::pair<std::span<const std::byte>, std::span<const std::byte>>
split_hello_payload(std::span<const std::byte> payload) noexcept {
    constexpr std::size_t header = worker_address::header_size;
    if (payload.size() < header)
        return {payload, {}};
    const auto length = load_le<std::uint32_t>(payload, 8); // the address's own length
    if (length > payload.size() - header)
        return {payload, {}};
    return {payload.first(header + length), payload.subspan(header + length)};
}

} // namespace ucx::detail
