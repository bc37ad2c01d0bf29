#include <ucx/error.hpp>

#include "connection/accept_queue.hpp"
#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>

namespace ucx::detail {

void accept_queue::accept(endpoint_op* op, bool open) noexcept {
    worker_impl& w = *worker_;
    // Waits for a peer's initiative: no reason for a poll worker to spin.
    op->background = true;
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &accept_queue::cancel;
    op->cancel_context = this;
    if (!open)
        return w.complete(op, boost::asio::error::bad_descriptor);
    if (!ready_.empty()) {
        op->subject = std::move(ready_.front());
        ready_.pop_front();
        return w.complete(op, error_code()); // delivered by a later pass
    }
    try {
        accepts_.push_back(op);
    } catch (...) {
        w.complete(op, make_error_code(error::allocation_failed));
    }
}

bool accept_queue::offer(std::shared_ptr<endpoint_impl> ep) noexcept {
    if (accepts_.empty()) {
        try {
            ready_.push_back(std::move(ep));
        } catch (...) {
            return false;
        }
        return true;
    }
    endpoint_op* op = accepts_.front();
    accepts_.pop_front();
    op->subject = std::move(ep);
    worker_->complete(op, error_code());
    return true;
}

void accept_queue::cancel(operation* op, boost::asio::cancellation_type) noexcept {
    auto* self = static_cast<accept_queue*>(op->cancel_context);
    auto it =
        std::find(self->accepts_.begin(), self->accepts_.end(), static_cast<endpoint_op*>(op));
    if (it == self->accepts_.end())
        return;
    self->accepts_.erase(it);
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void accept_queue::close() noexcept {
    ready_.clear();
    auto accepts = std::move(accepts_);
    accepts_.clear();
    for (endpoint_op* op : accepts)
        worker_->complete(op, boost::asio::error::operation_aborted);
}

void accept_queue::clear() noexcept {
    accepts_.clear();
    ready_.clear();
}

} // namespace ucx::detail
