// ucx::stream: a byte stream over UCX in place of a TCP socket.
#pragma once

#include <ucx/connect.hpp>
#include <ucx/detail/access.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/throw_on_error.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/error.hpp>
#include <ucx/worker.hpp>
#include <ucx/worker_address.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/socket_base.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ucx {

namespace detail {

/// Maps an error to the code a socket would give (UCX's connection reset and
/// endpoint timeout, the ways a vanished peer shows, as
/// `asio::error::connection_reset`), so code written for TCP sockets matches it.
error_code socket_error(const error_code& ec) noexcept;

/// Completion of a stream read or write: `void(error_code, std::size_t)`.
template <class Op>
struct stream_result {
    using op_type = Op;
    static auto extract(const error_code& ec, const Op& op) {
        if (!ec) [[likely]]
            return std::tuple<error_code, std::size_t>(ec, op.bytes);
        return std::tuple<error_code, std::size_t>(socket_error(ec),
                                                   op.partial_on_error ? op.bytes : 0);
    }
};

/// Most buffers of a sequence one pending read keeps.
inline constexpr std::size_t stream_max_read_buffers = 16;

// The stream's functions (lib/stream/stream.cpp); the templates below call them.
std::shared_ptr<stream_impl> make_stream(const std::shared_ptr<worker_impl>& w);
const std::shared_ptr<worker_impl>& stream_worker(const stream_impl& s) noexcept;
/// Whether the stream has an endpoint (connected or connecting).
bool stream_has_endpoint(const stream_impl& s) noexcept;
void stream_assign(stream_impl& s, const std::shared_ptr<endpoint_impl>& ep,
                   error_code& ec) noexcept;
bool stream_is_open(const stream_impl& s) noexcept;
void stream_close(stream_impl& s) noexcept;
void stream_close(stream_impl& s, endpoint_op* op) noexcept;
void stream_abort(stream_impl& s) noexcept;
void stream_cancel(stream_impl& s) noexcept;
void stream_shutdown_send(stream_impl& s, error_code& ec) noexcept;
boost::asio::ip::tcp::endpoint stream_address(const stream_impl& s, bool remote, error_code& ec);
void stream_expires_at(stream_impl& s, std::chrono::steady_clock::time_point t);
void stream_expires_never(stream_impl& s) noexcept;
std::uint64_t stream_bytes_written(const stream_impl& s) noexcept;
std::uint64_t stream_bytes_read(const stream_impl& s) noexcept;
void stream_read(stream_impl& s, transfer_op* op, const boost::asio::mutable_buffer* bufs,
                 std::size_t n) noexcept;
/// Writes the `op->count` buffers of `op->iov`.
void stream_write(stream_impl& s, stream_write_op* op) noexcept;

} // namespace detail

/// A connected byte stream over UCX's stream API that satisfies Asio's
/// AsyncReadStream and AsyncWriteStream requirements, so
/// `asio::async_read`, `asio::async_write`, `asio::async_read_until`,
/// `asio::ssl::stream<ucx::stream>` and Boost.Beast (HTTP, and WebSocket with
/// `<ucx/beast.hpp>`) work over it as over `asio::ip::tcp::socket`.
///
/// Reads complete with the bytes available (at least one), like a socket's
/// `async_read_some`; byte order and content are kept across any mix of
/// write and read sizes. Concurrent reads are queued and served in the order
/// they were started (as are writes); Asio's algorithms need at most one of
/// each at a time.
///
/// End of stream: after the peer closed (`close()`, destruction), a read
/// yields `asio::error::eof` once every byte the peer wrote was read here
/// (an in-band marker, since UCX reports every disconnect as a reset). When
/// the peer crashed or aborted, reads yield `asio::error::connection_reset`
/// (after the bytes already received) and writes fail; writes after the peer
/// closed cleanly fail with `asio::error::broken_pipe`. A peer that stops
/// answering (stopped process, dropped link) fails reads and writes with
/// `ucx::error::peer_unresponsive` after the worker's peer timeout.
///
/// Half close: `shutdown(shutdown_send)` ends this direction only (the peer
/// reads eof after the data, and may go on writing), as on a TCP socket.
///
/// Closing: `close()` (and the destructor) close gracefully in the
/// background, like closing a TCP socket: pending reads complete with
/// `operation_aborted`, pending and written data is still delivered, then the
/// peer reads eof. `abort()` closes at once: pending writes complete with
/// `operation_aborted` and the peer sees `connection_reset`.
///
/// Cancellation: reads honour per-operation cancellation (all types) and
/// `cancel()`. A write waiting for the reader to make room (flow control)
/// is ended by any cancellation type and by `cancel()`; one UCX holds only by
/// `terminal`, which closes the stream (`partial` and `total` leave it to
/// complete). A write's buffers are free when its handler runs.
///
/// Timeouts, as `beast::tcp_stream`: after `expires_after(d)` (or
/// `expires_at`), operations pending when the deadline passes, and
/// operations started after it, complete with `asio::error::timed_out`. A
/// pending read just ends (the stream stays usable); pending writes cannot be
/// withdrawn, so the stream is closed abortively under them. Call
/// `expires_never()` (or a new deadline) before the next operation.
///
/// Connecting: to a `ucx::acceptor` on an address and port
/// (`async_connect(host, port)`), or without IP addressing to the address
/// acceptor (`ucx::acceptor(worker&)`) of the worker whose address you have
/// (`async_connect(worker_address)`); both run the library's handshake, so
/// end of stream is honest either way.
///
/// Not available: synchronous reads and writes (progress belongs to the
/// worker's executor).
///
/// Thread safety: like a socket, use a stream from one thread at a time
/// (the worker's executor). Movable, not copyable.
template <class Executor = boost::asio::any_io_executor>
class basic_stream {
public:
    using executor_type = Executor;
    /// The same stream type with another executor type.
    template <class Executor1>
    struct rebind_executor {
        using other = basic_stream<Executor1>;
    };
    using lowest_layer_type = basic_stream;
    /// The duration type of `expires_after`.
    using clock_type = std::chrono::steady_clock;

    /// A stream on `w`, not connected yet (see `async_connect`).
    explicit basic_stream(worker& w) : impl_(detail::make_stream(detail::checked(w))) {}

    /// A stream over the connected endpoint `ep` (from `ucx::async_connect`
    /// or `ucx::listener`). Throws `boost::system::system_error` when `ep`
    /// is not a client/server endpoint.
    explicit basic_stream(endpoint&& ep)
        : impl_(detail::make_stream(detail::endpoint_worker(*detail::checked(ep)))) {
        error_code ec;
        detail::stream_assign(*impl_, detail::access::get_impl(ep), ec);
        if (ec)
            throw boost::system::system_error(ec, "ucx::stream");
        ep = endpoint();
    }

    /// Converts from a stream with another executor type.
    template <class Executor1>
    requires(!std::is_same_v<Executor1, Executor> &&
             std::is_constructible_v<Executor, boost::asio::any_io_executor>)
        basic_stream(basic_stream<Executor1>&& other)
    noexcept : impl_(std::move(other.impl_)) {}

    basic_stream(basic_stream&&) noexcept = default;
    basic_stream& operator=(basic_stream&& other) noexcept {
        if (this != &other) {
            if (impl_)
                detail::stream_close(*impl_);
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    /// Closes gracefully (see the class description).
    ~basic_stream() {
        if (impl_)
            detail::stream_close(*impl_);
    }

    /// The executor of the stream's worker.
    executor_type get_executor() const noexcept {
        return executor_type(impl_ ? detail::core_of(*impl_).get_executor()
                                   : boost::asio::any_io_executor());
    }

    /// The stream itself (for Asio's layered streams).
    lowest_layer_type& lowest_layer() noexcept { return *this; }
    const lowest_layer_type& lowest_layer() const noexcept { return *this; }

    /// Takes over the connected endpoint `ep`; `asio::error::already_open`
    /// when connected, `ucx::error::not_connected` for an endpoint made
    /// directly from a worker address (`ucx::endpoint(worker, address)` has no
    /// handshake: use `async_connect(worker_address)` instead),
    /// `ucx::error::wrong_worker` for an endpoint of another worker,
    /// `ucx::error::allocation_failed` when the stream's bookkeeping (room
    /// for a flow-control window of received chunks) cannot be had.
    void assign(endpoint&& ep, error_code& ec) {
        const auto& ep_impl = detail::access::get_impl(ep);
        if (!impl_ || !ep_impl) {
            ec = boost::asio::error::bad_descriptor;
            return;
        }
        detail::stream_assign(*impl_, ep_impl, ec);
        if (!ec)
            ep = endpoint();
    }
    /// As above; throws `boost::system::system_error`.
    void assign(endpoint&& ep) {
        detail::throw_on_error("ucx::stream::assign",
                               [&](error_code& ec) { assign(std::move(ep), ec); });
    }

    /// Whether the stream is connected and not closed here.
    bool is_open() const noexcept { return impl_ && detail::stream_is_open(*impl_); }

    /// Closes gracefully in the background (see the class description). Idempotent.
    void close() noexcept {
        if (impl_)
            detail::stream_close(*impl_);
    }
    /// Closes gracefully and completes when the connection is closed: the
    /// peer was sent everything written and the goodbye that makes it read
    /// eof. Succeeds when the stream was closed already or the peer is gone.
    /// Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_close(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code), detail::error_result<detail::endpoint_op>>(
            impl_ptr(), std::forward<CompletionToken>(token),
            [](detail::stream_impl& s, detail::endpoint_op* op) { detail::stream_close(s, op); });
    }
    /// As above (for code written against sockets).
    void close(error_code& ec) noexcept {
        close();
        ec = {};
    }
    /// Closes abortively: pending operations end with `operation_aborted`,
    /// the peer sees `asio::error::connection_reset`.
    void abort() noexcept {
        if (impl_)
            detail::stream_abort(*impl_);
    }
    /// Shuts down one direction, as on a socket. `shutdown_send` is a half
    /// close: the peer reads `asio::error::eof` after everything written so
    /// far, while this side can still read (and the peer still write); later
    /// writes here fail with `broken_pipe`. `shutdown_receive` cancels pending
    /// reads. `shutdown_both` does both. Call `close()` when done.
    void shutdown(boost::asio::socket_base::shutdown_type what, error_code& ec) noexcept {
        if (!impl_) {
            ec = boost::asio::error::bad_descriptor;
            return;
        }
        ec = {};
        if (what != boost::asio::socket_base::shutdown_receive)
            detail::stream_shutdown_send(*impl_, ec);
        if (!ec && what != boost::asio::socket_base::shutdown_send)
            detail::stream_cancel(*impl_);
    }
    void shutdown(boost::asio::socket_base::shutdown_type what) {
        detail::throw_on_error("ucx::stream::shutdown",
                               [&](error_code& ec) { shutdown(what, ec); });
    }
    /// Pending reads, and writes waiting for the reader to make room, complete
    /// with `operation_aborted` (writes UCX holds go on).
    void cancel() noexcept {
        if (impl_)
            detail::stream_cancel(*impl_);
    }
    void cancel(error_code& ec) noexcept {
        cancel();
        ec = {};
    }

    /// The peer's address and port (`ucx::error::no_socket_address` for a
    /// connection made from a worker address, which has none).
    boost::asio::ip::tcp::endpoint remote_endpoint(error_code& ec) const {
        return address(true, ec);
    }
    boost::asio::ip::tcp::endpoint remote_endpoint() const {
        return detail::throw_on_error("ucx::stream::remote_endpoint",
                                      [&](error_code& ec) { return remote_endpoint(ec); });
    }
    /// This side's address and port (errors as `remote_endpoint`).
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const {
        return address(false, ec);
    }
    boost::asio::ip::tcp::endpoint local_endpoint() const {
        return detail::throw_on_error("ucx::stream::local_endpoint",
                                      [&](error_code& ec) { return local_endpoint(ec); });
    }

    /// Operations pending after `d` from now, or started later, time out
    /// (see the class description).
    void expires_after(clock_type::duration d) {
        detail::stream_expires_at(checked_impl(), clock_type::now() + d);
    }
    /// As above, at the time point `t`.
    void expires_at(clock_type::time_point t) { detail::stream_expires_at(checked_impl(), t); }
    /// No deadline (the default).
    void expires_never() noexcept {
        if (impl_)
            detail::stream_expires_never(*impl_);
    }

    /// Bytes written (handed to UCX) and bytes read so far on this connection.
    std::uint64_t bytes_written() const noexcept {
        return impl_ ? detail::stream_bytes_written(*impl_) : 0;
    }
    std::uint64_t bytes_read() const noexcept {
        return impl_ ? detail::stream_bytes_read(*impl_) : 0;
    }

    /// Connects to a `ucx::acceptor` (or `ucx::listener`) at `host`:`service`
    /// (see `ucx::async_connect`, whose errors it reports, including
    /// `ucx::error::feature_not_enabled`). `asio::error::already_open` when
    /// connected, `ucx::error::allocation_failed` as `assign`. Completion
    /// signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_connect(
        std::string host, std::string service,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto& w = detail::core_of(checked_impl());
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            connect_op{impl_, std::move(host), std::move(service), {}, {}, connect_by::name}, token,
            w.get_executor());
    }
    /// Connects to a `ucx::acceptor` at `to`, as above.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_connect(
        const boost::asio::ip::tcp::endpoint& to,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto& w = detail::core_of(checked_impl());
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            connect_op{impl_, {}, {}, to, {}, connect_by::endpoint}, token, w.get_executor());
    }
    /// Connects without IP addressing to the address acceptor
    /// (`ucx::acceptor(worker&)`) of the worker at `to` (from
    /// `worker::address()`, passed over any side channel): creates the
    /// endpoint and runs the library's handshake over it. Errors:
    /// `ucx::error::empty_address` for an empty address,
    /// `ucx::error::feature_not_enabled` without `feature::am`,
    /// `connection_refused` when the peer's worker has no address acceptor
    /// open (or its backlog is full), `connection_reset` and UCX's errors when
    /// the peer's worker is gone, `asio::error::already_open` when connected,
    /// `ucx::error::allocation_failed` as `assign`. Cancellable through the
    /// handler's cancellation slot. Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_connect(
        const worker_address& to,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto& w = detail::core_of(checked_impl());
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            connect_op{impl_, {}, {}, {}, to, connect_by::address}, token, w.get_executor());
    }

    /// Reads some bytes into `buffers` (at most 16 buffers of the sequence
    /// are filled): completes when at least one byte arrived, with as many as
    /// were available. Errors: `asio::error::eof` after the peer closed and
    /// everything was read, `connection_reset`, `ucx::error::peer_unresponsive`,
    /// `operation_aborted`,
    /// `timed_out`, `bad_descriptor` after `close()`, `not_connected`
    /// (`asio::error`), `ucx::error::allocation_failed`.
    /// Cancellable through the handler's cancellation slot.
    ///
    /// GPU device memory where UCX cannot move it (docs/guide/gpu.md): a read
    /// whose first non-empty buffer is device memory reads at most one
    /// staging chunk (1 MiB) into pinned host memory and copies it to that
    /// buffer; one whose first buffer is host memory fills the host buffers
    /// up to the first device buffer. Extra errors: `ucx::error::cuda_error`,
    /// `ucx::error::cuda_unavailable`.
    /// Completion signature: `void(error_code, std::size_t bytes_read)`.
    template <class MutableBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_read_some(
        const MutableBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, std::size_t),
                                detail::stream_result<detail::transfer_op>>(
            impl_ptr(), std::forward<CompletionToken>(token),
            [buffers](detail::stream_impl& s, detail::transfer_op* op) {
                std::array<boost::asio::mutable_buffer, detail::stream_max_read_buffers> b;
                std::size_t n = 0;
                for (auto it = boost::asio::buffer_sequence_begin(buffers),
                          end = boost::asio::buffer_sequence_end(buffers);
                     it != end && n < b.size(); ++it)
                    b[n++] = boost::asio::mutable_buffer(*it);
                detail::stream_read(s, op, b.data(), n);
            });
    }

    /// Writes all of `buffers` (the first 64 non-empty buffers of a longer
    /// sequence), without copying them: a buffer sequence goes to UCX as an
    /// IOV. Flow control: a write that starts while 8 MiB written here are
    /// unread by the peer waits until the peer reads (docs/guide/stream.md).
    /// The buffers must stay valid until completion. Errors:
    /// `connection_reset` (the peer failed), `ucx::error::peer_unresponsive`,
    /// `broken_pipe` (the peer closed),
    /// `bad_descriptor` after `close()`, `timed_out`, `operation_aborted`
    /// after `abort()` or a cancellation, `ucx::error::allocation_failed`.
    /// Cancellation: a write waiting for room ends at any type; one UCX holds
    /// only at `terminal`, which closes the stream (as `close()`).
    ///
    /// GPU device memory where UCX cannot move it (docs/guide/gpu.md): a write
    /// whose first buffer is device memory writes that buffer only, staged
    /// through pinned host memory chunk by chunk (each chunk a write of its
    /// own, in order); one whose first buffer is host memory writes the host
    /// buffers up to the first device buffer. Fewer bytes than asked, as a
    /// write may write (`asio::async_write` writes the rest). Extra errors:
    /// `ucx::error::cuda_error` (a copy failed), `ucx::error::cuda_unavailable`;
    /// a staged write that fails in the middle reports the error with the
    /// bytes written before it.
    /// Completion signature: `void(error_code, std::size_t bytes_written)`.
    template <class ConstBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_write_some(
        const ConstBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, std::size_t),
                                detail::stream_result<detail::stream_write_op>>(
            impl_ptr(), std::forward<CompletionToken>(token),
            [buffers](detail::stream_impl& s, detail::stream_write_op* op) {
                // The buffers go into the operation's own IOV array.
                std::size_t n = 0;
                for (auto it = boost::asio::buffer_sequence_begin(buffers),
                          end = boost::asio::buffer_sequence_end(buffers);
                     it != end && n < detail::stream_max_buffers; ++it) {
                    boost::asio::const_buffer cb(*it);
                    if (cb.size() > 0) {
                        op->iov[n].buffer = const_cast<void*>(cb.data());
                        op->iov[n].length = cb.size();
                        ++n;
                    }
                }
                op->count = n;
                detail::stream_write(s, op);
            });
    }

private:
    template <class>
    friend class basic_stream;
    friend struct detail::access;

    /// Wraps an implementation (the acceptor makes streams this way).
    explicit basic_stream(std::shared_ptr<detail::stream_impl> impl) noexcept
        : impl_(std::move(impl)) {}

    detail::stream_impl& checked_impl() const {
        if (!impl_)
            throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                              "ucx::stream: moved-from stream");
        return *impl_;
    }
    const std::shared_ptr<detail::stream_impl>& impl_ptr() const {
        checked_impl();
        return impl_;
    }
    /// The peer's (`remote`) or this side's socket address.
    boost::asio::ip::tcp::endpoint address(bool remote, error_code& ec) const {
        if (!impl_) {
            ec = boost::asio::error::bad_descriptor;
            return {};
        }
        return detail::stream_address(*impl_, remote, ec);
    }

    enum class connect_by { name, endpoint, address };

    struct connect_op {
        std::shared_ptr<detail::stream_impl> impl;
        std::string host;
        std::string service;
        boost::asio::ip::tcp::endpoint to;
        worker_address address;
        connect_by by;
        bool started = false;

        template <class Self>
        void operator()(Self& self) {
            started = true;
            const auto& w = detail::stream_worker(*impl);
            if (detail::stream_has_endpoint(*impl)) {
                const auto ex = detail::core_of(*w).get_executor();
                return boost::asio::post(ex, [self = std::move(self)]() mutable {
                    self.complete(boost::asio::error::already_open);
                });
            }
            if (by == connect_by::address) {
                detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
                    w, std::move(self),
                    [address = address](detail::worker_impl& wi, detail::endpoint_op* op) {
                        detail::connect_to_address(wi, op, address);
                    });
                return;
            }
            if (by == connect_by::endpoint) {
                detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
                    w, std::move(self),
                    [to = to](detail::worker_impl& wi, detail::endpoint_op* op) {
                        detail::connect_to_endpoint(wi, op, to);
                    });
                return;
            }
            detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
                w, std::move(self),
                [host = host, service = service](detail::worker_impl& wi, detail::endpoint_op* op) {
                    detail::connect_by_name(wi, op, host, service);
                });
        }

        template <class Self>
        void operator()(Self& self, error_code ec, endpoint ep) {
            if (!ec)
                detail::stream_assign(*impl, detail::access::get_impl(ep), ec);
            self.complete(ec);
        }
    };

    std::shared_ptr<detail::stream_impl> impl_;
};

/// A stream with the type-erased I/O executor (the usual choice).
using stream = basic_stream<>;

} // namespace ucx
