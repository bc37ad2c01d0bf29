#include <ucx/detail/initiate.hpp>
#include <ucx/log.hpp>
#include <ucx/worker.hpp>

#include "core/context_impl.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "util/cpu_relax.hpp"
#include "util/intrusive_list.hpp"

#include <sched.h>

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>

namespace ucx {
namespace detail {

namespace {

progress_config make_progress_config(const worker_options& o) {
    progress_config c;
    c.mode = o.mode;
    c.spin = o.spin_duration;
    c.adaptive_spin = o.adaptive_spin;
    c.max_steps_per_pass = std::max(2u, o.max_steps_per_handler);
    c.spin_slice = o.spin_slice;
    c.yield_cpu = o.yield_cpu;
    return c;
}
} // namespace

inline bool worker_impl::nothing_to_deliver() const noexcept {
    return done_head_ == nullptr && deferred_stages_ == 0;
}

inline unsigned worker_impl::progress_ucp_once() noexcept {
    ++stats_.progress_calls;
    const unsigned events = ucp_worker_progress(worker_);
    // Stream data that arrived goes to its stream at once (see
    // watch_streams); only workers with a stream waiting without a read look.
    if (events != 0 && streams_ != 0)
        take_stream_data_(*this);
    return events;
}

inline unsigned worker_impl::progress_ucp() noexcept {
    if (ops_.measures_latency()) [[unlikely]]
        return progress_ucp_measured();
    return progress_ucp_once();
}

// Where latencies are measured: the operations that end inside one
// ucp_worker_progress call (in UCX's callbacks, or as stream data is handed
// out) share one reading of the clock, taken when the first of them ends.
// The later ones ended at most that call's duration after it (a fraction of
// the smallest bucket, 1 µs, for the calls that complete many), and a
// message rate does not pay a clock read per receive.
[[gnu::noinline]] unsigned worker_impl::progress_ucp_measured() noexcept {
    ends_share_clock_ = true;
    ends_read_ = false;
    const unsigned events = progress_ucp_once();
    ends_share_clock_ = false;
    return events;
}

inline bool worker_impl::work_pending() const noexcept {
    return in_flight_count_.load() + internal_requests_ > 0;
}

inline bool worker_impl::awaited_work_pending() const noexcept {
    return in_flight_count_.load() - background_count_ + internal_requests_ > 0;
}

// The UCX side of the progress engine: what run_progress_pass calls.
struct engine_backend {
    worker_impl& w;

    std::size_t progress() {
        const unsigned events = w.progress_ucp();
        // Most spinning steps find nothing: decide that inline, and pause
        // before the next poll (see cpu_relax).
        if (w.nothing_to_deliver()) {
            if (events == 0 && w.relax_when_quiet_)
                cpu_relax();
            return events;
        }
        const std::size_t delivered = w.deliver_completions(operation::delivery::dispatch);
        if (delivered != 0)
            w.fsm_.on_delivered();
        return events + delivered;
    }
    // Poll mode spins for the operations someone waits for, not for the
    // library's standing receives.
    bool work_pending() const noexcept { return w.awaited_work_pending(); }
    bool submissions_queued() const noexcept { return w.submissions_queued(); }
    bool queue_wait() { return w.queue_wait(); }
    bool arm() {
        ++w.stats_.arms;
        const ucs_status_t st = ucp_worker_arm(w.worker_);
        if (st == UCS_OK)
            return false;
        if (st == UCS_ERR_BUSY) {
            ++w.stats_.arm_busy;
            return true;
        }
        // Cannot sleep on the fd (no wakeup support): keep progressing, yielding.
        if (!w.arm_error_logged_) {
            w.arm_error_logged_ = true;
            log::write(log::severity::warning,
                       std::string("ucp_worker_arm: ") + ucs_status_string(st));
        }
        return true;
    }
    // A pass that yields, backs off or parks goes on running: a wait still
    // queued from the last sleep (a submission, not the fd, started the
    // pass) is cancelled, and the fd leaves the reactor until the next sleep.
    void post_pass() {
        w.leave_reactor();
        ++w.stats_.yields;
        boost::asio::post(w.executor_, [weak = w.weak_from_this()] {
            if (auto self = weak.lock())
                self->run_pass();
        });
    }
    void post_pass_after(std::chrono::nanoseconds d) {
        w.leave_reactor();
        ++w.stats_.backoffs;
        w.backoff_timer_.start_after(d, w.weak_from_this(),
                                     [](worker_impl& self, const error_code& ec) {
                                         if (!ec)
                                             self.run_pass();
                                     });
    }
    void relax() {
        ++w.stats_.cpu_yields;
        sched_yield();
    }
    void park() {
        w.leave_reactor();
        ++w.stats_.parks;
        w.spin_group_->park(w);
    }
    bool stopped() const noexcept { return w.worker_ == nullptr || w.stopping_; }
};

worker_impl::worker_impl(std::shared_ptr<context_impl> ctx, const executor_type& ex,
                         const worker_options& options)
    : worker_core(ex), context_(std::move(ctx)), options_(options), efd_(ex), safety_timer_(ex),
      backoff_timer_(ex), fsm_(make_progress_config(options)),
      ops_(options.latency_histograms ? std::max(1u, options.latency_sampling) : 0u) {
    relax_when_quiet_ = short_cpu_relax();
    if (ops_.measures_latency()) {
        latency_clock_ = &tick_clock::get();
        sample_countdown_ = next_sample_gap();
    }
}

void worker_impl::stamp(operation* op) noexcept {
    if (--sample_countdown_ != 0) [[likely]] {
        op->started_at = operation::not_measured;
        return;
    }
    sample_countdown_ = next_sample_gap();
    op->started_at = latency_clock_->now();
}

std::uint32_t worker_impl::next_sample_gap() noexcept {
    std::uint64_t x = sample_state_;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    sample_state_ = x;
    const std::uint64_t n = ops_.latency_sampling();
    return static_cast<std::uint32_t>(x % (2 * n - 1) + 1);
}

worker_impl::~worker_impl() {
    shutdown();
    // The services go in the reverse order of their coming, as they were released.
    std::lock_guard lock(services_mu_);
    while (!services_.empty())
        services_.pop_back();
}

void worker_impl::open(void (*open_services)(worker_impl&)) {
    if (!context_ || !context_->native())
        throw boost::system::system_error(make_error_code(error::context_closed),
                                          "ucx::worker: the context is not open");
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Serialized: one executor at a time, which may be a strand over threads.
    params.thread_mode =
        context_->multi_threaded() ? UCS_THREAD_MODE_MULTI : UCS_THREAD_MODE_SERIALIZED;
    if (ucs_status_t st = ucp_worker_create(context_->native(), &params, &worker_); st != UCS_OK) {
        worker_ = nullptr;
        throw boost::system::system_error(make_error_code(st), "ucp_worker_create");
    }
    int fd = -1;
    if (ucs_status_t st = ucp_worker_get_efd(worker_, &fd); st != UCS_OK) {
        ucp_worker_destroy(worker_);
        worker_ = nullptr;
        throw boost::system::system_error(make_error_code(st), "ucp_worker_get_efd");
    }
    // The address, once: it does not change, and every connect by host:port
    // and every client of a listener's door sends it.
    {
        ucp_address_t* addr = nullptr;
        std::size_t len = 0;
        if (ucs_status_t st = ucp_worker_get_address(worker_, &addr, &len); st != UCS_OK) {
            ucp_worker_destroy(worker_);
            worker_ = nullptr;
            throw boost::system::system_error(make_error_code(st), "ucp_worker_get_address");
        }
        auto* p = reinterpret_cast<const std::byte*>(addr);
        address_ = worker_address(std::vector<std::byte>(p, p + len));
        ucp_worker_release_address(worker_, addr);
    }
    event_fd_ = fd;
    // The size of UCX's request, for the requests of the worker's own
    // (take_request); without it, UCX's pool serves every request.
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
    if (ucp_context_query(context_->native(), &attr) == UCS_OK)
        ucp_request_size_ = attr.request_size;
    // The services that serve the peers from the start (the control channel,
    // the active-message registry on top) and the staging of device
    // buffers, before anything else joins.
    if (open_services)
        open_services(*this);
    // An io_context (plain or behind a strand): its work count.
    if (native_executor_)
        work_context_ = &native_executor_->context();
    else if (auto* strand =
                 executor_.target<boost::asio::strand<boost::asio::io_context::executor_type>>())
        work_context_ = &strand->get_inner_executor().context();
    // Polling workers of one io_context spin in turns (see spin_group).
    if (options_.mode != progress_mode::event && native_executor_) {
        spin_group_ = &spin_group::of(native_executor_->context());
        spin_group_->join(*this);
    }
    // Serve the peers from the start: the first pass queues the wait on the fd.
    request_progress();
    log::write(log::severity::debug,
               "worker created, progress mode " + std::string(to_string(options_.mode)));
}

worker_address worker_impl::address() const {
    if (!worker_)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::worker::address");
    return address_;
}

// ---- counters ----

worker_stats worker_impl::stats() const noexcept {
    worker_stats s;
    s.passes = stats_.passes;
    s.progress_calls = stats_.progress_calls;
    s.arms = stats_.arms;
    s.arm_busy = stats_.arm_busy;
    s.wakeups = stats_.wakeups;
    s.yields = stats_.yields;
    s.cpu_yields = stats_.cpu_yields;
    s.backoffs = stats_.backoffs;
    s.parks = stats_.parks;
    s.safety_timer_passes = stats_.safety_timer_passes;
    s.completions = stats_.completions;
    if (const worker_component* staging = staging_.get())
        staging->add_stats(s);
    return s;
}

void worker_impl::metrics(worker_metrics& m) const {
    const worker_stats s = stats();
    m.passes = s.passes;
    m.progress_calls = s.progress_calls;
    m.arms = s.arms;
    m.arm_busy = s.arm_busy;
    m.wakeups = s.wakeups;
    m.yields = s.yields;
    m.cpu_yields = s.cpu_yields;
    m.backoffs = s.backoffs;
    m.parks = s.parks;
    m.safety_timer_passes = s.safety_timer_passes;
    m.staged_operations = s.staged_operations;
    m.staged_bytes = s.staged_bytes;
    m.in_flight = in_flight_count_.load();
    ops_.snapshot(m);
    std::lock_guard lock(services_mu_);
    for (const auto& s : services_)
        s->add_metrics(m);
}

// ---- operations ----

// Inline here (its only file): once per operation, at its end.
inline void worker_impl::unlink(operation* op) noexcept {
    if (!op->in_flight)
        return;
    // Every started operation leaves the list once, here, with its result
    // set (by UCX's callback, the library, or shutdown). Success inline
    // (its latency, where measured, out of line); failures out of line.
    // (UCS_OK with an error set does not occur: `complete` sets UCS_OK only
    // without an error.) What is counted is read before the counters' stores.
    const bool success = op->status == UCS_OK && !op->aborted;
    const operation_kind kind = op->kind;
    kind_counters* const in = op->counted_in;
    const std::uint64_t n = counted_bytes(op);
    op->in_flight = false;
    in_flight_list::erase(in_flight_head_, op);
    --in_flight_count_;
    background_count_ -= op->background;
    if (success) [[likely]] {
        ops_.succeeded(kind, in, n);
        if (ops_.measures_latency() && op->started_at > 0) [[unlikely]]
            took(op);
        return;
    }
    count_end(op);
}

void worker_impl::took(operation* op) noexcept {
    std::int64_t now;
    if (ends_share_clock_) {
        // Inside a ucp_worker_progress call: its one reading (see
        // progress_ucp_measured).
        if (!ends_read_) {
            ends_at_ = latency_clock_->now();
            ends_read_ = true;
        }
        now = ends_at_;
    } else {
        now = latency_clock_->now();
    }
    ops_.took(op->kind, latency_clock_->to_duration(now - op->started_at));
}

void worker_impl::count_end(operation* op) noexcept {
    const operation_kind kind = op->kind;
    const error_code ec = op->result_code();
    const std::uint64_t n = counted_bytes(op);
    ops_.ended(kind, op->counted_in, ec, n);
    if (ops_.measures_latency() && op->started_at > 0)
        took(op);
}

// Inline in UCX's callbacks below: once per operation.
inline void worker_impl::finish(operation* op) noexcept {
    if (op->counted_send && op->endpoint) [[unlikely]] {
        op->counted_send = false;
        finish_counted_send_(op);
    }
    unlink(op);
    queue_done(op);
}

void worker_impl::finished(operation* op) noexcept {
    finish(op);
}

void worker_impl::submitted(operation* op, ucs_status_ptr_t result) noexcept {
    if (UCS_PTR_IS_PTR(result)) {
        op->request = result;
        if (op->cancel_requested && op->status == UCS_INPROGRESS)
            ucp_request_cancel(worker_, result);
    } else {
        // Completed (or failed) at once: still delivered from a later pass,
        // never inside the initiating function.
        op->status = UCS_PTR_STATUS(result);
        finish(op);
    }
    request_progress();
}

void worker_impl::complete(operation* op, const error_code& ec) noexcept {
    // An empty `ec` leaves `error` as constructed (empty), which success
    // hands to the handler (operation::result_code).
    if (ec)
        op->error = ec;
    else
        op->status = UCS_OK;
    if (!worker_ || stopping_) {
        unlink(op);
        op->complete(operation::delivery::post);
        return;
    }
    finish(op);
    request_progress();
}

void worker_impl::tag_recv(tag_recv_op* op, void* data, std::size_t size, ucp_tag_t tag,
                           ucp_tag_t mask) noexcept {
    start(op);
    op->cancellable = true;
    if (!is_open())
        return complete(op, boost::asio::error::operation_aborted);
    if (op->cancel_requested)
        return complete(op, boost::asio::error::operation_aborted);
    // UCX 1.13 does not fill recv_info when it completes a receive at once
    // from its unexpected queue (observed: length and tag read back as 0), so
    // ask for the callback in every case; it only queues the operation.
    ucp_request_param_t param = recv_param(&worker_impl::recv_callback, op);
    add_no_immediate_completion(param);
    // The request is the worker's own: UCX neither takes it from its pool
    // nor needs ucp_request_free (measured: 33 instructions per receive in
    // ucp_request_free alone); delivery gives it back.
    void* const own = take_request();
    if (own) [[likely]]
        add_request(param, own);
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, data, size, tag, mask, &param);
    if (UCS_PTR_IS_PTR(r)) [[likely]] {
        // `submitted`'s common case, inline (once per receive). Nothing can
        // have asked for its cancellation since the check above.
        op->request = r;
        op->owns_request = own != nullptr;
        request_progress();
        return;
    }
    if (own)
        give_request(own); // refused: UCX did not keep it
    submitted(op, r);
}

void* worker_impl::new_request() noexcept {
    if (ucp_request_size_ == 0)
        return nullptr;
    try {
        // UCX's request before the pointer, aligned as its own pool aligns
        // them (a cache line); the link of the free list after it. Several
        // at a time, side by side, as UCX's pool keeps them: the requests in
        // flight stay on few pages.
        constexpr std::size_t align = 64;
        constexpr std::size_t per_block = 16;
        const std::size_t stride = (ucp_request_size_ + sizeof(void*) + align - 1) & ~(align - 1);
        auto block = std::make_unique<std::byte[]>(per_block * stride + align);
        auto at = reinterpret_cast<std::uintptr_t>(block.get());
        at = (at + align - 1) & ~static_cast<std::uintptr_t>(align - 1);
        request_blocks_.push_back(std::move(block));
        auto* first = reinterpret_cast<std::byte*>(at) + ucp_request_size_;
        for (std::size_t i = per_block - 1; i > 0; --i)
            give_request(first + i * stride);
        return first;
    } catch (...) {
        return nullptr; // UCX's pool serves this one
    }
}

ucs_status_ptr_t worker_impl::tag_msg_recv_at_once(void* data, std::size_t size,
                                                   ucp_tag_message_h message) noexcept {
    // No operation yet: most such receives complete inside the call. A
    // request's callback runs from a later progress, never inside the call,
    // so the operation that completes it is attached after UCX has answered
    // (`adopt_recv`), in the request's own space (see the context's
    // `request_size`), empty until then.
    const ucp_request_param_t param = recv_param(&worker_impl::adopted_recv_callback, nullptr);
    const ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, data, size, message, &param);
    if (UCS_PTR_IS_PTR(r))
        *static_cast<operation**>(r) = nullptr;
    return r;
}

void worker_impl::adopt_recv(tag_recv_op* op, ucs_status_ptr_t r) noexcept {
    start(op);
    op->cancellable = true;
    if (UCS_PTR_IS_PTR(r))
        *static_cast<operation**>(r) = op;
    submitted(op, r);
}

void worker_impl::adopted_recv_callback(void* request, ucs_status_t status,
                                        const ucp_tag_recv_info_t* info, void*) noexcept {
    if (auto* op = *static_cast<operation**>(request))
        return recv_callback(request, status, info, op);
    // Its operation was never made (the caller's allocation threw): nothing
    // waits for it.
    ucp_request_free(request);
}

void worker_impl::cancel(operation* op, boost::asio::cancellation_type type) noexcept {
    if (op->status != UCS_INPROGRESS || !op->in_flight)
        return;
    if (op->cancel_hook) {
        op->cancel_hook(op, type);
        return;
    }
    if (op->request == nullptr) {
        // Not in UCX's hands yet (held for staging): it ends when it would
        // have been submitted.
        op->cancel_requested = true;
        return;
    }
    if (op->cancellable) {
        if (worker_) {
            ucp_request_cancel(worker_, op->request);
            request_progress();
        }
        return;
    }
    // UCX holds it and cannot cancel it: only a terminal cancellation, by
    // failing its endpoint (UCX completes it when it releases the buffer).
    if ((type & boost::asio::cancellation_type::terminal) == boost::asio::cancellation_type::none)
        return;
    if (op->endpoint && cancel_endpoint_) {
        op->reason = boost::asio::error::operation_aborted;
        cancel_endpoint_(op);
        request_progress();
    }
}

void worker_impl::send_callback(void* request, ucs_status_t status, void* user_data) noexcept {
    auto* op = static_cast<operation*>(user_data);
    op->request = request;
    op->status = status;
    op->owner->finish(op);
}

void worker_impl::recv_callback(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                                void* user_data) noexcept {
    auto* op = static_cast<tag_recv_op*>(static_cast<operation*>(user_data));
    op->request = request;
    op->status = status;
    if (status == UCS_OK && info) {
        op->bytes = info->length;
        op->sender_tag = info->sender_tag;
    }
    op->owner->finish(op);
}

void worker_impl::close_callback(void* request, ucs_status_t, void* user_data) noexcept {
    auto* self = static_cast<worker_impl*>(user_data);
    ucp_request_free(request);
    --self->internal_requests_;
}

ucs_status_ptr_t worker_impl::close_ucp_endpoint(ucp_ep_h ep, bool force, operation* op) noexcept {
    const std::uint32_t flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    if (op) {
        ucp_request_param_t param = send_param(&worker_impl::send_callback, op, flags);
        return ucp_ep_close_nbx(ep, &param);
    }
    ucp_request_param_t param = send_param(&worker_impl::close_callback, this, flags);
    if (ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &param); UCS_PTR_IS_PTR(r)) {
        ++internal_requests_;
        request_progress();
    }
    return nullptr;
}

// ---- components ----

bool worker_impl::needed() const noexcept {
    if (work_pending() || heads_[static_cast<std::size_t>(component_kind::listener)])
        return true;
    for (auto kind : {component_kind::endpoint, component_kind::service})
        for (const worker_component* c = heads_[static_cast<std::size_t>(kind)]; c; c = c->next_)
            if (c->keeps_worker_running())
                return true;
    return false;
}

void worker_impl::running_needs_changed() noexcept {
    if (!worker_ || stopping_ || fsm_.in_pass())
        return; // the pass settles it when it ends
    if (!uncounted_) {
        // Counted: a pass (inside a handler, where the io_context may run
        // out of work) takes the count back if nothing needs the worker.
        if (!fsm_.pass_scheduled() && !needed())
            request_pass();
        return;
    }
    // Needed again: counted at once, from any point (the count only grows).
    if (needed())
        count_as_work(true);
}

void worker_impl::count_as_work(bool on) noexcept {
    if (!work_context_ || uncounted_ == !on)
        return;
    uncounted_ = !on;
    // The queued wait on the event fd is the worker's outstanding work: it
    // stays queued (the worker is progressed whenever the io_context runs),
    // and only its count is taken back, as for an idle socket.
    if (on)
        work_context_->get_executor().on_work_started();
    else
        work_context_->get_executor().on_work_finished();
}

void worker_impl::settle_work_count() noexcept {
    // Only at the end of a handler: taking the count back may end the
    // io_context's work, which Asio then stops, as when a handler finishes
    // the last operation.
    const bool idle = fsm_.wait_queued() && !fsm_.pass_scheduled() && !needed();
    if (idle)
        cancel_safety_timer(); // nothing in flight for it to look after
    count_as_work(!idle);
}

void worker_impl::add_component(worker_component& c) noexcept {
    if (c.linked_)
        return;
    worker_component*& head = heads_[static_cast<std::size_t>(c.kind_)];
    c.prev_ = nullptr;
    c.next_ = head;
    if (head)
        head->prev_ = &c;
    head = &c;
    c.linked_ = true;
    running_needs_changed();
}

void worker_impl::endpoint_failed(endpoint_impl* ep, const error_code& ec) noexcept {
    const auto service = static_cast<std::size_t>(component_kind::service);
    for (worker_component *c = heads_[service], *next = nullptr; c; c = next) {
        next = c->next_; // a hook may leave the worker
        c->endpoint_failed(ep, ec);
    }
}

void worker_impl::remove_component(worker_component& c) noexcept {
    if (c.linked_) {
        if (c.prev_)
            c.prev_->next_ = c.next_;
        else
            heads_[static_cast<std::size_t>(c.kind_)] = c.next_;
        if (c.next_)
            c.next_->prev_ = c.prev_;
        c.next_ = c.prev_ = nullptr;
        c.linked_ = false;
        running_needs_changed();
    }
    forget(c);
}

void worker_impl::forget(deferred_work& d) noexcept {
    for (std::size_t stage = 0; d.queued_ != 0 && stage < deferred_stage_count; ++stage) {
        const auto bit = static_cast<std::uint8_t>(1u << stage);
        if (d.queued_ & bit) {
            std::erase(deferred_[stage], &d);
            d.queued_ &= static_cast<std::uint8_t>(~bit);
        }
    }
    // It may be waiting in the stage that runs now (its bit already cleared).
    std::replace(running_.begin(), running_.end(), &d, static_cast<deferred_work*>(nullptr));
}

std::size_t worker_impl::run_stage(deferred_stage stage) noexcept {
    auto& queue = deferred_[static_cast<std::size_t>(stage)];
    if (queue.empty())
        return 0;
    const auto bit = static_cast<std::uint8_t>(1u << static_cast<unsigned>(stage));
    std::size_t n = 0;
    // The queue as it is now runs, last queued first; what is queued for this
    // stage meanwhile runs in the next pass (a part that queues itself again
    // runs once per pass). Both vectors keep their capacity: no allocation.
    running_.swap(queue);
    while (!running_.empty()) {
        deferred_work* d = running_.back();
        running_.pop_back();
        if (!d)
            continue; // forgotten while the stage ran
        d->queued_ &= static_cast<std::uint8_t>(~bit);
        n += d->run_deferred(stage);
    }
    return n;
}

std::size_t worker_impl::deliver_completions(operation::delivery d) {
    std::size_t n = 0;
    // In deferred_stage's order, control messages first, only the stages
    // marked: what a stage queues for a later one runs in this pass, what it
    // queues for itself or an earlier one in the next (its bit set again).
    for (unsigned stage = 0;; ++stage) {
        const unsigned ahead = static_cast<unsigned>(deferred_stages_) >> stage;
        if (ahead == 0)
            break;
        stage += static_cast<unsigned>(std::countr_zero(ahead));
        deferred_stages_ &= static_cast<std::uint8_t>(~(1u << stage));
        n += run_stage(static_cast<deferred_stage>(stage));
    }
    // Deliver what is queued now (not what these handlers queue), one at a
    // time from the shared queue, so a handler that shuts the worker down
    // leaves the rest to shutdown(), which frees their UCX requests in time.
    operation* const last = done_tail_;
    while (operation* op = done_head_) {
        done_head_ = op->next;
        if (!done_head_)
            done_tail_ = nullptr;
        op->next = nullptr;
        if (op->request) {
            if (op->owns_request)
                give_request(op->request);
            else
                ucp_request_free(op->request);
            op->request = nullptr;
        }
        ++n;
        ++stats_.completions;
        op->complete(d);
        if (op == last || (d == operation::delivery::dispatch && (stopping_ || !worker_)))
            break;
    }
    return n;
}

// ---- the engine ----

void worker_impl::request_pass() {
    if (!worker_ || stopping_)
        return;
    if (fsm_.request(fsm_.now())) {
        boost::asio::post(executor_, [weak = weak_from_this()] {
            if (auto self = weak.lock())
                self->run_pass();
        });
    }
}

void worker_impl::run_pass() {
    if (!worker_ || stopping_)
        return;
    // A handler delivered during the pass may drop the last handle.
    auto keep_alive = shared_from_this();
    ++stats_.passes;
    // The thread runs this worker's io_context for the whole pass (a plain
    // io_context executor only: with any other, running_in_owner stays
    // false). The pass a handler of this one runs (another worker's, or a
    // nested run of the io_context) puts back what it found.
    struct pass_scope {
        const worker_core* saved = pass_on_this_thread;
        explicit pass_scope(const worker_core* w) noexcept {
            if (w)
                pass_on_this_thread = w;
        }
        ~pass_scope() { pass_on_this_thread = saved; }
    } scope(native_executor_ ? this : nullptr);
    engine_backend backend{*this};
    run_progress_pass(fsm_, backend);
    if (work_context_ && worker_ && !stopping_)
        settle_work_count();
}

bool worker_impl::queue_wait() {
    // The fd joins the reactor here, after a successful arm, and leaves it
    // when the wait completes: while the worker runs, it is in no epoll set
    // but UCX's own. Measured with raw UCP calls over shared memory: adding
    // UCX's fd to a second epoll set, never waited on, took the 8 B event-mode
    // latency from 0.3 to 1.0 µs; every event UCX signals on the fd then
    // goes through that set as well. Registering after the arm loses no
    // event: epoll_ctl(EPOLL_CTL_ADD) reads the fd's readiness as it
    // registers it, so an event that came after the arm (which drained the
    // fd) makes the wait complete at once.
    if (!efd_.is_open()) {
        error_code ec;
        efd_.assign(event_fd_, ec);
        if (ec) {
            // Cannot sleep on the fd: the engine backs off and polls.
            if (!wait_error_logged_) {
                wait_error_logged_ = true;
                log::write(log::severity::warning,
                           "the worker's event fd cannot join the reactor: " + ec.message());
            }
            return false;
        }
    }
    const unsigned generation = ++wait_generation_;
    efd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                    [weak = weak_from_this(), generation](const error_code& ec) {
                        auto self = weak.lock();
                        if (!self || generation != self->wait_generation_)
                            return;
                        // This wait was the worker's outstanding work: its
                        // count is taken back as it completes.
                        self->count_as_work(true);
                        self->fsm_.on_wait_done();
                        if (ec || !self->worker_ || self->stopping_)
                            return;
                        // Out of the reactor until the next sleep (UCX owns the fd).
                        self->efd_.release();
                        ++self->stats_.wakeups;
                        if (!self->fsm_.pass_scheduled() && !self->fsm_.in_pass())
                            self->run_pass();
                    });
    return true;
}

void worker_impl::cancel_wait() noexcept {
    count_as_work(true); // the cancelled wait completes as counted work
    ++wait_generation_;
    fsm_.on_wait_done();
    // Out of the reactor (the fd stays open: UCX owns it); the queued wait
    // completes with operation_aborted, which its generation ignores.
    if (efd_.is_open())
        efd_.release();
}

void worker_impl::start_safety_timer() {
    if (options_.safety_interval.count() <= 0 || !worker_ || stopping_)
        return;
    safety_timer_armed_ = true;
    safety_timer_.start_after(options_.safety_interval, weak_from_this(),
                              [](worker_impl& self, const error_code& ec) {
                                  self.safety_timer_armed_ = false;
                                  if (ec || !self.worker_ || self.stopping_ || !self.work_pending())
                                      return;
                                  ++self.stats_.safety_timer_passes;
                                  if (!self.fsm_.pass_scheduled() && !self.fsm_.in_pass())
                                      self.run_pass();
                                  if (!self.safety_timer_armed_)
                                      self.start_safety_timer();
                              });
}

void worker_impl::cancel_safety_timer() noexcept {
    if (!safety_timer_armed_)
        return;
    safety_timer_armed_ = false;
    safety_timer_.cancel();
}

std::size_t next_service_key() noexcept {
    static std::atomic<std::size_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed);
}

void worker_impl::add_service(std::size_t key, std::shared_ptr<worker_service> s) {
    if (key >= service_slots_.size())
        service_slots_.resize(key + 1, nullptr);
    service_slots_[key] = s.get();
    {
        std::lock_guard lock(services_mu_);
        services_.push_back(s);
    }
    add_component(*s);
}

void worker_impl::add_resource(worker_resource* r) {
    resources_.push_back(r);
}

void worker_impl::remove_resource(worker_resource* r) noexcept {
    std::erase(resources_, r);
}

// ---- shutdown ----

bool worker_impl::closes_under_way() const noexcept {
    for (worker_component* c = components(component_kind::endpoint); c; c = c->next_component())
        if (c->finishing())
            return true;
    return false;
}

void worker_impl::shutdown() {
    if (!worker_ || stopping_)
        return;
    if (spin_group_) {
        spin_group_->leave(*this);
        spin_group_ = nullptr;
    }
    // 0. Graceful closes under way finish first: what the application wrote
    // before close() still reaches the peer when the program ends right
    // after (the kernel does that for a TCP socket; here the data is still
    // in this process). Bounded by the shutdown timeout, and only while the
    // peers are still there; nothing but this loop runs meanwhile (handlers
    // are posted, timers wait).
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
    while (closes_under_way() && std::chrono::steady_clock::now() < deadline) {
        progress_ucp();
        deliver_completions(operation::delivery::post);
    }
    stopping_ = true;
    log::write(log::severity::debug, "worker shutting down");

    // 1. Close listeners, force-close endpoints (their sends complete with an
    // error), end the rest (active messages: waiting receives are ended below,
    // queued messages go). Each component leaves the worker as it ends.
    for (component_kind kind :
         {component_kind::listener, component_kind::endpoint, component_kind::service})
        while (worker_component* c = components(kind))
            c->shutdown();
    for (auto& queue : deferred_)
        queue.clear();
    deferred_stages_ = 0;

    // 2. Cancel tag receives; everything still in flight reports operation_aborted.
    std::vector<operation*> library_owned;
    for (operation *op = in_flight_head_, *next = nullptr; op; op = next) {
        next = op->next; // a cancel may complete op at once, unlinking it
        op->aborted = true;
        if (op->library_owned)
            library_owned.push_back(op);
        else if (op->request && op->cancellable)
            ucp_request_cancel(worker_, op->request);
    }
    for (operation* op : library_owned)
        finished(op);

    // 3. Progress until UCX has called back every request.
    while (work_pending() && std::chrono::steady_clock::now() < deadline) {
        ++stats_.progress_calls;
        ucp_worker_progress(worker_);
    }
    if (in_flight_count_ > 0) {
        log::write(log::severity::error,
                   "worker shutdown: " + std::to_string(in_flight_count_.load()) +
                       " requests did not complete in time; completing them as aborted");
        while (in_flight_head_) {
            operation* op = in_flight_head_;
            op->request = nullptr; // UCX's memory goes with the worker
            op->aborted = true;
            finished(op);
        }
    }
    deliver_completions(operation::delivery::post);

    // 4. Stop the engine, give the fd back to UCX (it owns and closes it), destroy.
    cancel_wait();
    cancel_safety_timer();
    backoff_timer_.cancel();
    // Active messages the application still holds keep a copy of UCX's buffers.
    while (!resources_.empty()) {
        worker_resource* r = resources_.back();
        resources_.pop_back();
        r->release_worker_resource();
    }
    for (auto it = services_.rbegin(); it != services_.rend(); ++it)
        (*it)->release_service();
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
}

} // namespace detail

// ---- ucx::worker ----
// (Its constructor opens the library's services too: lib/messaging/worker_open.cpp.)

worker& worker::operator=(worker&& other) noexcept {
    if (this != &other) {
        if (impl_)
            impl_->shutdown();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

worker::~worker() {
    if (impl_)
        impl_->shutdown();
}

worker::executor_type worker::get_executor() const noexcept {
    return impl_ ? impl_->get_executor() : executor_type();
}

worker_address worker::address() const {
    return impl_->address();
}

progress_mode worker::mode() const noexcept {
    return impl_->options().mode;
}

void worker::close() {
    if (impl_)
        impl_->shutdown();
}

bool worker::is_open() const noexcept {
    return impl_ && impl_->is_open();
}

worker_stats worker::stats() const noexcept {
    if (!impl_)
        return worker_stats{};
    return impl_->stats();
}

worker_metrics worker::metrics() const {
    worker_metrics m;
    if (impl_)
        impl_->metrics(m);
    return m;
}

std::size_t worker::pending_operations() const noexcept {
    return impl_ ? impl_->pending() : 0;
}

void worker::signal() {
    if (!impl_)
        return;
    boost::asio::post(impl_->get_executor(), [weak = std::weak_ptr(impl_)] {
        if (auto self = weak.lock())
            self->request_progress();
    });
}

ucp_worker_h worker::native_handle() const noexcept {
    return impl_ ? impl_->native() : nullptr;
}

} // namespace ucx

// The non-template functions the public headers' templates call (the worker): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

worker_core& core_of(worker_impl& w) noexcept {
    return w;
}

void cancel(operation* op, boost::asio::cancellation_type type) noexcept {
    op->owner->cancel(op, type);
}

} // namespace ucx::detail
