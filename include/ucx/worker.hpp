// ucx::worker: a UCP worker whose progress runs on an Asio executor.
#pragma once

#include <ucx/context.hpp>
#include <ucx/detail/access.hpp>
#include <ucx/detail/checked.hpp>
#include <ucx/error.hpp>
#include <ucx/metrics.hpp>
#include <ucx/progress_mode.hpp>
#include <ucx/worker_address.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace ucx {

/// How host:port connections (`ucx::listener`, `ucx::async_connect` by name or
/// TCP endpoint, `ucx::stream::async_connect`) are set up.
enum class connection_method {
    /// The library's handshake on a TCP port: the listener is a plain TCP
    /// socket that exchanges checked worker addresses (optionally
    /// authenticated with `worker_options::secret`), then the client connects
    /// UCX by address. No byte a stranger sends reaches UCX. The default.
    handshake,
    /// UCX's socket-address connection manager (`ucp_listener_create`,
    /// sockaddr endpoints). UCX 1.13's manager aborts the process on a few
    /// malformed bytes on its port: only for ports no stranger can reach.
    ucx_sockaddr,
    /// A plain UCP connection by socket address, with no library protocol
    /// over it: UCX's socket-address connection manager, as a C program
    /// using `ucp_listener_create` and `UCP_EP_PARAMS_FLAGS_CLIENT_SERVER`
    /// endpoints makes it, so the peer may be any UCX program (UCX's
    /// examples, UCXX, UCX-Py). The endpoint is in peer error mode; tag,
    /// active-message, RMA and `ucx::stream` operations work on it. What the
    /// library protocol gives is missing: per-endpoint messaging
    /// (`ucx::error::not_connected`), an end of stream distinct from a reset
    /// (a peer's close is `connection_reset`), heartbeats (a stopped peer is
    /// noticed only by UCX's own keepalive), a goodbye on close, and the
    /// shared secret. A client is connected once UCX made the connection (a
    /// flush of the endpoint completed); a server's endpoint is accepted at
    /// once. As with `ucx_sockaddr`, UCX 1.13's manager aborts the process on
    /// a few malformed bytes on its port: only for ports no stranger can
    /// reach. docs/guide/interop.md.
    plain,
};

/// Options of a worker.
struct worker_options {
    /// How the worker waits for UCX events (see `progress_mode`). The
    /// default, `hybrid` with `adaptive_spin`, spins while traffic comes
    /// faster than a wake-up costs and sleeps on the event fd otherwise.
    progress_mode mode = progress_mode::hybrid;
    /// Hybrid mode: how long to keep progressing after the last activity
    /// before arming the event fd and sleeping (with `adaptive_spin`, the
    /// most the window grows to). Longer than a wake-up from the event fd
    /// takes: a worker whose peer slept waits for the peer's answer by
    /// spinning, or both sides would take turns waking each other (seen
    /// with 20 µs on a virtual machine whose wake-ups took about 20 µs).
    std::chrono::nanoseconds spin_duration = std::chrono::microseconds(50);
    /// Hybrid mode: the spin window follows the traffic, between none and
    /// `spin_duration`. A spin that found events, or a sleep that an event
    /// ended within `spin_duration`, doubles it (from a sixteenth of
    /// `spin_duration`); a spin that found nothing halves it, and below a
    /// sixteenth of `spin_duration` the worker no longer spins (as in
    /// `event` mode) until traffic widens it again. Request/response traffic
    /// and the steps of a rendezvous keep the window open; sparse traffic
    /// (heartbeats of idle connections) closes it after five spins that found
    /// nothing. `false`: every activity is followed by a spin of
    /// `spin_duration`.
    bool adaptive_spin = true;
    /// Safety net: while operations are in flight, progress at least this often
    /// even if no event arrived. Zero disables it. Correctness never depends on
    /// it; it bounds the damage of a transport that misses a wake-up.
    std::chrono::milliseconds safety_interval = std::chrono::milliseconds(100);
    /// Most progress/arm calls that found events (delivering completions) in
    /// one handler before the engine yields to the other handlers of the
    /// executor (values below 2 count as 2).
    unsigned max_steps_per_handler = 64;
    /// Poll and hybrid modes: how long one handler may spin on quiet progress
    /// calls before yielding to the other handlers of the executor. Each
    /// yield costs the io_context's reactor a system call, so spinning is
    /// sliced by time (checked every 64 quiet calls), not by a short count.
    std::chrono::nanoseconds spin_slice = std::chrono::microseconds(50);
    /// Poll and hybrid modes: between two quiet progress calls of a spinning
    /// handler, give the processor to the other runnable threads
    /// (`sched_yield`). For more busy processes than cores, such as the
    /// ranks of a job started with `mpirun --oversubscribe`: they wait for
    /// each other, and a rank that spins without yielding holds the core its
    /// peer needs for a whole scheduler time slice (milliseconds). Measured
    /// with 4 ranks on 2 cores (`tools/group-bench.sh`, each barrier started
    /// by the last one's handler): a barrier took 5.5 ms in `poll` mode,
    /// 4.9 µs with this, 46 µs in `event` mode. Costs a system call per
    /// quiet call where the core is not shared.
    bool yield_cpu = false;
    /// Poll and hybrid modes, when other polling workers share the worker's
    /// io_context: they spin in turns in one handler (each worker's
    /// `ucp_worker_progress` once per turn), which yields to the other
    /// handlers of the io_context after this long (the smallest value among
    /// the workers). Shorter than `spin_slice`: an io_context shared by
    /// several workers usually has other work too. Measured with
    /// `ucx-asio-demo`, a handler posted from another thread waited 4.3 to
    /// 5.2 µs (median) with 5 µs, 6 to 8.5 µs with 10 µs, and 17 to 30 µs
    /// with 50 µs, while the workers' round trip stayed at 0.31 µs.
    std::chrono::nanoseconds shared_spin_slice = std::chrono::microseconds(5);
    /// Shutdown waits at most this long for the graceful closes under way,
    /// then at most this long for UCX to call back every request.
    std::chrono::milliseconds shutdown_timeout = std::chrono::seconds(5);
    /// Active messages: the data bytes one id may hold in memory for messages
    /// nobody has taken yet. Past it, rendezvous data is left at the sender
    /// (whose send then waits) until the queue drains; eager messages stay in
    /// UCX's receive buffers (see docs/guide/active-messages.md). It is also how far
    /// rendezvous data is fetched ahead of the application: further ahead adds
    /// no bandwidth once the transport is busy, while a short window keeps the
    /// receive buffers in the processor's cache (1 MiB messages over shared
    /// memory: 29-33 GB/s with 64 MiB, 52 GB/s with 4 MiB).
    std::size_t am_queue_bytes = std::size_t(4) << 20;
    /// Connected endpoints (`async_connect`, listeners, address acceptors):
    /// a peer from which nothing came for this long is unresponsive (a
    /// stopped or hung process, a link that drops or is down): the endpoint
    /// fails and every pending operation on it completes with
    /// `ucx::error::peer_unresponsive`, on both sides. Each side pings a
    /// silent peer every quarter of it, and the peer answers; a failure is
    /// reported between one and one and a quarter times this after the last
    /// word from the peer. A process that does not run its io_context for
    /// this long looks dead to its peers: raise it for such programs. Zero
    /// disables the watch (this side still answers its peers' pings). A
    /// listener's `listener_options::peer_timeout` overrides it.
    std::chrono::milliseconds peer_timeout = std::chrono::seconds(5);
    /// How long a connection's handshake may take: `async_connect` fails with
    /// `ucx::error::handshake_timeout` after it; a listener (or address
    /// acceptor) closes a connection whose client did not complete the
    /// handshake in this time, unseen by `async_accept`. Zero: no limit. A
    /// listener's `listener_options::handshake_timeout` overrides it.
    std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
    /// How this worker's listeners and host:port connects set up connections
    /// (both sides must use the same). A listener's
    /// `listener_options::method` overrides it.
    connection_method method = connection_method::handshake;
    /// Handshake method: a secret shared by the processes allowed to connect.
    /// Non-empty: a listener admits only clients that prove they know it, and
    /// a connect succeeds only with a server that proves it (HMAC-SHA-256
    /// over fresh nonces; the secret never travels). Either side without it
    /// fails the other with `ucx::error::authentication_failed`. A listener's
    /// `listener_options::secret` overrides it.
    std::string secret;
    /// Measure how long operations take, by kind, for
    /// `worker::metrics()` (`worker_metrics::latency`): one operation in
    /// `latency_sampling`, chosen at random, with up to two reads of a clock
    /// (the operations that UCX completes inside one progress call share one
    /// reading for their ends), the processor's time-stamp counter where the
    /// kernel keeps time with it (Linux's clock source `tsc` on x86-64: about
    /// 10 ns a read), else the steady clock; the first worker that measures
    /// calibrates the counter against the steady clock (2 ms, once per
    /// process). A send that UCX completes inside its call took that call's
    /// time. The counts of operations, bytes and errors are kept in any
    /// case, for every operation.
    bool latency_histograms = false;
    /// With `latency_histograms`: the histograms measure one operation in
    /// this many on average, the gaps between measured operations drawn at
    /// random (uniformly from 1 to 2 × `latency_sampling` − 1, so no pattern
    /// of the traffic, such as sends and receives taking turns, decides
    /// which kinds are measured). The default, 16, keeps the clock's cost to
    /// about 1 % of an 8-byte message's; 1 measures every operation (0 counts
    /// as 1). A histogram's `count` is then the number of operations
    /// measured: the operation counters give the rates.
    unsigned latency_sampling = 16;
};

/// Counters of a worker's progress engine (for diagnostics and tests).
struct worker_stats {
    std::size_t passes = 0;         ///< progress passes run
    std::size_t progress_calls = 0; ///< ucp_worker_progress calls
    std::size_t arms = 0;           ///< ucp_worker_arm calls
    std::size_t arm_busy = 0;       ///< arms that answered UCS_ERR_BUSY
    std::size_t wakeups = 0;        ///< event fd wake-ups
    std::size_t yields = 0;         ///< passes that yielded to other handlers
    /// Times a spinning pass gave the processor to other threads
    /// (`worker_options::yield_cpu`).
    std::size_t cpu_yields = 0;
    std::size_t backoffs = 0; ///< passes that ended in a short back-off (UCX busy, nothing to do)
    /// Passes that ended parked: the worker spins in turns with the other
    /// polling workers of its io_context (see docs/design/progress-engine.md).
    std::size_t parks = 0;
    std::size_t safety_timer_passes = 0; ///< passes started by the safety timer
    std::size_t completions = 0;         ///< operations delivered
    /// Operations whose device buffer went through pinned host memory
    /// because UCX cannot move device memory (docs/guide/gpu.md), and their bytes.
    std::size_t staged_operations = 0;
    std::size_t staged_bytes = 0;
};

namespace detail {
class worker_impl;
}

/// A UCP worker bound to an executor. All of its progress, and every
/// completion of operations on it and on its endpoints, runs on that executor.
///
/// Thread model: a worker belongs to one executor (one io_context thread or a
/// strand); operations started from other threads are dispatched to it. Scale
/// out with one worker per thread.
///
/// A worker keeps its io_context's `run()` from returning while something
/// needs its progress: an endpoint with a UCP endpoint (connecting, open or
/// closing), a listener, an address acceptor, a connect under way, or an
/// operation in flight. Peers may need it at any time then (their sends,
/// connection set-up, heartbeats). With none of these it is not outstanding
/// work, as an idle socket is not: `run()` returns once the io_context has
/// nothing else to do, and the worker stays open for later use (see
/// docs/guide/context-and-worker.md, "When run() returns").
///
/// Movable, not copyable. Destroying the worker (or calling `close()`)
/// first lets the graceful closes under way finish (an endpoint's or a
/// stream's `close()`/`async_close()` whose peer is still there), so data
/// written before a close reaches the peer even when the program ends right
/// after, as the kernel does for a TCP socket; this blocks the caller, at
/// most for `worker_options::shutdown_timeout`, running nothing but the
/// worker's own progress. Then it force-closes its endpoints, completes every
/// pending operation with `asio::error::operation_aborted` and releases UCX
/// resources in the order UCX requires.
class worker {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Creates a worker on `ctx` whose progress runs on `ex`.
    /// Throws `boost::system::system_error` on failure:
    /// `ucx::error::context_closed` if `ctx` is not open, UCX's status from
    /// `ucp_worker_create` or `ucp_worker_get_efd`.
    worker(const context& ctx, const executor_type& ex, const worker_options& options = {});
    /// Creates a worker on `ctx` whose progress runs on the executor of `exec_ctx`
    /// (for example an `io_context`).
    template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
    worker(const context& ctx, ExecutionContext& exec_ctx, const worker_options& options = {})
        : worker(ctx, executor_type(exec_ctx.get_executor()), options) {}

    worker(worker&&) noexcept = default;
    worker& operator=(worker&& other) noexcept;
    ~worker();

    /// The executor on which progress and completions run.
    executor_type get_executor() const noexcept;

    /// This worker's address, to be sent to a peer that creates an endpoint with it.
    worker_address address() const;

    /// Progress mode in use.
    progress_mode mode() const noexcept;

    /// Shuts the worker down now (see the class description). Idempotent.
    void close();

    /// Whether the worker is open.
    bool is_open() const noexcept;

    /// The engine's counters. Safe to call from any thread.
    worker_stats stats() const noexcept;

    /// A snapshot of the worker's metrics: the engine's counters, and the
    /// operations started, completed and failed by kind, with their bytes,
    /// errors and (with `worker_options::latency_histograms`) latencies
    /// (docs/guide/metrics.md). Safe to call from any thread, also while the
    /// worker runs on another; each value is one the counter had, not all
    /// from the same instant. A closed or moved-from worker reports the
    /// counts it had (none for a moved-from one). Throws `std::bad_alloc`
    /// only.
    worker_metrics metrics() const;

    /// Number of operations in flight.
    std::size_t pending_operations() const noexcept;

    /// Requests a progress pass; safe to call from any thread.
    void signal();

    /// The UCP handle (null once closed).
    ucp_worker_h native_handle() const noexcept;

private:
    friend struct detail::access;

    std::shared_ptr<detail::worker_impl> impl_;
};

namespace detail {
/// The implementation of `w`; throws if `w` was moved from.
inline const std::shared_ptr<worker_impl>& checked(const worker& w) {
    return checked_impl(w, "ucx: operation on a moved-from worker");
}
} // namespace detail

} // namespace ucx
