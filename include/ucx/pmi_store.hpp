// ucx::pmi_store: the key-value space that a PMI-1 launcher (MPICH's
// mpiexec.hydra) serves to the processes of a job, as a rendezvous store.
#pragma once

#include <ucx/store.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace ucx {

/// A store over PMI-1, the "simple" process-management interface that
/// MPICH's `mpiexec.hydra` serves to each process it starts on the socket
/// named by `PMI_FD` (with `PMI_RANK` and `PMI_SIZE`): no address, no
/// directory and no variable of this library is needed. The protocol is
/// spoken here, so nothing is linked.
///
/// As `pmix_store`, it works in rounds, which every process of the job
/// joins (PMI-1's only wait is a barrier of every process):
///
/// - `async_set` keeps the key in this process and completes at once;
/// - `async_get` and `async_wait` of a key this process has seen complete at
///   once; of a key it has not, they start a round unless one is under way:
///   the keys set since the last round are published (as hexadecimal, in
///   chunks of the server's longest value), a barrier of every process of
///   the job runs, and the values of every other process are read. A key
///   still missing after a round starts another;
/// - `async_check` says whether the keys are known here, without a round.
///
/// A round completes when every process of the job has started it, so the
/// store suits exchanges in which every process sets its keys and then gets
/// the others' (as `ucx::async_join` does). A get of a key that no process
/// sets before the round fails with `ucx::error::store_timeout` at the
/// store's timeout. One `pmi_store` per process (the socket is the
/// process's).
///
/// The socket's calls block, so a round runs on a thread of the store's own;
/// its result is handed to the store's executor. The store's executor must
/// not run handlers concurrently (an io_context run by one thread, or a
/// strand); operations are started from it. The destructor says goodbye to
/// the server (`cmd=finalize`, at most 5 s) once no round is under way.
///
/// Errors: `ucx::error::store_timeout` (the timeout passed: a process of the
/// job did not reach the round's barrier); `ucx::error::pmi_failed` (no PMI
/// server, or it closed the connection, refused a command or answered with
/// something that is not PMI-1: the launcher went away);
/// `boost::asio::error::operation_not_supported` for `async_add`,
/// `async_compare_set`, `async_erase` and `async_num_keys` (PMI-1 has no
/// shared counters); `asio::error::operation_aborted` when the store is
/// destroyed or the handler's cancellation slot emits (for `async_get` and
/// `async_wait`).
class pmi_store final : public store {
public:
    /// Connects to the launcher's PMI-1 server named by `PMI_FD`, `PMI_RANK`
    /// and `PMI_SIZE` (init, the server's limits, the job's key-value space:
    /// a short blocking exchange, at most 30 s). Throws
    /// `boost::system::system_error` with `ucx::error::pmi_failed` (its
    /// message says why) when they are missing or the server does not answer
    /// as PMI-1, `ucx::error::store_timeout` when it does not answer.
    explicit pmi_store(executor_type ex);
    /// As above; sets `ec` instead of throwing, and `why` (when given) to the
    /// reason. The store is then unusable: its operations fail with
    /// `ucx::error::pmi_failed`.
    pmi_store(executor_type ex, error_code& ec, std::string* why = nullptr);
    /// As above, on the connected socket `fd` (not closed by the store), as
    /// process `rank` of `size`.
    pmi_store(executor_type ex, int fd, std::uint32_t rank, std::uint32_t size, error_code& ec,
              std::string* why = nullptr);
    /// Completes the pending operations with `asio::error::operation_aborted`.
    ~pmi_store() override;
    pmi_store(const pmi_store&) = delete;
    pmi_store& operator=(const pmi_store&) = delete;

    executor_type get_executor() const noexcept override { return ex_; }

    /// This process's rank in the job, and the job's size.
    std::uint32_t rank() const noexcept;
    std::uint32_t size() const noexcept;
    /// The job's key-value space, as the server names it (`kvs_...`).
    const std::string& kvsname() const noexcept;
    /// The number of rounds (barriers) this store has started.
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
