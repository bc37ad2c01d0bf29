#include <ucx/am_allocator.hpp>

#ifdef UCX_ASIO_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include <bit>
#include <new>

namespace ucx {

namespace {

constexpr std::align_val_t block_alignment{64};

// Size class c holds blocks of 2^c bytes.
unsigned size_class(std::size_t size) noexcept {
    return size <= 1 ? 0u : static_cast<unsigned>(std::bit_width(size - 1));
}

} // namespace

pooled_host_allocator::~pooled_host_allocator() {
    for (auto& list : free_)
        for (void* p : list)
            ::operator delete(p, block_alignment);
}

void* pooled_host_allocator::allocate(std::size_t size) noexcept {
    const unsigned c = size_class(size);
    if (c >= classes)
        return nullptr;
    if (!free_[c].empty()) {
        void* p = free_[c].back();
        free_[c].pop_back();
        cached_ -= std::size_t(1) << c;
        return p;
    }
    return ::operator new(std::size_t(1) << c, block_alignment, std::nothrow);
}

void pooled_host_allocator::deallocate(void* p, std::size_t size) noexcept {
    if (!p)
        return;
    const unsigned c = size_class(size);
    const std::size_t block = std::size_t(1) << c;
    if (cached_ + block <= limit_) {
        try {
            free_[c].push_back(p);
            cached_ += block;
            return;
        } catch (...) {
        }
    }
    ::operator delete(p, block_alignment);
}

#ifdef UCX_ASIO_HAS_CUDA

void* cuda_am_allocator::allocate(std::size_t size) noexcept {
    void* p = nullptr;
    if (cudaMalloc(&p, size == 0 ? 1 : size) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return p;
}

void cuda_am_allocator::deallocate(void* p, std::size_t) noexcept {
    if (p)
        (void)cudaFree(p);
}

#else

void* cuda_am_allocator::allocate(std::size_t) noexcept {
    return nullptr;
}

void cuda_am_allocator::deallocate(void*, std::size_t) noexcept {}

#endif

} // namespace ucx
