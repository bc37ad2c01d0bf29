// Fuzz target: a control message as the control channel receives it (an
// active message's header, control_message::decode) and, for a hello, its
// data: the connector's worker address, which the address acceptor parses
// (worker_address::deserialize) before UCX sees it.
//
// Input: one byte choosing the header's length (0 to 31: the decoder sees
// every length, 16 most often), that many header bytes, then the data.
#include "fuzz.hpp"

#include "connection/control_message.hpp"

#include <ucx/worker_address.hpp>

#include <algorithm>

namespace ucx::fuzz {

void control_message(input data) {
    using detail::control_message;
    using detail::control_type;
    reader r(data);
    const std::uint8_t choice = r.byte();
    // Values 32 and up all mean a header of the message's size.
    const std::size_t want = choice < 32 ? choice : control_message::wire_size;
    const input rest = r.rest();
    const input header = rest.first(std::min(want, rest.size()));
    const input payload = rest.subspan(header.size());

    const auto m = control_message::decode(header);
    if (!m)
        return;
    UCX_ASIO_FUZZ_CHECK(header.size() == control_message::wire_size);
    const auto type = static_cast<std::uint8_t>(m->type);
    UCX_ASIO_FUZZ_CHECK(type >= static_cast<std::uint8_t>(control_type::hello) &&
                        type <= static_cast<std::uint8_t>(detail::last_control_type));
    // Encoding it again gives the header back, but for the reserved bytes 6
    // and 7, which are not read.
    const control_message::wire again = m->encode();
    for (std::size_t i = 0; i < again.size(); ++i)
        UCX_ASIO_FUZZ_CHECK(again[i] == header[i] || i == 6 || i == 7);

    if (m->type == control_type::hello) {
        // As the address acceptor takes it: an address, or empty (refused).
        error_code ec;
        const ucx::worker_address peer = ucx::worker_address::deserialize(payload, ec);
        UCX_ASIO_FUZZ_CHECK(peer.empty() == static_cast<bool>(ec));
        if (!ec)
            UCX_ASIO_FUZZ_CHECK(peer.serialize().size() == payload.size());
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(control_message)
