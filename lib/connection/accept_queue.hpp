// Internal: the accept side shared by the listener and the address acceptor.
#pragma once

#include <ucx/detail/operation.hpp>

#include <cstddef>
#include <deque>
#include <memory>

namespace ucx::detail {

class endpoint_impl;
class worker_impl;

/// Connections ready to be accepted and the accepts waiting for one (never
/// both at once), on the owner thread.
class accept_queue {
public:
    explicit accept_queue(worker_impl& w) noexcept : worker_(&w) {}
    accept_queue(const accept_queue&) = delete;
    accept_queue& operator=(const accept_queue&) = delete;

    /// Starts accept `op`: completes it with a ready connection (delivered by
    /// the next pass, never inside this call), or keeps it waiting; fails it
    /// with `bad_descriptor` when the acceptor is not `open`. Cancellable.
    void accept(endpoint_op* op, bool open) noexcept;
    /// A connection whose handshake is done: to the oldest waiting accept,
    /// else kept. False when it could not be kept.
    bool offer(std::shared_ptr<endpoint_impl> ep) noexcept;
    /// Connections waiting for an accept.
    std::size_t ready() const noexcept { return ready_.size(); }
    /// Drops the ready connections (force-closes them: the connectors see a
    /// reset) and aborts the waiting accepts.
    void close() noexcept;
    /// Forgets both (the worker shuts down: it ends the accepts itself).
    void clear() noexcept;

private:
    static void cancel(operation* op, boost::asio::cancellation_type) noexcept;

    worker_impl* worker_;
    std::deque<std::shared_ptr<endpoint_impl>> ready_;
    std::deque<endpoint_op*> accepts_;
};

} // namespace ucx::detail
