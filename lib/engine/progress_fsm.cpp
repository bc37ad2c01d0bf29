#include "engine/progress_fsm.hpp"

namespace ucx::detail {

bool progress_fsm::request(clock::time_point now) noexcept {
    last_activity_ = now;
    if (in_pass_) {
        // The running pass progresses again before it may arm: remember it.
        requested_in_pass_ = true;
        submitted_in_pass_ = true;
        return false;
    }
    if (scheduled_)
        return false;
    scheduled_ = true;
    return true;
}

progress_step progress_fsm::begin(clock::time_point now) noexcept {
    if (!continuing_) {
        // Woken within the longest window after going to sleep: a longer
        // spin would have found what woke the engine.
        if (config_.mode == progress_mode::hybrid && config_.adaptive_spin && slept_ &&
            now - slept_at_ < config_.spin)
            widen();
        spun_ = false;
        last_activity_ = now;
    }
    slept_ = false;
    continuing_ = false;
    pass_start_ = now;
    spin_steps_ = 0;
    scheduled_ = false;
    in_pass_ = true;
    armed_ = false;
    requested_in_pass_ = false;
    delivered_ = false;
    submitted_in_pass_ = false;
    steps_ = 0;
    return progress_step::progress;
}

progress_step progress_fsm::on_wait_queued(bool queued) noexcept {
    if (!queued)
        return end(progress_step::backoff);
    wait_queued_ = true;
    return end(progress_step::sleep);
}

progress_step progress_fsm::on_armed(bool busy) noexcept {
    ++steps_;
    if (!busy) {
        busy_quiet_ = 0;
        // Armed. The wait is queued only now: while the worker runs, its fd
        // stays out of the reactor (an fd in an epoll set makes every event
        // UCX signals on it cost the signalling peer a walk through that
        // set's wake-up callbacks). A wait still queued from an earlier
        // sleep (a pass that a submission started) serves again.
        if (!wait_queued_)
            return progress_step::queue_wait;
        return end(progress_step::sleep);
    }
    // An arm follows a quiet progress call: busy with nothing to do.
    if (config_.busy_backoff_after > 0 && ++busy_quiet_ >= config_.busy_backoff_after)
        return end(progress_step::backoff);
    if (steps_ >= config_.max_steps_per_pass)
        return end(progress_step::yield);
    return progress_step::progress;
}

} // namespace ucx::detail
