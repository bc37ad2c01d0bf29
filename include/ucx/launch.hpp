// ucx::detect_environment: where this process stands in a job started by a
// launcher (torchrun, Slurm, Open MPI's mpirun, a PMI launcher such as
// MPICH's Hydra) or described by explicit variables.
#pragma once

#include <ucx/error.hpp>

#include <functional>
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
};

// clang-format off
/// Reads the launch environment from the process environment, trying in
/// order (the first whose rank and size variables are set wins):
///
/// | launcher | rank, size | local rank, local size | node rank | rendezvous |
/// |---|---|---|---|---|
/// | explicit | `UCXASIO_RANK`, `UCXASIO_SIZE` | `UCXASIO_LOCAL_RANK`, `UCXASIO_LOCAL_SIZE` | `UCXASIO_NODE_RANK` | `UCXASIO_RENDEZVOUS` (`host:port`) |
/// | torchrun | `RANK`, `WORLD_SIZE` | `LOCAL_RANK`, `LOCAL_WORLD_SIZE` | `GROUP_RANK` | `MASTER_ADDR`, `MASTER_PORT` |
/// | Slurm | `SLURM_PROCID`, `SLURM_NTASKS` | `SLURM_LOCALID`, the node's count from `SLURM_TASKS_PER_NODE` (`2(x3),1`) and `SLURM_NODEID` | `SLURM_NODEID` | `UCXASIO_RENDEZVOUS` |
/// | Open MPI | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE` | none | `UCXASIO_RENDEZVOUS` |
/// | PMI (Hydra) | `PMI_RANK`, `PMI_SIZE` | `MPI_LOCALRANKID`, `MPI_LOCALNRANKS` | none | `UCXASIO_RENDEZVOUS` |
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

} // namespace ucx
