#include "group/collective_runner.hpp"

#include <cstring>

namespace ucx::detail::coll {

using phase = collective_run::phase;

run_action collective_runner::input_ready(collective_run& r, bool ok) noexcept {
    r.ready_ = true;
    if (!ok)
        r.local_failed_ = true;
    if (in_pass_ || head_ != &r || r.phase_ != phase::queued)
        return {};
    return begin(false);
}

run_action collective_runner::deferred_end(collective_run& r, bool aborted) noexcept {
    if ((failed_ || aborted) && r.outcome_ == run_outcome::ok)
        r.outcome_ = run_outcome::failed;
    r.phase_ = phase::finishing;
    if (in_pass_)
        return {};
    return begin(false);
}

run_action collective_runner::timer_expired(clock::time_point now) noexcept {
    armed_ = false;
    expired_ = true;
    attention_ = true;
    expired_at_ = now;
    if (in_pass_)
        return {};
    return begin(false);
}

run_action collective_runner::fail() noexcept {
    failed_ = true;
    attention_ = true;
    if (in_pass_)
        return {};
    return begin(false);
}

collective_run* collective_runner::take_front() noexcept {
    collective_run* r = head_;
    if (!r)
        return nullptr;
    head_ = r->next_;
    if (!head_)
        tail_ = nullptr;
    r->next_ = nullptr;
    return r;
}

void collective_runner::combine_and_copy(collective_run& r, const round& rd) noexcept {
    if (!rd.combines.empty()) {
        const std::size_t es = element_size(r.type);
        for (const auto& c : rd.combines)
            reduce_elements(r.type, r.op, r.at(c.lower), r.at(c.higher), r.at(c.out),
                            c.out.length / es);
    }
    for (const auto& c : rd.copies)
        if (c.from.length > 0)
            std::memmove(r.at(c.to), r.at(c.from), c.from.length);
}

run_action collective_runner::attend() noexcept {
    if (failed_ && armed_) {
        armed_ = false;
        return {nullptr, run_action_type::cancel_timer};
    }
    if (expired_) {
        expired_ = false;
        collective_run* r = busy() ? head_ : nullptr;
        // A collective started with no timeout has no deadline.
        if (!failed_ && r && r->deadline != clock::time_point{}) {
            if (r->deadline > expired_at_) {
                armed_ = true;
                armed_at_ = r->deadline;
                return {r, run_action_type::arm_timer};
            }
            return {r, run_action_type::fail_group, run_outcome::ok, false, true};
        }
    }
    attention_ = false;
    return {};
}

run_action collective_runner::next() noexcept {
    for (;;) {
        if (attention_) [[unlikely]] {
            if (run_action a = attend(); a.type != run_action_type::none)
                return a;
        }
        if (!head_)
            return stop();
        collective_run& r = *head_;
        switch (r.phase_) {
        case phase::waiting:
            if (r.outstanding_ > 0) {
                r.in_start_ = false;
                return stop(); // the last one goes on
            }
            if (r.outcome_ != run_outcome::ok) [[unlikely]]
                return end(r, r.outcome_);
            if (r.round_ < r.steps->rounds.size())
                finish_round(r, r.steps->rounds[r.round_]);
            [[fallthrough]];
        case phase::rounds:
            if (!r.started_ || r.round_ < r.steps->rounds.size()) {
                // Its transfers complete later, never inside the calls that
                // start them, or at once (`round_started`).
                const bool first = !r.started_;
                r.started_ = true;
                r.outstanding_ = static_cast<int>(r.transfers().size());
                r.phase_ = phase::transferring;
                return {&r, run_action_type::start_round, run_outcome::ok, false, false, first};
            }
            if (r.in_start_ && (initiating_ || ++chained_ > max_chained_)) {
                r.phase_ = phase::deferred;
                return {&r, run_action_type::defer};
            }
            return end(r, r.outcome_);
        case phase::queued:
            if (!r.ready_)
                return stop();
            if (failed_)
                return end(r, run_outcome::failed);
            if (r.local_failed_)
                return end(r, run_outcome::local_failure);
            r.in_start_ = true;
            r.phase_ = phase::rounds;
            if (timeout_.count() > 0) {
                r.deadline = now_() + timeout_;
                // Not armed, or armed later (the timeout was shortened).
                if (!armed_ || r.deadline < armed_at_) {
                    armed_ = true;
                    armed_at_ = r.deadline;
                    return {&r, run_action_type::arm_timer};
                }
            }
            continue;
        case phase::deferred:
            return stop();
        case phase::finishing:
            return end(r, r.outcome_);
        case phase::failing:
            return complete(r);
        case phase::fresh:
        case phase::done:
        case phase::transferring: // `round_started` moves it on
            return stop();
        }
    }
}

} // namespace ucx::detail::coll
