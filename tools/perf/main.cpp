// ucx-asio-perf: a side-by-side benchmark of the library, raw UCP and Asio TCP,
// with server and client processes in the manner of ucx_perftest.
//
//   ucx-asio-perf --server [-p PORT] [--serves N]  serves N tests (1), then exits
//   ucx-asio-perf HOST [-p PORT] [options]  runs a test against that server
//   ucx-asio-perf --local [options]         starts a server process here first
//
// --test and --size take comma-separated lists: each test at each size runs
// in turn, each on a control connection of its own (a local server serves
// them all).
// `ucx-asio-perf --help` lists the options. The client sends the test settings
// to the server over a TCP control connection; UCX settings come from each
// process's environment (UCX_TLS, UCX_NET_DEVICES, ...).
#include "common.hpp"
#include "memory.hpp"
#include "report.hpp"

#include <ucx/context.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

/// Serves the test a client's control connection asks for.
void serve_one(perf::control& ctl) {
    perf::settings t;
    const std::string line = ctl.expect("test");
    if (std::string err = perf::parse_wire(line, t); !err.empty()) {
        ctl.send("error " + err);
        throw perf::failure("bad test settings from the client: " + err);
    }
    if (t.transport == perf::transport::tcp && perf::find_test(t.test)->api == perf::api::rma) {
        ctl.send("error " + t.test + " needs one-sided memory access (not over TCP sockets)");
        throw perf::failure(t.test + " needs one-sided memory access (not over TCP sockets)");
    }
    if (!perf::api_available(perf::find_test(t.test)->api) && t.transport != perf::transport::tcp) {
        ctl.send("error " + t.test + " is not available in this build");
        throw perf::failure(t.test + " is not available in this build");
    }
    ctl.send("accepted " + t.test);
    switch (t.transport) {
    case perf::transport::library:
        perf::library_server(t, ctl);
        break;
    case perf::transport::ucp:
        perf::ucp_server(t, ctl);
        break;
    case perf::transport::tcp:
        perf::tcp_server(t, ctl);
        break;
    }
}

void run_server(perf::settings s) {
    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(tcp::v4(), s.port));
    const unsigned short port = acceptor.local_endpoint().port();
    if (s.port_fd >= 0) {
        const std::string text = std::to_string(port) + "\n";
        if (::write(s.port_fd, text.data(), text.size()) < 0)
            throw perf::failure(std::string("writing the port: ") + std::strerror(errno));
        ::close(s.port_fd);
    } else {
        std::printf("ucx-asio-perf: server listening on port %u\n", port);
        std::fflush(stdout);
    }
    for (std::size_t served = 0; served < s.serves; ++served) {
        perf::control ctl(acceptor.accept());
        if (served + 1 == s.serves)
            acceptor.close();
        serve_one(ctl);
    }
}

perf::result run_client(const perf::settings& s, const std::string& host, unsigned short port) {
    asio::io_context io;
    tcp::socket sock(io);
    tcp::resolver resolver(io);
    asio::connect(sock, resolver.resolve(host, std::to_string(port)));
    perf::control ctl(std::move(sock));
    ctl.send("test " + perf::wire_form(s));
    const std::string answer = ctl.receive();
    if (answer.rfind("accepted ", 0) != 0)
        throw perf::failure("the server refused: " + answer);
    switch (s.transport) {
    case perf::transport::library:
        return perf::library_client(s, ctl);
    case perf::transport::ucp:
        return perf::ucp_client(s, ctl);
    case perf::transport::tcp:
        break;
    }
    return perf::tcp_client(s, ctl);
}

// Starts this program as a server on a free port that serves `tests` tests;
// returns its pid and port.
std::pair<pid_t, unsigned short> spawn_server(std::size_t tests) {
    int fds[2];
    if (::pipe(fds) != 0)
        throw perf::failure(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0)
        throw perf::failure(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::close(fds[0]);
        const std::string fd = std::to_string(fds[1]);
        const std::string serves = std::to_string(tests);
        const char* argv[] = {"ucx-asio-perf", "--server", "--port",       "0",    "--port-fd",
                              fd.c_str(),      "--serves", serves.c_str(), nullptr};
        ::execv("/proc/self/exe", const_cast<char* const*>(argv));
        std::fprintf(stderr, "ucx-asio-perf: exec: %s\n", std::strerror(errno));
        ::_exit(127);
    }
    ::close(fds[1]);
    char buf[32] = {};
    std::size_t got = 0;
    while (got < sizeof buf - 1) {
        const ssize_t n = ::read(fds[0], buf + got, sizeof buf - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += static_cast<std::size_t>(n);
        if (std::memchr(buf, '\n', got))
            break;
    }
    ::close(fds[0]);
    const unsigned long port = std::strtoul(buf, nullptr, 10);
    if (port == 0 || port > 65535) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        throw perf::failure("the local server did not start");
    }
    return {pid, static_cast<unsigned short>(port)};
}

// The checks a run's settings pass before anything starts: 0, or the exit
// status of the refusal (its reason printed).
int refusal(const perf::settings& s) {
    const perf::test_info* test = perf::find_test(s.test);
    if (!s.server && s.transport != perf::transport::tcp && !perf::api_available(test->api)) {
        std::fprintf(stderr,
                     "ucx-asio-perf: %s is not available: this build of the library has no %s "
                     "API yet (only --transport tcp runs it)\n",
                     s.test.c_str(), test->api == perf::api::am ? "active message" : "stream");
        return 3;
    }
    if (!s.server && s.transport == perf::transport::ucp && test->api != perf::api::tag &&
        test->api != perf::api::rma) {
        std::fprintf(stderr,
                     "ucx-asio-perf: --transport ucp runs the tag and RMA tests only; compare %s "
                     "with ucx_perftest (-t ucp_am_lat, ucp_am_bw, stream_lat, stream_bw)\n",
                     s.test.c_str());
        return 3;
    }
    if (!s.server && s.transport == perf::transport::tcp && test->api == perf::api::rma) {
        std::fprintf(stderr,
                     "ucx-asio-perf: %s is one-sided remote memory access, which a TCP socket "
                     "does not have; run it with --transport library or ucp\n",
                     s.test.c_str());
        return 2;
    }
    if (!s.server && s.memory == perf::memory::cuda) {
        if (const std::string why = perf::cuda_unavailable_reason(); !why.empty()) {
            // 77: the test cannot run on this machine (ctest's skip code).
            std::fprintf(stderr, "ucx-asio-perf: --memory cuda: %s\n", why.c_str());
            return 77;
        }
    }
    return 0;
}

// The command line once for each test and size of the comma-separated lists
// that --test and --size take (each test at each size, in the order given).
std::vector<std::vector<std::string>> expand_lists(int argc, char** argv) {
    std::vector<std::vector<std::string>> lines{{}};
    for (int i = 0; i < argc; ++i) {
        const std::string arg = argv[i];
        const bool listed = i > 0 &&
                            (arg == "-t" || arg == "--test" || arg == "-s" || arg == "--size") &&
                            i + 1 < argc;
        if (!listed) {
            for (auto& l : lines)
                l.push_back(arg);
            continue;
        }
        const std::string value = argv[++i];
        std::vector<std::string> items;
        std::size_t start = 0;
        for (std::size_t comma; (comma = value.find(',', start)) != std::string::npos;
             start = comma + 1)
            items.push_back(value.substr(start, comma - start));
        items.push_back(value.substr(start));
        std::vector<std::vector<std::string>> next;
        for (const auto& l : lines)
            for (const auto& item : items) {
                next.push_back(l);
                next.back().push_back(arg);
                next.back().push_back(item);
            }
        lines = std::move(next);
    }
    return lines;
}

} // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
            std::fputs(perf::usage(), stdout);
            return 0;
        }
    }
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--print-config") == 0) {
            // The UCX settings a library context applies by default, in the
            // environment's form (so raw UCX runs can use the same ones).
            ucx::context_options o;
            for (const auto& [name, value] : ucx::make_config_settings(
                     o, [](const char* n) { return static_cast<const char*>(std::getenv(n)); }))
                std::printf("UCX_%s=%s\n", name.c_str(), value.c_str());
            return 0;
        }
    }
    std::vector<perf::settings> runs;
    for (const auto& args : expand_lists(argc, argv)) {
        std::vector<const char*> av;
        for (const auto& a : args)
            av.push_back(a.c_str());
        perf::settings s;
        if (std::string err = perf::parse(static_cast<int>(av.size()), av.data(), s);
            !err.empty()) {
            std::fprintf(stderr, "ucx-asio-perf: %s\n%s", err.c_str(), perf::usage());
            return 2;
        }
        if (const int rc = refusal(s); rc != 0)
            return rc;
        runs.push_back(std::move(s));
    }
    const perf::settings& first = runs.front();
    try {
        if (first.server) {
            run_server(first);
            return 0;
        }
        pid_t child = -1;
        std::string host = first.host;
        unsigned short port = first.port;
        if (first.local) {
            auto [pid, p] = spawn_server(runs.size());
            child = pid;
            host = "127.0.0.1";
            port = p;
        }
        perf::sample_clock::init();
        int rc = 0;
        try {
            for (const perf::settings& s : runs) {
                const perf::result r = run_client(s, host, port);
                perf::summary sum = perf::summarise(s, r);
                if (s.memory == perf::memory::cuda) {
                    // After the run, so the copies do not compete with it.
                    const perf::copy_ceiling c = perf::measure_copy_ceiling(s.size);
                    sum.ceiling_mib_per_s =
                        std::min(c.device_to_host_mib_s, c.host_to_device_mib_s);
                }
                // The header (--format table or csv) once, above the first run.
                perf::settings shown = s;
                shown.header = s.header && &s == &runs.front();
                perf::print(stdout, shown, sum);
                if (s.count_allocations)
                    std::printf("heap allocations (operator new) in the measured phase: %zu in %zu "
                                "operations, client and server together\n",
                                r.allocations, r.operations);
                std::fflush(stdout);
                if (s.check)
                    std::fprintf(stderr,
                                 "ucx-asio-perf: %s of %zu bytes over %s (%s, %s): content "
                                 "checked\n",
                                 s.test.c_str(), s.size, perf::to_string(s.transport),
                                 perf::to_string(s.progress), perf::to_string(s.style));
            }
        } catch (...) {
            if (child > 0) {
                ::kill(child, SIGKILL);
                ::waitpid(child, nullptr, 0);
            }
            throw;
        }
        if (child > 0) {
            int status = 0;
            ::waitpid(child, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                std::fprintf(stderr, "ucx-asio-perf: the local server failed\n");
                rc = 1;
            }
        }
        return rc;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ucx-asio-perf%s: %s\n", first.server ? " (server)" : "", e.what());
        return 1;
    }
}
