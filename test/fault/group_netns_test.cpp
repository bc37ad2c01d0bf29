// A ucx::group whose ranks stand on simulated hosts: three network
// namespaces, each with a veth pair to a Linux bridge in a fourth (made and
// removed by the test), addresses 10.77.0.1/24 to 10.77.0.3/24. Each rank of
// samples/group_allreduce runs in its own namespace over UCX's TCP transport
// on its veth device, with a file store in a shared directory. First every
// collective is checked; then, while the ranks loop on allreduce, nftables
// drops every packet of rank 2's namespace, and ranks 0 and 1 must report
// the group failed, and exit. Skipped with the reason where namespaces,
// veth pairs or bridges are not permitted (or nft is missing).
#include "child_process.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ucx_test;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr int ranks_count = 3;
/// Bounds that only keep a broken build from hanging.
constexpr auto job_limit = 60s;
constexpr auto failure_limit = 20s;

int sh(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str());
}

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// Simulated hosts: `ranks_count` network namespaces, namespace i with the
/// device gv<i>x<pid> at 10.77.0.<i+1>/24, whose veth peer is a port of the
/// bridge gbr<pid> in the namespace ucxgh<pid>. Every namespace (and with
/// them the devices and the bridge) is removed on destruction, also when
/// the construction failed halfway.
class hosts {
public:
    hosts() {
        const std::string pid = std::to_string(getpid());
        hub_ = "ucxgh" + pid;
        const std::string bridge = "gbr" + pid;
        ok_ = sh("ip netns add " + hub_) == 0 &&
              sh("ip -n " + hub_ + " link add name " + bridge + " type bridge forward_delay 0") ==
                  0 &&
              sh("ip -n " + hub_ + " link set " + bridge + " up") == 0 &&
              sh("ip -n " + hub_ + " link set lo up") == 0;
        for (int i = 0; i < ranks_count && ok_; ++i) {
            const std::string ns = "ucxg" + std::to_string(i) + "n" + pid;
            const std::string port = "gh" + std::to_string(i) + "x" + pid;
            const std::string dev = "gv" + std::to_string(i) + "x" + pid;
            namespaces_.push_back(ns);
            devices_.push_back(dev);
            ok_ = sh("ip netns add " + ns) == 0 &&
                  sh("ip -n " + hub_ + " link add name " + port + " type veth peer name " + dev +
                     " netns " + ns) == 0 &&
                  sh("ip -n " + hub_ + " link set " + port + " master " + bridge) == 0 &&
                  sh("ip -n " + hub_ + " link set " + port + " up") == 0 &&
                  sh("ip -n " + ns + " addr add " + address(i) + "/24 dev " + dev) == 0 &&
                  sh("ip -n " + ns + " link set " + dev + " up") == 0 &&
                  sh("ip -n " + ns + " link set lo up") == 0;
        }
    }
    ~hosts() {
        for (const auto& ns : namespaces_)
            sh("ip netns del " + ns);
        sh("ip netns del " + hub_);
    }
    hosts(const hosts&) = delete;
    hosts& operator=(const hosts&) = delete;

    bool ok() const noexcept { return ok_; }
    const std::string& name(int i) const { return namespaces_[static_cast<std::size_t>(i)]; }
    const std::string& device(int i) const { return devices_[static_cast<std::size_t>(i)]; }
    static std::string address(int i) { return "10.77.0." + std::to_string(i + 1); }
    /// `cmd` run in host i's namespace.
    std::string in(int i, const std::string& cmd) const {
        return "ip netns exec " + name(i) + " " + cmd;
    }

private:
    std::string hub_;
    std::vector<std::string> namespaces_, devices_;
    bool ok_ = false;
};

/// A fresh store directory, removed on destruction.
class store_dir {
public:
    explicit store_dir(const std::string& name)
        : path_(std::filesystem::temp_directory_path() /
                ("ucx-asio-group-netns-" + name + "-" + std::to_string(getpid()))) {
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~store_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string path() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

/// Waits until `p` exits or `deadline` passes (then kills it); its exit
/// status, or -1 when it was killed at the deadline. Its output is in
/// `p.output()`.
int wait_until(child_process& p, clock_type::time_point deadline) {
    while (!p.exited()) {
        p.output_contains("");
        if (clock_type::now() > deadline) {
            p.kill_now();
            p.wait();
            p.output_contains("");
            return -1;
        }
        std::this_thread::sleep_for(5ms);
    }
    p.output_contains("");
    return p.wait();
}

/// Waits until `p` printed `text`; false at the deadline.
bool wait_for(child_process& p, const std::string& text, clock_type::time_point deadline) {
    while (!p.output_contains(text)) {
        if (clock_type::now() > deadline)
            return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

class group_netns : public testing::Test {
protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "network namespaces need root";
        if (sh("command -v ip") != 0)
            GTEST_SKIP() << "ip (iproute2) is not installed";
        net_ = std::make_unique<hosts>();
        if (!net_->ok())
            GTEST_SKIP() << "network namespaces, veth pairs or bridges are not permitted here";
    }

    /// Rank `r` of group_allreduce in host r's namespace, over TCP on its
    /// veth device.
    std::unique_ptr<child_process> start_rank(int r, const std::string& dir,
                                              const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"/usr/bin/env",
                                         "ip",
                                         "netns",
                                         "exec",
                                         net_->name(r),
                                         "env",
                                         "-u",
                                         "RANK",
                                         "-u",
                                         "WORLD_SIZE",
                                         "UCX_TLS=tcp,self",
                                         "UCX_NET_DEVICES=" + net_->device(r),
                                         "UCXASIO_RANK=" + std::to_string(r),
                                         "UCXASIO_SIZE=" + std::to_string(ranks_count),
                                         "UCXASIO_STORE_DIR=" + dir,
                                         UCX_ASIO_GROUP_ALLREDUCE};
        argv.insert(argv.end(), args.begin(), args.end());
        return std::make_unique<child_process>(argv);
    }

    std::unique_ptr<hosts> net_;
};

} // namespace

TEST_F(group_netns, every_collective_between_three_hosts) {
    const store_dir dir("check");
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < ranks_count; ++r)
        ranks.push_back(
            start_rank(r, dir.path(), {"--check", "--count", "100000", "--name", "netns"}));
    const auto deadline = clock_type::now() + job_limit;
    for (int r = 0; r < ranks_count; ++r) {
        const int status = wait_until(*ranks[r], deadline);
        const std::string& out = ranks[r]->output();
        EXPECT_EQ(status, 0) << "rank " << r << " (-1: did not exit in time):\n" << out;
        EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + " of " +
                                      std::to_string(ranks_count) + ": every collective checked"))
            << "rank " << r << ":\n"
            << out;
        EXPECT_TRUE(contains(out, "allreduce of 100000 floats ok, sum 6")) << out;
        std::printf("%s (on %s)\n", out.substr(0, out.find('\n')).c_str(),
                    hosts::address(r).c_str());
    }
}

TEST_F(group_netns, a_black_holed_host_fails_the_group_on_the_others) {
    if (sh("command -v nft") != 0)
        GTEST_SKIP() << "nft (nftables) is not installed";
    const store_dir dir("loop");
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < ranks_count; ++r)
        ranks.push_back(start_rank(
            r, dir.path(),
            {"--loop", "--count", "100000", "--peer-timeout", "1000", "--name", "netns_loop"}));
    const auto started = clock_type::now() + job_limit;
    for (int r = 0; r < ranks_count; ++r)
        ASSERT_TRUE(wait_for(*ranks[r], "looping", started)) << "rank " << r << " did not start:\n"
                                                             << ranks[r]->output();
    // Let some allreduces pass first.
    std::this_thread::sleep_for(200ms);

    const auto t0 = clock_type::now();
    ASSERT_EQ(sh(net_->in(2, "nft add table inet ucxgroupfault")), 0);
    ASSERT_EQ(sh(net_->in(2, "nft add chain inet ucxgroupfault in "
                             "'{ type filter hook input priority 0 ; policy drop ; }'")),
              0);
    ASSERT_EQ(sh(net_->in(2, "nft add chain inet ucxgroupfault out "
                             "'{ type filter hook output priority 0 ; policy drop ; }'")),
              0);
    const auto deadline = t0 + failure_limit;
    for (int r : {0, 1}) {
        const int status = wait_until(*ranks[r], deadline);
        const double exited_ms = ms_since(t0);
        const std::string& out = ranks[r]->output();
        // 1: the group failed, which --loop waits for; -1: did not exit in time.
        EXPECT_EQ(status, 1) << "rank " << r << " (-1: did not exit in time):\n" << out;
        const auto at = out.find("group failed after");
        EXPECT_NE(at, std::string::npos) << "rank " << r << ":\n" << out;
        std::printf("black hole of rank 2: rank %d exited %.1f ms after it: %s", r, exited_ms,
                    at == std::string::npos ? "(no report)\n" : out.substr(at).c_str());
    }
    // Rank 2 sees its peers vanish too; reported, not asserted.
    const int status = wait_until(*ranks[2], clock_type::now() + 5s);
    const std::string& out = ranks[2]->output();
    const auto at = out.find("group failed after");
    std::printf("black hole of rank 2: rank 2 %s", status == -1 ? "still looping, killed\n"
                                                   : at == std::string::npos
                                                       ? "exited without a report\n"
                                                       : out.substr(at).c_str());
}
