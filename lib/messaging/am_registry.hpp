// Internal: a worker's active-message receive side.
//
// UCX calls `on_message` inside ucp_worker_progress: it only records the
// message in its id's queue (keeping UCX's eager buffer, or the rendezvous
// descriptor). After progress returns, `after_progress` fetches rendezvous
// data into allocator memory (within the per-id bound: that is the
// back-pressure), and hands ready messages, in arrival order, to waiting
// receives or posts them to the id's handler.
#pragma once

#include <ucx/am.hpp>
#include <ucx/am_allocator.hpp>
#include <ucx/am_message.hpp>
#include <ucx/detail/operation.hpp>

#include "engine/worker_impl.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace ucx::detail {

class control_channel;
class endpoint_impl;
class device_staging;

/// Whether an active-message send on `ep` with `id` and a header of
/// `header_length` bytes passes the checks of `am_send`.
bool am_send_valid(const endpoint_impl& ep, unsigned id, std::size_t header_length) noexcept;
/// Hands one active message to UCX after those checks (`op` fails with their
/// error otherwise); `header` and the IOV array stay valid until it completes.
void am_send_message(endpoint_impl& ep, transfer_op* op, unsigned id, const void* header,
                     std::size_t header_length, const ucp_dt_iov_t* iov, std::size_t count,
                     unsigned flags) noexcept;

/// The state of one received message (pooled by its registry).
struct am_message_state {
    /// Where the data is: nowhere, UCX's buffer (kept), the id's allocator
    /// (fetched), the heap (a copy the worker's close made), inline (small
    /// eager data), or the registry's pool of eager copies.
    enum class storage : unsigned char { none, ucx, allocator, heap, inline_copy, pooled_copy };

    am_registry* registry = nullptr;
    /// Set when the worker closes while the application holds the message:
    /// keeps the registry alive until the message is released.
    std::shared_ptr<am_registry> keep_registry;
    unsigned id = 0;
    std::size_t header_size = 0;
    alignas(std::max_align_t) std::byte header_inline[64];
    std::unique_ptr<std::byte[]> header_heap;
    /// Small eager data is copied here: cheaper than keeping UCX's buffer
    /// (UCX would swap a descriptor into its receive FIFO, and take it back
    /// on release).
    alignas(std::max_align_t) std::byte data_inline[64];
    void* data = nullptr;
    std::size_t length = 0;
    storage kind = storage::none;
    /// Rendezvous data still at the sender (the descriptor UCX gave).
    void* rndv_desc = nullptr;
    bool rendezvous = false;
    bool fetching = false;
    /// UCX called back for the fetch (possibly inside the fetch call).
    bool fetch_called = false;
    /// Dropped by shutdown while UCX still fetched into it.
    bool orphan = false;
    void* fetch_request = nullptr;
    ucx::memory_type mem = memory_type::host;
    std::shared_ptr<am_allocator> allocator;
    /// The sender's connected endpoint here, if there is one: for
    /// comparisons only (never dereferenced), with its serial, which tells it
    /// from a later endpoint at the same address.
    const endpoint_impl* from_raw = nullptr;
    std::uint64_t from_serial = 0;
    /// UCX's reply endpoint (null without the reply flag).
    ucp_ep_h reply_ep = nullptr;
    error_code error{};
    /// Counted in its id's queued bytes.
    std::size_t counted = 0;
    // Links: the id's queue, then the registry's list of live messages.
    am_message_state* next = nullptr;
    am_message_state* live_next = nullptr;
    am_message_state* live_prev = nullptr;

    const std::byte* header() const noexcept {
        return header_heap ? header_heap.get() : header_inline;
    }
    bool ready() const noexcept { return !rndv_desc && !fetching; }
};

/// Push handler of an id.
using am_handler = std::function<void(error_code, am_message)>;

/// A service of the worker (worker_service), opened with it, after its
/// control channel (lib/messaging/worker_open.cpp).
class am_registry final : public worker_service,
                          public worker_resource,
                          public std::enable_shared_from_this<am_registry> {
public:
    explicit am_registry(worker_impl& w);
    ~am_registry();
    am_registry(const am_registry&) = delete;
    am_registry& operator=(const am_registry&) = delete;

    /// Registers the receive callback for every user id; false if UCX refused.
    bool open();
    /// The worker shuts down: waiting receives end with operation_aborted,
    /// rendezvous data not fetched is dropped, and live messages take a
    /// private copy of their data before UCX's buffers go away.
    void shutdown() noexcept override;
    /// A push handler is a receive that never ends: it keeps the worker
    /// running (messages may come over the peers' endpoints alone). Pending
    /// receives are operations in flight.
    bool keeps_worker_running() const noexcept override { return handlers_ > 0; }
    /// After UCX called back every request, before the worker is destroyed:
    /// messages the application holds copy UCX's buffers, and the registry
    /// forgets the worker.
    void detach() noexcept;

    /// Starts a receive of one message on `id` (from `from` only, if set).
    void recv(am_recv_op* op, unsigned id, endpoint_impl* from) noexcept;
    void set_handler(unsigned id, am_handler handler);
    void set_memory_type(unsigned id, ucx::memory_type type);
    void set_allocator(std::shared_ptr<am_allocator> allocator);
    /// Fails waiting receives bound to `ep` (when it has nothing queued).
    void endpoint_failed(endpoint_impl* ep, const error_code& ec) noexcept override;

    /// Serves what arrived (the messages stage, queued by `mark` and the
    /// fetch completions): fetches rendezvous data, delivers messages.
    std::size_t run_deferred(deferred_stage) noexcept override;
    /// Calls detach().
    void release_worker_resource() noexcept override { detach(); }
    /// Gives back a message's memory and its state (owner thread).
    void release(am_message_state* s) noexcept;
    /// Messages queued for an id, and the bytes they hold.
    std::size_t queued_messages(unsigned id) const noexcept;
    std::size_t queued_bytes(unsigned id) const noexcept;
    /// The most bytes any id had queued at once.
    std::size_t peak_queued_bytes() const noexcept { return peak_bytes_; }
    std::size_t max_header() const noexcept { return max_header_; }
    worker_impl* worker() const noexcept { return worker_; }
    bool closed() const noexcept { return worker_ == nullptr; }
    const worker_impl::executor_type& executor() const noexcept { return executor_; }

    static ucs_status_t on_message(void* arg, const void* header, std::size_t header_length,
                                   void* data, std::size_t length,
                                   const ucp_am_recv_param_t* param) noexcept;
    static void on_fetched(void* request, ucs_status_t status, std::size_t length,
                           void* user_data) noexcept;

private:
    struct id_state {
        am_message_state* head = nullptr;
        am_message_state* tail = nullptr;
        std::size_t messages = 0;
        std::size_t bytes = 0;
        std::vector<am_recv_op*> waiting;
        std::shared_ptr<am_handler> handler;
        ucx::memory_type mem = memory_type::host;
        bool dirty = false;
    };
    /// Ids with a push handler.
    std::size_t handlers_ = 0;
    struct slot {
        am_registry* registry;
        unsigned id;
    };

    /// The state of `id`, made the first time (throws std::bad_alloc).
    id_state& state_of(unsigned id) {
        if (id < ids_.size() && ids_[id]) [[likely]]
            return *ids_[id];
        return make_state_of(id);
    }
    id_state& make_state_of(unsigned id);
    /// The state of `id`, or null if it was never used.
    id_state* find_state(unsigned id) const noexcept {
        return id < ids_.size() ? ids_[id].get() : nullptr;
    }
    void mark(id_state& s, unsigned id);
    am_message_state* make_state();
    void pump(id_state& s);
    std::size_t drain() noexcept;
    void fetch(id_state& s, am_message_state* m) noexcept;
    /// Fetches `m` (rendezvous descriptor `desc`) into its device buffer
    /// through `staging`; false when it does not take it.
    bool fetch_staged(device_staging& staging, am_message_state* m, void* desc) noexcept;
    /// A staged fetch ended (on the executor, once its copies finished).
    void staged_fetched(am_message_state* m, const error_code& ec) noexcept;
    bool deliver_one(id_state& s);
    /// Gives `m` to the receive waiting at `index` of `s` and queues it for
    /// delivery (from UCX's callback or after progress).
    void hand_over(id_state& s, std::size_t index, am_message_state* m) noexcept;
    void unlink(id_state& s, am_message_state* m, am_message_state* prev) noexcept;
    void uncount(id_state& s, am_message_state* m) noexcept;
    static void cancel_recv(operation* op, boost::asio::cancellation_type) noexcept;

    worker_impl* worker_;
    /// The worker's control channel: every message looks up its sender there.
    control_channel* channel_;
    worker_impl::executor_type executor_;
    std::size_t bound_;
    std::size_t max_header_ = 0;
    std::unique_ptr<slot[]> slots_;
    /// The ids' states, indexed by id (a message's id is looked up twice per
    /// message: an index, not a search), made when an id is first used; the
    /// table grows to the largest id used (at most am_max_id + 1 entries).
    std::vector<std::unique_ptr<id_state>> ids_;
    std::vector<unsigned> dirty_;
    std::vector<am_message_state*> fetched_;
    /// Released states kept for reuse (at most `max_pooled_states`), linked
    /// through `next`.
    am_message_state* free_ = nullptr;
    std::size_t free_count_ = 0;
    am_message_state* live_ = nullptr;
    std::shared_ptr<am_allocator> allocators_[3];
    /// Eager data UCX could not leave with the message (received without
    /// UCP_AM_RECV_ATTR_FLAG_DATA) is copied here (owner thread).
    pooled_host_allocator copies_;
    std::size_t fetches_in_flight_ = 0;
    std::size_t peak_bytes_ = 0;
};

/// The active-message registry of `w`: null without the AM feature, or once
/// the worker closed.
inline am_registry* am_of(const worker_impl& w) noexcept {
    am_registry* am = find_service<am_registry>(w);
    return am && !am->closed() ? am : nullptr;
}
/// Opens the active-message registry of `w` (its control channel is open);
/// none when UCX refuses.
void open_am_registry(worker_impl& w);

} // namespace ucx::detail
