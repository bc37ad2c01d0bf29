// Internal: the state behind ucx::basic_stream.
//
// Writes are UCP stream sends (contiguous, or an IOV for a buffer sequence),
// counted by the endpoint so a graceful close waits for them. Reads are
// library-owned operations served from UCX's received stream data
// (`ucp_stream_recv_data_nb`, zero-copy until the copy into the reader's
// buffers) in the worker's `stream_data` stage, which the stream queues
// itself for after every progress call while reads are pending: that makes
// per-operation cancellation exact (UCX cannot cancel a stream receive), and a
// read completes with whatever is available (read_some semantics).
//
// Received data never waits in UCX's queue: UCX discards that queue when the
// endpoint fails, before it reports the failure, so data the peer wrote just
// before it died would be lost. After each progress call the worker has
// `take_stream_data` tell the streams UCX queued data for (the taker a
// stream hands `worker_impl::watch_streams`), and a stream with no
// read pending takes the data out of UCX's queue into its own, still
// zero-copy (UCX's descriptors, released once read). The peer's flow-control
// window bounds what is held.
//
// End of stream and flow control: the byte accounting and its decisions are
// `stream_fsm`'s; the endpoint hands this stream the peer's end markers and
// acknowledgements (endpoint_watcher).
//
// Device memory where UCX cannot move it (lib/stream/stream_staging.cpp, on
// the worker's staging, lib/gpu/device_staging.hpp): `write` and `read` hand
// the operation to `staged_stream_write` and `staged_stream_read` first,
// which write a device buffer chunk by chunk through `write_direct` and read
// into one through `read_direct` and a pinned buffer. Writes started while a
// staged write has chunks to go wait behind it, in order.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/stream.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "stream/stream_fsm.hpp"
#include "util/guarded_timer.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

namespace ucx::detail {

/// Hands the stream data UCX queued after a progress call to the streams it
/// is for, which take it out of UCX's queues (see above).
void take_stream_data(worker_impl& w) noexcept;

/// Maps an error to the code a socket would give (UCX's connection reset and
/// endpoint timeout, the ways a vanished peer shows, as
/// `asio::error::connection_reset`), so code written for TCP sockets matches it.
error_code socket_error(const error_code& ec) noexcept;

class device_staging;
class stream_impl;

/// A stream write (`stream_impl::write`) through the staging `s`. Taken
/// (staged) when the first buffer of `op` is device memory: that buffer
/// alone is written, chunk by chunk, each chunk a write of `st`
/// (`stream_impl::write_direct`, so flow control applies), in order.
/// Otherwise `op` is cut to its leading buffers of host memory and left to
/// the caller. The write completes with the bytes written, also on failure
/// (the chunks written before). Not cancellable, as a direct write.
bool staged_stream_write(device_staging& s, stream_impl& st, stream_write_op* op) noexcept;
/// A stream read (`stream_impl::read`) into the `n` buffers `bufs` through
/// the staging `s`. Taken (staged) when the first non-empty buffer is
/// device memory: at most one chunk is read into a pinned buffer
/// (`stream_impl::read_direct`) and copied into that buffer; cancelling it
/// cancels that read. Otherwise `n` is cut to the leading buffers of host
/// memory and the read left to the caller.
bool staged_stream_read(device_staging& s, stream_impl& st, transfer_op* op,
                        const boost::asio::mutable_buffer* bufs, std::size_t& n) noexcept;

class stream_impl final : public deferred_work,
                          public endpoint_watcher,
                          public std::enable_shared_from_this<stream_impl> {
public:
    using clock_type = std::chrono::steady_clock;
    /// Most buffers of a sequence one read or write takes (like writev/readv),
    /// and one pending read keeps: the public templates' limits.
    static constexpr std::size_t max_buffers = stream_max_buffers;
    static constexpr std::size_t max_read_buffers = stream_max_read_buffers;
    /// Flow control: a write waits while this many written bytes are unread.
    static constexpr std::uint64_t window = stream_config{}.window;
    /// Flow control: the reader acknowledges after this many bytes.
    static constexpr std::uint64_t ack_every = stream_config{}.ack_every;

    explicit stream_impl(std::shared_ptr<worker_impl> w);
    ~stream_impl();
    stream_impl(const stream_impl&) = delete;
    stream_impl& operator=(const stream_impl&) = delete;

    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    const std::shared_ptr<endpoint_impl>& endpoint() const noexcept { return ep_; }

    /// Takes over a connected (client/server) endpoint.
    void assign(std::shared_ptr<endpoint_impl> ep, error_code& ec) noexcept;
    /// Connected and not closed here (the peer may have closed).
    bool is_open() const noexcept;
    /// Graceful close in the background: pending reads end with
    /// operation_aborted; pending writes complete; the peer reads what was
    /// written, then eof.
    void close() noexcept;
    /// As close(); `op` completes when UCX closed the endpoint (owner thread).
    void close(endpoint_op* op) noexcept;
    /// Abortive close: pending operations end with operation_aborted; the
    /// peer sees connection_reset.
    void abort() noexcept;
    /// Pending reads complete with operation_aborted.
    void cancel() noexcept;
    /// Half close: the peer reads eof after what was written; writes here fail.
    void shutdown_send(error_code& ec) noexcept;
    /// The deadline of pending and later operations.
    void expires_at(clock_type::time_point t);
    void expires_never() noexcept;

    /// Socket addresses of the connection.
    boost::asio::ip::tcp::endpoint address(bool remote, error_code& ec) const;

    /// Bytes written (handed to UCX) and read so far.
    std::uint64_t bytes_written() const noexcept { return fsm_.bytes_written(); }
    std::uint64_t bytes_read() const noexcept { return fsm_.bytes_read(); }

    // Owner thread.
    void write(stream_write_op* op) noexcept;
    void read(transfer_op* op, const boost::asio::mutable_buffer* bufs, std::size_t n) noexcept;
    /// A write or read of host memory, without the staging of device memory.
    void write_direct(stream_write_op* op) noexcept;
    void read_direct(transfer_op* op, const boost::asio::mutable_buffer* bufs,
                     std::size_t n) noexcept;
    /// A staged write began, or ended (then the writes behind it go on).
    void staged_write_began() noexcept { ++staged_writes_; }
    void staged_write_ended() noexcept;

    /// deferred_stage::stream_data: serves the pending reads, and looks
    /// again after the next progress call while some are left.
    std::size_t run_deferred(deferred_stage stage) noexcept override;
    void take_received(ucp_ep_h ep) noexcept override;
    void peer_stream_end(std::uint64_t total, bool goodbye) noexcept override;
    void peer_stream_acked(std::uint64_t bytes) noexcept override;
    void stream_data_ready() noexcept override;

private:
    /// Hands a write (`total` bytes) to UCX.
    void submit(stream_write_op* op, std::size_t total) noexcept;
    /// Submits the waiting writes the window allows (all with `force`).
    void resume_writes(bool force) noexcept;
    /// Fails the waiting writes with `ec`.
    void fail_blocked(const error_code& ec) noexcept;
    /// Tells the peer how much was read, every `ack_every` bytes.
    void maybe_ack() noexcept;

    /// A read waiting for data, with its non-empty buffers: only the first
    /// `count` pieces are set (a read of one buffer writes one).
    struct pending_read {
        struct piece {
            std::byte* data;
            std::size_t size;
        };
        explicit pending_read(transfer_op* o) noexcept : op(o) {}
        transfer_op* op;
        std::size_t count = 0;
        piece bufs[max_read_buffers];
    };

    static void cancel_read(operation* op, boost::asio::cancellation_type) noexcept;
    /// Ends a write waiting for the reader to make room (any cancellation
    /// type: nothing of it was sent).
    static void cancel_blocked_write(operation* op, boost::asio::cancellation_type) noexcept;
    bool deadline_passed() const noexcept;
    void on_timeout() noexcept;
    /// Completes what reads it can; returns how many completed.
    std::size_t serve() noexcept;
    /// Copies available bytes into `r`'s buffers.
    std::size_t copy_out(pending_read& r) noexcept;
    /// Makes some received bytes available; false if none.
    bool fetch() noexcept;
    /// Takes UCX's next chunk of received data into `held_`; false if none.
    bool pull() noexcept;
    /// Gives the first held chunk back to UCX.
    void release_first() noexcept;
    /// Whether reads must end now, and with what.
    bool end_state(error_code& ec) const noexcept;
    void fail_reads(const error_code& ec) noexcept;
    /// Gives every held chunk back to UCX.
    void release_held() noexcept;
    /// Tells the worker whether this stream is connected with no read
    /// pending (then the worker hands it the data UCX lists as ready).
    void update_watch() noexcept;
    void detach_endpoint() noexcept;
    /// The local side stops: reads fail, the timer stops, the endpoint is
    /// given up (returned for the caller to close).
    std::shared_ptr<endpoint_impl> shut_local() noexcept;

    std::shared_ptr<worker_impl> worker_;
    std::shared_ptr<endpoint_impl> ep_;
    bool closed_ = false;
    // Bytes written, read and acknowledged; the peer's end of stream.
    stream_fsm fsm_;
    // Usually one read at a time: a vector keeps its capacity, so the steady
    // state allocates nothing (a deque frees and reallocates its block).
    std::vector<pending_read> reads_;
    // Chunks of received data taken from UCX, in order (UCX's descriptors,
    // given back once read); the first is read from `held_off_` on. A vector
    // keeps its capacity: the steady state allocates nothing.
    struct held_chunk {
        void* data;
        std::size_t size;
    };
    std::vector<held_chunk> held_;
    std::size_t held_first_ = 0;
    std::size_t held_off_ = 0;
    /// The worker's `ucp_progress_calls()` when UCX last had no data for
    /// the endpoint: until it changes, asking again would find none.
    static constexpr std::uint64_t never = ~std::uint64_t{0};
    std::uint64_t ucx_empty_at_ = never;
    bool watched_ = false;
    // Data taken from UCX before the UCP endpoint closed.
    std::vector<std::byte> drained_;
    std::size_t drained_off_ = 0;
    error_code recv_error_{};
    // Flow control: writes waiting for the reader, in order (a vector keeps
    // its capacity).
    /// Writes waiting for the window, in order (their buffers are in them).
    std::vector<stream_write_op*> blocked_;
    /// Staged writes in progress, and the writes started behind them.
    std::size_t staged_writes_ = 0;
    std::vector<stream_write_op*> behind_staged_;
    // Timeouts.
    guarded_timer timer_;
    clock_type::time_point deadline_ = clock_type::time_point::max();
};

} // namespace ucx::detail
