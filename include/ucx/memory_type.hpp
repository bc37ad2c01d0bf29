// Where a buffer lives: host or GPU memory.
#pragma once

#include <ucx/detail/enum_names.hpp>

#include <string_view>

namespace ucx {

/// The kind of memory a pointer refers to.
enum class memory_type { host, cuda, cuda_managed };

namespace detail {
inline constexpr std::string_view memory_type_names[] = {"host", "cuda", "cuda_managed"};
} // namespace detail

/// "host", "cuda" or "cuda_managed".
constexpr std::string_view to_string(memory_type t) noexcept {
    return detail::enum_name(t, detail::memory_type_names);
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
