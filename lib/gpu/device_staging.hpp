// Internal: the staging of a worker's device buffers, for the operations
// whose device memory UCX cannot move itself (a UCX without CUDA transports,
// such as Debian's 1.13), and for the arithmetic of a group's collectives,
// which runs on the host.
//
// A worker has this component only where a device may be used: a library
// built with CUDA and a device present (`make_device_staging`, the hook the
// worker calls), or a test that installs it with a classifier and a fake copy
// engine (`use_device_staging`). The worker holds it as a component of a type
// it does not know (`worker_impl::staging`); `staging_of` gives it its type.
//
// It knows no feature. A feature (tag and active messages in
// lib/messaging/tag_staging.cpp and lib/messaging/am_staging.cpp, streams in
// lib/stream/stream_staging.cpp, puts and gets in lib/rma/rma_staging.cpp)
// asks whether a buffer must be staged, then hands it the user's operation
// with a transfer: the staging copies the device buffer through pinned host
// memory (`staging_operation`, lib/gpu/staging.hpp), as one block or chunk
// by chunk, calls the transfer with the host memory (the feature's own
// operation on it: a send, a receive, a stream write, a put), and completes
// the user's operation, library-owned meanwhile, with the bytes moved. Sends
// of one key (an endpoint) reach their transfers in the order they were
// made, and the key's owner is held (its graceful close waits) until then.
// It stages messages only when the context's UCX has no CUDA memory type; in
// every case it copies the device buffers of a group's collectives to host
// memory and back (`copy_through`).
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/memory_type.hpp>

#include "engine/worker_component.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/copy_engine.hpp"
#include "gpu/pinned_pool.hpp"
#include "gpu/staging.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ucx::detail {

/// The staging of one worker's device buffers.
class device_staging final : public worker_component {
public:
    /// Says where a buffer lives (`detect_memory_type` by default).
    using classifier = std::function<memory_type(const void*)>;

    /// Settings of the staging.
    struct settings {
        /// Bytes of a pinned buffer, and of a chunk of a copy.
        std::size_t chunk = 1u << 20;
        /// Copies in flight at once per operation.
        unsigned slots = 4;
        /// Pinned buffers at most (a whole message takes as many as it
        /// spans): 256 MiB of pinned memory with the default chunk.
        std::size_t max_buffers = 256;
        /// Whether messages (tag and endpoint operations) are staged: false
        /// where UCX moves device memory itself, and the staging only serves
        /// what UCX never does (the arithmetic of a group's collectives, and
        /// byte streams, whose received data UCX hands out in host memory).
        bool messages = true;
    };

    /// Staging for `w`, with `engine` (a CUDA engine when null: made on the
    /// first staged operation) and `classify`.
    device_staging(worker_impl& w, classifier classify, std::shared_ptr<copy_engine> engine,
                   settings s);
    ~device_staging();

    /// Whether the buffer at `p` of a message must be staged: it is device
    /// memory, and messages are staged.
    bool must_stage(const void* p) const { return settings_.messages && is_device(p); }
    /// Whether the buffer at `p` is device memory.
    bool is_device(const void* p) const { return classify_(p) == memory_type::cuda; }
    /// Bytes of a pinned buffer (a chunk).
    std::size_t chunk() const noexcept { return settings_.chunk; }
    worker_impl& worker() const noexcept { return *worker_; }

    using completion = staging_operation::transfer_completion;

    /// One staged operation, as its transfer sees it.
    struct entry : std::enable_shared_from_this<entry> {
        /// The user's operation; null once it was completed or the worker
        /// shut down.
        transfer_op* op = nullptr;
        std::shared_ptr<staging_operation> run;
        /// The internal operation of the transfer while it is in flight
        /// (set by the transfer: cancelled with `cancel_policy::transfer`).
        operation* transfer = nullptr;
        bool transfer_started = false;
        /// Chunked mode: the offset in the buffer of the chunk being
        /// transferred.
        std::size_t offset = 0;
        /// What the transfer reports besides its bytes (a tag receive's
        /// sender tag), handed to `stage_options::finish`.
        std::uint64_t info = 0;

    private:
        friend class device_staging;
        /// A send: its key's queue holds it until it has gone to its
        /// transfer, and `submit` hands it over once it may go (staged:
        /// copied; direct: at once) and its turn has come.
        const void* ordered = nullptr;
        /// The owner of the key, held (see `send_order`) until the send went
        /// to its transfer, or ended.
        std::shared_ptr<void> held;
        void (*release)(void*) noexcept = nullptr;
        std::function<void()> submit;
        std::uint8_t cancel = 0;
        void (*finish)(transfer_op*, std::uint64_t) noexcept = nullptr;
        /// Called once when the operation ends.
        std::function<void()> on_end;
    };

    /// The transfer of a staged operation: `(entry, host memory, bytes)`,
    /// then the callback with the transfer's result (see
    /// `staging_operation::transfer_completion`).
    using transfer_fn =
        std::function<void(entry& e, void* host, std::size_t length, completion done)>;

    /// What cancelling a staged operation does.
    enum class cancel_policy : std::uint8_t {
        /// Cancels it only before its transfer began (a send: while its
        /// bytes are still copied from the device; once sent, it completes).
        before_transfer,
        /// Cancels the transfer in flight (`entry::transfer`: a receive; the
        /// bytes it received are still delivered).
        transfer,
        /// Nothing (stream writes, puts and gets, as their direct forms).
        none,
    };

    /// The order of the sends of one key (an endpoint): they reach their
    /// transfers in the order they were made, and while one of them waits
    /// `hold` has been called on the key's owner (its graceful close waits),
    /// `release` once it went to its transfer or ended.
    struct send_order {
        /// The key's owner, kept while a send is held (`key.get()` is the key).
        std::shared_ptr<void> key;
        void (*hold)(void* key) noexcept = nullptr;
        void (*release)(void* key) noexcept = nullptr;
    };

    /// How a staged operation runs.
    struct stage_options {
        staging_mode mode = staging_mode::whole;
        cancel_policy cancel = cancel_policy::before_transfer;
        /// A send, ordered with the others of its key; unordered without a key.
        send_order order;
        /// Called once when the operation ends, however it ends.
        std::function<void()> on_end;
        /// The copy engine of this operation (a gather of several buffers);
        /// the worker's when null.
        std::shared_ptr<copy_engine> engine;
        /// Called before the user's operation completes (while it is still
        /// there), with `entry::info`.
        void (*finish)(transfer_op* op, std::uint64_t info) noexcept = nullptr;
    };

    /// Stages `size` bytes of the device memory at `device` for `op`, which
    /// waits, library-owned: `outgoing` copies them to pinned host memory,
    /// then calls `transfer` on it (once, or once per chunk in
    /// `staging_mode::chunked`); `incoming` has `transfer` fill the host
    /// memory, then copies it to the device. `op` completes with the bytes
    /// moved (or, if `op->partial_on_error`, those before a failure). Fails
    /// `op` at once when the worker is closed, `op` was cancelled or no
    /// copy engine exists.
    void stage(transfer_op* op, staging_direction direction, void* device, std::size_t size,
               transfer_fn transfer, stage_options options) noexcept;
    /// Whether a staged send of key `key` has not reached its transfer yet
    /// (a send of that key then waits behind it: `queue_behind`).
    bool holds_sends(const void* key) const noexcept { return send_queues_.contains(key); }
    /// A send of host memory behind staged ones of `order`'s key: `submit`
    /// hands `op` over (as a direct send, `held_send` set) when its turn
    /// comes. `op` waits library-owned until then, not cancellable.
    void queue_behind(const send_order& order, transfer_op* op,
                      std::function<void()> submit) noexcept;

    /// Reports an operation that has no user's operation: its error, and the
    /// bytes moved.
    using report_fn = std::function<void(const error_code&, std::size_t)>;
    /// As `stage`, for a transfer the library makes of its own accord (the
    /// fetch of an active message's data): `report` runs once, on the
    /// executor, after nothing writes `device` any more: also after a
    /// shutdown (with its error), or with `operation_aborted` when the
    /// io_context goes away first. It runs inside this call when the
    /// operation cannot start. The first transfer is called inside this call
    /// when it can start at once (a whole incoming operation whose pinned
    /// memory is free).
    void stage_detached(staging_direction direction, void* device, std::size_t size,
                        transfer_fn transfer, report_fn report) noexcept;

    /// A buffer of a gather (`gather`).
    struct gather_piece {
        const void* data;
        std::size_t size;
        bool device;
    };
    /// A copy engine that copies out of the sequence `pieces` as if it were
    /// one buffer at `gather_origin()`: host pieces with memcpy, device ones
    /// with the worker's engine. Null when there is no engine (`stage` then
    /// reports why). Throws `std::bad_alloc`.
    std::shared_ptr<copy_engine> gather(std::vector<gather_piece> pieces);
    /// Where a gather's sequence starts for `stage`: never dereferenced,
    /// only offsets from it are.
    static void* gather_origin() noexcept;

    /// The bytes of a staged copy: `(staging memory, bytes)`, then the
    /// callback (see `staging_operation::transfer_completion`).
    using buffer_step = std::function<void(void* host, std::size_t size, completion done)>;
    /// Moves `size` bytes of the device memory at `device` through pinned host
    /// memory as one block, with copies on the copy engine: `outgoing` copies
    /// them to the host, then hands them to `step`; `incoming` has `step`
    /// fill the host memory, then copies it to the device. `handler` gets
    /// the result (on the worker's executor, never inside this call); an
    /// operation of the staging's statistics.
    void copy_through(staging_direction direction, void* device, std::size_t size, buffer_step step,
                      std::function<void(const error_code&)> handler) noexcept;

    /// Operations that went through staging, and their bytes.
    std::size_t staged_operations() const noexcept { return staged_; }
    std::size_t staged_bytes() const noexcept { return staged_bytes_; }

    void shutdown() noexcept override;
    std::size_t run_deferred(deferred_stage) noexcept override { return 0; }
    bool keeps_worker_running() const noexcept override { return false; }
    void add_stats(worker_stats& s) const noexcept override;

private:
    /// Makes the owner of `order`'s key wait for the send of `e`.
    void hold(entry& e, const send_order& order) noexcept;
    void release(entry& e) noexcept;
    /// Hands the sends at the head of `key`'s queue whose turn it is over.
    void pump(const void* key) noexcept;
    void done(const std::shared_ptr<entry>& e, const error_code& ec, std::size_t bytes) noexcept;
    static void cancel_hook(operation* op, boost::asio::cancellation_type type);
    /// The copy engine and the pinned pool (made on first use); false with
    /// `ec` set when there is no engine.
    bool ready(error_code& ec) noexcept;

    worker_impl* worker_;
    classifier classify_;
    std::shared_ptr<copy_engine> engine_;
    std::shared_ptr<pinned_pool> pool_;
    settings settings_;
    std::vector<std::shared_ptr<entry>> entries_;
    /// Per key, its sends not yet handed to their transfers, in the order
    /// they were made (only while one of them is staged).
    std::unordered_map<const void*, std::deque<std::shared_ptr<entry>>> send_queues_;
    counter staged_;
    counter staged_bytes_;
    bool attached_ = false;
    /// Held by the callbacks of `copy_through`, which may outlive this.
    std::shared_ptr<device_staging*> self_ = std::make_shared<device_staging*>(this);
};

/// Creates the staging of `w`'s device buffers (registered with it) where a
/// device may be used; null elsewhere. The public worker's constructor
/// installs it (lib/messaging/worker_open.cpp).
std::shared_ptr<worker_component> make_device_staging(worker_impl& w);

/// The staging of `w`'s device buffers; null where it has none (no device):
/// a test of a null pointer on the paths of host memory.
inline device_staging* staging_of(const worker_impl& w) noexcept {
    return static_cast<device_staging*>(w.staging());
}

/// An internal operation of kind `Result::op_type` of `w` whose completion
/// calls `h` (a staged operation's transfer).
template <class Result, class Handler>
typename Result::op_type* staging_internal_op(worker_impl& w, Handler&& h) {
    using op_type = handler_operation<std::decay_t<Handler>, worker_core::executor_type, Result>;
    return op_type::create(std::forward<Handler>(h), w.get_executor(),
                           w.operation_pool(w.running_in_owner()));
}

/// The internal operation of a staged entry's transfer that moves bytes,
/// reporting to `done` (set as `e.transfer` while in flight). A shutdown may
/// end the entry before the transfer ends: it is held weakly. `hold` lives
/// as long as the operation (memory UCX reads, as an active message's
/// header).
inline bytes_result<>::op_type* staging_bytes_op(worker_impl& w, device_staging::entry& e,
                                                 device_staging::completion done,
                                                 std::shared_ptr<const void> hold = nullptr) {
    auto* t = staging_internal_op<bytes_result<>>(
        w, [weak = e.weak_from_this(), hold = std::move(hold),
            done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
            if (const auto e = weak.lock())
                e->transfer = nullptr;
            done(ec, bytes);
        });
    e.transfer = t;
    return t;
}

/// Makes `w` stage device buffers whatever its context's UCX supports, with
/// `classify` saying where a buffer lives and `engine` copying (tests: a
/// fake engine over host memory marked as device memory).
void use_device_staging(worker_impl& w, device_staging::classifier classify,
                        std::shared_ptr<copy_engine> engine,
                        device_staging::settings s = device_staging::settings{});

} // namespace ucx::detail
