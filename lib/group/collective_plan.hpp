// The collectives' algorithms as plans: sans-io schedules of rounds of
// transfers and local reductions, computed from (rank, size, sizes) alone and
// executed by the group (lib/group/group.cpp). The unit tests run whole groups of
// plans against each other in memory.
#pragma once

#include <ucx/reduction.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ucx::detail::coll {

/// The buffers a plan works on: the operation's input, its output (the
/// result, or the working buffer of a rank whose result is not kept), and a
/// scratch buffer the executor allocates (`plan::scratch_bytes`).
enum class buffer : std::uint8_t { in, out, scratch };

/// Bytes of one buffer.
struct region {
    buffer buf = buffer::out;
    std::size_t offset = 0;
    std::size_t length = 0;
    friend bool operator==(const region&, const region&) = default;
};

/// A message to or from `peer` (a rank of the group).
struct transfer {
    int peer = 0;
    bool send = false;
    region data;
};

/// `out = lower ∘ higher`, element by element (`lower` holds the
/// contribution of lower ranks: every rank combines in the same order, so
/// results are identical everywhere).
struct combine {
    region lower;
    region higher;
    region out;
};

struct copy {
    region from;
    region to;
};

/// One round: its transfers run at once; when all have completed, the
/// combines, then the copies, run in order.
struct round {
    std::vector<transfer> transfers;
    std::vector<combine> combines;
    std::vector<copy> copies;
};

struct plan {
    /// Which algorithm, for logs and tests ("ring", "recursive doubling", ...).
    std::string algorithm;
    /// Copies before the first round.
    std::vector<copy> prologue;
    std::vector<round> rounds;
    std::size_t scratch_bytes = 0;
    /// The bytes `out` must hold on this rank (the executor supplies a
    /// working buffer where the caller's is not used, as on the non-root
    /// ranks of a reduce).
    std::size_t out_bytes = 0;
};

/// Messages at or below this size use the latency-bound algorithms
/// (recursive doubling for allreduce, binomial trees); above it the
/// bandwidth-bound ones (ring reduce-scatter and allgather).
inline constexpr std::size_t small_message = 64 * 1024;

plan barrier(int rank, int size);
plan broadcast(int rank, int size, int root, std::size_t bytes);
/// Every rank sends `block` bytes; the root receives `size * block`.
plan gather(int rank, int size, int root, std::size_t block);
/// Rank i contributes `blocks[i]` bytes; `out` is their concatenation.
plan allgatherv(int rank, int size, std::span<const std::size_t> blocks);
/// `count` elements of `element` bytes each.
plan reduce(int rank, int size, int root, std::size_t count, std::size_t element);
plan allreduce(int rank, int size, std::size_t count, std::size_t element);
/// Every rank sends `block` bytes to each rank (`in` and `out` hold `size`
/// blocks, in rank order).
plan alltoall(int rank, int size, std::size_t block);

/// The size in bytes of one element of `t`.
std::size_t element_size(datatype t) noexcept;
/// `out[i] = lower[i] op higher[i]` for `count` elements of `t` (`out` may be
/// `lower` or `higher`).
void reduce_elements(datatype t, reduce_op op, const void* lower, const void* higher, void* out,
                     std::size_t count) noexcept;

} // namespace ucx::detail::coll
