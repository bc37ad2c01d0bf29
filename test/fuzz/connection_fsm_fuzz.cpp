// Fuzz target: the connection protocol (connection_fsm) driven by any
// sequence of events: starts in every role, control messages of every type
// with any value, in any order and any number (a confused or hostile peer),
// failures, graceful and force closes, drained sends, linger timers, half
// closes, a listener going away. After every event the actions are checked
// against a model of what the endpoint tracks:
// - the action list never fills up (a full list may have dropped one);
// - nothing happens after the connection closed, but the rejection of a new
//   close operation;
// - the connect operation, the kept close operation and the listener's
//   hand-off each complete exactly once, and none is left when closed;
// - the UCP endpoint is closed (or released) exactly once, when the state
//   becomes closed; the linger timer runs exactly while lingering;
// - hello, welcome and goodbye go out at most once; the peer's goodbye
//   reaches the stream at most once;
// - a plain connection sends no control message, and only a plain client
//   flushes its endpoint, once.
#include "fuzz.hpp"

#include "connection/connection_fsm.hpp"

#include <boost/asio/error.hpp>

namespace ucx::fuzz {
namespace {

using detail::connection_action_type;
using detail::connection_actions;
using detail::connection_fsm;
using detail::connection_role;
using detail::connection_state;
using detail::control_type;
using error_code = boost::system::error_code;
namespace ae = boost::asio::error;

error_code some_error(reader& r) {
    // The errors the endpoint passes in (operation_aborted: a local close).
    switch (r.byte() % 6) {
    case 0:
        return ae::operation_aborted;
    case 1:
        return ae::connection_reset;
    case 2:
        return ae::timed_out;
    case 3:
        return ae::connection_refused;
    case 4:
        return ae::eof;
    default:
        return ae::no_memory;
    }
}

/// What the endpoint sees of the state machine, from its actions alone.
struct model {
    bool started = false;
    bool connect_pending = false;
    bool close_pending = false;
    bool listener_pending = false;
    bool linger_running = false;
    bool timer_running = false;
    int endpoint_closes = 0;
    int hellos = 0;
    int welcomes = 0;
    int goodbyes = 0;
    int peer_goodbyes = 0;
    int flushes = 0;
};

void check(connection_fsm& fsm, model& m, connection_event event, connection_state before,
           const connection_actions& actions) {
    using type = connection_action_type;
    UCX_ASIO_FUZZ_CHECK(actions.size() < connection_actions::capacity);
    if (before == connection_state::closed) {
        // Closed: a new close operation is rejected, and nothing else happens.
        UCX_ASIO_FUZZ_CHECK(fsm.state() == connection_state::closed);
        if (event == connection_event::close_graceful)
            UCX_ASIO_FUZZ_CHECK(actions.size() == 1 && actions[0].type == type::reject_close);
        else
            UCX_ASIO_FUZZ_CHECK(actions.empty());
    }
    if (before != connection_state::idle)
        UCX_ASIO_FUZZ_CHECK(fsm.state() != connection_state::idle);

    int close_answers = 0; // accept_close or reject_close
    const bool peer_goodbye_before = m.peer_goodbyes > 0;
    for (const auto& a : actions) {
        switch (a.type) {
        case type::flush_endpoint:
            UCX_ASIO_FUZZ_CHECK(++m.flushes == 1 && fsm.role() == connection_role::plain_client);
            break;
        case type::send_control:
            UCX_ASIO_FUZZ_CHECK(!fsm.is_plain());
            if (a.message == control_type::hello)
                UCX_ASIO_FUZZ_CHECK(++m.hellos == 1 && fsm.role() == connection_role::client);
            if (a.message == control_type::welcome)
                UCX_ASIO_FUZZ_CHECK(++m.welcomes == 1 && fsm.role() == connection_role::server);
            if (a.message == control_type::goodbye)
                UCX_ASIO_FUZZ_CHECK(++m.goodbyes == 1 && fsm.has_handshake());
            break;
        case type::complete_connect:
            UCX_ASIO_FUZZ_CHECK(m.connect_pending);
            UCX_ASIO_FUZZ_CHECK(a.ec ||
                                (fsm.established() && fsm.state() == connection_state::open));
            m.connect_pending = false;
            break;
        case type::listener_established:
            // Right after the welcome.
            UCX_ASIO_FUZZ_CHECK(fsm.state() == connection_state::open && m.welcomes == 1);
            [[fallthrough]];
        case type::listener_failed:
            UCX_ASIO_FUZZ_CHECK(m.listener_pending);
            m.listener_pending = false;
            break;
        case type::fail_operations:
            UCX_ASIO_FUZZ_CHECK(a.ec);
            break;
        case type::peer_stream_end:
            // The peer's goodbye is its last word on the stream.
            UCX_ASIO_FUZZ_CHECK(!peer_goodbye_before);
            if (a.goodbye)
                UCX_ASIO_FUZZ_CHECK(++m.peer_goodbyes == 1);
            break;
        case type::start_linger:
            UCX_ASIO_FUZZ_CHECK(!m.linger_running);
            m.linger_running = true;
            break;
        case type::cancel_linger:
            UCX_ASIO_FUZZ_CHECK(m.linger_running);
            m.linger_running = false;
            break;
        case type::accept_close:
            UCX_ASIO_FUZZ_CHECK(event == connection_event::close_graceful && !m.close_pending);
            m.close_pending = true;
            ++close_answers;
            break;
        case type::reject_close:
            UCX_ASIO_FUZZ_CHECK(event == connection_event::close_graceful);
            ++close_answers;
            break;
        case type::complete_close:
            UCX_ASIO_FUZZ_CHECK(m.close_pending);
            m.close_pending = false;
            break;
        case type::close_flush:
            // A graceful close: an established connection said goodbye first.
            UCX_ASIO_FUZZ_CHECK(!fsm.has_handshake() || !fsm.established() || m.goodbyes == 1);
            // Completes the kept close operation, if any, when UCX is done.
            m.close_pending = false;
            UCX_ASIO_FUZZ_CHECK(++m.endpoint_closes == 1);
            break;
        case type::close_force:
        case type::release:
            UCX_ASIO_FUZZ_CHECK(++m.endpoint_closes == 1);
            break;
        case type::arm_timer:
            UCX_ASIO_FUZZ_CHECK(a.value != 0);
            m.timer_running = true;
            break;
        case type::cancel_timer:
            UCX_ASIO_FUZZ_CHECK(m.timer_running);
            m.timer_running = false;
            break;
        case type::abort_operations:
        case type::peer_stream_acked:
        case type::take_received:
            break;
        }
    }
    if (event == connection_event::close_graceful)
        UCX_ASIO_FUZZ_CHECK(close_answers == 1);
    if (event == connection_event::linger_expired && before == connection_state::lingering)
        m.linger_running = false;

    UCX_ASIO_FUZZ_CHECK(fsm.connect_pending() == m.connect_pending);
    UCX_ASIO_FUZZ_CHECK(fsm.close_pending() == m.close_pending);
    UCX_ASIO_FUZZ_CHECK(fsm.listener_pending() == m.listener_pending);
    UCX_ASIO_FUZZ_CHECK(m.linger_running == (fsm.state() == connection_state::lingering));
    // The connection timer runs only before the goodbye: never with the
    // linger, never once closed.
    if (m.timer_running)
        UCX_ASIO_FUZZ_CHECK(fsm.state() != connection_state::lingering &&
                            fsm.state() != connection_state::closed &&
                            fsm.state() != connection_state::idle);
    UCX_ASIO_FUZZ_CHECK(!fsm.is_open() || fsm.established());
    if (fsm.state() == connection_state::closed) {
        UCX_ASIO_FUZZ_CHECK(!m.connect_pending && !m.close_pending && !m.listener_pending);
        UCX_ASIO_FUZZ_CHECK(m.endpoint_closes == (m.started ? 1 : 0));
        UCX_ASIO_FUZZ_CHECK(fsm.error());
    } else {
        UCX_ASIO_FUZZ_CHECK(m.endpoint_closes == 0);
    }
}

} // namespace

void connection_fsm(input data) {
    reader r(data);
    detail::connection_fsm fsm;
    model m;
    while (!r.empty()) {
        const auto event = static_cast<connection_event>(
            r.byte() % static_cast<std::uint8_t>(connection_event::count));
        const connection_state before = fsm.state();
        connection_actions actions;
        switch (event) {
        case connection_event::start: {
            detail::connection_fsm::start_params p;
            p.role = static_cast<connection_role>(r.byte() % 6);
            p.by_address = r.flag();
            p.listener = r.flag();
            p.local_tag = r.uint(8);
            p.handshake_timeout_ms = r.flag() ? 100 : 0;
            p.heartbeat_interval_ms = r.flag() ? 25 : 0;
            if (before == connection_state::idle) {
                m.started = true;
                m.connect_pending =
                    p.role == connection_role::client || p.role == connection_role::plain_client;
                m.listener_pending = p.role == connection_role::server && p.listener;
            }
            actions = fsm.start(p);
            break;
        }
        case connection_event::control: {
            detail::control_message msg;
            msg.type = static_cast<control_type>(
                1 + r.byte() % static_cast<std::uint8_t>(detail::last_control_type));
            msg.recv_tag = r.uint(8);
            actions = fsm.on_control(msg);
            break;
        }
        case connection_event::failure:
            actions = fsm.on_failure(some_error(r));
            break;
        case connection_event::close_graceful: {
            const bool in_flight = r.flag();
            const std::uint64_t bytes = r.uint(8);
            actions = fsm.close_graceful(in_flight, bytes, r.flag());
            break;
        }
        case connection_event::sends_drained:
            actions = fsm.sends_drained(r.flag());
            break;
        case connection_event::linger_expired:
            actions = fsm.linger_expired();
            break;
        case connection_event::force_close:
            actions = fsm.force_close(some_error(r));
            break;
        case connection_event::shutdown_stream:
            actions = fsm.shutdown_stream(r.uint(8));
            break;
        case connection_event::forget_listener:
            fsm.forget_listener();
            m.listener_pending = false;
            break;
        case connection_event::timer_expired:
            // An expiry consumes the arming; a stale one must change nothing.
            m.timer_running = false;
            actions = fsm.timer_expired();
            break;
        case connection_event::reached:
            actions = fsm.reached();
            break;
        case connection_event::count:
            break;
        }
        check(fsm, m, event, before, actions);
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(connection_fsm)
