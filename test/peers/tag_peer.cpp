// The other process of the two-process tag tests: prints its worker address,
// reads the parent's, then echoes every tag-1 message back with tag 2 until a
// tag-3 message arrives.
//
//   tag_peer <tcp|shm> <event|poll|hybrid>
#include "child_process.hpp"
#include "test_support.hpp"

#include <iostream>

using namespace ucx_test;

int main(int argc, char** argv) {
    if (argc < 3)
        return 2;
    const transport t = std::string(argv[1]) == "tcp" ? transport::tcp : transport::shared_memory;
    const auto mode = ucx::parse_progress_mode(argv[2]).value_or(ucx::progress_mode::event);

    asio::io_context io;
    ucx::context ctx(options_for(t));
    ucx::worker w(ctx, io, strict_worker_options(mode));
    // UCX writes its own log lines to stdout too: mark ours.
    std::cout << "ADDRESS " << to_hex(w.address().serialize()) << std::endl;
    std::string line;
    std::getline(std::cin, line);
    ucx::endpoint ep(w, ucx::worker_address::deserialize(from_hex(line)));

    std::vector<char> buf((16u << 20) + 16);
    bool quit = false;
    int failures = 0;
    std::function<void()> serve = [&] {
        ucx::async_tag_recv(
            w, asio::buffer(buf), 0, 0, [&](ucx::error_code ec, std::size_t n, ucx::tag_t tag) {
                if (ec) {
                    std::cerr << "tag_peer: receive failed: " << ec.message() << "\n";
                    ++failures;
                    quit = true;
                    return;
                }
                if (std::getenv("TAG_PEER_TRACE"))
                    std::cerr << "peer got " << n << " bytes tag " << tag << "\n";
                if (tag == 3) {
                    quit = true;
                    return;
                }
                auto reply = std::make_shared<std::vector<char>>(buf.begin(), buf.begin() + n);
                ucx::async_tag_send(ep, asio::buffer(*reply), 2,
                                    [reply, &failures](ucx::error_code ec, std::size_t) {
                                        if (ec)
                                            ++failures;
                                    });
                serve();
            });
    };
    serve();
    run_until(
        io, [&] { return quit && w.pending_operations() == 0; }, std::chrono::minutes(5));
    return failures == 0 && quit ? 0 : 1;
}
