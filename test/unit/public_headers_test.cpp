// What <ucx/asio.hpp> brings with it: no Beast (its support is the opt-in
// <ucx/beast.hpp>). Checked at compile time; the test only has to build.
#include <ucx/asio.hpp>

#include <gtest/gtest.h>

// Every Beast header includes its configuration header.
#if defined(BOOST_BEAST_CORE_DETAIL_CONFIG_HPP) || defined(BOOST_BEAST_VERSION)
#error "<ucx/asio.hpp> includes a Boost.Beast header"
#endif

namespace {

TEST(PublicHeaders, CarryNoBeast) {
    // The preprocessor check above is the test.
    SUCCEED();
}

} // namespace
