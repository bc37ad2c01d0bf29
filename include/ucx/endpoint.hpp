// ucx::endpoint: a connection from a worker to a remote worker.
#pragma once

#include <ucx/error.hpp>
#include <ucx/worker.hpp>
#include <ucx/worker_address.hpp>

#include <memory>

namespace ucx {

namespace detail {
class endpoint_impl;
}

/// A UCP endpoint: one side of a connection between two workers. Every
/// endpoint is created in peer error mode (`UCP_ERR_HANDLING_MODE_PEER`), so a
/// dead or unreachable peer fails its operations with an error code instead of
/// hanging them.
///
/// Movable, not copyable. `close()` and the destructor force-close the
/// endpoint: pending operations complete with `asio::error::operation_aborted`;
/// later operations fail with `asio::error::bad_descriptor`. After a peer
/// failure, operations fail with the code UCX reported (for example
/// `errc::connection_reset` or `errc::endpoint_timeout`).
class endpoint {
public:
    using executor_type = boost::asio::any_io_executor;

    /// An endpoint that is not connected.
    endpoint() noexcept = default;

    /// Connects `w` to the worker whose address is `remote` (no IP addressing
    /// needed; works over every transport both sides share). The connection
    /// is established in the background; operations may start at once.
    /// Throws `boost::system::system_error` on failure.
    endpoint(worker& w, const worker_address& remote);
    /// As above; reports failure through `ec`.
    endpoint(worker& w, const worker_address& remote, error_code& ec);

    endpoint(endpoint&&) noexcept = default;
    endpoint& operator=(endpoint&& other) noexcept;
    ~endpoint();

    /// The executor of the endpoint's worker.
    executor_type get_executor() const noexcept;

    /// Whether the endpoint is usable (connected, not closed, not failed).
    bool is_open() const noexcept;

    /// Why the endpoint is not usable: the peer failure UCX reported, or
    /// `bad_descriptor` once closed. Empty while open.
    error_code error() const noexcept;

    /// Force-closes the endpoint. Idempotent.
    void close() noexcept;

    /// The UCP handle (null when not open).
    ucp_ep_h native_handle() const noexcept;

    /// The implementation (for library internals).
    const std::shared_ptr<detail::endpoint_impl>& impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::endpoint_impl> impl_;
};

} // namespace ucx
