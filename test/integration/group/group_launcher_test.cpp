// samples/group_allreduce under the real launchers, as users type the
// command: no variable of this library (every UCXASIO_* is removed from the
// environment), so the launch environment and the store come from the
// launcher alone. Open MPI's mpirun (the PMIx store), MPICH's mpiexec.hydra
// (the PMI-1 store), mpirun inside a Slurm batch step's variables (Open MPI's
// rank wins), torchrun with its agent's store (static rendezvous,
// MASTER_ADDR=localhost) and with --standalone (rank 0 serves the store at
// "localhost"), an explicit rendezvous named by this host's name; then the
// failures: a rank 0 that cannot serve its store and a launcher without a
// store exit non-zero with a message naming the rank, the address and the
// cause; last, reruns on one store (two mpiruns on one directory, explicit
// runs named by UCXASIO_RUN_ID, a torchrun restart after a failed attempt),
// each run's keys under a namespace of its own; and under a single-node Slurm
// cluster that LaunchersSlurm starts (srun with PMIx, with PMI-2, without an
// MPI plugin; mpirun and mpiexec.hydra inside sbatch). Four suites, so that
// ctest runs them side by side.
// Each test starts its launcher itself and is skipped, with the reason, where
// the machine has none. Every process keeps UCX on the loopback interface
// (UCX_NET_DEVICES=lo).
#include <ucx/configuration.hpp>
#include <ucx/launch.hpp>

#include "child_process.hpp"
#include "store_support.hpp"
#include "test_support.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace asio = boost::asio;
using ucx_test::child_process;

namespace {

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

bool have(const char* program) {
    return std::system(("command -v " + std::string(program) + " >/dev/null 2>&1").c_str()) == 0;
}

/// A port free on 127.0.0.1, for a store a launched rank serves.
std::string free_port() {
    return std::to_string(ucx_test::free_port_below_ephemeral());
}

/// `/usr/bin/env` without any variable of this library nor of a launcher
/// this process may run under, with UCX on loopback, then `extra`.
std::vector<std::string> clean_env(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {"/usr/bin/env"};
    for (const ucx::environment_variable& v : ucx::library_environment) {
        argv.push_back("-u");
        argv.push_back(std::string(v.name));
    }
    for (const char* n : {"RANK",
                          "WORLD_SIZE",
                          "MASTER_ADDR",
                          "MASTER_PORT",
                          "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE",
                          "TORCHELASTIC_USE_AGENT_STORE",
                          "PMIX_RANK",
                          "PMIX_NAMESPACE",
                          "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE",
                          "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_RESTART_COUNT",
                          "SLURM_JOB_ID",
                          "SLURM_STEP_ID",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "PMI_RANK",
                          "PMI_SIZE",
                          "PMI_FD"}) {
        argv.push_back("-u");
        argv.push_back(n);
    }
    argv.push_back("UCX_NET_DEVICES=lo");
    argv.push_back("OMPI_MCA_plm_rsh_agent=");
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
}

/// The result of one job: its exit status, its output (stdout and stderr),
/// and its wall-clock time from start to exit.
struct job {
    int status = -1;
    std::string out;
    double seconds = 0;
};

/// Runs `argv` to its end, its stderr joined to its stdout.
job run(std::vector<std::string> argv, const std::string& what) {
    argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$@\" 2>&1", "sh"});
    const auto start = std::chrono::steady_clock::now();
    child_process p(argv);
    job j;
    j.out = p.read_all();
    j.status = p.wait();
    j.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Reported for the launch guide's table, never asserted: the job's time
    // and each rank's time to join (the sample's "joined in" lines).
    std::printf("%s: exit %d after %.2f s\n", what.c_str(), j.status, j.seconds);
    for (std::size_t at = j.out.find("joined in"); at != std::string::npos;
         at = j.out.find("joined in", at + 1)) {
        const auto begin = j.out.rfind("rank ", at);
        std::printf("  %s\n", j.out.substr(begin, j.out.find('\n', at) - begin).c_str());
    }
    return j;
}

/// Every one of `n` ranks checked every collective.
void expect_checked(const job& j, int n) {
    EXPECT_EQ(j.status, 0) << j.out;
    for (int r = 0; r < n; ++r)
        EXPECT_TRUE(contains(j.out, "rank " + std::to_string(r) + " of " + std::to_string(n) +
                                        ": every collective checked"))
            << "rank " << r << ":\n"
            << j.out;
}

std::string torchrun_skip_reason() {
    if (!have("torchrun"))
        return "torchrun is not installed (python3-torch)";
    if (ucx_test::python_with_torch().empty())
        return "no python3 that can import torch.distributed (python3-torch)";
    return {};
}

/// A fresh directory for torchrun's logs (Python 3.11 needs --log_dir).
std::string log_dir(const std::string& name) {
    const auto d = std::filesystem::temp_directory_path() /
                   ("ucx-asio-torchrun-" + name + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(d);
    return d.string();
}

} // namespace

TEST(Launchers, MpirunWithNoVariableOfTheLibraryUsesPmix) {
    if (!have("mpirun"))
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    if (!ucx::pmix_supported())
        GTEST_SKIP() << "this build has no PMIx store (libpmix-dev, UCX_ASIO_WITH_PMIX)";
    const job j = run(
        clean_env({"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x",
                   "UCX_NET_DEVICES", UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "100000"}),
        "mpirun -np 4");
    expect_checked(j, 4);
    EXPECT_TRUE(contains(j.out, "pmix store")) << j.out;
}

// ucx::pmix_store itself under mpirun: two rounds, an own key without a
// round, a large value, check, and what PMIx cannot do
// (test/peers/launcher_store_peer.cpp).
TEST(Launchers, PmixStoreRoundsUnderMpirun) {
#ifndef UCX_ASIO_TEST_PMIX
    GTEST_SKIP() << "this build has no PMIx store (libpmix-dev, UCX_ASIO_WITH_PMIX)";
#else
    if (!have("mpirun"))
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    const job j = run(clean_env({"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                                 "-x", "UCX_NET_DEVICES", UCX_ASIO_LAUNCHER_STORE_PEER, "pmix"}),
                      "mpirun -np 3 launcher_store_peer pmix");
    EXPECT_EQ(j.status, 0) << j.out;
    for (int r = 0; r < 3; ++r)
        EXPECT_TRUE(contains(j.out, "rank " + std::to_string(r) + " of 3: pmix store ok, rounds 2"))
            << j.out;
#endif
}

// MPICH's mpiexec.hydra with no variable of the library: PMI-1 on PMI_FD.
TEST(Launchers, HydraWithNoVariableOfTheLibraryUsesPmi) {
    if (!have("mpiexec.hydra"))
        GTEST_SKIP() << "mpiexec.hydra (MPICH, mpich) is not installed";
    const job j = run(clean_env({"mpiexec.hydra", "-n", "4", "-genv", "UCX_NET_DEVICES", "lo",
                                 UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "100000"}),
                      "mpiexec.hydra -n 4");
    expect_checked(j, 4);
    EXPECT_TRUE(contains(j.out, "pmi store of key-value space kvs_")) << j.out;
}

// ucx::pmi_store itself under mpiexec.hydra, as the PMIx store above.
TEST(Launchers, PmiStoreRoundsUnderHydra) {
    if (!have("mpiexec.hydra"))
        GTEST_SKIP() << "mpiexec.hydra (MPICH, mpich) is not installed";
    const job j = run(clean_env({"mpiexec.hydra", "-n", "3", UCX_ASIO_LAUNCHER_STORE_PEER, "pmi"}),
                      "mpiexec.hydra -n 3 launcher_store_peer pmi");
    EXPECT_EQ(j.status, 0) << j.out;
    for (int r = 0; r < 3; ++r)
        EXPECT_TRUE(contains(j.out, "rank " + std::to_string(r) + " of 3: pmi store ok, rounds 2"))
            << j.out;
}

// An mpirun in an sbatch script: every rank also has the batch step's
// SLURM_PROCID=0 and SLURM_NTASKS; Open MPI's variables win.
TEST(Launchers, MpirunInsideABatchStepIsOpenMpi) {
    if (!have("mpirun"))
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    if (!ucx::pmix_supported())
        GTEST_SKIP() << "this build has no PMIx store (libpmix-dev, UCX_ASIO_WITH_PMIX)";
    const job j =
        run(clean_env({"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0", "SLURM_NODEID=0",
                       "SLURM_TASKS_PER_NODE=1", "mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", "4", "-x", "UCX_NET_DEVICES", UCX_ASIO_GROUP_ALLREDUCE, "--check",
                       "--count", "1000"}),
            "mpirun -np 4 inside a batch step");
    expect_checked(j, 4);
}

// torchrun's default (static) rendezvous: its agent serves a TCPStore on
// MASTER_PORT and every rank is a client of it.
TEST(LaunchersTorchrun, WithItsAgentsStore) {
    if (const auto why = torchrun_skip_reason(); !why.empty())
        GTEST_SKIP() << why;
    const std::string logs = log_dir("agent");
    const job j =
        run(clean_env({"torchrun", "--nproc_per_node", "4", "-r", "1", "-t", "1", "--log_dir", logs,
                       "--master_addr", "localhost", "--master_port", free_port(), "--no_python",
                       UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "100000"}),
            "torchrun --nproc_per_node 4 (static, MASTER_ADDR=localhost)");
    expect_checked(j, 4);
    EXPECT_TRUE(contains(j.out, "torchrun's agent store")) << j.out;
    EXPECT_FALSE(contains(j.out, "served by this process")) << j.out;
    std::filesystem::remove_all(logs);
}

// --standalone: MASTER_ADDR=localhost and no store on MASTER_PORT; rank 0
// serves it.
TEST(LaunchersTorchrun, Standalone) {
    if (const auto why = torchrun_skip_reason(); !why.empty())
        GTEST_SKIP() << why;
    const std::string logs = log_dir("standalone");
    const job j = run(clean_env({"torchrun", "--standalone", "--nproc_per_node", "4", "-r", "1",
                                 "-t", "1", "--log_dir", logs, "--no_python",
                                 UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "100000"}),
                      "torchrun --standalone --nproc_per_node 4");
    expect_checked(j, 4);
    EXPECT_TRUE(contains(j.out, "served by this process")) << j.out;
    std::filesystem::remove_all(logs);
}

// UCXASIO_RENDEZVOUS=$(hostname):port, where this host's name is a loopback
// address (Debian's /etc/hosts); skipped elsewhere, so that nothing leaves
// the loopback interface.
TEST(Launchers, AnExplicitRendezvousByHostName) {
    char name[256] = {};
    ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    ucx::error_code ec;
    const auto results = resolver.resolve(name, "1", ec);
    if (ec || results.empty())
        GTEST_SKIP() << "this host's name " << name << " does not resolve: " << ec.message();
    for (const auto& r : results)
        if (!r.endpoint().address().is_loopback())
            GTEST_SKIP() << "this host's name " << name << " is not a loopback address ("
                         << r.endpoint().address().to_string() << ")";
    const std::string rendezvous = std::string(name) + ":" + free_port();
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < 2; ++r)
        ranks.push_back(std::make_unique<child_process>(
            clean_env({"UCXASIO_RANK=" + std::to_string(r), "UCXASIO_SIZE=2",
                       "UCXASIO_RENDEZVOUS=" + rendezvous, UCX_ASIO_GROUP_ALLREDUCE, "--check",
                       "--count", "1000"})));
    for (int r = 0; r < 2; ++r) {
        const std::string out = ranks[r]->read_all();
        EXPECT_EQ(ranks[r]->wait(), 0) << "rank " << r << ":\n" << out;
        EXPECT_TRUE(contains(out, "every collective checked")) << out;
    }
}

// Rank 0 cannot listen where the rendezvous says (the port is taken): it
// exits 1 with the rank, the address and the cause, and does not abort.
TEST(Launchers, ARankZeroThatCannotServeSaysWhy) {
    asio::io_context io;
    asio::ip::tcp::acceptor taken(io, {asio::ip::make_address("127.0.0.1"), 0});
    const std::string port = std::to_string(taken.local_endpoint().port());
    const job j = run(clean_env({"UCXASIO_RANK=0", "UCXASIO_SIZE=2",
                                 "UCXASIO_RENDEZVOUS=127.0.0.1:" + port, UCX_ASIO_GROUP_ALLREDUCE}),
                      "rank 0 with its port taken");
    EXPECT_EQ(j.status, 1) << j.out;
    EXPECT_TRUE(contains(j.out, "rank 0")) << j.out;
    EXPECT_TRUE(contains(j.out, "127.0.0.1:" + port)) << j.out;
    EXPECT_TRUE(contains(j.out, "Address already in use")) << j.out;
}

// A launcher's rank and size without any store: a bad setting (exit 2),
// with what was looked for.
TEST(Launchers, NoStoreIsNamed) {
    const job j = run(
        clean_env({"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", UCX_ASIO_GROUP_ALLREDUCE}),
        "Open MPI's variables without PMIx");
    EXPECT_EQ(j.status, 2) << j.out;
    EXPECT_TRUE(contains(j.out, "no rendezvous store")) << j.out;
    EXPECT_TRUE(contains(j.out, "PMIX_NAMESPACE")) << j.out;
}

// --- Slurm: a single-node cluster of this machine's own ---

namespace {

/// Starts a single-node Slurm cluster (slurm_cluster.sh) for the suite, and
/// stops it after.
class LaunchersSlurm : public testing::Test {
public:
    static void SetUpTestSuite() {
        dir_ = (std::filesystem::temp_directory_path() /
                ("ucx-asio-slurm-" + std::to_string(getpid())))
                   .string();
        const job j =
            run({"/bin/sh", UCX_ASIO_SLURM_CLUSTER, "start", dir_}, "a single-node Slurm cluster");
        if (j.status == 77) {
            skip_ = j.out;
            return;
        }
        ASSERT_EQ(j.status, 0) << j.out;
        conf_ = j.out.substr(j.out.rfind("SLURM_CONF="));
        conf_ = conf_.substr(0, conf_.find('\n'));
    }
    static void TearDownTestSuite() {
        if (skip_.empty())
            (void)run({"/bin/sh", UCX_ASIO_SLURM_CLUSTER, "stop", dir_}, "its stop");
    }

protected:
    void SetUp() override {
        if (!skip_.empty())
            GTEST_SKIP() << "no Slurm cluster here: " << skip_;
        ASSERT_FALSE(conf_.empty()) << "the cluster did not start";
    }

    /// A command under the cluster (`SLURM_CONF`), with no variable of the
    /// library.
    static std::vector<std::string> slurm(const std::vector<std::string>& argv) {
        std::vector<std::string> all = {conf_};
        all.insert(all.end(), argv.begin(), argv.end());
        return clean_env(all);
    }

    /// `srun --mpi=<plugin> -n 4` of the sample: every collective checked,
    /// through `store`.
    static void expect_srun_joins(const std::string& plugin, const std::string& store) {
        const std::string what = "srun --mpi=" + plugin + " -n 4";
        const job j = run(slurm({"srun", "--mpi=" + plugin, "-n", "4", UCX_ASIO_GROUP_ALLREDUCE,
                                 "--check", "--count", "100000"}),
                          what);
        expect_checked(j, 4);
        EXPECT_TRUE(contains(j.out, store)) << j.out;
    }

    static inline std::string dir_, conf_, skip_;
};

} // namespace

// srun with Slurm's PMIx plugin: the PMIx store.
TEST_F(LaunchersSlurm, SrunWithPmix) {
    expect_srun_joins("pmix", "pmix store");
}

// srun with Slurm's PMI-2 plugin, which answers PMI-1 too: the PMI-1 store.
TEST_F(LaunchersSlurm, SrunWithPmi2) {
    expect_srun_joins("pmi2", "pmi store");
}

// srun without an MPI plugin serves no store: exit 2, saying how to ask for
// one.
TEST_F(LaunchersSlurm, SrunWithoutAnMpiPluginSaysHow) {
    const job j = run(slurm({"srun", "--mpi=none", "-n", "2", UCX_ASIO_GROUP_ALLREDUCE}),
                      "srun --mpi=none -n 2");
    EXPECT_NE(j.status, 0) << j.out;
    EXPECT_TRUE(contains(j.out, "--mpi=pmix")) << j.out;
}

// An sbatch script that runs Open MPI's mpirun, then MPICH's mpiexec.hydra:
// every rank of each is its launcher's, not the batch step's rank 0.
TEST_F(LaunchersSlurm, MpirunAndHydraInsideSbatch) {
    const auto script = std::filesystem::path(dir_) / "job.sh";
    const auto out = std::filesystem::path(dir_) / "job.out";
    {
        std::ofstream f(script);
        f << "#!/bin/sh\n";
        if (have("mpirun"))
            f << "mpirun --allow-run-as-root --oversubscribe -np 4 -x UCX_NET_DEVICES "
              << UCX_ASIO_GROUP_ALLREDUCE << " --check --count 100000\necho \"mpirun exit $?\"\n";
        if (have("mpiexec.hydra"))
            f << "mpiexec.hydra -n 4 " << UCX_ASIO_GROUP_ALLREDUCE
              << " --check --count 100000\necho \"hydra exit $?\"\n";
    }
    // --wait: sbatch returns when the job has ended, with its exit status.
    const job j = run(slurm({"sbatch", "--wait", "-n", "4", "-o", out.string(), script.string()}),
                      "sbatch -n 4 (mpirun, mpiexec.hydra)");
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(j.status, 0) << j.out << text;
    if (have("mpirun")) {
        EXPECT_TRUE(contains(text, "mpirun exit 0")) << text;
    }
    if (have("mpiexec.hydra")) {
        EXPECT_TRUE(contains(text, "hydra exit 0")) << text;
    }
    for (int r = 0; r < 4; ++r)
        EXPECT_TRUE(contains(text, "rank " + std::to_string(r) + " of 4: every collective checked"))
            << text;
}

// --- reruns: each run's keys live under a namespace of its own ---

namespace {

/// A fresh, empty directory for a file store.
std::filesystem::path store_dir(const std::string& name) {
    const auto d = std::filesystem::temp_directory_path() /
                   ("ucx-asio-rerun-" + name + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
}

/// Four ranks started with explicit variables and `extra`, rank 0 first and
/// each next one half a second later (so that, were the store to hold an
/// earlier run's keys here, the lower ranks would read the others' stale
/// addresses and connect to workers that are gone), run to their end.
job explicit_ranks(const std::vector<std::string>& extra, const std::string& what) {
    constexpr int n = 4;
    std::vector<std::unique_ptr<child_process>> ranks;
    for (int r = 0; r < n; ++r) {
        if (r > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::vector<std::string> vars = {"UCXASIO_RANK=" + std::to_string(r),
                                         "UCXASIO_SIZE=" + std::to_string(n)};
        vars.insert(vars.end(), extra.begin(), extra.end());
        vars.insert(vars.end(), {UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "1000"});
        std::vector<std::string> argv = clean_env(vars);
        argv.insert(argv.begin(), {"/bin/sh", "-c", "exec \"$@\" 2>&1", "sh"});
        ranks.push_back(std::make_unique<child_process>(argv));
    }
    job j;
    j.status = 0;
    for (int r = 0; r < n; ++r) {
        j.out += ranks[r]->read_all();
        if (const int st = ranks[r]->wait(); st != 0)
            j.status = st;
    }
    std::printf("%s: exit %d\n", what.c_str(), j.status);
    return j;
}

} // namespace

// mpirun twice on one store directory: each run's keys are under its PMIx
// namespace, so the second reads none of the first's.
TEST(LaunchersReruns, TwoMpirunsOnOneStoreDirectory) {
    if (!have("mpirun"))
        GTEST_SKIP() << "mpirun (Open MPI, openmpi-bin) is not installed";
    const auto dir = store_dir("mpirun");
    for (int run_number = 1; run_number <= 2; ++run_number) {
        const job j = run(clean_env({"UCXASIO_STORE_DIR=" + dir.string(), "mpirun",
                                     "--allow-run-as-root", "--oversubscribe", "-np", "3", "-x",
                                     "UCX_NET_DEVICES", "-x", "UCXASIO_STORE_DIR",
                                     UCX_ASIO_GROUP_ALLREDUCE, "--check", "--count", "1000"}),
                          "mpirun -np 3 on one store directory, run " + std::to_string(run_number));
        expect_checked(j, 3);
        EXPECT_TRUE(contains(j.out, "this run's keys under pmix/")) << j.out;
    }
    std::filesystem::remove_all(dir);
}

// Explicit variables on one store directory: UCXASIO_RUN_ID names each run.
TEST(LaunchersReruns, ExplicitRunsOnOneStoreDirectoryNamedByRunId) {
    const auto dir = store_dir("explicit");
    for (const char* id : {"first", "second"}) {
        const job j = explicit_ranks(
            {"UCXASIO_STORE_DIR=" + dir.string(), std::string("UCXASIO_RUN_ID=") + id},
            std::string("explicit ranks, UCXASIO_RUN_ID=") + id);
        expect_checked(j, 4);
        EXPECT_TRUE(contains(j.out, std::string("this run's keys under run/") + id)) << j.out;
    }
    std::filesystem::remove_all(dir);
}

// torchrun --max_restarts 1 whose first attempt fails (rank 1 exits 3 after
// rank 0 has written its keys to the agent's store): the restart's ranks
// meet under the next restart count, not in the first attempt's keys.
TEST(LaunchersReruns, TorchrunRestartAfterAFailedAttempt) {
    if (const auto why = torchrun_skip_reason(); !why.empty())
        GTEST_SKIP() << why;
    const std::string logs = log_dir("restart");
    std::filesystem::create_directories(logs);
    const std::string script = logs + "/first-attempt-fails.sh";
    {
        std::ofstream f(script);
        f << "#!/bin/sh\n"
             "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then\n"
             "  sleep 2; echo \"rank 1: failing the first attempt\"; exit 3\n"
             "fi\n"
             "exec \"$@\"\n";
    }
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    const job j = run(clean_env({"torchrun",
                                 "--nproc_per_node",
                                 "2",
                                 "--max_restarts",
                                 "1",
                                 "-r",
                                 "1",
                                 "-t",
                                 "1",
                                 "--log_dir",
                                 logs + "/torchrun",
                                 "--master_addr",
                                 "localhost",
                                 "--master_port",
                                 free_port(),
                                 "--no_python",
                                 script,
                                 UCX_ASIO_GROUP_ALLREDUCE,
                                 "--check",
                                 "--count",
                                 "1000"}),
                      "torchrun --max_restarts 1, first attempt failing");
    expect_checked(j, 2);
    EXPECT_TRUE(contains(j.out, "this run's keys under torchrun/")) << j.out;
    EXPECT_TRUE(contains(j.out, "/1/")) << j.out;
    std::filesystem::remove_all(logs);
}
