// ucx::worker_address: a worker's UCX address, and its wire form.
#pragma once

#include <ucx/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ucx {

/// A worker's address as UCX packs it: what a peer needs to create an
/// endpoint to the worker without IP addressing. Send it to the peer with
/// `serialize()` (any side channel: a file, a TCP connection, an MPI
/// broadcast); the peer rebuilds it with `deserialize()`.
///
/// The wire form is a 16-byte header (magic "UCXA", format version, length,
/// CRC-32 of the payload) followed by UCX's bytes, so a truncated or corrupt
/// address is rejected with an error instead of reaching UCX.
class worker_address {
public:
    /// Wire-format header size in bytes.
    static constexpr std::size_t header_size = 16;

    worker_address() = default;
    /// Wraps UCX's packed address bytes (as from `ucp_worker_get_address`).
    explicit worker_address(std::vector<std::byte> ucx_bytes) noexcept
        : bytes_(std::move(ucx_bytes)) {}

    /// UCX's packed address (for `UCP_EP_PARAM_FIELD_REMOTE_ADDRESS`).
    const std::vector<std::byte>& ucx_bytes() const noexcept { return bytes_; }
    bool empty() const noexcept { return bytes_.empty(); }

    /// The wire form: header plus UCX bytes.
    std::vector<std::byte> serialize() const;

    /// Parses the wire form. On malformed input (bad magic, unknown version,
    /// length mismatch, CRC mismatch) sets `ec` to
    /// `ucx::error::malformed_address` and returns an empty address.
    static worker_address deserialize(std::span<const std::byte> wire, error_code& ec);
    /// As above; throws `boost::system::system_error` on malformed input.
    static worker_address deserialize(std::span<const std::byte> wire);

    friend bool operator==(const worker_address&, const worker_address&) = default;

private:
    std::vector<std::byte> bytes_;
};

} // namespace ucx
