// Internal: the connections of one join (group/fabric_fsm.hpp says how they
// are made, used, failed and left), as an I/O object: `fabric_fsm` decides,
// `fabric` executes its actions over UCX and holds the operations that wait
// for a connection.
//
// Tags (32 bits, per endpoint): bit 31 tells the library's messages
// (collectives) from the application's; bits 30 to 18 are the group's id
// (0 for the joined group, a fresh one for each split); bits 17 to 0 the
// application's tag, or the collective's sequence number. Messages between
// two ranks arrive in order, so the rounds of a collective need no tag of
// their own. Tag 0xFFFFFFFF (id 8191) carries the introduction (the
// connecting rank's, then the accepting rank's answer), 0xFFFFFFFE the abort
// notice.
#pragma once

#include <ucx/acceptor.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/group.hpp>
#include <ucx/log.hpp>
#include <ucx/tag_type.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "group/fabric_fsm.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <vector>

namespace ucx::detail {

namespace group_wire {
constexpr std::uint32_t library_bit = 1u << 31;
constexpr int id_shift = 18;
constexpr std::uint32_t max_group_id = 8190;
constexpr std::uint32_t intro_tag = 0xFFFFFFFFu;
constexpr std::uint32_t abort_tag = 0xFFFFFFFEu;
/// The abort notice's word: why the sender failed (an unknown word reads as
/// a failure).
constexpr std::uint32_t abort_failed = 1;
constexpr std::uint32_t abort_mismatch = 2;
constexpr std::uint32_t intro_magic = 0x47584355; // "UCXG"

/// The tag of an application's message of group `id`.
inline std::uint32_t user_tag(std::uint32_t id, std::uint32_t tag) noexcept {
    return (id << id_shift) | tag;
}
/// The tag of the messages of collective `seq` of group `id`.
inline std::uint32_t collective_tag(std::uint32_t id, std::uint32_t seq) noexcept {
    return library_bit | (id << id_shift) | (seq & group_max_tag);
}
/// The endpoint's id in a received UCX tag (its high half).
inline std::uint32_t inbox_of(tag_t t) noexcept {
    return static_cast<std::uint32_t>(t >> 32);
}
} // namespace group_wire

/// Logs the parts, streamed one after the other.
template <class... Parts>
void group_log(log::severity s, const Parts&... parts) {
    std::ostringstream o;
    (o << ... << parts);
    log::write(s, o.str());
}

/// What a fabric tells the groups that use it.
class fabric_member {
public:
    /// The fabric failed with `ec`.
    virtual void failed(error_code ec) = 0;
    /// The id of a connection became known (any-source receives).
    virtual void inboxes_changed() = 0;
    /// A rank closed its side gracefully.
    virtual void peer_left() = 0;

protected:
    ~fabric_member() = default;
};

class fabric : public std::enable_shared_from_this<fabric> {
public:
    using step_handler = std::function<void(error_code, std::size_t)>;
    using ready_handler = std::function<void(error_code)>;

    /// `lazy`: connections to the higher ranks on first use.
    fabric(std::shared_ptr<worker_impl> w, int rank, std::vector<worker_address> addresses,
           bool lazy);

    int rank() const noexcept { return fsm_.rank(); }
    int size() const noexcept { return fsm_.size(); }
    const boost::asio::any_io_executor& executor() const noexcept { return ex_; }
    const error_code& failed() const noexcept { return fsm_.failed(); }
    const std::shared_ptr<worker_impl>& worker() const noexcept { return w_; }
    int peer_of_inbox(std::uint32_t inbox) const noexcept { return fsm_.peer_of_inbox(inbox); }
    bool knows_every_inbox() const noexcept { return fsm_.knows_every_inbox(); }
    int connections() const noexcept { return fsm_.connections(); }
    bool has_left(int who) const noexcept { return fsm_.has_left(who); }
    /// A message to or from fabric rank `who` ended with `operation_aborted`:
    /// if its connection was closed under it (a terminal cancellation of a
    /// send UCX held closes the endpoint, which the fabric did not), the
    /// fabric fails, as on any broken connection.
    void message_aborted(int who) {
        if (failed() || who < 0 || who >= static_cast<int>(peers_.size()) || !fsm_.ready(who) ||
            peers_[who].ep.is_open())
            return;
        fail(make_error_code(error::group_failed));
    }

    void open(error_code& ec) { acceptor_ = open_address_acceptor(w_, 64, ec); }
    void set_addresses(std::vector<worker_address> a) { addresses_ = std::move(a); }
    /// Accepts the lower ranks' connections and connects to the higher
    /// ranks (now, or on first use).
    void start() { execute(fsm_.start()); }
    /// Fabric rank `who` may send here (see fabric_fsm::want).
    void want(int who) { execute(fsm_.want(who)); }

    std::uint32_t next_id() const noexcept { return next_id_; }
    void use_id(std::uint32_t id) noexcept { next_id_ = std::max(next_id_, id + 1); }

    void add_group(const std::shared_ptr<fabric_member>& g) {
        groups_.push_back(g);
        ++live_;
    }
    /// A group of the fabric was closed or released; the last one leaves.
    void group_gone(std::function<void()> done);

    /// Sends to fabric rank `to`; `h` is called as `step_handler` (a
    /// template: no function object allocated per message). `h` keeps a
    /// group of the fabric alive (and so the fabric) until it runs.
    template <class Handler>
    void send(int to, const void* data, std::size_t size, std::uint32_t tag, Handler h) {
        if (failed())
            return post_step(std::move(h), failed());
        if (to == rank())
            return post_step(std::move(h), boost::asio::error::invalid_argument);
        if (fsm_.ready(to))
            return start_send(to, data, size, tag, std::move(h));
        with_peer(to, [self = shared_from_this(), to, data, size, tag,
                       h = std::move(h)](error_code ec) mutable {
            if (ec || was_cancelled(h))
                return h(ec ? ec : error_code(boost::asio::error::operation_aborted), 0);
            self->start_send(to, data, size, tag, std::move(h));
        });
    }

    /// Sends to fabric rank `to` inside this call when UCX can (a small
    /// message with send resources free: `endpoint_impl::send_now`), with no
    /// operation and no handler. False leaves it to `send`.
    bool send_now(int to, const void* data, std::size_t size, std::uint32_t tag) noexcept {
        if (failed() || to == rank() || !fsm_.ready(to))
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
        if (failed() || from == rank() || !fsm_.ready(from)) {
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
        if (failed())
            return post_step(std::move(h), failed());
        if (from == rank())
            return post_step(std::move(h), boost::asio::error::invalid_argument);
        if (fsm_.ready(from))
            return start_recv(from, data, size, tag, std::move(h));
        with_peer(from, [self = shared_from_this(), from, data, size, tag,
                         h = std::move(h)](error_code ec) mutable {
            if (ec || was_cancelled(h))
                return h(ec ? ec : error_code(boost::asio::error::operation_aborted), 0);
            self->start_recv(from, data, size, tag, std::move(h));
        });
    }

    /// Fails every group of the fabric with `ec`, tells the peers, closes.
    void fail(error_code ec) { execute(fsm_.fail(ec)); }
    /// Leaves gracefully (no group uses the fabric any more): the sends in
    /// flight are delivered, the peers see this rank leave; then `done`.
    void leave(std::function<void()> done = {});

private:
    /// The I/O half of a peer (its state is the machine's).
    struct peer {
        endpoint ep;
        std::vector<ready_handler> waiting;
        std::shared_ptr<boost::asio::steady_timer> timer;
        std::uint32_t abort_word = 0;
    };

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
    /// Whether a handler was cancelled while its message waited for the
    /// connection (a user's message by rank; collectives' steps are not).
    template <class Handler>
    static bool was_cancelled(const Handler& h) noexcept {
        if constexpr (requires { h.cancelled(); })
            return h.cancelled();
        else
            return false;
    }

    /// A message's completion: `h` with the fabric's failure, if any, in
    /// place of the endpoint's error. The endpoint operation gets `h`'s
    /// cancellation slot.
    template <class Handler>
    struct step_done {
        fabric* f;
        Handler h;
        using cancellation_slot_type = boost::asio::associated_cancellation_slot_t<Handler>;
        cancellation_slot_type get_cancellation_slot() const noexcept {
            return boost::asio::get_associated_cancellation_slot(h);
        }
        void operator()(error_code ec, std::size_t n) { h(f->failed() ? f->failed() : ec, n); }
        void operator()(error_code ec, std::size_t n, std::uint32_t) { (*this)(ec, n); }
    };

    template <class Handler>
    void post_step(Handler h, error_code ec) {
        boost::asio::post(ex_, [h = std::move(h), ec]() mutable { h(ec, 0); });
    }

    /// Runs `h` once `who`'s connection is usable (or with why it is not).
    void with_peer(int who, ready_handler h);
    /// Executes the machine's actions, in order; `fresh` is this event's
    /// endpoint (one just made or accepted), if any.
    void execute(const fabric_actions& actions, endpoint* fresh = nullptr);
    void execute_one(const fabric_action& a, endpoint* fresh);

    void accept_next();
    void connect(int to);
    void identify(endpoint ep);
    void introduce(int to);
    void watch(int who);
    void arm_timer(int who, std::chrono::milliseconds ms);
    template <class F>
    void each_group(F f) {
        for (auto& wg : groups_)
            if (auto g = wg.lock())
                f(*g);
    }

    std::shared_ptr<worker_impl> w_;
    boost::asio::any_io_executor ex_;
    std::vector<worker_address> addresses_;
    fabric_fsm fsm_;
    std::vector<peer> peers_;
    std::shared_ptr<address_acceptor_impl> acceptor_;
    std::vector<std::weak_ptr<fabric_member>> groups_;
    std::uint32_t next_id_ = 1;
    int live_ = 0;
};

} // namespace ucx::detail
