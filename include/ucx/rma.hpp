// One-sided operations on an endpoint: put, get, flush, atomics; and the
// put-then-notify pattern.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/remote_key.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>

#include <concepts>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

namespace ucx {

/// The integer types UCX atomics work on.
template <class T>
concept atomic_operand = std::same_as<T, std::uint32_t> || std::same_as<T, std::uint64_t>;

namespace detail {

using key_ptr = std::shared_ptr<remote_key_impl>;

// Submit functions (lib/rma/rma.cpp). Each begins `op` on `ep`, checks the key
// (present, of this endpoint) and the bounds, and only then calls UCX; a
// failed check completes `op` with the error.
void rma_put(endpoint_impl& ep, rma_op* op, const void* data, std::size_t size,
             std::uint64_t remote_address, const key_ptr& key) noexcept;
void rma_get(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
             std::uint64_t remote_address, const key_ptr& key) noexcept;
void rma_flush(endpoint_impl& ep, operation* op) noexcept;
void rma_flush(worker_impl& w, operation* op) noexcept;
/// `operand` is X of UCX's table; for compare-swap `op->value` holds the new
/// value on entry. `fetch`: report the old value (in `op->value`).
void rma_atomic(endpoint_impl& ep, atomic_op* op, ucp_atomic_op_t opcode, std::uint64_t operand,
                std::size_t size, bool fetch, std::uint64_t remote_address,
                const key_ptr& key) noexcept;

/// The body of `async_put` and `async_get`: `Submit` is `rma_put` or
/// `rma_get` (a template argument, so the call stays direct).
template <auto Submit, class Buffer, class CompletionToken>
auto async_transfer(endpoint& ep, Buffer data, std::uint64_t remote_address, const remote_key& key,
                    CompletionToken&& token) {
    const auto& impl = checked(ep);
    return initiate<void(error_code, std::size_t), bytes_result<rma_op>>(
        impl, std::forward<CompletionToken>(token),
        [data, remote_address, k = access::get_impl(key)](endpoint_impl& e, rma_op* op) {
            Submit(e, op, data.data(), data.size(), remote_address, k);
        });
}

/// An atomic's completion: `(error_code, T old_value)`.
template <class T>
struct atomic_result {
    using op_type = atomic_op;
    static auto extract(const error_code& ec, const atomic_op& op) {
        T v{};
        if (!ec)
            std::memcpy(&v, &op.value, sizeof v);
        return std::tuple<error_code, T>(ec, v);
    }
};

template <class T, class CompletionToken>
auto atomic_fetch(endpoint& ep, ucp_atomic_op_t opcode, std::uint64_t remote_address,
                  const remote_key& key, T operand, T swap_value, CompletionToken&& token) {
    const auto& impl = checked(ep);
    return initiate<void(error_code, T), atomic_result<T>>(
        impl, std::forward<CompletionToken>(token),
        [opcode, remote_address, k = detail::access::get_impl(key), operand,
         swap_value](endpoint_impl& e, atomic_op* op) {
            std::memcpy(&op->value, &swap_value, sizeof swap_value);
            rma_atomic(e, op, opcode, operand, sizeof(T), true, remote_address, k);
        });
}

} // namespace detail

/// Writes `data` to the peer's memory at `remote_address`, inside the region
/// of `key` (which must have been unpacked on `ep`).
///
/// Completion signature: `void(error_code ec, std::size_t bytes_written)`.
/// Completion is local: the buffer may be reused, but the data is visible at
/// the peer only after `async_flush` (or another operation that orders it).
/// The buffer must stay valid until the handler runs.
///
/// Errors, all reported before UCX sees the operation: `key_errc::no_key`
/// (empty key), `key_errc::wrong_endpoint` (key of another endpoint),
/// `ucx::error::out_of_bounds` (any byte outside the key's region). Then the
/// endpoint's errors, as for sends. Cancellation as for sends: UCX cannot
/// cancel RMA, so `terminal` closes the endpoint (`operation_aborted` once
/// UCX has let go of the buffer), `partial` and `total` cancel only before
/// the operation reached UCX.
///
/// A buffer in GPU device memory where UCX cannot move it (docs/guide/gpu.md) is
/// staged through pinned host memory after these checks: one put (or get)
/// per chunk at its offset, with copies from (or to) the device; a failed
/// copy is `ucx::error::cuda_error`. Flush after the put completed.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_put(
    endpoint& ep, boost::asio::const_buffer data, std::uint64_t remote_address,
    const remote_key& key,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return detail::async_transfer<&detail::rma_put>(ep, data, remote_address, key,
                                                    std::forward<CompletionToken>(token));
}

/// Reads the peer's memory at `remote_address` (inside the region of `key`)
/// into `data`.
///
/// Completion signature: `void(error_code ec, std::size_t bytes_read)`; the
/// data is in `data` when the handler runs. Errors as for `async_put`.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_get(
    endpoint& ep, boost::asio::mutable_buffer data, std::uint64_t remote_address,
    const remote_key& key,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return detail::async_transfer<&detail::rma_get>(ep, data, remote_address, key,
                                                    std::forward<CompletionToken>(token));
}

/// Completes once every one-sided operation started on `ep` before it
/// is complete at the peer (`ucp_ep_flush_nbx`): puts are then visible there.
/// Completion signature: `void(error_code ec)`.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_flush(
    endpoint& ep,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return detail::initiate<void(error_code), detail::error_result<>>(
        impl, std::forward<CompletionToken>(token),
        [](detail::endpoint_impl& e, detail::operation* op) { detail::rma_flush(e, op); });
}

/// As above for every endpoint of `w` (`ucp_worker_flush_nbx`).
/// Completion signature: `void(error_code ec)`.
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_flush(worker& w, CompletionToken&& token =
                                boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return detail::initiate<void(error_code), detail::error_result<>>(
        impl, std::forward<CompletionToken>(token),
        [](detail::worker_impl& wi, detail::operation* op) { detail::rma_flush(wi, op); });
}

/// Atomically adds `value` to the 32- or 64-bit integer at `remote_address`
/// (naturally aligned, inside the region of `key`; misaligned:
/// `ucx::error::misaligned_address`). Completion signature: `void(error_code ec)`; like
/// a put, visible at the peer after a flush. With UCX 1.16 and later (their
/// protocol layer on) every atomic completes with
/// `ucx::error::atomics_unsupported` without reaching UCX, and the endpoint
/// stays usable (`context::supports_atomics()`). Other errors as for
/// `async_put`.
template <atomic_operand T,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_atomic_add(
    endpoint& ep, std::uint64_t remote_address, const remote_key& key, T value,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return detail::initiate<void(error_code), detail::error_result<detail::atomic_op>>(
        impl, std::forward<CompletionToken>(token),
        [remote_address, k = detail::access::get_impl(key), value](detail::endpoint_impl& e,
                                                                   detail::atomic_op* op) {
            detail::rma_atomic(e, op, UCP_ATOMIC_OP_ADD, value, sizeof(T), false, remote_address,
                               k);
        });
}

/// Atomically adds `value` to the integer at `remote_address` and reports
/// the value it had before. Completion signature: `void(error_code ec, T old)`.
/// Errors as for `async_atomic_add`.
template <atomic_operand T,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_atomic_fetch_add(
    endpoint& ep, std::uint64_t remote_address, const remote_key& key, T value,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return detail::atomic_fetch<T>(ep, UCP_ATOMIC_OP_ADD, remote_address, key, value, T{},
                                   std::forward<CompletionToken>(token));
}

/// Atomically stores `value` at `remote_address` and reports the value it
/// replaced. Completion signature: `void(error_code ec, T old)`.
/// Errors as for `async_atomic_add`.
template <atomic_operand T,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_atomic_swap(
    endpoint& ep, std::uint64_t remote_address, const remote_key& key, T value,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return detail::atomic_fetch<T>(ep, UCP_ATOMIC_OP_SWAP, remote_address, key, value, T{},
                                   std::forward<CompletionToken>(token));
}

/// Atomically stores `desired` at `remote_address` if it holds `expected`,
/// and reports the value it held (equal to `expected` when the swap
/// happened). Completion signature: `void(error_code ec, T old)`.
/// Errors as for `async_atomic_add`.
template <atomic_operand T,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_atomic_compare_swap(
    endpoint& ep, std::uint64_t remote_address, const remote_key& key, T expected, T desired,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return detail::atomic_fetch<T>(ep, UCP_ATOMIC_OP_CSWAP, remote_address, key, expected, desired,
                                   std::forward<CompletionToken>(token));
}

namespace detail {

/// put, then endpoint flush, then the notification message.
struct put_notify_op {
    std::shared_ptr<endpoint_impl> ep;
    boost::asio::const_buffer data;
    std::uint64_t remote_address;
    key_ptr key;
    boost::asio::const_buffer notification;
    std::uint32_t tag;
    enum { starting, putting, flushing, notifying } state = starting;
    std::size_t written = 0;

    template <class Self>
    void operator()(Self& self, error_code ec = {}, std::size_t n = 0) {
        switch (state) {
        case starting:
            state = putting;
            initiate<void(error_code, std::size_t), bytes_result<rma_op>>(
                ep, std::move(self),
                [d = data, a = remote_address, k = key](endpoint_impl& e, rma_op* op) {
                    rma_put(e, op, d.data(), d.size(), a, k);
                });
            return;
        case putting:
            if (ec)
                return self.complete(ec, 0);
            written = n;
            state = flushing;
            initiate<void(error_code), error_result<>>(
                ep, std::move(self), [](endpoint_impl& e, operation* op) { rma_flush(e, op); });
            return;
        case flushing:
            if (ec)
                return self.complete(ec, 0);
            state = notifying;
            initiate<void(error_code, std::size_t), bytes_result<>>(
                ep, std::move(self),
                [m = notification, t = tag](endpoint_impl& e, transfer_op* op) {
                    endpoint_send(e, op, m.data(), m.size(), t);
                });
            return;
        case notifying:
            return self.complete(ec, ec ? 0 : written);
        }
    }
};

} // namespace detail

/// The "data is ready" pattern: puts `data` at `remote_address`, flushes
/// the endpoint (so the data is visible at the peer), then sends
/// `notification` with `tag` through the endpoint's messaging
/// (`endpoint::async_send`; the peer receives it with `endpoint::async_recv`).
/// When the peer's receive completes, the data is in its memory. RMA has no
/// notification of its own; this is the helper for the usual remedy.
/// Connected endpoints only (the message needs them).
///
/// Completion signature: `void(error_code ec, std::size_t bytes_put)`.
/// Both buffers must stay valid until the handler runs. Errors: those of
/// `async_put`, `async_flush` and `endpoint::async_send`; on an error nothing
/// later is attempted.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_put_notify(
    endpoint& ep, boost::asio::const_buffer data, std::uint64_t remote_address,
    const remote_key& key, boost::asio::const_buffer notification, std::uint32_t tag,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return boost::asio::async_compose<CompletionToken, void(error_code, std::size_t)>(
        detail::put_notify_op{impl, data, remote_address, detail::access::get_impl(key),
                              notification, tag},
        token, detail::core_of(*impl).get_executor());
}

} // namespace ucx
