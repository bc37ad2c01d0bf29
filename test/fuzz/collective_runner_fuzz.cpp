// Fuzz target: a group's collective runner (collective_runner) driven by any
// sequence of events, with real plans of any rank and size, any timeout and
// chain length, transfers that complete at once or later with any status,
// and handlers that start the next collective or fail the group. Checked
// after every action and event, against a model of what the group executes:
// - collectives complete once each, in the order they were submitted, and
//   only with no transfer of theirs in flight (UCX has their buffers);
// - only the running collective is prepared (once, by its first round)
//   and transfers; a
//   deferral is followed by its end, never by another action on it;
// - the group fails once at most, and a collective that saw a failed or
//   wrong-sized transfer never ends ok; once failed, what starts afterwards
//   ends failed;
// - the watchdog is cancelled only while armed, and not left armed by a
//   pass after the failure; a completion is posted only in a submit's pass;
// - at rest (no pass in progress) the queue is never stalled: a ready
//   collective at its head is running, and one waiting has transfers out.
#include "fuzz.hpp"

#include "group/collective_runner.hpp"

#include <array>
#include <deque>
#include <memory>
#include <vector>

namespace ucx::fuzz {

namespace {

using namespace detail::coll;
using runner_type = detail::coll::collective_runner;
using clock = runner_type::clock;

clock::time_point fuzz_now_value{};
clock::time_point fuzz_now() {
    return fuzz_now_value;
}

struct node : collective_run {
    plan p;
    std::vector<std::byte> in, out, scratch;
    int id = 0;
    bool submitted = false;
    bool prepared = false;
    bool completed = false;
    bool deferred = false;
    bool saw_error = false;
    int in_flight = 0;
};

struct harness {
    runner_type runner;
    std::vector<std::unique_ptr<node>> nodes;
    std::size_t submitted = 0;
    int next_complete = 0;
    int fail_groups = 0;
    bool reported_failed = false;
    bool in_submit = false;
    /// Pending transfers: (node, count); deferrals to come.
    std::deque<node*> pending;
    std::deque<node*> deferrals;
    reader* r = nullptr;

    explicit harness(const runner_type::params& p) : runner(p) {}

    void check_rest() {
        UCX_ASIO_FUZZ_CHECK(!runner.in_pass());
        if (runner.failed()) {
            UCX_ASIO_FUZZ_CHECK(!runner.timer_armed());
        }
        auto* head = static_cast<node*>(runner.front());
        if (!head)
            return;
        switch (head->where()) {
        case collective_run::phase::queued:
            UCX_ASIO_FUZZ_CHECK(!head->ready());
            break;
        case collective_run::phase::waiting:
            UCX_ASIO_FUZZ_CHECK(head->outstanding() > 0 && head->in_flight == head->outstanding());
            break;
        case collective_run::phase::deferred:
            UCX_ASIO_FUZZ_CHECK(head->deferred);
            break;
        default:
            UCX_ASIO_FUZZ_CHECK(false);
        }
    }

    transfer_status status() {
        switch (r->byte() % 5) {
        case 0:
        case 1:
            return transfer_status::pending;
        case 2:
            return transfer_status::done;
        case 3:
            return transfer_status::wrong_size;
        default:
            return transfer_status::failed;
        }
    }

    void execute(run_action a) {
        for (;;) {
            auto* n = static_cast<node*>(a.run);
            switch (a.type) {
            case run_action_type::none:
                return;
            case run_action_type::start_round: {
                UCX_ASIO_FUZZ_CHECK(n && n == runner.front() && n->submitted && !n->deferred);
                // Prepared once, by the first.
                UCX_ASIO_FUZZ_CHECK(a.first != n->prepared);
                UCX_ASIO_FUZZ_CHECK(n->in_flight == 0);
                UCX_ASIO_FUZZ_CHECK(n->round() < n->p.rounds.size() ||
                                    (a.first && n->p.rounds.empty()));
                if (a.first) {
                    n->prepared = true;
                    n->scratch.resize(n->p.scratch_bytes);
                    n->base = {n->in.data(), n->out.data(), n->scratch.data()};
                }
                int done_now = 0;
                auto first = transfer_status::done;
                for (std::size_t i = 0; i < n->transfers().size(); ++i) {
                    const transfer_status s = status();
                    if (s == transfer_status::pending) {
                        ++n->in_flight;
                        pending.push_back(n);
                        continue;
                    }
                    ++done_now;
                    if (s != transfer_status::done) {
                        n->saw_error = true;
                        if (first == transfer_status::done)
                            first = s;
                    }
                }
                a = runner.round_started(done_now, first);
                break;
            }
            case run_action_type::arm_timer:
                UCX_ASIO_FUZZ_CHECK(runner.timeout().count() > 0 || runner.timer_armed());
                a = runner.resume();
                break;
            case run_action_type::cancel_timer:
                UCX_ASIO_FUZZ_CHECK(runner.failed());
                a = runner.resume();
                break;
            case run_action_type::fail_group:
                UCX_ASIO_FUZZ_CHECK(!reported_failed && ++fail_groups == 1);
                reported_failed = true;
                UCX_ASIO_FUZZ_CHECK(runner.fail().type == run_action_type::none);
                a = runner.resume();
                break;
            case run_action_type::defer:
                UCX_ASIO_FUZZ_CHECK(n && n == runner.front() && !n->deferred && n->in_flight == 0);
                n->deferred = true;
                deferrals.push_back(n);
                a = runner.resume();
                break;
            case run_action_type::complete:
                UCX_ASIO_FUZZ_CHECK(n && !n->completed && n->submitted && n->in_flight == 0);
                UCX_ASIO_FUZZ_CHECK(n->id == next_complete);
                UCX_ASIO_FUZZ_CHECK(!n->saw_error || a.outcome != run_outcome::ok);
                UCX_ASIO_FUZZ_CHECK(!a.post || in_submit);
                UCX_ASIO_FUZZ_CHECK(n != runner.front());
                if (!n->prepared) {
                    // Ended without starting: the group failed, or its input.
                    UCX_ASIO_FUZZ_CHECK(a.outcome == run_outcome::failed ||
                                        a.outcome == run_outcome::local_failure);
                }
                n->completed = true;
                ++next_complete;
                // The handler may start the next one, or fail the group.
                switch (r->byte() % 4) {
                case 0:
                    if (submitted < nodes.size()) {
                        UCX_ASIO_FUZZ_CHECK(submit_next().type == run_action_type::none);
                    }
                    break;
                case 1:
                    reported_failed = true;
                    UCX_ASIO_FUZZ_CHECK(runner.fail().type == run_action_type::none);
                    break;
                default:
                    break;
                }
                a = runner.resume();
                break;
            }
        }
    }

    run_action submit_next() {
        node& n = *nodes[submitted++];
        n.submitted = true;
        return runner.submit(n);
    }
};

} // namespace

void collective_runner(input data) {
    reader r(data);
    const int size = 1 + r.byte() % 6;
    const int rank = r.byte() % size;
    runner_type::params p;
    p.timeout = std::chrono::milliseconds(r.byte() % 3 * 100);
    p.now = &fuzz_now;
    p.max_chained = 1 + r.byte() % 4;
    fuzz_now_value = clock::time_point{} + std::chrono::hours(1);
    harness h(p);
    h.r = &r;
    const int count = 1 + r.byte() % 6;
    for (int i = 0; i < count; ++i) {
        auto n = std::make_unique<node>();
        n->id = i;
        n->type = datatype::uint32;
        n->op = reduce_op::sum;
        const std::size_t elements = r.byte() % 4 == 0 ? small_message / 4 + 8 : 1 + r.byte() % 8;
        switch (r.byte() % 3) {
        case 0:
            n->p = allreduce(rank, size, elements, 4);
            break;
        case 1:
            n->p = broadcast(rank, size, r.byte() % size, elements * 4);
            break;
        default:
            n->p = barrier(rank, size);
            break;
        }
        n->steps = &n->p;
        n->in.resize(elements * 4);
        n->out.resize(std::max(n->p.out_bytes, elements * 4));
        if (r.flag())
            n->set_not_ready();
        h.nodes.push_back(std::move(n));
    }
    for (int steps = 0; steps < 400 && !r.empty(); ++steps) {
        switch (r.byte() % 8) {
        case 0:
            if (h.submitted < h.nodes.size()) {
                h.in_submit = true;
                h.execute(h.submit_next());
                h.in_submit = false;
            }
            break;
        case 1: {
            // Input copied (maybe before its submit).
            node& n = *h.nodes[r.byte() % h.nodes.size()];
            if (!n.ready() && !n.completed)
                h.execute(h.runner.input_ready(n, r.byte() % 4 != 0));
            break;
        }
        case 2:
        case 3: {
            if (h.pending.empty())
                break;
            const std::size_t i = r.byte() % h.pending.size();
            node* n = h.pending[i];
            h.pending.erase(h.pending.begin() + static_cast<std::ptrdiff_t>(i));
            --n->in_flight;
            const auto s = h.status();
            const auto st = s == transfer_status::pending ? transfer_status::done : s;
            if (st != transfer_status::done)
                n->saw_error = true;
            h.execute(h.runner.transfer_done(*n, st));
            break;
        }
        case 4:
            if (!h.deferrals.empty()) {
                node* n = h.deferrals.front();
                h.deferrals.pop_front();
                h.execute(h.runner.deferred_end(*n, r.byte() % 8 == 0));
            }
            break;
        case 5:
            fuzz_now_value += std::chrono::milliseconds(r.byte());
            if (h.runner.timer_armed() && fuzz_now_value >= h.runner.timer_expiry())
                h.execute(h.runner.timer_expired(fuzz_now_value));
            break;
        case 6:
            if (!h.reported_failed) {
                h.reported_failed = true;
                h.execute(h.runner.fail());
            }
            break;
        default:
            h.runner.set_timeout(std::chrono::milliseconds(r.byte() % 3 * 50));
            break;
        }
        h.check_rest();
    }
    // The end: everything in flight completes, the group fails; every
    // submitted collective then ends.
    if (!h.reported_failed) {
        h.reported_failed = true;
        h.execute(h.runner.fail());
    }
    for (int guard = 0; guard < 1000 && (!h.pending.empty() || !h.deferrals.empty()); ++guard) {
        if (!h.pending.empty()) {
            node* n = h.pending.front();
            h.pending.pop_front();
            --n->in_flight;
            h.execute(h.runner.transfer_done(*n, transfer_status::failed));
        } else {
            node* n = h.deferrals.front();
            h.deferrals.pop_front();
            h.execute(h.runner.deferred_end(*n, false));
        }
        h.check_rest();
    }
    for (auto& n : h.nodes)
        if (n->submitted && !n->ready() && !n->completed)
            h.execute(h.runner.input_ready(*n, true));
    h.check_rest();
    for (const auto& n : h.nodes)
        UCX_ASIO_FUZZ_CHECK(n->completed == n->submitted);
    UCX_ASIO_FUZZ_CHECK(h.runner.empty());
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(collective_runner)
