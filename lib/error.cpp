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

} // namespace

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
