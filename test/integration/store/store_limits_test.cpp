// The stores against what a hostile or broken peer puts in their way: a
// file_store whose key files are a FIFO, a directory, a link to /dev/zero or a
// huge file, or whose lock another store holds. Every bound here is "eventually, within the test's generous limit";
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

/// Runs `ioc` until `pred()` (at most `limit`); says whether it became true.
bool pump_until(asio::io_context& ioc, const std::function<bool()>& pred,
                std::chrono::milliseconds limit = 60s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end)
            return false;
        ioc.restart();
        ioc.run_one_for(10ms);
    }
    return true;
}

void sleep_in(asio::io_context& ioc, std::chrono::milliseconds d) {
    asio::steady_timer t(ioc, d);
    pump(ioc, t.async_wait(tuple_future));
}

std::filesystem::path temp_dir() {
    std::random_device rd;
    auto p = std::filesystem::temp_directory_path() /
             ("ucx-store-limits-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(p);
    return p;
}

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
    std::filesystem::path dir_ = temp_dir();
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
            const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd >= 0) {
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
    // The store goes on with other keys, and a set replaces the FIFO.
    pump(ioc_, s.async_set("other", "ok", tuple_future));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("other", tuple_future)))), "ok");
    EXPECT_FALSE(std::get<0>(pump(ioc_, s.async_set("fifo", "now a file", tuple_future))));
    EXPECT_EQ(text(std::get<1>(pump(ioc_, s.async_get("fifo", tuple_future)))), "now a file");
    stop = true;
    watchdog.join();
    EXPECT_FALSE(reader_was_blocked) << "the store opened the FIFO and blocked on it";
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
