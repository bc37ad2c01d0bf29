// Internal: the state behind ucx::worker, and its progress engine.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/detail/progress_fsm.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <vector>

namespace ucx::detail {

class context_impl;
class endpoint_impl;

class worker_impl : public std::enable_shared_from_this<worker_impl> {
public:
    using executor_type = boost::asio::any_io_executor;

    worker_impl(std::shared_ptr<context_impl> ctx, const executor_type& ex,
                const worker_options& options);
    ~worker_impl();
    worker_impl(const worker_impl&) = delete;
    worker_impl& operator=(const worker_impl&) = delete;

    /// Opens the UCP worker and its event fd; throws on failure.
    void open();

    ucp_worker_h native() const noexcept { return worker_; }
    const executor_type& get_executor() const noexcept { return executor_; }
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
    /// A UCX callback finished `op`: queue it for delivery after progress.
    void finished(operation* op) noexcept;
    /// Cancels a pending tag receive (from a cancellation slot).
    void cancel(operation* op) noexcept;
    /// Asks for a progress pass (coalesced).
    void request_progress();

    // --- endpoints (owner thread only) ---
    void add_endpoint(endpoint_impl* ep);
    void remove_endpoint(endpoint_impl* ep) noexcept;
    /// Takes ownership of an endpoint close request; freed when UCX is done.
    void adopt_close_request(void* request) noexcept;
    /// Runs `fn` on the owner executor: now if already there, else posted.
    template <class Fn>
    void run_on_owner(Fn&& fn) {
        boost::asio::dispatch(executor_, std::forward<Fn>(fn));
    }

    /// The worker's address.
    worker_address address() const;

    /// Shuts down (see ucx::worker). Idempotent.
    void shutdown();

    // UCX callbacks; they only record and queue.
    static void send_callback(void* request, ucs_status_t status, void* user_data) noexcept;
    static void recv_callback(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) noexcept;
    static void close_callback(void* request, ucs_status_t status, void* user_data) noexcept;

private:
    friend struct engine_backend;

    void run_pass();
    std::size_t deliver_completions(operation::delivery d);
    void queue_wait();
    void cancel_wait() noexcept;
    void start_safety_timer();
    void unlink(operation* op) noexcept;
    bool work_pending() const noexcept { return in_flight_count_ + close_requests_ > 0; }
    void cancel_safety_timer() noexcept;

    std::shared_ptr<context_impl> context_;
    executor_type executor_;
    worker_options options_;
    ucp_worker_h worker_ = nullptr;
    boost::asio::posix::stream_descriptor efd_;
    boost::asio::steady_timer safety_timer_;
    bool safety_timer_armed_ = false;
    progress_fsm fsm_;
    worker_stats stats_{};
    unsigned wait_generation_ = 0;
    bool stopping_ = false;

    operation* in_flight_head_ = nullptr;
    std::size_t in_flight_count_ = 0;
    operation* done_head_ = nullptr;
    operation* done_tail_ = nullptr;
    std::size_t close_requests_ = 0;
    endpoint_impl* endpoints_ = nullptr;
    std::vector<endpoint_impl*> failed_endpoints_;
    unsigned timer_generation_ = 0;
    bool arm_error_logged_ = false;
};

} // namespace ucx::detail
