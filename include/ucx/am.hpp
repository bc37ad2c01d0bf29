// Active messages: sends with a user id and header, received without a
// matching receive posted first (pull with async_am_recv, or push with
// set_am_handler).
#pragma once

#include <ucx/am_allocator.hpp>
#include <ucx/am_message.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <functional>
#include <iterator>
#include <memory>
#include <tuple>
#include <type_traits>

namespace ucx {

namespace detail {

/// Completion with a received message.
struct am_recv_result {
    using op_type = am_recv_op;
    static std::tuple<error_code, am_message> extract(const error_code& ec, am_recv_op& op);
};

// Submit functions (lib/messaging/am.cpp).
/// Sends one active message; `buffers` holds `count` IOV entries.
void am_send(endpoint_impl& ep, am_send_op* op, unsigned id, const void* header,
             std::size_t header_length, const ucp_dt_iov_t* buffers, std::size_t count,
             unsigned flags) noexcept;
/// Starts a receive of one active message on `id` from any endpoint of `w`.
void am_recv(worker_impl& w, am_recv_op* op, unsigned id) noexcept;
/// As above, from the peer of `ep` only.
void am_recv(endpoint_impl& ep, am_recv_op* op, unsigned id) noexcept;

} // namespace detail

/// The largest id an application may use; the ids above are the library's.
inline constexpr unsigned am_max_id = 4094;

/// How UCX moves an active message's data.
enum class am_protocol {
    /// UCX decides by size (eager below its rendezvous threshold).
    automatic,
    /// Eager: the data travels with the message.
    eager,
    /// Rendezvous: the receiver fetches the data (zero-copy on the wire for
    /// large messages; the send completes once the receiver has fetched it).
    rendezvous
};

/// Options of one active-message send.
struct am_send_options {
    am_protocol protocol = am_protocol::automatic;
    /// Lets the receiver answer through `am_message::reply_endpoint()`.
    bool reply = true;
};

/// Sends an active message with id `id` (0 to `am_max_id`), the user header
/// `header` (at most `max_am_header(w)` bytes; copied, so it may go away once
/// this call returns) and the data `data`, any Asio const buffer sequence
/// (sent without a copy, scatter-gather through UCP's IOV datatype).
///
/// The data buffers must stay valid until the handler is called.
/// Completion signature: `void(error_code, std::size_t bytes_sent)` (data
/// bytes). A rendezvous send completes once the receiver fetched the data.
///
/// Errors: `ucx::error::invalid_am_id` for an id above `am_max_id`,
/// `ucx::error::header_too_large` for a header over the maximum,
/// `ucx::error::feature_not_enabled` without `feature::am` (all before
/// anything is sent); the endpoint's error after a failure or close, as for
/// every send. Cancellation as for `async_tag_send`: `terminal` closes the
/// endpoint once UCX holds the send, `partial` and `total` cancel it only
/// before (`operation_aborted`).
///
/// Device (GPU) buffers where UCX cannot move device memory (no CUDA
/// transports): the data is copied into pinned host memory and sent from
/// there as one message with the same id, header and options; a sequence
/// mixing host and device buffers is gathered into that one buffer (device
/// buffers by the copy engine, host ones with memcpy). Sends of an endpoint
/// (active, tag and per-endpoint messages) keep their order behind such a
/// send. Such a send is cancellable while its bytes are still copied
/// (nothing was sent), and fails with `ucx::error::cuda_error`, sending
/// nothing, when a copy fails. See docs/guide/gpu.md.
template <class ConstBufferSequence,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto async_am_send(
    endpoint& ep, unsigned id, boost::asio::const_buffer header, const ConstBufferSequence& data,
    am_send_options options,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return detail::initiate<void(error_code, std::size_t),
                            detail::bytes_result<detail::am_send_op>>(
        impl, std::forward<CompletionToken>(token),
        [id, header, data, options](detail::endpoint_impl& ep, detail::am_send_op* op) {
            unsigned flags = options.reply ? UCP_AM_SEND_FLAG_REPLY : 0;
            if (options.protocol == am_protocol::eager)
                flags |= UCP_AM_SEND_FLAG_EAGER;
            else if (options.protocol == am_protocol::rendezvous)
                flags |= UCP_AM_SEND_FLAG_RNDV;
            const auto begin = boost::asio::buffer_sequence_begin(data);
            const auto end = boost::asio::buffer_sequence_end(data);
            const std::size_t count = static_cast<std::size_t>(std::distance(begin, end));
            // The header copy and the IOV array live in the operation.
            auto* iov = static_cast<ucp_dt_iov_t*>(
                op->storage(count * sizeof(ucp_dt_iov_t) + header.size()));
            std::size_t i = 0;
            for (auto it = begin; it != end; ++it, ++i) {
                const boost::asio::const_buffer b(*it);
                iov[i].buffer = const_cast<void*>(b.data());
                iov[i].length = b.size();
            }
            detail::am_send(ep, op, id, header.data(), header.size(), iov, count, flags);
        });
}

/// As above, with default options.
template <class ConstBufferSequence,
          class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
requires boost::asio::is_const_buffer_sequence<ConstBufferSequence>::value auto async_am_send(
    endpoint& ep, unsigned id, boost::asio::const_buffer header, const ConstBufferSequence& data,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return async_am_send(ep, id, header, data, am_send_options{},
                         std::forward<CompletionToken>(token));
}

/// Receives the next active message with id `id` that arrives at `w` (or
/// that arrived before and is queued), from any endpoint.
///
/// Messages of one id are delivered in arrival order (so in send order per
/// sending endpoint), one message per receive. Receives wait in the order
/// they were started. Messages on an id that has a handler
/// (`set_am_handler`) go to waiting receives first.
///
/// Completion signature: `void(error_code, am_message)`. A rendezvous message
/// whose data could not be fetched (the sender died) completes with the
/// error and the message (its header, no data).
/// Cancellable (terminal, partial, total); `operation_aborted` when the
/// worker closes. Errors: `ucx::error::invalid_am_id` for an id above
/// `am_max_id`, `ucx::error::feature_not_enabled` without `feature::am`;
/// `ucx::error::allocation_failed` (message completed without its data) when
/// no memory for the data could be had, `ucx::error::no_am_allocator` when no
/// allocator is registered for the id's memory type, `ucx::error::cuda_error`
/// (message completed without its data) when its copy to device memory,
/// staged through host memory (see `set_am_memory_type`), failed.
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_am_recv(
    worker& w, unsigned id,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return detail::initiate<void(error_code, am_message), detail::am_recv_result>(
        impl, std::forward<CompletionToken>(token),
        [id](detail::worker_impl& w, detail::am_recv_op* op) { detail::am_recv(w, op, id); });
}

/// As above, for messages sent by the peer of `ep` only (the sender must
/// allow replies, which is the default). After that peer closed or failed,
/// messages it sent before are still delivered, then the endpoint's error.
/// Errors: as above.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_am_recv(
    endpoint& ep, unsigned id,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    const auto& impl = detail::checked(ep);
    return detail::initiate<void(error_code, am_message), detail::am_recv_result>(
        impl, std::forward<CompletionToken>(token),
        [id](detail::endpoint_impl& ep, detail::am_recv_op* op) { detail::am_recv(ep, op, id); });
}

/// Sets the handler called for each message on `id` that no waiting
/// `async_am_recv` takes: `handler(error_code, am_message)`, posted to the
/// worker's executor, in arrival order. An empty handler removes it (later
/// messages are queued again). Throws `boost::system::system_error`:
/// `ucx::error::invalid_am_id` for an id above `am_max_id`,
/// `ucx::error::feature_not_enabled` when the worker has no active messages
/// (no `feature::am`, or closed). Call it on the worker's executor (or
/// before the worker runs).
void set_am_handler(worker& w, unsigned id, std::function<void(error_code, am_message)> handler);

/// Chooses the memory type rendezvous messages on `id` are received into
/// (host by default); the allocator registered for that type provides it.
/// Eager messages stay in UCX's host buffers whatever the type. Where UCX
/// cannot move device memory (no CUDA transports), a rendezvous message for
/// a `cuda` id is fetched into pinned host memory and copied to the device
/// before it is delivered; a failed copy delivers it with
/// `ucx::error::cuda_error` and no data. Throws as `set_am_handler`.
void set_am_memory_type(worker& w, unsigned id, memory_type type);

/// Registers the receive allocator for its memory type on `w`, replacing the
/// previous one (messages already received keep theirs). Throws
/// `boost::system::system_error`: `ucx::error::null_allocator` for a null
/// allocator, `ucx::error::feature_not_enabled` as `set_am_handler`.
void register_am_allocator(worker& w, std::shared_ptr<am_allocator> allocator);

/// The largest header an active message sent by `w` may carry. Throws
/// `ucx::error::feature_not_enabled` as `set_am_handler`.
std::size_t max_am_header(const worker& w);

/// Statistics of the messages queued on `id` of `w` (received, not yet taken).
/// `am_queue` throws `ucx::error::feature_not_enabled` as `set_am_handler`.
struct am_queue_stats {
    std::size_t messages = 0;   ///< messages queued
    std::size_t bytes = 0;      ///< data bytes they hold in memory
    std::size_t peak_bytes = 0; ///< the most bytes any id of `w` held at once
};
am_queue_stats am_queue(const worker& w, unsigned id);

} // namespace ucx
