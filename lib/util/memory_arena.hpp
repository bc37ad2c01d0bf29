// Internal: the bookkeeping of a memory pool carved out of one allocation
// (offsets only: it never touches the memory, which may be a GPU's).
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace ucx::detail {

/// Best-fit allocation of aligned blocks within `[0, capacity)`, with free
/// neighbours merged on release so that a pool does not fragment for good.
/// Not thread-safe.
class memory_arena {
public:
    /// An arena of `capacity` bytes whose blocks start at multiples of
    /// `alignment` (a power of two) and take a multiple of it.
    explicit memory_arena(std::size_t capacity, std::size_t alignment = 256)
        : alignment_(alignment), capacity_(capacity / alignment * alignment) {
        if (capacity_ != 0)
            insert_free(0, capacity_);
    }

    /// The offset of a block of at least `size` bytes (a zero size takes one
    /// alignment unit), or nothing when no free block is large enough.
    std::optional<std::size_t> allocate(std::size_t size) {
        const std::size_t need = round_up(size == 0 ? 1 : size);
        if (need == 0) // the rounding overflowed
            return std::nullopt;
        const auto it = by_size_.lower_bound({need, 0});
        if (it == by_size_.end())
            return std::nullopt;
        const auto [block, offset] = *it;
        erase_free(offset, block);
        if (block > need)
            insert_free(offset + need, block - need);
        used_.emplace(offset, need);
        in_use_ += need;
        return offset;
    }

    /// Returns the block at `offset`; false (and nothing changes) for an
    /// offset that is not an allocated block.
    bool deallocate(std::size_t offset) {
        const auto it = used_.find(offset);
        if (it == used_.end())
            return false;
        std::size_t begin = offset;
        std::size_t size = it->second;
        used_.erase(it);
        in_use_ -= size;
        // Merge with the free block after, then with the one before.
        if (auto next = by_offset_.find(begin + size); next != by_offset_.end()) {
            const std::size_t next_size = next->second;
            erase_free(next->first, next_size);
            size += next_size;
        }
        if (auto prev = by_offset_.lower_bound(begin); prev != by_offset_.begin()) {
            --prev;
            if (prev->first + prev->second == begin) {
                const auto [prev_offset, prev_size] = *prev;
                erase_free(prev_offset, prev_size);
                begin = prev_offset;
                size += prev_size;
            }
        }
        insert_free(begin, size);
        return true;
    }

    /// The size of the block at `offset` (0 if none is allocated there).
    std::size_t block_size(std::size_t offset) const {
        const auto it = used_.find(offset);
        return it == used_.end() ? 0 : it->second;
    }
    /// Usable bytes (the capacity rounded down to the alignment).
    std::size_t capacity() const noexcept { return capacity_; }
    /// Bytes in allocated blocks (rounded up to the alignment each).
    std::size_t in_use() const noexcept { return in_use_; }
    /// Number of free blocks (1 for an empty arena: nothing is fragmented).
    std::size_t free_blocks() const noexcept { return by_offset_.size(); }
    /// The largest block `allocate` could give now.
    std::size_t largest_free() const noexcept {
        return by_size_.empty() ? 0 : by_size_.rbegin()->first;
    }

private:
    std::size_t round_up(std::size_t n) const noexcept {
        return (n + alignment_ - 1) / alignment_ * alignment_;
    }
    void insert_free(std::size_t offset, std::size_t size) {
        by_offset_.emplace(offset, size);
        by_size_.emplace(size, offset);
    }
    void erase_free(std::size_t offset, std::size_t size) {
        by_offset_.erase(offset);
        by_size_.erase({size, offset});
    }

    std::size_t alignment_;
    std::size_t capacity_;
    std::size_t in_use_ = 0;
    std::map<std::size_t, std::size_t> by_offset_;          // free: offset -> size
    std::set<std::pair<std::size_t, std::size_t>> by_size_; // free: (size, offset)
    std::unordered_map<std::size_t, std::size_t> used_;     // allocated: offset -> size
};

} // namespace ucx::detail
