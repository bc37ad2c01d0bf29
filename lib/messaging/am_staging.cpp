// Active messages with device buffers, through the worker's staging
// (lib/messaging/message_staging.hpp): sends from device memory, and the
// fetch of rendezvous data into device memory.
#include <ucx/detail/results.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "messaging/am_registry.hpp"
#include "messaging/message_staging.hpp"

#include <boost/asio/error.hpp>

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ucx::detail {

namespace {

/// UCX's completion of an active message's fetch into staging memory.
void on_staged_am_data(void* request, ucs_status_t status, std::size_t length,
                       void* user_data) noexcept {
    auto* op = static_cast<transfer_op*>(static_cast<operation*>(user_data));
    op->request = request;
    op->status = status;
    op->bytes = length;
    op->owner->finished(op);
}

/// Fetches the data of `desc` into `host` for the internal operation `t`.
void fetch_staged_am_data(worker_impl& w, transfer_op* t, void* desc, void* host,
                          std::size_t n) noexcept {
    w.start(t);
    t->cancellable = true; // shutdown cancels it
    ucp_request_param_t param = am_recv_param(&on_staged_am_data, static_cast<operation*>(t));
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

/// Gives UCX's descriptor in `desc` (if still there) back to UCX: the data
/// is dropped.
void release_am_desc(worker_impl& w, void*& desc) noexcept {
    if (void* d = std::exchange(desc, nullptr))
        ucp_am_data_release(w.native(), d);
}

} // namespace

bool staged_am_send(device_staging& s, endpoint_impl& ep, am_send_op* op, unsigned id,
                    const void* header, std::size_t header_length, const ucp_dt_iov_t* iov,
                    std::size_t count, unsigned flags) noexcept {
    std::size_t total = 0, device = 0;
    for (std::size_t i = 0; i < count; ++i) {
        total += iov[i].length;
        if (iov[i].length != 0 && s.must_stage(iov[i].buffer))
            ++device;
    }
    if (device == 0) {
        if (!s.holds_sends(&ep))
            return false;
        s.queue_behind(
            send_order_of(ep), op,
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
    device_staging::stage_options options;
    void* source = iov[0].buffer;
    try {
        const auto* h = static_cast<const std::byte*>(header);
        head = std::make_shared<const std::vector<std::byte>>(h, h + header_length);
        if (count > 1) {
            std::vector<device_staging::gather_piece> pieces;
            pieces.reserve(count);
            for (std::size_t i = 0; i < count; ++i)
                pieces.push_back({iov[i].buffer, iov[i].length,
                                  iov[i].length != 0 && s.must_stage(iov[i].buffer)});
            // Null without a copy engine: the staging then reports why.
            options.engine = s.gather(std::move(pieces));
            if (options.engine)
                source = device_staging::gather_origin();
        }
    } catch (const std::bad_alloc&) {
        s.worker().start(op);
        s.worker().complete(op, make_error_code(error::allocation_failed));
        return true;
    }
    options.order = send_order_of(ep);
    s.stage(
        op, staging_direction::outgoing, source, total,
        [keep = ep.shared_from_this(), id, head, flags](
            device_staging::entry& e, void* host, std::size_t n, device_staging::completion done) {
            auto* t = staging_bytes_op(*keep->worker(), e, std::move(done), head);
            t->held_send = true;
            const ucp_dt_iov_t one{host, n};
            am_send_message(*keep, t, id, head->data(), head->size(), &one, 1, flags);
        },
        std::move(options));
    return true;
}

bool staged_am_fetch(device_staging& s, void* desc, void* device, std::size_t size,
                     device_staging::report_fn report) noexcept {
    if (!s.must_stage(device))
        return false;
    worker_impl& w = s.worker();
    // UCX's descriptor, until the fetch takes it; the report gives it back
    // first when the fetch did not start (the staging reports inside the
    // call then).
    std::shared_ptr<void*> held;
    device_staging::report_fn on_end;
    try {
        held = std::make_shared<void*>(desc);
        on_end = [w = &w, held, report](const error_code& ec, std::size_t bytes) {
            release_am_desc(*w, *held);
            report(ec, bytes);
        };
    } catch (const std::bad_alloc&) {
        ucp_am_data_release(w.native(), desc);
        report(make_error_code(error::allocation_failed), 0);
        return true;
    }
    s.stage_detached(
        staging_direction::incoming, device, size,
        [w = &w, held](device_staging::entry& e, void* host, std::size_t n,
                       device_staging::completion done) {
            if (!*held)
                return done(boost::asio::error::operation_aborted, 0);
            auto* t = staging_bytes_op(*w, e, std::move(done));
            fetch_staged_am_data(*w, t, std::exchange(*held, nullptr), host, n);
        },
        std::move(on_end));
    // Not fetched (no staging memory, a worker that closed): UCX drops the data.
    release_am_desc(w, *held);
    return true;
}

} // namespace ucx::detail
