// Internal: executes a staging plan (lib/gpu/staging_plan.hpp) on an Asio
// executor: copies with a copy engine between device memory and buffers of a
// pinned pool, transfers with the operation's transfer function.
//
// The copies are polled on the executor, and only while copies are in
// flight: the io_context never blocks on the GPU and runs its other handlers
// meanwhile. Right after a copy starts or finishes they are polled by posting
// (each poll yields to the other handlers), for up to `spin`: a copy of a
// chunk takes tens of microseconds, and a timer would add its period and its
// own latency to each. After that, a steady timer polls them every
// `poll_period`. A transfer calls
// back (at once or later, but on the executor) with its error and its bytes.
// The operation holds itself alive while anything is in flight, and gives its
// buffers back to the pool before its handler runs; the handler never runs
// inside `async_run` and runs once. Everything is called on the executor's
// thread.
#pragma once

#include "gpu/copy_engine.hpp"
#include "gpu/pinned_pool.hpp"
#include "gpu/staging_plan.hpp"

#include <ucx/error.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace ucx::detail {

/// One staged transfer of device memory.
class staging_operation : public std::enable_shared_from_this<staging_operation> {
public:
    using executor_type = boost::asio::any_io_executor;
    using handler_type = boost::asio::any_completion_handler<void(error_code, std::size_t)>;

    /// A transfer to start: `length` bytes at `data` (staging memory), which
    /// are the message's bytes at `offset`. `whole`: the whole message (in
    /// `whole` mode; an incoming one may be shorter than `length`).
    struct transfer_request {
        std::size_t chunk = 0;
        void* data = nullptr;
        std::size_t length = 0;
        std::size_t offset = 0;
        bool whole = false;
    };

    /// The callback of one transfer: call it once, on the executor, with the
    /// transfer's error and the bytes it moved. It keeps the operation (and
    /// so the staging memory) alive until it is called or destroyed.
    class transfer_completion {
    public:
        /// Reports the transfer; a second call does nothing.
        void operator()(const error_code& ec, std::size_t bytes);

    private:
        friend class staging_operation;
        transfer_completion(std::shared_ptr<staging_operation> op, std::size_t chunk) noexcept
            : op_(std::move(op)), chunk_(chunk) {}
        std::shared_ptr<staging_operation> op_;
        std::size_t chunk_;
    };

    /// Starts a transfer; must not throw (an exception counts as a failed
    /// transfer).
    using transfer_function = std::function<void(const transfer_request&, transfer_completion)>;

    struct options {
        /// How often copies in flight are polled once `spin` has passed.
        std::chrono::microseconds poll_period{std::chrono::microseconds(25)};
        /// How long after a copy started or finished the copies in flight
        /// are polled by posting, before the timer takes over (zero: the
        /// timer only).
        std::chrono::microseconds spin{std::chrono::microseconds(200)};
    };

    /// An operation moving `config.total` bytes of the device memory at
    /// `device`. The chunk is at most the pool's buffer size; the slots are
    /// as many buffers as the pool lends when the operation runs (at least
    /// one, else it fails with `error::allocation_failed`).
    static std::shared_ptr<staging_operation> create(executor_type ex, const staging_config& config,
                                                     void* device,
                                                     std::shared_ptr<copy_engine> engine,
                                                     std::shared_ptr<pinned_pool> pool,
                                                     transfer_function transfer, options opts);

    /// As above with the default options.
    static std::shared_ptr<staging_operation> create(executor_type ex, const staging_config& config,
                                                     void* device,
                                                     std::shared_ptr<copy_engine> engine,
                                                     std::shared_ptr<pinned_pool> pool,
                                                     transfer_function transfer) {
        return create(std::move(ex), config, device, std::move(engine), std::move(pool),
                      std::move(transfer), options{});
    }

    /// Runs the plan; completes with `(error_code, bytes)` (see
    /// `staging_action::bytes`). Once per operation. A connected cancellation
    /// slot of the handler cancels as `cancel` does.
    template <class CompletionToken>
    auto async_run(CompletionToken&& token) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
            [](auto handler, std::shared_ptr<staging_operation> self) {
                self->run(handler_type(std::move(handler)));
            },
            token, shared_from_this());
    }

    /// Cancels: nothing new starts, the copies and transfers in flight are
    /// awaited, then the operation completes with `operation_aborted` (or
    /// its first error). Before `async_run`, the run completes at once.
    void cancel();

    /// The executor everything runs on.
    executor_type get_executor() const noexcept { return ex_; }

    /// The plan (for tests: its parameters once running, its state).
    const staging_plan* plan() const noexcept { return plan_ ? &*plan_ : nullptr; }

    /// Polls of the copy engine so far (posted or by the timer).
    std::size_t poll_rounds() const noexcept { return poll_rounds_; }
    /// Of those, the polls made by the timer.
    std::size_t timer_polls() const noexcept { return timer_polls_; }

    /// Abandons the copies still in flight (see `copy_engine::abandon`) and
    /// returns the buffers: only an operation whose io_context ended gets
    /// here with work in flight.
    ~staging_operation();

    staging_operation(const staging_operation&) = delete;
    staging_operation& operator=(const staging_operation&) = delete;

private:
    struct private_tag {};

public:
    /// Use `create`.
    staging_operation(private_tag, executor_type ex, const staging_config& config, void* device,
                      std::shared_ptr<copy_engine> engine, std::shared_ptr<pinned_pool> pool,
                      transfer_function transfer, options opts);

private:
    /// A copy in flight in one slot (or lane).
    struct copy_slot {
        bool active = false;
        std::size_t chunk = 0;
        copy_handle handle{};
    };

    void run(handler_type handler);
    /// Executes the plan's actions until it has none.
    void drive();
    void start_copy(const staging_action& a);
    void start_transfer(const staging_action& a);
    void on_transfer_done(std::size_t chunk, const error_code& ec, std::size_t bytes);
    /// Has the copies in flight polled: by posting while within `spin` of
    /// the last copy started or finished, else by the timer.
    void arm_poll();
    void on_poll();
    /// The staging memory of an action.
    char* staged(const staging_action& a) const noexcept;
    /// Returns the buffers to the pool.
    void release_buffers() noexcept;
    /// Completes: buffers back, the handler posted.
    void finish(const error_code& ec, std::size_t bytes);

    executor_type ex_;
    staging_config config_;
    char* device_;
    std::shared_ptr<copy_engine> engine_;
    std::shared_ptr<pinned_pool> pool_;
    transfer_function transfer_;
    options options_;
    boost::asio::steady_timer timer_;
    std::optional<staging_plan> plan_;
    std::optional<handler_type> handler_;
    /// Chunked mode: one buffer per slot. Whole mode: the contiguous buffer.
    std::vector<void*> buffers_;
    void* contiguous_ = nullptr;
    std::vector<copy_slot> copies_;
    unsigned copies_in_flight_ = 0;
    std::size_t poll_rounds_ = 0;
    std::size_t timer_polls_ = 0;
    /// When a copy last started or finished.
    std::chrono::steady_clock::time_point copy_event_{};
    bool running_ = false;
    bool driving_ = false;
    bool timer_armed_ = false;
    bool poll_posted_ = false;
    bool cancelled_ = false;
    bool finished_ = false;
};

} // namespace ucx::detail
