// Internal: the I/O side of the connection handshake of host:port
// connections (see door_protocol.hpp): one TCP connection that runs a door
// machine under a deadline, for the client (`door_connect`, the first part of
// a connect) and for the listener (`door_session`).
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/error.hpp>

#include "connection/door_protocol.hpp"
#include "engine/worker_component.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace ucx::detail {

class worker_impl;

/// A fresh random nonce.
door_nonce make_door_nonce();

/// One TCP connection running a door machine: writes and reads what the
/// machine's steps ask for, until it finishes, fails, times out or is stopped.
class door_io : public std::enable_shared_from_this<door_io> {
public:
    door_io(const door_io&) = delete;
    door_io& operator=(const door_io&) = delete;

    /// Closes the connection; the machine finishes with `operation_aborted`.
    void stop() noexcept;

protected:
    door_io(boost::asio::ip::tcp::socket socket, std::chrono::milliseconds deadline);
    virtual ~door_io() = default;

    /// Starts the deadline (zero: none) and runs `first`.
    void begin(door_step first);
    boost::asio::ip::tcp::socket& socket() noexcept { return socket_; }

    virtual door_step on_header(std::span<const std::byte> header) = 0;
    virtual door_step on_body(std::span<const std::byte> body) = 0;
    /// The handshake is over: `step.ec` says how (`error::handshake_timeout`
    /// past the deadline, the socket's error when it broke). Called once.
    virtual void on_finish(door_step& step) = 0;

private:
    void run(door_step step);
    /// Reads `into` full, then runs the step `next(*this)` returns.
    template <class Next>
    void transfer(boost::asio::mutable_buffer into, Next next);
    /// The connection broke (or timed out): the handshake is over.
    void failed(const error_code& ec);
    void finish(door_step step);
    error_code broken(const error_code& ec) const noexcept;

    boost::asio::ip::tcp::socket socket_;
    boost::asio::steady_timer timer_;
    std::chrono::milliseconds deadline_;
    std::array<std::byte, door_header_size> header_{};
    std::vector<std::byte> body_;
    std::vector<std::byte> out_;
    bool timed_out_ = false;
    bool finished_ = false;
};

/// The client side of a connect by host:port: TCP connect, the handshake,
/// then the UCX connection to the server's worker address. Lives on the
/// worker until done, so a worker shutdown ends it.
class door_connect final : public door_io, public worker_component {
public:
    door_connect(std::shared_ptr<worker_impl> w, endpoint_op* op);
    ~door_connect() override;

    /// Starts connecting `op` to `to` (owner thread).
    static void start(const std::shared_ptr<worker_impl>& w, endpoint_op* op,
                      const boost::asio::ip::tcp::endpoint& to) noexcept;

    std::size_t run_deferred(deferred_stage) noexcept override { return 0; }
    void shutdown() noexcept override;

private:
    static void cancel(operation* op, boost::asio::cancellation_type) noexcept;
    void connect(const boost::asio::ip::tcp::endpoint& to);
    door_step on_header(std::span<const std::byte> header) override;
    door_step on_body(std::span<const std::byte> body) override;
    void on_finish(door_step& step) override;
    /// Completes the operation with `ec` (unless the worker took it already).
    void fail(const error_code& ec) noexcept;

    std::shared_ptr<worker_impl> worker_;
    endpoint_op* op_;
    door_client fsm_;
    bool registered_ = false;
};

/// One client of a listener's door. `admit` decides once its request is
/// genuine; `done` gets the outcome (the client's worker address on
/// success) and the connection's addresses.
class door_session final : public door_io {
public:
    using admit_type = std::function<bool()>;
    using done_type =
        std::function<void(door_session&, const error_code&, const worker_address& peer)>;

    door_session(boost::asio::ip::tcp::socket socket, std::chrono::milliseconds deadline,
                 std::string secret, worker_address own, admit_type admit, done_type done);

    /// Greets the client.
    void start();
    const boost::asio::ip::tcp::endpoint& remote() const noexcept { return remote_; }
    /// Takes the connection (from `done`, on success): the lifeline.
    boost::asio::ip::tcp::socket take_socket() noexcept { return std::move(socket()); }
    /// The ticket the client's hello carries (see door_server::ticket).
    const door_nonce& ticket() const noexcept { return fsm_.ticket(); }

private:
    door_step on_header(std::span<const std::byte> header) override;
    door_step on_body(std::span<const std::byte> body) override;
    void on_finish(door_step& step) override;

    door_server fsm_;
    admit_type admit_;
    done_type done_;
    boost::asio::ip::tcp::endpoint remote_;
};

/// Writes a refusal to a client the listener turns away before its
/// handshake (backlog full, filtered), then closes the connection.
void refuse_door_client(boost::asio::ip::tcp::socket socket, door_status status);

} // namespace ucx::detail
