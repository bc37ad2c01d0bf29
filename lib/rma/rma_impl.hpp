// Internal: the parts of one-sided operations the staging of device buffers
// (lib/gpu/device_staging.hpp) builds on.
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

} // namespace ucx::detail
