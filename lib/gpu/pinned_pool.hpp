// Internal: a bounded pool of page-locked ("pinned") host buffers of one
// size, through which device memory is staged (lib/gpu/staging.hpp).
//
// Pinned memory lets a GPU copy it with DMA, asynchronously; allocating it
// costs far more than ordinary memory (it is mapped for the device), so the
// pool keeps what it allocated and lends it again. In a library built with
// CUDA and on a machine with a GPU the buffers come from cudaHostAlloc;
// otherwise (or when asked) they are ordinary aligned host memory, which the
// fake copy engine of the tests uses alike.
#pragma once

#include <cstddef>
#include <vector>

namespace ucx::detail {

class pinned_pool {
public:
    /// A pool of buffers of `buffer_size` bytes (at least 1), at most
    /// `max_buffers` of them (at least 1) allocated at once. `pinned`: use
    /// cudaHostAlloc where CUDA and a GPU are present; false: always
    /// ordinary host memory. No buffer is allocated before the
    /// first `acquire`.
    pinned_pool(std::size_t buffer_size, std::size_t max_buffers, bool pinned = true);

    /// Frees every buffer. All must have been returned.
    ~pinned_pool();

    pinned_pool(const pinned_pool&) = delete;
    pinned_pool& operator=(const pinned_pool&) = delete;

    /// A buffer of `buffer_size()` bytes, or null when `max_buffers` are lent
    /// (or the allocation failed). Allocates only when no free buffer is
    /// kept.
    void* acquire() noexcept;

    /// Returns a buffer from `acquire`. Never allocates.
    void release(void* p) noexcept;

    /// A contiguous buffer of at least `bytes` bytes: a regular buffer when
    /// it fits in one, else a dedicated allocation that counts as
    /// ceil(bytes / buffer_size) buffers against the bound. One dedicated
    /// buffer is kept after its return and lent again to a request it fits
    /// (freed when the bound needs its share). Null when the bound is reached
    /// or the allocation failed.
    void* acquire_contiguous(std::size_t bytes) noexcept;

    /// Returns a buffer from `acquire_contiguous(bytes)`, with the same `bytes`.
    void release_contiguous(void* p, std::size_t bytes) noexcept;

    /// Bytes of one buffer.
    std::size_t buffer_size() const noexcept { return buffer_size_; }
    /// The bound, in buffers.
    std::size_t max_buffers() const noexcept { return max_buffers_; }
    /// Whether the buffers are pinned by CUDA.
    bool pinned() const noexcept { return pinned_; }
    /// Buffers lent now (dedicated ones counted by their share).
    std::size_t lent() const noexcept { return lent_; }
    /// Allocations made so far (regular and dedicated).
    std::size_t allocations() const noexcept { return allocations_; }

private:
    void* allocate(std::size_t bytes) noexcept;
    void deallocate(void* p) noexcept;
    /// The share of the bound a buffer of `bytes` takes.
    std::size_t share(std::size_t bytes) const noexcept;
    /// Frees the kept dedicated buffer.
    void drop_spare() noexcept;

    std::size_t buffer_size_;
    std::size_t max_buffers_;
    bool pinned_;
    /// Regular buffers allocated and kept free.
    std::vector<void*> free_;
    /// Buffers allocated (regular, plus the shares of dedicated ones lent or kept).
    std::size_t held_ = 0;
    std::size_t lent_ = 0;
    std::size_t allocations_ = 0;
    /// The kept dedicated buffer and its size.
    void* spare_ = nullptr;
    std::size_t spare_bytes_ = 0;
};

} // namespace ucx::detail
