// Boost.Beast support for ucx::basic_stream: the customisation points Beast
// finds by argument-dependent lookup. Opt-in, so that <ucx/asio.hpp> needs no
// Beast header; include it where Beast (WebSocket teardown, beast_close_socket
// on timeouts and errors) works over a ucx::stream.
#pragma once

#include <ucx/error.hpp>
#include <ucx/stream.hpp>

#include <boost/beast/core/role.hpp>

#include <utility>

namespace ucx {

/// Beast closes a stream this way on timeouts and errors: a graceful close.
template <class Executor>
void beast_close_socket(basic_stream<Executor>& s) {
    s.close();
}

/// WebSocket teardown (synchronous WebSocket close): closes gracefully in
/// the background; the peer reads eof after the close frame.
template <class Executor>
void teardown(boost::beast::role_type, basic_stream<Executor>& s, error_code& ec) {
    s.close(ec);
}

/// WebSocket teardown (asynchronous WebSocket close): closes gracefully and
/// completes when the connection is closed.
template <class Executor, class TeardownHandler>
void async_teardown(boost::beast::role_type, basic_stream<Executor>& s, TeardownHandler&& handler) {
    s.async_close(std::forward<TeardownHandler>(handler));
}

} // namespace ucx
