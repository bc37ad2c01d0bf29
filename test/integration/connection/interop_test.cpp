// Plain UCP connections (connection_method::plain) with a program nobody here
// wrote: UCX's own example ucp_client_server (shipped as source by
// libucx-dev, compiled by this build), as the other process. Its server with
// this library's client (plain_peer) and its client with this library's
// server, in each of its modes (tag, stream, active message), over UCX's TCP
// transport and with UCX's default transports (shared memory for the data).
// The content is checked against what the example prints: the string it
// received, or the string it generated and sent.
#include "child_process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace ucx_test;
using namespace std::chrono_literals;

namespace {

#ifdef UCX_ASIO_EXAMPLE_CLIENT_SERVER
constexpr const char* example = UCX_ASIO_EXAMPLE_CLIENT_SERVER;
#else
constexpr const char* example = nullptr;
#endif

bool wait_for(child_process& p, const std::string& text, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
        if (p.output_contains(text))
            return true;
        std::this_thread::sleep_for(2ms);
    }
    return false;
}

/// The port in the example server's "server is listening on IP ... port N".
std::string example_port(child_process& p) {
    if (!wait_for(p, "port ", 10s))
        return {};
    const std::string& out = p.output();
    const auto at = out.find("port ", out.find("server is listening")) + 5;
    std::string port;
    for (std::size_t i = at; i < out.size() && std::isdigit(static_cast<unsigned char>(out[i]));
         ++i)
        port += out[i];
    return port;
}

/// (mode, transports): UCX_TLS for both processes ("" keeps UCX's default).
using param = std::tuple<std::string, std::string>;

class interop : public ::testing::TestWithParam<param> {
protected:
    void SetUp() override {
        if (!example)
            GTEST_SKIP() << "UCX's example programs are not installed "
                            "(libucx-dev: /usr/share/doc/libucx-dev/examples)";
    }
    const std::string& mode() const { return std::get<0>(GetParam()); }
    /// env arguments for a process: loopback, and the transports.
    std::vector<std::string> env() const {
        std::vector<std::string> e = {"/usr/bin/env", "UCX_NET_DEVICES=lo"};
        if (!std::get<1>(GetParam()).empty())
            e.push_back("UCX_TLS=" + std::get<1>(GetParam()));
        return e;
    }
    /// The example, its stderr with its stdout, line-buffered (it is killed
    /// at the end: its server serves forever).
    child_process run_example(const std::vector<std::string>& args) const {
        std::string cmd = "exec stdbuf -oL " + std::string(example);
        for (const auto& a : args)
            cmd += " '" + a + "'";
        auto argv = env();
        argv.insert(argv.end(), {"/bin/sh", "-c", cmd + " 2>&1"});
        return child_process(argv);
    }
    child_process run_peer(const std::vector<std::string>& args) const {
        auto argv = env();
        argv.push_back(UCX_ASIO_PLAIN_PEER);
        argv.insert(argv.end(), args.begin(), args.end());
        return child_process(argv);
    }
};

// The example's server, this library's client: the server prints what it got.
TEST_P(interop, example_server_receives_from_a_library_client) {
    child_process server = run_example({"-l", "127.0.0.1", "-p", "0", "-c", mode(), "-s", "40"});
    const std::string port = example_port(server);
    ASSERT_FALSE(port.empty()) << server.output();
    const std::string message = "ucx-asio plain client, " + mode() + " mode";
    child_process client = run_peer(
        {"client", "--port", port, "--mode", mode(), "--message", message, "--size", "40"});
    EXPECT_TRUE(wait_for(client, "sent", 10s)) << client.output();
    EXPECT_EQ(client.wait(), 0) << client.output();
    ASSERT_TRUE(wait_for(server, "UCP TEST SUCCESS", 10s)) << server.output();
    // print_iov: the received string and a period.
    EXPECT_TRUE(wait_for(server, message + ".\n", 10s)) << server.output();
    // The client went: the example server waits for the next one.
    EXPECT_TRUE(wait_for(server, "Waiting for connection...", 10s));
    std::printf("example server printed: %s.\n", message.c_str());
}

// This library's server, the example's client: the server prints what it got,
// the client what it generated and sent; they must agree.
TEST_P(interop, library_server_receives_from_the_example_client) {
    child_process server = run_peer({"server", "--mode", mode(), "--size", "40"});
    const std::string line = server.read_line();
    ASSERT_EQ(line.rfind("listening ", 0), 0u) << line;
    const std::string port = line.substr(10);
    child_process client = run_example({"-a", "127.0.0.1", "-p", port, "-c", mode(), "-s", "40"});
    EXPECT_EQ(client.wait(), 0);
    ASSERT_TRUE(wait_for(client, "Client: iteration #1", 1s)) << client.output();
    // The generated string: 'A' + i % 26 for 39 bytes, then NUL.
    std::string sent;
    for (int i = 0; i < 39; ++i)
        sent += static_cast<char>('A' + i % 26);
    EXPECT_TRUE(client.output_contains(sent + ".\n")) << client.output();
    ASSERT_TRUE(wait_for(server, "received " + sent + "\n", 10s)) << server.output();
    // The example closes its endpoint when done: the plain endpoint learns it
    // as a failure (no goodbye on a plain connection).
    EXPECT_TRUE(wait_for(server, "peer gone", 10s)) << server.output();
    EXPECT_EQ(server.wait(), 0) << server.output();
    std::printf("library server received: %s\n", sent.c_str());
}

std::string name(const ::testing::TestParamInfo<param>& info) {
    const std::string tls = std::get<1>(info.param);
    return std::get<0>(info.param) + "_" + (tls.empty() ? "default" : tls);
}

INSTANTIATE_TEST_SUITE_P(ucp_client_server, interop,
                         ::testing::Combine(::testing::Values("tag", "stream", "am"),
                                            ::testing::Values("tcp", "")),
                         name);

} // namespace
