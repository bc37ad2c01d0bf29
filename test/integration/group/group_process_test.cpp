// ucx::group between processes (samples/group_allreduce): 2, 4 and 8 ranks
// with explicit variables and a file store, 4 ranks under mpirun, 4 ranks
// with torchrun's variables and rank 0's TCP store; every collective checked
// in each rank. Then a rank SIGKILLed, and one SIGSTOPped, while the others
// loop on allreduce: the others report the group failed, and exit. A rank
// that skips a barrier, diagnosed from the files the ranks write when their
// deadline fires, and from the running ranks' exporters while they wait.
#include "child_process.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <ucx/flight_recorder.hpp>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

using namespace ucx_test;

namespace {

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

/// A fresh store directory for one test.
std::string store_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("ucx-asio-group-" + name + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

/// Rank `rank` of `size` as a process, with `extra` variables and options.
std::unique_ptr<child_process> start_rank(int rank, int size, const std::vector<std::string>& env,
                                          const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/env", "UCX_NET_DEVICES=lo",
                                     "UCXASIO_RANK=" + std::to_string(rank),
                                     "UCXASIO_SIZE=" + std::to_string(size)};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(UCX_ASIO_GROUP_ALLREDUCE);
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<child_process>(argv);
}

void run_checked(int size, const std::string& transports, bool lazy = false) {
    const std::string dir = store_dir("check" + std::to_string(size) + (lazy ? "lazy" : ""));
    std::vector<std::string> args = {"--check", "--count", "100000"};
    if (lazy)
        args.push_back("--lazy");
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < size; ++r)
        ranks.push_back(
            start_rank(r, size, {"UCXASIO_STORE_DIR=" + dir, "UCX_TLS=" + transports}, args));
    for (int r = 0; r < size; ++r) {
        const std::string out = ranks[r]->read_all();
        EXPECT_EQ(ranks[r]->wait(), 0) << "rank " << r << ":\n" << out;
        EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + " of " + std::to_string(size) +
                                      ": every collective checked"))
            << out;
        EXPECT_TRUE(contains(out, "allreduce of 100000 floats ok, sum " +
                                      std::to_string(size * (size + 1) / 2)))
            << out;
    }
    std::filesystem::remove_all(dir);
}

} // namespace

TEST(group_processes, two_ranks_over_tcp) {
    run_checked(2, "tcp,self");
}

TEST(group_processes, four_ranks_over_shared_memory) {
    run_checked(4, "sm,self");
}

TEST(group_processes, eight_ranks) {
    run_checked(8, "tcp,sm,self");
}

// Every collective with connections made on first use.
TEST(group_processes, eight_ranks_with_connections_on_first_use) {
    run_checked(8, "tcp,sm,self", true);
}

TEST(group_processes, four_ranks_under_mpirun) {
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    const std::string dir = store_dir("mpirun");
    child_process mpirun({"/usr/bin/env", "OMPI_MCA_plm_rsh_agent=", "UCX_NET_DEVICES=lo",
                          "UCXASIO_STORE_DIR=" + dir, "mpirun", "--allow-run-as-root",
                          "--oversubscribe", "-np", "4", "-x", "UCX_NET_DEVICES", "-x",
                          "UCXASIO_STORE_DIR", UCX_ASIO_GROUP_ALLREDUCE, "--check"});
    const std::string out = mpirun.read_all();
    EXPECT_EQ(mpirun.wait(), 0) << out;
    for (int r = 0; r < 4; ++r)
        EXPECT_TRUE(contains(out, "rank " + std::to_string(r) + " of 4: every collective checked"))
            << out;
    std::filesystem::remove_all(dir);
}

TEST(group_processes, four_ranks_with_torchrun_variables_and_a_tcp_store) {
    // Rank 0 serves the store on MASTER_PORT: a free port below the kernel's
    // range of ports for outgoing connections, which another test's socket
    // could take between this probe and rank 0's bind.
    const std::string port = std::to_string(free_port_below_ephemeral());
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(std::make_unique<child_process>(std::vector<std::string>{
            "/usr/bin/env", "-u", "UCXASIO_RANK", "UCX_NET_DEVICES=lo", "RANK=" + std::to_string(r),
            "WORLD_SIZE=4", "LOCAL_RANK=" + std::to_string(r), "LOCAL_WORLD_SIZE=4",
            "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, UCX_ASIO_GROUP_ALLREDUCE, "--check"}));
    for (int r = 0; r < 4; ++r) {
        const std::string out = ranks[r]->read_all();
        EXPECT_EQ(ranks[r]->wait(), 0) << "rank " << r << ":\n" << out;
        EXPECT_TRUE(contains(out, "every collective checked")) << out;
    }
}

namespace {

/// Four ranks looping on allreduce; `fault` is applied to rank 2. Every
/// other rank must report the group failed, and exit.
void fault_during_allreduce(int signal) {
    const std::string dir = store_dir("fault" + std::to_string(signal));
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(start_rank(r, 4, {"UCXASIO_STORE_DIR=" + dir, "UCX_TLS=tcp,sm,self"},
                                   {"--loop", "--count", "100000", "--peer-timeout", "1000"}));
    for (int r = 0; r < 4; ++r) {
        std::string line;
        do
            line = ranks[r]->read_line();
        while (!line.empty() && !contains(line, "looping"));
        ASSERT_TRUE(contains(line, "looping")) << "rank " << r << " did not start";
    }
    const auto start = std::chrono::steady_clock::now();
    kill(ranks[2]->pid(), signal);
    for (int r : {0, 1, 3}) {
        const std::string out = ranks[r]->read_all(); // ends when the rank exits
        EXPECT_EQ(ranks[r]->wait(), 1) << out;        // 1: the group failed, as --loop waits for
        EXPECT_TRUE(contains(out, "group failed after")) << "rank " << r << ":\n" << out;
        EXPECT_TRUE(contains(out, "group failed: a rank died")) << out;
        const auto at = out.find("group failed after");
        std::printf("rank %d, %s of rank 2: %s", r, signal == SIGKILL ? "SIGKILL" : "SIGSTOP",
                    at == std::string::npos ? "(no report)\n" : out.substr(at).c_str());
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    std::printf("every other rank exited %lld ms after the signal\n",
                static_cast<long long>(took.count()));
    if (signal == SIGSTOP)
        kill(ranks[2]->pid(), SIGKILL);
    ranks[2]->wait();
    std::filesystem::remove_all(dir);
}

} // namespace

TEST(group_processes, a_rank_killed_during_allreduce_fails_the_group_everywhere) {
    fault_during_allreduce(SIGKILL);
}

TEST(group_processes, a_rank_stopped_during_allreduce_fails_the_group_everywhere) {
    fault_during_allreduce(SIGSTOP);
}

// Four ranks allreduce; then every rank but 3 calls a barrier, which rank 3
// never calls. The others' deadline fires, every rank writes its flight
// record, and ucx-asio-flight names rank 3.
TEST(group_processes, the_flight_records_name_a_rank_that_skipped_a_barrier) {
    const std::string dir = store_dir("flight");
    const std::string records = dir + "-records/";
    std::filesystem::remove_all(records);
    std::filesystem::create_directories(records);
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(start_rank(r, 4, {"UCXASIO_STORE_DIR=" + dir, "UCX_TLS=tcp,sm,self"},
                                   {"--count", "1000", "--timeout", "2000", "--flight-recorder",
                                    records + "rank", "--skip-barrier", "3"}));
    for (int r = 0; r < 4; ++r) {
        const std::string out = ranks[r]->read_all();
        EXPECT_EQ(ranks[r]->wait(), 1) << "rank " << r << ":\n" << out;
        EXPECT_TRUE(contains(out, "group failed: ")) << "rank " << r << ":\n" << out;
        EXPECT_FALSE(contains(out, "no failure")) << "rank " << r << ":\n" << out;
    }
    std::vector<std::string> files;
    std::vector<ucx::flight_record> parsed;
    for (int r = 0; r < 4; ++r) {
        const std::string file = records + "rank" + std::to_string(r) + ".json";
        std::ifstream f(file);
        ASSERT_TRUE(f.good()) << file << " was not written";
        std::stringstream text;
        text << f.rdbuf();
        ucx::flight_record rec;
        ASSERT_FALSE(ucx::from_json(text.str(), rec)) << file << ":\n" << text.str();
        EXPECT_EQ(rec.rank, r);
        EXPECT_EQ(rec.size, 4);
        EXPECT_EQ(rec.group, "group_allreduce");
        EXPECT_FALSE(rec.error.empty());
        // The allreduce, completed everywhere; the barrier only on 0 to 2,
        // not completed there.
        EXPECT_EQ(rec.collectives, r == 3 ? 1u : 2u) << text.str();
        ASSERT_GE(rec.events.size(), 1u) << text.str();
        EXPECT_EQ(rec.events[0].collective, ucx::collective_kind::allreduce);
        EXPECT_EQ(rec.events[0].state, ucx::flight_state::completed);
        EXPECT_EQ(rec.events[0].in_bytes, 4000u);
        if (r != 3) {
            ASSERT_EQ(rec.events.size(), 2u) << text.str();
            EXPECT_EQ(rec.events[1].collective, ucx::collective_kind::barrier);
            EXPECT_EQ(rec.events[1].seq, 1u);
            EXPECT_EQ(rec.events[1].state, ucx::flight_state::running) << text.str();
        }
        if (r == 0)
            std::printf("rank 0's flight record:\n%s", text.str().c_str());
        files.push_back(file);
        parsed.push_back(std::move(rec));
    }
    // A rank a collective waits for is named: some rank waits for rank 3.
    bool waits_for_3 = false;
    for (const auto& rec : parsed)
        for (const auto& e : rec.events)
            waits_for_3 = waits_for_3 || std::count(e.waiting_for.begin(), e.waiting_for.end(), 3);
    EXPECT_TRUE(waits_for_3);

    std::vector<std::string> argv = {UCX_ASIO_FLIGHT};
    argv.insert(argv.end(), files.begin(), files.end());
    child_process tool(argv);
    const std::string report = tool.read_all();
    EXPECT_EQ(tool.wait(), 0) << report;
    std::printf("ucx-asio-flight:\n%s", report.c_str());
    EXPECT_TRUE(contains(report, "rank 3 never called collective 1 (barrier), which ranks 0, 1, 2 "
                                 "called"))
        << report;
    EXPECT_TRUE(contains(report, "culprit: rank 3\n")) << report;
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(records);
}

// The same skipped barrier with no deadline, diagnosed while the job hangs:
// each rank serves its flight record (--metrics), and ucx-asio-flight, given
// the four exporters' addresses, names rank 3 from the records it fetches.
TEST(group_processes, a_hung_job_is_diagnosed_from_its_running_ranks) {
    const std::string dir = store_dir("flight-live");
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < 4; ++r)
        ranks.push_back(
            start_rank(r, 4, {"UCXASIO_STORE_DIR=" + dir, "UCX_TLS=tcp,sm,self"},
                       {"--count", "1000", "--metrics", "127.0.0.1:0", "--skip-barrier", "3"}));
    std::vector<std::string> urls;
    for (int r = 0; r < 4; ++r) {
        std::string line;
        for (std::string l; (l = ranks[r]->read_line()).size();)
            if (contains(l, "metrics on http://")) {
                line = l;
                break;
            }
        const auto at = line.find("http://");
        ASSERT_NE(at, std::string::npos) << "rank " << r << " printed no metrics address";
        // http://127.0.0.1:PORT/metrics: the exporter's address, the tool
        // finds the one group it serves.
        urls.push_back(line.substr(at, line.rfind("/metrics") - at));
    }
    // The ranks join, allreduce and reach the barrier at their own pace: ask
    // until the records show the barrier on ranks 0 to 2 (no deadline here;
    // at most about two minutes on a loaded machine).
    // (A record taken while a message of the allreduce is still on its way
    // shows a rank in it: the tool names a culprit then too, so the loop
    // waits for the barrier on every running rank.)
    std::string report;
    int status = -1;
    const auto settled = [&] {
        return status == 0 && contains(report, "which ranks 0, 1, 2 called");
    };
    for (int attempt = 0; attempt < 240 && !settled(); ++attempt) {
        if (attempt)
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::vector<std::string> argv = {UCX_ASIO_FLIGHT, "--timeout", "30000"};
        argv.insert(argv.end(), urls.begin(), urls.end());
        child_process tool(argv);
        report = tool.read_all();
        status = tool.wait();
    }
    std::printf("ucx-asio-flight %s %s %s %s:\n%s", urls[0].c_str(), urls[1].c_str(),
                urls[2].c_str(), urls[3].c_str(), report.c_str());
    EXPECT_EQ(status, 0) << report;
    EXPECT_TRUE(contains(report, "rank 0 of 4 (group group_allreduce, ")) << report;
    EXPECT_TRUE(contains(report, "): request, 2 collectives, ")) << report;
    EXPECT_TRUE(contains(report, "rank 3 never called collective 1 (barrier), which ranks 0, 1, 2 "
                                 "called"))
        << report;
    EXPECT_TRUE(contains(report, "culprit: rank 3\n")) << report;

    // What the tool cannot use is named, with why, and exits 2: a group the
    // exporter does not serve; an address that accepts and never answers,
    // within --timeout.
    const auto tool_fails = [](const std::vector<std::string>& args, const std::string& why) {
        // Its standard error with its output.
        std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
        argv.insert(argv.end(), args.begin(), args.end());
        child_process tool(argv);
        const std::string out = tool.read_all();
        EXPECT_EQ(tool.wait(), 2) << out;
        EXPECT_TRUE(contains(out, why)) << out;
    };
    tool_fails({UCX_ASIO_FLIGHT, urls[0] + "/flight/nobody"}, "/flight/nobody: HTTP 404");
    asio::io_context io;
    asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
    const std::string silent_url =
        "http://127.0.0.1:" + std::to_string(silent.local_endpoint().port());
    tool_fails({UCX_ASIO_FLIGHT, "--timeout", "300", silent_url},
               silent_url + ": no answer within 300 ms");
    for (auto& rank : ranks) {
        rank->kill_now();
        rank->wait();
    }
    std::filesystem::remove_all(dir);
}
