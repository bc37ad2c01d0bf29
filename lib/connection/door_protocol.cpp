#include "connection/door_protocol.hpp"

#include "util/sha256.hpp"
#include "util/wire.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cstring>

namespace ucx::detail {

namespace {

constexpr std::array<std::byte, 4> door_magic = {std::byte{'U'}, std::byte{'C'}, std::byte{'X'},
                                                 std::byte{'D'}};
constexpr std::uint8_t door_version = 1;
/// Greeting: the server has a secret. Request and answer: a MAC is present.
constexpr std::uint8_t flag_secret = 1;
/// status, 3 reserved bytes, MAC.
constexpr std::size_t answer_fixed = 4 + door_mac_size;
constexpr std::size_t request_fixed = door_nonce_size + door_mac_size;

std::vector<std::byte> frame(door_kind kind, std::uint8_t flags, std::size_t body_size) {
    std::vector<std::byte> out(door_header_size + body_size);
    std::copy(door_magic.begin(), door_magic.end(), out.begin());
    out[4] = std::byte{door_version};
    out[5] = static_cast<std::byte>(kind);
    out[6] = std::byte{flags};
    store_le<std::uint32_t>(out, 8, static_cast<std::uint32_t>(body_size));
    return out;
}

std::vector<std::byte> answer(door_status status, std::span<const std::byte> mac,
                              std::span<const std::byte> address_wire) {
    const std::uint8_t flags = mac.empty() ? 0 : flag_secret;
    std::vector<std::byte> out =
        frame(door_kind::answer, flags, answer_fixed + address_wire.size());
    std::byte* body = out.data() + door_header_size;
    body[0] = static_cast<std::byte>(status);
    if (!mac.empty())
        std::memcpy(body + 4, mac.data(), door_mac_size);
    if (!address_wire.empty())
        std::memcpy(body + answer_fixed, address_wire.data(), address_wire.size());
    return out;
}

error_code handshake_failed() noexcept {
    return make_error_code(error::handshake_failed);
}

door_step read_body(std::uint32_t size) {
    door_step s;
    s.what = door_step::action::read_body;
    s.body_size = size;
    return s;
}

} // namespace

std::array<std::byte, door_mac_size> door_mac(const std::string& secret, bool client,
                                              const door_nonce& own_nonce,
                                              const door_nonce& other_nonce,
                                              std::span<const std::byte> address_wire) noexcept {
    hmac_sha256 mac(std::as_bytes(std::span(secret.data(), secret.size())));
    const std::string_view label = client ? "ucx-asio door client" : "ucx-asio door server";
    mac.update(std::as_bytes(std::span(label.data(), label.size())));
    mac.update(other_nonce);
    mac.update(own_nonce);
    mac.update(address_wire);
    return mac.finish();
}

door_header parse_door_header(std::span<const std::byte> bytes, error_code& ec) noexcept {
    door_header h;
    ec = handshake_failed();
    if (bytes.size() != door_header_size ||
        !std::equal(door_magic.begin(), door_magic.end(), bytes.begin()) ||
        bytes[4] != std::byte{door_version})
        return h;
    const auto kind = static_cast<std::uint8_t>(bytes[5]);
    if (kind < static_cast<std::uint8_t>(door_kind::greeting) ||
        kind > static_cast<std::uint8_t>(door_kind::answer))
        return h;
    const std::uint32_t size = load_le<std::uint32_t>(bytes, 8);
    if (size > door_max_body)
        return h;
    h.kind = static_cast<door_kind>(kind);
    h.flags = static_cast<std::uint8_t>(bytes[6]);
    h.body_size = size;
    ec = {};
    return h;
}

// ---- server ----

door_server::door_server(std::string secret, worker_address own, const door_nonce& nonce)
    : secret_(std::move(secret)), own_(std::move(own)), nonce_(nonce) {}

door_step door_server::start() {
    door_step s;
    s.what = door_step::action::write_then_read;
    s.out = frame(door_kind::greeting, secret_.empty() ? 0 : flag_secret, door_nonce_size);
    std::copy(nonce_.begin(), nonce_.end(), s.out.begin() + door_header_size);
    return s;
}

std::vector<std::byte> door_server::refusal(door_status status) {
    return answer(status, {}, {});
}

door_step door_server::fail(door_status status, error_code ec) {
    done_ = true;
    door_step s;
    s.what = door_step::action::finish;
    s.out = answer(status, {}, {});
    s.ec = ec;
    return s;
}

door_step door_server::on_header(std::span<const std::byte> header) {
    error_code ec;
    const door_header h = parse_door_header(header, ec);
    if (done_ || expecting_body_ || ec || h.kind != door_kind::request ||
        h.body_size < request_fixed)
        return fail(door_status::bad_request, handshake_failed());
    expecting_body_ = true;
    flags_ = h.flags;
    return read_body(h.body_size);
}

door_step door_server::on_body(std::span<const std::byte> body, bool admit) {
    if (done_ || !expecting_body_ || body.size() < request_fixed)
        return fail(door_status::bad_request, handshake_failed());
    expecting_body_ = false;
    door_nonce client_nonce{};
    std::copy_n(body.begin(), door_nonce_size, client_nonce.begin());
    const auto mac = body.subspan(door_nonce_size, door_mac_size);
    const auto address_wire = body.subspan(request_fixed);
    error_code ec;
    worker_address peer = worker_address::deserialize(address_wire, ec);
    if (ec || peer.empty())
        return fail(door_status::bad_request, handshake_failed());
    const bool client_has_secret = (flags_ & flag_secret) != 0;
    if (client_has_secret != !secret_.empty())
        return fail(door_status::authentication_failed,
                    make_error_code(error::authentication_failed));
    if (!secret_.empty() &&
        !digest_equal(mac, door_mac(secret_, true, client_nonce, nonce_, address_wire)))
        return fail(door_status::authentication_failed,
                    make_error_code(error::authentication_failed));
    if (!admit)
        return fail(door_status::refused, boost::asio::error::connection_refused);
    done_ = true;
    const std::vector<std::byte> own_wire = own_.serialize();
    door_step s;
    s.what = door_step::action::finish;
    if (secret_.empty()) {
        s.out = answer(door_status::accepted, {}, own_wire);
    } else {
        const auto own_mac = door_mac(secret_, false, nonce_, client_nonce, own_wire);
        s.out = answer(door_status::accepted, own_mac, own_wire);
    }
    s.peer = std::move(peer);
    return s;
}

// ---- client ----

door_client::door_client(std::string secret, worker_address own, const door_nonce& nonce)
    : secret_(std::move(secret)), own_(std::move(own)), nonce_(nonce) {}

door_step door_client::fail(error_code ec) {
    done_ = true;
    door_step s;
    s.what = door_step::action::finish;
    s.ec = ec;
    return s;
}

door_step door_client::on_header(std::span<const std::byte> header) {
    error_code ec;
    const door_header h = parse_door_header(header, ec);
    if (done_ || expecting_body_ || ec)
        return fail(handshake_failed());
    // The server may answer (refuse) before it greets.
    if (h.kind == door_kind::answer && h.body_size >= answer_fixed) {
        expected_ = door_kind::answer;
    } else if (h.kind != expected_ ||
               (h.kind == door_kind::greeting && h.body_size != door_nonce_size)) {
        return fail(handshake_failed());
    }
    flags_ = h.flags;
    expecting_body_ = true;
    return read_body(h.body_size);
}

door_step door_client::on_body(std::span<const std::byte> body) {
    if (done_ || !expecting_body_)
        return fail(handshake_failed());
    expecting_body_ = false;
    return expected_ == door_kind::greeting ? on_greeting(body) : on_answer(body);
}

door_step door_client::on_greeting(std::span<const std::byte> body) {
    if (body.size() != door_nonce_size)
        return fail(handshake_failed());
    // Both sides have a secret, or neither: a client with a secret does not
    // talk to a server that cannot prove it knows it.
    if (((flags_ & flag_secret) != 0) != !secret_.empty())
        return fail(make_error_code(error::authentication_failed));
    std::copy(body.begin(), body.end(), server_nonce_.begin());
    const std::vector<std::byte> own_wire = own_.serialize();
    door_step s;
    s.what = door_step::action::write_then_read;
    s.out = frame(door_kind::request, secret_.empty() ? 0 : flag_secret,
                  request_fixed + own_wire.size());
    std::byte* p = s.out.data() + door_header_size;
    std::copy(nonce_.begin(), nonce_.end(), p);
    if (!secret_.empty()) {
        const auto mac = door_mac(secret_, true, nonce_, server_nonce_, own_wire);
        std::copy(mac.begin(), mac.end(), p + door_nonce_size);
    }
    std::copy(own_wire.begin(), own_wire.end(), p + request_fixed);
    expected_ = door_kind::answer;
    return s;
}

door_step door_client::on_answer(std::span<const std::byte> body) {
    if (body.size() < answer_fixed)
        return fail(handshake_failed());
    switch (static_cast<door_status>(body[0])) {
    case door_status::accepted:
        break;
    case door_status::refused:
        return fail(boost::asio::error::connection_refused);
    case door_status::authentication_failed:
        return fail(make_error_code(error::authentication_failed));
    default:
        return fail(handshake_failed());
    }
    const auto mac = body.subspan(4, door_mac_size);
    const auto address_wire = body.subspan(answer_fixed);
    if (!secret_.empty() &&
        (!(flags_ & flag_secret) ||
         !digest_equal(mac, door_mac(secret_, false, server_nonce_, nonce_, address_wire))))
        return fail(make_error_code(error::authentication_failed));
    error_code ec;
    worker_address peer = worker_address::deserialize(address_wire, ec);
    if (ec || peer.empty())
        return fail(handshake_failed());
    done_ = true;
    door_step s;
    s.what = door_step::action::finish;
    s.peer = std::move(peer);
    return s;
}

} // namespace ucx::detail
