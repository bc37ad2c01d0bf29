// ucx-asio-perf: what every transport shares: the control connection, message
// content, timing, allocation counting and the results a client reports.
#pragma once

#include "options.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/streambuf.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace perf {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

/// A failed run (bad content, a transport error); the message says what.
struct failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The control connection between client and server (plain blocking TCP on
/// loopback): test settings, connection details and the final handshake
/// travel here, never measured data.
class control {
public:
    explicit control(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
    void send(const std::string& line);
    std::string receive();
    /// Receives a line that must start with `word` + ' '; returns the rest.
    std::string expect(const std::string& word);
    /// This side's address of the control connection.
    asio::ip::address local_address() const { return socket_.local_endpoint().address(); }
    /// The peer's address of the control connection.
    asio::ip::address remote_address() const { return socket_.remote_endpoint().address(); }
    /// The socket's descriptor (to wait for a line without blocking).
    int native_handle() { return socket_.native_handle(); }
    /// Whether a received line is already buffered (so `receive` will not block).
    bool line_buffered() const;

private:
    asio::ip::tcp::socket socket_;
    asio::streambuf in_;
};

/// What a client measured.
struct result {
    std::vector<double> one_way_us; ///< latency tests: half of each round trip
    double seconds = 0;             ///< the measured phase
    std::size_t messages = 0;       ///< measured messages (one way)
    std::size_t bytes = 0;          ///< measured payload bytes (one way)
    std::size_t allocations = 0;    ///< operator new calls in the measured phase, both sides
    std::size_t operations = 0;     ///< operations both sides started in the measured phase
};

/// The clock of the latency loops' samples (two reads per round trip). On
/// x86-64 with an invariant time-stamp counter it reads the counter, as
/// `ucx_perftest` times its iterations (`ucs_get_time`): a read costs about
/// a third of a `steady_clock::now()` through the vDSO (9 against 22 ns on
/// the 2-core benchmark host), and the part of each read that falls inside
/// a round trip is counted in its latency. The rate is measured against
/// `steady_clock` once, when first used. Elsewhere it is `steady_clock`.
struct sample_clock {
    using time_point = std::uint64_t; ///< ticks
    static time_point now() noexcept {
#if defined(__x86_64__)
        if (use_tsc_) [[likely]]
            return __rdtsc();
#endif
        return static_cast<time_point>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           clock_type::now().time_since_epoch())
                                           .count());
    }
    /// Microseconds per tick.
    static double us_per_tick() noexcept {
        return us_per_tick_;
    }
    /// Chooses the counter and measures its rate (about 20 ms); before the
    /// first sample.
    static void init();

private:
    static inline bool use_tsc_ = false;
    static inline double us_per_tick_ = 1e-3;
};

/// Half of a round trip from `t0` to `t1` (sample_clock), in microseconds.
inline double one_way_us(sample_clock::time_point t0, sample_clock::time_point t1) {
    return static_cast<double>(t1 - t0) * sample_clock::us_per_tick() / 2;
}

/// Operations one side starts in a measured phase: a send and a receive
/// per latency iteration; the messages (or puts, gets) and the
/// acknowledgement (or flush) of a bandwidth test.
std::size_t measured_operations(const settings& s);
/// Fills in the counts every client reports: measured messages and bytes,
/// its own operations and its `allocations`.
void count_measured(const settings& s, std::size_t allocations, result& r);

/// Message content: differs per message and per byte, so a stale, reordered
/// or misrouted message fails the check.
void fill(std::span<std::byte> b, std::uint64_t seq) noexcept;
/// Whether `b` holds the content of message `seq`.
bool verify(std::span<const std::byte> b, std::uint64_t seq) noexcept;
/// Throws `failure` unless `b` holds message `seq` (with `what` in the message).
void check(std::span<const std::byte> b, std::uint64_t seq, const char* what);

/// operator new calls since the start, counted while `counting(true)`.
std::size_t allocations() noexcept;
void counting(bool on) noexcept;

/// The allocation count of one side's measured phase.
struct measurement {
    std::size_t alloc_start = 0, alloc_end = 0;
    void begin() noexcept {
        alloc_start = allocations();
        counting(true);
    }
    void end() noexcept {
        counting(false);
        alloc_end = allocations();
    }
    std::size_t counted() const noexcept { return alloc_end - alloc_start; }
};

/// Throws `failure` ("what: message") if `ec` is an error.
[[noreturn]] void throw_error(const boost::system::error_code& ec, const char* what);
inline void throw_if(const boost::system::error_code& ec, const char* what) {
    if (ec) [[unlikely]]
        throw_error(ec, what);
}

/// Tags used by the tag tests: latency pings carry `data_bit | seq`, latency
/// replies `reply_bit | seq`, the end-of-round acknowledgement `ack_tag`.
/// Each side receives the ping or reply it expects next by its exact tag
/// (the full mask), as ucx_perftest's tag_lat does: a receive whose mask
/// leaves bits out is a wildcard to UCX, which then searches every posted
/// receive for each message (`ucp_tag_exp_search_all`; measured: 47 more
/// instructions per round trip on the serving side).
/// Bandwidth tests send every message with the tag `data_bit` and receive
/// with the full mask, as `ucx_perftest -t tag_bw` does (one tag, exact
/// match); a message's number is its place in the order (UCX matches the
/// messages of one endpoint in the order the receives were posted).
inline constexpr std::uint64_t data_bit = std::uint64_t{1} << 63;
inline constexpr std::uint64_t reply_bit = std::uint64_t{1} << 62;
inline constexpr std::uint64_t ack_tag = std::uint64_t{1} << 61;
inline constexpr std::uint64_t seq_mask = (std::uint64_t{1} << 48) - 1;

/// Bandwidth tests: receive buffers posted at once (and, with --check, sends
/// in flight), capped so that a side holds at most 64 MiB of buffers.
std::size_t buffer_slots(const settings& s) noexcept;

/// Hex text of bytes and back (worker addresses on the control connection).
std::string to_hex(std::span<const std::byte> b);
std::vector<std::byte> from_hex(const std::string& s);

// ---- RMA tests (put_bw, get_bw) ----
//
// The server registers a region of `rma_slots(s)` slots of `--size` bytes
// and sends its key; the client puts into (or gets from) the slots with
// `--window` operations in flight, then flushes the endpoint at the end of
// each round, as `ucx_perftest -t ucp_put_bw` does (its operations all
// target the start of the region; so do ours without --check). With
// --check every operation has its own slot: a get must bring the slot's
// pattern (`fill(slot, k)` on the server), and a slot written by a put is
// not reused before the client has flushed and the server has verified it
// ("verify k:seq ..." on the control connection).

/// Slots of the region and of the client's local buffers: 1, or with
/// --check `buffer_slots(s)`.
std::size_t rma_slots(const settings& s) noexcept;

/// The RMA server's side of the control connection while the test runs.
class rma_server_control {
public:
    /// `region` is the registered memory (`rma_slots(s)` slots of `s.size`).
    rma_server_control(const settings& s, control& ctl, std::span<const std::byte> region)
        : s_(s), ctl_(ctl), region_(region) {}
    /// Handles every line the client sent so far (blocking for at most one
    /// line, which the caller knows to be arriving): "measure" starts the
    /// allocation count, "verify k:seq ..." checks slots and answers
    /// "verified" (or "error ..."), "done" ends the count and answers with
    /// the counts. Returns false once "done" was handled.
    bool serve();

private:
    const settings& s_;
    control& ctl_;
    std::span<const std::byte> region_;
    std::size_t alloc_start_ = 0;
    bool measuring_ = false;
};

/// The client's side of "verify": asks the server to check that slot
/// `written[i]` holds message `seqs[written[i]]`; throws `failure` if not.
void rma_verify_remote(control& ctl, const std::vector<std::size_t>& written,
                       const std::vector<std::uint64_t>& seqs);

// One pair of functions per transport. A server serves one test; a client
// runs it and returns the measurements. Both talk over `ctl` first.
result library_client(const settings& s, control& ctl);
void library_server(const settings& s, control& ctl);
result ucp_client(const settings& s, control& ctl);
void ucp_server(const settings& s, control& ctl);
result tcp_client(const settings& s, control& ctl);
void tcp_server(const settings& s, control& ctl);

/// The end of a run: the client says "done", the server answers with its
/// allocation and operation counts, which are added to `r`.
void finish_client(control& ctl, result& r);
/// The server side of `finish_client`.
void finish_server(control& ctl, std::size_t allocations, std::size_t operations);

} // namespace perf
