#include <ucx/detail/throw_on_error.hpp>
#include <ucx/memory_region.hpp>
#include <ucx/remote_key.hpp>

#include "core/context_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <cstring>
#include <utility>

namespace ucx {
namespace {

ucs_memory_type_t to_ucs(ucx::memory_type t) noexcept {
    switch (t) {
    case ucx::memory_type::cuda:
        return UCS_MEMORY_TYPE_CUDA;
    case ucx::memory_type::cuda_managed:
        return UCS_MEMORY_TYPE_CUDA_MANAGED;
    case ucx::memory_type::host:
        break;
    }
    return UCS_MEMORY_TYPE_HOST;
}

} // namespace

memory_region::memory_region(const context& ctx, void* data, std::size_t size,
                             const region_options& options) {
    detail::throw_on_error("ucx::memory_region",
                           [&](error_code& ec) { map(ctx, data, size, options, false, ec); });
}

memory_region::memory_region(const context& ctx, void* data, std::size_t size,
                             const region_options& options, error_code& ec) {
    map(ctx, data, size, options, false, ec);
}

memory_region memory_region::allocate(const context& ctx, std::size_t size,
                                      const region_options& options) {
    return detail::throw_on_error("ucx::memory_region::allocate",
                                  [&](error_code& ec) { return allocate(ctx, size, options, ec); });
}

memory_region memory_region::allocate(const context& ctx, std::size_t size,
                                      const region_options& options, error_code& ec) {
    memory_region r;
    r.map(ctx, nullptr, size, options, true, ec);
    return r;
}

void memory_region::map(const context& ctx, void* data, std::size_t size,
                        const region_options& options, bool allocate, error_code& ec) {
    ec = {};
    if (!detail::access::get_impl(ctx) || !ctx.native_handle()) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    if (size == 0 || (!allocate && data == nullptr)) {
        ec = make_error_code(error::invalid_region);
        return;
    }
#ifndef UCX_ASIO_HAS_CUDA
    if (options.memory_type != ucx::memory_type::host) {
        ec = make_error_code(error::memory_type_not_supported);
        return;
    }
#endif
    if (options.memory_type != ucx::memory_type::host &&
        !detail::access::get_impl(ctx)->ucx_cuda_memory()) {
        // A UCX without CUDA transports cannot register device memory (its
        // operations are staged through host memory, but a peer cannot
        // reach device memory one-sidedly): refused before UCX sees it.
        ec = make_error_code(error::memory_type_not_supported);
        return;
    }
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS |
                        UCP_MEM_MAP_PARAM_FIELD_PROT | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    params.length = size;
    params.prot = static_cast<unsigned>(options.access);
    params.memory_type = to_ucs(options.memory_type);
    if (allocate) {
        params.flags = UCP_MEM_MAP_ALLOCATE;
    } else {
        params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_ADDRESS;
        params.address = data;
    }
    ucp_mem_h memh = nullptr;
    if (ucs_status_t st = ucp_mem_map(ctx.native_handle(), &params, &memh); st != UCS_OK) {
        ec = make_error_code(st);
        return;
    }
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    if (ucs_status_t st = ucp_mem_query(memh, &attr); st != UCS_OK) {
        ucp_mem_unmap(ctx.native_handle(), memh);
        ec = make_error_code(st);
        return;
    }
    reset();
    context_ = detail::access::get_impl(ctx);
    memh_ = memh;
    // UCX may register (or allocate) more than asked, rounded to its
    // alignment; the region is what the caller asked for, so that keys never
    // reach past it.
    data_ = allocate ? attr.address : data;
    size_ = size;
    type_ = options.memory_type;
}

memory_region::memory_region(memory_region&& other) noexcept
    : context_(std::move(other.context_)), memh_(std::exchange(other.memh_, nullptr)),
      data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      type_(other.type_) {}

memory_region& memory_region::operator=(memory_region&& other) noexcept {
    if (this != &other) {
        reset();
        context_ = std::move(other.context_);
        memh_ = std::exchange(other.memh_, nullptr);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        type_ = other.type_;
    }
    return *this;
}

memory_region::~memory_region() {
    reset();
}

void memory_region::reset() noexcept {
    if (memh_)
        ucp_mem_unmap(context_->native(), memh_);
    memh_ = nullptr;
    data_ = nullptr;
    size_ = 0;
    context_.reset();
}

std::vector<std::byte> memory_region::pack_key() const {
    return detail::throw_on_error("ucx::memory_region::pack_key",
                                  [&](error_code& ec) { return pack_key(ec); });
}

std::vector<std::byte> memory_region::pack_key(error_code& ec) const {
    ec = {};
    if (!memh_) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    void* packed = nullptr;
    std::size_t packed_size = 0;
    if (ucs_status_t st = ucp_rkey_pack(context_->native(), memh_, &packed, &packed_size);
        st != UCS_OK) {
        ec = make_error_code(st);
        return {};
    }
    std::vector<std::byte> blob;
    try {
        blob = key_blob::build(address(), size_, type_,
                               {static_cast<const std::byte*>(packed), packed_size});
    } catch (...) {
        ucp_rkey_buffer_release(packed);
        throw;
    }
    ucp_rkey_buffer_release(packed);
    if (blob.empty())
        ec = make_error_code(error::key_too_large);
    return blob;
}

} // namespace ucx
