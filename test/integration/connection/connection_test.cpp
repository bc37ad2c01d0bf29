// Client/server connections in one process: listener, connect, per-endpoint
// messaging, graceful close versus failure, cancellation, rejection.
#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

using namespace ucx_test;

namespace {

class connection : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::listener server{server_worker,
                         asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};

    std::pair<ucx::endpoint, ucx::endpoint> connect_pair() { return connect_pair(client_worker); }
    std::pair<ucx::endpoint, ucx::endpoint> connect_pair(ucx::worker& client) {
        return ucx_test::connect_pair(io, server, client);
    }

    void exchange(ucx::endpoint& from, ucx::endpoint& to, std::size_t size, std::uint32_t seed) {
        ucx_test::exchange(io, from, to, size, seed);
    }
};

TEST_P(connection, connect_accept_and_exchange_both_ways) {
    EXPECT_NE(server.local_endpoint().port(), 0);
    auto [client, accepted] = connect_pair();
    ASSERT_TRUE(client.is_open());
    ASSERT_TRUE(accepted.is_open());
    EXPECT_EQ(client.remote_endpoint().port(), server.local_endpoint().port());
    EXPECT_EQ(accepted.remote_endpoint().port(), client.local_endpoint().port());
    // The data lanes use the transport under test.
    const std::string lanes = endpoint_lanes(client.native_handle());
    if (GetParam() == transport::shared_memory)
        EXPECT_TRUE(lanes.find("posix") != std::string::npos ||
                    lanes.find("sysv") != std::string::npos)
            << lanes;
    else
        EXPECT_EQ(lanes.find("posix"), std::string::npos) << lanes;
    std::uint32_t seed = 1;
    for (std::size_t size :
         {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
        exchange(client, accepted, size, seed++);
        exchange(accepted, client, size, seed++);
    }
}

// endpoint::lanes() says what UCX prints for the endpoint, on both sides: the
// transport under test carries the active messages, and every lane's
// transport and device are in UCX's own text.
TEST_P(connection, lanes_name_the_transports_ucx_chose) {
    auto [client, accepted] = connect_pair();
    for (ucx::endpoint* ep : {&client, &accepted}) {
        const std::string text = endpoint_lanes(ep->native_handle());
        ucx::error_code ec;
        const std::vector<ucx::endpoint_lane> lanes = ep->lanes(ec);
        ASSERT_FALSE(ec) << ec.message();
        ASSERT_FALSE(lanes.empty()) << text;
        const ucx::endpoint_lane* am = nullptr;
        for (const auto& lane : lanes) {
            SCOPED_TRACE(text);
            EXPECT_GE(lane.index, 0);
            EXPECT_FALSE(lane.transport.empty());
            if (!lane.device.empty()) {
                EXPECT_NE(text.find(lane.transport + "/" + lane.device), std::string::npos);
            }
            if (std::find(lane.uses.begin(), lane.uses.end(), "am") != lane.uses.end())
                am = &lane;
        }
        ASSERT_NE(am, nullptr) << "no lane carries active messages:\n" << text;
        if (GetParam() == transport::shared_memory) {
            EXPECT_TRUE(am->transport == "posix" || am->transport == "sysv") << text;
            EXPECT_EQ(am->device, "memory");
        } else {
            EXPECT_EQ(am->transport, "tcp") << text;
            EXPECT_EQ(am->device, "lo");
        }
        EXPECT_EQ(ep->lanes(), lanes); // the throwing form
    }
    // No lanes once closed, or for an endpoint never connected.
    client.close();
    ucx::error_code ec;
    EXPECT_TRUE(client.lanes(ec).empty());
    EXPECT_EQ(ec, asio::error::bad_descriptor);
    ucx::endpoint never;
    EXPECT_TRUE(never.lanes(ec).empty());
    EXPECT_EQ(ec, asio::error::bad_descriptor);
    EXPECT_THROW(never.lanes(), boost::system::system_error);
}

TEST_P(connection, accept_and_connect_with_every_completion_style) {
    const std::string port = std::to_string(server.local_endpoint().port());
    std::uint32_t seed = 50;
    for (style st : all_styles()) {
        SCOPED_TRACE(to_string(st));
        auto accepted = start<ucx::endpoint>(st, io, [&](auto&& token) {
            return server.async_accept(std::forward<decltype(token)>(token));
        });
        auto connected = start<ucx::endpoint>(st, io, [&](auto&& token) {
            return ucx::async_connect(client_worker, "127.0.0.1", port,
                                      std::forward<decltype(token)>(token));
        });
        ASSERT_TRUE(run_until(io, [&] { return accepted.ready() && connected.ready(); }));
        auto& [aec, a] = accepted.get();
        auto& [cec, c] = connected.get();
        ASSERT_FALSE(aec) << aec.message();
        ASSERT_FALSE(cec) << cec.message();
        exchange(c, a, 128, seed++);
        exchange(a, c, 128, seed++);
    }
}

TEST_P(connection, two_clients_never_see_each_others_messages) {
    ucx::worker second_worker(ctx, io, strict_worker_options(ucx::progress_mode::event));
    auto [c1, s1] = connect_pair();
    auto [c2, s2] = connect_pair(second_worker);
    // Both clients send; each server-side endpoint gets exactly its client's data.
    auto d1 = pattern(100, 1), d2 = pattern(100, 2);
    std::vector<char> in1(100), in2(100);
    int done = 0;
    s2.async_recv(asio::buffer(in2), [&](ucx::error_code ec, std::size_t) { done += !ec; });
    s1.async_recv(asio::buffer(in1), [&](ucx::error_code ec, std::size_t) { done += !ec; });
    c2.async_send(asio::buffer(d2), [](ucx::error_code, std::size_t) {});
    c1.async_send(asio::buffer(d1), [](ucx::error_code, std::size_t) {});
    ASSERT_TRUE(run_until(io, [&] { return done == 2; }));
    EXPECT_EQ(in1, d1);
    EXPECT_EQ(in2, d2);
}

TEST_P(connection, graceful_close_gives_the_peer_eof) {
    auto [client, accepted] = connect_pair();
    std::optional<ucx::error_code> waited, received, closed;
    std::vector<char> in(16);
    accepted.async_wait_error([&](ucx::error_code ec) { waited = ec; });
    accepted.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { received = ec; });
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(20));
    client.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return waited && received && closed; }));
    EXPECT_FALSE(*closed) << closed->message();
    EXPECT_EQ(*waited, asio::error::eof);
    EXPECT_EQ(*received, asio::error::eof);
    EXPECT_EQ(accepted.error(), asio::error::eof);
    EXPECT_FALSE(client.is_open());
    // Later operations fail at once with the same code.
    std::optional<ucx::error_code> late;
    accepted.async_send(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { late = ec; });
    ASSERT_TRUE(run_until(io, [&] { return late.has_value(); }));
    EXPECT_EQ(*late, asio::error::eof);
    // Closing after the peer left is not an error; closing twice here is.
    std::optional<ucx::error_code> peer_close, again;
    accepted.async_close([&](ucx::error_code ec) { peer_close = ec; });
    client.async_close([&](ucx::error_code ec) { again = ec; });
    ASSERT_TRUE(run_until(io, [&] { return peer_close && again; }));
    EXPECT_FALSE(*peer_close) << peer_close->message();
    EXPECT_EQ(*again, asio::error::bad_descriptor);
}

TEST_P(connection, data_sent_before_a_graceful_close_arrives) {
    auto [client, accepted] = connect_pair();
    auto data = pattern(256 * 1024, 5);
    std::vector<char> in(data.size());
    std::optional<ucx::error_code> received, closed, sent;
    client.async_send(asio::buffer(data), [&](ucx::error_code ec, std::size_t) { sent = ec; });
    client.async_close([&](ucx::error_code ec) { closed = ec; });
    // Let the goodbye arrive before anyone receives.
    run_until(
        io, [&] { return accepted.error() == asio::error::eof; }, std::chrono::seconds(5));
    accepted.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { received = ec; });
    ASSERT_TRUE(run_until(io, [&] { return received && closed && sent; }));
    EXPECT_FALSE(*sent) << sent->message();
    EXPECT_FALSE(*closed) << closed->message();
    EXPECT_FALSE(*received) << received->message();
    EXPECT_EQ(in, data);
}

TEST_P(connection, close_ends_here_at_once_and_the_peer_reads_eof_after_the_messages) {
    auto [client, accepted] = connect_pair();
    std::vector<char> in(16);
    const std::string sent = "sent before the close";
    std::optional<ucx::error_code> r, w, s, later;
    client.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    client.async_wait_error([&](ucx::error_code ec) { w = ec; });
    client.async_send(asio::buffer(sent), 3, [&](ucx::error_code ec, std::size_t) { s = ec; });
    // Started off the worker's thread, they are dispatched to it, and the
    // close after them, in order.
    client.close();
    client.close();
    EXPECT_FALSE(client.is_open());
    ASSERT_TRUE(run_until(io, [&] { return r && w && s; }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    EXPECT_EQ(*w, asio::error::operation_aborted);
    EXPECT_FALSE(*s) << s->message(); // a send started before the close is delivered
    client.async_send(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { later = ec; });
    ASSERT_TRUE(run_until(io, [&] { return later.has_value(); }));
    EXPECT_EQ(*later, asio::error::bad_descriptor);
    // The peer gets the message, then eof: a goodbye, not a failure.
    std::vector<char> got(64);
    std::optional<ucx::error_code> m, end;
    std::size_t n = 0;
    ucx::tag_t tag = 0;
    accepted.async_recv(asio::buffer(got), 0, 0,
                        [&](ucx::error_code ec, std::size_t k, ucx::tag_t t) {
                            m = ec;
                            n = k;
                            tag = t;
                        });
    ASSERT_TRUE(run_until(io, [&] { return m.has_value(); }));
    ASSERT_FALSE(*m) << m->message();
    EXPECT_EQ(std::string(got.data(), n), sent);
    EXPECT_EQ(tag, 3u);
    accepted.async_wait_error([&](ucx::error_code ec) { end = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return end.has_value(); }, std::chrono::seconds(30)));
    EXPECT_EQ(*end, asio::error::eof);
}

TEST_P(connection, tags_are_ucx_tag_t_within_the_endpoints_range) {
    auto [client, accepted] = connect_pair();
    const std::string m = "the largest tag";
    std::vector<char> in(64);
    std::optional<ucx::error_code> s, r, bad_send, bad_recv;
    std::size_t n = 0;
    ucx::tag_t got = 0;
    accepted.async_recv(asio::buffer(in), ucx::endpoint_max_tag, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t k, ucx::tag_t t) {
                            r = ec;
                            n = k;
                            got = t;
                        });
    client.async_send(asio::buffer(m), ucx::endpoint_max_tag,
                      [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    ASSERT_FALSE(*r) << r->message();
    EXPECT_EQ(std::string(in.data(), n), m);
    EXPECT_EQ(got, ucx::endpoint_max_tag);
    // Past the range: refused, not cut to the low 32 bits; the endpoint stays usable.
    client.async_send(asio::buffer(m), ucx::endpoint_max_tag + 1,
                      [&](ucx::error_code ec, std::size_t) { bad_send = ec; });
    accepted.async_recv(asio::buffer(in), ucx::tag_t{1} << 40, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { bad_recv = ec; });
    ASSERT_TRUE(run_until(io, [&] { return bad_send && bad_recv; }));
    EXPECT_EQ(*bad_send, asio::error::invalid_argument);
    EXPECT_EQ(*bad_recv, asio::error::invalid_argument);
    EXPECT_EQ(*bad_send, ucx::condition::invalid_argument);
    EXPECT_TRUE(client.is_open());
    EXPECT_TRUE(accepted.is_open());
}

TEST_P(connection, abort_aborts_pending_and_fails_later_operations) {
    auto [client, accepted] = connect_pair();
    std::vector<char> in(16);
    std::optional<ucx::error_code> r, w, later;
    client.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    client.async_wait_error([&](ucx::error_code ec) { w = ec; });
    // On the worker's thread, after the operations' dispatched starts.
    asio::post(io, [&] {
        client.abort();
        client.abort();
        client.close(); // after an abort: nothing to do
    });
    ASSERT_TRUE(run_until(io, [&] { return r && w; }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    EXPECT_EQ(*w, asio::error::operation_aborted);
    client.async_send(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { later = ec; });
    ASSERT_TRUE(run_until(io, [&] { return later.has_value(); }));
    EXPECT_EQ(*later, asio::error::bad_descriptor);
    // The peer learns of it (a force close is not a goodbye).
    std::optional<ucx::error_code> peer;
    accepted.async_wait_error([&](ucx::error_code ec) { peer = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return peer.has_value(); }, std::chrono::seconds(30)));
    EXPECT_NE(*peer, asio::error::eof);
}

TEST_P(connection, refused_port_fails_within_five_seconds) {
    // A port that was just free: bind a listener, note the port, close it.
    std::uint16_t port;
    {
        ucx::listener tmp(server_worker,
                          asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        port = tmp.local_endpoint().port();
    }
    std::optional<ucx::error_code> r;
    const auto t0 = std::chrono::steady_clock::now();
    ucx::async_connect(client_worker, "127.0.0.1", std::to_string(port),
                       [&](ucx::error_code ec, ucx::endpoint ep) {
                           r = ec;
                           EXPECT_FALSE(ep.is_open());
                       });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, std::chrono::seconds(5)));
    EXPECT_TRUE(*r);
    std::printf(
        "refused connect: %s after %.1f ms\n", r->message().c_str(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
}

TEST_P(connection, unresolvable_name_is_a_resolver_error) {
    std::optional<ucx::error_code> r;
    ucx::async_connect(client_worker, "no-such-host.invalid", "13337",
                       [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, std::chrono::seconds(30)));
    EXPECT_EQ(r->category(), asio::error::get_netdb_category()) << r->message();
}

TEST_P(connection, filter_rejects_a_client) {
    ucx::listener picky(
        server_worker, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0),
        ucx::listener_options{16, [](const asio::ip::tcp::endpoint&) { return false; }});
    std::optional<ucx::error_code> r;
    ucx::async_connect(client_worker, "127.0.0.1", std::to_string(picky.local_endpoint().port()),
                       [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    ASSERT_TRUE(run_until(
        io, [&] { return r.has_value(); }, std::chrono::seconds(10)));
    EXPECT_TRUE(*r);
    EXPECT_EQ(picky.rejected(), 1u);
}

TEST_P(connection, closing_the_listener_aborts_a_pending_accept) {
    std::optional<ucx::error_code> r;
    server.async_accept([&](ucx::error_code ec, ucx::endpoint) { r = ec; });
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(10));
    server.close();
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    server.close();
}

TEST_P(connection, accept_is_cancellable) {
    asio::cancellation_signal signal;
    std::optional<ucx::error_code> r;
    server.async_accept(asio::bind_cancellation_slot(
        signal.slot(), [&](ucx::error_code ec, ucx::endpoint) { r = ec; }));
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(10));
    signal.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    // The listener still works.
    auto [c, s] = connect_pair();
    EXPECT_TRUE(c.is_open());
}

TEST_P(connection, destroying_the_worker_aborts_everything_pending) {
    auto [client, accepted] = connect_pair();
    std::vector<char> in(16);
    std::optional<ucx::error_code> r, w, a;
    accepted.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t) { r = ec; });
    accepted.async_wait_error([&](ucx::error_code ec) { w = ec; });
    server.async_accept([&](ucx::error_code ec, ucx::endpoint) { a = ec; });
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(10));
    server_worker.close();
    ASSERT_TRUE(run_until(io, [&] { return r && w && a; }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    EXPECT_EQ(*w, asio::error::operation_aborted);
    EXPECT_EQ(*a, asio::error::operation_aborted);
    EXPECT_FALSE(accepted.is_open());
}

TEST_P(connection, address_endpoints_have_no_per_endpoint_messaging) {
    ucx::endpoint ep(client_worker, server_worker.address());
    std::optional<ucx::error_code> r;
    char b = 0;
    ep.async_send(asio::buffer(&b, 1), [&](ucx::error_code ec, std::size_t) { r = ec; });
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, ucx::make_error_code(ucx::error::not_connected));
}

INSTANTIATE_TEST_SUITE_P(all, connection, testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

TEST(get_address, loopback_and_unknown_interfaces) {
    EXPECT_EQ(ucx::get_address("lo"), "127.0.0.1");
    ucx::error_code ec;
    EXPECT_EQ(ucx::get_address("no-such-if0", ec), "");
    EXPECT_EQ(ec, ucx::make_error_code(ucx::error::no_interface_address));
    EXPECT_THROW(ucx::get_address("no-such-if0"), boost::system::system_error);
}

} // namespace
