// ucx::async_connect: a client/server connection by host and port.
#pragma once

#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/worker.hpp>
#include <ucx/worker_address.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <string>

namespace ucx {

namespace detail {
// Submit functions (lib/connection/connect.cpp); `op` completes with the endpoint
// (`endpoint_result`). They run on the worker's executor.
/// Resolves `host`:`service`, then connects to the first usable address.
void connect_by_name(worker_impl& w, endpoint_op* op, const std::string& host,
                     const std::string& service);
/// Connects to one address.
void connect_to_endpoint(worker_impl& w, endpoint_op* op,
                         const boost::asio::ip::tcp::endpoint& to) noexcept;
/// Connects to the address acceptor of the worker at `to`: the endpoint
/// (peer error mode) and the hello/welcome handshake over it. Errors:
/// `error::empty_address` (empty address), `connection_refused` (no address
/// acceptor took it), the endpoint's failure (the peer's worker is gone).
void connect_to_address(worker_impl& w, endpoint_op* op, const worker_address& to) noexcept;
} // namespace detail

/// Connects `w` to a `ucx::listener` at `host`:`service` (a port number or
/// a service name). The name is resolved with Asio's resolver (IPv4 and IPv6;
/// the first IPv4 result is preferred). Completes when the connection and the
/// library's handshake are done, with an endpoint ready for every operation.
///
/// With `worker_options::method` `handshake` (the default) the connection is
/// set up through the listener's TCP front door (checked worker addresses,
/// the shared `worker_options::secret` if any), then UCX connects by address.
///
/// Completion signature: `void(error_code, ucx::endpoint)`. Errors: the
/// resolver's (`asio::error::host_not_found`, ...); handshake method:
/// `asio::error::connection_refused` (nobody listens, or the listener refused:
/// filter, backlog), the socket's error, `ucx::error::handshake_failed` (the
/// server does not speak the handshake), `ucx::error::authentication_failed`
/// (the secrets differ); `ucx_sockaddr` method: UCX's when nobody listens or
/// the listener rejects (`errc::unreachable`, `errc::connection_reset`,
/// `errc::rejected`, ...); UCX's statuses of the connection;
/// `operation_aborted` when cancelled through the handler's cancellation
/// slot or when the worker closes. Library errors:
/// `ucx::error::handshake_timeout` when the connection was not set up
/// within `worker_options::handshake_timeout` (a stopped or cut-off server),
/// `ucx::error::feature_not_enabled` when the context has no `feature::am`,
/// `ucx::error::allocation_failed` when the endpoint could not be allocated.
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_connect(
    worker& w, std::string host, std::string service,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
        impl, std::forward<CompletionToken>(token),
        [host = std::move(host), service = std::move(service)](detail::worker_impl& w,
                                                               detail::endpoint_op* op) {
            detail::connect_by_name(w, op, host, service);
        });
}

/// Connects `w` to a `ucx::listener` at `to`; as above, without name
/// resolution (same errors, no resolver's).
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_connect(
    worker& w, const boost::asio::ip::tcp::endpoint& to,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
        impl, std::forward<CompletionToken>(token),
        [to](detail::worker_impl& w, detail::endpoint_op* op) {
            detail::connect_to_endpoint(w, op, to);
        });
}

/// The IPv4 address of network interface `ifname` (for example "lo" or
/// "eth0"), as text; with an empty name, the first IPv4 address of an
/// interface that is up and not loopback. Sets `ec` to
/// `ucx::error::no_interface_address` when there is none (or to the system
/// error of `getifaddrs`).
std::string get_address(const std::string& ifname, error_code& ec);
/// As above; throws `boost::system::system_error`.
std::string get_address(const std::string& ifname = {});

} // namespace ucx
