// Internal: one group of a fabric (group/fabric.hpp): its ranks, its
// collectives (collectives.cpp: the I/O of collective_runner.hpp), its receives from any rank
// (any_source.cpp), its split and its join (group.cpp).
#pragma once

#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/group.hpp>
#include <ucx/log.hpp>
#include <ucx/tag.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/device_staging.hpp"
#include "group/collective_plan.hpp"
#include "group/collective_runner.hpp"
#include "group/fabric.hpp"
#include "group/flight_recorder.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>

namespace ucx::detail {

/// What a group keeps of its options besides its ranks and timeout.
struct group_settings {
    /// Its name in flight records.
    std::string name;
    /// `group_options::flight_recorder_entries` and `flight_recorder_dump`.
    std::size_t recorder_entries = 0;
    std::string dump;
    /// `group_options::verify_collectives`.
    bool verify = false;
};

/// One group: its ranks (fabric ranks), its collectives' queue, its waiters.
class group_impl final : public fabric_member, public std::enable_shared_from_this<group_impl> {
public:
    group_impl(std::shared_ptr<fabric> f, std::uint32_t id, int rank, std::vector<int> members,
               std::chrono::milliseconds timeout, group_settings settings)
        : fabric_(std::move(f)), id_(id), rank_(rank), members_(std::move(members)),
          runner_(runner_params(timeout)), settings_(std::move(settings)),
          recorder_(settings_.recorder_entries) {}
    group_impl(const group_impl&) = delete;
    group_impl& operator=(const group_impl&) = delete;
    ~group_impl() {
        // Collectives that never started (those that did hold the group
        // until they end).
        while (coll::collective_run* r = runner_.take_front())
            delete static_cast<running*>(r);
    }

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return static_cast<int>(members_.size()); }
    const error_code& error() const noexcept { return error_; }
    const std::shared_ptr<fabric>& fab() const noexcept { return fabric_; }
    /// This rank's collective counts (any thread).
    void metrics(group_metrics& m) const noexcept;
    std::uint32_t id() const noexcept { return id_; }
    int member(int r) const noexcept { return members_[static_cast<std::size_t>(r)]; }
    std::chrono::milliseconds timeout() const noexcept { return runner_.timeout(); }
    void set_timeout(std::chrono::milliseconds t) noexcept { runner_.set_timeout(t); }
    const boost::asio::any_io_executor& executor() const noexcept { return fabric_->executor(); }
    const group_settings& settings() const noexcept { return settings_; }
    /// This rank's flight record (on the group's executor), with `reason`.
    void flight_record(ucx::flight_record& r, std::string_view reason) const;
    /// Records a message by rank (`send`: to, else from, group rank `peer`);
    /// its id for `message_ended`.
    std::uint64_t message_started(bool send, int peer, std::size_t bytes, tag_t tag) noexcept {
        flight_recorder::slot* to = recorder_.next();
        if (!to)
            return flight_recorder::none;
        flight_recorder::slot& s = *to;
        s.kind = send ? flight_event_kind::send : flight_event_kind::recv;
        s.state = flight_state::running;
        s.peer = peer;
        s.tag = tag;
        (send ? s.in_bytes : s.out_bytes) = bytes;
        s.start = flight_recorder::coarse_now();
        return s.id;
    }
    void message_ended(std::uint64_t id, const error_code& ec, std::size_t bytes) noexcept {
        if (flight_recorder::slot* s = recorder_.find(id)) {
            if (s->kind == flight_event_kind::recv)
                s->out_bytes = bytes;
            recorder_.ended(id, ec, flight_recorder::coarse_now());
        }
    }

    template <class Handler, class... Args>
    void post(Handler h, Args... args) {
        boost::asio::post(executor(), boost::asio::append(std::move(h), std::move(args)...));
    }

    /// The group failed (or was closed here) with `ec`.
    void failed(error_code ec) override {
        if (error_)
            return;
        error_ = ec;
        if (!released_)
            dump_flight_record();
        auto waiters = std::move(failure_waiters_);
        failure_waiters_.clear();
        for (auto& h : waiters)
            post(std::move(h), ec);
        execute(runner_.fail());
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            stop_any(r, ec);
    }

    void recv_any(void* data, std::size_t size, tag_t tag, group_from_handler h);
    /// A member may have closed: once all others have, any-source receives end.
    void peer_left() override {
        if (!others_left())
            return;
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            stop_any(r, boost::asio::error::eof);
    }
    /// An endpoint's id became known: parked any-source receives resolve.
    void inboxes_changed() override {
        for (const auto& r : std::vector<std::shared_ptr<any_recv>>(any_))
            if (r->parked)
                resolve_any(r);
    }

    /// Closed or destroyed here: operations fail with operation_aborted.
    void release() {
        released_ = true;
        failed(boost::asio::error::operation_aborted);
    }
    bool released() const noexcept { return released_; }

    void wait_failure(group_done_handler h) {
        if (error_)
            return post(std::move(h), error_);
        failure_waiters_.push_back(std::move(h));
    }

    void collective(collective_args&& a, group_done_handler h);
    void split(int color, int key, group_new_handler h);

private:
    /// A collective: the runner's node, with what its I/O needs.
    struct running : coll::collective_run {
        collective_args args;
        /// Its plan (`steps`) is one of the group's cached plans
        /// (`plan_slot`, in use until the collective finishes: see
        /// `plan_entry`), or `own_plan`.
        int plan_slot = -1;
        std::unique_ptr<const coll::plan> own_plan;
        std::vector<std::byte> scratch;
        std::vector<std::byte> work;
        /// The tag of its messages.
        std::uint32_t tag = 0;
        group_done_handler handler;
        std::uint32_t seq = 0;
        /// Device buffers go through host memory (the arithmetic runs on
        /// the host): the user's `out` when it is device memory, and the
        /// host buffers that stand for `in` and `out` meanwhile.
        void* device_out = nullptr;
        std::size_t device_out_bytes = 0;
        std::vector<std::byte> host_in, host_out;
        /// Copying its device input failed: it fails with that.
        error_code local_error;
        /// When it was called (its latency in the metrics).
        std::chrono::steady_clock::time_point started_at{};
        /// Its event in the flight recorder.
        std::uint64_t record = flight_recorder::none;
        /// With the recorder on: the group ranks of the transfers of its
        /// round still in flight (their capacity is kept).
        std::vector<int> pending;
        /// The check of the next collective's arguments (`submit_check`):
        /// this rank's fingerprint, and every rank's (capacity kept).
        bool is_check = false;
        std::array<std::uint64_t, 4> fingerprint{};
        std::vector<std::byte> check_out;

        /// As made, for the next collective (the handler was moved out, the
        /// buffers recycled and the plan released; `args` is assigned when
        /// it starts).
        void reset() noexcept {
            reset_run();
            args.blocks.clear();
            own_plan.reset();
            seq = 0;
            device_out = nullptr;
            device_out_bytes = 0;
            if (host_in.capacity() > 0 || host_out.capacity() > 0) {
                std::vector<std::byte>().swap(host_in);
                std::vector<std::byte>().swap(host_out);
            }
            local_error = {};
            record = flight_recorder::none;
            pending.clear();
            is_check = false;
            check_out.clear();
        }
    };

    using run_ptr = std::unique_ptr<running>;
    /// The states of finished collectives, kept for the next ones: a loop
    /// of collectives allocates none.
    std::array<run_ptr, 2> spare_runs_;
    std::size_t spare_count_ = 0;
    run_ptr new_running() {
        if (spare_count_ == 0)
            return std::make_unique<running>();
        return std::move(spare_runs_[--spare_count_]);
    }
    /// `r` finished: kept for a next collective (or freed).
    void keep_running(run_ptr r) noexcept {
        if (spare_count_ == spare_runs_.size())
            return;
        r->reset();
        spare_runs_[spare_count_++] = std::move(r);
    }

    /// Makes `r` run on host copies of its device buffers: the input is
    /// copied now (`r` is ready once it arrives), the result after the
    /// collective (`stage_out`). The queue holds `r` until it has finished,
    /// and the copy's completion holds the group.
    void stage_in(running& r, device_staging& s, bool device_in, bool device_out);
    void input_ready(running* r, const error_code& ec);
    /// Copies the result to the user's device `out`, then completes `h`.
    void stage_out(run_ptr r, group_done_handler h);

    /// A pending any-source receive.
    struct any_recv {
        explicit any_recv(group_from_handler h) : handler(std::move(h)) {}
        group_from_handler handler;
        void* data = nullptr;
        std::size_t size = 0;
        std::uint32_t tag = 0;
        /// Cancels the worker's receive.
        boost::asio::cancellation_signal signal;
        /// The worker's receive is in flight.
        bool posted = false;
        /// Its handler's slot asked for cancellation.
        bool cancelled = false;
        /// Why it must end (the group's end, eof), once it must.
        error_code stop;
        /// A message came whose connection's id is not known yet.
        bool parked = false;
        std::size_t parked_bytes = 0;
        tag_t parked_tag = 0;
        bool done = false;
    };

    /// Whether every other member closed gracefully (true in a group of one).
    bool others_left() const noexcept {
        for (int j = 0; j < size(); ++j)
            if (j != rank_ && !fabric_->has_left(member(j)))
                return false;
        return true;
    }
    /// The rank in this group of the member whose connection has the id
    /// `inbox` here, or -1.
    int rank_of_inbox(std::uint32_t inbox) const noexcept {
        const int who = fabric_->peer_of_inbox(inbox);
        if (who < 0)
            return -1;
        const auto it = std::find(members_.begin(), members_.end(), who);
        return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
    }
    void post_any(const std::shared_ptr<any_recv>& r);
    void any_done(const std::shared_ptr<any_recv>& r, error_code ec, std::size_t n, tag_t t);
    void resolve_any(const std::shared_ptr<any_recv>& r);
    void stop_any(const std::shared_ptr<any_recv>& r, error_code why);
    void finish_any(const std::shared_ptr<any_recv>& r, error_code ec, int from, std::size_t n);

    error_code validate(const collective_args& a, coll::plan& p) const;
    /// The slot of the plan for `a` (cached, or made: `own` when no slot is
    /// free), or -1 with `ec` when `a` is invalid (or with `own`).
    int plan_for(const collective_args& a, std::unique_ptr<const coll::plan>& own, error_code& ec);
    /// Records a collective (or its check) called at `called` with the next
    /// number.
    std::uint64_t record_collective(const collective_args& a, flight_event_kind kind,
                                    std::chrono::steady_clock::time_point called) noexcept;
    /// Queues the check of `a`'s arguments across the ranks; `refused`:
    /// this rank found them invalid (and fails its call).
    void submit_check(const collective_args& a, std::chrono::steady_clock::time_point called,
                      bool refused);

    /// The plans of the last few distinct collectives: a loop of the same
    /// collective computes (and allocates) its plan once. A plan depends on
    /// the arguments below (with this rank and the group's size); arguments
    /// that gave a plan were valid. An entry that queued collectives use
    /// (`users`) is not replaced: they point to its plan.
    struct plan_entry {
        collective_kind kind{};
        int root = 0;
        std::size_t in_bytes = 0, out_bytes = 0;
        datatype type{};
        std::vector<std::size_t> blocks;
        std::unique_ptr<const coll::plan> plan;
        int users = 0;
        bool matches(const collective_args& a) const noexcept {
            return plan && kind == a.kind && root == a.root && in_bytes == a.in_bytes &&
                   out_bytes == a.out_bytes && type == a.type && blocks == a.blocks;
        }
    };
    /// The slot of the cached plan for `a`, or -1.
    int cached_plan(const collective_args& a) const noexcept {
        for (std::size_t i = 0; i < plans_.size(); ++i)
            if (plans_[i].matches(a))
                return static_cast<int>(i);
        return -1;
    }
    /// Caches `p` for `a` in a slot no collective uses, and returns the
    /// slot; -1 (and `p` left alone) when every slot is in use.
    int remember_plan(const collective_args& a, std::unique_ptr<const coll::plan>& p) {
        for (std::size_t n = 0; n < plans_.size(); ++n) {
            const std::size_t i = next_plan_++ % plans_.size();
            plan_entry& e = plans_[i];
            if (e.users > 0)
                continue;
            e.kind = a.kind;
            e.root = a.root;
            e.in_bytes = a.in_bytes;
            e.out_bytes = a.out_bytes;
            e.type = a.type;
            e.blocks = a.blocks;
            e.plan = std::move(p);
            return static_cast<int>(i);
        }
        return -1;
    }
    /// `r` runs on the plan of `slot` (-1: `own`, which it then owns).
    void use_plan(running& r, int slot, std::unique_ptr<const coll::plan> own) noexcept {
        if (slot < 0) {
            r.own_plan = std::move(own);
            r.steps = r.own_plan.get();
            return;
        }
        ++plans_[static_cast<std::size_t>(slot)].users;
        r.plan_slot = slot;
        r.steps = plans_[static_cast<std::size_t>(slot)].plan.get();
    }
    /// `r` is done with its plan.
    void release_plan(running& r) noexcept {
        if (r.plan_slot >= 0)
            --plans_[static_cast<std::size_t>(r.plan_slot)].users;
        r.plan_slot = -1;
        r.steps = nullptr;
    }
    std::array<plan_entry, 4> plans_;
    unsigned next_plan_ = 0;
    /// The buffers of finished collectives, kept for the next ones (up to
    /// `spare_limit` bytes each): a loop of small reductions allocates none.
    std::vector<std::byte> spare_scratch_, spare_work_;
    static constexpr std::size_t spare_limit = std::size_t{1} << 20;
    /// Keeps the larger of `spare` and `used` within the limit; `used` ends
    /// with no memory.
    static void keep_spare(std::vector<std::byte>& spare, std::vector<std::byte>& used) noexcept {
        if (used.capacity() == 0)
            return;
        if (used.capacity() > spare.capacity() && used.capacity() <= spare_limit) {
            used.clear();
            spare.swap(used);
        }
        std::vector<std::byte>().swap(used);
    }
    /// `r` finished: its buffers go back to the spares (or are freed).
    void recycle(running& r) noexcept {
        keep_spare(spare_scratch_, r.scratch);
        keep_spare(spare_work_, r.work);
    }
    /// The completion of one transfer of the running collective `run`. (Its
    /// operation comes from the worker's pool, like every operation's: a
    /// round's transfers are in flight at once.)
    /// In a collective's cancellation slot: a `terminal` cancellation
    /// aborts the group.
    struct collective_canceller {
        std::weak_ptr<group_impl> group;
        void operator()(boost::asio::cancellation_type type) const;
    };
    struct transfer_done {
        std::shared_ptr<group_impl> self;
        running* run;
        std::size_t expected;
        int peer; // group rank
        bool send;
        void operator()(error_code ec, std::size_t n);
    };
    static coll::collective_runner::params runner_params(std::chrono::milliseconds t) noexcept {
        coll::collective_runner::params p;
        p.timeout = t;
        return p;
    }
    /// Executes the runner's actions, from `a` until it has none.
    void execute(coll::run_action a);
    /// Gives `r` its buffers and its tag, and runs its plan's prologue.
    void prepare(running& r);
    /// Starts every transfer of `r`'s current round; the runner's next action.
    coll::run_action start_round(running& r);
    /// Starts `t`, a transfer of `r`.
    coll::transfer_status start_transfer(running& r, const coll::transfer& t);
    /// A send of `r` that UCX did not complete at once.
    void send_later(running& r, int to, const std::byte* data, std::size_t length);
    void arm_watchdog(std::chrono::steady_clock::time_point at);
    void cancel_watchdog() noexcept;
    /// `r` ended inside its start: it ends from the worker's next pass, as
    /// an operation completed at once does.
    void defer_end(running& r);
    /// The completion of that deferral.
    struct deferred_end {
        std::shared_ptr<group_impl> self;
        running* run;
        void operator()(const error_code& ec) {
            self->execute(self->runner_.deferred_end(*run, ec || bool(self->fabric_->failed())));
        }
    };
    /// Completes the handler of `a.run`, which ended with `a.outcome`.
    void complete(const coll::run_action& a);
    /// A check ended (`ok`: every rank's fingerprint is here): a
    /// difference fails the group with collective_mismatch.
    void check_done(std::unique_ptr<running> done, bool ok);

    std::shared_ptr<fabric> fabric_;
    std::uint32_t id_;
    int rank_;
    std::vector<int> members_;
    error_code error_;
    std::vector<group_done_handler> failure_waiters_;
    /// The collectives started and not finished, in order (`running`
    /// nodes, owned from `submit` to `complete`).
    coll::collective_runner runner_;
    std::uint32_t seq_ = 0;
    /// The collectives' counts by kind, written on the group's executor,
    /// read from any thread (`group::metrics()`).
    struct collective_counters {
        kind_counters counts;
        histogram_counters latency;
    };
    std::array<collective_counters, collective_kind_count> counts_{};
    counter collectives_in_flight_;
    /// A collective of `kind` ended with `ec` (`bytes` its input) at `now`,
    /// started at `since`.
    void count_end(collective_kind kind, const error_code& ec, std::size_t bytes,
                   std::chrono::steady_clock::time_point since,
                   std::chrono::steady_clock::time_point now) noexcept;
    /// Writes the flight record to the configured file, if any (the group
    /// failed with `error_`).
    void dump_flight_record() const;
    group_settings settings_;
    flight_recorder recorder_;
    /// What the check found different (empty: nothing).
    std::string mismatch_;
    /// Watches the running collective's deadline (for the runner): a wait
    /// whose generation is not the current one is stale.
    std::shared_ptr<boost::asio::steady_timer> watchdog_;
    std::uint64_t watchdog_gen_ = 0;
    std::vector<std::shared_ptr<any_recv>> any_;
    bool released_ = false;
};

} // namespace ucx::detail
