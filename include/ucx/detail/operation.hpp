// Internal: one UCX request as an Asio asynchronous operation.
//
// Every ucp_*_nbx call of the library goes through this: the state is
// allocated with the handler's associated allocator (by default the worker's
// pool of operation states, on the worker's thread, so the steady state
// allocates nothing however many operations are in flight), UCX's callback
// only records the result and queues the operation on its worker, and the
// worker delivers it after ucp_worker_progress returned; user handlers never
// run inside a UCX callback, and never inside the initiating function.
#pragma once

#include <ucx/detail/block_pool.hpp>
#include <ucx/error.hpp>
#include <ucx/metrics.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ucx::detail {

/// A fallback executor type of the library's own, which no handler names.
struct executor_probe {};

/// Whether `Handler` has no executor of its own (it runs on the I/O
/// object's): asked with a fallback that only such a handler gets back, a
/// question of Asio's public associator alone.
template <class Handler>
inline constexpr bool has_no_own_executor =
    std::is_same_v<boost::asio::associated_executor_t<Handler, executor_probe>, executor_probe>;

class worker_impl;
class endpoint_impl;
class remote_key_impl;
class tag_receiver_impl;
struct am_message_state;
struct kind_counters;

/// The type-erased base of every operation: its links in its worker's lists,
/// its status, how it completes and how it is cancelled. What an operation
/// produces lives in its kind (below), so no field changes meaning with the
/// caller.
class operation {
public:
    /// How a finished operation is handed to its handler.
    enum class delivery { dispatch, post, destroy };

    operation(const operation&) = delete;
    operation& operator=(const operation&) = delete;

    /// Hands the result to the handler (or just frees the state).
    void complete(delivery d) { complete_fn_(this, d); }

    /// UCX's status, filled by a UCX callback or an immediate completion.
    ucs_status_t status = UCS_INPROGRESS;
    /// The UCX request while in flight (null for immediate completions).
    void* request = nullptr;
    /// Set when the library completed it itself; overrides `status`.
    error_code error{};
    /// Why UCX may fail or cancel it (its endpoint failed or closed): reported
    /// instead of UCX's status if that is not success.
    error_code reason{};
    worker_impl* owner = nullptr;
    /// The endpoint whose failure must fail this operation (sends, per-endpoint
    /// receives, waits); null for worker-wide receives.
    endpoint_impl* endpoint = nullptr;
    /// A second set of counts of its kind that its end is counted in too,
    /// beside its worker's (its endpoint's); null for none.
    kind_counters* counted_in = nullptr;
    /// How to cancel a library-owned operation (from a cancellation slot,
    /// with Asio's cancellation type), and the object that hook works on.
    void (*cancel_hook)(operation*, boost::asio::cancellation_type) = nullptr;
    void* cancel_context = nullptr;
    /// Whether ucp_request_cancel applies (tag receives).
    bool cancellable = false;
    /// Cancellation was requested before the request reached UCX.
    bool cancel_requested = false;
    /// The worker was shut down under it: report operation_aborted.
    bool aborted = false;
    /// Linked in its worker's in-flight list.
    bool in_flight = false;
    /// A standing wait that may never complete (an accept, an endpoint's
    /// error watch, a group's receive of the abort notice): it does not keep
    /// a `poll` worker spinning.
    bool background = false;
    /// No UCX request behind it: the library itself completes it (accept,
    /// connect, stream reads, active-message receives); shutdown completes it.
    bool library_owned = false;
    /// A graceful close: the peer being gone already is not an error.
    bool ignore_peer_errors = false;
    /// A send counted in its endpoint's sends in flight.
    bool counted_send = false;
    /// What it does, for the worker's metrics (set by the function that
    /// starts it; the library's own waits stay `other`).
    operation_kind kind = operation_kind::other;
    /// A send the library held back (a device buffer being staged) that was
    /// made before its endpoint's graceful close began: the close, which
    /// waits for it, lets it through.
    bool held_send = false;
    /// `request` is memory of the worker's own (a tag receive's), given back
    /// to the worker when the operation is delivered, not to ucp_request_free.
    bool owns_request = false;

    /// When it started (in the ticks of the worker's latency clock), where
    /// the worker measures latencies (`worker_options::latency_histograms`)
    /// and drew it to be measured; `not_measured` where it did not, 0 until
    /// it started.
    std::int64_t started_at = 0;
    static constexpr std::int64_t not_measured = -1;

    // Intrusive links: in-flight list, then completion queue.
    operation* next = nullptr;
    operation* prev = nullptr;

    [[gnu::always_inline]] error_code result_code() const noexcept {
        // Success returns a copy of `error`, empty then (only
        // `worker_impl::complete` sets it, and only to a failure), rather
        // than a code built here: the compiler builds an empty error_code
        // with three 8-byte stores and then copies it into the handler's
        // arguments with a 16-byte load, which the processor cannot forward
        // from those stores and stalls on (measured: a fifth of the
        // receiving side's time in an 8 B message-rate test). A copy of a
        // member written long before moves the same width in and out.
        if (status == UCS_OK && !aborted && !error) [[likely]]
            return error;
        return failure_code();
    }

private:
    /// `result_code` when it is not success (out of line: rare).
    [[gnu::noinline]] error_code failure_code() const noexcept {
        if (aborted)
            return make_error_code(UCS_ERR_CANCELED);
        if (error)
            return error;
        if (ignore_peer_errors)
            return {};
        if (status != UCS_OK && reason)
            return reason;
        return make_error_code(status);
    }

protected:
    using complete_fn_type = void (*)(operation*, delivery);
    explicit operation(complete_fn_type fn) noexcept : complete_fn_(fn) {}
    ~operation() = default;

private:
    complete_fn_type complete_fn_;
};

// ---- the kinds of operation: each adds what it produces or keeps ----

/// Moves bytes (sends, stream reads): how many.
struct transfer_op : operation {
    using operation::operation;
    std::size_t bytes = 0;
    /// A failure still reports `bytes` (a stream operation staged through
    /// host memory that failed after part of it went through).
    bool partial_on_error = false;
};

/// Whether operations of kind `k` are `transfer_op`s whose `bytes` say what
/// they moved (every kind that moves bytes but active-message receives,
/// whose data the registry counts).
constexpr bool counts_transfer_bytes(operation_kind k) noexcept {
    constexpr auto bit = [](operation_kind x) { return 1u << static_cast<unsigned>(x); };
    constexpr unsigned kinds = bit(operation_kind::tag_send) | bit(operation_kind::tag_recv) |
                               bit(operation_kind::am_send) | bit(operation_kind::stream_write) |
                               bit(operation_kind::stream_read) | bit(operation_kind::put) |
                               bit(operation_kind::get);
    return (kinds >> static_cast<unsigned>(k)) & 1u;
}

/// A tag receive (worker-wide or per endpoint): the size and tag received.
struct tag_recv_op : transfer_op {
    using transfer_op::transfer_op;
    ucp_tag_t sender_tag = 0;
};

/// A tag_receiver's receive: the batch it hands out, `count` slots chained
/// from `first` (`bytes`: their messages' bytes), and the receiver the
/// batch keeps alive.
struct tag_batch_op : transfer_op {
    using transfer_op::transfer_op;
    std::shared_ptr<tag_receiver_impl> owner;
    std::uint32_t first = 0;
    std::uint32_t count = 0;
};

/// A put or a get: the remote key stays alive until UCX is done with it.
struct rma_op : transfer_op {
    using transfer_op::transfer_op;
    std::shared_ptr<remote_key_impl> key;
};

/// An atomic: the remote key, and the buffer UCX writes the old value into.
struct atomic_op : operation {
    using operation::operation;
    std::shared_ptr<remote_key_impl> key;
    std::uint64_t value = 0;
};

/// An active-message send: the IOV array and the header copy UCX reads until
/// the send completes (small ones inline, larger ones on the heap).
class am_send_op : public transfer_op {
public:
    using transfer_op::transfer_op;

    /// Returns `n` bytes of storage, aligned for `ucp_dt_iov_t`.
    void* storage(std::size_t n) {
        if (n <= sizeof(inline_storage_))
            return inline_storage_;
        heap_storage_.reset(new std::byte[n]);
        return heap_storage_.get();
    }

private:
    alignas(std::max_align_t) std::byte inline_storage_[64];
    std::unique_ptr<std::byte[]> heap_storage_;
};

/// An active-message receive: the id, the sender it is bound to (or null),
/// and the message handed to it.
struct am_recv_op : operation {
    using operation::operation;
    unsigned id = 0;
    const endpoint_impl* from = nullptr;
    am_message_state* message = nullptr;
};

/// A connect, an accept or an endpoint close: the endpoint it produces (or
/// closes, kept alive until the close completes).
struct endpoint_op : operation {
    using operation::operation;
    std::shared_ptr<endpoint_impl> subject;
};

/// Most buffers of a sequence one stream write takes (like writev).
inline constexpr std::size_t stream_max_buffers = 64;

/// A stream write: its buffers as the IOV array UCX reads until the send
/// completes, inline (no allocation for any buffer sequence).
struct stream_write_op : transfer_op {
    using transfer_op::transfer_op;
    ucp_dt_iov_t iov[stream_max_buffers];
    std::size_t count = 0;
};

/// The allocator an operation uses: the handler's, or else the worker's pool
/// (`pool`; null where the operation starts on another thread: then Asio's
/// recycling allocator).
template <class Handler>
auto operation_allocator(const Handler& h, block_pool* pool) {
    return boost::asio::get_associated_allocator(h, pool_allocator<void>(pool));
}

/// An operation bound to its handler. `Result::op_type` is its kind, and
/// `Result::extract(ec, op)` turns the kind's fields into the tuple the
/// handler is called with.
template <class Handler, class IoExecutor, class Result>
class handler_operation final : public Result::op_type {
    using base_type = typename Result::op_type;
    using delivery = operation::delivery;

public:
    using alloc_type = typename std::allocator_traits<decltype(operation_allocator(
        std::declval<Handler&>(), nullptr))>::template rebind_alloc<handler_operation>;

    /// Allocates an operation with the handler's allocator, or from `pool`
    /// (see operation_allocator).
    static handler_operation* create(Handler&& h, const IoExecutor& io_ex, block_pool* pool) {
        alloc_type alloc(operation_allocator(h, pool));
        handler_operation* p = std::allocator_traits<alloc_type>::allocate(alloc, 1);
        try {
            return new (p) handler_operation(std::move(h), io_ex, pool);
        } catch (...) {
            std::allocator_traits<alloc_type>::deallocate(alloc, p, 1);
            throw;
        }
    }

    Handler& handler() noexcept { return handler_; }

private:
    using handler_executor_type = boost::asio::associated_executor_t<Handler, IoExecutor>;
    using handler_work_type = std::decay_t<decltype(boost::asio::prefer(
        std::declval<const handler_executor_type&>(),
        boost::asio::execution::outstanding_work.tracked))>;
    /// Whether the handler may run on the worker's own executor (decided at
    /// run time unless it has no executor of its own).
    static constexpr bool maybe_own_executor = std::is_same_v<handler_executor_type, IoExecutor>;
    /// No work guard: a handler with no executor of its own runs on the
    /// worker's (an empty member, which costs nothing to move).
    struct no_work {
        explicit operator bool() const noexcept { return false; }
    };
    /// The work guard of the handler's executor: always there for a handler
    /// with an executor of another type, none for a handler with no executor
    /// of its own, optional otherwise.
    using work_holder = std::conditional_t<!maybe_own_executor, handler_work_type,
                                           std::conditional_t<has_no_own_executor<Handler>, no_work,
                                                              std::optional<handler_work_type>>>;

    static work_holder make_work(const Handler& h, const IoExecutor& io_ex) {
        // A handler that runs on the worker's own executor needs no work
        // guard: the worker keeps a wait on its event fd (or a pass) queued on
        // that executor for as long as it is open, and an aborted operation is
        // delivered by post, which is work itself. Any other executor is told
        // about the pending handler, as Asio's own operations do.
        if constexpr (!maybe_own_executor) {
            return boost::asio::prefer(boost::asio::get_associated_executor(h, io_ex),
                                       boost::asio::execution::outstanding_work.tracked);
        } else if constexpr (has_no_own_executor<Handler>) {
            return no_work{}; // no executor of its own: the worker's
        } else {
            auto ex = boost::asio::get_associated_executor(h, io_ex);
            if (ex == io_ex)
                return std::nullopt;
            return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
        }
    }

    handler_operation(Handler&& h, const IoExecutor& io_ex, block_pool* pool)
        : base_type(&do_complete), handler_(std::move(h)), io_ex_(&io_ex), pool_(pool),
          handler_work_(make_work(handler_, io_ex)) {}

    static void do_complete(operation* base, delivery d) {
        auto* self = static_cast<handler_operation*>(base);
        // Move everything out, then free the state before the upcall, so the
        // handler may start a new operation that reuses this memory.
        boost::asio::get_associated_cancellation_slot(self->handler_).clear();
        Handler handler(std::move(self->handler_));
        // The work guard lives until the handler is dispatched or posted.
        work_holder handler_work(std::move(self->handler_work_));
        [[maybe_unused]] const IoExecutor& io_ex = *self->io_ex_;
        const error_code ec = self->result_code();
        auto args = Result::extract(ec, *self);
        alloc_type alloc(operation_allocator(handler, self->pool_));
        self->~handler_operation();
        std::allocator_traits<alloc_type>::deallocate(alloc, self, 1);

        if (d == delivery::destroy)
            return;
        if constexpr (maybe_own_executor) {
            if (!handler_work && d == delivery::dispatch) [[likely]] {
                // The handler's executor is the worker's. Only passes deliver
                // by dispatch, and a pass runs on the worker's executor: do
                // what dispatch would, without the type-erased trip through
                // it, and call the handler where it is.
                std::apply(std::move(handler), std::move(args));
                return;
            }
        }
        auto bound = [handler = std::move(handler), args = std::move(args)]() mutable {
            std::apply(std::move(handler), std::move(args));
        };
        if constexpr (maybe_own_executor) {
            if (!handler_work) {
                boost::asio::post(io_ex, std::move(bound));
                return;
            }
            if constexpr (!has_no_own_executor<Handler>) {
                if (d == delivery::post)
                    boost::asio::post(*handler_work, std::move(bound));
                else
                    boost::asio::dispatch(*handler_work, std::move(bound));
            }
        } else {
            if (d == delivery::post)
                boost::asio::post(handler_work, std::move(bound));
            else
                boost::asio::dispatch(handler_work, std::move(bound));
        }
    }

    Handler handler_;
    /// The worker's executor (the worker outlives its operations' delivery).
    const IoExecutor* io_ex_;
    /// Where the state came from when the handler has no allocator.
    block_pool* pool_;
    [[no_unique_address]] work_holder handler_work_;
};

} // namespace ucx::detail
