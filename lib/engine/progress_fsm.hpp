// Internal: the decisions of the progress engine, free of I/O.
//
// The engine runs "passes" on the worker's executor. A pass calls
// ucp_worker_progress until UCX reports no more events, then either keeps
// spinning (yield: continue in a freshly posted handler so other handlers run),
// or arms the worker and, once armed, queues the wait on the event fd and
// sleeps. The fd is in the reactor only while a wait is queued: the backend
// registers it with the wait, and the registration (epoll_ctl ADD) reads the
// fd's readiness as it is made, so an event between the arm and the wait is
// reported, not lost. `progress_fsm` makes these decisions from the answers
// the worker gives; `run_progress_pass` executes them against a backend.
// Tests drive both with a scripted fake worker.
#pragma once

#include <ucx/progress_mode.hpp>

#include "util/tick_clock.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ucx::detail {

/// The engine's clock: nanoseconds from `tick_clock` (the processor's
/// time-stamp counter where the kernel keeps its own time with it, else the
/// steady clock). A hybrid worker reads the time at every spinning step, so
/// a read's cost is added to how late a spinning worker sees a message: about
/// 9 ns against 22 for `steady_clock::now()` through the vDSO on the 2-core
/// benchmark host. Its time points are compared with each other only.
struct engine_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<engine_clock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept {
        static const tick_clock& c = tick_clock::get();
        return time_point(c.to_duration(c.now()));
    }
};

/// What the engine must do next.
enum class progress_step {
    progress,   ///< call ucp_worker_progress (and deliver completions)
    arm,        ///< call ucp_worker_arm
    queue_wait, ///< register the event fd and queue async_wait(wait_read) on it
    sleep,      ///< end the pass; the queued wait wakes the engine
    yield,      ///< end the pass and post a new one (spinning, or fairness)
    backoff,    ///< end the pass; a timer starts the next one after `backoff_delay()`
    park,       ///< end the pass; the executor's spin group continues it in its next turn
    relax,      ///< give the processor to other threads (sched_yield), then progress
};

struct progress_config {
    progress_mode mode = progress_mode::event;
    /// Hybrid mode: how long to keep progressing after the last activity
    /// (with `adaptive_spin`, the most the window grows to).
    std::chrono::nanoseconds spin{std::chrono::microseconds(20)};
    /// Hybrid mode: the spin window follows the traffic. A spin that found
    /// events, or a sleep that an event ended within `spin`, doubles the
    /// window (from `spin / 16` when it was closed); a spin that ran out
    /// halves it, and below `spin / 16` it closes (no spin: event mode).
    /// Request/response traffic and rendezvous steps keep it open; traffic
    /// sparser than `spin` (heartbeats, idle connections) closes it after
    /// five spins that found nothing.
    bool adaptive_spin = true;
    /// Most ucp_worker_progress/arm calls that found events (or arm) in one
    /// handler before yielding (at least 2: one progress and one arm).
    unsigned max_steps_per_pass = 64;
    /// Poll and hybrid modes: how long one handler may keep spinning on quiet
    /// progress calls before yielding to the other handlers of the executor.
    /// Spinning is bounded by time, not by a count: each yield costs a trip
    /// through the io_context, whose reactor then polls epoll (a system call).
    std::chrono::nanoseconds spin_slice{std::chrono::microseconds(50)};
    /// Spinning: give the processor to other threads between two quiet
    /// progress calls (more busy processes than cores).
    bool yield_cpu = false;
    /// Quiet spinning progress calls between two reads of the clock for
    /// `spin_slice` (at least 1).
    unsigned spin_clock_interval = 64;
    /// Arms in a row that UCX answered "busy" while progress found nothing,
    /// after which the engine backs off instead of yielding. UCX says busy
    /// without anything to do while a send waits for room in a peer's queue
    /// (shared memory: the peer's receive FIFO is full), and nothing wakes
    /// the worker when room appears: it must poll. Many such processes
    /// polling flat out starve the peer that would make the room (measured:
    /// 200 clients of one server over shared memory on 2 cores).
    unsigned busy_backoff_after = 16;
    /// The first back-off delay; it doubles on each back-off in a row, up to
    /// `backoff_max`, and starts over once progress finds events.
    std::chrono::nanoseconds backoff_min{std::chrono::microseconds(20)};
    std::chrono::nanoseconds backoff_max{std::chrono::milliseconds(1)};
};

class progress_fsm {
public:
    using clock = engine_clock;

    explicit progress_fsm(progress_config config = {}) noexcept
        : config_(config), window_(config.spin) {}

    const progress_config& config() const noexcept { return config_; }

    /// The time to pass to the calls below. The hybrid mode's spin window
    /// reads it at every step; otherwise only the spinning step that checks
    /// the spin slice needs it (one step in `spin_clock_interval`), so the
    /// common steps skip the clock.
    clock::time_point now() const noexcept {
        return config_.mode == progress_mode::hybrid || spin_steps_ + 1 >= interval()
                   ? clock::now()
                   : clock::time_point{};
    }

    /// Someone submitted work or wants progress. Returns true when the caller
    /// must schedule a pass (none is scheduled or running); coalesces requests.
    bool request(clock::time_point now) noexcept;

    /// `request` while a pass runs (`in_pass()`): the pass progresses again
    /// before it may arm, and records the activity itself.
    void request_in_pass() noexcept {
        requested_in_pass_ = true;
        submitted_in_pass_ = true;
    }

    /// The pass delivered completions: their handlers ran. If none of them
    /// (nor anything else in this pass) started work on the worker, control
    /// went elsewhere (a flag a `run_one()` loop tests, a handler posted to
    /// another executor), and a spinning pass ends at its next quiet step
    /// instead of holding the thread.
    void on_delivered() noexcept { delivered_ = true; }

    /// A pass starts (a scheduled pass, a wake-up of the fd, or the safety timer).
    progress_step begin(clock::time_point now) noexcept;

    /// ucp_worker_progress returned; `events` counts its result plus the
    /// completions delivered afterwards. `work_pending`: operations in flight
    /// (poll mode spins only while there are some).
    /// `queued`: a submission to the worker waits in the executor's queue
    /// (started from outside it): a spinning pass yields to let it run.
    progress_step on_progressed(std::size_t events, bool work_pending, clock::time_point now,
                                bool queued = false) noexcept;

    /// The wait on the event fd is queued after a successful arm (`queued`),
    /// or could not be (the fd could not join the reactor): then the pass
    /// backs off instead of sleeping, and polls.
    progress_step on_wait_queued(bool queued = true) noexcept;

    /// ucp_worker_arm returned; `busy` for UCS_ERR_BUSY (events are pending).
    progress_step on_armed(bool busy) noexcept;

    /// The queued wait completed (woken, or cancelled).
    void on_wait_done() noexcept { wait_queued_ = false; }

    /// Whether the worker spins in its executor's spin group (other polling
    /// workers share the executor): a quiet step that would spin parks the
    /// pass instead, and the group's turn progresses every parked worker
    /// once, round robin. Alone, a worker spins in its own handler.
    void set_shared_spin(bool on) noexcept { shared_spin_ = on; }
    bool shared_spin() const noexcept { return shared_spin_; }

    bool wait_queued() const noexcept { return wait_queued_; }
    bool pass_scheduled() const noexcept { return scheduled_; }
    bool in_pass() const noexcept { return in_pass_; }
    /// Whether the last completed pass ended armed and asleep.
    bool armed() const noexcept { return armed_; }
    /// How long to wait before the next pass after a `backoff` step.
    std::chrono::nanoseconds backoff_delay() const noexcept { return backoff_; }
    /// Hybrid mode: how long a pass keeps progressing after the last activity
    /// now (`spin`, or less with `adaptive_spin`).
    std::chrono::nanoseconds spin_window() const noexcept { return window_; }

private:
    progress_step quiet(bool work_pending, bool queued, clock::time_point now) noexcept;
    progress_step spin(clock::time_point now) noexcept;
    progress_step end(progress_step s) noexcept;
    void widen() noexcept {
        const auto floor = config_.spin / 16;
        window_ = window_ < floor ? floor : std::min(window_ * 2, config_.spin);
    }
    void narrow() noexcept {
        window_ /= 2;
        if (window_ < config_.spin / 16)
            window_ = std::chrono::nanoseconds(0);
    }
    unsigned interval() const noexcept {
        return config_.spin_clock_interval == 0 ? 1 : config_.spin_clock_interval;
    }

    progress_config config_;
    clock::time_point last_activity_{};
    /// When this pass started (the spin slice is measured from it).
    clock::time_point pass_start_{};
    unsigned steps_ = 0;
    /// Quiet spinning steps since the spin slice was last checked.
    unsigned spin_steps_ = 0;
    bool scheduled_ = false;
    bool in_pass_ = false;
    bool continuing_ = false;
    bool requested_in_pass_ = false;
    bool wait_queued_ = false;
    bool armed_ = false;
    bool shared_spin_ = false;
    /// This pass delivered completions; something was submitted during it.
    bool delivered_ = false;
    bool submitted_in_pass_ = false;
    /// Busy arms in a row after quiet progress calls (across passes).
    unsigned busy_quiet_ = 0;
    /// The current back-off delay (zero: none since the last events).
    std::chrono::nanoseconds backoff_{0};
    /// Hybrid mode: the spin window, and the adaptation's evidence: this
    /// activity's spin has begun (a quiet step spun), when the last quiet step
    /// that did not spin ran, and when the engine last went to sleep.
    std::chrono::nanoseconds window_;
    bool spun_ = false;
    bool slept_ = false;
    clock::time_point last_quiet_{};
    clock::time_point slept_at_{};
};

// The decisions taken on every spinning step are inline: they run once per
// ucp_worker_progress call, which itself costs about as much.

inline progress_step progress_fsm::end(progress_step s) noexcept {
    in_pass_ = false;
    switch (s) {
    case progress_step::yield:
    case progress_step::park:
        scheduled_ = true;
        continuing_ = true;
        break;
    case progress_step::backoff:
        scheduled_ = true;
        continuing_ = true;
        busy_quiet_ = 0;
        backoff_ = backoff_.count() == 0 ? config_.backoff_min
                                         : std::min(backoff_ * 2, config_.backoff_max);
        break;
    case progress_step::sleep:
        armed_ = true;
        slept_ = true;
        slept_at_ = last_quiet_;
        break;
    default:
        break;
    }
    return s;
}

inline progress_step progress_fsm::spin(clock::time_point now) noexcept {
    // Sharing the executor with other polling workers: one quiet step each,
    // in turn (the spin group keeps the turns and yields to the executor).
    if (shared_spin_)
        return end(progress_step::park);
    // `now` is real only on the step that checks the slice (see now()).
    if (++spin_steps_ >= interval()) {
        spin_steps_ = 0;
        if (now - pass_start_ >= config_.spin_slice)
            return end(progress_step::yield);
    }
    return config_.yield_cpu ? progress_step::relax : progress_step::progress;
}

inline progress_step progress_fsm::quiet(bool work_pending, bool queued,
                                         clock::time_point now) noexcept {
    // Spinning: keep progressing in this handler while the spin slice
    // lasts, then yield. Yielding after every quiet step (or every few) would
    // make the spin cost a trip through the io_context, whose reactor then
    // polls epoll (a system call) between two progress calls.
    bool spinning = false;
    switch (config_.mode) {
    case progress_mode::event:
        break;
    case progress_mode::poll:
        spinning = work_pending;
        break;
    case progress_mode::hybrid:
        spinning = now - last_activity_ < window_;
        if (config_.adaptive_spin) {
            // A spin that ran out found nothing worth its time.
            if (spinning)
                spun_ = true;
            else if (spun_) {
                spun_ = false;
                narrow();
            }
        }
        last_quiet_ = now;
        break;
    }
    if (spinning) {
        // The thread is wanted elsewhere: a submission waits in the queue,
        // or the handlers just delivered started nothing here.
        if (queued || (delivered_ && !submitted_in_pass_))
            return end(progress_step::yield);
        return spin(now);
    }
    // The quiet progress call and the arm after it are steps: within budget,
    // or in a fresh handler. The wait is queued once the arm succeeded (see
    // on_armed), even with nothing in flight: peers need this worker's
    // progress (connection set-up, their sends) at any time.
    ++steps_;
    if (steps_ >= config_.max_steps_per_pass)
        return end(progress_step::yield);
    return progress_step::arm;
}

inline progress_step progress_fsm::on_progressed(std::size_t events, bool work_pending,
                                                 clock::time_point now, bool queued) noexcept {
    if (events > 0 || requested_in_pass_) {
        // A spin that found events paid off.
        if (spun_) {
            spun_ = false;
            widen();
        }
        ++steps_;
        busy_quiet_ = 0;
        backoff_ = std::chrono::nanoseconds(0);
        requested_in_pass_ = false;
        last_activity_ = now;
        // Fairness: a worker that always has events must not starve the
        // other handlers of the io_context.
        if (steps_ >= config_.max_steps_per_pass)
            return end(progress_step::yield);
        return progress_step::progress;
    }
    return quiet(work_pending, queued, now);
}

/// Executes one pass. `Backend` provides:
///   std::size_t progress();  // ucp_worker_progress + deliver completions
///   bool work_pending();
///   bool submissions_queued(); // started from outside the executor, not run yet
///   bool arm();              // true for UCS_ERR_BUSY
///   bool queue_wait();       // register the fd, async_wait; false if it cannot
///   void post_pass();        // post run_progress_pass again
///   void post_pass_after(d); // run run_progress_pass again after `d`
///   void park();             // the spin group runs run_progress_pass in its next turn
///   void relax();            // sched_yield
///   bool stopped();          // the worker shut down during the pass
template <class Backend>
void run_progress_pass(progress_fsm& fsm, Backend& backend) {
    // One clock read per pass: the spin slice starts here.
    progress_step step = fsm.begin(progress_fsm::clock::now());
    for (;;) {
        if (backend.stopped())
            return;
        switch (step) {
        case progress_step::progress: {
            std::size_t events = backend.progress();
            step = fsm.on_progressed(events, backend.work_pending(), fsm.now(),
                                     backend.submissions_queued());
            break;
        }
        case progress_step::arm:
            step = fsm.on_armed(backend.arm());
            break;
        case progress_step::queue_wait:
            step = fsm.on_wait_queued(backend.queue_wait());
            break;
        case progress_step::sleep:
            return;
        case progress_step::yield:
            backend.post_pass();
            return;
        case progress_step::backoff:
            backend.post_pass_after(fsm.backoff_delay());
            return;
        case progress_step::park:
            backend.park();
            return;
        case progress_step::relax:
            backend.relax();
            step = progress_step::progress;
            break;
        }
    }
}

} // namespace ucx::detail
