// The non-template functions the public headers' templates call: each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
#include <ucx/acceptor.hpp>
#include <ucx/am.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/listener.hpp>
#include <ucx/stream.hpp>
#include <ucx/tag.hpp>
#include <ucx/ucxio.hpp>

#include "address_acceptor.hpp"
#include "device_staging.hpp"
#include "endpoint_impl.hpp"
#include "listener_impl.hpp"
#include "stream_impl.hpp"
#include "worker_impl.hpp"

namespace ucx::detail {

// --- the worker an object belongs to ---

worker_core& core_of(worker_impl& w) noexcept {
    return w;
}
worker_core& core_of(const endpoint_impl& ep) noexcept {
    return *ep.worker();
}
worker_core& core_of(const listener_impl& l) noexcept {
    return *l.worker();
}
worker_core& core_of(const stream_impl& s) noexcept {
    return *s.worker();
}
worker_core& core_of(const address_acceptor_impl& a) noexcept {
    return *a.worker();
}

void cancel(operation* op) noexcept {
    op->owner->cancel(op);
}

// --- tag messaging ---

// A device buffer where UCX cannot move device memory goes through the
// worker's staging (lib/device_staging.hpp); without a device `staging()` is
// null, and where UCX moves device memory the staging takes no message.

void tag_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
              tag_t tag) noexcept {
    if (device_staging* s = ep.worker()->staging(); s && s->tag_send(ep, op, data, size, tag))
        [[unlikely]]
        return;
    ep.tag_send(op, data, size, tag);
}
void tag_recv(worker_impl& w, tag_recv_op* op, void* data, std::size_t size, tag_t tag,
              tag_t mask) noexcept {
    if (device_staging* s = w.staging(); s && s->tag_recv(op, data, size, tag, mask)) [[unlikely]]
        return;
    w.tag_recv(op, data, size, tag, mask);
}

// --- endpoints ---

void endpoint_send(endpoint_impl& ep, transfer_op* op, const void* data, std::size_t size,
                   std::uint32_t tag) noexcept {
    if (device_staging* s = ep.worker()->staging(); s && s->endpoint_send(ep, op, data, size, tag))
        [[unlikely]]
        return;
    ep.send(op, data, size, tag);
}
void endpoint_recv(endpoint_impl& ep, tag_recv_op* op, void* data, std::size_t size,
                   std::uint32_t tag, std::uint32_t mask) noexcept {
    if (device_staging* s = ep.worker()->staging();
        s && s->endpoint_recv(ep, op, data, size, tag, mask)) [[unlikely]]
        return;
    ep.recv(op, data, size, tag, mask);
}
void endpoint_wait_error(endpoint_impl& ep, operation* op) noexcept {
    ep.wait_error(op);
}
void endpoint_close(endpoint_impl& ep, endpoint_op* op) noexcept {
    ep.close_gracefully(op);
}
bool endpoint_is_open(const endpoint_impl& ep) noexcept {
    return ep.is_open();
}
const std::shared_ptr<worker_impl>& endpoint_worker(const endpoint_impl& ep) noexcept {
    return ep.worker();
}

// --- active messages ---

void am_recv(worker_impl& w, am_recv_op* op, unsigned id) noexcept {
    w.am_recv(op, id, nullptr);
}
void am_recv(endpoint_impl& ep, am_recv_op* op, unsigned id) noexcept {
    ep.worker()->am_recv(op, id, &ep);
}

// --- listeners ---

void listener_accept(listener_impl& l, endpoint_op* op) noexcept {
    l.accept(op);
}

// --- streams ---

std::shared_ptr<stream_impl> make_stream(const std::shared_ptr<worker_impl>& w) {
    return std::make_shared<stream_impl>(w);
}
const std::shared_ptr<worker_impl>& stream_worker(const stream_impl& s) noexcept {
    return s.worker();
}
bool stream_has_endpoint(const stream_impl& s) noexcept {
    return s.endpoint() != nullptr;
}
void stream_assign(stream_impl& s, const std::shared_ptr<endpoint_impl>& ep,
                   error_code& ec) noexcept {
    s.assign(ep, ec);
}
bool stream_is_open(const stream_impl& s) noexcept {
    return s.is_open();
}
void stream_close(stream_impl& s) noexcept {
    s.close();
}
void stream_close(stream_impl& s, endpoint_op* op) noexcept {
    s.close(op);
}
void stream_abort(stream_impl& s) noexcept {
    s.abort();
}
void stream_cancel(stream_impl& s) noexcept {
    s.cancel();
}
void stream_shutdown_send(stream_impl& s, error_code& ec) noexcept {
    s.shutdown_send(ec);
}
boost::asio::ip::tcp::endpoint stream_address(const stream_impl& s, bool remote, error_code& ec) {
    return s.address(remote, ec);
}
void stream_expires_at(stream_impl& s, std::chrono::steady_clock::time_point t) {
    s.expires_at(t);
}
void stream_expires_never(stream_impl& s) noexcept {
    s.expires_never();
}
std::uint64_t stream_bytes_written(const stream_impl& s) noexcept {
    return s.bytes_written();
}
std::uint64_t stream_bytes_read(const stream_impl& s) noexcept {
    return s.bytes_read();
}
void stream_read(stream_impl& s, transfer_op* op, const boost::asio::mutable_buffer* bufs,
                 std::size_t n) noexcept {
    s.read(op, bufs, n);
}
void stream_write(stream_impl& s, stream_write_op* op) noexcept {
    s.write(op);
}

// --- address acceptors ---

std::shared_ptr<address_acceptor_impl> open_address_acceptor(const std::shared_ptr<worker_impl>& w,
                                                             std::size_t backlog, error_code& ec) {
    auto a = std::make_shared<address_acceptor_impl>(w, backlog);
    a->open(ec);
    return a;
}
bool address_acceptor_is_open(const address_acceptor_impl& a) noexcept {
    return a.is_open();
}
void address_acceptor_close(address_acceptor_impl& a) noexcept {
    a.close();
}
worker_address address_acceptor_address(const address_acceptor_impl& a) {
    return a.worker()->address();
}
void address_acceptor_accept(address_acceptor_impl& a, endpoint_op* op) noexcept {
    a.accept(op);
}

} // namespace ucx::detail
