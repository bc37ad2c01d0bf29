#include "gpu/device_staging.hpp"

#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/log.hpp>

#include "connection/endpoint_impl.hpp"
#include "core/context_impl.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "messaging/am_registry.hpp"
#include "rma/rma_impl.hpp"
#include "stream/stream_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

namespace ucx::detail {

/// One staged operation.
struct device_staging::entry : std::enable_shared_from_this<entry> {
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
    /// The endpoint of a send, while its graceful close waits for the send
    /// (until the send reached UCX, which then counts it, or ended).
    std::shared_ptr<endpoint_impl> held;
    std::function<void()> submit;
    /// An active message's fetch: UCX's descriptor until the fetch starts.
    void* desc = nullptr;
    cancel_by cancel = cancel_by::message;
    /// Chunked mode: the message offset of the transfer being submitted.
    std::size_t offset = 0;
    /// Called once when the operation ends.
    std::function<void()> on_end;
};

namespace {

using completion = staging_operation::transfer_completion;

/// Creates an internal operation of kind `Result::op_type` whose completion
/// reports to the staged operation, and returns it.
template <class Result, class Handler>
typename Result::op_type* internal_op(worker_impl& w, Handler&& h) {
    using op_type = handler_operation<std::decay_t<Handler>, worker_core::executor_type, Result>;
    return op_type::create(std::forward<Handler>(h), w.get_executor(),
                           w.operation_pool(w.running_in_owner()));
}

/// The internal UCX operation of a staged entry's transfer, reporting to
/// `done`. A shutdown may end the entry before UCX ends the transfer: it is
/// held weakly. `hold` lives as long as the operation (memory UCX reads, as
/// an active message's header).
template <class Entry>
bytes_result<>::op_type* bytes_transfer(worker_impl& w, Entry& e,
                                        staging_operation::transfer_completion done,
                                        std::shared_ptr<const void> hold = nullptr) {
    auto* t = internal_op<bytes_result<>>(
        w, [weak = e.weak_from_this(), hold = std::move(hold),
            done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
            if (const auto e = weak.lock())
                e->transfer = nullptr;
            done(ec, bytes);
        });
    e.transfer = t;
    return t;
}

/// The copies out of an active message of several buffers, gathered into
/// the one staging buffer: a copy "from" `origin + offset` takes the bytes at
/// that offset of the sequence, host buffers with memcpy at once, device
/// buffers through the worker's engine (one copy per buffer it spans).
class gather_engine final : public copy_engine {
public:
    struct piece {
        const char* data;
        std::size_t size;
        bool device;
    };
    /// Where the staging operation believes the message starts: never
    /// dereferenced, only offsets from it are.
    static void* origin() noexcept { return reinterpret_cast<void*>(std::uintptr_t{4096}); }

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
                std::memcpy(to, p.data + offset, n);
            } else {
                copy_handle h;
                if (error_code ec = inner_->start(to, p.data + offset, n, direction, h)) {
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

/// Holds a staged fetch's report: calls it with `operation_aborted` if the
/// fetch never completed (its io_context went away first).
struct held_report {
    device_staging::fetch_report fn;
    void operator()(const error_code& ec, std::size_t bytes) {
        if (auto f = std::exchange(fn, nullptr))
            f(ec, bytes);
    }
    ~held_report() { (*this)(boost::asio::error::operation_aborted, 0); }
};

/// UCX's completion of an active message's fetch into staging memory.
void on_am_data(void* request, ucs_status_t status, std::size_t length, void* user_data) noexcept {
    auto* op = static_cast<transfer_op*>(static_cast<operation*>(user_data));
    op->request = request;
    op->status = status;
    op->bytes = length;
    op->owner->finished(op);
}

/// Fetches the data of `desc` into `host` for the internal operation `t`.
void fetch_am_data(worker_impl& w, transfer_op* t, void* desc, void* host, std::size_t n) noexcept {
    w.start(t);
    t->cancellable = true; // shutdown cancels it
    ucp_request_param_t param = am_recv_param(&on_am_data, static_cast<operation*>(t));
    add_memory_type(param, UCS_MEMORY_TYPE_HOST);
    const ucs_status_ptr_t r = ucp_am_recv_data_nbx(w.native(), desc, host, n, &param);
    if (UCS_PTR_IS_PTR(r)) {
        t->request = r; // freed once delivered (the callback may have run already)
    } else if (t->status != UCS_INPROGRESS) {
        t->request = nullptr; // the callback ran inside the call; UCX keeps no request
    } else {
        t->status = UCS_PTR_STATUS(r);
        t->bytes = t->status == UCS_OK ? n : 0;
        w.finished(t);
    }
    w.request_progress();
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
    // A tag message stays one UCX message, for any peer.
    stage(op, recv, direction, device, size, std::move(submit), ordered, stage_options{});
}

void device_staging::stage(operation* op, tag_recv_op* recv, staging_direction direction,
                           void* device, std::size_t size, submit_fn submit, endpoint_impl* ordered,
                           stage_options options) noexcept {
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
        e->op = static_cast<transfer_op*>(op);
        e->recv = recv;
        e->cancel = options.cancel;
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = direction;
        config.mode = options.mode;
        std::weak_ptr<entry> weak = e;
        e->ordered = ordered;
        if (ordered)
            hold(*e, *ordered);
        e->run = staging_operation::create(
            w.get_executor(), config, device, options.engine ? std::move(options.engine) : engine_,
            pool_,
            [this, weak, submit = std::move(submit)](const staging_operation::transfer_request& r,
                                                     completion done) {
                const auto e = weak.lock();
                if (!e)
                    return done(boost::asio::error::operation_aborted, 0);
                e->transfer_started = true;
                e->offset = r.offset;
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
        hold(*e, ep);
        e->transfer_started = true; // not cancellable, as a direct send
        e->submit = [this, e = e.get(), submit = std::move(submit)] {
            // From here on it is an ordinary send of the endpoint.
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
        send_queues_[&ep].push_back(std::move(e));
        pump(&ep);
    } catch (const std::exception&) {
        w.complete(op, make_error_code(error::allocation_failed));
    }
}

void device_staging::hold(entry& e, const endpoint_impl& ep) noexcept {
    // The worker's endpoints are its own: the pointer is not const there.
    auto& owned = const_cast<endpoint_impl&>(ep);
    owned.hold_send();
    e.held = owned.shared_from_this();
}

void device_staging::release(entry& e) noexcept {
    if (const auto ep = std::exchange(e.held, nullptr))
        ep->release_send();
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
        // UCX has it now (or it failed there): it counts itself from here.
        release(*e);
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
    release(*e);
    if (const auto on_end = std::exchange(e->on_end, nullptr))
        on_end();
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
    if (!e || e->cancel == cancel_by::none)
        return;
    if (e->recv || e->cancel == cancel_by::transfer) {
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
            auto* t = bytes_transfer(*keep->worker(), e, std::move(done));
            t->held_send = true;
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
                *worker_, [weak = e.weak_from_this(), done = std::move(done)](
                              const error_code& ec, std::size_t bytes, tag_t sender) mutable {
                    if (const auto e = weak.lock()) {
                        e->transfer = nullptr;
                        e->sender_tag = sender;
                    }
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

bool device_staging::am_send(endpoint_impl& ep, am_send_op* op, unsigned id, const void* header,
                             std::size_t header_length, const ucp_dt_iov_t* iov, std::size_t count,
                             unsigned flags) noexcept {
    std::size_t total = 0, device = 0;
    for (std::size_t i = 0; i < count; ++i) {
        total += iov[i].length;
        if (iov[i].length != 0 && must_stage(iov[i].buffer))
            ++device;
    }
    if (device == 0) {
        if (!send_queues_.contains(&ep))
            return false;
        queue_direct(
            ep, op,
            [keep = ep.shared_from_this(), op, id, header, header_length, iov, count, flags] {
                am_send_message(*keep, op, id, header, header_length, iov, count, flags);
            });
        return true;
    }
    if (!am_send_valid(ep, id, header_length))
        return false;
    // The header goes with the internal send: the user's operation may end
    // (a shutdown) while UCX still reads it.
    std::shared_ptr<const std::vector<std::byte>> head;
    std::shared_ptr<copy_engine> gather;
    void* source = iov[0].buffer;
    try {
        const auto* h = static_cast<const std::byte*>(header);
        head = std::make_shared<const std::vector<std::byte>>(h, h + header_length);
        error_code ec;
        if (count > 1 && ready(ec)) {
            std::vector<gather_engine::piece> pieces;
            pieces.reserve(count);
            for (std::size_t i = 0; i < count; ++i)
                pieces.push_back({static_cast<const char*>(iov[i].buffer), iov[i].length,
                                  iov[i].length != 0 && must_stage(iov[i].buffer)});
            gather = std::make_shared<gather_engine>(engine_, std::move(pieces));
            source = gather_engine::origin();
        }
    } catch (const std::bad_alloc&) {
        worker_->start(op);
        worker_->complete(op, make_error_code(error::allocation_failed));
        return true;
    }
    stage(
        op, nullptr, staging_direction::outgoing, source, total,
        [keep = ep.shared_from_this(), id, head, flags](entry& e, void* host, std::size_t n,
                                                        completion done) {
            auto* t = bytes_transfer(*keep->worker(), e, std::move(done), head);
            t->held_send = true;
            const ucp_dt_iov_t one{host, n};
            am_send_message(*keep, t, id, head->data(), head->size(), &one, 1, flags);
        },
        &ep, stage_options{staging_mode::whole, cancel_by::message, nullptr, std::move(gather)});
    return true;
}

bool device_staging::am_fetch(void* desc, void* device, std::size_t size,
                              fetch_report report) noexcept {
    if (!must_stage(device))
        return false;
    worker_impl& w = *worker_;
    std::shared_ptr<held_report> held;
    try {
        held = std::make_shared<held_report>();
    } catch (const std::bad_alloc&) {
        ucp_am_data_release(w.native(), desc);
        report(make_error_code(error::allocation_failed), 0);
        return true;
    }
    held->fn = std::move(report);
    error_code ec;
    if (!ready(ec)) {
        log::write(log::severity::warning,
                   "device buffer: no copy engine for staging: " + ec.message());
        ucp_am_data_release(w.native(), desc);
        (*held)(ec, 0);
        return true;
    }
    std::shared_ptr<entry> e;
    try {
        e = std::make_shared<entry>();
        e->desc = desc;
        staging_config config;
        config.total = size;
        config.chunk = settings_.chunk;
        config.slots = settings_.slots;
        config.direction = staging_direction::incoming;
        config.mode = staging_mode::whole;
        std::weak_ptr<entry> weak = e;
        e->run = staging_operation::create(
            w.get_executor(), config, device, engine_, pool_,
            [this, weak](const staging_operation::transfer_request& r, completion done) {
                const auto e = weak.lock();
                if (!e || !e->desc || !worker_->is_open())
                    return done(boost::asio::error::operation_aborted, 0);
                auto* t = internal_op<bytes_result<>>(
                    *worker_, [weak, done = std::move(done)](const error_code& ec,
                                                             std::size_t bytes) mutable {
                        if (const auto e = weak.lock())
                            e->transfer = nullptr;
                        done(ec, bytes);
                    });
                e->transfer = t;
                e->transfer_started = true;
                fetch_am_data(*worker_, t, std::exchange(e->desc, nullptr), r.data, r.length);
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
    // Not fetched (no staging memory, a worker that closed): UCX drops the data.
    if (e && e->desc)
        ucp_am_data_release(w.native(), std::exchange(e->desc, nullptr));
    else if (!e)
        ucp_am_data_release(w.native(), desc);
    return true;
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

// ---- byte streams and one-sided operations ----

bool device_staging::stream_write(stream_impl& s, stream_write_op* op) noexcept {
    if (op->count == 0)
        return false;
    if (!must_stage(op->iov[0].buffer)) {
        // A write may write less than asked: the host buffers up to the
        // first device buffer.
        for (std::size_t i = 1; i < op->count; ++i) {
            if (must_stage(op->iov[i].buffer)) {
                op->count = i;
                break;
            }
        }
        return false;
    }
    // The first buffer alone, in chunks, each an ordinary write of the stream.
    op->count = 1;
    op->partial_on_error = true;
    const std::shared_ptr<stream_impl> keep = s.shared_from_this();
    keep->staged_write_began();
    stage(
        op, nullptr, staging_direction::outgoing, op->iov[0].buffer, op->iov[0].length,
        [keep](entry&, void* host, std::size_t n, completion done) {
            auto* t = internal_op<bytes_result<stream_write_op>>(
                *keep->worker(),
                [done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
                    done(ec, bytes);
                });
            t->iov[0].buffer = host;
            t->iov[0].length = n;
            t->count = 1;
            keep->write_direct(t);
        },
        nullptr,
        stage_options{staging_mode::chunked, cancel_by::none,
                      [keep] { keep->staged_write_ended(); }, nullptr});
    return true;
}

bool device_staging::stream_read(stream_impl& s, transfer_op* op,
                                 const boost::asio::mutable_buffer* bufs, std::size_t& n) noexcept {
    std::size_t first = 0;
    while (first < n && bufs[first].size() == 0)
        ++first;
    if (first == n)
        return false;
    if (!must_stage(bufs[first].data())) {
        // Read into the host buffers up to the first device buffer.
        for (std::size_t i = first + 1; i < n; ++i) {
            if (bufs[i].size() > 0 && must_stage(bufs[i].data())) {
                n = i;
                break;
            }
        }
        return false;
    }
    // At most one chunk, read as one (shorter) transfer into a pinned buffer.
    op->partial_on_error = true;
    const std::size_t size = std::min(bufs[first].size(), settings_.chunk);
    stage(
        op, nullptr, staging_direction::incoming, bufs[first].data(), size,
        [keep = s.shared_from_this()](entry& e, void* host, std::size_t len, completion done) {
            const boost::asio::mutable_buffer b(host, len);
            keep->read_direct(bytes_transfer(*keep->worker(), e, std::move(done)), &b, 1);
        },
        nullptr, stage_options{staging_mode::whole, cancel_by::transfer, nullptr, nullptr});
    return true;
}

bool device_staging::rma(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                         std::uint64_t remote_address, const std::shared_ptr<remote_key_impl>& key,
                         bool put) noexcept {
    if (size == 0 || !must_stage(data))
        return false;
    // Refused before anything is copied, as a direct put or get.
    if (!rma_begin_checked(ep, op, remote_address, size, key))
        return true;
    stage(
        op, nullptr, put ? staging_direction::outgoing : staging_direction::incoming, data, size,
        [keep = ep.shared_from_this(), remote_address, key, put](entry& e, void* host,
                                                                 std::size_t n, completion done) {
            auto* t = internal_op<bytes_result<rma_op>>(
                *keep->worker(),
                [done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
                    done(ec, bytes);
                });
            rma_direct(*keep, t, host, n, remote_address + e.offset, key, put);
        },
        nullptr, stage_options{staging_mode::chunked, cancel_by::none, nullptr, nullptr});
    return true;
}

bool device_staging::rma_put(endpoint_impl& ep, rma_op* op, const void* data, std::size_t size,
                             std::uint64_t remote_address,
                             const std::shared_ptr<remote_key_impl>& key) noexcept {
    return rma(ep, op, const_cast<void*>(data), size, remote_address, key, true);
}

bool device_staging::rma_get(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                             std::uint64_t remote_address,
                             const std::shared_ptr<remote_key_impl>& key) noexcept {
    return rma(ep, op, data, size, remote_address, key, false);
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

void use_device_staging(worker_impl& w, device_staging::classifier classify,
                        std::shared_ptr<copy_engine> engine, device_staging::settings s) {
    w.set_staging(std::make_shared<device_staging>(w, std::move(classify), std::move(engine), s));
}

} // namespace ucx::detail
