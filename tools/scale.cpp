// ucx-asio-scale: load for one echo server (samples/echo_server) from one
// process and one worker. tools/scale.sh runs several of these at once.
//
//   ucx-asio-scale --port P [--host H] [--connections N] [--seconds S]
//                  [--min-echoes K] [--size B] [--progress MODE] [--wait-signal]
//   ucx-asio-scale --port P --cycles N [--size B] [--server-pid PID]
//
// Connections: opens N connections at once, then every connection echoes
// messages of B bytes, one at a time, for S seconds; each echo is checked.
// With --wait-signal the echoes start on SIGUSR1 (so that several processes
// hold all their connections at the same moment). With --min-echoes the
// echoes go on past S seconds until every connection made K. Prints, one
// line each:
//
//   connected N failed F in MS ms, client fds +D rss +K KiB
//   echoes T per-connection min A median B max C jain J
//
// (Jain's fairness index: 1 when every connection made as many echoes.)
//
// Cycles: N times connect, echo once, close, one after the other; prints
// the descriptors and RSS of this process (and of --server-pid) after each
// tenth of the cycles:
//
//   cycle I fds D rss K KiB server fds D rss K KiB
//
// Exits 1 if any connect, echo or close failed or came back wrong.
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

struct settings {
    std::string host = "127.0.0.1";
    std::string port;
    std::size_t connections = 100;
    double seconds = 2;
    std::size_t size = 64;
    std::size_t cycles = 0;
    std::size_t min_echoes = 0;
    long server_pid = 0;
    bool wait_signal = false;
};

std::size_t open_fds(long pid) {
    std::size_t n = 0;
    const std::string dir = "/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/fd";
    if (DIR* d = opendir(dir.c_str())) {
        while (const dirent* e = readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        closedir(d);
    }
    return n;
}

std::size_t rss_kib(long pid) {
    std::ifstream in("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmRSS:", 0) == 0)
            return std::stoul(line.substr(6));
    return 0;
}

std::vector<char> pattern(std::size_t size, std::size_t seed) {
    std::vector<char> v(size);
    for (std::size_t i = 0; i < size; ++i)
        v[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
    return v;
}

// What the connections of one run share.
struct run_state {
    ucx::worker& worker;
    bool stop = false;
    std::size_t failures = 0, connected = 0, closed = 0;

    // Every connection closes once its last echo is back: none is left in
    // flight to arrive after its receive is gone.
    void close(ucx::endpoint& ep) {
        ep.async_close([this](ucx::error_code ec) {
            if (ec) {
                ++failures;
                std::fprintf(stderr, "close: %s\n", ec.message().c_str());
            }
            if (++closed == connected)
                worker.close();
        });
    }
};

// One connection's echo loop: send, receive the echo, check it, repeat
// until the run stops.
class connection : public std::enable_shared_from_this<connection> {
public:
    connection(ucx::endpoint ep, std::size_t id, std::size_t size, run_state& run)
        : ep_(std::move(ep)), out_(pattern(size, id)), in_(size + 1),
          tag_(static_cast<std::uint32_t>(id)), run_(run) {}

    void start() {
        busy_ = true;
        echo();
    }
    /// The run is over: closes now, or after the echo in flight.
    void stop() {
        if (!busy_)
            run_.close(ep_);
    }
    std::size_t echoes() const noexcept { return echoes_; }
    bool failed() const noexcept { return failed_; }

private:
    void echo() {
        if (run_.stop) {
            busy_ = false;
            return run_.close(ep_);
        }
        auto self = shared_from_this();
        ep_.async_recv(asio::buffer(in_), 0, 0,
                       [self](ucx::error_code ec, std::size_t n, ucx::tag_t tag) {
                           if (ec || n != self->out_.size() || tag != self->tag_ ||
                               !std::equal(self->out_.begin(), self->out_.end(), self->in_.begin()))
                               return self->fail(ec ? ec.message() : "wrong echo");
                           ++self->echoes_;
                           self->echo();
                       });
        ep_.async_send(asio::buffer(out_), tag_, [self](ucx::error_code ec, std::size_t) {
            if (ec)
                std::fprintf(stderr, "connection %u: send: %s\n", self->tag_, ec.message().c_str());
        });
    }

    void fail(const std::string& why) {
        failed_ = true;
        ++run_.failures;
        std::fprintf(stderr, "connection %u: %s%s\n", tag_, why.c_str(),
                     run_.stop ? " (while stopping)" : "");
        busy_ = false;
        if (run_.stop)
            run_.close(ep_);
    }

    ucx::endpoint ep_;
    std::vector<char> out_, in_;
    std::uint32_t tag_;
    run_state& run_;
    std::size_t echoes_ = 0;
    bool busy_ = false;
    bool failed_ = false;
};

int run_connections(asio::io_context& io, ucx::worker& w, const settings& s) {
    run_state run{w};
    std::size_t refused = 0;
    std::vector<std::shared_ptr<connection>> conns(s.connections);
    const std::size_t fds0 = open_fds(0), rss0 = rss_kib(0);
    asio::steady_timer window(io);
    asio::signal_set go(io, SIGUSR1);
    std::function<void(ucx::error_code)> on_window = [&](ucx::error_code) {
        const bool short_of_min = std::any_of(conns.begin(), conns.end(), [&](auto& c) {
            return c && !c->failed() && c->echoes() < s.min_echoes;
        });
        if (short_of_min) {
            window.expires_after(std::chrono::milliseconds(20));
            return window.async_wait(on_window);
        }
        std::vector<std::size_t> counts;
        for (auto& c : conns)
            if (c)
                counts.push_back(c->echoes());
        std::sort(counts.begin(), counts.end());
        double sum = 0, squares = 0;
        for (auto n : counts) {
            sum += static_cast<double>(n);
            squares += static_cast<double>(n) * static_cast<double>(n);
        }
        const double jain =
            squares > 0 ? sum * sum / (static_cast<double>(counts.size()) * squares) : 0;
        std::printf("echoes %.0f per-connection min %zu median %zu max %zu jain %.3f\n", sum,
                    counts.empty() ? 0 : counts.front(),
                    counts.empty() ? 0 : counts[counts.size() / 2],
                    counts.empty() ? 0 : counts.back(), jain);
        const ucx::worker_stats st = w.stats();
        std::printf("worker passes %zu wakeups %zu arm_busy %zu backoffs %zu safety_timer %zu\n",
                    st.passes, st.wakeups, st.arm_busy, st.backoffs, st.safety_timer_passes);
        std::fflush(stdout);
        run.stop = true;
        for (auto& c : conns)
            if (c)
                c->stop();
        if (run.connected == 0)
            w.close();
    };
    auto start_echoes = [&] {
        for (auto& c : conns)
            if (c)
                c->start();
        window.expires_after(std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(s.seconds)));
        window.async_wait(on_window);
    };
    const auto t0 = clock_type::now();
    std::size_t answered = 0;
    for (std::size_t i = 0; i < s.connections; ++i) {
        ucx::async_connect(w, s.host, s.port, [&, i](ucx::error_code ec, ucx::endpoint ep) {
            if (ec) {
                ++refused;
                std::fprintf(stderr, "connect %zu: %s\n", i, ec.message().c_str());
            } else {
                conns[i] = std::make_shared<connection>(std::move(ep), i + 1, s.size, run);
                ++run.connected;
            }
            if (++answered < s.connections)
                return;
            const double ms =
                std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            const long dfds = static_cast<long>(open_fds(0)) - static_cast<long>(fds0);
            const long drss = static_cast<long>(rss_kib(0)) - static_cast<long>(rss0);
            std::printf("connected %zu failed %zu in %.1f ms, client fds %+ld rss %+ld KiB\n",
                        run.connected, refused, ms, dfds, drss);
            std::fflush(stdout);
            if (s.wait_signal)
                go.async_wait([&](ucx::error_code ec, int) {
                    if (!ec)
                        start_echoes();
                });
            else
                start_echoes();
        });
    }
    io.run();
    return run.failures == 0 && refused == 0 ? 0 : 1;
}

int run_cycles(asio::io_context& io, ucx::worker& w, const settings& s) {
    const auto out = pattern(s.size, 1);
    std::vector<char> in(s.size + 1);
    const std::size_t report_every = std::max<std::size_t>(1, s.cycles / 10);
    const auto t0 = clock_type::now();
    for (std::size_t cycle = 1; cycle <= s.cycles; ++cycle) {
        std::optional<ucx::error_code> connected, sent, received, closed;
        std::optional<ucx::endpoint> ep;
        std::size_t n = 0;
        ucx::async_connect(w, s.host, s.port, [&](ucx::error_code ec, ucx::endpoint e) {
            connected = ec;
            if (!ec)
                ep.emplace(std::move(e));
        });
        io.restart();
        while (!connected && io.run_one()) {
        }
        if (!connected || *connected) {
            std::fprintf(stderr, "cycle %zu: connect: %s\n", cycle,
                         connected ? connected->message().c_str() : "no answer");
            return 1;
        }
        ep->async_recv(asio::buffer(in), 0, 0, [&](ucx::error_code ec, std::size_t len, auto) {
            received = ec;
            n = len;
        });
        ep->async_send(asio::buffer(out), 7, [&](ucx::error_code ec, std::size_t) { sent = ec; });
        while (!(sent && received) && io.run_one()) {
        }
        if (!sent || !received || *sent || *received || n != out.size() ||
            !std::equal(out.begin(), out.end(), in.begin())) {
            std::fprintf(stderr, "cycle %zu: echo failed\n", cycle);
            return 1;
        }
        ep->async_close([&](ucx::error_code ec) { closed = ec; });
        while (!closed && io.run_one()) {
        }
        if (!closed || *closed) {
            std::fprintf(stderr, "cycle %zu: close failed\n", cycle);
            return 1;
        }
        if (cycle % report_every == 0 || cycle == 1) {
            std::printf("cycle %zu fds %zu rss %zu KiB", cycle, open_fds(0), rss_kib(0));
            if (s.server_pid)
                std::printf(" server fds %zu rss %zu KiB", open_fds(s.server_pid),
                            rss_kib(s.server_pid));
            std::printf(" elapsed %.1f s\n",
                        std::chrono::duration<double>(clock_type::now() - t0).count());
            std::fflush(stdout);
        }
    }
    return 0;
}

std::size_t number(const std::string& v) {
    char* end = nullptr;
    const auto n = std::strtoull(v.c_str(), &end, 10);
    return end && *end == '\0' && !v.empty() ? static_cast<std::size_t>(n) : 0;
}

} // namespace

int main(int argc, char** argv) {
    settings s;
    ucx::worker_options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        if (arg == "--wait-signal") {
            s.wait_signal = true;
            continue;
        }
        bool ok = true;
        if (arg == "--host")
            s.host = value;
        else if (arg == "--port")
            s.port = value;
        else if (arg == "--connections")
            ok = (s.connections = number(value)) > 0;
        else if (arg == "--seconds")
            ok = (s.seconds = std::atof(value.c_str())) > 0;
        else if (arg == "--size")
            ok = (s.size = number(value)) > 0;
        else if (arg == "--min-echoes")
            ok = (s.min_echoes = number(value)) > 0;
        else if (arg == "--cycles")
            ok = (s.cycles = number(value)) > 0;
        else if (arg == "--server-pid")
            ok = (s.server_pid = static_cast<long>(number(value))) > 0;
        else if (arg == "--progress" && ucx::parse_progress_mode(value))
            options.mode = *ucx::parse_progress_mode(value);
        else
            ok = false;
        if (!ok) {
            std::fprintf(stderr,
                         "usage: %s --port P [--host H] [--connections N] [--seconds S] "
                         "[--min-echoes K] [--size B] [--progress MODE] [--wait-signal]\n"
                         "       %s --port P --cycles N [--size B] [--server-pid PID]\n",
                         argv[0], argv[0]);
            return 2;
        }
        ++i;
    }
    if (s.port.empty()) {
        std::fprintf(stderr, "ucx-asio-scale: --port is required\n");
        return 2;
    }
    try {
        asio::io_context io;
        ucx::context ctx;
        ucx::worker worker(ctx, io, options);
        return s.cycles ? run_cycles(io, worker, s) : run_connections(io, worker, s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ucx-asio-scale: %s\n", e.what());
        return 1;
    }
}
