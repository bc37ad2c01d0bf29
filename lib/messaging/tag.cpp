// Tag messages, worker-wide and per endpoint: the non-template functions the
// templates of <ucx/tag.hpp> and <ucx/endpoint.hpp> call.
#include <ucx/endpoint.hpp>
#include <ucx/tag.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "messaging/message_staging.hpp"

namespace ucx::detail {

// A device buffer where UCX cannot move device memory goes through the
// worker's staging (lib/messaging/message_staging.hpp); without a device
// `staging_of` is null, and where UCX moves device memory the staging takes
// no message.

void tag_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
              tag_t tag) noexcept {
    op->kind = operation_kind::tag_send;
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_tag_send(*s, ep, op, data, size, tag)) [[unlikely]]
        return;
    ep.tag_send(op, data, size, tag);
}
void tag_recv(worker_impl& w, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
              tag_t mask) noexcept {
    op->kind = operation_kind::tag_recv;
    if (device_staging* s = staging_of(w); s && staged_tag_recv(*s, op, data, size, tag, mask))
        [[unlikely]]
        return;
    w.tag_recv(op, data, size, tag, mask);
}
namespace {
/// Fails `op` of `ep` before it reaches UCX (a tag outside the endpoint's range).
void fail_at_start(endpoint_impl& ep, auto* op, const error_code& ec) noexcept {
    worker_impl& w = *ep.worker();
    ep.attach(op);
    w.start(op);
    w.complete(op, ec);
}
} // namespace

void endpoint_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                   tag_t tag) noexcept {
    op->kind = operation_kind::tag_send;
    if (tag > endpoint_max_tag) [[unlikely]]
        return fail_at_start(ep, op, boost::asio::error::invalid_argument);
    const auto t = static_cast<std::uint32_t>(tag);
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_endpoint_send(*s, ep, op, data, size, t)) [[unlikely]]
        return;
    ep.send(op, data, size, t);
}
void endpoint_recv(endpoint_impl& ep, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
                   tag_t mask) noexcept {
    op->kind = operation_kind::tag_recv;
    if (tag > endpoint_max_tag) [[unlikely]]
        return fail_at_start(ep, op, boost::asio::error::invalid_argument);
    // The mask's bits above the endpoint's range match nothing a peer sends.
    const auto t = static_cast<std::uint32_t>(tag);
    const auto m = static_cast<std::uint32_t>(mask & endpoint_max_tag);
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_endpoint_recv(*s, ep, op, data, size, t, m)) [[unlikely]]
        return;
    ep.recv(op, data, size, t, m);
}

} // namespace ucx::detail
