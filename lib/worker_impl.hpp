// Internal: the state behind ucx::worker, and its progress engine.
#pragma once

#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/worker.hpp>

#include "control_message.hpp"
#include "guarded_timer.hpp"
#include "progress_fsm.hpp"

#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <memory>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ucx::detail {

class am_registry;
class context_impl;
class endpoint_impl;
class listener_impl;

/// Work done after every ucp_worker_progress call, outside UCX callbacks:
/// moving received data to waiting operations (active messages, streams).
/// It may queue operations with `worker_impl::finished`, never run handlers.
class progress_observer {
public:
    /// Returns how many events it handled (0 when there was nothing to do).
    virtual std::size_t after_progress() noexcept = 0;

protected:
    ~progress_observer() = default;
};

/// A resource tied to the UCP worker (an unpacked remote key): released by
/// shutdown after every request has called back, before the UCP worker is
/// destroyed, unless it removed itself earlier.
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

    /// Opens the UCP worker and its event fd; throws on failure.
    void open();

    ucp_worker_h native() const noexcept { return worker_; }
    const worker_options& options() const noexcept { return options_; }
    bool is_open() const noexcept { return worker_ != nullptr && !stopping_; }
    const worker_stats& stats() const noexcept { return stats_; }
    std::size_t pending() const noexcept { return in_flight_count_; }

    // --- operations (owner thread only) ---

    /// Links an operation into the in-flight list before it is submitted.
    void start(operation* op) noexcept;
    /// Takes the answer of a ucp_*_nbx call for `op`: a request (in flight or
    /// already completed by a callback), NULL (done) or an error.
    void submitted(operation* op, ucs_status_ptr_t result) noexcept;
    /// Completes a started `op` with `ec` without UCX (bad input, closed object).
    void fail(operation* op, const error_code& ec) noexcept;
    /// Starts a tag receive.
    void tag_recv(operation* op, void* data, std::size_t size, ucp_tag_t tag,
                  ucp_tag_t mask) noexcept;
    /// An endpoint's error callback fired: handle it after progress returns.
    void endpoint_failed(endpoint_impl* ep);
    /// An endpoint's sends drained during a graceful close: continue after progress.
    void endpoint_ready_to_close(endpoint_impl* ep);
    /// A UCX callback finished `op`: queue it for delivery after progress.
    void finished(operation* op) noexcept;
    /// Cancels an operation from its cancellation slot: tag receives through
    /// UCX, library-owned operations through their hook; sends cannot be.
    void cancel(operation* op) noexcept;
    /// Head of the in-flight list (for endpoint failure fan-out).
    operation* in_flight_ops() const noexcept { return in_flight_head_; }
    /// Asks for a progress pass (coalesced).
    void request_progress() {
        // Inside a pass (a handler starting its next operation) this only
        // notes the request: the common case, kept inline.
        if (fsm_.in_pass())
            fsm_.request_in_pass();
        else
            request_pass();
    }

    // --- endpoints (owner thread only) ---
    void add_endpoint(endpoint_impl* ep);
    /// Head of the list of this worker's endpoints (linked by next/prev).
    endpoint_impl* endpoints() const noexcept { return endpoints_; }
    void remove_endpoint(endpoint_impl* ep) noexcept;
    /// An endpoint close request is under way (close_callback frees it).
    void close_request_started() noexcept;
    /// Maps a UCP endpoint to its endpoint (control messages find it by reply_ep).
    void map_endpoint(ucp_ep_h ep, endpoint_impl* impl);
    void unmap_endpoint(ucp_ep_h ep) noexcept;
    /// The endpoint mapped to a UCP endpoint, or null. Every active message
    /// looks up its sender: the last answer is remembered (most traffic
    /// comes from the peer of the last message) until the map changes.
    endpoint_impl* find_endpoint(ucp_ep_h ep) const noexcept {
        if (ep != nullptr && ep == last_found_ep_)
            return last_found_;
        auto it = endpoint_map_.find(ep);
        endpoint_impl* impl = it == endpoint_map_.end() ? nullptr : it->second;
        last_found_ep_ = ep;
        last_found_ = impl;
        return impl;
    }
    /// Sends a control message on `ep` (fire and forget; the worker tracks it).
    void send_control(ucp_ep_h ep, const control_message& m) noexcept;
    /// Whether the context has active messages (needed for connected endpoints).
    bool has_control_channel() const noexcept { return control_channel_; }
    /// A fresh random tag for per-endpoint receives.
    std::uint64_t random_tag() { return rng_(); }
    /// Control messages dropped as malformed or unroutable.
    std::size_t dropped_control_messages() const noexcept { return dropped_control_; }

    // --- active messages (owner thread only) ---
    /// The active-message receive side; null without the AM feature.
    am_registry* am() const noexcept { return am_.get(); }
    /// Starts a receive of one active message on `id` (from `from` only, if set).
    void am_recv(operation* op, unsigned id, endpoint_impl* from) noexcept;

    // --- observers (owner thread only) ---
    /// `o` runs after every progress call until removed.
    void add_observer(progress_observer* o);
    void remove_observer(progress_observer* o) noexcept;

    // --- resources (owner thread only) ---
    /// `r` is released at shutdown unless removed first.
    void add_resource(worker_resource* r);
    void remove_resource(worker_resource* r) noexcept;

    // --- listeners (owner thread only) ---
    void add_listener(listener_impl* l);
    void remove_listener(listener_impl* l) noexcept;
    /// A listener got connection requests: process them after progress.
    void listener_has_requests(listener_impl* l);
    /// The worker's address.
    worker_address address() const;

    /// Shuts down (see ucx::worker). Idempotent.
    void shutdown();

    // UCX callbacks; they only record and queue.
    static void send_callback(void* request, ucs_status_t status, void* user_data) noexcept;
    static void recv_callback(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) noexcept;
    static void close_callback(void* request, ucs_status_t status, void* user_data) noexcept;
    static ucs_status_t control_callback(void* arg, const void* header, std::size_t header_length,
                                         void* data, std::size_t length,
                                         const ucp_am_recv_param_t* param) noexcept;
    static void control_sent(void* request, ucs_status_t status, void* user_data) noexcept;

private:
    friend struct engine_backend;

    void run_pass();
    void request_pass();
    std::size_t deliver_completions(operation::delivery d);
    /// Whether deliver_completions has nothing to do: the common quiet step.
    bool nothing_to_deliver() const noexcept;
    /// The active-message registry while it takes part in progress (open,
    /// not shutting down): checked on every step without the virtual call of
    /// a general observer.
    am_registry* am_in_progress() const noexcept { return stopping_ ? nullptr : am_.get(); }
    void queue_wait();
    void cancel_wait() noexcept;
    void start_safety_timer();
    void unlink(operation* op) noexcept;
    bool work_pending() const noexcept;
    void cancel_safety_timer() noexcept;

    std::shared_ptr<context_impl> context_;
    worker_options options_;
    ucp_worker_h worker_ = nullptr;
    boost::asio::posix::stream_descriptor efd_;
    guarded_timer safety_timer_;
    bool safety_timer_armed_ = false;
    progress_fsm fsm_;
    worker_stats stats_{};
    unsigned wait_generation_ = 0;
    bool stopping_ = false;

    operation* in_flight_head_ = nullptr;
    std::size_t in_flight_count_ = 0;
    operation* done_head_ = nullptr;
    operation* done_tail_ = nullptr;
    std::size_t internal_requests_ = 0;
    endpoint_impl* endpoints_ = nullptr;
    std::vector<endpoint_impl*> failed_endpoints_;
    std::vector<endpoint_impl*> closing_endpoints_;
    std::unordered_map<ucp_ep_h, endpoint_impl*> endpoint_map_;
    mutable ucp_ep_h last_found_ep_ = nullptr;
    mutable endpoint_impl* last_found_ = nullptr;
    std::vector<std::pair<ucp_ep_h, control_message>> control_queue_;
    std::vector<std::pair<ucp_ep_h, control_message>> control_spare_;
    std::vector<listener_impl*> listeners_;
    std::vector<progress_observer*> observers_;
    std::shared_ptr<am_registry> am_;
    std::vector<worker_resource*> resources_;
    std::vector<listener_impl*> listeners_with_requests_;
    bool control_channel_ = false;
    std::size_t dropped_control_ = 0;
    std::mt19937_64 rng_{std::random_device{}()};
    bool arm_error_logged_ = false;
};

} // namespace ucx::detail
