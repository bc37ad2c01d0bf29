// Internal: the state behind ucx::worker, and its progress engine.
#pragma once

#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/worker.hpp>

#include "engine/engine_metrics.hpp"
#include "engine/progress_fsm.hpp"
#include "engine/spin_group.hpp"
#include "engine/worker_component.hpp"
#include "engine/worker_service.hpp"
#include "util/guarded_timer.hpp"
#include "util/intrusive_list.hpp"
#include "util/random.hpp"
#include "util/tick_clock.hpp"

#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

namespace ucx::detail {

/// A worker's operations in flight.
using in_flight_list = intrusive_list<operation, &operation::prev, &operation::next>;

class context_impl;
class endpoint_impl;

/// A resource tied to the UCP worker (an unpacked remote key, the received
/// active messages): released by shutdown after every request has called
/// back, before the UCP worker is destroyed, unless it removed itself earlier.
class worker_resource {
public:
    virtual void release_worker_resource() noexcept = 0;

protected:
    ~worker_resource() = default;
};

class worker_impl : public worker_core, public std::enable_shared_from_this<worker_impl> {
public:
    worker_impl(std::shared_ptr<context_impl> ctx, const executor_type& ex,
                const worker_options& options);
    ~worker_impl();
    worker_impl(const worker_impl&) = delete;
    worker_impl& operator=(const worker_impl&) = delete;

    /// Opens the UCP worker and its event fd, then calls `open_services` (the
    /// layer that makes workers gives it: the services that must serve the
    /// peers from the start, such as the control channel, open there);
    /// throws on failure.
    void open(void (*open_services)(worker_impl&) = nullptr);

    ucp_worker_h native() const noexcept { return worker_; }
    const context_impl& context() const noexcept { return *context_; }
    const worker_options& options() const noexcept { return options_; }
    bool is_open() const noexcept { return worker_ != nullptr && !stopping_; }
    /// The engine's counters (any thread).
    worker_stats stats() const noexcept;
    /// The engine's and the operations' counters (any thread).
    void metrics(worker_metrics& m) const;
    /// The operations' counters (owner thread, to count what only a feature
    /// sees).
    operation_counters& operation_metrics() noexcept { return ops_; }
    std::size_t pending() const noexcept { return in_flight_count_.load(); }

    // --- operations (owner thread only) ---

    /// Links an operation into the in-flight list before it is submitted
    /// (once: starting it again does nothing). Inline: once per operation.
    void start(operation* op) noexcept {
        op->owner = this;
        if (op->in_flight)
            return; // started already (a connect that moves from its handshake to UCX)
        // What is counted, read before the counters' stores (which the
        // compiler does not move other memory accesses across).
        const operation_kind kind = op->kind;
        kind_counters* const in = op->counted_in;
        op->in_flight = true;
        in_flight_list::push_front(in_flight_head_, op);
        ++in_flight_count_;
        background_count_ += op->background;
        ops_.started(kind, in);
        if (ops_.measures_latency() && op->started_at == 0) [[unlikely]]
            stamp(op); // unless stamped before it went to UCX
        if (!safety_timer_armed_) [[unlikely]]
            start_safety_timer();
    }
    /// Takes the answer of a ucp_*_nbx call for `op`: a request (in flight or
    /// already completed by a callback), NULL (done) or an error.
    void submitted(operation* op, ucs_status_ptr_t result) noexcept;
    /// Completes a started `op` without UCX: with `ec`, or with success
    /// when `ec` is empty (the library's own results, bad input, a closed
    /// object). Delivered from a later pass, never inside the caller.
    void complete(operation* op, const error_code& ec) noexcept;
    /// Starts a tag receive.
    void tag_recv(tag_recv_op* op, void* data, std::size_t size, ucp_tag_t tag,
                  ucp_tag_t mask) noexcept;
    /// The receive of `message` (taken out of UCX's unexpected queue by a
    /// probe), made with no operation, which UCX may complete inside this
    /// call: null when it did (UCX 1.13 does not report the length of such
    /// a receive: the caller knows it from the probe). Otherwise UCX's
    /// answer, a request or an error status, which the caller hands to an
    /// operation with `adopt_recv` at once; that operation is delivered
    /// later.
    ucs_status_ptr_t tag_msg_recv_at_once(void* data, std::size_t size,
                                          ucp_tag_message_h message) noexcept;
    /// `op` completes `r`, the answer of `tag_msg_recv_at_once`, as a receive
    /// started by `tag_recv` completes.
    void adopt_recv(tag_recv_op* op, ucs_status_ptr_t r) noexcept;
    /// A UCX callback finished `op`: queue it for delivery after progress.
    void finished(operation* op) noexcept;
    /// `op` goes to UCX before it is started (then to `done_at_once`, or to
    /// `start`): where latencies are measured, its start is now.
    void stamp_start(operation* op) noexcept {
        if (ops_.measures_latency()) [[unlikely]]
            stamp(op);
    }
    /// `op`, never started, was submitted and UCX completed it inside the
    /// call (answered UCS_OK): counted as started and succeeded (in
    /// `op->counted_in`, or the worker's own counts), its latency the call's
    /// (from `stamp_start`), and queued for delivery without entering the
    /// in-flight list (nothing can fail or cancel it any more).
    void done_at_once(operation* op) noexcept {
        ops_.done_at_once(op->kind, op->counted_in, counted_bytes(op));
        if (ops_.measures_latency() && op->started_at > 0) [[unlikely]]
            took(op);
        op->owner = this;
        op->status = UCS_OK;
        queue_done(op);
        request_progress();
    }
    /// Cancels an operation from its cancellation slot (`type` is Asio's
    /// cancellation type). What has not reached UCX, tag receives (through
    /// UCX) and library-owned operations (through their hook) are cancelled
    /// for every type: nothing happened yet that cancelling undoes. What UCX
    /// holds and cannot cancel (sends, active messages, stream writes, RMA,
    /// an endpoint's flush) only for `terminal`, by failing its endpoint
    /// (`set_endpoint_canceller`): UCX then completes it, so its buffer is
    /// free when its handler runs.
    void cancel(operation* op, boost::asio::cancellation_type type) noexcept;
    /// Head of the in-flight list (for endpoint failure fan-out).
    operation* in_flight_ops() const noexcept { return in_flight_head_; }
    /// Whether anything needs the worker's progress: an endpoint with a UCP
    /// endpoint, a listener, an address acceptor, an active-message push
    /// handler, a connection under way, an operation or internal request in
    /// flight. Without any, its queued wait on the event fd does not count
    /// as outstanding work of the io_context (see count_as_work), so it does
    /// not keep run() from returning, as an idle socket does not; it is still
    /// progressed whenever the io_context runs.
    bool needed() const noexcept;
    /// What `needed()` depends on changed (a component came or went, an
    /// acceptor attached or detached, a push handler was set).
    void running_needs_changed() noexcept;
    /// Asks for a progress pass (coalesced).
    void request_progress() {
        // Inside a pass (a handler starting its next operation) this only
        // notes the request: the common case, kept inline.
        if (fsm_.in_pass())
            fsm_.request_in_pass();
        else
            request_pass();
    }

    // --- components (owner thread only) ---
    /// `c` takes part in shutdown until removed.
    void add_component(worker_component& c) noexcept;
    /// Tells every service component that `ep` failed with `ec`
    /// (`worker_component::endpoint_failed`).
    void endpoint_failed(endpoint_impl* ep, const error_code& ec) noexcept;
    /// Takes `c` out (and out of every deferred queue). Idempotent.
    void remove_component(worker_component& c) noexcept;
    /// Takes `d` out of every deferred queue (before it goes away). Idempotent.
    void forget(deferred_work& d) noexcept;
    /// The first registered component of `kind` (then `next_component()`).
    worker_component* components(component_kind kind) const noexcept {
        return heads_[static_cast<std::size_t>(kind)];
    }
    /// Queues `c` for `stage` of the work after the current (or next)
    /// ucp_worker_progress call; once per stage until it runs. Callable from
    /// UCX callbacks; ignored once the worker shuts down.
    void defer(deferred_work& c, deferred_stage stage) {
        const auto bit = static_cast<std::uint8_t>(1u << static_cast<unsigned>(stage));
        if ((c.queued_ & bit) || stopping_)
            return;
        deferred_[static_cast<std::size_t>(stage)].push_back(&c);
        c.queued_ |= bit;
        deferred_stages_ |= bit;
    }
    /// An internal request (a close, a fetch) is under way: shutdown waits for it.
    void internal_request_started() noexcept { ++internal_requests_; }
    void internal_request_done() noexcept { --internal_requests_; }
    /// Closes a UCP endpoint (force, or flush: what was sent goes first).
    /// Without `op`, the worker counts the close as its internal work and
    /// returns null; with `op`, UCX's answer for it is returned (see
    /// `submitted`), and the close completes it.
    ucs_status_ptr_t close_ucp_endpoint(ucp_ep_h ep, bool force, operation* op = nullptr) noexcept;

    // --- services (owner thread only; see worker_service) ---
    /// The worker takes `s` as its service of key `key` (one per key): it
    /// joins the components, and stays until the worker is destroyed.
    void add_service(std::size_t key, std::shared_ptr<worker_service> s);
    /// The service of key `key`, or null.
    worker_service* service(std::size_t key) const noexcept {
        return key < service_slots_.size() ? service_slots_[key] : nullptr;
    }

    /// A fresh random 64-bit number (the connection layer draws the ids of
    /// its endpoints from it: lib/connection/endpoint_impl.hpp).
    std::uint64_t random_id() { return rng_(); }
    /// What takes the stream data UCX queued after a progress call to the
    /// streams it is for (the stream layer's; UCX discards what is queued for
    /// an endpoint when the endpoint fails, before it reports the failure,
    /// and the data a peer wrote before it died must still be read).
    using stream_data_taker = void (*)(worker_impl&) noexcept;
    /// A stream starts (`true`) or stops waiting for data with no read
    /// pending: while any does, each progress call that found events has
    /// `take` hand out stream data (a stream with reads pending looks after
    /// each pass).
    void watch_streams(bool on, stream_data_taker take) noexcept {
        take_stream_data_ = take;
        on ? ++streams_ : --streams_;
    }
    /// How many ucp_worker_progress calls this worker made. Received data
    /// reaches UCX's queues only inside one: a queue found empty stays empty
    /// while this number stays the same.
    std::uint64_t ucp_progress_calls() const noexcept { return stats_.progress_calls; }
    /// Memory for a UCX request that the worker keeps (`add_request`), or
    /// null where none can be had (UCX then takes one from its pool): the
    /// worker's own receives, and the parts that keep receives posted.
    /// Owner thread.
    void* take_request() noexcept {
        if (void* r = free_requests_) [[likely]] {
            free_requests_ = *static_cast<void**>(r);
            return r;
        }
        return new_request();
    }
    /// Gives back what `take_request` returned, once UCX is done with it.
    void give_request(void* r) noexcept {
        *static_cast<void**>(r) = free_requests_;
        free_requests_ = r;
    }
    /// What ends a counted send of an endpoint (`operation::counted_send`)
    /// when UCX finishes it (inside UCX's callback: it only records). The
    /// connection layer installs it with its first endpoint.
    using send_finisher = void (*)(operation*) noexcept;
    void set_send_finisher(send_finisher f) noexcept { finish_counted_send_ = f; }
    /// What fails the endpoint of an operation that UCX holds, for a
    /// terminal cancellation (`cancel`): it completes every operation of the
    /// endpoint, `op` with `operation_aborted`, as closing it would. The
    /// connection layer installs it with its first endpoint.
    using endpoint_canceller = void (*)(operation*) noexcept;
    void set_endpoint_canceller(endpoint_canceller f) noexcept { cancel_endpoint_ = f; }

    // --- device buffers (owner thread only) ---
    /// The staging of device buffers, made by the gpu layer
    /// (`make_device_staging`, installed by the public worker's constructor;
    /// lib/gpu/device_staging.hpp, whose `staging_of`
    /// gives its type): present only where a device exists (it stages
    /// messages only where the context's UCX cannot move device memory), so
    /// elsewhere an operation pays one test of a null pointer.
    worker_component* staging() const noexcept { return staging_.get(); }
    /// Installs (or, with null, removes) the staging of device buffers.
    void set_staging(std::shared_ptr<worker_component> s) noexcept { staging_ = std::move(s); }

    // --- resources (owner thread only) ---
    /// `r` is released at shutdown unless removed first.
    void add_resource(worker_resource* r);
    void remove_resource(worker_resource* r) noexcept;

    /// The worker's address.
    worker_address address() const;

    /// Shuts down (see ucx::worker). Idempotent.
    void shutdown();

    // --- the spin group (owner thread only) ---
    /// Whether quiet spinning steps park in the spin group (set by it).
    void set_shared_spin(bool on) noexcept { fsm_.set_shared_spin(on); }
    /// The spin group's turn: the parked pass continues.
    void run_parked_pass() { run_pass(); }

    // UCX callbacks; they only record and queue.
    static void send_callback(void* request, ucs_status_t status, void* user_data) noexcept;
    /// The callback of `tag_msg_recv_at_once`'s requests: the operation is in
    /// the request's space.
    static void adopted_recv_callback(void* request, ucs_status_t status,
                                      const ucp_tag_recv_info_t* info, void*) noexcept;
    static void recv_callback(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) noexcept;
    static void close_callback(void* request, ucs_status_t status, void* user_data) noexcept;

private:
    friend struct engine_backend;

    void run_pass();
    void request_pass();
    std::size_t deliver_completions(operation::delivery d);
    /// Whether deliver_completions has nothing to do: the common quiet step.
    bool nothing_to_deliver() const noexcept;
    /// Runs the components queued for `stage`.
    std::size_t run_stage(deferred_stage stage) noexcept;
    /// Puts the event fd in the reactor (if it is not) and queues the wait
    /// on it; false if the fd cannot join the reactor.
    bool queue_wait();
    void* new_request() noexcept;
    /// Cancels the queued wait, if any, and takes the fd out of the reactor.
    void cancel_wait() noexcept;
    /// The pass goes on running (it yields, backs off or parks): a wait still
    /// queued from the last sleep is cancelled, and the fd leaves the reactor.
    void leave_reactor() noexcept {
        if (fsm_.wait_queued()) [[unlikely]]
            cancel_wait();
    }
    void start_safety_timer();
    void unlink(operation* op) noexcept;
    /// `finished`, inline in UCX's callbacks.
    void finish(operation* op) noexcept;
    /// Appends `op` to the operations delivered by the next pass.
    void queue_done(operation* op) noexcept {
        op->next = nullptr;
        if (done_tail_)
            done_tail_->next = op;
        else
            done_head_ = op;
        done_tail_ = op;
    }
    /// Where latencies are measured: `op` is one of the operations measured
    /// (drawn at random, one in `worker_options::latency_sampling`), its
    /// start now, or not (`operation::not_measured`). Out of line: the
    /// paths of every operation only test whether latencies are measured.
    [[gnu::noinline]] void stamp(operation* op) noexcept;
    /// The operations from one measured to the next: drawn uniformly from 1
    /// to 2 × latency_sampling − 1 (a mean of latency_sampling, and no
    /// pattern of the traffic, such as sends and receives taking turns,
    /// decides which kinds are measured).
    std::uint32_t next_sample_gap() noexcept;
    /// Notes the latency of `op` (a measured one: `started_at` > 0), ending
    /// now (out of line: measured rarely).
    void took(operation* op) noexcept;
    /// The bytes `op` moved, as its kind counts them.
    static std::uint64_t counted_bytes(const operation* op) noexcept {
        return counts_transfer_bytes(op->kind) ? static_cast<const transfer_op*>(op)->bytes : 0;
    }
    /// Counts the end of `op` that is not a plain success (a failure, or
    /// any end where latencies are measured).
    [[gnu::noinline]] void count_end(operation* op) noexcept;
    bool work_pending() const noexcept;
    /// `work_pending()` less the library's standing receives (`background`).
    bool awaited_work_pending() const noexcept;
    /// One ucp_worker_progress call, then the stream data it brought handed
    /// out (`progress_ucp_measured` where latencies are measured).
    unsigned progress_ucp() noexcept;
    unsigned progress_ucp_once() noexcept;
    unsigned progress_ucp_measured() noexcept;
    /// Whether an endpoint's graceful close is under way (shutdown's first step).
    bool closes_under_way() const noexcept;
    void cancel_safety_timer() noexcept;
    /// Counts the queued wait as outstanding work of the io_context (`on`),
    /// or takes its count back (io_context::executor_type's
    /// on_work_started/on_work_finished). Idempotent.
    void count_as_work(bool on) noexcept;
    /// At the end of a pass: uncounted when the wait is queued, no pass is
    /// scheduled and nothing needs the worker; counted otherwise.
    void settle_work_count() noexcept;

    std::shared_ptr<context_impl> context_;
    worker_options options_;
    ucp_worker_h worker_ = nullptr;
    /// The worker's address, taken once when it opened.
    worker_address address_;
    /// UCX's event fd, and its descriptor in the reactor: open (registered)
    /// only from the wait queued on a successful arm until that wait
    /// completes (see queue_wait).
    int event_fd_ = -1;
    boost::asio::posix::stream_descriptor efd_;
    guarded_timer safety_timer_;
    /// Starts the next pass after a back-off (see progress_config).
    guarded_timer backoff_timer_;
    bool safety_timer_armed_ = false;
    progress_fsm fsm_;
    /// The spin group of the io_context (poll and hybrid modes on a plain
    /// io_context executor), or null.
    spin_group* spin_group_ = nullptr;
    /// The io_context whose outstanding work the worker's wait counts in
    /// (null for other executors: then it always counts).
    boost::asio::io_context* work_context_ = nullptr;
    /// The wait's count was taken back (nothing needs the worker).
    bool uncounted_ = false;
    progress_counters stats_;
    unsigned wait_generation_ = 0;
    bool stopping_ = false;
    /// Streams connected with no read pending.
    std::size_t streams_ = 0;
    stream_data_taker take_stream_data_ = nullptr;
    send_finisher finish_counted_send_ = nullptr;
    endpoint_canceller cancel_endpoint_ = nullptr;

    operation* in_flight_head_ = nullptr;
    counter in_flight_count_;
    /// Of those, the `background` ones.
    std::size_t background_count_ = 0;
    operation* done_head_ = nullptr;
    operation* done_tail_ = nullptr;
    std::size_t internal_requests_ = 0;
    // Deferred work: one queue per stage, and the stages whose queue has
    // something, a bit each (the quiet step checks only that none has; a
    // pass runs only the stages marked).
    std::array<std::vector<deferred_work*>, deferred_stage_count> deferred_;
    std::uint8_t deferred_stages_ = 0;
    /// The stage running now: its queue as it was when the stage started.
    std::vector<deferred_work*> running_;
    std::array<worker_component*, component_kind_count> heads_{};
    /// The services, in the order they came, and by key. `services_mu_`
    /// guards the list's changes on the owner thread and `metrics()`'s walk
    /// of it from any thread (which asks each for its counts).
    std::vector<std::shared_ptr<worker_service>> services_;
    mutable std::mutex services_mu_;
    std::vector<worker_service*> service_slots_;
    std::shared_ptr<worker_component> staging_;
    std::vector<worker_resource*> resources_;
    std::mt19937_64 rng_{random_u64()};
    bool arm_error_logged_ = false;
    /// The requests of the worker's own (take_request): UCX's request size,
    /// the free ones (linked through their first word), and every block,
    /// freed with the worker (after ucp_worker_destroy: a request UCX never
    /// completed stays UCX's until then).
    std::size_t ucp_request_size_ = 0;
    void* free_requests_ = nullptr;
    std::vector<std::unique_ptr<std::byte[]>> request_blocks_;
    bool wait_error_logged_ = false;
    /// The clock of the operations' latencies (null where none are measured).
    const tick_clock* latency_clock_ = nullptr;
    /// A quiet progress call is followed by a processor pause (where the
    /// processor's pause is short: see cpu_relax).
    bool relax_when_quiet_ = false;
    /// Inside `progress_ucp_measured`: the operations that end share one
    /// reading of the clock (`ends_at_`, once `ends_read_`).
    bool ends_share_clock_ = false;
    bool ends_read_ = false;
    std::int64_t ends_at_ = 0;
    /// Last: most of it (the latency histograms) is cold.
    operation_counters ops_;
    /// The draw of the operations measured (`stamp`): the operations until
    /// the next one measured, and the state of the random gaps (xorshift64).
    std::uint32_t sample_countdown_ = 1;
    std::uint64_t sample_state_ = random_u64() | 1;
};

/// The service `Service` of `w`, or null.
template <class Service>
Service* find_service(const worker_impl& w) noexcept {
    return static_cast<Service*>(w.service(service_key<Service>()));
}

/// `w` takes `s` as its service `Service` (see worker_impl::add_service).
template <class Service>
Service& add_service(worker_impl& w, std::shared_ptr<Service> s) {
    Service& service = *s;
    w.add_service(service_key<Service>(), std::move(s));
    return service;
}

/// The service `Service` of `w`, made (from `w`) the first time it is asked for.
template <class Service>
Service& use_service(worker_impl& w) {
    if (Service* s = find_service<Service>(w))
        return *s;
    return add_service(w, std::make_shared<Service>(w));
}

} // namespace ucx::detail
