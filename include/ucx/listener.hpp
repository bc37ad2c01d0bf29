// ucx::listener: accepts client/server connections on an address and port.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ucx {

namespace detail {
/// Starts an accept (lib/connection/listener.cpp; on the worker's executor).
void listener_accept(listener_impl& l, endpoint_op* op) noexcept;
} // namespace detail

/// Options of a listener.
struct listener_options {
    /// Connections that may wait (handshaking or not yet accepted); requests
    /// beyond it are rejected.
    std::size_t backlog = 128;
    /// Decides per connection request, from the client's address; returning
    /// false rejects it (the client's connect fails). Empty: accept all.
    std::function<bool(const boost::asio::ip::tcp::endpoint& client)> accept_filter{};
    /// The accepted connections' peer timeout; unset: the worker's
    /// (`worker_options::peer_timeout`), zero: not watched.
    std::optional<std::chrono::milliseconds> peer_timeout{};
    /// How long a client may take to complete the handshake before its
    /// connection is closed (it never reaches `async_accept`); unset: the
    /// worker's (`worker_options::handshake_timeout`), zero: no limit.
    std::optional<std::chrono::milliseconds> handshake_timeout{};
    /// How clients connect; unset: the worker's (`worker_options::method`).
    std::optional<connection_method> method{};
    /// Handshake method: the shared secret clients must know; unset: the
    /// worker's (`worker_options::secret`), empty: none.
    std::optional<std::string> secret{};
    /// Handshake method: let the port be bound while an earlier socket on it
    /// lingers in TIME_WAIT (a restarted server), as `tcp::acceptor` does.
    bool reuse_address = true;
    /// Handshake method: `SO_REUSEPORT`, so that several listeners (each on
    /// its own worker and thread, all with this set) bind the same port; the
    /// kernel spreads the incoming connections across them, and each is
    /// served by the worker of the listener that took it (a multi-threaded
    /// server: docs/guide/connections.md). With UCX's socket-address method the
    /// listener fails with `asio::error::operation_not_supported`.
    bool reuse_port = false;
};

/// Listens on an address and port for clients that `ucx::async_connect`, the
/// UCX counterpart of `asio::ip::tcp::acceptor`. Each connection completes
/// the library's handshake before `async_accept` yields it, so the endpoint it
/// gives is ready for per-endpoint messaging.
///
/// With the handshake method (the default, `worker_options::method`) the
/// listener is a TCP socket of the library's own: clients exchange checked
/// worker addresses with it (authenticated with a shared secret if one is
/// set), then connect UCX by address. No byte from the network reaches UCX
/// unchecked; garbage, silence past the handshake timeout and wrong secrets
/// are refused, counted in `rejected()`, and the listener keeps serving.
///
/// Needs a context with the tag and active-message features (the defaults).
/// Movable, not copyable. Closing (or destroying) the listener fails pending
/// accepts with `asio::error::operation_aborted` and rejects waiting clients.
class listener {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Listens on `bind` (port 0 picks a free port; see `local_endpoint()`).
    /// Throws `boost::system::system_error`: `ucx::error::feature_not_enabled`
    /// when the context has no `feature::am`; `asio::error::bad_descriptor`
    /// for a closed worker; UCX's status from `ucp_listener_create` (for
    /// example `errc::busy` when the port is taken).
    listener(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options = {});
    /// As above; reports failure through `ec`.
    listener(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options,
             error_code& ec);

    listener(listener&&) noexcept = default;
    listener& operator=(listener&& other) noexcept;
    ~listener();

    executor_type get_executor() const noexcept;

    /// The address and port the listener is bound to.
    boost::asio::ip::tcp::endpoint local_endpoint() const;
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const;

    bool is_open() const noexcept;
    /// Stops listening. Idempotent.
    void close() noexcept;

    /// Connection requests refused so far (filter, backlog, and with the
    /// handshake method every client whose handshake failed): the sum of
    /// `metrics().refused`. Safe to call from any thread.
    std::size_t rejected() const noexcept;

    /// The connections it accepted (their handshake finished) and those it
    /// refused, by cause (docs/guide/metrics.md). Safe to call from any
    /// thread; zeros for a listener that was moved from.
    listener_metrics metrics() const noexcept;

    /// Accepts the next connection. Completion signature:
    /// `void(error_code, ucx::endpoint)`. Cancellable through the handler's
    /// cancellation slot (`operation_aborted`).
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        if (!impl_)
            throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                              "ucx::listener::async_accept");
        return detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
            impl_, std::forward<CompletionToken>(token),
            [](detail::listener_impl& l, detail::endpoint_op* op) {
                detail::listener_accept(l, op);
            });
    }

private:
    friend struct detail::access;

    std::shared_ptr<detail::listener_impl> impl_;
};

} // namespace ucx
