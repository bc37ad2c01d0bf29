// Internal: the state behind ucx::endpoint.
#pragma once

#include "connection/connection_fsm.hpp"

#include <atomic>
#include <ucx/detail/operation.hpp>
#include <ucx/endpoint_lane.hpp>
#include <ucx/endpoint_report.hpp>
#include <ucx/worker_address.hpp>

#include "connection/control_message.hpp"
#include "engine/engine_metrics.hpp"
#include "engine/worker_component.hpp"
#include "engine/worker_impl.hpp"
#include "util/guarded_timer.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <sys/socket.h>

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace ucx::detail {

class worker_impl;
class listener_impl;

/// A connection's deadlines (zero: none). See `worker_options::peer_timeout`
/// and `worker_options::handshake_timeout`.
struct connection_timeouts {
    std::chrono::milliseconds peer_timeout{0};
    std::chrono::milliseconds handshake_timeout{0};
};

/// The ucx::stream over an endpoint: told what concerns it (owner thread).
class endpoint_watcher {
public:
    /// UCX may soon drop the stream data it received on `ep` (the peer said
    /// goodbye, or `ep` is about to be force-closed): take it.
    virtual void take_received(ucp_ep_h ep) noexcept = 0;
    /// The peer wrote `total` stream bytes in all: a half close (stream_end),
    /// or with its goodbye.
    virtual void peer_stream_end(std::uint64_t total, bool goodbye) noexcept = 0;
    /// The peer says it has read `bytes` stream bytes (stream_ack).
    virtual void peer_stream_acked(std::uint64_t bytes) noexcept = 0;
    /// UCX queued stream data for this endpoint (after a progress call).
    virtual void stream_data_ready() noexcept = 0;

protected:
    ~endpoint_watcher() = default;
};

class endpoint_impl final : public worker_component,
                            public std::enable_shared_from_this<endpoint_impl> {
public:
    using role = connection_role;

    explicit endpoint_impl(std::shared_ptr<worker_impl> worker);
    ~endpoint_impl();
    endpoint_impl(const endpoint_impl&) = delete;
    endpoint_impl& operator=(const endpoint_impl&) = delete;

    /// Creates the UCP endpoint to a worker address, in peer error mode.
    void connect(const worker_address& address, error_code& ec);
    /// Client side: connects to a listener; `op` completes when the
    /// handshake is done (its result: this endpoint) or the connection fails.
    void connect_to(const sockaddr* addr, socklen_t len, endpoint_op* op) noexcept;
    /// Client side of a plain UCP connection (no library protocol): `op`
    /// completes when UCX has made the connection (a flush of the new
    /// endpoint completed) or it fails.
    void connect_plain(const sockaddr* addr, socklen_t len, endpoint_op* op) noexcept;
    /// Client side over a worker address: creates the UCP endpoint (peer
    /// error mode) and sends the hello; `op` completes when the peer's
    /// address acceptor welcomes it (its result: this endpoint), refuses it
    /// (`connection_refused`) or the connection fails.
    void connect_address(const worker_address& address, endpoint_op* op,
                         std::span<const std::byte> ticket = {}) noexcept;
    /// Makes the connection one of a group's fabric: its id gets the fabric
    /// bit (`fabric_tag`). Before `connect_address` or
    /// `accept_address`.
    void mark_fabric() noexcept { fabric_ = true; }
    /// Wraps a UCP endpoint that UCX owns (the reply endpoint of an active
    /// message): usable for sends; closing it only forgets it.
    void adopt(ucp_ep_h ep) noexcept;
    /// Server side over a worker address: owns `own`, the UCP endpoint this
    /// worker created that UCX pairs with the peer's connection whose `hello`
    /// arrived (see control_channel::own_endpoint), and answers the hello.
    /// Closes `own` when it fails (`bad_descriptor`: the worker is closed).
    void accept_address(ucp_ep_h own, const control_message& hello,
                        const connection_timeouts& timeouts, error_code& ec) noexcept;
    /// Keeps the TCP connection whose handshake made this connection (the
    /// handshake method) open while the connection lives, as its lifeline:
    /// the kernel closes it when the peer's process ends, which UCX's
    /// shared-memory transports never notice, so a killed peer fails the
    /// endpoint at once (as `connection_reset`). Closed with the UCP
    /// endpoint, after the goodbye of a graceful close. Its addresses are
    /// what `query_sockaddr` reports.
    void adopt_lifeline(boost::asio::ip::tcp::socket socket) noexcept;
    /// Server side: accepts a connection request; the listener is told when
    /// the handshake is done (`plain`: the endpoint is open at once, and the
    /// listener is not told).
    void accept_request(ucp_conn_request_h request, listener_impl* listener, bool plain,
                        const connection_timeouts& timeouts, error_code& ec);

    ucp_ep_h native() const noexcept { return ep_; }
    /// The lanes UCX chose (`ucp_ep_print_info`, parsed); needs the UCP
    /// endpoint (`native()`). Fails only with `not_enough_memory`.
    std::vector<endpoint_lane> lanes(error_code& ec) const;
    /// The connection protocol's state (its role, state and error).
    const connection_fsm& protocol() const noexcept { return fsm_; }
    /// One of a group's connections (`mark_fabric`).
    bool is_fabric() const noexcept { return fabric_; }
    /// Its heartbeats: pings sent, pongs received, and the round trip of the
    /// last ping answered (-1 ns: none yet).
    std::uint64_t pings() const noexcept { return pings_; }
    std::uint64_t pongs() const noexcept { return pongs_; }
    std::chrono::nanoseconds round_trip() const noexcept { return round_trip_; }
    /// The operations made on it, by kind (from any thread: its counters).
    void metrics(endpoint_metrics& m) const noexcept;
    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    role kind() const noexcept { return fsm_.role(); }
    /// A client/server endpoint (with the hello/welcome handshake).
    bool has_handshake() const noexcept { return fsm_.has_handshake(); }
    /// Usable for operations (created, handshake done where there is one).
    bool is_open() const noexcept { return ep_ != nullptr && fsm_.is_open(); }
    /// Why the endpoint is not usable; empty while it is (or still connecting).
    const error_code& error() const noexcept { return fsm_.error(); }
    /// `close_in_background` was called: the handle reports the endpoint
    /// closed from then on, though the close runs on the worker's executor
    /// (dispatched there from another thread, in order with the operations
    /// started before it).
    bool close_requested() const noexcept {
        return close_requested_.load(std::memory_order_acquire);
    }

    // Operations (owner thread).

    /// Starts `op` on this endpoint: links it, ties it to this endpoint's
    /// failure, and checks the endpoint is usable. Returns false after
    /// failing `op` (worker closed, endpoint closed or failed). A `counted`
    /// operation holds back a graceful close until UCX completes it (sends,
    /// puts): call `submitted(op, r)` next.
    bool begin(operation* op, bool counted) noexcept;
    /// Ties `op`, about to be started on the worker, to this endpoint: its
    /// endpoint's failure fails it, and it is counted in this endpoint's
    /// metrics under its kind (`op->kind`, set already).
    void attach(operation* op) noexcept {
        op->endpoint = this;
        count(op);
    }
    /// Has `op` (as a rule about to be started) counted in this endpoint's metrics
    /// (instead of its worker's own: the worker's counts include this
    /// endpoint's): alone, for an operation of its stream, which this
    /// endpoint's failure does not end directly. The worker counts its start
    /// and its end there.
    void count(operation* op) noexcept {
        if constexpr (counts_operations) {
            if (op->in_flight) [[unlikely]]
                return count_started(op);
            op->counted_in = &ops_[static_cast<std::size_t>(op->kind)];
        }
    }
    /// `count` for an operation started on the worker before this endpoint
    /// existed (a connect, after its handshake): its start moves here.
    void count_started(operation* op) noexcept;
    /// Hands UCX's answer for an operation begun with `begin`.
    void submitted(operation* op, ucs_status_ptr_t result) noexcept;
    /// Whether the send `op` may go to UCX before it is started (then hand
    /// UCX's answer to `submitted_first`; otherwise `begin` and `submitted`):
    /// it was not started and the endpoint is usable. A send UCX completes
    /// inside its call then costs no trip through the in-flight lists. When
    /// true, `op`'s start is stamped (where the worker measures latencies).
    bool may_submit_first(operation* op) noexcept {
        // Not started yet (a send held back behind a staged one is), on a
        // usable endpoint. Inline, as the common end of `submitted_first`:
        // once per message.
        worker_impl& w = *worker_;
        if (op->in_flight || !w.is_open() || op->cancel_requested || !ep_ || error()) [[unlikely]]
            return false;
        w.stamp_start(op);
        return true;
    }
    /// Takes UCX's answer for a send submitted before it was started
    /// (`may_submit_first`): done at once, or started and handed to
    /// `submitted` as `begin(op, true)` would have.
    void submitted_first(operation* op, ucs_status_ptr_t result) noexcept {
        // Nothing could end `op` between UCX's call and here: UCX calls a
        // request's callback from a later progress only.
        if (result == nullptr) [[likely]] {
            // Completed inside the call (eager, with send resources free:
            // the common case): never in the worker's in-flight list nor
            // among this endpoint's sends in flight, which a graceful close
            // waits for.
            attach(op);
            return worker_->done_at_once(op);
        }
        submitted_later(op, result);
    }
    /// `submitted_first` for a request UCX keeps (or a failure).
    void submitted_later(operation* op, ucs_status_ptr_t result) noexcept;
    void tag_send(transfer_op* op, const void* data, std::size_t size, ucp_tag_t tag) noexcept;
    /// Per-endpoint messaging: the UCX tag is the receiving endpoint's random
    /// 32-bit id (high half) and the user's 32-bit tag (low half).
    void send(transfer_op* op, const void* data, std::size_t size, std::uint32_t tag) noexcept;
    void recv(tag_recv_op* op, void* data, std::size_t size, std::uint32_t tag,
              std::uint32_t mask) noexcept;
    /// A per-endpoint send of host memory that UCX completes inside this call
    /// (its short protocol: the data is copied out before it returns), with
    /// no operation and no completion to deliver. True when sent; false
    /// leaves nothing done: the endpoint is not usable now, an earlier staged
    /// send on it still waits (messages keep their order), or UCX cannot
    /// complete it at once (size above its short limit, no send resources).
    /// The caller then sends it with `send`, which reports any error.
    bool send_now(const void* data, std::size_t size, std::uint32_t tag) noexcept;
    /// `ucx::try_tag_send`: a tag send of host memory that UCX completes
    /// inside this call, with no operation; `would_block` where it cannot
    /// (off the worker's thread, device memory or an earlier staged send
    /// where the worker stages, UCX without room or above its short limit),
    /// or the error that an `async_tag_send` would end with at once.
    error_code tag_send_at_once(const void* data, std::size_t size, ucp_tag_t tag) noexcept;
    /// What `recv_at_once` did.
    enum class at_once {
        not_here, ///< nothing: no message with the tag is here yet, or the endpoint is not usable
        done,     ///< received inside the call
        pending   ///< the message is taken, UCX needs a request: see `adopt_recv`
    };
    /// A per-endpoint receive of host memory that takes a message already
    /// here inside this call, with no operation. When UCX holds a message
    /// with `tag`, it is taken, and `length` is its length: received into
    /// `data` (`done`; at most `size` bytes: a longer one is reported as
    /// `pending` with UCX's truncation error), or, when UCX cannot complete
    /// it at once (a message it moves by rendezvous), `pending` holds UCX's
    /// answer and the caller gives it an operation with `adopt_recv` before
    /// anything else runs on the worker. `not_here` does nothing: `recv`
    /// receives the message later.
    at_once recv_at_once(void* data, std::size_t size, std::uint32_t tag, ucs_status_ptr_t& pending,
                         std::size_t& length) noexcept;
    /// `op` completes the receive `recv_at_once` left pending, as one
    /// started by `recv` completes.
    void adopt_recv(tag_recv_op* op, ucs_status_ptr_t pending) noexcept;
    void wait_error(operation* op) noexcept;
    /// Graceful close; the goodbye tells the peer `stream_bytes` (what a
    /// ucx::stream wrote).
    void close_gracefully(endpoint_op* op, std::uint64_t stream_bytes = 0) noexcept;
    /// The same close in the background, owned by an operation of its own
    /// that keeps this endpoint alive until it ends (`endpoint::close()`,
    /// `stream::close()`); an endpoint closed here already is left as it is,
    /// one without a UCX endpoint (failed, worker closed) is force-closed.
    void close_in_background(std::uint64_t stream_bytes = 0) noexcept;

    /// Force-closes: operations in flight complete with `ec` (or
    /// operation_aborted for a local close), later ones fail with `error()`.
    void force_close(const error_code& ec) noexcept;
    /// The worker is shutting down: force-close, and detach from it.
    void detach() noexcept;
    /// Processes a failure recorded by the error callback (owner thread).
    void handle_failure() noexcept;
    /// A control message from the peer arrived (owner thread).
    void on_control(const control_message& m) noexcept;
    /// A counted send finished (inside a UCX callback: records only).
    void send_finished() noexcept;
    /// A send the library holds before UCX has it (a device buffer still
    /// being staged): a graceful close waits for it as for a send in flight,
    /// until `release_send` (once it reached UCX, or ended).
    void hold_send() noexcept { ++sends_in_flight_; }
    void release_send() noexcept { send_finished(); }
    /// Sends have drained during a graceful close: say goodbye, wait for the
    /// peer's ack (at most `goodbye_linger`), then close (owner thread, after
    /// progress).
    void finish_close() noexcept;
    /// How long a graceful close waits for the peer to acknowledge its goodbye.
    static constexpr std::chrono::seconds goodbye_linger{5};
    /// The listener that accepted this endpoint goes away.
    void forget_listener() noexcept {
        listener_ = nullptr;
        fsm_.forget_listener();
    }

    /// Local and remote socket addresses (client/server endpoints).
    bool query_sockaddr(bool remote, sockaddr_storage& out) const noexcept;

    // ucx::stream.
    /// Installs (or, with null, removes) the stream told about stream events.
    void set_watcher(endpoint_watcher* w) noexcept { watcher_ = w; }
    /// The stream over this endpoint, if any.
    endpoint_watcher* watcher() const noexcept { return watcher_; }
    /// Whether the peer's goodbye arrived.
    bool peer_said_goodbye() const noexcept { return fsm_.peer_said_goodbye(); }
    /// The stream bytes the peer said it wrote in all (stream_end or
    /// goodbye), for a stream that starts after the message came.
    std::optional<std::uint64_t> peer_stream_end() const noexcept { return fsm_.peer_stream_end(); }
    /// Tells the peer this side writes no more stream bytes than `total`
    /// (half close).
    void send_stream_end(std::uint64_t total) noexcept;
    /// Counted sends (stream writes, sends) UCX has not completed yet.
    std::size_t sends_in_flight() const noexcept { return sends_in_flight_; }
    /// A number no other endpoint of the process has: tells this endpoint
    /// from a later one at the same address (received messages remember
    /// their sender by pointer and serial, without reference counting).
    std::uint64_t serial() const noexcept { return serial_; }

    // The worker runs the close (close_ready) and the failure (failure)
    // after progress, and detaches the endpoint at shutdown.
    std::size_t run_deferred(deferred_stage stage) noexcept override;
    void shutdown() noexcept override { detach(); }
    /// A graceful close under way whose peer's process still lives (its
    /// lifeline, when there is one, is still open).
    bool finishing() const noexcept override;
    /// While it has a UCP endpoint (connecting, open or closing); a closed
    /// or failed endpoint needs nothing from the worker.
    bool keeps_worker_running() const noexcept override { return ep_ != nullptr; }

    /// Status reported by the error callback.
    ucs_status_t failure_status = UCS_OK;
    /// Plain client: the flush of the new UCP endpoint completed.
    bool reached = false;
    /// Plain client: the flush of the new UCP endpoint completed with
    /// `status` (called inside ucp_worker_progress: records only).
    void flushed(ucs_status_t status) noexcept;

    /// The error handler of the endpoint's UCP endpoint (`arg` is the
    /// endpoint): records the failure for the worker to act on.
    static void error_callback(void* arg, ucp_ep_h ep, ucs_status_t status) noexcept;

private:
    /// Whether `send_now` and `recv_at_once` may go to UCX: the worker is
    /// open, the endpoint established and not failed. (Defined
    /// inline in lib/connection/endpoint.cpp, beside its two callers.)
    inline bool usable_at_once() const noexcept;
    static void cancel_connect(operation* op, boost::asio::cancellation_type) noexcept;
    /// The start shared by both connects: links `op`, checks the worker.
    /// False when `op` already failed.
    bool begin_connect(endpoint_op* op) noexcept;
    /// Creates the UCP endpoint of a client connection, which `op` completes.
    /// False when `op` already failed.
    bool create_client(ucp_ep_params_t& params, endpoint_op* op, bool by_address, role r) noexcept;
    /// A client endpoint by socket address (UCX's connection manager) in
    /// role `r` (client, or plain client).
    void connect_sockaddr(const sockaddr* addr, socklen_t len, endpoint_op* op, role r) noexcept;
    static void cancel_wait(operation* op, boost::asio::cancellation_type) noexcept;
    void create(ucp_ep_params_t& params, error_code& ec) noexcept;
    /// Executes what the connection protocol decided, in order.
    void execute(const connection_actions& actions, endpoint_op* new_close_op = nullptr) noexcept;
    /// Fails everything pending on this endpoint with `ec`.
    void fail_pending(const error_code& ec) noexcept;
    /// Graceful close: pending receives and waits end with operation_aborted.
    void abort_pending() noexcept;
    void finish_connect(const error_code& ec) noexcept;
    void start_linger() noexcept;
    /// The protocol's start parameters of a client/server endpoint.
    connection_fsm::start_params connection_params(role r, bool by_address, bool listener,
                                                   const connection_timeouts& t) const noexcept;
    /// The worker's defaults.
    connection_timeouts worker_timeouts() const noexcept;
    void arm_timer(std::uint64_t ms) noexcept;
    /// Plain client: flushes the new UCP endpoint; its completion shows UCX
    /// made the connection.
    void flush_to_connect() noexcept;
    /// Closes the UCP endpoint (flush mode: the kept close operation
    /// completes with it; else force).
    void close_ucp(bool flush) noexcept;
    void unmap() noexcept;
    /// Operations still in flight forget this endpoint (it goes away, or
    /// leaves its worker); they still count in its counters while it lives.
    void orphan_operations() noexcept;
    /// Whether a message for this endpoint waits in UCX's unexpected queue.
    bool has_message_waiting(ucp_tag_t tag, ucp_tag_t mask) const noexcept;
    /// A pong came: counted, and the round trip of the last ping measured.
    void pong_came() noexcept;

    std::shared_ptr<worker_impl> worker_;
    const std::uint64_t serial_;
    ucp_ep_h ep_ = nullptr;
    // The connection protocol: role, handshake, error, graceful close.
    connection_fsm fsm_;
    bool registered_ = false;
    bool fabric_ = false;
    bool mapped_ = false;
    std::atomic<bool> close_requested_{false};
    void watch_lifeline() noexcept;
    void close_lifeline() noexcept;
    std::unique_ptr<boost::asio::ip::tcp::socket> lifeline_;
    std::byte lifeline_byte_{};
    sockaddr_storage door_local_{};
    sockaddr_storage door_remote_{};
    bool has_door_addresses_ = false;
    endpoint_op* connect_op_ = nullptr;
    listener_impl* listener_ = nullptr;
    std::vector<operation*> waiters_;
    std::size_t sends_in_flight_ = 0;
    endpoint_op* close_op_ = nullptr;
    endpoint_watcher* watcher_ = nullptr;
    // Graceful close: after the goodbye, wait (bounded) for the peer's ack.
    std::unique_ptr<guarded_timer> linger_timer_;
    // The connection's deadline: the handshake's, then the heartbeat ticks.
    std::unique_ptr<guarded_timer> timer_;
    // Heartbeats (owner thread).
    std::uint64_t pings_ = 0;
    std::uint64_t pongs_ = 0;
    std::chrono::steady_clock::time_point ping_at_{};
    std::chrono::nanoseconds round_trip_{-1};
    // The operations made on it, by kind (`attach`; the worker counts them
    // through `operation::counted_in`, and adds these to its own counts).
    kind_counter_set ops_{};
};

class context_impl;

/// Whether UCX's socket-address connection manager can connect over `a`
/// with the context `ctx`: the address family must be the one UCX's TCP
/// transport prefers (TCP_AF_PRIO: IPv4 by default), and the IPv6 loopback
/// and unspecified addresses need UCX 1.14 (lib/connection/connect.cpp says why). The
/// socket-address methods refuse another address up front with
/// `asio::error::address_family_not_supported`.
bool ucx_connects_over(const context_impl& ctx, const boost::asio::ip::address& a) noexcept;

/// Appends a report of each endpoint of `w` to `out`, by id, with
/// `worker_name` (owner thread: the metrics exporter's /endpoints).
void report_endpoints(const worker_impl& w, std::string_view worker_name,
                      std::vector<endpoint_report>& out);

/// Bit 63 of an endpoint's id (the high half of its receive tags) is set for
/// the connections of a group's fabric only (`fabric_tag`), so a group's
/// receive from any rank can match the fabric's messages and never another
/// connection's, whatever their 32-bit tags.
inline constexpr std::uint64_t fabric_tag_bit = std::uint64_t{1} << 63;
/// A fresh random id for an endpoint of `w` (bit 63 clear).
std::uint64_t random_tag(worker_impl& w) noexcept;
/// A fresh random id for a fabric connection of `w` (bit 63 set).
std::uint64_t fabric_tag(worker_impl& w) noexcept;
/// Connects `op`'s new endpoint to the worker at `to` as a connection of a
/// group's fabric (lib/connection/connect.cpp; see `fabric_tag`).
void connect_fabric(worker_impl& w, endpoint_op* op, const worker_address& to) noexcept;

} // namespace ucx::detail
