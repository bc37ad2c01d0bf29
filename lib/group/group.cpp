// ucx::group: joining through a store, connections by rank, the collectives'
// executor and the spread of failure.
//
// One join makes a fabric: the worker's address acceptor and one connection
// to each other rank, shared by the groups split from it. The lower rank of a
// pair connects (right after the join) and says who it is in the
// connection's first message; the higher accepts. Both send and receive
// over that one connection. (UCX pairs the endpoints two workers create to
// each other in the order they create them, so both ranks of a pair
// connecting at once would cross their handshakes: one side connects.)
//
// Tags (32 bits, per endpoint): bit 31 tells the library's messages
// (collectives) from the application's; bits 30 to 18 are the group's id
// (0 for the joined group, a fresh one for each split); bits 17 to 0 the
// application's tag, or the collective's sequence number. Messages between
// two ranks arrive in order, so the rounds of a collective need no tag of
// their own. Tag 0xFFFFFFFF (id 8191) carries the identification (the
// connecting rank's, then the accepting rank's answer), 0xFFFFFFFE the abort
// notice.
//
// Receives from any rank. Underneath, a connection's message is a UCX tag
// message with the receiving endpoint's random id in the high 32 bits of the
// UCX tag and the 32-bit tag above in the low half; the ids of the fabric's
// connections, and only theirs, have bit 63 set (fabric_tag, lib/connection/endpoint_impl.hpp).
// An any-source receive is one UCX receive on the worker whose mask covers
// the low half and that bit: UCX
// matches each arriving message against the posted receives in the order they
// were posted (this one beside the per-rank receives), or keeps it for the
// first receive posted later, so each message is taken by exactly one receive,
// in the order its sender sent it, as for any receive. No message is received
// to be given back: the rejected alternative, a receive on every peer's
// connection with the others cancelled once one completed, loses the message
// that a cancelled receive had already matched (UCX cannot cancel those), and
// duplicates its buffer. The sender is the connection whose id is in the high
// half of the received UCX tag: each side learns the id of its endpoint to
// each peer from the first message the peer sends on it (the identification
// and its answer), which precedes every other message of that peer. The low
// half holds the group's id, so the group's own members are the only senders
// that can match (a rank has one group per id, and its peers send with that
// id only to members of it), and no connection outside the fabric can match
// whatever its tag.
#include <ucx/acceptor.hpp>
#include <ucx/connect.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/group.hpp>
#include <ucx/log.hpp>
#include <ucx/tag.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/device_staging.hpp"
#include "group/collective_plan.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>

namespace ucx::detail {

namespace {

constexpr std::uint32_t library_bit = 1u << 31;
constexpr int id_shift = 18;
constexpr std::uint32_t max_group_id = 8190;
constexpr std::uint32_t intro_tag = 0xFFFFFFFFu;
constexpr std::uint32_t abort_tag = 0xFFFFFFFEu;
constexpr std::uint32_t intro_magic = 0x47584355; // "UCXG"

std::uint32_t user_tag(std::uint32_t id, std::uint32_t tag) noexcept {
    return (id << id_shift) | tag;
}
std::uint32_t collective_tag(std::uint32_t id, std::uint32_t seq) noexcept {
    return library_bit | (id << id_shift) | (seq & group_max_tag);
}

template <class... Parts>
void say(log::severity s, const Parts&... parts) {
    std::ostringstream o;
    (o << ... << parts);
    log::write(s, o.str());
}

using step_handler = std::function<void(error_code, std::size_t)>;
using ready_handler = std::function<void(error_code)>;

/// Whether an endpoint's error means the peer left gracefully.
bool is_leave(const error_code& ec) noexcept {
    return ec == boost::asio::error::eof;
}

/// The endpoint's id in a received UCX tag (its high half).
std::uint32_t inbox_of(tag_t t) noexcept {
    return static_cast<std::uint32_t>(t >> 32);
}

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

} // namespace

class group_impl;

/// The connections of one join (see above).
class fabric : public std::enable_shared_from_this<fabric> {
public:
    fabric(std::shared_ptr<worker_impl> w, int rank, std::vector<worker_address> addresses)
        : w_(std::move(w)), ex_(core_of(*w_).get_executor()), rank_(rank),
          addresses_(std::move(addresses)), peers_(addresses_.size()) {}

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return static_cast<int>(peers_.size()); }
    const boost::asio::any_io_executor& executor() const noexcept { return ex_; }
    const error_code& failed() const noexcept { return failed_; }
    const std::shared_ptr<worker_impl>& worker() const noexcept { return w_; }

    /// The fabric rank whose connection has the endpoint id `inbox` here, or -1.
    int peer_of_inbox(std::uint32_t inbox) const noexcept {
        for (int j = 0; j < size(); ++j)
            if (peers_[j].has_inbox && peers_[j].inbox == inbox)
                return j;
        return -1;
    }
    /// Whether the endpoint id of every connection that may still bring a
    /// message is known.
    bool knows_every_inbox() const noexcept {
        // An accepted connection whose first message (who made it) is still
        // to come; a connection made here whose answer (its id) is.
        if (identifying_ > 0)
            return false;
        for (int j = 0; j < size(); ++j)
            if (j != rank_ && !peers_[j].has_inbox &&
                (peers_[j].state == peer::connecting || peers_[j].state == peer::ready))
                return false;
        return true;
    }
    /// Connections made (and not closed) to other ranks.
    int connections() const noexcept {
        int n = 0;
        for (int j = 0; j < size(); ++j)
            n += j != rank_ && peers_[j].state == peer::ready;
        return n;
    }
    /// Whether fabric rank `who` closed its side gracefully.
    bool has_left(int who) const noexcept { return peers_[who].left; }

    void open(error_code& ec) { acceptor_ = open_address_acceptor(w_, 64, ec); }
    void set_addresses(std::vector<worker_address> a) { addresses_ = std::move(a); }

    /// Connections to the higher ranks on first use (see `group_options`).
    void set_lazy(bool lazy) noexcept { lazy_ = lazy; }

    /// Accepts the lower ranks' connections and connects to the higher
    /// ranks (now, or on first use).
    void start() {
        accept_next();
        if (!lazy_)
            for (int j = rank_ + 1; j < size(); ++j)
                connect(j);
    }

    /// Fabric rank `who` may send here: a higher rank waits for this rank to
    /// connect, so connect now (on first use).
    void want(int who) {
        if (who > rank_ && peers_[who].state == peer::none && !failed_ && !leaving_)
            connect(who);
    }

    std::uint32_t next_id() const noexcept { return next_id_; }
    void use_id(std::uint32_t id) noexcept { next_id_ = std::max(next_id_, id + 1); }

    void add_group(const std::shared_ptr<group_impl>& g) {
        groups_.push_back(g);
        ++live_;
    }
    /// A group of the fabric was closed or released; the last one leaves.
    void group_gone(std::function<void()> done) {
        if (--live_ == 0)
            return leave(std::move(done));
        if (done)
            boost::asio::post(ex_, std::move(done));
    }

    /// Sends to fabric rank `to`; `h` is called as `step_handler` (a
    /// template: no function object allocated per message). `h` keeps a
    /// group of the fabric alive (and so the fabric) until it runs.
    template <class Handler>
    void send(int to, const void* data, std::size_t size, std::uint32_t tag, Handler h) {
        if (failed_)
            return post_step(std::move(h), failed_);
        if (to == rank_)
            return post_step(std::move(h), boost::asio::error::invalid_argument);
        if (peers_[to].state == peer::ready)
            return start_send(to, data, size, tag, std::move(h));
        with_peer(to, [self = shared_from_this(), to, data, size, tag,
                       h = std::move(h)](error_code ec) mutable {
            if (ec)
                return h(ec, 0);
            self->start_send(to, data, size, tag, std::move(h));
        });
    }

    /// Sends to fabric rank `to` inside this call when UCX can (a small
    /// message with send resources free: `endpoint_impl::send_now`), with no
    /// operation and no handler. False leaves it to `send`.
    bool send_now(int to, const void* data, std::size_t size, std::uint32_t tag) noexcept {
        if (failed_ || to == rank_ || peers_[to].state != peer::ready)
            return false;
        const auto& impl = access::get_impl(peers_[to].ep);
        return impl && impl->send_now(data, size, tag);
    }

    /// A collective's receive from fabric rank `from`: taken inside this call
    /// when a message with the tag is already here
    /// (`endpoint_impl::recv_at_once`, no operation made): true, with its
    /// length in `length` (the caller checks it). Otherwise as `recv` with
    /// the handler `make_handler()` gives: false, and it is called later.
    template <class MakeHandler>
    bool recv_now(int from, void* data, std::size_t size, std::uint32_t tag,
                  MakeHandler make_handler, std::size_t& length) {
        if (failed_ || from == rank_ || peers_[from].state != peer::ready) {
            recv(from, data, size, tag, make_handler());
            return false;
        }
        endpoint_impl& impl = *access::get_impl(peers_[from].ep);
        ucs_status_ptr_t pending = nullptr;
        const auto done = impl.recv_at_once(data, size, tag, pending, length);
        if (done == endpoint_impl::at_once::done)
            return true;
        using Handler = decltype(make_handler());
        worker_core& w = core_of(*w_);
        using op_type =
            handler_operation<step_done<Handler>, worker_core::executor_type, endpoint_recv_result>;
        auto* op = op_type::create(step_done<Handler>{this, make_handler()}, w.get_executor(),
                                   w.operation_pool(w.running_in_owner()));
        if (done == endpoint_impl::at_once::pending)
            impl.adopt_recv(op, pending);
        else
            endpoint_recv(impl, op, data, size, tag, ~std::uint32_t{0});
        return false;
    }

    /// Receives from fabric rank `from`.
    template <class Handler>
    void recv(int from, void* data, std::size_t size, std::uint32_t tag, Handler h) {
        if (failed_)
            return post_step(std::move(h), failed_);
        if (from == rank_)
            return post_step(std::move(h), boost::asio::error::invalid_argument);
        if (peers_[from].state == peer::ready)
            return start_recv(from, data, size, tag, std::move(h));
        with_peer(from, [self = shared_from_this(), from, data, size, tag,
                         h = std::move(h)](error_code ec) mutable {
            if (ec)
                return h(ec, 0);
            self->start_recv(from, data, size, tag, std::move(h));
        });
    }

    /// Fails every group of the fabric with `ec`, tells the peers, closes.
    void fail(error_code ec);
    /// Leaves gracefully (no group uses the fabric any more): the sends in
    /// flight are delivered, the peers see this rank leave; then `done`.
    void leave(std::function<void()> done = {});

private:
    struct peer {
        endpoint ep;
        enum { none, connecting, ready, done } state = none;
        std::vector<ready_handler> waiting;
        std::shared_ptr<boost::asio::steady_timer> timer;
        std::uint32_t abort_word = 0;
        /// The id of this side's endpoint (see above), once known.
        std::uint32_t inbox = 0;
        bool has_inbox = false;
        /// The peer closed gracefully.
        bool left = false;
    };

    /// This side's endpoint to `who` has the id in the high half of `t`.
    void learned(int who, tag_t t);
    /// Fabric rank `who` closed gracefully.
    void peer_left(int who);

    // The connection is ready: the operation goes to its endpoint. The
    // handler holds a group of this fabric, and so the fabric, until it runs
    // (no reference counted here per message).
    template <class Handler>
    void start_send(int to, const void* data, std::size_t size, std::uint32_t tag, Handler h) {
        peers_[to].ep.async_send(boost::asio::buffer(data, size), tag,
                                 step_done<Handler>{this, std::move(h)});
    }
    template <class Handler>
    void start_recv(int from, void* data, std::size_t size, std::uint32_t tag, Handler h) {
        peers_[from].ep.async_recv(boost::asio::buffer(data, size), tag, ~std::uint32_t{0},
                                   step_done<Handler>{this, std::move(h)});
    }
    /// A message's completion: `h` with the fabric's failure, if any, in
    /// place of the endpoint's error.
    template <class Handler>
    struct step_done {
        fabric* f;
        Handler h;
        void operator()(error_code ec, std::size_t n) { h(f->failed_ ? f->failed_ : ec, n); }
        void operator()(error_code ec, std::size_t n, std::uint32_t) { (*this)(ec, n); }
    };

    template <class Handler>
    void post_step(Handler h, error_code ec) {
        boost::asio::post(ex_, [h = std::move(h), ec]() mutable { h(ec, 0); });
    }

    void with_peer(int who, ready_handler h) {
        peer& p = peers_[who];
        if (p.state == peer::ready)
            return h({});
        if (p.state == peer::done)
            return boost::asio::post(ex_, [h = std::move(h), self = shared_from_this()] {
                h(self->failed_ ? self->failed_ : error_code(boost::asio::error::eof));
            });
        p.waiting.push_back(std::move(h));
        if (who > rank_ && p.state == peer::none && !failed_ && !leaving_)
            return connect(who); // on first use
        if (who < rank_ && !p.timer && !lazy_) {
            // The lower rank connects; one that does not within the
            // handshake timeout is taken for failed. (With connections on
            // first use it connects when it needs this rank: an operation
            // waits for it, within the group's deadline.)
            const auto limit = w_->options().handshake_timeout;
            if (limit.count() > 0) {
                p.timer = std::make_shared<boost::asio::steady_timer>(ex_, limit);
                p.timer->async_wait([self = shared_from_this(), who](error_code ec) {
                    if (ec || self->failed_ || self->peers_[who].state == peer::ready)
                        return;
                    say(log::severity::info, "group: rank ", who, " did not connect");
                    self->fail(make_error_code(error::group_failed));
                });
            }
        }
    }

    /// Sends the abort notice on `ep`, then force-closes it.
    static void send_abort(endpoint ep) {
        static const std::uint32_t word = 1;
        auto held = std::make_shared<endpoint>(std::move(ep));
        held->async_send(boost::asio::buffer(&word, sizeof(word)), abort_tag,
                         [held](error_code, std::size_t) { held->close(); });
    }
    /// A connection made after this rank failed: the accepting rank learns
    /// who made it (the first message of every connection), then the abort.
    static void introduce_and_abort(int rank, endpoint ep) {
        auto intro = std::make_shared<std::array<std::uint32_t, 2>>(
            std::array<std::uint32_t, 2>{intro_magic, static_cast<std::uint32_t>(rank)});
        ep.async_send(boost::asio::buffer(*intro), intro_tag, [intro](error_code, std::size_t) {});
        send_abort(std::move(ep));
    }

    void flush(std::vector<ready_handler>& waiting, error_code ec) {
        auto list = std::move(waiting);
        waiting.clear();
        for (auto& h : list)
            h(ec);
    }

    /// The peer's endpoint is usable: watch it, listen for its abort notice,
    /// run what waited for it.
    void ready(int who, endpoint ep) {
        peer& p = peers_[who];
        p.ep = std::move(ep);
        p.state = peer::ready;
        if (p.timer)
            p.timer->cancel();
        watch(who);
        listen_abort(who);
        flush(p.waiting, {});
    }

    void connect(int to) {
        peers_[to].state = peer::connecting;
        auto self = shared_from_this();
        initiate<void(error_code, endpoint), endpoint_result>(
            w_,
            [self, to](error_code ec, endpoint ep) {
                peer& p = self->peers_[to];
                if (!ec && self->failed_) {
                    // Failed meanwhile: the peer still learns it now (who
                    // this is, then the abort notice), not at its deadline.
                    p.state = peer::done;
                    return introduce_and_abort(self->rank_, std::move(ep));
                }
                if (self->failed_ || self->leaving_) {
                    ep.close();
                    p.state = peer::done;
                    return;
                }
                if (ec) {
                    say(log::severity::info, "group: connecting to rank ", to,
                        " failed: ", ec.message());
                    p.state = peer::done;
                    self->flush(p.waiting, ec);
                    return self->fail(make_error_code(error::group_failed));
                }
                // The accepting rank's answer, its first message here, tells
                // this endpoint's id.
                auto answer = std::make_shared<std::array<std::uint32_t, 2>>();
                recv_whole_tag(ep, answer->data(), sizeof(*answer), intro_tag,
                               [self, to, answer](error_code ec, std::size_t n, tag_t t) {
                                   if (ec || n != sizeof(*answer) || (*answer)[0] != intro_magic ||
                                       (*answer)[1] != static_cast<std::uint32_t>(to))
                                       return;
                                   self->learned(to, t);
                               });
                // Who this is, as the connection's first message.
                auto intro =
                    std::make_shared<std::array<std::uint32_t, 2>>(std::array<std::uint32_t, 2>{
                        intro_magic, static_cast<std::uint32_t>(self->rank_)});
                ep.async_send(boost::asio::buffer(*intro), intro_tag,
                              [intro](error_code, std::size_t) {});
                self->ready(to, std::move(ep));
            },
            [address = addresses_[static_cast<std::size_t>(to)]](worker_impl& w, endpoint_op* op) {
                connect_fabric(w, op, address);
            });
    }

    /// Fails the fabric when the peer's endpoint fails (a peer that left is
    /// not a failure until an operation needs it).
    void watch(int who) {
        peers_[who].ep.async_wait_error([self = shared_from_this(), who](error_code ec) {
            if (self->failed_ || self->leaving_ || ec == boost::asio::error::operation_aborted ||
                ec == boost::asio::error::bad_descriptor)
                return;
            if (is_leave(ec)) {
                say(log::severity::debug, "group: rank ", who, " left");
                return self->peer_left(who);
            }
            say(log::severity::info, "group: rank ", who, " failed: ", ec.message());
            // Nothing more goes to a failed peer (no abort notice, no
            // graceful close waiting for it).
            peer& p = self->peers_[who];
            p.ep.close();
            p.state = peer::done;
            self->fail(make_error_code(error::group_failed));
        });
    }

    void accept_next() {
        if (!acceptor_ || failed_ || leaving_)
            return;
        auto self = shared_from_this();
        initiate<void(error_code, endpoint), endpoint_result>(
            acceptor_,
            [self](error_code ec, endpoint ep) {
                if (ec == boost::asio::error::operation_aborted)
                    return;
                if (ec)
                    say(log::severity::warning, "group: accept failed: ", ec.message());
                else
                    self->identify(std::move(ep));
                self->accept_next();
            },
            [](address_acceptor_impl& a, endpoint_op* op) { address_acceptor_accept(a, op); });
    }

    /// Reads the first message of an accepted connection: which rank made it.
    void identify(endpoint ep) {
        auto held = std::make_shared<endpoint>(std::move(ep));
        auto word = std::make_shared<std::array<std::uint32_t, 2>>();
        ++identifying_;
        recv_whole_tag(
            *held, word->data(), sizeof(*word), intro_tag,
            [self = shared_from_this(), held, word](error_code ec, std::size_t n, tag_t t) {
                --self->identifying_;
                const int who = static_cast<int>((*word)[1]);
                if (ec || n != sizeof(*word) || (*word)[0] != intro_magic || who < 0 ||
                    who >= self->rank_ || self->peers_[who].state == peer::ready || self->failed_ ||
                    self->leaving_) {
                    if (!ec)
                        say(log::severity::warning,
                            "group: closing a connection that is not a lower rank's");
                    held->close();
                    return;
                }
                // The answer: the connecting rank learns its endpoint's id.
                auto answer =
                    std::make_shared<std::array<std::uint32_t, 2>>(std::array<std::uint32_t, 2>{
                        intro_magic, static_cast<std::uint32_t>(self->rank_)});
                held->async_send(boost::asio::buffer(*answer), intro_tag,
                                 [answer](error_code, std::size_t) {});
                self->ready(who, std::move(*held));
                self->learned(who, t);
            });
    }

    void listen_abort(int who) {
        peer& p = peers_[who];
        // A standing receive that may never complete: a `poll` worker does
        // not spin for it.
        initiate<void(error_code, std::size_t, tag_t), tag_recv_result>(
            checked(p.ep),
            [self = shared_from_this(), who](error_code ec, std::size_t, tag_t) {
                if (ec || self->failed_)
                    return;
                say(log::severity::info, "group: rank ", who, " aborted the group");
                self->fail(make_error_code(error::group_failed));
            },
            [word = &p.abort_word](endpoint_impl& e, tag_recv_op* op) {
                op->background = true;
                endpoint_recv(e, op, word, sizeof(*word), abort_tag, ~std::uint32_t{0});
            });
    }

    std::shared_ptr<worker_impl> w_;
    boost::asio::any_io_executor ex_;
    int rank_;
    std::vector<worker_address> addresses_;
    std::vector<peer> peers_;
    std::shared_ptr<address_acceptor_impl> acceptor_;
    std::vector<std::weak_ptr<group_impl>> groups_;
    error_code failed_;
    bool leaving_ = false;
    bool lazy_ = false;
    /// Accepted connections whose first message is still to come.
    int identifying_ = 0;
    std::uint32_t next_id_ = 1;
    int live_ = 0;
};

/// One group: its ranks (fabric ranks), its collectives' queue, its waiters.
class group_impl : public std::enable_shared_from_this<group_impl> {
public:
    group_impl(std::shared_ptr<fabric> f, std::uint32_t id, int rank, std::vector<int> members,
               std::chrono::milliseconds timeout)
        : fabric_(std::move(f)), id_(id), rank_(rank), members_(std::move(members)),
          timeout_(timeout) {}

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return static_cast<int>(members_.size()); }
    const error_code& error() const noexcept { return error_; }
    const std::shared_ptr<fabric>& fab() const noexcept { return fabric_; }
    std::uint32_t id() const noexcept { return id_; }
    int member(int r) const noexcept { return members_[static_cast<std::size_t>(r)]; }
    std::chrono::milliseconds timeout() const noexcept { return timeout_; }
    void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
    const boost::asio::any_io_executor& executor() const noexcept { return fabric_->executor(); }

    template <class Handler, class... Args>
    void post(Handler h, Args... args) {
        boost::asio::post(executor(), boost::asio::append(std::move(h), std::move(args)...));
    }

    /// The group failed (or was closed here) with `ec`.
    void failed(error_code ec) {
        if (error_)
            return;
        error_ = ec;
        auto waiters = std::move(failure_waiters_);
        failure_waiters_.clear();
        for (auto& h : waiters)
            post(std::move(h), ec);
        if (watchdog_)
            watchdog_->cancel();
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            stop_any(r, ec);
    }

    void recv_any(void* data, std::size_t size, std::uint32_t tag, group_from_handler h);
    /// A member may have closed: once all others have, any-source receives end.
    void peer_left() {
        if (!others_left())
            return;
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            stop_any(r, boost::asio::error::eof);
    }
    /// An endpoint's id became known: parked any-source receives resolve.
    void inboxes_changed() {
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            if (r->parked)
                resolve_any(r);
    }

    /// Closed or destroyed here: operations fail with operation_aborted.
    void release() {
        released_ = true;
        failed(boost::asio::error::operation_aborted);
    }
    bool released() const noexcept { return released_; }

    void wait_failure(group_done_handler h) {
        if (error_)
            return post(std::move(h), error_);
        failure_waiters_.push_back(std::move(h));
    }

    void collective(collective_args&& a, group_done_handler h);
    void split(int color, int key, group_new_handler h);

private:
    struct running {
        /// The next collective in the queue, or the next spare state.
        std::unique_ptr<running> next;
        collective_args args;
        /// One of the group's cached plans (`plan_slot`, in use until the
        /// collective finishes: see `plan_entry`), or `own_plan`.
        const coll::plan* plan = nullptr;
        int plan_slot = -1;
        std::unique_ptr<const coll::plan> own_plan;
        std::vector<std::byte> scratch;
        std::vector<std::byte> work;
        std::size_t round = 0;
        int outstanding = 0;
        /// Where the plan's buffers start (`coll::buffer` order: in, out,
        /// scratch) and the tag of its messages, once it has started.
        std::array<std::byte*, 3> base{};
        std::uint32_t tag = 0;
        error_code ec;
        group_done_handler handler;
        std::uint32_t seq = 0;
        /// When it fails the group if still running (a timeout is set).
        std::chrono::steady_clock::time_point deadline{};
        /// Device buffers go through host memory (the arithmetic runs on
        /// the host): the user's `out` when it is device memory, and the
        /// host buffers that stand for `in` and `out` meanwhile.
        void* device_out = nullptr;
        std::size_t device_out_bytes = 0;
        std::vector<std::byte> host_in, host_out;
        /// False while device input is copied to the host: the collective
        /// waits at the head of the queue, so every rank runs them in order.
        bool ready = true;
        /// That copy failed: the collective fails with it.
        error_code local_error;

        /// As made, for the next collective (the handler was moved out, the
        /// buffers recycled and the plan released; `args` is assigned when
        /// it starts).
        void reset() noexcept {
            args.blocks.clear();
            own_plan.reset();
            round = 0;
            outstanding = 0;
            ec = {};
            seq = 0;
            deadline = {};
            device_out = nullptr;
            device_out_bytes = 0;
            if (host_in.capacity() > 0 || host_out.capacity() > 0) {
                std::vector<std::byte>().swap(host_in);
                std::vector<std::byte>().swap(host_out);
            }
            ready = true;
            local_error = {};
        }
    };

    using run_ptr = std::unique_ptr<running>;
    /// The states of finished collectives, kept for the next ones (a list
    /// through `running::next`): a loop of collectives allocates none.
    run_ptr spare_runs_;
    int spare_count_ = 0;
    static constexpr int spare_runs_limit = 2;
    run_ptr new_running() {
        if (!spare_runs_)
            return std::make_unique<running>();
        run_ptr r = std::move(spare_runs_);
        spare_runs_ = std::move(r->next);
        --spare_count_;
        return r;
    }
    /// `r` finished: kept for a next collective (or freed).
    void keep_running(run_ptr r) noexcept {
        if (spare_count_ >= spare_runs_limit)
            return;
        r->reset();
        r->next = std::move(spare_runs_);
        spare_runs_ = std::move(r);
        ++spare_count_;
    }

    /// Makes `r` run on host copies of its device buffers: the input is
    /// copied now (`r` is ready once it arrives), the result after the
    /// collective (`stage_out`). The queue holds `r` until it has finished,
    /// and the copy's completion holds the group.
    void stage_in(running& r, device_staging& s, bool device_in, bool device_out);
    void input_ready(running* r, const error_code& ec);
    /// Copies the result to the user's device `out`, then completes `h`.
    void stage_out(run_ptr r, group_done_handler h);

    /// The bytes `g` names of `r`, a started collective.
    static std::byte* region_ptr(running& r, const coll::region& g) noexcept {
        return r.base[static_cast<std::size_t>(g.buf)] + g.offset;
    }

    /// A pending any-source receive.
    struct any_recv {
        explicit any_recv(group_from_handler h) : handler(std::move(h)) {}
        group_from_handler handler;
        void* data = nullptr;
        std::size_t size = 0;
        std::uint32_t tag = 0;
        /// Cancels the worker's receive.
        boost::asio::cancellation_signal signal;
        /// The worker's receive is in flight.
        bool posted = false;
        /// Its handler's slot asked for cancellation.
        bool cancelled = false;
        /// Why it must end (the group's end, eof), once it must.
        error_code stop;
        /// A message came whose connection's id is not known yet.
        bool parked = false;
        std::size_t parked_bytes = 0;
        tag_t parked_tag = 0;
        bool done = false;
    };

    /// Whether every other member closed gracefully (true in a group of one).
    bool others_left() const noexcept {
        for (int j = 0; j < size(); ++j)
            if (j != rank_ && !fabric_->has_left(member(j)))
                return false;
        return true;
    }
    /// The rank in this group of the member whose connection has the id
    /// `inbox` here, or -1.
    int rank_of_inbox(std::uint32_t inbox) const noexcept {
        const int who = fabric_->peer_of_inbox(inbox);
        if (who < 0)
            return -1;
        const auto it = std::find(members_.begin(), members_.end(), who);
        return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
    }
    void post_any(const std::shared_ptr<any_recv>& r);
    void any_done(const std::shared_ptr<any_recv>& r, error_code ec, std::size_t n, tag_t t);
    void resolve_any(const std::shared_ptr<any_recv>& r);
    void stop_any(const std::shared_ptr<any_recv>& r, error_code why);
    void finish_any(const std::shared_ptr<any_recv>& r, error_code ec, int from, std::size_t n);

    error_code validate(const collective_args& a, coll::plan& p) const;

    /// The plans of the last few distinct collectives: a loop of the same
    /// collective computes (and allocates) its plan once. A plan depends on
    /// the arguments below (with this rank and the group's size); arguments
    /// that gave a plan were valid. An entry that queued collectives use
    /// (`users`) is not replaced: they point to its plan.
    struct plan_entry {
        collective_args::kind_type kind{};
        int root = 0;
        std::size_t in_bytes = 0, out_bytes = 0;
        datatype type{};
        std::vector<std::size_t> blocks;
        std::unique_ptr<const coll::plan> plan;
        int users = 0;
        bool matches(const collective_args& a) const noexcept {
            return plan && kind == a.kind && root == a.root && in_bytes == a.in_bytes &&
                   out_bytes == a.out_bytes && type == a.type && blocks == a.blocks;
        }
    };
    /// The slot of the cached plan for `a`, or -1.
    int cached_plan(const collective_args& a) const noexcept {
        for (std::size_t i = 0; i < plans_.size(); ++i)
            if (plans_[i].matches(a))
                return static_cast<int>(i);
        return -1;
    }
    /// Caches `p` for `a` in a slot no collective uses, and returns the
    /// slot; -1 (and `p` left alone) when every slot is in use.
    int remember_plan(const collective_args& a, std::unique_ptr<const coll::plan>& p) {
        for (std::size_t n = 0; n < plans_.size(); ++n) {
            const std::size_t i = next_plan_++ % plans_.size();
            plan_entry& e = plans_[i];
            if (e.users > 0)
                continue;
            e.kind = a.kind;
            e.root = a.root;
            e.in_bytes = a.in_bytes;
            e.out_bytes = a.out_bytes;
            e.type = a.type;
            e.blocks = a.blocks;
            e.plan = std::move(p);
            return static_cast<int>(i);
        }
        return -1;
    }
    /// `r` runs on the plan of `slot` (-1: `own`, which it then owns).
    void use_plan(running& r, int slot, std::unique_ptr<const coll::plan> own) noexcept {
        if (slot < 0) {
            r.own_plan = std::move(own);
            r.plan = r.own_plan.get();
            return;
        }
        ++plans_[static_cast<std::size_t>(slot)].users;
        r.plan_slot = slot;
        r.plan = plans_[static_cast<std::size_t>(slot)].plan.get();
    }
    /// `r` is done with its plan.
    void release_plan(running& r) noexcept {
        if (r.plan_slot >= 0)
            --plans_[static_cast<std::size_t>(r.plan_slot)].users;
        r.plan_slot = -1;
        r.plan = nullptr;
    }
    std::array<plan_entry, 4> plans_;
    unsigned next_plan_ = 0;
    /// The buffers of finished collectives, kept for the next ones (up to
    /// `spare_limit` bytes each): a loop of small reductions allocates none.
    std::vector<std::byte> spare_scratch_, spare_work_;
    static constexpr std::size_t spare_limit = std::size_t{1} << 20;
    /// Keeps the larger of `spare` and `used` within the limit; `used` ends
    /// with no memory.
    static void keep_spare(std::vector<std::byte>& spare, std::vector<std::byte>& used) noexcept {
        if (used.capacity() == 0)
            return;
        if (used.capacity() > spare.capacity() && used.capacity() <= spare_limit) {
            used.clear();
            spare.swap(used);
        }
        std::vector<std::byte>().swap(used);
    }
    /// `r` finished: its buffers go back to the spares (or are freed).
    void recycle(running& r) noexcept {
        keep_spare(spare_scratch_, r.scratch);
        keep_spare(spare_work_, r.work);
    }
    /// The completion of one transfer of the running collective `run`. (Its
    /// operation comes from the worker's pool, like every operation's: a
    /// round's transfers are in flight at once.)
    struct transfer_done {
        std::shared_ptr<group_impl> self;
        running* run;
        std::size_t expected;
        bool send;
        void operator()(error_code ec, std::size_t n);
    };
    /// Starts the collective at the head of the queue, if it is ready. A
    /// collective may end inside its start (its transfers all sent at once):
    /// the next one then starts from the loop here, not from a nested call.
    void start_next();
    void start_head();
    void arm_watchdog(std::chrono::steady_clock::time_point at);
    /// Starts the transfers of `r`'s rounds until one must wait; ends `r`
    /// when none is left. `in_start`: called by the collective's start.
    void run_round(running& r, bool in_start);
    /// `rd`, `r`'s round whose transfers have all completed, is done: its
    /// combines and copies (most rounds have none), and `r` goes on to the
    /// next round.
    void finish_round(running& r, const coll::round& rd) {
        ++r.round;
        if (!rd.combines.empty() || !rd.copies.empty())
            combine_and_copy(r, rd);
    }
    void combine_and_copy(running& r, const coll::round& rd);
    /// Ends `r`, the collective at the head of the queue, and starts the next.
    void finish(running& r, error_code ec);
    /// `r` ended inside its start (its transfers all sent at once) within
    /// the initiating call, or after `max_chained` others did in one loop of
    /// start_next: it ends from the worker's next pass, as an operation
    /// completed at once does. Its handler never runs inside the call that
    /// started it, and a chain of collectives that end at once (each started
    /// by the previous one's handler) gives the thread back to the
    /// io_context's other handlers, and UCX its progress, every few calls.
    void defer_finish(running& r);
    static constexpr int max_chained = 16;
    /// The completion of that deferral.
    struct deferred_end {
        std::shared_ptr<group_impl> self;
        running* run;
        void operator()(const error_code& ec) {
            const error_code& failed = self->fabric_->failed();
            self->finish(*run, failed ? failed : ec);
        }
    };

    std::shared_ptr<fabric> fabric_;
    std::uint32_t id_;
    int rank_;
    std::vector<int> members_;
    std::chrono::milliseconds timeout_;
    error_code error_;
    std::vector<group_done_handler> failure_waiters_;
    /// The collectives started and not finished, in order: a list through
    /// `running::next` (each state is made once and reused: see
    /// `new_running`).
    class run_queue {
    public:
        run_queue() = default;
        run_queue(const run_queue&) = delete;
        run_queue& operator=(const run_queue&) = delete;
        ~run_queue() {
            // One at a time: a long queue is not destroyed by recursion.
            while (head_)
                head_ = std::move(head_->next);
        }
        bool empty() const noexcept { return !head_; }
        running& front() const noexcept { return *head_; }
        void push_back(run_ptr r) noexcept {
            running* last = r.get();
            (tail_ ? tail_->next : head_) = std::move(r);
            tail_ = last;
        }
        run_ptr pop_front() noexcept {
            run_ptr r = std::move(head_);
            head_ = std::move(r->next);
            if (!head_)
                tail_ = nullptr;
            return r;
        }

    private:
        run_ptr head_;
        running* tail_ = nullptr;
    };
    run_queue queue_;
    bool busy_ = false;
    /// Inside start_next's loop; another start was asked for meanwhile.
    bool starting_ = false;
    bool restart_ = false;
    /// Collectives ended inside their start in this loop of start_next.
    int chained_ = 0;
    std::uint32_t seq_ = 0;
    /// Watches the running collective's deadline (see arm_watchdog).
    std::shared_ptr<boost::asio::steady_timer> watchdog_;
    bool watchdog_armed_ = false;
    std::uint64_t watchdog_gen_ = 0;
    std::vector<std::shared_ptr<any_recv>> any_;
    bool released_ = false;
    /// Inside `collective()`: completions are posted.
    bool initiating_ = false;
};

void fabric::fail(error_code ec) {
    if (failed_)
        return;
    failed_ = ec;
    say(log::severity::info, "group: failed: ", ec.message());
    for (auto& wg : groups_)
        if (auto g = wg.lock())
            g->failed(ec);
    if (acceptor_)
        address_acceptor_close(*acceptor_);
    for (auto& p : peers_) {
        flush(p.waiting, ec);
        if (p.timer)
            p.timer->cancel();
        if (p.state == peer::ready) {
            // Tell the peer (its failure reaches the ranks it talks to in
            // turn), then force-close: the operations pending on the
            // endpoint end at once, whatever the peer does.
            send_abort(std::move(p.ep));
        }
        p.state = peer::done;
    }
}

void fabric::learned(int who, tag_t t) {
    peer& p = peers_[who];
    p.inbox = inbox_of(t);
    p.has_inbox = true;
    for (auto& wg : groups_)
        if (auto g = wg.lock())
            g->inboxes_changed();
}

void fabric::peer_left(int who) {
    peers_[who].left = true;
    for (auto& wg : groups_)
        if (auto g = wg.lock())
            g->peer_left();
}

void fabric::leave(std::function<void()> done) {
    // Calls `done` once every close below has completed.
    auto pending = std::make_shared<int>(1);
    auto one_done = [pending, done = std::move(done), ex = ex_]() {
        if (--*pending == 0 && done)
            boost::asio::post(ex, done);
    };
    if (!leaving_ && !failed_) {
        leaving_ = true;
        if (acceptor_)
            address_acceptor_close(*acceptor_);
        for (auto& p : peers_) {
            flush(p.waiting, boost::asio::error::operation_aborted);
            if (p.timer)
                p.timer->cancel();
            if (p.state == peer::ready) {
                auto ep = std::make_shared<endpoint>(std::move(p.ep));
                ++*pending;
                ep->async_close([ep, one_done](error_code) { one_done(); });
            }
            p.state = peer::done;
        }
    }
    one_done();
}

// --- collectives ---

error_code group_impl::validate(const collective_args& a, coll::plan& p) const {
    using k = collective_args;
    const int n = size();
    if (a.kind != k::barrier && a.kind != k::allgather && a.kind != k::allgatherv &&
        a.kind != k::allreduce && a.kind != k::alltoall && (a.root < 0 || a.root >= n))
        return make_error_code(error::invalid_rank);
    const auto invalid = make_error_code(boost::asio::error::invalid_argument);
    const std::size_t es = coll::element_size(a.type);
    switch (a.kind) {
    case k::barrier:
        p = coll::barrier(rank_, n);
        break;
    case k::broadcast:
        p = coll::broadcast(rank_, n, a.root, a.out_bytes);
        break;
    case k::gather:
        if (rank_ == a.root && a.out_bytes != a.in_bytes * static_cast<std::size_t>(n))
            return invalid;
        p = coll::gather(rank_, n, a.root, a.in_bytes);
        break;
    case k::allgather:
        if (a.out_bytes != a.in_bytes * static_cast<std::size_t>(n))
            return invalid;
        {
            std::vector<std::size_t> blocks(static_cast<std::size_t>(n), a.in_bytes);
            p = coll::allgatherv(rank_, n, blocks);
        }
        break;
    case k::allgatherv:
        if (a.blocks.size() != static_cast<std::size_t>(n) ||
            a.blocks[static_cast<std::size_t>(rank_)] != a.in_bytes ||
            a.out_bytes != std::accumulate(a.blocks.begin(), a.blocks.end(), std::size_t{0}))
            return invalid;
        p = coll::allgatherv(rank_, n, a.blocks);
        break;
    case k::reduce:
        if (a.in_bytes % es != 0 || (rank_ == a.root && a.out_bytes != a.in_bytes))
            return invalid;
        p = coll::reduce(rank_, n, a.root, a.in_bytes / es, es);
        break;
    case k::allreduce:
        if (a.in_bytes % es != 0 || a.out_bytes != a.in_bytes)
            return invalid;
        p = coll::allreduce(rank_, n, a.in_bytes / es, es);
        break;
    case k::alltoall:
        if (a.in_bytes % static_cast<std::size_t>(n) != 0 || a.out_bytes != a.in_bytes)
            return invalid;
        p = coll::alltoall(rank_, n, a.in_bytes / static_cast<std::size_t>(n));
        break;
    }
    return {};
}

void group_impl::collective(collective_args&& a, group_done_handler h) {
    if (error_)
        return post(std::move(h), error_);
    int slot = cached_plan(a);
    std::unique_ptr<const coll::plan> own;
    if (slot < 0) {
        auto p = std::make_unique<coll::plan>();
        if (auto ec = validate(a, *p))
            return post(std::move(h), ec);
        own = std::move(p);
        slot = remember_plan(a, own);
    }
    auto r = new_running();
    use_plan(*r, slot, std::move(own));
    // Device memory (where the library was built with CUDA and a device
    // exists): the memory type of each buffer, found once.
    device_staging* staging = staging_of(*fabric_->worker());
    const bool device_in = staging && a.in_bytes > 0 && staging->is_device(a.in);
    const bool device_out = staging && a.out_bytes > 0 && staging->is_device(a.out);
    r->args = std::move(a);
    r->handler.swap(h);
    r->seq = seq_++;
    if (device_in || device_out) [[unlikely]]
        stage_in(*r, *staging, device_in, device_out);
    queue_.push_back(std::move(r));
    if (!busy_) {
        // A collective with nothing to send (one rank) ends in here: its
        // handler is then posted, not run inside the initiating call.
        initiating_ = true;
        start_next();
        initiating_ = false;
    }
}

void group_impl::start_next() {
    if (starting_) {
        restart_ = true; // the loop below starts it
        return;
    }
    struct guard {
        bool& flag;
        ~guard() { flag = false; }
    } g{starting_};
    starting_ = true;
    chained_ = 0;
    do {
        restart_ = false;
        start_head();
    } while (restart_);
}

void group_impl::start_head() {
    if (queue_.empty() || !queue_.front().ready) {
        busy_ = false;
        return;
    }
    busy_ = true;
    // The queue holds it until `finish` (its transfers never complete
    // inside the calls that start them).
    running& r = queue_.front();
    if (error_)
        return finish(r, error_);
    if (r.local_error)
        return finish(r, r.local_error);
    if (r.plan->scratch_bytes > 0) {
        r.scratch.swap(spare_scratch_);
        r.scratch.resize(r.plan->scratch_bytes);
    }
    // A rank whose `out` is not part of the result (a reduce's non-root)
    // works in a buffer of its own.
    if (r.args.out_bytes < r.plan->out_bytes) {
        r.work.swap(spare_work_);
        r.work.resize(r.plan->out_bytes);
    }
    r.base = {const_cast<std::byte*>(static_cast<const std::byte*>(r.args.in)),
              r.work.empty() ? static_cast<std::byte*>(r.args.out) : r.work.data(),
              r.scratch.data()};
    r.tag = collective_tag(id_, r.seq);
    for (const auto& c : r.plan->prologue) {
        std::byte* from = region_ptr(r, c.from);
        std::byte* to = region_ptr(r, c.to);
        if (from != to && c.from.length > 0)
            std::memmove(to, from, c.from.length);
    }
    if (timeout_.count() > 0) {
        r.deadline = std::chrono::steady_clock::now() + timeout_;
        // Earlier than the armed expiry: the timeout was shortened.
        if (!watchdog_armed_ || r.deadline < watchdog_->expiry())
            arm_watchdog(r.deadline);
    }
    run_round(r, true);
}

// One timer watches the deadlines of the collectives, one at a time: it is
// armed for the running collective's deadline when none is pending, and on
// expiry either fails the group or is armed again for the deadline of the
// collective running then. Back-to-back collectives shorter than the timeout
// start and cancel no timer (each would cost the reactor a timerfd update and
// a handler).
void group_impl::arm_watchdog(std::chrono::steady_clock::time_point at) {
    if (!watchdog_)
        watchdog_ = std::make_shared<boost::asio::steady_timer>(executor());
    watchdog_->expires_at(at); // cancels the wait of an earlier arming: stale below
    watchdog_armed_ = true;
    watchdog_->async_wait([weak = weak_from_this(), gen = ++watchdog_gen_](error_code ec) {
        auto self = weak.lock();
        if (!self || gen != self->watchdog_gen_)
            return;
        self->watchdog_armed_ = false;
        if (ec || self->error_ || !self->busy_ || self->queue_.empty())
            return;
        const running& r = self->queue_.front();
        if (r.deadline > std::chrono::steady_clock::now())
            return self->arm_watchdog(r.deadline);
        say(log::severity::info, "group: collective ", r.seq, " passed its deadline");
        self->fabric_->fail(make_error_code(error::group_timeout));
    });
}

void group_impl::run_round(running& r, bool in_start) {
    while (r.round < r.plan->rounds.size()) {
        const coll::round& rd = r.plan->rounds[r.round];
        r.outstanding = static_cast<int>(rd.transfers.size());
        const std::uint32_t tag = r.tag;
        for (const auto& t : rd.transfers) {
            std::byte* data = region_ptr(r, t.data);
            const int peer = member(t.peer);
            // A small send UCX completes inside the call, or a message
            // already here, is done: no completion to wait for.
            if (t.send && fabric_->send_now(peer, data, t.data.length, tag)) {
                --r.outstanding;
                continue;
            }
            // The handler holds the group; the group holds `r` at the head
            // of its queue until every transfer of `r` has completed.
            const auto done = [&] {
                return transfer_done{shared_from_this(), &r, t.data.length, t.send};
            };
            std::size_t length = 0;
            if (t.send) {
                fabric_->send(peer, data, t.data.length, tag, done());
            } else if (fabric_->recv_now(peer, data, t.data.length, tag, done, length)) {
                if (length != t.data.length && !r.ec) [[unlikely]]
                    r.ec = make_error_code(error::collective_mismatch);
                --r.outstanding;
            }
        }
        // The others complete later, never inside the calls that started
        // them: the last one goes on.
        if (r.outstanding > 0)
            return;
        if (r.ec) [[unlikely]]
            return finish(r, r.ec);
        finish_round(r, rd);
    }
    if (in_start && (initiating_ || ++chained_ > max_chained))
        return defer_finish(r);
    finish(r, {});
}

void group_impl::defer_finish(running& r) {
    worker_impl& w = *fabric_->worker();
    using op_type = handler_operation<deferred_end, worker_core::executor_type, error_result<>>;
    operation* op = op_type::create(deferred_end{shared_from_this(), &r}, w.get_executor(),
                                    w.operation_pool(w.running_in_owner()));
    w.start(op);
    w.complete(op, {});
}

void group_impl::transfer_done::operator()(error_code ec, std::size_t n) {
    running& r = *run;
    if (!ec && !send && n != expected)
        ec = make_error_code(error::collective_mismatch);
    if (ec) [[unlikely]] {
        if (ec == errc::message_truncated)
            ec = make_error_code(error::collective_mismatch);
        if (!r.ec)
            r.ec = ec;
    }
    if (--r.outstanding > 0)
        return;
    if (r.ec)
        return self->finish(r, r.ec);
    self->finish_round(r, r.plan->rounds[r.round]);
    self->run_round(r, false);
}

void group_impl::combine_and_copy(running& r, const coll::round& rd) {
    if (!rd.combines.empty()) {
        const std::size_t es = coll::element_size(r.args.type);
        for (const auto& c : rd.combines)
            coll::reduce_elements(r.args.type, r.args.op, region_ptr(r, c.lower),
                                  region_ptr(r, c.higher), region_ptr(r, c.out), c.out.length / es);
    }
    for (const auto& c : rd.copies)
        if (c.from.length > 0)
            std::memmove(region_ptr(r, c.to), region_ptr(r, c.from), c.from.length);
}

void group_impl::finish(running& r, error_code ec) {
    if (ec) {
        // No partial result: the group is unusable after a failed collective.
        if (!fabric_->failed())
            fabric_->fail(ec == error::group_timeout ? ec : make_error_code(error::group_failed));
        if (ec != error::collective_mismatch)
            ec = error_ ? error_ : fabric_->failed();
        if (r.local_error)
            ec = r.local_error;
    }
    run_ptr done = queue_.pop_front(); // `r`
    recycle(r);
    release_plan(r);
    auto h = std::move(r.handler);
    if (!ec && r.device_out) {
        stage_out(std::move(done), std::move(h));
        return start_next();
    }
    const bool direct = r.args.direct_handler;
    // Kept before the handler runs: the collective it starts reuses it.
    keep_running(std::move(done));
    if (initiating_)
        boost::asio::post(executor(), boost::asio::append(std::move(h), ec));
    else if (direct)
        std::move(h)(ec); // what dispatch would do, without its type-erased trip
    else
        boost::asio::dispatch(boost::asio::append(std::move(h), ec));
    start_next();
}

// --- device buffers ---

void group_impl::stage_in(running& r, device_staging& s, bool device_in, bool device_out) {
    collective_args& a = r.args;
    const bool in_place = a.in == a.out;
    void* const user_in = const_cast<void*>(a.in);
    if (device_out) {
        r.device_out = a.out;
        r.device_out_bytes = a.out_bytes;
        r.host_out.resize(a.out_bytes);
        a.out = r.host_out.data();
    }
    // What the collective reads: `in`, or a broadcast root's `out`.
    void* from = nullptr;
    std::size_t bytes = 0;
    std::byte* to = nullptr;
    if (device_in) {
        if (in_place && device_out) {
            to = r.host_out.data();
        } else {
            r.host_in.resize(a.in_bytes);
            to = r.host_in.data();
        }
        a.in = to;
        from = user_in;
        bytes = a.in_bytes;
    } else if (device_out && a.kind == collective_args::broadcast && a.root == rank_) {
        from = r.device_out;
        bytes = r.device_out_bytes;
        to = r.host_out.data();
    }
    if (!from)
        return;
    r.ready = false;
    s.copy_through(
        staging_direction::outgoing, from, bytes,
        [to](void* host, std::size_t n, staging_operation::transfer_completion done) {
            std::memcpy(to, host, n);
            done(error_code(), n);
        },
        [self = shared_from_this(), r = &r](const error_code& ec) { self->input_ready(r, ec); });
}

void group_impl::input_ready(running* r, const error_code& ec) {
    r->ready = true;
    if (ec) {
        say(log::severity::warning, "group: collective ", r->seq,
            ": copying device input failed: ", ec.message());
        r->local_error = ec;
    }
    if (!busy_ && !queue_.empty() && &queue_.front() == r)
        start_next();
}

void group_impl::stage_out(run_ptr done, group_done_handler h) {
    std::shared_ptr<running> r(std::move(done)); // for the copy's step below
    auto hp = std::make_shared<group_done_handler>(std::move(h));
    auto complete = [hp](const error_code& ec) {
        boost::asio::dispatch(boost::asio::append(std::move(*hp), ec));
    };
    device_staging* s = staging_of(*fabric_->worker());
    if (!s)
        return post(std::move(*hp), error_code(boost::asio::error::operation_aborted));
    s->copy_through(
        staging_direction::incoming, r->device_out, r->device_out_bytes,
        [r](void* host, std::size_t n, staging_operation::transfer_completion done) {
            std::memcpy(host, r->host_out.data(), n);
            done(error_code(), n);
        },
        std::move(complete));
}

// --- receives from any rank ---

void group_impl::recv_any(void* data, std::size_t size, std::uint32_t tag, group_from_handler h) {
    if (error_)
        return post(std::move(h), error_, any_rank, std::size_t{0});
    if (tag > group_max_tag)
        return post(std::move(h), make_error_code(boost::asio::error::invalid_argument), any_rank,
                    std::size_t{0});
    auto r = std::make_shared<any_recv>(std::move(h));
    r->data = data;
    r->size = size;
    r->tag = user_tag(id_, tag);
    auto slot = boost::asio::get_associated_cancellation_slot(r->handler);
    if (slot.is_connected())
        slot.assign([weak = std::weak_ptr<any_recv>(r)](boost::asio::cancellation_type type) {
            using ct = boost::asio::cancellation_type;
            auto r = weak.lock();
            if (!r || r->done || (type & (ct::terminal | ct::partial | ct::total)) == ct::none)
                return;
            r->cancelled = true;
            if (r->posted)
                r->signal.emit(ct::terminal);
        });
    any_.push_back(r);
    // Every other member may send: the higher ones wait for this rank's
    // connection (made on first use).
    for (int m : members_)
        fabric_->want(m);
    post_any(r);
    // No other member can send any more: messages they sent before are
    // taken by the receive just posted, else it ends (after the submission,
    // which may have been dispatched).
    if (others_left())
        boost::asio::post(executor(), [self = shared_from_this(), r] {
            if (self->others_left())
                self->stop_any(r, boost::asio::error::eof);
        });
}

void group_impl::post_any(const std::shared_ptr<any_recv>& r) {
    r->posted = true;
    initiate<void(error_code, std::size_t, tag_t), tag_recv_result>(
        fabric_->worker(),
        boost::asio::bind_cancellation_slot(
            r->signal.slot(),
            [self = shared_from_this(), r](error_code ec, std::size_t n, tag_t t) {
                self->any_done(r, ec, n, t);
            }),
        [data = r->data, size = r->size, tag = r->tag](worker_impl& w, tag_recv_op* op) {
            // The group's tag in the low half, from any of the fabric's
            // connections (the fabric bit in the high half).
            // Through the submit function: a device buffer is staged.
            detail::tag_recv(w, op, data, size, fabric_tag_bit | tag,
                             fabric_tag_bit | tag_t{0xFFFFFFFFu});
        });
}

void group_impl::any_done(const std::shared_ptr<any_recv>& r, error_code ec, std::size_t n,
                          tag_t t) {
    r->posted = false;
    if (!ec) {
        r->parked = true;
        r->parked_bytes = n;
        r->parked_tag = t;
        return resolve_any(r);
    }
    // The group's end wins over what its cancellation caused; after eof, a
    // message that was consumed (too large) is still reported.
    if (r->stop &&
        (r->stop != boost::asio::error::eof || ec == boost::asio::error::operation_aborted))
        ec = r->stop;
    finish_any(r, ec, any_rank, 0);
}

void group_impl::resolve_any(const std::shared_ptr<any_recv>& r) {
    const bool ended = r->stop && r->stop != boost::asio::error::eof;
    const int from = rank_of_inbox(inbox_of(r->parked_tag));
    if (from >= 0) {
        // A member's message: delivered, even when cancelled meanwhile (it
        // matched first), or after every other rank left (sent before).
        r->parked = false;
        if (ended)
            return finish_any(r, r->stop, any_rank, 0);
        return finish_any(r, {}, from, r->parked_bytes);
    }
    // A connection whose id is still to come (its first message, which
    // tells it, precedes this one) waits for it, unless the receive ends.
    if (!fabric_->knows_every_inbox() && !r->stop)
        return;
    r->parked = false;
    if (!r->stop)
        say(log::severity::warning,
            "group: a receive from any rank took a message of a connection of no member; "
            "dropped");
    if (r->stop)
        return finish_any(r, r->stop, any_rank, 0);
    if (r->cancelled)
        return finish_any(r, make_error_code(boost::asio::error::operation_aborted), any_rank, 0);
    post_any(r);
}

void group_impl::stop_any(const std::shared_ptr<any_recv>& r, error_code why) {
    if (r->done || r->stop)
        return;
    r->stop = why;
    if (r->posted)
        r->signal.emit(boost::asio::cancellation_type::terminal);
    else if (r->parked)
        resolve_any(r);
}

void group_impl::finish_any(const std::shared_ptr<any_recv>& r, error_code ec, int from,
                            std::size_t n) {
    r->done = true;
    std::erase(any_, r);
    auto slot = boost::asio::get_associated_cancellation_slot(r->handler);
    if (slot.is_connected())
        slot.clear();
    // Posted: this may run inside failed(), called from an initiating
    // function (abort) or from the fabric's failure.
    auto h = std::move(r->handler);
    post(std::move(h), ec, from, n);
}

// --- split ---

void group_impl::split(int color, int key, group_new_handler h) {
    if (error_)
        return post(std::move(h), error_, group());
    // Every rank's (color, key, next free id), gathered everywhere.
    const int n = size();
    auto mine = std::make_shared<std::array<std::int32_t, 3>>(
        std::array<std::int32_t, 3>{color, key, static_cast<std::int32_t>(fabric_->next_id())});
    auto all = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(3 * n));
    collective_args a;
    a.kind = collective_args::allgather;
    a.in = mine->data();
    a.in_bytes = sizeof(*mine);
    a.out = all->data();
    a.out_bytes = all->size() * sizeof(std::int32_t);
    auto self = shared_from_this();
    auto hp = std::make_shared<group_new_handler>(std::move(h));
    collective(std::move(a), [self, mine, all, hp, color](error_code ec) {
        auto h = std::move(*hp);
        if (ec)
            return boost::asio::dispatch(boost::asio::append(std::move(h), ec, group()));
        const int n = self->size();
        std::uint32_t id = 0;
        std::vector<std::pair<std::pair<int, int>, int>> members; // (key, rank) -> fabric rank
        for (int i = 0; i < n; ++i) {
            const auto* e = all->data() + 3 * i;
            id = std::max(id, static_cast<std::uint32_t>(e[2]));
            if (color >= 0 && e[0] == color)
                members.push_back({{e[1], i}, self->member(i)});
        }
        self->fabric_->use_id(id);
        if (color < 0)
            return boost::asio::dispatch(boost::asio::append(std::move(h), error_code(), group()));
        if (id > max_group_id)
            return boost::asio::dispatch(
                boost::asio::append(std::move(h), make_error_code(errc::exceeds_limit), group()));
        std::sort(members.begin(), members.end());
        std::vector<int> ranks;
        int my_rank = 0;
        for (const auto& m : members) {
            if (m.first.second == self->rank_)
                my_rank = static_cast<int>(ranks.size());
            ranks.push_back(m.second);
        }
        auto child = std::make_shared<group_impl>(self->fabric_, id, my_rank, std::move(ranks),
                                                  self->timeout_);
        self->fabric_->add_group(child);
        boost::asio::dispatch(
            boost::asio::append(std::move(h), error_code(), access::construct<group>(child)));
    });
}

// --- the functions of <ucx/group.hpp> ---

namespace {

/// The state of one join: the store reads in flight.
struct joining {
    std::shared_ptr<worker_impl> w;
    std::unique_ptr<prefix_store> keys;
    group_options options;
    group_new_handler handler;
    std::vector<worker_address> addresses;
    std::shared_ptr<fabric> fab;
    int pending = 0;
    error_code ec;
    std::shared_ptr<boost::asio::steady_timer> timer;
    bool done = false;

    void finish(error_code e) {
        if (done)
            return;
        done = true;
        if (timer)
            timer->cancel();
        if (e) {
            if (fab)
                fab->fail(e);
            return boost::asio::dispatch(boost::asio::append(std::move(handler), e, group()));
        }
        auto g = std::make_shared<group_impl>(
            fab, 0, options.rank,
            [&] {
                std::vector<int> m(static_cast<std::size_t>(options.size));
                std::iota(m.begin(), m.end(), 0);
                return m;
            }(),
            options.timeout);
        fab->add_group(g);
        fab->set_lazy(options.lazy_connections);
        fab->start();
        boost::asio::dispatch(
            boost::asio::append(std::move(handler), error_code(), access::construct<group>(g)));
    }
};

} // namespace

void group_join(const std::shared_ptr<worker_impl>& w, store& s, group_options options,
                group_new_handler h) {
    const auto& ex = core_of(*w).get_executor();
    if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
        return boost::asio::post(
            ex, boost::asio::append(std::move(h), make_error_code(error::invalid_rank), group()));
    auto j = std::make_shared<joining>();
    j->w = w;
    j->keys = std::make_unique<prefix_store>(s, options.name);
    j->options = std::move(options);
    j->handler.swap(h);
    j->addresses.resize(static_cast<std::size_t>(j->options.size));
    j->fab = std::make_shared<fabric>(
        w, j->options.rank, std::vector<worker_address>(static_cast<std::size_t>(j->options.size)));
    error_code ec;
    j->fab->open(ec);
    if (ec) {
        j->fab.reset();
        return boost::asio::post(ex, [j, ec] { j->finish(ec); });
    }
    if (j->options.timeout.count() > 0) {
        j->timer = std::make_shared<boost::asio::steady_timer>(ex, j->options.timeout);
        j->timer->async_wait([j](error_code e) {
            if (!e)
                j->finish(make_error_code(error::group_timeout));
        });
    }
    // Publish, then read every rank's address.
    j->keys->async_set(
        "addr/" + std::to_string(j->options.rank), w->address().serialize(),
        boost::asio::bind_executor(ex, [j](error_code ec) {
            if (ec || j->done)
                return j->finish(ec);
            j->pending = j->options.size;
            for (int r = 0; r < j->options.size; ++r)
                j->keys->async_get(
                    "addr/" + std::to_string(r),
                    boost::asio::bind_executor(core_of(*j->w).get_executor(),
                                               [j, r](error_code ec, store::value_type v) {
                                                   if (!ec)
                                                       j->addresses[static_cast<std::size_t>(r)] =
                                                           worker_address::deserialize(v, ec);
                                                   if (ec && !j->ec)
                                                       j->ec = ec;
                                                   if (--j->pending > 0)
                                                       return;
                                                   if (j->ec)
                                                       return j->finish(j->ec);
                                                   j->fab->set_addresses(std::move(j->addresses));
                                                   j->finish({});
                                               }));
        }));
}

namespace {

/// Why a message to or from rank `peer` with `tag` cannot start, if it cannot.
error_code check_message(const group_impl& g, int peer, std::uint32_t tag) {
    if (g.error())
        return g.error();
    if (peer < 0 || peer >= g.size())
        return make_error_code(error::invalid_rank);
    if (tag > group_max_tag)
        return make_error_code(boost::asio::error::invalid_argument);
    return {};
}

/// A fabric step completing `h`; it holds the group (and so its fabric).
step_handler completing(const std::shared_ptr<group_impl>& g, group_bytes_handler h) {
    auto hp = std::make_shared<group_bytes_handler>(std::move(h));
    return [hp, g](error_code ec, std::size_t n) {
        boost::asio::dispatch(boost::asio::append(std::move(*hp), ec, n));
    };
}

} // namespace

void group_send(const std::shared_ptr<group_impl>& g, int to, const void* data, std::size_t size,
                std::uint32_t tag, group_bytes_handler h) {
    if (auto ec = check_message(*g, to, tag))
        return g->post(std::move(h), ec, std::size_t{0});
    g->fab()->send(g->member(to), data, size, user_tag(g->id(), tag), completing(g, std::move(h)));
}

void group_recv(const std::shared_ptr<group_impl>& g, int from, void* data, std::size_t size,
                std::uint32_t tag, group_bytes_handler h) {
    if (auto ec = check_message(*g, from, tag))
        return g->post(std::move(h), ec, std::size_t{0});
    g->fab()->recv(g->member(from), data, size, user_tag(g->id(), tag),
                   completing(g, std::move(h)));
}

void group_recv_any(const std::shared_ptr<group_impl>& g, void* data, std::size_t size,
                    std::uint32_t tag, group_from_handler h) {
    g->recv_any(data, size, tag, std::move(h));
}

void group_collective(const std::shared_ptr<group_impl>& g, collective_args&& args,
                      group_done_handler h) {
    g->collective(std::move(args), std::move(h));
}

void group_split(const std::shared_ptr<group_impl>& g, int color, int key, group_new_handler h) {
    g->split(color, key, std::move(h));
}

void group_wait_failure(const std::shared_ptr<group_impl>& g, group_done_handler h) {
    g->wait_failure(std::move(h));
}

void group_close(const std::shared_ptr<group_impl>& g, group_done_handler h) {
    if (g->released())
        return g->post(std::move(h), error_code(boost::asio::error::bad_descriptor));
    g->release();
    auto hp = std::make_shared<group_done_handler>(std::move(h));
    g->fab()->group_gone([hp] { std::move (*hp)(error_code()); });
}

void group_release(group_impl& g) noexcept {
    if (g.released())
        return;
    g.release();
    g.fab()->group_gone({});
}

void group_abort(group_impl& g) noexcept {
    g.failed(boost::asio::error::operation_aborted);
    g.fab()->fail(make_error_code(error::group_failed));
}

int group_rank(const group_impl& g) noexcept {
    return g.rank();
}
int group_connections(const group_impl& g) noexcept {
    return g.fab()->connections();
}
int group_size(const group_impl& g) noexcept {
    return g.size();
}
error_code group_error(const group_impl& g) noexcept {
    return g.error();
}
boost::asio::any_io_executor group_executor(const group_impl& g) noexcept {
    return g.executor();
}
void group_set_timeout(group_impl& g, std::chrono::milliseconds t) noexcept {
    g.set_timeout(t);
}
std::chrono::milliseconds group_timeout(const group_impl& g) noexcept {
    return g.timeout();
}

} // namespace ucx::detail
