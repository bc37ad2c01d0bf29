// ucx::group: the processes of a job as ranks 0 to size - 1, joined through a
// rendezvous store, with messaging by rank and collectives.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/hooked_handler.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/error.hpp>
#include <ucx/flight_recorder.hpp>
#include <ucx/metrics.hpp>
#include <ucx/reduction.hpp>
#include <ucx/store.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace ucx {

/// How a process joins a group.
struct group_options {
    /// This process's rank, 0 to `size - 1` (from `detect_environment()`).
    int rank = -1;
    /// The number of processes in the group.
    int size = 0;
    /// The group's keys in the store live under `name + "/"`: two groups
    /// (or two runs of a job that share a store) need two names.
    std::string name = "ucx-group";
    /// The deadline of the join and of every collective, counted from when
    /// the collective starts running: one not completed by then fails the
    /// group with `ucx::error::group_timeout`. Zero: none (a peer that stops
    /// answering is still reported within the worker's `peer_timeout`).
    /// Messages by rank have no deadline of their own: bound them through
    /// their cancellation slot (a timer with `||`, `cancel_after`).
    std::chrono::milliseconds timeout{0};
    /// Connections on first use instead of right after the join: the lower
    /// rank of a pair connects when it first sends to or receives from the
    /// higher (a receive from any rank connects to every higher rank), and
    /// the higher rank's operations towards it wait until it does. A rank
    /// then holds connections only to the ranks it talks to (a ring
    /// allreduce: 2; recursive doubling: log2 of the size), which matters for
    /// large groups. The price: a rank notices the failure of a rank it has
    /// no connection to only through the abort notices of the others or the
    /// collectives' deadline (`timeout`), and a send to a lower rank waits
    /// until that rank receives (or sends) from this one.
    bool lazy_connections = false;
    /// The flight recorder keeps this rank's last `flight_recorder_entries`
    /// collectives and messages by rank of each group (`group::flight_record()`;
    /// about 100 bytes each; rounded up to a power of two). 0: none
    /// recorded.
    std::size_t flight_recorder_entries = 256;
    /// Where the group writes its flight record when it fails (a collective
    /// past its deadline, a failed or mismatched collective, a peer's
    /// failure or abort notice, `abort()`; not a close): the file
    /// `flight_recorder_dump + std::to_string(rank) + ".json"` (a split
    /// group's: `...-split<N>.json`, N its number on this rank), written
    /// whole or not at all. A directory must end with '/'. Empty: none
    /// written (the failure is still logged). `ucx-asio-flight` reads the
    /// files of every rank and names the rank that diverged or never
    /// arrived.
    std::string flight_recorder_dump;
    /// Compares every collective's arguments across the ranks before it
    /// runs (kind, root, element type and operation, and size: a
    /// broadcast's, an allgatherv's block sizes, any other's input): ranks
    /// that disagree fail the collective on every rank at once with
    /// `ucx::error::collective_mismatch` (the group fails with it), and the
    /// log and the flight record name the ranks and their calls, instead of
    /// a hang or a wrong result. Costs an allgather of 32 bytes per rank
    /// before each collective: a debugging aid. Every rank must set it
    /// alike. A collective this rank refuses for its arguments
    /// (`invalid_argument`, `invalid_rank`) fails here with that error and
    /// still takes part in the check, marked refused: the other ranks fail
    /// with `collective_mismatch` instead of waiting for this one, unless
    /// every rank refused the same call (then the group goes on).
    bool verify_collectives = false;
};

class group;

namespace detail {
class group_impl;
class worker_impl;

struct collective_args {
    collective_kind kind = collective_kind::barrier;
    int root = 0;
    const void* in = nullptr;
    std::size_t in_bytes = 0;
    void* out = nullptr;
    std::size_t out_bytes = 0;
    datatype type = datatype::uint8;
    reduce_op op = reduce_op::sum;
    /// allgatherv: the bytes of each rank's block.
    std::vector<std::size_t> blocks;
    /// The handler has no executor of its own (it runs on the group's): a
    /// completion that runs on the group's executor calls it directly.
    bool direct_handler = false;
};

/// The hook of the deprecated `group::async_recv_any`'s handler: the
/// library's receive completes with the order of `async_recv_from_any`
/// (error, bytes, sender), that handler takes (error, sender, bytes).
struct sender_first {
    template <class Handler>
    void operator()(Handler&& h, error_code ec, std::size_t bytes, int from) {
        std::move(h)(ec, from, bytes);
    }
};

using group_done_handler = boost::asio::any_completion_handler<void(error_code)>;
using group_bytes_handler = boost::asio::any_completion_handler<void(error_code, std::size_t)>;
using group_new_handler = boost::asio::any_completion_handler<void(error_code, group)>;
using group_from_handler = boost::asio::any_completion_handler<void(error_code, std::size_t, int)>;

// The group's functions (lib/group/group.cpp). Each completes its handler once,
// never inside the call.
void group_join(const std::shared_ptr<worker_impl>& w, store& s, group_options options,
                group_new_handler h);
void group_send(const std::shared_ptr<group_impl>& g, int to, const void* data, std::size_t size,
                tag_t tag, group_bytes_handler h);
void group_recv(const std::shared_ptr<group_impl>& g, int from, void* data, std::size_t size,
                tag_t tag, group_bytes_handler h);
void group_recv_any(const std::shared_ptr<group_impl>& g, void* data, std::size_t size, tag_t tag,
                    group_from_handler h);
void group_collective(const std::shared_ptr<group_impl>& g, collective_args&& args,
                      group_done_handler h);
void group_split(const std::shared_ptr<group_impl>& g, int color, int key, group_new_handler h);
void group_wait_failure(const std::shared_ptr<group_impl>& g, group_done_handler h);
void group_close(const std::shared_ptr<group_impl>& g, group_done_handler h);
void group_abort(group_impl& g) noexcept;
void group_release(group_impl& g) noexcept;
int group_rank(const group_impl& g) noexcept;
int group_connections(const group_impl& g) noexcept;
int group_size(const group_impl& g) noexcept;
error_code group_error(const group_impl& g) noexcept;
void group_metrics_of(const group_impl& g, group_metrics& m) noexcept;
boost::asio::any_io_executor group_executor(const group_impl& g) noexcept;
worker_core& group_core(const group_impl& g) noexcept;
void group_set_timeout(group_impl& g, std::chrono::milliseconds t) noexcept;
std::chrono::milliseconds group_timeout(const group_impl& g) noexcept;
void group_flight_record(const group_impl& g, flight_record& r);
} // namespace detail

/// No rank in particular: the `from` that `group::async_recv_any` reports
/// when it fails (as `MPI_ANY_SOURCE` names no rank).
inline constexpr int any_rank = -1;

/// A group of processes (ranks `0` to `size() - 1`) that message each other
/// by rank and run collectives, all as asynchronous operations on the
/// worker's executor with any completion token.
///
/// - **Joining** (`async_join`): every rank publishes its worker's address
///   in the store, under the group's name, and reads the others'. The group
///   owns the worker's address acceptor (one joined group per worker;
///   `async_split` makes more over the same connections).
/// - **Connections**: one per pair of ranks, made by the lower rank right
///   after the join, or when it first talks to the higher one with
///   `group_options::lazy_connections` (in the background: operations wait
///   for them), by the
///   library's handshake over the worker address, with its liveness watch: a
///   peer that dies, or stops answering for the worker's `peer_timeout`, is
///   noticed. Both ranks of a pair send and receive over it.
/// - **Failure**: when a peer fails, or an operation fails or passes its
///   deadline, the group fails: every pending and later operation completes
///   with `ucx::error::group_failed` (or `group_timeout`), and this rank tells
///   every peer it is connected to, so that the failure reaches all ranks.
///   No partial result is ever reported as success. A group that failed
///   stays failed; `async_wait_failure` completes then.
/// - **Collectives** are called by every rank in the same order with
///   matching arguments (as in MPI). They run one at a time per group, in the
///   order called; point-to-point messages and the collectives of other
///   groups (splits) run beside them. Every rank gets the same bits.
/// - **Device memory**: where the library is built with CUDA and a device
///   exists, buffers may be CUDA device memory. A collective copies device
///   input to host memory first (keeping its place in the order), runs on the
///   host copy (the reductions are the host's), and copies the result back
///   before its handler runs; a failed copy fails it with
///   `ucx::error::cuda_error` (and the group with it). Messages by rank take
///   device buffers as tag messages do (staged through host memory where UCX
///   cannot move device memory).
///
/// Cancellation, through the handler's cancellation slot (emitted on the
/// worker's executor's thread; for an operation started on another thread,
/// a cancellation emitted before its start reached the worker is kept and
/// delivered once it has started):
/// - a receive by rank (`async_recv`, `async_recv_from_any`): every type; it
///   completes with `operation_aborted` unless a message matched it first;
/// - a send by rank: every type while it waits for its connection (a lazy
///   group) or has not reached UCX, unsent; once UCX holds it only
///   `terminal`, which closes its connection and so fails the group;
/// - a collective: only `terminal`, which aborts the group as `abort()`
///   does (the ranks run the same collectives in order, so one cannot be
///   taken back alone); `partial` and `total` are ignored.
/// Buffers are free when the handler runs.
///
/// Operations may be started from any thread, as the core's: one started
/// outside the worker's executor is dispatched to it. A handler
/// runs on its associated executor; one with none of its own runs on the
/// worker's executor, called directly from the completion that ends the
/// operation there (never inside the call that starts it). A collective
/// whose messages all completed inside its start (small sends that UCX
/// completes at once, messages already here) ends there when the previous
/// collective's handler started it, up to 16 in a row; otherwise from a
/// later pass of the worker. Buffers must
/// stay valid until the handler runs. Movable, not copyable; destroying the
/// group closes it as `async_close` does, without waiting for the close (its
/// pending operations complete with `operation_aborted`).
class group {
public:
    using executor_type = boost::asio::any_io_executor;

    /// An empty group (`is_open()` false); what `async_split` gives a rank
    /// whose color is negative.
    group() noexcept = default;
    group(group&&) noexcept = default;
    group& operator=(group&& other) noexcept {
        if (this != &other) {
            if (impl_)
                detail::group_release(*impl_);
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    ~group() {
        if (impl_)
            detail::group_release(*impl_);
    }

    /// Whether this is a group (joined, not failed, not closed).
    bool is_open() const noexcept { return impl_ && !detail::group_error(*impl_); }
    /// This process's rank.
    int rank() const noexcept { return impl_ ? detail::group_rank(*impl_) : -1; }
    /// The number of ranks.
    int size() const noexcept { return impl_ ? detail::group_size(*impl_) : 0; }
    /// A snapshot of this rank's collectives of the group: started,
    /// completed and failed by kind, their bytes and latencies
    /// (docs/guide/metrics.md). Safe to call from any thread. An empty
    /// group reports rank -1 and zeros.
    group_metrics metrics() const noexcept {
        group_metrics m;
        if (impl_)
            detail::group_metrics_of(*impl_, m);
        return m;
    }
    /// This rank's flight record of the group: its last collectives and
    /// messages by rank (`group_options::flight_recorder_entries`), a running
    /// collective's round and the ranks it waits for, with `reason`
    /// "request". Call it on the group's executor (as its operations are).
    /// An empty group gives an empty record (rank -1).
    ucx::flight_record flight_record() const {
        ucx::flight_record r;
        if (impl_)
            detail::group_flight_record(*impl_, r);
        return r;
    }
    /// The connections this process holds to the other ranks of its join
    /// (shared with the groups split from it): `size() - 1` once made, fewer
    /// with `group_options::lazy_connections`; 0 for an empty group.
    int connections() const noexcept { return impl_ ? detail::group_connections(*impl_) : 0; }
    /// Why the group is unusable: `ucx::error::group_failed`,
    /// `ucx::error::group_timeout`, `asio::error::operation_aborted` after a
    /// local close; empty while usable.
    error_code error() const noexcept {
        return impl_ ? detail::group_error(*impl_) : error_code(boost::asio::error::bad_descriptor);
    }
    /// The worker's executor.
    executor_type get_executor() const noexcept {
        return impl_ ? detail::group_executor(*impl_) : executor_type();
    }
    /// The deadline of the collectives started from now on (zero: none; see
    /// `group_options::timeout`).
    std::chrono::milliseconds timeout() const noexcept {
        return impl_ ? detail::group_timeout(*impl_) : std::chrono::milliseconds(0);
    }
    void set_timeout(std::chrono::milliseconds t) noexcept {
        if (impl_)
            detail::group_set_timeout(*impl_, t);
    }

    /// Sends `data` to rank `to` with `tag` (at most `group_max_tag`).
    /// Messages from one rank to another with one tag arrive in order.
    /// Completion signature: `void(error_code, std::size_t bytes_sent)`.
    /// Errors: `ucx::error::invalid_rank`, `asio::error::invalid_argument`
    /// (a tag above `group_max_tag`), the group's failure.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_send(int to, boost::asio::const_buffer data, tag_t tag,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl, int to,
               boost::asio::const_buffer data, tag_t tag) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, int to, boost::asio::const_buffer data, tag_t tag, auto&& h) {
                        detail::group_send(g, to, data.data(), data.size(), tag, std::move(h));
                    },
                    impl, to, data, tag, std::move(h));
            },
            token, checked(), to, data, tag);
    }

    /// Receives the next message from rank `from` with `tag`. A larger
    /// message than `data` fails the receive with `errc::message_truncated`
    /// (the group stays usable).
    /// Completion signature: `void(error_code, std::size_t bytes_received)`.
    /// Errors: as `async_send`; `asio::error::eof` once `from` closed its
    /// group and no message of it is left.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_recv(int from, boost::asio::mutable_buffer data, tag_t tag,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl, int from,
               boost::asio::mutable_buffer data, tag_t tag) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, int from, boost::asio::mutable_buffer data, tag_t tag,
                       auto&& h) {
                        detail::group_recv(g, from, data.data(), data.size(), tag, std::move(h));
                    },
                    impl, from, data, tag, std::move(h));
            },
            token, checked(), from, data, tag);
    }

    /// Receives the next message with `tag` from any other rank of this group
    /// (as `MPI_ANY_SOURCE`), and says which rank sent it.
    ///
    /// - It matches the first message sent to this rank with `async_send` and
    ///   this `tag` by a member of this group, whichever rank sent it; never a
    ///   message with another tag, of another group (a split, its parent) or
    ///   of a collective. Messages from one rank with one tag still arrive in
    ///   the order sent, and each is received once: by this receive or by
    ///   another receive that matches it (`async_recv` from its sender or
    ///   `async_recv_from_any`), whichever was started first (an `async_recv`
    ///   started before its connection is up counts from when it comes up).
    /// - A larger message than `data` fails the receive with
    ///   `errc::message_truncated` and is consumed (the group stays usable).
    /// - Cancellable through the handler's cancellation slot (`terminal`,
    ///   `partial`, `total`): it then completes with
    ///   `asio::error::operation_aborted`, unless a message matched it first.
    /// - A rank that closed its group is not waited for: messages it sent
    ///   before are still received, then only the other ranks are; once every
    ///   other rank has closed and none of their messages is left, the receive
    ///   completes with `asio::error::eof` (at once in a group of one rank).
    /// - It is a receive on the whole worker that only the group's
    ///   connections can match (their ids carry a bit no other connection's
    ///   has): the worker's other connections may use any tags. A message
    ///   that came over a connection of no member (a process that connected
    ///   to the worker's address without joining) is dropped, with a warning
    ///   in the log, and the receive goes on.
    ///
    /// A separate operation rather than `async_recv(any_rank, ...)`: its
    /// completion reports the sender, which `async_recv`'s does not (as
    /// Asio's `async_receive_from` beside `async_receive`). As every receive
    /// of the library, it reports the error, then the bytes received, then
    /// what it learnt of the message.
    ///
    /// Completion signature:
    /// `void(error_code, std::size_t bytes_received, int from)`; `from` is
    /// the sender's rank in this group, `any_rank` on error.
    /// Errors: `asio::error::invalid_argument` (a tag above `group_max_tag`),
    /// `errc::message_truncated`, `asio::error::operation_aborted` (cancelled,
    /// or the group was closed, destroyed or aborted here),
    /// `asio::error::eof` (every other rank closed its group),
    /// `ucx::error::group_failed` and `ucx::error::group_timeout` (the group
    /// failed).
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_recv_from_any(
        boost::asio::mutable_buffer data, tag_t tag,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t, int)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl,
               boost::asio::mutable_buffer data, tag_t tag) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, boost::asio::mutable_buffer data, tag_t tag, auto&& h) {
                        detail::group_recv_any(g, data.data(), data.size(), tag, std::move(h));
                    },
                    impl, data, tag, std::move(h));
            },
            token, checked(), data, tag);
    }

    /// Deprecated: `async_recv_from_any`, whose completion has the order of
    /// every other receive. This one completes with
    /// `void(error_code, int from, std::size_t bytes_received)`; otherwise
    /// the same operation, with the same errors.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    [[deprecated("use async_recv_from_any, which completes with (error_code, bytes, from)")]] auto
    async_recv_any(
        boost::asio::mutable_buffer data, tag_t tag,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, int, std::size_t)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl,
               boost::asio::mutable_buffer data, tag_t tag) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, boost::asio::mutable_buffer data, tag_t tag, auto&& h) {
                        detail::group_recv_any(
                            g, data.data(), data.size(), tag,
                            detail::hooked_handler<std::decay_t<decltype(h)>, detail::sender_first>{
                                std::move(h), {}});
                    },
                    impl, data, tag, std::move(h));
            },
            token, checked(), data, tag);
    }

    /// Completes once every rank has called it. Algorithm: dissemination
    /// (ceil(log2 size) rounds). Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_barrier(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return collective(detail::collective_args{}, std::forward<CompletionToken>(token));
    }

    /// Copies `data` of rank `root` into `data` of every rank (the same size
    /// on every rank). Algorithm: binomial tree.
    /// Completion signature: `void(error_code)`. Errors: `invalid_rank`,
    /// `collective_mismatch` (sizes differ), the group's failure.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_broadcast(
        boost::asio::mutable_buffer data, int root,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        detail::collective_args a;
        a.kind = collective_kind::broadcast;
        a.root = root;
        a.out = data.data();
        a.out_bytes = data.size();
        return collective(std::move(a), std::forward<CompletionToken>(token));
    }

    /// Concatenates every rank's `in` (the same size on every rank) in rank
    /// order into the root's `out` (`size()` times as large; unused on the
    /// other ranks). Algorithm: direct.
    /// Completion signature: `void(error_code)`. Errors: as `async_broadcast`,
    /// plus `asio::error::invalid_argument` for a root's `out` of another size.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_gather(
        boost::asio::const_buffer in, boost::asio::mutable_buffer out, int root,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return collective(args(collective_kind::gather, in, out, root),
                          std::forward<CompletionToken>(token));
    }

    /// Concatenates every rank's `in` (the same size on every rank) in rank
    /// order into every rank's `out` (`size()` times as large). Algorithm:
    /// ring. Completion signature: `void(error_code)`. Errors: as
    /// `async_gather`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_allgather(
        boost::asio::const_buffer in, boost::asio::mutable_buffer out,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return collective(args(collective_kind::allgather, in, out, 0),
                          std::forward<CompletionToken>(token));
    }

    /// As `async_allgather` with blocks of different sizes: rank i
    /// contributes `sizes[i]` bytes (`in` holds this rank's), `out` holds
    /// their sum. Every rank passes the same `sizes`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_allgatherv(
        boost::asio::const_buffer in, boost::asio::mutable_buffer out,
        std::span<const std::size_t> sizes,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto a = args(collective_kind::allgatherv, in, out, 0);
        a.blocks.assign(sizes.begin(), sizes.end());
        return collective(std::move(a), std::forward<CompletionToken>(token));
    }

    /// Combines every rank's `in` element by element with `op` into the
    /// root's `out` (the same count everywhere; `out` is unused on the other
    /// ranks and may be empty there). `in` and `out` may be the same.
    /// Algorithm: binomial tree. Completion signature: `void(error_code)`.
    /// Errors: as `async_gather`.
    template <class T,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_reduce(
        std::span<const T> in, std::span<T> out, reduce_op op, int root,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto a = args(collective_kind::reduce, boost::asio::buffer(in.data(), in.size_bytes()),
                      boost::asio::buffer(out.data(), out.size_bytes()), root);
        a.type = datatype_of<T>;
        a.op = op;
        return collective(std::move(a), std::forward<CompletionToken>(token));
    }

    /// Combines every rank's `in` element by element with `op` into every
    /// rank's `out` (same count; `in` and `out` may be the same). Every rank
    /// gets the same bits. Algorithm: recursive doubling up to 64 KiB (or
    /// fewer elements than ranks), ring reduce-scatter and allgather above.
    /// Completion signature: `void(error_code)`. Errors: as `async_gather`.
    template <class T,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_allreduce(
        std::span<const T> in, std::span<T> out, reduce_op op,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto a = args(collective_kind::allreduce, boost::asio::buffer(in.data(), in.size_bytes()),
                      boost::asio::buffer(out.data(), out.size_bytes()), 0);
        a.type = datatype_of<T>;
        a.op = op;
        return collective(std::move(a), std::forward<CompletionToken>(token));
    }
    /// In place: `data` is both input and result.
    template <class T,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_allreduce(
        std::span<T> data, reduce_op op,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return async_allreduce(std::span<const T>(data), data, op,
                               std::forward<CompletionToken>(token));
    }

    /// Sends block j of `in` (`size()` equal blocks) to rank j, which puts it
    /// in block i (this rank's) of its `out`. Algorithm: direct, all at once.
    /// Completion signature: `void(error_code)`. Errors: as `async_gather`
    /// (`invalid_argument` also for an `in` not divisible in `size()` blocks).
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_alltoall(
        boost::asio::const_buffer in, boost::asio::mutable_buffer out,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return collective(args(collective_kind::alltoall, in, out, 0),
                          std::forward<CompletionToken>(token));
    }

    /// Splits the group, as `MPI_Comm_split`: the ranks that pass the same
    /// `color` form a new group, ranked by `key` then by rank in this group;
    /// a negative color gives an empty group. A collective of this group. The
    /// new group uses this group's connections, with its own tags.
    /// Completion signature: `void(error_code, ucx::group)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_split(
        int color, int key,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, group)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl, int color, int key) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, int color, int key, auto&& h) {
                        detail::group_split(g, color, key, std::move(h));
                    },
                    impl, color, key, std::move(h));
            },
            token, checked(), color, key);
    }

    /// Completes when the group fails (with the reason), or when it is
    /// closed here (`asio::error::operation_aborted`).
    /// Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_wait_failure(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, auto&& h) { detail::group_wait_failure(g, std::move(h)); },
                    impl, std::move(h));
            },
            token, checked());
    }

    /// Leaves the group gracefully once its operations are done: messages
    /// sent are delivered, the peers see this rank leave (`asio::error::eof`
    /// on receives from it, the failure of collectives that need it).
    /// Completion signature: `void(error_code)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_close(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl) {
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, auto&& h) { detail::group_close(g, std::move(h)); }, impl,
                    std::move(h));
            },
            token, checked());
    }

    /// Fails the group here at once (pending operations complete with
    /// `operation_aborted`) and tells the connected peers, whose group fails.
    void abort() noexcept {
        if (impl_)
            detail::group_abort(*impl_);
    }

private:
    friend struct detail::access;
    explicit group(std::shared_ptr<detail::group_impl> impl) noexcept : impl_(std::move(impl)) {}

    // The state, passed to each initiation as an argument of
    // `async_initiate`: a handler token gets this reference, a deferred token
    // (a coroutine's, `asio::deferred`) keeps its own copy until it is
    // launched. The arguments reach the initiation as rvalues in both cases.
    const std::shared_ptr<detail::group_impl>& checked() const {
        if (!impl_)
            throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                              "ucx::group: operation on an empty group");
        return impl_;
    }
    static detail::collective_args args(collective_kind kind, boost::asio::const_buffer in,
                                        boost::asio::mutable_buffer out, int root) {
        detail::collective_args a;
        a.kind = kind;
        a.root = root;
        a.in = in.data();
        a.in_bytes = in.size();
        a.out = out.data();
        a.out_bytes = out.size();
        return a;
    }
    template <class CompletionToken>
    auto collective(detail::collective_args a, CompletionToken&& token) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [](auto h, const std::shared_ptr<detail::group_impl>& impl,
               detail::collective_args&& a) {
                a.direct_handler = detail::has_no_own_executor<decltype(h)>;
                detail::start_on_worker(
                    detail::group_core(*impl),
                    [](const auto& g, auto&& a, auto&& h) {
                        detail::group_collective(g, std::move(a), std::move(h));
                    },
                    impl, std::move(a), std::move(h));
            },
            token, checked(), std::move(a));
    }

    std::shared_ptr<detail::group_impl> impl_;
};

/// Joins the group `options.name` as rank `options.rank` of
/// `options.size`: publishes `w`'s address in `s` and reads every rank's.
/// Completes when every rank has published (the connections are made next,
/// in the background).
///
/// Completion signature: `void(error_code, ucx::group)`. Errors:
/// `ucx::error::invalid_rank` (rank outside `[0, size)`), the store's
/// (`ucx::error::store_timeout` when some rank did not join within the
/// store's timeout), `asio::error::address_in_use` (the worker has an
/// address acceptor, or a group, already), `ucx::error::feature_not_enabled`
/// (the context has no `feature::am`), `ucx::error::malformed_address`
/// (a key of the group holds something else), `ucx::error::group_timeout`
/// (`options.timeout` passed).
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_join(
    worker& w, store& s, group_options options,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    const auto& impl = detail::checked(w);
    return boost::asio::async_initiate<CompletionToken, void(error_code, group)>(
        [impl, &s](auto h, group_options o) {
            detail::start_on_worker(
                detail::core_of(*impl),
                [](const auto& w, store* s, auto&& o, auto&& h) {
                    detail::group_join(w, *s, std::move(o), std::move(h));
                },
                impl, &s, std::move(o), std::move(h));
        },
        token, std::move(options));
}

} // namespace ucx
