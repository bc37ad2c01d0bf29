// echo_client: connects to echo_server, sends N messages of a given size,
// checks every echo and prints round-trip times and throughput. Written with
// C++20 coroutines.
//
//   echo_client --port P [--host 127.0.0.1] [--count 1000] [--size 8]
//               [--progress event|poll|hybrid] [--rate N] [--no-close] [--hold-ms MS]
//
// --rate paces the messages: message k starts k / N seconds after the first
// (or as soon as the last echo is back, when that is later); 0, the default,
// sends each as soon as the last echo is back. With --rate, the summary also
// gives the processor time this process used per echo.
// --no-close leaves without the goodbye (the server then sees a failure, not eof).
// --hold-ms keeps the connection open and idle that long before closing.
#include "sample_args.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

struct settings {
    std::string host = "127.0.0.1";
    std::string port;
    std::size_t count = 1000;
    std::size_t size = 8;
    std::size_t rate = 0;
    bool report_cpu = false;
    bool close = true;
    std::chrono::milliseconds hold{0};
};

// The processor time (user and system) this process used so far.
double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Content that differs per message, so a stale or misrouted echo is caught.
void fill(std::vector<char>& v, std::size_t seq) {
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<char>((seq * 131 + i * 7) & 0xff);
}

asio::awaitable<int> run(ucx::worker& worker, const settings& s) {
    auto ep = co_await ucx::async_connect(worker, s.host, s.port, asio::use_awaitable);
    std::vector<char> out(s.size), in(s.size + 1);
    std::vector<double> rtt_us;
    // Room for a million round trips up front (a count may be far larger: an
    // unbounded run until killed).
    rtt_us.reserve(std::min<std::size_t>(s.count, std::size_t{1} << 20));
    asio::steady_timer pace(co_await asio::this_coro::executor);
    const double cpu_start = cpu_seconds();
    const auto start = clock_type::now();
    for (std::size_t seq = 0; seq < s.count; ++seq) {
        if (s.rate > 0) {
            pace.expires_at(start + std::chrono::duration_cast<clock_type::duration>(
                                        std::chrono::duration<double>(double(seq) / s.rate)));
            co_await pace.async_wait(asio::use_awaitable);
        }
        fill(out, seq);
        const auto t0 = clock_type::now();
        co_await ep.async_send(asio::buffer(out), seq & ucx::endpoint_max_tag, asio::use_awaitable);
        auto [n, tag] = co_await ep.async_recv(asio::buffer(in), 0, 0, asio::use_awaitable);
        rtt_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
        if (n != s.size || tag != (seq & ucx::endpoint_max_tag) ||
            !std::equal(out.begin(), out.end(), in.begin())) {
            std::fprintf(stderr, "echo_client: message %zu came back wrong\n", seq);
            co_return 1;
        }
    }
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    const double cpu = cpu_seconds() - cpu_start;
    if (s.hold.count() > 0) {
        std::printf("holding\n");
        std::fflush(stdout);
        asio::steady_timer timer(co_await asio::this_coro::executor, s.hold);
        co_await timer.async_wait(asio::use_awaitable);
    }
    if (s.close)
        co_await ep.async_close(asio::use_awaitable);
    std::sort(rtt_us.begin(), rtt_us.end());
    auto pct = [&](double p) {
        return rtt_us.empty() ? 0.0
                              : rtt_us[std::min(rtt_us.size() - 1,
                                                static_cast<std::size_t>(p * rtt_us.size()))];
    };
    std::printf("%zu echoes of %zu bytes: median RTT %.2f us, p99 %.2f us, %.1f MiB/s each way, "
                "%.0f msg/s\n",
                s.count, s.size, pct(0.5), pct(0.99),
                static_cast<double>(s.count * s.size) / seconds / (1 << 20),
                static_cast<double>(s.count) / seconds);
    if (s.report_cpu)
        std::printf("client processor time %.2f us per echo, %.1f %% of a core\n",
                    s.count ? cpu * 1e6 / static_cast<double>(s.count) : 0.0,
                    100.0 * cpu / seconds);
    co_return 0;
}

} // namespace

int main(int argc, char** argv) {
    settings s;
    ucx::worker_options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        if (arg == "--no-close") {
            s.close = false;
            continue;
        }
        if (arg == "--host")
            s.host = value;
        else if (arg == "--port")
            s.port = value;
        else if (arg == "--count")
            s.count = sample::number(value);
        else if (arg == "--size")
            s.size = sample::number(value);
        else if (arg == "--rate") {
            s.rate = sample::number(value);
            s.report_cpu = true;
        } else if (arg == "--hold-ms")
            s.hold = std::chrono::milliseconds(sample::number(value));
        else if (arg == "--progress" && ucx::parse_progress_mode(value))
            options.mode = *ucx::parse_progress_mode(value);
        else {
            std::fprintf(stderr,
                         "usage: %s --port P [--host H] [--count N] [--size BYTES] "
                         "[--progress MODE] [--rate N] [--no-close] [--hold-ms MS]\n",
                         argv[0]);
            return 2;
        }
        ++i;
    }
    if (s.port.empty()) {
        std::fprintf(stderr, "echo_client: --port is required\n");
        return 2;
    }
    int rc = 1;
    try {
        asio::io_context io;
        ucx::context ctx;
        ucx::worker worker(ctx, io, options);
        asio::co_spawn(io, run(worker, s), [&](std::exception_ptr e, int result) {
            rc = result;
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& ex) {
                    std::fprintf(stderr, "echo_client: %s\n", ex.what());
                }
                rc = 1;
            }
            worker.close();
        });
        io.run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "echo_client: %s\n", e.what());
        return 1;
    }
    return rc;
}
