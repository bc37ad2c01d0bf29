// The group's connection layer (fabric_fsm), free of I/O: step by step,
// every event in every state of a peer, and several ranks driven against
// each other in memory (connections, introductions, abort notices, closes
// and timers delivered in random orders). No UCX.
#include "group/fabric_fsm.hpp"
#include "transition_table.hpp"

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>

using boost::system::error_code;
using ucx::detail::fabric_action;
using ucx::detail::fabric_action_type;
using ucx::detail::fabric_actions;
using ucx::detail::fabric_fsm;
using ucx::detail::fabric_peer_state;
using ucx::detail::fabric_report;
namespace aerr = boost::asio::error;

namespace {

/// What the fabric fails with for its own causes, in these tests.
const error_code failure = aerr::connection_aborted;

fabric_fsm::params params(int rank, int size, bool lazy = false, std::uint64_t timeout_ms = 0) {
    return {.rank = rank,
            .size = size,
            .lazy = lazy,
            .handshake_timeout_ms = timeout_ms,
            .failure = failure};
}

const char* name(fabric_action_type t) {
    using t_ = fabric_action_type;
    switch (t) {
    case t_::accept:
        return "accept";
    case t_::connect:
        return "connect";
    case t_::identify:
        return "identify";
    case t_::adopt:
        return "adopt";
    case t_::introduce:
        return "introduce";
    case t_::answer:
        return "answer";
    case t_::watch:
        return "watch";
    case t_::arm_timer:
        return "arm_timer";
    case t_::cancel_timer:
        return "cancel_timer";
    case t_::run_waiting:
        return "run_waiting";
    case t_::introduce_and_abort:
        return "introduce_and_abort";
    case t_::close_new:
        return "close_new";
    case t_::send_abort:
        return "send_abort";
    case t_::close_force:
        return "close_force";
    case t_::close_graceful:
        return "close_graceful";
    case t_::close_acceptor:
        return "close_acceptor";
    case t_::fail_groups:
        return "fail_groups";
    case t_::inboxes_changed:
        return "inboxes_changed";
    case t_::peer_left:
        return "peer_left";
    case t_::report:
        return "report";
    }
    return "?";
}

const char* name(fabric_report r) {
    switch (r) {
    case fabric_report::did_not_connect:
        return "did_not_connect";
    case fabric_report::connect_failed:
        return "connect_failed";
    case fabric_report::accept_failed:
        return "accept_failed";
    case fabric_report::stranger:
        return "stranger";
    case fabric_report::peer_left:
        return "peer_left";
    case fabric_report::peer_failed:
        return "peer_failed";
    case fabric_report::peer_aborted:
        return "peer_aborted";
    case fabric_report::failed:
        return "failed";
    }
    return "?";
}

std::string ec_name(const error_code& ec) {
    if (!ec)
        return "ok";
    if (ec == failure)
        return "failure";
    if (ec == aerr::eof)
        return "eof";
    if (ec == aerr::operation_aborted)
        return "aborted";
    if (ec == aerr::connection_refused)
        return "refused";
    if (ec == aerr::connection_reset)
        return "reset";
    if (ec == aerr::timed_out)
        return "timed_out";
    return ec.message();
}

/// "connect 2, run_waiting 2 ok, report(failed) failure, ..."
std::string str(const fabric_actions& actions) {
    std::string s;
    for (const fabric_action& a : actions) {
        if (!s.empty())
            s += ", ";
        if (a.type == fabric_action_type::report)
            s += std::string("report(") + name(a.report) + ")";
        else
            s += name(a.type);
        if (a.peer >= 0)
            s += " " + std::to_string(a.peer);
        if (a.type == fabric_action_type::arm_timer)
            s += " " + std::to_string(a.ms) + "ms";
        if (a.type == fabric_action_type::run_waiting ||
            a.type == fabric_action_type::fail_groups ||
            (a.type == fabric_action_type::report && a.ec))
            s += " " + ec_name(a.ec);
    }
    return s;
}

const char* state_name(fabric_peer_state s) {
    switch (s) {
    case fabric_peer_state::none:
        return "none";
    case fabric_peer_state::connecting:
        return "connecting";
    case fabric_peer_state::ready:
        return "ready";
    case fabric_peer_state::done:
        return "done";
    }
    return "?";
}

/// Rank 1 of 3 with peers 0 (lower: it connects here) and 2 (higher: this
/// rank connects to it).
fabric_fsm middle(bool lazy = false) {
    return fabric_fsm(params(1, 3, lazy, 1000));
}

/// Both peers of `middle()` ready, their inboxes known (0: 10, 2: 12).
void make_ready(fabric_fsm& f) {
    f.start();
    f.connected(2, {});
    f.answered(2, true, 12);
    f.accepted({});
    f.introduced({}, true, 0, 10);
}

// ---------------------------------------------------------------- step by step

TEST(FabricFsm, StartAcceptsAndConnectsToTheHigherRanks) {
    fabric_fsm f(params(1, 4));
    EXPECT_EQ(str(f.start()), "accept, connect 2, connect 3");
    EXPECT_EQ(f.state(2), fabric_peer_state::connecting);
    EXPECT_EQ(f.state(0), fabric_peer_state::none);
    EXPECT_EQ(str(f.start()), ""); // once
}

TEST(FabricFsm, LazyStartOnlyAccepts) {
    fabric_fsm f(params(1, 4, true));
    EXPECT_EQ(str(f.start()), "accept");
    EXPECT_EQ(f.state(2), fabric_peer_state::none);
    EXPECT_EQ(str(f.want(0)), ""); // a lower rank connects here
    EXPECT_EQ(str(f.want(3)), "connect 3");
    EXPECT_EQ(str(f.want(3)), "");
}

TEST(FabricFsm, AConnectionMadeIsIntroducedWatchedAndRunsItsWaiters) {
    fabric_fsm f(params(0, 2, true));
    f.start();
    auto n = f.need(1);
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::wait);
    EXPECT_EQ(str(n.actions), "connect 1");
    n = f.need(1); // connecting: waits too, no second connect
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::wait);
    EXPECT_EQ(str(n.actions), "");
    EXPECT_EQ(f.waiting(1), 2u);
    EXPECT_FALSE(f.knows_every_inbox());
    EXPECT_EQ(str(f.connected(1, {})), "adopt 1, introduce 1, watch 1, run_waiting 1 ok");
    EXPECT_TRUE(f.ready(1));
    EXPECT_EQ(f.waiting(1), 0u);
    EXPECT_EQ(f.connections(), 1);
    EXPECT_EQ(f.need(1).answer, fabric_fsm::need_answer::ready);
    // The id of this side's endpoint comes with the answer.
    EXPECT_FALSE(f.knows_every_inbox());
    EXPECT_EQ(str(f.answered(1, false, 99)), ""); // not the answer: ignored
    EXPECT_EQ(f.peer_of_inbox(99), -1);
    EXPECT_EQ(str(f.answered(1, true, 7)), "inboxes_changed 1");
    EXPECT_TRUE(f.knows_every_inbox());
    EXPECT_EQ(f.peer_of_inbox(7), 1);
}

TEST(FabricFsm, AnAcceptedConnectionIsIdentifiedAndAnswered) {
    fabric_fsm f(params(2, 3));
    EXPECT_EQ(str(f.start()), "accept");
    EXPECT_EQ(str(f.accepted({})), "identify, accept");
    EXPECT_EQ(f.identifying(), 1);
    EXPECT_FALSE(f.knows_every_inbox());
    EXPECT_EQ(str(f.introduced({}, true, 1, 5)), "adopt 1, answer 1, watch 1, inboxes_changed 1");
    EXPECT_EQ(f.identifying(), 0);
    EXPECT_TRUE(f.ready(1));
    EXPECT_EQ(f.peer_of_inbox(5), 1);
    EXPECT_TRUE(f.knows_every_inbox());
}

TEST(FabricFsm, StrangersAreClosed) {
    fabric_fsm f(params(2, 4));
    f.start();
    f.accepted({});
    // From a higher rank, from itself, from no rank, malformed: closed with
    // a warning.
    EXPECT_EQ(str(f.introduced({}, true, 3, 1)), "report(stranger), close_new");
    f.accepted({});
    EXPECT_EQ(str(f.introduced({}, true, 2, 1)), "report(stranger), close_new");
    f.accepted({});
    EXPECT_EQ(str(f.introduced({}, true, -5, 1)), "report(stranger), close_new");
    f.accepted({});
    EXPECT_EQ(str(f.introduced({}, false, 0, 1)), "report(stranger), close_new");
    // A second connection from a rank already connected.
    f.accepted({});
    f.introduced({}, true, 0, 1);
    f.accepted({});
    EXPECT_EQ(str(f.introduced({}, true, 0, 2)), "report(stranger), close_new");
    // A connection that failed before it said anything: closed quietly.
    f.accepted({});
    EXPECT_EQ(str(f.introduced(aerr::connection_reset, false, 0, 0)), "close_new");
    EXPECT_EQ(f.identifying(), 0);
    EXPECT_FALSE(f.failed());
    EXPECT_EQ(f.peer_of_inbox(1), 0);
}

TEST(FabricFsm, AcceptFailuresAreReportedAndTheAcceptorGoesOn) {
    fabric_fsm f(params(1, 2));
    f.start();
    EXPECT_EQ(str(f.accepted(aerr::no_buffer_space)),
              "report(accept_failed) " + ec_name(aerr::no_buffer_space) + ", accept");
    EXPECT_EQ(str(f.accepted(aerr::operation_aborted)), ""); // the acceptor closed
}

TEST(FabricFsm, AConnectionThatCannotBeMadeFailsTheFabric) {
    fabric_fsm f(params(0, 3));
    f.start();
    EXPECT_EQ(f.need(1).answer, fabric_fsm::need_answer::wait);
    f.connected(2, {});
    EXPECT_EQ(str(f.connected(1, aerr::connection_refused)),
              "report(connect_failed) 1 refused, run_waiting 1 refused, report(failed) failure, "
              "fail_groups failure, close_acceptor, send_abort 2");
    EXPECT_EQ(f.failed(), failure);
    EXPECT_EQ(f.state(1), fabric_peer_state::done);
    EXPECT_EQ(f.state(2), fabric_peer_state::done);
    const auto n = f.need(2);
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::gone);
    EXPECT_EQ(n.ec, failure);
}

TEST(FabricFsm, APeerThatLeavesIsNoFailure) {
    auto f = middle();
    make_ready(f);
    EXPECT_EQ(str(f.endpoint_failed(2, aerr::eof)), "report(peer_left) 2, peer_left 2");
    EXPECT_TRUE(f.has_left(2));
    EXPECT_FALSE(f.failed());
    // Its connection stays: operations on it end with its error.
    EXPECT_TRUE(f.ready(2));
}

TEST(FabricFsm, APeerThatFailsFailsTheFabricAndTheOthersAreTold) {
    auto f = middle();
    make_ready(f);
    EXPECT_EQ(str(f.endpoint_failed(0, aerr::connection_reset)),
              "report(peer_failed) 0 reset, close_force 0, report(failed) failure, "
              "fail_groups failure, close_acceptor, send_abort 2");
    // Later events of a failed fabric do nothing.
    EXPECT_EQ(str(f.endpoint_failed(2, aerr::connection_reset)), "");
    EXPECT_EQ(str(f.abort_received(2)), "");
    EXPECT_EQ(str(f.fail(aerr::timed_out)), "");
    EXPECT_EQ(f.failed(), failure);
}

TEST(FabricFsm, ClosesHereAreNoFailure) {
    auto f = middle();
    make_ready(f);
    EXPECT_EQ(str(f.endpoint_failed(0, aerr::operation_aborted)), "");
    EXPECT_EQ(str(f.endpoint_failed(0, aerr::bad_descriptor)), "");
    EXPECT_FALSE(f.failed());
}

TEST(FabricFsm, AnAbortNoticeFailsTheFabric) {
    auto f = middle();
    make_ready(f);
    EXPECT_EQ(str(f.abort_received(2)),
              "report(peer_aborted) 2, report(failed) failure, fail_groups failure, "
              "close_acceptor, send_abort 0, send_abort 2");
}

TEST(FabricFsm, AnAbortNoticeThatGivesItsCauseFailsTheFabricWithIt) {
    // (The I/O object reads the notice's word: ranks that called different
    // collectives, for one.)
    auto f = middle();
    make_ready(f);
    EXPECT_EQ(str(f.abort_received(0, aerr::connection_reset)),
              "report(peer_aborted) 0, report(failed) reset, fail_groups reset, "
              "close_acceptor, send_abort 0, send_abort 2");
    EXPECT_EQ(f.failed(), aerr::connection_reset);
}

TEST(FabricFsm, ALowerRankThatNeverConnectsFailsTheFabricAtTheHandshakeTimeout) {
    fabric_fsm f(params(2, 3, false, 1500));
    f.start();
    auto n = f.need(0);
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::wait);
    EXPECT_EQ(str(n.actions), "arm_timer 0 1500ms");
    EXPECT_EQ(str(f.need(0).actions), ""); // armed once
    EXPECT_TRUE(f.timer_armed(0));
    EXPECT_EQ(str(f.timer_expired(0)),
              "report(did_not_connect) 0, report(failed) failure, fail_groups failure, "
              "close_acceptor, run_waiting 0 failure");
    EXPECT_EQ(str(f.timer_expired(0)), "");
}

TEST(FabricFsm, ALowerRankThatConnectsInTimeCancelsTheTimer) {
    fabric_fsm f(params(2, 3, false, 1500));
    f.start();
    f.need(0);
    f.accepted({});
    EXPECT_EQ(str(f.introduced({}, true, 0, 4)),
              "adopt 0, answer 0, cancel_timer 0, watch 0, run_waiting 0 ok, inboxes_changed 0");
    // A late expiry (the cancel raced with it) does nothing.
    EXPECT_EQ(str(f.timer_expired(0)), "");
    EXPECT_FALSE(f.failed());
    // No timer is armed again for that rank.
    EXPECT_EQ(str(f.need(0).actions), "");
}

TEST(FabricFsm, WithLazyConnectionsALowerRankHasNoTimer) {
    fabric_fsm f(params(2, 3, true, 1500));
    f.start();
    const auto n = f.need(0);
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::wait);
    EXPECT_EQ(str(n.actions), "");
}

TEST(FabricFsm, AConnectionMadeAfterAFailureStillTellsThePeer) {
    fabric_fsm f(params(0, 2));
    f.start();
    f.fail(aerr::timed_out);
    EXPECT_EQ(str(f.connected(1, {})), "introduce_and_abort 1");
    EXPECT_EQ(f.state(1), fabric_peer_state::done);
    EXPECT_EQ(f.failed(), aerr::timed_out);
}

TEST(FabricFsm, AConnectionMadeAfterTheLeaveIsClosed) {
    fabric_fsm f(params(0, 3));
    f.start();
    f.leave();
    EXPECT_EQ(str(f.connected(1, {})), "close_new 1");
    EXPECT_EQ(str(f.connected(2, aerr::connection_refused)), "");
    EXPECT_FALSE(f.failed());
}

TEST(FabricFsm, TheLeaveClosesEveryConnectionGracefully) {
    auto f = middle(true);
    f.start();
    f.accepted({});
    f.introduced({}, true, 0, 10);
    f.need(2);
    EXPECT_EQ(str(f.leave()), "close_acceptor, close_graceful 0, run_waiting 2 aborted");
    EXPECT_TRUE(f.leaving());
    EXPECT_EQ(str(f.leave()), "");
    const auto n = f.need(0);
    EXPECT_EQ(n.answer, fabric_fsm::need_answer::gone);
    EXPECT_EQ(n.ec, aerr::eof);
    EXPECT_EQ(str(f.want(2)), "");
    EXPECT_EQ(str(f.accepted({})), "identify");
    EXPECT_EQ(str(f.introduced({}, true, 0, 11)), "report(stranger), close_new");
    EXPECT_EQ(str(f.endpoint_failed(0, aerr::connection_reset)), "");
}

TEST(FabricFsm, AFailureEndsEveryWaiterOnce) {
    fabric_fsm f(params(1, 4, false, 100));
    f.start();
    f.need(0);
    f.need(2);
    f.need(3);
    f.need(3);
    EXPECT_EQ(str(f.fail(aerr::timed_out)),
              "report(failed) timed_out, fail_groups timed_out, close_acceptor, run_waiting 0 "
              "timed_out, cancel_timer 0, run_waiting 2 timed_out, run_waiting 3 timed_out");
    for (int j = 0; j < 4; ++j)
        EXPECT_EQ(f.waiting(j), 0u);
}

// ------------------------------------------------ every event in every state

using setup = ucx::test::fsm_setup<fabric_fsm>;
using input = ucx::test::fsm_input<fabric_fsm>;
using ucx::test::transition;

std::vector<setup> setups() {
    return {
        {"fresh", [](fabric_fsm&) {}},
        {"started", [](fabric_fsm& f) { f.start(); }},
        {"waiting",
         [](fabric_fsm& f) {
             f.start();
             f.need(0);
             f.need(2);
         }},
        {"ready", [](fabric_fsm& f) { make_ready(f); }},
        {"left",
         [](fabric_fsm& f) {
             make_ready(f);
             f.endpoint_failed(0, aerr::eof);
             f.endpoint_failed(2, aerr::eof);
         }},
        {"failed",
         [](fabric_fsm& f) {
             f.start();
             f.need(0);
             f.fail(aerr::timed_out);
         }},
        {"leaving",
         [](fabric_fsm& f) {
             make_ready(f);
             f.leave();
         }},
    };
}

/// need's answer, then its actions.
std::string need_text(fabric_fsm& f, int who) {
    auto r = f.need(who);
    std::string s = r.answer == fabric_fsm::need_answer::ready  ? "ready"
                    : r.answer == fabric_fsm::need_answer::wait ? "wait"
                                                                : "gone " + ec_name(r.ec);
    if (!r.actions.empty())
        s += ", " + str(r.actions);
    return s;
}

std::vector<input> inputs() {
    return {
        {"need0", [](fabric_fsm& f) { return need_text(f, 0); }},
        {"need2", [](fabric_fsm& f) { return need_text(f, 2); }},
        {"want2", [](fabric_fsm& f) { return str(f.want(2)); }},
        {"connected2", [](fabric_fsm& f) { return str(f.connected(2, {})); }},
        {"connect_failed2",
         [](fabric_fsm& f) { return str(f.connected(2, aerr::connection_refused)); }},
        {"answered2", [](fabric_fsm& f) { return str(f.answered(2, true, 22)); }},
        {"accepted", [](fabric_fsm& f) { return str(f.accepted({})); }},
        {"introduced0", [](fabric_fsm& f) { return str(f.introduced({}, true, 0, 20)); }},
        {"left0", [](fabric_fsm& f) { return str(f.endpoint_failed(0, aerr::eof)); }},
        {"reset0", [](fabric_fsm& f) { return str(f.endpoint_failed(0, aerr::connection_reset)); }},
        {"abort2", [](fabric_fsm& f) { return str(f.abort_received(2)); }},
        {"timer0", [](fabric_fsm& f) { return str(f.timer_expired(0)); }},
        {"fail", [](fabric_fsm& f) { return str(f.fail(aerr::timed_out)); }},
        {"leave", [](fabric_fsm& f) { return str(f.leave()); }},
    };
}

/// The peers' states after an event: "0:<state> 2:<state>", then " failed"
/// or " leaving".
std::string states(const fabric_fsm& f) {
    std::string s = std::string("0:") + state_name(f.state(0)) + " 2:" + state_name(f.state(2));
    if (f.failed())
        s += " failed";
    else if (f.leaving())
        s += " leaving";
    return s;
}

// Rank 1 of 3, connections made at the join, a 1000 ms handshake timeout.
const transition transitions[] = {
    {"fresh", "need0", "wait, arm_timer 0 1000ms", "0:none 2:none"},
    {"fresh", "need2", "wait, connect 2", "0:none 2:connecting"},
    {"fresh", "want2", "connect 2", "0:none 2:connecting"},
    {"fresh", "connected2", "close_new 2", "0:none 2:none"},
    {"fresh", "connect_failed2", "", "0:none 2:none"},
    {"fresh", "answered2", "", "0:none 2:none"},
    {"fresh", "accepted", "identify, accept", "0:none 2:none"},
    {"fresh", "introduced0", "adopt 0, answer 0, watch 0, inboxes_changed 0", "0:ready 2:none"},
    {"fresh", "left0", "", "0:none 2:none"},
    {"fresh", "reset0", "", "0:none 2:none"},
    {"fresh", "abort2", "", "0:none 2:none"},
    {"fresh", "timer0", "", "0:none 2:none"},
    {"fresh", "fail", "report(failed) timed_out, fail_groups timed_out, close_acceptor",
     "0:done 2:done failed"},
    {"fresh", "leave", "close_acceptor", "0:done 2:done leaving"},

    {"started", "need0", "wait, arm_timer 0 1000ms", "0:none 2:connecting"},
    {"started", "need2", "wait", "0:none 2:connecting"},
    {"started", "want2", "", "0:none 2:connecting"},
    {"started", "connected2", "adopt 2, introduce 2, watch 2", "0:none 2:ready"},
    {"started", "connect_failed2",
     "report(connect_failed) 2 refused, report(failed) failure, fail_groups failure, "
     "close_acceptor",
     "0:done 2:done failed"},
    {"started", "answered2", "", "0:none 2:connecting"},
    {"started", "accepted", "identify, accept", "0:none 2:connecting"},
    {"started", "introduced0", "adopt 0, answer 0, watch 0, inboxes_changed 0",
     "0:ready 2:connecting"},
    {"started", "left0", "", "0:none 2:connecting"},
    {"started", "reset0", "", "0:none 2:connecting"},
    {"started", "abort2", "", "0:none 2:connecting"},
    {"started", "timer0", "", "0:none 2:connecting"},
    {"started", "fail", "report(failed) timed_out, fail_groups timed_out, close_acceptor",
     "0:done 2:done failed"},
    {"started", "leave", "close_acceptor", "0:done 2:done leaving"},

    {"waiting", "need0", "wait", "0:none 2:connecting"},
    {"waiting", "need2", "wait", "0:none 2:connecting"},
    {"waiting", "want2", "", "0:none 2:connecting"},
    {"waiting", "connected2", "adopt 2, introduce 2, watch 2, run_waiting 2 ok", "0:none 2:ready"},
    {"waiting", "connect_failed2",
     "report(connect_failed) 2 refused, run_waiting 2 refused, report(failed) failure, "
     "fail_groups failure, close_acceptor, run_waiting 0 failure, cancel_timer 0",
     "0:done 2:done failed"},
    {"waiting", "answered2", "", "0:none 2:connecting"},
    {"waiting", "accepted", "identify, accept", "0:none 2:connecting"},
    {"waiting", "introduced0",
     "adopt 0, answer 0, cancel_timer 0, watch 0, run_waiting 0 ok, inboxes_changed 0",
     "0:ready 2:connecting"},
    {"waiting", "left0", "", "0:none 2:connecting"},
    {"waiting", "reset0", "", "0:none 2:connecting"},
    {"waiting", "abort2", "", "0:none 2:connecting"},
    {"waiting", "timer0",
     "report(did_not_connect) 0, report(failed) failure, fail_groups failure, close_acceptor, "
     "run_waiting 0 failure, run_waiting 2 failure",
     "0:done 2:done failed"},
    {"waiting", "fail",
     "report(failed) timed_out, fail_groups timed_out, close_acceptor, run_waiting 0 timed_out, "
     "cancel_timer 0, run_waiting 2 timed_out",
     "0:done 2:done failed"},
    {"waiting", "leave",
     "close_acceptor, run_waiting 0 aborted, cancel_timer 0, run_waiting 2 aborted",
     "0:done 2:done leaving"},

    {"ready", "need0", "ready", "0:ready 2:ready"},
    {"ready", "need2", "ready", "0:ready 2:ready"},
    {"ready", "want2", "", "0:ready 2:ready"},
    {"ready", "connected2", "close_new 2", "0:ready 2:ready"},
    {"ready", "connect_failed2", "", "0:ready 2:ready"},
    {"ready", "answered2", "inboxes_changed 2", "0:ready 2:ready"},
    {"ready", "accepted", "identify, accept", "0:ready 2:ready"},
    {"ready", "introduced0", "report(stranger), close_new", "0:ready 2:ready"},
    {"ready", "left0", "report(peer_left) 0, peer_left 0", "0:ready 2:ready"},
    {"ready", "reset0",
     "report(peer_failed) 0 reset, close_force 0, report(failed) failure, fail_groups failure, "
     "close_acceptor, send_abort 2",
     "0:done 2:done failed"},
    {"ready", "abort2",
     "report(peer_aborted) 2, report(failed) failure, fail_groups failure, close_acceptor, "
     "send_abort 0, send_abort 2",
     "0:done 2:done failed"},
    {"ready", "timer0", "", "0:ready 2:ready"},
    {"ready", "fail",
     "report(failed) timed_out, fail_groups timed_out, close_acceptor, send_abort 0, "
     "send_abort 2",
     "0:done 2:done failed"},
    {"ready", "leave", "close_acceptor, close_graceful 0, close_graceful 2",
     "0:done 2:done leaving"},

    {"left", "need0", "ready", "0:ready 2:ready"},
    {"left", "need2", "ready", "0:ready 2:ready"},
    {"left", "want2", "", "0:ready 2:ready"},
    {"left", "connected2", "close_new 2", "0:ready 2:ready"},
    {"left", "connect_failed2", "", "0:ready 2:ready"},
    {"left", "answered2", "inboxes_changed 2", "0:ready 2:ready"},
    {"left", "accepted", "identify, accept", "0:ready 2:ready"},
    {"left", "introduced0", "report(stranger), close_new", "0:ready 2:ready"},
    {"left", "left0", "", "0:ready 2:ready"},
    {"left", "reset0",
     "report(peer_failed) 0 reset, close_force 0, report(failed) failure, fail_groups failure, "
     "close_acceptor, send_abort 2",
     "0:done 2:done failed"},
    {"left", "abort2",
     "report(peer_aborted) 2, report(failed) failure, fail_groups failure, close_acceptor, "
     "send_abort 0, send_abort 2",
     "0:done 2:done failed"},
    {"left", "timer0", "", "0:ready 2:ready"},
    {"left", "fail",
     "report(failed) timed_out, fail_groups timed_out, close_acceptor, send_abort 0, "
     "send_abort 2",
     "0:done 2:done failed"},
    {"left", "leave", "close_acceptor, close_graceful 0, close_graceful 2",
     "0:done 2:done leaving"},

    {"failed", "need0", "gone timed_out", "0:done 2:done failed"},
    {"failed", "need2", "gone timed_out", "0:done 2:done failed"},
    {"failed", "want2", "", "0:done 2:done failed"},
    {"failed", "connected2", "introduce_and_abort 2", "0:done 2:done failed"},
    {"failed", "connect_failed2", "", "0:done 2:done failed"},
    {"failed", "answered2", "", "0:done 2:done failed"},
    {"failed", "accepted", "identify", "0:done 2:done failed"},
    {"failed", "introduced0", "report(stranger), close_new", "0:done 2:done failed"},
    {"failed", "left0", "", "0:done 2:done failed"},
    {"failed", "reset0", "", "0:done 2:done failed"},
    {"failed", "abort2", "", "0:done 2:done failed"},
    {"failed", "timer0", "", "0:done 2:done failed"},
    {"failed", "fail", "", "0:done 2:done failed"},
    {"failed", "leave", "", "0:done 2:done failed"},

    {"leaving", "need0", "gone eof", "0:done 2:done leaving"},
    {"leaving", "need2", "gone eof", "0:done 2:done leaving"},
    {"leaving", "want2", "", "0:done 2:done leaving"},
    {"leaving", "connected2", "close_new 2", "0:done 2:done leaving"},
    {"leaving", "connect_failed2", "", "0:done 2:done leaving"},
    {"leaving", "answered2", "", "0:done 2:done leaving"},
    {"leaving", "accepted", "identify", "0:done 2:done leaving"},
    {"leaving", "introduced0", "report(stranger), close_new", "0:done 2:done leaving"},
    {"leaving", "left0", "", "0:done 2:done leaving"},
    {"leaving", "reset0", "", "0:done 2:done leaving"},
    {"leaving", "abort2",
     "report(peer_aborted) 2, report(failed) failure, fail_groups failure, close_acceptor",
     "0:done 2:done failed"},
    {"leaving", "timer0", "", "0:done 2:done leaving"},
    {"leaving", "fail", "report(failed) timed_out, fail_groups timed_out, close_acceptor",
     "0:done 2:done failed"},
    {"leaving", "leave", "", "0:done 2:done leaving"},
};

TEST(FabricFsm, EveryEventInEveryState) {
    ucx::test::check_transitions(
        setups(), inputs(), transitions, [] { return middle(); }, states);
}

// ------------------------------------------ several ranks against each other

/// Where the coverage test counts the (event, state of the event's rank,
/// fabric) triples the network delivers; null elsewhere.
std::map<std::string, int>* coverage = nullptr;

/// N fabric machines over an in-memory network: connections are links with
/// a FIFO per direction; each event is delivered at a random moment (a
/// random non-empty channel's head); timers fire only when nothing else is
/// pending.
class network {
public:
    enum class msg { intro, answer, abort, eof, reset };

    network(int n, bool lazy, std::uint64_t timeout_ms, unsigned seed) : rng_(seed) {
        for (int r = 0; r < n; ++r)
            ranks_.emplace_back(fabric_fsm(params(r, n, lazy, timeout_ms)));
    }

    int size() const { return static_cast<int>(ranks_.size()); }
    fabric_fsm& fsm(int r) { return ranks_[r].fsm; }
    bool dead(int r) const { return ranks_[r].dead; }
    bool groups_failed(int r) const { return ranks_[r].groups_failed; }
    int peer_left_calls(int r) const { return ranks_[r].peer_left_calls; }
    std::size_t waiters(int r) const {
        std::size_t n = 0;
        for (auto& [peer, w] : ranks_[r].waiting)
            n += w;
        return n;
    }
    /// This side's inbox on rank `r`'s connection to `peer`, or 0.
    std::uint32_t inbox(int r, int peer) const {
        const auto it = ranks_[r].adopted.find(peer);
        return it == ranks_[r].adopted.end() ? 0 : side_of(it->second, r).inbox;
    }

    void start(int r) {
        note(r, "start", -1);
        run(r, ranks_[r].fsm.start(), -1);
    }
    /// An operation of rank `r` needs `peer`.
    void need(int r, int peer) {
        note(r, "need", peer);
        auto res = ranks_[r].fsm.need(peer);
        if (res.answer == fabric_fsm::need_answer::wait)
            ++ranks_[r].waiting[peer];
        run(r, res.actions, -1);
    }
    void fail(int r, error_code ec) {
        note(r, "fail", -1);
        run(r, ranks_[r].fsm.fail(ec), -1);
    }
    void leave(int r) {
        note(r, "leave", -1);
        run(r, ranks_[r].fsm.leave(), -1);
    }
    /// Rank `r`'s process dies: every connection it has resets.
    void kill(int r) {
        node& n = ranks_[r];
        n.dead = true;
        for (std::size_t l = 0; l < links_.size(); ++l) {
            const link& k = links_[l];
            if (k.a == r || k.b == r)
                send(static_cast<int>(l), r, msg::reset);
        }
        n.backlog.clear();
    }

    /// Delivers one event, if one is pending (no timer).
    bool step() {
        std::vector<int> ready;
        for (const auto& [key, q] : channels_)
            if (!q.empty())
                ready.push_back(key);
        if (ready.empty())
            return false;
        auto& q = channels_[ready[rng_() % ready.size()]];
        auto f = std::move(q.front());
        q.pop_front();
        f();
        return true;
    }

    /// Delivers events until none is left (then fires a timer, if one is
    /// armed, and goes on). False if it did not settle.
    bool settle() {
        for (int guard = 0; guard < 100000; ++guard) {
            std::vector<int> ready;
            for (const auto& [key, q] : channels_)
                if (!q.empty())
                    ready.push_back(key);
            if (ready.empty()) {
                std::vector<std::pair<int, int>> armed;
                for (int r = 0; r < size(); ++r)
                    for (int p : ranks_[r].timers)
                        if (!ranks_[r].dead)
                            armed.emplace_back(r, p);
                if (armed.empty())
                    return true;
                const auto [r, p] = armed[rng_() % armed.size()];
                ranks_[r].timers.erase(p);
                note(r, "timer_expired", p);
                run(r, ranks_[r].fsm.timer_expired(p), -1);
                continue;
            }
            auto& q = channels_[ready[rng_() % ready.size()]];
            auto f = std::move(q.front());
            q.pop_front();
            f();
        }
        return false;
    }

    /// Problems seen while executing actions (each a test failure).
    const std::vector<std::string>& problems() const { return problems_; }

private:
    struct letter {
        msg m;
        int from;
    };
    struct side {
        int rank = -1;
        std::uint32_t inbox = 0;
        int peer = -1; ///< the peer it is adopted as, or -1
        bool identify = false, answer = false, watching = false, abort_recv = false;
        bool closed = false;
        /// Messages here that no receive has taken yet.
        std::deque<letter> mail;
        /// The other side closed (eof or reset): receives and watches
        /// started later end at once, as UCX's do on a failed endpoint.
        std::optional<msg> gone;
    };
    struct link {
        int a, b; ///< a connected to b
        side sa, sb;
    };
    struct node {
        explicit node(fabric_fsm f) : fsm(std::move(f)) {}
        fabric_fsm fsm;
        bool dead = false;
        int accepts = 0;
        std::deque<int> backlog;
        bool acceptor_open = true;
        std::map<int, int> adopted; ///< peer -> link
        std::map<int, std::size_t> waiting;
        std::set<int> timers;
        bool groups_failed = false;
        int peer_left_calls = 0;
    };

    side make_side(int r) {
        side s;
        s.rank = r;
        s.inbox = next_inbox_++;
        return s;
    }

    side& side_of(int l, int r) { return links_[l].a == r ? links_[l].sa : links_[l].sb; }
    const side& side_of(int l, int r) const {
        return links_[l].a == r ? links_[l].sa : links_[l].sb;
    }
    int other(int l, int r) const { return links_[l].a == r ? links_[l].b : links_[l].a; }

    void post(int channel, std::function<void()> f) { channels_[channel].push_back(std::move(f)); }
    /// A message from `from` over link `l` (FIFO per direction).
    void send(int l, int from, msg m) {
        const int to = other(l, from);
        post(l * 2 + (links_[l].a == from ? 0 : 1),
             [this, l, to, from, m] { arrive(l, to, from, m); });
    }

    void arrive(int l, int r, int from, msg m) {
        side& s = side_of(l, r);
        if (ranks_[r].dead || s.closed)
            return;
        if (m == msg::eof || m == msg::reset) {
            if (!s.gone)
                s.gone = m;
        } else {
            s.mail.push_back({m, from});
        }
        deliver(l, r);
    }

    /// The first message here that a receive for `abort` (else for the
    /// introduction's tag, which the answer shares) takes.
    std::optional<letter> take(side& s, bool abort) {
        for (auto it = s.mail.begin(); it != s.mail.end(); ++it)
            if ((it->m == msg::abort) == abort) {
                const letter l = *it;
                s.mail.erase(it);
                return l;
            }
        return std::nullopt;
    }

    /// Matches what is here against the receives posted on rank `r`'s side
    /// of link `l` (UCX keeps a message until a receive takes it); once the
    /// other side closed, the receives and the watch still posted end.
    void deliver(int l, int r) {
        for (;;) {
            side& s = side_of(l, r);
            fabric_fsm& f = ranks_[r].fsm;
            if (ranks_[r].dead || s.closed)
                return;
            const int peer = s.peer;
            const std::uint32_t inbox = s.inbox;
            if (s.identify) {
                if (const auto m = take(s, false)) {
                    s.identify = false;
                    note(r, "introduced", m->from);
                    run(r, f.introduced({}, true, m->from, inbox), l);
                    continue;
                }
            }
            if (s.answer) {
                if (const auto m = take(s, false)) {
                    s.answer = false;
                    note(r, "answered", peer);
                    run(r, f.answered(peer, m->from == peer, inbox), -1);
                    continue;
                }
            }
            if (s.abort_recv) {
                if (take(s, true)) {
                    s.abort_recv = false;
                    note(r, "abort_received", peer);
                    run(r, f.abort_received(peer), -1);
                    continue;
                }
            }
            if (!s.gone)
                return;
            const error_code ec =
                *s.gone == msg::eof ? error_code(aerr::eof) : aerr::connection_reset;
            if (s.identify) {
                s.identify = false;
                note(r, "introduced(error)", -1);
                run(r, f.introduced(ec, false, 0, 0), l);
            } else if (s.answer) {
                s.answer = false;
                note(r, "answered(error)", peer);
                run(r, f.answered(peer, false, 0), -1);
            } else if (s.abort_recv) {
                s.abort_recv = false; // ends with the error: ignored
            } else if (s.watching) {
                s.watching = false;
                note(r, ec == aerr::eof ? "endpoint_failed(eof)" : "endpoint_failed(reset)", peer);
                run(r, f.endpoint_failed(peer, ec), -1);
            } else {
                return;
            }
        }
    }

    /// Counts the event for the coverage test: its name, the state of the
    /// rank it concerns (when it concerns one) and the fabric's.
    void note(int r, const char* event, int peer) {
        if (!coverage)
            return;
        const fabric_fsm& f = ranks_[r].fsm;
        std::string k = event;
        k += peer >= 0 && peer < size() ? std::string(" | ") + state_name(f.state(peer)) : " | -";
        k += f.failed() ? " | failed" : f.leaving() ? " | leaving" : " | running";
        ++(*coverage)[k];
    }

    void problem(int r, const std::string& what) {
        problems_.push_back("rank " + std::to_string(r) + ": " + what);
    }

    /// Executes rank `r`'s actions; `fresh` is the event's link, or -1.
    void run(int r, const fabric_actions& actions, int fresh) {
        node& n = ranks_[r];
        for (const fabric_action& a : actions) {
            using t = fabric_action_type;
            const bool needs_fresh = a.type == t::identify || a.type == t::adopt ||
                                     a.type == t::introduce_and_abort || a.type == t::close_new;
            if (needs_fresh && fresh < 0) {
                problem(r, std::string(name(a.type)) + " without an endpoint of the event");
                continue;
            }
            const bool needs_peer = a.type == t::introduce || a.type == t::answer ||
                                    a.type == t::watch || a.type == t::send_abort ||
                                    a.type == t::close_force || a.type == t::close_graceful;
            if (needs_peer && !n.adopted.count(a.peer)) {
                problem(r, std::string(name(a.type)) + " on rank " + std::to_string(a.peer) +
                               ", whose connection it does not have");
                continue;
            }
            switch (a.type) {
            case t::accept:
                if (!n.acceptor_open)
                    problem(r, "accept after the acceptor closed");
                ++n.accepts;
                pump_accepts(r);
                break;
            case t::connect: {
                const int l = static_cast<int>(links_.size());
                links_.push_back(link{r, a.peer, make_side(r), make_side(a.peer)});
                // The connection is made here at once (a worker address);
                // the peer accepts it when it takes one.
                post(1000000 + r, [this, r, l, to = a.peer] {
                    if (!ranks_[r].dead)
                        note(r, "connected", to);
                    run(r, ranks_[r].fsm.connected(to, {}), l);
                });
                node& peer = ranks_[a.peer];
                if (peer.dead || !peer.acceptor_open) {
                    send(l, a.peer, msg::reset);
                } else {
                    peer.backlog.push_back(l);
                    pump_accepts(a.peer);
                }
                break;
            }
            case t::identify:
                side_of(fresh, r).identify = true;
                posted(fresh, r);
                break;
            case t::adopt:
                if (n.adopted.count(a.peer))
                    problem(r, "adopts a second connection of rank " + std::to_string(a.peer));
                if (other(fresh, r) != a.peer)
                    problem(r, "adopts rank " + std::to_string(other(fresh, r)) +
                                   "'s connection as rank " + std::to_string(a.peer) + "'s");
                n.adopted[a.peer] = fresh;
                side_of(fresh, r).peer = a.peer;
                break;
            case t::introduce:
                side_of(n.adopted[a.peer], r).answer = true;
                send(n.adopted[a.peer], r, msg::intro);
                posted(n.adopted[a.peer], r);
                break;
            case t::answer:
                send(n.adopted[a.peer], r, msg::answer);
                break;
            case t::watch:
                side_of(n.adopted[a.peer], r).watching = true;
                side_of(n.adopted[a.peer], r).abort_recv = true;
                posted(n.adopted[a.peer], r);
                break;
            case t::arm_timer:
                if (!n.timers.insert(a.peer).second)
                    problem(r, "arms an armed timer");
                break;
            case t::cancel_timer:
                n.timers.erase(a.peer);
                break;
            case t::run_waiting:
                if (n.waiting[a.peer] == 0)
                    problem(r, "runs the waiters of rank " + std::to_string(a.peer) +
                                   ", which has none");
                n.waiting[a.peer] = 0;
                break;
            case t::introduce_and_abort:
                send(fresh, r, msg::intro);
                send(fresh, r, msg::abort);
                close(fresh, r, msg::reset);
                break;
            case t::close_new:
                close(fresh, r, msg::reset);
                break;
            case t::send_abort:
                send(n.adopted[a.peer], r, msg::abort);
                close(n.adopted[a.peer], r, msg::reset);
                break;
            case t::close_force:
                close(n.adopted[a.peer], r, msg::reset);
                break;
            case t::close_graceful:
                close(n.adopted[a.peer], r, msg::eof);
                break;
            case t::close_acceptor:
                n.acceptor_open = false;
                for (int l : n.backlog)
                    send(l, r, msg::reset);
                n.backlog.clear();
                break;
            case t::fail_groups:
                if (n.groups_failed)
                    problem(r, "fails its groups twice");
                n.groups_failed = true;
                break;
            case t::inboxes_changed:
                break;
            case t::peer_left:
                ++n.peer_left_calls;
                break;
            case t::report:
                break;
            }
        }
    }

    /// A receive was posted on rank `r`'s side of link `l`: what is already
    /// there is matched from the next event on.
    void posted(int l, int r) {
        const int from = other(l, r);
        post(l * 2 + (links_[l].a == from ? 0 : 1), [this, l, r] { deliver(l, r); });
    }

    void close(int l, int r, msg how) {
        side& s = side_of(l, r);
        if (s.closed)
            return;
        s.closed = true;
        s.watching = s.identify = s.answer = s.abort_recv = false;
        send(l, r, how);
    }

    void pump_accepts(int r) {
        node& n = ranks_[r];
        while (n.accepts > 0 && !n.backlog.empty() && n.acceptor_open) {
            --n.accepts;
            const int l = n.backlog.front();
            n.backlog.pop_front();
            post(2000000 + r, [this, r, l] {
                if (!ranks_[r].dead)
                    note(r, "accepted", -1);
                run(r, ranks_[r].fsm.accepted({}), l);
            });
        }
    }

    std::mt19937 rng_;
    std::vector<node> ranks_;
    std::vector<link> links_;
    std::map<int, std::deque<std::function<void()>>> channels_;
    std::uint32_t next_inbox_ = 100;
    std::vector<std::string> problems_;
};

void expect_no_problems(const network& net, unsigned seed) {
    for (const auto& p : net.problems())
        ADD_FAILURE() << "seed " << seed << ": " << p;
}

TEST(FabricFsmNetwork, EveryPairConnectsOnceAndLearnsItsIds) {
    for (unsigned seed = 1; seed <= 200; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        network net(n, false, 1000, seed);
        for (int r = n - 1; r >= 0; --r)
            net.start(r);
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r) {
            EXPECT_FALSE(net.fsm(r).failed()) << "seed " << seed << " rank " << r;
            EXPECT_EQ(net.fsm(r).connections(), n - 1) << "seed " << seed << " rank " << r;
            EXPECT_TRUE(net.fsm(r).knows_every_inbox()) << "seed " << seed << " rank " << r;
            for (int p = 0; p < n; ++p)
                if (p != r) {
                    EXPECT_EQ(net.fsm(r).peer_of_inbox(net.inbox(r, p)), p)
                        << "seed " << seed << " rank " << r;
                }
        }
    }
}

TEST(FabricFsmNetwork, LazyConnectionsAreMadeByTheLowerRankWhenEitherNeedsThem) {
    for (unsigned seed = 1; seed <= 200; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        network net(n, true, 1000, seed);
        for (int r = 0; r < n; ++r)
            net.start(r);
        std::mt19937 rng(seed);
        // Random pairs need each other; a rank that needs a lower one waits
        // until that one needs it too (then it connects), as a receive from
        // a lower rank waits for that rank's send.
        std::vector<std::pair<int, int>> pairs;
        for (int k = 0; k < n; ++k) {
            const int a = static_cast<int>(rng() % n), b = static_cast<int>(rng() % n);
            if (a != b)
                pairs.emplace_back(a, b);
        }
        for (auto [a, b] : pairs) {
            net.need(a, b);
            net.need(b, a); // the send that matches the receive
        }
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r) {
            EXPECT_FALSE(net.fsm(r).failed()) << "seed " << seed;
            EXPECT_EQ(net.waiters(r), 0u) << "seed " << seed << " rank " << r;
            EXPECT_TRUE(net.fsm(r).knows_every_inbox()) << "seed " << seed;
        }
        for (auto [a, b] : pairs) {
            EXPECT_TRUE(net.fsm(a).ready(b)) << "seed " << seed;
            EXPECT_EQ(net.fsm(a).peer_of_inbox(net.inbox(a, b)), b) << "seed " << seed;
        }
    }
}

TEST(FabricFsmNetwork, ADeadRankFailsEverySurvivor) {
    for (unsigned seed = 1; seed <= 300; ++seed) {
        const int n = 3 + static_cast<int>(seed % 5);
        network net(n, false, 1000, seed);
        std::mt19937 rng(seed * 7919);
        const int victim = static_cast<int>(rng() % n);
        const bool before_start = rng() % 4 == 0;
        for (int r = 0; r < n; ++r)
            if (!(before_start && r == victim))
                net.start(r);
        // Operations wait for every peer (so a lower victim that never
        // connects is noticed at the handshake timeout).
        for (int r = 0; r < n; ++r)
            for (int p = 0; p < n; ++p)
                if (p != r && !(before_start && r == victim))
                    net.need(r, p);
        if (before_start) {
            net.kill(victim);
        } else {
            // Let part of the join happen first.
            for (unsigned k = rng() % 40; k > 0 && net.step(); --k) {
            }
            net.kill(victim);
        }
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r) {
            if (r == victim)
                continue;
            EXPECT_TRUE(net.fsm(r).failed()) << "seed " << seed << " rank " << r;
            EXPECT_TRUE(net.groups_failed(r)) << "seed " << seed << " rank " << r;
            EXPECT_EQ(net.waiters(r), 0u) << "seed " << seed << " rank " << r;
        }
    }
}

TEST(FabricFsmNetwork, AFailureHereReachesEveryRank) {
    for (unsigned seed = 1; seed <= 200; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        network net(n, false, 0, seed);
        for (int r = 0; r < n; ++r)
            net.start(r);
        ASSERT_TRUE(net.settle());
        net.fail(static_cast<int>(seed % n), aerr::timed_out);
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r)
            EXPECT_TRUE(net.fsm(r).failed()) << "seed " << seed << " rank " << r;
    }
}

TEST(FabricFsmNetwork, EveryRankLeavesAndNoneFails) {
    for (unsigned seed = 1; seed <= 200; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        network net(n, false, 1000, seed);
        for (int r = 0; r < n; ++r)
            net.start(r);
        ASSERT_TRUE(net.settle());
        // One by one in a random order, some before the others settled.
        std::vector<int> order(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r)
            order[static_cast<std::size_t>(r)] = r;
        std::shuffle(order.begin(), order.end(), std::mt19937(seed));
        for (int r : order)
            net.leave(r);
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r) {
            EXPECT_FALSE(net.fsm(r).failed()) << "seed " << seed << " rank " << r;
            EXPECT_FALSE(net.groups_failed(r)) << "seed " << seed;
        }
    }
}

TEST(FabricFsmNetwork, ARankThatLeavesIsSeenLeavingNotFailing) {
    for (unsigned seed = 1; seed <= 100; ++seed) {
        const int n = 2 + static_cast<int>(seed % 5);
        network net(n, false, 1000, seed);
        for (int r = 0; r < n; ++r)
            net.start(r);
        ASSERT_TRUE(net.settle());
        const int leaver = static_cast<int>(seed % n);
        net.leave(leaver);
        ASSERT_TRUE(net.settle()) << "seed " << seed;
        expect_no_problems(net, seed);
        for (int r = 0; r < n; ++r) {
            if (r == leaver)
                continue;
            EXPECT_FALSE(net.fsm(r).failed()) << "seed " << seed;
            EXPECT_TRUE(net.fsm(r).has_left(leaver)) << "seed " << seed;
            EXPECT_EQ(net.peer_left_calls(r), 1) << "seed " << seed;
        }
    }
}

// The (event, state of its rank, fabric) triples that the network scenarios
// reach, printed as a table; every kind of event is reached.
TEST(FabricFsmNetwork, TransitionCoverage) {
    std::map<std::string, int> seen;
    coverage = &seen;
    for (unsigned seed = 1; seed <= 60; ++seed) {
        const int n = 2 + static_cast<int>(seed % 5);
        const bool lazy = seed % 3 == 0;
        network net(n, lazy, 1000, seed);
        std::mt19937 rng(seed);
        // A rank that dies before it starts (never connects, never accepts).
        const int absent = seed % 8 == 0 ? static_cast<int>(rng() % n) : -1;
        if (absent >= 0)
            net.kill(absent);
        for (int r = 0; r < n; ++r)
            if (r != absent)
                net.start(r);
        for (int k = 0; k < n; ++k) {
            const int a = static_cast<int>(rng() % n), b = static_cast<int>(rng() % n);
            if (a != b && a != absent && b != absent) {
                net.need(a, b);
                net.need(b, a);
            }
        }
        for (unsigned k = rng() % 30; k > 0 && net.step(); --k) {
        }
        switch (seed % 4) {
        case 0:
            net.kill(static_cast<int>(rng() % n));
            break;
        case 1:
            net.fail(static_cast<int>(rng() % n), aerr::timed_out);
            break;
        case 2:
            for (int r = 0; r < n; ++r)
                net.leave(r);
            break;
        default:
            net.leave(static_cast<int>(rng() % n));
            break;
        }
        if (absent >= 0)
            for (int r = 0; r < n; ++r)
                if (r != absent && !net.dead(r))
                    net.need(r, absent);
        net.settle();
        // Operations after the end.
        for (int r = 0; r < n; ++r)
            if (!net.dead(r) && !net.fsm(r).failed())
                net.need(r, (r + 1) % n);
        net.settle();
    }
    coverage = nullptr;
    std::set<std::string> events;
    std::string table = "| event | its rank | fabric | times |\n|---|---|---|---|\n";
    for (const auto& [k, count] : seen) {
        table += "| " + k + " | " + std::to_string(count) + " |\n";
        events.insert(k.substr(0, k.find(" |")));
    }
    std::printf("%s", table.c_str());
    for (const char* e : {"start", "need", "fail", "leave", "timer_expired", "introduced",
                          "answered", "abort_received", "introduced(error)", "endpoint_failed(eof)",
                          "endpoint_failed(reset)", "connected", "accepted"})
        EXPECT_TRUE(events.count(e)) << e << " never delivered:\n" << table;
}

} // namespace
