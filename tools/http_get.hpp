// The tools' HTTP client: one GET to a ucx::metrics_exporter (its
// /endpoints, /flight), bounded in time.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace ucx_tools {

/// http://HOST:PORT[PATH], taken apart (an IPv6 HOST in brackets).
struct http_url {
    std::string host;
    std::string port;
    std::string path; ///< empty when the URL has none
};

/// Takes `url` apart; false when it is not http://HOST:PORT[/PATH].
inline bool parse_http_url(std::string_view url, http_url& out) {
    if (!url.starts_with("http://"))
        return false;
    std::string_view rest = url.substr(7);
    const auto slash = rest.find('/');
    const std::string_view authority = rest.substr(0, slash);
    out.path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
    const auto colon = authority.rfind(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == authority.size())
        return false;
    out.host = authority.substr(0, colon);
    if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
        out.host = out.host.substr(1, out.host.size() - 2);
    out.port = authority.substr(colon + 1);
    return true;
}

/// GET `target` from `host`:`port`, within `timeout` in all. Returns false
/// with `why` set when there is no 200 answer: the error (`no answer within
/// N ms` for the timeout), or `HTTP <status>: <body>`.
inline bool http_get(const std::string& host, const std::string& port, const std::string& target,
                     std::chrono::milliseconds timeout, std::string& body, std::string& why) {
    namespace http = boost::beast::http;
    using tcp = boost::asio::ip::tcp;
    boost::asio::io_context io;
    boost::beast::tcp_stream stream(io);
    tcp::resolver resolver(io);
    boost::beast::flat_buffer buffer;
    http::request<http::empty_body> req(http::verb::get, target, 11);
    req.set(http::field::host, host);
    req.set(http::field::connection, "close");
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    boost::system::error_code failure;
    const auto fail = [&](const boost::system::error_code& ec) { failure = ec; };
    boost::asio::steady_timer resolve_bound(io);
    resolve_bound.expires_after(timeout);
    resolve_bound.async_wait([&](const boost::system::error_code& ec) {
        if (!ec)
            resolver.cancel();
    });
    stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](const auto& ec, const tcp::resolver::results_type& at) {
        resolve_bound.cancel();
        if (ec)
            return fail(ec == boost::asio::error::operation_aborted
                            ? boost::system::error_code(boost::beast::error::timeout)
                            : ec);
        stream.async_connect(at, [&](const auto& ec, const auto&) {
            if (ec)
                return fail(ec);
            http::async_write(stream, req, [&](const auto& ec, std::size_t) {
                if (ec)
                    return fail(ec);
                http::async_read(stream, buffer, parser, [&](const auto& ec, std::size_t) {
                    if (ec)
                        fail(ec);
                });
            });
        });
    });
    io.run();
    if (failure) {
        why = failure == boost::beast::error::timeout
                  ? "no answer within " + std::to_string(timeout.count()) + " ms"
                  : failure.message();
        return false;
    }
    const auto& res = parser.get();
    if (res.result() != http::status::ok) {
        why = "HTTP " + std::to_string(res.result_int()) + ": " + res.body();
        while (!why.empty() && why.back() == '\n')
            why.pop_back();
        return false;
    }
    body = res.body();
    return true;
}

} // namespace ucx_tools
