#include <ucx/detail/throw_on_error.hpp>
#include <ucx/remote_key.hpp>

#include "connection/endpoint_impl.hpp"
#include "core/created.hpp"
#include "engine/worker_impl.hpp"
#include "rma/remote_key_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

namespace ucx {
namespace detail {

remote_key_impl::remote_key_impl(std::shared_ptr<endpoint_impl> ep, const key_blob& blob,
                                 error_code& ec)
    : ep_(std::move(ep)), address_(blob.address), length_(blob.length), type_(blob.memory_type) {
    ec = {};
    if (!ep_->worker()->is_open()) {
        ec = boost::asio::error::operation_aborted;
        return;
    }
    if (!ep_->native() || ep_->error()) {
        ec = ep_->error() ? ep_->error() : error_code(boost::asio::error::bad_descriptor);
        return;
    }
    if (!created(ucp_ep_rkey_unpack(ep_->native(), blob.rkey.data(), &rkey_), rkey_, ec))
        return;
    worker_ = ep_->worker().get();
    worker_->add_resource(this);
}

remote_key_impl::~remote_key_impl() {
    if (rkey_) {
        worker_->remove_resource(this);
        release_worker_resource();
    }
}

void remote_key_impl::release_worker_resource() noexcept {
    if (rkey_)
        ucp_rkey_destroy(rkey_);
    rkey_ = nullptr;
}

} // namespace detail

remote_key::remote_key(const endpoint& ep, std::span<const std::byte> blob) {
    *this = detail::throw_on_error("ucx::remote_key",
                                   [&](error_code& ec) { return remote_key(ep, blob, ec); });
}

remote_key::remote_key(const endpoint& ep, std::span<const std::byte> blob, error_code& ec) {
    const key_blob parsed = key_blob::parse(blob, ec);
    if (ec)
        return;
    const auto& ep_impl = detail::access::get_impl(ep);
    if (!ep_impl || ep_impl->close_requested()) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    auto impl = std::make_shared<detail::remote_key_impl>(ep_impl, parsed, ec);
    if (!ec)
        impl_ = std::move(impl);
}

bool remote_key::valid() const noexcept {
    return impl_ && impl_->native();
}

std::uint64_t remote_key::address() const noexcept {
    return impl_ ? impl_->address() : 0;
}

std::uint64_t remote_key::length() const noexcept {
    return impl_ ? impl_->length() : 0;
}

ucx::memory_type remote_key::memory_type() const noexcept {
    return impl_ ? impl_->memory_type() : ucx::memory_type::host;
}

bool remote_key::contains(std::uint64_t addr, std::size_t size) const noexcept {
    return impl_ && impl_->contains(addr, size);
}

ucp_rkey_h remote_key::native_handle() const noexcept {
    return impl_ ? impl_->native() : nullptr;
}

} // namespace ucx
