// What the tests of the rendezvous stores share: a completion token that
// gives a std::future of the completion's arguments (errors included), bytes
// and text, running an io_context until a future is ready or a condition
// holds, waiting on an io_context, a fresh temporary directory, and finding a
// Python that can import torch.distributed.
#pragma once

#include <ucx/store.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace ucx_test {

/// A completion token: a std::future of the completion's arguments as a
/// tuple (errors included).
struct tuple_future_t {};
inline constexpr tuple_future_t tuple_future{};

inline ucx::store::value_type bytes(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return ucx::store::value_type(p, p + s.size());
}

inline std::string text(const ucx::store::value_type& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

/// Runs `ioc` until the future `f` is ready (at most `limit`); its value.
template <class F>
auto pump(boost::asio::io_context& ioc, F&& f,
          std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        if (std::chrono::steady_clock::now() > end)
            throw std::runtime_error("the operation did not complete");
        ioc.restart();
        ioc.run_one_for(std::chrono::milliseconds(10));
    }
    return f.get();
}

/// Runs `ioc` until `pred()` (at most `limit`); says whether it became true.
inline bool pump_until(boost::asio::io_context& ioc, const std::function<bool()>& pred,
                       std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end)
            return false;
        ioc.restart();
        ioc.run_one_for(std::chrono::milliseconds(10));
    }
    return true;
}

/// A new directory under the system's temporary directory, named `prefix`,
/// the process id, a counter and the clock.
inline std::filesystem::path temp_dir(const std::string& prefix) {
    static std::atomic<unsigned> counter{0};
    auto p = std::filesystem::temp_directory_path() /
             (prefix + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(p);
    return p;
}

/// A Python that imports torch.distributed, or empty. Debian's python3-torch
/// is for /usr/bin/python3, which comes first.
inline std::string python_with_torch() {
    std::vector<std::string> candidates{"/usr/bin/python3"};
    if (const char* path = std::getenv("PATH")) {
        std::stringstream ss(path);
        for (std::string dir; std::getline(ss, dir, ':');)
            if (!dir.empty())
                candidates.push_back(dir + "/python3");
    }
    for (const auto& py : candidates) {
        if (::access(py.c_str(), X_OK) != 0)
            continue;
        const std::string cmd = "'" + py + "' -c 'import torch.distributed' >/dev/null 2>&1";
        if (std::system(cmd.c_str()) == 0)
            return py;
    }
    return {};
}

} // namespace ucx_test

template <class... Args>
struct boost::asio::async_result<ucx_test::tuple_future_t, void(Args...)> {
    using result = std::tuple<std::decay_t<Args>...>;
    using return_type = std::future<result>;
    template <class Initiation, class... InitArgs>
    static return_type initiate(Initiation&& init, ucx_test::tuple_future_t, InitArgs&&... args) {
        auto p = std::make_shared<std::promise<result>>();
        auto f = p->get_future();
        std::move(init)([p](Args... a) { p->set_value(result(std::move(a)...)); },
                        std::forward<InitArgs>(args)...);
        return f;
    }
};

namespace ucx_test {

/// Runs `ioc` for `d` (at least).
inline void sleep_in(boost::asio::io_context& ioc, std::chrono::milliseconds d) {
    boost::asio::steady_timer t(ioc, d);
    pump(ioc, t.async_wait(tuple_future));
}

} // namespace ucx_test
