// The collectives' plans (see collective_plan.hpp).
#include "group/collective_plan.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

namespace ucx::detail::coll {

namespace {

int mod(int a, int n) noexcept {
    return ((a % n) + n) % n;
}

region out(std::size_t offset, std::size_t length) noexcept {
    return {buffer::out, offset, length};
}
region in(std::size_t offset, std::size_t length) noexcept {
    return {buffer::in, offset, length};
}
region scratch(std::size_t offset, std::size_t length) noexcept {
    return {buffer::scratch, offset, length};
}

/// The elements of block `i` of `count` split in `n` blocks (the first
/// `count % n` blocks have one more).
std::pair<std::size_t, std::size_t> block_of(std::size_t count, int n, int i) noexcept {
    const std::size_t base = count / static_cast<std::size_t>(n);
    const std::size_t extra = count % static_cast<std::size_t>(n);
    const auto u = static_cast<std::size_t>(i);
    const std::size_t first = u * base + std::min(u, extra);
    return {first, base + (u < extra ? 1 : 0)};
}

} // namespace

plan barrier(int rank, int size) {
    // Dissemination: in round k every rank signals rank + 2^k and waits for
    // rank - 2^k; after ceil(log2 size) rounds everyone has heard, directly
    // or not, from everyone.
    plan p;
    p.algorithm = "dissemination";
    for (int k = 1; k < size; k <<= 1) {
        round r;
        r.transfers.push_back({mod(rank + k, size), true, out(0, 0)});
        r.transfers.push_back({mod(rank - k, size), false, out(0, 0)});
        p.rounds.push_back(std::move(r));
    }
    return p;
}

plan broadcast(int rank, int size, int root, std::size_t bytes) {
    // Binomial tree over ranks relative to the root: a rank receives from
    // the rank without its highest set bit, then sends to the ranks that
    // add one higher bit, largest subtree first (log2 size steps deep). The
    // root's first child, the root of the largest subtree, is its neighbour
    // (rank root + 1): with ranks dealt round-robin over cores or hosts, the
    // root and its first forwarder do not share one.
    plan p;
    p.algorithm = "binomial tree";
    p.out_bytes = bytes;
    const int v = mod(rank - root, size);
    int high = 0;
    if (v != 0) {
        high = static_cast<int>(std::bit_floor(static_cast<unsigned>(v)));
        round r;
        r.transfers.push_back({mod(v - high + root, size), false, out(0, bytes)});
        p.rounds.push_back(std::move(r));
    }
    round sends;
    for (int k = v == 0 ? 1 : high << 1; v + k < size; k <<= 1)
        sends.transfers.push_back({mod(v + k + root, size), true, out(0, bytes)});
    if (!sends.transfers.empty())
        p.rounds.push_back(std::move(sends));
    return p;
}

plan gather(int rank, int size, int root, std::size_t block) {
    // Direct: every rank sends its block to the root, which receives them
    // all at once (one round; the root's link carries size - 1 blocks, as in
    // any gather).
    plan p;
    p.algorithm = "direct";
    round r;
    if (rank == root) {
        p.out_bytes = block * static_cast<std::size_t>(size);
        p.prologue.push_back({in(0, block), out(block * static_cast<std::size_t>(rank), block)});
        for (int j = 0; j < size; ++j)
            if (j != root)
                r.transfers.push_back({j, false, out(block * static_cast<std::size_t>(j), block)});
    } else {
        r.transfers.push_back({root, true, in(0, block)});
    }
    if (!r.transfers.empty())
        p.rounds.push_back(std::move(r));
    return p;
}

plan allgatherv(int rank, int size, std::span<const std::size_t> blocks) {
    plan p;
    std::vector<std::size_t> offset(static_cast<std::size_t>(size) + 1, 0);
    for (int i = 0; i < size; ++i)
        offset[i + 1] = offset[i] + blocks[i];
    p.out_bytes = offset.back();
    auto blk = [&](int i) { return out(offset[i], blocks[i]); };
    p.prologue.push_back({in(0, blocks[rank]), blk(rank)});
    if ((size & (size - 1)) == 0 && p.out_bytes <= small_message) {
        // Recursive doubling (a power-of-two group, small data): after step
        // k each rank holds the blocks of its aligned run of 2^(k+1) ranks;
        // in step k it swaps its run of 2^k with the partner rank ^ 2^k.
        // log2 size steps instead of the ring's size - 1.
        p.algorithm = "recursive doubling";
        for (int mask = 1; mask < size; mask <<= 1) {
            const int base = rank & ~(mask - 1), other = base ^ mask;
            const auto run = [&](int first) {
                return out(offset[first], offset[first + mask] - offset[first]);
            };
            round r;
            r.transfers.push_back({rank ^ mask, true, run(base)});
            r.transfers.push_back({rank ^ mask, false, run(other)});
            p.rounds.push_back(std::move(r));
        }
        return p;
    }
    // Ring: in step s each rank passes the block it received in step s - 1
    // (its own first) to its right neighbour; size - 1 steps, every link
    // carries each block once.
    p.algorithm = "ring";
    const int right = mod(rank + 1, size), left = mod(rank - 1, size);
    for (int s = 0; s < size - 1; ++s) {
        round r;
        r.transfers.push_back({right, true, blk(mod(rank - s, size))});
        r.transfers.push_back({left, false, blk(mod(rank - s - 1, size))});
        p.rounds.push_back(std::move(r));
    }
    return p;
}

plan reduce(int rank, int size, int root, std::size_t count, std::size_t element) {
    // Binomial tree towards the root over ranks relative to it: a rank
    // combines what its subtrees send, then sends the sum to its parent
    // (log2 size steps). Each rank combines its own (lower relative rank)
    // with the subtree's, so the root's result does not depend on timing.
    plan p;
    p.algorithm = "binomial tree";
    const std::size_t bytes = count * element;
    p.out_bytes = bytes;
    p.scratch_bytes = bytes;
    p.prologue.push_back({in(0, bytes), out(0, bytes)});
    const int v = mod(rank - root, size);
    for (int mask = 1; mask < size; mask <<= 1) {
        round r;
        if (v & mask) {
            r.transfers.push_back({mod(v - mask + root, size), true, out(0, bytes)});
            p.rounds.push_back(std::move(r));
            break;
        }
        if (v + mask < size) {
            r.transfers.push_back({mod(v + mask + root, size), false, scratch(0, bytes)});
            r.combines.push_back({out(0, bytes), scratch(0, bytes), out(0, bytes)});
            p.rounds.push_back(std::move(r));
        }
    }
    return p;
}

namespace {

plan allreduce_recursive_doubling(int rank, int size, std::size_t bytes) {
    // Recursive doubling over the largest power of two p2 <= size: the first
    // 2 * (size - p2) ranks pair up, the even one of each pair hands its data
    // to the odd one and gets the result at the end. Then log2(p2) rounds of
    // exchanges with rank ^ 2^k. Both partners combine lower with higher, so
    // every rank ends with the same bits.
    plan p;
    p.algorithm = "recursive doubling";
    p.out_bytes = bytes;
    p.scratch_bytes = bytes;
    p.prologue.push_back({in(0, bytes), out(0, bytes)});
    const int p2 = std::bit_floor(static_cast<unsigned>(size));
    const int rem = size - p2;
    int newrank;
    if (rank < 2 * rem) {
        round r;
        if (rank % 2 == 0) {
            r.transfers.push_back({rank + 1, true, out(0, bytes)});
            p.rounds.push_back(std::move(r));
            round last;
            last.transfers.push_back({rank + 1, false, out(0, bytes)});
            // The even rank skips the exchanges: it waits for the result.
            p.rounds.push_back(std::move(last));
            return p;
        }
        r.transfers.push_back({rank - 1, false, scratch(0, bytes)});
        r.combines.push_back({scratch(0, bytes), out(0, bytes), out(0, bytes)});
        p.rounds.push_back(std::move(r));
        newrank = rank / 2;
    } else {
        newrank = rank - rem;
        if (rem > 0)
            p.rounds.emplace_back(); // keeps the round numbers aligned
    }
    auto actual = [rem](int n) { return n < rem ? 2 * n + 1 : n + rem; };
    for (int mask = 1; mask < p2; mask <<= 1) {
        const int partner = actual(newrank ^ mask);
        round r;
        r.transfers.push_back({partner, true, out(0, bytes)});
        r.transfers.push_back({partner, false, scratch(0, bytes)});
        if (partner < rank)
            r.combines.push_back({scratch(0, bytes), out(0, bytes), out(0, bytes)});
        else
            r.combines.push_back({out(0, bytes), scratch(0, bytes), out(0, bytes)});
        p.rounds.push_back(std::move(r));
    }
    if (rank < 2 * rem) {
        round r;
        r.transfers.push_back({rank - 1, true, out(0, bytes)});
        p.rounds.push_back(std::move(r));
    }
    return p;
}

plan allreduce_ring(int rank, int size, std::size_t count, std::size_t element) {
    // Ring reduce-scatter then ring allgather: the data is cut in size
    // blocks; in size - 1 steps each block travels the ring once being
    // combined, ending whole on one rank; in size - 1 more steps the whole
    // blocks travel once more. Each link carries 2 (size - 1) / size of the
    // data: bandwidth-optimal. Each block is combined by one chain, then
    // copied, so every rank has the same bits.
    plan p;
    p.algorithm = "ring";
    const std::size_t bytes = count * element;
    p.out_bytes = bytes;
    std::size_t largest = 0;
    for (int i = 0; i < size; ++i)
        largest = std::max(largest, block_of(count, size, i).second * element);
    p.scratch_bytes = largest;
    p.prologue.push_back({in(0, bytes), out(0, bytes)});
    auto blk = [&](int i) {
        const auto [first, n] = block_of(count, size, mod(i, size));
        return out(first * element, n * element);
    };
    const int right = mod(rank + 1, size), left = mod(rank - 1, size);
    for (int s = 0; s < size - 1; ++s) {
        round r;
        r.transfers.push_back({right, true, blk(rank - s)});
        const region target = blk(rank - s - 1);
        r.transfers.push_back({left, false, scratch(0, target.length)});
        // The block arriving from the left holds the chain so far.
        r.combines.push_back({scratch(0, target.length), target, target});
        p.rounds.push_back(std::move(r));
    }
    // This rank now holds block rank + 1 whole.
    for (int s = 0; s < size - 1; ++s) {
        round r;
        r.transfers.push_back({right, true, blk(rank + 1 - s)});
        r.transfers.push_back({left, false, blk(rank - s)});
        p.rounds.push_back(std::move(r));
    }
    return p;
}

} // namespace

plan allreduce(int rank, int size, std::size_t count, std::size_t element) {
    const std::size_t bytes = count * element;
    if (size == 1) {
        plan p;
        p.algorithm = "local";
        p.out_bytes = bytes;
        p.prologue.push_back({in(0, bytes), out(0, bytes)});
        return p;
    }
    if (bytes <= small_message || count < static_cast<std::size_t>(size))
        return allreduce_recursive_doubling(rank, size, bytes);
    return allreduce_ring(rank, size, count, element);
}

plan alltoall(int rank, int size, std::size_t block) {
    // Direct: every rank sends each block to its rank and receives one from
    // each, all at once, starting with its right neighbour so that no rank
    // is everyone's first.
    plan p;
    p.algorithm = "direct";
    const auto at = [block](int i) { return block * static_cast<std::size_t>(i); };
    p.out_bytes = at(size);
    p.prologue.push_back({in(at(rank), block), out(at(rank), block)});
    round r;
    for (int k = 1; k < size; ++k) {
        const int to = mod(rank + k, size), from = mod(rank - k, size);
        r.transfers.push_back({to, true, in(at(to), block)});
        r.transfers.push_back({from, false, out(at(from), block)});
    }
    if (!r.transfers.empty())
        p.rounds.push_back(std::move(r));
    return p;
}

std::size_t element_size(datatype t) noexcept {
    switch (t) {
    case datatype::int8:
    case datatype::uint8:
        return 1;
    case datatype::int16:
    case datatype::uint16:
        return 2;
    case datatype::int32:
    case datatype::uint32:
    case datatype::float32:
        return 4;
    case datatype::int64:
    case datatype::uint64:
    case datatype::float64:
        return 8;
    }
    return 1;
}

namespace {

/// The type integers of type T are summed and multiplied in: unsigned and at
/// least as wide as `unsigned` (the result wraps, as two's complement does,
/// without signed overflow); T itself for floating point.
template <class T>
struct arithmetic {
    using type = T;
};
template <class T>
requires std::is_integral_v<T>
struct arithmetic<T> {
    using type =
        std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <class T>
using arithmetic_t = typename arithmetic<T>::type;

template <class T>
void apply(reduce_op op, const void* lower, const void* higher, void* out,
           std::size_t count) noexcept {
    using A = arithmetic_t<T>;
    const T* a = static_cast<const T*>(lower);
    const T* b = static_cast<const T*>(higher);
    T* o = static_cast<T*>(out);
    switch (op) {
    case reduce_op::sum:
        for (std::size_t i = 0; i < count; ++i)
            o[i] = static_cast<T>(static_cast<A>(a[i]) + static_cast<A>(b[i]));
        break;
    case reduce_op::prod:
        for (std::size_t i = 0; i < count; ++i)
            o[i] = static_cast<T>(static_cast<A>(a[i]) * static_cast<A>(b[i]));
        break;
    case reduce_op::min:
        for (std::size_t i = 0; i < count; ++i)
            o[i] = b[i] < a[i] ? b[i] : a[i];
        break;
    case reduce_op::max:
        for (std::size_t i = 0; i < count; ++i)
            o[i] = a[i] < b[i] ? b[i] : a[i];
        break;
    }
}

} // namespace

void reduce_elements(datatype t, reduce_op op, const void* lower, const void* higher, void* out,
                     std::size_t count) noexcept {
    switch (t) {
    case datatype::int8:
        return apply<std::int8_t>(op, lower, higher, out, count);
    case datatype::uint8:
        return apply<std::uint8_t>(op, lower, higher, out, count);
    case datatype::int16:
        return apply<std::int16_t>(op, lower, higher, out, count);
    case datatype::uint16:
        return apply<std::uint16_t>(op, lower, higher, out, count);
    case datatype::int32:
        return apply<std::int32_t>(op, lower, higher, out, count);
    case datatype::uint32:
        return apply<std::uint32_t>(op, lower, higher, out, count);
    case datatype::int64:
        return apply<std::int64_t>(op, lower, higher, out, count);
    case datatype::uint64:
        return apply<std::uint64_t>(op, lower, higher, out, count);
    case datatype::float32:
        return apply<float>(op, lower, higher, out, count);
    case datatype::float64:
        return apply<double>(op, lower, higher, out, count);
    }
}

} // namespace ucx::detail::coll
