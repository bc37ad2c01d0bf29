#include <ucx/rma.hpp>

#include "connection/endpoint_impl.hpp"
#include "core/context_impl.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/device_staging.hpp"
#include "rma/remote_key_impl.hpp"
#include "rma/rma_impl.hpp"

#include <boost/asio/error.hpp>

namespace ucx::detail {
namespace {

// The checks every one-sided operation passes before UCX sees it. On failure
// `op` (begun, a put, get or atomic) is completed with the error.
template <class Op>
bool check(endpoint_impl& ep, Op* op, std::uint64_t remote_address, std::size_t size,
           const key_ptr& key) noexcept {
    worker_impl& w = *ep.worker();
    if (!key || !key->native()) {
        w.complete(op, key ? error_code(boost::asio::error::operation_aborted)
                           : make_error_code(key_errc::no_key));
        return false;
    }
    if (key->endpoint().get() != &ep) {
        w.complete(op, make_error_code(key_errc::wrong_endpoint));
        return false;
    }
    if (!key->contains(remote_address, size)) {
        w.complete(op, make_error_code(error::out_of_bounds));
        return false;
    }
    // Keep the rkey alive until UCX is done with the operation.
    op->key = key;
    return true;
}

// Whether `check` would pass: the key is usable, of `ep`, and covers the range.
bool key_covers(const endpoint_impl& ep, std::uint64_t remote_address, std::size_t size,
                const key_ptr& key) noexcept {
    return key && key->native() && key->endpoint().get() == &ep &&
           key->contains(remote_address, size);
}

// A put or a get (`Submit` is ucp_put_nbx or ucp_get_nbx): checked, then
// submitted; an empty one completes at once.
template <auto Submit, class Buffer>
void transfer(endpoint_impl& ep, rma_op* op, Buffer data, std::size_t size,
              std::uint64_t remote_address, const key_ptr& key) noexcept {
    if (size != 0 && ep.may_submit_first(op) && key_covers(ep, remote_address, size, key))
        [[likely]] {
        // Submitted before it is started (`endpoint_impl::submitted_first`):
        // one UCX completes inside the call needs the key no longer (UCX took
        // what it needed of it), so only one UCX holds keeps a reference.
        op->bytes = size;
        ucp_request_param_t p = send_param(&worker_impl::send_callback, op);
        const ucs_status_ptr_t r =
            Submit(ep.native(), data, size, remote_address, key->native(), &p);
        if (r != nullptr)
            op->key = key;
        return ep.submitted_first(op, r);
    }
    if (!ep.begin(op, true) || !check(ep, op, remote_address, size, key))
        return;
    op->bytes = size;
    if (size == 0)
        return ep.submitted(op, UCS_STATUS_PTR(UCS_OK));
    ucp_request_param_t p = send_param(&worker_impl::send_callback, op);
    ep.submitted(op, Submit(ep.native(), data, size, remote_address, key->native(), &p));
}

} // namespace

// A device buffer where UCX cannot move device memory goes through the
// worker's staging (`staged_rma`, lib/rma/rma_staging.cpp); without a device
// `staging_of` is null, and where UCX moves device memory the staging takes
// nothing.

void rma_put(endpoint_impl& ep, rma_op* op, const void* data, std::size_t size,
             std::uint64_t remote_address, const key_ptr& key) noexcept {
    op->kind = operation_kind::put;
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_rma(*s, ep, op, const_cast<void*>(data), size, remote_address, key, true))
        [[unlikely]]
        return;
    transfer<&ucp_put_nbx>(ep, op, data, size, remote_address, key);
}

void rma_get(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
             std::uint64_t remote_address, const key_ptr& key) noexcept {
    op->kind = operation_kind::get;
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_rma(*s, ep, op, data, size, remote_address, key, false)) [[unlikely]]
        return;
    transfer<&ucp_get_nbx>(ep, op, data, size, remote_address, key);
}

bool rma_begin_checked(endpoint_impl& ep, rma_op* op, std::uint64_t remote_address,
                       std::size_t size, const key_ptr& key) noexcept {
    return ep.begin(op, false) && check(ep, op, remote_address, size, key);
}

void rma_direct(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                std::uint64_t remote_address, const key_ptr& key, bool put) noexcept {
    if (put)
        transfer<&ucp_put_nbx>(ep, op, static_cast<const void*>(data), size, remote_address, key);
    else
        transfer<&ucp_get_nbx>(ep, op, data, size, remote_address, key);
}

void rma_flush(endpoint_impl& ep, operation* op) noexcept {
    if (!ep.begin(op, false))
        return;
    ucp_request_param_t p = send_param(&worker_impl::send_callback, op);
    ep.submitted(op, ucp_ep_flush_nbx(ep.native(), &p));
}

void rma_flush(worker_impl& w, operation* op) noexcept {
    w.start(op);
    if (!w.is_open())
        return w.complete(op, boost::asio::error::operation_aborted);
    ucp_request_param_t p = send_param(&worker_impl::send_callback, op);
    w.submitted(op, ucp_worker_flush_nbx(w.native(), &p));
}

void rma_atomic(endpoint_impl& ep, atomic_op* op, ucp_atomic_op_t opcode, std::uint64_t operand,
                std::size_t size, bool fetch, std::uint64_t remote_address,
                const key_ptr& key) noexcept {
    op->kind = operation_kind::atomic;
    if (!ep.begin(op, true) || !check(ep, op, remote_address, size, key))
        return;
    if (remote_address % size != 0)
        return ep.worker()->complete(op, make_error_code(error::misaligned_address));
    // Refused before UCX sees it where UCX would fail the whole endpoint.
    if (!ep.worker()->context().atomics_supported())
        return ep.worker()->complete(op, make_error_code(error::atomics_unsupported));
    // UCX copies the operand at submission; the reply buffer is the
    // operation's own `value`, which lives until completion.
    std::uint32_t operand32 = static_cast<std::uint32_t>(operand);
    const void* buffer = size == 4 ? static_cast<const void*>(&operand32) : &operand;
    ucp_request_param_t p = send_param(&worker_impl::send_callback, op);
    add_datatype(p, ucp_dt_make_contig(size));
    if (fetch)
        add_reply_buffer(p, &op->value);
    ep.submitted(
        op, ucp_atomic_op_nbx(ep.native(), opcode, buffer, 1, remote_address, key->native(), &p));
}

} // namespace ucx::detail
