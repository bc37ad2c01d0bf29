// The stores against what a hostile or broken peer puts in their way: a
// file_store whose key files are a FIFO, a directory, a link to /dev/zero or a
// huge file, or whose lock another store holds; a tcp_store_server with
// truncated queries, idle connections, more clients than its cap, and a flood
// of idle connections under a low descriptor limit (a server process of its
// own). Every bound here is "eventually, within the test's generous limit";
// no test asserts how fast something happens.
#include <ucx/file_store.hpp>
#include <ucx/log.hpp>
#include <ucx/tcp_store.hpp>

#include "store_support.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/log/core.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using ucx::error_code;
using value_type = ucx::store::value_type;

using namespace ucx_test;

namespace {

tcp::endpoint loopback(std::uint16_t port = 0) {
    return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
}

/// The library's log records of a test, kept in a string.
class log_capture {
public:
    explicit log_capture(ucx::log::severity level = ucx::log::severity::info)
        : saved_(ucx::log::level()), sink_(ucx::log::add_stream_sink(os_)) {
        ucx::log::set_level(level);
    }
    ~log_capture() {
        ucx::log::set_level(saved_);
        boost::log::core::get()->remove_sink(sink_);
    }
    std::string text() const { return os_.str(); }

private:
    std::ostringstream os_;
    ucx::log::severity saved_;
    boost::shared_ptr<boost::log::sinks::sink> sink_;
};

/// A directory of a file_store, removed at the end.
class FileStoreLimits : public ::testing::Test {
protected:
    void TearDown() override {
        ioc_.restart();
        ioc_.poll();
        std::filesystem::remove_all(dir_);
    }
    std::filesystem::path key_file(std::string_view key) const {
        return dir_ / ucx::file_store::file_name(key);
    }

    asio::io_context ioc_;
    std::filesystem::path dir_ = temp_dir("ucx-store-limits-");
};

} // namespace

// ---- file_store ----

TEST_F(FileStoreLimits, FifoInPlaceOfAKeyFile) {
    ucx::file_store s(ioc_.get_executor(), dir_);
    s.set_timeout(20s);
    ASSERT_EQ(::mkfifo(key_file("fifo").c_str(), 0600), 0);
    // A watchdog opens the FIFO for writing whenever a reader waits on it:
    // a store that opened it would block until then, and the test fails
    // instead of hanging.
    std::atomic<bool> stop{false}, reader_was_blocked{false};
    std::thread watchdog([&, path = key_file("fifo")] {
        while (!stop) {
            // (A writer's open of a FIFO without waiting succeeds only when a
            // reader has it open.)
            const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd >= 0) {
                struct stat st;
                if (::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
                    reader_was_blocked = true;
                ::close(fd);
            }
            std::this_thread::sleep_for(20ms);
        }
    });
    // The io_context keeps serving while the store refuses the FIFO: a timer
    // started before fires.
    bool ticked = false;
    asio::steady_timer tick(ioc_, 1ms);
    tick.async_wait([&](error_code) { ticked = true; });

    auto [ec, v] = pump(ioc_, s.async_get("fifo", tuple_future));
    EXPECT_EQ(ec, ucx::error::store_not_regular_file);
    EXPECT_TRUE(v.empty());
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add("fifo", 1, tuple_future))),
              ucx::error::store_not_regular_file);
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_compare_set("fifo", {}, bytes("x"), tuple_future))),
              ucx::error::store_not_regular_file);
    // A wait counts the key as there; a check too.
    EXPECT_TRUE(std::get<1>(pump(ioc_, s.async_check({"fifo"}, tuple_future))));
    EXPECT_TRUE(pump_until(ioc_, [&] { return ticked; }));
    // The store goes on with other keys.
    pump(ioc_, s.async_set("other", "ok", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("other", tuple_future)))), "ok");
    stop = true;
    watchdog.join();
    EXPECT_FALSE(reader_was_blocked) << "the store opened the FIFO and blocked on it";
    // A set replaces the FIFO.
    EXPECT_FALSE(std::get<0>(pump(ioc_, s.async_set("fifo", "now a file", tuple_future))));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("fifo", tuple_future)))), "now a file");
}

TEST_F(FileStoreLimits, FifoAppearingWhileAGetWaits) {
    // A get that waits for its key finds a FIFO there: an error, not a
    // blocked io_context (the store's timeout is long, so a store_timeout
    // would mean it never looked).
    ucx::file_store s(ioc_.get_executor(), dir_);
    s.set_timeout(60s);
    auto f = s.async_get("later", tuple_future);
    sleep_in(ioc_, 30ms);
    ASSERT_EQ(::mkfifo(key_file("later").c_str(), 0600), 0);
    auto [ec, v] = pump(ioc_, std::move(f));
    EXPECT_EQ(ec, ucx::error::store_not_regular_file);
}

TEST_F(FileStoreLimits, LinksAndDirectoriesAreRefused) {
    ucx::file_store s(ioc_.get_executor(), dir_);
    s.set_timeout(20s);
    // A link to /dev/zero would be read for ever; one to a regular file is
    // refused too (the store never makes links).
    std::filesystem::create_symlink("/dev/zero", key_file("zero"));
    std::ofstream(dir_ / "plain") << "5";
    std::filesystem::create_symlink(dir_ / "plain", key_file("link"));
    std::filesystem::create_directory(key_file("dir"));
    for (const char* key : {"zero", "link", "dir"}) {
        EXPECT_EQ(std::get<0>(pump(ioc_, s.async_get(key, tuple_future))),
                  ucx::error::store_not_regular_file)
            << key;
        EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add(key, 1, tuple_future))),
                  ucx::error::store_not_regular_file)
            << key;
    }
    // The link's target is untouched.
    std::ifstream in(dir_ / "plain");
    std::string content;
    in >> content;
    EXPECT_EQ(content, "5");
    // A lock file that is a link: add and compare_set refuse it.
    std::filesystem::remove(dir_ / ".lock");
    std::filesystem::create_symlink("/dev/zero", dir_ / ".lock");
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add("n", 1, tuple_future))),
              ucx::error::store_not_regular_file);
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_compare_set("n", {}, bytes("x"), tuple_future))),
              ucx::error::store_not_regular_file);
}

TEST_F(FileStoreLimits, HugeFilesAreNotRead) {
    // A sparse file of 1 GiB, over the default bound of 64 MiB: an error
    // code, no allocation of its size.
    {
        ucx::file_store s(ioc_.get_executor(), dir_);
        s.set_timeout(20s);
        {
            const int fd = ::open(key_file("huge").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            ASSERT_GE(fd, 0);
            ASSERT_EQ(::ftruncate(fd, off_t{1} << 30), 0);
            ::close(fd);
        }
        EXPECT_EQ(std::get<0>(pump(ioc_, s.async_get("huge", tuple_future))),
                  ucx::error::store_value_too_large);
        EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add("huge", 1, tuple_future))),
                  ucx::error::store_value_too_large);
        EXPECT_EQ(std::get<0>(pump(
                      ioc_, s.async_compare_set("huge", bytes("a"), bytes("b"), tuple_future))),
                  ucx::error::store_value_too_large);
    }
    // A small bound, both ways: exactly the bound is a value, one more byte
    // is not (to read or to write).
    ucx::file_store s(ioc_.get_executor(), dir_, {.max_value_size = 1024});
    s.set_timeout(20s);
    const std::string fits(1024, 'a'), over(1025, 'b');
    EXPECT_FALSE(std::get<0>(pump(ioc_, s.async_set("fits", fits, tuple_future))));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("fits", tuple_future)))), fits);
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_set("over", over, tuple_future))),
              ucx::error::store_value_too_large);
    EXPECT_FALSE(std::get<1>(pump(ioc_, s.async_check({"over"}, tuple_future))));
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_compare_set("over", {}, bytes(over), tuple_future))),
              ucx::error::store_value_too_large);
    std::ofstream(key_file("written")) << over;
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_get("written", tuple_future))),
              ucx::error::store_value_too_large);
}

TEST_F(FileStoreLimits, EmptyValueIsNotACounter) {
    ucx::file_store s(ioc_.get_executor(), dir_);
    pump(ioc_, s.async_set("e", "", tuple_future));
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add("e", 1, tuple_future))),
              ucx::error::store_protocol_error);
    pump(ioc_, s.async_set("max", std::to_string(INT64_MAX), tuple_future));
    EXPECT_EQ(std::get<0>(pump(ioc_, s.async_add("max", 1, tuple_future))),
              ucx::error::store_protocol_error);
    EXPECT_EQ(std::get<1>(pump(ioc_, s.async_add("fresh", -3, tuple_future))), -3);
}

TEST_F(FileStoreLimits, LockHeldByAnotherStore) {
    ucx::file_store s(ioc_.get_executor(), dir_, {.poll_interval = 1ms, .max_poll_interval = 10ms});
    s.set_timeout(300ms);
    // Another holder of the directory's lock (another open file: flock
    // conflicts within one process too).
    const int fd = ::open((dir_ / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    auto add = s.async_add("n", 1, tuple_future);
    // The io_context serves the store's other operations meanwhile.
    EXPECT_FALSE(std::get<0>(pump(ioc_, s.async_set("k", "v", tuple_future))));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("k", tuple_future)))), "v");
    EXPECT_EQ(std::get<0>(pump(ioc_, std::move(add))), ucx::error::store_timeout);
    // An add that waits gets the lock once it is released.
    s.set_timeout(60s);
    auto add2 = s.async_add("n", 2, tuple_future);
    sleep_in(ioc_, 30ms);
    ::flock(fd, LOCK_UN);
    ::close(fd);
    auto [ec, n] = pump(ioc_, std::move(add2));
    EXPECT_FALSE(ec);
    EXPECT_EQ(n, 2);
}

TEST_F(FileStoreLimits, DestroyAbortsAnAddWaitingForTheLock) {
    const int fd = ::open((dir_ / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    std::optional<error_code> got;
    {
        ucx::file_store s(ioc_.get_executor(), dir_);
        s.async_add("n", 1, [&](error_code ec, std::int64_t) { got = ec; });
        sleep_in(ioc_, 20ms);
    }
    EXPECT_TRUE(pump_until(ioc_, [&] { return got.has_value(); }));
    EXPECT_EQ(*got, asio::error::operation_aborted);
    ::close(fd);
}

// ---- tcp_store_server ----

TEST(TcpStoreServerLimits, TruncatedQueryDroppedAfterTheDeadline) {
    asio::io_context ioc;
    log_capture logs(ucx::log::severity::warning);
    ucx::tcp_store_server server(ioc.get_executor(), loopback(), {.request_timeout = 200ms});
    ucx::tcp_store good(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    good.set_timeout(60s);
    // SET of a 100-byte key, 1 byte of it sent.
    tcp::socket half(ioc);
    pump(ioc, half.async_connect(server.local_endpoint(), tuple_future));
    const std::vector<std::uint8_t> part{0, 100, 0, 0, 0, 0, 0, 0, 0, 'a'};
    pump(ioc, asio::async_write(half, asio::buffer(part), tuple_future));
    std::optional<error_code> dropped;
    std::array<char, 16> buf;
    half.async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t) { dropped = ec; });
    // Others are served before, during and after.
    EXPECT_EQ(std::get<1>(pump(ioc, good.async_add("n", 3, tuple_future))), 3);
    ASSERT_TRUE(pump_until(ioc, [&] { return dropped.has_value(); }));
    EXPECT_TRUE(*dropped == asio::error::eof || *dropped == asio::error::connection_reset)
        << dropped->message();
    EXPECT_EQ(std::get<1>(pump(ioc, good.async_add("n", 1, tuple_future))), 4);
    EXPECT_NE(logs.text().find("request_timeout"), std::string::npos) << logs.text();
    // The half query was not applied: the only key is "/n".
    EXPECT_EQ(server.num_keys(), 1u);
}

TEST(TcpStoreServerLimits, IdleConnectionsClosedWaitingOnesKept) {
    asio::io_context ioc;
    log_capture logs;
    ucx::tcp_store_server server(ioc.get_executor(), loopback(), {.idle_timeout = 200ms});
    tcp::socket idle(ioc);
    pump(ioc, idle.async_connect(server.local_endpoint(), tuple_future));
    std::optional<error_code> closed;
    std::array<char, 16> buf;
    idle.async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t) { closed = ec; });
    // A get that waits (its connection has a WAIT pending) for longer than
    // the idle timeout is answered.
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    s.set_timeout(60s);
    auto g = s.async_get("late", tuple_future);
    ASSERT_TRUE(pump_until(ioc, [&] { return closed.has_value(); }));
    EXPECT_TRUE(*closed == asio::error::eof || *closed == asio::error::connection_reset)
        << closed->message();
    sleep_in(ioc, 600ms);
    ucx::tcp_store setter(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    setter.set_timeout(60s);
    pump(ioc, setter.async_set("late", "here", tuple_future));
    auto [ec, v] = pump(ioc, std::move(g));
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(text(v), "here");
    EXPECT_NE(logs.text().find("idle"), std::string::npos) << logs.text();
}

TEST(TcpStoreServerLimits, ConnectionsOverTheCapRefusedAndLogged) {
    asio::io_context ioc;
    log_capture logs(ucx::log::severity::warning);
    ucx::tcp_store_server server(ioc.get_executor(), loopback(), {.max_connections = 4});
    std::vector<std::unique_ptr<tcp::socket>> socks;
    std::vector<std::array<char, 16>> bufs(10);
    int connected = 0, ended = 0;
    for (int i = 0; i < 10; ++i) {
        auto& sock = socks.emplace_back(std::make_unique<tcp::socket>(ioc));
        sock->async_connect(server.local_endpoint(), [&, i](error_code ec) {
            if (ec)
                return;
            ++connected;
            socks[i]->async_read_some(asio::buffer(bufs[i]),
                                      [&](error_code, std::size_t) { ++ended; });
        });
    }
    ASSERT_TRUE(pump_until(ioc, [&] { return connected == 10 && ended == 6; }));
    EXPECT_EQ(server.num_connections(), 4u);
    std::size_t refusals = 0;
    for (auto pos = logs.text().find("refused"); pos != std::string::npos;
         pos = logs.text().find("refused", pos + 1))
        ++refusals;
    EXPECT_EQ(refusals, 6u) << logs.text();
    // A client that leaves frees its place.
    for (auto& s : socks)
        s->close();
    ASSERT_TRUE(pump_until(ioc, [&] { return server.num_connections() == 0; }));
    ucx::tcp_store st(ioc.get_executor(), "127.0.0.1", server.local_endpoint().port());
    st.set_timeout(60s);
    EXPECT_EQ(std::get<1>(pump(ioc, st.async_add("n", 1, tuple_future))), 1);
}

TEST(TcpStoreServerLimits, PendingWaitsBounded) {
    // WAITs that pile up on one connection past max_request_size drop it.
    asio::io_context ioc;
    ucx::tcp_store_server server(ioc.get_executor(), loopback(), {.max_request_size = 1024});
    tcp::socket raw(ioc);
    pump(ioc, raw.async_connect(server.local_endpoint(), tuple_future));
    // WAIT on one key of 100 bytes (counting 132), twenty times.
    std::vector<std::uint8_t> wait{5, 1, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0};
    wait.resize(wait.size() + 100, 'w');
    std::vector<std::uint8_t> all;
    for (int i = 0; i < 20; ++i)
        all.insert(all.end(), wait.begin(), wait.end());
    pump(ioc, asio::async_write(raw, asio::buffer(all), tuple_future));
    std::array<char, 16> buf;
    auto [ec, n] = pump(ioc, raw.async_read_some(asio::buffer(buf), tuple_future));
    EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset) << ec.message();
}

namespace {

/// A tcp_store_server in a process of its own, under a descriptor limit,
/// logging to a file; killed at the end.
class server_process {
public:
    server_process(rlim_t nofile, ucx::tcp_store_server_options options,
                   std::filesystem::path log_file)
        : log_file_(std::move(log_file)) {
        int p[2];
        if (::pipe(p) != 0)
            throw std::runtime_error("pipe");
        pid_ = ::fork();
        if (pid_ < 0)
            throw std::runtime_error("fork");
        if (pid_ == 0) {
            ::close(p[0]);
            run_child(p[1], nofile, options);
        }
        ::close(p[1]);
        std::uint16_t port = 0;
        if (::read(p[0], &port, sizeof port) != sizeof port)
            port = 0;
        ::close(p[0]);
        port_ = port;
    }
    ~server_process() {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
    std::uint16_t port() const { return port_; }
    std::string log() const {
        std::ifstream in(log_file_);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }

private:
    [[noreturn]] void run_child(int port_fd, rlim_t nofile, ucx::tcp_store_server_options options) {
        const int log_fd =
            ::open(log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (log_fd < 0)
            ::_exit(2);
        ::dup2(log_fd, 2);
        ::close(log_fd);
        rlimit rl{nofile, nofile};
        if (::setrlimit(RLIMIT_NOFILE, &rl) != 0)
            ::_exit(3);
        ucx::log::set_level(ucx::log::severity::info);
        ucx::log::add_stream_sink(std::cerr);
        try {
            asio::io_context ioc;
            ucx::tcp_store_server server(ioc.get_executor(), loopback(), options);
            const std::uint16_t port = server.local_endpoint().port();
            if (::write(port_fd, &port, sizeof port) != sizeof port)
                ::_exit(4);
            ::close(port_fd);
            ioc.run();
        } catch (const std::exception& e) {
            std::cerr << "server process: exception out of run(): " << e.what() << std::endl;
            ::_exit(5);
        }
        ::_exit(0);
    }

    std::filesystem::path log_file_;
    pid_t pid_ = -1;
    std::uint16_t port_ = 0;
};

} // namespace

TEST(TcpStoreServerLimits, IdleFloodUnderALowDescriptorLimit) {
    // 500 connections that say nothing, to a server that may hold 128
    // descriptors: it keeps 64 (its cap), refuses the others at once, and
    // closes the idle ones after its idle timeout, so a real client is
    // served (after a few refusals, which it tries again).
    const auto dir = temp_dir("ucx-store-limits-");
    std::optional<server_process> server;
    server.emplace(128, ucx::tcp_store_server_options{.max_connections = 64, .idle_timeout = 300ms},
                   dir / "server.log");
    ASSERT_NE(server->port(), 0) << server->log();
    const auto ep = loopback(server->port());

    asio::io_context ioc;
    std::vector<std::unique_ptr<tcp::socket>> flood;
    int done = 0, connected = 0;
    for (int i = 0; i < 500; ++i) {
        auto& s = flood.emplace_back(std::make_unique<tcp::socket>(ioc));
        s->async_connect(ep, [&](error_code ec) {
            ++done;
            connected += !ec;
        });
    }
    ASSERT_TRUE(pump_until(
        ioc, [&] { return done == 500; }, 120s));
    EXPECT_GT(connected, 64);

    bool served = false;
    int attempts = 0;
    const auto end = std::chrono::steady_clock::now() + 120s;
    while (!served && std::chrono::steady_clock::now() < end) {
        ++attempts;
        ucx::tcp_store real(ioc.get_executor(), "127.0.0.1", server->port());
        real.set_timeout(10s);
        // Three operations on one connection. A loaded host may hold this
        // process longer than the idle timeout between two of them, and the
        // server then rightly closes the connection: that attempt counts as
        // refused and the client tries again.
        auto [ec, n] = pump(ioc, real.async_add("served", 1, tuple_future), 60s);
        if (!ec) {
            EXPECT_GE(n, 1);
            auto [ec1] = pump(ioc, real.async_set("k", "v", tuple_future), 60s);
            if (!ec1) {
                auto [ec2, v] = pump(ioc, real.async_get("k", tuple_future), 60s);
                if (!ec2) {
                    served = true;
                    EXPECT_EQ(text(v), "v");
                }
            }
        }
        if (!served)
            sleep_in(ioc, 50ms);
    }
    EXPECT_TRUE(served) << "after " << attempts << " attempts; server log:\n" << server->log();
    // Refusals and idle closes are in the server's log.
    std::string log;
    const auto log_end = std::chrono::steady_clock::now() + 30s;
    do {
        log = server->log();
        if (log.find("refused") != std::string::npos && log.find("idle") != std::string::npos)
            break;
        std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < log_end);
    EXPECT_NE(log.find("max_connections reached"), std::string::npos) << log;
    EXPECT_NE(log.find("idle for idle_timeout"), std::string::npos) << log;
    EXPECT_EQ(log.find("exception"), std::string::npos) << log;
    for (auto& s : flood)
        s->close();
    server.reset();
    std::filesystem::remove_all(dir);
}
