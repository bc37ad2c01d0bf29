// A ucx::group whose store is torch.distributed's own TCPStore: Python
// (group_torch_store_host.py) hosts the store, as a torchrun job's agent
// does, and four processes of samples/group_allreduce join with torchrun's
// variables and UCXASIO_STORE_SERVER=external, running every collective.
// Then both sides read the keys the group wrote: Python as a user of its
// store, this process through ucx::tcp_store. Skipped when Python cannot
// import torch.distributed.
#include <ucx/tcp_store.hpp>

#include "child_process.hpp"
#include "store_support.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using ucx_test::child_process;
using ucx_test::pump;
using ucx_test::python_with_torch;

namespace {

constexpr int world_size = 4;

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

/// How long a job of `world_size` ranks may take, joining to exit.
constexpr auto job_limit = 60s;

/// Waits until `p` exits or `deadline` passes (then kills it); its exit
/// status, or -1 when it was killed at the deadline. Its output is in
/// `p.output()`.
int wait_until(child_process& p, std::chrono::steady_clock::time_point deadline) {
    while (!p.exited()) {
        p.output_contains("");
        if (std::chrono::steady_clock::now() > deadline) {
            p.kill_now();
            p.wait();
            p.output_contains("");
            return -1;
        }
        std::this_thread::sleep_for(10ms);
    }
    p.output_contains("");
    return p.wait();
}

class GroupTorchStore : public ::testing::Test {
protected:
    void SetUp() override {
        python_ = python_with_torch();
        if (python_.empty())
            GTEST_SKIP() << "no python3 that can import torch.distributed (install python3-torch)";
        host_ = std::make_unique<child_process>(std::vector<std::string>{
            python_, UCX_ASIO_GROUP_TORCH_STORE_HOST, std::to_string(world_size)});
        const std::string line = host_->read_line();
        ASSERT_EQ(line.rfind("port ", 0), 0u) << "the Python store said: " << line;
        port_ = line.substr(5);
    }

    void TearDown() override {
        if (!host_)
            return;
        // End of input stops the Python store.
        host_->close_stdin();
        EXPECT_EQ(host_->wait(), 0) << "the Python store failed";
    }

    /// Sends `command` to the Python store; its one-line answer.
    std::string ask(const std::string& command) {
        host_->write_line(command);
        return host_->read_line();
    }

    /// `world_size` processes of group_allreduce --check, with torchrun's
    /// variables pointing at the Python store; each must exit 0 having
    /// checked every collective.
    void run_job(const std::string& name) {
        std::vector<std::unique_ptr<child_process>> ranks;
        for (int r = 0; r < world_size; ++r)
            ranks.push_back(std::make_unique<child_process>(
                std::vector<std::string>{"/usr/bin/env",
                                         "-u",
                                         "UCXASIO_RANK",
                                         "-u",
                                         "UCXASIO_SIZE",
                                         "-u",
                                         "UCXASIO_STORE_DIR",
                                         "-u",
                                         "UCXASIO_RENDEZVOUS",
                                         "UCX_NET_DEVICES=lo",
                                         "UCX_TLS=tcp,sm,self",
                                         "RANK=" + std::to_string(r),
                                         "WORLD_SIZE=" + std::to_string(world_size),
                                         "LOCAL_RANK=" + std::to_string(r),
                                         "LOCAL_WORLD_SIZE=" + std::to_string(world_size),
                                         "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=" + port_,
                                         "UCXASIO_STORE_SERVER=external",
                                         UCX_ASIO_GROUP_ALLREDUCE,
                                         "--check",
                                         "--count",
                                         "100000",
                                         "--name",
                                         name}));
        const auto deadline = std::chrono::steady_clock::now() + job_limit;
        for (int r = 0; r < world_size; ++r) {
            const int status = wait_until(*ranks[r], deadline);
            const std::string& out = ranks[r]->output();
            if (status == -1) {
                ADD_FAILURE() << "rank " << r << " did not exit within " << job_limit.count()
                              << " s while the store stayed up; it printed:\n"
                              << out;
                continue;
            }
            EXPECT_EQ(status, 0) << "rank " << r << ":\n" << out;
            EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + " of " +
                                          std::to_string(world_size) +
                                          ": every collective checked"))
                << "rank " << r << ":\n"
                << out;
            EXPECT_TRUE(contains(out, "allreduce of 100000 floats ok, sum " +
                                          std::to_string(world_size * (world_size + 1) / 2)))
                << out;
            std::printf("%s", out.c_str());
        }
    }

    std::string python_;
    std::unique_ptr<child_process> host_;
    std::string port_;
};

} // namespace

TEST_F(GroupTorchStore, four_ranks_join_through_a_python_tcp_store) {
    run_job("group_allreduce");
}

TEST_F(GroupTorchStore, python_and_cpp_see_the_keys_the_group_wrote) {
    run_job("torch_keys");
    if (HasFailure())
        return;

    // Python sees every rank's address under "<name>/addr/<rank>"; keys of
    // another group name are absent.
    for (int r = 0; r < world_size; ++r)
        EXPECT_EQ(ask("check torch_keys/addr/" + std::to_string(r)), "check True") << "rank " << r;
    EXPECT_EQ(ask("check group_allreduce/addr/0"), "check False");
    const std::string num_keys = ask("num_keys");
    std::printf("python: %s\n", num_keys.c_str());

    const std::string answer = ask("get torch_keys/addr/0");
    ASSERT_EQ(answer.rfind("value ", 0), 0u) << answer;
    const std::string from_python = answer.substr(6);
    EXPECT_FALSE(from_python.empty());

    // The same value through this library's client: with the default "/"
    // prefix under the key Python uses, and without a prefix under the key
    // on the wire.
    asio::io_context ioc;
    const auto port = static_cast<std::uint16_t>(std::stoi(port_));
    ucx::tcp_store prefixed(ioc.get_executor(), "127.0.0.1", port);
    prefixed.set_timeout(30s);
    const auto via_prefix = pump(ioc, prefixed.async_get("torch_keys/addr/0", asio::use_future));
    ucx::tcp_store raw(ioc.get_executor(), "127.0.0.1", port, {.key_prefix = ""});
    raw.set_timeout(30s);
    const auto via_raw = pump(ioc, raw.async_get("/torch_keys/addr/0", asio::use_future));
    EXPECT_EQ(ucx_test::to_hex(via_prefix), from_python);
    EXPECT_EQ(ucx_test::to_hex(via_raw), from_python);
    std::printf("torch_keys/addr/0: %zu bytes, the same from Python and from ucx::tcp_store\n",
                via_prefix.size());

    // A key set here is read by Python.
    pump(ioc, prefixed.async_set("torch_keys/from_cpp", "hello", asio::use_future));
    EXPECT_EQ(ask("get torch_keys/from_cpp"), "value 68656c6c6f");
}
