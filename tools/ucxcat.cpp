// ucxcat: netcat over UCX streams.
//
//   ucxcat [options] -l PORT        accept one connection on PORT
//   ucxcat [options] HOST PORT      connect to HOST:PORT
//
// Copies stdin to the peer and the peer to stdout, both at once. When stdin
// ends, the sending direction is shut down (the peer reads end of file after
// everything); the program exits 0 once both directions have ended cleanly,
// and 1 with a message on a connection error.
//
// Options:
//   --transport ucx|tcp   ucx::stream (default) or plain Asio TCP sockets, with
//                         the same code (the baseline for measurements)
//   --ucx-transports shm|tcp|all
//                         which UCX transports carry the data (default all:
//                         UCX's choice, or UCX_TLS from the environment)
//   --bind ADDRESS        address to listen on with -l (default 0.0.0.0)
//   --wait event|poll|hybrid
//                         how the UCX worker waits for data (default event:
//                         sleeps on UCX's event fd; poll and hybrid spin,
//                         which pays off only on idle cores; see
//                         docs/guide/stream.md, Measurements)
//   --progress            progress on stderr: bytes, rate, and ETA when the
//                         size of stdin is known (the default when stderr is
//                         a terminal), and a summary line at the end
//   -q, --quiet           no progress display
#include <ucx/acceptor.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/multiple_exceptions.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::awaitable;
using namespace asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t chunk = std::size_t{1} << 20;

struct options {
    bool listen = false;
    std::string host;
    std::string port;
    std::string bind = "0.0.0.0";
    bool tcp = false;
    std::string ucx_transports = "all";
    ucx::progress_mode wait = ucx::progress_mode::event;
    std::optional<bool> progress;
};

int usage(const char* msg = nullptr) {
    if (msg)
        std::cerr << "ucxcat: " << msg << "\n";
    std::cerr
        << "usage: ucxcat [--transport ucx|tcp] [--ucx-transports shm|tcp|all] [--progress|-q]\n"
           "              [--wait event|poll|hybrid] -l [--bind ADDRESS] PORT | HOST PORT\n";
    return 2;
}

bool is_port(const std::string& s) {
    if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
        return false;
    return std::stoul(s) <= 65535;
}

/// Transfer counters and the progress display.
struct transfer {
    std::uint64_t sent = 0;
    std::uint64_t received = 0;
    std::optional<std::uint64_t> send_size; // stdin's size when it is a file
    clock_type::time_point start = clock_type::now();
    bool show = false;
    bool shown = false;

    static std::string bytes(double b) {
        const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        int u = 0;
        while (b >= 1024 && u < 4) {
            b /= 1024;
            ++u;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
        return buf;
    }

    void print(bool final) {
        const double secs = std::chrono::duration<double>(clock_type::now() - start).count() + 1e-9;
        const double rate = static_cast<double>(sent + received) / secs;
        std::string line = "sent " + bytes(static_cast<double>(sent)) + ", received " +
                           bytes(static_cast<double>(received)) + ", " + bytes(rate) + "/s";
        if (!final && send_size && sent < *send_size && sent > 0) {
            const double eta =
                static_cast<double>(*send_size - sent) / (static_cast<double>(sent) / secs);
            char buf[32];
            std::snprintf(buf, sizeof buf, ", ETA %.0f s", eta);
            line += buf;
        }
        if (final) {
            char buf[96];
            std::snprintf(buf, sizeof buf, " in %.2f s (%.1f MB/s)", secs, rate / 1e6);
            std::cerr << (shown ? "\r" : "") << "ucxcat: " << line << buf << "\x1b[K\n";
        } else {
            std::cerr << "\rucxcat: " << line << "\x1b[K" << std::flush;
            shown = true;
        }
    }
};

// The same pumps serve ucx::stream and tcp::socket.

void shutdown_send(ucx::stream& s) {
    s.shutdown(asio::socket_base::shutdown_send);
}
void shutdown_send(asio::ip::tcp::socket& s) {
    s.shutdown(asio::socket_base::shutdown_send);
}
awaitable<void> close_stream(ucx::stream& s) {
    co_await s.async_close(asio::use_awaitable);
}
awaitable<void> close_stream(asio::ip::tcp::socket& s) {
    boost::system::error_code ignored;
    s.close(ignored);
    co_return;
}

[[noreturn]] void fail(const boost::system::error_code& ec, const std::string& what) {
    throw std::runtime_error(what + ": " + ec.message());
}

/// The outcome of one read or write.
struct io_result {
    boost::system::error_code ec;
    std::size_t n = 0;
};

template <class AsyncStream>
awaitable<io_result> write_all(AsyncStream& s, asio::const_buffer b) {
    auto [ec, n] = co_await asio::async_write(s, b, tuple_awaitable);
    co_return io_result{ec, n};
}

template <class AsyncStream>
awaitable<io_result> read_some(AsyncStream& s, asio::mutable_buffer b) {
    auto [ec, n] = co_await s.async_read_some(b, tuple_awaitable);
    co_return io_result{ec, n};
}

/// Copies `from` to `to` until `from` ends, reading the next chunk while
/// the last one is written. Returns the error that ended `from` (eof when
/// it ended cleanly); throws when writing fails.
template <class From, class To>
awaitable<boost::system::error_code> copy(From& from, To& to, std::uint64_t& counter,
                                          const char* write_what) {
    std::vector<char> a(chunk), b(chunk);
    io_result r = co_await read_some(from, asio::buffer(a));
    while (!r.ec) {
        auto [w, next] = co_await (write_all(to, asio::buffer(a.data(), r.n)) &&
                                   read_some(from, asio::buffer(b)));
        if (w.ec)
            fail(w.ec, write_what);
        counter += r.n;
        r = next;
        a.swap(b);
    }
    co_return r.ec;
}

// The two directions run at once (`&&`): when one fails, the other is
// cancelled, and ends quietly (a read that completes with operation_aborted),
// so the error reported is the one that ended the session (the peer's loss,
// say) rather than the cancellation it caused.

/// Whether `state` says the coroutine was cancelled (by the other
/// direction's failure). (Read straight from `this_coro`: a coroutine that
/// was cancelled throws at the next awaitable it awaits.)
bool cancelled(const asio::cancellation_state& state) {
    return state.cancelled() != asio::cancellation_type::none;
}

/// stdin to the peer, then a half close: the peer reads end of file.
template <class Stream>
awaitable<void> to_peer(Stream& s, asio::posix::stream_descriptor& in, transfer& t) {
    const auto ec = co_await copy(in, s, t.sent, "sending");
    if (ec == asio::error::operation_aborted &&
        cancelled(co_await asio::this_coro::cancellation_state))
        co_return; // the other direction failed
    if (ec != asio::error::eof)
        fail(ec, "reading stdin");
    shutdown_send(s);
}

/// The peer to stdout, until the peer's end of file.
template <class Stream>
awaitable<void> from_peer(Stream& s, asio::posix::stream_descriptor& out, transfer& t) {
    const auto ec = co_await copy(s, out, t.received, "writing stdout");
    if (ec == asio::error::operation_aborted &&
        cancelled(co_await asio::this_coro::cancellation_state))
        co_return; // the other direction failed
    if (ec != asio::error::eof)
        fail(ec, "receiving");
}

template <class Stream>
awaitable<void> session(Stream& s, transfer& t) {
    auto ex = co_await asio::this_coro::executor;
    asio::posix::stream_descriptor in(ex, ::dup(STDIN_FILENO));
    asio::posix::stream_descriptor out(ex, ::dup(STDOUT_FILENO));
    t.start = clock_type::now();
    asio::steady_timer ticker(ex);
    bool done = false;
    if (t.show) {
        asio::co_spawn(
            ex,
            [&]() -> awaitable<void> {
                while (!done) {
                    ticker.expires_after(std::chrono::milliseconds(500));
                    auto [ec] = co_await ticker.async_wait(tuple_awaitable);
                    if (ec || done)
                        break;
                    t.print(false);
                }
            },
            asio::detached);
    }
    try {
        co_await (to_peer(s, in, t) && from_peer(s, out, t));
    } catch (...) {
        done = true;
        ticker.cancel();
        throw;
    }
    done = true;
    ticker.cancel();
    co_await close_stream(s);
    if (t.show)
        t.print(true);
}

int run(const options& o) {
    asio::io_context io;
    transfer t;
    struct stat st {};
    if (fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode))
        t.send_size = static_cast<std::uint64_t>(st.st_size);
    t.show = o.progress.value_or(isatty(STDERR_FILENO) == 1);
    int rc = 0;
    auto report = [&](std::exception_ptr e) {
        if (!e)
            return;
        try {
            try {
                std::rethrow_exception(e);
            } catch (const asio::multiple_exceptions& m) {
                // Both directions failed (the peer is gone): the first says why.
                std::rethrow_exception(m.first_exception());
            }
        } catch (const boost::system::system_error& x) {
            std::cerr << "\nucxcat: " << x.code().message() << "\n";
        } catch (const std::exception& x) {
            std::cerr << "\nucxcat: " << x.what() << "\n";
        }
        rc = 1;
    };
    const std::string where = o.listen ? o.bind + ":" + o.port : o.host + ":" + o.port;

    if (o.tcp) {
        asio::ip::tcp::socket s(io);
        asio::co_spawn(
            io,
            [&]() -> awaitable<void> {
                if (o.listen) {
                    asio::ip::tcp::acceptor a(io,
                                              {asio::ip::make_address(o.bind),
                                               static_cast<unsigned short>(std::stoul(o.port))});
                    std::cerr << "ucxcat: listening on " << a.local_endpoint() << " (tcp)"
                              << std::endl;
                    co_await a.async_accept(s, asio::use_awaitable);
                } else {
                    asio::ip::tcp::resolver r(io);
                    auto [ec, results] = co_await r.async_resolve(o.host, o.port, tuple_awaitable);
                    if (!ec)
                        std::tie(ec, std::ignore) =
                            co_await asio::async_connect(s, results, tuple_awaitable);
                    if (ec)
                        fail(ec, "cannot connect to " + where);
                }
                co_await session(s, t);
            },
            report);
        io.run();
        return rc;
    }

    ucx::context_options co;
    // Host:port connections need UCX's TCP connection manager, so "shm"
    // keeps tcp enabled; UCX then moves the data over shared memory.
    if (o.ucx_transports == "shm")
        co.transports.cma = false;
    if (o.ucx_transports == "tcp") {
        co.transports.shared_memory = false;
        co.transports.cma = false;
    }
    std::optional<ucx::context> ctx;
    std::optional<ucx::worker> w;
    try {
        ctx.emplace(co);
        ucx::worker_options wo;
        wo.mode = o.wait;
        w.emplace(*ctx, io, wo);
    } catch (const std::exception& x) {
        std::cerr << "ucxcat: cannot start UCX: " << x.what() << "\n";
        return 1;
    }
    ucx::stream s(*w);
    std::optional<ucx::acceptor> acceptor;
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
            if (o.listen) {
                acceptor.emplace(
                    *w, asio::ip::tcp::endpoint(asio::ip::make_address(o.bind),
                                                static_cast<unsigned short>(std::stoul(o.port))));
                std::cerr << "ucxcat: listening on " << acceptor->local_endpoint() << " (ucx)"
                          << std::endl;
                co_await acceptor->async_accept(s, asio::use_awaitable);
                acceptor->close();
            } else {
                auto [ec] = co_await s.async_connect(o.host, o.port, tuple_awaitable);
                if (ec)
                    fail(ec, "cannot connect to " + where);
            }
            co_await session(s, t);
        },
        [&](std::exception_ptr e) {
            report(e);
            if (acceptor)
                acceptor->close();
            s.abort();
            // The worker keeps run() going: close it once the session is over.
            w->close();
        });
    io.run();
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::optional<std::string> {
            if (i + 1 >= argc)
                return std::nullopt;
            return std::string(argv[++i]);
        };
        if (a == "-l" || a == "--listen") {
            o.listen = true;
        } else if (a == "--transport") {
            auto v = value();
            if (!v || (*v != "ucx" && *v != "tcp"))
                return usage("--transport takes ucx or tcp");
            o.tcp = *v == "tcp";
        } else if (a == "--ucx-transports") {
            auto v = value();
            if (!v || (*v != "shm" && *v != "tcp" && *v != "all"))
                return usage("--ucx-transports takes shm, tcp or all");
            o.ucx_transports = *v;
        } else if (a == "--wait") {
            auto v = value();
            if (v && *v == "poll")
                o.wait = ucx::progress_mode::poll;
            else if (v && *v == "hybrid")
                o.wait = ucx::progress_mode::hybrid;
            else if (v && *v == "event")
                o.wait = ucx::progress_mode::event;
            else
                return usage("--wait takes event, poll or hybrid");
        } else if (a == "--bind") {
            auto v = value();
            if (!v)
                return usage("--bind takes an address");
            o.bind = *v;
        } else if (a == "--progress") {
            o.progress = true;
        } else if (a == "-q" || a == "--quiet") {
            o.progress = false;
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (!a.empty() && a[0] == '-') {
            return usage(("unknown option " + a).c_str());
        } else {
            positional.push_back(a);
        }
    }
    if (o.listen) {
        if (positional.size() != 1)
            return usage("-l takes a port");
        o.port = positional[0];
    } else {
        if (positional.size() != 2)
            return usage("give HOST and PORT, or -l PORT");
        o.host = positional[0];
        o.port = positional[1];
    }
    if (!is_port(o.port))
        return usage(("bad port: " + o.port).c_str());
    boost::system::error_code ec;
    asio::ip::make_address(o.bind, ec);
    if (ec)
        return usage(("bad address: " + o.bind).c_str());
    try {
        return run(o);
    } catch (const std::exception& x) {
        std::cerr << "ucxcat: " << x.what() << "\n";
        return 1;
    }
}
