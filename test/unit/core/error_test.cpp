// Unit tests of the "ucx" and "ucx.library" error categories (no UCX traffic).
#include <ucx/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/errc.hpp>
#include <boost/system/system_error.hpp>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <system_error>
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

// Every ucx::error, in declaration order.
const std::vector<ucx::error> all_library_errors{
    ucx::error::not_connected,
    ucx::error::no_reply_endpoint,
    ucx::error::no_socket_address,
    ucx::error::wrong_acceptor_kind,
    ucx::error::feature_not_enabled,
    ucx::error::wrong_worker,
    ucx::error::context_closed,
    ucx::error::empty_address,
    ucx::error::malformed_address,
    ucx::error::no_interface_address,
    ucx::error::out_of_bounds,
    ucx::error::misaligned_address,
    ucx::error::invalid_am_id,
    ucx::error::header_too_large,
    ucx::error::no_am_allocator,
    ucx::error::invalid_region,
    ucx::error::memory_type_not_supported,
    ucx::error::key_too_large,
    ucx::error::invalid_option,
    ucx::error::null_allocator,
    ucx::error::allocation_failed,
    ucx::error::no_endpoint,
    ucx::error::peer_unresponsive,
    ucx::error::handshake_timeout,
    ucx::error::handshake_failed,
    ucx::error::authentication_failed,
    ucx::error::unknown_option,
    ucx::error::no_launch_environment,
    ucx::error::invalid_launch_environment,
    ucx::error::atomics_unsupported,
    ucx::error::store_timeout,
    ucx::error::store_protocol_error,
    ucx::error::invalid_rank,
    ucx::error::group_failed,
    ucx::error::collective_mismatch,
    ucx::error::group_timeout,
    ucx::error::cuda_unavailable,
    ucx::error::cuda_error,
    ucx::error::nccl_unavailable,
    ucx::error::store_value_too_large,
    ucx::error::store_not_regular_file,
    ucx::error::no_launch_store,
    ucx::error::pmix_failed,
    ucx::error::pmi_failed,
};

TEST(LibraryCategory, NameIsUcxLibrary) {
    EXPECT_STREQ(ucx::library_category().name(), "ucx.library");
    const ucx::error_code ec = ucx::make_error_code(ucx::error::not_connected);
    EXPECT_EQ(&ec.category(), &ucx::library_category());
    EXPECT_STREQ(ec.category().name(), "ucx.library");
    EXPECT_NE(&ucx::library_category(), &ucx::error_category());
}

TEST(LibraryCategory, ValuesAreDenseFromOne) {
    // Zero is success; the list above covers every enumerator.
    for (std::size_t i = 0; i < all_library_errors.size(); ++i)
        EXPECT_EQ(static_cast<int>(all_library_errors[i]), static_cast<int>(i) + 1);
    // One past the last enumerator is an unknown value.
    const int past = static_cast<int>(all_library_errors.size()) + 1;
    EXPECT_EQ(ucx::library_category().message(past), "unknown ucx.library error");
}

TEST(LibraryCategory, EveryCodeHasItsOwnMessage) {
    std::set<std::string> seen;
    const std::string unknown = ucx::library_category().message(0);
    for (const ucx::error e : all_library_errors) {
        const ucx::error_code ec = ucx::make_error_code(e);
        EXPECT_TRUE(ec.failed()) << ec.value();
        EXPECT_FALSE(ec.message().empty()) << ec.value();
        EXPECT_NE(ec.message(), unknown) << ec.value();
        EXPECT_TRUE(seen.insert(ec.message()).second) << "duplicate message: " << ec.message();
    }
    // system_error carries the message.
    const boost::system::system_error se(ucx::error::out_of_bounds, "ucx::async_put");
    EXPECT_NE(std::string(se.what()).find("outside the remote memory region"), std::string::npos)
        << se.what();
}

TEST(LibraryCategory, ErrorConvertsImplicitly) {
    // is_error_code_enum<ucx::error>: an error converts to error_code directly.
    const ucx::error_code ec = ucx::error::invalid_am_id;
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::invalid_am_id));
    EXPECT_EQ(&ec.category(), &ucx::library_category());
    EXPECT_EQ(ec.value(), static_cast<int>(ucx::error::invalid_am_id));
    EXPECT_TRUE(ec == ucx::error::invalid_am_id);
    EXPECT_FALSE(ec == ucx::error::header_too_large);
}

TEST(LibraryCategory, DistinctFromTheUcxCodesItReplaces) {
    // Same names, different categories: a library code never equals a UCX status.
    EXPECT_NE(ucx::make_error_code(ucx::error::not_connected),
              ucx::make_error_code(ucx::errc::not_connected));
    EXPECT_FALSE(ucx::make_error_code(ucx::error::out_of_bounds) == ucx::errc::out_of_range);
    EXPECT_FALSE(ucx::make_error_code(ucx::errc::invalid_param) == ucx::error::invalid_option);
    // Nor Asio's codes.
    EXPECT_NE(ucx::make_error_code(ucx::error::context_closed),
              ucx::error_code(boost::asio::error::bad_descriptor));
    EXPECT_NE(ucx::make_error_code(ucx::error::not_connected),
              ucx::error_code(boost::asio::error::not_connected));
}

TEST(LibraryCategory, DefaultErrorConditionIsPortable) {
    const std::vector<std::pair<ucx::error, sys_errc::errc_t>> cases{
        {ucx::error::not_connected, sys_errc::not_connected},
        {ucx::error::no_reply_endpoint, sys_errc::not_connected},
        {ucx::error::no_socket_address, sys_errc::operation_not_supported},
        {ucx::error::wrong_acceptor_kind, sys_errc::operation_not_supported},
        {ucx::error::feature_not_enabled, sys_errc::operation_not_supported},
        {ucx::error::no_am_allocator, sys_errc::operation_not_supported},
        {ucx::error::memory_type_not_supported, sys_errc::operation_not_supported},
        {ucx::error::wrong_worker, sys_errc::invalid_argument},
        {ucx::error::empty_address, sys_errc::invalid_argument},
        {ucx::error::malformed_address, sys_errc::invalid_argument},
        {ucx::error::misaligned_address, sys_errc::invalid_argument},
        {ucx::error::invalid_am_id, sys_errc::invalid_argument},
        {ucx::error::invalid_region, sys_errc::invalid_argument},
        {ucx::error::invalid_option, sys_errc::invalid_argument},
        {ucx::error::null_allocator, sys_errc::invalid_argument},
        {ucx::error::context_closed, sys_errc::bad_file_descriptor},
        {ucx::error::no_interface_address, sys_errc::no_such_device},
        {ucx::error::out_of_bounds, sys_errc::result_out_of_range},
        {ucx::error::header_too_large, sys_errc::message_size},
        {ucx::error::key_too_large, sys_errc::value_too_large},
        {ucx::error::allocation_failed, sys_errc::not_enough_memory},
        {ucx::error::peer_unresponsive, sys_errc::timed_out},
        {ucx::error::handshake_timeout, sys_errc::timed_out},
        {ucx::error::handshake_failed, sys_errc::protocol_error},
        {ucx::error::authentication_failed, sys_errc::permission_denied},
    };
    for (const auto& [e, cond] : cases) {
        const ucx::error_code ec = ucx::make_error_code(e);
        EXPECT_TRUE(ec == cond) << ec.message();
        const auto c = ec.default_error_condition();
        EXPECT_EQ(c.category(), boost::system::generic_category()) << ec.message();
        EXPECT_EQ(c.value(), static_cast<int>(cond)) << ec.message();
    }
    // And not to the wrong ones.
    EXPECT_FALSE(ucx::make_error_code(ucx::error::not_connected) == sys_errc::invalid_argument);
    EXPECT_FALSE(ucx::make_error_code(ucx::error::invalid_am_id) == sys_errc::not_connected);
    EXPECT_FALSE(ucx::make_error_code(ucx::error::header_too_large) == sys_errc::invalid_argument);
    EXPECT_FALSE(ucx::make_error_code(ucx::error::allocation_failed) == sys_errc::timed_out);

    // A code without a portable equivalent keeps the "ucx.library" category.
    const auto own = ucx::make_error_code(ucx::error::no_endpoint).default_error_condition();
    EXPECT_EQ(&own.category(), &ucx::library_category());
    EXPECT_EQ(own.value(), static_cast<int>(ucx::error::no_endpoint));
}

TEST(LibraryCategory, ComparesWithStdErrc) {
    // boost::system::error_code compares with std::errc conditions as well.
    const ucx::error_code ec = ucx::error::feature_not_enabled;
    EXPECT_TRUE(ec == std::errc::operation_not_supported);
    EXPECT_FALSE(ec == std::errc::invalid_argument);
    EXPECT_TRUE(ucx::error_code(ucx::error::not_connected) == std::errc::not_connected);
    EXPECT_TRUE(ucx::error_code(ucx::error::out_of_bounds) == std::errc::result_out_of_range);
    EXPECT_TRUE(ucx::error_code(ucx::error::header_too_large) == std::errc::message_size);
    EXPECT_TRUE(ucx::error_code(ucx::error::invalid_option) == std::errc::invalid_argument);
    EXPECT_TRUE(ucx::error_code(ucx::error::allocation_failed) == std::errc::not_enough_memory);
    // Converted to std::error_code, the portable condition still matches.
    const std::error_code sec = ucx::error_code(ucx::error::not_connected);
    EXPECT_TRUE(sec == std::errc::not_connected);
    EXPECT_STREQ(sec.category().name(), "ucx.library");
}

// ---- ucx::condition ----

// Each code the library renamed, with the code it had before: both match
// one condition, so code that compares against the condition works with
// either version.
TEST(ConditionCategory, EachRenamedCodeMatchesTheConditionOfItsFormerName) {
    struct rename {
        ucx::error now;
        ucx::errc before;
        ucx::condition both;
    };
    const rename renames[] = {
        {ucx::error::out_of_bounds, ucx::errc::out_of_range, ucx::condition::out_of_bounds},
        {ucx::error::not_connected, ucx::errc::not_connected, ucx::condition::not_connected},
        {ucx::error::no_reply_endpoint, ucx::errc::not_connected, ucx::condition::not_connected},
        {ucx::error::feature_not_enabled, ucx::errc::unsupported, ucx::condition::not_supported},
        {ucx::error::no_socket_address, ucx::errc::unsupported, ucx::condition::not_supported},
        {ucx::error::wrong_acceptor_kind, ucx::errc::unsupported, ucx::condition::not_supported},
        {ucx::error::memory_type_not_supported, ucx::errc::unsupported,
         ucx::condition::not_supported},
        {ucx::error::no_am_allocator, ucx::errc::unsupported, ucx::condition::not_supported},
        {ucx::error::wrong_worker, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::context_closed, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::empty_address, ucx::errc::invalid_addr, ucx::condition::invalid_argument},
        {ucx::error::malformed_address, ucx::errc::invalid_addr, ucx::condition::invalid_argument},
        {ucx::error::misaligned_address, ucx::errc::invalid_param,
         ucx::condition::invalid_argument},
        {ucx::error::invalid_am_id, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::header_too_large, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::invalid_region, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::invalid_option, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::null_allocator, ucx::errc::invalid_param, ucx::condition::invalid_argument},
        {ucx::error::no_interface_address, ucx::errc::no_device, ucx::condition::no_device},
        {ucx::error::key_too_large, ucx::errc::exceeds_limit, ucx::condition::too_large},
        {ucx::error::allocation_failed, ucx::errc::no_memory, ucx::condition::out_of_memory},
        {ucx::error::no_endpoint, ucx::errc::no_elem, ucx::condition::no_endpoint},
    };
    for (const rename& r : renames) {
        SCOPED_TRACE(ucx::make_error_code(r.now).message());
        const ucx::error_code now = r.now, before = r.before;
        EXPECT_FALSE(now == before); // codes compare exactly
        EXPECT_TRUE(now == r.both);
        EXPECT_TRUE(before == r.both);
        EXPECT_TRUE(r.both == now); // either side
        EXPECT_FALSE(now != r.both);
    }
}

TEST(ConditionCategory, GathersTheCodesOfEveryCategoryThatMeanOneThing) {
    namespace aerr = boost::asio::error;
    // A lost peer: UCX's resets and endpoint and link failures, the library's
    // silence detection, Asio's reset.
    for (const ucx::error_code ec :
         {ucx::error_code(ucx::errc::connection_reset),
          ucx::error_code(ucx::errc::endpoint_timeout),
          ucx::make_error_code(UCS_ERR_ENDPOINT_TIMEOUT), ucx::make_error_code(ucs_status_t(-61)),
          ucx::make_error_code(ucs_status_t(-45)), ucx::error_code(ucx::error::peer_unresponsive),
          ucx::error_code(aerr::connection_reset)})
        EXPECT_TRUE(ec == ucx::condition::peer_lost) << ec.message();
    for (const ucx::error_code ec :
         {ucx::error_code(ucx::errc::timed_out), ucx::error_code(ucx::error::handshake_timeout),
          ucx::error_code(ucx::error::store_timeout), ucx::error_code(ucx::error::group_timeout),
          ucx::error_code(aerr::timed_out)})
        EXPECT_TRUE(ec == ucx::condition::timed_out) << ec.message();
    EXPECT_TRUE(ucx::error_code(aerr::operation_aborted) == ucx::condition::cancelled);
    EXPECT_TRUE(ucx::make_error_code(UCS_ERR_CANCELED) == ucx::condition::cancelled);
    EXPECT_TRUE(ucx::error_code(ucx::errc::canceled) == ucx::condition::cancelled);
    EXPECT_TRUE(ucx::error_code(ucx::error::store_value_too_large) == ucx::condition::too_large);
    EXPECT_TRUE(ucx::error_code(aerr::invalid_argument) == ucx::condition::invalid_argument);
    EXPECT_TRUE(ucx::error_code(ucx::error::invalid_rank) == ucx::condition::invalid_argument);

    // Not the others.
    EXPECT_FALSE(ucx::error_code(aerr::eof) == ucx::condition::peer_lost);
    EXPECT_FALSE(ucx::error_code(ucx::error::group_failed) == ucx::condition::timed_out);
    EXPECT_FALSE(ucx::error_code(ucx::errc::timed_out) == ucx::condition::peer_lost);
    EXPECT_FALSE(ucx::error_code(ucx::error::out_of_bounds) == ucx::condition::invalid_argument);
    EXPECT_FALSE(ucx::error_code(aerr::bad_descriptor) == ucx::condition::cancelled);
    EXPECT_FALSE(ucx::error_code() == ucx::condition::cancelled);
    EXPECT_FALSE(ucx::error_code(ucx::errc::invalid_param) == ucx::condition::not_supported);
    // A value that is no condition matches nothing and has a message.
    const boost::system::error_condition none(99, ucx::condition_category());
    EXPECT_FALSE(ucx::error_code(ucx::errc::invalid_param) == none);
    EXPECT_EQ(none.message(), "unknown ucx.condition");
}

TEST(ConditionCategory, NameAndMessages) {
    const boost::system::error_condition c = ucx::condition::peer_lost;
    EXPECT_STREQ(c.category().name(), "ucx.condition");
    EXPECT_EQ(&c.category(), &ucx::condition_category());
    EXPECT_EQ(c.message(), "the peer was lost");
    EXPECT_EQ(ucx::make_error_condition(ucx::condition::out_of_bounds).message(),
              "outside the remote memory region");
}

} // namespace
