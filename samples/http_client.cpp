// A Boost.Beast HTTP client over ucx::stream (or plain TCP with
// `--transport tcp`, the same code): sends GET requests on one keep-alive
// connection and prints each response's status and body size (or the body
// with --print).
//
//   http_client [--transport ucx|tcp] [--print] HOST PORT TARGET...
#include <ucx/beast.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;

namespace {

/// The requests, for any connected stream type.
template <class Stream>
awaitable<void> fetch(Stream& stream, std::string host, std::vector<std::string> targets,
                      bool print) {
    beast::flat_buffer buffer;
    for (std::size_t i = 0; i < targets.size(); ++i) {
        http::request<http::empty_body> req{http::verb::get, targets[i], 11};
        req.set(http::field::host, host);
        req.keep_alive(i + 1 < targets.size());
        co_await http::async_write(stream, req, use_awaitable);
        http::response<http::string_body> res;
        co_await http::async_read(stream, buffer, res, use_awaitable);
        std::cout << targets[i] << ": " << res.result_int() << " " << res.reason() << ", "
                  << res.body().size() << " bytes, from " << res[http::field::server] << "\n";
        if (print)
            std::cout << res.body();
    }
}

} // namespace

int main(int argc, char** argv) {
    std::string transport = "ucx";
    bool print = false;
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--transport" && i + 1 < argc)
            transport = argv[++i];
        else if (a == "--print")
            print = true;
        else
            args.push_back(a);
    }
    if ((transport != "ucx" && transport != "tcp") || args.size() < 3) {
        std::cerr << "usage: http_client [--transport ucx|tcp] [--print] HOST PORT TARGET...\n";
        return 2;
    }
    const std::string host = args[0], port = args[1];
    const std::vector<std::string> targets(args.begin() + 2, args.end());
    int rc = 0;
    auto done = [&](std::exception_ptr e) {
        if (!e)
            return;
        try {
            std::rethrow_exception(e);
        } catch (const boost::system::system_error& x) {
            std::cerr << "http_client: " << x.code().message() << "\n";
        } catch (const std::exception& x) {
            std::cerr << "http_client: " << x.what() << "\n";
        }
        rc = 1;
    };
    try {
        asio::io_context io;
        if (transport == "tcp") {
            asio::ip::tcp::socket s(io);
            asio::co_spawn(
                io,
                [&]() -> awaitable<void> {
                    asio::ip::tcp::resolver r(io);
                    co_await asio::async_connect(
                        s, co_await r.async_resolve(host, port, use_awaitable), use_awaitable);
                    co_await fetch(s, host, targets, print);
                    s.shutdown(asio::socket_base::shutdown_both);
                    s.close();
                },
                done);
            io.run();
        } else {
            ucx::context ctx;
            ucx::worker worker(ctx, io);
            ucx::stream s(worker);
            asio::co_spawn(
                io,
                [&]() -> awaitable<void> {
                    co_await s.async_connect(host, port, use_awaitable);
                    co_await fetch(s, host, targets, print);
                    co_await s.async_close(use_awaitable);
                },
                [&](std::exception_ptr e) {
                    done(e);
                    worker.close(); // the worker keeps run() going
                });
            io.run();
        }
    } catch (const std::exception& e) {
        std::cerr << "http_client: " << e.what() << "\n";
        return 1;
    }
    return rc;
}
