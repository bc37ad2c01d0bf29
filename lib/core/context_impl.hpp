// Internal: the shared state behind ucx::context.
#pragma once

#include <ucx/am_allocator.hpp>
#include <ucx/context.hpp>

#include <memory>
#include <string>

namespace ucx::detail {

class context_impl {
public:
    context_impl(const context_options& options, error_code& ec);
    ~context_impl();
    context_impl(const context_impl&) = delete;
    context_impl& operator=(const context_impl&) = delete;

    ucp_context_h native() const noexcept { return handle_; }
    feature features() const noexcept { return features_; }
    bool multi_threaded() const noexcept { return multi_threaded_; }
    const std::string& printed_config() const noexcept { return printed_config_; }
    /// Whether UCX's TCP transport takes IPv6 addresses before IPv4 ones
    /// (`TCP_AF_PRIO` from the options' settings, else `UCX_TCP_AF_PRIO`,
    /// starts with `inet6`; UCX's default is `inet,inet6`).
    bool tcp_prefers_ipv6() const noexcept { return tcp_prefers_ipv6_; }
    /// Whether UCX performs atomics on endpoints in peer error mode (false
    /// with UCX 1.16 and later and their protocol layer; lib/core/context.cpp).
    bool atomics_supported() const noexcept { return atomics_supported_; }
    /// Whether UCX's memory types include CUDA device memory.
    bool ucx_cuda_memory() const noexcept { return ucx_cuda_memory_; }
    const cuda_options& cuda() const noexcept { return cuda_; }
    /// The device memory pool of active-message receives shared by the
    /// context's workers (`cuda_options::pool_size`); null without one.
    const std::shared_ptr<cuda_pool_allocator>& cuda_pool() const noexcept { return cuda_pool_; }

private:
    ucp_context_h handle_ = nullptr;
    feature features_{};
    bool multi_threaded_ = false;
    std::string printed_config_;
    bool tcp_prefers_ipv6_ = false;
    bool atomics_supported_ = true;
    bool ucx_cuda_memory_ = false;
    cuda_options cuda_{};
    std::shared_ptr<cuda_pool_allocator> cuda_pool_;
};

/// Makes the CUDA primary context of `device` current on this thread
/// (lib/core/memory_type.cpp): `cuda_unavailable` or `cuda_error` on failure.
error_code make_cuda_context(int device) noexcept;

} // namespace ucx::detail
