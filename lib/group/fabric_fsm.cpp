#include "group/fabric_fsm.hpp"

#include <boost/asio/error.hpp>

namespace ucx::detail {

namespace {

fabric_action act(fabric_action_type t, int peer = -1, const boost::system::error_code& ec = {}) {
    return fabric_action{.type = t, .peer = peer, .report = {}, .ms = 0, .ec = ec};
}

fabric_action say(fabric_report r, int peer = -1, const boost::system::error_code& ec = {}) {
    return fabric_action{
        .type = fabric_action_type::report, .peer = peer, .report = r, .ms = 0, .ec = ec};
}

} // namespace

fabric_fsm::fabric_fsm(const params& p)
    : rank_(p.rank), lazy_(p.lazy), handshake_timeout_ms_(p.handshake_timeout_ms),
      failure_(p.failure), peers_(static_cast<std::size_t>(p.size > 0 ? p.size : 1)) {}

fabric_actions fabric_fsm::start() {
    fabric_actions out;
    if (started_ || failed_ || leaving_)
        return out;
    started_ = true;
    out.push_back(act(fabric_action_type::accept));
    if (!lazy_)
        for (int j = rank_ + 1; j < size(); ++j)
            if (peers_[j].state == fabric_peer_state::none) // not asked for already
                connect(out, j);
    return out;
}

fabric_fsm::need_result fabric_fsm::need(int who) {
    need_result r;
    peer& p = peers_[who];
    if (p.state == fabric_peer_state::ready) {
        r.answer = need_answer::ready;
        return r;
    }
    if (p.state == fabric_peer_state::done) {
        r.answer = need_answer::gone;
        r.ec = failed_ ? failed_ : error_code(boost::asio::error::eof);
        return r;
    }
    r.answer = need_answer::wait;
    ++p.waiting;
    if (who > rank_ && p.state == fabric_peer_state::none && !failed_ && !leaving_) {
        connect(r.actions, who); // on first use
    } else if (who < rank_ && !p.timer_used && !lazy_ && handshake_timeout_ms_ > 0) {
        // The lower rank connects; one that does not within the handshake
        // timeout is taken for failed. (With connections on first use it
        // connects when it needs this rank: an operation waits for it,
        // within the group's deadline.)
        p.timer_used = true;
        p.timer_armed = true;
        r.actions.push_back(fabric_action{.type = fabric_action_type::arm_timer,
                                          .peer = who,
                                          .report = {},
                                          .ms = handshake_timeout_ms_,
                                          .ec = {}});
    }
    return r;
}

fabric_actions fabric_fsm::want(int who) {
    fabric_actions out;
    if (who > rank_ && who < size() && peers_[who].state == fabric_peer_state::none && !failed_ &&
        !leaving_)
        connect(out, who);
    return out;
}

fabric_actions fabric_fsm::connected(int to, const error_code& ec) {
    fabric_actions out;
    peer& p = peers_[to];
    if (!ec && failed_) {
        // Failed meanwhile: the peer still learns it now (who this is, then
        // the abort notice), not at its deadline.
        p.state = fabric_peer_state::done;
        out.push_back(act(fabric_action_type::introduce_and_abort, to));
        return out;
    }
    if (failed_ || leaving_) {
        p.state = fabric_peer_state::done;
        if (!ec)
            out.push_back(act(fabric_action_type::close_new, to));
        return out;
    }
    if (p.state != fabric_peer_state::connecting) {
        // Not asked for (each connection is made once): not kept.
        if (!ec)
            out.push_back(act(fabric_action_type::close_new, to));
        return out;
    }
    if (ec) {
        out.push_back(say(fabric_report::connect_failed, to, ec));
        p.state = fabric_peer_state::done;
        run_waiting(out, to, ec);
        fail(out, failure_);
        return out;
    }
    out.push_back(act(fabric_action_type::adopt, to));
    // The accepting rank's answer, its first message here, will tell this
    // endpoint's id; who this is goes as the connection's first message.
    out.push_back(act(fabric_action_type::introduce, to));
    ready(out, to);
    return out;
}

fabric_actions fabric_fsm::answered(int to, bool valid, std::uint32_t inbox) {
    fabric_actions out;
    peer& p = peers_[to];
    if (!valid || p.state != fabric_peer_state::ready)
        return out;
    p.inbox = inbox;
    p.has_inbox = true;
    out.push_back(act(fabric_action_type::inboxes_changed, to));
    return out;
}

fabric_actions fabric_fsm::accepted(const error_code& ec) {
    fabric_actions out;
    if (ec == boost::asio::error::operation_aborted)
        return out;
    if (ec) {
        out.push_back(say(fabric_report::accept_failed, -1, ec));
    } else {
        ++identifying_;
        out.push_back(act(fabric_action_type::identify));
    }
    if (!failed_ && !leaving_)
        out.push_back(act(fabric_action_type::accept));
    return out;
}

fabric_actions fabric_fsm::introduced(const error_code& ec, bool valid, int who,
                                      std::uint32_t inbox) {
    fabric_actions out;
    if (identifying_ > 0)
        --identifying_;
    if (ec || !valid || who < 0 || who >= rank_ || peers_[who].state == fabric_peer_state::ready ||
        failed_ || leaving_) {
        if (!ec)
            out.push_back(say(fabric_report::stranger));
        out.push_back(act(fabric_action_type::close_new));
        return out;
    }
    out.push_back(act(fabric_action_type::adopt, who));
    // The answer: the connecting rank learns its endpoint's id.
    out.push_back(act(fabric_action_type::answer, who));
    peer& p = peers_[who];
    p.inbox = inbox;
    p.has_inbox = true;
    ready(out, who);
    out.push_back(act(fabric_action_type::inboxes_changed, who));
    return out;
}

fabric_actions fabric_fsm::endpoint_failed(int who, const error_code& ec) {
    fabric_actions out;
    if (failed_ || leaving_ || ec == boost::asio::error::operation_aborted ||
        ec == boost::asio::error::bad_descriptor)
        return out;
    peer& p = peers_[who];
    if (p.state != fabric_peer_state::ready)
        return out; // only a ready connection is watched
    if (ec == boost::asio::error::eof) {
        // Not a failure until an operation needs the peer (it then fails
        // with eof on the connection).
        if (p.left)
            return out;
        p.left = true;
        out.push_back(say(fabric_report::peer_left, who));
        out.push_back(act(fabric_action_type::peer_left, who));
        return out;
    }
    out.push_back(say(fabric_report::peer_failed, who, ec));
    // Nothing more goes to a failed peer (no abort notice, no graceful close
    // waiting for it).
    out.push_back(act(fabric_action_type::close_force, who));
    p.state = fabric_peer_state::done;
    fail(out, failure_);
    return out;
}

fabric_actions fabric_fsm::abort_received(int who, const error_code& why) {
    fabric_actions out;
    // The notice is listened for on a ready connection (it may come after
    // this rank left).
    const auto state = peers_[who].state;
    if (failed_ || state == fabric_peer_state::none || state == fabric_peer_state::connecting)
        return out;
    out.push_back(say(fabric_report::peer_aborted, who));
    fail(out, why ? why : failure_);
    return out;
}

fabric_actions fabric_fsm::timer_expired(int who) {
    fabric_actions out;
    peer& p = peers_[who];
    if (!p.timer_armed)
        return out;
    p.timer_armed = false;
    if (failed_ || leaving_ || p.state == fabric_peer_state::ready ||
        p.state == fabric_peer_state::done)
        return out;
    out.push_back(say(fabric_report::did_not_connect, who));
    fail(out, failure_);
    return out;
}

fabric_actions fabric_fsm::fail(const error_code& ec) {
    fabric_actions out;
    fail(out, ec);
    return out;
}

fabric_actions fabric_fsm::leave() {
    fabric_actions out;
    if (leaving_ || failed_)
        return out;
    leaving_ = true;
    out.push_back(act(fabric_action_type::close_acceptor));
    for (int j = 0; j < size(); ++j) {
        peer& p = peers_[j];
        run_waiting(out, j, boost::asio::error::operation_aborted);
        cancel_timer(out, j);
        if (p.state == fabric_peer_state::ready)
            out.push_back(act(fabric_action_type::close_graceful, j));
        if (j != rank_)
            p.state = fabric_peer_state::done;
    }
    return out;
}

int fabric_fsm::peer_of_inbox(std::uint32_t inbox) const noexcept {
    for (int j = 0; j < size(); ++j)
        if (peers_[j].has_inbox && peers_[j].inbox == inbox)
            return j;
    return -1;
}

bool fabric_fsm::knows_every_inbox() const noexcept {
    // An accepted connection whose first message (who made it) is still to
    // come; a connection made here whose answer (its id) is.
    if (identifying_ > 0)
        return false;
    for (int j = 0; j < size(); ++j)
        if (j != rank_ && !peers_[j].has_inbox &&
            (peers_[j].state == fabric_peer_state::connecting ||
             peers_[j].state == fabric_peer_state::ready))
            return false;
    return true;
}

int fabric_fsm::connections() const noexcept {
    int n = 0;
    for (int j = 0; j < size(); ++j)
        n += j != rank_ && peers_[j].state == fabric_peer_state::ready;
    return n;
}

void fabric_fsm::connect(fabric_actions& out, int to) {
    peers_[to].state = fabric_peer_state::connecting;
    out.push_back(act(fabric_action_type::connect, to));
}

void fabric_fsm::ready(fabric_actions& out, int who) {
    peers_[who].state = fabric_peer_state::ready;
    cancel_timer(out, who);
    out.push_back(act(fabric_action_type::watch, who));
    run_waiting(out, who, {});
}

void fabric_fsm::cancel_timer(fabric_actions& out, int who) {
    peer& p = peers_[who];
    if (!p.timer_armed)
        return;
    p.timer_armed = false;
    out.push_back(act(fabric_action_type::cancel_timer, who));
}

void fabric_fsm::run_waiting(fabric_actions& out, int who, const error_code& ec) {
    peer& p = peers_[who];
    if (p.waiting == 0)
        return;
    p.waiting = 0;
    out.push_back(act(fabric_action_type::run_waiting, who, ec));
}

void fabric_fsm::fail(fabric_actions& out, const error_code& ec) {
    if (failed_)
        return;
    failed_ = ec ? ec : failure_;
    out.push_back(say(fabric_report::failed, -1, failed_));
    out.push_back(act(fabric_action_type::fail_groups, -1, failed_));
    out.push_back(act(fabric_action_type::close_acceptor));
    for (int j = 0; j < size(); ++j) {
        peer& p = peers_[j];
        run_waiting(out, j, failed_);
        cancel_timer(out, j);
        // Tell the peer (its failure reaches the ranks it talks to in turn),
        // then force-close: the operations pending on the connection end at
        // once, whatever the peer does.
        if (p.state == fabric_peer_state::ready)
            out.push_back(act(fabric_action_type::send_abort, j));
        if (j != rank_)
            p.state = fabric_peer_state::done;
    }
}

} // namespace ucx::detail
