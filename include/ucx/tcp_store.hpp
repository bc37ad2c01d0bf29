// ucx::tcp_store, a client of a store server that speaks the protocol of
// torch.distributed's TCPStore, and ucx::tcp_store_server, such a server.
#pragma once

#include <ucx/store.hpp>

#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ucx {

/// Options of a `tcp_store`.
struct tcp_store_options {
    /// Put before every key on the wire. torch.distributed's TCPStore puts
    /// "/" before the keys of its users, so the default makes this store see
    /// the keys a Python `TCPStore` sees; an empty prefix uses the keys as
    /// they are.
    std::string key_prefix = "/";
    /// Whether this store counts itself as one of the workers that a
    /// torch.distributed `TCPStore(..., world_size, is_master=True)` waits
    /// for in its constructor: once connected for the first time, the store
    /// adds 1 to the server's key "init/" (without the prefix), as every
    /// Python `TCPStore` with a `world_size` does.
    bool join_as_worker = false;
    /// The largest value a reply may carry; a larger one is
    /// `ucx::error::store_protocol_error`.
    std::size_t max_value_size = 64 * 1024 * 1024;
    /// How long to wait before trying again when the server refuses or
    /// drops a connection (doubling up to `max_connect_retry_interval`).
    std::chrono::milliseconds connect_retry_interval{10};
    /// The longest wait between two connection attempts.
    std::chrono::milliseconds max_connect_retry_interval{1000};
};

/// A store whose keys live in a server reached over TCP, which speaks the
/// protocol of torch.distributed's TCPStore (as PyTorch 1.13 does): a
/// `tcp_store_server` of this library, or the server of a Python
/// `torch.distributed.TCPStore(..., is_master=True)` (that of a torchrun job,
/// `MASTER_ADDR:MASTER_PORT`).
///
/// The store connects when its first operation starts (or at
/// `async_connect`), trying again until the operation's timeout while the
/// server refuses (it may start after its clients). Operations other than
/// `async_get` and `async_wait` share one connection, on which they are
/// pipelined; each `async_get` and `async_wait` in flight has a connection of
/// its own (kept for the next one when it completes), because the server
/// answers a wait only when its keys are set. An operation that times out or
/// is cancelled after its query was sent closes its connection (its reply
/// would come late): on the shared connection, the other operations whose
/// queries were sent fail with `ucx::error::store_timeout` too, and the
/// queries not sent yet go on over a new connection. When the connection
/// fails (the server closed it or vanished), the operations whose queries
/// were sent fail with the I/O error (`asio::error::eof`,
/// `asio::error::connection_reset`, ...); the others go on over a new
/// connection. The protocol has no error replies: the server closes the
/// connection of an ADD to a value that is not a counter, or of the GET of a
/// key erased between the WAIT and the GET of an `async_get`, which then
/// fail with `asio::error::eof` (not `ucx::error::store_protocol_error`).
/// A reply that is not the protocol fails with
/// `ucx::error::store_protocol_error` and closes the connection.
///
/// An `async_set` completes when its query is written (the protocol has no
/// reply to SET), as torch's client does; the server applies it before any
/// later query of this store's shared connection.
///
/// The store's executor must not run handlers concurrently (an io_context
/// run by one thread, or a strand).
class tcp_store final : public store {
public:
    /// A store for the server at `host:port` (a name or an address), which
    /// it connects to on the first operation. Nothing is connected yet.
    tcp_store(executor_type ex, std::string host, std::uint16_t port,
              tcp_store_options options = {});
    /// Completes the pending operations with `asio::error::operation_aborted`
    /// and closes the connections.
    ~tcp_store() override;
    tcp_store(const tcp_store&) = delete;
    tcp_store& operator=(const tcp_store&) = delete;

    /// The executor of the store's I/O and, by default, of its handlers.
    executor_type get_executor() const noexcept override { return ex_; }
    /// The server's host and port.
    const std::string& host() const noexcept;
    std::uint16_t port() const noexcept;

    /// Connects the shared connection (trying again while the server refuses,
    /// at most `timeout()`), and, with `join_as_worker`, joins; completes when
    /// the store is ready. Operations do not need it: they connect on demand.
    /// Completion signature: `void(error_code)`.
    /// Errors: `store_timeout` (no connection within `timeout()`),
    /// `operation_aborted` (closed or destroyed); with `join_as_worker`, the
    /// I/O errors of the join's ADD (`asio::error::eof`, ...).
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_connect(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [this](auto handler) { do_connect(std::move(handler)); }, token);
    }

    /// Completes the pending operations with `asio::error::operation_aborted`
    /// and closes the connections; later operations connect again.
    void close();

private:
    struct impl;

    void do_connect(done_handler h);
    void do_set(std::string key, value_type value, done_handler h) override;
    void do_get(std::string key, value_handler h) override;
    void do_add(std::string key, std::int64_t delta, count_handler h) override;
    void do_compare_set(std::string key, value_type expected, value_type desired,
                        value_handler h) override;
    void do_check(std::vector<std::string> keys, bool_handler h) override;
    void do_wait(std::vector<std::string> keys, done_handler h) override;
    void do_erase(std::string key, bool_handler h) override;
    void do_num_keys(count_handler h) override;

    executor_type ex_;
    std::shared_ptr<impl> impl_;
};

/// Options of a `tcp_store_server`: the bounds on what a client may send and
/// hold, and the deadlines of its connection. A client over a bound is
/// disconnected (the protocol has no error replies); every refusal and
/// disconnection is logged (`ucx::log`, see the logging guide). Together they
/// bound what one connection holds: about `max_request_size` (the request
/// being read) + `max_value_size` (replies not written yet) +
/// `max_request_size` (the keys of its pending WAITs).
struct tcp_store_server_options {
    /// The largest key, in bytes.
    std::size_t max_key_size = 64 * 1024;
    /// The largest value, in bytes (and the largest size of the keys of one
    /// CHECK or WAIT together).
    std::size_t max_value_size = 64 * 1024 * 1024;
    /// The most keys of one CHECK or WAIT.
    std::size_t max_keys = 64 * 1024;
    /// The largest request, all its fields together, in bytes (65 MiB: a SET
    /// of a value of `max_value_size` and a key of `max_key_size` fits; a
    /// COMPARE_SET's two values must fit together). It also bounds the keys
    /// of a connection's WAITs not answered yet, together, each key counting
    /// 32 bytes more than its size. Over it: disconnected (logged at warning).
    std::size_t max_request_size = 65 * 1024 * 1024;
    /// The most clients connected at once. A connection over it is accepted
    /// and closed at once, so that it holds no descriptor and does not stay
    /// in the listen backlog (logged at warning; a `tcp_store` client sees
    /// `asio::error::eof` or `connection_reset` for the queries it sent).
    /// Keep it below the process's descriptor limit (`RLIMIT_NOFILE`), or
    /// accepting fails once descriptors run out (logged at warning; the
    /// server tries again every 10 ms).
    std::size_t max_connections = 1024;
    /// A client that has sent nothing and been sent nothing for this long,
    /// while it has no WAIT pending, is disconnected (logged at info). Zero
    /// (the default): never, as torch's server, whose Python clients keep
    /// one connection for the whole job and do not reconnect. A server open
    /// to clients that may hold connections without using them sets one.
    std::chrono::milliseconds idle_timeout{0};
    /// The longest a request may take to arrive, from its first byte to its
    /// last. A client whose request is not whole by then (a truncated query,
    /// a client that stalled) is disconnected (logged at warning), and its
    /// half request is dropped. Zero: no bound.
    std::chrono::milliseconds request_timeout{30000};
    /// The listen backlog.
    int backlog = boost::asio::socket_base::max_listen_connections;
};

/// A store server on an executor, speaking the protocol of
/// torch.distributed's TCPStore (as PyTorch 1.13 does): `tcp_store` clients
/// and Python's `torch.distributed.TCPStore(host, port, is_master=False)`
/// use it. It keeps the keys in memory, serves any number of clients (up to
/// `tcp_store_server_options::max_connections` at once), and answers a WAIT
/// (and so a get of a missing key) when its keys are set (by SET, ADD or
/// COMPARE_SET). Its keys follow the rules of every store of this library
/// (see `store`): ADD on a missing key starts from 0, COMPARE_SET as torch's.
///
/// A client that sends what is not the protocol (an unknown query, a size
/// over the server's bounds), a WATCH_KEY (not supported), a GET of a missing
/// key, or an ADD to a key whose value is not a decimal integer (the empty
/// value included) or that would overflow is disconnected (the protocol has
/// no error replies; torch's server does the same); so is a client over the
/// options' deadlines. The other clients are not affected. Errors of the
/// sockets end the connection they happen on, never the server: no
/// exception leaves the executor's `run()`.
///
/// The server's executor must not run handlers concurrently (an io_context
/// run by one thread, or a strand); the server is made and closed on it, or
/// before it runs.
class tcp_store_server {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Listens on `bind` (port 0: any free port; see `local_endpoint()`) and
    /// starts serving. Throws `boost::system::system_error` if it cannot
    /// listen there (`address_in_use`, `access_denied`, ...): the only error
    /// the server reports to its owner; later ones are logged.
    tcp_store_server(executor_type ex, const boost::asio::ip::tcp::endpoint& bind,
                     tcp_store_server_options options = {});
    /// Closes the server.
    ~tcp_store_server();
    tcp_store_server(const tcp_store_server&) = delete;
    tcp_store_server& operator=(const tcp_store_server&) = delete;

    /// The executor the server runs on.
    executor_type get_executor() const noexcept { return ex_; }
    /// The address and port the server listens on. Throws
    /// `boost::system::system_error` (`bad_descriptor`) once closed.
    boost::asio::ip::tcp::endpoint local_endpoint() const;
    /// The number of keys set.
    std::size_t num_keys() const noexcept;
    /// The number of clients connected.
    std::size_t num_connections() const noexcept;
    /// Stops listening and closes every client's connection. Idempotent.
    void close();

    /// The server's state (defined by the implementation).
    struct impl;

private:
    executor_type ex_;
    std::shared_ptr<impl> impl_;
};

} // namespace ucx
