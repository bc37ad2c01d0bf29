#include <ucx/memory_type.hpp>

#ifdef UCX_ASIO_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ucx {

#ifdef UCX_ASIO_HAS_CUDA

bool built_with_cuda() noexcept {
    return true;
}

int cuda_device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); // clear the sticky error of a machine without a driver
        return 0;
    }
    return n;
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

#else

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
