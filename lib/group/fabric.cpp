#include "group/fabric.hpp"

#include <ucx/connect.hpp>
#include <ucx/error.hpp>
#include <ucx/tag.hpp>

#include <array>

namespace ucx::detail {

namespace {

using namespace group_wire;

using word_pair = std::array<std::uint32_t, 2>;

/// Receives the message with `tag` on `ep` as `endpoint::async_recv` does,
/// completing `void(error_code, std::size_t, tag_t)` with the whole UCX tag.
template <class Handler>
void recv_whole_tag(const endpoint& ep, void* data, std::size_t size, std::uint32_t tag,
                    Handler h) {
    initiate<void(error_code, std::size_t, tag_t), tag_recv_result>(
        checked(ep), std::move(h), [data, size, tag](endpoint_impl& e, tag_recv_op* op) {
            endpoint_recv(e, op, data, size, tag, ~std::uint32_t{0});
        });
}

/// Sends `who` (this rank) as an introduction or answer on `ep`.
void send_rank(endpoint& ep, int who) {
    auto word =
        std::make_shared<word_pair>(word_pair{intro_magic, static_cast<std::uint32_t>(who)});
    ep.async_send(boost::asio::buffer(*word), intro_tag, [word](error_code, std::size_t) {});
}

/// Sends the abort notice on `ep` (its word: why, `abort_word`), then
/// force-closes it.
void send_abort(endpoint ep, const error_code& why) {
    static const std::uint32_t failed = abort_failed, mismatch = abort_mismatch;
    const std::uint32_t& word = why == error::collective_mismatch ? mismatch : failed;
    auto held = std::make_shared<endpoint>(std::move(ep));
    held->async_send(boost::asio::buffer(&word, sizeof(word)), abort_tag,
                     [held](error_code, std::size_t) { held->abort(); });
}

void report(const fabric_action& a) {
    using log::severity;
    switch (a.report) {
    case fabric_report::did_not_connect:
        return group_log(severity::info, "group: rank ", a.peer, " did not connect");
    case fabric_report::connect_failed:
        return group_log(severity::info, "group: connecting to rank ", a.peer,
                         " failed: ", a.ec.message());
    case fabric_report::accept_failed:
        return group_log(severity::warning, "group: accept failed: ", a.ec.message());
    case fabric_report::stranger:
        return group_log(severity::warning,
                         "group: closing a connection that is not a lower rank's");
    case fabric_report::peer_left:
        return group_log(severity::debug, "group: rank ", a.peer, " left");
    case fabric_report::peer_failed:
        return group_log(severity::info, "group: rank ", a.peer, " failed: ", a.ec.message());
    case fabric_report::peer_aborted:
        return group_log(severity::info, "group: rank ", a.peer, " aborted the group");
    case fabric_report::failed:
        return group_log(severity::info, "group: failed: ", a.ec.message());
    }
}

} // namespace

fabric::fabric(std::shared_ptr<worker_impl> w, int rank, std::vector<worker_address> addresses,
               bool lazy)
    : w_(std::move(w)), ex_(core_of(*w_).get_executor()), addresses_(std::move(addresses)),
      fsm_(fabric_fsm::params{
          .rank = rank,
          .size = static_cast<int>(addresses_.size()),
          .lazy = lazy,
          .handshake_timeout_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(
              0,
              std::chrono::duration_cast<std::chrono::milliseconds>(w_->options().handshake_timeout)
                  .count())),
          .failure = make_error_code(error::group_failed)}),
      peers_(addresses_.size()) {}

void fabric::group_gone(std::function<void()> done) {
    if (--live_ == 0)
        return leave(std::move(done));
    if (done)
        boost::asio::post(ex_, std::move(done));
}

void fabric::leave(std::function<void()> done) {
    // Calls `done` once every graceful close has completed.
    auto pending = std::make_shared<int>(1);
    auto one_done = [pending, done = std::move(done), ex = ex_]() {
        if (--*pending == 0 && done)
            boost::asio::post(ex, done);
    };
    for (const fabric_action& a : fsm_.leave()) {
        if (a.type != fabric_action_type::close_graceful) {
            execute_one(a, nullptr);
            continue;
        }
        auto ep = std::make_shared<endpoint>(std::move(peers_[a.peer].ep));
        ++*pending;
        ep->async_close([ep, one_done](error_code) { one_done(); });
    }
    one_done();
}

void fabric::with_peer(int who, ready_handler h) {
    auto r = fsm_.need(who);
    switch (r.answer) {
    case fabric_fsm::need_answer::ready:
        return h({});
    case fabric_fsm::need_answer::gone:
        return boost::asio::post(ex_, [h = std::move(h), ec = r.ec] { h(ec); });
    case fabric_fsm::need_answer::wait:
        peers_[who].waiting.push_back(std::move(h));
        return execute(r.actions);
    }
}

void fabric::execute(const fabric_actions& actions, endpoint* fresh) {
    for (const fabric_action& a : actions)
        execute_one(a, fresh);
}

void fabric::execute_one(const fabric_action& a, endpoint* fresh) {
    using t = fabric_action_type;
    switch (a.type) {
    case t::accept:
        return accept_next();
    case t::connect:
        return connect(a.peer);
    case t::identify:
        return identify(std::move(*fresh));
    case t::adopt:
        peers_[a.peer].ep = std::move(*fresh);
        return;
    case t::introduce:
        return introduce(a.peer);
    case t::answer:
        return send_rank(peers_[a.peer].ep, rank());
    case t::watch:
        return watch(a.peer);
    case t::arm_timer:
        return arm_timer(a.peer, std::chrono::milliseconds(a.ms));
    case t::cancel_timer:
        if (peers_[a.peer].timer)
            peers_[a.peer].timer->cancel();
        return;
    case t::run_waiting: {
        auto list = std::move(peers_[a.peer].waiting);
        peers_[a.peer].waiting.clear();
        for (auto& h : list)
            h(a.ec);
        return;
    }
    case t::introduce_and_abort:
        // The accepting rank learns who made the connection (its first
        // message), then the abort.
        send_rank(*fresh, rank());
        return send_abort(std::move(*fresh), failed());
    case t::close_new:
        fresh->abort();
        return;
    case t::send_abort:
        return send_abort(std::move(peers_[a.peer].ep), failed());
    case t::close_force:
        peers_[a.peer].ep.abort();
        return;
    case t::close_graceful: // only a leave closes gracefully (it counts them)
        return;
    case t::close_acceptor:
        if (acceptor_)
            address_acceptor_close(*acceptor_);
        return;
    case t::fail_groups:
        return each_group([&](fabric_member& g) { g.failed(a.ec); });
    case t::inboxes_changed:
        return each_group([](fabric_member& g) { g.inboxes_changed(); });
    case t::peer_left:
        return each_group([](fabric_member& g) { g.peer_left(); });
    case t::report:
        return report(a);
    }
}

void fabric::accept_next() {
    if (!acceptor_)
        return;
    initiate<void(error_code, endpoint), endpoint_result>(
        acceptor_,
        [self = shared_from_this()](error_code ec, endpoint ep) {
            self->execute(self->fsm_.accepted(ec), &ep);
        },
        [](address_acceptor_impl& a, endpoint_op* op) { address_acceptor_accept(a, op); });
}

void fabric::connect(int to) {
    initiate<void(error_code, endpoint), endpoint_result>(
        w_,
        [self = shared_from_this(), to](error_code ec, endpoint ep) {
            self->execute(self->fsm_.connected(to, ec), &ep);
        },
        [address = addresses_[static_cast<std::size_t>(to)]](worker_impl& w, endpoint_op* op) {
            connect_fabric(w, op, address);
        });
}

void fabric::identify(endpoint ep) {
    auto held = std::make_shared<endpoint>(std::move(ep));
    auto word = std::make_shared<word_pair>();
    recv_whole_tag(*held, word->data(), sizeof(*word), intro_tag,
                   [self = shared_from_this(), held, word](error_code ec, std::size_t n, tag_t t) {
                       const bool valid = !ec && n == sizeof(*word) && (*word)[0] == intro_magic;
                       // A rank beyond int's range is no rank: negative.
                       const int who = static_cast<int>((*word)[1]);
                       self->execute(self->fsm_.introduced(ec, valid, who, inbox_of(t)),
                                     held.get());
                   });
}

void fabric::introduce(int to) {
    endpoint& ep = peers_[to].ep;
    // The accepting rank's answer, its first message here, tells this
    // endpoint's id.
    auto answer = std::make_shared<word_pair>();
    recv_whole_tag(ep, answer->data(), sizeof(*answer), intro_tag,
                   [self = shared_from_this(), to, answer](error_code ec, std::size_t n, tag_t t) {
                       const bool valid = !ec && n == sizeof(*answer) &&
                                          (*answer)[0] == intro_magic &&
                                          (*answer)[1] == static_cast<std::uint32_t>(to);
                       self->execute(self->fsm_.answered(to, valid, inbox_of(t)));
                   });
    // Who this is, as the connection's first message.
    send_rank(ep, rank());
}

void fabric::watch(int who) {
    peer& p = peers_[who];
    p.ep.async_wait_error([self = shared_from_this(), who](error_code ec) {
        self->execute(self->fsm_.endpoint_failed(who, ec));
    });
    // The abort notice: a standing receive that may never complete (a
    // `poll` worker does not spin for it).
    initiate<void(error_code, std::size_t, tag_t), tag_recv_result>(
        checked(p.ep),
        [self = shared_from_this(), who](error_code ec, std::size_t, tag_t) {
            if (!ec)
                self->execute(
                    self->fsm_.abort_received(who, self->peers_[who].abort_word == abort_mismatch
                                                       ? make_error_code(error::collective_mismatch)
                                                       : error_code()));
        },
        [word = &p.abort_word](endpoint_impl& e, tag_recv_op* op) {
            op->background = true;
            endpoint_recv(e, op, word, sizeof(*word), abort_tag, ~std::uint32_t{0});
        });
}

void fabric::arm_timer(int who, std::chrono::milliseconds ms) {
    peer& p = peers_[who];
    if (!p.timer)
        p.timer = std::make_shared<boost::asio::steady_timer>(ex_);
    p.timer->expires_after(ms);
    p.timer->async_wait([self = shared_from_this(), who](error_code ec) {
        if (!ec)
            self->execute(self->fsm_.timer_expired(who));
    });
}

} // namespace ucx::detail
