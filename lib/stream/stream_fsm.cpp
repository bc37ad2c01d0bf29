#include "stream/stream_fsm.hpp"

namespace ucx::detail {

// The per-operation accounting is inline in the header; the rare events are here.

bool stream_fsm::shutdown_send() noexcept {
    if (send_shut_)
        return false;
    send_shut_ = true;
    return true;
}

void stream_fsm::on_peer_end(std::uint64_t total, bool goodbye) noexcept {
    if (peer_goodbye_)
        return;
    peer_goodbye_ = goodbye;
    peer_total_ = total;
}

stream_read_end stream_fsm::read_end(bool connection_open) const noexcept {
    if (peer_total_) {
        // Clean close or half close: eof once every byte the peer wrote was read.
        if (read_ >= *peer_total_)
            return stream_read_end::eof;
        // Closed with bytes missing: not a clean end.
        return connection_open ? stream_read_end::none : stream_read_end::reset;
    }
    return connection_open ? stream_read_end::none : stream_read_end::failed;
}

} // namespace ucx::detail
