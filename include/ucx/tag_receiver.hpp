// ucx::tag_receiver: tag receives that stay posted, handed out in batches.
#pragma once

#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/error.hpp>
#include <ucx/tag_type.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/system/system_error.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <tuple>
#include <utility>

namespace ucx {

/// The receives a `tag_receiver` keeps posted.
struct tag_receiver_options {
    /// How many receives UCX holds at a time (1 to 65,536): as many messages
    /// as may arrive before the next batch is taken without waiting in UCX's
    /// queue of unexpected messages (where UCX copies them once more).
    std::size_t slots = 64;
    /// The largest message a receive takes, in bytes (at least 1; slots of
    /// 64-byte multiples). A longer message fills its slot with
    /// `errc::message_truncated` and no data.
    std::size_t slot_size = 8192;
};

/// One message of a `tag_batch`.
struct tag_message {
    /// The message, in the receiver's memory: valid while its batch lives.
    boost::asio::const_buffer data;
    /// The sender's tag.
    tag_t tag = 0;
    /// Empty, or why this message has no data: `errc::message_truncated`
    /// (longer than `tag_receiver_options::slot_size`), or UCX's failure to
    /// receive it.
    error_code error;
};

namespace detail {

class tag_receiver_impl;

/// A receiver's slots, as its batches read them (filled by the receiver
/// when a slot's receive completes).
struct tag_slot_result {
    std::size_t length = 0;
    tag_t tag = 0;
    /// The next slot of the same batch.
    std::uint32_t next = 0;
    /// UCX's status for the receive (UCS_OK, or the failure).
    std::int32_t status = 0;
};
struct tag_slot_table {
    const std::byte* data = nullptr;
    std::size_t stride = 0;
    const tag_slot_result* slots = nullptr;
};

// lib/messaging/tag_receiver.cpp.
std::shared_ptr<tag_receiver_impl> make_tag_receiver(const std::shared_ptr<worker_impl>& w,
                                                     tag_t tag, tag_t mask,
                                                     const tag_receiver_options& o);
worker_core& core_of(const tag_receiver_impl& r) noexcept;
void tag_receiver_receive(tag_receiver_impl& r, tag_batch_op* op) noexcept;
void tag_receiver_cancel(tag_receiver_impl& r) noexcept;
void tag_receiver_close(tag_receiver_impl& r) noexcept;
bool tag_receiver_is_open(const tag_receiver_impl& r) noexcept;
std::size_t tag_receiver_slots(const tag_receiver_impl& r) noexcept;
const tag_slot_table& tag_receiver_table(const tag_receiver_impl& r) noexcept;
/// Posts the `count` slots chained from `first` again.
void tag_receiver_release(tag_receiver_impl& r, std::uint32_t first, std::size_t count) noexcept;
/// The error of a failed slot's UCX status.
error_code tag_slot_error(std::int32_t status) noexcept;

/// The message in `slot`.
inline tag_message tag_slot_message(const tag_slot_table& t, std::uint32_t slot) noexcept {
    const tag_slot_result& r = t.slots[slot];
    if (r.status == 0) [[likely]]
        return {boost::asio::const_buffer(t.data + slot * t.stride, r.length), r.tag, error_code()};
    return {boost::asio::const_buffer(), r.tag, tag_slot_error(r.status)};
}

struct tag_batch_result;

} // namespace detail

/// Messages a `tag_receiver` handed out, in the order their receives
/// completed. Move-only. While it lives, the slots holding its messages are
/// not posted; destroying it (or `release()`) posts them again. Destroy it,
/// like the receiver, on the worker's executor.
class tag_batch {
public:
    /// Iterates the messages (a forward iterator whose values are
    /// `tag_message`s, computed on access).
    class iterator {
    public:
        // Its values are made on access (no reference into the batch): a
        // forward iterator in C++20's terms, an input iterator in the older.
        using iterator_concept = std::forward_iterator_tag;
        using iterator_category = std::input_iterator_tag;
        using value_type = tag_message;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = tag_message;

        iterator() noexcept = default;
        tag_message operator*() const noexcept { return detail::tag_slot_message(*table_, slot_); }
        iterator& operator++() noexcept {
            slot_ = table_->slots[slot_].next;
            --left_;
            return *this;
        }
        iterator operator++(int) noexcept {
            iterator old = *this;
            ++*this;
            return old;
        }
        friend bool operator==(const iterator& a, const iterator& b) noexcept {
            return a.left_ == b.left_;
        }

    private:
        friend class tag_batch;
        iterator(const detail::tag_slot_table* t, std::uint32_t slot, std::size_t left) noexcept
            : table_(t), slot_(slot), left_(left) {}
        const detail::tag_slot_table* table_ = nullptr;
        std::uint32_t slot_ = 0;
        std::size_t left_ = 0;
    };

    tag_batch() noexcept = default;
    tag_batch(tag_batch&& other) noexcept
        : owner_(std::move(other.owner_)), first_(other.first_),
          count_(std::exchange(other.count_, 0)) {}
    tag_batch& operator=(tag_batch&& other) noexcept {
        if (this != &other) {
            release();
            owner_ = std::move(other.owner_);
            first_ = other.first_;
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    tag_batch(const tag_batch&) = delete;
    tag_batch& operator=(const tag_batch&) = delete;
    ~tag_batch() { release(); }

    /// How many messages.
    std::size_t size() const noexcept { return count_; }
    bool empty() const noexcept { return count_ == 0; }
    iterator begin() const noexcept {
        return count_ == 0 ? iterator() : iterator(table(), first_, count_);
    }
    iterator end() const noexcept { return iterator(); }

    /// Gives the slots back to the receiver, which posts them again (unless
    /// it was closed); the batch is empty after. Its messages' data must not
    /// be used any more.
    void release() noexcept {
        if (count_ != 0)
            detail::tag_receiver_release(*owner_, first_, std::exchange(count_, 0));
        owner_.reset();
    }

private:
    friend struct detail::tag_batch_result;
    tag_batch(std::shared_ptr<detail::tag_receiver_impl> owner, std::uint32_t first,
              std::size_t count) noexcept
        : owner_(std::move(owner)), first_(first), count_(count) {}
    const detail::tag_slot_table* table() const noexcept {
        return &detail::tag_receiver_table(*owner_);
    }

    std::shared_ptr<detail::tag_receiver_impl> owner_;
    std::uint32_t first_ = 0;
    std::size_t count_ = 0;
};

namespace detail {
/// `void(error_code, tag_batch)`.
struct tag_batch_result {
    using op_type = tag_batch_op;
    static std::tuple<error_code, tag_batch> extract(const error_code& ec, tag_batch_op& op) {
        if (ec)
            return {ec, tag_batch()};
        return {ec, tag_batch(std::move(op.owner), op.first, op.count)};
    }
};
} // namespace detail

/// Tag receives for the messages whose tag matches `tag` under `mask`
/// (`(sender_tag & mask) == (tag & mask)`), from any endpoint of a worker,
/// that stay posted: the receiver keeps `slots` receives with UCX, each into
/// a slot of its own memory, and hands out what arrived as a `tag_batch` per
/// `async_receive`. One initiation and one handler serve every message that
/// arrived since the last one, and a message finds its receive posted
/// without waiting for a handler, which is what a high message rate needs;
/// `async_tag_recv` remains the way to receive into memory of one's own.
///
/// A message matching both a receiver and another receive (another
/// receiver, `async_tag_recv`) goes to the one UCX posted first. Messages a
/// receiver holds (received, not yet handed out) are dropped when it
/// closes.
///
/// Like the worker, a receiver is used from the worker's executor: its
/// constructor, destructor, `cancel` and `close` run there;
/// `async_receive` may be started from anywhere.
class tag_receiver {
public:
    using executor_type = worker::executor_type;

    /// Posts `options.slots` receives on `w`. Throws `boost::system::system_error`:
    /// `asio::error::invalid_argument` (slots or slot_size out of range),
    /// `asio::error::bad_descriptor` (the worker was moved from or is closed),
    /// `ucx::error::allocation_failed` (no memory for the slots). A receive
    /// UCX refuses to post shows as a message with UCX's error in the first
    /// batch (posted again when that batch is released).
    tag_receiver(worker& w, tag_t tag, tag_t mask, const tag_receiver_options& options = {})
        : impl_(detail::make_tag_receiver(detail::checked(w), tag, mask, options)) {}

    tag_receiver(tag_receiver&&) noexcept = default;
    tag_receiver& operator=(tag_receiver&& other) noexcept {
        if (this != &other) {
            close();
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    tag_receiver(const tag_receiver&) = delete;
    tag_receiver& operator=(const tag_receiver&) = delete;
    /// Closes the receiver (see `close`).
    ~tag_receiver() { close(); }

    executor_type get_executor() const noexcept {
        return executor_type(impl_ ? detail::core_of(*impl_).get_executor()
                                   : boost::asio::any_io_executor());
    }

    /// Open: not closed, not moved from, and its worker open.
    bool is_open() const noexcept { return impl_ && detail::tag_receiver_is_open(*impl_); }
    /// The receives it keeps posted (`tag_receiver_options::slots`).
    std::size_t slots() const noexcept { return impl_ ? detail::tag_receiver_slots(*impl_) : 0; }

    /// Takes the messages that arrived since the last batch (at least one:
    /// waits for one if none did), in the order their receives completed.
    ///
    /// Completion signature: `void(error_code ec, tag_batch messages)`. The
    /// handler never runs inside this call. One `async_receive` at a time.
    ///
    /// Errors: `asio::error::operation_aborted` (cancelled, or the receiver
    /// or its worker closed while it waited), `asio::error::bad_descriptor`
    /// (the receiver is closed), `asio::error::already_started` (another
    /// `async_receive` is waiting). Cancellation: `terminal`, `partial` and
    /// `total` through the handler's cancellation slot (nothing is lost: the
    /// messages stay for the next batch). In the worker's metrics a batch
    /// counts as one `tag_recv` operation with the bytes of its messages.
    ///
    /// Throws `boost::system::system_error` if the receiver was moved from.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_receive(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code, tag_batch), detail::tag_batch_result>(
            checked_impl(), std::forward<CompletionToken>(token),
            [](detail::tag_receiver_impl& r, detail::tag_batch_op* op) {
                detail::tag_receiver_receive(r, op);
            });
    }

    /// A waiting `async_receive` completes with `asio::error::operation_aborted`.
    void cancel() noexcept {
        if (impl_)
            detail::tag_receiver_cancel(*impl_);
    }

    /// Cancels the receives UCX holds and a waiting `async_receive`
    /// (`operation_aborted`); messages received but not handed out are
    /// dropped. Batches already handed out stay valid. Idempotent.
    void close() noexcept {
        if (impl_)
            detail::tag_receiver_close(*impl_);
    }

private:
    const std::shared_ptr<detail::tag_receiver_impl>& checked_impl() const {
        if (!impl_)
            throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                              "ucx::tag_receiver: moved-from receiver");
        return impl_;
    }

    std::shared_ptr<detail::tag_receiver_impl> impl_;
};

} // namespace ucx
