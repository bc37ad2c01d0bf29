// Internal: the schedule of a transfer of GPU device memory staged through
// pinned host buffers, free of I/O.
//
// When UCX cannot move device memory itself (no CUDA transport), the library
// copies it through host buffers: an outgoing message is copied from the
// device into a host buffer, then sent; an incoming one is received into a
// host buffer, then copied to the device. The message is cut into chunks so
// that copies and transfers overlap. `staging_plan` decides which copy and
// which transfer starts when; `staging` (lib/gpu/staging.hpp) executes its actions
// with a copy engine and the transfer function of the operation. Its unit
// tests drive it step by step and in seeded random orders.
//
// Two modes:
//
// - `chunked`: every chunk is a transfer of its own, at the chunk's offset in
//   the message (a byte stream's writes and reads, RMA puts and gets). Each
//   chunk holds one staging slot (a pinned buffer of one chunk) from its
//   first step to its last, so at most `slots` chunks are in flight; copies of
//   later chunks overlap the transfers of earlier ones. Transfers are issued
//   in chunk order (a stream's bytes stay in order); copies may complete in
//   any order.
// - `whole`: the message stays one transfer (a tag or active message is one
//   UCX message for any peer). The staging memory is one contiguous host
//   buffer of the whole message, and `slot` only names one of the `slots`
//   lanes of copies in flight. Outgoing: the chunks are copied from the
//   device, up to `slots` copies at a time, then the message is sent at once.
//   Incoming: the message is received whole, then copied to the device in
//   chunks, up to `slots` copies at a time (only the bytes received).
//
// Zero bytes: in `chunked` mode the plan completes at once with success and
// no action; in `whole` mode it issues one transfer of zero bytes (an empty
// tag or active message is still a message, and an empty receive still
// consumes one), then completes.
//
// Errors: the first error wins (a failed copy, a failed transfer, or
// `cancel`, which counts as `operation_aborted`). From then on no copy or
// transfer starts; the plan waits until every copy and transfer in flight has
// reported, since the staging memory must not be released while the copy
// engine or UCX still uses it, and then completes once with that error.
//
// Driving it: call an input (`start`, `copy_done`, `transfer_done`,
// `cancel`), then call `next()` until it returns an action of kind `none`,
// executing each action as it comes. An action's completion may be fed back
// while actions are still drained (a transfer that completes at once): the
// next call of `next()` takes it into account. After the `complete` action
// every input is ignored and `next()` returns `none`. The plan allocates only
// in its constructor (its per-slot state).
#pragma once

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ucx::detail {

/// Which way the message goes, seen from this process.
enum class staging_direction : std::uint8_t {
    outgoing, ///< device memory is sent: copy device→host, then transfer
    incoming, ///< device memory is received: transfer into host, then copy host→device
};

/// How the message is cut into transfers (see the file comment).
enum class staging_mode : std::uint8_t {
    chunked, ///< one transfer per chunk, at the chunk's offset
    whole,   ///< one transfer of the whole message
};

/// Which way a copy goes.
enum class copy_direction : std::uint8_t { device_to_host, host_to_device };

/// The parameters of a plan.
struct staging_config {
    /// Bytes of the message (for an incoming `whole` message: at most this).
    std::size_t total = 0;
    /// Bytes of a chunk (and of a staging slot in `chunked` mode); 0 is
    /// taken as one chunk of the whole message.
    std::size_t chunk = 64 * 1024;
    /// Staging slots: chunks (or copies, in `whole` mode) in flight at once;
    /// 0 is taken as 1.
    unsigned slots = 2;
    staging_direction direction = staging_direction::outgoing;
    staging_mode mode = staging_mode::chunked;
};

/// What the executor must do.
enum class staging_action_kind : std::uint8_t {
    none,     ///< nothing now: wait for a completion
    copy,     ///< start a copy between the device and the staging memory
    transfer, ///< start a transfer from or into the staging memory
    complete, ///< the plan is over: complete the operation with `ec` and `bytes`
};

/// One action. For `copy` and `transfer`: the chunk (`staging_plan::whole`
/// for the whole message's transfer), the staging slot (or copy lane) it
/// uses, the bytes' offset in the message (and in device memory), their
/// length, and their offset in the staging memory (0 in a slot in `chunked`
/// mode; the message offset in the contiguous buffer of `whole` mode).
struct staging_action {
    staging_action_kind kind = staging_action_kind::none;
    copy_direction direction = copy_direction::device_to_host; ///< copies only
    std::size_t chunk = 0;
    unsigned slot = 0;
    std::size_t offset = 0;
    std::size_t length = 0;
    std::size_t staging_offset = 0;
    /// `complete` only: the operation's result, and the bytes that made it
    /// all the way (the longest prefix of the message whose every chunk
    /// finished: sent, or copied to the device).
    boost::system::error_code ec{};
    std::size_t bytes = 0;
};

class staging_plan {
public:
    using error_code = boost::system::error_code;

    /// The chunk index of the whole message's transfer (`whole` mode).
    static constexpr std::size_t whole = static_cast<std::size_t>(-1);

    /// A plan for `config` (normalized: see `staging_config`). Allocates the
    /// per-slot state; nothing else allocates.
    explicit staging_plan(const staging_config& config);

    /// The normalized parameters.
    const staging_config& config() const noexcept { return config_; }

    /// Chunks of the message: ceil(total / chunk).
    std::size_t chunks() const noexcept { return chunks_; }

    /// Bytes of chunk `k`: `chunk`, or less for the last one.
    std::size_t chunk_length(std::size_t k) const noexcept;

    /// Starts the plan; the first actions follow from `next()`. A second
    /// start, or one after completion, is ignored (returns false).
    bool start() noexcept;

    /// The copy of chunk `k` finished: `ec` empty on success. Returns false
    /// (and changes nothing) when no copy of `k` is in flight.
    bool copy_done(std::size_t k, const error_code& ec) noexcept;

    /// The transfer of chunk `k` (or `whole`) finished with `ec`. Returns
    /// false (and changes nothing) when no such transfer is in flight.
    bool transfer_done(std::size_t k, const error_code& ec) noexcept;

    /// As above, for a transfer that moved `bytes` bytes. Only an incoming
    /// `whole` message may be shorter than planned: the copies to the device
    /// cover the bytes received, and the completion reports them. Elsewhere
    /// `bytes` is ignored (a transfer moves its chunk or fails).
    bool transfer_done(std::size_t k, const error_code& ec, std::size_t bytes) noexcept;

    /// Cancels: an error of `operation_aborted` unless an error came first.
    /// Before `start`, the plan completes without starting anything.
    void cancel() noexcept;

    /// The next action. Call after each input until it returns `none`. The
    /// `complete` action comes exactly once.
    staging_action next() noexcept;

    /// Whether the `complete` action was returned.
    bool completed() const noexcept { return completed_; }
    /// Whether the plan started.
    bool started() const noexcept { return started_; }
    /// The first error (empty while none).
    const error_code& error() const noexcept { return error_; }
    /// Copies and transfers started and not yet reported.
    unsigned in_flight() const noexcept { return in_flight_; }

private:
    enum class slot_state : std::uint8_t {
        free,         ///< holds no chunk
        copying,      ///< a copy of `chunk` is in flight
        copied,       ///< outgoing chunked: copied, its transfer waits for its turn
        transferring, ///< a transfer of `chunk` is in flight
        received,     ///< incoming chunked: received, its copy is to start
    };
    struct slot {
        slot_state state = slot_state::free;
        std::size_t chunk = 0;
    };

    staging_action next_chunked_outgoing() noexcept;
    staging_action next_chunked_incoming() noexcept;
    staging_action next_whole_outgoing() noexcept;
    staging_action next_whole_incoming() noexcept;
    staging_action issue_copy(unsigned s, std::size_t k, copy_direction d) noexcept;
    staging_action issue_transfer(unsigned s, std::size_t k) noexcept;
    staging_action finish() noexcept;
    /// The slot holding chunk `k` in state `st`, or `slots_.size()`.
    unsigned find(std::size_t k, slot_state st) const noexcept;
    /// A free slot, or `slots_.size()`.
    unsigned find_free() const noexcept;
    /// Records the first error, and the lowest chunk that did not finish.
    void fail(std::size_t k, const error_code& ec) noexcept;
    /// The bytes of the finished prefix (see `staging_action::bytes`).
    std::size_t finished_prefix() const noexcept;

    staging_config config_;
    std::size_t chunks_ = 0;
    std::vector<slot> slots_;
    /// The next chunk whose first step starts (copy outgoing, transfer incoming).
    std::size_t next_first_ = 0;
    /// Outgoing chunked: the next chunk to transfer. Whole incoming: the next
    /// chunk to copy to the device.
    std::size_t next_second_ = 0;
    /// Chunks that finished their last step.
    std::size_t finished_ = 0;
    /// The lowest chunk that failed (`whole` while none).
    std::size_t first_failed_ = whole;
    /// Whole incoming: bytes received, and the chunks they span.
    std::size_t received_ = 0;
    std::size_t received_chunks_ = 0;
    unsigned in_flight_ = 0;
    error_code error_{};
    bool started_ = false;
    bool completed_ = false;
    /// Whole mode: the message's transfer was issued, and it succeeded or failed.
    bool whole_issued_ = false;
    bool whole_done_ = false;
    bool whole_failed_ = false;
};

} // namespace ucx::detail
