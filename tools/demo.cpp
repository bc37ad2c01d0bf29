// ucx-asio-demo: a tag ping-pong between two workers on one io_context, in
// each progress mode; prints the round-trip latency of each.
//
//   ucx-asio-demo [--iters N] [--size BYTES]
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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
};

double percentile(std::vector<double> v, double p) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

} // namespace

int main(int argc, char** argv) {
    std::size_t iters = 20000, size = 8;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--iters") == 0)
            iters = std::strtoull(argv[i + 1], nullptr, 10);
        if (std::strcmp(argv[i], "--size") == 0)
            size = std::strtoull(argv[i + 1], nullptr, 10);
    }
    // Keep UCX's TCP transport on loopback unless told otherwise.
    setenv("UCX_NET_DEVICES", "lo", 0);

    ucx::context ctx;
    std::printf("ucx-asio demo: %zu tag ping-pongs of %zu bytes between two workers "
                "(UCX_TLS=%s)\n",
                iters, size, std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default");
    std::printf("%-8s %14s %14s %14s\n", "mode", "median RTT us", "p99 RTT us", "mean RTT us");
    int rc = 0;
    for (auto mode :
         {ucx::progress_mode::event, ucx::progress_mode::poll, ucx::progress_mode::hybrid}) {
        asio::io_context io;
        ucx::worker_options opts;
        opts.mode = mode;
        ucx::worker a(ctx, io, opts), b(ctx, io, opts);
        ucx::endpoint a_to_b(a, b.address()), b_to_a(b, a.address());
        ping_pong pp(a, b, a_to_b, b_to_a, size, iters);
        pp.start();
        io.run();
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
        std::printf("%-8s %14.2f %14.2f %14.2f\n", std::string(ucx::to_string(mode)).c_str(),
                    percentile(r, 0.5), percentile(r, 0.99), mean);
    }
    return rc;
}
