// Internal: the connection handshake of host:port connections (the "door").
//
// UCX 1.13's socket-address connection manager aborts the process on a few
// crafted bytes sent to its listening port (an assertion in its TCP
// connection manager), and a client on the answer of a fake server. So by
// default a listener is a plain TCP socket that speaks this protocol; its
// only job is to exchange validated worker addresses, after which the client
// connects UCX by address (the hello of an address connection) and the
// listener takes that hello. UCX never sees a byte from a stranger.
//
//   server -> client   greeting  nonce_s[16]                  (flag: secret)
//   client -> server   request   nonce_c[16] mac_c[32] address
//   server -> client   answer    status, mac_s[32], address
//
// Every message is a 12-byte header ("UCXD", version, kind, flags, reserved,
// body length u32 LE) and a body of at most `door_max_body` bytes. With a
// shared secret both sides prove they know it: mac_c = HMAC-SHA-256(secret,
// "ucx-asio door client" nonce_s nonce_c address_c), mac_s = HMAC(secret,
// "ucx-asio door server" nonce_c nonce_s address_s); a side with a secret
// refuses a peer without one. Addresses travel in their wire form (length
// and CRC-32), checked before UCX sees them.
//
// Sans-io: the two machines below only encode, check and decide; the
// listener and the connect operation move their bytes.
#pragma once

#include <ucx/error.hpp>
#include <ucx/worker_address.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ucx::detail {

inline constexpr std::size_t door_header_size = 12;
/// The largest body either side reads (a worker address is a few hundred bytes).
inline constexpr std::size_t door_max_body = 16 * 1024;
inline constexpr std::size_t door_nonce_size = 16;
inline constexpr std::size_t door_mac_size = 32;

enum class door_kind : std::uint8_t { greeting = 1, request = 2, answer = 3 };

/// What the server answers.
enum class door_status : std::uint8_t {
    accepted = 0,
    /// The listener's filter said no, or its backlog is full.
    refused = 1,
    /// The client does not know the secret.
    authentication_failed = 2,
    /// The client's request was malformed.
    bad_request = 3,
};

using door_nonce = std::array<std::byte, door_nonce_size>;

/// A parsed message header.
struct door_header {
    door_kind kind{};
    std::uint8_t flags = 0;
    std::uint32_t body_size = 0;
};

/// Parses a header; `error::handshake_failed` for anything but a header of
/// this version announcing a body of at most `door_max_body` bytes.
door_header parse_door_header(std::span<const std::byte> bytes, error_code& ec) noexcept;

/// What a step asks of the I/O object that runs a machine.
struct door_step {
    enum class action {
        /// Write `out`, then read a header.
        write_then_read,
        /// Read a body of `body_size` bytes (the header was fine).
        read_body,
        /// Write `out` (may be empty), then the handshake is over: `ec` says
        /// how, and on success `peer` is the peer's worker address.
        finish,
    };
    action what = action::finish;
    std::vector<std::byte> out;
    std::uint32_t body_size = 0;
    error_code ec;
    worker_address peer;
};

/// The server side. Starts by greeting; `on_header`, then `on_body` with the
/// client's request. `admit` decides (filter and backlog) once the request is
/// known to be genuine.
class door_server {
public:
    door_server(std::string secret, worker_address own, const door_nonce& nonce);

    /// The greeting to send first.
    door_step start();
    /// A header arrived.
    door_step on_header(std::span<const std::byte> header);
    /// The body announced by the header arrived; `admit` says whether the
    /// listener takes the connection (asked only for a genuine request).
    door_step on_body(std::span<const std::byte> body, bool admit);
    /// An answer saying `status` and nothing else (the listener refuses a
    /// client before reading its request: backlog full, filtered).
    static std::vector<std::byte> refusal(door_status status);
    /// This handshake's nonce (the greeting's): also the ticket that the
    /// client's hello carries, which ties that hello to this handshake.
    const door_nonce& ticket() const noexcept { return nonce_; }

private:
    door_step fail(door_status status, error_code ec);

    std::string secret_;
    worker_address own_;
    door_nonce nonce_;
    std::uint8_t flags_ = 0;
    bool expecting_body_ = false;
    bool done_ = false;
};

/// The client side: `on_header` and `on_body` with the greeting, then with
/// the answer.
class door_client {
public:
    door_client(std::string secret, worker_address own, const door_nonce& nonce);

    /// Nothing to send first: read the greeting.
    door_step on_header(std::span<const std::byte> header);
    door_step on_body(std::span<const std::byte> body);
    /// The server's nonce, once greeted: the ticket for the hello.
    const door_nonce& ticket() const noexcept { return server_nonce_; }

private:
    door_step fail(error_code ec);
    door_step on_greeting(std::span<const std::byte> body);
    door_step on_answer(std::span<const std::byte> body);

    std::string secret_;
    worker_address own_;
    door_nonce nonce_;
    door_nonce server_nonce_{};
    std::uint8_t flags_ = 0;
    door_kind expected_ = door_kind::greeting;
    bool expecting_body_ = false;
    bool done_ = false;
};

/// The MAC of one side (exposed for tests).
std::array<std::byte, door_mac_size> door_mac(const std::string& secret, bool client,
                                              const door_nonce& own_nonce,
                                              const door_nonce& other_nonce,
                                              std::span<const std::byte> address_wire) noexcept;

} // namespace ucx::detail
