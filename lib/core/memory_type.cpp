#include <ucx/memory_type.hpp>

#include "core/context_impl.hpp"

#ifdef UCX_ASIO_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ucx {

#ifdef UCX_ASIO_HAS_CUDA

bool built_with_cuda() noexcept {
    return true;
}

int cuda_device_count() noexcept {
    // Asked once: every operation on a buffer of unknown memory type asks,
    // and the devices of a process do not change while it runs.
    static const int count = [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            (void)cudaGetLastError(); // the sticky error of a machine without a driver
            return 0;
        }
        return n;
    }();
    return count;
}

memory_type detect_memory_type(const void* p) noexcept {
    if (p == nullptr || cuda_device_count() == 0)
        return memory_type::host;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return memory_type::host;
    }
    switch (attr.type) {
    case cudaMemoryTypeDevice:
        return memory_type::cuda;
    case cudaMemoryTypeManaged:
        return memory_type::cuda_managed;
    default:
        return memory_type::host;
    }
}

namespace detail {

error_code make_cuda_context(int device) noexcept {
    const int n = cuda_device_count();
    if (device < 0 || device >= n)
        return make_error_code(error::cuda_unavailable);
    // cudaFree(nullptr) is the documented idiom that creates the device's
    // primary context without allocating.
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return make_error_code(error::cuda_error);
    }
    return {};
}

} // namespace detail

#else

namespace detail {

error_code make_cuda_context(int) noexcept {
    return make_error_code(error::cuda_unavailable);
}

} // namespace detail

bool built_with_cuda() noexcept {
    return false;
}
int cuda_device_count() noexcept {
    return 0;
}
memory_type detect_memory_type(const void*) noexcept {
    return memory_type::host;
}

#endif

} // namespace ucx
