// Tag messages, worker-wide and per endpoint: the non-template functions the
// templates of <ucx/tag.hpp> and <ucx/endpoint.hpp> call.
#include <ucx/detail/access.hpp>
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
//
// Each function below ends in one call on either path, so that the common
// one (no staging) is a jump that keeps no registers of its own: the
// staging's path, which needs the arguments after its first call, is a
// function of its own.
namespace {
[[gnu::noinline]] void tag_send_via_staging(device_staging& s, endpoint_impl& ep, transfer_op* op,
                                            const void* data, std::size_t size,
                                            tag_t tag) noexcept {
    if (!staged_tag_send(s, ep, op, data, size, tag))
        ep.tag_send(op, data, size, tag);
}
[[gnu::noinline]] void tag_recv_via_staging(device_staging& s, worker_impl& w, tag_recv_op* op,
                                            void* data, std::size_t size, tag_t tag,
                                            tag_t mask) noexcept {
    if (!staged_tag_recv(s, op, data, size, tag, mask))
        w.tag_recv(op, data, size, tag, mask);
}
[[gnu::noinline]] void endpoint_send_via_staging(device_staging& s, endpoint_impl& ep,
                                                 transfer_op* op, const void* data,
                                                 std::size_t size, std::uint32_t tag) noexcept {
    if (!staged_endpoint_send(s, ep, op, data, size, tag))
        ep.send(op, data, size, tag);
}
[[gnu::noinline]] void endpoint_recv_via_staging(device_staging& s, endpoint_impl& ep,
                                                 tag_recv_op* op, void* data, std::size_t size,
                                                 std::uint32_t tag, std::uint32_t mask) noexcept {
    if (!staged_endpoint_recv(s, ep, op, data, size, tag, mask))
        ep.recv(op, data, size, tag, mask);
}
} // namespace

void tag_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
              tag_t tag) noexcept {
    op->kind = operation_kind::tag_send;
    if (device_staging* s = staging_of(*ep.worker())) [[unlikely]]
        return tag_send_via_staging(*s, ep, op, data, size, tag);
    ep.tag_send(op, data, size, tag);
}
void tag_recv(worker_impl& w, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
              tag_t mask) noexcept {
    op->kind = operation_kind::tag_recv;
    if (device_staging* s = staging_of(w)) [[unlikely]]
        return tag_recv_via_staging(*s, w, op, data, size, tag, mask);
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
    if (device_staging* s = staging_of(*ep.worker())) [[unlikely]]
        return endpoint_send_via_staging(*s, ep, op, data, size, t);
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
    if (device_staging* s = staging_of(*ep.worker())) [[unlikely]]
        return endpoint_recv_via_staging(*s, ep, op, data, size, t, m);
    ep.recv(op, data, size, t, m);
}

} // namespace ucx::detail

namespace ucx {

std::size_t try_tag_send(endpoint& ep, boost::asio::const_buffer data, tag_t tag,
                         error_code& ec) noexcept {
    const auto& impl = detail::access::get_impl(ep);
    ec = impl ? impl->tag_send_at_once(data.data(), data.size(), tag)
              : error_code(boost::asio::error::bad_descriptor);
    return ec ? 0 : data.size();
}

} // namespace ucx
