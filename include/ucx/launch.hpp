// ucx::detect_environment: where this process stands in a job started by a
// launcher (torchrun, Slurm, Open MPI's mpirun, a PMI launcher such as
// MPICH's Hydra) or described by explicit variables.
#pragma once

#include <ucx/error.hpp>
#include <ucx/store.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ucx {

/// This process's place in a job.
struct launch_environment {
    /// Who said so: "explicit", "torchrun", "slurm", "openmpi" or "pmi".
    std::string launcher;
    /// This process's rank in the job, 0 to `size - 1`.
    int rank = 0;
    /// The number of processes in the job.
    int size = 0;
    /// This process's rank among the job's processes on its node, and their
    /// number; -1 where the launcher does not say.
    int local_rank = -1;
    int local_size = -1;
    /// The index of this process's node (0 to nodes - 1); -1 where the
    /// launcher does not say (Open MPI, PMI).
    int node_rank = -1;
    /// Where the job rendezvouses (a store's host and port), where the
    /// launcher says: torchrun's `MASTER_ADDR` and `MASTER_PORT`, or the
    /// explicit `UCXASIO_RENDEZVOUS` (`host:port`); empty otherwise.
    std::string rendezvous_host;
    std::string rendezvous_port;
    /// The launchers around this one whose rank and size variables are set
    /// too, comma-separated, nearest first ("slurm" for an mpirun in a Slurm
    /// batch script); empty when none.
    std::string enclosing;
};

// clang-format off
/// Reads the launch environment from the process environment, trying in
/// order (the first whose rank and size variables are set wins). When
/// launchers nest, the process sees the variables of each (an `mpirun` in a
/// Slurm batch script gives every rank the batch step's `SLURM_PROCID=0` as
/// well as its own `OMPI_COMM_WORLD_RANK`), and the innermost wins: explicit
/// variables, then torchrun, Open MPI, PMI, and Slurm last (Slurm starts only
/// the outermost step). The others are named in `enclosing`.
///
/// | launcher | rank, size | local rank, local size | node rank | rendezvous |
/// |---|---|---|---|---|
/// | explicit | `UCXASIO_RANK`, `UCXASIO_SIZE` | `UCXASIO_LOCAL_RANK`, `UCXASIO_LOCAL_SIZE` | `UCXASIO_NODE_RANK` | `UCXASIO_RENDEZVOUS` (`host:port`) |
/// | torchrun | `RANK`, `WORLD_SIZE` | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | `GROUP_RANK` | `MASTER_ADDR`, `MASTER_PORT` |
/// | Open MPI | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE` | none | `UCXASIO_RENDEZVOUS` |
/// | PMI (Hydra) | `PMI_RANK`, `PMI_SIZE` | `MPI_LOCALRANKID`, `MPI_LOCALNRANKS` | none | `UCXASIO_RENDEZVOUS` |
/// | Slurm | `SLURM_PROCID`, `SLURM_NTASKS` | `SLURM_LOCALID`, the node's count from `SLURM_TASKS_PER_NODE` (`2(x3),1`) and `SLURM_NODEID` | `SLURM_NODEID` | `UCXASIO_RENDEZVOUS` |
// clang-format on
///
/// `UCXASIO_RENDEZVOUS`, when set, is the rendezvous for every launcher.
///
/// Errors: `error::no_launch_environment` when no launcher's rank and size
/// are set (`culprit`, when given, then lists what was looked for);
/// `error::invalid_launch_environment` for a variable that is not a number in
/// range, a rank not below the size, a local rank not below the local size, or
/// a rendezvous without a port (`culprit` then holds that variable as
/// `NAME=value`). The returned value is then empty.
launch_environment detect_environment(error_code& ec, std::string* culprit = nullptr);

/// As above; throws `boost::system::system_error` whose message names the
/// variable (or what was looked for).
launch_environment detect_environment();

/// As `detect_environment(ec, culprit)`, reading variables through `getenv`
/// (for tests, or an environment other than the process's).
launch_environment detect_environment(const std::function<const char*(const char*)>& getenv,
                                      error_code& ec, std::string* culprit = nullptr);

/// Whether the library was built with `ucx::pmix_store` (libpmix found).
bool pmix_supported() noexcept;

/// Which rendezvous store the processes of a job meet in, as `plan_store`
/// chooses it from the launch environment.
struct store_plan {
    enum class kind {
        /// `ucx::file_store` on `directory`.
        file,
        /// `ucx::tcp_store` at `host:port`; served by this process
        /// (`ucx::tcp_store_server`) when `serve`.
        tcp,
        /// `ucx::pmix_store`: the launcher's PMIx key-value space.
        pmix,
        /// `ucx::pmi_store`: the launcher's PMI-1 key-value space (MPICH's
        /// `mpiexec.hydra`).
        pmi,
    };
    kind which = kind::file;
    std::string directory;
    std::string host;
    std::uint16_t port = 0;
    bool serve = false;
    /// The variables that chose it, for messages ("UCXASIO_STORE_DIR",
    /// "MASTER_ADDR:MASTER_PORT, torchrun's agent store", ...).
    std::string reason;
    /// The namespace of this run's keys: `async_open_store`'s store is a
    /// `prefix_store` view under it, so a second run on the same store
    /// directory, or an elastic restart on torchrun's agent store, never
    /// reads an earlier run's keys. The first that applies:
    /// `UCXASIO_RUN_ID=NAME` (`run/NAME`); under torchrun,
    /// `TORCHELASTIC_RUN_ID` and `TORCHELASTIC_RESTART_COUNT`
    /// (`torchrun/ID/COUNT`); the innermost launcher's job: PMIx's
    /// `PMIX_NAMESPACE` (Open MPI's `mpirun`, `srun --mpi=pmix`:
    /// `pmix/NAMESPACE`), Slurm's `SLURM_JOB_ID` and `SLURM_STEP_ID`
    /// (`slurm/JOB.STEP`). Empty when none applies (explicit variables or
    /// MPICH's Hydra without `UCXASIO_RUN_ID`): the keys are then the
    /// store's own, and a store directory must not hold an earlier run's
    /// (a `pmi_store`'s key-value space is the run's own).
    std::string run_namespace;
};

// clang-format off
/// Chooses the store of a job from `env` (`detect_environment`) and the
/// variables, the first that applies:
///
/// | variables | store | served by |
/// |---|---|---|
/// | `UCXASIO_STORE_DIR=DIR` | `file_store` on DIR (a directory every process sees) | the file system |
/// | a rendezvous: `UCXASIO_RENDEZVOUS=host:port`, or torchrun's `MASTER_ADDR`, `MASTER_PORT` | `tcp_store` at host:port (a name or an address) | rank 0 (`tcp_store_server`), except with `UCXASIO_STORE_SERVER=external` or, under torchrun, `TORCHELASTIC_USE_AGENT_STORE=True` (torchrun's agent serves it; every rank, rank 0 too, is a client) |
/// | a PMIx launcher (`PMIX_NAMESPACE` and `PMIX_RANK`: Open MPI's `mpirun`, `srun --mpi=pmix`, `prterun`) | `pmix_store` | the launcher |
/// | a PMI-1 launcher (`PMI_FD`, `PMI_RANK` and `PMI_SIZE`: MPICH's `mpiexec.hydra`) | `pmi_store` | the launcher |
// clang-format on
///
/// When both a PMIx and a PMI-1 launcher's variables are set (launchers
/// nest), the one of the launcher that `env` names wins; else PMIx.
///
/// It also names the run (`store_plan::run_namespace`).
///
/// Errors: `error::no_launch_store` when none applies, or PMIx would but this
/// build has no PMIx (`culprit`, when given, says what was looked for);
/// `error::invalid_launch_environment` for `UCXASIO_STORE_SERVER` other than
/// `external`, an empty `UCXASIO_STORE_DIR`, or a `UCXASIO_RUN_ID` that is
/// empty or holds other than letters, digits, `-`, `_` and `.` (`culprit`:
/// `NAME=value`).
store_plan plan_store(const launch_environment& env,
                      const std::function<const char*(const char*)>& getenv, error_code& ec,
                      std::string* culprit = nullptr);

/// As above, with the process's environment.
store_plan plan_store(const launch_environment& env, error_code& ec,
                      std::string* culprit = nullptr);

/// Options of `async_open_store`.
struct open_store_options {
    /// The bound on resolving the rendezvous host's name.
    std::chrono::milliseconds resolve_timeout{30000};
    /// The store's timeout (`store::set_timeout`).
    std::chrono::milliseconds store_timeout{300000};
};

/// A store opened by `async_open_store`, with the server this process runs
/// for it, if any. Move-only; destroying it closes both.
class launch_store {
public:
    launch_store();
    launch_store(launch_store&&) noexcept;
    launch_store& operator=(launch_store&&) noexcept;
    ~launch_store();

    /// Whether a store is open.
    explicit operator bool() const noexcept;
    /// The store: a `prefix_store` view under the plan's `run_namespace`
    /// when it has one, else the store itself. Precondition: one is open.
    store& get() const noexcept;
    /// Whether this process serves the store (a `tcp_store_server`).
    bool serving() const noexcept;
    /// What was opened ("tcp store at localhost:29500 (127.0.0.1:29500),
    /// served by this process"), or, after a failure, what failed, with the
    /// rank, the address and the cause ("rank 0: cannot serve the store at
    /// localhost:29500 (127.0.0.1:29500): Address already in use").
    const std::string& description() const noexcept;
    /// Closes the store's connections and the server (the store's
    /// operations complete with `operation_aborted`); the store stays usable
    /// (a `tcp_store` connects again).
    void close();

    struct impl;

private:
    friend struct launch_store_access;
    std::unique_ptr<impl> impl_;
};

namespace detail {
void open_store(boost::asio::any_io_executor ex, const launch_environment& env,
                const store_plan& plan, const open_store_options& options,
                boost::asio::any_completion_handler<void(error_code, launch_store)> h);
} // namespace detail

/// Opens the store of `plan` for the process `env` describes: for a TCP
/// store, resolves the host's name (asynchronously, at most
/// `options.resolve_timeout`) and, when this process serves it, listens on
/// the first address the name resolves to that it can bind; for a PMIx
/// store, connects to the launcher (`PMIx_Init`); for a file store, makes the
/// directory. Completion signature: `void(error_code, launch_store)`; the
/// handler runs on its associated executor (by default `ex`'s), never inside
/// this call.
///
/// Errors (the `launch_store` then holds only `description()`, which names
/// the rank, the address and the cause): the resolver's
/// (`asio::error::host_not_found`, ...) or `asio::error::timed_out` for a
/// name not resolved in time; the bind or listen error of the server
/// (`address_in_use`, `address_not_available`, ...); `error::pmix_failed`;
/// the file system's error for the directory.
template <class CompletionToken>
auto async_open_store(boost::asio::any_io_executor ex, const launch_environment& env,
                      const store_plan& plan, const open_store_options& options,
                      CompletionToken&& token) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, launch_store)>(
        [](auto handler, boost::asio::any_io_executor ex, const launch_environment& env,
           const store_plan& plan, const open_store_options& options) {
            detail::open_store(std::move(ex), env, plan, options, std::move(handler));
        },
        token, std::move(ex), env, plan, options);
}

/// As above, with the default options.
template <class CompletionToken>
auto async_open_store(boost::asio::any_io_executor ex, const launch_environment& env,
                      const store_plan& plan, CompletionToken&& token) {
    return async_open_store(std::move(ex), env, plan, open_store_options{},
                            std::forward<CompletionToken>(token));
}

} // namespace ucx
