// ucx::pmix_store: the key-value space that a PMIx launcher (Open MPI's
// mpirun, PRRTE's prterun, Slurm's srun --mpi=pmix) serves to the processes
// of a job, as a rendezvous store. Its code is built only when libpmix is
// found (the CMake option UCX_ASIO_WITH_PMIX); `ucx::pmix_supported()`
// (launch.hpp) says whether it was.
#pragma once

#include <ucx/store.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace ucx {

/// A store over PMIx, the interface between a launcher and the processes it
/// starts: no address, no directory and no variable of this library is
/// needed, only a launcher that serves PMIx (the variables `PMIX_RANK` and
/// `PMIX_NAMESPACE` say so).
///
/// PMIx has no shared keys: each process publishes its own (`PMIx_Put`,
/// `PMIx_Commit`) and reads another's by naming that process, after a fence
/// (`PMIx_Fence` with data collection) of every process of the job. So this
/// store works in rounds, which every process of the job joins:
///
/// - `async_set` keeps the key in this process and completes at once;
/// - `async_get` and `async_wait` of a key this process has seen complete at
///   once; of a key it has not, they start a round unless one is under way:
///   the keys set since the last round are published as one value, a fence
///   of every process of the job runs, and the values of every other
///   process are read. A key still missing after a round starts another;
/// - `async_check` says whether the keys are known here, without a round.
///
/// A round completes when every process of the job has started it, so the
/// store suits exchanges in which every process sets its keys and then gets
/// the others' (as `ucx::async_join` does). A get of a key that no process
/// sets before the round fails with `ucx::error::store_timeout` at the
/// store's timeout. One `pmix_store` per process at a time (rounds are
/// counted per store, and matched between processes by their number).
///
/// The PMIx calls of a round block, so they run on a thread of the store's
/// own; their results are handed to the store's executor. The store's
/// executor must not run handlers concurrently (an io_context run by one
/// thread, or a strand); operations are started from it.
///
/// Errors: `ucx::error::store_timeout` (the timeout passed, or PMIx's fence
/// timed out); `ucx::error::pmix_failed` (a PMIx call failed: the launcher's
/// server went away, a value too large); `boost::asio::error::operation_not_supported`
/// for `async_add`, `async_compare_set`, `async_erase` and `async_num_keys`
/// (PMIx has no shared counters); `boost::asio::error::invalid_argument` for
/// a key longer than PMIx allows (511 bytes); `asio::error::operation_aborted`
/// when the store is destroyed or the handler's cancellation slot emits (for
/// `async_get` and `async_wait`).
class pmix_store final : public store {
public:
    /// Connects to the launcher's PMIx server (`PMIx_Init`, a short blocking
    /// call) and reads the job's size. Throws `boost::system::system_error`
    /// with `ucx::error::pmix_failed` (its message holds PMIx's reason) when
    /// there is no PMIx server.
    explicit pmix_store(executor_type ex);
    /// As above; sets `ec` instead of throwing, and `why` (when given) to
    /// PMIx's reason. The store is then unusable.
    pmix_store(executor_type ex, error_code& ec, std::string* why = nullptr);
    /// Completes the pending operations with `asio::error::operation_aborted`.
    /// A round under way finishes on its thread, which disconnects from PMIx
    /// (`PMIx_Finalize`) when it ends.
    ~pmix_store() override;
    pmix_store(const pmix_store&) = delete;
    pmix_store& operator=(const pmix_store&) = delete;

    executor_type get_executor() const noexcept override { return ex_; }
    /// This process's rank in the PMIx job, and the job's size.
    std::uint32_t rank() const noexcept;
    std::uint32_t size() const noexcept;
    /// The job's PMIx namespace.
    const std::string& nspace() const noexcept;
    /// The number of rounds (fences) this store has started.
    std::uint64_t rounds() const noexcept;

    struct impl;

private:
    void do_set(std::string key, value_type value, done_handler h) override;
    void do_get(std::string key, value_handler h) override;
    void do_add(std::string key, std::int64_t delta, count_handler h) override;
    void do_compare_set(std::string key, value_type expected, value_type desired,
                        value_handler h) override;
    void do_check(std::vector<std::string> keys, bool_handler h) override;
    void do_wait(std::vector<std::string> keys, done_handler h) override;
    void do_erase(std::string key, bool_handler h) override;
    void do_num_keys(count_handler h) override;

    executor_type ex_;
    std::shared_ptr<impl> impl_;
};

} // namespace ucx
