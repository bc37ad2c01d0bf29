#include "memory.hpp"

#include "common.hpp"

#include <ucx/memory_type.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#if UCX_ASIO_PERF_CUDA
#include <cuda_runtime_api.h>
#endif

namespace perf {

namespace {

#if UCX_ASIO_PERF_CUDA
void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw failure(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

std::byte* allocate(std::size_t n, memory m) {
    if (m == memory::host || n == 0)
        return n == 0 ? nullptr : new std::byte[n]();
#if UCX_ASIO_PERF_CUDA
    if (const std::string why = cuda_unavailable_reason(); !why.empty())
        throw failure("--memory cuda: " + why);
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, n), "cudaMalloc");
    cuda_check(cudaMemset(p, 0, n), "cudaMemset");
    return static_cast<std::byte*>(p);
#else
    throw failure("--memory cuda: " + cuda_unavailable_reason());
#endif
}

void release(std::byte* p, memory m) noexcept {
    if (!p)
        return;
    if (m == memory::host) {
        delete[] p;
        return;
    }
#if UCX_ASIO_PERF_CUDA
    cudaFree(p);
#endif
}

/// Copies between host and device memory (either may be either).
void copy_bytes(void* dst, const void* src, std::size_t n) {
    if (n == 0)
        return;
#if UCX_ASIO_PERF_CUDA
    cuda_check(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "cudaMemcpy");
#else
    std::memcpy(dst, src, n);
#endif
}

} // namespace

std::string cuda_unavailable_reason() {
#if UCX_ASIO_PERF_CUDA
    if (!ucx::built_with_cuda())
        return "the library was built without CUDA";
    if (ucx::cuda_device_count() == 0)
        return "no CUDA device on this machine";
    return "";
#else
    return "ucx-asio-perf was built without CUDA (UCX_ASIO_WITH_CUDA=OFF)";
#endif
}

buffer::buffer(std::size_t n, memory m) : data_(allocate(n, m)), size_(n), memory_(m) {}

buffer::buffer(const buffer& other) : buffer(other.size_, other.memory_) {
    if (memory_ == memory::host)
        std::copy_n(other.data_, size_, data_);
    else
        copy_bytes(data_, other.data_, size_);
}

buffer::buffer(buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      memory_(other.memory_) {}

buffer& buffer::operator=(buffer other) noexcept {
    swap(*this, other);
    return *this;
}

buffer::~buffer() {
    release(data_, memory_);
}

void swap(buffer& a, buffer& b) noexcept {
    std::swap(a.data_, b.data_);
    std::swap(a.size_, b.size_);
    std::swap(a.memory_, b.memory_);
}

void buffer::fill(std::uint64_t seq) {
    if (memory_ == memory::host)
        return perf::fill({data_, size_}, seq);
    std::vector<std::byte> host(size_);
    perf::fill(host, seq);
    copy_bytes(data_, host.data(), size_);
}

void buffer::clear() {
    if (memory_ == memory::host) {
        std::fill_n(data_, size_, std::byte{0});
        return;
    }
    const std::vector<std::byte> zeros(size_);
    copy_bytes(data_, zeros.data(), size_);
}

void check_any(boost::asio::const_buffer b, std::uint64_t seq, const char* what) {
    const auto* p = static_cast<const std::byte*>(b.data());
    if (ucx::detect_memory_type(p) == ucx::memory_type::host)
        return check({p, b.size()}, seq, what);
    std::vector<std::byte> host(b.size());
    copy_bytes(host.data(), p, b.size());
    check(host, seq, what);
}

copy_ceiling measure_copy_ceiling(std::size_t size) {
    copy_ceiling c;
#if UCX_ASIO_PERF_CUDA
    if (!cuda_unavailable_reason().empty() || size == 0)
        return c;
    void* device = nullptr;
    void* host = nullptr;
    cudaStream_t stream = nullptr;
    cuda_check(cudaMalloc(&device, size), "cudaMalloc");
    cuda_check(cudaMallocHost(&host, size), "cudaMallocHost");
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Each way: copies back to back on one stream for at least 0.2 s (after
    // one that warms up), as the staging's copies run.
    auto rate = [&](void* dst, const void* src, cudaMemcpyKind kind) {
        cuda_check(cudaMemcpyAsync(dst, src, size, kind, stream), "cudaMemcpyAsync");
        cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        std::size_t copies = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double seconds = 0;
        while (seconds < 0.2) {
            for (int k = 0; k < 8; ++k, ++copies)
                cuda_check(cudaMemcpyAsync(dst, src, size, kind, stream), "cudaMemcpyAsync");
            cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        return static_cast<double>(copies * size) / seconds / (1 << 20);
    };
    c.device_to_host_mib_s = rate(host, device, cudaMemcpyDeviceToHost);
    c.host_to_device_mib_s = rate(device, host, cudaMemcpyHostToDevice);
    cudaStreamDestroy(stream);
    cudaFreeHost(host);
    cudaFree(device);
#else
    (void)size;
#endif
    return c;
}

} // namespace perf
