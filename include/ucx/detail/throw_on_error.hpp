// Internal: the throwing overloads of the library's error_code functions.
#pragma once

#include <ucx/error.hpp>

#include <boost/system/system_error.hpp>

#include <type_traits>
#include <utility>

namespace ucx::detail {

/// Calls `fn(ec)` and returns what it returns; throws
/// `boost::system::system_error(ec, what)` if it reported an error.
template <class Fn>
auto throw_on_error(const char* what, Fn&& fn) {
    error_code ec;
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&, error_code&>>) {
        fn(ec);
        if (ec)
            throw boost::system::system_error(ec, what);
    } else {
        auto result = fn(ec);
        if (ec)
            throw boost::system::system_error(ec, what);
        return result;
    }
}

} // namespace ucx::detail
