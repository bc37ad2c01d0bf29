#include "messaging/tag_receiver_impl.hpp"

#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <utility>

namespace ucx::detail {

tag_receiver_impl::tag_receiver_impl(std::shared_ptr<worker_impl> w, tag_t tag, tag_t mask) noexcept
    : worker_component(component_kind::service), worker_(std::move(w)), tag_(tag), mask_(mask) {}

tag_receiver_impl::~tag_receiver_impl() {
    // Closed before the last reference went: UCX holds no slot.
    free_requests();
    worker_->forget(*this);
}

void tag_receiver_impl::open(const tag_receiver_options& o, error_code& ec) noexcept {
    // A slot's size up to 1 GiB; the whole block within what a size_t holds.
    constexpr std::size_t max_slot_size = std::size_t{1} << 30;
    if (o.slots == 0 || o.slots > max_slots || o.slot_size == 0 || o.slot_size > max_slot_size) {
        ec = boost::asio::error::invalid_argument;
        return;
    }
    worker_impl& w = *worker_;
    if (!w.is_open()) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    constexpr std::size_t align = 64;
    const std::size_t stride = (o.slot_size + align - 1) & ~(align - 1);
    try {
        memory_ = std::make_unique_for_overwrite<std::byte[]>(stride * o.slots + align);
        slots_.resize(o.slots);
        results_.resize(o.slots);
    } catch (...) {
        ec = make_error_code(error::allocation_failed);
        return;
    }
    auto at = reinterpret_cast<std::uintptr_t>(memory_.get());
    at = (at + align - 1) & ~static_cast<std::uintptr_t>(align - 1);
    slot_size_ = o.slot_size;
    table_ = tag_slot_table{reinterpret_cast<const std::byte*>(at), stride, results_.data()};
    for (slot& s : slots_) {
        s.owner = this;
        s.own_request = w.take_request();
        // The callback in every case: UCX 1.13 does not fill the receive's
        // information when it completes one at once from its queue of
        // unexpected messages. The callback only records.
        s.param = recv_param(&tag_receiver_impl::on_received, &s);
        add_no_immediate_completion(s.param);
        if (s.own_request)
            add_request(s.param, s.own_request);
    }
    w.add_component(*this);
    open_ = true;
    for (std::uint32_t i = 0; i < slots_.size(); ++i)
        post(i);
    ec = {};
}

bool tag_receiver_impl::is_open() const noexcept {
    return open_ && worker_->is_open();
}

// Inline in `release`'s loop: once per message.
[[gnu::always_inline]] inline void tag_receiver_impl::post(std::uint32_t i) noexcept {
    slot& s = slots_[i];
    worker_impl& w = *worker_;
    if (s.ucx_request && !s.own_request) {
        ucp_request_free(s.ucx_request); // from UCX's pool: done with it
        s.ucx_request = nullptr;
    }
    s.posted = true;
    ++posted_;
    void* data = const_cast<std::byte*>(table_.data) + i * table_.stride;
    const ucs_status_ptr_t r =
        ucp_tag_recv_nbx(w.native(), data, slot_size_, tag_, mask_, &s.param);
    if (UCS_PTR_IS_ERR(r)) [[unlikely]] {
        s.posted = false;
        --posted_;
        ended(i, UCS_PTR_STATUS(r), 0, 0);
        return;
    }
    if (UCS_PTR_IS_PTR(r))
        s.ucx_request = r;
}

void tag_receiver_impl::on_received(void* request, ucs_status_t status,
                                    const ucp_tag_recv_info_t* info, void* user_data) noexcept {
    // Inside UCX: record only.
    auto* s = static_cast<slot*>(user_data);
    tag_receiver_impl& self = *s->owner;
    s->posted = false;
    s->ucx_request = request;
    --self.posted_;
    if (!self.open_) [[unlikely]]
        return self.called_back_closed();
    const auto i = static_cast<std::uint32_t>(s - self.slots_.data());
    self.ended(i, status, status == UCS_OK && info ? info->length : 0, info ? info->sender_tag : 0);
}

void tag_receiver_impl::called_back_closed() noexcept {
    // The callbacks after close are counted as the worker's internal
    // requests (see close), and the last one lets the receiver go, outside
    // UCX.
    if (counted_ > 0) {
        --counted_;
        worker_->internal_request_done();
    }
    if (posted_ == 0 && self_)
        boost::asio::post(worker_->get_executor(), [keep = std::move(self_)] {});
}

// Inline in the callback (and in `post`'s refusal): once per message.
[[gnu::always_inline]] inline void tag_receiver_impl::ended(std::uint32_t i, ucs_status_t status,
                                                            std::size_t length,
                                                            tag_t tag) noexcept {
    tag_slot_result& r = results_[i];
    r.length = length;
    r.tag = tag;
    r.status = status;
    if (ready_count_ == 0)
        ready_first_ = i;
    else
        results_[ready_last_].next = i;
    ready_last_ = i;
    ++ready_count_;
    ready_bytes_ += length;
    // A receive waits only while none is ready (it takes them at once
    // otherwise): the first one queues the hand-out.
    if (waiting_ && ready_count_ == 1) [[unlikely]]
        queue_hand_out();
}

void tag_receiver_impl::queue_hand_out() noexcept {
    worker_->defer(*this, deferred_stage::messages);
}

void tag_receiver_impl::receive(tag_batch_op* op) noexcept {
    worker_impl& w = *worker_;
    op->kind = operation_kind::tag_recv;
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &tag_receiver_impl::cancel_waiting;
    op->cancel_context = this;
    if (!w.is_open() || op->cancel_requested)
        return w.complete(op, boost::asio::error::operation_aborted);
    if (!open_)
        return w.complete(op, boost::asio::error::bad_descriptor);
    if (waiting_)
        return w.complete(op, boost::asio::error::already_started);
    waiting_ = op;
    if (ready_count_ > 0)
        hand_out();
}

void tag_receiver_impl::hand_out() noexcept {
    tag_batch_op* op = std::exchange(waiting_, nullptr);
    op->owner = shared_from_this();
    op->first = ready_first_;
    op->count = ready_count_;
    op->bytes = ready_bytes_;
    ready_count_ = 0;
    ready_bytes_ = 0;
    worker_->complete(op, error_code());
}

std::size_t tag_receiver_impl::run_deferred(deferred_stage) noexcept {
    if (!waiting_ || ready_count_ == 0)
        return 0;
    hand_out();
    return 1;
}

void tag_receiver_impl::cancel_waiting(operation* op, boost::asio::cancellation_type) noexcept {
    auto* self = static_cast<tag_receiver_impl*>(op->cancel_context);
    if (self->waiting_ != op)
        return;
    self->waiting_ = nullptr;
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void tag_receiver_impl::cancel() noexcept {
    if (tag_batch_op* op = std::exchange(waiting_, nullptr))
        worker_->complete(op, boost::asio::error::operation_aborted);
}

void tag_receiver_impl::release(std::uint32_t first, std::size_t count) noexcept {
    if (!open_)
        return; // closed: UCX holds none of them, nothing is posted again
    std::uint32_t i = first;
    for (std::size_t k = 0; k < count; ++k) {
        const std::uint32_t next = results_[i].next; // post() may chain i anew
        post(i);
        i = next;
    }
}

void tag_receiver_impl::close() noexcept {
    if (!open_)
        return;
    open_ = false;
    cancel();
    ready_count_ = 0; // received, not handed out: dropped
    ready_bytes_ = 0;
    worker_impl& w = *worker_;
    // A receive UCX has not matched calls back at once; one whose data is
    // still coming (a rendezvous) calls back when it arrives or fails.
    for (slot& s : slots_)
        if (s.posted && s.ucx_request && w.native())
            ucp_request_cancel(w.native(), s.ucx_request);
    if (posted_ > 0) {
        counted_ = posted_;
        for (std::size_t k = 0; k < counted_; ++k)
            w.internal_request_started();
        self_ = weak_from_this().lock();
    }
    w.remove_component(*this);
}

void tag_receiver_impl::shutdown() noexcept {
    close();
}

void tag_receiver_impl::free_requests() noexcept {
    for (slot& s : slots_) {
        if (s.posted)
            continue; // the worker's UCX worker went with it
        if (s.own_request)
            worker_->give_request(std::exchange(s.own_request, nullptr));
        else if (s.ucx_request)
            ucp_request_free(std::exchange(s.ucx_request, nullptr));
    }
}

// ---- the functions the public header calls ----

std::shared_ptr<tag_receiver_impl> make_tag_receiver(const std::shared_ptr<worker_impl>& w,
                                                     tag_t tag, tag_t mask,
                                                     const tag_receiver_options& o) {
    auto r = std::make_shared<tag_receiver_impl>(w, tag, mask);
    error_code ec;
    r->open(o, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::tag_receiver");
    return r;
}
worker_core& core_of(const tag_receiver_impl& r) noexcept {
    return r.worker();
}
void tag_receiver_receive(tag_receiver_impl& r, tag_batch_op* op) noexcept {
    r.receive(op);
}
void tag_receiver_cancel(tag_receiver_impl& r) noexcept {
    r.cancel();
}
void tag_receiver_close(tag_receiver_impl& r) noexcept {
    r.close();
}
bool tag_receiver_is_open(const tag_receiver_impl& r) noexcept {
    return r.is_open();
}
std::size_t tag_receiver_slots(const tag_receiver_impl& r) noexcept {
    return r.slots();
}
const tag_slot_table& tag_receiver_table(const tag_receiver_impl& r) noexcept {
    return r.table();
}
void tag_receiver_release(tag_receiver_impl& r, std::uint32_t first, std::size_t count) noexcept {
    r.release(first, count);
}
error_code tag_slot_error(std::int32_t status) noexcept {
    return make_error_code(static_cast<ucs_status_t>(status));
}

} // namespace ucx::detail
