#include <ucx/detail/results.hpp>
#include <ucx/detail/throw_on_error.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/endpoint_report.hpp>
#include <ucx/log.hpp>

#include "connection/control_channel.hpp"
#include "connection/endpoint_impl.hpp"
#include "connection/lanes.hpp"
#include "connection/listener_impl.hpp"
#include "core/created.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/device_staging.hpp"
#include "util/printed.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <sys/socket.h>

namespace ucx {
namespace detail {

namespace {
std::uint64_t next_endpoint_serial() noexcept {
    static std::atomic<std::uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

/// The parameters of a UCP endpoint to the worker at `address` (which must
/// outlive the ucp_ep_create call).
ucp_ep_params_t address_params(const worker_address& address) noexcept {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(address.ucx_bytes().data());
    return params;
}
} // namespace

namespace {
/// A counted send finished (inside a UCX callback: records only); the
/// worker's send finisher (`worker_impl::set_send_finisher`).
void counted_send_finished(operation* op) noexcept {
    op->endpoint->send_finished();
}

/// A terminal cancellation of an operation UCX holds: its endpoint is closed
/// at once, as `endpoint::close()` does (the worker's endpoint canceller,
/// `worker_impl::set_endpoint_canceller`).
void cancel_endpoint_of(operation* op) noexcept {
    op->endpoint->force_close(boost::asio::error::operation_aborted);
}
} // namespace

endpoint_impl::endpoint_impl(std::shared_ptr<worker_impl> worker)
    : worker_component(component_kind::endpoint), worker_(std::move(worker)),
      serial_(next_endpoint_serial()) {
    worker_->set_send_finisher(&counted_send_finished);
    worker_->set_endpoint_canceller(&cancel_endpoint_of);
    worker_->operation_metrics().add_set(ops_);
}

endpoint_impl::~endpoint_impl() {
    force_close(boost::asio::error::operation_aborted);
    orphan_operations();
    // Operations orphaned earlier may still count in this endpoint's counters.
    const std::less<const kind_counters*> before;
    for (operation* op = worker_->in_flight_ops(); op; op = op->next)
        if (op->counted_in && !before(op->counted_in, ops_.data()) &&
            before(op->counted_in, ops_.data() + ops_.size()))
            op->counted_in = nullptr;
    // Its counts stay in the worker's (those operations end in the worker's
    // own counts).
    worker_->operation_metrics().retire_set(ops_);
    // Also takes it out of the deferred queues.
    worker_->remove_component(*this);
}

std::size_t endpoint_impl::run_deferred(deferred_stage stage) noexcept {
    if (stage == deferred_stage::close_ready)
        finish_close();
    else if (stage == deferred_stage::failure) {
        if (std::exchange(reached, false))
            execute(fsm_.reached());
        if (failure_status != UCS_OK)
            handle_failure();
    }
    return 1;
}

void endpoint_impl::orphan_operations() noexcept {
    for (operation* op = worker_->in_flight_ops(); op; op = op->next) {
        if (op->endpoint == this) {
            op->endpoint = nullptr;
            op->counted_send = false;
        }
    }
}

void endpoint_impl::metrics(endpoint_metrics& m) const noexcept {
    std::uint64_t started = 0;
    std::uint64_t completed = 0;
    for (std::size_t k = 0; k < operation_kind_count; ++k) {
        ops_[k].snapshot(m.operations[k]);
        started += m.operations[k].started;
        completed += m.operations[k].completed;
    }
    m.in_flight = started - completed;
}

void endpoint_impl::send_finished() noexcept {
    if (--sends_in_flight_ == 0 && close_op_)
        worker_->defer(*this, deferred_stage::close_ready);
}

void endpoint_impl::create(ucp_ep_params_t& params, error_code& ec) noexcept {
    if (!worker_->is_open()) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &endpoint_impl::error_callback;
    params.err_handler.arg = this;
    if (!created(ucp_ep_create(worker_->native(), &params, &ep_), ep_, ec))
        return;
    worker_->add_component(*this);
    registered_ = true;
    control_channel::of(*worker_).map(ep_, this);
    mapped_ = true;
    ec = {};
}

void endpoint_impl::connect(const worker_address& address, error_code& ec) {
    if (address.empty()) {
        ec = make_error_code(error::empty_address);
        return;
    }
    ucp_ep_params_t params = address_params(address);
    create(params, ec);
    if (!ec)
        execute(fsm_.start({role::address}));
}

bool endpoint_impl::begin_connect(endpoint_op* op) noexcept {
    worker_impl& w = *worker_;
    attach(op);
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &endpoint_impl::cancel_connect;
    if (!w.is_open()) {
        w.complete(op, boost::asio::error::operation_aborted);
        return false;
    }
    if (!has_control_channel(w)) {
        w.complete(op, make_error_code(error::feature_not_enabled));
        return false;
    }
    return true;
}

bool endpoint_impl::create_client(ucp_ep_params_t& params, endpoint_op* op, bool by_address,
                                  role r) noexcept {
    error_code ec;
    create(params, ec);
    if (ec) {
        worker_->complete(op, ec);
        return false;
    }
    connect_op_ = op;
    // Sends the hello (connect_to), leaves it to connect_address, or
    // flushes (connect_plain).
    execute(fsm_.start(connection_params(r, by_address, false, worker_timeouts())));
    return true;
}

void endpoint_impl::connect_plain(const sockaddr* addr, socklen_t len, endpoint_op* op) noexcept {
    connect_sockaddr(addr, len, op, role::plain_client);
}

namespace {
/// A plain client's flush: tells the endpoint, if it still exists.
struct connect_flush {
    std::weak_ptr<endpoint_impl> endpoint;
    worker_impl* worker; // its shutdown waits for (or cancels) the flush

    static void done(void* request, ucs_status_t status, void* user_data) noexcept {
        // Inside ucp_worker_progress: record only; the worker acts once UCX returns.
        std::unique_ptr<connect_flush> self(static_cast<connect_flush*>(user_data));
        ucp_request_free(request);
        self->worker->internal_request_done();
        if (auto ep = self->endpoint.lock())
            ep->flushed(status);
    }
};
} // namespace

void endpoint_impl::flushed(ucs_status_t status) noexcept {
    // A connection UCX could not make also fails the endpoint (the error
    // callback), with the same status; a flush cancelled by a close is not news.
    if (status == UCS_OK)
        reached = true;
    else if (status != UCS_ERR_CANCELED && failure_status == UCS_OK)
        failure_status = status;
    else
        return;
    worker_->defer(*this, deferred_stage::failure);
}

void endpoint_impl::flush_to_connect() noexcept {
    if (!ep_)
        return;
    std::unique_ptr<connect_flush> state;
    try {
        state = std::make_unique<connect_flush>(connect_flush{weak_from_this(), worker_.get()});
    } catch (...) {
        return execute(fsm_.force_close(make_error_code(error::allocation_failed)));
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &connect_flush::done;
    param.user_data = state.get();
    ucs_status_ptr_t r = ucp_ep_flush_nbx(ep_, &param);
    if (UCS_PTR_IS_PTR(r)) {
        state.release(); // the callback owns it
        worker_->internal_request_started();
        worker_->request_progress();
        return;
    }
    flushed(UCS_PTR_STATUS(r)); // done at once (UCS_OK), or failed
}

void endpoint_impl::connect_to(const sockaddr* addr, socklen_t len, endpoint_op* op) noexcept {
    connect_sockaddr(addr, len, op, role::client);
}

void endpoint_impl::connect_sockaddr(const sockaddr* addr, socklen_t len, endpoint_op* op,
                                     role r) noexcept {
    if (!begin_connect(op))
        return;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = addr;
    params.sockaddr.addrlen = len;
    create_client(params, op, false, r);
}

void endpoint_impl::connect_address(const worker_address& address, endpoint_op* op,
                                    std::span<const std::byte> ticket) noexcept {
    if (!begin_connect(op))
        return;
    worker_impl& w = *worker_;
    if (address.empty())
        return w.complete(op, make_error_code(error::empty_address));
    ucp_ep_params_t params = address_params(address);
    bool to_itself = false;
    try {
        to_itself = address == w.address();
    } catch (...) {
        return w.complete(op, make_error_code(error::allocation_failed));
    }
    if (to_itself) {
        // To this worker: through UCX's connection manager, which makes the
        // second endpoint of the connection (control_channel::self_connect_params).
        error_code ec;
        control_channel::of(w).self_connect_params(params, ec);
        if (ec)
            return w.complete(op, ec);
    }
    if (!create_client(params, op, true, role::client))
        return;
    // The hello carries this worker's address: the acceptor needs it to make
    // UCX's endpoint for this connection its own (see accept_address). It
    // travels in its wire form (length and CRC-32) so that the acceptor can
    // reject a damaged one: UCX aborts the process on a malformed address.
    // After a listener's door, the handshake's ticket follows it: this worker
    // may be making other connections to the same listener at once.
    try {
        std::vector<std::byte> payload = w.address().serialize();
        payload.insert(payload.end(), ticket.begin(), ticket.end());
        control_channel::of(w).send(ep_, control_message{control_type::hello, fsm_.local_tag()},
                                    std::move(payload));
    } catch (...) {
        force_close(make_error_code(error::allocation_failed));
    }
}

void endpoint_impl::accept_address(ucp_ep_h own, const control_message& hello,
                                   const connection_timeouts& timeouts, error_code& ec) noexcept {
    if (!worker_->is_open() || own == nullptr || ep_ != nullptr) {
        if (own != nullptr && worker_->native() != nullptr)
            worker_->close_ucp_endpoint(own, true);
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    // Created by this worker (UCX destroys an endpoint it made for a peer,
    // without a word, when that peer fails; one the application created
    // stays until closed), with the control channel's error handler, which
    // hands the errors to the endpoint mapped to it.
    ep_ = own;
    worker_->add_component(*this);
    registered_ = true;
    control_channel::of(*worker_).map(ep_, this);
    mapped_ = true;
    ec = {};
    execute(fsm_.start(connection_params(role::server, true, false, timeouts)));
    on_control(hello); // established; sends the welcome
}

void endpoint_impl::adopt(ucp_ep_h ep) noexcept {
    ep_ = ep;
    worker_->add_component(*this);
    registered_ = true;
    execute(fsm_.start({role::borrowed}));
}

void endpoint_impl::accept_request(ucp_conn_request_h request, listener_impl* listener, bool plain,
                                   const connection_timeouts& timeouts, error_code& ec) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    params.conn_request = request;
    create(params, ec);
    if (ec)
        return;
    if (plain)
        return execute(fsm_.start({role::plain_server}));
    listener_ = listener;
    execute(fsm_.start(connection_params(role::server, false, true, timeouts)));
}

connection_timeouts endpoint_impl::worker_timeouts() const noexcept {
    const worker_options& o = worker_->options();
    return {o.peer_timeout, o.handshake_timeout};
}

connection_fsm::start_params
endpoint_impl::connection_params(role r, bool by_address, bool listener,
                                 const connection_timeouts& t) const noexcept {
    auto ms = [](std::chrono::milliseconds d) {
        return d.count() > 0 ? static_cast<std::uint64_t>(d.count()) : std::uint64_t{0};
    };
    // A connection made by a group's fabric, or accepted by the worker's
    // address acceptor (which the fabric holds while the worker has a
    // group), gets a fabric id (see fabric_tag).
    connection_fsm::start_params p{r, by_address, listener,
                                   fabric_ ? fabric_tag(*worker_) : random_tag(*worker_)};
    p.handshake_timeout_ms = ms(t.handshake_timeout);
    // A peer silent for `silent_ticks_limit` ticks fails: it has been silent
    // for at least `silent_ticks_limit - 1` intervals, the timeout (rounded
    // up), and less than two intervals more.
    if (const std::uint64_t timeout = ms(t.peer_timeout); timeout != 0) {
        constexpr std::uint64_t n = connection_fsm::silent_ticks_limit - 1;
        p.heartbeat_interval_ms = std::max<std::uint64_t>(1, (timeout + n - 1) / n);
    }
    return p;
}

void endpoint_impl::on_control(const control_message& m) noexcept {
    if (m.type == control_type::pong) [[unlikely]]
        pong_came();
    execute(fsm_.on_control(m));
}

void endpoint_impl::pong_came() noexcept {
    ++pongs_;
    auto& counts = control_channel::of(*worker_).liveness();
    ++counts.pongs;
    if (ping_at_ == std::chrono::steady_clock::time_point{})
        return; // a pong no ping of this side asked for
    const auto took = std::chrono::steady_clock::now() - std::exchange(ping_at_, {});
    round_trip_ = std::chrono::duration_cast<std::chrono::nanoseconds>(took);
    counts.round_trip.add(round_trip_);
}

void endpoint_impl::execute(const connection_actions& actions, endpoint_op* new_close_op) noexcept {
    // Completing an operation may drop the last owner of this endpoint
    // (a connect or close owns it); stay alive until done. Null in the destructor.
    const auto keep_alive = weak_from_this().lock();
    worker_impl& w = *worker_;
    using type = connection_action_type;
    for (const connection_action& a : actions) {
        switch (a.type) {
        case type::send_control:
            if (a.message == control_type::ping) [[unlikely]] {
                ++pings_;
                ++control_channel::of(w).liveness().pings;
                ping_at_ = std::chrono::steady_clock::now();
            }
            control_channel::of(w).send(ep_, control_message{a.message, a.value});
            break;
        case type::complete_connect:
            finish_connect(a.ec);
            break;
        case type::listener_established:
            if (listener_impl* l = std::exchange(listener_, nullptr))
                l->on_established(shared_from_this());
            break;
        case type::listener_failed:
            if (listener_impl* l = std::exchange(listener_, nullptr))
                l->on_failed(this);
            break;
        case type::fail_operations:
            if (a.ec == error::peer_unresponsive) [[unlikely]]
                ++control_channel::of(w).liveness().unresponsive;
            fail_pending(a.ec);
            break;
        case type::abort_operations:
            abort_pending();
            break;
        case type::peer_stream_end:
            if (watcher_)
                watcher_->peer_stream_end(a.value, a.goodbye);
            break;
        case type::peer_stream_acked:
            if (watcher_)
                watcher_->peer_stream_acked(a.value);
            break;
        case type::take_received:
            if (watcher_ && ep_)
                watcher_->take_received(ep_);
            break;
        case type::start_linger:
            start_linger();
            break;
        case type::cancel_linger:
            if (linger_timer_)
                linger_timer_->cancel();
            break;
        case type::arm_timer:
            arm_timer(a.value);
            break;
        case type::cancel_timer:
            if (timer_)
                timer_->cancel();
            break;
        case type::accept_close:
            // The close operation owns the endpoint until it completes.
            if (new_close_op) {
                new_close_op->subject = shared_from_this();
                close_op_ = std::exchange(new_close_op, nullptr);
            }
            break;
        case type::reject_close:
            if (endpoint_op* op = std::exchange(new_close_op, nullptr))
                w.complete(op, a.ec);
            break;
        case type::complete_close:
            if (endpoint_op* op = std::exchange(close_op_, nullptr))
                w.complete(op, a.ec);
            break;
        case type::close_flush:
            close_ucp(true);
            break;
        case type::close_force:
            close_ucp(false);
            break;
        case type::flush_endpoint:
            flush_to_connect();
            break;
        case type::release:
            // UCX's own endpoint: nothing to close.
            close_lifeline();
            unmap();
            ep_ = nullptr;
            worker_->running_needs_changed();
            break;
        }
    }
}

void endpoint_impl::start_linger() noexcept {
    try {
        if (!linger_timer_)
            linger_timer_ = std::make_unique<guarded_timer>(worker_->get_executor());
        linger_timer_->start_after(goodbye_linger, weak_from_this(),
                                   [](endpoint_impl& self, const error_code& ec) {
                                       if (!ec)
                                           self.execute(self.fsm_.linger_expired());
                                   });
    } catch (...) {
        execute(fsm_.linger_expired()); // close now
    }
}

void endpoint_impl::arm_timer(std::uint64_t ms) noexcept {
    try {
        if (!timer_)
            timer_ = std::make_unique<guarded_timer>(worker_->get_executor());
        timer_->start_after(std::chrono::milliseconds(ms), weak_from_this(),
                            [](endpoint_impl& self, const error_code& ec) {
                                if (!ec)
                                    self.execute(self.fsm_.timer_expired());
                            });
    } catch (...) {
        // Without a timer the connection is not watched; it still works.
        log::write(log::severity::warning, "endpoint: could not arm the connection timer");
    }
}

void endpoint_impl::close_ucp(bool flush) noexcept {
    worker_impl& w = *worker_;
    close_lifeline();
    unmap();
    ucp_ep_h ep = std::exchange(ep_, nullptr);
    // Flush mode: the goodbye goes out first, and the close operation
    // completes when UCX is done.
    endpoint_op* op = flush ? std::exchange(close_op_, nullptr) : nullptr;
    if (!ep || !w.native()) {
        // Gone with the worker: closed.
        if (op)
            w.complete(op, error_code());
        return;
    }
    // UCX 1.13 never releases an endpoint made from a worker address that is
    // closed in flush mode (measured: each one keeps its transport endpoints,
    // among them a mapping of the peer's shared-memory segment, until the
    // worker goes). The side that closes after the peer acknowledged its
    // goodbye (or stopped answering) has nothing left to flush: everything
    // it sent came before the goodbye, which the peer took. So that side
    // closes by force; the side that acknowledged a goodbye flushes, or its
    // acknowledgement could be lost.
    const bool force =
        !flush || (fsm_.has_handshake() && fsm_.by_address() && !fsm_.peer_said_goodbye());
    ucs_status_ptr_t r = w.close_ucp_endpoint(ep, force, op);
    if (!op) {
        // The sends UCX failed just now are delivered by a pass.
        w.request_progress();
        return;
    }
    // A peer that already went away makes the close fail: still closed.
    op->ignore_peer_errors = true;
    if (UCS_PTR_IS_ERR(r))
        r = nullptr;
    w.submitted(op, r);
}

void endpoint_impl::finish_connect(const error_code& ec) noexcept {
    endpoint_op* op = std::exchange(connect_op_, nullptr);
    if (!op)
        return;
    if (!ec)
        op->subject = shared_from_this();
    worker_->complete(op, ec);
}

void endpoint_impl::cancel_connect(operation* op, boost::asio::cancellation_type) noexcept {
    // Cancelling a connect abandons the connection attempt.
    if (op->endpoint)
        op->endpoint->force_close(boost::asio::error::operation_aborted);
}

void endpoint_impl::cancel_wait(operation* op, boost::asio::cancellation_type) noexcept {
    endpoint_impl* self = op->endpoint;
    if (!self)
        return;
    std::erase(self->waiters_, op);
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void endpoint_impl::error_callback(void* arg, ucp_ep_h, ucs_status_t status) noexcept {
    // Inside ucp_worker_progress: record only; the worker acts once UCX returns.
    auto* self = static_cast<endpoint_impl*>(arg);
    if (self->failure_status == UCS_OK)
        self->failure_status = status;
    self->worker_->defer(*self, deferred_stage::failure);
}

void endpoint_impl::adopt_lifeline(boost::asio::ip::tcp::socket socket) noexcept {
    error_code ec1, ec2;
    const auto local = socket.local_endpoint(ec1);
    const auto remote = socket.remote_endpoint(ec2);
    if (!ec1 && !ec2) {
        std::memcpy(&door_local_, local.data(), local.size());
        std::memcpy(&door_remote_, remote.data(), remote.size());
        has_door_addresses_ = true;
    }
    try {
        lifeline_ = std::make_unique<boost::asio::ip::tcp::socket>(std::move(socket));
    } catch (...) {
        return; // unwatched: the heartbeats still find a dead peer
    }
    watch_lifeline();
}

void endpoint_impl::watch_lifeline() noexcept {
    if (!lifeline_ || !lifeline_->is_open())
        return;
    lifeline_->async_read_some(
        boost::asio::buffer(&lifeline_byte_, 1),
        [weak = weak_from_this()](const error_code& ec, std::size_t) {
            auto self = weak.lock();
            if (!self || ec == boost::asio::error::operation_aborted || !self->lifeline_)
                return;
            if (!ec)
                return self->watch_lifeline(); // nothing travels on it; ignored
            // The peer's end closed: its process ended (or it closed the
            // connection, after its goodbye: that one was taken first).
            self->close_lifeline();
            if (self->ep_ && self->failure_status == UCS_OK) {
                self->failure_status = UCS_ERR_CONNECTION_RESET;
                self->worker_->defer(*self, deferred_stage::failure);
                self->worker_->request_progress();
            }
        });
}

void endpoint_impl::close_lifeline() noexcept {
    if (auto s = std::move(lifeline_)) {
        error_code ignored;
        s->close(ignored);
    }
}

void endpoint_impl::handle_failure() noexcept {
    log::write(log::severity::info,
               std::string("endpoint failed: ") + ucs_status_string(failure_status));
    execute(fsm_.on_failure(make_error_code(failure_status)));
}

void endpoint_impl::fail_pending(const error_code& ec) noexcept {
    // Completing an operation may drop the last owner of this endpoint
    // (a connect or close owns it); stay alive until done. Null in the destructor.
    const auto keep_alive = weak_from_this().lock();
    worker_impl& w = *worker_;
    // Operations UCX still owns: tell them the reason, cancel the receives;
    // UCX completes the sends when the endpoint is closed.
    for (operation *op = w.in_flight_ops(), *next = nullptr; op; op = next) {
        next = op->next; // a cancel may complete op at once, unlinking it
        if (op->endpoint != this || op->library_owned)
            continue;
        if (!op->reason)
            op->reason = ec;
        if (op->cancellable && op->request)
            ucp_request_cancel(w.native(), op->request);
    }
    auto waiters = std::move(waiters_);
    waiters_.clear();
    for (operation* op : waiters)
        w.complete(op, ec);
    // Services with work bound to this endpoint (the active-message
    // registry's receives from it) end it.
    w.endpoint_failed(this, ec);
}

void endpoint_impl::abort_pending() noexcept {
    worker_impl& w = *worker_;
    for (operation *p = w.in_flight_ops(), *next = nullptr; p; p = next) {
        next = p->next; // a cancel may complete p at once, unlinking it
        if (p->endpoint == this && p->cancellable && p->request) {
            p->reason = boost::asio::error::operation_aborted;
            ucp_request_cancel(w.native(), p->request);
        }
    }
    auto waiters = std::move(waiters_);
    waiters_.clear();
    for (operation* p : waiters)
        w.complete(p, boost::asio::error::operation_aborted);
}

void endpoint_impl::unmap() noexcept {
    if (mapped_) {
        control_channel::of(*worker_).unmap(ep_);
        mapped_ = false;
    }
}

void endpoint_impl::force_close(const error_code& ec) noexcept {
    execute(fsm_.force_close(ec));
}

bool endpoint_impl::finishing() const noexcept {
    const connection_state s = fsm_.state();
    if (s != connection_state::closing && s != connection_state::lingering)
        return false;
    if (lifeline_ && lifeline_->is_open()) {
        // Nothing runs the lifeline's read now (see worker_impl::shutdown):
        // look at the socket itself; end of file or an error: the peer's
        // process is gone.
        char byte;
        const ssize_t r = ::recv(lifeline_->native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return false;
    }
    return true;
}

void endpoint_impl::detach() noexcept {
    // Completing an operation may drop the last owner of this endpoint
    // (a connect or close owns it); stay alive until done. Null in the destructor.
    const auto keep_alive = weak_from_this().lock();
    force_close(boost::asio::error::operation_aborted);
    orphan_operations();
    if (listener_impl* l = std::exchange(listener_, nullptr))
        l->on_failed(this);
    if (registered_) {
        worker_->remove_component(*this);
        registered_ = false;
    }
}

bool endpoint_impl::begin(operation* op, bool counted) noexcept {
    worker_impl& w = *worker_;
    attach(op);
    w.start(op);
    if (!w.is_open() || op->cancel_requested) {
        // Closed, or cancelled before it was submitted.
        w.complete(op, boost::asio::error::operation_aborted);
        return false;
    }
    if ((!ep_ || error()) && !(op->held_send && ep_ && fsm_.close_pending())) [[unlikely]] {
        w.complete(op, error() ? error() : error_code(boost::asio::error::bad_descriptor));
        return false;
    }
    if (counted) {
        op->counted_send = true;
        ++sends_in_flight_;
    }
    return true;
}

void endpoint_impl::submitted(operation* op, ucs_status_ptr_t result) noexcept {
    worker_->submitted(op, result);
}

void endpoint_impl::count_started(operation* op) noexcept {
    kind_counters& here = ops_[static_cast<std::size_t>(op->kind)];
    if (op->counted_in == &here)
        return;
    worker_->operation_metrics().move_start(op->kind, op->counted_in, here);
    op->counted_in = &here;
}

void endpoint_impl::submitted_later(operation* op, ucs_status_ptr_t result) noexcept {
    worker_impl& w = *worker_;
    attach(op);
    w.start(op);
    op->counted_send = true;
    ++sends_in_flight_;
    submitted(op, result);
}

void endpoint_impl::tag_send(transfer_op* op, const void* data, std::size_t size,
                             ucp_tag_t tag) noexcept {
    op->bytes = size;
    ucp_request_param_t param = send_param(&worker_impl::send_callback, op);
    if (may_submit_first(op)) [[likely]]
        return submitted_first(op, ucp_tag_send_nbx(ep_, data, size, tag, &param));
    if (!begin(op, true))
        return;
    submitted(op, ucp_tag_send_nbx(ep_, data, size, tag, &param));
}

namespace {
constexpr ucp_tag_t id_mask = ~ucp_tag_t{0} << 32;
} // namespace

void endpoint_impl::send(transfer_op* op, const void* data, std::size_t size,
                         std::uint32_t tag) noexcept {
    if (!has_handshake() || !fsm_.established()) {
        attach(op);
        worker_->start(op);
        return worker_->complete(op, error() ? error() : make_error_code(error::not_connected));
    }
    tag_send(op, data, size, (fsm_.peer_tag() & id_mask) | tag);
}

// Inline: its two callers below run once per message of a collective.
inline bool endpoint_impl::usable_at_once() const noexcept {
    return worker_->is_open() && ep_ && !error() && has_handshake() && fsm_.established();
}

bool endpoint_impl::send_now(const void* data, std::size_t size, std::uint32_t tag) noexcept {
    worker_impl& w = *worker_;
    if (!usable_at_once())
        return false;
    if (const device_staging* s = staging_of(w); s && s->holds_sends(this))
        return false;
    // UCX tries its inline (short) protocol only, and answers
    // UCS_ERR_NO_RESOURCE rather than make a request. (UCX reads only the
    // fields that `op_attr_mask` names.)
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    const ucs_status_ptr_t r =
        ucp_tag_send_nbx(ep_, data, size, (fsm_.peer_tag() & id_mask) | tag, &param);
    if (UCS_PTR_IS_PTR(r)) [[unlikely]] {
        // Not what UCX promises for this flag; the request is released and
        // UCX completes the send on its own.
        ucp_request_free(r);
        return true;
    }
    return UCS_PTR_STATUS(r) == UCS_OK;
}

error_code endpoint_impl::tag_send_at_once(const void* data, std::size_t size,
                                           ucp_tag_t tag) noexcept {
    worker_impl& w = *worker_;
    // UCX's worker is used from its thread only; where the worker's executor
    // is not a plain io_context's, the thread is not known: never here.
    if (!w.running_in_owner())
        return boost::asio::error::would_block;
    if (!w.is_open())
        return boost::asio::error::operation_aborted;
    if (!ep_ || error())
        return error() ? error() : error_code(boost::asio::error::bad_descriptor);
    if (const device_staging* s = staging_of(w); s && (s->holds_sends(this) || s->is_device(data)))
        [[unlikely]]
        return boost::asio::error::would_block;
    // UCX tries its inline (short) protocol only, and answers
    // UCS_ERR_NO_RESOURCE rather than make a request; it reads only the
    // fields that `op_attr_mask` names.
    ucp_request_param_t param;
    param.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    const ucs_status_ptr_t r = ucp_tag_send_nbx(ep_, data, size, tag, &param);
    if (UCS_PTR_IS_PTR(r)) [[unlikely]] {
        // Not what UCX promises for this flag; the request is released and
        // UCX completes the send on its own.
        ucp_request_free(r);
    } else if (const ucs_status_t st = UCS_PTR_STATUS(r); st != UCS_OK) {
        return st == UCS_ERR_NO_RESOURCE ? error_code(boost::asio::error::would_block)
                                         : make_error_code(st);
    }
    if constexpr (counts_operations)
        w.operation_metrics().done_at_once(
            operation_kind::tag_send, &ops_[static_cast<std::size_t>(operation_kind::tag_send)],
            size);
    return {};
}

endpoint_impl::at_once endpoint_impl::recv_at_once(void* data, std::size_t size, std::uint32_t tag,
                                                   ucs_status_ptr_t& pending,
                                                   std::size_t& length) noexcept {
    if (!usable_at_once())
        return at_once::not_here;
    // The probe takes the message out of UCX's unexpected queue; the receive
    // of that message then searches nothing.
    ucp_tag_recv_info_t info{};
    const ucp_tag_message_h message = ucp_tag_probe_nb(
        worker_->native(), (fsm_.local_tag() & id_mask) | tag, ~ucp_tag_t{0}, 1, &info);
    if (!message)
        return at_once::not_here;
    length = info.length;
    pending = worker_->tag_msg_recv_at_once(data, size, message);
    return pending ? at_once::pending : at_once::done;
}

void endpoint_impl::adopt_recv(tag_recv_op* op, ucs_status_ptr_t pending) noexcept {
    attach(op);
    worker_->adopt_recv(op, pending);
}

void endpoint_impl::recv(tag_recv_op* op, void* data, std::size_t size, std::uint32_t tag,
                         std::uint32_t mask) noexcept {
    worker_impl& w = *worker_;
    const ucp_tag_t ucx_tag = (fsm_.local_tag() & id_mask) | tag;
    const ucp_tag_t ucx_mask = id_mask | mask;
    // After the peer's goodbye, messages it sent before are still delivered;
    // eof only once none is left.
    const error_code& err = error();
    const bool drain =
        err == boost::asio::error::eof && w.native() && has_message_waiting(ucx_tag, ucx_mask);
    if (!has_handshake() || !fsm_.established() || (err && !drain)) {
        attach(op);
        w.start(op);
        return w.complete(op, err ? err : make_error_code(error::not_connected));
    }
    attach(op);
    w.tag_recv(op, data, size, ucx_tag, ucx_mask);
}

bool endpoint_impl::has_message_waiting(ucp_tag_t tag, ucp_tag_t mask) const noexcept {
    ucp_tag_recv_info_t info{};
    return ucp_tag_probe_nb(worker_->native(), tag, mask, 0, &info) != nullptr;
}

void endpoint_impl::wait_error(operation* op) noexcept {
    worker_impl& w = *worker_;
    // A standing watch: no reason for a poll worker to spin.
    op->background = true;
    attach(op);
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &endpoint_impl::cancel_wait;
    if (error() || !ep_)
        return w.complete(op, error() ? error() : error_code(boost::asio::error::bad_descriptor));
    waiters_.push_back(op);
}

void endpoint_impl::close_gracefully(endpoint_op* op, std::uint64_t stream_bytes) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    execute(fsm_.close_graceful(sends_in_flight_ > 0, stream_bytes, w.is_open()), op);
}

void endpoint_impl::close_in_background(std::uint64_t stream_bytes) noexcept {
    if (error() == boost::asio::error::bad_descriptor ||
        close_requested_.exchange(true, std::memory_order_acq_rel))
        return; // closed here already
    worker_impl& w = *worker_;
    if (!w.is_open() || !ep_)
        return force_close(boost::asio::error::operation_aborted);
    // On the worker's executor, as every operation: at once on its thread,
    // else dispatched after the operations started before. The handler owns
    // the endpoint until the close has ended.
    try {
        start_operation<error_result<endpoint_op>>(
            [keep = shared_from_this()](const error_code&) {}, w,
            [self = shared_from_this(), stream_bytes](endpoint_op* op) {
                self->close_gracefully(op, stream_bytes);
            });
    } catch (...) {
        force_close(boost::asio::error::operation_aborted);
    }
}

void endpoint_impl::finish_close() noexcept {
    execute(fsm_.sends_drained(worker_->is_open()));
}

void endpoint_impl::send_stream_end(std::uint64_t total) noexcept {
    execute(fsm_.shutdown_stream(total));
}

bool endpoint_impl::query_sockaddr(bool remote, sockaddr_storage& out) const noexcept {
    if (ep_ && has_door_addresses_) {
        out = remote ? door_remote_ : door_local_;
        return true;
    }
    // Endpoints made by socket address: client/server connections of the
    // socket-address method, and plain ones.
    if (!ep_ || !(has_handshake() || fsm_.is_plain()) || fsm_.by_address())
        return false;
    ucp_ep_attr_t attr{};
    attr.field_mask = remote ? UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR : UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR;
    if (ucp_ep_query(ep_, &attr) != UCS_OK)
        return false;
    out = remote ? attr.remote_sockaddr : attr.local_sockaddr;
    return true;
}

boost::asio::ip::tcp::endpoint to_tcp_endpoint(const sockaddr_storage& ss) noexcept {
    boost::asio::ip::tcp::endpoint ep;
    const std::size_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
        std::memcpy(ep.data(), &ss, len);
    }
    return ep;
}

} // namespace detail

endpoint::endpoint(worker& w, const worker_address& remote) {
    error_code ec;
    impl_ = std::make_shared<detail::endpoint_impl>(detail::checked(w));
    impl_->connect(remote, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::endpoint");
}

endpoint::endpoint(worker& w, const worker_address& remote, error_code& ec)
    : impl_(std::make_shared<detail::endpoint_impl>(detail::checked(w))) {
    impl_->connect(remote, ec);
}

endpoint& endpoint::operator=(endpoint&& other) noexcept {
    impl_ = std::move(other.impl_);
    return *this;
}

endpoint::~endpoint() = default;

endpoint::executor_type endpoint::get_executor() const noexcept {
    return impl_ ? impl_->worker()->get_executor() : executor_type();
}

bool endpoint::is_open() const noexcept {
    return impl_ && impl_->is_open() && !impl_->close_requested();
}

error_code endpoint::error() const noexcept {
    if (!impl_)
        return boost::asio::error::bad_descriptor;
    if (impl_->close_requested() && !impl_->error())
        return boost::asio::error::bad_descriptor; // its close is on its way
    return impl_->error();
}

void endpoint::close() noexcept {
    if (impl_)
        impl_->close_in_background();
}

void endpoint::abort() noexcept {
    if (impl_)
        impl_->force_close(boost::asio::error::operation_aborted);
}

namespace {
boost::asio::ip::tcp::endpoint query(const std::shared_ptr<detail::endpoint_impl>& impl,
                                     bool remote, error_code& ec) {
    sockaddr_storage ss{};
    if (!impl || !impl->query_sockaddr(remote, ss)) {
        ec = impl && impl->native() ? make_error_code(error::no_socket_address)
                                    : error_code(boost::asio::error::bad_descriptor);
        return {};
    }
    ec = {};
    return detail::to_tcp_endpoint(ss);
}
} // namespace

boost::asio::ip::tcp::endpoint endpoint::remote_endpoint(error_code& ec) const {
    return query(impl_, true, ec);
}

boost::asio::ip::tcp::endpoint endpoint::remote_endpoint() const {
    return detail::throw_on_error("ucx::endpoint::remote_endpoint",
                                  [&](error_code& ec) { return remote_endpoint(ec); });
}

boost::asio::ip::tcp::endpoint endpoint::local_endpoint(error_code& ec) const {
    return query(impl_, false, ec);
}

boost::asio::ip::tcp::endpoint endpoint::local_endpoint() const {
    return detail::throw_on_error("ucx::endpoint::local_endpoint",
                                  [&](error_code& ec) { return local_endpoint(ec); });
}

std::vector<endpoint_lane> endpoint::lanes(error_code& ec) const {
    if (!impl_ || !impl_->native()) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    if (!is_open()) {
        ec = error();
        if (!ec)
            ec = boost::asio::error::bad_descriptor;
        return {};
    }
    return impl_->lanes(ec);
}

std::vector<endpoint_lane> endpoint::lanes() const {
    return detail::throw_on_error("ucx::endpoint::lanes",
                                  [&](error_code& ec) { return lanes(ec); });
}

endpoint_metrics endpoint::metrics() const noexcept {
    endpoint_metrics m;
    if (impl_)
        impl_->metrics(m);
    return m;
}

ucp_ep_h endpoint::native_handle() const noexcept {
    return impl_ ? impl_->native() : nullptr;
}

} // namespace ucx

// The non-template functions the public headers' templates call (<ucx/endpoint.hpp>): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

std::uint64_t random_tag(worker_impl& w) noexcept {
    return w.random_id() & ~fabric_tag_bit;
}

std::uint64_t fabric_tag(worker_impl& w) noexcept {
    return w.random_id() | fabric_tag_bit;
}

worker_core& core_of(const endpoint_impl& ep) noexcept {
    return *ep.worker();
}
void endpoint_wait_error(endpoint_impl& ep, operation* op) noexcept {
    ep.wait_error(op);
}
void endpoint_close(endpoint_impl& ep, endpoint_op* op) noexcept {
    op->kind = operation_kind::close;
    ep.close_gracefully(op);
}
bool endpoint_is_open(const endpoint_impl& ep) noexcept {
    return ep.is_open() && !ep.close_requested();
}
const std::shared_ptr<worker_impl>& endpoint_worker(const endpoint_impl& ep) noexcept {
    return ep.worker();
}

} // namespace ucx::detail

namespace ucx::detail {

std::vector<endpoint_lane> endpoint_impl::lanes(error_code& ec) const {
    const auto text = printed([&](FILE* f) { ucp_ep_print_info(ep_, f); });
    if (!text) {
        ec = make_error_code(boost::system::errc::not_enough_memory);
        return {};
    }
    ec = {};
    return parse_lanes(*text);
}

namespace {

constexpr std::string_view role_names[] = {"address",  "client",       "server",
                                           "borrowed", "plain_client", "plain_server"};
constexpr std::string_view state_names[] = {"idle",    "connecting", "accepting", "open",
                                            "closing", "lingering",  "closed"};

std::string address_text(const endpoint_impl& e, bool remote) {
    sockaddr_storage ss{};
    if (!e.query_sockaddr(remote, ss))
        return {};
    const auto at = to_tcp_endpoint(ss);
    const std::string ip = at.address().to_string();
    return (at.address().is_v6() ? "[" + ip + "]" : ip) + ':' + std::to_string(at.port());
}

} // namespace

void report_endpoints(const worker_impl& w, std::string_view worker_name,
                      std::vector<endpoint_report>& out) {
    const std::size_t first = out.size();
    for (worker_component* c = w.components(component_kind::endpoint); c; c = c->next_component()) {
        const auto& e = static_cast<const endpoint_impl&>(*c);
        endpoint_report& r = out.emplace_back();
        r.worker = worker_name;
        r.id = e.serial();
        r.role = role_names[static_cast<std::size_t>(e.kind())];
        r.state = state_names[static_cast<std::size_t>(e.protocol().state())];
        if (e.error())
            r.error = e.error().message();
        r.fabric = e.is_fabric();
        r.local = address_text(e, false);
        r.remote = address_text(e, true);
        if (e.is_open()) {
            error_code ec;
            r.lanes = e.lanes(ec);
        }
        r.pings = e.pings();
        r.pongs = e.pongs();
        r.round_trip_ns = e.round_trip().count();
        e.metrics(r.metrics);
    }
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
              [](const endpoint_report& a, const endpoint_report& b) { return a.id < b.id; });
}

} // namespace ucx::detail
