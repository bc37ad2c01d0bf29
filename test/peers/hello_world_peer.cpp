// Either side of UCX's example ucp_hello_world
// (/usr/share/doc/libucx-dev/examples/ucp_hello_world.c), written with this
// library: endpoints made from raw UCX worker addresses, exchanged over a TCP
// connection, and tag messages (tag 0x1337a880, full mask).
//
//   hello_world_peer server --port P [--host H] [--size N]
//   hello_world_peer client --port P [--host H] [--size N]
//
// The exchange: the server accepts one TCP connection on H:P (127.0.0.1 by
// default; port 0 picks a free one) and writes its address's length (a
// uint64_t) and its raw UCX address. The client reads them, makes an
// endpoint to that address and sends the tag message {uint64_t length;
// its raw UCX address}. The server makes an endpoint to the address in it
// and sends the tag message {uint64_t N; N bytes of text}. Then each side
// closes its endpoint and both do the example's barrier: each writes an int 0
// on the TCP connection and reads one.
//
// The server's text is "ucx-asio hello world" padded with NULs or truncated to
// N bytes (16 by default), its last byte a NUL, as the example client prints
// up to N bytes of it.
//
// The endpoints are in UCX's peer error mode, the example's in mode none:
// UCX 1.13 carries eager messages between them but not rendezvous ones, so N
// stays below the rendezvous threshold (a few KiB over shared memory).
//
// Output lines: the server prints "listening <port>" once it listens and
// "sent" once its message went; the client prints "received <text>" (the
// text up to its first NUL). Both print "done" after the barrier and exit 0.
// Errors print "failed <where>: <message>" and exit 1.
#include <ucx/asio.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

/// The example's tag, matched under a full mask.
constexpr ucx::tag_t example_tag = 0x1337a880u;
/// The example's messages start with this: the length of what follows.
using length_field = std::uint64_t;
/// The largest worker address the server takes from a client.
constexpr std::size_t max_address_size = 1 << 16;
/// The server's text, before padding or truncation to N bytes.
constexpr const char* server_text = "ucx-asio hello world";

[[noreturn]] void failed(const char* where, const ucx::error_code& ec) {
    std::printf("failed %s: %s\n", where, ec.message().c_str());
    std::fflush(stdout);
    std::exit(1);
}

[[noreturn]] void failed(const char* where, const std::string& why) {
    std::printf("failed %s: %s\n", where, why.c_str());
    std::fflush(stdout);
    std::exit(1);
}

void say(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
}

/// {length; bytes}: the layout of both of the example's messages.
std::vector<std::byte> message_of(const std::byte* data, std::size_t size) {
    std::vector<std::byte> m(sizeof(length_field) + size);
    const length_field length = size;
    std::memcpy(m.data(), &length, sizeof length);
    if (size != 0)
        std::memcpy(m.data() + sizeof length, data, size);
    return m;
}

/// The bytes after the length field of a message of `n` bytes, checked
/// against the length field.
std::vector<std::byte> payload_of(const std::vector<std::byte>& m, std::size_t n,
                                  const char* where) {
    if (n < sizeof(length_field))
        failed(where, "message of " + std::to_string(n) + " bytes");
    length_field length = 0;
    std::memcpy(&length, m.data(), sizeof length);
    if (length != n - sizeof length)
        failed(where, "length field " + std::to_string(length) + " in a message of " +
                          std::to_string(n) + " bytes");
    return std::vector<std::byte>(m.begin() + sizeof length, m.begin() + n);
}

int usage() {
    std::fprintf(stderr, "usage: hello_world_peer server --port P [--host H] [--size N]\n"
                         "       hello_world_peer client --port P [--host H] [--size N]\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        return usage();
    const std::string role = argv[1];
    std::string host = "127.0.0.1", port;
    std::size_t size = 16;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string arg = argv[i], value = argv[i + 1];
        if (arg == "--host")
            host = value;
        else if (arg == "--port")
            port = value;
        else if (arg == "--size")
            size = std::stoul(value);
        else
            return usage();
    }
    if ((role != "server" && role != "client") || port.empty() || size == 0)
        return usage();

    asio::io_context io;
    ucx::context ctx;
    ucx::worker w(ctx, io);
    tcp::socket oob(io);
    std::optional<tcp::acceptor> acceptor;
    std::optional<ucx::endpoint> ep;
    length_field address_length = 0;
    tcp::resolver resolver(io);
    // The raw UCX address sent (server) or received (client) on the TCP
    // connection; the client's address message; the message received or sent.
    std::vector<std::byte> oob_address, address_message, message;
    int barrier_out = 0, barrier_in = -1;

    // After the exchange: close the endpoint, then the barrier. The example
    // destroys its worker only after the barrier, so the close can complete.
    auto finish = [&] {
        ep->async_close([&](ucx::error_code ec) {
            if (ec)
                failed("close", ec);
            asio::async_write(oob, asio::buffer(&barrier_out, sizeof barrier_out),
                              [&](ucx::error_code ec, std::size_t) {
                                  if (ec)
                                      failed("barrier write", ec);
                              });
            asio::async_read(oob, asio::buffer(&barrier_in, sizeof barrier_in),
                             [&](ucx::error_code ec, std::size_t) {
                                 if (ec)
                                     failed("barrier read", ec);
                                 if (barrier_in != 0)
                                     failed("barrier read", "got " + std::to_string(barrier_in));
                                 say("done");
                             });
        });
    };

    if (role == "server") {
        // The client's address message; posted before the client can send it.
        message.resize(sizeof(length_field) + max_address_size);
        ucx::async_tag_recv(
            w, asio::buffer(message), example_tag, ucx::tag_mask_full,
            [&](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                if (ec)
                    failed("receive address", ec);
                ucx::error_code ep_ec;
                ep.emplace(w, ucx::worker_address(payload_of(message, n, "receive address")),
                           ep_ec);
                if (ep_ec)
                    failed("endpoint", ep_ec);
                std::vector<std::byte> text(size, std::byte{0});
                std::memcpy(text.data(), server_text, std::min(size - 1, std::strlen(server_text)));
                message = message_of(text.data(), text.size());
                ucx::async_tag_send(*ep, asio::buffer(message), example_tag,
                                    [&](ucx::error_code ec, std::size_t) {
                                        if (ec)
                                            failed("send", ec);
                                        say("sent");
                                        finish();
                                    });
            });
        acceptor.emplace(io, tcp::endpoint(asio::ip::make_address(host),
                                           static_cast<unsigned short>(std::stoul(port))));
        say("listening " + std::to_string(acceptor->local_endpoint().port()));
        acceptor->async_accept(oob, [&](ucx::error_code ec) {
            if (ec)
                failed("accept", ec);
            acceptor->close();
            const ucx::worker_address local = w.address();
            oob_address = local.ucx_bytes();
            address_length = oob_address.size();
            const std::vector<asio::const_buffer> out = {
                asio::buffer(&address_length, sizeof address_length), asio::buffer(oob_address)};
            asio::async_write(oob, out, [&](ucx::error_code ec, std::size_t) {
                if (ec)
                    failed("send address", ec);
            });
        });
    } else {
        // The server's data message: {length; N bytes}.
        message.resize(sizeof(length_field) + size);
        asio::async_connect(
            oob, resolver.resolve(host, port), [&](ucx::error_code ec, const tcp::endpoint&) {
                if (ec)
                    failed("connect", ec);
                asio::async_read(
                    oob, asio::buffer(&address_length, sizeof address_length),
                    [&](ucx::error_code ec, std::size_t) {
                        if (ec)
                            failed("receive address length", ec);
                        if (address_length == 0 || address_length > max_address_size)
                            failed("receive address length", std::to_string(address_length));
                        oob_address.resize(address_length);
                        asio::async_read(
                            oob, asio::buffer(oob_address), [&](ucx::error_code ec, std::size_t) {
                                if (ec)
                                    failed("receive address", ec);
                                ucx::error_code ep_ec;
                                ep.emplace(w, ucx::worker_address(oob_address), ep_ec);
                                if (ep_ec)
                                    failed("endpoint", ep_ec);
                                ucx::async_tag_recv(
                                    w, asio::buffer(message), example_tag, ucx::tag_mask_full,
                                    [&](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                        if (ec)
                                            failed("receive", ec);
                                        const auto text = payload_of(message, n, "receive");
                                        const auto* chars =
                                            reinterpret_cast<const char*>(text.data());
                                        say("received " +
                                            std::string(chars, strnlen(chars, text.size())));
                                        finish();
                                    });
                                const ucx::worker_address local = w.address();
                                const auto& bytes = local.ucx_bytes();
                                address_message = message_of(bytes.data(), bytes.size());
                                ucx::async_tag_send(*ep, asio::buffer(address_message), example_tag,
                                                    [&](ucx::error_code ec, std::size_t) {
                                                        if (ec)
                                                            failed("send address", ec);
                                                    });
                            });
                    });
            });
    }
    io.run();
    return 0;
}
