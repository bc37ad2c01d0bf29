#include "connection_fsm.hpp"

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
    switch (p.role) {
    case connection_role::address:
    case connection_role::borrowed:
        established_ = true;
        state_ = connection_state::open;
        break;
    case connection_role::client:
        connect_pending_ = true;
        state_ = connection_state::connecting;
        out.push(send(control_type::hello, local_tag_));
        break;
    case connection_role::server:
        listener_pending_ = p.listener;
        state_ = connection_state::accepting;
        break;
    }
    return out;
}

void connection_fsm::fail(connection_actions& out, const error_code& ec) noexcept {
    if (connect_pending_) {
        connect_pending_ = false;
        out.push(act(type::complete_connect, ec));
    }
    out.push(act(type::fail_operations, ec));
}

connection_actions connection_fsm::on_control(const control_message& m) noexcept {
    connection_actions out;
    // Nothing reaches an endpoint without its UCP endpoint.
    if (!has_endpoint())
        return out;
    switch (m.type) {
    case control_type::hello:
        // A repeated hello, or one to a client: ignored.
        if (role_ != connection_role::server || state_ != connection_state::accepting || error_)
            return out;
        peer_tag_ = m.recv_tag;
        established_ = true;
        state_ = connection_state::open;
        out.push(send(control_type::welcome, local_tag_));
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
        if (state_ == connection_state::lingering) {
            out.push(act(type::cancel_linger));
            close_now(out);
        }
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
    if (state_ == connection_state::lingering)
        out.push(act(type::cancel_linger));
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
            // ack), or the linger time passed.
            state_ = connection_state::lingering;
            out.push(act(type::start_linger));
            return;
        }
    }
    close_now(out);
}

void connection_fsm::close_now(connection_actions& out) noexcept {
    close_pending_ = false;
    state_ = connection_state::closed;
    out.push(act(type::close_flush));
}

connection_actions connection_fsm::linger_expired() noexcept {
    connection_actions out;
    if (state_ == connection_state::lingering)
        close_now(out);
    return out;
}

connection_actions connection_fsm::shutdown_stream(std::uint64_t stream_bytes) noexcept {
    connection_actions out;
    if (has_endpoint() && !error_ && established_ && has_handshake())
        out.push(send(control_type::stream_end, stream_bytes));
    return out;
}

} // namespace ucx::detail
