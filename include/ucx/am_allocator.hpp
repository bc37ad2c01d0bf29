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

/// CUDA device memory carved out of one pool: the pool (`pool_size` bytes)
/// is allocated with `cudaMalloc` on the first `allocate`, on the device
/// current then, and blocks of it (256-byte aligned, best fit, neighbours
/// merged on release) serve the messages. Mapping new device memory can take
/// up to ~100 ms, which a pool pays once instead of per message. A message
/// the pool cannot hold now gets its own `cudaMalloc` (counted by
/// `fallbacks()`); `allocate` returns null only when that fails too, or
/// always in a library built without CUDA. Thread-safe: workers of one
/// context share the context's pool (`cuda_options::pool_size`). Every block
/// must be returned before the allocator is destroyed.
class cuda_pool_allocator final : public am_allocator {
public:
    /// A pool of `pool_size` bytes (allocated on first use).
    explicit cuda_pool_allocator(std::size_t pool_size);
    ~cuda_pool_allocator() override;
    cuda_pool_allocator(const cuda_pool_allocator&) = delete;
    cuda_pool_allocator& operator=(const cuda_pool_allocator&) = delete;

    ucx::memory_type memory_type() const noexcept override { return memory_type::cuda; }
    void* allocate(std::size_t size) noexcept override;
    void deallocate(void* p, std::size_t size) noexcept override;

    /// The pool's size in bytes, as given.
    std::size_t pool_size() const noexcept;
    /// Bytes of the pool in blocks now.
    std::size_t bytes_in_use() const noexcept;
    /// Allocations served by their own `cudaMalloc` because the pool could
    /// not hold them (or could not be allocated).
    std::size_t fallbacks() const noexcept;

private:
    struct state;
    std::unique_ptr<state> state_;
};

} // namespace ucx
