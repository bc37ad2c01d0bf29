// Internal: the implementation behind a public object, for the operations
// that need one.
#pragma once

#include <ucx/detail/access.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

namespace ucx::detail {

/// The implementation of `obj`; throws `boost::system::system_error`
/// (`asio::error::bad_descriptor`, with `what`) if it has none.
template <class T>
const auto& checked_impl(const T& obj, const char* what) {
    const auto& impl = access::get_impl(obj);
    if (!impl)
        throw boost::system::system_error(boost::asio::error::bad_descriptor, what);
    return impl;
}

} // namespace ucx::detail
