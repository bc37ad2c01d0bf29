// A multi-threaded server: one io_context, worker and listener per thread,
// the listeners sharing one port (listener_options::reuse_port). The kernel
// spreads the clients across the listeners; each connection is served on
// the thread of the listener that took it.
#include "test_support.hpp"

#include <boost/asio/post.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>

using namespace ucx_test;

namespace {

// One serving thread: accepts and echoes every message of its clients.
struct shard {
    explicit shard(ucx::context& ctx, unsigned short port)
        : worker(ctx, io, strict_worker_options(ucx::progress_mode::event)),
          listener(worker, {asio::ip::make_address("127.0.0.1"), port}, options()) {}

    static ucx::listener_options options() {
        ucx::listener_options o;
        o.reuse_port = true;
        return o;
    }

    void start() {
        accept();
        thread = std::thread([this] {
            id = std::this_thread::get_id();
            started = true;
            io.run();
        });
        while (!started.load())
            std::this_thread::yield();
    }

    void accept() {
        listener.async_accept([this](ucx::error_code ec, ucx::endpoint ep) {
            if (ec)
                return; // closed
            check_thread();
            ++accepted;
            auto s = std::make_shared<session>(std::move(ep));
            sessions.push_back(s);
            echo(s);
            accept();
        });
    }

    struct session {
        explicit session(ucx::endpoint e) : ep(std::move(e)) {}
        ucx::endpoint ep;
        std::array<char, 64> buf{};
    };

    void echo(const std::shared_ptr<session>& s) {
        s->ep.async_recv(asio::buffer(s->buf), 0, 0,
                         [this, s](ucx::error_code ec, std::size_t n, std::uint32_t tag) {
                             check_thread();
                             if (ec)
                                 return; // the client closed
                             s->ep.async_send(asio::buffer(s->buf.data(), n), tag,
                                              [this, s](ucx::error_code ec, std::size_t) {
                                                  check_thread();
                                                  if (!ec)
                                                      echo(s);
                                              });
                         });
    }

    void check_thread() {
        if (std::this_thread::get_id() != id)
            wrong_thread = true;
    }

    void stop() {
        asio::post(io, [this] {
            listener.close();
            sessions.clear();
            worker.close();
        });
        thread.join();
    }

    asio::io_context io;
    ucx::worker worker;
    ucx::listener listener;
    std::vector<std::shared_ptr<session>> sessions;
    std::thread thread;
    std::thread::id id;
    std::atomic<bool> started{false};
    std::atomic<bool> wrong_thread{false};
    std::atomic<int> accepted{0};
};

class server_threads : public testing::TestWithParam<transport> {};

TEST_P(server_threads, clients_are_spread_across_listeners_sharing_a_port_and_served_there) {
    auto copts = options_for(GetParam());
    copts.multi_threaded = true;
    ucx::context ctx(copts);
    shard first(ctx, 0);
    const unsigned short port = first.listener.local_endpoint().port();
    shard second(ctx, port); // the same port: SO_REUSEPORT
    first.start();
    second.start();

    // One worker per client, as separate client processes would have. (Many
    // connections between the same two workers, set up at once from two
    // threads over TCP, make UCX 1.13 refuse some of the connections its
    // transport makes back to the client: measured with one client worker,
    // 4 runs in 10 lost connections with "Connection refused".)
    asio::io_context io;
    constexpr int clients = 24;
    std::vector<std::unique_ptr<ucx::worker>> workers;
    for (int i = 0; i < clients; ++i)
        workers.push_back(std::make_unique<ucx::worker>(
            ctx, io, strict_worker_options(ucx::progress_mode::event)));
    std::vector<std::optional<ucx::endpoint>> eps(clients);
    std::vector<std::array<char, 16>> out(clients), in(clients);
    int echoed = 0;
    for (int i = 0; i < clients; ++i) {
        std::snprintf(out[i].data(), out[i].size(), "client %d", i);
        ucx::async_connect(
            *workers[i], "127.0.0.1", std::to_string(port),
            [&, i](ucx::error_code ec, ucx::endpoint ep) {
                ASSERT_FALSE(ec) << ec.message();
                eps[i].emplace(std::move(ep));
                eps[i]->async_recv(asio::buffer(in[i]), 0, 0,
                                   [&, i](ucx::error_code ec, std::size_t n, std::uint32_t tag) {
                                       EXPECT_FALSE(ec) << ec.message();
                                       EXPECT_EQ(n, out[i].size());
                                       EXPECT_EQ(tag, std::uint32_t(i));
                                       EXPECT_EQ(in[i], out[i]);
                                       ++echoed;
                                   });
                eps[i]->async_send(
                    asio::buffer(out[i]), std::uint32_t(i),
                    [](ucx::error_code ec, std::size_t) { EXPECT_FALSE(ec) << ec.message(); });
            });
    }
    EXPECT_TRUE(run_until(io, [&] { return echoed == clients; })) << echoed << " echoes";
    for (auto& ep : eps)
        if (ep)
            ep->close();
    for (auto& w : workers)
        w->close();
    first.stop();
    second.stop();

    EXPECT_EQ(first.accepted + second.accepted, clients);
    // The kernel hashes each connection to one of the two sockets: all 24 on
    // one would happen once in 2^23 runs.
    EXPECT_GT(first.accepted, 0);
    EXPECT_GT(second.accepted, 0);
    EXPECT_FALSE(first.wrong_thread);
    EXPECT_FALSE(second.wrong_thread);
}

TEST(server_threads_api, reuse_port_with_ucx_sockaddr_is_not_supported) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::tcp, true));
    ucx::worker w(ctx, io);
    ucx::listener_options o;
    o.reuse_port = true;
    o.method = ucx::connection_method::ucx_sockaddr;
    try {
        ucx::listener l(w, {asio::ip::make_address("127.0.0.1"), 0}, o);
        ADD_FAILURE() << "opened";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), asio::error::operation_not_supported);
    }
}

INSTANTIATE_TEST_SUITE_P(transports, server_threads,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const testing::TestParamInfo<transport>& i) {
                             return to_string(i.param);
                         });

} // namespace
