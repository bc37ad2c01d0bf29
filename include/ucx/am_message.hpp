// ucx::am_message: one received active message.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/memory_type.hpp>

#include <boost/asio/buffer.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

namespace ucx {

namespace detail {
class am_registry;
struct am_message_state;
} // namespace detail

/// One received active message: its id, the sender's header, the data and
/// the endpoint to answer on.
///
/// The data is UCX's own receive buffer, kept without a copy (eager messages
/// that arrived in a transport's buffer), a copy (eager data a transport
/// delivered in place: in the message up to 64 bytes, in the worker's pool
/// above), or memory from the worker's receive allocator (rendezvous
/// messages); it is released when the message is destroyed. If the worker is
/// closed first, the message keeps a private copy of the host data, so a
/// message is always safe to read while it lives.
///
/// Move-only. Use it on the worker's executor; destroying it elsewhere is
/// allowed (the release is dispatched to the worker's executor).
class am_message {
public:
    /// An empty message (what a failed receive completes with).
    am_message() noexcept = default;
    am_message(am_message&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
    am_message& operator=(am_message&& other) noexcept {
        if (this != &other) {
            if (state_)
                give_back();
            state_ = std::exchange(other.state_, nullptr);
        }
        return *this;
    }
    // Inline: a message moves through a few handlers' arguments, and only the
    // last one holds it.
    ~am_message() {
        if (state_)
            give_back();
    }

    /// Whether this holds a message.
    explicit operator bool() const noexcept { return state_ != nullptr; }

    /// The id the sender chose.
    unsigned id() const noexcept;

    /// The sender's header (empty when none was sent). Host memory.
    std::span<const std::byte> header() const noexcept;

    /// The data. In host memory unless `memory_type()` says otherwise.
    boost::asio::const_buffer data() const noexcept;

    /// Bytes of data.
    std::size_t size() const noexcept;

    /// Where the data lives: host memory, or the memory type chosen for the
    /// id (`set_am_memory_type`) for messages that came by rendezvous.
    ucx::memory_type memory_type() const noexcept;

    /// Whether the data came by rendezvous (fetched from the sender) rather
    /// than eagerly with the message.
    bool rendezvous() const noexcept;

    /// Whether the sender allowed a reply (`am_send_options::reply`, the
    /// default).
    bool can_reply() const noexcept;

    /// The endpoint to answer the sender on: the connected endpoint of that
    /// peer when this worker has one, otherwise an endpoint on the
    /// connection UCX made for the sender (closing it does not disconnect).
    /// Fails with `ucx::error::no_reply_endpoint` when the sender did not allow
    /// replies, and with the endpoint's error once that peer went away.
    /// Call it on the worker's executor (in a handler, say): it looks at the
    /// worker's endpoints.
    endpoint reply_endpoint(error_code& ec) const;
    /// As above; throws `boost::system::system_error`.
    endpoint reply_endpoint() const;

private:
    friend struct detail::access;

    /// Takes ownership of a received message.
    explicit am_message(detail::am_message_state* state) noexcept : state_(state) {}

    /// Releases the held message (`state_` is not null) and empties this.
    void give_back() noexcept;

    // The state knows its registry. While the worker is open the worker
    // keeps the registry alive; when it closes, every message still held
    // takes a reference of its own (no reference counting per message).
    detail::am_message_state* state_ = nullptr;
};

} // namespace ucx
