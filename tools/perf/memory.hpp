// ucx-asio-perf: where the messages live (--memory host|cuda) and the
// device-to-host copy bandwidth that bounds a staged transfer of device
// memory.
//
// A `buffer` holds a message in host memory or in CUDA device memory
// (cudaMalloc). Filling and checking content go through host memory for a
// device buffer (cudaMemcpy), outside the measured path unless --check asks
// for it. Without CUDA in the build, or without a device, a device buffer
// cannot be made: `cuda_unavailable_reason()` says why, and the tool
// refuses --memory cuda with it.
#pragma once

#include "options.hpp"

#include <boost/asio/buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace perf {

/// Why device memory cannot be used here ("" when it can).
std::string cuda_unavailable_reason();

/// A message buffer of a fixed size in host or device memory; copies copy
/// the bytes (and the kind of memory).
class buffer {
public:
    buffer() = default;
    /// `n` bytes (zeroed) in `m`; throws `failure` if device memory cannot
    /// be had.
    buffer(std::size_t n, memory m);
    buffer(const buffer& other);
    buffer(buffer&& other) noexcept;
    buffer& operator=(buffer other) noexcept;
    ~buffer();

    std::byte* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    bool on_device() const noexcept { return memory_ == memory::cuda; }

    /// The bytes as an Asio buffer.
    boost::asio::mutable_buffer view() const noexcept { return {data_, size_}; }

    /// Fills every byte with message `seq`'s content (see `perf::fill`).
    void fill(std::uint64_t seq);
    /// Sets every byte to zero.
    void clear();

    friend void swap(buffer& a, buffer& b) noexcept;

private:
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    memory memory_ = memory::host;
};

/// Throws `failure` unless the `b.size()` bytes at `b` (host or device
/// memory, whichever they are) hold message `seq`.
void check_any(boost::asio::const_buffer b, std::uint64_t seq, const char* what);

/// The bandwidth of plain CUDA copies of `size`-byte blocks between device
/// memory and pinned host memory, each way, in MiB/s (0 where CUDA is not
/// available): the ceiling of a transfer of device memory staged through
/// host memory.
struct copy_ceiling {
    double device_to_host_mib_s = 0;
    double host_to_device_mib_s = 0;
};
copy_ceiling measure_copy_ceiling(std::size_t size);

} // namespace perf
