#include <ucx/error.hpp>

#include <boost/asio/error.hpp>

#include <string>

namespace ucx {
namespace {

class ucx_category final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "ucx"; }

    std::string message(int ev) const override {
        return ucs_status_string(static_cast<ucs_status_t>(-ev));
    }

    boost::system::error_condition default_error_condition(int ev) const noexcept override {
        using std_errc = boost::system::errc::errc_t;
        switch (static_cast<errc>(ev)) {
        case errc::no_memory:
            return make_error_condition(std_errc::not_enough_memory);
        case errc::invalid_param:
        case errc::invalid_addr:
            return make_error_condition(std_errc::invalid_argument);
        case errc::io_error:
            return make_error_condition(std_errc::io_error);
        case errc::unreachable:
            return make_error_condition(std_errc::host_unreachable);
        case errc::not_implemented:
        case errc::unsupported:
            return make_error_condition(std_errc::not_supported);
        case errc::message_truncated:
        case errc::buffer_too_small:
            return make_error_condition(std_errc::message_size);
        case errc::no_device:
            return make_error_condition(std_errc::no_such_device);
        case errc::busy:
            return make_error_condition(std_errc::device_or_resource_busy);
        case errc::no_resource:
            return make_error_condition(std_errc::resource_unavailable_try_again);
        case errc::canceled:
            return make_error_condition(std_errc::operation_canceled);
        case errc::already_exists:
            return make_error_condition(std_errc::file_exists);
        case errc::out_of_range:
            return make_error_condition(std_errc::result_out_of_range);
        case errc::timed_out:
        case errc::endpoint_timeout:
            return make_error_condition(std_errc::timed_out);
        case errc::rejected:
            return make_error_condition(std_errc::connection_refused);
        case errc::not_connected:
            return make_error_condition(std_errc::not_connected);
        case errc::connection_reset:
            return make_error_condition(std_errc::connection_reset);
        default:
            return boost::system::error_condition(ev, *this);
        }
    }
};

class library_category_impl final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "ucx.library"; }

    std::string message(int ev) const override {
        switch (static_cast<error>(ev)) {
        case error::not_connected:
            return "endpoint is not connected (made from a worker address)";
        case error::no_reply_endpoint:
            return "the sender did not allow replies";
        case error::no_socket_address:
            return "no socket address (connected by worker address)";
        case error::wrong_acceptor_kind:
            return "not an operation of this kind of acceptor";
        case error::feature_not_enabled:
            return "feature not enabled on the context";
        case error::wrong_worker:
            return "object belongs to another worker";
        case error::context_closed:
            return "the context is not open";
        case error::empty_address:
            return "empty worker address";
        case error::malformed_address:
            return "malformed worker address";
        case error::no_interface_address:
            return "no IPv4 address on that interface";
        case error::out_of_bounds:
            return "outside the remote memory region";
        case error::misaligned_address:
            return "remote address not aligned to the operand size";
        case error::invalid_am_id:
            return "active message id above am_max_id";
        case error::header_too_large:
            return "active message header too large";
        case error::no_am_allocator:
            return "no active message allocator for the memory type";
        case error::invalid_region:
            return "memory region without bytes or memory";
        case error::memory_type_not_supported:
            return "memory type not supported by this build";
        case error::key_too_large:
            return "packed remote key too large";
        case error::invalid_option:
            return "option value out of range";
        case error::null_allocator:
            return "null allocator";
        case error::allocation_failed:
            return "memory allocation failed";
        case error::no_endpoint:
            return "completed without an endpoint";
        case error::peer_unresponsive:
            return "peer unresponsive";
        case error::handshake_timeout:
            return "connection handshake timed out";
        }
        return "unknown ucx.library error";
    }

    boost::system::error_condition default_error_condition(int ev) const noexcept override {
        using std_errc = boost::system::errc::errc_t;
        switch (static_cast<error>(ev)) {
        case error::not_connected:
        case error::no_reply_endpoint:
            return make_error_condition(std_errc::not_connected);
        case error::no_socket_address:
        case error::wrong_acceptor_kind:
        case error::feature_not_enabled:
        case error::no_am_allocator:
        case error::memory_type_not_supported:
            return make_error_condition(std_errc::operation_not_supported);
        case error::wrong_worker:
        case error::empty_address:
        case error::malformed_address:
        case error::misaligned_address:
        case error::invalid_am_id:
        case error::invalid_region:
        case error::invalid_option:
        case error::null_allocator:
            return make_error_condition(std_errc::invalid_argument);
        case error::context_closed:
            return make_error_condition(std_errc::bad_file_descriptor);
        case error::no_interface_address:
            return make_error_condition(std_errc::no_such_device);
        case error::out_of_bounds:
            return make_error_condition(std_errc::result_out_of_range);
        case error::header_too_large:
            return make_error_condition(std_errc::message_size);
        case error::key_too_large:
            return make_error_condition(std_errc::value_too_large);
        case error::allocation_failed:
            return make_error_condition(std_errc::not_enough_memory);
        case error::peer_unresponsive:
        case error::handshake_timeout:
            return make_error_condition(std_errc::timed_out);
        default:
            return boost::system::error_condition(ev, *this);
        }
    }
};

} // namespace

const boost::system::error_category& library_category() noexcept {
    static const library_category_impl category;
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
