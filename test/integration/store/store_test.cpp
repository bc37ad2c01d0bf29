// tcp_store against tcp_store_server, and file_store: every operation,
// timeouts, cancellation, destruction; the server against bad input; a
// client whose server vanishes.
#include <ucx/file_store.hpp>
#include <ucx/tcp_store.hpp>

#include "store_support.hpp"
#include "test_support.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using ucx::error_code;
using value_type = ucx::store::value_type;

using namespace ucx_test;

namespace {

enum class kind { tcp, file };

/// A store of either kind, and what it needs (a server, a directory).
class StoreTest : public ::testing::TestWithParam<kind> {
protected:
    void SetUp() override {
        if (GetParam() == kind::tcp) {
            server_.emplace(ioc_.get_executor(),
                            tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        } else {
            dir_ = temp_dir("ucx-store-test-");
        }
        store_ = make();
    }
    void TearDown() override {
        store_.reset();
        server_.reset();
        ioc_.restart();
        ioc_.poll();
        if (!dir_.empty())
            std::filesystem::remove_all(dir_);
    }

    std::unique_ptr<ucx::store> make() {
        if (GetParam() == kind::tcp)
            return std::make_unique<ucx::tcp_store>(ioc_.get_executor(), "127.0.0.1",
                                                    server_->local_endpoint().port());
        return std::make_unique<ucx::file_store>(ioc_.get_executor(), dir_);
    }

    asio::io_context ioc_;
    std::optional<ucx::tcp_store_server> server_;
    std::filesystem::path dir_;
    std::unique_ptr<ucx::store> store_;
};

} // namespace

TEST_P(StoreTest, SetGet) {
    auto& s = *store_;
    auto [ec] = pump(ioc_, s.async_set("a", "one", tuple_future));
    EXPECT_FALSE(ec);
    auto [ec2, v] = pump(ioc_, s.async_get("a", tuple_future));
    EXPECT_FALSE(ec2);
    EXPECT_EQ(text(v), "one");
    // Replacing; keys of any bytes; empty and binary values.
    pump(ioc_, s.async_set("a", "two", tuple_future));
    const std::string odd("x/y z%\0\xff", 8);
    value_type bin{std::byte{0}, std::byte{0xff}, std::byte{10}};
    pump(ioc_, s.async_set(odd, bin, tuple_future));
    pump(ioc_, s.async_set("empty", "", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("a", tuple_future)))), "two");
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_get(odd, tuple_future))), bin);
    auto [ec3, e] = pump(ioc_, s.async_get("empty", tuple_future));
    EXPECT_FALSE(ec3);
    EXPECT_TRUE(e.empty());
}

TEST_P(StoreTest, HandlerNotRunInsideTheCall) {
    bool returned = false, ran_after = false;
    store_->async_set("k", "v", [&](error_code) { ran_after = returned; });
    returned = true;
    ASSERT_TRUE(pump_until(ioc_, [&] { return ran_after; }));
    returned = false;
    ran_after = false;
    store_->async_get("k", [&](error_code, value_type) { ran_after = returned; });
    returned = true;
    ASSERT_TRUE(pump_until(ioc_, [&] { return ran_after; }));
}

TEST_P(StoreTest, GetWaitsForSet) {
    auto& s = *store_;
    auto other = make();
    auto f = s.async_get("late", tuple_future);
    sleep_in(ioc_, 50ms);
    EXPECT_NE(f.wait_for(0s), std::future_status::ready);
    pump(ioc_, other->async_set("late", "here", tuple_future));
    auto [ec, v] = pump(ioc_, std::move(f));
    EXPECT_FALSE(ec);
    EXPECT_EQ(text(v), "here");
}

TEST_P(StoreTest, ManyWaitersOutOfOrder) {
    auto& s = *store_;
    std::vector<std::future<std::tuple<error_code, value_type>>> gets;
    for (int i = 0; i < 5; ++i)
        gets.push_back(s.async_get("w" + std::to_string(i), tuple_future));
    auto w = s.async_wait({"w1", "w3"}, tuple_future);
    for (int i = 4; i >= 0; --i)
        pump(ioc_, s.async_set("w" + std::to_string(i), std::to_string(i * 10), tuple_future));
    for (int i = 0; i < 5; ++i) {
        auto [ec, v] = pump(ioc_, std::move(gets[i]));
        EXPECT_FALSE(ec);
        EXPECT_EQ(text(v), std::to_string(i * 10));
    }
    EXPECT_FALSE(std::get<0>(pump(ioc_, std::move(w))));
}

TEST_P(StoreTest, Add) {
    auto& s = *store_;
    auto [ec, n] = pump(ioc_, s.async_add("c", 5, tuple_future));
    EXPECT_FALSE(ec);
    EXPECT_EQ(n, 5);
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_add("c", -7, tuple_future))), -2);
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("c", tuple_future)))), "-2");
    // Many at once.
    std::vector<std::future<std::tuple<error_code, std::int64_t>>> fs;
    for (int i = 0; i < 200; ++i)
        fs.push_back(s.async_add("many", 1, tuple_future));
    std::int64_t max = 0;
    for (auto& f : fs) {
        auto [e, v] = pump(ioc_, std::move(f));
        EXPECT_FALSE(e);
        max = std::max(max, v);
    }
    EXPECT_EQ(max, 200);
    // A value that is not a counter fails the add, and the store goes on.
    pump(ioc_, s.async_set("text", "abc", tuple_future));
    EXPECT_TRUE(std::get<0>(pump(ioc_, s.async_add("text", 1, tuple_future))));
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_add("c", 2, tuple_future))), 0);
}

TEST_P(StoreTest, EmptyValueIsNotACounter) {
    // The same rule in every store: an add to the empty value fails (a TCP
    // server closes the connection), the key keeps its value, the store goes
    // on.
    auto& s = *store_;
    pump(ioc_, s.async_set("e", "", tuple_future));
    auto [ec, n] = pump(ioc_, s.async_add("e", 1, tuple_future));
    EXPECT_TRUE(ec);
    if (GetParam() == kind::file) {
        EXPECT_EQ(ec, ucx::error::store_protocol_error);
    }
    auto [ec2, v] = pump(ioc_, s.async_get("e", tuple_future));
    EXPECT_FALSE(ec2);
    EXPECT_TRUE(v.empty());
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_add("other", 2, tuple_future))), 2);
}

TEST_P(StoreTest, CompareSet) {
    auto& s = *store_;
    // Missing, expected empty: set.
    auto [ec, v] = pump(ioc_, s.async_compare_set("k", {}, bytes("first"), tuple_future));
    EXPECT_FALSE(ec);
    EXPECT_EQ(text(v), "first");
    // Mismatch: the current value.
    EXPECT_EQ(text(std::get<1>(
                  pump(ioc_, s.async_compare_set("k", bytes("x"), bytes("y"), tuple_future)))),
              "first");
    // Match: set.
    EXPECT_EQ(text(std::get<1>(pump(
                  ioc_, s.async_compare_set("k", bytes("first"), bytes("second"), tuple_future)))),
              "second");
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("k", tuple_future)))), "second");
    // Missing, expected not empty: not set, gives expected.
    EXPECT_EQ(text(std::get<1>(
                  pump(ioc_, s.async_compare_set("m", bytes("e"), bytes("d"), tuple_future)))),
              "e");
    EXPECT_FALSE(std::get<1>(pump(ioc_, s.async_check({"m"}, tuple_future))));
}

TEST_P(StoreTest, CheckWaitEraseNumKeys) {
    auto& s = *store_;
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_num_keys(tuple_future))), 0);
    auto [ec, ready] = pump(ioc_, s.async_check({"a", "b"}, tuple_future));
    EXPECT_FALSE(ec);
    EXPECT_FALSE(ready);
    pump(ioc_, s.async_set("a", "1", tuple_future));
    EXPECT_FALSE(std::get<1>(pump(ioc_, s.async_check({"a", "b"}, tuple_future))));
    auto w = s.async_wait({"a", "b"}, tuple_future);
    pump(ioc_, s.async_set("b", "2", tuple_future));
    EXPECT_FALSE(std::get<0>(pump(ioc_, std::move(w))));
    EXPECT_TRUE(std::get<1>(pump(ioc_, s.async_check({"a", "b"}, tuple_future))));
    EXPECT_TRUE(std::get<1>(pump(ioc_, s.async_check({}, tuple_future))));
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_num_keys(tuple_future))), 2);
    auto [ec2, erased] = pump(ioc_, s.async_erase("a", tuple_future));
    EXPECT_FALSE(ec2);
    EXPECT_TRUE(erased);
    EXPECT_FALSE(std::get<1>(pump(ioc_, s.async_erase("a", tuple_future))));
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_num_keys(tuple_future))), 1);
    EXPECT_FALSE(std::get<1>(pump(ioc_, s.async_check({"a"}, tuple_future))));
}

TEST_P(StoreTest, Timeouts) {
    auto& s = *store_;
    s.set_timeout(200ms);
    const auto t0 = std::chrono::steady_clock::now();
    auto [ec, v] = pump(ioc_, s.async_get("never", tuple_future));
    EXPECT_EQ(ec, ucx::error::store_timeout);
    auto [ec2] = pump(ioc_, s.async_wait({"never", "nor"}, tuple_future));
    EXPECT_EQ(ec2, ucx::error::store_timeout);
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(took, 400ms);
    EXPECT_LT(took, 3s);
    // The store is usable afterwards, also for a late key.
    auto f = s.async_get("never", tuple_future);
    pump(ioc_, s.async_set("never", "now", tuple_future));
    auto [ec3, v3] = pump(ioc_, std::move(f));
    EXPECT_FALSE(ec3);
    EXPECT_EQ(text(v3), "now");
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_add("n", 1, tuple_future))), 1);
}

TEST_P(StoreTest, Cancellation) {
    auto& s = *store_;
    asio::cancellation_signal sig1, sig2;
    std::optional<error_code> got1, got2;
    s.async_get("missing", asio::bind_cancellation_slot(
                               sig1.slot(), [&](error_code ec, value_type) { got1 = ec; }));
    s.async_wait({"missing"},
                 asio::bind_cancellation_slot(sig2.slot(), [&](error_code ec) { got2 = ec; }));
    sleep_in(ioc_, 30ms);
    EXPECT_FALSE(got1 || got2);
    sig1.emit(asio::cancellation_type::terminal);
    sig2.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(pump_until(
        ioc_, [&] { return got1 && got2; }, 5s));
    EXPECT_EQ(*got1, asio::error::operation_aborted);
    EXPECT_EQ(*got2, asio::error::operation_aborted);
    // The store goes on.
    pump(ioc_, s.async_set("missing", "found", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("missing", tuple_future)))), "found");
    // A cancellation after completion does nothing.
    sig1.emit(asio::cancellation_type::terminal);
}

// Started outside the executor's thread (here: while nothing runs it), an
// operation reaches the executor later; a cancellation emitted before it got
// there is not lost.
TEST_P(StoreTest, ACancellationBeforeTheDispatchedStartIsKept) {
    auto& s = *store_;
    asio::cancellation_signal sig1, sig2;
    std::optional<error_code> got1, got2;
    s.async_get("missing", asio::bind_cancellation_slot(
                               sig1.slot(), [&](error_code ec, value_type) { got1 = ec; }));
    s.async_wait({"missing"},
                 asio::bind_cancellation_slot(sig2.slot(), [&](error_code ec) { got2 = ec; }));
    sig1.emit(asio::cancellation_type::terminal);
    sig2.emit(asio::cancellation_type::partial);
    ASSERT_TRUE(pump_until(
        ioc_, [&] { return got1 && got2; }, 5s));
    EXPECT_EQ(*got1, asio::error::operation_aborted);
    EXPECT_EQ(*got2, asio::error::operation_aborted);
    pump(ioc_, s.async_set("missing", "found", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("missing", tuple_future)))), "found");
}

TEST_P(StoreTest, DestroyAbortsPending) {
    std::optional<error_code> got1, got2;
    store_->async_get("missing", [&](error_code ec, value_type) { got1 = ec; });
    store_->async_wait({"missing"}, [&](error_code ec) { got2 = ec; });
    sleep_in(ioc_, 20ms);
    store_.reset();
    ASSERT_TRUE(pump_until(
        ioc_, [&] { return got1 && got2; }, 5s));
    EXPECT_EQ(*got1, asio::error::operation_aborted);
    EXPECT_EQ(*got2, asio::error::operation_aborted);
}

TEST_P(StoreTest, PrefixStore) {
    ucx::prefix_store p(*store_, "job");
    pump(ioc_, p.async_set("k", "v", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, store_->async_get("job/k", tuple_future)))), "v");
    EXPECT_EQ(text(std::get<1>(pump(ioc_, p.async_get("k", tuple_future)))), "v");
}

TEST_P(StoreTest, OperationsStartFromAnyThread) {
    // The executor runs on another thread; every operation starts here.
    auto work = asio::make_work_guard(ioc_);
    std::thread runner([&] { ioc_.run(); });
    auto& s = *store_;
    ucx::prefix_store p(s, "job");
    auto ready = [](auto& f) { return f.wait_for(60s) == std::future_status::ready; };
    auto set = s.async_set("a", "one", asio::use_future);
    const bool set_done = ready(set);
    auto get = s.async_get("a", asio::use_future);
    auto add = s.async_add("n", 5, asio::use_future);
    auto cas = s.async_compare_set("a", value_type{}, value_type{std::byte{1}}, asio::use_future);
    auto check = s.async_check({"a", "missing"}, asio::use_future);
    auto pset = p.async_set("k", "v", asio::use_future);
    const bool first =
        set_done && ready(get) && ready(add) && ready(cas) && ready(check) && ready(pset);
    auto wait = s.async_wait({"job/k"}, asio::use_future);
    auto erase = s.async_erase("a", asio::use_future);
    const bool second = ready(wait) && ready(erase);
    auto keys = s.async_num_keys(asio::use_future);
    const bool third = ready(keys);
    work.reset();
    ioc_.stop();
    runner.join();
    ASSERT_TRUE(first && second && third) << "an operation started here never completed";
    EXPECT_NO_THROW(set.get());
    EXPECT_EQ(text(get.get()), "one");
    EXPECT_EQ(add.get(), 5);
    EXPECT_EQ(text(cas.get()), "one"); // not replaced: the expected value differs
    EXPECT_FALSE(check.get());
    EXPECT_NO_THROW(pset.get());
    EXPECT_NO_THROW(wait.get());
    EXPECT_TRUE(erase.get());
    EXPECT_EQ(keys.get(), 2); // n and job/k
}

TEST_P(StoreTest, AStartStillOnItsWayWhenTheStoreGoesIsAborted) {
    // Started on a thread that does not run the executor: queued to it.
    // The store goes before the executor runs; the operation ends aborted.
    std::optional<error_code> got;
    std::thread starter([&] { store_->async_set("k", "v", [&](error_code ec) { got = ec; }); });
    starter.join();
    EXPECT_FALSE(got);
    store_.reset();
    ASSERT_TRUE(pump_until(
        ioc_, [&] { return got.has_value(); }, 5s));
    EXPECT_EQ(*got, asio::error::operation_aborted);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(kind::tcp, kind::file),
                         [](const auto& info) { return info.param == kind::tcp ? "Tcp" : "File"; });

// ---- tcp_store and tcp_store_server ----

namespace {

tcp::endpoint loopback(std::uint16_t port = 0) {
    return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
}

} // namespace

TEST(TcpStore, ServerClosesBadClientsOnly) {
    asio::io_context ioc;
    ucx::tcp_store_server server(ioc.get_executor(), loopback(),
                                 {.max_key_size = 1024, .max_value_size = 4096, .max_keys = 16});
    ucx::tcp_store good(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    pump(ioc, good.async_set("k", "v", tuple_future));

    auto expect_closed = [&](std::vector<std::uint8_t> garbage) {
        tcp::socket raw(ioc);
        pump(ioc, raw.async_connect(server.local_endpoint(), tuple_future));
        pump(ioc, asio::async_write(raw, asio::buffer(garbage), tuple_future));
        std::array<char, 64> buf;
        auto [ec, n] = pump(ioc, raw.async_read_some(asio::buffer(buf), tuple_future), 5s);
        EXPECT_EQ(ec, asio::error::eof) << "after " << garbage.size() << " bytes";
        // The good client is served all along.
        EXPECT_EQ(text(std::get<1>(pump(ioc, good.async_get("k", tuple_future)))), "v");
    };
    expect_closed({0xff});
    expect_closed({9, 1, 2, 3});
    // A key of 2^60 bytes, a value over the bound, too many keys.
    expect_closed({2, 0, 0, 0, 0, 0, 0, 0, 0x10});
    expect_closed({0, 1, 0, 0, 0, 0, 0, 0, 0, 'k', 0x01, 0x10, 0, 0, 0, 0, 0, 0});
    expect_closed({5, 17, 0, 0, 0, 0, 0, 0, 0});
    // GET of a missing key, WATCH_KEY, ADD to a value that is not a counter.
    expect_closed({2, 1, 0, 0, 0, 0, 0, 0, 0, 'x'});
    expect_closed({7, 1, 0, 0, 0, 0, 0, 0, 0, 'x'});
    expect_closed({0, 2, 0, 0, 0, 0, 0, 0, 0, '/', 't', 1, 0, 0, 0, 0, 0, 0, 0, 'z',
                   3, 2, 0, 0, 0, 0, 0, 0, 0, '/', 't', 1, 0, 0, 0, 0, 0, 0, 0});

    // A client that stops in the middle of a query holds nothing up.
    tcp::socket half(ioc);
    pump(ioc, half.async_connect(server.local_endpoint(), tuple_future));
    std::vector<std::uint8_t> part{0, 100, 0, 0, 0, 0, 0, 0, 0, 'a'};
    pump(ioc, asio::async_write(half, asio::buffer(part), tuple_future));
    EXPECT_EQ(std::get<1>(pump(ioc, good.async_add("n", 3, tuple_future))), 3);
    EXPECT_GE(server.num_connections(), 2u);
}

TEST(TcpStore, RawClientSeesTorchReplies) {
    asio::io_context ioc;
    ucx::tcp_store_server server(ioc.get_executor(), loopback());
    tcp::socket raw(ioc);
    pump(ioc, raw.async_connect(server.local_endpoint(), tuple_future));
    // WAIT /a, then ADD /n 2 (answered first), then SET /a (wakes the wait),
    // then CHECK [/a] and GETNUMKEYS, all in one write.
    std::vector<std::uint8_t> q{5,   1,   0,   0, 0, 0, 0, 0, 0, 2,   0, 0,   0,   0,   0, 0,
                                0,   '/', 'a', 3, 2, 0, 0, 0, 0, 0,   0, 0,   '/', 'n', 2, 0,
                                0,   0,   0,   0, 0, 0, 0, 2, 0, 0,   0, 0,   0,   0,   0, '/',
                                'a', 1,   0,   0, 0, 0, 0, 0, 0, 'v', 4, 1,   0,   0,   0, 0,
                                0,   0,   0,   2, 0, 0, 0, 0, 0, 0,   0, '/', 'a', 6};
    pump(ioc, asio::async_write(raw, asio::buffer(q), tuple_future));
    std::vector<std::uint8_t> want{2, 0, 0, 0, 0, 0, 0, 0,  // ADD: 2
                                   0,                       // STOP_WAITING
                                   0,                       // READY
                                   2, 0, 0, 0, 0, 0, 0, 0}; // 2 keys
    std::vector<std::uint8_t> got(want.size());
    auto [ec, n] = pump(ioc, asio::async_read(raw, asio::buffer(got), tuple_future), 5s);
    EXPECT_FALSE(ec);
    EXPECT_EQ(got, want);
    EXPECT_EQ(server.num_keys(), 2u);
}

TEST(TcpStore, ClientBeforeServer) {
    asio::io_context ioc;
    // Below the ports the kernel hands out: no other test's server or
    // client socket can be given it before this test's server binds it.
    const std::uint16_t port = ucx_test::free_port_below_ephemeral();
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", port, {.join_as_worker = true});
    s.set_timeout(10s);
    auto f = s.async_get("k", tuple_future);
    auto c = s.async_connect(tuple_future);
    sleep_in(ioc, 150ms);
    ucx::tcp_store_server server(ioc.get_executor(), loopback(port));
    EXPECT_FALSE(std::get<0>(pump(ioc, std::move(c))));
    pump(ioc, s.async_set("k", "v", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc, std::move(f)))), "v");
    // Joined as a worker: "init/" (without the prefix) is 1.
    ucx::tcp_store raw(ioc.get_executor(), "127.0.0.1", port, {.key_prefix = ""});
    EXPECT_EQ(text(std::get<1>(pump(ioc, raw.async_get("init/", tuple_future)))), "1");
    EXPECT_EQ(text(std::get<1>(pump(ioc, raw.async_get("/k", tuple_future)))), "v");
}

TEST(TcpStore, NoServer) {
    asio::io_context ioc;
    // Nothing listens there: below the ports the kernel hands out, so no
    // other test's server (bound to port 0) can be given it meanwhile.
    const std::uint16_t port = ucx_test::free_port_below_ephemeral();
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", port);
    s.set_timeout(300ms);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(std::get<0>(pump(ioc, s.async_add("k", 1, tuple_future))), ucx::error::store_timeout);
    EXPECT_EQ(std::get<0>(pump(ioc, s.async_connect(tuple_future))), ucx::error::store_timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(TcpStore, ServerVanishes) {
    asio::io_context ioc;
    std::optional<ucx::tcp_store_server> server(std::in_place, ioc.get_executor(), loopback());
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", server->local_endpoint().port());
    s.set_timeout(20s);
    pump(ioc, s.async_set("k", "v", tuple_future));
    auto g = s.async_get("missing", tuple_future);
    auto w = s.async_wait({"missing"}, tuple_future);
    sleep_in(ioc, 50ms);
    const auto t0 = std::chrono::steady_clock::now();
    server.reset();
    auto [ec, v] = pump(ioc, std::move(g), 5s);
    EXPECT_TRUE(ec);
    EXPECT_NE(ec, ucx::error::store_timeout);
    EXPECT_TRUE(std::get<0>(pump(ioc, std::move(w), 5s)));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    // Later operations retry until their timeout.
    s.set_timeout(200ms);
    EXPECT_EQ(std::get<0>(pump(ioc, s.async_check({"k"}, tuple_future), 5s)),
              ucx::error::store_timeout);
}

TEST(TcpStore, ServerThatDoesNotAnswer) {
    // A listening socket that accepts and never answers: the store's
    // timeout bounds the operation, and the store reconnects afterwards.
    asio::io_context ioc;
    tcp::acceptor mute(ioc, loopback());
    std::vector<tcp::socket> accepted;
    std::function<void()> accept = [&] {
        mute.async_accept([&](error_code ec, tcp::socket sock) {
            if (ec)
                return;
            accepted.push_back(std::move(sock));
            accept();
        });
    };
    accept();
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", mute.local_endpoint().port());
    s.set_timeout(200ms);
    auto a = s.async_add("k", 1, tuple_future);
    auto n = s.async_num_keys(tuple_future);
    EXPECT_EQ(std::get<0>(pump(ioc, std::move(a), 5s)), ucx::error::store_timeout);
    EXPECT_EQ(std::get<0>(pump(ioc, std::move(n), 5s)), ucx::error::store_timeout);
    mute.close();
}

TEST(TcpStore, MalformedReply) {
    // A server that answers garbage: store_protocol_error, no crash.
    asio::io_context ioc;
    tcp::acceptor fake(ioc, loopback());
    tcp::socket peer(ioc);
    fake.async_accept(peer, [](error_code) {});
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", fake.local_endpoint().port());
    s.set_timeout(5s);
    auto c = s.async_check({"k"}, tuple_future);
    ASSERT_TRUE(pump_until(
        ioc, [&] { return peer.is_open(); }, 5s));
    std::array<std::uint8_t, 64> in;
    pump(ioc, peer.async_read_some(asio::buffer(in), tuple_future));
    std::uint8_t bad = 7; // neither READY nor NOT_READY
    pump(ioc, asio::async_write(peer, asio::buffer(&bad, 1), tuple_future));
    EXPECT_EQ(std::get<0>(pump(ioc, std::move(c))), ucx::error::store_protocol_error);
}

TEST(TcpStore, CloseAbortsAndReconnects) {
    asio::io_context ioc;
    ucx::tcp_store_server server(ioc.get_executor(), loopback());
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    auto g = s.async_get("missing", tuple_future);
    sleep_in(ioc, 20ms);
    s.close();
    EXPECT_EQ(std::get<0>(pump(ioc, std::move(g))), asio::error::operation_aborted);
    EXPECT_EQ(std::get<1>(pump(ioc, s.async_add("n", 4, tuple_future))), 4);
}

// ---- file_store ----

TEST(FileStore, FileNames) {
    EXPECT_EQ(ucx::file_store::file_name("rank_0-addr"), "k_rank_0-addr");
    EXPECT_EQ(ucx::file_store::file_name("a/b.c"), "k_a%2Fb%2Ec");
    EXPECT_EQ(ucx::file_store::file_name(""), "k_");
}

TEST(FileStore, SharedDirectory) {
    const auto dir = temp_dir("ucx-store-test-");
    {
        asio::io_context ioc;
        ucx::file_store a(ioc.get_executor(), dir);
        // Another thread's store on the same directory, adding concurrently.
        std::thread t([&] {
            asio::io_context ioc2;
            ucx::file_store b(ioc2.get_executor(), dir);
            for (int i = 0; i < 100; ++i)
                pump(ioc2, b.async_add("count", 1, tuple_future));
            pump(ioc2, b.async_set("from_b", "hi", tuple_future));
        });
        for (int i = 0; i < 100; ++i)
            pump(ioc, a.async_add("count", 1, tuple_future));
        EXPECT_EQ(text(std::get<1>(pump(ioc, a.async_get("from_b", tuple_future)))), "hi");
        t.join();
        EXPECT_EQ(std::get<1>(pump(ioc, a.async_add("count", 0, tuple_future))), 200);
        // Long keys fail with an error code, not an exception.
        EXPECT_EQ(std::get<0>(pump(ioc, a.async_set(std::string(300, 'x'), "v", tuple_future))),
                  std::errc::filename_too_long);
    }
    std::filesystem::remove_all(dir);
}

// ---- memory_store ----

TEST(MemoryStore, FollowsTheRulesOfTheOtherStores) {
    // The rules of every store (store_rules): an empty value and an overflow
    // are errors of add that leave the key as it was; compare_set's cases.
    asio::io_context ioc;
    ucx::memory_store s(ioc.get_executor());
    pump(ioc, s.async_set("e", "", tuple_future));
    EXPECT_EQ(std::get<0>(pump(ioc, s.async_add("e", 1, tuple_future))),
              ucx::error::store_protocol_error);
    EXPECT_TRUE(std::get<1>(pump(ioc, s.async_get("e", tuple_future))).empty());
    const auto max = std::to_string(std::numeric_limits<std::int64_t>::max());
    pump(ioc, s.async_set("max", max, tuple_future));
    EXPECT_EQ(std::get<0>(pump(ioc, s.async_add("max", 1, tuple_future))),
              ucx::error::store_protocol_error);
    EXPECT_EQ(text(std::get<1>(pump(ioc, s.async_get("max", tuple_future)))), max);
    EXPECT_EQ(std::get<1>(pump(ioc, s.async_add("fresh", -3, tuple_future))), -3);
    EXPECT_EQ(text(std::get<1>(
                  pump(ioc, s.async_compare_set("c", bytes("e"), bytes("d"), tuple_future)))),
              "e");
    EXPECT_FALSE(std::get<1>(pump(ioc, s.async_check({"c"}, tuple_future))));
    EXPECT_EQ(text(std::get<1>(pump(ioc, s.async_compare_set("c", {}, bytes("d"), tuple_future)))),
              "d");
    EXPECT_EQ(text(std::get<1>(
                  pump(ioc, s.async_compare_set("c", bytes("x"), bytes("y"), tuple_future)))),
              "d");
}
