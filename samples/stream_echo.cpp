// The echo server of the Asio C++20 coroutine examples, moved to UCX: the
// only changes are the socket and acceptor types and the worker that drives
// UCX (docs/guide/stream.md shows the diff against the TCP version).
//
//   stream_echo server PORT [THREADS]  echo every connection's bytes back
//   stream_echo client HOST PORT TEXT  send TEXT, print what comes back
//
// With THREADS > 1 the server runs THREADS io_contexts, each on its own
// thread with its own worker and acceptor, all on PORT (reuse_port): the
// kernel spreads the connections across them.
//
// Both sides: UCX_NET_DEVICES=lo (or the device to use) as for any UCX program.
#include "sample_args.hpp"

#include <ucx/acceptor.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using asio::awaitable;
using asio::co_spawn;
using asio::detached;
using asio::use_awaitable;
namespace this_coro = asio::this_coro;

// Was: asio::ip::tcp::socket socket
awaitable<void> echo(ucx::stream socket) {
    try {
        char data[1024];
        for (;;) {
            std::size_t n = co_await socket.async_read_some(asio::buffer(data), use_awaitable);
            co_await async_write(socket, asio::buffer(data, n), use_awaitable);
        }
    } catch (const std::exception& e) {
        // eof when the client closed: the end of this connection.
        if (std::string(e.what()).find("End of file") == std::string::npos)
            std::printf("echo Exception: %s\n", e.what());
    }
}

// Was: asio::ip::tcp::acceptor acceptor(executor, {asio::ip::tcp::v4(), port});
awaitable<void> listener(ucx::worker& worker, unsigned short port) {
    ucx::acceptor acceptor(worker, {asio::ip::tcp::v4(), port});
    std::printf("listening on port %u\n", acceptor.local_endpoint().port());
    std::fflush(stdout);
    for (;;) {
        ucx::stream socket = co_await acceptor.async_accept(use_awaitable);
        co_spawn(acceptor.get_executor(), echo(std::move(socket)), detached);
    }
}

// Added for THREADS > 1: one io_context, worker and acceptor per thread.
awaitable<void> accept_loop(ucx::acceptor& acceptor) {
    for (;;) {
        ucx::stream socket = co_await acceptor.async_accept(use_awaitable);
        co_spawn(acceptor.get_executor(), echo(std::move(socket)), detached);
    }
}

int serve_on_threads(unsigned short port, std::size_t threads) {
    struct shard {
        asio::io_context io{1};
        std::optional<ucx::worker> worker;
        std::optional<ucx::acceptor> acceptor;
    };
    ucx::context ctx;
    std::vector<std::unique_ptr<shard>> shards;
    ucx::listener_options options;
    options.reuse_port = true;
    for (std::size_t i = 0; i < threads; ++i) {
        auto& s = *shards.emplace_back(std::make_unique<shard>());
        s.worker.emplace(ctx, s.io);
        s.acceptor.emplace(*s.worker, asio::ip::tcp::endpoint(asio::ip::tcp::v4(), port), options);
        port = s.acceptor->local_endpoint().port(); // the first one picks it with 0
        co_spawn(s.io, accept_loop(*s.acceptor), detached);
    }
    std::printf("listening on port %u (%zu threads)\n", port, threads);
    std::fflush(stdout);
    asio::signal_set signals(shards[0]->io, SIGINT, SIGTERM);
    signals.async_wait([&](auto, auto) {
        for (auto& s : shards)
            asio::post(s->io, [&s = *s] {
                s.acceptor->close();
                s.worker->close();
            });
    });
    std::vector<std::thread> pool;
    for (std::size_t i = 1; i < threads; ++i)
        pool.emplace_back([&s = *shards[i]] { s.io.run(); });
    shards[0]->io.run();
    for (auto& t : pool)
        t.join();
    return 0;
}

awaitable<void> client(ucx::worker& worker, std::string host, std::string port, std::string text) {
    ucx::stream socket(worker);
    co_await socket.async_connect(host, port, use_awaitable);
    co_await async_write(socket, asio::buffer(text), use_awaitable);
    std::string reply(text.size(), '\0');
    co_await asio::async_read(socket, asio::buffer(reply), use_awaitable);
    std::cout << reply << std::endl;
    co_await socket.async_close(use_awaitable);
}

int main(int argc, char** argv) {
    try {
        const std::string mode = argc > 1 ? argv[1] : "";
        if (!(mode == "server" && (argc == 3 || argc == 4)) && !(mode == "client" && argc == 5)) {
            std::cerr
                << "usage: stream_echo server PORT [THREADS] | stream_echo client HOST PORT TEXT\n";
            return 2;
        }
        if (mode == "server" && argc == 4) {
            const std::size_t port = sample::number(argv[2]), threads = sample::number(argv[3]);
            if (port > 65535 || threads < 1 || threads > 1024) {
                std::cerr << "stream_echo: bad port or thread count\n";
                return 2;
            }
            return serve_on_threads(static_cast<unsigned short>(port), threads);
        }
        int rc = 0;
        asio::io_context io_context(1);
        // Added: the UCX context and the worker whose progress runs on io_context.
        ucx::context ctx;
        ucx::worker worker(ctx, io_context);

        asio::signal_set signals(io_context, SIGINT, SIGTERM);
        signals.async_wait([&](auto, auto) { worker.close(); });

        if (mode == "server") {
            const std::size_t port = sample::number(argv[2]);
            if (port > 65535 || (port == 0 && std::string(argv[2]) != "0")) {
                std::cerr << "stream_echo: bad port\n";
                return 2;
            }
            co_spawn(io_context, listener(worker, static_cast<unsigned short>(port)), detached);
        } else {
            co_spawn(io_context, client(worker, argv[2], argv[3], argv[4]),
                     [&](std::exception_ptr e) {
                         if (e) {
                             try {
                                 std::rethrow_exception(e);
                             } catch (const std::exception& x) {
                                 std::cerr << "stream_echo: " << x.what() << "\n";
                             }
                             rc = 1;
                         }
                         signals.cancel();
                         worker.close();
                     });
        }
        io_context.run();
        return rc;
    } catch (const std::exception& e) {
        std::printf("Exception: %s\n", e.what());
        return 1;
    }
}
