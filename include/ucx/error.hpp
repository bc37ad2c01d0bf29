// Error codes of ucx-asio: a "ucx" error category over UCX's ucs_status_t.
#pragma once

#include <boost/system/error_code.hpp>
#include <ucs/type/status.h>

#include <type_traits>

namespace ucx {

/// The error code type used throughout the library (the one Asio uses).
using error_code = boost::system::error_code;

/// UCX status codes as an error enum. The values are the negated `ucs_status_t`
/// values, so `errc::no_memory == static_cast<errc>(-UCS_ERR_NO_MEMORY)`.
enum class errc : int {
    no_message = -UCS_ERR_NO_MESSAGE,
    no_resource = -UCS_ERR_NO_RESOURCE,
    io_error = -UCS_ERR_IO_ERROR,
    no_memory = -UCS_ERR_NO_MEMORY,
    invalid_param = -UCS_ERR_INVALID_PARAM,
    unreachable = -UCS_ERR_UNREACHABLE,
    invalid_addr = -UCS_ERR_INVALID_ADDR,
    not_implemented = -UCS_ERR_NOT_IMPLEMENTED,
    message_truncated = -UCS_ERR_MESSAGE_TRUNCATED,
    no_progress = -UCS_ERR_NO_PROGRESS,
    buffer_too_small = -UCS_ERR_BUFFER_TOO_SMALL,
    no_elem = -UCS_ERR_NO_ELEM,
    some_connects_failed = -UCS_ERR_SOME_CONNECTS_FAILED,
    no_device = -UCS_ERR_NO_DEVICE,
    busy = -UCS_ERR_BUSY,
    canceled = -UCS_ERR_CANCELED,
    shmem_segment = -UCS_ERR_SHMEM_SEGMENT,
    already_exists = -UCS_ERR_ALREADY_EXISTS,
    out_of_range = -UCS_ERR_OUT_OF_RANGE,
    timed_out = -UCS_ERR_TIMED_OUT,
    exceeds_limit = -UCS_ERR_EXCEEDS_LIMIT,
    unsupported = -UCS_ERR_UNSUPPORTED,
    rejected = -UCS_ERR_REJECTED,
    not_connected = -UCS_ERR_NOT_CONNECTED,
    connection_reset = -UCS_ERR_CONNECTION_RESET,
    first_link_failure = -UCS_ERR_FIRST_LINK_FAILURE,
    last_link_failure = -UCS_ERR_LAST_LINK_FAILURE,
    first_endpoint_failure = -UCS_ERR_FIRST_ENDPOINT_FAILURE,
    endpoint_timeout = -UCS_ERR_ENDPOINT_TIMEOUT,
    last_endpoint_failure = -UCS_ERR_LAST_ENDPOINT_FAILURE,
};

/// The "ucx" error category. `message()` is UCX's own `ucs_status_string`;
/// `default_error_condition()` maps to the portable `std::errc` conditions
/// (timed out, connection reset, not enough memory, ...) where one fits.
const boost::system::error_category& error_category() noexcept;

/// Makes an error code of the "ucx" category.
inline error_code make_error_code(errc e) noexcept {
    return error_code(static_cast<int>(e), error_category());
}

/// Converts a UCX status into an error code. `UCS_OK` and `UCS_INPROGRESS` give
/// an empty code; `UCS_ERR_CANCELED` gives `asio::error::operation_aborted`,
/// because Asio algorithms and Beast compare against that code.
error_code make_error_code(ucs_status_t status) noexcept;

} // namespace ucx

namespace boost::system {
template <>
struct is_error_code_enum<ucx::errc> : std::true_type {};
} // namespace boost::system
