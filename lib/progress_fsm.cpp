#include <ucx/detail/progress_fsm.hpp>

namespace ucx::detail {

bool progress_fsm::request(clock::time_point now) noexcept {
    last_activity_ = now;
    if (in_pass_) {
        // The running pass progresses again before it may arm: remember it.
        requested_in_pass_ = true;
        return false;
    }
    if (scheduled_)
        return false;
    scheduled_ = true;
    return true;
}

progress_step progress_fsm::begin(clock::time_point now) noexcept {
    if (!continuing_)
        last_activity_ = now;
    continuing_ = false;
    scheduled_ = false;
    in_pass_ = true;
    armed_ = false;
    requested_in_pass_ = false;
    steps_ = 0;
    return progress_step::progress;
}

progress_step progress_fsm::end(progress_step s) noexcept {
    in_pass_ = false;
    switch (s) {
    case progress_step::yield:
        scheduled_ = true;
        continuing_ = true;
        break;
    case progress_step::sleep:
        armed_ = true;
        break;
    default:
        break;
    }
    return s;
}

progress_step progress_fsm::on_progressed(std::size_t events, bool work_pending,
                                          clock::time_point now) noexcept {
    ++steps_;
    if (events > 0 || requested_in_pass_) {
        requested_in_pass_ = false;
        last_activity_ = now;
        // Fairness: a worker that always has events must not starve the
        // other handlers of the io_context.
        if (steps_ >= config_.max_steps_per_pass)
            return end(progress_step::yield);
        return progress_step::progress;
    }
    return quiet(work_pending, now);
}

progress_step progress_fsm::quiet(bool work_pending, clock::time_point now) noexcept {
    // Spinning: keep progressing in this handler while the step budget
    // lasts, then yield. Yielding after every quiet step would make each
    // spin round cost a trip through the io_context, whose reactor then
    // polls epoll (a system call) between two progress calls.
    switch (config_.mode) {
    case progress_mode::event:
        break;
    case progress_mode::poll:
        if (work_pending)
            return spin();
        break;
    case progress_mode::hybrid:
        if (now - last_activity_ < config_.spin)
            return spin();
        break;
    }
    // Arming is a step too: within budget, or in a fresh handler.
    if (steps_ >= config_.max_steps_per_pass)
        return end(progress_step::yield);
    // The wait stays queued even with nothing in flight: peers need this
    // worker's progress (connection set-up, their sends) at any time.
    if (!wait_queued_)
        return progress_step::queue_wait;
    return progress_step::arm;
}

progress_step progress_fsm::spin() noexcept {
    if (steps_ >= config_.max_steps_per_pass)
        return end(progress_step::yield);
    return progress_step::progress;
}

progress_step progress_fsm::on_wait_queued() noexcept {
    wait_queued_ = true;
    return progress_step::arm;
}

progress_step progress_fsm::on_armed(bool busy) noexcept {
    ++steps_;
    if (!busy)
        return end(progress_step::sleep);
    if (steps_ >= config_.max_steps_per_pass)
        return end(progress_step::yield);
    return progress_step::progress;
}

} // namespace ucx::detail
