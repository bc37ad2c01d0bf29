#include <ucx/log.hpp>

#include "address_acceptor.hpp"
#include "control_channel.hpp"
#include "endpoint_impl.hpp"
#include "request_param.hpp"
#include "worker_impl.hpp"

#include <new>
#include <span>
#include <string>

namespace ucx::detail {

bool control_channel::open() noexcept {
    ucp_am_handler_param_t am{};
    am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    am.id = control_am_id;
    am.cb = &control_channel::on_message;
    am.arg = this;
    open_ = ucp_worker_set_am_recv_handler(worker_.native(), &am) == UCS_OK;
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

hello_taker* control_channel::taker_for(const worker_address& peer) const noexcept {
    for (hello_taker* d : doors_)
        if (d->expects(peer))
            return d;
    return acceptor_;
}

std::size_t control_channel::run_deferred(deferred_stage stage) noexcept {
    return stage == deferred_stage::control ? route() : take_hellos();
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

void control_channel::shutdown() noexcept {
    queue_.clear();
    hellos_.clear();
}

void control_channel::release() noexcept {
    if (hello_taker* a = std::exchange(acceptor_, nullptr))
        a->channel_gone();
    for (hello_taker* d : std::exchange(doors_, {}))
        d->channel_gone();
    takes_hellos_ = false;
    open_ = false;
}

} // namespace ucx::detail
