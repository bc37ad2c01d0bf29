// ucx::remote_key: a peer's registered region, as seen from an endpoint; and
// the portable blob a region's key travels in.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/error.hpp>
#include <ucx/memory_type.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace ucx {

/// Why a remote key blob or a remote key was refused.
enum class key_errc {
    /// Shorter than its header or than the length its header announces.
    truncated = 1,
    /// Does not start with the key magic ("UCXK"): not a remote key blob.
    not_a_key,
    /// A key format version this library does not read.
    unsupported_version,
    /// Checksum mismatch, trailing bytes or impossible fields.
    corrupt,
    /// An operation was given an empty key.
    no_key,
    /// The key was unpacked on another endpoint than the operation's.
    wrong_endpoint,
};

/// The error category of `key_errc` ("ucx.remote_key").
const boost::system::error_category& key_category() noexcept;

/// `key_errc` is an error enum of the library: `make_error_code(key_errc)`
/// makes error codes of `key_category()`, and it converts to `error_code`.
template <>
struct detail::error_enum<key_errc> {
    static constexpr auto category = &key_category;
};

/// The content of a remote key blob, parsed but not unpacked.
///
/// Blob format, version 1 (integers little-endian):
/// | offset | size | field                                         |
/// |--------|------|-----------------------------------------------|
/// | 0      | 4    | magic "UCXK"                                  |
/// | 4      | 1    | format version (1)                            |
/// | 5      | 1    | memory type (0 host, 1 cuda, 2 cuda_managed)  |
/// | 6      | 2    | reserved, 0                                   |
/// | 8      | 8    | base address of the region                    |
/// | 16     | 8    | length of the region                          |
/// | 24     | 4    | n, size of UCX's packed rkey                  |
/// | 28     | n    | UCX's packed rkey (`ucp_rkey_pack`)           |
/// | 28 + n | 4    | CRC-32 of the bytes before it                 |
struct key_blob {
    /// Header size in bytes (before UCX's bytes).
    static constexpr std::size_t header_size = 28;
    /// Trailer size (the CRC-32).
    static constexpr std::size_t trailer_size = 4;
    /// Largest packed rkey accepted.
    static constexpr std::size_t max_rkey_size = 1u << 16;

    std::uint64_t address = 0;
    std::uint64_t length = 0;
    ucx::memory_type memory_type = ucx::memory_type::host;
    /// UCX's packed rkey (a view into the parsed blob).
    std::span<const std::byte> rkey;

    /// Builds a blob.
    static std::vector<std::byte> build(std::uint64_t address, std::uint64_t length,
                                        ucx::memory_type type, std::span<const std::byte> rkey);
    /// Parses a blob. Malformed input (truncated, foreign, corrupt, another
    /// version, an empty or wrapping region) sets `ec` to a `key_errc` and
    /// returns an empty `key_blob`; it never reaches UCX.
    static key_blob parse(std::span<const std::byte> blob, error_code& ec) noexcept;
};

namespace detail {
class remote_key_impl;
} // namespace detail

/// A peer's registered region, unpacked on one endpoint to that peer
/// (`ucp_ep_rkey_unpack`): what `async_put`, `async_get` and the atomics
/// need to reach it, with the region's bounds so that every operation is
/// checked before UCX sees it.
///
/// Lifetime: the key keeps its endpoint's state alive, and operations in
/// flight keep the key alive, so destroying a key (or its endpoint object)
/// while operations run is safe. When the worker shuts down first, the key is
/// released then and later operations fail. Destroy keys on the worker's
/// thread (or once it is not running).
///
/// Cheap to copy (shared ownership). Not thread-safe: use from the worker's
/// executor.
class remote_key {
public:
    /// An empty key.
    remote_key() noexcept = default;

    /// Unpacks `blob` (from the peer's `memory_region::pack_key()`) on `ep`.
    /// Throws `boost::system::system_error` on a malformed blob (`key_errc`),
    /// an endpoint that is not open, or a key UCX refuses.
    remote_key(const endpoint& ep, std::span<const std::byte> blob);
    /// As above; reports failure through `ec` (and leaves the key empty).
    remote_key(const endpoint& ep, std::span<const std::byte> blob, error_code& ec);

    /// Whether the key holds an unpacked rkey.
    bool valid() const noexcept;
    explicit operator bool() const noexcept { return valid(); }

    /// The region's base address on the peer.
    std::uint64_t address() const noexcept;
    /// The region's length.
    std::uint64_t length() const noexcept;
    /// The region's memory type on the peer.
    ucx::memory_type memory_type() const noexcept;
    /// Whether [addr, addr + size) lies inside the region.
    bool contains(std::uint64_t addr, std::size_t size) const noexcept;

    /// Drops this handle (the rkey is destroyed when the last operation using
    /// it completes).
    void reset() noexcept { impl_.reset(); }

    /// The UCP rkey (null when empty or released).
    ucp_rkey_h native_handle() const noexcept;

private:
    friend struct detail::access;

    std::shared_ptr<detail::remote_key_impl> impl_;
};

} // namespace ucx
