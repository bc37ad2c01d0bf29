#include <ucx/error.hpp>

#include "core/error_category.hpp"

#include <boost/asio/error.hpp>

#include <string>

namespace ucx {
namespace {

using detail::std_errc;

// The portable conditions of UCX's codes; the others map to themselves.
constexpr detail::error_row<errc> ucx_conditions[] = {
    {.code = errc::no_memory, .condition = std_errc::not_enough_memory},
    {.code = errc::invalid_param, .condition = std_errc::invalid_argument},
    {.code = errc::invalid_addr, .condition = std_errc::invalid_argument},
    {.code = errc::io_error, .condition = std_errc::io_error},
    {.code = errc::unreachable, .condition = std_errc::host_unreachable},
    {.code = errc::not_implemented, .condition = std_errc::not_supported},
    {.code = errc::unsupported, .condition = std_errc::not_supported},
    {.code = errc::message_truncated, .condition = std_errc::message_size},
    {.code = errc::buffer_too_small, .condition = std_errc::message_size},
    {.code = errc::no_device, .condition = std_errc::no_such_device},
    {.code = errc::busy, .condition = std_errc::device_or_resource_busy},
    {.code = errc::no_resource, .condition = std_errc::resource_unavailable_try_again},
    {.code = errc::canceled, .condition = std_errc::operation_canceled},
    {.code = errc::already_exists, .condition = std_errc::file_exists},
    {.code = errc::out_of_range, .condition = std_errc::result_out_of_range},
    {.code = errc::timed_out, .condition = std_errc::timed_out},
    {.code = errc::endpoint_timeout, .condition = std_errc::timed_out},
    {.code = errc::rejected, .condition = std_errc::connection_refused},
    {.code = errc::not_connected, .condition = std_errc::not_connected},
    {.code = errc::connection_reset, .condition = std_errc::connection_reset},
};

// UCX's own text (`ucs_status_string`) is the message of every code.
class ucx_category final : public detail::table_category<errc> {
public:
    ucx_category() noexcept : table_category("ucx", ucx_conditions, nullptr) {}

    std::string message(int ev) const override {
        return ucs_status_string(static_cast<ucs_status_t>(-ev));
    }
};

// Each library error's message, and its portable condition where one fits.
constexpr detail::error_row<error> library_errors[] = {
    {error::not_connected,
     "endpoint has no library connection (made from a worker address, or plain)",
     std_errc::not_connected},
    {error::no_reply_endpoint, "the sender did not allow replies", std_errc::not_connected},
    {error::no_socket_address, "no socket address (connected by worker address)",
     std_errc::operation_not_supported},
    {error::wrong_acceptor_kind, "not an operation of this kind of acceptor",
     std_errc::operation_not_supported},
    {error::feature_not_enabled, "feature not enabled on the context",
     std_errc::operation_not_supported},
    {error::wrong_worker, "object belongs to another worker", std_errc::invalid_argument},
    {error::context_closed, "the context is not open", std_errc::bad_file_descriptor},
    {error::empty_address, "empty worker address", std_errc::invalid_argument},
    {error::malformed_address, "malformed worker address", std_errc::invalid_argument},
    {error::no_interface_address, "no IPv4 address on that interface", std_errc::no_such_device},
    {error::out_of_bounds, "outside the remote memory region", std_errc::result_out_of_range},
    {error::misaligned_address, "remote address not aligned to the operand size",
     std_errc::invalid_argument},
    {error::invalid_am_id, "active message id above am_max_id", std_errc::invalid_argument},
    {error::header_too_large, "active message header too large", std_errc::message_size},
    {error::no_am_allocator, "no active message allocator for the memory type",
     std_errc::operation_not_supported},
    {error::invalid_region, "memory region without bytes or memory", std_errc::invalid_argument},
    {error::memory_type_not_supported, "memory type not supported by this build",
     std_errc::operation_not_supported},
    {error::key_too_large, "packed remote key too large", std_errc::value_too_large},
    {error::invalid_option, "option value out of range", std_errc::invalid_argument},
    {error::null_allocator, "null allocator", std_errc::invalid_argument},
    {error::allocation_failed, "memory allocation failed", std_errc::not_enough_memory},
    {error::no_endpoint, "completed without an endpoint"},
    {error::peer_unresponsive, "peer unresponsive", std_errc::timed_out},
    {error::handshake_timeout, "connection handshake timed out", std_errc::timed_out},
    {error::handshake_failed, "connection handshake failed: the peer does not speak the protocol",
     std_errc::protocol_error},
    {error::authentication_failed, "connection handshake: authentication failed",
     std_errc::permission_denied},
    {error::unknown_option, "no such option", std_errc::invalid_argument},
    {error::no_launch_environment, "no launcher's variables give the rank and size",
     std_errc::invalid_argument},
    {error::invalid_launch_environment, "a launcher's variable is malformed or inconsistent",
     std_errc::invalid_argument},
    {error::atomics_unsupported,
     "this UCX performs no atomics on endpoints in peer error mode (UCX 1.16 and later)",
     std_errc::operation_not_supported},
    {error::store_timeout, "rendezvous store operation timed out", std_errc::timed_out},
    {error::store_protocol_error, "rendezvous store protocol error", std_errc::protocol_error},
    {error::invalid_rank, "rank outside the group", std_errc::invalid_argument},
    {error::group_failed, "group failed: a rank died, stopped answering or left",
     std_errc::connection_aborted},
    {error::collective_mismatch, "ranks called different collectives or arguments",
     std_errc::protocol_error},
    {error::group_timeout, "group operation timed out", std_errc::timed_out},
    {error::cuda_unavailable, "no usable CUDA device (or built without CUDA)",
     std_errc::no_such_device},
    {error::cuda_error, "a CUDA runtime call failed", std_errc::io_error},
    {error::nccl_unavailable, "NCCL could not be loaded", std_errc::operation_not_supported},
    {error::store_value_too_large, "rendezvous store value larger than the store's bound",
     std_errc::value_too_large},
    {error::store_not_regular_file, "rendezvous store key file is not a regular file",
     std_errc::invalid_argument},
    {error::no_launch_store, "no rendezvous store in the launch environment",
     std_errc::invalid_argument},
    {error::pmix_failed, "a PMIx call failed", std_errc::io_error},
    {error::pmi_failed, "the launcher's PMI server failed", std_errc::io_error},
};

// ---- ucx::condition ----

constexpr const char* condition_messages[] = {
    "unknown ucx.condition",
    "outside the remote memory region",
    "invalid argument",
    "operation not supported here",
    "not connected to the peer",
    "out of memory",
    "no such device",
    "value too large",
    "no endpoint",
    "the peer was lost",
    "timed out",
    "operation cancelled",
};

/// The codes of the library's enums each condition gathers.
struct member {
    condition cond;
    int value;
    bool library; // ucx::error (else ucx::errc)
};

constexpr member members[] = {
    {condition::out_of_bounds, static_cast<int>(error::out_of_bounds), true},
    {condition::out_of_bounds, static_cast<int>(errc::out_of_range), false},
    {condition::invalid_argument, static_cast<int>(errc::invalid_param), false},
    {condition::invalid_argument, static_cast<int>(errc::invalid_addr), false},
    {condition::invalid_argument, static_cast<int>(error::wrong_worker), true},
    {condition::invalid_argument, static_cast<int>(error::context_closed), true},
    {condition::invalid_argument, static_cast<int>(error::empty_address), true},
    {condition::invalid_argument, static_cast<int>(error::malformed_address), true},
    {condition::invalid_argument, static_cast<int>(error::misaligned_address), true},
    {condition::invalid_argument, static_cast<int>(error::invalid_am_id), true},
    {condition::invalid_argument, static_cast<int>(error::header_too_large), true},
    {condition::invalid_argument, static_cast<int>(error::invalid_region), true},
    {condition::invalid_argument, static_cast<int>(error::invalid_option), true},
    {condition::invalid_argument, static_cast<int>(error::unknown_option), true},
    {condition::invalid_argument, static_cast<int>(error::null_allocator), true},
    {condition::invalid_argument, static_cast<int>(error::invalid_rank), true},
    {condition::not_supported, static_cast<int>(errc::unsupported), false},
    {condition::not_supported, static_cast<int>(errc::not_implemented), false},
    {condition::not_supported, static_cast<int>(error::feature_not_enabled), true},
    {condition::not_supported, static_cast<int>(error::no_socket_address), true},
    {condition::not_supported, static_cast<int>(error::wrong_acceptor_kind), true},
    {condition::not_supported, static_cast<int>(error::memory_type_not_supported), true},
    {condition::not_supported, static_cast<int>(error::no_am_allocator), true},
    {condition::not_supported, static_cast<int>(error::atomics_unsupported), true},
    {condition::not_connected, static_cast<int>(errc::not_connected), false},
    {condition::not_connected, static_cast<int>(error::not_connected), true},
    {condition::not_connected, static_cast<int>(error::no_reply_endpoint), true},
    {condition::out_of_memory, static_cast<int>(errc::no_memory), false},
    {condition::out_of_memory, static_cast<int>(error::allocation_failed), true},
    {condition::no_device, static_cast<int>(errc::no_device), false},
    {condition::no_device, static_cast<int>(error::no_interface_address), true},
    {condition::too_large, static_cast<int>(errc::exceeds_limit), false},
    {condition::too_large, static_cast<int>(error::key_too_large), true},
    {condition::too_large, static_cast<int>(error::store_value_too_large), true},
    {condition::no_endpoint, static_cast<int>(errc::no_elem), false},
    {condition::no_endpoint, static_cast<int>(error::no_endpoint), true},
    {condition::peer_lost, static_cast<int>(errc::connection_reset), false},
    {condition::peer_lost, static_cast<int>(error::peer_unresponsive), true},
    {condition::timed_out, static_cast<int>(errc::timed_out), false},
    {condition::timed_out, static_cast<int>(errc::endpoint_timeout), false},
    {condition::timed_out, static_cast<int>(error::handshake_timeout), true},
    {condition::timed_out, static_cast<int>(error::store_timeout), true},
    {condition::timed_out, static_cast<int>(error::group_timeout), true},
    {condition::cancelled, static_cast<int>(errc::canceled), false},
};

class condition_category_impl : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "ucx.condition"; }

    std::string message(int ev) const override {
        if (ev <= 0 || ev >= static_cast<int>(std::size(condition_messages)))
            return condition_messages[0];
        return condition_messages[ev];
    }

    bool equivalent(const boost::system::error_code& code, int ev) const noexcept override {
        const auto c = static_cast<condition>(ev);
        const auto& cat = code.category();
        const int v = code.value();
        if (cat == ucx::error_category()) {
            // UCX's link and endpoint failures are ranges of statuses.
            if (c == condition::peer_lost &&
                ((v >= static_cast<int>(errc::first_endpoint_failure) &&
                  v <= static_cast<int>(errc::last_endpoint_failure)) ||
                 (v >= static_cast<int>(errc::first_link_failure) &&
                  v <= static_cast<int>(errc::last_link_failure))))
                return true;
        } else if (cat != ucx::library_category()) {
            // Asio's codes for the same meanings.
            switch (c) {
            case condition::peer_lost:
                return code == boost::asio::error::connection_reset;
            case condition::timed_out:
                return code == boost::asio::error::timed_out;
            case condition::cancelled:
                return code == boost::asio::error::operation_aborted;
            case condition::invalid_argument:
                // A tag outside its operation's range, buffers that do not fit.
                return code == boost::asio::error::invalid_argument;
            default:
                return false;
            }
        }
        const bool library = cat == ucx::library_category();
        for (const member& m : members)
            if (m.cond == c && m.library == library && m.value == v)
                return true;
        return false;
    }
};

} // namespace

const boost::system::error_category& condition_category() noexcept {
    static const condition_category_impl category;
    return category;
}

const boost::system::error_category& library_category() noexcept {
    static const detail::table_category<error> category("ucx.library", library_errors,
                                                        "unknown ucx.library error");
    return category;
}

const boost::system::error_category& error_category() noexcept {
    static const ucx_category category;
    return category;
}

error_code make_error_code(ucs_status_t status) noexcept {
    if (status == UCS_OK || status == UCS_INPROGRESS)
        return {};
    if (status == UCS_ERR_CANCELED)
        return boost::asio::error::operation_aborted;
    return make_error_code(static_cast<errc>(-status));
}

} // namespace ucx
