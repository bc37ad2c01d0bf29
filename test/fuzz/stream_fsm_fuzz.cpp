// Fuzz target: a stream's accounting (stream_fsm) driven by any sequence of
// writes, reads, acks and end markers. Checked after every event:
// - reads end with eof exactly when an end was announced and that many bytes
//   were read; after the peer's goodbye the announced total never changes;
// - writes break exactly after a half close here or the peer's goodbye, and
//   wait while the window is full; an ack is news only when it grows;
// - with an honest peer (the first input bit: every marker announces the
//   same total, and no more than that arrives) eof comes once every announced
//   byte was read, never before, and stays.
#include "fuzz.hpp"

#include "stream/stream_fsm.hpp"

#include <algorithm>
#include <optional>

namespace ucx::fuzz {

void stream_fsm(input data) {
    using detail::stream_read_end;
    using detail::write_decision;
    reader r(data);
    const bool honest = r.flag();
    detail::stream_config config;
    config.window = r.uint(2);
    config.ack_every = r.uint(2);
    const std::uint64_t honest_total = r.uint(2);
    detail::stream_fsm f(config);
    bool saw_eof = false;
    while (!r.empty()) {
        const auto event =
            static_cast<stream_event>(r.byte() % static_cast<std::uint8_t>(stream_event::count));
        const std::optional<std::uint64_t> total_before = f.peer_total();
        const bool goodbye_before = f.peer_said_goodbye();
        switch (event) {
        case stream_event::write: {
            const std::uint64_t bytes = r.uint(2);
            const bool queued = r.flag();
            const bool full = f.window_full();
            const write_decision d = f.start_write(bytes, queued);
            if (f.send_shut() || f.peer_said_goodbye())
                UCX_ASIO_FUZZ_CHECK(d == write_decision::broken_pipe);
            else if (bytes > 0 && (queued || full))
                UCX_ASIO_FUZZ_CHECK(d == write_decision::wait);
            else
                UCX_ASIO_FUZZ_CHECK(d == write_decision::go);
            if (d == write_decision::go)
                f.on_sent(bytes);
            break;
        }
        case stream_event::peer_acked: {
            const std::uint64_t before = f.peer_read();
            const std::uint64_t n = r.uint(2);
            UCX_ASIO_FUZZ_CHECK(f.on_peer_acked(n) == (n > before));
            UCX_ASIO_FUZZ_CHECK(f.peer_read() == std::max(before, n));
            break;
        }
        case stream_event::shutdown_send: {
            const bool was = f.send_shut();
            UCX_ASIO_FUZZ_CHECK(f.shutdown_send() == !was);
            UCX_ASIO_FUZZ_CHECK(f.send_shut());
            break;
        }
        case stream_event::read: {
            std::uint64_t n = r.uint(2);
            if (honest) // no more than the peer wrote arrives
                n = std::min(n, honest_total - std::min(honest_total, f.bytes_read()));
            const std::uint64_t before = f.bytes_read();
            f.on_read(n);
            UCX_ASIO_FUZZ_CHECK(f.bytes_read() == before + n);
            break;
        }
        case stream_event::send_ack:
            if (f.ack_due()) {
                f.on_ack_sent();
                UCX_ASIO_FUZZ_CHECK(!f.ack_due() || config.ack_every == 0);
            }
            break;
        case stream_event::peer_end: {
            std::uint64_t total = r.uint(2);
            const bool goodbye = r.flag();
            if (honest)
                total = honest_total;
            f.on_peer_end(total, goodbye);
            UCX_ASIO_FUZZ_CHECK(f.peer_total().has_value());
            if (!goodbye_before)
                UCX_ASIO_FUZZ_CHECK(*f.peer_total() == total && f.peer_said_goodbye() == goodbye);
            break;
        }
        case stream_event::reset:
            f.reset();
            UCX_ASIO_FUZZ_CHECK(f.bytes_read() == 0 && f.bytes_written() == 0 && !f.peer_total() &&
                                !f.send_shut() && !f.peer_said_goodbye());
            saw_eof = false;
            break;
        case stream_event::count:
            break;
        }
        if (goodbye_before && event != stream_event::reset) {
            UCX_ASIO_FUZZ_CHECK(f.peer_said_goodbye() && f.peer_total() == total_before);
        }
        const bool announced_read = f.peer_total() && f.bytes_read() >= *f.peer_total();
        for (bool open : {true, false}) {
            const stream_read_end end = f.read_end(open);
            UCX_ASIO_FUZZ_CHECK((end == stream_read_end::eof) == announced_read);
            if (!announced_read)
                UCX_ASIO_FUZZ_CHECK(end == (open             ? stream_read_end::none
                                            : f.peer_total() ? stream_read_end::reset
                                                             : stream_read_end::failed));
        }
        if (honest) {
            const bool eof = f.read_end(true) == stream_read_end::eof;
            if (eof)
                UCX_ASIO_FUZZ_CHECK(f.bytes_read() == honest_total);
            if (saw_eof)
                UCX_ASIO_FUZZ_CHECK(eof);
            saw_eof = eof;
        }
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(stream_fsm)
