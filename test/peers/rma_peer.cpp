// The other process of the two-process RMA tests: owns a registered region,
// prints its worker address and the region's key, then answers commands read
// from stdin while its worker runs (over TCP, the target's progress serves
// one-sided operations):
//   CRC         -> "CRC <checksum of the region>" (region_checksum)
//   UNREGISTER  -> unregisters the region (its memory stays allocated), "OK"
//   QUIT        -> exits 0
//
//   rma_peer <tcp|shm> <size>
#include "child_process.hpp"
#include "test_support.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>

#include <cstring>
#include <iostream>

using namespace ucx_test;

namespace {

// A fast 64-bit checksum (FNV-1a over 8-byte words), the same as rma_test's.
std::uint64_t region_checksum(const std::vector<char>& v) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    std::size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
        std::uint64_t w;
        std::memcpy(&w, v.data() + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < v.size(); ++i)
        h = (h ^ static_cast<unsigned char>(v[i])) * 0x100000001b3ull;
    return h;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3)
        return 2;
    const transport t = std::string(argv[1]) == "tcp" ? transport::tcp : transport::shared_memory;
    const std::size_t size = std::stoull(argv[2]);

    asio::io_context io;
    ucx::context ctx(options_for(t));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    // The memory outlives the registration, so that a stale key reads or
    // writes memory that is still there.
    std::vector<char> memory = pattern(size, 99);
    ucx::memory_region region(ctx, memory.data(), memory.size());
    // UCX writes its own log lines to stdout too: mark ours.
    std::cout << "ADDRESS " << to_hex(w.address().serialize()) << std::endl;
    std::cout << "KEY " << to_hex(region.pack_key()) << std::endl;

    asio::posix::stream_descriptor in(io, ::dup(0));
    asio::streambuf buf;
    bool quit = false;
    std::function<void()> next = [&] {
        asio::async_read_until(in, buf, '\n', [&](ucx::error_code ec, std::size_t) {
            if (ec) {
                quit = true;
                return;
            }
            std::istream is(&buf);
            std::string line;
            std::getline(is, line);
            if (line == "CRC") {
                std::cout << "CRC " << region_checksum(memory) << std::endl;
            } else if (line == "UNREGISTER") {
                region.reset();
                std::cout << "OK" << std::endl;
            } else if (line == "QUIT") {
                quit = true;
                return;
            }
            next();
        });
    };
    next();
    run_until(
        io, [&] { return quit; }, std::chrono::minutes(5));
    return quit ? 0 : 1;
}
