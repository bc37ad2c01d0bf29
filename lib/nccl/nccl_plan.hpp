// Internal: the steps of making (or finalizing) an NCCL communicator over a
// group, free of I/O and of NCCL's headers.
//
// Making a communicator of a group:
//
// 1. The root (rank 0) makes NCCL's unique id (`make_id`).
// 2. Every rank takes part in a broadcast of the root's status and id over
//    the group (`exchange_id`): when the root could not make an id, its
//    status reaches every rank, which fails with it instead of waiting for an
//    id that never comes. The broadcast is a collective of the group, under
//    the group's own deadline and failure detection.
// 3. Every rank calls NCCL's non-blocking initialization (`init`). It
//    returns at once: done, failed, or in progress.
// 4. While in progress, the communicator's asynchronous state is polled
//    (`poll`) after each wait (`wait`, a timer of the poll interval). The
//    deadline is looked at on each tick: past it, the communicator is aborted
//    (`abort`) and the operation fails with `timed_out`.
// 5. `complete` ends the operation once, with success or the error. A
//    communicator that NCCL handed out and that failed, timed out or was
//    cancelled is aborted first (`abort`), so that no rank keeps a
//    half-made one.
//
// Finalizing (and waiting for any non-blocking call of NCCL) is steps 4 and
// 5 alone: `called(result)` after the call, then polls.
//
// Cancellation (`cancel`): while NCCL works (steps 3 and 4) the communicator
// is aborted at once and the operation fails with `operation_aborted`. While
// the id is made or exchanged the cancellation is remembered: the broadcast
// of the group cannot be taken back, so the plan waits for it to end (the
// buffers stay in use until then) and then completes with
// `operation_aborted` without calling NCCL.
//
// NCCL's results are plain integers here (0 success, 7 in progress, any
// other an error), so that the plan and its unit tests build without NCCL.
//
// Driving it: call an input, then `next()` until it returns `none`,
// executing each action. After `complete`, inputs are ignored.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <optional>

namespace ucx::detail {

/// NCCL's `ncclSuccess` and `ncclInProgress` (the values of `ncclResult_t`).
inline constexpr int nccl_success = 0;
inline constexpr int nccl_in_progress = 7;

/// What the I/O object does next.
struct nccl_action {
    enum kind_type : std::uint8_t {
        none,        ///< nothing until the next input
        make_id,     ///< root: call ncclGetUniqueId, then `id_made`
        exchange_id, ///< broadcast status and id from the root, then `id_exchanged`
        init,        ///< call ncclCommInitRankConfig (non-blocking), then `called`
        wait,        ///< arm the poll timer, then `tick`
        poll,        ///< call ncclCommGetAsyncError, then `polled`
        abort,       ///< ncclCommAbort the communicator (if NCCL handed one out)
        complete,    ///< complete the operation with `ec` (empty: success)
    };
    kind_type kind = none;
    /// `complete`: the result. NCCL's errors are `nccl_result` set, `ec` then
    /// empty: the I/O object maps them to its category.
    boost::system::error_code ec;
    int nccl_result = nccl_success;
};

class nccl_plan {
public:
    /// Step 1: making a communicator; the root makes the id.
    void start_make(bool root);
    /// Steps 3 to 5: the id is known already (the caller exchanged it).
    void start_init();
    /// Steps 4 and 5 only: NCCL was called (ncclCommFinalize, a collective
    /// on a non-blocking communicator) and returned `result`.
    void start_wait(int result);

    /// The root's ncclGetUniqueId returned `result`.
    void id_made(int result);
    /// The broadcast ended with `ec` (the group's error) and the root's
    /// status `root_result`.
    void id_exchanged(boost::system::error_code ec, int root_result);
    /// The non-blocking call (init, finalize) returned `result`.
    void called(int result);
    /// The call could not be made (`ec`: the CUDA device could not be set);
    /// NCCL handed nothing out.
    void call_failed(boost::system::error_code ec);
    /// The poll timer fired; `deadline_passed` says whether the deadline is
    /// behind.
    void tick(bool deadline_passed);
    /// ncclCommGetAsyncError reported `result`.
    void polled(int result);
    /// The operation's cancellation slot fired.
    void cancel();

    nccl_action next();

    bool done() const noexcept { return state_ == state::done; }

private:
    enum class state : std::uint8_t {
        idle,
        making_id,
        exchanging,
        calling,
        waiting,
        polling,
        done,
    };
    void fail(boost::system::error_code ec, int nccl_result, bool abort);

    state state_ = state::idle;
    bool cancelled_ = false;
    /// The next action, then the completion (with the abort before it, at
    /// most two are queued).
    std::optional<nccl_action> pending_;
    std::optional<nccl_action> finish_;
};

} // namespace ucx::detail
