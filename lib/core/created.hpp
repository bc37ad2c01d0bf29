// Internal: the end of a UCX call that creates a handle.
#pragma once

#include <ucx/error.hpp>

#include <ucs/type/status.h>

namespace ucx::detail {

/// Takes the status of a UCX call that created `handle`: on failure leaves
/// `handle` null and sets `ec`. Whether the call succeeded.
template <class Handle>
bool created(ucs_status_t st, Handle& handle, error_code& ec) noexcept {
    if (st == UCS_OK)
        return true;
    handle = nullptr;
    ec = make_error_code(st);
    return false;
}

} // namespace ucx::detail
