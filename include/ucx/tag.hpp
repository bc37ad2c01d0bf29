// Tag-matched messaging: async_tag_send and async_tag_recv.
#pragma once

#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace ucx {

namespace detail {
// Submit functions (lib/messaging/tag.cpp).
void tag_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
              tag_t tag) noexcept;
void tag_recv(worker_impl& w, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
              tag_t mask) noexcept;
} // namespace detail

/// Sends `data` to the peer of `ep`, tagged `tag`.
///
/// Completion signature: `void(error_code ec, std::size_t bytes_sent)`.
/// The buffer must stay valid until the completion handler is invoked. The
/// handler runs on its associated executor (by default the worker's), never
/// inside this call, even when UCX completes the send at once.
///
/// Errors: the endpoint's failure code after a peer failure;
/// `asio::error::bad_descriptor` on a closed endpoint;
/// `asio::error::operation_aborted` if the endpoint or worker is closed while
/// the send is in flight. Cancellation: UCX cannot take back a send it holds,
/// so `terminal` closes the endpoint (this send and every other operation of
/// the endpoint complete with `operation_aborted` once UCX has let go of
/// them; later ones with `bad_descriptor`); `partial` and `total` cancel the
/// send only before it reached UCX. The buffer is free when the handler runs.
///
/// `data` may be CUDA device memory. Where UCX cannot move device memory,
/// the worker copies it into pinned host memory and sends it from there as
/// one message (docs/guide/gpu.md); then also `ucx::error::cuda_error` (the copy
/// failed, nothing was sent), `ucx::error::allocation_failed` (no pinned
/// memory left), `ucx::error::cuda_unavailable` (no copy engine), and the
/// send can be cancelled while it is still being copied. Sends on one
/// endpoint reach UCX in the order they were made either way. The copy
/// waits for the work queued before on CUDA's legacy default stream
/// (`cudaMemcpy`, `cudaMemset`, kernels launched without a stream); work on
/// other streams must have finished before the call.
///
/// Throws `boost::system::system_error` if `ep` was never connected.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_tag_send(
    endpoint& ep, boost::asio::const_buffer data, tag_t tag,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return detail::initiate<void(error_code, std::size_t), detail::bytes_result<>>(
        impl, std::forward<CompletionToken>(token),
        [data, tag](detail::endpoint_impl& ep, detail::transfer_op* op) {
            detail::tag_send(ep, op, data.data(), data.size(), tag);
        });
}

/// Sends `data` to the peer of `ep`, tagged `tag`, now, when UCX can
/// complete the send inside the call (its inline protocol: a message within
/// the transport's short-send size, with room in the send queue): no
/// operation, no handler, nothing allocated. A message sent this way is
/// matched and ordered as any tag send, and `data` is free again when the
/// call returns. For a sender of many small messages: try this first, and
/// send with `async_tag_send` what it does not take.
///
/// Returns `data.size()` when sent. Otherwise nothing was sent, it returns
/// 0 and sets `ec`: `asio::error::would_block` (UCX cannot complete the
/// send at once: too large for its inline protocol, no room now, the
/// connection still being set up; or, where the worker copies device memory
/// through host memory, `data` is device memory or an earlier send of
/// device memory still waits; or the call does not run on the worker's
/// executor, which is known only where that executor is a plain
/// io_context's, so elsewhere always); `asio::error::bad_descriptor` (the
/// endpoint is closed or was never connected); `asio::error::operation_aborted`
/// (the worker is closed); the endpoint's failure code after a peer failure.
/// In the metrics a send made here counts as a `tag_send` done at once.
std::size_t try_tag_send(endpoint& ep, boost::asio::const_buffer data, tag_t tag,
                         error_code& ec) noexcept;

/// Receives one message whose tag matches `tag` under `mask`
/// (`(sender_tag & mask) == (tag & mask)`) from any endpoint of `w`.
///
/// Completion signature:
/// `void(error_code ec, std::size_t bytes_received, tag_t sender_tag)`.
/// A message larger than the buffer fails with `errc::message_truncated`
/// (no partial data is reported as success). The handler never runs inside
/// this call.
///
/// Cancellation: supports `terminal`, `partial` and `total` cancellation
/// through the handler's associated cancellation slot; the operation then
/// completes with `asio::error::operation_aborted` once UCX has released the
/// buffer. Emit cancellation from the worker's executor.
///
/// `data` may be CUDA device memory. Where UCX cannot move device memory,
/// the message is received into pinned host memory and its bytes are copied
/// to `data` before the handler runs (docs/guide/gpu.md), after the work
/// queued before on CUDA's legacy default stream; then also
/// `ucx::error::cuda_error`, `ucx::error::allocation_failed` and
/// `ucx::error::cuda_unavailable`.
///
/// Throws `boost::system::system_error` if `w` was moved from.
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_tag_recv(
    worker& w, boost::asio::mutable_buffer data, tag_t tag, tag_t mask,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return detail::initiate<void(error_code, std::size_t, tag_t), detail::tag_recv_result>(
        impl, std::forward<CompletionToken>(token),
        [data, tag, mask](detail::worker_impl& w, detail::tag_recv_op* op) {
            detail::tag_recv(w, op, data.data(), data.size(), tag, mask);
        });
}

} // namespace ucx
