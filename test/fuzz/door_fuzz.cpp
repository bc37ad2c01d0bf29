// Fuzz target: the connection handshake of host:port connections (the
// door), as either side meets a peer that sends anything: the listener's
// machine reading a client, the connecting machine reading a server.
//
// Input: one byte (bit 0: play the server, else the client; bit 1: this
// side has a secret; bit 2: the listener admits), then the peer's bytes,
// consumed as the machine asks for them (a header, then the body it
// announced). A genuine peer's messages are the seeds.
#include "fuzz.hpp"

#include "connection/door_protocol.hpp"

#include <ucx/worker_address.hpp>

#include <vector>

namespace ucx::fuzz {

void door(input data) {
    using detail::door_step;
    using action = door_step::action;
    reader r(data);
    const std::uint8_t mode = r.byte();
    const bool server_side = mode & 1u;
    const std::string secret = (mode & 2u) ? "fuzz" : "";
    const bool admit = mode & 4u;
    input peer = r.rest();
    const ucx::worker_address own(std::vector<std::byte>(24, std::byte{0x5a}));
    detail::door_nonce nonce{};

    // Takes `n` bytes of what the peer sent; false when it sent no more (the
    // I/O object then sees the connection close).
    auto take = [&peer](std::size_t n, input& out) {
        if (peer.size() < n)
            return false;
        out = peer.first(n);
        peer = peer.subspan(n);
        return true;
    };

    detail::door_server server(secret, own, nonce);
    detail::door_client client(secret, own, nonce);
    door_step step;
    if (server_side) {
        step = server.start();
    } else {
        step.what = action::write_then_read;
    }
    for (int steps = 0; steps < 8; ++steps) {
        input got;
        if (step.what == action::finish) {
            // Success means the peer's worker address is known.
            UCX_ASIO_FUZZ_CHECK(static_cast<bool>(step.ec) == step.peer.empty());
            return;
        }
        if (step.what == action::write_then_read) {
            if (!take(detail::door_header_size, got))
                return;
            step = server_side ? server.on_header(got) : client.on_header(got);
            continue;
        }
        // read_body: never more than the limit.
        UCX_ASIO_FUZZ_CHECK(step.body_size <= detail::door_max_body);
        if (!take(step.body_size, got))
            return;
        step = server_side ? server.on_body(got, admit) : client.on_body(got);
    }
    // Each side finishes within its three messages.
    UCX_ASIO_FUZZ_CHECK(false);
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(door)
