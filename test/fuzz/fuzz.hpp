// The fuzz targets' shared pieces: the entry points (one per target, so that
// the corpus test of the regular build can call them too), the invariant
// check, and a reader that turns the fuzzer's bytes into values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>

namespace ucx::fuzz {

using input = std::span<const std::byte>;

// One function per target: it must return normally for every input. A
// violated invariant aborts (a crash to libFuzzer, a failure to the corpus
// test).
void worker_address(input data);
void remote_key(input data);
void control_message(input data);
void connection_fsm(input data);
void stream_fsm(input data);
void door(input data);
void tcp_store_protocol(input data);
void staging_plan(input data);
void fabric_fsm(input data);
void collective_runner(input data);
void flight_record(input data);
void endpoint_report(input data);

struct target {
    std::string_view name; ///< also the corpus directory, test/fuzz/corpus/<name>
    void (*run)(input);
};

inline constexpr target targets[] = {
    {"worker_address", &worker_address},
    {"remote_key", &remote_key},
    {"control_message", &control_message},
    {"connection_fsm", &connection_fsm},
    {"stream_fsm", &stream_fsm},
    {"door", &door},
    {"tcp_store_protocol", &tcp_store_protocol},
    {"staging_plan", &staging_plan},
    {"fabric_fsm", &fabric_fsm},
    {"collective_runner", &collective_runner},
    {"flight_record", &flight_record},
    {"endpoint_report", &endpoint_report},
};

/// The events of the state machine targets: one byte each (modulo `count`),
/// then the event's arguments from the reader. A new kind of event goes
/// before `count` and gets a case in its target's switch (committed corpora
/// then decode to other sequences, which still must not crash).
enum class connection_event : std::uint8_t {
    start,          ///< role, by_address, listener, local tag, timers on
    control,        ///< type, value
    failure,        ///< error
    close_graceful, ///< sends_in_flight, stream bytes, can_linger
    sends_drained,  ///< can_linger
    linger_expired,
    force_close,     ///< error
    shutdown_stream, ///< stream bytes
    forget_listener,
    timer_expired,
    reached, ///< a plain client's flush completed
    count
};

enum class stream_event : std::uint8_t {
    write,      ///< bytes, queued: start_write, and on_sent when it may go
    peer_acked, ///< total the peer read
    shutdown_send,
    read,     ///< bytes
    send_ack, ///< when one is due
    peer_end, ///< total, goodbye
    reset,
    count
};

enum class staging_event : std::uint8_t {
    start,           ///< (after the plan's parameters: total, chunk, slots, incoming, whole)
    copy_ok,         ///< which in-flight copy
    copy_failed,     ///< which in-flight copy
    transfer_ok,     ///< which in-flight transfer, bytes (whole incoming)
    transfer_failed, ///< which in-flight transfer
    cancel,
    stray_completion, ///< chunk: a completion of something not in flight
    count
};

enum class fabric_event : std::uint8_t {
    start,
    need,            ///< peer
    want,            ///< peer
    connected,       ///< peer, ok
    answered,        ///< peer, valid, inbox
    accepted,        ///< ok, aborted
    introduced,      ///< ok, valid, who, inbox
    endpoint_failed, ///< peer, which error
    abort_received,  ///< peer
    timer_expired,   ///< peer
    fail,
    leave,
    count
};

[[noreturn]] inline void violated(const char* what, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, what);
    std::abort();
}

/// Reads values off the input, front to back; past its end every value is 0.
class reader {
public:
    explicit reader(input data) noexcept : data_(data) {}

    bool empty() const noexcept { return at_ == data_.size(); }
    std::uint8_t byte() noexcept {
        return empty() ? 0 : std::to_integer<std::uint8_t>(data_[at_++]);
    }
    bool flag() noexcept { return byte() & 1u; }
    /// Little-endian, `n` bytes (at most 8).
    std::uint64_t uint(std::size_t n) noexcept {
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < n; ++i)
            v |= std::uint64_t{byte()} << (8 * i);
        return v;
    }
    /// What is left.
    input rest() noexcept {
        input r = data_.subspan(at_);
        at_ = data_.size();
        return r;
    }

private:
    input data_;
    std::size_t at_ = 0;
};

} // namespace ucx::fuzz

#define UCX_ASIO_FUZZ_CHECK(cond)                                                                  \
    ((cond) ? void() : ::ucx::fuzz::violated(#cond, __FILE__, __LINE__))

// The libFuzzer entry point of a target; nothing in the corpus test, which
// links every target into one program.
#ifdef UCX_ASIO_FUZZER
#define UCX_ASIO_FUZZ_ENTRY(function)                                                              \
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {            \
        ::ucx::fuzz::function(::ucx::fuzz::input(reinterpret_cast<const std::byte*>(data), size)); \
        return 0;                                                                                  \
    }
#else
#define UCX_ASIO_FUZZ_ENTRY(function)
#endif
