// Rounds: a store over a launcher's key-value space (PMIx, PMI-1), where each
// process publishes values of its own and reads another's only after a
// barrier of every process of the job.
//
// A store's key says nothing of the process that sets it, so a round
// publishes every key this process set since the last round as one value,
// waits for every process of the job, then reads that value of every other
// process. Rounds are numbered in each process; they are collective, so
// round n of one process meets round n of the others. A join (every rank
// sets its address, then gets every other) takes one round.
//
// The launcher's calls block, so a round runs on a thread of its own; its
// result is handed to the store's executor, where everything else runs.
#pragma once

#include "store/round_codec.hpp"

#include <ucx/store.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ucx::detail {

/// What a round brings back to the store's executor.
struct round_result {
    error_code ec;           // store_timeout, or the launcher's call failed
    std::string failed_call; // which one, when it failed
    round_keys keys;         // the other processes' keys
};

/// The launcher's half of a round. Its calls block; they run on the round's
/// thread, one round at a time, and the service is destroyed by the last of
/// the store and a round's thread.
class round_service {
public:
    virtual ~round_service() = default;
    /// Publishes `mine` as this process's value of round `n`, waits until
    /// every process of the job has published its own (for at most
    /// `timeout`, when positive: then `store_timeout`), and decodes the
    /// values of the others into `r.keys` (a process that published nothing
    /// adds nothing).
    virtual void run_round(std::uint64_t n, const std::vector<std::byte>& mine,
                           store::duration timeout, round_result& r) = 0;
};

/// The store's side: the keys known here, the waiting gets and waits, the
/// rounds. Used on the store's executor only, which must not run handlers
/// concurrently.
class round_store {
public:
    using done_handler = boost::asio::any_completion_handler<void(error_code)>;
    using value_handler = boost::asio::any_completion_handler<void(error_code, store::value_type)>;
    using bool_handler = boost::asio::any_completion_handler<void(error_code, bool)>;
    using count_handler = boost::asio::any_completion_handler<void(error_code, std::int64_t)>;

    /// Keys longer than `max_key` bytes are refused with `invalid_argument`.
    round_store(store::executor_type ex, std::unique_ptr<round_service> service,
                std::size_t max_key);
    /// A store whose launcher could not be reached: every operation fails
    /// with `unusable`.
    round_store(store::executor_type ex, error_code unusable);
    /// Completes the pending operations with `operation_aborted`; a round
    /// under way finishes on its thread.
    ~round_store();
    round_store(const round_store&) = delete;
    round_store& operator=(const round_store&) = delete;

    void set(std::string key, store::value_type value, done_handler h);
    void get(std::string key, store::duration timeout, value_handler h);
    void wait(std::vector<std::string> keys, store::duration timeout, done_handler h);
    void check(const std::vector<std::string>& keys, bool_handler h);
    /// What a launcher's key-value space cannot do (no shared counters):
    /// `operation_not_supported`.
    void add(count_handler h);
    void compare_set(value_handler h);
    void erase(bool_handler h);
    void num_keys(count_handler h);
    /// The number of rounds started.
    std::uint64_t rounds() const noexcept;

    struct state;

private:
    store::executor_type ex_;
    std::shared_ptr<state> state_; // null when unusable
    error_code unusable_;
};

} // namespace ucx::detail
