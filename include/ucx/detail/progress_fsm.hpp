// Internal: the decisions of the progress engine, free of I/O.
//
// The engine runs "passes" on the worker's executor. A pass calls
// ucp_worker_progress until UCX reports no more events, then either keeps
// spinning (yield: continue in a freshly posted handler so other handlers run),
// or queues the wait on the event fd and only then arms the worker (an edge
// that fires before the wait is queued would be lost: Asio registers the fd
// edge-triggered), and sleeps. `progress_fsm` makes these decisions from the
// answers the worker gives; `run_progress_pass` executes them against a
// backend. Tests drive both with a scripted fake worker.
#pragma once

#include <ucx/progress_mode.hpp>

#include <chrono>
#include <cstddef>

namespace ucx::detail {

/// What the engine must do next.
enum class progress_step {
    progress,   ///< call ucp_worker_progress (and deliver completions)
    queue_wait, ///< queue async_wait(wait_read) on the event fd
    arm,        ///< call ucp_worker_arm
    sleep,      ///< end the pass; the queued wait wakes the engine
    yield,      ///< end the pass and post a new one (spinning, or fairness)
};

struct progress_config {
    progress_mode mode = progress_mode::event;
    /// Hybrid mode: how long to keep progressing after the last activity.
    std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
    /// Most ucp_worker_progress/arm calls in one handler before yielding
    /// (at least 2: one progress and one arm).
    unsigned max_steps_per_pass = 64;
};

class progress_fsm {
public:
    using clock = std::chrono::steady_clock;

    explicit progress_fsm(progress_config config = {}) noexcept : config_(config) {}

    const progress_config& config() const noexcept { return config_; }

    /// The time to pass to the calls below: only the hybrid mode's spin
    /// window reads it, so the other modes skip the clock.
    clock::time_point now() const noexcept {
        return config_.mode == progress_mode::hybrid ? clock::now() : clock::time_point{};
    }

    /// Someone submitted work or wants progress. Returns true when the caller
    /// must schedule a pass (none is scheduled or running); coalesces requests.
    bool request(clock::time_point now) noexcept;

    /// `request` while a pass runs (`in_pass()`): the pass progresses again
    /// before it may arm, and records the activity itself.
    void request_in_pass() noexcept { requested_in_pass_ = true; }

    /// A pass starts (a scheduled pass, a wake-up of the fd, or the safety timer).
    progress_step begin(clock::time_point now) noexcept;

    /// ucp_worker_progress returned; `events` counts its result plus the
    /// completions delivered afterwards. `work_pending`: operations in flight
    /// (poll mode spins only while there are some).
    progress_step on_progressed(std::size_t events, bool work_pending,
                                clock::time_point now) noexcept;

    /// The wait on the event fd is queued.
    progress_step on_wait_queued() noexcept;

    /// ucp_worker_arm returned; `busy` for UCS_ERR_BUSY (events are pending).
    progress_step on_armed(bool busy) noexcept;

    /// The queued wait completed (woken, or cancelled).
    void on_wait_done() noexcept { wait_queued_ = false; }

    bool wait_queued() const noexcept { return wait_queued_; }
    bool pass_scheduled() const noexcept { return scheduled_; }
    bool in_pass() const noexcept { return in_pass_; }
    /// Whether the last completed pass ended armed and asleep.
    bool armed() const noexcept { return armed_; }

private:
    progress_step quiet(bool work_pending, clock::time_point now) noexcept;
    progress_step spin() noexcept;
    progress_step end(progress_step s) noexcept;

    progress_config config_;
    clock::time_point last_activity_{};
    unsigned steps_ = 0;
    bool scheduled_ = false;
    bool in_pass_ = false;
    bool continuing_ = false;
    bool requested_in_pass_ = false;
    bool wait_queued_ = false;
    bool armed_ = false;
};

/// Executes one pass. `Backend` provides:
///   std::size_t progress();  // ucp_worker_progress + deliver completions
///   bool work_pending();
///   void queue_wait();
///   bool arm();              // true for UCS_ERR_BUSY
///   void post_pass();        // post run_progress_pass again
///   bool stopped();          // the worker shut down during the pass
template <class Backend>
void run_progress_pass(progress_fsm& fsm, Backend& backend) {
    progress_step step = fsm.begin(fsm.now());
    for (;;) {
        if (backend.stopped())
            return;
        switch (step) {
        case progress_step::progress: {
            std::size_t events = backend.progress();
            step = fsm.on_progressed(events, backend.work_pending(), fsm.now());
            break;
        }
        case progress_step::queue_wait:
            backend.queue_wait();
            step = fsm.on_wait_queued();
            break;
        case progress_step::arm:
            step = fsm.on_armed(backend.arm());
            break;
        case progress_step::sleep:
            return;
        case progress_step::yield:
            backend.post_pass();
            return;
        }
    }
}

} // namespace ucx::detail
