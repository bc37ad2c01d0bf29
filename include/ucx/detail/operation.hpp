// Internal: one UCX request as an Asio asynchronous operation.
//
// Every ucp_*_nbx call of the library goes through this: the state is
// allocated with the handler's associated allocator (Asio's recycling
// allocator by default, so the steady state allocates nothing), UCX's callback
// only records the result and queues the operation on its worker, and the
// worker delivers it after ucp_worker_progress returned; user handlers never
// run inside a UCX callback, and never inside the initiating function.
#pragma once

#include <ucx/error.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
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

class worker_impl;
class endpoint_impl;

/// The type-erased part of every operation; linked into its worker's lists.
class operation {
public:
    /// How a finished operation is handed to its handler.
    enum class delivery { dispatch, post, destroy };

    operation(const operation&) = delete;
    operation& operator=(const operation&) = delete;

    /// Hands the result to the handler (or just frees the state).
    void complete(delivery d) { complete_fn_(this, d); }

    // Result, filled by UCX callbacks or by an immediate completion.
    ucs_status_t status = UCS_INPROGRESS;
    std::size_t bytes = 0;
    ucp_tag_t sender_tag = 0;
    /// An atomic operation's reply buffer (UCX writes the old value here).
    std::uint64_t value = 0;
    /// The UCX request while in flight (null for immediate completions).
    void* request = nullptr;
    /// Whether ucp_request_cancel applies (tag receives).
    bool cancellable = false;
    /// Cancellation was requested before the request reached UCX.
    bool cancel_requested = false;
    /// The worker was shut down under it: report operation_aborted.
    bool aborted = false;
    /// Linked in its worker's in-flight list.
    bool in_flight = false;
    /// Set when the operation failed without reaching UCX; overrides `status`.
    error_code error{};
    /// Why UCX may fail or cancel it (its endpoint failed or closed): reported
    /// instead of UCX's status if that is not success.
    error_code reason{};
    worker_impl* owner = nullptr;
    /// The endpoint whose failure must fail this operation (sends, per-endpoint
    /// receives, waits); null for worker-wide receives.
    endpoint_impl* endpoint = nullptr;
    /// No UCX request behind it: the library itself completes it (accept,
    /// connect); shutdown completes it at once.
    bool library_owned = false;
    /// How to cancel a library-owned operation (from a cancellation slot),
    /// and the object that hook works on.
    void (*cancel_hook)(operation*) = nullptr;
    void* hook_context = nullptr;
    /// The object an operation produces (an endpoint for accept and connect).
    std::shared_ptr<void> payload;
    /// A graceful close: the peer being gone already is not an error.
    bool ignore_peer_errors = false;
    /// A send counted in its endpoint's sends in flight.
    bool counted_send = false;
    /// Memory UCX reads until the operation completes (an AM header copy, an
    /// IOV array): small needs fit inline, larger ones go to the heap.
    alignas(std::max_align_t) std::byte inline_storage[64];
    std::unique_ptr<std::byte[]> heap_storage;
    /// Returns `n` bytes of that storage.
    void* storage(std::size_t n) {
        if (n <= sizeof(inline_storage))
            return inline_storage;
        heap_storage.reset(new std::byte[n]);
        return heap_storage.get();
    }
    /// Type-erased extra state of an operation (an active message received).
    void* message = nullptr;

    // Intrusive links: in-flight list, then completion queue.
    operation* next = nullptr;
    operation* prev = nullptr;

    error_code result_code() const noexcept {
        if (status == UCS_OK && !aborted && !error)
            return {};
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

/// The allocator an operation uses: the handler's, or Asio's recycling one.
template <class Handler>
auto operation_allocator(const Handler& h) {
    return boost::asio::get_associated_allocator(h, boost::asio::recycling_allocator<void>());
}

/// An operation bound to its handler. `Result` turns the operation's fields
/// into the handler's arguments: `Result::extract(ec, op)` returns the tuple
/// the handler is called with.
template <class Handler, class IoExecutor, class Result>
class handler_operation final : public operation {
public:
    using alloc_type = typename std::allocator_traits<decltype(operation_allocator(
        std::declval<Handler&>()))>::template rebind_alloc<handler_operation>;

    /// Allocates an operation with the handler's allocator.
    static handler_operation* create(Handler&& h, const IoExecutor& io_ex) {
        alloc_type alloc(operation_allocator(h));
        handler_operation* p = std::allocator_traits<alloc_type>::allocate(alloc, 1);
        try {
            return new (p) handler_operation(std::move(h), io_ex);
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
    /// The work guard of the handler's executor: always there for a handler
    /// with an executor of another type, optional otherwise.
    using work_holder =
        std::conditional_t<maybe_own_executor, std::optional<handler_work_type>, handler_work_type>;

    static work_holder make_work(const Handler& h, const IoExecutor& io_ex) {
        // A handler that runs on the worker's own executor needs no work
        // guard: the worker keeps a wait on its event fd (or a pass) queued on
        // that executor for as long as it is open, and an aborted operation is
        // delivered by post, which is work itself. Any other executor is told
        // about the pending handler, as Asio's own operations do.
        if constexpr (!maybe_own_executor) {
            return boost::asio::prefer(boost::asio::get_associated_executor(h, io_ex),
                                       boost::asio::execution::outstanding_work.tracked);
        } else if constexpr (requires {
                                 typename boost::asio::associated_executor<Handler, IoExecutor>::
                                     asio_associated_executor_is_unspecialised;
                             }) {
            return std::nullopt; // no executor of its own: the worker's
        } else {
            auto ex = boost::asio::get_associated_executor(h, io_ex);
            if (ex == io_ex)
                return std::nullopt;
            return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
        }
    }

    handler_operation(Handler&& h, const IoExecutor& io_ex)
        : operation(&do_complete), handler_(std::move(h)), io_ex_(&io_ex),
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
        alloc_type alloc(operation_allocator(handler));
        self->~handler_operation();
        std::allocator_traits<alloc_type>::deallocate(alloc, self, 1);

        if (d == delivery::destroy)
            return;
        auto bound = [handler = std::move(handler), args = std::move(args)]() mutable {
            std::apply(std::move(handler), std::move(args));
        };
        if constexpr (maybe_own_executor) {
            if (!handler_work) {
                // The handler's executor is the worker's. Only passes deliver
                // by dispatch, and a pass runs on the worker's executor: do
                // what dispatch would, without the type-erased trip through it.
                if (d == delivery::dispatch)
                    bound();
                else
                    boost::asio::post(io_ex, std::move(bound));
                return;
            }
            if (d == delivery::post)
                boost::asio::post(*handler_work, std::move(bound));
            else
                boost::asio::dispatch(*handler_work, std::move(bound));
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
    work_holder handler_work_;
};

} // namespace ucx::detail
