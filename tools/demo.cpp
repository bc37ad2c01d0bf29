// ucx-asio-demo: a tag ping-pong between two workers on one io_context, in
// each progress mode; prints the round-trip latency of each. Meanwhile a
// steady_timer on the same io_context fires every 200 us and another thread
// posts a handler every 200 us: how late each runs shows whether the workers
// leave the io_context to its other handlers.
//
//   ucx-asio-demo [--iters N] [--size BYTES] [--spin-slice-us US] [--csv]
//
// --spin-slice-us sets worker_options::shared_spin_slice (the workers share
// the io_context, so they spin in turns).
//
// The `asio` row is the floor of the timer and post columns on this machine:
// a plain handler that posts itself (busy for 1 us each time) instead of the
// workers, no UCX. --csv prints mode,median,p99,mean,timer_late,post_delay.
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

// One side sends a message, the other echoes it back; repeat.
class ping_pong {
public:
    ping_pong(ucx::worker& a, ucx::worker& b, ucx::endpoint& a_to_b, ucx::endpoint& b_to_a,
              std::size_t size, std::size_t iters)
        : a_(a), b_(b), a_to_b_(a_to_b), b_to_a_(b_to_a), ping_(size, 'p'), pong_(size),
          echo_(size), iters_(iters) {
        rtt_us_.reserve(iters);
    }

    void start() {
        post_echo();
        next_ping();
    }

    std::vector<double>& rtts() { return rtt_us_; }
    bool failed() const { return failed_; }
    bool finished() const { return finished_.load(); }

private:
    void post_echo() {
        ucx::async_tag_recv(b_, asio::buffer(echo_), 1, ucx::tag_mask_full,
                            [this](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                if (ec)
                                    return fail("echo receive", ec);
                                ucx::async_tag_send(b_to_a_, asio::buffer(echo_.data(), n), 2,
                                                    [this](ucx::error_code ec, std::size_t) {
                                                        if (ec)
                                                            fail("echo send", ec);
                                                    });
                                if (rtt_us_.size() + 1 < iters_)
                                    post_echo();
                            });
    }

    void next_ping() {
        t0_ = clock_type::now();
        ucx::async_tag_recv(
            a_, asio::buffer(pong_), 2, ucx::tag_mask_full,
            [this](ucx::error_code ec, std::size_t, ucx::tag_t) {
                if (ec)
                    return fail("pong receive", ec);
                rtt_us_.push_back(
                    std::chrono::duration<double, std::micro>(clock_type::now() - t0_).count());
                if (rtt_us_.size() < iters_)
                    next_ping();
                else
                    done();
            });
        ucx::async_tag_send(a_to_b_, asio::buffer(ping_), 1,
                            [this](ucx::error_code ec, std::size_t) {
                                if (ec)
                                    fail("ping send", ec);
                            });
    }

    void fail(const char* what, const ucx::error_code& ec) {
        std::fprintf(stderr, "demo: %s failed: %s\n", what, ec.message().c_str());
        failed_ = true;
        done();
    }

    // Open workers keep the io_context running (peers may need them): close
    // them to let run() return.
    void done() {
        finished_ = true;
        a_to_b_.close();
        b_to_a_.close();
        a_.close();
        b_.close();
    }

    ucx::worker& a_;
    ucx::worker& b_;
    ucx::endpoint& a_to_b_;
    ucx::endpoint& b_to_a_;
    std::vector<char> ping_, pong_, echo_;
    std::size_t iters_;
    std::vector<double> rtt_us_;
    clock_type::time_point t0_;
    bool failed_ = false;
    std::atomic<bool> finished_{false};
};

constexpr auto tick = std::chrono::microseconds(200);

// A timer on the io_context: records how late each expiry runs.
class late_timer {
public:
    late_timer(asio::io_context& io, std::function<bool()> finished)
        : timer_(io), finished_(std::move(finished)) {}

    void start() {
        timer_.expires_after(tick);
        wait();
    }
    std::vector<double>& lateness() { return late_us_; }

private:
    void wait() {
        timer_.async_wait([this](const boost::system::error_code& ec) {
            if (ec || finished_())
                return;
            late_us_.push_back(
                std::chrono::duration<double, std::micro>(clock_type::now() - timer_.expiry())
                    .count());
            timer_.expires_at(timer_.expiry() + tick);
            if (timer_.expiry() < clock_type::now())
                timer_.expires_after(tick);
            wait();
        });
    }

    asio::steady_timer timer_;
    std::function<bool()> finished_;
    std::vector<double> late_us_;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// Runs `io` with the timer and the poster thread beside whatever was started
// on it, until `finished()`; returns the timer's lateness and the posted
// handlers' delay (medians, us).
std::pair<double, double> run_with_probes(asio::io_context& io,
                                          const std::function<bool()>& finished) {
    late_timer timer(io, finished);
    std::vector<double> post_delay_us;
    std::atomic<bool> started{false};
    std::thread poster([&] {
        while (!started.load())
            std::this_thread::yield();
        while (!finished()) {
            const auto t = clock_type::now();
            asio::post(io, [t, &post_delay_us] {
                post_delay_us.push_back(
                    std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
            });
            std::this_thread::sleep_for(tick);
        }
    });
    timer.start();
    asio::post(io, [&] { started = true; });
    io.run();
    poster.join();
    io.restart();
    io.run(); // handlers posted after the rest ended
    return {percentile(timer.lateness(), 0.5), percentile(post_delay_us, 0.5)};
}

} // namespace

int main(int argc, char** argv) {
    std::size_t iters = 20000, size = 8, slice_us = 0;
    bool csv = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--csv") {
            csv = true;
        } else if ((arg == "--iters" || arg == "--size" || arg == "--spin-slice-us") &&
                   i + 1 < argc) {
            const std::size_t v = std::strtoull(argv[++i], nullptr, 10);
            (arg == "--iters" ? iters : arg == "--size" ? size : slice_us) = v;
        } else {
            std::fprintf(stderr, "usage: ucx-asio-demo [--iters N] [--size BYTES] "
                                 "[--spin-slice-us US] [--csv]\n");
            return 2;
        }
    }
    // Keep UCX's TCP transport on loopback unless told otherwise.
    setenv("UCX_NET_DEVICES", "lo", 0);

    ucx::context ctx;
    if (!csv) {
        std::printf("ucx-asio demo: %zu tag ping-pongs of %zu bytes between two workers "
                    "(UCX_TLS=%s)\n",
                    iters, size, std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default");
        std::printf("%-8s %14s %14s %14s %16s %16s\n", "mode", "median RTT us", "p99 RTT us",
                    "mean RTT us", "timer late us", "post delay us");
    }
    const auto print = [csv](const char* mode, double med, double p99, double mean, double late,
                             double post) {
        std::printf(csv ? "%s,%.3f,%.3f,%.3f,%.3f,%.3f\n"
                        : "%-8s %14.2f %14.2f %14.2f %16.2f %16.2f\n",
                    mode, med, p99, mean, late, post);
    };
    int rc = 0;
    for (auto mode :
         {ucx::progress_mode::event, ucx::progress_mode::poll, ucx::progress_mode::hybrid}) {
        asio::io_context io;
        ucx::worker_options opts;
        opts.mode = mode;
        if (slice_us != 0)
            opts.shared_spin_slice = std::chrono::microseconds(slice_us);
        ucx::worker a(ctx, io, opts), b(ctx, io, opts);
        ucx::endpoint a_to_b(a, b.address()), b_to_a(b, a.address());
        ping_pong pp(a, b, a_to_b, b_to_a, size, iters);
        pp.start();
        const auto [late, post] = run_with_probes(io, [&] { return pp.finished(); });
        auto& r = pp.rtts();
        if (pp.failed() || r.size() != iters) {
            std::fprintf(stderr, "demo: %s mode finished %zu of %zu round trips\n",
                         std::string(ucx::to_string(mode)).c_str(), r.size(), iters);
            rc = 1;
            continue;
        }
        double mean = 0;
        for (double x : r)
            mean += x;
        mean /= static_cast<double>(r.size());
        print(std::string(ucx::to_string(mode)).c_str(), percentile(r, 0.5), percentile(r, 0.99),
              mean, late, post);
    }
    // The floor: the same probes beside a handler that keeps the thread busy
    // (1 us of work, then it posts itself), for 100 ms.
    {
        asio::io_context io;
        const auto end = clock_type::now() + std::chrono::milliseconds(100);
        std::function<void()> busy = [&] {
            const auto t = clock_type::now();
            while (clock_type::now() - t < std::chrono::microseconds(1)) {
            }
            if (t < end)
                asio::post(io, busy);
        };
        asio::post(io, busy);
        const auto [late, post] = run_with_probes(io, [&] { return clock_type::now() >= end; });
        print("asio", 0, 0, 0, late, post);
    }
    return rc;
}
