// Writes the seed corpora of the fuzz targets: valid encodings made by the
// library's own encoders, and typical event sequences of the state machines.
// Usage: make_seeds <corpus directory> (test/fuzz/corpus).
#include "fuzz.hpp"

#include "connection/control_message.hpp"
#include "connection/door_protocol.hpp"
#include "store/tcp_store_protocol.hpp"

#include <ucx/remote_key.hpp>
#include <ucx/worker_address.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

using bytes = std::vector<std::byte>;
namespace fs = std::filesystem;
using ucx::fuzz::connection_event;
using ucx::fuzz::staging_event;
using ucx::fuzz::stream_event;

fs::path root;

void write(const std::string& target, const std::string& name, const bytes& b) {
    const fs::path dir = root / target;
    fs::create_directories(dir);
    std::ofstream(dir / ("seed-" + name), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bytes pattern(std::size_t n, unsigned seed) {
    bytes b(n);
    for (std::size_t i = 0; i < n; ++i)
        b[i] = static_cast<std::byte>((i * 131 + seed * 17) & 0xFF);
    return b;
}

/// Builds the reader's input: bytes, and integers little-endian.
struct encoder {
    bytes out;
    encoder& u8(unsigned v) {
        out.push_back(static_cast<std::byte>(v));
        return *this;
    }
    encoder& uint(std::uint64_t v, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i)
            u8(static_cast<unsigned>(v >> (8 * i)) & 0xFF);
        return *this;
    }
    encoder& event(connection_event e) { return u8(static_cast<unsigned>(e)); }
    encoder& event(stream_event e) { return u8(static_cast<unsigned>(e)); }
    encoder& event(staging_event e) { return u8(static_cast<unsigned>(e)); }
    encoder& start(unsigned role, bool by_address, bool listener, bool timers = false) {
        return event(connection_event::start)
            .u8(role)
            .u8(by_address)
            .u8(listener)
            .uint(0x1234, 8)
            .u8(timers)
            .u8(timers);
    }
    encoder& control(ucx::detail::control_type t, std::uint64_t value = 0) {
        return event(connection_event::control).u8(static_cast<unsigned>(t) - 1).uint(value, 8);
    }
    encoder& close(bool in_flight, std::uint64_t bytes, bool can_linger) {
        return event(connection_event::close_graceful).u8(in_flight).uint(bytes, 8).u8(can_linger);
    }
};

void worker_addresses() {
    unsigned i = 0;
    for (std::size_t n : {1, 7, 64, 300}) {
        ++i;
        write("worker_address", "valid-" + std::to_string(n),
              ucx::worker_address(pattern(n, i)).serialize());
    }
}

void remote_keys() {
    using ucx::key_blob;
    using ucx::memory_type;
    write("remote_key", "host",
          key_blob::build(0x7f0000001000, 4096, memory_type::host, pattern(40, 1)));
    write("remote_key", "cuda", key_blob::build(0x10000, 1, memory_type::cuda, pattern(1, 2)));
    write("remote_key", "managed-at-end",
          key_blob::build(~std::uint64_t{0} - 8, 8, memory_type::cuda_managed, pattern(100, 3)));
}

void control_messages() {
    using ucx::detail::control_message;
    using ucx::detail::control_type;
    for (unsigned t = 1; t <= static_cast<unsigned>(ucx::detail::last_control_type); ++t) {
        const auto w = control_message{static_cast<control_type>(t), 0x0102030405060708u}.encode();
        bytes b{std::byte{control_message::wire_size}};
        b.insert(b.end(), w.begin(), w.end());
        if (t == static_cast<unsigned>(control_type::hello)) {
            write("control_message", "hello-no-address", b);
            const bytes a = ucx::worker_address(pattern(120, 7)).serialize();
            b.insert(b.end(), a.begin(), a.end());
            write("control_message", "hello-with-address", b);
        } else {
            write("control_message", "type-" + std::to_string(t), b);
        }
    }
}

void connection_sequences() {
    using ucx::detail::control_type;
    const std::string t = "connection_fsm";
    // Roles: 0 address, 1 client, 2 server, 3 borrowed.
    write(t, "client-connects-and-closes",
          encoder{}
              .start(1, false, false)
              .control(control_type::welcome, 7)
              .control(control_type::stream_ack, 100)
              .close(false, 100, true)
              .control(control_type::goodbye_ack)
              .out);
    write(t, "client-lingers",
          encoder{}
              .start(1, true, false)
              .control(control_type::welcome, 7)
              .close(true, 5, true)
              .event(connection_event::sends_drained)
              .u8(1)
              .event(connection_event::linger_expired)
              .out);
    write(t, "client-watched-peer-goes-silent",
          encoder{}
              .start(1, false, false, true)
              .control(control_type::welcome, 7)
              .event(connection_event::timer_expired)
              .control(control_type::pong, 1)
              .event(connection_event::timer_expired)
              .event(connection_event::timer_expired)
              .event(connection_event::timer_expired)
              .event(connection_event::timer_expired)
              .event(connection_event::timer_expired)
              .out);
    write(t, "server-handshake-deadline",
          encoder{}.start(2, false, true, true).event(connection_event::timer_expired).out);
    write(t, "client-watched-close",
          encoder{}
              .start(1, false, false, true)
              .control(control_type::welcome, 7)
              .close(true, 5, true)
              .event(connection_event::timer_expired)
              .control(control_type::ping, 2)
              .event(connection_event::sends_drained)
              .u8(1)
              .event(connection_event::linger_expired)
              .out);
    write(t, "client-refused", encoder{}.start(1, true, false).control(control_type::refused).out);
    write(t, "server-hello-then-goodbye",
          encoder{}
              .start(2, false, true)
              .control(control_type::hello, 9)
              .control(control_type::stream_end, 40)
              .control(control_type::goodbye, 40)
              .event(connection_event::failure)
              .u8(1)
              .out);
    write(t, "server-listener-goes",
          encoder{}
              .start(2, false, true)
              .event(connection_event::forget_listener)
              .event(connection_event::force_close)
              .u8(0)
              .out);
    write(t, "address-half-close",
          encoder{}
              .start(0, false, false)
              .event(connection_event::shutdown_stream)
              .uint(3, 8)
              .close(false, 3, false)
              .out);
    write(t, "borrowed-closes",
          encoder{}
              .start(3, false, false)
              .close(true, 0, true)
              .event(connection_event::sends_drained)
              .u8(0)
              .out);
}

void stream_sequences() {
    const std::string t = "stream_fsm";
    // honest, window, ack_every, the honest peer's total; then events.
    write(t, "honest-reads-to-eof",
          encoder{}
              .u8(1)
              .uint(100, 2)
              .uint(10, 2)
              .uint(30, 2)
              .event(stream_event::read)
              .uint(20, 2)
              .event(stream_event::send_ack)
              .event(stream_event::peer_end)
              .uint(30, 2)
              .u8(0)
              .event(stream_event::read)
              .uint(10, 2)
              .event(stream_event::peer_end)
              .uint(30, 2)
              .u8(1)
              .out);
    write(t, "writes-wait-for-acks",
          encoder{}
              .u8(0)
              .uint(50, 2)
              .uint(10, 2)
              .uint(0, 2)
              .event(stream_event::write)
              .uint(60, 2)
              .u8(0)
              .event(stream_event::write)
              .uint(1, 2)
              .u8(0)
              .event(stream_event::peer_acked)
              .uint(60, 2)
              .event(stream_event::shutdown_send)
              .event(stream_event::write)
              .uint(1, 2)
              .u8(0)
              .event(stream_event::reset)
              .out);
}

// The staging plan: total, chunk, slots, incoming, whole; then events. Each
// seed completes in order what comes first (the pick byte 0).
void staging_sequences() {
    const std::string t = "staging_plan";
    auto config = [](unsigned total, unsigned chunk, unsigned slots, bool incoming, bool whole) {
        return encoder{}.uint(total, 2).uint(chunk, 2).u8(slots).u8(incoming).u8(whole);
    };
    for (const bool incoming : {false, true}) {
        for (const bool whole : {false, true}) {
            const std::string name =
                std::string(incoming ? "in" : "out") + (whole ? "-whole" : "-chunked");
            encoder happy = config(1000, 300, 2, incoming, whole).event(staging_event::start);
            for (int i = 0; i < 8; ++i) {
                happy.event(staging_event::transfer_ok).uint(1000, 2).u8(0);
                happy.event(staging_event::copy_ok).u8(0);
            }
            write(t, name, happy.out);
            encoder failing = config(900, 256, 3, incoming, whole).event(staging_event::start);
            failing.event(staging_event::copy_ok).u8(0);
            failing.event(staging_event::transfer_ok).uint(700, 2).u8(0);
            failing.event(staging_event::copy_failed).u8(1).u8(0);
            failing.event(staging_event::transfer_failed).u8(0).uint(0, 2).u8(0);
            failing.event(staging_event::stray_completion).uint(7, 2);
            write(t, name + "-fails", failing.out);
            encoder cancelled = config(5000, 1000, 4, incoming, whole).event(staging_event::start);
            cancelled.event(staging_event::copy_ok).u8(0);
            cancelled.event(staging_event::cancel);
            cancelled.event(staging_event::transfer_ok).uint(5000, 2).u8(0);
            write(t, name + "-cancelled", cancelled.out);
        }
    }
    write(t, "empty-whole", config(0, 0, 1, false, true).event(staging_event::start).out);
    write(t, "cancel-before-start", config(10, 4, 2, true, false).event(staging_event::cancel).out);
}

// The door: a genuine peer's messages, for each side, with and without the
// secret (the mode byte: bit 0 server, bit 1 secret, bit 2 admit).
void door_handshakes() {
    using namespace ucx::detail;
    const ucx::worker_address own(std::vector<std::byte>(24, std::byte{0x5a}));
    const ucx::worker_address other(std::vector<std::byte>(24, std::byte{0xa5}));
    const door_nonce nonce{};
    for (const bool with_secret : {false, true}) {
        const std::string secret = with_secret ? "fuzz" : "";
        const std::uint8_t secret_bit = with_secret ? 2 : 0;
        // The server fuzzed: a client's request to the target's greeting.
        door_server target_server(secret, own, nonce);
        door_client peer_client(secret, other, nonce);
        const bytes greeting = target_server.start().out;
        peer_client.on_header(std::span(greeting).first(door_header_size));
        const bytes request =
            peer_client.on_body(std::span(greeting).subspan(door_header_size)).out;
        bytes server_seed{static_cast<std::byte>(1 | secret_bit | 4)};
        server_seed.insert(server_seed.end(), request.begin(), request.end());
        write("door", std::string("server") + (with_secret ? "-secret" : ""), server_seed);
        // The client fuzzed: a server's greeting and answer.
        door_server peer_server(secret, other, nonce);
        door_client target_client(secret, own, nonce);
        const bytes greet = peer_server.start().out;
        target_client.on_header(std::span(greet).first(door_header_size));
        const bytes req = target_client.on_body(std::span(greet).subspan(door_header_size)).out;
        peer_server.on_header(std::span(req).first(door_header_size));
        const bytes answer =
            peer_server.on_body(std::span(req).subspan(door_header_size), true).out;
        bytes client_seed{static_cast<std::byte>(secret_bit)};
        client_seed.insert(client_seed.end(), greet.begin(), greet.end());
        client_seed.insert(client_seed.end(), answer.begin(), answer.end());
        write("door", std::string("client") + (with_secret ? "-secret" : ""), client_seed);
    }
    // A refusal before the greeting.
    const bytes refusal = door_server::refusal(door_status::refused);
    bytes refused{std::byte{0}};
    refused.insert(refused.end(), refusal.begin(), refusal.end());
    write("door", "client-refused", refused);
}

// The TCPStore protocol: a genuine client's requests for the server, a
// genuine server's replies for the client (the first byte: bit 0 client, bit
// 1 small limits; then the limits, the split point, the client's queries).
void tcp_store_messages() {
    namespace proto = ucx::detail::tcp_store_protocol;
    using proto::query_type;
    const std::string t = "tcp_store_protocol";
    const bytes value = pattern(20, 9);
    const std::string keys[] = {"a", "", "rank/3"};
    auto text = [](std::string_view s) {
        const auto* p = reinterpret_cast<const std::byte*>(s.data());
        return bytes(p, p + s.size());
    };
    // The server, default limits, split after the type byte.
    auto server = [](std::uint64_t split) { return encoder{}.u8(0).uint(split, 2).out; };
    auto add = [](bytes& to, const bytes& b) { to.insert(to.end(), b.begin(), b.end()); };
    bytes b = server(1);
    proto::encode_set(b, "/k", value);
    write(t, "request-set", b);
    b = server(1);
    proto::encode_compare_set(b, "cas", {}, value);
    write(t, "request-compare-set", b);
    b = server(1);
    proto::encode_add(b, "init/", -7);
    write(t, "request-add", b);
    b = server(1);
    proto::encode_wait(b, keys);
    write(t, "request-wait", b);
    // Every query in one stream, split inside the second.
    b = server(12);
    proto::encode_get(b, "/k");
    proto::encode_check(b, keys);
    proto::encode_get_num_keys(b);
    proto::encode_delete_key(b, "gone");
    // WATCH_KEY has no encoder: its type, then a key.
    add(b, encoder{}.u8(static_cast<unsigned>(query_type::watch_key)).uint(1, 8).u8('w').out);
    proto::encode_set(b, "last", {});
    write(t, "requests-all", b);
    // Small limits (key 8, value 16, 3 keys), a SET at the bounds, then a
    // CHECK over the count.
    b = encoder{}.u8(2).u8(8).uint(16, 2).u8(3).uint(0, 2).out;
    proto::encode_set(b, "12345678", pattern(16, 4));
    const std::string four[] = {"a", "b", "c", "d"};
    proto::encode_check(b, four);
    write(t, "requests-at-limits", b);

    // The client: default limits, split in the first reply, the queries
    // GET ADD CHECK WAIT SET COMPARE_SET GET_NUM_KEYS DELETE_KEY.
    b = encoder{}.u8(1).uint(5, 2).u8(7).out;
    for (query_type q :
         {query_type::get, query_type::add, query_type::check, query_type::wait, query_type::set,
          query_type::compare_set, query_type::get_num_keys, query_type::delete_key})
        b.push_back(static_cast<std::byte>(q));
    proto::encode_value_reply(b, text("hello"));
    proto::encode_int64_reply(b, -42);
    proto::encode_byte_reply(b, proto::check_not_ready);
    proto::encode_byte_reply(b, proto::wait_stop_waiting);
    proto::encode_value_reply(b, {});
    proto::encode_int64_reply(b, 3);
    proto::encode_int64_reply(b, 1);
    write(t, "replies-all", b);
    // Small limits (value 4): a value at the bound, then one over it.
    b = encoder{}.u8(3).u8(0).uint(4, 2).u8(0).uint(0, 2).u8(0).u8(2).out;
    proto::encode_value_reply(b, text("1234"));
    add(b, encoder{}.uint(5, 8).out);
    write(t, "replies-over-limit", b);
    // A CHECK that says READY, over and over.
    b = encoder{}.u8(1).uint(0, 2).u8(0).u8(static_cast<unsigned>(query_type::check)).out;
    for (int i = 0; i < 3; ++i)
        proto::encode_byte_reply(b, proto::check_ready);
    write(t, "replies-check-ready", b);
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds <corpus directory>\n");
        return 2;
    }
    root = argv[1];
    worker_addresses();
    remote_keys();
    control_messages();
    connection_sequences();
    stream_sequences();
    door_handshakes();
    tcp_store_messages();
    staging_sequences();
}
