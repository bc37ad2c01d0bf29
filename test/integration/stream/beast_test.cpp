// Boost.Beast and Asio SSL over ucx::stream, in one process (two workers):
// HTTP request/response with keep-alive and chunked bodies, a WebSocket echo,
// and TLS with mutual certificate verification (certificates made by the test).
#include "test_support.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <ucx/beast.hpp>

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>

using namespace ucx_test;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace ssl = asio::ssl;

namespace {

using asio::awaitable;
using asio::use_awaitable;
constexpr auto tuple_awaitable = asio::as_tuple(use_awaitable);

class beast_test : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::acceptor acceptor{server_worker,
                           asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};

    std::pair<ucx::stream, ucx::stream> connect_pair() {
        ucx::stream client(client_worker);
        ucx::stream server(server_worker);
        std::optional<ucx::error_code> a, c;
        acceptor.async_accept(server, [&](ucx::error_code ec) { a = ec; });
        client.async_connect(acceptor.local_endpoint(), [&](ucx::error_code ec) { c = ec; });
        EXPECT_TRUE(run_until(io, [&] { return a && c; }));
        EXPECT_FALSE(a.value_or(asio::error::timed_out));
        EXPECT_FALSE(c.value_or(asio::error::timed_out));
        return {std::move(client), std::move(server)};
    }

    /// Runs two coroutines to their ends; rethrows the first exception.
    void run_both(awaitable<void> a, awaitable<void> b) {
        int done = 0;
        std::exception_ptr error;
        auto finish = [&](std::exception_ptr e) {
            if (e && !error)
                error = e;
            ++done;
        };
        asio::co_spawn(io, std::move(a), finish);
        asio::co_spawn(io, std::move(b), finish);
        ASSERT_TRUE(run_until(io, [&] { return done == 2; }));
        if (error)
            std::rethrow_exception(error);
    }
};

TEST_P(beast_test, http_keep_alive_and_chunked_bodies) {
    auto [client, server] = connect_pair();
    const std::string big(300000, 'b');
    auto serve = [&]() -> awaitable<void> {
        beast::flat_buffer buffer;
        for (;;) {
            http::request<http::string_body> req;
            auto [ec, n] = co_await http::async_read(server, buffer, req, tuple_awaitable);
            if (ec == http::error::end_of_stream)
                break;
            if (ec)
                throw boost::system::system_error(ec);
            http::response<http::string_body> res{http::status::ok, req.version()};
            res.set(http::field::content_type, "text/plain");
            res.keep_alive(req.keep_alive());
            res.body() = std::string(req.target()) + ":" + std::to_string(req.body().size());
            if (req.target() == "/big")
                res.body() += big;
            if (req.target() == "/chunked")
                res.chunked(true);
            else
                res.prepare_payload();
            co_await http::async_write(server, res, use_awaitable);
            if (!res.keep_alive()) {
                server.shutdown(asio::socket_base::shutdown_send);
                break;
            }
        }
    };
    auto use = [&]() -> awaitable<void> {
        beast::flat_buffer buffer;
        struct request_case {
            const char* target;
            bool chunked_request;
            std::size_t body;
            bool keep_alive;
        };
        for (auto rc :
             {request_case{"/a", false, 10, true}, request_case{"/chunked", true, 70000, true},
              request_case{"/big", false, 0, true}, request_case{"/last", false, 5, false}}) {
            http::request<http::string_body> req{http::verb::post, rc.target, 11};
            req.set(http::field::host, "localhost");
            req.body() = std::string(rc.body, 'q');
            req.keep_alive(rc.keep_alive);
            if (rc.chunked_request)
                req.chunked(true);
            else
                req.prepare_payload();
            co_await http::async_write(client, req, use_awaitable);
            http::response<http::string_body> res;
            co_await http::async_read(client, buffer, res, use_awaitable);
            EXPECT_EQ(res.result(), http::status::ok);
            std::string expect = std::string(rc.target) + ":" + std::to_string(rc.body);
            if (std::string(rc.target) == "/big")
                expect += big;
            EXPECT_EQ(res.body(), expect);
            EXPECT_EQ(res.chunked(), std::string(rc.target) == "/chunked");
            EXPECT_EQ(res.keep_alive(), rc.keep_alive);
        }
        // The server closed after the last response: end of stream, not a reset.
        http::response<http::string_body> res;
        auto [ec, n] = co_await http::async_read(client, buffer, res, tuple_awaitable);
        EXPECT_EQ(ec, http::error::end_of_stream) << ec.message();
        (void)n;
    };
    run_both(serve(), use());
}

TEST_P(beast_test, websocket_echo_and_clean_close) {
    auto [client_s, server_s] = connect_pair();
    websocket::stream<ucx::stream> server(std::move(server_s));
    websocket::stream<ucx::stream> client(std::move(client_s));
    bool server_saw_close = false;
    auto serve = [&]() -> awaitable<void> {
        co_await server.async_accept(use_awaitable);
        beast::flat_buffer buffer;
        for (;;) {
            auto [ec, n] = co_await server.async_read(buffer, tuple_awaitable);
            if (ec == websocket::error::closed) {
                server_saw_close = true;
                break;
            }
            if (ec)
                throw boost::system::system_error(ec);
            server.text(server.got_text());
            co_await server.async_write(buffer.data(), use_awaitable);
            buffer.consume(n);
        }
    };
    auto use = [&]() -> awaitable<void> {
        co_await client.async_handshake("localhost", "/echo", use_awaitable);
        const std::vector<std::string> messages{"hello", std::string(1, 'x'),
                                                std::string(1u << 20, 'm'), "bye"};
        for (const auto& m : messages) {
            client.text(m.size() < 100);
            co_await client.async_write(asio::buffer(m), use_awaitable);
            beast::flat_buffer buffer;
            co_await client.async_read(buffer, use_awaitable);
            EXPECT_EQ(beast::buffers_to_string(buffer.data()), m);
        }
        co_await client.async_close(websocket::close_code::normal, use_awaitable);
    };
    run_both(serve(), use());
    EXPECT_TRUE(server_saw_close);
}

/// A CA, and a server and a client certificate it signed, in a temporary directory.
class test_pki {
public:
    test_pki() {
        char tmpl[] = "/tmp/ucx-asio-tls-XXXXXX";
        const char* d = mkdtemp(tmpl);
        if (!d)
            throw std::runtime_error("mkdtemp failed");
        dir_ = d;
        std::ofstream(dir_ / "ext.cnf") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
        run("openssl ecparam -name prime256v1 -genkey -noout -out ca.key");
        run("openssl req -x509 -new -key ca.key -subj /CN=ucx-asio-test-ca -days 1 -out ca.pem");
        for (const char* who : {"server", "client"}) {
            const std::string w = who;
            run("openssl ecparam -name prime256v1 -genkey -noout -out " + w + ".key");
            run("openssl req -new -key " + w + ".key -subj /CN=localhost -out " + w + ".csr");
            run("openssl x509 -req -in " + w +
                ".csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                "-days 1 -extfile ext.cnf -out " +
                w + ".pem");
        }
    }
    ~test_pki() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    ssl::context make_context(bool server) const {
        ssl::context c(server ? ssl::context::tls_server : ssl::context::tls_client);
        const std::string who = server ? "server" : "client";
        c.use_certificate_chain_file(path(who + ".pem"));
        c.use_private_key_file(path(who + ".key"), ssl::context::pem);
        c.load_verify_file(path("ca.pem"));
        c.set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
        return c;
    }

private:
    void run(const std::string& cmd) {
        const std::string full = "cd " + dir_.string() + " && " + cmd + " >/dev/null 2>&1";
        if (std::system(full.c_str()) != 0)
            throw std::runtime_error("failed: " + cmd);
    }
    std::filesystem::path dir_;
};

TEST_P(beast_test, tls_with_mutual_verification) {
    std::unique_ptr<test_pki> pki;
    try {
        pki = std::make_unique<test_pki>();
    } catch (const std::exception& e) {
        GTEST_SKIP() << "cannot make test certificates with the openssl tool: " << e.what();
    }
    auto server_ctx = pki->make_context(true);
    auto client_ctx = pki->make_context(false);
    auto [client_s, server_s] = connect_pair();
    ssl::stream<ucx::stream> server(std::move(server_s), server_ctx);
    ssl::stream<ucx::stream> client(std::move(client_s), client_ctx);
    client.set_verify_callback(ssl::host_name_verification("localhost"));
    const auto data = pattern(3u << 20, 42);
    bool server_verified_client = false;
    auto serve = [&]() -> awaitable<void> {
        co_await server.async_handshake(ssl::stream_base::server, use_awaitable);
        X509* peer = SSL_get_peer_certificate(server.native_handle());
        server_verified_client =
            peer != nullptr && SSL_get_verify_result(server.native_handle()) == X509_V_OK;
        if (peer)
            X509_free(peer);
        // Echo everything until the client's close_notify.
        std::vector<char> buf(100000);
        for (;;) {
            auto [ec, n] = co_await server.async_read_some(asio::buffer(buf), tuple_awaitable);
            if (ec == asio::error::eof)
                break;
            if (ec)
                throw boost::system::system_error(ec);
            co_await asio::async_write(server, asio::buffer(buf.data(), n), use_awaitable);
        }
        co_await server.async_shutdown(use_awaitable);
    };
    auto use = [&]() -> awaitable<void> {
        co_await client.async_handshake(ssl::stream_base::client, use_awaitable);
        std::vector<char> echoed(data.size());
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                co_await asio::async_write(client, asio::buffer(data), use_awaitable);
            },
            [](std::exception_ptr e) { EXPECT_FALSE(e); });
        co_await asio::async_read(client, asio::buffer(echoed), use_awaitable);
        EXPECT_TRUE(echoed == data);
        co_await client.async_shutdown(use_awaitable);
    };
    run_both(serve(), use());
    EXPECT_TRUE(server_verified_client);
    // A client without a certificate is refused.
    auto [c2, s2] = connect_pair();
    ssl::context anonymous(ssl::context::tls_client);
    anonymous.load_verify_file(pki->path("ca.pem"));
    anonymous.set_verify_mode(ssl::verify_peer);
    ssl::stream<ucx::stream> server2(std::move(s2), server_ctx);
    ssl::stream<ucx::stream> client2(std::move(c2), anonymous);
    ucx::error_code server_ec;
    run_both(
        [&]() -> awaitable<void> {
            auto [ec] = co_await server2.async_handshake(ssl::stream_base::server, tuple_awaitable);
            server_ec = ec;
            server2.next_layer().close();
        }(),
        [&]() -> awaitable<void> {
            auto [ec] = co_await client2.async_handshake(ssl::stream_base::client, tuple_awaitable);
            (void)ec; // fails once the server refuses
            client2.next_layer().close();
        }());
    EXPECT_TRUE(server_ec);
}

INSTANTIATE_TEST_SUITE_P(transports, beast_test,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
