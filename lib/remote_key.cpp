#include <ucx/detail/throw_on_error.hpp>
#include <ucx/remote_key.hpp>

#include "endpoint_impl.hpp"
#include "remote_key_impl.hpp"
#include "wire.hpp"
#include "worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <cstring>
#include <string>

namespace ucx {
namespace {

constexpr std::array<std::byte, 4> magic{std::byte{'U'}, std::byte{'C'}, std::byte{'X'},
                                         std::byte{'K'}};
constexpr std::byte format_version{1};

using detail::crc32;
using detail::load_le;
using detail::store_le;

class key_category_impl final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "ucx.remote_key"; }
    std::string message(int ev) const override {
        switch (static_cast<key_errc>(ev)) {
        case key_errc::truncated:
            return "remote key blob is truncated";
        case key_errc::not_a_key:
            return "not a remote key blob (bad magic)";
        case key_errc::unsupported_version:
            return "unsupported remote key format version";
        case key_errc::corrupt:
            return "remote key blob is corrupt (checksum or fields)";
        case key_errc::no_key:
            return "no remote key";
        case key_errc::wrong_endpoint:
            return "remote key belongs to another endpoint";
        }
        return "unknown remote key error";
    }
};

} // namespace

const boost::system::error_category& key_category() noexcept {
    static const key_category_impl instance;
    return instance;
}

std::vector<std::byte> key_blob::build(std::uint64_t address, std::uint64_t length,
                                       ucx::memory_type type, std::span<const std::byte> rkey) {
    if (rkey.size() > max_rkey_size)
        return {};
    std::vector<std::byte> out(header_size + rkey.size() + trailer_size);
    std::memcpy(out.data(), magic.data(), magic.size());
    out[4] = format_version;
    out[5] = static_cast<std::byte>(type);
    store_le(out, 8, address);
    store_le(out, 16, length);
    store_le(out, 24, static_cast<std::uint32_t>(rkey.size()));
    if (!rkey.empty())
        std::memcpy(out.data() + header_size, rkey.data(), rkey.size());
    const std::size_t body = header_size + rkey.size();
    store_le(out, body, crc32(std::span<const std::byte>(out.data(), body)));
    return out;
}

key_blob key_blob::parse(std::span<const std::byte> blob, error_code& ec) noexcept {
    auto fail = [&](key_errc e) {
        ec = make_error_code(e);
        return key_blob{};
    };
    // What is present of the magic must match before anything else: a short
    // foreign blob is foreign, a short key blob is truncated.
    const std::size_t magic_part = std::min(blob.size(), magic.size());
    if (magic_part > 0 && std::memcmp(blob.data(), magic.data(), magic_part) != 0)
        return fail(key_errc::not_a_key);
    if (blob.size() < header_size + trailer_size)
        return fail(key_errc::truncated);
    if (blob[4] != format_version)
        return fail(key_errc::unsupported_version);
    const std::uint64_t rkey_size = load_le<std::uint32_t>(blob, 24);
    if (rkey_size > max_rkey_size)
        return fail(key_errc::corrupt);
    const std::size_t expected = header_size + rkey_size + trailer_size;
    if (blob.size() < expected)
        return fail(key_errc::truncated);
    if (blob.size() > expected)
        return fail(key_errc::corrupt);
    const std::size_t body = header_size + rkey_size;
    if (crc32(blob.first(body)) != load_le<std::uint32_t>(blob, body))
        return fail(key_errc::corrupt);
    key_blob k;
    k.address = load_le<std::uint64_t>(blob, 8);
    k.length = load_le<std::uint64_t>(blob, 16);
    const auto type = std::to_integer<unsigned>(blob[5]);
    if (type > static_cast<unsigned>(ucx::memory_type::cuda_managed) || blob[6] != std::byte{0} ||
        blob[7] != std::byte{0} || rkey_size == 0 || k.length == 0 ||
        k.address + k.length < k.address)
        return fail(key_errc::corrupt);
    k.memory_type = static_cast<ucx::memory_type>(type);
    k.rkey = blob.subspan(header_size, rkey_size);
    ec = {};
    return k;
}

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
    if (ucs_status_t st = ucp_ep_rkey_unpack(ep_->native(), blob.rkey.data(), &rkey_);
        st != UCS_OK) {
        rkey_ = nullptr;
        ec = make_error_code(st);
        return;
    }
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
    if (!ep_impl) {
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
