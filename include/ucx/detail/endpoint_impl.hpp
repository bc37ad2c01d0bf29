// Internal: the state behind ucx::endpoint.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/worker_address.hpp>

#include <memory>

namespace ucx::detail {

class worker_impl;

class endpoint_impl {
public:
    explicit endpoint_impl(std::shared_ptr<worker_impl> worker);
    ~endpoint_impl();
    endpoint_impl(const endpoint_impl&) = delete;
    endpoint_impl& operator=(const endpoint_impl&) = delete;

    /// Creates the UCP endpoint to a worker address, in peer error mode.
    void connect(const worker_address& address, error_code& ec);

    ucp_ep_h native() const noexcept { return ep_; }
    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    bool is_open() const noexcept { return ep_ != nullptr; }
    /// The failure UCX reported, or why the endpoint is closed; empty while usable.
    ucs_status_t status() const noexcept { return status_; }

    /// Starts a tag send (owner thread).
    void tag_send(operation* op, const void* data, std::size_t size, ucp_tag_t tag) noexcept;

    /// Force-closes: pending operations complete with an error. `status` is
    /// what later operations fail with. Idempotent.
    void force_close(ucs_status_t status) noexcept;
    /// The worker is shutting down: force-close, and detach from it.
    void detach() noexcept;
    /// Processes a failure recorded by the error callback (owner thread).
    void handle_failure() noexcept;

    // Links in the worker's endpoint list.
    endpoint_impl* next = nullptr;
    endpoint_impl* prev = nullptr;
    bool failure_pending = false;

private:
    static void error_callback(void* arg, ucp_ep_h ep, ucs_status_t status) noexcept;

    std::shared_ptr<worker_impl> worker_;
    ucp_ep_h ep_ = nullptr;
    ucs_status_t status_ = UCS_OK;
    bool registered_ = false;
};

} // namespace ucx::detail
