// Internal: device buffers of tag, active-message, stream and one-sided
// operations when UCX cannot move device memory itself (a UCX without CUDA
// transports, such as Debian's 1.13).
//
// A worker has this component only where a device may be used: a library
// built with CUDA and a device present (or a test that installs it with a
// classifier and a fake copy engine). It stages messages only when the
// context's UCX has no CUDA memory type; in every case it copies the device
// buffers of a group's collectives to host memory and back (`copy_through`),
// since their arithmetic runs on the host. When it stages messages, the
// submit functions of tag sends and receives and of active-message sends,
// and the active-message registry's fetches into device memory, hand it the
// operation first, and it takes what it must (the buffer's memory type is
// found once per operation); a device buffer goes through a
// `staging_operation` (lib/gpu/staging.hpp): copied into a pinned host buffer and
// sent from there as one message, or received into a pinned host buffer and
// copied to the device. The user's operation waits,
// library-owned, until the staged one completes; its handler then gets the
// bytes (and the sender's tag) as a direct operation would give them.
//
// Byte streams and one-sided operations go through it too (their section
// below): a stream write from device memory and a put or get with a device
// buffer are cut into chunks (`staging_mode::chunked`), each chunk an
// ordinary stream write, put or get of its pinned host chunk; a stream read
// into device memory reads at most one chunk into a pinned buffer, then
// copies it to the device.
#pragma once

#include "engine/worker_component.hpp"
#include "gpu/copy_engine.hpp"
#include "gpu/pinned_pool.hpp"
#include "gpu/staging.hpp"

#include <ucx/memory_type.hpp>

#include <boost/asio/buffer.hpp>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ucx::detail {

class worker_impl;
class endpoint_impl;
class operation;
struct transfer_op;
struct tag_recv_op;
class am_send_op;
class stream_impl;
struct stream_write_op;
struct rma_op;
class remote_key_impl;

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
        /// what UCX never does (the arithmetic of a group's collectives).
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

    /// The bytes of a staged copy: `(staging memory, bytes)`, then the
    /// callback (see `staging_operation::transfer_completion`).
    using buffer_step = std::function<void(void* host, std::size_t size,
                                           staging_operation::transfer_completion done)>;
    /// Moves `size` bytes of the device memory at `device` through pinned host
    /// memory as one block, with copies on the copy engine: `outgoing` copies
    /// them to the host, then hands them to `step`; `incoming` has `step`
    /// fill the host memory, then copies it to the device. `handler` gets
    /// the result (on the worker's executor, never inside this call); an
    /// operation of the staging's statistics.
    void copy_through(staging_direction direction, void* device, std::size_t size, buffer_step step,
                      std::function<void(const error_code&)> handler) noexcept;

    // Each entry point below finds the buffer's memory type once and returns
    // whether it took the operation; false leaves it to the caller's direct
    // path, untouched.

    /// A tag send of `size` bytes at `data` on `ep` (`tag` is UCX's full
    /// tag); `op` as `endpoint_impl::tag_send` takes it. Taken when the
    /// buffer is device memory (staged), or when an earlier staged send on
    /// `ep` has not reached UCX yet (the send waits for it, then goes to UCX
    /// directly: messages keep their order).
    bool tag_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                  ucp_tag_t tag) noexcept;
    /// Whether a staged send on `ep` has not reached UCX yet (a send on
    /// `ep` then waits behind it).
    bool holds_sends(const endpoint_impl& ep) const noexcept { return send_queues_.contains(&ep); }
    /// A per-endpoint send (`endpoint_impl::send`), as `tag_send`.
    bool endpoint_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                       std::uint32_t tag) noexcept;
    /// A worker-wide tag receive: taken (staged) when `data` is device memory.
    bool tag_recv(tag_recv_op* op, void* data, std::size_t size, ucp_tag_t tag,
                  ucp_tag_t mask) noexcept;
    /// A per-endpoint receive (`endpoint_impl::recv`), as `tag_recv`.
    bool endpoint_recv(endpoint_impl& ep, tag_recv_op* op, void* data, std::size_t size,
                       std::uint32_t tag, std::uint32_t mask) noexcept;
    /// An active-message send (`am_send`'s arguments; `header` is the copy
    /// in `op`'s storage): taken, staged, when a buffer of `iov` is device
    /// memory (several buffers are gathered into the one staging buffer:
    /// device ones copied by the engine, host ones with memcpy), or queued
    /// behind a staged send on `ep` as `tag_send` (tag and active messages of
    /// an endpoint share its queue). An invalid send (id, header) is not
    /// taken: the direct path reports its error.
    bool am_send(endpoint_impl& ep, am_send_op* op, unsigned id, const void* header,
                 std::size_t header_length, const ucp_dt_iov_t* iov, std::size_t count,
                 unsigned flags) noexcept;
    /// Reports a staged fetch: its error, and the bytes that reached the device.
    using fetch_report = std::function<void(const error_code&, std::size_t)>;
    /// The fetch of an active message's rendezvous data (UCX's descriptor
    /// `desc`, `size` bytes) into `device`: taken (staged) when `device` is
    /// device memory. The data is received into pinned host memory, then
    /// copied. `desc` is consumed either way (released to UCX when the fetch
    /// cannot start). `report` runs once, on the executor, after nothing
    /// writes `device` any more: also after a shutdown (with its error), or
    /// with `operation_aborted` when the io_context goes away first. It may
    /// run inside this call when the fetch cannot start.
    bool am_fetch(void* desc, void* device, std::size_t size, fetch_report report) noexcept;

    // ---- byte streams and one-sided operations ----
    //
    // Not cancellable, as their direct forms, except a stream read.

    /// A stream write (`stream_impl::write`). Taken (staged) when the first
    /// buffer of `op` is device memory: that buffer alone is written, chunk
    /// by chunk, each chunk a write of `s` (`stream_impl::write_direct`, so
    /// flow control applies), in order. Otherwise `op` is cut to its leading
    /// buffers of host memory and left to the caller. The write completes
    /// with the bytes written, also on failure (the chunks written before).
    bool stream_write(stream_impl& s, stream_write_op* op) noexcept;
    /// A stream read (`stream_impl::read`) into the `n` buffers `bufs`.
    /// Taken (staged) when the first non-empty buffer is device memory: at
    /// most one chunk is read into a pinned buffer (`stream_impl::read_direct`)
    /// and copied into that buffer. Otherwise `n` is cut to the leading
    /// buffers of host memory and the read left to the caller.
    bool stream_read(stream_impl& s, transfer_op* op, const boost::asio::mutable_buffer* bufs,
                     std::size_t& n) noexcept;
    /// A put (`rma_put`) from device memory: checked as a direct put, then
    /// each chunk is a put of its pinned copy at `remote_address` plus the
    /// chunk's offset. Taken when `data` is device memory and `size` > 0.
    bool rma_put(endpoint_impl& ep, rma_op* op, const void* data, std::size_t size,
                 std::uint64_t remote_address,
                 const std::shared_ptr<remote_key_impl>& key) noexcept;
    /// A get (`rma_get`) into device memory: each chunk is a get into a
    /// pinned buffer, then copied to the device; as `rma_put`.
    bool rma_get(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                 std::uint64_t remote_address,
                 const std::shared_ptr<remote_key_impl>& key) noexcept;

    /// Operations that went through staging, and their bytes.
    std::size_t staged_operations() const noexcept { return staged_; }
    std::size_t staged_bytes() const noexcept { return staged_bytes_; }

    void shutdown() noexcept override;
    std::size_t run_deferred(deferred_stage) noexcept override { return 0; }
    bool keeps_worker_running() const noexcept override { return false; }

private:
    struct entry;
    /// Starts the internal transfer of a staged operation: a UCX operation
    /// on `data` whose completion reports `(ec, bytes, sender tag)`.
    using submit_fn = std::function<void(entry&, void* data, std::size_t length,
                                         staging_operation::transfer_completion done)>;

    /// Hands a send's message (`data`, `size`) to UCX on the endpoint.
    using send_fn = void (*)(endpoint_impl&, transfer_op*, const void* data, std::size_t size,
                             std::uint64_t tag);
    /// A send: staged for device memory, queued behind staged ones, or not
    /// taken (see `tag_send`).
    bool send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
              std::uint64_t tag, send_fn submit) noexcept;
    /// A receive, staged when `data` is device memory; `submit` posts the
    /// receive into the host buffer.
    bool recv(tag_recv_op* op, void* data, std::size_t size,
              std::function<void(tag_recv_op*, void*, std::size_t)> submit) noexcept;
    void stage(operation* op, tag_recv_op* recv, staging_direction direction, void* device,
               std::size_t size, submit_fn submit, endpoint_impl* ordered) noexcept;
    /// What cancelling a staged operation does.
    enum class cancel_by : std::uint8_t {
        message,  ///< a tag message's (see `cancel_hook`)
        transfer, ///< cancels the transfer in flight (a stream read)
        none,     ///< nothing (stream writes, puts and gets)
    };
    /// How a staged operation runs (the overload above: a tag message's).
    struct stage_options {
        staging_mode mode = staging_mode::whole;
        cancel_by cancel = cancel_by::message;
        /// Called once when the operation ends, however it ends.
        std::function<void()> on_end;
        /// The copy engine of this operation (a gather of several buffers);
        /// the worker's when null.
        std::shared_ptr<copy_engine> engine;
    };
    void stage(operation* op, tag_recv_op* recv, staging_direction direction, void* device,
               std::size_t size, submit_fn submit, endpoint_impl* ordered,
               stage_options options) noexcept;
    /// A put or a get of device memory (see `rma_put`).
    bool rma(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
             std::uint64_t remote_address, const std::shared_ptr<remote_key_impl>& key,
             bool put) noexcept;
    /// A host-buffer send behind staged ones on `ep`: `submit` hands `op`
    /// to UCX when its turn comes.
    void queue_direct(endpoint_impl& ep, transfer_op* op, std::function<void()> submit) noexcept;
    /// Makes `ep`'s graceful close wait for the send of `e` (see `entry::held`).
    void hold(entry& e, const endpoint_impl& ep) noexcept;
    void release(entry& e) noexcept;
    /// Hands the sends at the head of `ep`'s queue whose turn it is to UCX.
    void pump(const endpoint_impl* ep) noexcept;
    void done(const std::shared_ptr<entry>& e, const error_code& ec, std::size_t bytes) noexcept;
    static void cancel_hook(operation* op);
    /// The copy engine and the pinned pool (made on first use); false with
    /// `ec` set when there is no engine.
    bool ready(error_code& ec) noexcept;

    worker_impl* worker_;
    classifier classify_;
    std::shared_ptr<copy_engine> engine_;
    std::shared_ptr<pinned_pool> pool_;
    settings settings_;
    std::vector<std::shared_ptr<entry>> entries_;
    /// Per endpoint, its sends not yet handed to UCX, in the order they
    /// were made (only while one of them is staged).
    std::unordered_map<const endpoint_impl*, std::deque<std::shared_ptr<entry>>> send_queues_;
    std::size_t staged_ = 0;
    std::size_t staged_bytes_ = 0;
    bool attached_ = false;
    /// Held by the callbacks of `copy_through`, which may outlive this.
    std::shared_ptr<device_staging*> self_ = std::make_shared<device_staging*>(this);
};

/// Makes `w` stage device buffers whatever its context's UCX supports, with
/// `classify` saying where a buffer lives and `engine` copying (tests: a
/// fake engine over host memory marked as device memory).
void use_device_staging(worker_impl& w, device_staging::classifier classify,
                        std::shared_ptr<copy_engine> engine,
                        device_staging::settings s = device_staging::settings{});

} // namespace ucx::detail
