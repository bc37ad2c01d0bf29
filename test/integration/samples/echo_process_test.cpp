// Client/server across processes with the echo samples: echo over TCP and
// shared memory, graceful close versus crash, SIGKILLed peers, and many
// connect/echo/close cycles against one server.
#include "child_process.hpp"
#include "sanitizers.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <chrono>
#include <dirent.h>
#include <fstream>

using namespace ucx_test;

namespace {

std::uint16_t read_port(child_process& server) {
    for (std::string line = server.read_line(); !line.empty(); line = server.read_line()) {
        auto at = line.find("listening on ");
        if (at == std::string::npos)
            continue;
        auto colon = line.find(':', at);
        return static_cast<std::uint16_t>(std::stoul(line.substr(colon + 1)));
    }
    return 0;
}

std::size_t open_fds(pid_t pid) {
    std::size_t n = 0;
    const std::string dir = "/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/fd";
    if (DIR* d = opendir(dir.c_str())) {
        while (readdir(d))
            ++n;
        closedir(d);
    }
    return n;
}

std::size_t rss_kib(pid_t pid) {
    std::ifstream in("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmRSS:", 0) == 0)
            return std::stoul(line.substr(6));
    return 0;
}

// Sends `data` on `ep` with `tag`, waits for the echo, checks it.
void echo_once(asio::io_context& io, ucx::endpoint& ep, const std::vector<char>& data,
               std::uint32_t tag) {
    std::vector<char> in(data.size() + 1);
    std::optional<ucx::error_code> s, r;
    std::size_t n = 0;
    std::uint32_t got_tag = 0;
    ep.async_recv(asio::buffer(in), 0, 0,
                  [&](ucx::error_code ec, std::size_t len, std::uint32_t t) {
                      r = ec;
                      n = len;
                      got_tag = t;
                  });
    ep.async_send(asio::buffer(data), tag, [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    ASSERT_FALSE(*s) << s->message();
    ASSERT_FALSE(*r) << r->message();
    ASSERT_EQ(n, data.size());
    EXPECT_EQ(got_tag, tag);
    in.resize(n);
    EXPECT_EQ(in, data);
}

class echo_process : public testing::TestWithParam<transport> {};

TEST_P(echo_process, echo_and_close_against_the_server_process) {
    child_process server({UCX_ASIO_ECHO_SERVER});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);

    asio::io_context io;
    ucx::context ctx(options_for(GetParam(), true));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    std::optional<std::pair<ucx::error_code, ucx::endpoint>> c;
    ucx::async_connect(w, "127.0.0.1", std::to_string(port),
                       [&](ucx::error_code ec, ucx::endpoint ep) { c.emplace(ec, std::move(ep)); });
    ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
    ASSERT_FALSE(c->first) << c->first.message();
    ucx::endpoint& ep = c->second;
    const std::string lanes = endpoint_lanes(ep.native_handle());
    if (GetParam() == transport::shared_memory) {
        EXPECT_TRUE(lanes.find("posix") != std::string::npos ||
                    lanes.find("sysv") != std::string::npos)
            << lanes;
    }
    std::uint32_t tag = 1;
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{8192},
                             std::size_t{1} << 20, std::size_t{16} << 20}) {
        echo_once(io, ep, pattern(size, tag), tag);
        ++tag;
    }
    std::optional<ucx::error_code> closed;
    ep.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return closed.has_value(); }));
    EXPECT_FALSE(*closed);

    // The server saw a graceful close (eof), not a failure.
    std::string line;
    do
        line = server.read_line();
    while (!line.empty() && line.find("client 1 ") == std::string::npos);
    do
        line = server.read_line();
    while (!line.empty() && line.find("client 1 c") == std::string::npos &&
           line.find("failed") == std::string::npos);
    EXPECT_NE(line.find("client 1 closed after 5 messages"), std::string::npos) << line;
}

TEST_P(echo_process, client_process_against_server_process) {
    child_process server({UCX_ASIO_ECHO_SERVER});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);
    child_process client({UCX_ASIO_ECHO_CLIENT, "--port", std::to_string(port), "--count", "2000",
                          "--size", "4096"});
    EXPECT_EQ(client.wait(), 0);
}

TEST_P(echo_process, a_paced_client_keeps_its_rate_and_reports_its_processor_time) {
    child_process server({UCX_ASIO_ECHO_SERVER});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);
    // 40 messages at 200 per second: at least 195 ms (message 39 starts
    // 39/200 s after the first), however fast the echoes come back.
    const auto t0 = std::chrono::steady_clock::now();
    child_process client(
        {UCX_ASIO_ECHO_CLIENT, "--port", std::to_string(port), "--count", "40", "--rate", "200"});
    const std::string out = client.read_all();
    EXPECT_EQ(client.wait(), 0) << out;
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(195));
    EXPECT_NE(out.find("40 echoes of 8 bytes: median RTT"), std::string::npos) << out;
    EXPECT_NE(out.find("client processor time "), std::string::npos) << out;
    EXPECT_NE(out.find(" us per echo, "), std::string::npos) << out;
}

INSTANTIATE_TEST_SUITE_P(all, echo_process,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// Over shared memory nothing but UCX's keepalive notices a dead peer for sure
// (the connection manager's socket often does, not always): turn it on.
ucx::context_options failure_detecting_options(transport t) {
    auto o = options_for(t, true);
    o.config["KEEPALIVE_INTERVAL"] = "500ms";
    return o;
}

// An in-process echo server that records how each session ended.
struct recording_server {
    struct session_record {
        std::size_t echoed = 0;
        std::optional<ucx::error_code> ended;
        int error_waits_fired = 0;
        std::optional<ucx::error_code> waited;
        std::chrono::steady_clock::time_point waited_at;
    };

    explicit recording_server(transport t)
        : ctx(failure_detecting_options(t)),
          w(ctx, io, strict_worker_options(ucx::progress_mode::event)),
          l(w, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
        accept();
    }

    void accept() {
        l.async_accept([this](ucx::error_code ec, ucx::endpoint ep) {
            if (ec)
                return;
            auto rec = std::make_shared<session_record>();
            records.push_back(rec);
            auto e = std::make_shared<ucx::endpoint>(std::move(ep));
            auto buf = std::make_shared<std::vector<char>>(1 << 20);
            e->async_wait_error([rec, e](ucx::error_code ec) {
                ++rec->error_waits_fired;
                rec->waited = ec;
                rec->waited_at = std::chrono::steady_clock::now();
            });
            serve(e, buf, rec);
            accept();
        });
    }

    static void serve(std::shared_ptr<ucx::endpoint> e, std::shared_ptr<std::vector<char>> buf,
                      std::shared_ptr<session_record> rec) {
        e->async_recv(asio::buffer(*buf), 0, 0,
                      [e, buf, rec](ucx::error_code ec, std::size_t n, std::uint32_t tag) {
                          if (ec) {
                              rec->ended = ec;
                              return;
                          }
                          e->async_send(asio::buffer(buf->data(), n), tag,
                                        [e, buf, rec](ucx::error_code ec, std::size_t) {
                                            if (ec) {
                                                rec->ended = ec;
                                                return;
                                            }
                                            ++rec->echoed;
                                            serve(e, buf, rec);
                                        });
                      });
    }

    std::string port() const { return std::to_string(l.local_endpoint().port()); }

    asio::io_context io;
    ucx::context ctx;
    ucx::worker w;
    ucx::listener l;
    std::vector<std::shared_ptr<session_record>> records;
};

class peer_failure : public testing::TestWithParam<transport> {};

TEST_P(peer_failure, graceful_close_and_crash_give_distinct_codes) {
    recording_server srv(GetParam());
    {
        child_process graceful({UCX_ASIO_ECHO_CLIENT, "--port", srv.port(), "--count", "10"});
        ASSERT_TRUE(run_until(
            srv.io, [&] { return srv.records.size() == 1 && srv.records[0]->waited.has_value(); }));
        EXPECT_EQ(graceful.wait(), 0);
    }
    {
        child_process crash({UCX_ASIO_ECHO_CLIENT, "--port", srv.port(), "--count", "1000000000"});
        ASSERT_TRUE(run_until(
            srv.io, [&] { return srv.records.size() == 2 && srv.records[1]->echoed > 20; }));
        crash.kill_now();
        ASSERT_TRUE(run_until(srv.io, [&] { return srv.records[1]->waited.has_value(); }));
    }
    EXPECT_EQ(*srv.records[0]->waited, asio::error::eof);
    EXPECT_EQ(*srv.records[0]->ended, asio::error::eof);
    EXPECT_NE(*srv.records[1]->waited, asio::error::eof);
    // UCX reports a dead peer as a reset or an endpoint timeout, depending on
    // what notices first; either way a failure of the "ucx" category.
    EXPECT_EQ(srv.records[1]->waited->category(), ucx::error_category())
        << srv.records[1]->waited->message();
    std::printf("graceful: %s; crash: %s\n", srv.records[0]->waited->message().c_str(),
                srv.records[1]->waited->message().c_str());
}

// 20 rounds: a victim client is SIGKILLed while a survivor runs. Over TCP the
// victim dies in the middle of its stream. Over shared memory it dies while
// idle: a process killed in the middle of writing into the receiver's UCX 1.13
// shared-memory FIFO can leave an unfinished element there that stalls every
// later message to that worker (measured: about one kill in fifty), which no
// library above UCX can repair; see docs/guide/connections.md.
TEST_P(peer_failure, sigkilled_clients_twenty_times) {
    recording_server srv(GetParam());
    std::vector<double> kill_to_hook_ms;
    for (int round = 0; round < 20; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        const std::size_t first = srv.records.size();
        child_process survivor(
            {UCX_ASIO_ECHO_CLIENT, "--port", srv.port(), "--count", "300", "--size", "1024"});
        const bool mid_stream = GetParam() == transport::tcp;
        child_process victim({UCX_ASIO_ECHO_CLIENT, "--port", srv.port(), "--count",
                              mid_stream ? "1000000000" : "60", "--size", "1024", "--hold-ms",
                              "60000"});
        ASSERT_TRUE(run_until(srv.io, [&] {
            if (srv.records.size() < first + 2)
                return false;
            for (std::size_t i = first; i < srv.records.size(); ++i)
                if (srv.records[i]->echoed > 50)
                    return true;
            return false;
        }));
        if (!mid_stream) {
            ASSERT_TRUE(run_until(srv.io, [&] { return victim.output_contains("holding"); }));
        }
        const auto killed_at = std::chrono::steady_clock::now();
        victim.kill_now();
        const bool both_ended = run_until(srv.io, [&] {
            int ended = 0;
            for (std::size_t i = first; i < srv.records.size(); ++i)
                ended += srv.records[i]->ended.has_value() && srv.records[i]->waited.has_value();
            return ended == 2;
        });
        for (std::size_t i = first; i < srv.records.size(); ++i) {
            const auto& r = *srv.records[i];
            std::printf("round %d session %zu: echoed %zu, ended %s, waited %s\n", round, i,
                        r.echoed, r.ended ? r.ended->message().c_str() : "-",
                        r.waited ? r.waited->message().c_str() : "-");
        }
        if (!both_ended)
            std::printf("survivor %s\n", kill(survivor.pid(), 0) == 0 ? "still running" : "gone");
        ASSERT_TRUE(both_ended);
        // The survivor may still be echoing: serve it until it is done.
        EXPECT_TRUE(run_until(srv.io, [&] { return survivor.exited(); }));
        EXPECT_EQ(survivor.wait(), 0);
        int eofs = 0, failures = 0;
        for (std::size_t i = first; i < srv.records.size(); ++i) {
            const auto& r = *srv.records[i];
            EXPECT_EQ(r.error_waits_fired, 1);
            EXPECT_EQ(*r.ended, *r.waited);
            eofs += *r.waited == asio::error::eof;
            failures += *r.waited != asio::error::eof;
            if (*r.waited != asio::error::eof)
                kill_to_hook_ms.push_back(
                    std::chrono::duration<double, std::milli>(r.waited_at - killed_at).count());
        }
        EXPECT_EQ(eofs, 1);
        EXPECT_EQ(failures, 1);
    }
    EXPECT_EQ(srv.w.pending_operations(), 1u); // only the next accept
    std::sort(kill_to_hook_ms.begin(), kill_to_hook_ms.end());
    if (!kill_to_hook_ms.empty())
        std::printf("SIGKILL to error hook over %s: median %.1f ms, max %.1f ms (%zu kills)\n",
                    to_string(GetParam()).c_str(), kill_to_hook_ms[kill_to_hook_ms.size() / 2],
                    kill_to_hook_ms.back(), kill_to_hook_ms.size());
}

INSTANTIATE_TEST_SUITE_P(all, peer_failure,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// Many short connections: no descriptor or memory growth on either side. A
// thousand cycles; 400 under a sanitizer, whose slower code makes each cycle
// several times as long (the growth is measured over the cycles after the
// 100th either way).
TEST(connection_cycles, thousand_connect_echo_close_cycles) {
#if defined(UCX_ASIO_TEST_ASAN) || defined(UCX_ASIO_TEST_TSAN)
    constexpr int cycles = 400;
#else
    constexpr int cycles = 1000;
#endif
    // Quiet: nobody reads the server's stdout during the loop.
    child_process server({UCX_ASIO_ECHO_SERVER, "--quiet"});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);
    const pid_t server_pid = server.pid();
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory, true));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    std::size_t fds_server = 0, fds_client = 0, rss_server = 0, rss_client = 0;
    auto data = pattern(64, 1);
    for (int cycle = 1; cycle <= cycles; ++cycle) {
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> c;
        ucx::async_connect(
            w, "127.0.0.1", std::to_string(port),
            [&](ucx::error_code ec, ucx::endpoint ep) { c.emplace(ec, std::move(ep)); });
        ASSERT_TRUE(run_until(io, [&] { return c.has_value(); })) << "cycle " << cycle;
        ASSERT_FALSE(c->first) << "cycle " << cycle << ": " << c->first.message();
        echo_once(io, c->second, data, static_cast<std::uint32_t>(cycle));
        std::optional<ucx::error_code> closed;
        c->second.async_close([&](ucx::error_code ec) { closed = ec; });
        ASSERT_TRUE(run_until(io, [&] { return closed.has_value(); }));
        ASSERT_FALSE(*closed);
        if (cycle == 100) {
            run_until(
                io, [] { return false; }, std::chrono::milliseconds(200));
            fds_server = open_fds(server_pid);
            fds_client = open_fds(0);
            rss_server = rss_kib(server_pid);
            rss_client = rss_kib(0);
        }
    }
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(200));
    const std::size_t fds_server_end = open_fds(server_pid), fds_client_end = open_fds(0);
    const std::size_t rss_server_end = rss_kib(server_pid), rss_client_end = rss_kib(0);
    std::printf("after cycle 100 -> %d: server fds %zu -> %zu, rss %zu -> %zu KiB; "
                "client fds %zu -> %zu, rss %zu -> %zu KiB\n",
                cycles, fds_server, fds_server_end, rss_server, rss_server_end, fds_client,
                fds_client_end, rss_client, rss_client_end);
    EXPECT_LE(fds_server_end, fds_server + 4);
    EXPECT_LE(fds_client_end, fds_client + 4);
#if defined(UCX_ASIO_TEST_ASAN)
    // AddressSanitizer keeps freed memory in quarantine (up to 256 MiB): RSS
    // says nothing there; the plain build checks it.
    (void)rss_server_end;
    (void)rss_client_end;
#else
    // 900 more connections (300 under ThreadSanitizer): a leak of even 8 KiB
    // (16 KiB) each would show as 7 MiB (4.7 MiB).
    EXPECT_LE(rss_server_end, rss_server + 4096);
    EXPECT_LE(rss_client_end, rss_client + 4096);
#endif
}

} // namespace

// A server that stops answering (SIGSTOP) mid-connect: destroying the worker
// aborts the connect; nothing crashes or hangs.
TEST(connection_cycles, destroying_the_worker_during_a_stuck_connect) {
    child_process server({UCX_ASIO_ECHO_SERVER, "--quiet"});
    const std::uint16_t port = read_port(server);
    ASSERT_NE(port, 0);
    kill(server.pid(), SIGSTOP);
    asio::io_context io;
    ucx::context ctx(options_for(transport::tcp, true));
    std::optional<ucx::error_code> r;
    {
        ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
        ucx::async_connect(w, "127.0.0.1", std::to_string(port),
                           [&](ucx::error_code ec, ucx::endpoint) { r = ec; });
        run_until(
            io, [] { return false; }, std::chrono::milliseconds(300));
        EXPECT_FALSE(r.has_value());
    }
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    kill(server.pid(), SIGCONT);
}
