// Internal: SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the
// authentication of the connection handshake. Sans-io, no dependencies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ucx::detail {

using sha256_digest = std::array<std::byte, 32>;

/// An incremental SHA-256.
class sha256 {
public:
    sha256() noexcept;
    /// Adds `data` to the message.
    void update(std::span<const std::byte> data) noexcept;
    /// The digest of everything added (the object is spent afterwards).
    sha256_digest finish() noexcept;

private:
    void block(const std::byte* p) noexcept;

    std::array<std::uint32_t, 8> h_;
    std::array<std::byte, 64> buffer_{};
    std::size_t buffered_ = 0;
    std::uint64_t length_ = 0;
};

/// An incremental HMAC-SHA-256 under `key`.
class hmac_sha256 {
public:
    explicit hmac_sha256(std::span<const std::byte> key) noexcept;
    void update(std::span<const std::byte> data) noexcept { inner_.update(data); }
    sha256_digest finish() noexcept;

private:
    std::array<std::byte, 64> outer_key_{};
    sha256 inner_;
};

/// Compares two digests in time independent of where they differ.
bool digest_equal(std::span<const std::byte> a, std::span<const std::byte> b) noexcept;

} // namespace ucx::detail
