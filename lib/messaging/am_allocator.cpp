#include <ucx/am_allocator.hpp>

#ifdef UCX_ASIO_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "util/memory_arena.hpp"

#include <bit>
#include <mutex>
#include <new>
#include <optional>

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

struct cuda_pool_allocator::state {
    std::mutex mutex;
    std::size_t size;
    std::byte* base = nullptr;
    bool tried = false;
    std::optional<detail::memory_arena> arena;
    std::size_t fallbacks = 0;

    explicit state(std::size_t n) : size(n) {}

    /// Allocates the pool on first use (under the mutex).
    void ensure_pool() noexcept {
        if (tried)
            return;
        tried = true;
#ifdef UCX_ASIO_HAS_CUDA
        void* p = nullptr;
        if (size == 0 || cudaMalloc(&p, size) != cudaSuccess) {
            (void)cudaGetLastError();
            return;
        }
        try {
            arena.emplace(size);
            base = static_cast<std::byte*>(p);
        } catch (...) {
            (void)cudaFree(p);
        }
#endif
    }

    bool in_pool(const void* p) const noexcept {
        const auto* b = static_cast<const std::byte*>(p);
        return base != nullptr && b >= base && b < base + size;
    }
};

cuda_pool_allocator::cuda_pool_allocator(std::size_t pool_size)
    : state_(std::make_unique<state>(pool_size)) {}

cuda_pool_allocator::~cuda_pool_allocator() {
#ifdef UCX_ASIO_HAS_CUDA
    if (state_->base)
        (void)cudaFree(state_->base);
#endif
}

void* cuda_pool_allocator::allocate(std::size_t size) noexcept {
    std::lock_guard lock(state_->mutex);
    state_->ensure_pool();
    if (state_->arena) {
        try {
            if (const auto offset = state_->arena->allocate(size))
                return state_->base + *offset;
        } catch (...) {
        }
    }
#ifdef UCX_ASIO_HAS_CUDA
    void* p = nullptr;
    if (cudaMalloc(&p, size == 0 ? 1 : size) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    ++state_->fallbacks;
    return p;
#else
    return nullptr;
#endif
}

void cuda_pool_allocator::deallocate(void* p, std::size_t) noexcept {
    if (p == nullptr)
        return;
    std::lock_guard lock(state_->mutex);
    if (state_->in_pool(p)) {
        try {
            state_->arena->deallocate(
                static_cast<std::size_t>(static_cast<std::byte*>(p) - state_->base));
        } catch (...) {
            // Merging free blocks allocates; without memory the block stays
            // taken (the pool shrinks) rather than the process failing.
        }
        return;
    }
#ifdef UCX_ASIO_HAS_CUDA
    (void)cudaFree(p);
#endif
}

std::size_t cuda_pool_allocator::pool_size() const noexcept {
    return state_->size;
}

std::size_t cuda_pool_allocator::bytes_in_use() const noexcept {
    std::lock_guard lock(state_->mutex);
    return state_->arena ? state_->arena->in_use() : 0;
}

std::size_t cuda_pool_allocator::fallbacks() const noexcept {
    std::lock_guard lock(state_->mutex);
    return state_->fallbacks;
}

} // namespace ucx
