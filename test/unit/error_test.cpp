// Unit tests of the "ucx" error category (no UCX traffic).
#include <ucx/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/errc.hpp>
#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace {

namespace sys_errc = boost::system::errc;

TEST(ErrorCategory, NameIsUcx) {
    EXPECT_STREQ(ucx::error_category().name(), "ucx");
    EXPECT_EQ(&ucx::make_error_code(ucx::errc::io_error).category(), &ucx::error_category());
    EXPECT_STREQ(ucx::make_error_code(ucx::errc::io_error).category().name(), "ucx");
}

TEST(ErrorCategory, MessageIsUcsStatusString) {
    const std::vector<std::pair<ucx::errc, ucs_status_t>> cases{
        {ucx::errc::no_message, UCS_ERR_NO_MESSAGE},
        {ucx::errc::io_error, UCS_ERR_IO_ERROR},
        {ucx::errc::no_memory, UCS_ERR_NO_MEMORY},
        {ucx::errc::invalid_addr, UCS_ERR_INVALID_ADDR},
        {ucx::errc::message_truncated, UCS_ERR_MESSAGE_TRUNCATED},
        {ucx::errc::busy, UCS_ERR_BUSY},
        {ucx::errc::timed_out, UCS_ERR_TIMED_OUT},
        {ucx::errc::rejected, UCS_ERR_REJECTED},
        {ucx::errc::connection_reset, UCS_ERR_CONNECTION_RESET},
        {ucx::errc::endpoint_timeout, UCS_ERR_ENDPOINT_TIMEOUT},
    };
    for (const auto& [e, status] : cases) {
        const ucx::error_code ec = ucx::make_error_code(e);
        EXPECT_EQ(ec.message(), std::string(ucs_status_string(status))) << ec.value();
        // The status string must be a real description, not UCX's fallback.
        EXPECT_FALSE(ec.message().empty());
    }
    // Distinct statuses give distinct messages (guards against a constant message()).
    EXPECT_NE(ucx::make_error_code(ucx::errc::timed_out).message(),
              ucx::make_error_code(ucx::errc::connection_reset).message());
    // system_error carries the UCX message.
    const boost::system::system_error se(ucx::make_error_code(ucx::errc::unreachable), "ctx");
    EXPECT_NE(std::string(se.what()).find(ucs_status_string(UCS_ERR_UNREACHABLE)),
              std::string::npos)
        << se.what();
}

TEST(ErrorCategory, ErrcValuesAreNegatedStatuses) {
    EXPECT_EQ(static_cast<int>(ucx::errc::no_message), -UCS_ERR_NO_MESSAGE);
    EXPECT_EQ(static_cast<int>(ucx::errc::no_resource), -UCS_ERR_NO_RESOURCE);
    EXPECT_EQ(static_cast<int>(ucx::errc::no_memory), -UCS_ERR_NO_MEMORY);
    EXPECT_EQ(static_cast<int>(ucx::errc::invalid_addr), -UCS_ERR_INVALID_ADDR);
    EXPECT_EQ(static_cast<int>(ucx::errc::message_truncated), -UCS_ERR_MESSAGE_TRUNCATED);
    EXPECT_EQ(static_cast<int>(ucx::errc::busy), -UCS_ERR_BUSY);
    EXPECT_EQ(static_cast<int>(ucx::errc::canceled), -UCS_ERR_CANCELED);
    EXPECT_EQ(static_cast<int>(ucx::errc::timed_out), -UCS_ERR_TIMED_OUT);
    EXPECT_EQ(static_cast<int>(ucx::errc::rejected), -UCS_ERR_REJECTED);
    EXPECT_EQ(static_cast<int>(ucx::errc::connection_reset), -UCS_ERR_CONNECTION_RESET);
    EXPECT_EQ(static_cast<int>(ucx::errc::endpoint_timeout), -UCS_ERR_ENDPOINT_TIMEOUT);
    EXPECT_EQ(static_cast<int>(ucx::errc::last_endpoint_failure), -UCS_ERR_LAST_ENDPOINT_FAILURE);
    // make_error_code(ucs_status_t) and make_error_code(errc) agree.
    for (int s = UCS_ERR_NO_MESSAGE; s >= UCS_ERR_LAST_ENDPOINT_FAILURE; --s) {
        if (s == UCS_ERR_CANCELED)
            continue;
        const ucx::error_code ec = ucx::make_error_code(static_cast<ucs_status_t>(s));
        EXPECT_EQ(ec, ucx::make_error_code(static_cast<ucx::errc>(-s))) << s;
        EXPECT_EQ(ec.value(), -s);
        EXPECT_TRUE(ec.failed()) << s;
    }
}

TEST(ErrorCategory, ErrcConvertsImplicitly) {
    // is_error_code_enum<ucx::errc>: an errc converts to error_code directly.
    const ucx::error_code ec = ucx::errc::invalid_addr;
    EXPECT_EQ(&ec.category(), &ucx::error_category());
    EXPECT_EQ(ec.value(), -UCS_ERR_INVALID_ADDR);
    EXPECT_TRUE(ec == ucx::errc::invalid_addr);
    EXPECT_FALSE(ec == ucx::errc::invalid_param);
}

TEST(ErrorCategory, DefaultErrorConditionIsPortable) {
    using ucx::make_error_code;
    EXPECT_TRUE(make_error_code(ucx::errc::timed_out) == sys_errc::timed_out);
    EXPECT_TRUE(make_error_code(ucx::errc::endpoint_timeout) == sys_errc::timed_out);
    EXPECT_TRUE(make_error_code(ucx::errc::connection_reset) == sys_errc::connection_reset);
    EXPECT_TRUE(make_error_code(ucx::errc::no_memory) == sys_errc::not_enough_memory);
    EXPECT_TRUE(make_error_code(ucx::errc::message_truncated) == sys_errc::message_size);
    EXPECT_TRUE(make_error_code(ucx::errc::rejected) == sys_errc::connection_refused);
    EXPECT_TRUE(make_error_code(ucx::errc::not_connected) == sys_errc::not_connected);
    EXPECT_TRUE(make_error_code(ucx::errc::unreachable) == sys_errc::host_unreachable);
    EXPECT_TRUE(make_error_code(ucx::errc::invalid_param) == sys_errc::invalid_argument);
    EXPECT_TRUE(make_error_code(ucx::errc::unsupported) == sys_errc::not_supported);
    // And not to the wrong ones.
    EXPECT_FALSE(make_error_code(ucx::errc::timed_out) == sys_errc::connection_reset);
    EXPECT_FALSE(make_error_code(ucx::errc::connection_reset) == sys_errc::timed_out);
    EXPECT_FALSE(make_error_code(ucx::errc::no_memory) == sys_errc::timed_out);

    const auto cond = make_error_code(ucx::errc::timed_out).default_error_condition();
    EXPECT_EQ(cond.category(), boost::system::generic_category());
    EXPECT_EQ(cond.value(), static_cast<int>(sys_errc::timed_out));

    // A status without a portable equivalent keeps the "ucx" category.
    const auto own = make_error_code(ucx::errc::no_elem).default_error_condition();
    EXPECT_EQ(&own.category(), &ucx::error_category());
    EXPECT_EQ(own.value(), -UCS_ERR_NO_ELEM);
}

TEST(ErrorCategory, StatusOkIsEmpty) {
    EXPECT_FALSE(ucx::make_error_code(UCS_OK));
    EXPECT_EQ(ucx::make_error_code(UCS_OK).value(), 0);
    EXPECT_FALSE(ucx::make_error_code(UCS_INPROGRESS));
    EXPECT_TRUE(ucx::make_error_code(UCS_ERR_IO_ERROR));
}

TEST(ErrorCategory, CanceledIsOperationAborted) {
    const ucx::error_code ec = ucx::make_error_code(UCS_ERR_CANCELED);
    EXPECT_EQ(ec, boost::asio::error::operation_aborted);
    EXPECT_EQ(ec, ucx::error_code(boost::asio::error::operation_aborted));
    EXPECT_NE(&ec.category(), &ucx::error_category());
    // Other statuses are not operation_aborted.
    EXPECT_NE(ucx::make_error_code(UCS_ERR_CONNECTION_RESET),
              boost::asio::error::operation_aborted);
}

} // namespace
