// Connections of a worker to itself: to its own listener (both connection
// methods), to its own host:port acceptor and to its own address acceptor,
// with data both ways, a graceful close and a failure seen by the other end,
// over tcp and shared memory.
#include "test_support.hpp"

#include <ucx/acceptor.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

using namespace ucx_test;

namespace {

struct same_worker_case {
    transport t;
    ucx::connection_method method;
};

std::string case_name(const testing::TestParamInfo<same_worker_case>& info) {
    return to_string(info.param.t) +
           (info.param.method == ucx::connection_method::handshake ? "_handshake" : "_sockaddr");
}

class same_worker : public testing::TestWithParam<same_worker_case> {
protected:
    static ucx::worker_options options() {
        ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
        o.method = GetParam().method;
        return o;
    }

    asio::io_context io;
    ucx::context ctx{options_for(GetParam().t, true)};
    ucx::worker worker{ctx, io, options()};

    void exchange(ucx::endpoint& from, ucx::endpoint& to, std::size_t size, std::uint32_t seed) {
        ucx_test::exchange(io, from, to, size, seed);
    }

    // Writes `size` bytes on `from`, reads them on `to`.
    void stream_exchange(ucx::stream& from, ucx::stream& to, std::size_t size, std::uint32_t seed) {
        const auto data = pattern(size, seed);
        std::vector<char> in(size);
        std::optional<ucx::error_code> w, r;
        asio::async_write(from, asio::buffer(data),
                          [&](ucx::error_code ec, std::size_t) { w = ec; });
        asio::async_read(to, asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
        ASSERT_TRUE(run_until(io, [&] { return w && r; }));
        ASSERT_FALSE(*w) << w->message();
        ASSERT_FALSE(*r) << r->message();
        EXPECT_EQ(in, data);
    }

    // Accepts into `accepted` on `acceptor` and connects with
    // `connect(handler)`: both ends, checked.
    template <class Connect>
    void connect_streams(ucx::acceptor& acceptor, ucx::stream& accepted, Connect connect) {
        std::optional<ucx::error_code> a, c;
        acceptor.async_accept(accepted, [&](ucx::error_code ec) { a = ec; });
        connect([&](ucx::error_code ec) { c = ec; });
        ASSERT_TRUE(run_until(io, [&] { return a && c; }));
        ASSERT_FALSE(*a) << a->message();
        ASSERT_FALSE(*c) << c->message();
    }

    void check_streams(ucx::stream& client, ucx::stream& accepted) {
        std::uint32_t seed = 10;
        for (std::size_t size : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
            stream_exchange(client, accepted, size, seed++);
            stream_exchange(accepted, client, size, seed++);
        }
        // A graceful close: the other end reads its end of stream.
        std::optional<ucx::error_code> closed, read;
        char byte = 0;
        client.async_close([&](ucx::error_code ec) { closed = ec; });
        accepted.async_read_some(asio::buffer(&byte, 1),
                                 [&](ucx::error_code ec, std::size_t) { read = ec; });
        ASSERT_TRUE(run_until(io, [&] { return closed && read; }));
        EXPECT_FALSE(*closed) << closed->message();
        EXPECT_EQ(*read, asio::error::eof) << read->message();
    }
};

TEST_P(same_worker, async_connect_reaches_a_listener_of_the_same_worker) {
    ucx::listener server{worker, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    auto [client, accepted] = connect_pair(io, server, worker);
    ASSERT_TRUE(client.is_open());
    ASSERT_TRUE(accepted.is_open());
    std::uint32_t seed = 1;
    for (std::size_t size : {std::size_t{0}, std::size_t{8}, std::size_t{1} << 20}) {
        exchange(client, accepted, size, seed++);
        exchange(accepted, client, size, seed++);
    }
    // Two connections of the worker to itself stay apart.
    auto [client2, accepted2] = connect_pair(io, server, worker);
    ASSERT_TRUE(client2.is_open());
    exchange(client2, accepted2, 64, seed++);
    exchange(accepted, client, 64, seed++);
    // An abort is seen by the other end as a failure, a close as eof; the
    // first pair survives both.
    std::optional<ucx::error_code> failed;
    accepted2.async_wait_error([&](ucx::error_code ec) { failed = ec; });
    client2.abort();
    ASSERT_TRUE(run_until(io, [&] { return failed.has_value(); }));
    EXPECT_TRUE(*failed) << "the peer's end must fail";
    EXPECT_NE(*failed, asio::error::eof);
    auto [client3, accepted3] = connect_pair(io, server, worker);
    std::optional<ucx::error_code> ended;
    accepted3.async_wait_error([&](ucx::error_code ec) { ended = ec; });
    client3.close();
    ASSERT_TRUE(run_until(io, [&] { return ended.has_value(); }));
    EXPECT_EQ(*ended, asio::error::eof);
    exchange(client, accepted, 64, seed++);
}

TEST_P(same_worker, a_stream_reaches_a_host_port_acceptor_of_the_same_worker) {
    ucx::acceptor acceptor(worker, {asio::ip::make_address("127.0.0.1"), 0});
    ucx::stream client(worker), accepted(worker);
    connect_streams(acceptor, accepted, [&](auto handler) {
        client.async_connect(acceptor.local_endpoint(), handler);
    });
    check_streams(client, accepted);
}

TEST_P(same_worker, a_stream_reaches_the_address_acceptor_of_the_same_worker) {
    ucx::acceptor acceptor(worker);
    ASSERT_EQ(acceptor.local_address(), worker.address());
    ucx::stream client(worker), accepted(worker);
    connect_streams(acceptor, accepted,
                    [&](auto handler) { client.async_connect(worker.address(), handler); });
    check_streams(client, accepted);
    // And again, on the same worker: the connection manager's listener stays.
    ucx::stream client2(worker), accepted2(worker);
    connect_streams(acceptor, accepted2,
                    [&](auto handler) { client2.async_connect(worker.address(), handler); });
    stream_exchange(client2, accepted2, 100, 99);
}

INSTANTIATE_TEST_SUITE_P(
    all, same_worker,
    testing::Values(same_worker_case{transport::tcp, ucx::connection_method::handshake},
                    same_worker_case{transport::shared_memory, ucx::connection_method::handshake},
                    same_worker_case{transport::tcp, ucx::connection_method::ucx_sockaddr},
                    same_worker_case{transport::shared_memory,
                                     ucx::connection_method::ucx_sockaddr}),
    case_name);

} // namespace

// A context without UCX's tcp transport: UCX's connection manager cannot
// connect over the loopback device, and the connect fails at once, with the
// acceptor still there for others.
TEST(same_worker_shared_memory_only, a_connection_to_itself_fails_at_once_without_tcp) {
    asio::io_context io;
    ucx::context ctx{options_for(transport::shared_memory)};
    ucx::worker worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::acceptor acceptor(worker);
    ucx::stream client(worker), accepted(worker);
    std::optional<ucx::error_code> c;
    client.async_connect(worker.address(), [&](ucx::error_code ec) { c = ec; });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    EXPECT_EQ(*c, ucx::errc::unreachable) << c->message();
    EXPECT_TRUE(*c == std::errc::host_unreachable);
    EXPECT_TRUE(acceptor.is_open());
}
