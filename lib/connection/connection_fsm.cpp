#include "connection/connection_fsm.hpp"

#include <ucx/error.hpp>

#include <boost/asio/error.hpp>

namespace ucx::detail {

namespace {
using type = connection_action_type;

connection_action act(type t, const boost::system::error_code& ec = {}) noexcept {
    connection_action a;
    a.type = t;
    a.ec = ec;
    return a;
}

connection_action send(control_type m, std::uint64_t value) noexcept {
    connection_action a;
    a.type = type::send_control;
    a.message = m;
    a.value = value;
    return a;
}

connection_action arm(std::uint64_t ms) noexcept {
    connection_action a;
    a.type = type::arm_timer;
    a.value = ms;
    return a;
}

connection_action to_stream(type t, std::uint64_t value, bool goodbye = false) noexcept {
    connection_action a;
    a.type = t;
    a.value = value;
    a.goodbye = goodbye;
    return a;
}
} // namespace

connection_actions connection_fsm::start(const start_params& p) noexcept {
    connection_actions out;
    if (state_ != connection_state::idle || error_)
        return out;
    role_ = p.role;
    by_address_ = p.by_address;
    local_tag_ = p.local_tag;
    if (has_handshake()) {
        handshake_timeout_ms_ = p.handshake_timeout_ms;
        heartbeat_interval_ms_ = p.heartbeat_interval_ms;
    } else if (p.role == connection_role::plain_client) {
        handshake_timeout_ms_ = p.handshake_timeout_ms;
    }
    switch (p.role) {
    case connection_role::address:
    case connection_role::borrowed:
    case connection_role::plain_server:
        established_ = true;
        state_ = connection_state::open;
        break;
    case connection_role::plain_client:
        connect_pending_ = true;
        state_ = connection_state::connecting;
        out.push(act(type::flush_endpoint));
        break;
    case connection_role::client:
        connect_pending_ = true;
        state_ = connection_state::connecting;
        // By address, the endpoint sends the hello itself, with its address.
        if (!by_address_)
            out.push(send(control_type::hello, local_tag_));
        break;
    case connection_role::server:
        listener_pending_ = p.listener;
        state_ = connection_state::accepting;
        break;
    }
    if (handshake_timeout_ms_ != 0 && !established_) {
        timer_armed_ = true;
        out.push(arm(handshake_timeout_ms_));
    }
    return out;
}

void connection_fsm::opened(connection_actions& out) noexcept {
    heard_ = false;
    silent_ticks_ = 0;
    if (heartbeat_interval_ms_ != 0) {
        timer_armed_ = true;
        out.push(arm(heartbeat_interval_ms_));
    } else {
        stop_timer(out);
    }
}

void connection_fsm::stop_timer(connection_actions& out) noexcept {
    if (timer_armed_) {
        timer_armed_ = false;
        out.push(act(type::cancel_timer));
    }
}

connection_actions connection_fsm::timer_expired() noexcept {
    connection_actions out;
    if (!timer_armed_ || !has_endpoint())
        return out;
    timer_armed_ = false;
    switch (state_) {
    case connection_state::connecting:
    case connection_state::accepting:
        // The handshake deadline: the peer never completed it.
        return force_close(make_error_code(error::handshake_timeout));
    case connection_state::open:
    case connection_state::closing:
        // A heartbeat tick (a close waiting for its sends is watched too).
        // After the peer's goodbye there is nobody to watch.
        if (peer_goodbye_ || heartbeat_interval_ms_ == 0 || !established_)
            return out;
        if (heard_) {
            heard_ = false;
            silent_ticks_ = 0;
        } else if (++silent_ticks_ >= silent_ticks_limit) {
            if (state_ == connection_state::closing) {
                close_unanswered(out);
                return out;
            }
            return force_close(make_error_code(error::peer_unresponsive));
        } else {
            // Silent for a tick: ask; a live peer answers before the next.
            out.push(send(control_type::ping, silent_ticks_));
        }
        timer_armed_ = true;
        out.push(arm(heartbeat_interval_ms_));
        return out;
    default:
        return out;
    }
}

void connection_fsm::fail(connection_actions& out, const error_code& ec) noexcept {
    if (connect_pending_) {
        connect_pending_ = false;
        out.push(act(type::complete_connect, ec));
    }
    out.push(act(type::fail_operations, ec));
}

connection_actions connection_fsm::reached() noexcept {
    connection_actions out;
    if (role_ != connection_role::plain_client || state_ != connection_state::connecting || error_)
        return out;
    established_ = true;
    state_ = connection_state::open;
    opened(out); // no heartbeats: stops the connection timer
    if (connect_pending_) {
        connect_pending_ = false;
        out.push(act(type::complete_connect));
    }
    return out;
}

connection_actions connection_fsm::on_control(const control_message& m) noexcept {
    connection_actions out;
    // Nothing reaches an endpoint without its UCP endpoint; a plain
    // connection has no control protocol.
    if (!has_endpoint() || is_plain())
        return out;
    // Any word from the peer shows it is alive.
    heard_ = true;
    switch (m.type) {
    case control_type::ping:
        out.push(send(control_type::pong, m.recv_tag));
        return out;
    case control_type::pong:
        return out;
    case control_type::hello:
        // A repeated hello, or one to a client: ignored.
        if (role_ != connection_role::server || state_ != connection_state::accepting || error_)
            return out;
        peer_tag_ = m.recv_tag;
        established_ = true;
        state_ = connection_state::open;
        out.push(send(control_type::welcome, local_tag_));
        opened(out);
        if (listener_pending_) {
            listener_pending_ = false;
            out.push(act(type::listener_established));
        }
        return out;
    case control_type::welcome:
        if (role_ != connection_role::client || established_)
            return out;
        if (state_ == connection_state::connecting) {
            peer_tag_ = m.recv_tag;
            established_ = true;
            state_ = connection_state::open;
            opened(out);
            if (connect_pending_) {
                connect_pending_ = false;
                out.push(act(type::complete_connect));
            }
        } else if (state_ == connection_state::closing) {
            // Closed before the welcome came: the peer is connected, so the
            // close still says goodbye.
            peer_tag_ = m.recv_tag;
            established_ = true;
        }
        return out;
    case control_type::goodbye:
        // The peer closes cleanly: what is pending here ends with eof.
        if (peer_goodbye_)
            return out;
        peer_goodbye_ = true;
        peer_stream_end_ = m.recv_tag;
        out.push(to_stream(type::peer_stream_end, m.recv_tag, true));
        // UCX drops unread stream data when the peer's close reaches this
        // endpoint: keep it first, then let the peer close.
        out.push(act(type::take_received));
        out.push(send(control_type::goodbye_ack, 0));
        if (!error_)
            error_ = boost::asio::error::eof;
        fail(out, error_);
        return out;
    case control_type::stream_end:
        // A half close: reads there end after these bytes; writes go on.
        if (peer_goodbye_)
            return out;
        peer_stream_end_ = m.recv_tag;
        out.push(to_stream(type::peer_stream_end, m.recv_tag));
        return out;
    case control_type::stream_ack:
        // The peer read this many stream bytes: waiting writes may go on.
        out.push(to_stream(type::peer_stream_acked, m.recv_tag));
        return out;
    case control_type::refused:
        // No address acceptor on the peer's worker took the hello.
        if (state_ == connection_state::connecting && connect_pending_)
            return force_close(boost::asio::error::connection_refused);
        return out;
    case control_type::goodbye_ack:
        if (state_ == connection_state::lingering)
            close_now(out);
        return out;
    }
    return out;
}

connection_actions connection_fsm::on_failure(const error_code& ec) noexcept {
    if (!has_endpoint())
        return {};
    // A goodbye or a local close before decides what operations see.
    return force_close(error_ ? error_ : ec);
}

connection_actions connection_fsm::force_close(const error_code& ec) noexcept {
    connection_actions out;
    const bool local = ec == boost::asio::error::operation_aborted;
    if (state_ == connection_state::closed)
        return out;
    stop_timer(out);
    if (linger_armed_) {
        linger_armed_ = false;
        out.push(act(type::cancel_linger));
    }
    if (close_pending_) {
        // A graceful close under way: aborted by a local force close; done
        // (the peer is gone, which is not an error) after a failure.
        close_pending_ = false;
        out.push(act(type::complete_close, local ? ec : error_code()));
    }
    if (!error_)
        error_ = local ? error_code(boost::asio::error::bad_descriptor) : ec;
    fail(out, local ? ec : error_);
    if (has_endpoint()) {
        out.push(act(type::take_received));
        out.push(act(role_ == connection_role::borrowed ? type::release : type::close_force));
    }
    if (listener_pending_) {
        // Failed during the handshake: the listener forgets it.
        listener_pending_ = false;
        out.push(act(type::listener_failed));
    }
    state_ = connection_state::closed;
    return out;
}

connection_actions connection_fsm::close_graceful(bool sends_in_flight, std::uint64_t stream_bytes,
                                                  bool can_linger) noexcept {
    connection_actions out;
    if (close_pending_) {
        out.push(act(type::reject_close, boost::asio::error::already_started));
        return out;
    }
    if (error_ == boost::asio::error::bad_descriptor) {
        out.push(act(type::reject_close, error_)); // closed here already
        return out;
    }
    if (!has_endpoint()) {
        // The peer failed and UCX's endpoint is gone: nothing left to close.
        out.push(act(type::reject_close));
        return out;
    }
    // Later operations fail; pending receives and waits end now.
    error_ = boost::asio::error::bad_descriptor;
    out.push(act(type::abort_operations));
    if (connect_pending_) {
        connect_pending_ = false;
        out.push(act(type::complete_connect, boost::asio::error::operation_aborted));
    }
    if (listener_pending_) {
        listener_pending_ = false;
        out.push(act(type::listener_failed));
    }
    out.push(act(type::accept_close));
    close_pending_ = true;
    goodbye_bytes_ = stream_bytes;
    state_ = connection_state::closing;
    // The sends in flight complete first (a rendezvous send completes only
    // when the peer has fetched the data); then goodbye, then close.
    // While they are in flight the peer stays watched: a peer that stopped
    // fails the close (timer_expired); one that is alive but slow to receive
    // is waited for.
    if (!sends_in_flight)
        drain(out, can_linger);
    return out;
}

connection_actions connection_fsm::sends_drained(bool can_linger) noexcept {
    connection_actions out;
    if (state_ == connection_state::closing)
        drain(out, can_linger);
    return out;
}

void connection_fsm::drain(connection_actions& out, bool can_linger) noexcept {
    if (role_ == connection_role::plain_client && !established_) {
        // Closed before UCX made the connection: nothing to flush.
        stop_timer(out);
        close_pending_ = false;
        state_ = connection_state::closed;
        out.push(act(type::complete_close));
        out.push(act(type::take_received));
        out.push(act(type::close_force));
        return;
    }
    if (role_ == connection_role::borrowed) {
        // UCX's own endpoint: nothing to close.
        close_pending_ = false;
        state_ = connection_state::closed;
        out.push(act(type::release));
        out.push(act(type::complete_close));
        return;
    }
    if (has_handshake() && established_ && !goodbye_sent_) {
        goodbye_sent_ = true;
        out.push(send(control_type::goodbye, goodbye_bytes_));
        if (!peer_goodbye_ && can_linger) {
            // The peer's UCX drops the stream data it has not handed out yet
            // when this endpoint closes: wait until the peer took it (its
            // ack), or the linger time passed. The linger bounds the wait,
            // so the peer need not be watched any more.
            state_ = connection_state::lingering;
            stop_timer(out);
            linger_armed_ = true;
            out.push(act(type::start_linger));
            return;
        }
    }
    close_now(out);
}

void connection_fsm::close_now(connection_actions& out) noexcept {
    stop_timer(out);
    if (linger_armed_) {
        linger_armed_ = false;
        out.push(act(type::cancel_linger));
    }
    close_pending_ = false;
    state_ = connection_state::closed;
    out.push(act(type::close_flush));
}

connection_actions connection_fsm::linger_expired() noexcept {
    connection_actions out;
    if (state_ == connection_state::lingering && linger_armed_) {
        linger_armed_ = false;
        close_unanswered(out);
    }
    return out;
}

void connection_fsm::close_unanswered(connection_actions& out) noexcept {
    // The peer did not take the sends or acknowledge the goodbye: it may not
    // have everything, so the close reports it; closing in flush mode could
    // wait for such a peer forever, so the endpoint is force-closed.
    stop_timer(out);
    const error_code ec = make_error_code(error::peer_unresponsive);
    close_pending_ = false;
    out.push(act(type::complete_close, ec));
    out.push(act(type::fail_operations, ec));
    out.push(act(type::take_received));
    out.push(act(type::close_force));
    state_ = connection_state::closed;
}

connection_actions connection_fsm::shutdown_stream(std::uint64_t stream_bytes) noexcept {
    connection_actions out;
    if (has_endpoint() && !error_ && established_ && has_handshake())
        out.push(send(control_type::stream_end, stream_bytes));
    return out;
}

} // namespace ucx::detail
