// Where received active-message data is placed: receive allocators.
#pragma once

#include <ucx/memory_type.hpp>

#include <cstddef>
#include <memory>
#include <vector>

namespace ucx {

/// Memory for the data of received active messages that UCX cannot hand over
/// in its own buffers: rendezvous (large) messages, fetched with
/// `ucp_am_recv_data_nbx` straight into memory from this allocator.
///
/// A worker has one allocator per memory type (`register_am_allocator`); an
/// id's messages are received into the memory type chosen for that id
/// (`set_am_memory_type`, host by default).
///
/// Called only on the worker's executor, never inside a UCX callback; it must
/// not call into UCX.
class am_allocator {
public:
    virtual ~am_allocator() = default;

    /// The kind of memory this allocator returns.
    virtual ucx::memory_type memory_type() const noexcept = 0;

    /// Returns `size` bytes (`size` may be 0), or null when out of memory:
    /// the message then completes with `ucx::error::allocation_failed`.
    virtual void* allocate(std::size_t size) noexcept = 0;

    /// Gives back memory returned by `allocate(size)`.
    virtual void deallocate(void* p, std::size_t size) noexcept = 0;
};

/// The host default: power-of-two size classes with a free list each, so a
/// steady stream of messages reuses the same blocks instead of allocating.
/// At most `cached_bytes` are kept for reuse; the rest goes back to the heap.
/// Not thread-safe (a worker's allocator runs on its executor only).
class pooled_host_allocator final : public am_allocator {
public:
    explicit pooled_host_allocator(std::size_t cached_bytes = 64u << 20) noexcept
        : limit_(cached_bytes) {}
    ~pooled_host_allocator() override;

    ucx::memory_type memory_type() const noexcept override { return memory_type::host; }
    void* allocate(std::size_t size) noexcept override;
    void deallocate(void* p, std::size_t size) noexcept override;

    /// Bytes held for reuse now.
    std::size_t cached_bytes() const noexcept { return cached_; }

private:
    static constexpr unsigned classes = 48;
    std::vector<void*> free_[classes];
    std::size_t limit_;
    std::size_t cached_ = 0;
};

/// CUDA device memory (`cudaMalloc`/`cudaFree`) for rendezvous messages
/// received straight into the GPU. Available when the library is built with
/// CUDA (`built_with_cuda()`); without it `allocate` returns null.
class cuda_am_allocator final : public am_allocator {
public:
    ucx::memory_type memory_type() const noexcept override { return memory_type::cuda; }
    void* allocate(std::size_t size) noexcept override;
    void deallocate(void* p, std::size_t size) noexcept override;
};

} // namespace ucx
