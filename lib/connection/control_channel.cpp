#include <ucx/log.hpp>

#include "connection/address_acceptor.hpp"
#include "connection/control_channel.hpp"
#include "connection/endpoint_impl.hpp"
#include "core/created.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"

#include <algorithm>
#include <new>
#include <span>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>

namespace ucx::detail {

bool has_control_channel(const worker_impl& w) noexcept {
    const control_channel* c = find_service<control_channel>(w);
    return c && c->is_open();
}

error_code accept_support(const worker_impl& w) noexcept {
    if (!w.is_open())
        return boost::asio::error::bad_descriptor;
    if (!has_control_channel(w))
        return make_error_code(error::feature_not_enabled);
    return {};
}

bool control_channel::open() noexcept {
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = control_am_id;
    am.cb = &control_channel::on_message;
    am.arg = this;
    open_ = ucp_worker_set_am_recv_handler(worker_.native(), &am) == UCS_OK;
    try {
        // Room for the messages of a few endpoints arriving in one progress
        // call (streams' acknowledgements, goodbyes): a first such burst in
        // the middle of a run allocates nothing then. Without it they grow
        // when needed.
        queue_.reserve(16);
        spare_.reserve(16);
    } catch (...) {
    }
    return open_;
}

ucs_status_t control_channel::on_message(void* arg, const void* header, std::size_t header_length,
                                         void* data, std::size_t length,
                                         const ucp_am_recv_param_t* param) noexcept {
    // Inside ucp_worker_progress: validate and queue only.
    auto* self = static_cast<control_channel*>(arg);
    auto message = control_message::decode(
        std::span<const std::byte>(static_cast<const std::byte*>(header), header_length));
    if (!message || !param || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
        param->reply_ep == nullptr) {
        ++self->dropped_;
        return UCS_OK;
    }
    if (self->takes_hellos_ && message->type == control_type::hello &&
        self->find(param->reply_ep) == nullptr) {
        // A peer that connected from a worker address; the data is its
        // worker address in its wire form, checked by the acceptor (eager: small).
        try {
            const auto* p = static_cast<const std::byte*>(data);
            self->hellos_.push_back(
                pending_hello{param->reply_ep, *message,
                              (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || !p
                                  ? std::vector<std::byte>()
                                  : std::vector<std::byte>(p, p + length)});
            self->worker_.defer(*self, deferred_stage::requests);
        } catch (...) {
            // Unanswered: the connector waits for its peer's failure or a cancel.
        }
        return UCS_OK;
    }
    try {
        self->queue_.emplace_back(param->reply_ep, *message);
        self->worker_.defer(*self, deferred_stage::control);
    } catch (...) {
        ++self->dropped_;
    }
    return UCS_OK;
}

/// A control message in flight: UCX 1.13 cannot copy an AM header, so it
/// lives here until the send completes.
struct control_channel::send_state {
    control_channel* channel;
    control_message::wire wire;
    std::vector<std::byte> payload;
};

control_channel::~control_channel() {
    for (send_state* s : free_states_)
        delete s;
}

control_channel::send_state* control_channel::take_state() noexcept {
    if (free_states_.empty())
        return new (std::nothrow) send_state{this, {}, {}};
    send_state* s = free_states_.back();
    free_states_.pop_back();
    return s;
}

void control_channel::recycle(send_state* s) noexcept {
    s->payload.clear();
    try {
        free_states_.push_back(s);
    } catch (...) {
        delete s;
    }
}

bool control_channel::send(ucp_ep_h ep, const control_message& m,
                           std::vector<std::byte> payload) noexcept {
    if (!worker_.native() || ep == nullptr || !open_)
        return false;
    send_state* state = take_state();
    if (!state)
        return false;
    state->wire = m.encode();
    state->payload = std::move(payload);
    ucp_request_param_t param = send_param(&control_channel::sent, state, UCP_AM_SEND_FLAG_REPLY);
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, control_am_id, state->wire.data(), state->wire.size(),
                                         state->payload.empty() ? nullptr : state->payload.data(),
                                         state->payload.size(), &param);
    if (UCS_PTR_IS_PTR(r)) {
        worker_.internal_request_started();
        worker_.request_progress();
        return true;
    }
    recycle(state);
    if (UCS_PTR_IS_ERR(r)) {
        log::write(log::severity::info, std::string("control message not sent: ") +
                                            ucs_status_string(UCS_PTR_STATUS(r)));
        return false;
    }
    return true;
}

void control_channel::sent(void* request, ucs_status_t, void* user_data) noexcept {
    // Inside ucp_worker_progress: bookkeeping only.
    auto* state = static_cast<send_state*>(user_data);
    control_channel& self = *state->channel;
    self.worker_.internal_request_done();
    ucp_request_free(request);
    self.recycle(state);
}

void control_channel::map(ucp_ep_h ep, endpoint_impl* impl) {
    last_found_ep_ = nullptr;
    endpoints_[ep] = impl;
}

void control_channel::unmap(ucp_ep_h ep) noexcept {
    last_found_ep_ = nullptr;
    endpoints_.erase(ep);
}

bool control_channel::attach_acceptor(hello_taker* a) noexcept {
    if (acceptor_ && acceptor_ != a)
        return false;
    acceptor_ = a;
    takes_hellos_ = true;
    worker_.running_needs_changed();
    return true;
}

void control_channel::detach_acceptor(hello_taker* a) noexcept {
    if (acceptor_ == a) {
        acceptor_ = nullptr;
        worker_.running_needs_changed();
    }
}

void control_channel::attach_door(hello_taker* d) {
    if (std::find(doors_.begin(), doors_.end(), d) == doors_.end())
        doors_.push_back(d);
    takes_hellos_ = true;
}

void control_channel::detach_door(hello_taker* d) noexcept {
    std::erase(doors_, d);
}

hello_taker* control_channel::taker_for(const worker_address& peer,
                                        std::span<const std::byte> ticket) const noexcept {
    for (hello_taker* d : doors_)
        if (d->expects(peer, ticket))
            return d;
    return acceptor_;
}

std::size_t control_channel::run_deferred(deferred_stage stage) noexcept {
    if (stage == deferred_stage::control)
        return route();
    // A connection of this worker to itself: its endpoint first, then its hello.
    take_self_requests();
    return take_hellos();
}

std::size_t control_channel::route() noexcept {
    // Swapped with a spare that keeps its capacity: no allocation per
    // control message (stream acknowledgements are steady traffic).
    queue_.swap(spare_);
    std::size_t n = 0;
    for (const auto& [ep, message] : spare_) {
        if (endpoint_impl* impl = find(ep))
            impl->on_control(message);
        else
            ++dropped_;
        ++n;
    }
    spare_.clear();
    return n;
}

std::size_t control_channel::take_hellos() noexcept {
    sweep_unclaimed();
    hellos_.swap(hellos_spare_);
    for (const auto& h : hellos_spare_) {
        if (!worker_.is_open())
            break;
        if (endpoint_impl* known = find(h.reply_ep))
            known->on_control(h.hello); // a repeated hello: ignored there
        else
            take_hello(worker_, *this, h.reply_ep, h.hello, h.address);
    }
    const std::size_t n = hellos_spare_.size();
    hellos_spare_.clear();
    return n;
}

ucp_ep_h control_channel::own_endpoint(ucp_ep_h reply_ep, const worker_address& peer) noexcept {
    sweep_unclaimed();
    for (auto it = unclaimed_.begin(); it != unclaimed_.end(); ++it) {
        if (it->ep == reply_ep) {
            // Created earlier for another hello; this is the one it pairs with.
            const bool failed = it->failed;
            unclaimed_.erase(it);
            if (!failed)
                return reply_ep;
            worker_.close_ucp_endpoint(reply_ep, true);
            return nullptr;
        }
    }
    if (peer.empty() || !worker_.is_open())
        return nullptr;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer.ucx_bytes().data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &control_channel::owned_error;
    params.err_handler.arg = this;
    while (unclaimed_.size() < max_unclaimed) {
        ucp_ep_h ep = nullptr;
        if (ucp_ep_create(worker_.native(), &params, &ep) != UCS_OK || ep == nullptr)
            return nullptr;
        if (ep == reply_ep)
            return ep;
        if (find(ep) != nullptr)
            return nullptr; // UCX answered with a connection already taken: never closed here
        if (!keep_unclaimed(ep))
            return nullptr;
    }
    log::write(log::severity::warning, "control channel: too many connections of one peer "
                                       "still to say hello");
    return nullptr;
}

bool control_channel::keep_unclaimed(ucp_ep_h ep) noexcept {
    const auto& o = worker_.options();
    const auto wait =
        o.handshake_timeout.count() > 0 ? o.handshake_timeout : std::chrono::milliseconds(60000);
    bool kept = false;
    if (unclaimed_.size() < max_unclaimed) {
        try {
            unclaimed_.push_back({ep, std::chrono::steady_clock::now() + wait});
            kept = true;
        } catch (...) {
        }
    }
    if (!kept) {
        worker_.close_ucp_endpoint(ep, true);
        return false;
    }
    if (unclaimed_.size() == 1)
        arm_unclaimed_timer();
    return true;
}

void control_channel::self_connect_params(ucp_ep_params_t& params, error_code& ec) noexcept {
    if (!worker_.is_open() || !open_) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    if (self_listener_ == nullptr) {
        sockaddr_in any{};
        any.sin_family = AF_INET;
        any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        any.sin_port = 0; // any free port
        ucp_listener_params_t lp{};
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&any);
        lp.sockaddr.addrlen = sizeof(any);
        lp.conn_handler.cb = &control_channel::self_request;
        lp.conn_handler.arg = this;
        if (!created(ucp_listener_create(worker_.native(), &lp, &self_listener_), self_listener_,
                     ec))
            return;
        ucp_listener_attr_t attr{};
        attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        if (ucs_status_t st = ucp_listener_query(self_listener_, &attr); st != UCS_OK) {
            ec = make_error_code(st);
            close_self_listener();
            return;
        }
        // Bound to the loopback address, whatever UCX reports of it.
        self_address_ = any;
        self_address_.sin_port = reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port;
    }
    params.field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&self_address_);
    params.sockaddr.addrlen = sizeof(self_address_);
    ec = {};
}

void control_channel::self_request(ucp_conn_request_h request, void* arg) noexcept {
    // Inside ucp_worker_progress: queue only.
    auto* self = static_cast<control_channel*>(arg);
    try {
        self->self_requests_.push_back(request);
        self->worker_.defer(*self, deferred_stage::requests);
    } catch (...) {
        std::erase(self->self_requests_, request);
        ucp_listener_reject(self->self_listener_, request);
    }
}

void control_channel::take_self_requests() noexcept {
    for (ucp_conn_request_h request : std::exchange(self_requests_, {})) {
        ucp_ep_params_t params{};
        params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                            UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.conn_request = request;
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb = &control_channel::owned_error;
        params.err_handler.arg = this;
        ucp_ep_h ep = nullptr;
        if (!worker_.is_open() || self_listener_ == nullptr) {
            if (self_listener_)
                ucp_listener_reject(self_listener_, request);
            continue;
        }
        if (ucp_ep_create(worker_.native(), &params, &ep) != UCS_OK || ep == nullptr) {
            log::write(log::severity::warning,
                       "control channel: a connection of the worker to itself failed");
            continue; // the connector's endpoint fails
        }
        if (!keep_unclaimed(ep))
            log::write(log::severity::warning, "control channel: too many connections still "
                                               "to say hello");
    }
}

void control_channel::close_self_listener() noexcept {
    if (self_listener_ == nullptr)
        return;
    for (ucp_conn_request_h request : std::exchange(self_requests_, {}))
        ucp_listener_reject(self_listener_, request);
    ucp_listener_destroy(std::exchange(self_listener_, nullptr));
}

void control_channel::owned_error(void* arg, ucp_ep_h ep, ucs_status_t status) noexcept {
    // Inside ucp_worker_progress: record only.
    auto* self = static_cast<control_channel*>(arg);
    if (endpoint_impl* impl = self->find(ep))
        return endpoint_impl::error_callback(impl, ep, status);
    for (auto& u : self->unclaimed_)
        if (u.ep == ep)
            u.failed = true;
    self->worker_.defer(*self, deferred_stage::requests);
}

void control_channel::sweep_unclaimed() noexcept {
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(unclaimed_, [&](const unclaimed_endpoint& u) {
        if (!u.failed && u.deadline > now)
            return false;
        if (!u.failed)
            log::write(log::severity::info,
                       "control channel: a peer's connection never said hello: closed");
        worker_.close_ucp_endpoint(u.ep, true);
        return true;
    });
}

void control_channel::arm_unclaimed_timer() noexcept {
    if (unclaimed_.empty())
        return;
    try {
        if (!unclaimed_timer_)
            unclaimed_timer_ = std::make_unique<guarded_timer>(worker_.get_executor());
        auto first =
            std::min_element(unclaimed_.begin(), unclaimed_.end(),
                             [](const auto& a, const auto& b) { return a.deadline < b.deadline; });
        unclaimed_timer_->start_at(first->deadline, worker_.weak_from_this(),
                                   [](worker_impl& w, const error_code& ec) {
                                       if (ec)
                                           return;
                                       control_channel& c = control_channel::of(w);
                                       c.sweep_unclaimed();
                                       c.arm_unclaimed_timer();
                                   });
    } catch (...) {
        // Swept at the next hello instead.
    }
}

void control_channel::add_metrics(worker_metrics& m) const noexcept {
    m.heartbeat_pings = liveness_.pings.load();
    m.heartbeat_pongs = liveness_.pongs.load();
    m.peers_unresponsive = liveness_.unresponsive.load();
    liveness_.round_trip.snapshot(m.heartbeat_round_trip);
}

void control_channel::shutdown() noexcept {
    queue_.clear();
    hellos_.clear();
    close_self_listener();
    if (unclaimed_timer_)
        unclaimed_timer_->cancel();
    for (const auto& u : std::exchange(unclaimed_, {}))
        worker_.close_ucp_endpoint(u.ep, true);
    worker_.remove_component(*this);
}

void control_channel::release_service() noexcept {
    close_self_listener();
    if (hello_taker* a = std::exchange(acceptor_, nullptr))
        a->channel_gone();
    for (hello_taker* d : std::exchange(doors_, {}))
        d->channel_gone();
    takes_hellos_ = false;
    open_ = false;
}

} // namespace ucx::detail
