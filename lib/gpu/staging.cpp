#include "gpu/staging.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace ucx::detail {

void staging_operation::transfer_completion::operator()(const error_code& ec, std::size_t bytes) {
    // The operation stays alive through the call even if this callback is
    // destroyed by what it triggers.
    std::shared_ptr<staging_operation> op = std::move(op_);
    if (op)
        op->on_transfer_done(chunk_, ec, bytes);
}

std::shared_ptr<staging_operation>
staging_operation::create(executor_type ex, const staging_config& config, void* device,
                          std::shared_ptr<copy_engine> engine, std::shared_ptr<pinned_pool> pool,
                          transfer_function transfer, options opts) {
    return std::make_shared<staging_operation>(private_tag{}, std::move(ex), config, device,
                                               std::move(engine), std::move(pool),
                                               std::move(transfer), opts);
}

staging_operation::staging_operation(private_tag, executor_type ex, const staging_config& config,
                                     void* device, std::shared_ptr<copy_engine> engine,
                                     std::shared_ptr<pinned_pool> pool, transfer_function transfer,
                                     options opts)
    : ex_(std::move(ex)), config_(config), device_(static_cast<char*>(device)),
      engine_(std::move(engine)), pool_(std::move(pool)), transfer_(std::move(transfer)),
      options_(opts), timer_(ex_) {}

staging_operation::~staging_operation() {
    for (copy_slot& c : copies_)
        if (c.active)
            engine_->abandon(c.handle);
    release_buffers();
}

void staging_operation::run(handler_type handler) {
    if (running_) {
        // Once per operation.
        boost::asio::post(ex_, boost::asio::append(std::move(handler),
                                                   error_code(boost::asio::error::already_started),
                                                   std::size_t(0)));
        return;
    }
    running_ = true;
    handler_.emplace(std::move(handler));
    auto slot = boost::asio::get_associated_cancellation_slot(*handler_);
    if (slot.is_connected()) {
        slot.assign([weak = weak_from_this()](boost::asio::cancellation_type) {
            if (auto self = weak.lock())
                self->cancel();
        });
    }
    if (cancelled_) {
        finish(boost::asio::error::operation_aborted, 0);
        return;
    }
    if (config_.mode == staging_mode::chunked) {
        // A chunk fills one pool buffer at most; as many slots as the pool lends.
        if (config_.chunk == 0 || config_.chunk > pool_->buffer_size())
            config_.chunk = pool_->buffer_size();
        const unsigned wanted = staging_plan(config_).config().slots;
        buffers_.reserve(wanted);
        for (unsigned s = 0; s < wanted && config_.total != 0; ++s) {
            void* b = pool_->acquire();
            if (!b)
                break;
            buffers_.push_back(b);
        }
        if (config_.total != 0 && buffers_.empty()) {
            finish(make_error_code(error::allocation_failed), 0);
            return;
        }
        config_.slots = std::max<unsigned>(1, static_cast<unsigned>(buffers_.size()));
    } else if (config_.total != 0) {
        contiguous_ = pool_->acquire_contiguous(config_.total);
        if (!contiguous_) {
            finish(make_error_code(error::allocation_failed), 0);
            return;
        }
    }
    plan_.emplace(config_);
    copies_.resize(plan_->config().slots);
    plan_->start();
    drive();
}

void staging_operation::cancel() {
    if (finished_)
        return;
    if (!running_) {
        cancelled_ = true;
        return;
    }
    plan_->cancel();
    drive();
}

char* staging_operation::staged(const staging_action& a) const noexcept {
    if (config_.mode == staging_mode::whole)
        return contiguous_ ? static_cast<char*>(contiguous_) + a.staging_offset : nullptr;
    return static_cast<char*>(buffers_[a.slot]);
}

void staging_operation::drive() {
    // A completion reported while the actions are executed (a transfer that
    // completes at once) is already in the plan: the loop below sees it.
    if (driving_ || finished_)
        return;
    driving_ = true;
    for (;;) {
        const staging_action a = plan_->next();
        switch (a.kind) {
        case staging_action_kind::none:
            driving_ = false;
            if (copies_in_flight_ != 0)
                arm_poll();
            return;
        case staging_action_kind::copy:
            start_copy(a);
            break;
        case staging_action_kind::transfer:
            start_transfer(a);
            break;
        case staging_action_kind::complete:
            driving_ = false;
            finish(a.ec, a.bytes);
            return;
        }
    }
}

void staging_operation::start_copy(const staging_action& a) {
    char* host = staged(a);
    char* device = device_ + a.offset;
    const bool to_host = a.direction == copy_direction::device_to_host;
    copy_handle h;
    const error_code ec =
        engine_->start(to_host ? static_cast<void*>(host) : device,
                       to_host ? static_cast<const void*>(device) : host, a.length, a.direction, h);
    if (ec) {
        plan_->copy_done(a.chunk, ec);
        return;
    }
    copies_[a.slot] = {true, a.chunk, h};
    ++copies_in_flight_;
    copy_event_ = std::chrono::steady_clock::now();
}

void staging_operation::start_transfer(const staging_action& a) {
    const bool whole = a.chunk == staging_plan::whole;
    const transfer_request req{a.chunk, whole ? contiguous_ : staged(a), a.length, a.offset, whole};
    try {
        transfer_(req, transfer_completion(shared_from_this(), a.chunk));
    } catch (...) {
        // Not started (or reported already: the plan refuses a second report).
        plan_->transfer_done(a.chunk, make_error_code(error::allocation_failed));
    }
}

void staging_operation::on_transfer_done(std::size_t chunk, const error_code& ec,
                                         std::size_t bytes) {
    if (finished_)
        return;
    plan_->transfer_done(chunk, ec, bytes);
    drive();
}

void staging_operation::arm_poll() {
    if (timer_armed_ || poll_posted_)
        return;
    // Both waits hold the operation: the staging memory stays while copies run.
    if (std::chrono::steady_clock::now() - copy_event_ < options_.spin) {
        poll_posted_ = true;
        boost::asio::post(ex_, [self = shared_from_this()] {
            self->poll_posted_ = false;
            self->on_poll();
        });
        return;
    }
    timer_armed_ = true;
    timer_.expires_after(options_.poll_period);
    timer_.async_wait([self = shared_from_this()](const error_code&) {
        self->timer_armed_ = false;
        ++self->timer_polls_;
        self->on_poll();
    });
}

void staging_operation::on_poll() {
    ++poll_rounds_;
    for (copy_slot& c : copies_) {
        if (!c.active)
            continue;
        error_code ec;
        if (!engine_->poll(c.handle, ec))
            continue;
        c.active = false;
        --copies_in_flight_;
        copy_event_ = std::chrono::steady_clock::now();
        plan_->copy_done(c.chunk, ec);
    }
    drive();
}

void staging_operation::release_buffers() noexcept {
    for (void* b : buffers_)
        pool_->release(b);
    buffers_.clear();
    if (contiguous_) {
        pool_->release_contiguous(contiguous_, config_.total);
        contiguous_ = nullptr;
    }
}

void staging_operation::finish(const error_code& ec, std::size_t bytes) {
    finished_ = true;
    // Nothing is in flight any more (the plan waited): the buffers go back
    // before the handler can run.
    release_buffers();
    handler_type handler = std::move(*handler_);
    handler_.reset();
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected())
        slot.clear();
    // Never inside async_run, and on the handler's own executor.
    boost::asio::post(ex_, boost::asio::append(std::move(handler), ec, bytes));
}

} // namespace ucx::detail
