// ucx::memory_region: memory registered with UCX for remote access.
#pragma once

#include <ucx/context.hpp>
#include <ucx/error.hpp>
#include <ucx/memory_type.hpp>

#include <boost/asio/buffer.hpp>
#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ucx {

namespace detail {
class context_impl;
}

/// Who may access a registered region. Combine with `|`.
enum class access : unsigned {
    local_read = UCP_MEM_MAP_PROT_LOCAL_READ,
    local_write = UCP_MEM_MAP_PROT_LOCAL_WRITE,
    remote_read = UCP_MEM_MAP_PROT_REMOTE_READ,
    remote_write = UCP_MEM_MAP_PROT_REMOTE_WRITE,
    /// Local and remote reads and writes (the default).
    all = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
          UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE,
};

constexpr access operator|(access a, access b) noexcept {
    return static_cast<access>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

/// Options of a region: its access rights and memory type.
struct region_options {
    /// Access rights; UCX may grant more than asked on transports that cannot
    /// restrict access (TCP, shared memory), so do not rely on them for safety.
    ucx::access access = ucx::access::all;
    /// The memory type. `cuda` needs a library built with CUDA support
    /// (`built_with_cuda()`) and a UCX with CUDA transports
    /// (`context::ucx_supports_cuda_memory()`); otherwise registration fails
    /// with `ucx::error::memory_type_not_supported`, before UCX sees it.
    ucx::memory_type memory_type = ucx::memory_type::host;
};

/// A region of memory registered with a UCX context (`ucp_mem_map`), so that
/// peers can read and write it with `async_get`/`async_put` and atomics once
/// they have its key (`pack_key()`, then `ucx::remote_key` on their side).
///
/// Either wraps memory the caller owns (which must outlive the region) or
/// memory UCX allocates (`memory_region::allocate`, freed with the region).
/// The destructor unregisters (`ucp_mem_unmap`). Keys already handed out do
/// not keep the region alive: see docs/guide/rma.md about using a key after its
/// region went away (the user's contract; UCX cannot detect it).
///
/// Movable, not copyable. The context stays alive while the region does.
class memory_region {
public:
    /// An empty region (no memory).
    memory_region() noexcept = default;

    /// Registers `size` bytes at `data`, which the caller owns.
    /// Throws `boost::system::system_error` on failure: `size` 0 or a null
    /// `data`: `ucx::error::invalid_region`; a memory type this build lacks:
    /// `ucx::error::memory_type_not_supported`; a closed context:
    /// `asio::error::bad_descriptor`; UCX's status from `ucp_mem_map`.
    memory_region(const context& ctx, void* data, std::size_t size,
                  const region_options& options = {});
    /// As above; reports failure through `ec` (and leaves the region empty).
    memory_region(const context& ctx, void* data, std::size_t size, const region_options& options,
                  error_code& ec);

    /// Lets UCX allocate and register `size` bytes (`UCP_MEM_MAP_ALLOCATE`).
    /// Throws `boost::system::system_error` on failure (errors as above;
    /// `size` 0: `ucx::error::invalid_region`). UCX allocates device memory
    /// (`memory_type::cuda`) in the CUDA context current on the calling
    /// thread: without one it fails with UCX's `UCS_ERR_NO_MEMORY`
    /// ("no active cuda primary context"). `cuda_options::create_context`,
    /// or any CUDA runtime call on the device (`cudaSetDevice`, then
    /// `cudaFree(nullptr)`), makes one current.
    static memory_region allocate(const context& ctx, std::size_t size,
                                  const region_options& options = {});
    /// As above; reports failure through `ec` (and returns an empty region).
    static memory_region allocate(const context& ctx, std::size_t size,
                                  const region_options& options, error_code& ec);

    memory_region(memory_region&& other) noexcept;
    memory_region& operator=(memory_region&& other) noexcept;
    memory_region(const memory_region&) = delete;
    memory_region& operator=(const memory_region&) = delete;
    /// Unregisters (and frees memory UCX allocated).
    ~memory_region();

    /// Whether the region holds registered memory.
    bool is_registered() const noexcept { return memh_ != nullptr; }
    explicit operator bool() const noexcept { return is_registered(); }
    /// Start of the region (for allocated memory, as `ucp_mem_query` reports it).
    void* data() const noexcept { return data_; }
    /// Its length in bytes: the size asked for (UCX may register a little
    /// more, rounded to its alignment; keys cover only this size).
    std::size_t size() const noexcept { return size_; }
    /// The address peers use (`data()` as an integer).
    std::uint64_t address() const noexcept { return reinterpret_cast<std::uintptr_t>(data_); }
    /// The memory type it was registered with.
    ucx::memory_type memory_type() const noexcept { return type_; }
    /// The whole region as an Asio buffer.
    boost::asio::mutable_buffer buffer() const noexcept { return {data_, size_}; }

    /// Packs the region's key into the portable blob that `ucx::remote_key`
    /// unpacks on a peer (see remote_key.hpp for the format). Send it by any
    /// means. Throws `boost::system::system_error` on failure.
    std::vector<std::byte> pack_key() const;
    /// As above; reports failure through `ec` (empty region:
    /// `asio::error::bad_descriptor`; UCX's packed key over the blob's
    /// limit: `ucx::error::key_too_large`).
    std::vector<std::byte> pack_key(error_code& ec) const;

    /// Unregisters now; the region becomes empty. Idempotent.
    void reset() noexcept;

    /// The UCP memory handle (null when empty).
    ucp_mem_h native_handle() const noexcept { return memh_; }

private:
    void map(const context& ctx, void* data, std::size_t size, const region_options& options,
             bool allocate, error_code& ec);

    std::shared_ptr<detail::context_impl> context_;
    ucp_mem_h memh_ = nullptr;
    void* data_ = nullptr;
    std::size_t size_ = 0;
    ucx::memory_type type_ = ucx::memory_type::host;
};

} // namespace ucx
