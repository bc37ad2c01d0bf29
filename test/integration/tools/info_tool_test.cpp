// tools/ucx-asio-info as a process: versions, configuration from the
// environment and a file, resources, a loopback test connection and one to
// another process (echo_server), the warning when shared memory is left out
// of peer error mode, and a clear error for a bad setting; the endpoints of
// a running process that serves metrics (echo_server --metrics), with the
// same warning.
#include "child_process.hpp"
#include "test_support.hpp"

#include <ucx/asio.hpp>

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

/// Runs the tool with `env` (NAME=VALUE, or "-u", NAME to unset) and `args`;
/// its stdout and stderr.
run_result run_info(const std::vector<std::string>& env, const std::vector<std::string>& args) {
    std::string cmd = "exec " + std::string(UCX_ASIO_INFO);
    for (const auto& a : args)
        cmd += " '" + a + "'";
    // env's options (-u NAME) first, then the assignments.
    std::vector<std::string> argv = {"/usr/bin/env"};
    for (std::size_t i = 0; i < env.size(); ++i)
        if (env[i] == "-u" && i + 1 < env.size()) {
            argv.push_back(env[i]);
            argv.push_back(env[++i]);
        }
    argv.push_back("UCX_NET_DEVICES=lo");
    for (std::size_t i = 0; i < env.size(); ++i) {
        if (env[i] == "-u")
            ++i;
        else
            argv.push_back(env[i]);
    }
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
    EXPECT_TRUE(contains(r.output, "ucx-asio: " + std::to_string(UCX_ASIO_VERSION_MAJOR) + "." +
                                       std::to_string(UCX_ASIO_VERSION_MINOR) + "." +
                                       std::to_string(UCX_ASIO_VERSION_PATCH) + "\n"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "UCX running: 1.")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX built against: 1.")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_MM_ERROR_HANDLING=y")) << r.output;
    EXPECT_TRUE(contains(r.output, "NET_DEVICES=lo")) << r.output;
    EXPECT_TRUE(contains(r.output, "tcp/lo")) << r.output; // a resource
    EXPECT_TRUE(contains(r.output, "connected in")) << r.output;
    // Both ends on this host: the lanes use shared memory; endpoint::lanes()
    // reads them (its list: "  lanes:", then "    N: transport/device uses").
    EXPECT_TRUE(contains(r.output, "sysv/memory") || contains(r.output, "posix/memory"))
        << r.output;
    EXPECT_TRUE(contains(r.output, "  lanes:\n    0: ")) << r.output;
    EXPECT_TRUE(contains(r.output, "/memory am") || contains(r.output, "/memory amo#0 am"))
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
    EXPECT_TRUE(contains(r.output, "    0: tcp/lo am")) << r.output;
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

TEST(info_tool, shows_the_ucx_settings_of_a_dask_configuration) {
    const std::string path = "/tmp/ucx-asio-info-test-" + std::to_string(getpid()) + ".yaml";
    {
        std::ofstream f(path);
        f << "distributed-ucxx:\n  tcp: true\n  multi-buffer: true\n  environment:\n"
             "    rndv-thresh: 16k\n  rmm:\n    pool-size: 1GB\n";
    }
    // The positive transport list of distributed-ucxx, the setting, Dask's
    // size; what has no effect is a warning; the context takes the settings.
    run_result r = run_info({"DASK_DISTRIBUTED_UCXX__ENVIRONMENT__MAX_RNDV_RAILS=1"},
                            {"--config", path, "--no-connection"});
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_TLS=tcp\n")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_SOCKADDR_TLS_PRIORITY=tcp")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_RNDV_THRESH=16k")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCX_MAX_RNDV_RAILS=1")) << r.output;
    EXPECT_TRUE(contains(r.output, "cuda_pool_size=1000000000")) << r.output;
    EXPECT_TRUE(contains(r.output, "WARNING: Dask configuration: " + path +
                                       ":3: distributed-ucxx.multi-buffer: no effect"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "ERROR")) << r.output;
    // A misspelt UCX setting is named, with the variable that holds it.
    r = run_info({"DASK_DISTRIBUTED_UCXX__ENVIRONMENT__RNDV_TRESH=8k"},
                 {"--config", path, "--no-connection"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "DASK_DISTRIBUTED_UCXX__ENVIRONMENT__RNDV_TRESH=8k: "
                                   "distributed-ucxx.environment.rndv-tresh: UCX_RNDV_TRESH is "
                                   "not a setting"))
        << r.output;
    std::remove(path.c_str());
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

// The launch environment as real launchers set it: Open MPI's mpirun with 4
// ranks on this host, and explicit variables; no launcher is a clear error.
TEST(info_tool, reads_the_launch_environment_under_mpirun) {
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    child_process mpirun({"/usr/bin/env", "OMPI_MCA_plm_rsh_agent=", "mpirun",
                          "--allow-run-as-root", "--oversubscribe", "-np", "4", UCX_ASIO_INFO,
                          "--launch"});
    const std::string out = mpirun.read_all();
    EXPECT_EQ(mpirun.wait(), 0) << out;
    for (int rank = 0; rank < 4; ++rank)
        EXPECT_TRUE(contains(out, "launch: launcher=openmpi rank=" + std::to_string(rank) +
                                      " size=4 local_rank=" + std::to_string(rank) +
                                      " local_size=4 node_rank=-1"))
            << out;
}

TEST(info_tool, reads_explicit_launch_variables_and_names_what_is_missing) {
    run_result r = run_info(
        {"UCXASIO_RANK=1", "UCXASIO_SIZE=2", "UCXASIO_RENDEZVOUS=127.0.0.1:29500"}, {"--launch"});
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "launch: launcher=explicit rank=1 size=2 local_rank=-1 "
                                   "local_size=-1 node_rank=-1 rendezvous=127.0.0.1:29500"))
        << r.output;
    r = run_info({"UCXASIO_RANK=2", "UCXASIO_SIZE=2"}, {"--launch"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "UCXASIO_RANK=2")) << r.output;
    // The test itself may run under a launcher: clear every launcher's pair.
    std::vector<std::string> cleared;
    for (const char* v : {"-u", "RANK", "-u", "WORLD_SIZE", "-u", "SLURM_PROCID", "-u",
                          "OMPI_COMM_WORLD_RANK", "-u", "PMI_RANK", "-u", "UCXASIO_RANK"})
        cleared.push_back(v);
    r = run_info(cleared, {"--launch"});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "no launcher's variables give the rank and size")) << r.output;
}

} // namespace

// The launch and store variables are the library's, not unknown options: the
// tool lists them and goes on; a misspelt one is named, with exit status 2.
TEST(info_tool, accepts_the_launch_and_store_variables) {
    const run_result r =
        run_info({"UCXASIO_RANK=0", "UCXASIO_SIZE=1", "UCXASIO_RENDEZVOUS=127.0.0.1:29500",
                  "UCXASIO_STORE_DIR=/tmp", "UCXASIO_STORE_SERVER=external"},
                 {"--no-connection"});
    EXPECT_NE(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "UCXASIO_RANK=0: ")) << r.output;
    EXPECT_TRUE(contains(r.output, "UCXASIO_STORE_DIR=/tmp: ")) << r.output;
    const run_result bad = run_info({"UCXASIO_RANKS=0"}, {"--no-connection"});
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_TRUE(contains(bad.output, "UCXASIO_RANKS=0")) << bad.output;
    // --launch names the store the variables choose, and the enclosing launcher.
    const run_result launch = run_info({"SLURM_PROCID=0", "SLURM_NTASKS=1", "UCXASIO_RANK=0",
                                        "UCXASIO_SIZE=1", "UCXASIO_RENDEZVOUS=localhost:29500"},
                                       {"--launch"});
    EXPECT_EQ(launch.status, 0) << launch.output;
    EXPECT_TRUE(contains(launch.output, "enclosing=slurm")) << launch.output;
    EXPECT_TRUE(contains(launch.output, "store: tcp localhost:29500, served by this process"))
        << launch.output;
    EXPECT_TRUE(contains(launch.output, "run namespace: none")) << launch.output;
    const run_result named = run_info(
        {"UCXASIO_RANK=0", "UCXASIO_SIZE=1", "UCXASIO_STORE_DIR=/tmp", "UCXASIO_RUN_ID=nightly"},
        {"--launch"});
    EXPECT_EQ(named.status, 0) << named.output;
    EXPECT_TRUE(contains(named.output, "run namespace: run/nightly")) << named.output;
}

// echo_server serving metrics, with a client of this process connected: the
// tool reads the server's endpoints and lanes from /endpoints; with UCX_TLS=tcp
// the peer on this host has no shared-memory lane, and the tool warns.
TEST(info_tool, prints_the_endpoints_of_a_running_process) {
    for (const bool tcp_only : {false, true}) {
        SCOPED_TRACE(tcp_only ? "UCX_TLS=tcp" : "default transports");
        std::vector<std::string> argv = {"/usr/bin/env", "UCX_NET_DEVICES=lo"};
        if (tcp_only)
            argv.push_back("UCX_TLS=tcp");
        argv.insert(argv.end(), {UCX_ASIO_ECHO_SERVER, "--address", "127.0.0.1", "--port", "0",
                                 "--metrics", "127.0.0.1:0"});
        child_process server(argv);
        const std::string metrics_line = server.read_line();
        ASSERT_EQ(metrics_line.rfind("metrics on http://", 0), 0u) << metrics_line;
        const std::string url = metrics_line.substr(11, metrics_line.rfind("/metrics") - 11);
        const std::string line = server.read_line();
        ASSERT_EQ(line.rfind("listening on 127.0.0.1:", 0), 0u) << line;
        const std::string port = line.substr(23, line.find(' ', 23) - 23);

        asio::io_context io;
        ucx::context ctx;
        ucx::worker w(ctx, io);
        std::optional<ucx::error_code> connected;
        ucx::endpoint ep;
        ucx::async_connect(w, "127.0.0.1", port, [&](ucx::error_code ec, ucx::endpoint e) {
            connected = ec;
            ep = std::move(e);
        });
        ASSERT_TRUE(run_until(io, [&] { return connected.has_value(); }));
        ASSERT_FALSE(*connected) << connected->message();

        // The tool runs while this process keeps its end of the connection.
        child_process tool(
            {"/bin/sh", "-c",
             "exec " + std::string(UCX_ASIO_INFO) + " --endpoints " + url + " 2>&1"});
        EXPECT_TRUE(run_until(io, [&] { return tool.exited(); }));
        const std::string out = tool.read_all();
        std::printf("%s", out.c_str());
        EXPECT_EQ(tool.wait(), tcp_only ? 1 : 0) << out;
        EXPECT_TRUE(contains(out, "== endpoints of ")) << out;
        EXPECT_TRUE(contains(out, "worker shard0, endpoint ")) << out;
        EXPECT_TRUE(contains(out, ": server, open, 127.0.0.1:")) << out;
        const std::string local = ep.local_endpoint().address().to_string() + ":" +
                                  std::to_string(ep.local_endpoint().port());
        EXPECT_TRUE(contains(out, "-> " + local + "\n")) << out;
        EXPECT_TRUE(contains(out, tcp_only ? ": tcp/lo " : "/memory ")) << out;
        // The server's receive, waiting for this client's first message.
        EXPECT_TRUE(contains(out, "    tag_recv: 1 started, 0 completed, 0 failed, 0 bytes\n"))
            << out;
        EXPECT_EQ(contains(out, "no lane uses shared memory"), tcp_only) << out;
        ep = {};
        io.poll();
    }
    // Nothing there, or not a URL: a clear failure.
    const run_result none = run_info({}, {"--endpoints", "http://127.0.0.1:1"});
    EXPECT_EQ(none.status, 2) << none.output;
    EXPECT_TRUE(contains(none.output, "ERROR: http://127.0.0.1:1/endpoints: ")) << none.output;
    const run_result bad = run_info({}, {"--endpoints", "127.0.0.1:1"});
    EXPECT_EQ(bad.status, 2) << bad.output;
    EXPECT_TRUE(contains(bad.output, "not http://HOST:PORT")) << bad.output;
}
