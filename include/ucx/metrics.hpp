// Metrics: what a worker did, as plain values (see docs/guide/metrics.md).
#pragma once

#include <boost/system/error_code.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ucx {

/// What an operation does, as the metrics count it.
enum class operation_kind : std::uint8_t {
    other,        ///< the library's own waits (an endpoint's error watch, ...)
    tag_send,     ///< `async_tag_send`, `endpoint::async_send`
    tag_recv,     ///< `async_tag_recv`, `endpoint::async_receive`
    am_send,      ///< `async_am_send`
    am_recv,      ///< `async_am_receive`
    stream_write, ///< `basic_stream::async_write_some`
    stream_read,  ///< `basic_stream::async_read_some`
    put,          ///< `async_put`, `ucxio::async_write_at`
    get,          ///< `async_get`, `ucxio::async_read_at`
    atomic,       ///< `async_atomic_*`
    connect,      ///< `async_connect`
    accept,       ///< `listener::async_accept`, `acceptor::async_accept`
    close,        ///< `endpoint::async_close`, `basic_stream::async_close`
};

/// Number of `operation_kind` values.
inline constexpr std::size_t operation_kind_count = 13;

/// The kind's name as the metrics label it ("tag_send", ...).
std::string_view to_string(operation_kind k) noexcept;

/// Whether operations of kind `k` move bytes out of this process (sends,
/// writes, puts) rather than into it (receives, reads, gets).
constexpr bool sends_bytes(operation_kind k) noexcept {
    return k == operation_kind::tag_send || k == operation_kind::am_send ||
           k == operation_kind::stream_write || k == operation_kind::put;
}

/// Counts of one kind of operation.
struct operation_counts {
    std::uint64_t started = 0;   ///< handed to the worker
    std::uint64_t completed = 0; ///< delivered to their handler, failed or not
    std::uint64_t failed = 0;    ///< of those, with an error (cancellations included)
    /// Bytes moved by the operations that succeeded (a receive counts what
    /// arrived, not its buffer's size).
    std::uint64_t bytes = 0;

    bool operator==(const operation_counts&) const = default;
};

/// How long operations took, from their start to the end of their UCX
/// request (or the library's completion), in buckets whose upper bounds
/// double from 1 µs (`upper_bound(i)`); the last one has no bound.
struct latency_histogram {
    static constexpr std::size_t bucket_count = 24;
    /// Upper bound of bucket `i` (`i + 1 < bucket_count`): 2^i µs.
    static constexpr std::chrono::nanoseconds upper_bound(std::size_t i) noexcept {
        return std::chrono::nanoseconds(std::int64_t(1000) << i);
    }
    /// Operations per bucket (not cumulative).
    std::array<std::uint64_t, bucket_count> buckets{};
    std::uint64_t count = 0;        ///< operations measured
    std::chrono::nanoseconds sum{}; ///< their total time
};

/// Completions with one error code.
struct error_count {
    boost::system::error_code code;
    std::uint64_t count = 0;
};

/// A snapshot of one worker's metrics: plain values, taken from any thread
/// (`worker::metrics()`). Counters only grow while the worker lives.
struct worker_metrics {
    /// Progress engine (as `worker::stats()`).
    std::uint64_t passes = 0;
    std::uint64_t progress_calls = 0;
    std::uint64_t arms = 0;
    std::uint64_t arm_busy = 0;
    std::uint64_t wakeups = 0;
    std::uint64_t yields = 0;
    std::uint64_t cpu_yields = 0;
    std::uint64_t backoffs = 0;
    std::uint64_t parks = 0;
    std::uint64_t safety_timer_passes = 0;
    /// Operations whose device buffer went through pinned host memory, and their bytes.
    std::uint64_t staged_operations = 0;
    std::uint64_t staged_bytes = 0;
    /// Heartbeats of the worker's connections (`worker_options::peer_timeout`):
    /// pings sent after a heartbeat tick in which nothing came from the peer,
    /// the pongs that answered them, and the connections that failed because
    /// their peer stopped answering (`error::peer_unresponsive`).
    std::uint64_t heartbeat_pings = 0;
    std::uint64_t heartbeat_pongs = 0;
    std::uint64_t peers_unresponsive = 0;
    /// How long each pong took to come back, from the endpoint's last ping
    /// (one clock read at each end; pings are rare).
    latency_histogram heartbeat_round_trip{};
    /// Operations in flight now.
    std::uint64_t in_flight = 0;
    /// By `operation_kind` (index with `static_cast<std::size_t>(kind)`).
    std::array<operation_counts, operation_kind_count> operations{};
    /// Failed completions by error code, the 16 most frequent codes first
    /// seen; the rest are counted in `other_errors`.
    std::vector<error_count> errors;
    std::uint64_t other_errors = 0;
    /// Whether operations are counted: false in a library built with the
    /// CMake option `UCX_ASIO_OPERATION_METRICS=OFF`, where `in_flight` is
    /// still kept but `operations`, `errors`, `other_errors` and `latency`
    /// stay empty, as do the counts of `endpoint::metrics()`.
    bool counts_operations = true;
    /// Whether latencies are measured (`worker_options::latency_histograms`;
    /// never without `counts_operations`).
    bool has_latency = false;
    /// One operation in this many is measured
    /// (`worker_options::latency_sampling`); 0 without `has_latency`.
    unsigned latency_sampling = 0;
    /// By `operation_kind`; empty unless `has_latency`.
    std::array<latency_histogram, operation_kind_count> latency{};

    const operation_counts& of(operation_kind k) const noexcept {
        return operations[static_cast<std::size_t>(k)];
    }
};

/// A snapshot of one endpoint's metrics (`endpoint::metrics()`), taken from
/// any thread. Counters only grow while the endpoint lives.
struct endpoint_metrics {
    /// The operations made on this endpoint, by `operation_kind`, counted as
    /// its worker counts them (the worker's counts include these): sends
    /// and its own receives (`async_send`, `async_receive`,
    /// `async_tag_send`), active-message sends, stream reads and writes,
    /// puts, gets, atomics, its connect, and its flushes and error watch
    /// (`other`).
    /// Worker-wide receives (`async_tag_recv`, `async_am_receive`), accepts
    /// and closes are the worker's only.
    /// All zero in a library built without operation metrics
    /// (`worker_metrics::counts_operations`).
    std::array<operation_counts, operation_kind_count> operations{};
    /// Operations of this endpoint started and not completed yet.
    std::uint64_t in_flight = 0;

    const operation_counts& of(operation_kind k) const noexcept {
        return operations[static_cast<std::size_t>(k)];
    }

    bool operator==(const endpoint_metrics&) const = default;
};

/// Why a listener refused a connection (`listener_metrics::refused`).
enum class refusal_cause : std::uint8_t {
    backlog_full,       ///< the connections waiting for `async_accept` filled the backlog
    filter,             ///< the listener's filter refused the client's address
    out_of_descriptors, ///< the process had no file descriptor left for it
    handshake_timeout,  ///< its handshake did not finish within `handshake_timeout`
    handshake_failed,   ///< its handshake failed: another protocol, a wrong secret, the client left
};

/// Number of `refusal_cause` values.
inline constexpr std::size_t refusal_cause_count = 5;

/// The cause's name as the metrics label it ("backlog_full", ...).
std::string_view to_string(refusal_cause c) noexcept;

/// A snapshot of one listener's metrics (`listener::metrics()`), taken from
/// any thread. Counters only grow while the listener lives.
struct listener_metrics {
    /// Connections whose handshake finished: queued for `async_accept`.
    std::uint64_t accepted = 0;
    /// Connections refused, by cause (index with `static_cast<std::size_t>(cause)`).
    std::array<std::uint64_t, refusal_cause_count> refused{};

    std::uint64_t of(refusal_cause c) const noexcept {
        return refused[static_cast<std::size_t>(c)];
    }
};

/// An operation of a `ucx::store`, as its metrics count it.
enum class store_operation : std::uint8_t {
    set,         ///< `async_set`
    get,         ///< `async_get`
    add,         ///< `async_add`
    compare_set, ///< `async_compare_set`
    check,       ///< `async_check`
    wait,        ///< `async_wait`
    erase,       ///< `async_erase`
    num_keys,    ///< `async_num_keys`
};

/// Number of `store_operation` values.
inline constexpr std::size_t store_operation_count = 8;

/// The operation's name as the metrics label it ("set", "get", ...).
std::string_view to_string(store_operation op) noexcept;

/// A snapshot of one store's metrics (`store::metrics()`), taken from any
/// thread. Counters only grow while the store lives.
struct store_metrics {
    /// By operation (index with `static_cast<std::size_t>(op)`): `started`,
    /// `completed` (failed or not), `failed` (timeouts, cancellations and
    /// I/O errors included); `bytes` is not counted (0).
    std::array<operation_counts, store_operation_count> operations{};
    /// Operations started and not completed yet.
    std::uint64_t in_flight = 0;

    const operation_counts& of(store_operation op) const noexcept {
        return operations[static_cast<std::size_t>(op)];
    }
};

/// A collective of a `ucx::group`, as the metrics count it.
enum class collective_kind : std::uint8_t {
    barrier,
    broadcast,
    gather,
    allgather,
    allgatherv,
    reduce,
    allreduce,
    alltoall,
};

/// Number of `collective_kind` values.
inline constexpr std::size_t collective_kind_count = 8;

/// The kind's name as the metrics label it ("allreduce", ...).
std::string_view to_string(collective_kind k) noexcept;

/// A snapshot of one group's metrics on this rank (`group::metrics()`), taken
/// from any thread. Counters only grow while the group lives.
struct group_metrics {
    int rank = -1; ///< this rank (-1 for an empty group)
    int size = 0;  ///< the group's size
    /// Collectives by kind (index with `static_cast<std::size_t>(kind)`):
    /// `started` (called here), `completed` (failed or not), `failed`, and
    /// `bytes`: this rank's input of the ones that succeeded.
    std::array<operation_counts, collective_kind_count> collectives{};
    /// Collectives started here and not completed yet (queued or running).
    std::uint64_t in_flight = 0;
    /// How long each kind took on this rank, from its call to its
    /// completion (queueing behind earlier collectives included), always
    /// measured: one clock read at each end of a collective.
    std::array<latency_histogram, collective_kind_count> latency{};

    const operation_counts& of(collective_kind k) const noexcept {
        return collectives[static_cast<std::size_t>(k)];
    }
};

} // namespace ucx
