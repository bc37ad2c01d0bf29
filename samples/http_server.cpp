// A Boost.Beast HTTP server over ucx::stream; the same code serves over
// plain TCP with `--transport tcp`: the connection handler is written once,
// for any stream, and only the acceptor and socket types differ.
//
//   http_server [--transport ucx|tcp] PORT
//
// Routes: GET /          a greeting
//         GET /bytes/N   N bytes of 'x' (N up to 1 GiB)
//         POST /echo     the request body back
// Keep-alive is honoured; each response says which transport served it.
#include "sample_args.hpp"

#include <ucx/acceptor.hpp>
#include <ucx/beast.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <optional>
#include <string>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;

namespace {

http::response<http::string_body> handle(const http::request<http::string_body>& req,
                                         const std::string& transport) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "ucx-asio http_server (" + transport + ")");
    res.set(http::field::content_type, "text/plain");
    res.keep_alive(req.keep_alive());
    const std::string target(req.target());
    if (req.method() == http::verb::get && target == "/") {
        res.body() = "hello over " + transport + "\n";
    } else if (req.method() == http::verb::get && target.rfind("/bytes/", 0) == 0) {
        const std::size_t n = sample::number(target.substr(7));
        if (n > (std::size_t{1} << 30) || (n == 0 && target.substr(7) != "0")) {
            res.result(http::status::bad_request);
            res.body() = "bad size\n";
        } else {
            res.body() = std::string(n, 'x');
        }
    } else if (req.method() == http::verb::post && target == "/echo") {
        res.body() = req.body();
    } else {
        res.result(http::status::not_found);
        res.body() = "not found\n";
    }
    res.prepare_payload();
    return res;
}

/// One connection, for any stream type (ucx::stream or tcp::socket).
template <class Stream>
awaitable<void> session(Stream stream, std::string transport) {
    beast::flat_buffer buffer;
    for (;;) {
        http::request<http::string_body> req;
        auto [ec, n] =
            co_await http::async_read(stream, buffer, req, asio::as_tuple(use_awaitable));
        if (ec == http::error::end_of_stream)
            break;
        if (ec) {
            std::cerr << "http_server: " << ec.message() << "\n";
            co_return;
        }
        auto res = handle(req, transport);
        co_await http::async_write(stream, res, use_awaitable);
        if (!res.keep_alive())
            break;
    }
    // The client reads end of stream after the last response.
    beast::error_code ignored;
    stream.shutdown(asio::socket_base::shutdown_send, ignored);
}

template <class Acceptor>
awaitable<void> serve(Acceptor acceptor, std::string transport) {
    std::cout << "http_server: listening on port " << acceptor.local_endpoint().port() << " ("
              << transport << ")" << std::endl;
    for (;;) {
        auto stream = co_await acceptor.async_accept(use_awaitable);
        asio::co_spawn(acceptor.get_executor(), session(std::move(stream), transport),
                       asio::detached);
    }
}

} // namespace

int main(int argc, char** argv) {
    std::string transport = "ucx";
    std::string port_text;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--transport" && i + 1 < argc)
            transport = argv[++i];
        else
            port_text = a;
    }
    const std::size_t port = sample::number(port_text);
    if ((transport != "ucx" && transport != "tcp") || port > 65535 ||
        (port == 0 && port_text != "0")) {
        std::cerr << "usage: http_server [--transport ucx|tcp] PORT\n";
        return 2;
    }
    try {
        asio::io_context io;
        const asio::ip::tcp::endpoint where(asio::ip::tcp::v4(), static_cast<unsigned short>(port));
        std::optional<ucx::context> ctx;
        std::optional<ucx::worker> worker;
        asio::signal_set signals(io, SIGINT, SIGTERM);
        if (transport == "tcp") {
            signals.async_wait([&](auto, auto) { io.stop(); });
            asio::co_spawn(io, serve(asio::ip::tcp::acceptor(io, where), transport),
                           asio::detached);
        } else {
            ctx.emplace();
            worker.emplace(*ctx, io);
            signals.async_wait([&](auto, auto) {
                worker->close();
                io.stop();
            });
            asio::co_spawn(io, serve(ucx::acceptor(*worker, where), transport), asio::detached);
        }
        io.run();
    } catch (const std::exception& e) {
        std::cerr << "http_server: " << e.what() << "\n";
        return 1;
    }
}
