// The other process of the two-process stream tests. Connects a ucx::stream
// to the parent's acceptor (TARGET is a port, or "addr:" and the hex of the
// parent worker's serialized address for its address acceptor), then:
//   exchange SIZE: writes stream_pattern(SIZE, 1) in random chunks while it
//     reads SIZE bytes in random read sizes and checks them against
//     stream_pattern(SIZE, 2); closes gracefully; prints "RESULT ok" (or
//     "RESULT bad ...") and exits.
//   hang SIZE: writes stream_pattern(SIZE, 1), prints "WROTE", and waits to
//     be killed.
//   close_exit SIZE: writes stream_pattern(SIZE, 1), closes the stream with
//     close() (in the background), stops the io_context and returns from
//     main at once: the worker's destruction must still deliver every byte.
//
//   stream_peer <tcp|shm> <TARGET> <exchange|hang|close_exit> <size> [keepalive]
//
// With "keepalive", UCX checks its peers every 500 ms (shared memory
// notices a killed peer only that way).
#include "child_process.hpp"
#include "stream_pattern.hpp"
#include "test_support.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <iostream>

using namespace ucx_test;

int main(int argc, char** argv) {
    if (argc < 5)
        return 2;
    const transport t = std::string(argv[1]) == "tcp" ? transport::tcp : transport::shared_memory;
    const std::string target = argv[2];
    const std::string mode = argv[3];
    const std::size_t size = std::stoull(argv[4]);
    const bool keepalive = argc > 5 && std::string(argv[5]) == "keepalive";

    asio::io_context io;
    auto options = options_for(t, true);
    if (keepalive)
        options.config["KEEPALIVE_INTERVAL"] = "500ms";
    ucx::context ctx(options);
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    ucx::stream s(w);
    const auto out = stream_pattern(size, 1);
    const auto expected = stream_pattern(size, 2);
    std::vector<char> in(size);
    std::string result = "bad: not finished";

    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            if (target.starts_with("addr:"))
                co_await s.async_connect(
                    ucx::worker_address::deserialize(from_hex(target.substr(5))),
                    asio::use_awaitable);
            else
                co_await s.async_connect("127.0.0.1", target, asio::use_awaitable);
            if (mode == "close_exit") {
                co_await asio::async_write(s, asio::buffer(out), asio::use_awaitable);
                s.close();
                io.stop();
                result = "ok";
                co_return;
            }
            if (mode == "hang") {
                co_await asio::async_write(s, asio::buffer(out), asio::use_awaitable);
                std::cout << "WROTE" << std::endl;
                asio::steady_timer forever(io, std::chrono::hours(1));
                co_await forever.async_wait(asio::use_awaitable);
                co_return;
            }
            bool read_done = false;
            asio::steady_timer gate(io, std::chrono::steady_clock::time_point::max());
            asio::co_spawn(
                io,
                [&]() -> asio::awaitable<void> {
                    std::mt19937 gen(7);
                    std::size_t off = 0;
                    while (off < size) {
                        const std::size_t n = std::min(size - off, random_size(gen, 4u << 20));
                        off += co_await s.async_read_some(asio::buffer(in.data() + off, n),
                                                          asio::use_awaitable);
                    }
                    read_done = true;
                    gate.cancel();
                },
                [&](std::exception_ptr e) {
                    if (e)
                        result = "bad: read failed";
                });
            std::mt19937 gen(8);
            std::size_t off = 0;
            while (off < size) {
                const std::size_t n = std::min(size - off, random_size(gen, 4u << 20));
                co_await asio::async_write(s, asio::buffer(out.data() + off, n),
                                           asio::use_awaitable);
                off += n;
            }
            if (!read_done)
                co_await gate.async_wait(asio::as_tuple(asio::use_awaitable));
            result = in == expected ? "ok" : "bad: content differs";
            co_await s.async_close(asio::use_awaitable);
        },
        [&](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& x) {
                    result = std::string("bad: ") + x.what();
                }
            }
            if (mode != "close_exit")
                w.close();
        });
    io.run();
    // UCX writes its own log lines to stdout too: mark ours.
    std::cout << "RESULT " << result << std::endl;
    return result == "ok" ? 0 : 1;
}
