// Internal: starting an operation of an implementation object.
//
// The public templates need only forward declarations of the implementation
// classes: the worker's executor and its "am I on the owner thread" test live
// in `worker_core`, a small base of the worker's implementation whose members
// are inline, and everything else is a non-template function of the library.
#pragma once

#include <ucx/detail/block_pool.hpp>
#include <ucx/detail/operation.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>

#include <boost/asio/io_context.hpp>

#include <atomic>

#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ucx::detail {

class worker_impl;
class endpoint_impl;
class listener_impl;
class stream_impl;
class address_acceptor_impl;

class worker_core;

/// The worker whose progress pass runs on this thread now, where that
/// worker's executor is a plain io_context executor (set by the pass), or
/// null. The handlers a pass delivers start most operations: they find
/// their worker here with one read, rather than through Asio's walk of the
/// thread's call stack.
inline constinit thread_local const worker_core* pass_on_this_thread = nullptr;

/// What initiating an operation needs of a worker: its executor, and whether
/// the calling thread runs it now (then the operation is submitted at once).
class worker_core {
public:
    using executor_type = boost::asio::any_io_executor;

    worker_core(const worker_core&) = delete;
    worker_core& operator=(const worker_core&) = delete;

    const executor_type& get_executor() const noexcept { return executor_; }

    /// Whether the calling thread runs the worker's executor now (known only
    /// for a plain io_context executor; false otherwise).
    bool running_in_owner() const noexcept {
        return pass_on_this_thread == this ||
               (native_executor_ && native_executor_->running_in_this_thread());
    }

    /// Submissions started outside the executor and queued to it, not run
    /// yet: a spinning progress pass yields to let them in. (One left by a
    /// submission destroyed unrun, with its io_context, is harmless.)
    bool submissions_queued() const noexcept {
        return queued_.load(std::memory_order_relaxed) != 0;
    }
    void submission_queued() noexcept { queued_.fetch_add(1, std::memory_order_relaxed); }
    void submission_runs() noexcept { queued_.fetch_sub(1, std::memory_order_relaxed); }

    /// The pool of operation states, for an operation started on the
    /// worker's thread (`running_in_owner()`); null for one started on
    /// another thread.
    block_pool* operation_pool(bool in_owner) noexcept { return in_owner ? &pool_ : nullptr; }

protected:
    explicit worker_core(const executor_type& ex)
        : executor_(ex),
          native_executor_(executor_.target<boost::asio::io_context::executor_type>()) {}
    ~worker_core() = default;

    executor_type executor_;
    /// executor_'s target when it is a plain io_context executor.
    const boost::asio::io_context::executor_type* native_executor_ = nullptr;
    std::atomic<unsigned> queued_{0};
    /// Declared last: destroyed after whatever the derived worker destroys.
    block_pool pool_;
};

/// The worker an object belongs to (defined beside each implementation class in lib/).
worker_core& core_of(worker_impl& w) noexcept;
worker_core& core_of(const endpoint_impl& ep) noexcept;
worker_core& core_of(const listener_impl& l) noexcept;
worker_core& core_of(const stream_impl& s) noexcept;
worker_core& core_of(const address_acceptor_impl& a) noexcept;

/// Cancels an operation from its cancellation slot, for the cancellation
/// types it supports (lib/engine/worker.cpp).
void cancel(operation* op, boost::asio::cancellation_type type) noexcept;

/// Installed in a handler's cancellation slot.
class operation_canceller {
public:
    explicit operation_canceller(operation* op) noexcept : op_(op) {}
    void operator()(boost::asio::cancellation_type type) const noexcept {
        using ct = boost::asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none)
            return;
        if (op_->owner)
            cancel(op_, type);
        else
            op_->cancel_requested = true; // not yet submitted
    }

private:
    operation* op_;
};

/// Owns an operation on its way to the worker's executor until its submit
/// function takes it. A dispatched submission that never runs (its
/// io_context stopped for good and destroyed) destroys the operation and its
/// handler, as Asio destroys the handlers it never ran: nothing leaks.
template <class Op>
class submission {
public:
    explicit submission(Op* op) noexcept : op_(op) {}
    submission(submission&& other) noexcept : op_(std::exchange(other.op_, nullptr)) {}
    submission& operator=(submission&&) = delete;
    ~submission() {
        if (op_)
            op_->complete(operation::delivery::destroy);
    }
    Op* release() noexcept { return std::exchange(op_, nullptr); }

private:
    Op* op_;
};

/// The one way an operation started on another thread reaches the worker's
/// executor: `run()` dispatched there, counted as a queued submission until
/// it runs (a spinning progress pass yields to let it in).
template <class Run>
void dispatch_to_worker(worker_core& w, Run&& run) {
    w.submission_queued();
    boost::asio::dispatch(w.get_executor(), [w = &w, run = std::forward<Run>(run)]() mutable {
        w->submission_runs();
        run();
    });
}

/// Carries a cancellation across the dispatch of a start to another thread:
/// the handler's slot is taken over at initiation, so that a cancellation
/// emitted between the initiating call and the start (which connects the
/// operation's own handler to the slot) is kept and delivered as soon as the
/// operation has started, as Asio's contract wants.
class cancellation_relay {
public:
    boost::asio::cancellation_slot slot() noexcept { return signal_.slot(); }
    void emit(boost::asio::cancellation_type type) {
        {
            std::lock_guard lock(mutex_);
            if (!started_) {
                pending_ |= type;
                return;
            }
        }
        signal_.emit(type);
    }
    void started() {
        boost::asio::cancellation_type type;
        {
            std::lock_guard lock(mutex_);
            started_ = true;
            type = std::exchange(pending_, boost::asio::cancellation_type::none);
        }
        if (type != boost::asio::cancellation_type::none)
            signal_.emit(type);
    }

private:
    std::mutex mutex_;
    boost::asio::cancellation_signal signal_;
    boost::asio::cancellation_type pending_ = boost::asio::cancellation_type::none;
    bool started_ = false;
};

/// A handler whose cancellation slot is a relay's (none when the original
/// handler had none); its other associations are the original handler's.
/// It owns the relay, whose signal its slot belongs to.
template <class Handler>
struct relayed_handler {
    using cancellation_slot_type = boost::asio::cancellation_slot;

    std::shared_ptr<cancellation_relay> relay;
    Handler handler;

    cancellation_slot_type get_cancellation_slot() const noexcept {
        return relay ? relay->slot() : cancellation_slot_type();
    }
    template <class... Args>
    void operator()(Args&&... args) {
        const auto keep = std::move(relay); // its signal outlives the call
        std::move(handler)(std::forward<Args>(args)...);
    }
};

template <class T>
inline constexpr bool is_any_completion_handler = false;
template <class... Signatures>
inline constexpr bool
    is_any_completion_handler<boost::asio::any_completion_handler<Signatures...>> = true;

/// `h`, with its cancellation slot relayed through `relay` (made here when
/// the slot is connected). A type-erased handler stays of its type.
template <class Handler>
auto relay_cancellation(Handler&& h, std::shared_ptr<cancellation_relay>& relay) {
    using H = std::decay_t<Handler>;
    auto slot = boost::asio::get_associated_cancellation_slot(h);
    if (slot.is_connected()) {
        relay = std::make_shared<cancellation_relay>();
        slot.assign([r = relay](boost::asio::cancellation_type type) { r->emit(type); });
    }
    if constexpr (is_any_completion_handler<H>) {
        if (!relay)
            return H(std::forward<Handler>(h));
        return H(relayed_handler<H>{relay, std::forward<Handler>(h)});
    } else {
        return relayed_handler<H>{relay, std::forward<Handler>(h)};
    }
}

/// Decayed copies of `args`, the last one (the handler) with its
/// cancellation relayed.
template <class... Args>
auto saved_for_dispatch(std::shared_ptr<cancellation_relay>& relay, Args&&... args) {
    auto all = std::forward_as_tuple(std::forward<Args>(args)...);
    constexpr std::size_t last = sizeof...(Args) - 1;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::make_tuple(
            std::decay_t<std::tuple_element_t<I, std::tuple<Args...>>>(
                std::forward<std::tuple_element_t<I, std::tuple<Args...>>>(std::get<I>(all)))...,
            relay_cancellation(
                std::forward<std::tuple_element_t<last, std::tuple<Args...>>>(std::get<last>(all)),
                relay));
    }
    (std::make_index_sequence<last>());
}

/// Calls `start(args...)` on the worker's executor, as the core's operations
/// start: at once when the calling thread runs it (the arguments passed
/// through, nothing copied), else dispatched to it with decayed copies
/// (`dispatch_to_worker`). The arguments hold what keeps `w` alive. The
/// layers above the core (groups, NCCL communicators) start through it.
template <class Start, class... Args>
void start_on_worker(worker_core& w, Start start, Args&&... args) {
    if (w.running_in_owner())
        return start(std::forward<Args>(args)...);
    std::shared_ptr<cancellation_relay> relay;
    auto saved = saved_for_dispatch(relay, std::forward<Args>(args)...);
    dispatch_to_worker(w, [start, saved = std::move(saved), relay = std::move(relay)]() mutable {
        std::apply(start, std::move(saved));
        if (relay)
            relay->started();
    });
}

/// Calls `start(args...)` on `ex`, for objects with an executor and no
/// worker (stores): at once when the calling thread runs `ex` (known for a
/// plain io_context executor), else dispatched to it with decayed copies
/// (Asio's dispatch, which runs it at once where `ex` says the calling
/// thread is its own).
template <class Start, class... Args>
void start_on_executor(const boost::asio::any_io_executor& ex, Start start, Args&&... args) {
    if (const auto* io = ex.target<boost::asio::io_context::executor_type>();
        io && io->running_in_this_thread())
        return start(std::forward<Args>(args)...);
    std::shared_ptr<cancellation_relay> relay;
    auto saved = saved_for_dispatch(relay, std::forward<Args>(args)...);
    boost::asio::dispatch(ex,
                          [start, saved = std::move(saved), relay = std::move(relay)]() mutable {
                              std::apply(start, std::move(saved));
                              if (relay)
                                  relay->started();
                          });
}

/// Allocates the operation for `handler`, connects its cancellation slot, and
/// runs `submit(op)` on the worker's executor (at once when already there).
template <class Result, class Handler, class Submit>
void start_operation(Handler&& handler, worker_core& w, Submit&& submit) {
    using op_type = handler_operation<std::decay_t<Handler>, worker_core::executor_type, Result>;
    const bool in_owner = w.running_in_owner();
    auto* op = op_type::create(std::move(handler), w.get_executor(), w.operation_pool(in_owner));
    auto slot = boost::asio::get_associated_cancellation_slot(op->handler());
    if (slot.is_connected())
        slot.template emplace<operation_canceller>(op);
    if (in_owner)
        return submit(op);
    dispatch_to_worker(
        w, [pending = submission<op_type>(op), submit = std::forward<Submit>(submit)]() mutable {
            submit(pending.release());
        });
}

/// Allocates the operation for `handler`, connects its cancellation slot, and
/// runs `submit(*target, op)` on the worker's executor: at once when already
/// there (without copying `target`), else dispatched with a copy of it.
///
/// `target` may live inside `handler` (a composed operation passing its own
/// member): everything needed from it is taken before `handler` is moved.
template <class Result, class Handler, class Target, class Submit>
void start_target_operation(Handler&& handler, worker_core& w,
                            const std::shared_ptr<Target>& target, const Submit& submit) {
    using op_type = handler_operation<std::decay_t<Handler>, worker_core::executor_type, Result>;
    if (w.running_in_owner()) {
        // The handler, now inside the operation, keeps whatever owns *t.
        Target* t = target.get();
        auto* op = op_type::create(std::move(handler), w.get_executor(), w.operation_pool(true));
        auto slot = boost::asio::get_associated_cancellation_slot(op->handler());
        if (slot.is_connected())
            slot.template emplace<operation_canceller>(op);
        submit(*t, op);
        return;
    }
    std::shared_ptr<Target> keep = target;
    auto* op = op_type::create(std::move(handler), w.get_executor(), w.operation_pool(false));
    auto slot = boost::asio::get_associated_cancellation_slot(op->handler());
    if (slot.is_connected())
        slot.template emplace<operation_canceller>(op);
    dispatch_to_worker(w, [pending = submission<op_type>(op), keep = std::move(keep),
                           submit]() mutable { submit(*keep, pending.release()); });
}

/// async_initiate for an operation of the object `target` (an endpoint,
/// worker or listener implementation) of the worker `w`: `submit(target, op)`
/// runs on the worker's executor. `target` stays alive until then (a deferred
/// initiation, such as a coroutine's, holds its own copy).
template <class Signature, class Result, class Target, class CompletionToken, class Submit>
auto initiate(const std::shared_ptr<Target>& target, worker_core& w, CompletionToken&& token,
              Submit submit) {
    return boost::asio::async_initiate<CompletionToken, Signature>(
        [](auto&& handler, const std::shared_ptr<Target>& target, worker_core* w,
           const Submit& submit) {
            start_target_operation<Result>(std::forward<decltype(handler)>(handler), *w, target,
                                           submit);
        },
        token, target, &w, std::move(submit));
}

/// As above, for the worker that `target` belongs to.
template <class Signature, class Result, class Target, class CompletionToken, class Submit>
auto initiate(const std::shared_ptr<Target>& target, CompletionToken&& token, Submit submit) {
    return initiate<Signature, Result>(target, core_of(*target),
                                       std::forward<CompletionToken>(token), std::move(submit));
}

} // namespace ucx::detail

namespace boost::asio {
/// `relayed_handler` has the associations of the handler it wraps, but for
/// its cancellation slot (its own member).
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, ucx::detail::relayed_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type
    get(const ucx::detail::relayed_handler<Handler>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const ucx::detail::relayed_handler<Handler>& h,
                    const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};
} // namespace boost::asio
