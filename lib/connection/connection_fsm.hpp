// Internal: the protocol between two connected endpoints, free of I/O.
//
// A client endpoint sends a hello and is connected when the welcome comes
// back (or fails on `refused`); a server endpoint is connected when the hello
// arrives. Either side ends the connection with a goodbye (a clean close, so
// the peer reads eof rather than a reset), which carries how many stream bytes
// the sender wrote; its receiver takes the stream data UCX still holds and
// acknowledges, and the sender closes its UCP endpoint once the ack came or
// the linger time passed. stream_end (a half close) and stream_ack (flow
// control) concern a ucx::stream over the endpoint and are handed to it.
//
// Liveness: a connected endpoint watches its peer. One timer serves the
// connection's deadlines: while the handshake runs it is the handshake
// deadline (a client's connect, a server's wait for the hello); once open it
// ticks every `heartbeat_interval`. A tick after which nothing came from the
// peer sends a ping (the peer answers pong); `silent_ticks_limit` such ticks
// in a row and the peer is unresponsive: the endpoint fails with
// `error::peer_unresponsive`. A graceful close waits for its sends while the
// peer is alive (still watched), then for the goodbye's acknowledgement at
// most the linger time; an unresponsive peer fails the close with that error
// and the UCP endpoint is force-closed.
//
// `connection_fsm` takes the events (a control message, the UCP endpoint's
// failure, a local close, the sends drained, the linger timer) and answers
// with the actions the endpoint must execute, in order. It owns the
// connection's state: where the handshake is, why the endpoint is not usable
// (its error), the operations it tracks (connect, close, the listener waiting
// for the handshake) and the graceful close. Unit tests drive it directly.
#pragma once

#include "connection/control_message.hpp"

#include <boost/system/error_code.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace ucx::detail {

/// How an endpoint came to be: from a worker address, as one side of a
/// client/server connection (which has the control protocol), wrapping a
/// UCP endpoint UCX owns (the reply endpoint of an active message), or as one
/// side of a plain UCP connection by socket address (no control protocol: the
/// peer may be any UCX program). A plain client is connected once UCX has
/// made the connection (a flush of the endpoint completed); a plain server is
/// open at once.
enum class connection_role : std::uint8_t {
    address,
    client,
    server,
    borrowed,
    plain_client,
    plain_server
};

enum class connection_state : std::uint8_t {
    idle,       ///< no UCP endpoint yet
    connecting, ///< client: hello sent, waiting for the welcome (plain: the flush)
    accepting,  ///< server: waiting for the hello
    open,       ///< usable (unless the peer said goodbye: error() is eof)
    closing,    ///< graceful close: waiting for the sends in flight
    lingering,  ///< goodbye sent: waiting for the peer's goodbye_ack
    closed,     ///< the UCP endpoint is closed (or gone): nothing happens any more
};

enum class connection_action_type : std::uint8_t {
    send_control,         ///< send {message, value} to the peer
    complete_connect,     ///< complete the connect operation with `ec` (empty: connected)
    listener_established, ///< hand the endpoint to the listener waiting for its handshake
    listener_failed,      ///< the listener waiting for the handshake forgets the endpoint
    fail_operations,      ///< operations pending on the endpoint end with `ec`
    abort_operations,     ///< graceful close: pending receives and waits end (operation_aborted)
    peer_stream_end,      ///< to the stream: the peer wrote `value` bytes in all (`goodbye`)
    peer_stream_acked,    ///< to the stream: the peer has read `value` bytes
    take_received,        ///< the stream takes UCX's received data before it goes
    start_linger,         ///< start the linger timer (then linger_expired)
    cancel_linger,        ///< cancel the linger timer
    arm_timer,            ///< (re)arm the connection timer for `value` ms (then timer_expired)
    cancel_timer,         ///< cancel the connection timer
    accept_close,         ///< keep the close operation just given
    reject_close,         ///< complete the close operation just given with `ec` (not kept)
    complete_close,       ///< complete the kept close operation with `ec`
    close_flush,          ///< close the UCP endpoint in flush mode; the kept close operation
                          ///< completes when UCX is done
    close_force,          ///< force-close the UCP endpoint
    release,              ///< forget the UCP endpoint without closing it (UCX's own)
    flush_endpoint,       ///< plain client: flush the UCP endpoint (then reached, or a failure)
};

struct connection_action {
    connection_action_type type{};
    control_type message{}; ///< send_control
    bool goodbye = false;   ///< peer_stream_end: the end came with the peer's goodbye
    std::uint64_t value = 0;
    boost::system::error_code ec{};

    friend bool operator==(const connection_action&, const connection_action&) = default;
};

/// The actions of one event, in order. No event needs more than `capacity`.
class connection_actions {
public:
    static constexpr std::size_t capacity = 8;

    const connection_action* begin() const noexcept { return items_.data(); }
    const connection_action* end() const noexcept { return items_.data() + size_; }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const connection_action& operator[](std::size_t i) const noexcept { return items_[i]; }

    void push(const connection_action& a) noexcept {
        if (size_ < capacity)
            items_[size_++] = a;
    }

private:
    std::array<connection_action, capacity> items_{};
    std::size_t size_ = 0;
};

class connection_fsm {
public:
    using error_code = boost::system::error_code;

    /// Where the connection starts, after its UCP endpoint was created.
    struct start_params {
        connection_role role = connection_role::address;
        /// Client/server: made from a worker address (no socket addresses).
        bool by_address = false;
        /// Server: a listener waits for the handshake.
        bool listener = false;
        /// Client/server: the tag on which this side receives per-endpoint messages.
        std::uint64_t local_tag = 0;
        /// Client/server (and plain client): how long the handshake (the
        /// connection) may take, in ms (0: no limit).
        std::uint64_t handshake_timeout_ms = 0;
        /// Client/server: how often an open connection checks that the peer
        /// spoke, in ms (0: the peer is not watched).
        std::uint64_t heartbeat_interval_ms = 0;
    };

    /// Ticks without a word from the peer after which it is unresponsive.
    /// The first silent tick pings; a live peer answers before the next, so
    /// the peer has said nothing since at most that first ping: the report
    /// comes at least `silent_ticks_limit - 1` and less than
    /// `silent_ticks_limit + 1` intervals after the peer fell silent. With an
    /// interval of the peer timeout over `silent_ticks_limit - 1`
    /// (`endpoint_impl::connection_params`), a peer silent for less than the
    /// timeout is never reported, and one silent for longer is within 9/7 of
    /// it.
    static constexpr unsigned silent_ticks_limit = 8;

    /// The UCP endpoint exists: address, borrowed and plain server endpoints
    /// are open at once; a client sends its hello; a server waits for the
    /// peer's; a plain client flushes its endpoint.
    connection_actions start(const start_params& p) noexcept;
    /// Plain client: the flush of the new UCP endpoint completed, so UCX
    /// made the connection. (A connection UCX cannot make fails the endpoint:
    /// on_failure.)
    connection_actions reached() noexcept;
    /// A control message from the peer.
    connection_actions on_control(const control_message& m) noexcept;
    /// UCX reported the UCP endpoint failed (the peer crashed, or went away
    /// after its goodbye) with `ec`.
    connection_actions on_failure(const error_code& ec) noexcept;
    /// Graceful close with a new close operation. `sends_in_flight`: sends
    /// UCX has not completed (the goodbye waits for them: sends_drained);
    /// `stream_bytes`: what the goodbye announces; `can_linger`: whether a
    /// timer can run (the worker is open).
    connection_actions close_graceful(bool sends_in_flight, std::uint64_t stream_bytes,
                                      bool can_linger) noexcept;
    /// The sends in flight completed during a graceful close.
    connection_actions sends_drained(bool can_linger) noexcept;
    /// The linger timer expired: a close still waiting for the peer's ack
    /// completes with `error::peer_unresponsive`, and the UCP endpoint is
    /// force-closed.
    connection_actions linger_expired() noexcept;
    /// Force close: operation_aborted for a local close (the endpoint's error
    /// becomes bad_descriptor), else why (a timeout, refused, no memory).
    connection_actions force_close(const error_code& ec) noexcept;
    /// Half close of a stream: tells the peer the total it wrote.
    connection_actions shutdown_stream(std::uint64_t stream_bytes) noexcept;
    /// The connection timer expired: the handshake deadline, or a heartbeat tick.
    connection_actions timer_expired() noexcept;
    /// The listener waiting for the handshake goes away.
    void forget_listener() noexcept { listener_pending_ = false; }

    connection_state state() const noexcept { return state_; }
    connection_role role() const noexcept { return role_; }
    bool by_address() const noexcept { return by_address_; }
    /// A client/server endpoint (with the hello/welcome handshake).
    bool has_handshake() const noexcept {
        return role_ == connection_role::client || role_ == connection_role::server;
    }
    /// A plain UCP connection (no control protocol).
    bool is_plain() const noexcept {
        return role_ == connection_role::plain_client || role_ == connection_role::plain_server;
    }
    bool established() const noexcept { return established_; }
    /// Whether the UCP endpoint exists (started and not closed).
    bool has_endpoint() const noexcept {
        return state_ != connection_state::idle && state_ != connection_state::closed;
    }
    /// Why the endpoint is not usable; empty while it is (or still connecting).
    const error_code& error() const noexcept { return error_; }
    /// Usable for operations.
    bool is_open() const noexcept { return has_endpoint() && !error_ && established_; }
    std::uint64_t local_tag() const noexcept { return local_tag_; }
    std::uint64_t peer_tag() const noexcept { return peer_tag_; }
    bool peer_said_goodbye() const noexcept { return peer_goodbye_; }
    /// The stream bytes the peer says it wrote in all (stream_end or
    /// goodbye), for a stream that starts after the message came.
    std::optional<std::uint64_t> peer_stream_end() const noexcept { return peer_stream_end_; }
    bool connect_pending() const noexcept { return connect_pending_; }
    bool close_pending() const noexcept { return close_pending_; }
    bool listener_pending() const noexcept { return listener_pending_; }
    /// Heartbeat ticks in a row after which nothing had come from the peer.
    unsigned silent_ticks() const noexcept { return silent_ticks_; }

private:
    void fail(connection_actions& out, const error_code& ec) noexcept;
    void drain(connection_actions& out, bool can_linger) noexcept;
    void close_now(connection_actions& out) noexcept;
    /// The connection is open: start watching the peer.
    void opened(connection_actions& out) noexcept;
    void stop_timer(connection_actions& out) noexcept;
    /// A graceful close the peer does not answer: fails it, force-closes.
    void close_unanswered(connection_actions& out) noexcept;

    connection_state state_ = connection_state::idle;
    connection_role role_ = connection_role::address;
    bool by_address_ = false;
    bool established_ = false;
    bool connect_pending_ = false;
    bool listener_pending_ = false;
    bool close_pending_ = false;
    bool goodbye_sent_ = false;
    bool peer_goodbye_ = false;
    bool linger_armed_ = false;
    bool timer_armed_ = false;
    /// Something came from the peer since the last heartbeat tick.
    bool heard_ = false;
    unsigned silent_ticks_ = 0;
    std::uint64_t handshake_timeout_ms_ = 0;
    std::uint64_t heartbeat_interval_ms_ = 0;
    error_code error_{};
    std::uint64_t local_tag_ = 0;
    std::uint64_t peer_tag_ = 0;
    std::uint64_t goodbye_bytes_ = 0;
    std::optional<std::uint64_t> peer_stream_end_{};
};

} // namespace ucx::detail
