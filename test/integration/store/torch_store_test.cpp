// Interoperation with torch.distributed's TCPStore (Python): this library's
// tcp_store as a client of a Python store server, and Python clients of this
// library's tcp_store_server. Skipped when Python cannot import torch.
#include <ucx/tcp_store.hpp>

#include "child_process.hpp"
#include "store_support.hpp"

#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <sstream>
#include <string>
#include <thread>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;
using value_type = ucx::store::value_type;

using namespace ucx_test;

namespace {

/// The C++ side of the exchange that torch_store_peer.py drives.
void exchange(asio::io_context& ioc, ucx::tcp_store& s, ucx_test::child_process& py) {
    ASSERT_EQ(py.read_line(), "ready");
    // What Python set.
    auto [ec, v] = pump(ioc, s.async_get("py_key", tuple_future));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(text(v), "py_value");
    EXPECT_EQ(std::get<1>(pump(ioc, s.async_get("py_binary", tuple_future))),
              (value_type{std::byte{0}, std::byte{255}, std::byte{10}}));
    EXPECT_EQ(std::get<1>(pump(ioc, s.async_add("py_counter", 2, tuple_future))), 7);
    // What Python checks.
    EXPECT_FALSE(std::get<0>(pump(ioc, s.async_set("cpp_key", "cpp_value", tuple_future))));
    EXPECT_EQ(std::get<1>(pump(ioc, s.async_add("cpp_counter", -3, tuple_future))), -3);
    EXPECT_EQ(
        text(std::get<1>(pump(ioc, s.async_compare_set("cas", {}, bytes("first"), tuple_future)))),
        "first");
    pump(ioc, s.async_set("cpp_delete_me", "x", tuple_future));
    EXPECT_TRUE(std::get<1>(pump(ioc, s.async_check({"py_key", "cpp_key"}, tuple_future))));
    EXPECT_FALSE(std::get<1>(pump(ioc, s.async_check({"py_key", "absent"}, tuple_future))));
    EXPECT_FALSE(std::get<0>(pump(ioc, s.async_wait({"py_key", "py_counter"}, tuple_future))));
    EXPECT_TRUE(std::get<1>(pump(ioc, s.async_erase("py_binary", tuple_future))));
    EXPECT_FALSE(std::get<1>(pump(ioc, s.async_erase("py_binary", tuple_future))));
    py.write_line("go");

    const auto line = py.read_line();
    ASSERT_EQ(line.rfind("num_keys ", 0), 0u) << line;
    const auto n = std::get<1>(pump(ioc, s.async_num_keys(tuple_future)));
    EXPECT_EQ(std::to_string(n), line.substr(9));
    EXPECT_EQ(text(std::get<1>(pump(ioc, s.async_get("cas", tuple_future)))), "second");
    EXPECT_FALSE(std::get<1>(pump(ioc, s.async_check({"cpp_delete_me"}, tuple_future))));

    // Waits on both sides for keys the other sets later.
    auto late2 = s.async_get("late2", tuple_future);
    pump(ioc, s.async_set("late", "from c++", tuple_future));
    EXPECT_EQ(py.read_line(), "late from c++");
    EXPECT_EQ(text(std::get<1>(pump(ioc, std::move(late2)))), "from python");
    py.write_line("bye");
    EXPECT_EQ(py.read_line(), "ok");
}

class TorchStore : public ::testing::Test {
protected:
    void SetUp() override {
        python_ = python_with_torch();
        if (python_.empty())
            GTEST_SKIP() << "no python3 that can import torch.distributed (install python3-torch)";
    }
    std::string python_;
};

} // namespace

TEST_F(TorchStore, ClientOfPythonServer) {
    ucx_test::child_process py({python_, UCX_ASIO_TORCH_PEER, "master"});
    const auto line = py.read_line();
    ASSERT_EQ(line.rfind("port ", 0), 0u) << line;
    const auto port = static_cast<std::uint16_t>(std::stoi(line.substr(5)));

    asio::io_context ioc;
    // The Python server's constructor waits for world_size 2: itself and us.
    ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", port, {.join_as_worker = true});
    s.set_timeout(30s);
    auto [ec] = pump(ioc, s.async_connect(tuple_future));
    ASSERT_FALSE(ec) << ec.message();
    exchange(ioc, s, py);
    EXPECT_EQ(py.wait(), 0);
}

TEST_F(TorchStore, PythonClientOfServer) {
    asio::io_context server_ioc;
    ucx::tcp_store_server server(server_ioc.get_executor(),
                                 tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const auto port = server.local_endpoint().port();
    auto work = asio::make_work_guard(server_ioc);
    std::thread server_thread([&] { server_ioc.run(); });

    {
        ucx_test::child_process py({python_, UCX_ASIO_TORCH_PEER, "client", std::to_string(port)});
        asio::io_context ioc;
        ucx::tcp_store s(ioc.get_executor(), "127.0.0.1", port);
        s.set_timeout(30s);
        exchange(ioc, s, py);
        EXPECT_EQ(py.wait(), 0);
        // The Python client joined as a worker of world_size 2.
        ucx::tcp_store raw(ioc.get_executor(), "127.0.0.1", port, {.key_prefix = ""});
        EXPECT_EQ(text(std::get<1>(pump(ioc, raw.async_get("init/", tuple_future)))), "1");
    }

    asio::post(server_ioc, [&] { server.close(); });
    work.reset();
    server_thread.join();
}
