// What <ucx/asio.hpp> brings with it: no Beast (its support is the opt-in
// <ucx/beast.hpp>), and none of the library's implementation classes, which
// stay in lib/ (checked at compile time; the test only has to build).
#include <ucx/asio.hpp>

#include <gtest/gtest.h>

// Every Beast header includes its configuration header.
#if defined(BOOST_BEAST_CORE_DETAIL_CONFIG_HPP) || defined(BOOST_BEAST_VERSION)
#error "<ucx/asio.hpp> includes a Boost.Beast header"
#endif

namespace ucx::detail {
// Declared again here, so that the check below names them whatever the
// public headers declare.
class worker_impl;
class endpoint_impl;
class listener_impl;
class stream_impl;
class tag_receiver_impl;
class address_acceptor_impl;
class am_registry;
class context_impl;
class remote_key_impl;
class progress_fsm;
class metrics_exporter_impl;
struct am_message_state;
struct control_message;
} // namespace ucx::detail

namespace {

template <class T>
concept complete = requires {
    sizeof(T);
};

static_assert(!complete<ucx::detail::worker_impl>);
static_assert(!complete<ucx::detail::endpoint_impl>);
static_assert(!complete<ucx::detail::listener_impl>);
static_assert(!complete<ucx::detail::stream_impl>);
static_assert(!complete<ucx::detail::tag_receiver_impl>);
static_assert(!complete<ucx::detail::address_acceptor_impl>);
static_assert(!complete<ucx::detail::am_registry>);
static_assert(!complete<ucx::detail::context_impl>);
static_assert(!complete<ucx::detail::remote_key_impl>);
static_assert(!complete<ucx::detail::progress_fsm>);
static_assert(!complete<ucx::detail::metrics_exporter_impl>);
static_assert(!complete<ucx::detail::am_message_state>);
static_assert(!complete<ucx::detail::control_message>);
// The check itself works: a public class is complete.
static_assert(complete<ucx::worker>);

TEST(PublicHeaders, CarryNoImplementation) {
    // The static assertions above are the test.
    SUCCEED();
}

} // namespace
