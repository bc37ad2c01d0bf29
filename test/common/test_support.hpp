// Shared helpers of the test suite: transports, contexts, completion styles.
#pragma once

#include <ucx/asio.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace ucx_test {

namespace asio = boost::asio;

/// The transports integration tests run over.
enum class transport { tcp, shared_memory };

inline std::string to_string(transport t) {
    return t == transport::tcp ? "tcp" : "shm";
}

/// Context options that restrict UCX to one transport (plus `self`), with
/// keepalive off so no UCX timer can hide a lost wake-up. Host:port
/// connections need UCX's TCP connection manager: with `sockaddr`, shared
/// memory keeps tcp enabled for it, and UCX still moves the data over shared
/// memory (checked by the tests through the endpoint's lanes).
inline ucx::context_options options_for(transport t, bool sockaddr = false) {
    ucx::context_options o;
    if (t == transport::tcp) {
        o.transports.shared_memory = false;
        o.transports.cma = false;
    } else if (!sockaddr) {
        o.transports.tcp = false;
    }
    o.config["KEEPALIVE_INTERVAL"] = "inf";
    return o;
}

/// Worker options for a mode, with the safety timer effectively off (one hour).
inline ucx::worker_options strict_worker_options(ucx::progress_mode m) {
    ucx::worker_options o;
    o.mode = m;
    o.safety_interval = std::chrono::hours(1);
    return o;
}

/// The transports an endpoint's lanes use, as UCX prints them.
inline std::string endpoint_lanes(ucp_ep_h ep) {
    char* buf = nullptr;
    std::size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    if (!f)
        return {};
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    std::string s(buf, len);
    std::free(buf);
    return s;
}

/// Runs `io` until `done()` or the deadline; returns `done()`.
template <class Pred>
bool run_until(asio::io_context& io, Pred done,
               std::chrono::steady_clock::duration limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
        if (io.stopped())
            io.restart();
        io.run_one_for(std::chrono::milliseconds(10));
    }
    return done();
}

/// Whether every one of `v` has a value (every handler of a batch ran).
template <class T>
bool all_set(const std::vector<std::optional<T>>& v) {
    return std::all_of(v.begin(), v.end(), [](const auto& x) { return x.has_value(); });
}

/// Worker options of group tests: strict, event mode, a peer that stops
/// answering noticed within a second.
inline ucx::worker_options group_worker_options() {
    ucx::worker_options o = strict_worker_options(ucx::progress_mode::event);
    o.peer_timeout = std::chrono::milliseconds(1000);
    return o;
}

/// Joins `workers` as ranks 0 to n - 1 of the group `name` through `store`
/// (`lazy`: connections on first use); fills `groups`. Returns whether every
/// rank joined with its rank.
inline bool join_groups(asio::io_context& io, ucx::store& store,
                        const std::vector<std::unique_ptr<ucx::worker>>& workers,
                        std::vector<ucx::group>& groups, const ucx::group_options& options) {
    const int n = static_cast<int>(workers.size());
    std::vector<std::optional<ucx::error_code>> done(n);
    groups.clear();
    groups.resize(n);
    for (int i = 0; i < n; ++i) {
        ucx::group_options o = options;
        o.rank = i;
        o.size = n;
        ucx::async_join(*workers[i], store, o, [&, i](ucx::error_code ec, ucx::group g) {
            done[i] = ec;
            groups[i] = std::move(g);
        });
    }
    bool joined = run_until(io, [&] { return all_set(done); });
    for (int i = 0; i < n; ++i) {
        EXPECT_TRUE(done[i] && !*done[i])
            << "rank " << i << ": " << (done[i] ? done[i]->message() : "no answer");
        joined = joined && done[i] && !*done[i] && groups[i].rank() == i && groups[i].size() == n;
    }
    return joined;
}

inline bool join_groups(asio::io_context& io, ucx::store& store,
                        const std::vector<std::unique_ptr<ucx::worker>>& workers,
                        std::vector<ucx::group>& groups, const std::string& name,
                        bool lazy = false) {
    ucx::group_options o;
    o.name = name;
    o.lazy_connections = lazy;
    return join_groups(io, store, workers, groups, o);
}

/// `n` workers on `io` (options `wo`) joined as by `join_groups`.
inline bool join_ranks(asio::io_context& io, ucx::context& ctx, ucx::store& store, int n,
                       std::vector<std::unique_ptr<ucx::worker>>& workers,
                       std::vector<ucx::group>& groups, const std::string& name,
                       const ucx::worker_options& wo) {
    for (int i = 0; i < n; ++i)
        workers.push_back(std::make_unique<ucx::worker>(ctx, io, wo));
    return join_groups(io, store, workers, groups, name);
}

/// `n` ranks of one process: an io_context, a context (transport `t`), a
/// memory_store, a worker each (options `wo`), joined as by `join_ranks`.
struct local_ranks {
    local_ranks(int n, const std::string& name, const ucx::worker_options& wo,
                transport t = transport::shared_memory)
        : ctx(options_for(t)), store(io.get_executor()) {
        joined = join_ranks(io, ctx, store, n, workers, groups, name, wo);
    }
    asio::io_context io;
    ucx::context ctx;
    ucx::memory_store store;
    std::vector<std::unique_ptr<ucx::worker>> workers;
    std::vector<ucx::group> groups;
    bool joined = false;
};

/// Runs `io` while a timer fires `ticks` times, every millisecond: the
/// io_context keeps running other handlers meanwhile (nothing blocks it).
/// Returns whether every tick came.
inline bool run_ticks(asio::io_context& io, int ticks = 20) {
    int seen = 0;
    asio::steady_timer t(io);
    std::function<void()> tick = [&] {
        t.expires_after(std::chrono::milliseconds(1));
        t.async_wait([&](const boost::system::error_code&) {
            if (++seen < ticks)
                tick();
        });
    };
    tick();
    return run_until(io, [&] { return seen >= ticks; });
}

/// A port free on 127.0.0.1 below the kernel's range of ports for outgoing
/// connections (`/proc/sys/net/ipv4/ip_local_port_range`), for a server a
/// child process starts later: no other socket is given it on its own
/// between this probe and that bind, and a client connecting to it before
/// the server listens cannot be given it as its own port (a socket
/// connected to itself). Random ports from 10,000 up; the kernel's choice
/// if none of 200 is free.
inline unsigned short free_port_below_ephemeral() {
    unsigned first_ephemeral = 32768;
    if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
        if (std::fscanf(f, "%u", &first_ephemeral) != 1)
            first_ephemeral = 32768;
        std::fclose(f);
    }
    const unsigned top = std::max(first_ephemeral, 10001u);
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<unsigned> pick(10000, top - 1);
    asio::io_context io;
    for (int i = 0; i < 200; ++i) {
        const auto port = static_cast<unsigned short>(pick(rng));
        asio::ip::tcp::acceptor probe(io);
        ucx::error_code ec;
        probe.open(asio::ip::tcp::v4(), ec);
        if (!ec)
            probe.bind({asio::ip::make_address("127.0.0.1"), port}, ec);
        if (!ec)
            return port;
    }
    asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
    return probe.local_endpoint().port();
}

/// A deterministic pattern for message contents.
inline std::vector<char> pattern(std::size_t size, std::uint32_t seed) {
    std::vector<char> v(size);
    std::mt19937 gen(seed);
    for (auto& c : v)
        c = static_cast<char>(gen());
    return v;
}

/// Connects `client` to `server` (a listener on 127.0.0.1) and accepts the
/// connection, running `io`: {client's endpoint, server's endpoint}, both
/// checked (empty endpoints after a failure, which is reported).
inline std::pair<ucx::endpoint, ucx::endpoint>
connect_pair(asio::io_context& io, ucx::listener& server, ucx::worker& client) {
    std::optional<std::pair<ucx::error_code, ucx::endpoint>> accepted, connected;
    server.async_accept(
        [&](ucx::error_code ec, ucx::endpoint ep) { accepted.emplace(ec, std::move(ep)); });
    ucx::async_connect(
        client, "127.0.0.1", std::to_string(server.local_endpoint().port()),
        [&](ucx::error_code ec, ucx::endpoint ep) { connected.emplace(ec, std::move(ep)); });
    EXPECT_TRUE(run_until(io, [&] { return accepted && connected; }));
    if (!accepted || !connected)
        return {};
    EXPECT_FALSE(accepted->first) << accepted->first.message();
    EXPECT_FALSE(connected->first) << connected->first.message();
    return {std::move(connected->second), std::move(accepted->second)};
}

/// Runs `io` until the send (`s`) and the receive (`r`, `n` bytes into `in`)
/// of `data` completed, then checks both and that `data` arrived whole.
inline void expect_delivered(asio::io_context& io, const std::optional<ucx::error_code>& s,
                             const std::optional<ucx::error_code>& r, const std::size_t& n,
                             std::vector<char>& in, const std::vector<char>& data) {
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    ASSERT_FALSE(*s) << s->message();
    ASSERT_FALSE(*r) << r->message();
    ASSERT_EQ(n, data.size());
    in.resize(n);
    EXPECT_EQ(in, data);
}

/// Sends `size` bytes (the pattern of `seed`) from `from` to `to` with
/// per-endpoint messaging, running `io`, and checks what arrived.
inline void exchange(asio::io_context& io, ucx::endpoint& from, ucx::endpoint& to, std::size_t size,
                     std::uint32_t seed) {
    const auto data = pattern(size, seed);
    std::vector<char> in(size + 8);
    std::optional<ucx::error_code> s, r;
    std::size_t n = 0;
    to.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t len) {
        r = ec;
        n = len;
    });
    from.async_send(asio::buffer(data), [&](ucx::error_code ec, std::size_t) { s = ec; });
    expect_delivered(io, s, r, n, in, data);
}

/// Every completion token style a test body runs with.
enum class style { callback, future, awaitable, deferred };

inline std::string to_string(style s) {
    switch (s) {
    case style::callback:
        return "callback";
    case style::future:
        return "future";
    case style::awaitable:
        return "awaitable";
    case style::deferred:
        return "deferred";
    }
    return "?";
}

inline const std::vector<style>& all_styles() {
    static const std::vector<style> v{style::callback, style::future, style::awaitable,
                                      style::deferred};
    return v;
}

/// The outcome of one asynchronous operation started in some style; `poll()`
/// says whether it has completed, `get()` returns (error_code, args...).
template <class... Args>
class pending {
public:
    bool ready() {
        if (state_->value)
            return true;
        if (future_ && future_->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            try {
                state_->value =
                    std::tuple_cat(std::tuple<ucx::error_code>(), to_tuple(future_->get()));
            } catch (const boost::system::system_error& e) {
                std::tuple<ucx::error_code, Args...> t{};
                std::get<0>(t) = e.code();
                state_->value = std::move(t);
            }
            future_.reset();
        }
        return state_->value.has_value();
    }
    std::tuple<ucx::error_code, Args...>& get() { return *state_->value; }

    struct state {
        std::optional<std::tuple<ucx::error_code, Args...>> value;
    };
    std::shared_ptr<state> state_ = std::make_shared<state>();
    using future_value =
        std::conditional_t<sizeof...(Args) == 1, std::tuple_element_t<0, std::tuple<Args..., int>>,
                           std::tuple<Args...>>;
    std::optional<std::future<future_value>> future_;

private:
    template <class T>
    static std::tuple<Args...> to_tuple(T&& v) {
        if constexpr (sizeof...(Args) == 1)
            return std::tuple<Args...>(std::forward<T>(v));
        else
            return std::forward<T>(v);
    }
};

/// Starts the operation `init(token)` in style `s`. `init` is a generic
/// lambda that passes the token to a library initiating function whose
/// completion signature is `void(error_code, Args...)`.
template <class... Args, class Init>
pending<Args...> start(style s, asio::io_context& io, Init init) {
    pending<Args...> p;
    auto st = p.state_;
    switch (s) {
    case style::callback:
        init([st](ucx::error_code ec, Args... args) { st->value.emplace(ec, std::move(args)...); });
        break;
    case style::future:
        p.future_.emplace(init(asio::use_future));
        break;
    case style::awaitable:
        asio::co_spawn(
            io,
            [st, init]() -> asio::awaitable<void> {
                auto r = co_await init(asio::as_tuple(asio::use_awaitable));
                st->value = std::move(r);
            },
            asio::detached);
        break;
    case style::deferred: {
        auto op = init(asio::deferred);
        std::move(op)(
            [st](ucx::error_code ec, Args... args) { st->value.emplace(ec, std::move(args)...); });
        break;
    }
    }
    return p;
}

} // namespace ucx_test
