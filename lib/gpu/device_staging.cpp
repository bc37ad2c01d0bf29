#include "gpu/device_staging.hpp"

#include <ucx/detail/operation.hpp>
#include <ucx/log.hpp>
#include <ucx/worker.hpp>

#include "core/context_impl.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace ucx::detail {

namespace {

using completion = device_staging::completion;

/// The copies out of a sequence of several buffers (an active message's),
/// gathered into the one staging buffer: a copy "from" `origin + offset`
/// takes the bytes at that offset of the sequence, host buffers with memcpy
/// at once, device buffers through the worker's engine (one copy per buffer
/// it spans).
class gather_engine final : public copy_engine {
public:
    using piece = device_staging::gather_piece;
    static void* origin() noexcept { return device_staging::gather_origin(); }

    gather_engine(std::shared_ptr<copy_engine> inner, std::vector<piece> pieces)
        : inner_(std::move(inner)), pieces_(std::move(pieces)) {}

    error_code start(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                     copy_handle& out) noexcept override {
        std::size_t offset =
            reinterpret_cast<std::uintptr_t>(src) - reinterpret_cast<std::uintptr_t>(origin());
        copy* c = nullptr;
        try {
            c = &copies_[next_];
            c->parts.reserve(pieces_.size());
        } catch (const std::bad_alloc&) {
            copies_.erase(next_);
            return make_error_code(error::allocation_failed);
        }
        char* to = static_cast<char*>(dst);
        for (const piece& p : pieces_) {
            if (bytes == 0)
                break;
            if (offset >= p.size) {
                offset -= p.size;
                continue;
            }
            const std::size_t n = std::min(p.size - offset, bytes);
            if (!p.device) {
                std::memcpy(to, static_cast<const char*>(p.data) + offset, n);
            } else {
                copy_handle h;
                if (error_code ec = inner_->start(to, static_cast<const char*>(p.data) + offset, n,
                                                  direction, h)) {
                    if (c->parts.empty()) {
                        copies_.erase(next_);
                        return ec;
                    }
                    c->error = ec; // reported once the copies started have ended
                    break;
                }
                c->parts.push_back(h);
            }
            to += n;
            bytes -= n;
            offset = 0;
        }
        out = copy_handle{next_++, 0};
        return {};
    }

    bool poll(copy_handle h, error_code& ec) noexcept override {
        const auto it = copies_.find(h.index);
        if (it == copies_.end()) {
            ec = make_error_code(errc::invalid_param);
            return true;
        }
        copy& c = it->second;
        std::erase_if(c.parts, [&](copy_handle part) {
            error_code part_ec;
            if (!inner_->poll(part, part_ec))
                return false;
            if (part_ec && !c.error)
                c.error = part_ec;
            return true;
        });
        if (!c.parts.empty())
            return false;
        ec = c.error;
        copies_.erase(it);
        return true;
    }

    void abandon(copy_handle h) noexcept override {
        const auto it = copies_.find(h.index);
        if (it == copies_.end())
            return;
        for (copy_handle part : it->second.parts)
            inner_->abandon(part);
        copies_.erase(it);
    }

private:
    struct copy {
        std::vector<copy_handle> parts;
        error_code error{};
    };
    std::shared_ptr<copy_engine> inner_;
    std::vector<piece> pieces_;
    std::unordered_map<std::uint32_t, copy> copies_;
    std::uint32_t next_ = 0;
};

/// Holds a detached operation's report: calls it with `operation_aborted` if
/// the operation never completed (its io_context went away first).
struct held_report {
    device_staging::report_fn fn;
    void operator()(const error_code& ec, std::size_t bytes) {
        if (auto f = std::exchange(fn, nullptr))
            f(ec, bytes);
    }
    ~held_report() { (*this)(boost::asio::error::operation_aborted, 0); }
};

} // namespace

std::shared_ptr<worker_component> make_device_staging(worker_impl& w) {
    if (!built_with_cuda() || cuda_device_count() == 0)
        return nullptr;
    device_staging::settings settings;
    settings.messages = !w.context().ucx_cuda_memory();
    return std::make_shared<device_staging>(w, nullptr, nullptr, settings);
}

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

void* device_staging::gather_origin() noexcept {
    return reinterpret_cast<void*>(std::uintptr_t{4096});
}

std::shared_ptr<copy_engine> device_staging::gather(std::vector<gather_piece> pieces) {
    error_code ec;
    if (!ready(ec))
        return nullptr;
    return std::make_shared<gather_engine>(engine_, std::move(pieces));
}

void device_staging::stage(transfer_op* op, staging_direction direction, void* device,
                           std::size_t size, transfer_fn transfer, stage_options options) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    const auto fail = [&](const error_code& ec) {
        if (options.on_end)
            options.on_end();
        w.complete(op, ec);
    };
    if (!w.is_open() || op->cancel_requested)
        return fail(boost::asio::error::operation_aborted);
    error_code ec;
    if (!ready(ec)) {
        log::write(log::severity::warning,
                   "device buffer: no copy engine for staging: " + ec.message());
        return fail(ec);
    }
    try {
        auto e = std::make_shared<entry>();
        e->op = op;
        e->cancel = static_cast<std::uint8_t>(options.cancel);
        e->finish = options.finish;
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = direction;
        config.mode = options.mode;
        std::weak_ptr<entry> weak = e;
        const void* key = options.order.key.get();
        e->ordered = key;
        if (key)
            hold(*e, options.order);
        e->run = staging_operation::create(
            w.get_executor(), config, device, options.engine ? std::move(options.engine) : engine_,
            pool_,
            [this, weak, transfer = std::move(transfer)](
                const staging_operation::transfer_request& r, completion done) {
                const auto e = weak.lock();
                if (!e)
                    return done(boost::asio::error::operation_aborted, 0);
                e->transfer_started = true;
                e->offset = r.offset;
                if (!e->ordered)
                    return transfer(*e, r.data, r.length, std::move(done));
                // A send goes to its transfer in its turn for its key.
                e->submit = [e = e.get(), transfer, data = r.data, n = r.length,
                             done = std::move(done)]() mutable {
                    transfer(*e, data, n, std::move(done));
                };
                pump(e->ordered);
            });
        entries_.push_back(e);
        if (key)
            send_queues_[key].push_back(e);
        e->on_end = std::move(options.on_end);
        op->cancel_hook = &device_staging::cancel_hook;
        op->cancel_context = e.get();
        e->run->async_run([this_weak = weak, self = this](const error_code& ec, std::size_t n) {
            if (const auto e = this_weak.lock())
                self->done(e, ec, n);
        });
    } catch (const std::exception&) {
        fail(make_error_code(error::allocation_failed));
    }
}

void device_staging::queue_behind(const send_order& order, transfer_op* op,
                                  std::function<void()> submit) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    if (!w.is_open())
        return w.complete(op, boost::asio::error::operation_aborted);
    try {
        auto e = std::make_shared<entry>();
        e->op = op;
        e->ordered = order.key.get();
        hold(*e, order);
        e->transfer_started = true; // not cancellable, as a direct send
        e->submit = [this, e = e.get(), submit = std::move(submit)] {
            // From here on it is an ordinary send.
            if (transfer_op* op = std::exchange(e->op, nullptr)) {
                op->library_owned = false;
                op->cancel_hook = nullptr;
                op->cancel_context = nullptr;
                op->held_send = true;
                std::erase_if(entries_, [e](const auto& p) { return p.get() == e; });
                submit();
            }
        };
        entries_.push_back(e);
        const void* key = e->ordered;
        send_queues_[key].push_back(std::move(e));
        pump(key);
    } catch (const std::exception&) {
        w.complete(op, make_error_code(error::allocation_failed));
    }
}

void device_staging::hold(entry& e, const send_order& order) noexcept {
    order.hold(order.key.get());
    e.held = order.key;
    e.release = order.release;
}

void device_staging::release(entry& e) noexcept {
    if (const auto owner = std::exchange(e.held, nullptr))
        e.release(owner.get());
}

void device_staging::pump(const void* key) noexcept {
    const auto it = send_queues_.find(key);
    if (it == send_queues_.end())
        return;
    // Taken out first: a submission may queue another send of `key`.
    while (!it->second.empty() && it->second.front()->submit) {
        const std::shared_ptr<entry> e = std::move(it->second.front());
        it->second.pop_front();
        std::function<void()> submit = std::move(e->submit);
        e->submit = nullptr;
        e->ordered = nullptr;
        submit();
        // The transfer has it now (or it failed there): it counts itself
        // from here.
        release(*e);
    }
    if (it->second.empty())
        send_queues_.erase(it);
}

void device_staging::done(const std::shared_ptr<entry>& e, const error_code& ec,
                          std::size_t bytes) noexcept {
    std::erase(entries_, e);
    if (const void* key = std::exchange(e->ordered, nullptr)) {
        // Failed or cancelled before it went to its transfer: the sends
        // behind it go on.
        if (const auto it = send_queues_.find(key); it != send_queues_.end())
            std::erase(it->second, e);
        pump(key);
    }
    release(*e);
    if (const auto on_end = std::exchange(e->on_end, nullptr))
        on_end();
    transfer_op* op = std::exchange(e->op, nullptr);
    if (!op)
        return;
    op->cancel_hook = nullptr;
    op->cancel_context = nullptr;
    op->bytes = bytes;
    if (e->finish)
        e->finish(op, e->info);
    ++staged_;
    staged_bytes_ += ec ? 0 : bytes;
    worker_->complete(op, ec);
}

void device_staging::cancel_hook(operation* op, boost::asio::cancellation_type type) {
    auto* e = static_cast<entry*>(op->cancel_context);
    if (!e)
        return;
    switch (static_cast<cancel_policy>(e->cancel)) {
    case cancel_policy::none:
        return;
    case cancel_policy::transfer:
        // Only the transfer itself is cancelled: once UCX has matched a
        // message, its bytes are delivered (copied to the device), never
        // dropped by a cancellation that came too late.
        if (e->transfer)
            op->owner->cancel(e->transfer, type);
        return;
    case cancel_policy::before_transfer:
        // A send is cancelled before its message went to UCX (while its
        // bytes are still copied from the device); once sent, as any send
        // UCX holds (a terminal cancellation fails its endpoint).
        if (!e->transfer_started)
            e->run->cancel();
        else if (e->transfer)
            op->owner->cancel(e->transfer, type);
        return;
    }
}

void device_staging::stage_detached(staging_direction direction, void* device, std::size_t size,
                                    transfer_fn transfer, report_fn report) noexcept {
    worker_impl& w = *worker_;
    std::shared_ptr<held_report> held;
    try {
        held = std::make_shared<held_report>();
    } catch (const std::bad_alloc&) {
        report(make_error_code(error::allocation_failed), 0);
        return;
    }
    held->fn = std::move(report);
    error_code ec;
    if (!ready(ec)) {
        log::write(log::severity::warning,
                   "device buffer: no copy engine for staging: " + ec.message());
        return (*held)(ec, 0);
    }
    std::shared_ptr<entry> e;
    try {
        e = std::make_shared<entry>();
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = direction;
        config.mode = staging_mode::whole;
        std::weak_ptr<entry> weak = e;
        e->run = staging_operation::create(
            w.get_executor(), config, device, engine_, pool_,
            [this, weak, transfer = std::move(transfer)](
                const staging_operation::transfer_request& r, completion done) {
                const auto e = weak.lock();
                if (!e || !worker_->is_open())
                    return done(boost::asio::error::operation_aborted, 0);
                e->transfer_started = true;
                e->offset = r.offset;
                transfer(*e, r.data, r.length, std::move(done));
            });
        entries_.push_back(e);
        e->run->async_run([weak, self = this, held](const error_code& ec, std::size_t n) {
            if (const auto e = weak.lock()) {
                std::erase(self->entries_, e);
                ++self->staged_;
                self->staged_bytes_ += ec ? 0 : n;
            }
            (*held)(ec, n);
        });
    } catch (const std::exception&) {
        if (e)
            std::erase(entries_, e);
        (*held)(make_error_code(error::allocation_failed), 0);
    }
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
        release(*e);
        if (const auto on_end = std::exchange(e->on_end, nullptr))
            on_end();
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

void device_staging::add_stats(worker_stats& s) const noexcept {
    s.staged_operations = staged_;
    s.staged_bytes = staged_bytes_;
}

void use_device_staging(worker_impl& w, device_staging::classifier classify,
                        std::shared_ptr<copy_engine> engine, device_staging::settings s) {
    w.set_staging(std::make_shared<device_staging>(w, std::move(classify), std::move(engine), s));
}

} // namespace ucx::detail
