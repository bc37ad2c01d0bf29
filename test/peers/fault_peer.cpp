// One side of a connection for the fault tests: a server that accepts
// clients, or a client; they exchange a 64-byte message every 20 ms until the
// connection fails, and each prints when it learns of the failure.
//
//   fault_peer server --address A [--peer-timeout-ms T] [--hold-descriptors K]
//   fault_peer client --host H --port P [--peer-timeout-ms T]
//
// Output lines: "listening <port>", "connected", "failed <message>", and on
// the client "resumed <ms>" when an echo comes 200 ms or more after the one
// before (the exchange goes on after a pause).
//
// With --hold-descriptors K the server, once listening, opens descriptors
// until it has none left, closes K of them again, and prints "holding <n>";
// on SIGUSR1 it closes the rest and prints "released".
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace asio = boost::asio;

namespace {

struct session {
    ucx::endpoint ep;
    asio::steady_timer timer;
    std::array<char, 64> out{}, in{};
    bool client = false;
    std::chrono::steady_clock::time_point last_echo = std::chrono::steady_clock::now();

    session(ucx::endpoint e, bool is_client)
        : ep(std::move(e)), timer(ep.get_executor()), client(is_client) {}

    void start(const std::shared_ptr<session>& self) {
        std::printf("connected\n");
        std::fflush(stdout);
        ep.async_wait_error([self](ucx::error_code ec) {
            std::printf("failed %s\n", ec.message().c_str());
            std::fflush(stdout);
            self->timer.cancel();
        });
        receive(self);
        if (client)
            tick(self);
    }

    void receive(const std::shared_ptr<session>& self) {
        ep.async_recv(
            asio::buffer(in), 1, ~0u, [self](ucx::error_code ec, std::size_t n, std::uint32_t) {
                if (ec)
                    return;
                if (!self->client) {
                    self->ep.async_send(asio::buffer(self->in.data(), n), 1,
                                        [](ucx::error_code, std::size_t) {});
                } else {
                    const auto now = std::chrono::steady_clock::now();
                    const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(
                        now - self->last_echo);
                    self->last_echo = now;
                    if (gap >= std::chrono::milliseconds(200)) {
                        std::printf("resumed %lld\n", static_cast<long long>(gap.count()));
                        std::fflush(stdout);
                    }
                }
                self->receive(self);
            });
    }

    void tick(const std::shared_ptr<session>& self) {
        ep.async_send(asio::buffer(out), 1, [](ucx::error_code, std::size_t) {});
        timer.expires_after(std::chrono::milliseconds(20));
        timer.async_wait([self](ucx::error_code ec) {
            if (!ec && self->ep.is_open())
                self->tick(self);
        });
    }
};

int usage() {
    std::fprintf(stderr, "usage: fault_peer server --address A | client --host H --port P "
                         "[--peer-timeout-ms T] [--hold-descriptors K]\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        return usage();
    const std::string role = argv[1];
    std::string address = "127.0.0.1", host = "127.0.0.1", port;
    long peer_timeout_ms = 1000;
    int hold_descriptors = -1; // none held
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string arg = argv[i], value = argv[i + 1];
        if (arg == "--address")
            address = value;
        else if (arg == "--host")
            host = value;
        else if (arg == "--port")
            port = value;
        else if (arg == "--hold-descriptors")
            hold_descriptors = std::stoi(value);
        else if (arg == "--peer-timeout-ms")
            peer_timeout_ms = std::stol(value);
        else
            return usage();
    }
    asio::io_context io;
    ucx::context ctx;
    ucx::worker_options o;
    o.peer_timeout = std::chrono::milliseconds(peer_timeout_ms);
    o.handshake_timeout = std::chrono::seconds(10);
    ucx::worker w(ctx, io, o);
    std::optional<ucx::listener> listener;
    std::function<void()> accept;
    if (role == "server") {
        listener.emplace(w, asio::ip::tcp::endpoint(asio::ip::make_address(address), 0));
        std::printf("listening %u\n", static_cast<unsigned>(listener->local_endpoint().port()));
        std::fflush(stdout);
        accept = [&] {
            listener->async_accept([&](ucx::error_code ec, ucx::endpoint ep) {
                if (ec) {
                    std::printf("failed %s\n", ec.message().c_str());
                    std::fflush(stdout);
                    return;
                }
                auto s = std::make_shared<session>(std::move(ep), false);
                s->start(s);
                accept();
            });
        };
        accept();
    } else if (role == "client" && !port.empty()) {
        ucx::async_connect(w, host, port, [](ucx::error_code ec, ucx::endpoint ep) {
            if (ec) {
                std::printf("failed %s\n", ec.message().c_str());
                std::fflush(stdout);
                return;
            }
            auto s = std::make_shared<session>(std::move(ep), true);
            s->start(s);
        });
    } else {
        return usage();
    }
    std::vector<int> held;
    asio::signal_set release(io, SIGUSR1);
    if (hold_descriptors >= 0) {
        for (int fd; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
            held.push_back(fd);
        for (int i = 0; i < hold_descriptors && !held.empty(); ++i) {
            ::close(held.back());
            held.pop_back();
        }
        std::printf("holding %zu\n", held.size());
        std::fflush(stdout);
        release.async_wait([&](ucx::error_code ec, int) {
            if (ec)
                return;
            for (int fd : held)
                ::close(fd);
            held.clear();
            std::printf("released\n");
            std::fflush(stdout);
        });
    }
    io.run();
    return 0;
}
