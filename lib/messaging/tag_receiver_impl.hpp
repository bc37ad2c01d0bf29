// Internal: the state behind ucx::tag_receiver.
//
// `slots` tag receives into one block of memory, a slot each, posted with the
// worker's own UCX requests (a slot keeps its request for its whole life:
// posting again takes nothing from a pool). UCX's callback only records the
// slot's result and appends the slot to the list of completed slots (chained
// through the slot table's `next`), and queues the receiver for the
// `messages` stage after the progress call when an async_receive waits; the
// stage hands the whole list to it as one batch, completed through the
// worker like any operation. A batch owns its chain of slots until it is
// released, which posts them again: no slot is in two places, so batches
// may be released in any order.
//
// UCX calls back every receive it holds, also a cancelled one
// (`ucp_request_cancel` on a receive not yet matched calls back at once,
// with UCS_ERR_CANCELED). Closing cancels them; until the last callback the
// receiver keeps itself alive, and the worker counts the ones still held
// as its internal requests, so its shutdown waits for them.
#pragma once

#include <ucx/tag_receiver.hpp>

#include "engine/worker_component.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ucx::detail {

class worker_impl;

class tag_receiver_impl final : public worker_component,
                                public std::enable_shared_from_this<tag_receiver_impl> {
public:
    /// Most slots a receiver keeps.
    static constexpr std::size_t max_slots = 65536;

    tag_receiver_impl(std::shared_ptr<worker_impl> w, tag_t tag, tag_t mask) noexcept;
    ~tag_receiver_impl();
    tag_receiver_impl(const tag_receiver_impl&) = delete;
    tag_receiver_impl& operator=(const tag_receiver_impl&) = delete;

    /// Allocates the slots and posts them (owner thread).
    void open(const tag_receiver_options& o, error_code& ec) noexcept;
    bool is_open() const noexcept;
    std::size_t slots() const noexcept { return slots_.size(); }
    const tag_slot_table& table() const noexcept { return table_; }
    worker_impl& worker() const noexcept { return *worker_; }

    // Owner thread.
    void receive(tag_batch_op* op) noexcept;
    void cancel() noexcept;
    void close() noexcept;
    /// Posts again the `count` slots chained from `first` (a released batch).
    void release(std::uint32_t first, std::size_t count) noexcept;

    // worker_component.
    void shutdown() noexcept override;
    bool keeps_worker_running() const noexcept override { return false; }
    std::size_t run_deferred(deferred_stage stage) noexcept override;

private:
    struct slot {
        tag_receiver_impl* owner = nullptr;
        /// The request memory UCX keeps the receive in (the worker's own),
        /// or null: UCX's pool then, freed after the callback.
        void* own_request = nullptr;
        void* ucx_request = nullptr;
        bool posted = false;
        /// What every post of the slot gives UCX (built once, at open):
        /// the callback, the slot, its request memory, no completion inside
        /// the call.
        ucp_request_param_t param{};
    };

    static void on_received(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                            void* user_data) noexcept;
    static void cancel_waiting(operation* op, boost::asio::cancellation_type) noexcept;
    /// Posts slot `i`; a refusal completes it with UCX's status.
    void post(std::uint32_t i) noexcept;
    /// Slot `i`'s receive ended with `status`.
    void ended(std::uint32_t i, ucs_status_t status, std::size_t length, tag_t tag) noexcept;
    /// UCX called back a receive after close.
    [[gnu::noinline]] void called_back_closed() noexcept;
    /// Hands the completed slots to the waiting receive.
    void hand_out() noexcept;
    /// Queues the hand-out for after the progress call (out of line: once
    /// per batch, not per message).
    [[gnu::noinline]] void queue_hand_out() noexcept;
    /// Gives the slots' request memory back (none posted).
    void free_requests() noexcept;

    std::shared_ptr<worker_impl> worker_;
    tag_t tag_;
    tag_t mask_;
    bool open_ = false;
    std::unique_ptr<std::byte[]> memory_;
    std::size_t slot_size_ = 0;
    std::vector<slot> slots_;
    std::vector<tag_slot_result> results_;
    tag_slot_table table_{};
    /// Completed slots not handed out: a chain through `results_[].next`.
    std::uint32_t ready_first_ = 0;
    std::uint32_t ready_last_ = 0;
    std::uint32_t ready_count_ = 0;
    std::size_t ready_bytes_ = 0;
    /// Receives UCX holds.
    std::size_t posted_ = 0;
    /// Of those, the ones the worker counts (after close).
    std::size_t counted_ = 0;
    tag_batch_op* waiting_ = nullptr;
    /// Alive until UCX called back every receive (after close).
    std::shared_ptr<tag_receiver_impl> self_;
};

} // namespace ucx::detail
