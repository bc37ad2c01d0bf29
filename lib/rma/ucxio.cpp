#include <ucx/detail/throw_on_error.hpp>
#include <ucx/ucxio.hpp>

#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "rma/remote_key_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <limits>

namespace ucx {
namespace detail {

const std::shared_ptr<endpoint_impl>& checked(const remote_key& key) {
    const auto& impl = access::get_impl(key);
    if (!impl)
        throw boost::system::system_error(make_error_code(key_errc::no_key), "ucx::ucxio");
    return impl->endpoint();
}

namespace {

// Starts `op` and settles what needs no UCX: returns the byte count to move
// (0 means `op` is already settled).
std::size_t prepare(endpoint_impl& ep, rma_op* op, const key_ptr& key, std::uint64_t offset,
                    std::size_t size, bool write) {
    const std::uint64_t length = key ? key->length() : 0;
    if (key && size > 0 && offset < length)
        return static_cast<std::size_t>(std::min<std::uint64_t>(size, length - offset));
    if (!ep.begin(op, false))
        return 0;
    if (!key)
        ep.worker()->complete(op, make_error_code(key_errc::no_key));
    else if (size == 0)
        ep.submitted(op, UCS_STATUS_PTR(UCS_OK));
    else if (write)
        ep.worker()->complete(op, make_error_code(error::out_of_bounds));
    else
        ep.worker()->complete(op, boost::asio::error::eof);
    return 0;
}

} // namespace

void ucxio_read(endpoint_impl& ep, rma_op* op, const key_ptr& key, std::uint64_t offset, void* data,
                std::size_t size) noexcept {
    op->kind = operation_kind::get;
    if (std::size_t n = prepare(ep, op, key, offset, size, false))
        rma_get(ep, op, data, n, key->address() + offset, key);
}

void ucxio_write(endpoint_impl& ep, rma_op* op, const key_ptr& key, std::uint64_t offset,
                 const void* data, std::size_t size) noexcept {
    op->kind = operation_kind::put;
    if (std::size_t n = prepare(ep, op, key, offset, size, true))
        rma_put(ep, op, data, n, key->address() + offset, key);
}

} // namespace detail

std::uint64_t ucxio::seek(std::int64_t offset, seek_basis basis, error_code& ec) noexcept {
    std::uint64_t origin = 0;
    switch (basis) {
    case seek_basis::begin:
        origin = 0;
        break;
    case seek_basis::current:
        origin = position_;
        break;
    case seek_basis::end:
        origin = size();
        break;
    }
    std::uint64_t result = 0;
    if (offset >= 0) {
        result = origin + static_cast<std::uint64_t>(offset);
        if (result < origin ||
            result > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            ec = boost::asio::error::invalid_argument;
            return position_;
        }
    } else {
        const std::uint64_t back = static_cast<std::uint64_t>(-(offset + 1)) + 1;
        if (back > origin) {
            ec = boost::asio::error::invalid_argument;
            return position_;
        }
        result = origin - back;
    }
    ec = {};
    position_ = result;
    return result;
}

std::uint64_t ucxio::seek(std::int64_t offset, seek_basis basis) {
    return detail::throw_on_error("ucx::ucxio::seek",
                                  [&](error_code& ec) { return seek(offset, basis, ec); });
}

} // namespace ucx
