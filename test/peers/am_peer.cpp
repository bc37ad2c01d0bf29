// The other process of the two-process active-message tests: prints its
// worker address, reads the parent's, then runs one scenario.
//
//   am_peer <tcp|shm> echo          echo id 1 back on id 2 through the
//                                   message's reply endpoint; id 99 ends it
//   am_peer <tcp|shm> rndv_and_wait send a 2 MiB eager then a 32 MiB
//                                   rendezvous message on id 3, and wait (to
//                                   be killed)
#include "child_process.hpp"
#include "test_support.hpp"

#include <iostream>

using namespace ucx_test;

int main(int argc, char** argv) {
    if (argc < 3)
        return 2;
    const transport t = std::string(argv[1]) == "tcp" ? transport::tcp : transport::shared_memory;
    const std::string scenario = argv[2];

    auto options = options_for(t);
    options.config["KEEPALIVE_INTERVAL"] = "500ms";
    asio::io_context io;
    ucx::context ctx(options);
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    // UCX writes its own log lines to stdout too: mark ours.
    std::cout << "ADDRESS " << to_hex(w.address().serialize()) << std::endl;
    std::string line;
    std::getline(std::cin, line);
    ucx::endpoint ep(w, ucx::worker_address::deserialize(from_hex(line)));

    int failures = 0;
    bool quit = false;
    if (scenario == "echo") {
        ucx::set_am_handler(w, 1, [&](ucx::error_code ec, ucx::am_message m) {
            if (ec) {
                std::cerr << "am_peer: receive failed: " << ec.message() << "\n";
                ++failures;
                return;
            }
            auto header =
                std::make_shared<std::vector<std::byte>>(m.header().begin(), m.header().end());
            auto reply = std::make_shared<ucx::endpoint>(m.reply_endpoint());
            auto held = std::make_shared<ucx::am_message>(std::move(m));
            // The data goes back straight from the received buffer.
            ucx::async_am_send(*reply, 2, asio::buffer(*header), held->data(),
                               [header, reply, held, &failures](ucx::error_code ec, std::size_t) {
                                   if (ec)
                                       ++failures;
                               });
        });
        ucx::set_am_handler(w, 99, [&](ucx::error_code, ucx::am_message) { quit = true; });
        run_until(
            io, [&] { return quit && w.pending_operations() == 0; }, std::chrono::minutes(5));
        return failures == 0 && quit ? 0 : 1;
    }
    if (scenario == "rndv_and_wait") {
        std::vector<char> small(2u << 20, 's'), big(32u << 20, 'b');
        ucx::am_send_options eager, rndv;
        eager.protocol = ucx::am_protocol::eager;
        rndv.protocol = ucx::am_protocol::rendezvous;
        ucx::async_am_send(ep, 3, asio::const_buffer(), asio::buffer(small), eager,
                           [](ucx::error_code, std::size_t) {});
        ucx::async_am_send(ep, 3, asio::const_buffer(), asio::buffer(big), rndv,
                           [](ucx::error_code, std::size_t) {});
        run_until(
            io, [] { return false; }, std::chrono::minutes(2));
        return 1;
    }
    return 2;
}
