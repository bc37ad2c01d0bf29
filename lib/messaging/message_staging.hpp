// Internal: tag and active messages with device buffers where UCX cannot
// move device memory, built on the worker's staging
// (lib/gpu/device_staging.hpp). The submit functions of lib/messaging/tag.cpp
// and lib/messaging/am.cpp hand an operation to these first when the worker
// has a staging; each returns whether it took the operation (false leaves it
// to the caller's direct path, untouched).
//
// A send from device memory is copied into a pinned host buffer and sent
// from there as one message; a receive into device memory receives into a
// pinned host buffer, then copies it to the device. The user's operation
// waits, library-owned, until the staged one completes; its handler then
// gets the bytes (and the sender's tag) as a direct operation would give
// them. The sends of an endpoint, tag and active messages alike, keep their
// order: a send of host memory made while a staged one has not reached UCX
// waits behind it, and the endpoint's graceful close waits for both.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/tag_type.hpp>

#include "gpu/device_staging.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>

namespace ucx::detail {

class endpoint_impl;

/// The order of `ep`'s sends in the staging: keyed by `ep`, whose graceful
/// close waits for the sends held back.
device_staging::send_order send_order_of(endpoint_impl& ep) noexcept;

/// A tag send of `size` bytes at `data` on `ep` (`tag` is UCX's full tag),
/// as `endpoint_impl::tag_send` takes it. Taken when the buffer is device
/// memory (staged), or when an earlier staged send on `ep` has not reached
/// UCX yet (the send waits for it, then goes to UCX directly).
bool staged_tag_send(device_staging& s, endpoint_impl& ep, transfer_op* op, const void* data,
                     std::size_t size, ucp_tag_t tag) noexcept;
/// A per-endpoint send (`endpoint_impl::send`), as `staged_tag_send`.
bool staged_endpoint_send(device_staging& s, endpoint_impl& ep, transfer_op* op, const void* data,
                          std::size_t size, std::uint32_t tag) noexcept;
/// A worker-wide tag receive: taken (staged) when `data` is device memory.
bool staged_tag_recv(device_staging& s, tag_recv_op* op, void* data, std::size_t size,
                     ucp_tag_t tag, ucp_tag_t mask) noexcept;
/// A per-endpoint receive (`endpoint_impl::recv`), as `staged_tag_recv`.
bool staged_endpoint_recv(device_staging& s, endpoint_impl& ep, tag_recv_op* op, void* data,
                          std::size_t size, std::uint32_t tag, std::uint32_t mask) noexcept;

/// An active-message send (`am_send`'s arguments; `header` is the copy in
/// `op`'s storage): taken, staged, when a buffer of `iov` is device memory
/// (several buffers are gathered into the one staging buffer: device ones
/// copied by the engine, host ones with memcpy), or queued behind a staged
/// send on `ep` as `staged_tag_send` (tag and active messages of an
/// endpoint share its queue). An invalid send (id, header) is not taken: the
/// direct path reports its error.
bool staged_am_send(device_staging& s, endpoint_impl& ep, am_send_op* op, unsigned id,
                    const void* header, std::size_t header_length, const ucp_dt_iov_t* iov,
                    std::size_t count, unsigned flags) noexcept;
/// The fetch of an active message's rendezvous data (UCX's descriptor
/// `desc`, `size` bytes) into `device`: taken (staged) when `device` is
/// device memory. The data is received into pinned host memory, then
/// copied. `desc` is consumed either way (released to UCX when the fetch
/// cannot start). `report` runs once, on the executor, after nothing writes
/// `device` any more: also after a shutdown (with its error), or with
/// `operation_aborted` when the io_context goes away first. It may run
/// inside this call when the fetch cannot start.
bool staged_am_fetch(device_staging& s, void* desc, void* device, std::size_t size,
                     device_staging::report_fn report) noexcept;

} // namespace ucx::detail
