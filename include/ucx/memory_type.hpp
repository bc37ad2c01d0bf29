// Where a buffer lives: host or GPU memory.
#pragma once

#include <string_view>

namespace ucx {

/// The kind of memory a pointer refers to.
enum class memory_type { host, cuda, cuda_managed };

/// "host", "cuda" or "cuda_managed".
constexpr std::string_view to_string(memory_type t) noexcept {
    switch (t) {
    case memory_type::host:
        return "host";
    case memory_type::cuda:
        return "cuda";
    case memory_type::cuda_managed:
        return "cuda_managed";
    }
    return "unknown";
}

/// Whether the library was built with CUDA support (`UCX_ASIO_WITH_CUDA`).
bool built_with_cuda() noexcept;

/// Number of CUDA devices usable by this process; 0 without CUDA support,
/// without a driver or without a GPU.
int cuda_device_count() noexcept;

/// The memory type of `p`, as the CUDA driver reports it; `host` for any
/// pointer the driver does not know, and always `host` without CUDA support.
memory_type detect_memory_type(const void* p) noexcept;

} // namespace ucx
