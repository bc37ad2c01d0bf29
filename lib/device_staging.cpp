#include "device_staging.hpp"

#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/log.hpp>

#include "context_impl.hpp"
#include "endpoint_impl.hpp"
#include "worker_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <optional>
#include <utility>

namespace ucx::detail {

/// One staged operation.
struct device_staging::entry {
    /// The user's operation (a receive's is also `recv`); null once it was
    /// completed or the worker shut down.
    transfer_op* op = nullptr;
    tag_recv_op* recv = nullptr;
    std::shared_ptr<staging_operation> run;
    /// The internal UCX operation while it is in flight.
    operation* transfer = nullptr;
    bool transfer_started = false;
    ucp_tag_t sender_tag = 0;
    /// A send: its endpoint's queue holds it until it has gone to UCX, and
    /// `submit` hands it over once it may go (staged: copied; direct: at
    /// once) and its turn has come.
    const endpoint_impl* ordered = nullptr;
    std::function<void()> submit;
};

namespace {

using completion = staging_operation::transfer_completion;

/// Creates an internal operation of kind `Result::op_type` whose completion
/// reports to the staged operation, and returns it.
template <class Result, class Handler>
typename Result::op_type* internal_op(worker_impl& w, Handler&& h) {
    using op_type = handler_operation<std::decay_t<Handler>, worker_core::executor_type, Result>;
    return op_type::create(std::forward<Handler>(h), w.get_executor());
}

} // namespace

device_staging::device_staging(worker_impl& w, classifier classify,
                               std::shared_ptr<copy_engine> engine, settings s)
    : worker_component(component_kind::service), worker_(&w), classify_(std::move(classify)),
      engine_(std::move(engine)), settings_(s) {
    if (!classify_)
        classify_ = [](const void* p) { return detect_memory_type(p); };
    worker_->add_component(*this);
    attached_ = true;
}

device_staging::~device_staging() {
    if (attached_)
        worker_->remove_component(*this);
}

bool device_staging::ready(error_code& ec) noexcept {
    try {
        if (!engine_) {
            engine_ = make_cuda_copy_engine(ec);
            if (!engine_)
                return false;
        }
        if (!pool_)
            pool_ = std::make_shared<pinned_pool>(settings_.chunk, settings_.max_buffers);
    } catch (const std::bad_alloc&) {
        ec = make_error_code(error::allocation_failed);
        return false;
    }
    return true;
}

void device_staging::stage(operation* op, tag_recv_op* recv, staging_direction direction,
                           void* device, std::size_t size, submit_fn submit,
                           endpoint_impl* ordered) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    if (!w.is_open() || op->cancel_requested)
        return w.complete(op, boost::asio::error::operation_aborted);
    error_code ec;
    if (!ready(ec)) {
        log::write(log::severity::warning,
                   "device buffer: no copy engine for staging: " + ec.message());
        return w.complete(op, ec);
    }
    try {
        auto e = std::make_shared<entry>();
        e->op = static_cast<transfer_op*>(op);
        e->recv = recv;
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = direction;
        // A tag message stays one UCX message, for any peer.
        config.mode = staging_mode::whole;
        std::weak_ptr<entry> weak = e;
        e->ordered = ordered;
        e->run = staging_operation::create(
            w.get_executor(), config, device, engine_, pool_,
            [this, weak, submit = std::move(submit)](const staging_operation::transfer_request& r,
                                                     completion done) {
                const auto e = weak.lock();
                if (!e)
                    return done(boost::asio::error::operation_aborted, 0);
                e->transfer_started = true;
                if (!e->ordered)
                    return submit(*e, r.data, r.length, std::move(done));
                // A send goes to UCX in its turn on its endpoint.
                e->submit = [e = e.get(), submit, data = r.data, n = r.length,
                             done = std::move(done)]() mutable {
                    submit(*e, data, n, std::move(done));
                };
                pump(e->ordered);
            });
        entries_.push_back(e);
        if (ordered)
            send_queues_[ordered].push_back(e);
        op->cancel_hook = &device_staging::cancel_hook;
        op->cancel_context = e.get();
        e->run->async_run([this_weak = weak, self = this](const error_code& ec, std::size_t n) {
            if (const auto e = this_weak.lock())
                self->done(e, ec, n);
        });
    } catch (const std::exception&) {
        w.complete(op, make_error_code(error::allocation_failed));
    }
}

void device_staging::queue_direct(endpoint_impl& ep, transfer_op* op,
                                  std::function<void()> submit) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    if (!w.is_open())
        return w.complete(op, boost::asio::error::operation_aborted);
    try {
        auto e = std::make_shared<entry>();
        e->op = op;
        e->ordered = &ep;
        e->transfer_started = true; // not cancellable, as a direct send
        e->submit = [this, e = e.get(), submit = std::move(submit)] {
            // From here on it is an ordinary send of the endpoint.
            if (transfer_op* op = std::exchange(e->op, nullptr)) {
                op->library_owned = false;
                op->cancel_hook = nullptr;
                op->cancel_context = nullptr;
                std::erase_if(entries_, [e](const auto& p) { return p.get() == e; });
                submit();
            }
        };
        entries_.push_back(e);
        send_queues_[&ep].push_back(std::move(e));
        pump(&ep);
    } catch (const std::exception&) {
        w.complete(op, make_error_code(error::allocation_failed));
    }
}

void device_staging::pump(const endpoint_impl* ep) noexcept {
    const auto it = send_queues_.find(ep);
    if (it == send_queues_.end())
        return;
    // Taken out first: a submission may queue another send on `ep`.
    while (!it->second.empty() && it->second.front()->submit) {
        const std::shared_ptr<entry> e = std::move(it->second.front());
        it->second.pop_front();
        std::function<void()> submit = std::move(e->submit);
        e->submit = nullptr;
        e->ordered = nullptr;
        submit();
    }
    if (it->second.empty())
        send_queues_.erase(it);
}

void device_staging::done(const std::shared_ptr<entry>& e, const error_code& ec,
                          std::size_t bytes) noexcept {
    std::erase(entries_, e);
    if (const endpoint_impl* ep = std::exchange(e->ordered, nullptr)) {
        // Failed or cancelled before it went to UCX: the sends behind it go on.
        if (const auto it = send_queues_.find(ep); it != send_queues_.end())
            std::erase(it->second, e);
        pump(ep);
    }
    transfer_op* op = std::exchange(e->op, nullptr);
    if (!op)
        return;
    op->cancel_hook = nullptr;
    op->cancel_context = nullptr;
    op->bytes = bytes;
    if (e->recv)
        e->recv->sender_tag = e->sender_tag;
    ++staged_;
    staged_bytes_ += ec ? 0 : bytes;
    worker_->complete(op, ec);
}

void device_staging::cancel_hook(operation* op) {
    auto* e = static_cast<entry*>(op->cancel_context);
    if (!e)
        return;
    if (e->recv) {
        // Only the receive itself is cancelled: once UCX has matched a
        // message, its bytes are delivered (copied to the device), never
        // dropped by a cancellation that came too late.
        if (e->transfer)
            op->owner->cancel(e->transfer);
        return;
    }
    // A send is cancelled only before its message went to UCX (while its
    // bytes are still copied from the device): once sent, it completes.
    if (!e->transfer_started)
        e->run->cancel();
}

bool device_staging::send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                          std::uint64_t tag, send_fn submit) noexcept {
    if (!must_stage(data)) {
        if (!send_queues_.contains(&ep))
            return false;
        queue_direct(ep, op, [keep = ep.shared_from_this(), op, data, size, tag, submit] {
            submit(*keep, op, data, size, tag);
        });
        return true;
    }
    stage(
        op, nullptr, staging_direction::outgoing, const_cast<void*>(data), size,
        [keep = ep.shared_from_this(), tag, submit](entry& e, void* host, std::size_t n,
                                                    completion done) {
            auto* t = internal_op<bytes_result<>>(
                *keep->worker(),
                [&e, done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
                    e.transfer = nullptr;
                    done(ec, bytes);
                });
            e.transfer = t;
            submit(*keep, t, host, n, tag);
        },
        &ep);
    return true;
}

bool device_staging::recv(tag_recv_op* op, void* data, std::size_t size,
                          std::function<void(tag_recv_op*, void*, std::size_t)> submit) noexcept {
    if (!must_stage(data))
        return false;
    stage(
        op, op, staging_direction::incoming, data, size,
        [this, submit = std::move(submit)](entry& e, void* host, std::size_t n, completion done) {
            auto* t = internal_op<tag_recv_result>(
                *worker_, [&e, done = std::move(done)](const error_code& ec, std::size_t bytes,
                                                       tag_t sender) mutable {
                    e.transfer = nullptr;
                    e.sender_tag = sender;
                    done(ec, bytes);
                });
            e.transfer = t;
            submit(t, host, n);
        },
        nullptr);
    return true;
}

bool device_staging::tag_send(endpoint_impl& ep, transfer_op* op, const void* data,
                              std::size_t size, ucp_tag_t tag) noexcept {
    return send(ep, op, data, size, tag,
                [](endpoint_impl& e, transfer_op* t, const void* p, std::size_t n,
                   std::uint64_t tag) { e.tag_send(t, p, n, tag); });
}

bool device_staging::endpoint_send(endpoint_impl& ep, transfer_op* op, const void* data,
                                   std::size_t size, std::uint32_t tag) noexcept {
    return send(ep, op, data, size, tag,
                [](endpoint_impl& e, transfer_op* t, const void* p, std::size_t n,
                   std::uint64_t tag) { e.send(t, p, n, static_cast<std::uint32_t>(tag)); });
}

bool device_staging::tag_recv(tag_recv_op* op, void* data, std::size_t size, ucp_tag_t tag,
                              ucp_tag_t mask) noexcept {
    return recv(op, data, size, [this, tag, mask](tag_recv_op* t, void* p, std::size_t n) {
        worker_->tag_recv(t, p, n, tag, mask);
    });
}

bool device_staging::endpoint_recv(endpoint_impl& ep, tag_recv_op* op, void* data, std::size_t size,
                                   std::uint32_t tag, std::uint32_t mask) noexcept {
    return recv(op, data, size,
                [keep = ep.shared_from_this(), tag, mask](tag_recv_op* t, void* p, std::size_t n) {
                    keep->recv(t, p, n, tag, mask);
                });
}

void device_staging::copy_through(staging_direction direction, void* device, std::size_t size,
                                  buffer_step step,
                                  std::function<void(const error_code&)> handler) noexcept {
    worker_impl& w = *worker_;
    auto fail = [&w, &handler](const error_code& ec) {
        boost::asio::post(w.get_executor(), [h = std::move(handler), ec] { h(ec); });
    };
    error_code ec;
    if (!w.is_open())
        return fail(boost::asio::error::operation_aborted);
    if (!ready(ec))
        return fail(ec);
    try {
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = direction;
        config.mode = staging_mode::whole;
        auto run = staging_operation::create(
            w.get_executor(), config, device, engine_, pool_,
            [step = std::move(step)](const staging_operation::transfer_request& r,
                                     completion done) { step(r.data, r.length, std::move(done)); });
        run->async_run([self = std::weak_ptr<device_staging*>(self_),
                        h = std::move(handler)](const error_code& ec, std::size_t n) {
            if (const auto s = self.lock()) {
                ++(*s)->staged_;
                (*s)->staged_bytes_ += ec ? 0 : n;
            }
            h(ec);
        });
    } catch (const std::exception&) {
        fail(make_error_code(error::allocation_failed));
    }
}

void device_staging::shutdown() noexcept {
    // The users' operations end now, as every operation of a worker that
    // shuts down; the internal transfers are aborted by the worker after
    // this, and the staged operations then finish on their own.
    send_queues_.clear();
    for (const auto& e : std::exchange(entries_, {})) {
        e->ordered = nullptr;
        e->submit = nullptr;
        if (transfer_op* op = std::exchange(e->op, nullptr)) {
            op->cancel_hook = nullptr;
            op->cancel_context = nullptr;
            worker_->complete(op, boost::asio::error::operation_aborted);
        }
        if (e->run)
            e->run->cancel();
    }
    if (attached_) {
        attached_ = false;
        worker_->remove_component(*this);
    }
}

void use_device_staging(worker_impl& w, device_staging::classifier classify,
                        std::shared_ptr<copy_engine> engine, device_staging::settings s) {
    w.set_staging(std::make_shared<device_staging>(w, std::move(classify), std::move(engine), s));
}

} // namespace ucx::detail
