// Endpoints made from raw UCX worker addresses, with a program nobody here
// wrote: UCX's own example ucp_hello_world (shipped as source by libucx-dev,
// compiled by this build), which exchanges worker addresses over a TCP
// connection and then tag messages. Its server with this library's client
// (hello_world_peer) and its client with this library's server, in each of
// its progress modes (-b busy polling, -w ucp_worker_wait, -f event fd), over
// UCX's TCP transport and with UCX's default transports (shared memory for
// the data), with both programs' default string length (16) and a longer one.
// The string each side generated is checked exactly where the other side
// printed it.
//
// The example's endpoints are in UCX's error mode "none", this library's in
// "peer" mode. Between such a pair UCX 1.13 carries eager messages, but not
// rendezvous ones: it logs "asymmetric endpoint configuration is not
// supported, error handling level mismatch" and the transfer hangs or the
// endpoint fails. So the lengths stay well below the rendezvous thresholds
// (a few KiB over shared memory).
#include "child_process.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace ucx_test;
using namespace std::chrono_literals;

namespace {

#ifdef UCX_ASIO_EXAMPLE_HELLO_WORLD
constexpr const char* example = UCX_ASIO_EXAMPLE_HELLO_WORLD;
#else
constexpr const char* example = nullptr;
#endif

/// How long any one step may take.
constexpr auto step_limit = 20s;

/// Waits until `p` printed `text` or ended, at most `limit`; whether it printed it.
bool wait_for_or_exit(child_process& p, const std::string& text, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (p.output_contains(text))
            return true;
        if (p.exited())
            break;
        std::this_thread::sleep_for(2ms);
    }
    return p.output_contains(text);
}

/// `p`'s exit status, waiting at most `limit`; -1 (and `p` killed) after that.
int wait_exit(child_process& p, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!p.exited()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            p.kill_now();
            p.wait();
            return -1;
        }
        std::this_thread::sleep_for(2ms);
    }
    p.output_contains(""); // what it printed last
    return p.wait();
}

/// The rest of the first complete line of `out` that starts with `prefix`
/// (without the newline); `fallback` if there is none.
std::string line_after(const std::string& out, const std::string& prefix,
                       const std::string& fallback = "<no such line>") {
    for (std::size_t at = 0; at < out.size();) {
        const std::size_t end = out.find('\n', at);
        if (end == std::string::npos)
            break;
        if (out.compare(at, prefix.size(), prefix) == 0)
            return out.substr(at + prefix.size(), end - at - prefix.size());
        at = end + 1;
    }
    return fallback;
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the example's server
/// takes a fixed port only).
std::string free_port() {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(
        io, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    return std::to_string(a.local_endpoint().port());
}

/// The string the example generates for length `n`: 'A' + i % 26 for n - 1
/// bytes, then a NUL.
std::string example_string(std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i + 1 < n; ++i)
        s += static_cast<char>('A' + i % 26);
    return s;
}

/// What hello_world_peer's server sends for length `n`, up to its NUL.
std::string library_string(std::size_t n) {
    return std::string("ucx-asio hello world").substr(0, n - 1);
}

/// `s` for a log line: its first 40 bytes and its length.
std::string shown(const std::string& s) {
    if (s.size() <= 40)
        return s;
    return s.substr(0, 40) + "... (" + std::to_string(s.size()) + " bytes)";
}

/// How the example's client prints the string it received.
std::string example_success(const std::string& s) {
    return "\n\n----- UCP TEST SUCCESS ----\n\n" + s + "\n\n---------------------------\n\n";
}

/// (progress mode flag, UCX_TLS for both processes ("" keeps UCX's default),
/// string length (0: neither program is given one; both default to 16)).
using param = std::tuple<std::string, std::string, int>;

class interop_hello_world : public ::testing::TestWithParam<param> {
protected:
    void SetUp() override {
        if (!example) {
            std::printf("skipped: UCX's example programs are not installed "
                        "(libucx-dev: /usr/share/doc/libucx-dev/examples)\n");
            GTEST_SKIP() << "UCX's example programs are not installed "
                            "(libucx-dev: /usr/share/doc/libucx-dev/examples)";
        }
    }
    const std::string& mode() const { return std::get<0>(GetParam()); }
    /// The string length both sides use.
    std::size_t length() const {
        return std::get<2>(GetParam()) == 0 ? 16
                                            : static_cast<std::size_t>(std::get<2>(GetParam()));
    }
    /// The length option of each program (none for the default).
    std::vector<std::string> example_size() const {
        if (std::get<2>(GetParam()) == 0)
            return {};
        return {"-s", std::to_string(std::get<2>(GetParam()))};
    }
    std::vector<std::string> peer_size() const {
        if (std::get<2>(GetParam()) == 0)
            return {};
        return {"--size", std::to_string(std::get<2>(GetParam()))};
    }
    /// env arguments for a process: loopback, and the transports.
    std::vector<std::string> env() const {
        std::vector<std::string> e = {"/usr/bin/env", "UCX_NET_DEVICES=lo"};
        if (!std::get<1>(GetParam()).empty())
            e.push_back("UCX_TLS=" + std::get<1>(GetParam()));
        return e;
    }
    /// The command line of the example, its stderr with its stdout,
    /// line-buffered.
    std::vector<std::string> example_argv(std::vector<std::string> args) const {
        args.insert(args.begin(), mode());
        const auto size = example_size();
        args.insert(args.end(), size.begin(), size.end());
        std::string cmd = "exec stdbuf -oL " + std::string(example);
        for (const auto& a : args)
            cmd += " '" + a + "'";
        auto argv = env();
        argv.insert(argv.end(), {"/bin/sh", "-c", cmd + " 2>&1"});
        return argv;
    }
    child_process run_example(const std::vector<std::string>& args) const {
        return child_process(example_argv(args));
    }
    /// hello_world_peer, its stderr with its stdout.
    child_process run_peer(std::vector<std::string> args) const {
        const auto size = peer_size();
        args.insert(args.end(), size.begin(), size.end());
        std::string cmd = "exec '" + std::string(UCX_ASIO_HELLO_WORLD_PEER) + "'";
        for (const auto& a : args)
            cmd += " '" + a + "'";
        auto argv = env();
        argv.insert(argv.end(), {"/bin/sh", "-c", cmd + " 2>&1"});
        return child_process(argv);
    }
};

// The example's server, this library's client: the client prints the string
// the example generated.
TEST_P(interop_hello_world, example_server_sends_to_a_library_client) {
    // The example's server listens on a fixed port: one that was free, again
    // with another if it was taken in between.
    std::string port;
    std::optional<child_process> server;
    for (int attempt = 0; attempt < 5 && !server; ++attempt) {
        port = free_port();
        server.emplace(example_argv({"-p", port}));
        if (!wait_for_or_exit(*server, "Waiting for connection...", step_limit)) {
            std::printf("example server on port %s did not listen: %s\n", port.c_str(),
                        server->output().c_str());
            server.reset();
        }
    }
    ASSERT_TRUE(server) << "the example's server never listened";
    child_process client = run_peer({"client", "--port", port});
    const bool done = wait_for_or_exit(client, "done\n", step_limit);
    EXPECT_EQ(wait_exit(client, step_limit), 0) << client.output();
    EXPECT_TRUE(done) << client.output();
    EXPECT_EQ(line_after(client.output(), "received "), example_string(length()))
        << client.output();
    EXPECT_EQ(wait_exit(*server, step_limit), 0) << server->output();
    EXPECT_TRUE(server->output_contains("finish to send UCX data message")) << server->output();
    std::printf("library client received: %s\n", shown(example_string(length())).c_str());
}

// This library's server, the example's client: the example prints the string
// the library sent.
TEST_P(interop_hello_world, library_server_sends_to_the_example_client) {
    child_process server = run_peer({"server", "--port", "0"});
    ASSERT_TRUE(wait_for_or_exit(server, "\n", step_limit)) << server.output();
    const std::string port = line_after(server.output(), "listening ", "");
    ASSERT_FALSE(port.empty()) << server.output();
    child_process client = run_example({"-n", "127.0.0.1", "-p", port});
    EXPECT_EQ(wait_exit(client, step_limit), 0) << client.output();
    EXPECT_TRUE(client.output_contains(example_success(library_string(length()))))
        << client.output();
    EXPECT_EQ(wait_exit(server, step_limit), 0) << server.output();
    EXPECT_TRUE(server.output_contains("sent\ndone\n")) << server.output();
    std::printf("example client received: %s\n", shown(library_string(length())).c_str());
}

std::string name(const ::testing::TestParamInfo<param>& info) {
    const std::string& mode = std::get<0>(info.param);
    const std::string& tls = std::get<1>(info.param);
    const int size = std::get<2>(info.param);
    return std::string(mode == "-b"   ? "busy"
                       : mode == "-w" ? "wait"
                                      : "eventfd") +
           "_" + (tls.empty() ? "default" : tls) + "_" +
           (size == 0 ? "default_size" : "size" + std::to_string(size));
}

INSTANTIATE_TEST_SUITE_P(ucp_hello_world, interop_hello_world,
                         ::testing::Combine(::testing::Values("-b", "-w", "-f"),
                                            ::testing::Values("tcp", ""),
                                            ::testing::Values(0, 4000)),
                         name);

} // namespace
