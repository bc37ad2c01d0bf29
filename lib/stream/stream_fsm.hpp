// Internal: a ucx::stream's byte accounting and end of stream, free of I/O.
//
// End of stream: the peer's goodbye (a close) or stream_end (a half close)
// carries how many stream bytes it wrote in all; reads end with eof once
// exactly that many were read here, however the marker and the data travel.
// Without such a marker a vanished peer is a reset.
//
// Flow control: UCX's stream protocol has none (a slow reader makes UCX
// buffer without bound). The reader tells the writer how many bytes it has
// read (a stream_ack every `ack_every` bytes); a write that starts while
// `window` bytes or more are unread by the peer waits, without reaching UCX,
// until an ack makes room.
//
// `stream_fsm` takes the events (bytes handed to UCX, bytes read, the peer's
// markers and acks, a half close) and answers the stream's questions: may a
// write go, is an ack due, how do reads end. Unit tests drive it directly.
#pragma once

#include <cstdint>
#include <optional>

namespace ucx::detail {

struct stream_config {
    /// A write waits while this many written bytes are unread by the peer.
    std::uint64_t window = std::uint64_t{8} << 20;
    /// The reader acknowledges after this many bytes.
    std::uint64_t ack_every = std::uint64_t{1} << 20;
};

/// What a new write does.
enum class write_decision : std::uint8_t {
    go,          ///< hand it to UCX now
    wait,        ///< wait for the reader (flow control), behind earlier waiting writes
    broken_pipe, ///< nobody reads any more (shut down here, or the peer closed)
};

/// How reads end when no data is there.
enum class stream_read_end : std::uint8_t {
    none,   ///< they wait for data
    eof,    ///< every byte the peer wrote was read
    reset,  ///< the connection closed with bytes missing
    failed, ///< the connection failed without an end marker: its error
};

class stream_fsm {
public:
    explicit stream_fsm(stream_config config = {}) noexcept : config_(config) {}

    const stream_config& config() const noexcept { return config_; }

    /// A new connection: everything starts from zero.
    void reset() noexcept { *this = stream_fsm(config_); }

    // ---- writing

    /// A write of `bytes` starts; `queued`: earlier writes are still waiting.
    write_decision start_write(std::uint64_t bytes, bool queued) const noexcept {
        if (send_shut_ || peer_goodbye_)
            return write_decision::broken_pipe;
        if (bytes > 0 && (queued || window_full()))
            return write_decision::wait;
        return write_decision::go;
    }
    /// Whether a new write must wait for the reader.
    bool window_full() const noexcept {
        return written_ > peer_read_ && written_ - peer_read_ >= config_.window;
    }
    /// `n` bytes were handed to UCX.
    void on_sent(std::uint64_t n) noexcept { written_ += n; }
    /// The peer says it read `n` bytes in all. Returns true when that is news
    /// (waiting writes may go).
    bool on_peer_acked(std::uint64_t n) noexcept {
        if (n <= peer_read_)
            return false;
        peer_read_ = n;
        return true;
    }
    /// Half close. Returns true the first time: tell the peer `bytes_written()`.
    bool shutdown_send() noexcept;

    // ---- reading

    /// `n` bytes were read here.
    void on_read(std::uint64_t n) noexcept { read_ += n; }
    /// Whether the peer should be told how much was read.
    bool ack_due() const noexcept { return read_ - acked_ >= config_.ack_every; }
    /// The peer was told `bytes_read()`.
    void on_ack_sent() noexcept { acked_ = read_; }
    /// The peer wrote `total` bytes in all: a half close (stream_end), or its
    /// goodbye (which wins over a later stream_end).
    void on_peer_end(std::uint64_t total, bool goodbye) noexcept;
    /// How reads end when no data is there; `connection_open`: the UCP
    /// endpoint is there (the stream data can still arrive).
    stream_read_end read_end(bool connection_open) const noexcept;

    std::uint64_t bytes_written() const noexcept { return written_; }
    std::uint64_t bytes_read() const noexcept { return read_; }
    std::uint64_t peer_read() const noexcept { return peer_read_; }
    std::optional<std::uint64_t> peer_total() const noexcept { return peer_total_; }
    bool peer_said_goodbye() const noexcept { return peer_goodbye_; }
    bool send_shut() const noexcept { return send_shut_; }

private:
    stream_config config_;
    std::uint64_t written_ = 0;
    std::uint64_t peer_read_ = 0;
    std::uint64_t read_ = 0;
    std::uint64_t acked_ = 0;
    std::optional<std::uint64_t> peer_total_{};
    bool peer_goodbye_ = false;
    bool send_shut_ = false;
};

} // namespace ucx::detail
