// The collectives of a group: validated into a plan (collective_plan.hpp),
// run by the group's collective_runner (one at a time, round by round, bounded
// by the group's timeout) over the fabric's connections; device buffers staged
// through host memory.
#include "group/group_impl.hpp"

namespace ucx::detail {

namespace {

using namespace group_wire;

} // namespace

// --- collectives ---

error_code group_impl::validate(const collective_args& a, coll::plan& p) const {
    using k = collective_kind;
    const int n = size();
    if (a.kind != k::barrier && a.kind != k::allgather && a.kind != k::allgatherv &&
        a.kind != k::allreduce && a.kind != k::alltoall && (a.root < 0 || a.root >= n))
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
                           std::chrono::steady_clock::time_point since) noexcept {
    collective_counters& c = counts_[static_cast<std::size_t>(kind)];
    c.counts.ended(ec.failed(), bytes);
    c.latency.add(std::chrono::steady_clock::now() - since);
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

void group_impl::collective(collective_args&& a, group_done_handler h) {
    const auto called = std::chrono::steady_clock::now();
    ++counts_[static_cast<std::size_t>(a.kind)].counts.started;
    if (error_) {
        count_end(a.kind, error_, 0, called);
        return post(std::move(h), error_);
    }
    int slot = cached_plan(a);
    std::unique_ptr<const coll::plan> own;
    if (slot < 0) {
        auto p = std::make_unique<coll::plan>();
        if (auto ec = validate(a, *p)) {
            count_end(a.kind, ec, 0, called);
            return post(std::move(h), ec);
        }
        own = std::move(p);
        slot = remember_plan(a, own);
    }
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
    for (const coll::transfer& t : r.transfers()) {
        const s got = start_transfer(r, t);
        if (got == s::pending)
            continue;
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
        send_later(r, peer, data, length);
        return s::pending;
    }
    const auto done = [&] { return transfer_done{shared_from_this(), &r, length, false}; };
    std::size_t got = 0;
    if (fabric_->recv_now(peer, data, length, r.tag, done, got))
        return got == length ? s::done : s::wrong_size;
    return s::pending;
}

void group_impl::send_later(running& r, int peer, const std::byte* data, std::size_t length) {
    // The handler holds the group; the group holds `r` in the runner's queue
    // until every transfer of `r` has completed.
    fabric_->send(peer, data, length, r.tag, transfer_done{shared_from_this(), &r, length, true});
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
    self->execute(self->runner_.transfer_done(*run, status));
}

void group_impl::complete(const coll::run_action& a) {
    run_ptr done(static_cast<running*>(a.run));
    running& r = *done;
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
    count_end(r.args.kind, ec, r.args.in_bytes, r.started_at);
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

} // namespace ucx::detail
