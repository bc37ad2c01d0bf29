// tools/ucx-asio-info as a process: versions, configuration from the
// environment and a file, resources, a loopback test connection and one to
// another process (echo_server), the warning when shared memory is left out
// of peer error mode, and a clear error for a bad setting.
#include "child_process.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace ucx_test;

namespace {

struct run_result {
    int status = -1;
    std::string output;
};

/// Runs the tool with `env` (NAME=VALUE) and `args`; its stdout and stderr.
run_result run_info(const std::vector<std::string>& env, const std::vector<std::string>& args) {
    std::string cmd = "exec " + std::string(UCX_ASIO_INFO);
    for (const auto& a : args)
        cmd += " '" + a + "'";
    std::vector<std::string> argv = {"/usr/bin/env", "UCX_NET_DEVICES=lo"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {"/bin/sh", "-c", cmd + " 2>&1"});
    child_process p(argv);
    run_result r;
    r.output = p.read_all();
    r.status = p.wait();
    return r;
}

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

TEST(info_tool, prints_versions_configuration_resources_and_a_loopback_connection) {
    const run_result r = run_info({}, {});
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX running: 1.")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX built against: 1.")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_MM_ERROR_HANDLING=y")) << r.output;
    EXPECT_TRUE(contains(r.output, "NET_DEVICES=lo")) << r.output;
    EXPECT_TRUE(contains(r.output, "tcp/lo")) << r.output; // a resource
    EXPECT_TRUE(contains(r.output, "connected in")) << r.output;
    // Both ends on this host: the lanes use shared memory.
    EXPECT_TRUE(contains(r.output, "sysv/memory") || contains(r.output, "posix/memory"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "WARNING")) << r.output;
}

TEST(info_tool, warns_when_peer_error_mode_leaves_shared_memory_out) {
    const run_result r = run_info({"UCXASIO_SHARED_MEMORY_ERROR_HANDLING=false"}, {});
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "WARNING: the peer is on this host but no lane uses shared "
                                   "memory"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "tcp/lo.0")) << r.output; // the lane it fell back to
}

TEST(info_tool, reads_a_configuration_file_and_names_a_bad_setting) {
    const std::string path = "/tmp/ucx-asio-info-test-" + std::to_string(getpid()) + ".conf";
    {
        std::ofstream f(path);
        f << "# test\nshared_memory = false\nenvironment__RNDV_THRESH = 16k\n";
    }
    run_result r = run_info({}, {"--config", path, "--no-connection"});
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "shared_memory=no")) << r.output;
    EXPECT_TRUE(contains(r.output, "RNDV_THRESH=16384") || contains(r.output, "RNDV_THRESH=16k"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "== connection")) << r.output;
    // The environment wins over the file, and a bad value is named.
    r = run_info({"UCXASIO_TCP=perhaps"}, {"--config", path, "--no-connection"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "UCXASIO_TCP=perhaps")) << r.output;
    std::remove(path.c_str());
    r = run_info({}, {"--bogus"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "usage:")) << r.output;
}

TEST(info_tool, connects_to_another_process) {
    child_process server({"/usr/bin/env", "UCX_NET_DEVICES=lo", UCX_ASIO_ECHO_SERVER, "--address",
                          "127.0.0.1", "--port", "0"});
    const std::string line = server.read_line();
    ASSERT_EQ(line.rfind("listening on ", 0), 0u) << line;
    const std::string address = line.substr(13, line.find(' ', 13) - 13);
    const run_result r = run_info({}, {"--connect", address});
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "== connection to " + address)) << r.output;
    EXPECT_TRUE(contains(r.output, "connected in")) << r.output;
    EXPECT_TRUE(contains(r.output, "lane[0]")) << r.output;
    // Nobody there: a clear failure.
    const run_result none = run_info({}, {"--connect", "127.0.0.1:1"});
    EXPECT_EQ(none.status, 2) << none.output;
    EXPECT_TRUE(contains(none.output, "ERROR: the connection failed")) << none.output;
}

} // namespace
