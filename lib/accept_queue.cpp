#include <ucx/error.hpp>

#include "accept_queue.hpp"
#include "endpoint_impl.hpp"
#include "worker_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>

namespace ucx::detail {

void accept_queue::accept(operation* op, bool open) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &accept_queue::cancel;
    op->hook_context = this;
    if (!open)
        return w.fail(op, boost::asio::error::bad_descriptor);
    if (!ready_.empty()) {
        op->payload = std::move(ready_.front());
        ready_.pop_front();
        op->status = UCS_OK;
        w.finished(op); // delivered by the next pass, never inside this call
        w.request_progress();
        return;
    }
    try {
        accepts_.push_back(op);
    } catch (...) {
        w.fail(op, make_error_code(error::allocation_failed));
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
    operation* op = accepts_.front();
    accepts_.pop_front();
    op->payload = std::move(ep);
    op->status = UCS_OK;
    worker_->finished(op);
    worker_->request_progress();
    return true;
}

void accept_queue::cancel(operation* op) noexcept {
    auto* self = static_cast<accept_queue*>(op->hook_context);
    auto it = std::find(self->accepts_.begin(), self->accepts_.end(), op);
    if (it == self->accepts_.end())
        return;
    self->accepts_.erase(it);
    self->worker_->fail(op, boost::asio::error::operation_aborted);
}

void accept_queue::close() noexcept {
    ready_.clear();
    auto accepts = std::move(accepts_);
    accepts_.clear();
    for (operation* op : accepts)
        worker_->fail(op, boost::asio::error::operation_aborted);
}

void accept_queue::clear() noexcept {
    accepts_.clear();
    ready_.clear();
}

} // namespace ucx::detail
