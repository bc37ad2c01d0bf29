// One side of a plain UCP connection (connection_method::plain) for the
// interoperability tests, speaking what UCX's example ucp_client_server
// speaks: one message of SIZE bytes from the client to the server, as a tag
// message (tag 0xCAFE), on UCX's stream, or as an active message (id 0, no
// header).
//
//   plain_peer server --mode tag|stream|am --size N [--address A]
//   plain_peer client --port P --mode tag|stream|am --message TEXT [--host H] [--size N]
//
// The server prints "listening <port>", accepts one connection, receives the
// message and prints "received <text>" (up to its first NUL), then waits for
// the client to go and prints "peer gone <message>". The client sends TEXT
// padded with NULs to N bytes (TEXT and one NUL by default), prints "sent",
// and closes. Errors print "failed <where>: <message>" and exit 1 (after the
// worker and everything else is destroyed as usual).
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;

namespace {

constexpr ucx::tag_t example_tag = 0xCAFE;
constexpr unsigned example_am_id = 0;

/// Ends the run (io_context::run passes the exception on); main returns 1
/// after destroying everything in order.
struct peer_failed {};

[[noreturn]] void failed(const char* where, const ucx::error_code& ec) {
    std::printf("failed %s: %s\n", where, ec.message().c_str());
    std::fflush(stdout);
    throw peer_failed{};
}

void say(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
}

std::string text_of(const std::vector<char>& data, std::size_t n) {
    return std::string(data.data(), strnlen(data.data(), std::min(n, data.size())));
}

int usage() {
    std::fprintf(stderr, "usage: plain_peer server --mode tag|stream|am --size N [--address A]\n"
                         "       plain_peer client --port P --mode tag|stream|am --message TEXT "
                         "[--host H] [--size N]\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        return usage();
    const std::string role = argv[1];
    std::string mode = "tag", address = "127.0.0.1", host = "127.0.0.1", port, message;
    std::size_t size = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string arg = argv[i], value = argv[i + 1];
        if (arg == "--mode")
            mode = value;
        else if (arg == "--address")
            address = value;
        else if (arg == "--host")
            host = value;
        else if (arg == "--port")
            port = value;
        else if (arg == "--message")
            message = value;
        else if (arg == "--size")
            size = std::stoul(value);
        else
            return usage();
    }
    if (mode != "tag" && mode != "stream" && mode != "am")
        return usage();

    asio::io_context io;
    ucx::context ctx;
    ucx::worker_options o;
    o.method = ucx::connection_method::plain;
    ucx::worker w(ctx, io, o);
    std::optional<ucx::listener> listener;
    std::optional<ucx::endpoint> ep;
    std::optional<ucx::stream> stream;
    std::vector<char> data;
    std::function<void()> wait_for_the_peer_to_go;

    if (role == "server") {
        if (size == 0)
            return usage();
        data.assign(size, '\0');
        listener.emplace(w, asio::ip::tcp::endpoint(asio::ip::make_address(address), 0));
        say("listening " + std::to_string(listener->local_endpoint().port()));
        wait_for_the_peer_to_go = [&] {
            // The client closes when done: a plain endpoint learns it as a failure.
            ep->async_wait_error([&](ucx::error_code ec) {
                say("peer gone " + ec.message());
                io.stop();
            });
        };
        if (mode == "am") {
            ucx::async_am_recv(w, example_am_id, [&](ucx::error_code ec, ucx::am_message m) {
                if (ec)
                    failed("receive", ec);
                const std::size_t n = std::min(m.data().size(), data.size());
                std::memcpy(data.data(), m.data().data(), n);
                say("received " + text_of(data, n));
            });
        }
        listener->async_accept([&](ucx::error_code ec, ucx::endpoint e) {
            if (ec)
                failed("accept", ec);
            ep.emplace(std::move(e));
            if (mode == "tag") {
                ucx::async_tag_recv(w, asio::buffer(data), example_tag, ~ucx::tag_t{0},
                                    [&](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                        if (ec)
                                            failed("receive", ec);
                                        say("received " + text_of(data, n));
                                        wait_for_the_peer_to_go();
                                    });
            } else if (mode == "stream") {
                stream.emplace(std::move(*ep));
                asio::async_read(*stream, asio::buffer(data),
                                 [&](ucx::error_code ec, std::size_t n) {
                                     if (ec)
                                         failed("receive", ec);
                                     say("received " + text_of(data, n));
                                     // Then the client's close ends the stream.
                                     asio::async_read(*stream, asio::buffer(data),
                                                      [&](ucx::error_code ec, std::size_t) {
                                                          say("peer gone " + ec.message());
                                                          io.stop();
                                                      });
                                 });
            } else {
                wait_for_the_peer_to_go(); // the message may come before or after
            }
        });
    } else if (role == "client" && !port.empty()) {
        data.assign(message.begin(), message.end());
        data.resize(std::max(size, message.size() + 1), '\0');
        ucx::async_connect(w, host, port, [&](ucx::error_code ec, ucx::endpoint e) {
            if (ec)
                failed("connect", ec);
            ep.emplace(std::move(e));
            auto sent = [&](ucx::error_code ec, std::size_t) {
                if (ec)
                    failed("send", ec);
                say("sent");
                if (stream)
                    stream->close();
                else
                    ep->async_close([&](ucx::error_code ec) {
                        if (ec)
                            failed("close", ec);
                        io.stop();
                    });
            };
            if (mode == "tag") {
                ucx::async_tag_send(*ep, asio::buffer(data), example_tag, sent);
            } else if (mode == "stream") {
                stream.emplace(std::move(*ep));
                asio::async_write(*stream, asio::buffer(data), sent);
            } else {
                ucx::async_am_send(*ep, example_am_id, asio::const_buffer(), asio::buffer(data),
                                   sent);
            }
        });
    } else {
        return usage();
    }
    try {
        io.run();
    } catch (const peer_failed&) {
        return 1;
    }
    return 0;
}
