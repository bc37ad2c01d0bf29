// The collectives of a group: validated into a plan (collective_plan.hpp),
// run by the group's collective_runner (one at a time, round by round, bounded
// by the group's timeout) over the fabric's connections; device buffers staged
// through host memory.
#include "group/group_impl.hpp"

#include <cstdio>
#include <fstream>

#include <unistd.h>

namespace ucx::detail {

namespace {

using namespace group_wire;

bool is_rooted(collective_kind k) noexcept {
    return k == collective_kind::broadcast || k == collective_kind::gather ||
           k == collective_kind::reduce;
}

bool is_reduction(collective_kind k) noexcept {
    return k == collective_kind::reduce || k == collective_kind::allreduce;
}

/// What every rank of a collective must agree on (see `submit_check`):
/// kind, root, element type and operation, and size (a broadcast's result,
/// an allgatherv's blocks, any other's input), and whether the call was
/// valid here.
using fingerprint = std::array<std::uint64_t, 4>;

/// Bits of the fingerprint's first word: the kind is in the low byte.
constexpr std::uint64_t reduction_bit = std::uint64_t{1} << 8;
constexpr std::uint64_t refused_bit = std::uint64_t{1} << 9;

fingerprint fingerprint_of(const collective_args& a, bool refused) noexcept {
    fingerprint f{};
    f[0] = static_cast<std::uint64_t>(a.kind) + 1;
    if (refused)
        f[0] |= refused_bit;
    if (is_reduction(a.kind))
        f[0] |= reduction_bit | (static_cast<std::uint64_t>(a.type) << 16) |
                (static_cast<std::uint64_t>(a.op) << 24);
    f[1] = is_rooted(a.kind) ? static_cast<std::uint64_t>(static_cast<std::int64_t>(a.root)) : 0;
    if (a.kind == collective_kind::broadcast)
        f[2] = a.out_bytes;
    else if (a.kind != collective_kind::allgatherv && a.kind != collective_kind::barrier)
        f[2] = a.in_bytes;
    if (a.kind == collective_kind::allgatherv) {
        // FNV-1a over the block sizes.
        std::uint64_t h = 14695981039346656037ull;
        for (const std::size_t b : a.blocks) {
            h ^= b;
            h *= 1099511628211ull;
        }
        f[3] = h;
    }
    return f;
}

/// The call a fingerprint stands for, as the diagnosis says it.
std::string describe(const fingerprint& f) {
    const auto kind = static_cast<collective_kind>((f[0] & 0xFF) - 1);
    if ((f[0] & 0xFF) == 0 || (f[0] & 0xFF) > collective_kind_count)
        return "an unknown collective";
    std::string s(to_string(kind));
    if (is_rooted(kind))
        s += " to/from root " + std::to_string(static_cast<std::int64_t>(f[1]));
    if (kind == collective_kind::allgatherv)
        s += " with block sizes hashed to " + std::to_string(f[3] % 1000000);
    else if (kind != collective_kind::barrier)
        s += " of " + std::to_string(f[2]) + " bytes";
    if (f[0] & reduction_bit) {
        s += ' ';
        s += to_string(static_cast<datatype>((f[0] >> 16) & 0xFF));
        s += ' ';
        s += to_string(static_cast<reduce_op>((f[0] >> 24) & 0xFF));
    }
    if (f[0] & refused_bit)
        s += ", which it refused as invalid";
    return s;
}

} // namespace

// --- collectives ---

error_code group_impl::validate(const collective_args& a, coll::plan& p) const {
    using k = collective_kind;
    const int n = size();
    if (is_rooted(a.kind) && (a.root < 0 || a.root >= n))
        return make_error_code(error::invalid_rank);
    const auto invalid = make_error_code(boost::asio::error::invalid_argument);
    const std::size_t es = coll::element_size(a.type);
    switch (a.kind) {
    case k::barrier:
        p = coll::barrier(rank_, n);
        break;
    case k::broadcast:
        p = coll::broadcast(rank_, n, a.root, a.out_bytes);
        break;
    case k::gather:
        if (rank_ == a.root && a.out_bytes != a.in_bytes * static_cast<std::size_t>(n))
            return invalid;
        p = coll::gather(rank_, n, a.root, a.in_bytes);
        break;
    case k::allgather:
        if (a.out_bytes != a.in_bytes * static_cast<std::size_t>(n))
            return invalid;
        {
            std::vector<std::size_t> blocks(static_cast<std::size_t>(n), a.in_bytes);
            p = coll::allgatherv(rank_, n, blocks);
        }
        break;
    case k::allgatherv:
        if (a.blocks.size() != static_cast<std::size_t>(n) ||
            a.blocks[static_cast<std::size_t>(rank_)] != a.in_bytes ||
            a.out_bytes != std::accumulate(a.blocks.begin(), a.blocks.end(), std::size_t{0}))
            return invalid;
        p = coll::allgatherv(rank_, n, a.blocks);
        break;
    case k::reduce:
        if (a.in_bytes % es != 0 || (rank_ == a.root && a.out_bytes != a.in_bytes))
            return invalid;
        p = coll::reduce(rank_, n, a.root, a.in_bytes / es, es);
        break;
    case k::allreduce:
        if (a.in_bytes % es != 0 || a.out_bytes != a.in_bytes)
            return invalid;
        p = coll::allreduce(rank_, n, a.in_bytes / es, es);
        break;
    case k::alltoall:
        if (a.in_bytes % static_cast<std::size_t>(n) != 0 || a.out_bytes != a.in_bytes)
            return invalid;
        p = coll::alltoall(rank_, n, a.in_bytes / static_cast<std::size_t>(n));
        break;
    }
    return {};
}

void group_impl::count_end(collective_kind kind, const error_code& ec, std::size_t bytes,
                           std::chrono::steady_clock::time_point since,
                           std::chrono::steady_clock::time_point now) noexcept {
    collective_counters& c = counts_[static_cast<std::size_t>(kind)];
    c.counts.ended(ec.failed(), bytes);
    c.latency.add(now - since);
}

void group_impl::metrics(group_metrics& m) const noexcept {
    m.rank = rank_;
    m.size = size();
    for (std::size_t k = 0; k < collective_kind_count; ++k) {
        counts_[k].counts.snapshot(m.collectives[k]);
        counts_[k].latency.snapshot(m.latency[k]);
    }
    m.in_flight = collectives_in_flight_.load();
}

std::uint64_t group_impl::record_collective(const collective_args& a, flight_event_kind kind,
                                            std::chrono::steady_clock::time_point called) noexcept {
    flight_recorder::slot* to = recorder_.next();
    if (!to)
        return flight_recorder::none;
    flight_recorder::slot& s = *to;
    s.kind = kind;
    s.collective = a.kind;
    s.seq = seq_;
    s.root = is_rooted(a.kind) ? a.root : -1;
    s.has_reduction = is_reduction(a.kind);
    s.type = a.type;
    s.op = a.op;
    s.in_bytes = a.in_bytes;
    s.out_bytes = a.out_bytes;
    s.start = called;
    return s.id;
}

int group_impl::plan_for(const collective_args& a, std::unique_ptr<const coll::plan>& own,
                         error_code& ec) {
    int slot = cached_plan(a);
    if (slot >= 0)
        return slot;
    auto p = std::make_unique<coll::plan>();
    if ((ec = validate(a, *p)))
        return -1;
    own = std::move(p);
    return remember_plan(a, own);
}

void group_impl::collective(collective_args&& a, group_done_handler h) {
    const auto called = std::chrono::steady_clock::now();
    counts_[static_cast<std::size_t>(a.kind)].counts.start();
    // Refused here: in the flight recorder with the number the next
    // collective takes.
    const auto refuse = [&](const error_code& ec) {
        const auto now = std::chrono::steady_clock::now();
        count_end(a.kind, ec, 0, called, now);
        recorder_.ended(record_collective(a, flight_event_kind::collective, called), ec, now);
        post(std::move(h), ec);
    };
    if (error_)
        return refuse(error_);
    std::unique_ptr<const coll::plan> own;
    error_code invalid;
    const int slot = plan_for(a, own, invalid);
    if (invalid) {
        // Checked: the others learn of the refusal from this rank's
        // fingerprint instead of waiting for it. Ranks that all refuse the
        // same call agree, and go on.
        if (settings_.verify) [[unlikely]]
            submit_check(a, called, true);
        return refuse(invalid);
    }
    if (settings_.verify) [[unlikely]]
        submit_check(a, called, false);
    const std::uint64_t record = record_collective(a, flight_event_kind::collective, called);
    auto r = new_running();
    use_plan(*r, slot, std::move(own));
    // Device memory (where the library was built with CUDA and a device
    // exists): the memory type of each buffer, found once.
    device_staging* staging = staging_of(*fabric_->worker());
    const bool device_in = staging && a.in_bytes > 0 && staging->is_device(a.in);
    const bool device_out = staging && a.out_bytes > 0 && staging->is_device(a.out);
    r->args = std::move(a);
    r->type = r->args.type;
    r->op = r->args.op;
    r->handler.swap(h);
    r->seq = seq_++;
    r->started_at = called;
    r->record = record;
    ++collectives_in_flight_;
    if (device_in || device_out) [[unlikely]]
        stage_in(*r, *staging, device_in, device_out);
    // Cancellation: the ranks run the same collectives in the same order, so
    // one cannot be taken back alone. `terminal` aborts the group (as
    // `abort()`: every operation of it here completes with
    // operation_aborted, the other ranks see it fail); `partial` and `total`
    // are ignored. Cleared in `complete`.
    if (auto cs = r->handler.get_cancellation_slot(); cs.is_connected())
        cs.template emplace<collective_canceller>(weak_from_this());
    // The runner's queue holds it (see ~group_impl) until `complete`. (Most
    // often started by the previous one's handler: nothing to execute here.)
    if (const coll::run_action first = runner_.submit(*r.release());
        first.type != coll::run_action_type::none)
        execute(first);
}

void group_impl::collective_canceller::operator()(boost::asio::cancellation_type type) const {
    if ((type & boost::asio::cancellation_type::terminal) == boost::asio::cancellation_type::none)
        return;
    if (const auto g = group.lock())
        group_abort(*g);
}

void group_impl::execute(coll::run_action a) {
    using t = coll::run_action_type;
    for (;;) {
        switch (a.type) {
        case t::none:
            return;
        case t::start_round:
            if (a.first)
                prepare(static_cast<running&>(*a.run));
            a = start_round(static_cast<running&>(*a.run));
            break;
        case t::arm_timer:
            arm_watchdog(runner_.timer_expiry());
            a = runner_.resume();
            break;
        case t::cancel_timer:
            cancel_watchdog();
            a = runner_.resume();
            break;
        case t::fail_group:
            if (a.timeout)
                group_log(log::severity::info, "group: collective ",
                          static_cast<running&>(*a.run).seq, " passed its deadline");
            // Reports to the runner (failed): it goes on with that.
            fabric_->fail(make_error_code(a.timeout ? error::group_timeout : error::group_failed));
            a = runner_.resume();
            break;
        case t::defer:
            defer_end(static_cast<running&>(*a.run));
            a = runner_.resume();
            break;
        case t::complete:
            complete(a);
            a = runner_.resume();
            break;
        }
    }
}

void group_impl::prepare(running& r) {
    if (r.steps->scratch_bytes > 0) {
        r.scratch.swap(spare_scratch_);
        r.scratch.resize(r.steps->scratch_bytes);
    }
    // A rank whose `out` is not part of the result (a reduce's non-root)
    // works in a buffer of its own.
    if (r.args.out_bytes < r.steps->out_bytes) {
        r.work.swap(spare_work_);
        r.work.resize(r.steps->out_bytes);
    }
    r.base = {const_cast<std::byte*>(static_cast<const std::byte*>(r.args.in)),
              r.work.empty() ? static_cast<std::byte*>(r.args.out) : r.work.data(),
              r.scratch.data()};
    r.tag = collective_tag(id_, r.seq);
    recorder_.running(r.record);
    for (const auto& c : r.steps->prologue) {
        std::byte* from = r.at(c.from);
        std::byte* to = r.at(c.to);
        if (from != to && c.from.length > 0)
            std::memmove(to, from, c.from.length);
    }
}

coll::run_action group_impl::start_round(running& r) {
    using s = coll::transfer_status;
    int done_now = 0;
    s first = s::done;
    const bool recording = recorder_.enabled();
    if (recording)
        r.pending.clear();
    for (const coll::transfer& t : r.transfers()) {
        const s got = start_transfer(r, t);
        if (got == s::pending) {
            if (recording)
                r.pending.push_back(t.peer);
            continue;
        }
        ++done_now;
        if (got != s::done && first == s::done) [[unlikely]]
            first = got;
    }
    return runner_.round_started(done_now, first);
}

coll::transfer_status group_impl::start_transfer(running& r, const coll::transfer& t) {
    using s = coll::transfer_status;
    const int peer = member(t.peer);
    std::byte* data = r.at(t.data);
    const std::size_t length = t.data.length;
    // A small send UCX completes inside the call, or a message already
    // here, is done: no completion to wait for.
    if (t.send) {
        if (fabric_->send_now(peer, data, length, r.tag))
            return s::done;
        send_later(r, t.peer, data, length);
        return s::pending;
    }
    const auto done = [&] { return transfer_done{shared_from_this(), &r, length, t.peer, false}; };
    std::size_t got = 0;
    if (fabric_->recv_now(peer, data, length, r.tag, done, got))
        return got == length ? s::done : s::wrong_size;
    return s::pending;
}

void group_impl::send_later(running& r, int to, const std::byte* data, std::size_t length) {
    // The handler holds the group; the group holds `r` in the runner's queue
    // until every transfer of `r` has completed.
    fabric_->send(member(to), data, length, r.tag,
                  transfer_done{shared_from_this(), &r, length, to, true});
}

// One timer watches the deadlines of the collectives (the runner says when
// to arm it): back-to-back collectives shorter than the timeout start and
// cancel no timer (each would cost the reactor a timerfd update and a
// handler).
void group_impl::arm_watchdog(std::chrono::steady_clock::time_point at) {
    if (!watchdog_)
        watchdog_ = std::make_shared<boost::asio::steady_timer>(executor());
    watchdog_->expires_at(at); // cancels the wait of an earlier arming: stale below
    watchdog_->async_wait([weak = weak_from_this(), gen = ++watchdog_gen_](error_code) {
        auto self = weak.lock();
        if (!self || gen != self->watchdog_gen_)
            return;
        self->execute(self->runner_.timer_expired(std::chrono::steady_clock::now()));
    });
}

void group_impl::cancel_watchdog() noexcept {
    ++watchdog_gen_;
    if (watchdog_)
        watchdog_->cancel();
}

void group_impl::defer_end(running& r) {
    worker_impl& w = *fabric_->worker();
    using op_type = handler_operation<deferred_end, worker_core::executor_type, error_result<>>;
    operation* op = op_type::create(deferred_end{shared_from_this(), &r}, w.get_executor(),
                                    w.operation_pool(w.running_in_owner()));
    w.start(op);
    w.complete(op, {});
}

void group_impl::transfer_done::operator()(error_code ec, std::size_t n) {
    using s = coll::transfer_status;
    s status = s::done;
    if (ec) [[unlikely]]
        status = ec == errc::message_truncated ? s::wrong_size : s::failed;
    else if (!send && n != expected) [[unlikely]]
        status = s::wrong_size;
    if (!run->pending.empty()) {
        if (const auto it = std::find(run->pending.begin(), run->pending.end(), peer);
            it != run->pending.end())
            run->pending.erase(it);
    }
    self->execute(self->runner_.transfer_done(*run, status));
}

void group_impl::complete(const coll::run_action& a) {
    run_ptr done(static_cast<running*>(a.run));
    running& r = *done;
    if (r.is_check) [[unlikely]]
        return check_done(std::move(done), a.outcome == coll::run_outcome::ok);
    error_code ec;
    if (a.outcome != coll::run_outcome::ok) {
        // No partial result: the group is unusable after a failed
        // collective (and so is every group of its fabric).
        if (!fabric_->failed())
            fabric_->fail(make_error_code(error::group_failed));
        if (r.local_error)
            ec = r.local_error;
        else if (a.outcome == coll::run_outcome::mismatch)
            ec = make_error_code(error::collective_mismatch);
        else
            ec = error_ ? error_ : fabric_->failed();
    }
    const auto now = std::chrono::steady_clock::now();
    count_end(r.args.kind, ec, r.args.in_bytes, r.started_at, now);
    recorder_.ended(r.record, ec, now);
    --collectives_in_flight_;
    recycle(r);
    release_plan(r);
    if (auto cs = r.handler.get_cancellation_slot(); cs.is_connected())
        cs.clear();
    auto h = std::move(r.handler);
    if (!ec && r.device_out)
        return stage_out(std::move(done), std::move(h));
    const bool direct = r.args.direct_handler;
    // Kept before the handler runs: the collective it starts reuses it.
    keep_running(std::move(done));
    if (a.post)
        boost::asio::post(executor(), boost::asio::append(std::move(h), ec));
    else if (direct)
        std::move(h)(ec); // what dispatch would do, without its type-erased trip
    else
        boost::asio::dispatch(boost::asio::append(std::move(h), ec));
}

// --- device buffers ---

void group_impl::stage_in(running& r, device_staging& s, bool device_in, bool device_out) {
    collective_args& a = r.args;
    const bool in_place = a.in == a.out;
    void* const user_in = const_cast<void*>(a.in);
    if (device_out) {
        r.device_out = a.out;
        r.device_out_bytes = a.out_bytes;
        r.host_out.resize(a.out_bytes);
        a.out = r.host_out.data();
    }
    // What the collective reads: `in`, or a broadcast root's `out`.
    void* from = nullptr;
    std::size_t bytes = 0;
    std::byte* to = nullptr;
    if (device_in) {
        if (in_place && device_out) {
            to = r.host_out.data();
        } else {
            r.host_in.resize(a.in_bytes);
            to = r.host_in.data();
        }
        a.in = to;
        from = user_in;
        bytes = a.in_bytes;
    } else if (device_out && a.kind == collective_kind::broadcast && a.root == rank_) {
        from = r.device_out;
        bytes = r.device_out_bytes;
        to = r.host_out.data();
    }
    if (!from)
        return;
    r.set_not_ready();
    s.copy_through(
        staging_direction::outgoing, from, bytes,
        [to](void* host, std::size_t n, staging_operation::transfer_completion done) {
            std::memcpy(to, host, n);
            done(error_code(), n);
        },
        [self = shared_from_this(), r = &r](const error_code& ec) { self->input_ready(r, ec); });
}

void group_impl::input_ready(running* r, const error_code& ec) {
    if (ec) {
        group_log(log::severity::warning, "group: collective ", r->seq,
                  ": copying device input failed: ", ec.message());
        r->local_error = ec;
    }
    execute(runner_.input_ready(*r, !ec));
}

void group_impl::stage_out(run_ptr done, group_done_handler h) {
    std::shared_ptr<running> r(std::move(done)); // for the copy's step below
    auto hp = std::make_shared<group_done_handler>(std::move(h));
    auto complete = [hp](const error_code& ec) {
        boost::asio::dispatch(boost::asio::append(std::move(*hp), ec));
    };
    device_staging* s = staging_of(*fabric_->worker());
    if (!s)
        return post(std::move(*hp), error_code(boost::asio::error::operation_aborted));
    s->copy_through(
        staging_direction::incoming, r->device_out, r->device_out_bytes,
        [r](void* host, std::size_t n, staging_operation::transfer_completion done) {
            std::memcpy(host, r->host_out.data(), n);
            done(error_code(), n);
        },
        std::move(complete));
}

// --- the flight recorder ---

void group_impl::flight_record(ucx::flight_record& r, std::string_view reason) const {
    r.group = settings_.name;
    r.rank = rank_;
    r.size = size();
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0)
        r.host = host;
    r.pid = getpid();
    r.time_us = recorder_.wall_us(std::chrono::steady_clock::now());
    r.reason = reason;
    r.error = error_ ? error_.message() : std::string();
    if (!mismatch_.empty())
        r.error += ": " + mismatch_;
    r.collectives = seq_;
    recorder_.snapshot(r);
    // The running collective: where it is, and whom it waits for.
    const auto* run = static_cast<const running*>(runner_.front());
    if (!run || !runner_.busy() || run->record == flight_recorder::none)
        return;
    for (flight_event& e : r.events) {
        if (e.id != run->record)
            continue;
        e.round = static_cast<std::uint32_t>(run->round());
        e.rounds = run->steps ? static_cast<std::uint32_t>(run->steps->rounds.size()) : 0;
        e.waiting_for = run->pending;
        std::sort(e.waiting_for.begin(), e.waiting_for.end());
        e.waiting_for.erase(std::unique(e.waiting_for.begin(), e.waiting_for.end()),
                            e.waiting_for.end());
    }
}

void group_impl::dump_flight_record() const {
    std::string_view reason = "failed";
    if (error_ == error::group_timeout)
        reason = "timeout";
    else if (error_ == error::collective_mismatch)
        reason = "mismatch";
    else if (error_ == boost::asio::error::operation_aborted)
        reason = "aborted";
    ucx::flight_record r;
    flight_record(r, reason);
    // What the running collective waits for, in the log too.
    for (const flight_event& e : r.events) {
        if (e.kind != flight_event_kind::collective || e.state != flight_state::running)
            continue;
        std::string ranks;
        for (const int w : e.waiting_for)
            ranks += (ranks.empty() ? "" : ", ") + std::to_string(w);
        group_log(log::severity::warning, "group ", settings_.name, ": failed (", error_.message(),
                  ") in collective ", e.seq, " (", to_string(e.collective), "), round ",
                  e.round + 1, " of ", e.rounds,
                  ranks.empty() ? std::string() : ", waiting for rank(s) " + ranks);
    }
    if (settings_.dump.empty())
        return;
    std::string path = settings_.dump + std::to_string(rank_);
    if (id_ != 0)
        path += "-split" + std::to_string(id_);
    path += ".json";
    // Whole or not at all: written aside, then renamed.
    const std::string part = path + ".part";
    {
        std::ofstream f(part, std::ios::binary | std::ios::trunc);
        f << to_json(r);
        f.close();
        if (!f) {
            std::remove(part.c_str());
            group_log(log::severity::warning, "group: could not write the flight record ", path);
            return;
        }
    }
    if (std::rename(part.c_str(), path.c_str()) != 0) {
        std::remove(part.c_str());
        group_log(log::severity::warning, "group: could not write the flight record ", path);
        return;
    }
    group_log(log::severity::info, "group: flight record written to ", path);
}

// --- the check of the collectives' arguments ---

// With group_options::verify_collectives, each collective is preceded by an
// allgather of its fingerprint (kind, root, type, operation, size): every
// rank then holds every rank's, and sees a difference at the same step as
// the others. The allgather is a collective of the queue like any (its
// number comes before its collective's), so collectives started back to
// back keep their order.
void group_impl::submit_check(const collective_args& a,
                              std::chrono::steady_clock::time_point called, bool refused) {
    auto c = new_running();
    c->is_check = true;
    const fingerprint f = fingerprint_of(a, refused);
    static_assert(sizeof(f) == sizeof(c->fingerprint));
    std::memcpy(c->fingerprint.data(), f.data(), sizeof(f));
    c->check_out.resize(static_cast<std::size_t>(size()) * sizeof(f));
    collective_args ca;
    ca.kind = collective_kind::allgather;
    ca.in = c->fingerprint.data();
    ca.in_bytes = sizeof(f);
    ca.out = c->check_out.data();
    ca.out_bytes = c->check_out.size();
    std::unique_ptr<const coll::plan> own;
    error_code never; // an allgather of equal blocks is valid
    const int slot = plan_for(ca, own, never);
    use_plan(*c, slot, std::move(own));
    c->record = record_collective(a, flight_event_kind::check, called);
    c->args = std::move(ca);
    c->seq = seq_++;
    c->started_at = called;
    if (const coll::run_action first = runner_.submit(*c.release());
        first.type != coll::run_action_type::none)
        execute(first);
}

void group_impl::check_done(run_ptr done, bool ok) {
    running& r = *done;
    const auto now = std::chrono::steady_clock::now();
    recycle(r);
    release_plan(r);
    std::string mismatch;
    if (ok) {
        // The ranks by fingerprint, in rank order.
        std::vector<std::pair<fingerprint, std::vector<int>>> calls;
        for (int j = 0; j < size(); ++j) {
            fingerprint f;
            std::memcpy(f.data(), r.check_out.data() + static_cast<std::size_t>(j) * sizeof(f),
                        sizeof(f));
            auto it = std::find_if(calls.begin(), calls.end(),
                                   [&](const auto& c) { return c.first == f; });
            if (it == calls.end())
                calls.push_back({f, {j}});
            else
                it->second.push_back(j);
        }
        if (calls.size() > 1) {
            mismatch = "collective " + std::to_string(r.seq + 1) + ": ";
            for (std::size_t i = 0; i < calls.size(); ++i) {
                const auto& ranks = calls[i].second;
                mismatch += i > 0 ? "; " : "";
                mismatch += ranks.size() == 1 ? "rank " : "ranks ";
                for (std::size_t k = 0; k < ranks.size(); ++k)
                    mismatch += (k > 0 ? ", " : "") + std::to_string(ranks[k]);
                mismatch += " called " + describe(calls[i].first);
            }
        }
    }
    const error_code ec =
        mismatch.empty() ? error_code() : make_error_code(error::collective_mismatch);
    recorder_.ended(r.record, ok ? ec : (error_ ? error_ : fabric_->failed()), now);
    keep_running(std::move(done));
    if (mismatch.empty())
        return; // its collective goes on (or fails with the group)
    group_log(log::severity::error, "group ", settings_.name, ": ", mismatch);
    mismatch_ = std::move(mismatch);
    fabric_->fail(ec);
}

} // namespace ucx::detail
