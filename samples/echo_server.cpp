// echo_server: accepts any number of clients over UCX and echoes every message
// back to its sender, with the same tag and length. Written with callbacks.
//
//   echo_server [--address 127.0.0.1] [--port 0] [--progress event|poll|hybrid]
//               [--max-size BYTES] [--threads N] [--backlog N] [--quiet]
//               [--metrics ADDRESS:PORT] [--latency-histograms]
//
// With --threads N, N threads each run an io_context with a worker and a
// listener on the same port (listener_options::reuse_port): the kernel
// spreads the clients across them, and each client is served on the thread
// whose listener took it.
//
// With --metrics, it serves its workers' metrics for Prometheus at
// http://ADDRESS:PORT/metrics (port 0: one the system picks), and prints
// "metrics on http://ADDRESS:PORT/metrics"; --latency-histograms adds the
// operations' latencies.
//
// Prints "listening on ADDRESS:PORT" once ready; SIGINT/SIGTERM stop it.
#include "sample_args.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <atomic>
#include <optional>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;

namespace {

// One connected client: receive, echo, repeat until the client goes away.
class session : public std::enable_shared_from_this<session> {
public:
    session(ucx::endpoint ep, std::size_t max_size, std::size_t id, bool quiet)
        // Left uninitialized: the pages take memory only once a message
        // fills them, so an idle client costs little.
        : ep_(std::move(ep)), buffer_(std::make_unique_for_overwrite<char[]>(max_size)),
          size_(max_size), id_(id), quiet_(quiet) {}

    void start() {
        if (!quiet_) {
            std::printf("client %zu connected from %s\n", id_,
                        ep_.remote_endpoint().address().to_string().c_str());
            std::fflush(stdout);
        }
        receive();
    }

private:
    void receive() {
        ep_.async_recv(
            asio::buffer(buffer_.get(), size_), 0, 0,
            [self = shared_from_this()](ucx::error_code ec, std::size_t n, ucx::tag_t tag) {
                if (ec)
                    return self->finish(ec);
                self->echo(n, tag);
            });
    }

    void echo(std::size_t n, ucx::tag_t tag) {
        ep_.async_send(asio::buffer(buffer_.get(), n), tag,
                       [self = shared_from_this()](ucx::error_code ec, std::size_t) {
                           if (ec)
                               return self->finish(ec);
                           ++self->echoed_;
                           self->receive();
                       });
    }

    void finish(const ucx::error_code& ec) {
        if (quiet_)
            return;
        if (ec == asio::error::eof)
            std::printf("client %zu closed after %zu messages\n", id_, echoed_);
        else
            std::printf("client %zu failed after %zu messages: %s\n", id_, echoed_,
                        ec.message().c_str());
        std::fflush(stdout);
    }

    ucx::endpoint ep_;
    std::unique_ptr<char[]> buffer_;
    std::size_t size_;
    std::size_t id_;
    std::size_t echoed_ = 0;
    bool quiet_;
};

class server {
public:
    server(ucx::worker& w, const asio::ip::tcp::endpoint& bind, ucx::listener_options options,
           std::size_t max_size, bool quiet)
        : listener_(w, bind, std::move(options)), max_size_(max_size), quiet_(quiet) {}

    void accept() {
        listener_.async_accept([this](ucx::error_code ec, ucx::endpoint ep) {
            if (ec == asio::error::operation_aborted || !listener_.is_open())
                return;
            if (!ec)
                std::make_shared<session>(std::move(ep), max_size_, ++clients, quiet_)->start();
            accept();
        });
    }

    ucx::listener& listener() { return listener_; }

    /// Clients accepted by every thread (numbers them).
    static inline std::atomic<std::size_t> clients{0};

private:
    ucx::listener listener_;
    std::size_t max_size_;
    bool quiet_;
};

// One serving thread: its io_context, worker and listener.
struct shard {
    asio::io_context io;
    std::optional<ucx::worker> worker;
    std::optional<server> srv;
};

} // namespace

int main(int argc, char** argv) {
    std::string address = "127.0.0.1";
    unsigned short port = 0;
    std::size_t max_size = (16u << 20) + 64;
    ucx::worker_options options;
    bool quiet = false;
    std::size_t threads = 1;
    ucx::listener_options lo;
    std::string metrics_at;
    for (int i = 1; i < argc; i += 2) {
        const std::string arg = argv[i], value = i + 1 < argc ? argv[i + 1] : "";
        if (arg == "--quiet") {
            quiet = true;
            --i;
        } else if (arg == "--latency-histograms") {
            options.latency_histograms = true;
            --i;
        } else if (arg == "--metrics" && value.rfind(':') != std::string::npos)
            metrics_at = value;
        else if (arg == "--address")
            address = value;
        else if (arg == "--port")
            port = static_cast<unsigned short>(sample::number(value));
        else if (arg == "--max-size")
            max_size = sample::number(value);
        else if (arg == "--threads" && sample::number(value) >= 1)
            threads = sample::number(value);
        else if (arg == "--backlog" && sample::number(value) >= 1)
            lo.backlog = sample::number(value);
        else if (arg == "--progress" && ucx::parse_progress_mode(value))
            options.mode = *ucx::parse_progress_mode(value);
        else {
            std::fprintf(stderr,
                         "usage: %s [--address A] [--port P] [--progress MODE] "
                         "[--max-size BYTES] [--threads N] [--backlog N] [--quiet] "
                         "[--metrics ADDRESS:PORT] [--latency-histograms]\n",
                         argv[0]);
            return 2;
        }
    }
    try {
        ucx::context ctx;
        std::vector<std::unique_ptr<shard>> shards;
        lo.reuse_port = threads > 1;
        for (std::size_t i = 0; i < threads; ++i) {
            auto& s = *shards.emplace_back(std::make_unique<shard>());
            s.worker.emplace(ctx, s.io, options);
            // The first listener picks the port (with --port 0), the others share it.
            s.srv.emplace(*s.worker, asio::ip::tcp::endpoint(asio::ip::make_address(address), port),
                          lo, max_size, quiet);
            port = s.srv->listener().local_endpoint().port();
            s.srv->accept();
        }
        // The metrics of every shard's worker, served from the first shard's thread.
        std::optional<ucx::metrics_exporter> exporter;
        if (!metrics_at.empty()) {
            const auto colon = metrics_at.rfind(':');
            exporter.emplace(shards[0]->io, asio::ip::tcp::endpoint(
                                                asio::ip::make_address(metrics_at.substr(0, colon)),
                                                static_cast<unsigned short>(
                                                    sample::number(metrics_at.substr(colon + 1)))));
            for (std::size_t i = 0; i < threads; ++i)
                exporter->add(*shards[i]->worker, "shard" + std::to_string(i));
            const auto at = exporter->local_endpoint();
            std::printf("metrics on http://%s:%u/metrics\n", at.address().to_string().c_str(),
                        at.port());
        }
        asio::signal_set signals(shards[0]->io, SIGINT, SIGTERM);
        signals.async_wait([&](ucx::error_code, int) {
            if (exporter)
                exporter->close();
            // Each shard closes on its own thread.
            for (auto& s : shards)
                asio::post(s->io, [&s = *s] {
                    s.srv->listener().close();
                    s.worker->close();
                });
        });
        const auto local = shards[0]->srv->listener().local_endpoint();
        std::printf("listening on %s:%u (progress %s, %zu thread%s)\n",
                    local.address().to_string().c_str(), local.port(),
                    std::string(ucx::to_string(options.mode)).c_str(), threads,
                    threads == 1 ? "" : "s");
        std::fflush(stdout);
        std::vector<std::thread> pool;
        for (std::size_t i = 1; i < threads; ++i)
            pool.emplace_back([&s = *shards[i]] { s.io.run(); });
        shards[0]->io.run();
        for (auto& t : pool)
            t.join();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "echo_server: %s\n", e.what());
        return 1;
    }
    return 0;
}
