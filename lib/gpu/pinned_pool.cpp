#include "gpu/pinned_pool.hpp"

#include <ucx/memory_type.hpp>

#ifdef UCX_ASIO_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <new>

namespace ucx::detail {

namespace {

/// Ordinary buffers start at page boundaries, as pinned ones do.
constexpr std::align_val_t page_alignment{4096};

/// A dedicated buffer starts with a header that holds its size.
constexpr std::size_t header_bytes = 256;

} // namespace

pinned_pool::pinned_pool(std::size_t buffer_size, std::size_t max_buffers, bool pinned)
    : buffer_size_(std::max<std::size_t>(buffer_size, 1)),
      max_buffers_(std::max<std::size_t>(max_buffers, 1)),
      pinned_(pinned && built_with_cuda() && cuda_device_count() > 0) {
    // release() never allocates: every regular buffer fits in the free list.
    free_.reserve(max_buffers_);
}

pinned_pool::~pinned_pool() {
    for (void* p : free_)
        deallocate(p);
    drop_spare();
}

void* pinned_pool::allocate(std::size_t bytes) noexcept {
#ifdef UCX_ASIO_HAS_CUDA
    if (pinned_) {
        void* p = nullptr;
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        ++allocations_;
        return p;
    }
#endif
    void* p = ::operator new(bytes, page_alignment, std::nothrow);
    if (p)
        ++allocations_;
    return p;
}

void pinned_pool::deallocate(void* p) noexcept {
#ifdef UCX_ASIO_HAS_CUDA
    if (pinned_) {
        (void)cudaFreeHost(p);
        return;
    }
#endif
    ::operator delete(p, page_alignment);
}

std::size_t pinned_pool::share(std::size_t bytes) const noexcept {
    return bytes / buffer_size_ + (bytes % buffer_size_ != 0 ? 1 : 0);
}

void pinned_pool::drop_spare() noexcept {
    if (!spare_)
        return;
    deallocate(static_cast<char*>(spare_) - header_bytes);
    held_ -= share(spare_bytes_);
    spare_ = nullptr;
    spare_bytes_ = 0;
}

void* pinned_pool::acquire() noexcept {
    if (!free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        ++lent_;
        return p;
    }
    if (held_ >= max_buffers_)
        drop_spare();
    if (held_ >= max_buffers_)
        return nullptr;
    void* p = allocate(buffer_size_);
    if (!p)
        return nullptr;
    ++held_;
    ++lent_;
    return p;
}

void pinned_pool::release(void* p) noexcept {
    if (!p)
        return;
    free_.push_back(p); // reserved for every regular buffer
    --lent_;
}

void* pinned_pool::acquire_contiguous(std::size_t bytes) noexcept {
    if (bytes <= buffer_size_)
        return acquire();
    if (spare_ && spare_bytes_ >= bytes) {
        void* p = spare_;
        lent_ += share(spare_bytes_);
        spare_ = nullptr;
        spare_bytes_ = 0;
        return p;
    }
    const std::size_t s = share(bytes);
    if (s > max_buffers_ || bytes > static_cast<std::size_t>(-1) - header_bytes)
        return nullptr;
    // Make room within the bound: the kept dedicated buffer first, then
    // free regular buffers.
    if (held_ + s > max_buffers_)
        drop_spare();
    while (held_ + s > max_buffers_ && !free_.empty()) {
        deallocate(free_.back());
        free_.pop_back();
        --held_;
    }
    if (held_ + s > max_buffers_)
        return nullptr;
    void* base = allocate(header_bytes + bytes);
    if (!base)
        return nullptr;
    *static_cast<std::size_t*>(base) = bytes;
    held_ += s;
    lent_ += s;
    return static_cast<char*>(base) + header_bytes;
}

void pinned_pool::release_contiguous(void* p, std::size_t bytes) noexcept {
    if (!p)
        return;
    if (bytes <= buffer_size_) {
        release(p);
        return;
    }
    const std::size_t actual =
        *reinterpret_cast<const std::size_t*>(static_cast<char*>(p) - header_bytes);
    lent_ -= share(actual);
    // Keep the larger of this buffer and the kept one.
    if (spare_ && spare_bytes_ >= actual) {
        deallocate(static_cast<char*>(p) - header_bytes);
        held_ -= share(actual);
        return;
    }
    drop_spare();
    spare_ = p;
    spare_bytes_ = actual;
}

} // namespace ucx::detail
