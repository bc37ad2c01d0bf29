// Internal: the state behind ucx::listener.
#pragma once

#include <ucx/detail/operation.hpp>

#include "accept_queue.hpp"
#include "endpoint_impl.hpp"
#include "worker_component.hpp"

#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace ucx::detail {

class worker_impl;

class listener_impl final : public worker_component {
public:
    using filter_type = std::function<bool(const boost::asio::ip::tcp::endpoint&)>;

    listener_impl(std::shared_ptr<worker_impl> worker, std::size_t backlog, filter_type filter,
                  const connection_timeouts& timeouts);
    ~listener_impl();
    listener_impl(const listener_impl&) = delete;
    listener_impl& operator=(const listener_impl&) = delete;

    void open(const boost::asio::ip::tcp::endpoint& bind, error_code& ec);
    /// Rejects queued requests, drops unaccepted connections, aborts accepts. Idempotent.
    void close() noexcept;
    bool is_open() const noexcept { return handle_ != nullptr; }
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const;
    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    std::size_t rejected() const noexcept { return rejected_; }

    /// Starts an accept (owner thread).
    void accept(endpoint_op* op) noexcept;
    /// Handles the connection requests queued by the UCX callback (after progress).
    void process_requests() noexcept;
    std::size_t run_deferred(deferred_stage) noexcept override {
        process_requests();
        return 1;
    }
    void shutdown() noexcept override { close(); }
    /// An accepted endpoint finished its handshake.
    void on_established(std::shared_ptr<endpoint_impl> ep) noexcept;
    /// An endpoint failed (or went away) before its handshake finished.
    void on_failed(endpoint_impl* ep) noexcept;

private:
    static void conn_callback(ucp_conn_request_h request, void* arg) noexcept;

    std::shared_ptr<worker_impl> worker_;
    ucp_listener_h handle_ = nullptr;
    std::size_t backlog_;
    connection_timeouts timeouts_;
    filter_type filter_;
    std::size_t rejected_ = 0;
    std::vector<ucp_conn_request_h> requests_;
    std::vector<std::shared_ptr<endpoint_impl>> handshaking_;
    accept_queue queue_{*worker_};
};

} // namespace ucx::detail
