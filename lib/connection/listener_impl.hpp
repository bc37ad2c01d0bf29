// Internal: the state behind ucx::listener.
#pragma once

#include <ucx/detail/operation.hpp>

#include "connection/accept_queue.hpp"
#include "connection/control_channel.hpp"
#include "connection/door.hpp"
#include "connection/endpoint_impl.hpp"
#include "engine/worker_component.hpp"
#include "util/counter.hpp"

#include <ucx/metrics.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

namespace ucx::detail {

class worker_impl;

/// A listener. With the handshake method (the default) it is a TCP acceptor
/// whose clients pass the door handshake (door.hpp); the UCX connection each
/// then makes by address arrives as a hello that the control channel hands
/// to this listener, which expects that client. With the UCX socket-address
/// method it is a `ucp_listener`.
class listener_impl final : public worker_component,
                            public hello_taker,
                            public std::enable_shared_from_this<listener_impl> {
public:
    using filter_type = std::function<bool(const boost::asio::ip::tcp::endpoint&)>;

    struct settings {
        std::size_t backlog = 128;
        filter_type filter;
        connection_timeouts timeouts;
        connection_method method = connection_method::handshake;
        std::string secret;
        bool reuse_address = true;
        bool reuse_port = false;
    };

    listener_impl(std::shared_ptr<worker_impl> worker, settings s);
    ~listener_impl();
    listener_impl(const listener_impl&) = delete;
    listener_impl& operator=(const listener_impl&) = delete;

    void open(const boost::asio::ip::tcp::endpoint& bind, error_code& ec);
    /// Rejects queued requests, drops unaccepted connections, aborts accepts. Idempotent.
    void close() noexcept;
    bool is_open() const noexcept { return handle_ != nullptr || door_attached_; }
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const;
    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    /// The connections refused so far, all causes (any thread).
    std::size_t rejected() const noexcept;
    /// Its counts (any thread).
    void metrics(listener_metrics& m) const noexcept;

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

    // hello_taker (handshake method): the clients the door admitted.
    bool expects(const worker_address& peer,
                 std::span<const std::byte> ticket) const noexcept override;
    bool has_room() const noexcept override { return queue_.ready() < backlog_; }
    connection_timeouts timeouts() const noexcept override { return timeouts_; }
    bool offer(std::shared_ptr<endpoint_impl> ep, const worker_address& peer,
               std::span<const std::byte> ticket) noexcept override;
    void channel_gone() noexcept override;

private:
    static void conn_callback(ucp_conn_request_h request, void* arg) noexcept;
    void open_door(const boost::asio::ip::tcp::endpoint& bind, error_code& ec);
    void accept_next();
    void on_tcp_accept(const error_code& ec, boost::asio::ip::tcp::socket socket);
    void session_done(door_session& s, const error_code& ec, const worker_address& peer);
    /// Connections under way (handshaking or admitted, not yet queued) and
    /// queued: what the backlog bounds.
    std::size_t waiting() const noexcept;
    /// Counts a connection refused for `cause`, and logs `why`.
    void refuse(refusal_cause cause, const std::string& why) noexcept;
    /// A connection finished its handshake: queued (counted) for an accept.
    bool queue_accepted(std::shared_ptr<endpoint_impl> ep) noexcept;

    /// A client the door admitted, until its UCX hello comes (or its
    /// handshake time runs out).
    struct expected_client {
        worker_address peer;
        /// The ticket of its door handshake, which its hello carries.
        door_nonce ticket;
        /// The handshake's TCP connection: the connection's lifeline.
        boost::asio::ip::tcp::socket socket;
        std::chrono::steady_clock::time_point deadline;
    };
    void expire_clients() noexcept;

    std::shared_ptr<worker_impl> worker_;
    ucp_listener_h handle_ = nullptr;
    std::size_t backlog_;
    connection_timeouts timeouts_;
    filter_type filter_;
    connection_method method_;
    std::string secret_;
    bool reuse_address_;
    bool reuse_port_;
    // Handshake method.
    std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
    std::unique_ptr<boost::asio::steady_timer> retry_timer_;
    /// A descriptor kept in reserve: out of descriptors, the listener gives
    /// it up to accept the waiting client and refuse it, so the client gets
    /// a clear answer instead of waiting for its deadline.
    int spare_fd_ = -1;
    /// Descriptors that must be free, besides the lifeline, to admit a
    /// client: UCX's own for the connection (a TCP socket; one held for a
    /// moment to map a shared-memory peer).
    static constexpr int connection_descriptors = 2;
    /// Reopens the reserve descriptor if it is missing.
    void restore_reserve() noexcept;
    void await_client_out_of_descriptors();
    void take_client_out_of_descriptors();
    void take_door_client(boost::asio::ip::tcp::socket socket);
    void retry_accept_later();
    std::unique_ptr<boost::asio::steady_timer> expiry_timer_;
    std::vector<std::shared_ptr<door_session>> sessions_;
    std::list<expected_client> expected_;
    bool door_attached_ = false;
    // Written on the owner thread, read from any (`metrics`).
    counter accepted_;
    std::array<counter, refusal_cause_count> refused_{};
    std::vector<ucp_conn_request_h> requests_;
    std::vector<std::shared_ptr<endpoint_impl>> handshaking_;
    accept_queue queue_{*worker_};
};

} // namespace ucx::detail
