// Unit tests of the connection handshake (the door): SHA-256 and HMAC
// against published vectors, then both machines step by step, with every
// way a message can be wrong (no sockets, no UCX).
#include "connection/control_message.hpp"
#include "connection/door_protocol.hpp"
#include "util/sha256.hpp"
#include "util/wire.hpp"

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace ucx::detail;
using action = door_step::action;

std::span<const std::byte> bytes(std::string_view s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string hex(std::span<const std::byte> d) {
    std::string out;
    char buf[3];
    for (std::byte b : d) {
        std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned>(b));
        out += buf;
    }
    return out;
}

std::string sha(std::string_view s) {
    sha256 h;
    h.update(bytes(s));
    return hex(h.finish());
}

std::string hmac(std::string_view key, std::string_view msg) {
    hmac_sha256 h(bytes(key));
    h.update(bytes(msg));
    return hex(h.finish());
}

// FIPS 180-2 appendix B and the empty message.
TEST(Sha256, PublishedVectors) {
    EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const std::string million(1000000, 'a');
    EXPECT_EQ(sha(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheSameDigestAsTheWhole) {
    const std::string msg(200, 'x');
    for (std::size_t cut : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 128u, 199u}) {
        sha256 h;
        h.update(bytes(std::string_view(msg).substr(0, cut)));
        h.update(bytes(std::string_view(msg).substr(cut)));
        EXPECT_EQ(hex(h.finish()), sha(msg)) << cut;
    }
}

// RFC 4231 test cases 1, 2 and 6 (a key longer than a block).
TEST(HmacSha256, Rfc4231Vectors) {
    EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    EXPECT_EQ(
        hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacSha256, DigestEqualComparesEveryByte) {
    std::array<std::byte, 32> a{}, b{};
    EXPECT_TRUE(digest_equal(a, b));
    b[31] = std::byte{1};
    EXPECT_FALSE(digest_equal(a, b));
    EXPECT_FALSE(digest_equal(a, std::span(b).first(31)));
}

// ---- the machines ----

ucx::worker_address address_of(char fill, std::size_t n = 40) {
    return ucx::worker_address(std::vector<std::byte>(n, static_cast<std::byte>(fill)));
}

door_nonce nonce_of(std::uint8_t v) {
    door_nonce n{};
    n.fill(std::byte{v});
    return n;
}

std::span<const std::byte> header_of(const std::vector<std::byte>& frame) {
    return std::span(frame).first(door_header_size);
}

std::span<const std::byte> body_of(const std::vector<std::byte>& frame) {
    return std::span(frame).subspan(door_header_size);
}

// Runs a whole handshake between the two machines; returns both finishes.
struct outcome {
    door_step server;
    door_step client;
};

outcome run(const std::string& server_secret, const std::string& client_secret, bool admit = true) {
    door_server server(server_secret, address_of('S'), nonce_of(1));
    door_client client(client_secret, address_of('C'), nonce_of(2));
    outcome o;
    door_step greet = server.start();
    EXPECT_EQ(greet.what, action::write_then_read);
    door_step c = client.on_header(header_of(greet.out));
    EXPECT_EQ(c.what, action::read_body);
    c = client.on_body(body_of(greet.out));
    if (c.what == action::finish) {
        o.client = c;
        return o;
    }
    EXPECT_EQ(c.what, action::write_then_read);
    const std::vector<std::byte> request = c.out;
    door_step s = server.on_header(header_of(request));
    EXPECT_EQ(s.what, action::read_body);
    EXPECT_EQ(s.body_size, request.size() - door_header_size);
    s = server.on_body(body_of(request), admit);
    EXPECT_EQ(s.what, action::finish);
    o.server = s;
    c = client.on_header(header_of(s.out));
    EXPECT_EQ(c.what, action::read_body);
    o.client = client.on_body(body_of(s.out));
    EXPECT_EQ(o.client.what, action::finish);
    return o;
}

TEST(Door, WithoutSecretBothLearnTheOthersAddress) {
    const outcome o = run("", "");
    EXPECT_FALSE(o.server.ec) << o.server.ec.message();
    EXPECT_FALSE(o.client.ec) << o.client.ec.message();
    EXPECT_EQ(o.server.peer, address_of('C'));
    EXPECT_EQ(o.client.peer, address_of('S'));
}

TEST(Door, WithTheSameSecretBothLearnTheOthersAddress) {
    const outcome o = run("s3cret", "s3cret");
    EXPECT_FALSE(o.server.ec) << o.server.ec.message();
    EXPECT_FALSE(o.client.ec) << o.client.ec.message();
    EXPECT_EQ(o.client.peer, address_of('S'));
}

TEST(Door, AnotherSecretFailsBothSides) {
    const outcome o = run("s3cret", "guess");
    EXPECT_EQ(o.server.ec, ucx::error::authentication_failed);
    EXPECT_TRUE(o.server.peer.empty());
    EXPECT_EQ(o.client.ec, ucx::error::authentication_failed);
    EXPECT_TRUE(o.client.peer.empty());
}

TEST(Door, AClientWithoutTheSecretGivesUpAtTheGreeting) {
    const outcome o = run("s3cret", "");
    EXPECT_EQ(o.client.ec, ucx::error::authentication_failed);
}

TEST(Door, AClientWithASecretDoesNotTrustAServerWithout) {
    const outcome o = run("", "s3cret");
    EXPECT_EQ(o.client.ec, ucx::error::authentication_failed);
}

TEST(Door, NotAdmittedIsConnectionRefused) {
    const outcome o = run("", "", false);
    EXPECT_EQ(o.server.ec, boost::asio::error::connection_refused);
    EXPECT_EQ(o.client.ec, boost::asio::error::connection_refused);
}

TEST(Door, ARefusalBeforeTheGreetingIsUnderstood) {
    door_client client("", address_of('C'), nonce_of(2));
    const auto refusal = door_server::refusal(door_status::refused);
    door_step c = client.on_header(header_of(refusal));
    ASSERT_EQ(c.what, action::read_body);
    c = client.on_body(body_of(refusal));
    EXPECT_EQ(c.what, action::finish);
    EXPECT_EQ(c.ec, boost::asio::error::connection_refused);
}

TEST(Door, HeaderChecks) {
    door_server server("", address_of('S'), nonce_of(1));
    const auto greet = server.start().out;
    ucx::error_code ec;
    const door_header h = parse_door_header(header_of(greet), ec);
    EXPECT_FALSE(ec);
    EXPECT_EQ(h.kind, door_kind::greeting);
    EXPECT_EQ(h.body_size, door_nonce_size);
    // Each byte of the magic and the version, the kind, and the size limit.
    for (std::size_t i : {0u, 1u, 2u, 3u, 4u}) {
        auto bad = greet;
        bad[i] ^= std::byte{0xff};
        parse_door_header(header_of(bad), ec);
        EXPECT_EQ(ec, ucx::error::handshake_failed) << i;
    }
    for (std::uint8_t kind : {0, 4, 255}) {
        auto bad = greet;
        bad[5] = std::byte{kind};
        parse_door_header(header_of(bad), ec);
        EXPECT_EQ(ec, ucx::error::handshake_failed) << int(kind);
    }
    auto big = greet;
    store_le<std::uint32_t>(big, 8, door_max_body + 1);
    parse_door_header(header_of(big), ec);
    EXPECT_EQ(ec, ucx::error::handshake_failed);
    store_le<std::uint32_t>(big, 8, door_max_body);
    parse_door_header(header_of(big), ec);
    EXPECT_FALSE(ec);
    parse_door_header(std::span(greet).first(door_header_size - 1), ec);
    EXPECT_EQ(ec, ucx::error::handshake_failed);
}

TEST(Door, GarbageFromAClientIsABadRequestAnswered) {
    door_server server("", address_of('S'), nonce_of(1));
    server.start();
    const std::vector<std::byte> garbage(door_header_size, std::byte{0xff});
    const door_step s = server.on_header(garbage);
    EXPECT_EQ(s.what, action::finish);
    EXPECT_EQ(s.ec, ucx::error::handshake_failed);
    EXPECT_FALSE(s.out.empty()); // the answer says bad_request
    ucx::error_code ec;
    const door_header h = parse_door_header(header_of(s.out), ec);
    EXPECT_EQ(h.kind, door_kind::answer);
    EXPECT_EQ(s.out[door_header_size], static_cast<std::byte>(door_status::bad_request));
}

TEST(Door, ARequestWithADamagedAddressIsRefused) {
    door_server server("", address_of('S'), nonce_of(1));
    door_client client("", address_of('C'), nonce_of(2));
    const auto greet = server.start().out;
    client.on_header(header_of(greet));
    auto request = client.on_body(body_of(greet)).out;
    request.back() ^= std::byte{1}; // the address's CRC no longer matches
    ASSERT_EQ(server.on_header(header_of(request)).what, action::read_body);
    const door_step s = server.on_body(body_of(request), true);
    EXPECT_EQ(s.ec, ucx::error::handshake_failed);
    EXPECT_TRUE(s.peer.empty());
}

TEST(Door, AReplayedRequestFailsAgainstAFreshNonce) {
    // A request recorded from one handshake does not open another server's
    // door: the MAC covers the server's nonce.
    door_server first("k", address_of('S'), nonce_of(1));
    door_client client("k", address_of('C'), nonce_of(2));
    const auto greet = first.start().out;
    client.on_header(header_of(greet));
    const auto request = client.on_body(body_of(greet)).out;
    door_server second("k", address_of('S'), nonce_of(9));
    second.start();
    ASSERT_EQ(second.on_header(header_of(request)).what, action::read_body);
    EXPECT_EQ(second.on_body(body_of(request), true).ec, ucx::error::authentication_failed);
}

TEST(Door, AForgedAnswerIsNotTrusted) {
    door_server server("k", address_of('S'), nonce_of(1));
    door_client client("k", address_of('C'), nonce_of(2));
    const auto greet = server.start().out;
    client.on_header(header_of(greet));
    const auto request = client.on_body(body_of(greet)).out;
    server.on_header(header_of(request));
    auto answer = server.on_body(body_of(request), true).out;
    answer[door_header_size + 4] ^= std::byte{1}; // the server's MAC
    client.on_header(header_of(answer));
    EXPECT_EQ(client.on_body(body_of(answer)).ec, ucx::error::authentication_failed);
}

TEST(Door, MessagesOutOfOrderFail) {
    door_server server("", address_of('S'), nonce_of(1));
    const auto greet = server.start().out;
    // A greeting sent to the server.
    EXPECT_EQ(server.on_header(header_of(greet)).ec, ucx::error::handshake_failed);
    // A body before any header, and anything after the end.
    door_server other("", address_of('S'), nonce_of(1));
    other.start();
    EXPECT_EQ(other.on_body(body_of(greet), true).ec, ucx::error::handshake_failed);
    door_client client("", address_of('C'), nonce_of(2));
    EXPECT_EQ(client.on_body(body_of(greet)).ec, ucx::error::handshake_failed);
    // A greeting of the wrong size.
    door_client c2("", address_of('C'), nonce_of(2));
    auto odd = greet;
    store_le<std::uint32_t>(odd, 8, door_nonce_size + 1);
    EXPECT_EQ(c2.on_header(header_of(odd)).ec, ucx::error::handshake_failed);
}

} // namespace

// ---- the ticket: which door handshake a hello follows ----

TEST(DoorTicket, BothSidesHoldTheGreetingsNonce) {
    door_server server("", address_of('S'), nonce_of(7));
    door_client client("", address_of('C'), nonce_of(8));
    const door_step greet = server.start();
    ASSERT_EQ(client.on_header(header_of(greet.out)).what, action::read_body);
    ASSERT_EQ(client.on_body(body_of(greet.out)).what, action::write_then_read);
    EXPECT_EQ(server.ticket(), nonce_of(7));
    EXPECT_EQ(client.ticket(), server.ticket());
}

TEST(DoorTicket, AHelloPayloadSplitsIntoAddressAndTicket) {
    const auto wire = address_of('C').serialize();
    const door_nonce ticket = nonce_of(9);
    std::vector<std::byte> payload = wire;
    payload.insert(payload.end(), ticket.begin(), ticket.end());
    auto [address, rest] = ucx::detail::split_hello_payload(payload);
    EXPECT_TRUE(std::ranges::equal(address, wire));
    EXPECT_TRUE(std::ranges::equal(rest, ticket));
    ucx::error_code ec;
    EXPECT_EQ(ucx::worker_address::deserialize(address, ec), address_of('C'));
    EXPECT_FALSE(ec);
}

TEST(DoorTicket, AHelloWithoutTicketIsAllAddress) {
    const auto wire = address_of('C').serialize();
    auto [address, rest] = ucx::detail::split_hello_payload(wire);
    EXPECT_EQ(address.size(), wire.size());
    EXPECT_TRUE(rest.empty());
}

TEST(DoorTicket, AShortOrLyingPayloadIsAllAddressAndFailsToParse) {
    auto wire = address_of('C').serialize();
    // Cut short: the header announces more than there is.
    const std::vector<std::byte> cut(wire.begin(), wire.end() - 1);
    auto [a1, r1] = ucx::detail::split_hello_payload(cut);
    EXPECT_EQ(a1.size(), cut.size());
    EXPECT_TRUE(r1.empty());
    ucx::error_code ec;
    EXPECT_TRUE(ucx::worker_address::deserialize(a1, ec).empty());
    EXPECT_EQ(ec, ucx::error::malformed_address);
    // Shorter than a header.
    const std::vector<std::byte> tiny(wire.begin(), wire.begin() + 5);
    auto [a2, r2] = ucx::detail::split_hello_payload(tiny);
    EXPECT_EQ(a2.size(), tiny.size());
    EXPECT_TRUE(r2.empty());
    // A length field of 4 GiB.
    for (std::size_t i = 8; i < 12; ++i)
        wire[i] = std::byte{0xff};
    auto [a3, r3] = ucx::detail::split_hello_payload(wire);
    EXPECT_EQ(a3.size(), wire.size());
    EXPECT_TRUE(r3.empty());
}
