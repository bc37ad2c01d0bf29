// Internal: a free list of blocks for operation states, and the allocator
// that draws from it.
//
// Asio's recycling allocator keeps two blocks per thread: a thread with more
// operations in flight at once (a broadcast's root sends to each child;
// several endpoints each with a receive and a send pending) allocates and
// frees on the heap again and again. A worker's operations take their state
// from the worker's pool instead, which keeps as many blocks as were in
// flight at once (up to a limit). Not thread-safe: a worker's pool is used
// on the worker's thread only.
#pragma once

#include <boost/asio/recycling_allocator.hpp>

#include <cstddef>
#include <new>

namespace ucx::detail {

class block_pool {
public:
    /// Free blocks kept at most; beyond it they go back to the heap. The pool
    /// never holds more than were in flight at once; the limit bounds what it
    /// keeps after a burst. It is well above the usual windows (a window of
    /// 64 sends and the receive of its acknowledgement is 65 at once), so a
    /// steady stream of such windows allocates nothing.
    static constexpr std::size_t keep_limit = 1024;

    block_pool() = default;
    block_pool(const block_pool&) = delete;
    block_pool& operator=(const block_pool&) = delete;
    ~block_pool() { drop(); }

    /// The smallest block (`header` included, 512 bytes): the states of the
    /// common operations (tag, active-message and RMA operations with small
    /// handlers) all fit, so that a worker mixing them does not retire its
    /// blocks when a larger one first comes.
    static constexpr std::size_t min_block = 512 - __STDCPP_DEFAULT_NEW_ALIGNMENT__;

    /// A block of at least `n` bytes. The pool's blocks are as large as the
    /// largest request so far (`min_block` at least): a larger request
    /// retires the free ones.
    [[gnu::always_inline]] void* allocate(std::size_t n) {
        if (n <= size_) [[likely]] {
            if (node* b = free_) [[likely]] {
                free_ = b->next;
                --kept_;
                return b;
            }
        }
        return allocate_slow(n);
    }

    void deallocate(void* p, std::size_t) noexcept {
        std::byte* base = static_cast<std::byte*>(p) - header;
        const std::size_t size = *reinterpret_cast<std::size_t*>(base);
        if (size != size_ || kept_ == keep_limit) [[unlikely]]
            return ::operator delete(base);
        free_ = new (p) node{free_};
        ++kept_;
    }

    /// Free blocks held now.
    std::size_t kept() const noexcept { return kept_; }

private:
    /// `allocate` with no free block of the size (none kept, or a larger
    /// size, which retires those kept): a new one, out of line, so that the
    /// common case inlines into every initiating function.
    [[gnu::noinline]] void* allocate_slow(std::size_t n) {
        if (n > size_) {
            drop();
            const std::size_t rounded = (n + header - 1) / header * header;
            size_ = rounded < min_block ? min_block : rounded;
        }
        auto* base = static_cast<std::byte*>(::operator new(header + size_));
        *reinterpret_cast<std::size_t*>(base) = size_;
        return base + header;
    }

    /// Each block starts with its size (a multiple of this), before the
    /// bytes handed out.
    static constexpr std::size_t header = __STDCPP_DEFAULT_NEW_ALIGNMENT__;
    struct node {
        node* next;
    };
    void drop() noexcept {
        while (free_) {
            node* n = free_;
            free_ = n->next;
            ::operator delete(reinterpret_cast<std::byte*>(n) - header);
        }
        kept_ = 0;
    }
    node* free_ = nullptr;
    std::size_t kept_ = 0;
    std::size_t size_ = 0;
};

/// An allocator drawing from a `block_pool` (which must outlive the blocks),
/// or, without one, from Asio's recycling allocator (an operation started on
/// another thread than its worker's).
template <class T>
class pool_allocator {
public:
    using value_type = T;

    explicit pool_allocator(block_pool* pool) noexcept : pool_(pool) {}
    template <class U>
    pool_allocator(const pool_allocator<U>& other) noexcept : pool_(other.pool()) {}

    T* allocate(std::size_t n) {
        static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__,
                      "block_pool hands out blocks with the default alignment");
        if (!pool_)
            return boost::asio::recycling_allocator<T>().allocate(n);
        return static_cast<T*>(pool_->allocate(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (!pool_)
            return boost::asio::recycling_allocator<T>().deallocate(p, n);
        pool_->deallocate(p, n * sizeof(T));
    }

    block_pool* pool() const noexcept { return pool_; }

    template <class U>
    friend bool operator==(const pool_allocator& a, const pool_allocator<U>& b) noexcept {
        return a.pool_ == b.pool();
    }

private:
    block_pool* pool_;
};

} // namespace ucx::detail
