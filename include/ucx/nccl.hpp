// ucx::nccl: NCCL communicators made over a ucx::group, with NCCL's
// non-blocking initialization polled on the application's event loop.
//
// Part of the optional library target `ucx::asio_nccl`, built where `nccl.h`
// is found (CMake option UCX_ASIO_WITH_NCCL; `-DNCCL_ROOT=DIR` or the
// variable NCCL_HOME name where it is). NCCL itself is loaded when first
// used, with dlopen: the file named by the environment variable
// UCXASIO_NCCL_LIBRARY, else `libnccl.so.2` on the loader's path. A program
// that links NCCL itself gets that same copy (one `libnccl.so.2` per
// process), so communicators made here work with its own NCCL calls; and a
// program built with this target runs where NCCL comes from a Python wheel
// (`nvidia-nccl-cu*`, whose library is not on the loader's path) once
// UCXASIO_NCCL_LIBRARY names it.
#pragma once

#include <ucx/error.hpp>
#include <ucx/group.hpp>

#include <nccl.h>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>

#include <chrono>
#include <string>

namespace ucx::nccl {

/// The "ucx.nccl" category: the values of NCCL's `ncclResult_t`, with
/// NCCL's own message (`ncclGetErrorString`, once the library is loaded).
/// `default_error_condition()` maps invalid argument and usage to
/// `invalid_argument`, a system error to `io_error`, a remote error to
/// `connection_aborted`, a timeout to `timed_out`.
const boost::system::error_category& category() noexcept;

/// The `error_code` of an NCCL result (empty for `ncclSuccess`).
inline error_code make_error_code(ncclResult_t r) noexcept {
    return r == ncclSuccess ? error_code() : error_code(static_cast<int>(r), category());
}

/// Loads NCCL if it is not loaded yet (see the file comment); later calls
/// return the first one's result. Every operation below calls it.
/// Errors: `ucx::error::nccl_unavailable` (no such library, or one without
/// the functions the library calls; the log says which).
error_code load_library() noexcept;

/// The version of the loaded NCCL (`ncclGetVersion`: 23007 for 2.30.7);
/// 0 when it is not loaded.
int library_version() noexcept;

/// The path of the loaded NCCL, as dlopen resolved it ("" when not loaded).
std::string library_path();

/// Makes an NCCL unique id (`ncclGetUniqueId`), for a program that hands ids
/// out itself. Errors: `nccl_unavailable`, NCCL's (`ucx.nccl`).
error_code make_unique_id(ncclUniqueId& id) noexcept;

/// An NCCL communicator this process owns. Destroying it (or assigning over
/// it) destroys the communicator with `ncclCommDestroy`, or aborts it with
/// `ncclCommAbort` when NCCL reports an error on it; `async_close` finalizes
/// it first. Movable, not copyable.
class communicator {
public:
    communicator() noexcept = default;
    /// Takes ownership of `comm`, made by the program (or `release()`d).
    explicit communicator(ncclComm_t comm) noexcept : comm_(comm) {}
    communicator(communicator&& other) noexcept : comm_(other.release()) {}
    communicator& operator=(communicator&& other) noexcept {
        if (this != &other) {
            reset();
            comm_ = other.release();
        }
        return *this;
    }
    ~communicator() { reset(); }

    /// Whether it holds a communicator.
    explicit operator bool() const noexcept { return comm_ != nullptr; }
    /// NCCL's handle, for NCCL's own calls (collectives, point-to-point).
    ncclComm_t native_handle() const noexcept { return comm_; }
    /// Gives the handle up: the caller destroys it.
    ncclComm_t release() noexcept {
        ncclComm_t c = comm_;
        comm_ = nullptr;
        return c;
    }
    /// This process's rank in it (`ncclCommUserRank`; -1 when empty).
    int rank() const noexcept;
    /// The number of ranks (`ncclCommCount`; 0 when empty).
    int size() const noexcept;
    /// NCCL's asynchronous state of it (`ncclCommGetAsyncError`): empty when
    /// healthy, NCCL's `ncclInProgress` while a non-blocking call works, or
    /// its error. `asio::error::bad_descriptor` when empty.
    error_code status() const noexcept;
    /// Aborts it now (`ncclCommAbort`): NCCL's operations on it stop and
    /// fail; it is empty afterwards.
    void abort() noexcept;
    /// Destroys it (see the class comment); it is empty afterwards.
    void reset() noexcept;

private:
    ncclComm_t comm_ = nullptr;
};

/// How `async_make_communicator` and `async_init_rank` make a communicator.
struct communicator_options {
    /// NCCL's configuration, passed to `ncclCommInitRankConfig`. `blocking`
    /// is set to 0 by the library: the initialization is non-blocking and
    /// polled.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    /// The deadline of NCCL's initialization, counted from its call (in
    /// `async_make_communicator`: once the id has arrived): not done by then,
    /// it is aborted and the operation fails with `asio::error::timed_out`.
    /// Zero: none (NCCL's own timeouts only).
    std::chrono::milliseconds timeout{0};
    /// How often NCCL's state is polled while it works
    /// (`ncclCommGetAsyncError` on a timer of the executor).
    std::chrono::microseconds poll_interval{500};
    /// The CUDA device of the communicator; -1: the current device of the
    /// thread that runs the executor. The thread's current device is set
    /// for the call of `ncclCommInitRankConfig` and put back after it.
    int device = -1;
};

namespace detail {
using communicator_handler = boost::asio::any_completion_handler<void(error_code, communicator)>;
using done_handler = boost::asio::any_completion_handler<void(error_code)>;
void make_communicator(group& g, const communicator_options& o, communicator_handler h);
void init_rank(const boost::asio::any_io_executor& ex, int size, int rank, const ncclUniqueId& id,
               const communicator_options& o, communicator_handler h);
void wait_ready(const boost::asio::any_io_executor& ex, communicator* owner, ncclComm_t comm,
                ncclResult_t first, std::chrono::milliseconds timeout,
                std::chrono::microseconds poll_interval, bool finalize, done_handler h);
} // namespace detail

/// Makes an NCCL communicator of the ranks of `g` (rank `i` of the group is
/// rank `i` of the communicator): rank 0 makes the unique id, the group
/// broadcasts it (with rank 0's status: a root that could not make one fails
/// every rank with its error), and every rank calls NCCL's non-blocking
/// `ncclCommInitRankConfig`, whose progress is polled on the group's executor
/// until it is done, fails, passes `options.timeout` or is cancelled. Every
/// rank of the group calls it, in the same order as the group's other
/// collectives. The event loop keeps running meanwhile (NCCL initializes on
/// its own threads).
///
/// Cancellable through the handler's cancellation slot (`terminal`,
/// `partial`, `total`): NCCL's initialization is aborted, or, while the id
/// is exchanged, it is not started once the exchange ends; the handler gets
/// `operation_aborted`. The other ranks then fail within their deadline.
///
/// Completion signature: `void(error_code, communicator)`; the
/// communicator is empty on error. Errors: `ucx::error::nccl_unavailable`;
/// the group's (`group_failed`, `group_timeout`, as the broadcast's);
/// `asio::error::timed_out` (NCCL passed `options.timeout`; it was aborted);
/// `asio::error::operation_aborted`; NCCL's results (`ucx.nccl` category:
/// `ncclInvalidUsage` for two ranks on one GPU, `ncclSystemError`,
/// `ncclRemoteError`, ...), the root's included. The group stays usable.
template <class CompletionToken = boost::asio::default_completion_token_t<group::executor_type>>
auto async_make_communicator(
    group& g, const communicator_options& options,
    CompletionToken&& token = boost::asio::default_completion_token_t<group::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, communicator)>(
        [&g](auto h, const communicator_options& o) {
            ucx::detail::start_on_executor(
                g.get_executor(),
                [g = &g](const communicator_options& o, auto h) {
                    detail::make_communicator(*g, o, detail::communicator_handler(std::move(h)));
                },
                o, std::move(h));
        },
        token, options);
}

/// Makes this process's rank `rank` of an NCCL communicator of `size` ranks
/// from an id the program exchanged itself (`make_unique_id` on one rank):
/// NCCL's non-blocking `ncclCommInitRankConfig`, polled on `ex` as in
/// `async_make_communicator`. Completion signature:
/// `void(error_code, communicator)`. Errors: as `async_make_communicator`,
/// without the group's; `asio::error::invalid_argument` for a size below 1
/// or a rank outside `[0, size)`.
template <class CompletionToken = boost::asio::default_completion_token_t<group::executor_type>>
auto async_init_rank(
    const boost::asio::any_io_executor& ex, int size, int rank, const ncclUniqueId& id,
    const communicator_options& options,
    CompletionToken&& token = boost::asio::default_completion_token_t<group::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, communicator)>(
        [](auto h, const boost::asio::any_io_executor& ex, int size, int rank,
           const ncclUniqueId& id, const communicator_options& o) {
            ucx::detail::start_on_executor(
                ex,
                [](const boost::asio::any_io_executor& ex, int size, int rank,
                   const ncclUniqueId& id, const communicator_options& o, auto h) {
                    detail::init_rank(ex, size, rank, id, o,
                                      detail::communicator_handler(std::move(h)));
                },
                ex, size, rank, id, o, std::move(h));
        },
        token, ex, size, rank, id, options);
}

/// Waits until NCCL no longer reports `ncclInProgress` on `comm`: after a
/// call on a non-blocking communicator (one made here is) that returned
/// `ncclInProgress` (a collective, a group end, a split), before the next
/// call on it. Polls `ncclCommGetAsyncError` every `poll_interval` on the
/// executor `ex`. On NCCL's error, past `timeout` (zero: none) and when
/// cancelled (the handler's cancellation slot: `terminal`, `partial`,
/// `total`) the communicator is aborted, and `comm` is empty when the
/// handler runs; `comm` must stay alive until then. Completion signature:
/// `void(error_code)`; empty once NCCL is done. Errors: `nccl_unavailable`,
/// `asio::error::bad_descriptor` (an empty communicator),
/// `asio::error::timed_out`, `asio::error::operation_aborted`, NCCL's
/// (`ucx.nccl`).
template <class CompletionToken = boost::asio::default_completion_token_t<group::executor_type>>
auto async_wait_ready(
    const boost::asio::any_io_executor& ex, communicator& comm,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
    std::chrono::microseconds poll_interval = std::chrono::microseconds(500),
    CompletionToken&& token = boost::asio::default_completion_token_t<group::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [&comm](auto h, const boost::asio::any_io_executor& ex, std::chrono::milliseconds timeout,
                std::chrono::microseconds poll_interval) {
            ucx::detail::start_on_executor(
                ex,
                [comm = &comm, native = comm.native_handle()](
                    const boost::asio::any_io_executor& ex, std::chrono::milliseconds timeout,
                    std::chrono::microseconds poll_interval, auto h) {
                    detail::wait_ready(ex, comm, native, ncclInProgress, timeout, poll_interval,
                                       false, detail::done_handler(std::move(h)));
                },
                ex, timeout, poll_interval, std::move(h));
        },
        token, ex, timeout, poll_interval);
}

/// Closes `comm` gracefully: `ncclCommFinalize` (which flushes the
/// operations issued on it), polled as `async_wait_ready` does, then
/// `ncclCommDestroy`; on error, timeout or cancellation it is aborted
/// instead. `comm` is empty when the handler runs, whatever the result.
/// Completion signature: `void(error_code)`. Errors: as `async_wait_ready`.
template <class CompletionToken = boost::asio::default_completion_token_t<group::executor_type>>
auto async_close(
    const boost::asio::any_io_executor& ex, communicator& comm,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(0),
    CompletionToken&& token = boost::asio::default_completion_token_t<group::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code)>(
        [&comm](auto h, const boost::asio::any_io_executor& ex, std::chrono::milliseconds timeout) {
            ucx::detail::start_on_executor(
                ex,
                [native = comm.release()](const boost::asio::any_io_executor& ex,
                                          std::chrono::milliseconds timeout, auto h) {
                    detail::wait_ready(ex, nullptr, native, ncclSuccess, timeout,
                                       std::chrono::microseconds(500), true,
                                       detail::done_handler(std::move(h)));
                },
                ex, timeout, std::move(h));
        },
        token, ex, timeout);
}

} // namespace ucx::nccl
