// One server worker (the echo_server sample) with 1,000 connections open at
// once, from four client processes (tools/scale.cpp) of 250 each: every
// connection connects, echoes messages that are checked, and closes; the
// server holds them all at one moment and is back to its descriptors after.
#include "child_process.hpp"
#include "test_support.hpp"

#include <dirent.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

using namespace ucx_test;

namespace {

constexpr std::size_t processes = 4;
constexpr std::size_t per_process = 250;
constexpr std::size_t connections = processes * per_process;

std::size_t open_fds(pid_t pid) {
    std::size_t n = 0;
    if (DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
        while (const dirent* e = readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        closedir(d);
    }
    return n;
}

std::uint16_t read_port(child_process& server) {
    for (std::string line = server.read_line(); !line.empty(); line = server.read_line()) {
        const auto at = line.find("listening on ");
        if (at != std::string::npos)
            return static_cast<std::uint16_t>(std::stoul(line.substr(line.find(':', at) + 1)));
    }
    return 0;
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

class connection_scale : public testing::TestWithParam<transport> {};

TEST_P(connection_scale, a_thousand_connections_from_four_processes) {
    // Up to two descriptors per connection on the server (its lifeline TCP
    // connection and, over TCP, UCX's socket): the children inherit the limit.
    rlimit lim{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
    const rlim_t need = 2 * connections + 256;
    if (lim.rlim_cur < need) {
        if (lim.rlim_max < need)
            GTEST_SKIP() << "the descriptor limit (" << lim.rlim_max << ") is below " << need;
        lim.rlim_cur = need;
        ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
    }
    const std::string tls = GetParam() == transport::tcp ? "UCX_TLS=tcp,self" : "UCX_TLS=sm,self";
    child_process server({"/usr/bin/env", tls, UCX_ASIO_ECHO_SERVER, "--quiet", "--max-size",
                          "4096", "--backlog", std::to_string(connections)});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);
    const std::size_t fds_before = open_fds(server.pid());

    std::vector<std::unique_ptr<child_process>> clients;
    for (std::size_t i = 0; i < processes; ++i)
        clients.push_back(std::make_unique<child_process>(std::vector<std::string>{
            "/usr/bin/env", tls, UCX_ASIO_SCALE, "--port", std::to_string(port), "--connections",
            std::to_string(per_process), "--seconds", "0.5", "--min-echoes", "20",
            "--wait-signal"}));
    // Every process has all its connections up before any starts echoing.
    for (std::size_t i = 0; i < processes; ++i) {
        auto& c = *clients[i];
        ASSERT_TRUE(wait_until([&] { return c.output_contains("connected ") || c.exited(); },
                               std::chrono::seconds(60)))
            << "client " << i << " did not connect";
        ASSERT_TRUE(wait_until([&] { return c.output_contains(" ms,"); }, std::chrono::seconds(5)));
        EXPECT_TRUE(c.output_contains("connected " + std::to_string(per_process) + " failed 0 "))
            << c.output();
    }
    // The server holds every connection now (a descriptor each at least).
    ASSERT_TRUE(wait_until([&] { return open_fds(server.pid()) >= fds_before + connections; },
                           std::chrono::seconds(30)))
        << "the server has " << open_fds(server.pid()) << " descriptors, " << fds_before
        << " before";
    std::printf("server descriptors: %zu before, %zu with %zu connections\n", fds_before,
                open_fds(server.pid()), connections);
    for (auto& c : clients)
        kill(c->pid(), SIGUSR1);
    // Each connection makes at least 20 checked echoes, then closes: a client
    // exits 0 only if every connect, echo and close of its own succeeded.
    for (std::size_t i = 0; i < processes; ++i) {
        auto& c = *clients[i];
        ASSERT_TRUE(wait_until([&] { return c.exited(); }, std::chrono::seconds(120)))
            << "client " << i << " did not finish";
        c.output_contains("");
        EXPECT_EQ(c.wait(), 0) << c.output();
        std::printf("client %zu: %s", i, c.output().c_str());
    }
    // Every connection's resources went with it.
    EXPECT_TRUE(wait_until([&] { return open_fds(server.pid()) <= fds_before + 2; },
                           std::chrono::seconds(30)))
        << "the server kept " << open_fds(server.pid()) - fds_before << " descriptors";
    EXPECT_EQ(kill(server.pid(), 0), 0) << "the server died";
}

INSTANTIATE_TEST_SUITE_P(all, connection_scale,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
