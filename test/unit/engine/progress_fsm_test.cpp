// Unit tests of the progress engine's decisions (ucx::detail::progress_fsm and
// run_progress_pass) against a scripted fake worker: no UCX, no I/O.
#include "engine/progress_fsm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using ucx::progress_mode;
using ucx::detail::progress_config;
using ucx::detail::progress_fsm;
using ucx::detail::progress_step;
using ucx::detail::run_progress_pass;
using clock_type = progress_fsm::clock;
using namespace std::chrono_literals;

enum class kind { progress, queue_wait, arm, post_pass, backoff, park, relax };

struct call {
    kind k;
    std::size_t value = 0; // progress: events returned; arm: 1 for BUSY, 0 for OK; backoff: ns
    friend bool operator==(const call&, const call&) = default;
};

std::ostream& operator<<(std::ostream& os, const call& c) {
    switch (c.k) {
    case kind::progress:
        return os << "P(" << c.value << ")";
    case kind::queue_wait:
        return os << "QW";
    case kind::arm:
        return os << (c.value ? "ARM(BUSY)" : "ARM(OK)");
    case kind::post_pass:
        return os << "POST";
    case kind::backoff:
        return os << "BACKOFF(" << c.value << "ns)";
    case kind::park:
        return os << "PARK";
    case kind::relax:
        return os << "RELAX";
    }
    return os;
}

call P(std::size_t n) {
    return {kind::progress, n};
}
const call QW{kind::queue_wait, 0};
const call ARM_OK{kind::arm, 0};
const call ARM_BUSY{kind::arm, 1};
const call POST{kind::post_pass, 0};
const call PARK{kind::park, 0};
const call RELAX{kind::relax, 0};
call BACKOFF(std::chrono::nanoseconds d) {
    return {kind::backoff, static_cast<std::size_t>(d.count())};
}

std::string str(const std::vector<call>& calls) {
    std::string s;
    for (const auto& c : calls) {
        std::ostringstream os;
        os << c;
        s += os.str() + " ";
    }
    return s;
}

// A scripted fake worker: answers come from queues (then defaults), every call is recorded.
struct fake_backend {
    progress_fsm& fsm;
    std::deque<std::size_t> progress_script{};
    std::size_t progress_default = 0;
    std::deque<bool> busy_script{};
    bool busy_default = false;
    std::deque<bool> pending_script{};
    bool pending_default = true;
    // Per progress call: whether it submits work (calls fsm.request) while running,
    // as a completion handler delivered during ucp_worker_progress would.
    std::deque<bool> request_script{};
    // Per progress call: whether it delivered completions (their handlers ran).
    std::deque<bool> deliver_script{};
    // A submission started outside the executor waits in its queue.
    bool queued = false;
    std::function<void()> on_progress{};

    std::vector<call> calls{};
    std::vector<std::size_t> request_at{}; // index in `calls` of the progress that requested
    std::vector<bool> pending_answers{};
    bool wait_queued = false;
    bool stop = false;
    std::size_t pass_start = 0;
    bool double_wait = false;  // queue_wait while a wait was already queued
    bool wait_unarmed = false; // queue_wait not right after a successful arm
    // Per queue_wait: whether the fd joins the reactor (then the default).
    std::deque<bool> wait_script{};

    std::size_t progress() {
        std::size_t n = progress_default;
        if (!progress_script.empty()) {
            n = progress_script.front();
            progress_script.pop_front();
        }
        calls.push_back(P(n));
        bool req = false;
        if (!request_script.empty()) {
            req = request_script.front();
            request_script.pop_front();
        }
        if (!deliver_script.empty()) {
            if (deliver_script.front())
                fsm.on_delivered();
            deliver_script.pop_front();
        }
        if (req) {
            request_at.push_back(calls.size() - 1);
            EXPECT_FALSE(fsm.request(clock_type::now())) << "a request inside a pass is coalesced";
        }
        if (on_progress)
            on_progress();
        return n;
    }
    bool submissions_queued() const { return queued; }
    bool work_pending() {
        bool p = pending_default;
        if (!pending_script.empty()) {
            p = pending_script.front();
            pending_script.pop_front();
        }
        pending_answers.push_back(p);
        return p;
    }
    bool queue_wait() {
        if (wait_queued)
            double_wait = true;
        if (calls.empty() || !(calls.back() == ARM_OK))
            wait_unarmed = true;
        calls.push_back(QW);
        bool ok = true;
        if (!wait_script.empty()) {
            ok = wait_script.front();
            wait_script.pop_front();
        }
        wait_queued = ok;
        return ok;
    }
    bool arm() {
        bool b = busy_default;
        if (!busy_script.empty()) {
            b = busy_script.front();
            busy_script.pop_front();
        }
        calls.push_back(b ? ARM_BUSY : ARM_OK);
        return b;
    }
    void post_pass() { calls.push_back(POST); }
    void post_pass_after(std::chrono::nanoseconds d) { calls.push_back(BACKOFF(d)); }
    void park() { calls.push_back(PARK); }
    void relax() { calls.push_back(RELAX); }
    bool stopped() {
        // A pass that never ends would hang the test: fail it instead.
        if (calls.size() - pass_start > 100000) {
            ADD_FAILURE() << "the pass does not end (more than 100000 calls)";
            return true;
        }
        return stop;
    }

    // The queued wait fired (the fd became readable).
    void wake() {
        ASSERT_TRUE(wait_queued);
        wait_queued = false;
        fsm.on_wait_done();
    }
    // Runs one pass and returns the calls it made.
    std::vector<call> pass() {
        const std::size_t from = calls.size();
        pass_start = from;
        run_progress_pass(fsm, *this);
        return {calls.begin() + static_cast<std::ptrdiff_t>(from), calls.end()};
    }
};

progress_config cfg(progress_mode mode, unsigned max_steps = 64,
                    std::chrono::nanoseconds spin = 20us) {
    progress_config c;
    c.mode = mode;
    c.max_steps_per_pass = max_steps;
    c.spin = spin;
    // A spinning pass checks its (zero) slice after `max_steps` quiet calls:
    // it yields then, as with a count.
    c.spin_slice = 0ns;
    c.spin_clock_interval = max_steps;
    // Back-off has tests of its own, and so has the adaptive spin window.
    c.busy_backoff_after = 0;
    c.adaptive_spin = false;
    return c;
}

progress_config adaptive_cfg(std::chrono::nanoseconds spin = 16us) {
    progress_config c = cfg(progress_mode::hybrid, 64, spin);
    c.adaptive_spin = true;
    return c;
}

progress_config backoff_cfg(unsigned after) {
    progress_config c = cfg(progress_mode::event, 64);
    c.busy_backoff_after = after;
    c.backoff_min = 20us;
    c.backoff_max = 100us;
    return c;
}

std::size_t engine_calls(const std::vector<call>& calls) {
    std::size_t n = 0;
    for (const auto& c : calls)
        n += (c.k == kind::progress || c.k == kind::arm) ? 1 : 0;
    return n;
}

// ---------------------------------------------------------------- event mode

TEST(ProgressFsm, EventModeProgressesUntilQuietThenArmsThenWaits) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.progress_script = {3, 1, 0};
    EXPECT_TRUE(fsm.request(clock_type::now()));
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(3), P(1), P(0), ARM_OK, QW})) << str(calls);
    EXPECT_TRUE(fsm.armed());
    EXPECT_TRUE(fsm.wait_queued());
    EXPECT_FALSE(fsm.in_pass());
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_FALSE(b.wait_unarmed);
}

TEST(ProgressFsm, SecondPassWithWaitQueuedArmsWithoutQueueingAgain) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.pass();
    ASSERT_TRUE(fsm.wait_queued());
    EXPECT_TRUE(fsm.request(clock_type::now()));
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_OK})) << str(calls);
    EXPECT_FALSE(b.double_wait);
    EXPECT_TRUE(fsm.armed());
}

TEST(ProgressFsm, WakeUpQueuesTheWaitAgainAfterArming) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.pass();
    b.wake();
    EXPECT_FALSE(fsm.wait_queued());
    b.progress_script = {2, 0};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(2), P(0), ARM_OK, QW})) << str(calls);
    EXPECT_TRUE(fsm.wait_queued());
}

TEST(ProgressFsm, SpuriousWakeUpArmsAndSleepsAgain) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.pass();
    for (int i = 0; i < 5; ++i) {
        b.wake(); // nothing happened, but the fd said readable
        const auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_OK, QW})) << str(calls);
        EXPECT_TRUE(fsm.armed());
        EXPECT_TRUE(fsm.wait_queued());
    }
    EXPECT_FALSE(b.double_wait);
    EXPECT_FALSE(b.wait_unarmed);
}

TEST(ProgressFsm, StepByStepDecisions) {
    progress_fsm fsm(cfg(progress_mode::event));
    const auto t = clock_type::now();
    EXPECT_EQ(fsm.begin(t), progress_step::progress);
    EXPECT_TRUE(fsm.in_pass());
    EXPECT_EQ(fsm.on_progressed(1, true, t), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, t), progress_step::arm);
    // Busy: no wait yet, progress again.
    EXPECT_EQ(fsm.on_armed(true), progress_step::progress);
    EXPECT_FALSE(fsm.wait_queued());
    EXPECT_EQ(fsm.on_progressed(0, true, t), progress_step::arm);
    // Armed: the wait is queued only now, and the pass then sleeps.
    EXPECT_EQ(fsm.on_armed(false), progress_step::queue_wait);
    EXPECT_FALSE(fsm.wait_queued());
    EXPECT_FALSE(fsm.armed());
    EXPECT_EQ(fsm.on_wait_queued(), progress_step::sleep);
    EXPECT_TRUE(fsm.wait_queued());
    EXPECT_TRUE(fsm.armed());
    EXPECT_FALSE(fsm.in_pass());
    // A later pass with the wait still queued sleeps on it after arming.
    EXPECT_TRUE(fsm.request(t));
    EXPECT_EQ(fsm.begin(t), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, t), progress_step::arm);
    EXPECT_EQ(fsm.on_armed(false), progress_step::sleep);
}

TEST(ProgressFsm, AWaitThatCannotBeQueuedBacksOffInsteadOfSleeping) {
    // The fd could not join the reactor: nothing would wake the worker, so
    // it polls on the back-off timer, and tries to queue the wait again
    // when it next arms.
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.wait_script = {false, false};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW, BACKOFF(20us)}));
    EXPECT_FALSE(fsm.wait_queued());
    EXPECT_FALSE(fsm.armed());
    EXPECT_TRUE(fsm.pass_scheduled());
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW, BACKOFF(40us)}));
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW}));
    EXPECT_TRUE(fsm.wait_queued());
    EXPECT_TRUE(fsm.armed());
    EXPECT_FALSE(b.wait_unarmed);
}

TEST(ProgressFsm, StoppedBackendEndsThePassAtOnce) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.stop = true;
    EXPECT_TRUE(b.pass().empty());
    b.stop = false;
    b.on_progress = [&] { b.stop = true; };
    b.progress_script = {0};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0)}));
}

// ---------------------------------------------------------------- BUSY

TEST(ProgressFsm, BusyArmProgressesAgainUntilArmSucceeds) {
    progress_fsm fsm(cfg(progress_mode::event, 64));
    fake_backend b{fsm};
    b.busy_script = {true, true, true, true, true};
    const auto calls = b.pass();
    std::vector<call> expected{P(0)};
    for (int i = 0; i < 5; ++i) {
        expected.push_back(ARM_BUSY);
        expected.push_back(P(0));
    }
    expected.push_back(ARM_OK);
    expected.push_back(QW);
    EXPECT_EQ(calls, expected) << str(calls);
    EXPECT_TRUE(fsm.armed());
    // Exactly one queue_wait, after the arm that succeeded.
    EXPECT_FALSE(b.double_wait);
    EXPECT_FALSE(b.wait_unarmed);
}

TEST(ProgressFsm, BusyStreakLongerThanMaxStepsYields) {
    constexpr unsigned max_steps = 8;
    progress_fsm fsm(cfg(progress_mode::event, max_steps));
    fake_backend b{fsm};
    b.busy_default = true;
    const auto calls = b.pass();
    ASSERT_FALSE(calls.empty());
    EXPECT_EQ(calls.back(), POST) << str(calls);
    EXPECT_EQ(engine_calls(calls), max_steps) << str(calls);
    EXPECT_FALSE(fsm.armed());
    EXPECT_TRUE(fsm.pass_scheduled());
    // The yielded pass counts as scheduled: requests are coalesced into it.
    EXPECT_FALSE(fsm.request(clock_type::now()));

    // Later passes continue the same way until arm succeeds.
    for (int i = 0; i < 3; ++i) {
        const auto again = b.pass();
        EXPECT_EQ(again.back(), POST);
        EXPECT_LE(engine_calls(again), max_steps);
        // No wait while the arms are busy.
        EXPECT_EQ(std::count(again.begin(), again.end(), QW), 0);
    }
    b.busy_default = false;
    const auto last = b.pass();
    EXPECT_EQ(last, (std::vector<call>{P(0), ARM_OK, QW})) << str(last);
    EXPECT_TRUE(fsm.armed());
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_FALSE(b.double_wait);
}

// ---------------------------------------------------------------- back-off

TEST(ProgressFsm, BusyArmsWithNothingToDoBackOffInsteadOfYielding) {
    // UCX says busy while a send waits for room in a peer's queue, and
    // nothing wakes the worker when room appears: poll, but gently.
    progress_fsm fsm(backoff_cfg(3));
    fake_backend b{fsm};
    b.busy_default = true;
    const auto calls = b.pass();
    EXPECT_EQ(calls,
              (std::vector<call>{P(0), ARM_BUSY, P(0), ARM_BUSY, P(0), ARM_BUSY, BACKOFF(20us)}))
        << str(calls);
    EXPECT_FALSE(fsm.armed());
    // The timed pass counts as scheduled: requests are coalesced into it.
    EXPECT_TRUE(fsm.pass_scheduled());
    EXPECT_FALSE(fsm.request(clock_type::now()));
}

TEST(ProgressFsm, BackOffDoublesUpToItsMaximumAndStartsOverAfterEvents) {
    progress_fsm fsm(backoff_cfg(2));
    fake_backend b{fsm};
    b.busy_default = true;
    std::vector<call> ends;
    for (int i = 0; i < 5; ++i)
        ends.push_back(b.pass().back());
    EXPECT_EQ(ends, (std::vector<call>{BACKOFF(20us), BACKOFF(40us), BACKOFF(80us), BACKOFF(100us),
                                       BACKOFF(100us)}))
        << str(ends);
    // Progress finds events: the next back-off starts from the minimum.
    b.progress_script = {1};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(1), P(0), ARM_BUSY, P(0), ARM_BUSY, BACKOFF(20us)}))
        << str(calls);
}

TEST(ProgressFsm, BusyArmsBetweenEventsOrASuccessfulArmDoNotBackOff) {
    progress_fsm fsm(backoff_cfg(2));
    fake_backend b{fsm};
    // Busy, events, busy, events...: the streak starts over each time.
    b.progress_script = {0, 1, 0, 1, 0, 1, 0};
    b.busy_script = {true, true, true, false};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_BUSY, P(1), P(0), ARM_BUSY, P(1), P(0), ARM_BUSY,
                                        P(1), P(0), ARM_OK, QW}))
        << str(calls);
    EXPECT_TRUE(fsm.armed());
    // One busy arm, then a successful one (a sleep): no streak is left.
    b.busy_script = {true, false};
    b.wake();
    b.pass();
    b.busy_script = {true, true};
    b.wake();
    const auto last = b.pass();
    EXPECT_EQ(last.back(), BACKOFF(20us)) << str(last);
}

TEST(ProgressFsm, EndlessEventsYieldAfterMaxStepsProgressCalls) {
    for (unsigned max_steps : {1u, 2u, 7u, 64u}) {
        progress_fsm fsm(cfg(progress_mode::event, max_steps));
        fake_backend b{fsm};
        b.progress_default = 1;
        const auto calls = b.pass();
        std::vector<call> expected(max_steps, P(1));
        expected.push_back(POST);
        EXPECT_EQ(calls, expected) << "max_steps=" << max_steps << ": " << str(calls);
        EXPECT_TRUE(fsm.pass_scheduled());
        EXPECT_FALSE(fsm.wait_queued());
    }
}

// The documented bound is "most ucp_worker_progress/arm calls in one handler
// before yielding" = max_steps_per_pass. A pass whose progress calls all
// report events until the step budget is exactly used up, and whose last
// progress is quiet, still arms once more.
TEST(ProgressFsm, StepBudgetCountsTheArmCall) {
    constexpr unsigned max_steps = 4;
    progress_fsm fsm(cfg(progress_mode::event, max_steps));
    fake_backend b{fsm};
    b.progress_script = {1, 1, 1, 0};
    const auto calls = b.pass();
    EXPECT_LE(engine_calls(calls), max_steps) << str(calls);
}

// ---------------------------------------------------------------- requests

TEST(ProgressFsm, RequestAfterSleepSchedulesExactlyOnePass) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    EXPECT_TRUE(fsm.request(clock_type::now()));
    EXPECT_FALSE(fsm.request(clock_type::now())) << "a scheduled pass coalesces requests";
    b.pass();
    ASSERT_TRUE(fsm.armed());
    EXPECT_FALSE(fsm.pass_scheduled());

    // A submission after arm.
    EXPECT_TRUE(fsm.request(clock_type::now()));
    EXPECT_TRUE(fsm.pass_scheduled());
    for (int i = 0; i < 10; ++i)
        EXPECT_FALSE(fsm.request(clock_type::now()));
    EXPECT_EQ(fsm.begin(clock_type::now()), progress_step::progress);
    EXPECT_FALSE(fsm.pass_scheduled());
    // Inside the pass requests are remembered, not scheduled.
    EXPECT_FALSE(fsm.request(clock_type::now()));
    EXPECT_FALSE(fsm.pass_scheduled());
    // ... and force another progress although the progress was quiet.
    EXPECT_EQ(fsm.on_progressed(0, true, clock_type::now()), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, clock_type::now()), progress_step::arm);
    EXPECT_EQ(fsm.on_armed(false), progress_step::sleep);
    EXPECT_TRUE(fsm.request(clock_type::now()));
}

TEST(ProgressFsm, RequestDuringProgressForcesAnotherProgressBeforeArm) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.progress_script = {0, 0};
    b.request_script = {true, false};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), P(0), ARM_OK, QW})) << str(calls);
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_TRUE(fsm.armed());
}

TEST(ProgressFsm, RequestDuringProgressAfterBusyArm) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.busy_script = {true};
    b.request_script = {false, true, true, false};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_BUSY, P(0), P(0), P(0), ARM_OK, QW}))
        << str(calls);
}

TEST(ProgressFsm, RequestDuringProgressWithoutWorkStillProgressesFirst) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.pending_default = false;
    b.request_script = {true, false};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), P(0), ARM_OK, QW})) << str(calls);
}

// Event mode keeps the wait queued and the worker armed with nothing in flight:
// peers need this worker's progress (connection set-up, their sends) at any time.
TEST(ProgressFsm, NoWorkPendingStillArmsInEventMode) {
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.pending_default = false;
    EXPECT_TRUE(fsm.request(clock_type::now()));
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW}));
    EXPECT_TRUE(fsm.wait_queued());
    EXPECT_TRUE(fsm.armed());
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_TRUE(fsm.request(clock_type::now()));
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK}));
    EXPECT_FALSE(b.double_wait);
}

// ---------------------------------------------------------------- poll mode

TEST(ProgressFsm, PollModeSpinsThenYieldsWhileWorkPendingAndNeverArms) {
    // Quiet progress calls spin within the pass until the spin slice is
    // spent (checked every 4 quiet calls here, a zero slice), then the pass
    // yields (one trip through the io_context per slice).
    progress_fsm fsm(cfg(progress_mode::poll, 4));
    fake_backend b{fsm};
    for (int i = 0; i < 20; ++i) {
        const auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(0), P(0), P(0), P(0), POST})) << str(calls);
        EXPECT_TRUE(fsm.pass_scheduled());
    }
    // Calls that found events count against the step budget, not the slice.
    b.progress_script = {5, 2, 0};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(5), P(2), P(0), P(0), P(0), P(0), POST}));
    EXPECT_FALSE(fsm.wait_queued());
}

TEST(ProgressFsm, SpinningDoesNotUseTheStepBudget) {
    // The step budget bounds calls that deliver (handlers run there); quiet
    // spinning is bounded by the slice alone.
    progress_config c = cfg(progress_mode::poll, 4);
    c.spin_slice = std::chrono::hours(1);
    c.spin_clock_interval = 1000;
    progress_fsm fsm(c);
    fake_backend b{fsm};
    b.progress_script = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(1), P(1),
                                        P(1), P(1), POST}))
        << str(calls);
}

TEST(ProgressFsm, PollModeSpinSliceIsMeasuredFromThePassStart) {
    progress_config c = cfg(progress_mode::poll, 64);
    c.spin_slice = 100us;
    c.spin_clock_interval = 4;
    progress_fsm fsm(c);
    const clock_type::time_point t0 = clock_type::time_point{} + 1s;
    const clock_type::time_point no_time{};
    EXPECT_EQ(fsm.begin(t0), progress_step::progress);
    // The time matters only on every 4th quiet call (the others get none).
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 3; ++i)
            EXPECT_EQ(fsm.on_progressed(0, true, no_time), progress_step::progress);
        EXPECT_EQ(fsm.on_progressed(0, true, t0 + (round + 1) * 30us), progress_step::progress)
            << "within the slice at " << (round + 1) * 30 << " us";
    }
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(fsm.on_progressed(0, true, no_time), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, t0 + 100us), progress_step::yield);
    EXPECT_TRUE(fsm.pass_scheduled());
    // The next pass has a slice of its own.
    EXPECT_EQ(fsm.begin(t0 + 101us), progress_step::progress);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(fsm.on_progressed(0, true, no_time), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, t0 + 150us), progress_step::progress);
}

TEST(ProgressFsm, NowReadsTheClockOnlyWhenASliceCheckIsDue) {
    progress_config c = cfg(progress_mode::poll, 64);
    c.spin_clock_interval = 3;
    c.spin_slice = std::chrono::hours(1);
    progress_fsm fsm(c);
    fsm.begin(clock_type::now());
    EXPECT_EQ(fsm.now(), clock_type::time_point{});
    fsm.on_progressed(0, true, clock_type::time_point{});
    EXPECT_EQ(fsm.now(), clock_type::time_point{});
    fsm.on_progressed(0, true, clock_type::time_point{});
    EXPECT_NE(fsm.now(), clock_type::time_point{}) << "the third quiet call checks the slice";
    // Hybrid mode needs the time at every step.
    progress_fsm hybrid(cfg(progress_mode::hybrid, 64));
    EXPECT_NE(hybrid.now(), clock_type::time_point{});
}

TEST(ProgressFsm, PollModeSleepsArmedWithoutWork) {
    progress_fsm fsm(cfg(progress_mode::poll, 4));
    fake_backend b{fsm};
    b.pending_default = false;
    b.progress_script = {1, 0};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(1), P(0), ARM_OK, QW})) << str(calls);
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_TRUE(fsm.armed());
    // Work submitted later: poll mode spins again, without arming.
    b.pending_default = true;
    EXPECT_TRUE(fsm.request(clock_type::now()));
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), P(0), P(0), P(0), POST}));
    EXPECT_FALSE(fsm.armed());
}

// ------------------------------------------- shared spinning (the spin group)

TEST(ProgressFsm, SharedPollModeParksAfterOneQuietCallInsteadOfSpinning) {
    // With other polling workers on its io_context, a worker gets one quiet
    // progress call per turn of the group: its pass parks, and the group runs
    // it again after the others had theirs.
    progress_fsm fsm(cfg(progress_mode::poll, 4));
    fsm.set_shared_spin(true);
    fake_backend b{fsm};
    for (int i = 0; i < 5; ++i) {
        const auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(0), PARK})) << str(calls);
        EXPECT_TRUE(fsm.pass_scheduled()) << "a parked pass counts as scheduled";
        EXPECT_FALSE(fsm.request(clock_type::now())) << "a submission needs no pass of its own";
    }
    // Events are progressed until quiet, within the step budget, then it parks.
    b.progress_script = {3, 1, 0};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(3), P(1), P(0), PARK}));
    b.progress_script = {1, 1, 1, 1};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(1), P(1), P(1), P(1), POST}))
        << "a steady stream of events still yields on the step budget";
    // Nothing in flight: poll mode arms and sleeps, parked in no group.
    b.pending_default = false;
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_OK, QW})) << str(calls);
    EXPECT_FALSE(fsm.pass_scheduled());
    EXPECT_TRUE(fsm.armed());
}

TEST(ProgressFsm, SharedHybridParksWithinTheSpinWindowAndKeepsIt) {
    progress_fsm fsm(cfg(progress_mode::hybrid, 64, 100us));
    fsm.set_shared_spin(true);
    const clock_type::time_point t0 = clock_type::time_point{} + 1s;
    EXPECT_EQ(fsm.begin(t0), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, false, t0 + 1us), progress_step::park);
    // The group's turns continue the pass: the window runs from the last
    // activity, not from each turn.
    for (auto t : {20us, 50us, 99us}) {
        EXPECT_EQ(fsm.begin(t0 + t), progress_step::progress);
        EXPECT_EQ(fsm.on_progressed(0, false, t0 + t), progress_step::park);
    }
    EXPECT_EQ(fsm.begin(t0 + 100us), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, false, t0 + 100us), progress_step::arm);
    EXPECT_EQ(fsm.on_armed(false), progress_step::queue_wait);
    EXPECT_EQ(fsm.on_wait_queued(), progress_step::sleep);
    EXPECT_FALSE(fsm.pass_scheduled());
}

TEST(ProgressFsm, AWorkerLeftAloneSpinsInItsOwnHandlerAgain) {
    progress_fsm fsm(cfg(progress_mode::poll, 4));
    fake_backend b{fsm};
    fsm.set_shared_spin(true);
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), PARK}));
    // The other member left: the parked pass continues as a spinning one.
    fsm.set_shared_spin(false);
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), P(0), P(0), P(0), POST}));
}

// ------------------------------------------------- handing the thread back

progress_config long_slice(progress_mode mode) {
    // Spinning would go on for an hour: whatever ends these passes is the
    // rule under test.
    progress_config c = cfg(mode, 64, std::chrono::hours(1));
    c.spin_slice = std::chrono::hours(1);
    c.spin_clock_interval = 4;
    return c;
}

TEST(ProgressFsm, PollPassWhoseHandlersStartedNothingYieldsAtItsNextQuietCall) {
    // The handler that ran set a flag for a run_one() loop, or posted its
    // continuation elsewhere: the pass gives the thread back instead of
    // spinning for the operations still in flight.
    progress_fsm fsm(long_slice(progress_mode::poll));
    fake_backend b{fsm};
    b.progress_script = {1};
    b.deliver_script = {true};
    auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(1), P(0), POST})) << str(calls);
    EXPECT_TRUE(fsm.pass_scheduled());
    // The next pass delivered nothing yet: it spins (here until the stop).
    b.progress_script = {0, 0, 0, 0, 0, 0, 0, 1};
    b.deliver_script = {false, false, false, false, false, false, false, true};
    calls = b.pass();
    EXPECT_EQ(calls,
              (std::vector<call>{P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(1), P(0), POST}))
        << str(calls);
}

TEST(ProgressFsm, PollPassWhoseHandlersStartedWorkKeepsSpinningForIt) {
    // A ping-pong: the receive's handler sends the next message and posts
    // the next receive in the pass; the pass keeps spinning for them, even
    // after a later handler (the send's) started nothing.
    progress_config c = cfg(progress_mode::poll, 64);
    c.spin_clock_interval = 4; // zero slice: yields after 4 quiet calls
    progress_fsm fsm(c);
    fake_backend b{fsm};
    b.progress_script = {1, 1};
    b.deliver_script = {true, true};
    b.request_script = {true, false};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(1), P(1), P(0), P(0), P(0), P(0), POST})) << str(calls);
}

TEST(ProgressFsm, HybridPassWhoseHandlersStartedNothingYieldsWithinItsSpinWindow) {
    progress_fsm fsm(long_slice(progress_mode::hybrid));
    fake_backend b{fsm};
    b.pending_default = false;
    b.progress_script = {2};
    b.deliver_script = {true};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(2), P(0), POST})) << str(calls);
    EXPECT_FALSE(fsm.wait_queued()) << "still spinning: the next pass continues the window";
}

TEST(ProgressFsm, SpinningPassYieldsToASubmissionQueuedFromOutside) {
    // An operation started from outside the executor (a run_one() loop, or
    // another thread) waits in the executor's queue behind the pass: a
    // spinning pass lets it in at once instead of at the end of its slice.
    for (auto mode : {progress_mode::poll, progress_mode::hybrid}) {
        progress_fsm fsm(long_slice(mode));
        fake_backend b{fsm};
        b.queued = true;
        auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(0), POST})) << str(calls);
        // Events first: they are progressed before the pass yields.
        b.progress_script = {3, 1};
        calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(3), P(1), P(0), POST})) << str(calls);
    }
}

TEST(ProgressFsm, EventPassArmsWithASubmissionQueued) {
    // The queued submission requests its own pass when it runs.
    progress_fsm fsm(cfg(progress_mode::event));
    fake_backend b{fsm};
    b.queued = true;
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW}));
}

TEST(ProgressFsm, APassThatDeliveredArmsWhereItWouldNotSpin) {
    // Event mode; poll mode with only the library's standing waits left
    // (not `work_pending`).
    for (const bool poll : {false, true}) {
        progress_fsm fsm(poll ? long_slice(progress_mode::poll) : cfg(progress_mode::event));
        fake_backend b{fsm};
        b.pending_default = !poll;
        b.progress_script = {1};
        b.deliver_script = {true};
        const auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(1), P(0), ARM_OK, QW})) << str(calls);
    }
}

// ------------------------------------------------------------ yield_cpu

TEST(ProgressFsm, SpinningWithYieldCpuGivesTheProcessorAwayBetweenQuietCalls) {
    for (auto mode : {progress_mode::poll, progress_mode::hybrid}) {
        progress_config c = cfg(mode, 64, std::chrono::hours(1));
        c.spin_clock_interval = 3; // zero slice: yields after 3 quiet calls
        c.yield_cpu = true;
        progress_fsm fsm(c);
        fake_backend b{fsm};
        b.progress_script = {2};
        const auto calls = b.pass();
        // Events are progressed at once; each quiet call that spins on is
        // followed by a sched_yield; the slice still ends the pass.
        EXPECT_EQ(calls, (std::vector<call>{P(2), P(0), RELAX, P(0), RELAX, P(0), POST}))
            << str(calls);
    }
}

TEST(ProgressFsm, YieldCpuLeavesSleepingAndSharingAlone) {
    progress_config c = cfg(progress_mode::event);
    c.yield_cpu = true;
    progress_fsm fsm(c);
    fake_backend b{fsm};
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), ARM_OK, QW}));
    // Poll mode with nothing awaited arms and sleeps.
    progress_config p = cfg(progress_mode::poll);
    p.yield_cpu = true;
    progress_fsm poll(p);
    fake_backend pb{poll};
    pb.pending_default = false;
    EXPECT_EQ(pb.pass(), (std::vector<call>{P(0), ARM_OK, QW}));
    // A worker of a spin group parks: the group's turn moves to its next
    // member, which is what the processor would be yielded to.
    progress_fsm shared(p);
    shared.set_shared_spin(true);
    fake_backend sb{shared};
    EXPECT_EQ(sb.pass(), (std::vector<call>{P(0), PARK}));
}

// ---------------------------------------------------------------- hybrid mode

TEST(ProgressFsm, HybridSpinsWithinSpinTime) {
    progress_fsm fsm(cfg(progress_mode::hybrid, 3, std::chrono::hours(1)));
    fake_backend b{fsm};
    for (int i = 0; i < 10; ++i) {
        const auto calls = b.pass();
        EXPECT_EQ(calls, (std::vector<call>{P(0), P(0), P(0), POST})) << str(calls);
    }
    // The spin window does not depend on operations in flight (peers may send).
    b.pending_default = false;
    EXPECT_EQ(b.pass(), (std::vector<call>{P(0), P(0), P(0), POST}));
    EXPECT_FALSE(fsm.wait_queued());
}

TEST(ProgressFsm, HybridWithZeroSpinArms) {
    progress_fsm fsm(cfg(progress_mode::hybrid, 64, 0ns));
    fake_backend b{fsm};
    const auto calls = b.pass();
    EXPECT_EQ(calls, (std::vector<call>{P(0), ARM_OK, QW})) << str(calls);
    EXPECT_TRUE(fsm.armed());
}

TEST(ProgressFsm, HybridSpinWindowWithExplicitTimes) {
    progress_fsm fsm(cfg(progress_mode::hybrid, 2, 100us));
    const clock_type::time_point t0{};
    const auto at = [&](auto d) { return t0 + 1s + d; };

    EXPECT_EQ(fsm.begin(at(0us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(50us)), progress_step::progress)
        << "spinning within the pass while the budget lasts";
    EXPECT_EQ(fsm.on_progressed(0, true, at(55us)), progress_step::yield);
    // A continued (yielded) pass keeps the spin window: it is measured from the
    // last activity, not from the start of each pass.
    EXPECT_EQ(fsm.begin(at(60us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(98us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(99us)), progress_step::yield);
    EXPECT_EQ(fsm.begin(at(100us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(100us)), progress_step::arm);
    EXPECT_EQ(fsm.on_armed(false), progress_step::queue_wait);
    EXPECT_EQ(fsm.on_wait_queued(), progress_step::sleep);

    // Activity (events) restarts the window.
    EXPECT_TRUE(fsm.request(at(1000us)));
    EXPECT_EQ(fsm.begin(at(1000us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(1, true, at(1080us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(1170us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(1175us)), progress_step::yield);
    EXPECT_EQ(fsm.begin(at(1175us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(1181us)), progress_step::arm)
        << "wait still queued: straight to arm";
    EXPECT_EQ(fsm.on_armed(false), progress_step::sleep);

    // A request (submission) is activity too.
    EXPECT_TRUE(fsm.request(at(5000us)));
    EXPECT_EQ(fsm.begin(at(5000us)), progress_step::progress);
    EXPECT_FALSE(fsm.request(at(5090us)));
    EXPECT_EQ(fsm.on_progressed(0, true, at(5090us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(5150us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(5151us)), progress_step::yield);
    EXPECT_EQ(fsm.begin(at(5151us)), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, at(5191us)), progress_step::arm);
}

// ------------------------------------------------------- adaptive spin window

// Drives one hybrid pass with explicit times: activity (events) at
// `active`, then quiet progress calls until the engine sleeps, each
// `step` later. Returns the quiet calls that spun (returned `progress`).
int pass_until_sleep(progress_fsm& fsm, clock_type::time_point begin_at,
                     std::chrono::nanoseconds step, bool events_first = true) {
    fsm.on_wait_done();
    EXPECT_EQ(fsm.begin(begin_at), progress_step::progress);
    auto t = begin_at;
    if (events_first) {
        EXPECT_EQ(fsm.on_progressed(1, true, t), progress_step::progress);
    }
    int spun = 0;
    for (int i = 0; i < 1000; ++i) {
        t += step;
        const progress_step s = fsm.on_progressed(0, true, t);
        if (s == progress_step::progress) {
            ++spun;
            continue;
        }
        EXPECT_EQ(s, progress_step::arm);
        EXPECT_EQ(fsm.on_armed(false), progress_step::queue_wait);
        EXPECT_EQ(fsm.on_wait_queued(), progress_step::sleep);
        return spun;
    }
    ADD_FAILURE() << "the pass did not sleep";
    return spun;
}

// An adaptive fsm (window 16 µs) after `passes` passes of traffic far
// sparser than its window, one per millisecond from t0 + 1 ms, with a
// progress call every `step`.
struct sparse_fsm {
    sparse_fsm(int passes, std::chrono::nanoseconds step) {
        for (int i = 1; i <= passes; ++i)
            pass_until_sleep(fsm, t0 + i * 1ms, step);
    }
    progress_fsm fsm{adaptive_cfg(16us)};
    const clock_type::time_point t0 = clock_type::time_point{} + 1s;
};

TEST(ProgressFsm, AdaptiveWindowHalvesOnEverySpinThatFindsNothingThenCloses) {
    progress_fsm fsm(adaptive_cfg(16us));
    const clock_type::time_point t0 = clock_type::time_point{} + 1s;
    EXPECT_EQ(fsm.spin_window(), 16us);
    // Activity every millisecond (far sparser than the window): each spin
    // runs out and halves the window, and at a sixteenth it closes.
    const std::chrono::nanoseconds expected[] = {8us, 4us, 2us, 1us, 0us, 0us};
    int i = 0;
    for (auto w : expected) {
        // A progress call every 250 ns: a window of 1 µs still spins.
        const int spun = pass_until_sleep(fsm, t0 + (i + 1) * 1ms, 250ns);
        EXPECT_EQ(fsm.spin_window(), w) << "after pass " << i;
        if (i == 5) {
            EXPECT_EQ(spun, 0) << "a closed window does not spin: event mode";
        }
        ++i;
    }
}

TEST(ProgressFsm, AdaptiveWindowDoublesWhenASpinFindsEvents) {
    // Narrowed down to 2 µs by sparse traffic.
    sparse_fsm sparse(3, 1us);
    progress_fsm& fsm = sparse.fsm;
    ASSERT_EQ(fsm.spin_window(), 2us);
    // A reply that comes within the window while spinning: it paid off.
    const auto t = sparse.t0 + 10ms;
    fsm.on_wait_done();
    EXPECT_EQ(fsm.begin(t), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(1, true, t), progress_step::progress); // the request goes out
    EXPECT_EQ(fsm.on_progressed(0, true, t + 1us), progress_step::progress) << "spinning";
    EXPECT_EQ(fsm.on_progressed(1, true, t + 1500ns), progress_step::progress) << "the reply";
    EXPECT_EQ(fsm.spin_window(), 4us);
    EXPECT_EQ(fsm.on_progressed(0, true, t + 2us), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(1, true, t + 3us), progress_step::progress);
    EXPECT_EQ(fsm.spin_window(), 8us);
    EXPECT_EQ(fsm.on_progressed(0, true, t + 4us), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(1, true, t + 5us), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(0, true, t + 6us), progress_step::progress);
    EXPECT_EQ(fsm.on_progressed(1, true, t + 7us), progress_step::progress);
    EXPECT_EQ(fsm.spin_window(), 16us) << "never past spin";
    // Events found without spinning first (back to back) are no evidence.
    EXPECT_EQ(fsm.on_progressed(1, true, t + 8us), progress_step::progress);
    EXPECT_EQ(fsm.spin_window(), 16us);
}

TEST(ProgressFsm, AdaptiveWindowReopensWhenWakeUpsComeSoonAfterSleeping) {
    sparse_fsm sparse(5, 250ns);
    progress_fsm& fsm = sparse.fsm;
    ASSERT_EQ(fsm.spin_window(), 0us);
    // Closed, the engine sleeps right after each activity; a peer whose
    // answers wake it within 16 µs of sleeping reopens the window, one
    // doubling per short sleep. With no spin the sleep starts at the quiet
    // call that follows the activity (here 1 µs after it).
    auto t = sparse.t0 + 10ms;
    pass_until_sleep(fsm, t, 1us); // slept at t + 1 µs
    const std::chrono::nanoseconds expected[] = {1us, 2us, 4us, 8us, 16us, 16us};
    for (auto w : expected) {
        // Woken 5 µs after falling asleep; the reply's pass spins until
        // its window runs out, which halves it again only if it found nothing.
        t += 6us;
        fsm.on_wait_done();
        EXPECT_EQ(fsm.begin(t), progress_step::progress);
        EXPECT_EQ(fsm.spin_window(), w);
        // The next answer arrives while spinning (a fast peer), or, with the
        // window at its first sixteenth, is found by the first quiet call.
        EXPECT_EQ(fsm.on_progressed(1, true, t), progress_step::progress);
        // Sleep at the next quiet call past the window.
        const auto sleep_at = t + fsm.spin_window() + 1ns;
        const progress_step s = fsm.on_progressed(0, true, sleep_at);
        EXPECT_EQ(s, progress_step::arm);
        EXPECT_EQ(fsm.on_armed(false), progress_step::queue_wait);
        EXPECT_EQ(fsm.on_wait_queued(), progress_step::sleep);
        t = sleep_at;
    }
    // A wake-up long after the sleep leaves the window alone.
    fsm.on_wait_done();
    EXPECT_EQ(fsm.begin(t + 1ms), progress_step::progress);
    EXPECT_EQ(fsm.spin_window(), 16us);
}

TEST(ProgressFsm, WithoutAdaptationTheWindowStaysAtSpin) {
    progress_fsm fsm(cfg(progress_mode::hybrid, 64, 16us));
    const clock_type::time_point t0 = clock_type::time_point{} + 1s;
    for (int i = 1; i <= 8; ++i)
        EXPECT_EQ(pass_until_sleep(fsm, t0 + i * 1ms, 1us), 15) << "pass " << i;
    EXPECT_EQ(fsm.spin_window(), 16us);
}

TEST(ProgressFsmProperty, AdaptiveWindowStaysClosedOrBetweenASixteenthAndSpin) {
    std::mt19937 rng(7);
    progress_fsm fsm(adaptive_cfg(16us));
    auto t = clock_type::time_point{} + 1s;
    for (int pass = 0; pass < 2000; ++pass) {
        t += std::chrono::nanoseconds(rng() % 40000);
        pass_until_sleep(fsm, t, std::chrono::nanoseconds(200 + rng() % 3000), rng() % 2 == 0);
        const auto w = fsm.spin_window();
        EXPECT_TRUE(w == 0ns || (w >= 1us && w <= 16us)) << w.count();
        t += 20us;
    }
}

// ---------------------------------------------------------------- property test

struct outcome_counts {
    std::size_t sleep = 0, yield = 0, poll_sleep_checked = 0;
};

void run_random_passes(progress_mode mode, std::uint64_t seed, int passes, outcome_counts& counts) {
    std::mt19937_64 rng(seed);
    auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
    const unsigned max_steps = std::uniform_int_distribution<unsigned>(1, 16)(rng);
    progress_config config = cfg(mode, max_steps, 0ns);
    // Spinning ends at the first quiet call (a zero slice, checked every
    // call), so the bound on engine calls per pass below holds for poll mode.
    config.spin_clock_interval = 1;
    progress_fsm fsm(config);
    fake_backend b{fsm};
    // Random answers for every call.
    const double p_quiet = std::uniform_real_distribution<double>(0.3, 0.9)(rng);
    const double p_busy = std::uniform_real_distribution<double>(0.0, 0.8)(rng);
    const double p_pending = std::uniform_real_distribution<double>(0.3, 1.0)(rng);
    const double p_request = std::uniform_real_distribution<double>(0.0, 0.4)(rng);

    std::optional<progress_step> last;
    for (int pass = 0; pass < passes; ++pass) {
        SCOPED_TRACE("seed " + std::to_string(seed) + " pass " + std::to_string(pass) +
                     " max_steps " + std::to_string(max_steps));
        // How the pass starts: a yielded pass runs as posted; otherwise a wake-up
        // of the queued wait, or a submission.
        if (last == progress_step::yield) {
            EXPECT_TRUE(fsm.pass_scheduled());
            EXPECT_FALSE(fsm.request(clock_type::now()));
        } else if (last == progress_step::sleep && chance(0.5)) {
            b.wake();
        } else if (last.has_value()) {
            EXPECT_TRUE(fsm.request(clock_type::now())) << "a pass must be scheduled";
            EXPECT_FALSE(fsm.request(clock_type::now())) << "coalesced";
        }

        b.progress_script.clear();
        b.busy_script.clear();
        b.pending_script.clear();
        b.request_script.clear();
        for (unsigned i = 0; i < 2 * max_steps + 4; ++i) {
            b.progress_script.push_back(
                chance(p_quiet) ? 0 : std::uniform_int_distribution<std::size_t>(1, 4)(rng));
            b.busy_script.push_back(chance(p_busy));
            b.pending_script.push_back(chance(p_pending));
            b.request_script.push_back(chance(p_request));
        }
        b.request_at.clear();
        b.pending_answers.clear();
        const auto calls = b.pass();
        const std::string trace = str(calls);

        ASSERT_FALSE(calls.empty()) << trace;
        EXPECT_EQ(calls.front().k, kind::progress) << trace;
        EXPECT_FALSE(fsm.in_pass());
        EXPECT_FALSE(b.wait_unarmed) << "a wait queued without a successful arm: " << trace;
        EXPECT_FALSE(b.double_wait) << "two waits queued: " << trace;

        // Index of the last progress call.
        std::size_t last_progress = 0;
        for (std::size_t i = 0; i < calls.size(); ++i)
            if (calls[i].k == kind::progress)
                last_progress = i;
        const std::size_t base = b.calls.size() - calls.size();

        // (b) bounded work per handler, the arm included.
        EXPECT_LE(engine_calls(calls), max_steps) << trace;
        std::size_t progress_calls = 0;
        for (const auto& c : calls)
            progress_calls += c.k == kind::progress ? 1 : 0;
        EXPECT_LE(progress_calls, max_steps) << trace;

        // Every BUSY arm is followed by a progress call or the end of the pass (yield).
        for (std::size_t i = 0; i < calls.size(); ++i) {
            if (calls[i] == ARM_BUSY) {
                ASSERT_LT(i + 1, calls.size()) << trace;
                EXPECT_TRUE(calls[i + 1].k == kind::progress || calls[i + 1] == POST) << trace;
            }
            // queue_wait always directly follows a successful arm, and ends the pass.
            if (calls[i] == QW) {
                ASSERT_GE(i, 1u) << trace;
                EXPECT_EQ(calls[i - 1], ARM_OK) << trace;
                EXPECT_EQ(i + 1, calls.size()) << trace;
            }
        }

        const call end = calls.back();
        if (end == ARM_OK || end == QW) {
            last = progress_step::sleep;
            ++counts.sleep;
            // (a) asleep: a quiet progress, then arm OK, then the wait queued
            // unless one still was; no request injected during or after the
            // last progress call.
            const std::size_t arm_at = calls.size() - (end == QW ? 2 : 1);
            ASSERT_GE(arm_at, 1u) << trace;
            EXPECT_EQ(calls[arm_at], ARM_OK) << trace;
            EXPECT_EQ(calls[arm_at - 1], P(0)) << trace;
            EXPECT_EQ(calls[last_progress], P(0)) << trace;
            for (std::size_t at : b.request_at)
                EXPECT_LT(at, base + last_progress) << "slept with a request pending: " << trace;
            EXPECT_TRUE(b.wait_queued);
            EXPECT_TRUE(fsm.wait_queued());
            EXPECT_TRUE(fsm.armed());
            EXPECT_FALSE(fsm.pass_scheduled());
            // (c) poll mode sleeps only when work_pending() said false.
            ASSERT_FALSE(b.pending_answers.empty());
            if (mode == progress_mode::poll) {
                EXPECT_FALSE(b.pending_answers.back())
                    << "poll mode armed with work pending: " << trace;
                ++counts.poll_sleep_checked;
            }
        } else if (end == POST) {
            last = progress_step::yield;
            ++counts.yield;
            EXPECT_TRUE(fsm.pass_scheduled());
            EXPECT_FALSE(fsm.armed());
        } else {
            ADD_FAILURE() << "pass ended without sleep or yield: " << trace;
            return;
        }
        if (::testing::Test::HasFailure())
            return;
    }
    return;
}

TEST(ProgressFsmProperty, EventModeNeverSleepsWithWorkPendingUnarmed) {
    outcome_counts total;
    for (std::uint64_t seed = 1; seed <= 40 && !HasFailure(); ++seed)
        run_random_passes(progress_mode::event, seed, 500, total);
    // The random scripts must reach both outcomes often.
    EXPECT_GT(total.sleep, 1000u);
    EXPECT_GT(total.yield, 1000u);
}

TEST(ProgressFsmProperty, PollModeArmsOnlyWithoutWorkPending) {
    outcome_counts total;
    for (std::uint64_t seed = 100; seed < 120 && !HasFailure(); ++seed)
        run_random_passes(progress_mode::poll, seed, 500, total);
    EXPECT_GT(total.sleep, 100u);
    EXPECT_EQ(total.poll_sleep_checked, total.sleep);
    EXPECT_GT(total.yield, 1000u);
}

TEST(ProgressFsmProperty, HybridZeroSpinBehavesLikeEvent) {
    outcome_counts total;
    for (std::uint64_t seed = 200; seed < 220 && !HasFailure(); ++seed)
        run_random_passes(progress_mode::hybrid, seed, 500, total);
    EXPECT_GT(total.sleep, 500u);
}

} // namespace
