// Unit tests of the connection protocol (ucx::detail::connection_fsm): every
// input in every state, step by step, and properties over random input
// sequences. No UCX, no I/O: the actions are recorded, not executed.
#include "connection/connection_fsm.hpp"
#include "transition_table.hpp"

#include <ucx/error.hpp>

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace ucx::detail;
using ec_t = boost::system::error_code;
namespace ae = boost::asio::error;

inline std::string ec_name(const ec_t& ec) {
    if (!ec)
        return "";
    if (ec == ae::eof)
        return "eof";
    if (ec == ae::bad_descriptor)
        return "bad_descriptor";
    if (ec == ae::operation_aborted)
        return "operation_aborted";
    if (ec == ae::already_started)
        return "already_started";
    if (ec == ae::connection_refused)
        return "connection_refused";
    if (ec == ae::connection_reset)
        return "connection_reset";
    if (ec == ae::timed_out)
        return "timed_out";
    if (ec == ucx::error::peer_unresponsive)
        return "peer_unresponsive";
    if (ec == ucx::error::handshake_timeout)
        return "handshake_timeout";
    return "ec" + std::to_string(ec.value());
}

inline std::string msg_name(control_type t) {
    switch (t) {
    case control_type::hello:
        return "hello";
    case control_type::welcome:
        return "welcome";
    case control_type::goodbye:
        return "goodbye";
    case control_type::goodbye_ack:
        return "goodbye_ack";
    case control_type::stream_end:
        return "stream_end";
    case control_type::refused:
        return "refused";
    case control_type::stream_ack:
        return "stream_ack";
    case control_type::ping:
        return "ping";
    case control_type::pong:
        return "pong";
    }
    return "?";
}

inline std::string str(const connection_action& a) {
    using T = connection_action_type;
    auto with_ec = [&](const char* n) { return std::string(n) + "(" + ec_name(a.ec) + ")"; };
    switch (a.type) {
    case T::send_control:
        return "send(" + msg_name(a.message) + "," + std::to_string(a.value) + ")";
    case T::complete_connect:
        return with_ec("complete_connect");
    case T::listener_established:
        return "listener_established";
    case T::listener_failed:
        return "listener_failed";
    case T::fail_operations:
        return with_ec("fail_operations");
    case T::abort_operations:
        return "abort_operations";
    case T::peer_stream_end:
        return "peer_stream_end(" + std::to_string(a.value) + (a.goodbye ? ",goodbye)" : ")");
    case T::peer_stream_acked:
        return "peer_stream_acked(" + std::to_string(a.value) + ")";
    case T::take_received:
        return "take_received";
    case T::start_linger:
        return "start_linger";
    case T::cancel_linger:
        return "cancel_linger";
    case T::arm_timer:
        return "arm(" + std::to_string(a.value) + ")";
    case T::cancel_timer:
        return "cancel_timer";
    case T::accept_close:
        return "accept_close";
    case T::reject_close:
        return with_ec("reject_close");
    case T::complete_close:
        return with_ec("complete_close");
    case T::close_flush:
        return "close_flush";
    case T::flush_endpoint:
        return "flush_endpoint";
    case T::close_force:
        return "close_force";
    case T::release:
        return "release";
    }
    return "?";
}

inline std::string str(const connection_actions& as) {
    std::string s;
    for (const auto& a : as) {
        if (!s.empty())
            s += " ";
        s += str(a);
    }
    return s;
}

inline std::string state_name(connection_state s) {
    switch (s) {
    case connection_state::idle:
        return "idle";
    case connection_state::connecting:
        return "connecting";
    case connection_state::accepting:
        return "accepting";
    case connection_state::open:
        return "open";
    case connection_state::closing:
        return "closing";
    case connection_state::lingering:
        return "lingering";
    case connection_state::closed:
        return "closed";
    }
    return "?";
}

constexpr std::uint64_t local_tag = 0x1111;

inline connection_fsm::start_params client() {
    return {connection_role::client, false, false, local_tag};
}
inline connection_fsm::start_params server() {
    return {connection_role::server, false, true, local_tag};
}

/// A client and a server that watch their peer: handshake deadline 1000 ms,
/// heartbeat every 250 ms.
inline connection_fsm::start_params watched(connection_fsm::start_params p) {
    p.handshake_timeout_ms = 1000;
    p.heartbeat_interval_ms = 250;
    return p;
}

inline control_message msg(control_type t, std::uint64_t v) {
    return control_message{t, v};
}

using setup = ucx::test::fsm_setup<connection_fsm>;

inline std::vector<setup> setups() {
    return {
        {"idle", [](connection_fsm&) {}},
        {"connecting", [](connection_fsm& f) { f.start(client()); }},
        {"accepting", [](connection_fsm& f) { f.start(server()); }},
        {"open_client",
         [](connection_fsm& f) {
             f.start(client());
             f.on_control(msg(control_type::welcome, 7));
         }},
        {"open_server",
         [](connection_fsm& f) {
             f.start(server());
             f.on_control(msg(control_type::hello, 7));
         }},
        {"open_address", [](connection_fsm& f) { f.start({connection_role::address}); }},
        {"open_borrowed", [](connection_fsm& f) { f.start({connection_role::borrowed}); }},
        {"peer_gone",
         [](connection_fsm& f) {
             f.start(client());
             f.on_control(msg(control_type::welcome, 7));
             f.on_control(msg(control_type::goodbye, 9));
         }},
        {"closing",
         [](connection_fsm& f) {
             f.start(client());
             f.on_control(msg(control_type::welcome, 7));
             f.close_graceful(true, 5, true);
         }},
        {"closing_borrowed",
         [](connection_fsm& f) {
             f.start({connection_role::borrowed});
             f.close_graceful(true, 0, true);
         }},
        {"lingering",
         [](connection_fsm& f) {
             f.start(client());
             f.on_control(msg(control_type::welcome, 7));
             f.close_graceful(false, 5, true);
         }},
        {"closed",
         [](connection_fsm& f) {
             f.start(client());
             f.on_control(msg(control_type::welcome, 7));
             f.force_close(ae::operation_aborted);
         }},
    };
}

struct input {
    const char* name;
    std::function<connection_actions(connection_fsm&)> run;
};

inline std::vector<input> inputs() {
    return {
        {"start_client", [](connection_fsm& f) { return f.start(client()); }},
        {"start_server", [](connection_fsm& f) { return f.start(server()); }},
        {"start_address", [](connection_fsm& f) { return f.start({connection_role::address}); }},
        {"start_borrowed", [](connection_fsm& f) { return f.start({connection_role::borrowed}); }},
        {"start_client_watched", [](connection_fsm& f) { return f.start(watched(client())); }},
        {"start_server_watched", [](connection_fsm& f) { return f.start(watched(server())); }},
        {"forget_listener",
         [](connection_fsm& f) {
             f.forget_listener();
             return connection_actions{};
         }},
        {"hello", [](connection_fsm& f) { return f.on_control(msg(control_type::hello, 42)); }},
        {"welcome", [](connection_fsm& f) { return f.on_control(msg(control_type::welcome, 42)); }},
        {"goodbye",
         [](connection_fsm& f) { return f.on_control(msg(control_type::goodbye, 100)); }},
        {"goodbye_ack",
         [](connection_fsm& f) { return f.on_control(msg(control_type::goodbye_ack, 0)); }},
        {"stream_end",
         [](connection_fsm& f) { return f.on_control(msg(control_type::stream_end, 50)); }},
        {"stream_ack",
         [](connection_fsm& f) { return f.on_control(msg(control_type::stream_ack, 60)); }},
        {"refused", [](connection_fsm& f) { return f.on_control(msg(control_type::refused, 0)); }},
        {"failure", [](connection_fsm& f) { return f.on_failure(ae::connection_reset); }},
        {"close", [](connection_fsm& f) { return f.close_graceful(false, 10, true); }},
        {"close_sends", [](connection_fsm& f) { return f.close_graceful(true, 10, true); }},
        {"close_nolinger", [](connection_fsm& f) { return f.close_graceful(false, 10, false); }},
        {"drained", [](connection_fsm& f) { return f.sends_drained(true); }},
        {"linger_expired", [](connection_fsm& f) { return f.linger_expired(); }},
        {"abort", [](connection_fsm& f) { return f.force_close(ae::operation_aborted); }},
        {"timeout", [](connection_fsm& f) { return f.force_close(ae::timed_out); }},
        {"shutdown", [](connection_fsm& f) { return f.shutdown_stream(20); }},
        {"ping", [](connection_fsm& f) { return f.on_control(msg(control_type::ping, 3)); }},
        {"pong", [](connection_fsm& f) { return f.on_control(msg(control_type::pong, 3)); }},
        {"timer", [](connection_fsm& f) { return f.timer_expired(); }},
    };
}

// ---------------------------------------------------------------- every transition

using ucx::test::transition;

// Each input in each state: the actions, in order, and the state after.
// The `local_tag` is 0x1111 (4369); inputs carry the values shown in inputs().
const transition transitions[] = {
    {"idle", "start_client", "send(hello,4369)", "connecting"},
    {"idle", "start_server", "", "accepting"},
    {"idle", "start_address", "", "open"},
    {"idle", "start_borrowed", "", "open"},
    {"idle", "start_client_watched", "send(hello,4369) arm(1000)", "connecting"},
    {"idle", "start_server_watched", "arm(1000)", "accepting"},
    {"idle", "forget_listener", "", "idle"},
    {"idle", "hello", "", "idle"},
    {"idle", "welcome", "", "idle"},
    {"idle", "goodbye", "", "idle"},
    {"idle", "goodbye_ack", "", "idle"},
    {"idle", "stream_end", "", "idle"},
    {"idle", "stream_ack", "", "idle"},
    {"idle", "refused", "", "idle"},
    {"idle", "failure", "", "idle"},
    {"idle", "close", "reject_close()", "idle"},
    {"idle", "close_sends", "reject_close()", "idle"},
    {"idle", "close_nolinger", "reject_close()", "idle"},
    {"idle", "drained", "", "idle"},
    {"idle", "linger_expired", "", "idle"},
    {"idle", "abort", "fail_operations(operation_aborted)", "closed"},
    {"idle", "timeout", "fail_operations(timed_out)", "closed"},
    {"idle", "shutdown", "", "idle"},
    {"idle", "ping", "", "idle"},
    {"idle", "pong", "", "idle"},
    {"idle", "timer", "", "idle"},
    {"connecting", "start_client", "", "connecting"},
    {"connecting", "start_server", "", "connecting"},
    {"connecting", "start_address", "", "connecting"},
    {"connecting", "start_borrowed", "", "connecting"},
    {"connecting", "start_client_watched", "", "connecting"},
    {"connecting", "start_server_watched", "", "connecting"},
    {"connecting", "forget_listener", "", "connecting"},
    {"connecting", "hello", "", "connecting"},
    {"connecting", "welcome", "complete_connect()", "open"},
    {"connecting", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) complete_connect(eof) "
     "fail_operations(eof)",
     "connecting"},
    {"connecting", "goodbye_ack", "", "connecting"},
    {"connecting", "stream_end", "peer_stream_end(50)", "connecting"},
    {"connecting", "stream_ack", "peer_stream_acked(60)", "connecting"},
    {"connecting", "refused",
     "complete_connect(connection_refused) fail_operations(connection_refused) take_received "
     "close_force",
     "closed"},
    {"connecting", "failure",
     "complete_connect(connection_reset) fail_operations(connection_reset) take_received "
     "close_force",
     "closed"},
    {"connecting", "close",
     "abort_operations complete_connect(operation_aborted) accept_close close_flush", "closed"},
    {"connecting", "close_sends",
     "abort_operations complete_connect(operation_aborted) accept_close", "closing"},
    {"connecting", "close_nolinger",
     "abort_operations complete_connect(operation_aborted) accept_close close_flush", "closed"},
    {"connecting", "drained", "", "connecting"},
    {"connecting", "linger_expired", "", "connecting"},
    {"connecting", "abort",
     "complete_connect(operation_aborted) fail_operations(operation_aborted) take_received "
     "close_force",
     "closed"},
    {"connecting", "timeout",
     "complete_connect(timed_out) fail_operations(timed_out) take_received close_force", "closed"},
    {"connecting", "shutdown", "", "connecting"},
    {"connecting", "ping", "send(pong,3)", "connecting"},
    {"connecting", "pong", "", "connecting"},
    {"connecting", "timer", "", "connecting"},
    {"accepting", "start_client", "", "accepting"},
    {"accepting", "start_server", "", "accepting"},
    {"accepting", "start_address", "", "accepting"},
    {"accepting", "start_borrowed", "", "accepting"},
    {"accepting", "start_client_watched", "", "accepting"},
    {"accepting", "start_server_watched", "", "accepting"},
    {"accepting", "forget_listener", "", "accepting"},
    {"accepting", "hello", "send(welcome,4369) listener_established", "open"},
    {"accepting", "welcome", "", "accepting"},
    {"accepting", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)",
     "accepting"},
    {"accepting", "goodbye_ack", "", "accepting"},
    {"accepting", "stream_end", "peer_stream_end(50)", "accepting"},
    {"accepting", "stream_ack", "peer_stream_acked(60)", "accepting"},
    {"accepting", "refused", "", "accepting"},
    {"accepting", "failure",
     "fail_operations(connection_reset) take_received close_force listener_failed", "closed"},
    {"accepting", "close", "abort_operations listener_failed accept_close close_flush", "closed"},
    {"accepting", "close_sends", "abort_operations listener_failed accept_close", "closing"},
    {"accepting", "close_nolinger", "abort_operations listener_failed accept_close close_flush",
     "closed"},
    {"accepting", "drained", "", "accepting"},
    {"accepting", "linger_expired", "", "accepting"},
    {"accepting", "abort",
     "fail_operations(operation_aborted) take_received close_force listener_failed", "closed"},
    {"accepting", "timeout", "fail_operations(timed_out) take_received close_force listener_failed",
     "closed"},
    {"accepting", "shutdown", "", "accepting"},
    {"accepting", "ping", "send(pong,3)", "accepting"},
    {"accepting", "pong", "", "accepting"},
    {"accepting", "timer", "", "accepting"},
    {"open_client", "start_client", "", "open"},
    {"open_client", "start_server", "", "open"},
    {"open_client", "start_address", "", "open"},
    {"open_client", "start_borrowed", "", "open"},
    {"open_client", "start_client_watched", "", "open"},
    {"open_client", "start_server_watched", "", "open"},
    {"open_client", "forget_listener", "", "open"},
    {"open_client", "hello", "", "open"},
    {"open_client", "welcome", "", "open"},
    {"open_client", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)", "open"},
    {"open_client", "goodbye_ack", "", "open"},
    {"open_client", "stream_end", "peer_stream_end(50)", "open"},
    {"open_client", "stream_ack", "peer_stream_acked(60)", "open"},
    {"open_client", "refused", "", "open"},
    {"open_client", "failure", "fail_operations(connection_reset) take_received close_force",
     "closed"},
    {"open_client", "close", "abort_operations accept_close send(goodbye,10) start_linger",
     "lingering"},
    {"open_client", "close_sends", "abort_operations accept_close", "closing"},
    {"open_client", "close_nolinger", "abort_operations accept_close send(goodbye,10) close_flush",
     "closed"},
    {"open_client", "drained", "", "open"},
    {"open_client", "linger_expired", "", "open"},
    {"open_client", "abort", "fail_operations(operation_aborted) take_received close_force",
     "closed"},
    {"open_client", "timeout", "fail_operations(timed_out) take_received close_force", "closed"},
    {"open_client", "shutdown", "send(stream_end,20)", "open"},
    {"open_client", "ping", "send(pong,3)", "open"},
    {"open_client", "pong", "", "open"},
    {"open_client", "timer", "", "open"},
    {"open_server", "start_client", "", "open"},
    {"open_server", "start_server", "", "open"},
    {"open_server", "start_address", "", "open"},
    {"open_server", "start_borrowed", "", "open"},
    {"open_server", "start_client_watched", "", "open"},
    {"open_server", "start_server_watched", "", "open"},
    {"open_server", "forget_listener", "", "open"},
    {"open_server", "hello", "", "open"},
    {"open_server", "welcome", "", "open"},
    {"open_server", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)", "open"},
    {"open_server", "goodbye_ack", "", "open"},
    {"open_server", "stream_end", "peer_stream_end(50)", "open"},
    {"open_server", "stream_ack", "peer_stream_acked(60)", "open"},
    {"open_server", "refused", "", "open"},
    {"open_server", "failure", "fail_operations(connection_reset) take_received close_force",
     "closed"},
    {"open_server", "close", "abort_operations accept_close send(goodbye,10) start_linger",
     "lingering"},
    {"open_server", "close_sends", "abort_operations accept_close", "closing"},
    {"open_server", "close_nolinger", "abort_operations accept_close send(goodbye,10) close_flush",
     "closed"},
    {"open_server", "drained", "", "open"},
    {"open_server", "linger_expired", "", "open"},
    {"open_server", "abort", "fail_operations(operation_aborted) take_received close_force",
     "closed"},
    {"open_server", "timeout", "fail_operations(timed_out) take_received close_force", "closed"},
    {"open_server", "shutdown", "send(stream_end,20)", "open"},
    {"open_server", "ping", "send(pong,3)", "open"},
    {"open_server", "pong", "", "open"},
    {"open_server", "timer", "", "open"},
    {"open_address", "start_client", "", "open"},
    {"open_address", "start_server", "", "open"},
    {"open_address", "start_address", "", "open"},
    {"open_address", "start_borrowed", "", "open"},
    {"open_address", "start_client_watched", "", "open"},
    {"open_address", "start_server_watched", "", "open"},
    {"open_address", "forget_listener", "", "open"},
    {"open_address", "hello", "", "open"},
    {"open_address", "welcome", "", "open"},
    {"open_address", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)", "open"},
    {"open_address", "goodbye_ack", "", "open"},
    {"open_address", "stream_end", "peer_stream_end(50)", "open"},
    {"open_address", "stream_ack", "peer_stream_acked(60)", "open"},
    {"open_address", "refused", "", "open"},
    {"open_address", "failure", "fail_operations(connection_reset) take_received close_force",
     "closed"},
    {"open_address", "close", "abort_operations accept_close close_flush", "closed"},
    {"open_address", "close_sends", "abort_operations accept_close", "closing"},
    {"open_address", "close_nolinger", "abort_operations accept_close close_flush", "closed"},
    {"open_address", "drained", "", "open"},
    {"open_address", "linger_expired", "", "open"},
    {"open_address", "abort", "fail_operations(operation_aborted) take_received close_force",
     "closed"},
    {"open_address", "timeout", "fail_operations(timed_out) take_received close_force", "closed"},
    {"open_address", "shutdown", "", "open"},
    {"open_address", "ping", "send(pong,3)", "open"},
    {"open_address", "pong", "", "open"},
    {"open_address", "timer", "", "open"},
    {"open_borrowed", "start_client", "", "open"},
    {"open_borrowed", "start_server", "", "open"},
    {"open_borrowed", "start_address", "", "open"},
    {"open_borrowed", "start_borrowed", "", "open"},
    {"open_borrowed", "start_client_watched", "", "open"},
    {"open_borrowed", "start_server_watched", "", "open"},
    {"open_borrowed", "forget_listener", "", "open"},
    {"open_borrowed", "hello", "", "open"},
    {"open_borrowed", "welcome", "", "open"},
    {"open_borrowed", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)", "open"},
    {"open_borrowed", "goodbye_ack", "", "open"},
    {"open_borrowed", "stream_end", "peer_stream_end(50)", "open"},
    {"open_borrowed", "stream_ack", "peer_stream_acked(60)", "open"},
    {"open_borrowed", "refused", "", "open"},
    {"open_borrowed", "failure", "fail_operations(connection_reset) take_received release",
     "closed"},
    {"open_borrowed", "close", "abort_operations accept_close release complete_close()", "closed"},
    {"open_borrowed", "close_sends", "abort_operations accept_close", "closing"},
    {"open_borrowed", "close_nolinger", "abort_operations accept_close release complete_close()",
     "closed"},
    {"open_borrowed", "drained", "", "open"},
    {"open_borrowed", "linger_expired", "", "open"},
    {"open_borrowed", "abort", "fail_operations(operation_aborted) take_received release",
     "closed"},
    {"open_borrowed", "timeout", "fail_operations(timed_out) take_received release", "closed"},
    {"open_borrowed", "shutdown", "", "open"},
    {"open_borrowed", "ping", "send(pong,3)", "open"},
    {"open_borrowed", "pong", "", "open"},
    {"open_borrowed", "timer", "", "open"},
    {"peer_gone", "start_client", "", "open"},
    {"peer_gone", "start_server", "", "open"},
    {"peer_gone", "start_address", "", "open"},
    {"peer_gone", "start_borrowed", "", "open"},
    {"peer_gone", "start_client_watched", "", "open"},
    {"peer_gone", "start_server_watched", "", "open"},
    {"peer_gone", "forget_listener", "", "open"},
    {"peer_gone", "hello", "", "open"},
    {"peer_gone", "welcome", "", "open"},
    {"peer_gone", "goodbye", "", "open"},
    {"peer_gone", "goodbye_ack", "", "open"},
    {"peer_gone", "stream_end", "", "open"},
    {"peer_gone", "stream_ack", "peer_stream_acked(60)", "open"},
    {"peer_gone", "refused", "", "open"},
    {"peer_gone", "failure", "fail_operations(eof) take_received close_force", "closed"},
    {"peer_gone", "close", "abort_operations accept_close send(goodbye,10) close_flush", "closed"},
    {"peer_gone", "close_sends", "abort_operations accept_close", "closing"},
    {"peer_gone", "close_nolinger", "abort_operations accept_close send(goodbye,10) close_flush",
     "closed"},
    {"peer_gone", "drained", "", "open"},
    {"peer_gone", "linger_expired", "", "open"},
    {"peer_gone", "abort", "fail_operations(operation_aborted) take_received close_force",
     "closed"},
    {"peer_gone", "timeout", "fail_operations(eof) take_received close_force", "closed"},
    {"peer_gone", "shutdown", "", "open"},
    {"peer_gone", "ping", "send(pong,3)", "open"},
    {"peer_gone", "pong", "", "open"},
    {"peer_gone", "timer", "", "open"},
    {"closing", "start_client", "", "closing"},
    {"closing", "start_server", "", "closing"},
    {"closing", "start_address", "", "closing"},
    {"closing", "start_borrowed", "", "closing"},
    {"closing", "start_client_watched", "", "closing"},
    {"closing", "start_server_watched", "", "closing"},
    {"closing", "forget_listener", "", "closing"},
    {"closing", "hello", "", "closing"},
    {"closing", "welcome", "", "closing"},
    {"closing", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) "
     "fail_operations(bad_descriptor)",
     "closing"},
    {"closing", "goodbye_ack", "", "closing"},
    {"closing", "stream_end", "peer_stream_end(50)", "closing"},
    {"closing", "stream_ack", "peer_stream_acked(60)", "closing"},
    {"closing", "refused", "", "closing"},
    {"closing", "failure",
     "complete_close() fail_operations(bad_descriptor) take_received close_force", "closed"},
    {"closing", "close", "reject_close(already_started)", "closing"},
    {"closing", "close_sends", "reject_close(already_started)", "closing"},
    {"closing", "close_nolinger", "reject_close(already_started)", "closing"},
    {"closing", "drained", "send(goodbye,5) start_linger", "lingering"},
    {"closing", "linger_expired", "", "closing"},
    {"closing", "abort",
     "complete_close(operation_aborted) fail_operations(operation_aborted) take_received "
     "close_force",
     "closed"},
    {"closing", "timeout",
     "complete_close() fail_operations(bad_descriptor) take_received close_force", "closed"},
    {"closing", "shutdown", "", "closing"},
    {"closing", "ping", "send(pong,3)", "closing"},
    {"closing", "pong", "", "closing"},
    {"closing", "timer", "", "closing"},
    {"closing_borrowed", "start_client", "", "closing"},
    {"closing_borrowed", "start_server", "", "closing"},
    {"closing_borrowed", "start_address", "", "closing"},
    {"closing_borrowed", "start_borrowed", "", "closing"},
    {"closing_borrowed", "start_client_watched", "", "closing"},
    {"closing_borrowed", "start_server_watched", "", "closing"},
    {"closing_borrowed", "forget_listener", "", "closing"},
    {"closing_borrowed", "hello", "", "closing"},
    {"closing_borrowed", "welcome", "", "closing"},
    {"closing_borrowed", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) "
     "fail_operations(bad_descriptor)",
     "closing"},
    {"closing_borrowed", "goodbye_ack", "", "closing"},
    {"closing_borrowed", "stream_end", "peer_stream_end(50)", "closing"},
    {"closing_borrowed", "stream_ack", "peer_stream_acked(60)", "closing"},
    {"closing_borrowed", "refused", "", "closing"},
    {"closing_borrowed", "failure",
     "complete_close() fail_operations(bad_descriptor) take_received release", "closed"},
    {"closing_borrowed", "close", "reject_close(already_started)", "closing"},
    {"closing_borrowed", "close_sends", "reject_close(already_started)", "closing"},
    {"closing_borrowed", "close_nolinger", "reject_close(already_started)", "closing"},
    {"closing_borrowed", "drained", "release complete_close()", "closed"},
    {"closing_borrowed", "linger_expired", "", "closing"},
    {"closing_borrowed", "abort",
     "complete_close(operation_aborted) fail_operations(operation_aborted) take_received release",
     "closed"},
    {"closing_borrowed", "timeout",
     "complete_close() fail_operations(bad_descriptor) take_received release", "closed"},
    {"closing_borrowed", "shutdown", "", "closing"},
    {"closing_borrowed", "ping", "send(pong,3)", "closing"},
    {"closing_borrowed", "pong", "", "closing"},
    {"closing_borrowed", "timer", "", "closing"},
    {"lingering", "start_client", "", "lingering"},
    {"lingering", "start_server", "", "lingering"},
    {"lingering", "start_address", "", "lingering"},
    {"lingering", "start_borrowed", "", "lingering"},
    {"lingering", "start_client_watched", "", "lingering"},
    {"lingering", "start_server_watched", "", "lingering"},
    {"lingering", "forget_listener", "", "lingering"},
    {"lingering", "hello", "", "lingering"},
    {"lingering", "welcome", "", "lingering"},
    {"lingering", "goodbye",
     "peer_stream_end(100,goodbye) take_received send(goodbye_ack,0) "
     "fail_operations(bad_descriptor)",
     "lingering"},
    {"lingering", "goodbye_ack", "cancel_linger close_flush", "closed"},
    {"lingering", "stream_end", "peer_stream_end(50)", "lingering"},
    {"lingering", "stream_ack", "peer_stream_acked(60)", "lingering"},
    {"lingering", "refused", "", "lingering"},
    {"lingering", "failure",
     "cancel_linger complete_close() fail_operations(bad_descriptor) take_received close_force",
     "closed"},
    {"lingering", "close", "reject_close(already_started)", "lingering"},
    {"lingering", "close_sends", "reject_close(already_started)", "lingering"},
    {"lingering", "close_nolinger", "reject_close(already_started)", "lingering"},
    {"lingering", "drained", "", "lingering"},
    {"lingering", "linger_expired",
     "complete_close(peer_unresponsive) fail_operations(peer_unresponsive) take_received "
     "close_force",
     "closed"},
    {"lingering", "abort",
     "cancel_linger complete_close(operation_aborted) fail_operations(operation_aborted) "
     "take_received close_force",
     "closed"},
    {"lingering", "timeout",
     "cancel_linger complete_close() fail_operations(bad_descriptor) take_received close_force",
     "closed"},
    {"lingering", "shutdown", "", "lingering"},
    {"lingering", "ping", "send(pong,3)", "lingering"},
    {"lingering", "pong", "", "lingering"},
    {"lingering", "timer", "", "lingering"},
    {"closed", "start_client", "", "closed"},
    {"closed", "start_server", "", "closed"},
    {"closed", "start_address", "", "closed"},
    {"closed", "start_borrowed", "", "closed"},
    {"closed", "start_client_watched", "", "closed"},
    {"closed", "start_server_watched", "", "closed"},
    {"closed", "forget_listener", "", "closed"},
    {"closed", "hello", "", "closed"},
    {"closed", "welcome", "", "closed"},
    {"closed", "goodbye", "", "closed"},
    {"closed", "goodbye_ack", "", "closed"},
    {"closed", "stream_end", "", "closed"},
    {"closed", "stream_ack", "", "closed"},
    {"closed", "refused", "", "closed"},
    {"closed", "failure", "", "closed"},
    {"closed", "close", "reject_close(bad_descriptor)", "closed"},
    {"closed", "close_sends", "reject_close(bad_descriptor)", "closed"},
    {"closed", "close_nolinger", "reject_close(bad_descriptor)", "closed"},
    {"closed", "drained", "", "closed"},
    {"closed", "linger_expired", "", "closed"},
    {"closed", "abort", "", "closed"},
    {"closed", "timeout", "", "closed"},
    {"closed", "shutdown", "", "closed"},
    {"closed", "ping", "", "closed"},
    {"closed", "pong", "", "closed"},
    {"closed", "timer", "", "closed"},
};

TEST(ConnectionFsm, EveryInputInEveryState) {
    std::vector<ucx::test::fsm_input<connection_fsm>> texts;
    for (const input& in : inputs())
        texts.push_back({in.name, [run = in.run](connection_fsm& f) { return str(run(f)); }});
    ucx::test::check_transitions(
        setups(), texts, transitions, [] { return connection_fsm(); },
        [](const connection_fsm& f) { return std::string(state_name(f.state())); });
}

// ---------------------------------------------------------------- scenarios

TEST(ConnectionFsm, ClientHandshakeRecordsPeerTagAndOpens) {
    connection_fsm f;
    EXPECT_FALSE(f.is_open());
    EXPECT_EQ(str(f.start(client())), "send(hello,4369)");
    EXPECT_TRUE(f.connect_pending());
    EXPECT_FALSE(f.is_open());
    EXPECT_TRUE(f.has_handshake());
    EXPECT_EQ(str(f.on_control(msg(control_type::welcome, 0xabc))), "complete_connect()");
    EXPECT_EQ(f.peer_tag(), 0xabcu);
    EXPECT_EQ(f.local_tag(), local_tag);
    EXPECT_TRUE(f.is_open());
    EXPECT_FALSE(f.connect_pending());
    // A second welcome changes nothing.
    EXPECT_TRUE(f.on_control(msg(control_type::welcome, 0xdef)).empty());
    EXPECT_EQ(f.peer_tag(), 0xabcu);
}

TEST(ConnectionFsm, ServerHandshakeTellsTheListenerOnce) {
    connection_fsm f;
    EXPECT_TRUE(f.start(server()).empty());
    EXPECT_TRUE(f.listener_pending());
    EXPECT_EQ(str(f.on_control(msg(control_type::hello, 5))),
              "send(welcome,4369) listener_established");
    EXPECT_EQ(f.peer_tag(), 5u);
    EXPECT_FALSE(f.listener_pending());
    EXPECT_TRUE(f.is_open());
    // A duplicate hello (a repeated one reaches a known endpoint) is ignored.
    EXPECT_TRUE(f.on_control(msg(control_type::hello, 6)).empty());
    EXPECT_EQ(f.peer_tag(), 5u);
}

TEST(ConnectionFsm, ServerWithoutListenerAndForgottenListener) {
    connection_fsm f;
    f.start({connection_role::server, true, false, local_tag});
    EXPECT_TRUE(f.by_address());
    EXPECT_EQ(str(f.on_control(msg(control_type::hello, 5))), "send(welcome,4369)");

    connection_fsm g;
    g.start(server());
    g.forget_listener();
    EXPECT_EQ(str(g.on_failure(ae::connection_reset)),
              "fail_operations(connection_reset) take_received close_force");
}

TEST(ConnectionFsm, WelcomeToServerAndHelloToClientAreIgnored) {
    connection_fsm s;
    s.start(server());
    EXPECT_TRUE(s.on_control(msg(control_type::welcome, 1)).empty());
    EXPECT_FALSE(s.established());
    connection_fsm c;
    c.start(client());
    EXPECT_TRUE(c.on_control(msg(control_type::hello, 1)).empty());
    EXPECT_FALSE(c.established());
    EXPECT_TRUE(c.connect_pending());
}

TEST(ConnectionFsm, WelcomeAfterACloseBeforeItStillSaysGoodbye) {
    connection_fsm f;
    f.start(client());
    EXPECT_EQ(str(f.close_graceful(true, 3, true)),
              "abort_operations complete_connect(operation_aborted) accept_close");
    EXPECT_TRUE(f.on_control(msg(control_type::welcome, 9)).empty());
    EXPECT_TRUE(f.established());
    EXPECT_EQ(str(f.sends_drained(true)), "send(goodbye,3) start_linger");
    EXPECT_EQ(str(f.on_control(msg(control_type::goodbye_ack, 0))), "cancel_linger close_flush");
    EXPECT_EQ(f.state(), connection_state::closed);
}

TEST(ConnectionFsm, GracefulCloseWaitsForSendsThenGoodbyeThenAck) {
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 1));
    EXPECT_EQ(str(f.close_graceful(true, 77, true)), "abort_operations accept_close");
    EXPECT_EQ(f.error(), ae::bad_descriptor);
    EXPECT_FALSE(f.is_open());
    EXPECT_TRUE(f.close_pending());
    EXPECT_EQ(str(f.sends_drained(true)), "send(goodbye,77) start_linger");
    // Sends cannot drain twice, and the stream is shut with the endpoint.
    EXPECT_TRUE(f.sends_drained(true).empty());
    EXPECT_TRUE(f.shutdown_stream(1).empty());
    EXPECT_EQ(str(f.on_control(msg(control_type::goodbye_ack, 0))), "cancel_linger close_flush");
    EXPECT_FALSE(f.close_pending());
    // The ack and the timer race: whichever is second does nothing.
    EXPECT_TRUE(f.linger_expired().empty());
    EXPECT_TRUE(f.on_control(msg(control_type::goodbye_ack, 0)).empty());
}

TEST(ConnectionFsm, NoLingerAfterThePeersGoodbye) {
    connection_fsm f;
    f.start(server());
    f.on_control(msg(control_type::hello, 1));
    EXPECT_EQ(str(f.on_control(msg(control_type::goodbye, 12))),
              "peer_stream_end(12,goodbye) take_received send(goodbye_ack,0) fail_operations(eof)");
    EXPECT_EQ(f.error(), ae::eof);
    EXPECT_TRUE(f.peer_said_goodbye());
    EXPECT_EQ(f.peer_stream_end(), std::optional<std::uint64_t>(12));
    EXPECT_EQ(str(f.close_graceful(false, 4, true)),
              "abort_operations accept_close send(goodbye,4) close_flush");
}

TEST(ConnectionFsm, StreamEndIsKeptUntilAGoodbyeReplacesIt) {
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 1));
    EXPECT_FALSE(f.peer_stream_end());
    EXPECT_EQ(str(f.on_control(msg(control_type::stream_end, 10))), "peer_stream_end(10)");
    EXPECT_EQ(f.peer_stream_end(), std::optional<std::uint64_t>(10));
    EXPECT_FALSE(f.peer_said_goodbye());
    // The half close leaves the endpoint usable.
    EXPECT_TRUE(f.is_open());
    f.on_control(msg(control_type::goodbye, 15));
    EXPECT_EQ(f.peer_stream_end(), std::optional<std::uint64_t>(15));
    EXPECT_TRUE(f.on_control(msg(control_type::stream_end, 20)).empty());
    EXPECT_EQ(f.peer_stream_end(), std::optional<std::uint64_t>(15));
}

TEST(ConnectionFsm, FailureAfterLocalCloseKeepsTheFirstReason) {
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 1));
    f.close_graceful(true, 0, true);
    // The peer vanished during the graceful close: the close is done, not failed.
    EXPECT_EQ(str(f.on_failure(ae::connection_reset)),
              "complete_close() fail_operations(bad_descriptor) take_received close_force");
    EXPECT_EQ(f.error(), ae::bad_descriptor);
}

TEST(ConnectionFsm, LocalForceCloseReportsBadDescriptorLater) {
    connection_fsm f;
    f.start({connection_role::address});
    EXPECT_TRUE(f.is_open());
    f.force_close(ae::operation_aborted);
    EXPECT_EQ(f.error(), ae::bad_descriptor);
    EXPECT_FALSE(f.has_endpoint());
    EXPECT_EQ(str(f.close_graceful(false, 0, true)), "reject_close(bad_descriptor)");
}

TEST(ConnectionFsm, ForceCloseWithAReasonKeepsIt) {
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 1));
    f.force_close(ae::timed_out);
    EXPECT_EQ(f.error(), ae::timed_out);
    // The peer's endpoint is gone: closing again has nothing to do.
    EXPECT_EQ(str(f.close_graceful(false, 0, true)), "reject_close()");
}

// ---------------------------------------------------------------- liveness

TEST(ConnectionFsm, ClientHandshakeDeadline) {
    connection_fsm f;
    EXPECT_EQ(str(f.start(watched(client()))), "send(hello,4369) arm(1000)");
    // No welcome before the deadline: the connect fails, the endpoint closes.
    EXPECT_EQ(str(f.timer_expired()),
              "complete_connect(handshake_timeout) "
              "fail_operations(handshake_timeout) take_received close_force");
    EXPECT_EQ(f.state(), connection_state::closed);
    EXPECT_EQ(f.error(), ucx::error::handshake_timeout);
    // A welcome that comes too late changes nothing.
    EXPECT_TRUE(f.on_control(msg(control_type::welcome, 7)).empty());
    EXPECT_TRUE(f.timer_expired().empty());
}

TEST(ConnectionFsm, ServerHandshakeDeadlineNeverReachesTheListener) {
    connection_fsm f;
    EXPECT_EQ(str(f.start(watched(server()))), "arm(1000)");
    EXPECT_EQ(str(f.timer_expired()),
              "fail_operations(handshake_timeout) take_received close_force listener_failed");
    EXPECT_FALSE(f.listener_pending());
    EXPECT_TRUE(f.on_control(msg(control_type::hello, 5)).empty());
}

TEST(ConnectionFsm, HandshakeDoneInTimeStartsTheHeartbeat) {
    connection_fsm c;
    c.start(watched(client()));
    EXPECT_EQ(str(c.on_control(msg(control_type::welcome, 7))), "arm(250) complete_connect()");
    connection_fsm s;
    s.start(watched(server()));
    EXPECT_EQ(str(s.on_control(msg(control_type::hello, 7))),
              "send(welcome,4369) arm(250) listener_established");
}

TEST(ConnectionFsm, WithoutHeartbeatTheHandshakeTimerIsCancelled) {
    auto p = client();
    p.handshake_timeout_ms = 1000;
    connection_fsm f;
    EXPECT_EQ(str(f.start(p)), "send(hello,4369) arm(1000)");
    EXPECT_EQ(str(f.on_control(msg(control_type::welcome, 7))), "cancel_timer complete_connect()");
    // A stale expiry does nothing.
    EXPECT_TRUE(f.timer_expired().empty());
    EXPECT_TRUE(f.is_open());
}

TEST(ConnectionFsm, SilentPeerIsPingedThenUnresponsive) {
    connection_fsm f;
    f.start(watched(client()));
    f.on_control(msg(control_type::welcome, 7));
    // Each silent tick pings, with the count of silent ticks so far; the
    // eighth fails the endpoint.
    for (unsigned i = 1; i < connection_fsm::silent_ticks_limit; ++i)
        EXPECT_EQ(str(f.timer_expired()), "send(ping," + std::to_string(i) + ") arm(250)");
    EXPECT_EQ(f.silent_ticks(), 7u);
    EXPECT_TRUE(f.is_open());
    EXPECT_EQ(str(f.timer_expired()),
              "fail_operations(peer_unresponsive) take_received close_force");
    EXPECT_EQ(f.state(), connection_state::closed);
    EXPECT_EQ(f.error(), ucx::error::peer_unresponsive);
    EXPECT_TRUE(f.timer_expired().empty());
}

TEST(ConnectionFsm, AnyWordFromThePeerResetsTheSilence) {
    connection_fsm f;
    f.start(watched(server()));
    f.on_control(msg(control_type::hello, 7));
    EXPECT_EQ(str(f.timer_expired()), "send(ping,1) arm(250)");
    EXPECT_EQ(str(f.timer_expired()), "send(ping,2) arm(250)");
    EXPECT_TRUE(f.on_control(msg(control_type::pong, 2)).empty());
    EXPECT_EQ(str(f.timer_expired()), "arm(250)"); // heard: no ping
    EXPECT_EQ(f.silent_ticks(), 0u);
    EXPECT_EQ(str(f.timer_expired()), "send(ping,1) arm(250)");
    // The peer's own ping, or stream traffic, counts too.
    EXPECT_EQ(str(f.on_control(msg(control_type::ping, 1))), "send(pong,1)");
    EXPECT_EQ(str(f.timer_expired()), "arm(250)");
    EXPECT_EQ(str(f.on_control(msg(control_type::stream_ack, 9))), "peer_stream_acked(9)");
    EXPECT_EQ(str(f.timer_expired()), "arm(250)");
    EXPECT_TRUE(f.is_open());
}

TEST(ConnectionFsm, APeerThatAnswersIsNeverUnresponsive) {
    connection_fsm f;
    f.start(watched(client()));
    f.on_control(msg(control_type::welcome, 7));
    for (int i = 0; i < 1000; ++i) {
        const auto as = f.timer_expired();
        for (const auto& a : as)
            if (a.type == connection_action_type::send_control && a.message == control_type::ping)
                f.on_control(msg(control_type::pong, a.value));
    }
    EXPECT_TRUE(f.is_open());
    EXPECT_LE(f.silent_ticks(), 1u);
}

TEST(ConnectionFsm, ThePeersGoodbyeStopsTheWatch) {
    connection_fsm f;
    f.start(watched(client()));
    f.on_control(msg(control_type::welcome, 7));
    f.on_control(msg(control_type::goodbye, 0));
    EXPECT_TRUE(f.timer_expired().empty());
    EXPECT_EQ(f.error(), ae::eof);
}

TEST(ConnectionFsm, AClosesWaitForSendsIsWatched) {
    connection_fsm f;
    f.start(watched(client()));
    f.on_control(msg(control_type::welcome, 7));
    // Sends in flight: the close waits for them while the peer answers.
    EXPECT_EQ(str(f.close_graceful(true, 5, true)), "abort_operations accept_close");
    EXPECT_EQ(str(f.timer_expired()), "send(ping,1) arm(250)");
    f.on_control(msg(control_type::pong, 1));
    EXPECT_EQ(str(f.timer_expired()), "arm(250)");
    // A peer that stopped answering fails the close.
    for (unsigned i = 1; i < connection_fsm::silent_ticks_limit; ++i)
        EXPECT_EQ(str(f.timer_expired()), "send(ping," + std::to_string(i) + ") arm(250)");
    EXPECT_EQ(str(f.timer_expired()),
              "complete_close(peer_unresponsive) "
              "fail_operations(peer_unresponsive) take_received close_force");
    EXPECT_EQ(f.state(), connection_state::closed);
    EXPECT_FALSE(f.close_pending());
}

TEST(ConnectionFsm, TheGoodbyeStopsTheWatchAndTheLingerBoundsTheClose) {
    connection_fsm f;
    f.start(watched(client()));
    f.on_control(msg(control_type::welcome, 7));
    EXPECT_EQ(str(f.close_graceful(true, 5, true)), "abort_operations accept_close");
    EXPECT_EQ(str(f.sends_drained(true)), "send(goodbye,5) cancel_timer start_linger");
    EXPECT_TRUE(f.timer_expired().empty());
    EXPECT_EQ(str(f.linger_expired()),
              "complete_close(peer_unresponsive) "
              "fail_operations(peer_unresponsive) take_received close_force");
    EXPECT_EQ(f.state(), connection_state::closed);
}

TEST(ConnectionFsm, AnAcknowledgedGoodbyeCancelsTheLinger) {
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 7));
    EXPECT_EQ(str(f.close_graceful(false, 5, true)),
              "abort_operations accept_close send(goodbye,5) start_linger");
    EXPECT_EQ(str(f.on_control(msg(control_type::goodbye_ack, 0))), "cancel_linger close_flush");
    EXPECT_TRUE(f.linger_expired().empty());
}

TEST(ConnectionFsm, StartsOnlyOnce) {
    connection_fsm f;
    f.start(client());
    EXPECT_TRUE(f.start(server()).empty());
    EXPECT_EQ(f.role(), connection_role::client);
    connection_fsm g;
    g.force_close(ae::operation_aborted);
    EXPECT_TRUE(g.start(client()).empty());
    EXPECT_EQ(g.state(), connection_state::closed);
}

TEST(ConnectionFsm, ActionListsNeverOverflow) {
    // The longest lists: a failure while lingering with everything pending.
    connection_fsm f;
    f.start(client());
    f.on_control(msg(control_type::welcome, 1));
    f.close_graceful(false, 0, true);
    EXPECT_LE(f.on_failure(ae::connection_reset).size(), connection_actions::capacity - 1);
}

// ---------------------------------------------------------------- properties

// Follows the operations the actions complete, and checks every action is
// legal where it happens.
struct tracker {
    bool connect_pending = false;
    bool listener_pending = false;
    int close_ops = 0; // kept close operations not completed yet
    bool endpoint = false;
    bool closed = false;
    int connects_completed = 0;
    int listener_told = 0;
    std::string failure;

    void fail(const std::string& what) {
        if (failure.empty())
            failure = what;
    }

    void started(const connection_fsm::start_params& p, const connection_actions&) {
        endpoint = true;
        connect_pending = p.role == connection_role::client;
        listener_pending = p.listener && p.role == connection_role::server;
    }

    // `new_close`: the input handed a new close operation.
    void apply(const connection_actions& as, bool new_close) {
        using T = connection_action_type;
        bool new_close_answered = false;
        if (closed && !as.empty() &&
            !(as.size() == 1 && as[0].type == T::reject_close && new_close))
            fail("actions after closed: " + str(as));
        for (const auto& a : as) {
            switch (a.type) {
            case T::send_control:
            case T::take_received:
                if (!endpoint)
                    fail("uses a closed endpoint: " + str(a));
                break;
            case T::complete_connect:
                if (!connect_pending)
                    fail("connect completed twice");
                connect_pending = false;
                ++connects_completed;
                break;
            case T::listener_established:
            case T::listener_failed:
                if (!listener_pending)
                    fail("listener told twice");
                listener_pending = false;
                ++listener_told;
                break;
            case T::accept_close:
            case T::reject_close:
                if (!new_close || new_close_answered)
                    fail("no new close operation to answer");
                new_close_answered = true;
                if (a.type == T::accept_close)
                    ++close_ops;
                break;
            case T::complete_close:
            case T::close_flush:
                if (a.type == T::complete_close || close_ops > 0) {
                    if (close_ops != 1)
                        fail("close completed without one pending");
                    close_ops = 0;
                }
                [[fallthrough]];
            case T::close_force:
            case T::release:
                if (a.type != T::complete_close) {
                    if (!endpoint)
                        fail("endpoint closed twice");
                    endpoint = false;
                }
                break;
            default:
                break;
            }
        }
        if (new_close && !new_close_answered)
            fail("a close operation left unanswered");
    }
};

TEST(ConnectionFsm, RandomInputsKeepEveryOperationCompletedOnce) {
    const auto is = inputs();
    for (unsigned seed = 1; seed <= 2000; ++seed) {
        std::mt19937 rng(seed);
        connection_fsm f;
        tracker t;
        const connection_fsm::start_params starts[] = {
            client(),
            server(),
            {connection_role::address},
            {connection_role::borrowed},
            {connection_role::server, true, false, local_tag}};
        const auto p = starts[rng() % 5];
        auto first = f.start(p);
        t.started(p, first);
        t.apply(first, false);
        for (int step = 0; step < 40 && t.failure.empty(); ++step) {
            const auto& in = is[rng() % is.size()];
            const std::string name = in.name;
            if (name.rfind("start", 0) == 0)
                continue; // a second start is ignored (checked in the table)
            const bool new_close = name.rfind("close", 0) == 0;
            t.apply(in.run(f), new_close);
            if (name == "forget_listener")
                t.listener_pending = false; // the listener went away: nothing to tell it
            // The machine's view matches what its actions did.
            if (f.connect_pending() != t.connect_pending ||
                f.listener_pending() != t.listener_pending ||
                f.close_pending() != (t.close_ops > 0) || f.has_endpoint() != t.endpoint)
                t.fail(std::string("state out of step after ") + in.name);
            if (f.state() == connection_state::closed)
                t.closed = true;
        }
        // Ending it completes whatever is left, exactly once.
        t.apply(f.force_close(ae::operation_aborted), false);
        EXPECT_EQ(f.state(), connection_state::closed);
        EXPECT_FALSE(t.connect_pending) << "seed " << seed;
        EXPECT_FALSE(t.listener_pending) << "seed " << seed;
        EXPECT_EQ(t.close_ops, 0) << "seed " << seed;
        EXPECT_FALSE(t.endpoint) << "seed " << seed;
        EXPECT_LE(t.connects_completed, 1);
        EXPECT_LE(t.listener_told, 1);
        ASSERT_TRUE(t.failure.empty()) << "seed " << seed << ": " << t.failure;
    }
}

TEST(ConnectionFsm, FailureCompletesEveryPendingOperationOnce) {
    // In every state: a failure leaves nothing pending, and nothing happens after.
    for (const auto& s : setups()) {
        connection_fsm f;
        s.run(f);
        const bool had_endpoint = f.has_endpoint();
        const bool connect = f.connect_pending();
        const bool close = f.close_pending();
        const bool listener = f.listener_pending();
        const auto as = f.on_failure(ae::connection_reset);
        const std::string got = str(as);
        EXPECT_EQ(got.find("complete_connect") != std::string::npos, connect) << s.name;
        EXPECT_EQ(got.find("complete_close") != std::string::npos, close) << s.name;
        EXPECT_EQ(got.find("listener_failed") != std::string::npos, listener) << s.name;
        EXPECT_FALSE(f.connect_pending() || f.close_pending() || f.listener_pending()) << s.name;
        if (had_endpoint) {
            EXPECT_EQ(f.state(), connection_state::closed) << s.name;
        }
        EXPECT_TRUE(f.on_failure(ae::connection_reset).empty()) << s.name;
        EXPECT_TRUE(f.on_control(msg(control_type::goodbye, 1)).empty()) << s.name;
    }
}

} // namespace

// ---------------------------------------------------------------- plain connections

inline connection_fsm::start_params plain_client() {
    connection_fsm::start_params p{connection_role::plain_client, false, false, local_tag};
    p.handshake_timeout_ms = 1000;
    p.heartbeat_interval_ms = 250; // ignored: a plain peer answers no ping
    return p;
}

TEST(ConnectionFsm, PlainClientIsConnectedWhenTheFlushCompletes) {
    connection_fsm f;
    EXPECT_EQ(str(f.start(plain_client())), "flush_endpoint arm(1000)");
    EXPECT_TRUE(f.connect_pending());
    EXPECT_FALSE(f.is_open());
    EXPECT_FALSE(f.has_handshake());
    EXPECT_TRUE(f.is_plain());
    EXPECT_EQ(state_name(f.state()), "connecting");
    // No heartbeat: the deadline timer stops.
    EXPECT_EQ(str(f.reached()), "cancel_timer complete_connect()");
    EXPECT_TRUE(f.is_open());
    EXPECT_FALSE(f.connect_pending());
    EXPECT_TRUE(f.reached().empty());
    EXPECT_TRUE(f.timer_expired().empty());
}

TEST(ConnectionFsm, PlainClientThatUcxCannotConnectFails) {
    connection_fsm f;
    f.start(plain_client());
    EXPECT_EQ(str(f.on_failure(ae::connection_refused)),
              "cancel_timer complete_connect(connection_refused) "
              "fail_operations(connection_refused) take_received close_force");
    EXPECT_EQ(state_name(f.state()), "closed");
    EXPECT_TRUE(f.reached().empty()); // a late flush changes nothing
}

TEST(ConnectionFsm, PlainClientDeadline) {
    connection_fsm f;
    f.start(plain_client());
    EXPECT_EQ(str(f.timer_expired()),
              "complete_connect(handshake_timeout) "
              "fail_operations(handshake_timeout) take_received close_force");
    EXPECT_EQ(f.error(), ucx::error::handshake_timeout);
}

TEST(ConnectionFsm, PlainClientClosedBeforeItConnectedClosesByForce) {
    connection_fsm f;
    f.start(plain_client());
    EXPECT_EQ(str(f.close_graceful(false, 0, true)),
              "abort_operations complete_connect(operation_aborted) accept_close cancel_timer "
              "complete_close() take_received close_force");
    EXPECT_EQ(state_name(f.state()), "closed");
    EXPECT_TRUE(f.reached().empty());
}

TEST(ConnectionFsm, PlainEndpointsHaveNoControlProtocol) {
    for (const bool client : {true, false}) {
        connection_fsm f;
        if (client) {
            f.start(plain_client());
            f.reached();
        } else {
            EXPECT_TRUE(f.start({connection_role::plain_server}).empty());
        }
        EXPECT_TRUE(f.is_open());
        // Whatever comes as a control message is ignored (a plain peer sends
        // none; these could only be a confused library peer's).
        for (auto t : {control_type::hello, control_type::welcome, control_type::goodbye,
                       control_type::ping, control_type::refused, control_type::stream_end})
            EXPECT_TRUE(f.on_control(msg(t, 1)).empty()) << client;
        EXPECT_TRUE(f.shutdown_stream(10).empty());
        EXPECT_TRUE(f.is_open());
        // A graceful close flushes, without a goodbye.
        EXPECT_EQ(str(f.close_graceful(false, 10, true)),
                  "abort_operations accept_close close_flush");
        EXPECT_EQ(state_name(f.state()), "closed");
    }
}
