// Internal: the library's own messages between connected endpoints.
//
// Connected (client/server) endpoints exchange a hello/welcome handshake that
// gives each side the tag its peer receives on (per-endpoint messaging), and a
// goodbye before a graceful close, so the peer can tell a clean close
// (asio::error::eof) from a crash (UCX reports both as a reset). The messages
// travel as UCX active messages with the id `control_am_id`, carried entirely
// in the AM header. Sans-io: encoding and validation only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

namespace ucx::detail {

/// Active-message id reserved by the library for control messages.
inline constexpr unsigned control_am_id = 4095;

/// goodbye_ack: the receiver of a goodbye has taken the stream data UCX held
/// for it (UCX drops unread stream data when the endpoint fails), so the
/// sender of the goodbye may close its UCP endpoint. stream_end: the sender
/// will write no more stream bytes (a half close); the endpoint stays open.
/// stream_ack: how many stream bytes the sender has read so far (ucx::stream's
/// flow control: a writer waits while too much of what it wrote is unread).
/// refused: the answer to a hello over an endpoint made from a worker address
/// when no address acceptor takes it (the connect fails with
/// `connection_refused`).
/// ping/pong: liveness. A side that heard nothing from its peer for a while
/// sends ping; the peer answers pong (whatever its own settings), so a side
/// that watches its peer hears from it at least that often.
enum class control_type : std::uint8_t {
    hello = 1,
    welcome = 2,
    goodbye = 3,
    goodbye_ack = 4,
    stream_end = 5,
    refused = 6,
    stream_ack = 7,
    ping = 8,
    pong = 9,
};

/// The highest message type this version knows.
inline constexpr control_type last_control_type = control_type::pong;

struct control_message {
    control_type type{};
    /// hello/welcome: the tag on which the sender receives per-endpoint messages;
    /// goodbye, stream_end: how many stream bytes (ucx::stream) the sender sent in all.
    std::uint64_t recv_tag = 0;

    static constexpr std::size_t wire_size = 16;
    using wire = std::array<std::byte, wire_size>;

    /// Encodes as: magic "UCXC", version 1, type, 2 reserved bytes, tag (LE).
    wire encode() const noexcept;
    /// Validates and decodes; std::nullopt for anything malformed.
    static std::optional<control_message> decode(std::span<const std::byte> bytes) noexcept;
};

/// A hello's payload in its two parts: the connector's worker address (wire
/// form: its header gives its length) and what follows (the door ticket, or
/// nothing). A payload too short for its address is all address (and fails
/// to parse).
std::pair<std::span<const std::byte>, std::span<const std::byte>>
split_hello_payload(std::span<const std::byte> payload) noexcept;

} // namespace ucx::detail
