// Internal: the state behind ucx::remote_key.
#pragma once

#include <ucx/remote_key.hpp>

#include "engine/worker_impl.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ucx::detail {

class endpoint_impl;

/// An unpacked rkey, owned jointly by remote_key handles and the operations
/// using it. Released before its UCP worker is destroyed.
class remote_key_impl final : public worker_resource {
public:
    remote_key_impl(std::shared_ptr<endpoint_impl> ep, const key_blob& blob, error_code& ec);
    ~remote_key_impl();
    remote_key_impl(const remote_key_impl&) = delete;
    remote_key_impl& operator=(const remote_key_impl&) = delete;

    void release_worker_resource() noexcept override;

    ucp_rkey_h native() const noexcept { return rkey_; }
    const std::shared_ptr<endpoint_impl>& endpoint() const noexcept { return ep_; }
    std::uint64_t address() const noexcept { return address_; }
    std::uint64_t length() const noexcept { return length_; }
    ucx::memory_type memory_type() const noexcept { return type_; }
    /// Whether [addr, addr + size) lies inside the region (size 0: addr may be
    /// the end).
    bool contains(std::uint64_t addr, std::size_t size) const noexcept {
        return addr >= address_ && addr - address_ <= length_ &&
               size <= length_ - (addr - address_);
    }

private:
    std::shared_ptr<endpoint_impl> ep_;
    worker_impl* worker_ = nullptr;
    ucp_rkey_h rkey_ = nullptr;
    std::uint64_t address_ = 0;
    std::uint64_t length_ = 0;
    ucx::memory_type type_ = ucx::memory_type::host;
};

} // namespace ucx::detail
