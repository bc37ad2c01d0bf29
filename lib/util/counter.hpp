// Internal: a counter one thread writes and any thread reads.
#pragma once

#include <atomic>
#include <cstdint>

namespace ucx::detail {

/// A counter with a single writer (the thread that owns the object it
/// counts for) and readers on any thread. The writer's update is a relaxed
/// load and store, not a read-modify-write: on x86 and ARM the same plain
/// instructions as an ordinary integer, with no lock prefix, while readers
/// on other threads see a value that is always one the counter had.
class counter {
public:
    counter() = default;
    counter(const counter&) = delete;
    counter& operator=(const counter&) = delete;

    // Always inline, every operation: two plain instructions, which GCC
    // otherwise calls out of line from large functions such as the progress
    // loop's (a call per spinning step).
    [[gnu::always_inline]] void add(std::uint64_t n) noexcept {
        v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    [[gnu::always_inline]] void sub(std::uint64_t n) noexcept {
        v_.store(v_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
    }
    [[gnu::always_inline]] counter& operator++() noexcept {
        add(1);
        return *this;
    }
    [[gnu::always_inline]] counter& operator--() noexcept {
        sub(1);
        return *this;
    }
    [[gnu::always_inline]] counter& operator+=(std::uint64_t n) noexcept {
        add(n);
        return *this;
    }
    [[gnu::always_inline]] counter& operator-=(std::uint64_t n) noexcept {
        sub(n);
        return *this;
    }
    /// The value (from any thread).
    [[gnu::always_inline]] std::uint64_t load() const noexcept {
        return v_.load(std::memory_order_relaxed);
    }
    [[gnu::always_inline]] operator std::uint64_t() const noexcept { return load(); }

private:
    std::atomic<std::uint64_t> v_{0};
};

} // namespace ucx::detail
