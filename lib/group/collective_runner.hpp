// Internal: the collective runner of a group, free of I/O.
//
// A group runs its collectives one at a time, in the order they were started
// here: every rank starts them in the same order, so the n-th collective of
// each rank meets the n-th of the others (its messages carry n in their tag).
// Each runs its plan (collective_plan.hpp) round by round: the transfers of a
// round start at once; once all have completed, the round's combines and
// copies run and the next round starts. A collective whose device input is
// still being copied to the host is not ready: it waits at the head of the
// queue, and the ones behind it wait for it.
//
// A collective ends with its result (`ok`), or with a message of the wrong
// size (`mismatch`), a failed transfer or the group's failure (`failed`), or
// its own input that could not be read (`local_failure`). Every end but `ok`
// fails the group first (no partial result: the group is unusable after a
// failed collective), and a collective with transfers in flight ends only
// once all of them are back (UCX has released its buffers). Once the group
// failed, the collectives behind the running one end at once with `failed`.
//
// One watchdog bounds the running collective by the group's timeout (its
// deadline is fixed when it starts). It is armed for the running
// collective's deadline when it is not armed (or armed later), and on expiry
// either fails the group or is armed again for the deadline of the
// collective running then: back-to-back collectives shorter than the timeout
// arm no timer.
//
// A collective whose transfers all complete inside the calls that start them
// (UCX sends a small message at once; a message may already be there) ends
// inside its own start. Its completion is then deferred (`defer`, then
// `deferred_end`) when it was started by the initiating call, so a handler
// never runs inside the call that started its operation, and after
// `max_chained` such ends in one pass, so a chain of collectives each started
// by the previous one's handler gives the thread back to the io_context (and
// UCX its progress) every few of them.
//
// Pull style, as an allocation-free hot path: an event returns the first
// action; the I/O object executes it and calls `resume` (`round_started`
// after starting a round's transfers) for the next one, until `none`. The collectives are the I/O
// object's nodes (`collective_run`), linked into the queue here: a loop of
// collectives allocates nothing. An event that comes while an action is being
// executed (a handler run by `complete` that starts the next collective, the
// group's failure raised by `fail_group`) is recorded and answered with
// `none`: the pass in progress takes it up.
#pragma once

#include "group/collective_plan.hpp"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ucx::detail::coll {

/// How a collective ended.
enum class run_outcome : std::uint8_t {
    ok,            ///< the result is in `out`
    mismatch,      ///< a message of the wrong size (collective_mismatch)
    failed,        ///< a transfer failed, or the group did (the group's error)
    local_failure, ///< its input could not be read here (that error)
};

/// A transfer's result.
enum class transfer_status : std::uint8_t {
    pending,    ///< in flight: `transfer_done` reports it
    done,       ///< complete
    wrong_size, ///< a message of another size came
    failed,     ///< failed
};

/// One collective: the I/O object's node, owned by it and linked into the
/// runner's queue from `submit` to `complete`.
class collective_run {
public:
    /// The plan, set before `submit` (the I/O object keeps it alive until
    /// `complete`).
    const plan* steps = nullptr;
    /// Where the plan's buffers start (`buffer` order: in, out, scratch), set
    /// when its first round starts.
    std::array<std::byte*, 3> base{};
    /// The reduction of its combines.
    datatype type{};
    reduce_op op{};
    /// Its deadline (the epoch: none), fixed when it starts.
    std::chrono::steady_clock::time_point deadline{};

    /// As made, for a next collective.
    void reset_run() noexcept {
        next_ = nullptr;
        phase_ = phase::fresh;
        round_ = 0;
        outstanding_ = 0;
        outcome_ = run_outcome::ok;
        ready_ = true;
        local_failed_ = false;
        in_start_ = false;
        started_ = false;
        deadline = {};
    }
    /// Its input is being copied (before `submit`): not ready until
    /// `input_ready`.
    void set_not_ready() noexcept { ready_ = false; }
    bool ready() const noexcept { return ready_; }
    /// The round it runs (the number of rounds once they are all done).
    std::size_t round() const noexcept { return round_; }
    /// Transfers of its round in flight.
    int outstanding() const noexcept { return outstanding_; }
    run_outcome outcome() const noexcept { return outcome_; }
    /// The bytes `g` names, once started.
    std::byte* at(const region& g) const noexcept {
        return base[static_cast<std::size_t>(g.buf)] + g.offset;
    }
    /// The transfers of the round it runs (none once every round is done).
    std::span<const transfer> transfers() const noexcept {
        if (round_ < steps->rounds.size())
            return steps->rounds[round_].transfers;
        return {};
    }

    /// Where it is (for tests and logs).
    enum class phase : std::uint8_t {
        fresh,        // not submitted
        queued,       // in the queue, not started
        rounds,       // between rounds
        transferring, // `start_round` is out
        waiting,      // transfers in flight
        deferred,     // `defer` is out or done, `deferred_end` to come
        finishing,    // ends with `outcome_` at the next step
        failing,      // `fail_group` is out: `complete` next
        done,         // `complete` was returned
    };
    phase where() const noexcept { return phase_; }

private:
    friend class collective_runner;

    collective_run* next_ = nullptr;
    phase phase_ = phase::fresh;
    std::size_t round_ = 0;
    int outstanding_ = 0;
    run_outcome outcome_ = run_outcome::ok;
    bool ready_ = true;
    bool local_failed_ = false;
    /// No round of it has waited yet: it is inside its start.
    bool in_start_ = false;
    /// Its first `start_round` was returned.
    bool started_ = false;
};

enum class run_action_type : std::uint8_t {
    none,         ///< nothing more now
    start_round,  ///< start `run->transfers()`, each on its region (`first`:
                  ///< before them, give `run` its buffers, `base`, and its
                  ///< tag, and run its plan's prologue; a plan without rounds
                  ///< has only this one, with no transfer); then
                  ///< `round_started`
    arm_timer,    ///< (re)arm the watchdog for `timer_expiry()` (then
                  ///< `timer_expired`); `resume`
    cancel_timer, ///< cancel the watchdog; `resume`
    fail_group,   ///< fail the group (`timeout`: with group_timeout, `run`
                  ///< passed its deadline); `resume`
    defer,        ///< end `run` from the worker's next pass (then
                  ///< `deferred_end`); `resume`
    complete,     ///< `run` ended with `outcome` and left the queue: complete its
                  ///< handler (`post`: inside the initiating call, so post it);
                  ///< `resume`
};

/// One action (two registers wide: returned in them).
struct run_action {
    collective_run* run = nullptr;
    run_action_type type = run_action_type::none;
    run_outcome outcome = run_outcome::ok;
    bool post = false;
    bool timeout = false;
    bool first = false;
};

class collective_runner {
public:
    using clock = std::chrono::steady_clock;

    struct params {
        /// The group's timeout (0: none).
        std::chrono::milliseconds timeout{0};
        /// The time now (tests give their own).
        clock::time_point (*now)() = &clock::now;
        /// Collectives that may end inside their start in one pass.
        int max_chained = 16;
    };

    explicit collective_runner(const params& p) noexcept
        : timeout_(p.timeout), now_(p.now), max_chained_(p.max_chained) {}
    collective_runner(const collective_runner&) = delete;
    collective_runner& operator=(const collective_runner&) = delete;

    /// Queues `r` (fresh, its plan set) behind the others. The initiating
    /// call: what ends in this pass is posted.
    run_action submit(collective_run& r) noexcept;
    /// `r`'s input is copied (`ok`) or could not be (it ends with
    /// `local_failure`). `r` may not be submitted yet.
    run_action input_ready(collective_run& r, bool ok) noexcept;
    /// A transfer of `r` that was pending completed.
    run_action transfer_done(collective_run& r, transfer_status s) noexcept;
    /// The deferral of `r` ran (`aborted`: the worker dropped it).
    run_action deferred_end(collective_run& r, bool aborted) noexcept;
    /// The watchdog expired at `now` (not when cancelled or rearmed).
    run_action timer_expired(clock::time_point now) noexcept;
    /// The group failed (or was closed here). Once.
    run_action fail() noexcept;
    /// The next action after one that was executed.
    run_action resume() noexcept { return next(); }
    /// The next action after `start_round`: `done_now` of its transfers
    /// completed inside the calls that started them (the others are pending),
    /// `s` the first that did not complete `done` (or `done`).
    run_action round_started(int done_now, transfer_status s) noexcept;

    void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }
    std::chrono::milliseconds timeout() const noexcept { return timeout_; }
    bool failed() const noexcept { return failed_; }
    /// A collective is running (started, not complete).
    bool busy() const noexcept { return head_ && head_->phase_ != collective_run::phase::queued; }
    bool empty() const noexcept { return !head_; }
    /// The running collective, or the next to start.
    collective_run* front() const noexcept { return head_; }
    bool timer_armed() const noexcept { return armed_; }
    clock::time_point timer_expiry() const noexcept { return armed_at_; }
    /// Between an event's first action and its `none`.
    bool in_pass() const noexcept { return in_pass_; }
    /// Removes the first queued collective (to free it: a group destroyed
    /// with collectives that never started), or returns null.
    collective_run* take_front() noexcept;

private:
    run_action next() noexcept;
    /// A pass begins with an event (`initiating`: `submit`'s).
    run_action begin(bool initiating) noexcept;
    /// The pass ends.
    run_action stop() noexcept {
        in_pass_ = false;
        initiating_ = false;
        return {};
    }
    /// The failure or the watchdog's expiry, between two steps.
    run_action attend() noexcept;
    run_action end(collective_run& r, run_outcome o) noexcept;
    run_action complete(collective_run& r) noexcept;
    static void apply(collective_run& r, transfer_status s) noexcept;
    /// `r`'s round `rd` completed: its combines and copies (most rounds have
    /// none), and on to the next round.
    static void finish_round(collective_run& r, const round& rd) noexcept {
        ++r.round_;
        if (!rd.combines.empty() || !rd.copies.empty())
            combine_and_copy(r, rd);
    }
    static void combine_and_copy(collective_run& r, const round& rd) noexcept;

    std::chrono::milliseconds timeout_;
    clock::time_point (*now_)();
    int max_chained_;
    collective_run* head_ = nullptr;
    collective_run* tail_ = nullptr;
    bool failed_ = false;
    bool in_pass_ = false;
    bool initiating_ = false;
    int chained_ = 0;
    bool armed_ = false;
    clock::time_point armed_at_{};
    /// The watchdog expired at `expired_at_`: checked at the next step.
    bool expired_ = false;
    /// `failed_` or `expired_` was set: `attend` at the next step.
    bool attention_ = false;
    clock::time_point expired_at_{};
};

// The steps of every collective, inline.

inline run_action collective_runner::submit(collective_run& r) noexcept {
    r.next_ = nullptr;
    r.phase_ = collective_run::phase::queued;
    (tail_ ? tail_->next_ : head_) = &r;
    tail_ = &r;
    // The running collective (or one not ready at the head) goes first.
    if (in_pass_ || head_ != &r)
        return {};
    return begin(true);
}

inline run_action collective_runner::transfer_done(collective_run& r, transfer_status s) noexcept {
    apply(r, s);
    --r.outstanding_;
    if (in_pass_ || r.outstanding_ > 0)
        return {};
    return begin(false);
}

inline run_action collective_runner::round_started(int done_now, transfer_status s) noexcept {
    collective_run& r = *head_;
    r.phase_ = collective_run::phase::waiting;
    r.outstanding_ -= done_now;
    if (s != transfer_status::done) [[unlikely]]
        apply(r, s);
    return next();
}

inline run_action collective_runner::begin(bool initiating) noexcept {
    in_pass_ = true;
    initiating_ = initiating;
    chained_ = 0;
    return next();
}

inline void collective_runner::apply(collective_run& r, transfer_status s) noexcept {
    // The first error decides.
    if (r.outcome_ != run_outcome::ok)
        return;
    if (s == transfer_status::wrong_size)
        r.outcome_ = run_outcome::mismatch;
    else if (s == transfer_status::failed)
        r.outcome_ = run_outcome::failed;
}

inline run_action collective_runner::end(collective_run& r, run_outcome o) noexcept {
    r.outcome_ = o;
    if (o != run_outcome::ok && !failed_) {
        // No partial result: the group fails first (and reports it here).
        r.phase_ = collective_run::phase::failing;
        return {&r, run_action_type::fail_group};
    }
    return complete(r);
}

inline run_action collective_runner::complete(collective_run& r) noexcept {
    head_ = r.next_;
    if (!head_)
        tail_ = nullptr;
    r.next_ = nullptr;
    r.phase_ = collective_run::phase::done;
    return {&r, run_action_type::complete, r.outcome_, initiating_};
}

} // namespace ucx::detail::coll
