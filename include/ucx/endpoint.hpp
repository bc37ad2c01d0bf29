// ucx::endpoint: a connection from a worker to a remote worker.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/checked.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/endpoint_lane.hpp>
#include <ucx/error.hpp>
#include <ucx/metrics.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>
#include <ucx/worker_address.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/system_error.hpp>

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

namespace ucx {

class endpoint;

namespace detail {
/// The implementation of `ep`; throws if `ep` was never connected.
inline const std::shared_ptr<endpoint_impl>& checked(const endpoint& ep);

// Submit functions of the endpoint's operations (lib/messaging/tag.cpp,
// lib/connection/endpoint.cpp); they run on the worker's executor.
void endpoint_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                   tag_t tag) noexcept;
void endpoint_recv(endpoint_impl& ep, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
                   tag_t mask) noexcept;
void endpoint_wait_error(endpoint_impl& ep, operation* op) noexcept;
void endpoint_close(endpoint_impl& ep, endpoint_op* op) noexcept;
/// Whether `ep` is usable (connected, not closed, not failed).
bool endpoint_is_open(const endpoint_impl& ep) noexcept;
/// The worker `ep` belongs to.
const std::shared_ptr<worker_impl>& endpoint_worker(const endpoint_impl& ep) noexcept;
} // namespace detail

/// A UCP endpoint: one side of a connection between two workers. Every
/// endpoint is created in peer error mode (`UCP_ERR_HANDLING_MODE_PEER`), so a
/// dead or unreachable peer fails its operations with an error code instead of
/// hanging them.
///
/// Endpoints come from a worker address (IP-less; see the constructor) or from
/// a client/server connection (`ucx::async_connect`, `ucx::listener`).
/// Connected endpoints also have per-endpoint messaging (`async_send`,
/// `async_recv`: only this peer's messages), and tell a graceful close by the
/// peer (`asio::error::eof`) from a failure (`errc::connection_reset`, ...).
///
/// Failure: when UCX reports the endpoint failed, every operation pending on it
/// (sends, its receives, `async_wait_error`) completes with the error, exactly
/// once; later operations fail at once with the same error.
///
/// Closing, as on every object of the library that has a peer (and as on an
/// Asio TCP socket):
/// - `close()` ends the endpoint here at once and says goodbye to the peer
///   in the background: pending receives and waits complete with
///   `asio::error::operation_aborted`, sends already started still complete
///   (the goodbye follows them), later operations fail with
///   `asio::error::bad_descriptor`; the peer sees `asio::error::eof` after
///   the messages sent before. A peer that stops answering meanwhile is
///   force-closed after the worker's peer timeout.
/// - `async_close` is the same close, completing when it has ended.
/// - `abort()` closes at once without a goodbye: sends in flight complete
///   with `operation_aborted` too, and the peer sees its connection reset
///   (`errc::connection_reset`).
/// Closing twice is harmless. An endpoint is a handle to its connection,
/// which a message's `reply_endpoint()` may share: the destructor (or a move
/// into it) releases the handle, and a connection that no handle and no
/// operation holds any more is aborted, so call `close()` for the graceful
/// end.
///
/// Movable, not copyable.
class endpoint {
public:
    using executor_type = boost::asio::any_io_executor;

    /// An endpoint that is not connected.
    endpoint() noexcept = default;

    /// Connects `w` to the worker whose address is `remote` (no IP addressing
    /// needed; works over every transport both sides share). The connection
    /// is established in the background; operations may start at once.
    /// Throws `boost::system::system_error` on failure:
    /// `ucx::error::empty_address` for an empty address,
    /// `asio::error::bad_descriptor` for a closed worker, UCX's status from
    /// `ucp_ep_create`.
    endpoint(worker& w, const worker_address& remote);
    /// As above; reports failure through `ec`.
    endpoint(worker& w, const worker_address& remote, error_code& ec);

    endpoint(endpoint&&) noexcept = default;
    endpoint& operator=(endpoint&& other) noexcept;
    ~endpoint();

    /// The executor of the endpoint's worker (empty for an endpoint that was
    /// never connected).
    executor_type get_executor() const noexcept;

    /// Whether the endpoint is usable (connected, not closed, not failed).
    bool is_open() const noexcept;

    /// Why the endpoint is not usable: the peer failure UCX reported,
    /// `ucx::error::peer_unresponsive` when a connected peer stopped
    /// answering (`worker_options::peer_timeout`), `asio::error::eof` after
    /// the peer closed gracefully, or
    /// `bad_descriptor` once closed here. Empty while open.
    error_code error() const noexcept;

    /// Closes here at once and says goodbye to the peer in the background
    /// (see the class's description). Idempotent.
    void close() noexcept;
    /// Closes at once: every pending operation completes with
    /// `asio::error::operation_aborted`, and the peer sees a reset.
    /// Idempotent.
    void abort() noexcept;

    /// The peer's socket address (connected endpoints only:
    /// `ucx::error::no_socket_address` for an endpoint made from a worker
    /// address; `asio::error::bad_descriptor` when closed).
    boost::asio::ip::tcp::endpoint remote_endpoint() const;
    boost::asio::ip::tcp::endpoint remote_endpoint(error_code& ec) const;
    /// This side's socket address (connected endpoints only; errors as above).
    boost::asio::ip::tcp::endpoint local_endpoint() const;
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const;

    /// The lanes UCX chose for this endpoint: which transports and devices
    /// carry its traffic, and what for (`endpoint_lane`), as UCX reports them
    /// (`ucp_ep_print_info`). A connection's lanes are final once its connect
    /// or accept handler has run; before, they are those UCX has so far (the
    /// connection manager's, a wire-up lane). Call it where the worker's
    /// other calls are made (the worker's thread, or any thread of a
    /// `multi_threaded` context). Errors: `asio::error::bad_descriptor` for
    /// an endpoint never connected or closed here, the peer's failure or
    /// `asio::error::eof` for one that is no longer open (`error()`),
    /// `boost::system::errc::not_enough_memory`.
    std::vector<endpoint_lane> lanes() const;
    std::vector<endpoint_lane> lanes(error_code& ec) const;

    /// The operations made on this endpoint so far, by kind: started,
    /// completed, failed, bytes, and those in flight
    /// (docs/guide/metrics.md). Safe to call from any thread while the
    /// endpoint is not being moved or destroyed; zeros for an endpoint that
    /// was moved from. A closed endpoint keeps its counts.
    endpoint_metrics metrics() const noexcept;

    /// Sends `data` to this endpoint's peer, where only a receive on the
    /// matching endpoint (`async_recv`) gets it, tagged with a 32-bit `tag`.
    /// Connected endpoints only (`ucx::error::not_connected` otherwise).
    /// `data` (and the buffer of `async_recv`) may be CUDA device memory: as
    /// for `async_tag_send` and `async_tag_recv`, with their added errors
    /// where UCX cannot move device memory (docs/guide/gpu.md).
    /// Completion signature: `void(error_code, std::size_t bytes_sent)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_send(boost::asio::const_buffer data, tag_t tag,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, std::size_t), detail::bytes_result<>>(
            detail::checked(*this), std::forward<CompletionToken>(token),
            [data, tag](detail::endpoint_impl& ep, detail::transfer_op* op) {
                detail::endpoint_send(ep, op, data.data(), data.size(), tag);
            });
    }

    /// As above, with tag 0.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    requires(!std::is_integral_v<std::decay_t<CompletionToken>>) auto async_send(
        boost::asio::const_buffer data,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return async_send(data, 0, std::forward<CompletionToken>(token));
    }

    /// Receives one message sent by this endpoint's peer with `async_send`
    /// whose tag matches (`(sent_tag & mask) == (tag & mask)`; mask 0 takes
    /// any). A larger message fails with `errc::message_truncated`.
    /// Cancellable through the handler's cancellation slot. After the peer
    /// closed gracefully, messages it sent before are still received; then
    /// `asio::error::eof`. Connected endpoints only (`ucx::error::not_connected`
    /// otherwise).
    /// Completion signature:
    /// `void(error_code, std::size_t bytes_received, std::uint32_t sent_tag)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_recv(boost::asio::mutable_buffer data, tag_t tag, tag_t mask,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, std::size_t, tag_t), detail::endpoint_recv_result>(
            detail::checked(*this), std::forward<CompletionToken>(token),
            [data, tag, mask](detail::endpoint_impl& ep, detail::tag_recv_op* op) {
                detail::endpoint_recv(ep, op, data.data(), data.size(), tag, mask);
            });
    }

    /// Receives one message of this endpoint's peer, whatever its tag.
    /// Completion signature: `void(error_code, std::size_t bytes_received)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_recv(boost::asio::mutable_buffer data,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, std::size_t),
                                detail::bytes_result<detail::tag_recv_op>>(
            detail::checked(*this), std::forward<CompletionToken>(token),
            [data](detail::endpoint_impl& ep, detail::tag_recv_op* op) {
                detail::endpoint_recv(ep, op, data.data(), data.size(), 0, 0);
            });
    }

    /// Waits until the endpoint stops being usable, and says why: the peer
    /// failure (`errc::connection_reset`, `errc::endpoint_timeout`,
    /// `ucx::error::peer_unresponsive`, ...), `asio::error::eof` when the peer
    /// closed gracefully, or
    /// `asio::error::operation_aborted` when closed here. Completes at once if
    /// that already happened. Cancellable.
    /// Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_wait_error(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code), detail::error_result<>>(
            detail::checked(*this), std::forward<CompletionToken>(token),
            [](detail::endpoint_impl& ep, detail::operation* op) {
                detail::endpoint_wait_error(ep, op);
            });
    }

    /// Closes gracefully: lets the sends in flight complete (a rendezvous
    /// send completes when the peer receives it), tells the peer (which sees
    /// `asio::error::eof`), then closes. Pending receives complete with
    /// `operation_aborted`. A peer that is already gone (failed, or closed
    /// first) is not an error; after a local close it is `bad_descriptor`,
    /// during another `async_close` `already_started`. A peer that stops
    /// answering while the close waits for its sends, or does not
    /// acknowledge the goodbye within the linger (5 s), ends it with
    /// `ucx::error::peer_unresponsive` (the endpoint is then force-closed).
    /// Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_close(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code), detail::error_result<detail::endpoint_op>>(
            detail::checked(*this), std::forward<CompletionToken>(token),
            [](detail::endpoint_impl& ep, detail::endpoint_op* op) {
                detail::endpoint_close(ep, op);
            });
    }

    /// The UCP handle (null when not open).
    ucp_ep_h native_handle() const noexcept;

private:
    friend struct detail::access;

    /// Wraps an implementation (accept and connect make endpoints this way).
    explicit endpoint(std::shared_ptr<detail::endpoint_impl> impl) noexcept
        : impl_(std::move(impl)) {}

    std::shared_ptr<detail::endpoint_impl> impl_;
};

namespace detail {

inline const std::shared_ptr<endpoint_impl>& checked(const endpoint& ep) {
    return checked_impl(ep, "ucx: operation on an endpoint that was never connected");
}

/// Completion with a new endpoint (connect, accept).
struct endpoint_result {
    using op_type = endpoint_op;
    static auto extract(const error_code& ec, const endpoint_op& op) {
        if (ec || !op.subject)
            return std::tuple<error_code, endpoint>(ec ? ec : make_error_code(error::no_endpoint),
                                                    endpoint());
        return std::tuple<error_code, endpoint>(ec, access::construct<endpoint>(op.subject));
    }
};

/// Converts a socket address into an Asio TCP endpoint.
boost::asio::ip::tcp::endpoint to_tcp_endpoint(const sockaddr_storage& ss) noexcept;

} // namespace detail

} // namespace ucx
