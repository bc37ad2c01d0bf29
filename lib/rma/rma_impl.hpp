// Internal: one-sided operations with device buffers through the worker's
// staging (lib/gpu/device_staging.hpp; lib/rma/rma_staging.cpp), and the
// parts of the direct ones that builds on.
#pragma once

#include <ucx/rma.hpp>

#include <cstddef>
#include <cstdint>

namespace ucx::detail {

/// Begins `op` on `ep` (uncounted) and checks a put or get of `size` bytes
/// at `remote_address` as `rma_put` does (endpoint, key, bounds); false when
/// `op` was completed with the error.
bool rma_begin_checked(endpoint_impl& ep, rma_op* op, std::uint64_t remote_address,
                       std::size_t size, const key_ptr& key) noexcept;

/// A put (`put`) or a get of host memory handed straight to UCX: `rma_put`
/// and `rma_get` without the staging of device memory.
void rma_direct(endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                std::uint64_t remote_address, const key_ptr& key, bool put) noexcept;

class device_staging;

/// A put (`put`) or a get with the device memory at `data` through the
/// staging `s`: checked as a direct put or get (`rma_begin_checked`), then
/// cut into chunks, each chunk a put of its pinned copy, or a get into a
/// pinned buffer then copied to the device, at `remote_address` plus the
/// chunk's offset. Taken when `data` is device memory and `size` > 0. Not
/// cancellable, as a direct put or get.
bool staged_rma(device_staging& s, endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                std::uint64_t remote_address, const key_ptr& key, bool put) noexcept;

} // namespace ucx::detail
