// Tag messages and per-endpoint messages with device buffers, through the
// worker's staging (lib/messaging/message_staging.hpp).
#include <ucx/detail/results.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "messaging/message_staging.hpp"

#include <functional>
#include <utility>

namespace ucx::detail {

namespace {

/// Hands a send's message (`data`, `size`) to UCX on the endpoint.
using tag_send_fn = void (*)(endpoint_impl&, transfer_op*, const void* data, std::size_t size,
                             std::uint64_t tag);

/// A send: staged for device memory, queued behind staged ones, or not
/// taken (see `staged_tag_send`).
bool stage_tag_send(device_staging& s, endpoint_impl& ep, transfer_op* op, const void* data,
                    std::size_t size, std::uint64_t tag, tag_send_fn submit) noexcept {
    if (!s.must_stage(data)) {
        if (!s.holds_sends(&ep))
            return false;
        s.queue_behind(send_order_of(ep), op,
                       [keep = ep.shared_from_this(), op, data, size, tag, submit] {
                           submit(*keep, op, data, size, tag);
                       });
        return true;
    }
    device_staging::stage_options options;
    options.order = send_order_of(ep);
    s.stage(
        op, staging_direction::outgoing, const_cast<void*>(data), size,
        [keep = ep.shared_from_this(), tag, submit](
            device_staging::entry& e, void* host, std::size_t n, device_staging::completion done) {
            auto* t = staging_bytes_op(*keep->worker(), e, std::move(done));
            t->held_send = true;
            submit(*keep, t, host, n, tag);
        },
        std::move(options));
    return true;
}

/// A receive, staged when `data` is device memory; `submit` posts the
/// receive into the host buffer.
bool stage_tag_recv(device_staging& s, tag_recv_op* op, void* data, std::size_t size,
                    std::function<void(tag_recv_op*, void*, std::size_t)> submit) noexcept {
    device_staging::stage_options options;
    // Only the receive in UCX is cancelled (a message it matched is
    // delivered); the sender's tag reaches the user's operation.
    options.cancel = device_staging::cancel_policy::transfer;
    options.finish = [](transfer_op* op, std::uint64_t sender) noexcept {
        static_cast<tag_recv_op*>(op)->sender_tag = sender;
    };
    s.stage(
        op, staging_direction::incoming, data, size,
        [w = &s.worker(), submit = std::move(submit)](
            device_staging::entry& e, void* host, std::size_t n, device_staging::completion done) {
            auto* t = staging_internal_op<tag_recv_result>(
                *w, [weak = e.weak_from_this(), done = std::move(done)](
                        const error_code& ec, std::size_t bytes, tag_t sender) mutable {
                    if (const auto e = weak.lock()) {
                        e->transfer = nullptr;
                        e->info = sender;
                    }
                    done(ec, bytes);
                });
            e.transfer = t;
            submit(t, host, n);
        },
        std::move(options));
    return true;
}

} // namespace

device_staging::send_order send_order_of(endpoint_impl& ep) noexcept {
    return {ep.shared_from_this(),
            [](void* p) noexcept { static_cast<endpoint_impl*>(p)->hold_send(); },
            [](void* p) noexcept { static_cast<endpoint_impl*>(p)->release_send(); }};
}

bool staged_tag_send(device_staging& s, endpoint_impl& ep, transfer_op* op, const void* data,
                     std::size_t size, ucp_tag_t tag) noexcept {
    return stage_tag_send(s, ep, op, data, size, tag,
                          [](endpoint_impl& e, transfer_op* t, const void* p, std::size_t n,
                             std::uint64_t tag) { e.tag_send(t, p, n, tag); });
}

bool staged_endpoint_send(device_staging& s, endpoint_impl& ep, transfer_op* op, const void* data,
                          std::size_t size, std::uint32_t tag) noexcept {
    return stage_tag_send(
        s, ep, op, data, size, tag,
        [](endpoint_impl& e, transfer_op* t, const void* p, std::size_t n, std::uint64_t tag) {
            e.send(t, p, n, static_cast<std::uint32_t>(tag));
        });
}

bool staged_tag_recv(device_staging& s, tag_recv_op* op, void* data, std::size_t size,
                     ucp_tag_t tag, ucp_tag_t mask) noexcept {
    if (!s.must_stage(data))
        return false;
    return stage_tag_recv(s, op, data, size,
                          [w = &s.worker(), tag, mask](tag_recv_op* t, void* p, std::size_t n) {
                              w->tag_recv(t, p, n, tag, mask);
                          });
}

bool staged_endpoint_recv(device_staging& s, endpoint_impl& ep, tag_recv_op* op, void* data,
                          std::size_t size, std::uint32_t tag, std::uint32_t mask) noexcept {
    if (!s.must_stage(data))
        return false;
    return stage_tag_recv(
        s, op, data, size,
        [keep = ep.shared_from_this(), tag, mask](tag_recv_op* t, void* p, std::size_t n) {
            keep->recv(t, p, n, tag, mask);
        });
}

} // namespace ucx::detail
