#include <ucx/worker_address.hpp>

#include "util/wire.hpp"

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

using detail::crc32;
using detail::load_le;
using detail::store_le;

} // namespace

std::vector<std::byte> worker_address::serialize() const {
    std::vector<std::byte> out(header_size + bytes_.size());
    std::memcpy(out.data(), magic.data(), magic.size());
    out[4] = format_version;
    store_le(out, 8, static_cast<std::uint32_t>(bytes_.size()));
    store_le(out, 12, crc32(bytes_));
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
    const std::uint32_t length = load_le<std::uint32_t>(wire, 8);
    if (length == 0 || length > max_address_size || wire.size() != header_size + length)
        return {};
    auto payload = wire.subspan(header_size);
    if (crc32(payload) != load_le<std::uint32_t>(wire, 12))
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
