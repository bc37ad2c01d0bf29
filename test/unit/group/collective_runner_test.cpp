// The group's collective runner, free of I/O: step by step (the actions of
// each event, as text), then several ranks driven against each other in
// memory with real plans, transfers completing at once or later in a random
// order, failures and timeouts. No UCX.
#include "group/collective_runner.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>

namespace coll = ucx::detail::coll;

// Named: the sans-io tests are compiled as one source.
namespace runner_test {

using coll::run_action;
using coll::run_action_type;
using coll::run_outcome;
using coll::transfer_status;
using phase = coll::collective_run::phase;
using namespace std::chrono_literals;

/// The runners' clock: tests move it.
std::chrono::milliseconds fake_ms{0};
coll::collective_runner::clock::time_point fake_now() {
    return coll::collective_runner::clock::time_point{} + 1h + fake_ms;
}
coll::collective_runner::params params(std::chrono::milliseconds timeout = 0ms,
                                       int max_chained = 16) {
    coll::collective_runner::params p;
    p.timeout = timeout;
    p.now = &fake_now;
    p.max_chained = max_chained;
    return p;
}

const char* name(run_outcome o) {
    switch (o) {
    case run_outcome::ok:
        return "ok";
    case run_outcome::mismatch:
        return "mismatch";
    case run_outcome::failed:
        return "failed";
    case run_outcome::local_failure:
        return "local";
    }
    return "?";
}

/// A collective with buffers of its own.
struct node : coll::collective_run {
    int id = 0;
    coll::plan p;
    std::vector<std::byte> in, out, scratch;
    node(int i, coll::plan pl, std::size_t in_bytes) : id(i), p(std::move(pl)) {
        steps = &p;
        type = ucx::datatype::uint32;
        op = ucx::reduce_op::sum;
        in.resize(in_bytes);
        out.resize(std::max(p.out_bytes, in_bytes));
    }
};

/// Executes a runner's actions as the group would, and words them.
struct driver {
    explicit driver(coll::collective_runner::params p = params()) : runner(p) {}
    coll::collective_runner runner;
    /// How each transfer goes (pending unless told).
    std::function<transfer_status(const coll::transfer&)> transfers = [](const coll::transfer&) {
        return transfer_status::pending;
    };
    /// What the handler of a completed collective does.
    std::function<void(node&, run_outcome)> on_complete;
    std::vector<std::string> log;
    /// The ids of completed collectives, in order.
    std::vector<int> completed;
    int failures = 0;
    /// What failing the group does besides (closing its connections).
    std::function<void()> on_fail;
    /// Where a deferred end goes (the worker's next pass).
    std::function<void(node&)> on_defer;

    /// Submits each of `runs` in order.
    void submit(std::initializer_list<node*> runs) {
        for (node* n : runs)
            run(runner.submit(*n));
    }

    /// The two transfers of `n`'s round in flight complete: what the last did.
    std::string both_done(node& n) {
        run(runner.transfer_done(n, transfer_status::done));
        return run(runner.transfer_done(n, transfer_status::done));
    }

    std::string run(run_action a) {
        log.clear();
        execute(a);
        std::string s;
        for (const auto& l : log)
            s += (s.empty() ? "" : "; ") + l;
        return s;
    }
    void execute(run_action a) {
        for (;;) {
            if (a.type == run_action_type::none)
                return;
            // (Every action but cancel_timer names its collective.)
            static node no_run(-1, coll::barrier(0, 1), 0);
            node& n = a.run ? *static_cast<node*>(a.run) : no_run;
            switch (a.type) {
            case run_action_type::none:
                return;
            case run_action_type::start_round: {
                if (a.first) {
                    n.scratch.resize(n.p.scratch_bytes);
                    n.base = {n.in.data(), n.out.data(), n.scratch.data()};
                    for (const auto& c : n.p.prologue)
                        if (c.from.length > 0)
                            std::memmove(n.at(c.to), n.at(c.from), c.from.length);
                    log.push_back("prepare #" + std::to_string(n.id));
                }
                int done_now = 0;
                auto first = transfer_status::done;
                for (const auto& t : n.transfers()) {
                    const auto st = transfers(t);
                    log.push_back(std::string(t.send ? "send " : "recv ") + std::to_string(t.peer) +
                                  (st == transfer_status::pending ? "" : " now"));
                    if (st == transfer_status::pending)
                        continue;
                    ++done_now;
                    if (st != transfer_status::done && first == transfer_status::done)
                        first = st;
                }
                a = runner.round_started(done_now, first);
                break;
            }
            case run_action_type::arm_timer:
                log.push_back("arm +" + std::to_string((runner.timer_expiry() - fake_now()) / 1ms));
                a = runner.resume();
                break;
            case run_action_type::cancel_timer:
                log.push_back("cancel");
                a = runner.resume();
                break;
            case run_action_type::fail_group:
                log.push_back(a.timeout ? "fail timeout #" + std::to_string(n.id) : "fail");
                ++failures;
                if (on_fail)
                    on_fail();
                // The group reports its failure to the runner at once.
                EXPECT_EQ(runner.fail().type, run_action_type::none);
                a = runner.resume();
                break;
            case run_action_type::defer:
                log.push_back("defer #" + std::to_string(n.id));
                if (on_defer)
                    on_defer(n);
                a = runner.resume();
                break;
            case run_action_type::complete:
                log.push_back("complete #" + std::to_string(n.id) + " " + name(a.outcome) +
                              (a.post ? " posted" : ""));
                completed.push_back(n.id);
                if (on_complete)
                    on_complete(n, a.outcome);
                a = runner.resume();
                break;
            }
        }
    }
};

/// A two-rank exchange: one round, a send and a receive of 4 bytes.
coll::plan exchange() {
    return coll::allreduce(0, 2, 1, 4);
}

std::unique_ptr<node> make(int id, coll::plan p = exchange(), std::size_t bytes = 4) {
    return std::make_unique<node>(id, std::move(p), bytes);
}

// --- step by step ---

TEST(CollectiveRunner, ACollectiveStartsItsRoundAndWaitsForItsTransfers) {
    driver d;
    auto a = make(0);
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; send 1; recv 1");
    EXPECT_TRUE(d.runner.busy());
    EXPECT_EQ(a->where(), phase::waiting);
    EXPECT_EQ(a->outstanding(), 2);
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::done)), "");
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::done)), "complete #0 ok");
    EXPECT_TRUE(d.runner.empty());
    EXPECT_FALSE(d.runner.busy());
    EXPECT_FALSE(d.runner.in_pass());
}

TEST(CollectiveRunner, TheRoundsCombineInOrder) {
    driver d;
    auto a = make(0);
    const std::uint32_t mine = 5, theirs = 7;
    std::memcpy(a->in.data(), &mine, 4);
    d.run(d.runner.submit(*a));
    // The peer's contribution lands where the plan receives it.
    const auto& rd = a->p.rounds[0];
    for (const auto& t : rd.transfers)
        if (!t.send)
            std::memcpy(a->at(t.data), &theirs, 4);
    EXPECT_EQ(d.both_done(*a), "complete #0 ok");
    std::uint32_t sum = 0;
    std::memcpy(&sum, a->out.data(), 4);
    EXPECT_EQ(sum, 12u);
}

TEST(CollectiveRunner, TheInitiatingCallDefersAnEndInsideItsStart) {
    driver d;
    d.transfers = [](const coll::transfer&) { return transfer_status::done; };
    auto a = make(0);
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; send 1 now; recv 1 now; defer #0");
    EXPECT_EQ(a->where(), phase::deferred);
    EXPECT_TRUE(d.runner.busy());
    EXPECT_EQ(d.run(d.runner.deferred_end(*a, false)), "complete #0 ok");
}

TEST(CollectiveRunner, AGroupOfOneDefersToo) {
    driver d;
    auto a = make(0, coll::allreduce(0, 1, 1, 4));
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; defer #0");
    EXPECT_EQ(d.run(d.runner.deferred_end(*a, false)), "complete #0 ok");
}

TEST(CollectiveRunner, ADeferralTheWorkerDroppedFailsTheGroup) {
    driver d;
    auto a = make(0, coll::barrier(0, 1));
    d.run(d.runner.submit(*a));
    EXPECT_EQ(d.run(d.runner.deferred_end(*a, true)), "fail; complete #0 failed");
}

TEST(CollectiveRunner, CollectivesRunOneAtATimeInOrder) {
    driver d;
    auto a = make(0), b = make(1), c = make(2);
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; send 1; recv 1");
    EXPECT_EQ(d.run(d.runner.submit(*b)), "");
    EXPECT_EQ(d.run(d.runner.submit(*c)), "");
    EXPECT_EQ(b->where(), phase::queued);
    EXPECT_EQ(d.both_done(*a), "complete #0 ok; prepare #1; send 1; recv 1");
    EXPECT_EQ(d.both_done(*b), "complete #1 ok; prepare #2; send 1; recv 1");
}

TEST(CollectiveRunner, AHandlerThatStartsTheNextOneIsTakenUpByThePass) {
    driver d;
    auto a = make(0), b = make(1);
    d.on_complete = [&](node& n, run_outcome) {
        if (n.id == 0) {
            EXPECT_EQ(d.runner.submit(*b).type, run_action_type::none);
        }
    };
    d.run(d.runner.submit(*a));
    EXPECT_EQ(d.both_done(*a), "complete #0 ok; prepare #1; send 1; recv 1");
}

TEST(CollectiveRunner, AChainOfEndsInsideTheirStartIsCutEveryFewCollectives) {
    driver d(params(0ms, 3));
    d.transfers = [](const coll::transfer&) { return transfer_status::done; };
    std::vector<std::unique_ptr<node>> runs;
    for (int i = 0; i < 6; ++i)
        runs.push_back(make(i));
    d.on_complete = [&](node& n, run_outcome) {
        if (n.id + 1 < 6) {
            EXPECT_EQ(d.runner.submit(*runs[n.id + 1]).type, run_action_type::none);
        }
    };
    d.run(d.runner.submit(*runs[0]));
    // The first ends from the worker's pass; its handler starts the next,
    // and three end in that pass before the fourth is deferred.
    EXPECT_EQ(d.run(d.runner.deferred_end(*runs[0], false)),
              "complete #0 ok; prepare #1; send 1 now; recv 1 now; complete #1 ok; prepare #2; "
              "send 1 now; recv 1 now; complete #2 ok; prepare #3; send 1 now; recv 1 now; "
              "complete #3 ok; prepare #4; send 1 now; recv 1 now; defer #4");
}

TEST(CollectiveRunner, AWrongSizeFailsTheGroupThenEnds) {
    driver d;
    auto a = make(0), b = make(1);
    d.submit({a.get(), b.get()});
    d.run(d.runner.transfer_done(*a, transfer_status::wrong_size));
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::done)),
              "fail; complete #0 mismatch; complete #1 failed");
    EXPECT_TRUE(d.runner.failed());
    EXPECT_EQ(d.failures, 1);
}

TEST(CollectiveRunner, AWrongSizeAtOnceInTheInitiatingCallIsPosted) {
    driver d;
    d.transfers = [](const coll::transfer& t) {
        return t.send ? transfer_status::done : transfer_status::wrong_size;
    };
    auto a = make(0);
    EXPECT_EQ(d.run(d.runner.submit(*a)),
              "prepare #0; send 1 now; recv 1 now; fail; complete #0 mismatch posted");
}

TEST(CollectiveRunner, TheFirstErrorDecides) {
    driver d;
    auto a = make(0);
    d.run(d.runner.submit(*a));
    d.run(d.runner.transfer_done(*a, transfer_status::failed));
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::wrong_size)),
              "fail; complete #0 failed");
}

TEST(CollectiveRunner, AFailureWaitsForTheTransfersInFlight) {
    driver d(params(100ms));
    fake_ms = 0ms;
    auto a = make(0), b = make(1);
    d.submit({a.get(), b.get()});
    // UCX still holds the buffers: nothing ends before they are back.
    EXPECT_EQ(d.run(d.runner.fail()), "cancel");
    EXPECT_EQ(a->where(), phase::waiting);
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::failed)), "");
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::failed)),
              "complete #0 failed; complete #1 failed");
    EXPECT_EQ(d.failures, 0); // the group had failed
}

TEST(CollectiveRunner, ACollectiveSubmittedAfterTheFailureEndsWithoutStarting) {
    driver d;
    auto a = make(0);
    d.run(d.runner.fail());
    EXPECT_EQ(d.run(d.runner.submit(*a)), "complete #0 failed posted");
}

TEST(CollectiveRunner, TheWatchdogIsArmedOnceForBackToBackCollectives) {
    fake_ms = 0ms;
    driver d(params(100ms));
    auto a = make(0), b = make(1);
    EXPECT_EQ(d.run(d.runner.submit(*a)), "arm +100; prepare #0; send 1; recv 1");
    d.run(d.runner.submit(*b));
    fake_ms = 30ms;
    d.run(d.runner.transfer_done(*a, transfer_status::done));
    // #1's deadline (130) is after the armed expiry (100): no arming.
    EXPECT_EQ(d.run(d.runner.transfer_done(*a, transfer_status::done)),
              "complete #0 ok; prepare #1; send 1; recv 1");
    EXPECT_EQ(b->deadline, fake_now() + 100ms);
    // At 100 the watchdog finds #1 within its deadline: armed for it.
    fake_ms = 100ms;
    EXPECT_EQ(d.run(d.runner.timer_expired(fake_now())), "arm +30");
    fake_ms = 130ms;
    EXPECT_EQ(d.run(d.runner.timer_expired(fake_now())), "fail timeout #1");
    EXPECT_EQ(d.failures, 1);
    EXPECT_EQ(b->where(), phase::waiting);
    d.run(d.runner.transfer_done(*b, transfer_status::failed));
    EXPECT_EQ(d.run(d.runner.transfer_done(*b, transfer_status::failed)), "complete #1 failed");
}

TEST(CollectiveRunner, AShorterTimeoutArmsTheWatchdogEarlier) {
    fake_ms = 0ms;
    driver d(params(1000ms));
    auto a = make(0), b = make(1);
    d.submit({a.get(), b.get()});
    d.runner.set_timeout(10ms);
    EXPECT_EQ(d.both_done(*a), "complete #0 ok; arm +10; prepare #1; send 1; recv 1");
}

TEST(CollectiveRunner, ACollectiveStartedWithoutATimeoutHasNoDeadline) {
    fake_ms = 0ms;
    driver d(params(100ms));
    auto a = make(0), b = make(1);
    d.submit({a.get(), b.get()});
    d.runner.set_timeout(0ms);
    d.both_done(*a);
    // The watchdog armed for #0 expires while #1 runs: #1 has no deadline.
    fake_ms = 500ms;
    EXPECT_EQ(d.run(d.runner.timer_expired(fake_now())), "");
    EXPECT_FALSE(d.runner.failed());
}

TEST(CollectiveRunner, AnIdleWatchdogExpiryDoesNothing) {
    fake_ms = 0ms;
    driver d(params(100ms));
    auto a = make(0);
    d.run(d.runner.submit(*a));
    d.both_done(*a);
    fake_ms = 100ms;
    EXPECT_EQ(d.run(d.runner.timer_expired(fake_now())), "");
    EXPECT_FALSE(d.runner.timer_armed());
}

TEST(CollectiveRunner, ANotReadyHeadHoldsTheQueue) {
    driver d;
    auto a = make(0), b = make(1);
    a->set_not_ready();
    EXPECT_EQ(d.run(d.runner.submit(*a)), "");
    EXPECT_EQ(d.run(d.runner.submit(*b)), "");
    EXPECT_FALSE(d.runner.busy());
    EXPECT_EQ(d.run(d.runner.input_ready(*a, true)), "prepare #0; send 1; recv 1");
}

TEST(CollectiveRunner, InputReadyBeforeTheSubmitOnlyMarksIt) {
    driver d;
    auto a = make(0);
    a->set_not_ready();
    EXPECT_EQ(d.run(d.runner.input_ready(*a, true)), "");
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; send 1; recv 1");
}

TEST(CollectiveRunner, InputReadyOfOneBehindTheHeadWaits) {
    driver d;
    auto a = make(0), b = make(1);
    d.run(d.runner.submit(*a));
    b->set_not_ready();
    d.run(d.runner.submit(*b));
    EXPECT_EQ(d.run(d.runner.input_ready(*b, true)), "");
    EXPECT_EQ(d.both_done(*a), "complete #0 ok; prepare #1; send 1; recv 1");
}

TEST(CollectiveRunner, InputThatCannotBeReadFailsTheGroup) {
    driver d;
    auto a = make(0), b = make(1);
    a->set_not_ready();
    d.submit({a.get(), b.get()});
    EXPECT_EQ(d.run(d.runner.input_ready(*a, false)),
              "fail; complete #0 local; complete #1 failed");
}

TEST(CollectiveRunner, AFailureRaisedByAHandlerIsTakenUpByThePass) {
    driver d;
    auto a = make(0), b = make(1);
    d.on_complete = [&](node& n, run_outcome) {
        if (n.id == 0) {
            EXPECT_EQ(d.runner.fail().type, run_action_type::none);
        }
    };
    d.submit({a.get(), b.get()});
    EXPECT_EQ(d.both_done(*a), "complete #0 ok; complete #1 failed");
}

TEST(CollectiveRunner, QueuedCollectivesCanBeTakenForDestruction) {
    driver d;
    auto a = make(0), b = make(1);
    a->set_not_ready();
    d.submit({a.get(), b.get()});
    EXPECT_EQ(d.runner.take_front(), a.get());
    EXPECT_EQ(d.runner.take_front(), b.get());
    EXPECT_EQ(d.runner.take_front(), nullptr);
    EXPECT_TRUE(d.runner.empty());
}

TEST(CollectiveRunner, ANodeIsReusedAfterReset) {
    driver d;
    auto a = make(0);
    d.run(d.runner.submit(*a));
    d.both_done(*a);
    a->reset_run();
    EXPECT_EQ(a->where(), phase::fresh);
    EXPECT_EQ(a->round(), 0u);
    EXPECT_EQ(d.run(d.runner.submit(*a)), "prepare #0; send 1; recv 1");
}

// --- several ranks against each other ---

/// One message on the wire: from, to, collective, and its bytes.
struct network {
    struct rank;
    struct pending_recv {
        node* run;
        std::byte* data;
        std::size_t length;
    };
    struct event {
        int rank;
        std::function<run_action()> fire;
    };
    struct rank {
        explicit rank(coll::collective_runner::params p) : d(p) {}
        driver d;
        std::vector<std::unique_ptr<node>> runs;
        /// Unmatched messages from each peer, per collective id.
        std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> inbox;
        std::map<std::pair<int, int>, std::deque<pending_recv>> posted;
        std::vector<std::pair<int, run_outcome>> outcomes;
        bool failed = false;
    };

    std::vector<std::unique_ptr<rank>> ranks;
    std::deque<event> events;
    std::mt19937 rng;
    /// A rank that fails (abruptly) once this many events have run (-1: none).
    int fail_rank = -1;
    int fail_after = -1;
    bool killed = false;

    network(int n, unsigned seed, std::chrono::milliseconds timeout = 0ms) : rng(seed) {
        for (int i = 0; i < n; ++i) {
            ranks.push_back(
                std::make_unique<rank>(params(timeout, 1 + static_cast<int>(seed % 5))));
            wire(i);
        }
    }

    bool coin() { return rng() % 2 == 0; }

    void wire(int me) {
        rank& r = *ranks[me];
        r.d.transfers = [this, me](const coll::transfer& t) { return start(me, t); };
        r.d.on_complete = [this, me](node& n, run_outcome o) {
            ranks[me]->outcomes.emplace_back(n.id, o);
        };
        r.d.on_fail = [this, me] { close(me); };
        r.d.on_defer = [this, me](node& n) {
            node* run = &n;
            events.push_back(
                {me, [this, me, run] { return ranks[me]->d.runner.deferred_end(*run, false); }});
        };
    }

    /// Rank `me`'s group failed: its connections close, so its receives in
    /// flight fail and nothing more goes out or comes in.
    void close(int me) {
        rank& r = *ranks[me];
        r.failed = true;
        for (auto& [key, q] : r.posted) {
            for (const pending_recv& p : q)
                events.push_back({me, [this, me, run = p.run] {
                                      return ranks[me]->d.runner.transfer_done(
                                          *run, transfer_status::failed);
                                  }});
            q.clear();
        }
    }

    node* running(int me) { return static_cast<node*>(ranks[me]->d.runner.front()); }

    /// Delivers a message from `from` to `to` for collective `id`.
    void deliver(int from, int to, int id, std::vector<std::byte> bytes) {
        rank& r = *ranks[to];
        if (r.failed)
            return;
        auto& q = r.posted[{from, id}];
        if (!q.empty()) {
            pending_recv p = q.front();
            q.pop_front();
            const auto s =
                bytes.size() == p.length ? transfer_status::done : transfer_status::wrong_size;
            std::memcpy(p.data, bytes.data(), std::min(bytes.size(), p.length));
            events.push_back(
                {to, [this, to, p, s] { return ranks[to]->d.runner.transfer_done(*p.run, s); }});
            return;
        }
        r.inbox[{from, id}].push_back(std::move(bytes));
    }

    transfer_status start(int me, const coll::transfer& t) {
        rank& r = *ranks[me];
        node& n = *running(me);
        std::byte* data = n.at(t.data);
        if (r.failed || ranks[t.peer]->failed)
            return transfer_status::failed;
        if (t.send) {
            deliver(me, t.peer, n.id, std::vector<std::byte>(data, data + t.data.length));
            if (coin())
                return transfer_status::done;
            node* run = &n;
            events.push_back({me, [this, me, run] {
                                  return ranks[me]->d.runner.transfer_done(*run,
                                                                           transfer_status::done);
                              }});
            return transfer_status::pending;
        }
        auto& in = r.inbox[{t.peer, n.id}];
        if (!in.empty() && coin()) {
            auto bytes = std::move(in.front());
            in.pop_front();
            std::memcpy(data, bytes.data(), std::min(bytes.size(), t.data.length));
            return bytes.size() == t.data.length ? transfer_status::done
                                                 : transfer_status::wrong_size;
        }
        if (!in.empty()) {
            // Here, but it completes later.
            auto bytes = std::move(in.front());
            in.pop_front();
            std::memcpy(data, bytes.data(), std::min(bytes.size(), t.data.length));
            const auto s =
                bytes.size() == t.data.length ? transfer_status::done : transfer_status::wrong_size;
            node* run = &n;
            events.push_back(
                {me, [this, me, run, s] { return ranks[me]->d.runner.transfer_done(*run, s); }});
            return transfer_status::pending;
        }
        r.posted[{t.peer, n.id}].push_back({&n, data, t.data.length});
        return transfer_status::pending;
    }

    /// Rank `me` dies: its connections close, and each survivor gets the
    /// abort notice (its group fails, its connections close).
    void kill(int me) {
        killed = true;
        close(me);
        for (int i = 0; i < static_cast<int>(ranks.size()); ++i)
            events.push_back({i, [this, i] {
                                  close(i);
                                  return ranks[i]->d.runner.fail();
                              }});
    }

    /// Runs events in a random order until none is left.
    void run() {
        for (int count = 0; !events.empty(); ++count) {
            ASSERT_LT(count, 1000000);
            if (count == fail_after && fail_rank >= 0)
                kill(fail_rank);
            std::uniform_int_distribution<std::size_t> pick(0, events.size() - 1);
            auto it = events.begin() + static_cast<std::ptrdiff_t>(pick(rng));
            event e = std::move(*it);
            events.erase(it);
            ranks[e.rank]->d.execute(e.fire());
        }
    }

    /// Every rank submits the same collectives; rank i's allreduce inputs
    /// are `i * 1000 + k` (uint32), their sums known.
    void submit_allreduces(int count, std::size_t elements) {
        const int n = static_cast<int>(ranks.size());
        for (int i = 0; i < n; ++i) {
            rank& r = *ranks[i];
            for (int c = 0; c < count; ++c) {
                auto x =
                    std::make_unique<node>(c, coll::allreduce(i, n, elements, 4), elements * 4);
                for (std::size_t k = 0; k < elements; ++k) {
                    const std::uint32_t v = static_cast<std::uint32_t>(i * 1000 + k + c);
                    std::memcpy(x->in.data() + 4 * k, &v, 4);
                }
                r.runs.push_back(std::move(x));
            }
        }
        // Submitted by each rank in order, interleaved with the others.
        std::vector<std::size_t> next(ranks.size(), 0);
        for (int left = n * count; left > 0;) {
            const int i = static_cast<int>(rng() % ranks.size());
            if (next[i] == ranks[i]->runs.size())
                continue;
            rank& r = *ranks[i];
            r.d.execute(r.d.runner.submit(*r.runs[next[i]++]));
            --left;
        }
    }

    void expect_sums(std::size_t elements) {
        const int n = static_cast<int>(ranks.size());
        for (int i = 0; i < n; ++i) {
            const rank& r = *ranks[i];
            ASSERT_EQ(r.outcomes.size(), r.runs.size()) << "rank " << i;
            for (std::size_t c = 0; c < r.runs.size(); ++c) {
                EXPECT_EQ(r.outcomes[c].first, static_cast<int>(c)) << "rank " << i;
                EXPECT_EQ(r.outcomes[c].second, run_outcome::ok) << "rank " << i;
                for (std::size_t k = 0; k < elements; ++k) {
                    std::uint32_t want = 0, got = 0;
                    for (int j = 0; j < n; ++j)
                        want += static_cast<std::uint32_t>(j * 1000 + k + c);
                    std::memcpy(&got, r.runs[c]->out.data() + 4 * k, 4);
                    ASSERT_EQ(got, want) << "rank " << i << " collective " << c << " at " << k;
                }
            }
        }
    }
};

TEST(CollectiveRunnerNetwork, EveryRankGetsEverySumInOrder) {
    for (unsigned seed = 0; seed < 60; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        // Recursive doubling (small) and the ring (large).
        const std::size_t elements = seed % 3 == 0 ? coll::small_message / 4 + 64 : 1 + seed % 9;
        network net(n, seed);
        net.submit_allreduces(4, elements);
        net.run();
        net.expect_sums(elements);
        for (const auto& r : net.ranks) {
            EXPECT_TRUE(r->d.runner.empty());
            EXPECT_FALSE(r->d.runner.in_pass());
        }
        if (HasFailure()) {
            ADD_FAILURE() << "seed " << seed;
            return;
        }
    }
}

TEST(CollectiveRunnerNetwork, ARankThatDiesEndsEveryCollectiveEverywhere) {
    int kills = 0;
    for (unsigned seed = 0; seed < 60; ++seed) {
        const int n = 2 + static_cast<int>(seed % 6);
        network net(n, seed, 1000ms);
        net.fail_rank = static_cast<int>(seed % static_cast<unsigned>(n));
        net.fail_after = static_cast<int>(seed * 7 % 40);
        net.submit_allreduces(5, 3);
        net.run();
        for (int i = 0; i < n; ++i) {
            const auto& r = *net.ranks[i];
            if (i == net.fail_rank)
                continue;
            // Every collective ended, in order; once one failed the rest did.
            ASSERT_EQ(r.outcomes.size(), r.runs.size()) << "seed " << seed << " rank " << i;
            bool failed = false;
            for (std::size_t c = 0; c < r.outcomes.size(); ++c) {
                EXPECT_EQ(r.outcomes[c].first, static_cast<int>(c));
                if (failed) {
                    EXPECT_EQ(r.outcomes[c].second, run_outcome::failed) << "seed " << seed;
                }
                failed = failed || r.outcomes[c].second != run_outcome::ok;
            }
            EXPECT_TRUE(r.d.runner.empty());
            // (Without a failure the watchdog stays armed: its expiry finds
            // nothing running.)
            if (net.killed) {
                EXPECT_TRUE(r.d.runner.failed());
                EXPECT_FALSE(r.d.runner.timer_armed()) << "seed " << seed;
            }
        }
        kills += net.killed;
        if (HasFailure()) {
            ADD_FAILURE() << "seed " << seed;
            return;
        }
    }
    // Most runs die in the middle (the others end before the kill).
    EXPECT_GT(kills, 40);
}

TEST(CollectiveRunnerNetwork, AMessageOfTheWrongSizeIsAMismatchNotAHang) {
    for (unsigned seed = 0; seed < 20; ++seed) {
        network net(2, seed);
        // Rank 1 contributes one element more than rank 0 expects.
        auto a = std::make_unique<node>(0, coll::allreduce(0, 2, 2, 4), 8);
        auto b = std::make_unique<node>(0, coll::allreduce(1, 2, 3, 4), 12);
        net.ranks[0]->runs.push_back(std::move(a));
        net.ranks[1]->runs.push_back(std::move(b));
        for (auto& r : net.ranks)
            r->d.execute(r->d.runner.submit(*r->runs[0]));
        net.run();
        for (auto& r : net.ranks) {
            ASSERT_EQ(r->outcomes.size(), 1u);
            EXPECT_EQ(r->outcomes[0].second, run_outcome::mismatch) << "seed " << seed;
            EXPECT_TRUE(r->d.runner.failed());
        }
    }
}

} // namespace runner_test
