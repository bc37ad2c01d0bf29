// The remote key blob (key_blob) and its errors: the byte format only, no
// UCX calls, so it is tested and fuzzed on its own.
#include <ucx/remote_key.hpp>

#include "core/error_category.hpp"
#include "util/wire.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace ucx {
namespace {

constexpr std::array<std::byte, 4> magic{std::byte{'U'}, std::byte{'C'}, std::byte{'X'},
                                         std::byte{'K'}};
constexpr std::byte format_version{1};

using detail::crc32;
using detail::load_le;
using detail::store_le;

constexpr detail::error_row<key_errc> key_messages[] = {
    {key_errc::truncated, "remote key blob is truncated"},
    {key_errc::not_a_key, "not a remote key blob (bad magic)"},
    {key_errc::unsupported_version, "unsupported remote key format version"},
    {key_errc::corrupt, "remote key blob is corrupt (checksum or fields)"},
    {key_errc::no_key, "no remote key"},
    {key_errc::wrong_endpoint, "remote key belongs to another endpoint"},
};

} // namespace

const boost::system::error_category& key_category() noexcept {
    // No portable conditions: every code maps to itself.
    static const detail::table_category<key_errc> instance("ucx.remote_key", key_messages,
                                                           "unknown remote key error");
    return instance;
}

std::vector<std::byte> key_blob::build(std::uint64_t address, std::uint64_t length,
                                       ucx::memory_type type, std::span<const std::byte> rkey) {
    if (rkey.size() > max_rkey_size)
        return {};
    std::vector<std::byte> out(header_size + rkey.size() + trailer_size);
    std::memcpy(out.data(), magic.data(), magic.size());
    out[4] = format_version;
    out[5] = static_cast<std::byte>(type);
    store_le(out, 8, address);
    store_le(out, 16, length);
    store_le(out, 24, static_cast<std::uint32_t>(rkey.size()));
    if (!rkey.empty())
        std::memcpy(out.data() + header_size, rkey.data(), rkey.size());
    const std::size_t body = header_size + rkey.size();
    store_le(out, body, crc32(std::span<const std::byte>(out.data(), body)));
    return out;
}

key_blob key_blob::parse(std::span<const std::byte> blob, error_code& ec) noexcept {
    auto fail = [&](key_errc e) {
        ec = make_error_code(e);
        return key_blob{};
    };
    // What is present of the magic must match before anything else: a short
    // foreign blob is foreign, a short key blob is truncated.
    const std::size_t magic_part = std::min(blob.size(), magic.size());
    if (magic_part > 0 && std::memcmp(blob.data(), magic.data(), magic_part) != 0)
        return fail(key_errc::not_a_key);
    if (blob.size() < header_size + trailer_size)
        return fail(key_errc::truncated);
    if (blob[4] != format_version)
        return fail(key_errc::unsupported_version);
    const std::uint64_t rkey_size = load_le<std::uint32_t>(blob, 24);
    if (rkey_size > max_rkey_size)
        return fail(key_errc::corrupt);
    const std::size_t expected = header_size + rkey_size + trailer_size;
    if (blob.size() < expected)
        return fail(key_errc::truncated);
    if (blob.size() > expected)
        return fail(key_errc::corrupt);
    const std::size_t body = header_size + rkey_size;
    if (crc32(blob.first(body)) != load_le<std::uint32_t>(blob, body))
        return fail(key_errc::corrupt);
    key_blob k;
    k.address = load_le<std::uint64_t>(blob, 8);
    k.length = load_le<std::uint64_t>(blob, 16);
    const auto type = std::to_integer<unsigned>(blob[5]);
    if (type > static_cast<unsigned>(ucx::memory_type::cuda_managed) || blob[6] != std::byte{0} ||
        blob[7] != std::byte{0} || rkey_size == 0 || k.length == 0 ||
        k.address + k.length < k.address)
        return fail(key_errc::corrupt);
    k.memory_type = static_cast<ucx::memory_type>(type);
    k.rkey = blob.subspan(header_size, rkey_size);
    ec = {};
    return k;
}

} // namespace ucx
