#include <ucx/worker_address.hpp>

#include <boost/system/system_error.hpp>

#include <array>
#include <cstring>

namespace ucx {
namespace {

constexpr std::array<std::byte, 4> magic{std::byte{'U'}, std::byte{'C'}, std::byte{'X'},
                                         std::byte{'A'}};
constexpr std::byte format_version{1};
// Larger than any address UCX produces; rejects absurd lengths early.
constexpr std::uint32_t max_address_size = 1u << 20;

void put_u32(std::byte* p, std::uint32_t v) noexcept {
    for (int i = 0; i < 4; ++i)
        p[i] = static_cast<std::byte>(v >> (8 * i));
}

std::uint32_t get_u32(const std::byte* p) noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
    return v;
}

} // namespace

std::uint32_t crc32(std::span<const std::byte> data) noexcept {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (std::byte b : data) {
        crc ^= std::to_integer<std::uint32_t>(b);
        for (int k = 0; k < 8; ++k)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

std::vector<std::byte> worker_address::serialize() const {
    std::vector<std::byte> out(header_size + bytes_.size());
    std::memcpy(out.data(), magic.data(), magic.size());
    out[4] = format_version;
    put_u32(out.data() + 8, static_cast<std::uint32_t>(bytes_.size()));
    put_u32(out.data() + 12, crc32(bytes_));
    if (!bytes_.empty())
        std::memcpy(out.data() + header_size, bytes_.data(), bytes_.size());
    return out;
}

worker_address worker_address::deserialize(std::span<const std::byte> wire, error_code& ec) {
    ec = make_error_code(error::malformed_address);
    if (wire.size() < header_size)
        return {};
    if (std::memcmp(wire.data(), magic.data(), magic.size()) != 0)
        return {};
    if (wire[4] != format_version)
        return {};
    const std::uint32_t length = get_u32(wire.data() + 8);
    if (length == 0 || length > max_address_size || wire.size() != header_size + length)
        return {};
    auto payload = wire.subspan(header_size);
    if (crc32(payload) != get_u32(wire.data() + 12))
        return {};
    ec = {};
    return worker_address(std::vector<std::byte>(payload.begin(), payload.end()));
}

worker_address worker_address::deserialize(std::span<const std::byte> wire) {
    error_code ec;
    worker_address a = deserialize(wire, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::worker_address::deserialize");
    return a;
}

} // namespace ucx
