// Unit tests of ucx::detect_environment over fake environments: each
// launcher's variables, the order in which launchers are tried, Slurm's task
// counts per node, and every kind of bad input named in the error.
#include <ucx/launch.hpp>

#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

struct fake_env {
    std::map<std::string, std::string> vars;
    const char* operator()(const char* name) const {
        const auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
    }
};

ucx::launch_environment detect(const fake_env& env, ucx::error_code& ec, std::string& culprit) {
    return ucx::detect_environment(std::cref(env), ec, &culprit);
}

ucx::launch_environment detect_ok(const fake_env& env) {
    ucx::error_code ec;
    std::string culprit;
    auto e = detect(env, ec, culprit);
    EXPECT_FALSE(ec) << ec.message() << ": " << culprit;
    return e;
}

/// The error and the variable named for `env`.
std::pair<ucx::error_code, std::string> detect_error(const fake_env& env) {
    ucx::error_code ec;
    std::string culprit;
    const auto e = detect(env, ec, culprit);
    EXPECT_TRUE(e.launcher.empty());
    EXPECT_EQ(e.size, 0);
    return {ec, culprit};
}

TEST(LaunchEnvironment, Torchrun) {
    const auto e = detect_ok({{{"RANK", "5"},
                               {"WORLD_SIZE", "8"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "4"},
                               {"GROUP_RANK", "1"},
                               {"MASTER_ADDR", "10.0.0.7"},
                               {"MASTER_PORT", "29500"}}});
    EXPECT_EQ(e.launcher, "torchrun");
    EXPECT_EQ(e.rank, 5);
    EXPECT_EQ(e.size, 8);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_size, 4);
    EXPECT_EQ(e.node_rank, 1);
    EXPECT_EQ(e.rendezvous_host, "10.0.0.7");
    EXPECT_EQ(e.rendezvous_port, "29500");
}

TEST(LaunchEnvironment, OpenMpiAsMpirunSetsIt) {
    // The variables mpirun 4.1 sets (NODE_RANK is the rank on the node
    // across jobs, not the node's index: not used).
    const auto e = detect_ok({{{"OMPI_COMM_WORLD_RANK", "1"},
                               {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"OMPI_COMM_WORLD_NODE_RANK", "1"}}});
    EXPECT_EQ(e.launcher, "openmpi");
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.size, 2);
    EXPECT_EQ(e.local_rank, 1);
    EXPECT_EQ(e.local_size, 2);
    EXPECT_EQ(e.node_rank, -1);
    EXPECT_TRUE(e.rendezvous_host.empty());
}

TEST(LaunchEnvironment, SlurmWithTasksPerNode) {
    // srun -n 7 over 3 nodes: "2(x3),1" is 2, 2, 2, 1 tasks.
    fake_env env{{{"SLURM_PROCID", "6"},
                  {"SLURM_NTASKS", "7"},
                  {"SLURM_LOCALID", "0"},
                  {"SLURM_NODEID", "3"},
                  {"SLURM_TASKS_PER_NODE", "2(x3),1"}}};
    auto e = detect_ok(env);
    EXPECT_EQ(e.launcher, "slurm");
    EXPECT_EQ(e.rank, 6);
    EXPECT_EQ(e.node_rank, 3);
    EXPECT_EQ(e.local_size, 1);
    EXPECT_EQ(e.local_rank, 0);
    env.vars["SLURM_NODEID"] = "1";
    env.vars["SLURM_LOCALID"] = "1";
    env.vars["SLURM_PROCID"] = "3";
    e = detect_ok(env);
    EXPECT_EQ(e.local_size, 2);
    EXPECT_EQ(e.local_rank, 1);
    // The rendezvous comes from the library's variable.
    env.vars["UCXASIO_RENDEZVOUS"] = "[fd00::1]:4000";
    e = detect_ok(env);
    EXPECT_EQ(e.rendezvous_host, "fd00::1");
    EXPECT_EQ(e.rendezvous_port, "4000");
}

TEST(LaunchEnvironment, PmiAsHydraSetsIt) {
    const auto e = detect_ok({{{"PMI_RANK", "0"},
                               {"PMI_SIZE", "3"},
                               {"MPI_LOCALRANKID", "0"},
                               {"MPI_LOCALNRANKS", "3"}}});
    EXPECT_EQ(e.launcher, "pmi");
    EXPECT_EQ(e.size, 3);
    EXPECT_EQ(e.local_size, 3);
}

TEST(LaunchEnvironment, ExplicitValuesWinOverAnyLauncher) {
    const auto e = detect_ok({{{"UCXASIO_RANK", "2"},
                               {"UCXASIO_SIZE", "4"},
                               {"UCXASIO_RENDEZVOUS", "store.example:7000"},
                               {"RANK", "0"},
                               {"WORLD_SIZE", "1"},
                               {"OMPI_COMM_WORLD_RANK", "0"},
                               {"OMPI_COMM_WORLD_SIZE", "1"}}});
    EXPECT_EQ(e.launcher, "explicit");
    EXPECT_EQ(e.rank, 2);
    EXPECT_EQ(e.size, 4);
    EXPECT_EQ(e.local_rank, -1);
    EXPECT_EQ(e.local_size, -1);
    EXPECT_EQ(e.rendezvous_host, "store.example");
    EXPECT_EQ(e.rendezvous_port, "7000");
}

TEST(LaunchEnvironment, ALauncherNeedsBothRankAndSize) {
    // torchrun's RANK alone is not enough; Open MPI's pair is next.
    const auto e =
        detect_ok({{{"RANK", "3"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}});
    EXPECT_EQ(e.launcher, "openmpi");
    EXPECT_EQ(e.rank, 0);
}

TEST(LaunchEnvironment, NothingSetNamesWhatWasLookedFor) {
    const auto [ec, culprit] = detect_error({});
    EXPECT_EQ(ec, ucx::error::no_launch_environment);
    for (const char* name : {"UCXASIO_RANK/UCXASIO_SIZE", "RANK/WORLD_SIZE",
                             "SLURM_PROCID/SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "PMI_RANK"})
        EXPECT_NE(culprit.find(name), std::string::npos) << culprit;
}

TEST(LaunchEnvironment, BadValuesAreNamed) {
    const std::pair<fake_env, std::string> cases[] = {
        {{{{"RANK", "x"}, {"WORLD_SIZE", "4"}}}, "RANK=x"},
        {{{{"RANK", "4"}, {"WORLD_SIZE", "4"}}}, "RANK=4"},
        {{{{"RANK", "-1"}, {"WORLD_SIZE", "4"}}}, "RANK=-1"},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "0"}}}, "WORLD_SIZE=0"},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "4 "}}}, "WORLD_SIZE=4 "},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}}, "WORLD_SIZE=99999999999"},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "5"}}}, "LOCAL_WORLD_SIZE=5"},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}},
         "LOCAL_RANK=2"},
        {{{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}}},
         "MASTER_PORT=http"},
        {{{{"UCXASIO_RANK", "0"}, {"UCXASIO_SIZE", "1"}, {"UCXASIO_RENDEZVOUS", "hostonly"}}},
         "UCXASIO_RENDEZVOUS=hostonly"},
        {{{{"UCXASIO_RANK", "0"}, {"UCXASIO_SIZE", "1"}, {"UCXASIO_RENDEZVOUS", "h:0"}}},
         "UCXASIO_RENDEZVOUS=h:0"},
        {{{{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "2"},
           {"SLURM_NODEID", "2"},
           {"SLURM_TASKS_PER_NODE", "1(x2)"}}},
         "SLURM_TASKS_PER_NODE=1(x2)"},
        {{{{"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "2"},
           {"SLURM_NODEID", "0"},
           {"SLURM_TASKS_PER_NODE", "2(3)"}}},
         "SLURM_TASKS_PER_NODE=2(3)"},
    };
    for (const auto& [env, named] : cases) {
        const auto [ec, culprit] = detect_error(env);
        EXPECT_EQ(ec, ucx::error::invalid_launch_environment) << named;
        EXPECT_EQ(culprit, named);
    }
}

TEST(LaunchEnvironment, TheThrowingFormNamesTheVariable) {
    // The process environment of the test has no launcher variables unless
    // it runs under one; set explicit ones for this check.
    ::setenv("UCXASIO_RANK", "7", 1);
    ::setenv("UCXASIO_SIZE", "7", 1);
    try {
        ucx::detect_environment();
        ADD_FAILURE() << "no exception";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), ucx::error::invalid_launch_environment);
        EXPECT_NE(std::string(e.what()).find("UCXASIO_RANK=7"), std::string::npos) << e.what();
    }
    ::setenv("UCXASIO_RANK", "6", 1);
    const auto e = ucx::detect_environment();
    EXPECT_EQ(e.rank, 6);
    ::unsetenv("UCXASIO_RANK");
    ::unsetenv("UCXASIO_SIZE");
}

} // namespace

// --- launchers inside launchers: the innermost wins ---

/// What an sbatch script's batch step gives every process started in it.
fake_env batch_step() {
    return {{{"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "4"},
             {"SLURM_LOCALID", "0"},
             {"SLURM_NODEID", "0"},
             {"SLURM_TASKS_PER_NODE", "4"},
             {"SLURM_JOB_NODELIST", "node1"}}};
}

/// A launcher started inside an sbatch script's batch step: the variables it
/// adds, and what detection must say.
struct nesting_case {
    const char* name;
    std::map<std::string, std::string> added;
    const char* launcher;
    int rank;
    int size;
    int local_rank;
    const char* enclosing;
};

const nesting_case nesting_cases[] = {
    {"the batch step alone is Slurm", {}, "slurm", 0, 4, 0, ""},
    {"mpirun's rank 1 in a batch script is Open MPI",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
      {"PMIX_RANK", "1"},
      {"PMIX_NAMESPACE", "1234"}},
     "openmpi",
     1,
     4,
     1,
     "slurm"},
    {"mpirun's rank 3 in a batch script is Open MPI",
     {{"OMPI_COMM_WORLD_RANK", "3"},
      {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
      {"PMIX_RANK", "3"},
      {"PMIX_NAMESPACE", "1234"}},
     "openmpi",
     3,
     4,
     3,
     "slurm"},
    {"Hydra in a batch script is PMI",
     {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "4"}},
     "pmi",
     3,
     4,
     3,
     "slurm"},
    {"torchrun under mpirun is torchrun",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"RANK", "5"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_RANK", "1"}},
     "torchrun",
     5,
     8,
     1,
     "openmpi,slurm"},
    {"explicit variables beat every launcher",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"UCXASIO_RANK", "0"},
      {"UCXASIO_SIZE", "1"}},
     "explicit",
     0,
     1,
     -1,
     "openmpi,slurm"},
};

TEST(LaunchNesting, TheInnermostLauncherWins) {
    for (const auto& c : nesting_cases) {
        SCOPED_TRACE(c.name);
        fake_env env = batch_step();
        for (const auto& [k, v] : c.added)
            env.vars[k] = v;
        const auto e = detect_ok(env);
        EXPECT_EQ(e.launcher, c.launcher);
        EXPECT_EQ(e.rank, c.rank);
        EXPECT_EQ(e.size, c.size);
        EXPECT_EQ(e.local_rank, c.local_rank);
        EXPECT_EQ(e.enclosing, c.enclosing);
    }
}

// --- the store a launch environment gives (plan_store) ---

ucx::store_plan plan(const fake_env& env, ucx::error_code& ec, std::string& culprit) {
    const auto e = detect_ok(env);
    return ucx::plan_store(e, std::cref(env), ec, &culprit);
}

ucx::store_plan plan_ok(const fake_env& env) {
    ucx::error_code ec;
    std::string culprit;
    auto p = plan(env, ec, culprit);
    EXPECT_FALSE(ec) << ec.message() << ": " << culprit;
    return p;
}

fake_env torchrun(int rank) {
    return {{{"RANK", std::to_string(rank)},
             {"WORLD_SIZE", "4"},
             {"MASTER_ADDR", "localhost"},
             {"MASTER_PORT", "29500"}}};
}

TEST(StorePlan, ADirectoryWinsOverEverything) {
    fake_env env = torchrun(0);
    env.vars["UCXASIO_STORE_DIR"] = "/shared/dir";
    env.vars["PMIX_RANK"] = "0";
    env.vars["PMIX_NAMESPACE"] = "1";
    const auto p = plan_ok(env);
    EXPECT_EQ(p.which, ucx::store_plan::kind::file);
    EXPECT_EQ(p.directory, "/shared/dir");
    EXPECT_EQ(p.reason, "UCXASIO_STORE_DIR");
}

TEST(StorePlan, TorchrunsRendezvousIsServedByRankZero) {
    for (int r = 0; r < 4; ++r) {
        const auto p = plan_ok(torchrun(r));
        EXPECT_EQ(p.which, ucx::store_plan::kind::tcp);
        EXPECT_EQ(p.host, "localhost");
        EXPECT_EQ(p.port, 29500);
        EXPECT_EQ(p.serve, r == 0) << r;
    }
}

TEST(StorePlan, TorchrunsAgentStoreHasOnlyClients) {
    for (const char* yes : {"True", "true", "1"})
        for (int r = 0; r < 4; ++r) {
            fake_env env = torchrun(r);
            env.vars["TORCHELASTIC_USE_AGENT_STORE"] = yes;
            const auto p = plan_ok(env);
            EXPECT_EQ(p.which, ucx::store_plan::kind::tcp);
            EXPECT_FALSE(p.serve) << r;
            EXPECT_NE(p.reason.find("agent"), std::string::npos) << p.reason;
        }
    fake_env env = torchrun(0);
    env.vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
    EXPECT_TRUE(plan_ok(env).serve);
}

TEST(StorePlan, AnExternalServerHasOnlyClients) {
    fake_env env = {{{"UCXASIO_RANK", "0"},
                     {"UCXASIO_SIZE", "2"},
                     {"UCXASIO_RENDEZVOUS", "[::1]:4000"},
                     {"UCXASIO_STORE_SERVER", "external"}}};
    auto p = plan_ok(env);
    EXPECT_EQ(p.which, ucx::store_plan::kind::tcp);
    EXPECT_EQ(p.host, "::1");
    EXPECT_EQ(p.port, 4000);
    EXPECT_FALSE(p.serve);
    env.vars.erase("UCXASIO_STORE_SERVER");
    EXPECT_TRUE(plan_ok(env).serve);
}

TEST(StorePlan, APmixLauncherGivesThePmixStore) {
    fake_env env = batch_step();
    env.vars["OMPI_COMM_WORLD_RANK"] = "1";
    env.vars["OMPI_COMM_WORLD_SIZE"] = "4";
    env.vars["PMIX_RANK"] = "1";
    env.vars["PMIX_NAMESPACE"] = "1234";
    ucx::error_code ec;
    std::string culprit;
    const auto p = plan(env, ec, culprit);
    if (ucx::pmix_supported()) {
        EXPECT_FALSE(ec) << culprit;
        EXPECT_EQ(p.which, ucx::store_plan::kind::pmix);
    } else {
        EXPECT_EQ(ec, ucx::error::no_launch_store);
        EXPECT_NE(culprit.find("PMIx"), std::string::npos) << culprit;
    }
}

// MPICH's mpiexec.hydra serves PMI-1 on PMI_FD; when a PMIx launcher's
// variables are there too (launchers nest), the innermost launcher's store
// wins.
TEST(StorePlan, APmiLauncherGivesThePmiStore) {
    fake_env hydra{{{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"PMI_FD", "6"}}};
    auto p = plan_ok(hydra);
    EXPECT_EQ(p.which, ucx::store_plan::kind::pmi);
    EXPECT_NE(p.reason.find("PMI_FD"), std::string::npos) << p.reason;
    EXPECT_EQ(p.run_namespace, "");

    fake_env inside_pmix = hydra;
    inside_pmix.vars["PMIX_RANK"] = "0";
    inside_pmix.vars["PMIX_NAMESPACE"] = "outer";
    EXPECT_EQ(plan_ok(inside_pmix).which, ucx::store_plan::kind::pmi);

    fake_env under_ompi = inside_pmix;
    under_ompi.vars["OMPI_COMM_WORLD_RANK"] = "1";
    under_ompi.vars["OMPI_COMM_WORLD_SIZE"] = "4";
    if (ucx::pmix_supported()) {
        EXPECT_EQ(plan_ok(under_ompi).which, ucx::store_plan::kind::pmix);
    }

    // Explicit variables still win.
    fake_env named = hydra;
    named.vars["UCXASIO_STORE_DIR"] = "/tmp/x";
    EXPECT_EQ(plan_ok(named).which, ucx::store_plan::kind::file);
}

// srun without an MPI plugin (MpiDefault=none) serves no store: the error
// says how to ask for one.
TEST(StorePlan, SrunWithoutAnMpiPluginIsToldHow) {
    ucx::error_code ec;
    std::string culprit;
    (void)plan({{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "7"}}}, ec,
               culprit);
    EXPECT_EQ(ec, ucx::error::no_launch_store);
    EXPECT_NE(culprit.find("--mpi=pmix"), std::string::npos) << culprit;
    EXPECT_NE(culprit.find("--mpi=pmi2"), std::string::npos) << culprit;
}

TEST(StorePlan, NoStoreNamesWhatWasLookedFor) {
    ucx::error_code ec;
    std::string culprit;
    (void)plan({{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}}, ec, culprit);
    EXPECT_EQ(ec, ucx::error::no_launch_store);
    for (const char* name :
         {"UCXASIO_STORE_DIR", "UCXASIO_RENDEZVOUS", "MASTER_ADDR", "PMIX_NAMESPACE", "PMI_FD"})
        EXPECT_NE(culprit.find(name), std::string::npos) << culprit;
}

TEST(StorePlan, BadStoreVariablesAreNamed) {
    fake_env env = torchrun(0);
    env.vars["UCXASIO_STORE_SERVER"] = "rank0";
    ucx::error_code ec;
    std::string culprit;
    (void)plan(env, ec, culprit);
    EXPECT_EQ(ec, ucx::error::invalid_launch_environment);
    EXPECT_EQ(culprit, "UCXASIO_STORE_SERVER=rank0");
    env.vars.erase("UCXASIO_STORE_SERVER");
    env.vars["UCXASIO_STORE_DIR"] = "";
    (void)plan(env, ec, culprit);
    EXPECT_EQ(ec, ucx::error::invalid_launch_environment);
    EXPECT_EQ(culprit, "UCXASIO_STORE_DIR=");
}

// --- the namespace of a run's keys (store_plan::run_namespace) ---

/// A run's namespace: what the innermost launcher says, or the explicit name.
/// (A store directory in each case where the launcher's store would need
/// PMIx, which a build may lack.)
struct run_namespace_case {
    const char* name;
    std::map<std::string, std::string> vars;
    const char* run_namespace;
};

const run_namespace_case run_namespace_cases[] = {
    {"torchrun's run id and restart count",
     {{"RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"MASTER_ADDR", "localhost"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RUN_ID", "job7"},
      {"TORCHELASTIC_RESTART_COUNT", "2"}},
     "torchrun/job7/2"},
    {"torchrun without a run id",
     {{"RANK", "1"},
      {"WORLD_SIZE", "2"},
      {"MASTER_ADDR", "localhost"},
      {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}},
     "torchrun/none/0"},
    {"a rendezvous without torchrun's variables has none",
     {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "29500"}},
     ""},
    {"mpirun's PMIx namespace",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"PMIX_RANK", "1"},
      {"PMIX_NAMESPACE", "prterun-host-99@1"},
      {"UCXASIO_STORE_DIR", "/shared"}},
     "pmix/prterun-host-99@1"},
    {"mpirun in a batch script: mpirun's, not the batch step's",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"PMIX_RANK", "1"},
      {"PMIX_NAMESPACE", "77"},
      {"SLURM_PROCID", "0"},
      {"SLURM_NTASKS", "1"},
      {"SLURM_JOB_ID", "12"},
      {"SLURM_STEP_ID", "4294967294"},
      {"UCXASIO_STORE_DIR", "/shared"}},
     "pmix/77"},
    {"srun's job and step",
     {{"SLURM_PROCID", "1"},
      {"SLURM_NTASKS", "2"},
      {"SLURM_JOB_ID", "12"},
      {"SLURM_STEP_ID", "3"},
      {"UCXASIO_STORE_DIR", "/shared"}},
     "slurm/12.3"},
    {"Hydra in a batch script has none of its own",
     {{"PMI_RANK", "1"},
      {"PMI_SIZE", "2"},
      {"SLURM_PROCID", "0"},
      {"SLURM_NTASKS", "1"},
      {"SLURM_JOB_ID", "12"},
      {"SLURM_STEP_ID", "4294967294"},
      {"UCXASIO_STORE_DIR", "/shared"}},
     ""},
    {"the explicit name wins",
     {{"OMPI_COMM_WORLD_RANK", "1"},
      {"OMPI_COMM_WORLD_SIZE", "2"},
      {"PMIX_RANK", "1"},
      {"PMIX_NAMESPACE", "77"},
      {"UCXASIO_RUN_ID", "nightly-3.a_b"},
      {"UCXASIO_STORE_DIR", "/shared"}},
     "run/nightly-3.a_b"},
    {"explicit variables alone have none",
     {{"UCXASIO_RANK", "0"}, {"UCXASIO_SIZE", "2"}, {"UCXASIO_STORE_DIR", "/shared"}},
     ""},
};

TEST(StorePlan, EachRunHasTheNamespaceItsLauncherGives) {
    for (const auto& c : run_namespace_cases) {
        SCOPED_TRACE(c.name);
        EXPECT_EQ(plan_ok(fake_env{c.vars}).run_namespace, c.run_namespace);
    }
}

TEST(StorePlan, ABadRunIdIsNamed) {
    for (const char* bad : {"", "a/b", "two words", "x\n"}) {
        fake_env env = {{{"UCXASIO_RANK", "0"},
                         {"UCXASIO_SIZE", "2"},
                         {"UCXASIO_STORE_DIR", "/shared"},
                         {"UCXASIO_RUN_ID", bad}}};
        ucx::error_code ec;
        std::string culprit;
        plan(env, ec, culprit);
        EXPECT_EQ(ec, ucx::error::invalid_launch_environment) << bad;
        EXPECT_EQ(culprit, std::string("UCXASIO_RUN_ID=") + bad);
    }
}
