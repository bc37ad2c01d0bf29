// The collectives of a group: validated into a plan (collective_plan.hpp),
// queued, run one at a time round by round over the fabric's connections,
// bounded by the group's deadline; device buffers staged through host memory.
#include "group/group_impl.hpp"

namespace ucx::detail {

namespace {

using namespace group_wire;

} // namespace

// --- collectives ---

error_code group_impl::validate(const collective_args& a, coll::plan& p) const {
    using k = collective_args;
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

void group_impl::collective(collective_args&& a, group_done_handler h) {
    if (error_)
        return post(std::move(h), error_);
    int slot = cached_plan(a);
    std::unique_ptr<const coll::plan> own;
    if (slot < 0) {
        auto p = std::make_unique<coll::plan>();
        if (auto ec = validate(a, *p))
            return post(std::move(h), ec);
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
    r->handler.swap(h);
    r->seq = seq_++;
    if (device_in || device_out) [[unlikely]]
        stage_in(*r, *staging, device_in, device_out);
    queue_.push_back(std::move(r));
    if (!busy_) {
        // A collective with nothing to send (one rank) ends in here: its
        // handler is then posted, not run inside the initiating call.
        initiating_ = true;
        start_next();
        initiating_ = false;
    }
}

void group_impl::start_next() {
    if (starting_) {
        restart_ = true; // the loop below starts it
        return;
    }
    struct guard {
        bool& flag;
        ~guard() { flag = false; }
    } g{starting_};
    starting_ = true;
    chained_ = 0;
    do {
        restart_ = false;
        start_head();
    } while (restart_);
}

void group_impl::start_head() {
    if (queue_.empty() || !queue_.front().ready) {
        busy_ = false;
        return;
    }
    busy_ = true;
    // The queue holds it until `finish` (its transfers never complete
    // inside the calls that start them).
    running& r = queue_.front();
    if (error_)
        return finish(r, error_);
    if (r.local_error)
        return finish(r, r.local_error);
    if (r.plan->scratch_bytes > 0) {
        r.scratch.swap(spare_scratch_);
        r.scratch.resize(r.plan->scratch_bytes);
    }
    // A rank whose `out` is not part of the result (a reduce's non-root)
    // works in a buffer of its own.
    if (r.args.out_bytes < r.plan->out_bytes) {
        r.work.swap(spare_work_);
        r.work.resize(r.plan->out_bytes);
    }
    r.base = {const_cast<std::byte*>(static_cast<const std::byte*>(r.args.in)),
              r.work.empty() ? static_cast<std::byte*>(r.args.out) : r.work.data(),
              r.scratch.data()};
    r.tag = collective_tag(id_, r.seq);
    for (const auto& c : r.plan->prologue) {
        std::byte* from = region_ptr(r, c.from);
        std::byte* to = region_ptr(r, c.to);
        if (from != to && c.from.length > 0)
            std::memmove(to, from, c.from.length);
    }
    if (timeout_.count() > 0) {
        r.deadline = std::chrono::steady_clock::now() + timeout_;
        // Earlier than the armed expiry: the timeout was shortened.
        if (!watchdog_armed_ || r.deadline < watchdog_->expiry())
            arm_watchdog(r.deadline);
    }
    run_round(r, true);
}

// One timer watches the deadlines of the collectives, one at a time: it is
// armed for the running collective's deadline when none is pending, and on
// expiry either fails the group or is armed again for the deadline of the
// collective running then. Back-to-back collectives shorter than the timeout
// start and cancel no timer (each would cost the reactor a timerfd update and
// a handler).
void group_impl::arm_watchdog(std::chrono::steady_clock::time_point at) {
    if (!watchdog_)
        watchdog_ = std::make_shared<boost::asio::steady_timer>(executor());
    watchdog_->expires_at(at); // cancels the wait of an earlier arming: stale below
    watchdog_armed_ = true;
    watchdog_->async_wait([weak = weak_from_this(), gen = ++watchdog_gen_](error_code ec) {
        auto self = weak.lock();
        if (!self || gen != self->watchdog_gen_)
            return;
        self->watchdog_armed_ = false;
        if (ec || self->error_ || !self->busy_ || self->queue_.empty())
            return;
        const running& r = self->queue_.front();
        if (r.deadline > std::chrono::steady_clock::now())
            return self->arm_watchdog(r.deadline);
        group_log(log::severity::info, "group: collective ", r.seq, " passed its deadline");
        self->fabric_->fail(make_error_code(error::group_timeout));
    });
}

void group_impl::run_round(running& r, bool in_start) {
    while (r.round < r.plan->rounds.size()) {
        const coll::round& rd = r.plan->rounds[r.round];
        r.outstanding = static_cast<int>(rd.transfers.size());
        const std::uint32_t tag = r.tag;
        for (const auto& t : rd.transfers) {
            std::byte* data = region_ptr(r, t.data);
            const int peer = member(t.peer);
            // A small send UCX completes inside the call, or a message
            // already here, is done: no completion to wait for.
            if (t.send && fabric_->send_now(peer, data, t.data.length, tag)) {
                --r.outstanding;
                continue;
            }
            // The handler holds the group; the group holds `r` at the head
            // of its queue until every transfer of `r` has completed.
            const auto done = [&] {
                return transfer_done{shared_from_this(), &r, t.data.length, t.send};
            };
            std::size_t length = 0;
            if (t.send) {
                fabric_->send(peer, data, t.data.length, tag, done());
            } else if (fabric_->recv_now(peer, data, t.data.length, tag, done, length)) {
                if (length != t.data.length && !r.ec) [[unlikely]]
                    r.ec = make_error_code(error::collective_mismatch);
                --r.outstanding;
            }
        }
        // The others complete later, never inside the calls that started
        // them: the last one goes on.
        if (r.outstanding > 0)
            return;
        if (r.ec) [[unlikely]]
            return finish(r, r.ec);
        finish_round(r, rd);
    }
    if (in_start && (initiating_ || ++chained_ > max_chained))
        return defer_finish(r);
    finish(r, {});
}

void group_impl::defer_finish(running& r) {
    worker_impl& w = *fabric_->worker();
    using op_type = handler_operation<deferred_end, worker_core::executor_type, error_result<>>;
    operation* op = op_type::create(deferred_end{shared_from_this(), &r}, w.get_executor(),
                                    w.operation_pool(w.running_in_owner()));
    w.start(op);
    w.complete(op, {});
}

void group_impl::transfer_done::operator()(error_code ec, std::size_t n) {
    running& r = *run;
    if (!ec && !send && n != expected)
        ec = make_error_code(error::collective_mismatch);
    if (ec) [[unlikely]] {
        if (ec == errc::message_truncated)
            ec = make_error_code(error::collective_mismatch);
        if (!r.ec)
            r.ec = ec;
    }
    if (--r.outstanding > 0)
        return;
    if (r.ec)
        return self->finish(r, r.ec);
    self->finish_round(r, r.plan->rounds[r.round]);
    self->run_round(r, false);
}

void group_impl::combine_and_copy(running& r, const coll::round& rd) {
    if (!rd.combines.empty()) {
        const std::size_t es = coll::element_size(r.args.type);
        for (const auto& c : rd.combines)
            coll::reduce_elements(r.args.type, r.args.op, region_ptr(r, c.lower),
                                  region_ptr(r, c.higher), region_ptr(r, c.out), c.out.length / es);
    }
    for (const auto& c : rd.copies)
        if (c.from.length > 0)
            std::memmove(region_ptr(r, c.to), region_ptr(r, c.from), c.from.length);
}

void group_impl::finish(running& r, error_code ec) {
    if (ec) {
        // No partial result: the group is unusable after a failed collective.
        if (!fabric_->failed())
            fabric_->fail(ec == error::group_timeout ? ec : make_error_code(error::group_failed));
        if (ec != error::collective_mismatch)
            ec = error_ ? error_ : fabric_->failed();
        if (r.local_error)
            ec = r.local_error;
    }
    run_ptr done = queue_.pop_front(); // `r`
    recycle(r);
    release_plan(r);
    auto h = std::move(r.handler);
    if (!ec && r.device_out) {
        stage_out(std::move(done), std::move(h));
        return start_next();
    }
    const bool direct = r.args.direct_handler;
    // Kept before the handler runs: the collective it starts reuses it.
    keep_running(std::move(done));
    if (initiating_)
        boost::asio::post(executor(), boost::asio::append(std::move(h), ec));
    else if (direct)
        std::move(h)(ec); // what dispatch would do, without its type-erased trip
    else
        boost::asio::dispatch(boost::asio::append(std::move(h), ec));
    start_next();
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
    } else if (device_out && a.kind == collective_args::broadcast && a.root == rank_) {
        from = r.device_out;
        bytes = r.device_out_bytes;
        to = r.host_out.data();
    }
    if (!from)
        return;
    r.ready = false;
    s.copy_through(
        staging_direction::outgoing, from, bytes,
        [to](void* host, std::size_t n, staging_operation::transfer_completion done) {
            std::memcpy(to, host, n);
            done(error_code(), n);
        },
        [self = shared_from_this(), r = &r](const error_code& ec) { self->input_ready(r, ec); });
}

void group_impl::input_ready(running* r, const error_code& ec) {
    r->ready = true;
    if (ec) {
        group_log(log::severity::warning, "group: collective ", r->seq,
                  ": copying device input failed: ", ec.message());
        r->local_error = ec;
    }
    if (!busy_ && !queue_.empty() && &queue_.front() == r)
        start_next();
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
