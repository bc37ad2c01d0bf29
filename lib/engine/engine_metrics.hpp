// Internal: the counters of a worker's engine and of its operations, written
// by the worker's thread, read from any thread (`worker::metrics()`).
#pragma once

#include <ucx/metrics.hpp>
#include <ucx/worker.hpp>

#include "util/counter.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ucx::detail {

/// Whether operations are counted: false in a library built with
/// `UCX_ASIO_OPERATION_METRICS=OFF`, where `operation_counters` and the
/// endpoints' counts (`endpoint_impl::count`) do nothing and the compiler
/// removes them (the progress engine's counters and the groups' counts of
/// collectives stay). Both variants compile from the same code.
#if defined(UCX_ASIO_NO_OPERATION_METRICS)
inline constexpr bool counts_operations = false;
#else
inline constexpr bool counts_operations = true;
#endif

/// The progress engine's counters (see `ucx::worker_stats`).
struct progress_counters {
    counter passes;
    counter progress_calls;
    counter arms;
    counter arm_busy;
    counter wakeups;
    counter yields;
    counter cpu_yields;
    counter backoffs;
    counter parks;
    counter safety_timer_passes;
    counter completions;
};

/// The counts of one kind of operation (or of collective), one thread
/// writing, any thread reading.
struct kind_counters {
    counter started, completed, failed, bytes;
    /// Those that succeeded as they started (counted in neither `started`
    /// nor `completed`, and in both by `snapshot`): one count instead of two.
    counter at_once;

    /// One started.
    void start() noexcept { ++started; }
    /// One started and succeeded at once, having moved `n` bytes.
    void done_at_once(std::uint64_t n) noexcept {
        ++at_once;
        bytes += n;
    }
    /// One ended: with an error (`failed`), or having moved `n` bytes.
    void ended(bool failure, std::uint64_t n) noexcept {
        ++completed;
        if (failure) [[unlikely]]
            ++failed;
        else
            bytes += n;
    }
    /// The values (any thread). The ends are read first and `started` is
    /// never reported below `completed`.
    void snapshot(operation_counts& o) const noexcept {
        const std::uint64_t a = at_once.load();
        o.completed = completed.load() + a;
        o.failed = failed.load();
        o.bytes = bytes.load();
        const std::uint64_t s = started.load() + a;
        o.started = s < o.completed ? o.completed : s;
    }
};

/// The counts of every kind of operation: a worker's own, or those of one
/// object of the worker (an endpoint) that its operations are counted in.
using kind_counter_set = std::array<kind_counters, operation_kind_count>;

/// A latency histogram one thread writes and any thread reads.
class histogram_counters {
public:
    void add(std::chrono::nanoseconds d) noexcept;
    void snapshot(latency_histogram& out) const noexcept;

private:
    std::array<counter, latency_histogram::bucket_count> buckets_;
    counter sum_ns_;
};

/// The histogram bucket of a duration (see `latency_histogram`).
inline std::size_t latency_bucket(std::chrono::nanoseconds d) noexcept {
    const std::int64_t ns = d.count();
    if (ns <= 1000)
        return 0;
    // Bucket i (i >= 1) holds (2^(i-1), 2^i] µs: the bit width of the
    // whole microseconds below ns.
    const auto i =
        static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(ns - 1) / 1000));
    return i < latency_histogram::bucket_count ? i : latency_histogram::bucket_count - 1;
}

/// The operations' counters, by kind: what starts and ends in the engine's
/// in-flight list, counted where an operation enters and leaves it (every
/// operation leaves it once, however it ends).
///
/// Each operation is counted once: in the set of the object it belongs to
/// (`operation::counted_in`: its endpoint's, made known here with
/// `add_set`), or else in the worker's own. The worker's counts are the sum
/// of its own, of every set added, and of the sets retired (whose objects
/// are gone); errors by code and latencies are the worker's only.
class operation_counters {
public:
    /// Latencies are measured where `sampling` is not 0: one operation in
    /// `sampling`.
    explicit operation_counters(unsigned sampling) noexcept
        : sampling_(counts_operations ? sampling : 0) {}

    bool measures_latency() const noexcept { return counts_operations && sampling_ != 0; }
    /// One operation in this many is measured (0: none).
    unsigned latency_sampling() const noexcept { return sampling_; }

    /// An operation of kind `k`, counted in `in` (null: the worker's own
    /// counts), started.
    void started(operation_kind k, kind_counters* in) noexcept {
        if constexpr (counts_operations)
            of(k, in).start();
    }
    /// An operation of kind `k` started and succeeded at once, having moved
    /// `bytes`.
    void done_at_once(operation_kind k, kind_counters* in, std::uint64_t bytes) noexcept {
        if constexpr (counts_operations)
            of(k, in).done_at_once(bytes);
    }
    /// An operation of kind `k` succeeded, having moved `bytes`.
    void succeeded(operation_kind k, kind_counters* in, std::uint64_t bytes) noexcept {
        if constexpr (counts_operations)
            of(k, in).ended(false, bytes);
    }
    /// An operation of kind `k` ended with `ec`, having moved `bytes`
    /// (counted on success).
    void ended(operation_kind k, kind_counters* in, const boost::system::error_code& ec,
               std::uint64_t bytes) noexcept {
        if constexpr (!counts_operations)
            return;
        of(k, in).ended(ec.failed(), bytes);
        if (ec) [[unlikely]]
            count_error(ec);
    }
    /// An operation of kind `k` took `d` (where latencies are measured).
    void took(operation_kind k, std::chrono::nanoseconds d) noexcept;
    /// Bytes of a kind counted outside the operation (an active message's
    /// data, handed to its receive by the registry).
    void add_bytes(operation_kind k, std::uint64_t n) noexcept {
        if constexpr (counts_operations)
            of(k, nullptr).bytes += n;
    }

    /// `set`'s counts are the worker's too from now on, until `retire_set`.
    /// (Owner thread; throws `std::bad_alloc`.)
    void add_set(const kind_counter_set& set);
    /// `set`'s object goes: its counts are kept in the worker's. (Owner
    /// thread.)
    void retire_set(const kind_counter_set& set) noexcept;

    /// An operation of kind `k` that started counted in `from` (null: the
    /// worker's own counts) is counted in `to` from now on: its start moves
    /// there, never seen twice nor missing by `snapshot`. (Owner thread.)
    void move_start(operation_kind k, kind_counters* from, kind_counters& to) noexcept;

    /// Fills `m`'s operation fields (from any thread).
    void snapshot(worker_metrics& m) const;

    /// Most distinct error codes kept.
    static constexpr std::size_t error_slots = 16;

private:
    struct error_slot {
        std::atomic<const boost::system::error_category*> category{nullptr};
        std::atomic<int> value{0};
        counter count;
    };

    kind_counters& of(operation_kind k, kind_counters* in) noexcept {
        return in ? *in : kinds_[static_cast<std::size_t>(k)];
    }
    void count_error(const boost::system::error_code& ec) noexcept;

    unsigned sampling_;
    kind_counter_set kinds_{};
    std::array<histogram_counters, operation_kind_count> histograms_{};
    std::array<error_slot, error_slots> errors_{};
    /// Slots in use (published with release after the slot is filled).
    std::atomic<std::size_t> error_slots_used_{0};
    counter other_errors_;
    /// The sets added, and the counts of those retired (written under the
    /// lock, by one thread at a time).
    mutable std::mutex sets_mu_;
    std::vector<const kind_counter_set*> sets_;
    kind_counter_set retired_{};
};

} // namespace ucx::detail
