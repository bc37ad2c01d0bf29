// ucx::pmi_store's I/O against a PMI-1 server played by a thread of the test
// on a socket pair: a round, and a server that answers wrongly, closes, or
// never answers the barrier. (Under MPICH's real mpiexec.hydra:
// group_launcher_test.cpp.) Bounds are "eventually, within the test's
// generous limit"; no test asserts how fast something happens.
#include <ucx/pmi_store.hpp>

#include "store_support.hpp"

#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using ucx::error_code;
using namespace ucx_test;

namespace {

/// What the server does with a line: answer it, say nothing, or close.
struct reply {
    enum { answer, nothing, close } what = answer;
    std::string text;
};

/// A PMI-1 server on one end of a socket pair, answering each line with
/// `serve` on a thread of its own, until the store's end closes or `serve`
/// says close.
class fake_server {
public:
    explicit fake_server(std::function<reply(const std::string&)> serve) {
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
            throw std::runtime_error("socketpair");
        client_fd = fds[0];
        server_fd_ = fds[1];
        thread_ = std::thread([this, serve = std::move(serve)] {
            std::string buffer;
            char chunk[4096];
            for (;;) {
                const ssize_t n = ::read(server_fd_, chunk, sizeof chunk);
                if (n <= 0)
                    break;
                buffer.append(chunk, static_cast<std::size_t>(n));
                for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
                    const std::string line = buffer.substr(0, nl);
                    buffer.erase(0, nl + 1);
                    lines.push_back(line);
                    const reply r = serve(line);
                    if (r.what == reply::close) {
                        ::shutdown(server_fd_, SHUT_RDWR);
                        return;
                    }
                    if (r.what == reply::answer) {
                        const std::string out = r.text + "\n";
                        if (::write(server_fd_, out.data(), out.size()) < 0)
                            return;
                    }
                }
            }
        });
    }
    ~fake_server() {
        stop();
        ::close(client_fd);
        ::close(server_fd_);
    }

    /// Shuts the store's end and waits for the thread; then `lines` holds
    /// every line the server read.
    void stop() {
        ::shutdown(client_fd, SHUT_RDWR);
        if (thread_.joinable())
            thread_.join();
    }

    int client_fd = -1;
    std::vector<std::string> lines;

private:
    int server_fd_ = -1;
    std::thread thread_;
};

/// What Hydra answers, for one process (so the barrier is answered at once).
reply hydra_alone(const std::string& line) {
    if (line.starts_with("cmd=init"))
        return {reply::answer, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"};
    if (line == "cmd=get_maxes")
        return {reply::answer, "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"};
    if (line == "cmd=get_my_kvsname")
        return {reply::answer, "cmd=my_kvsname kvsname=kvs_test_0"};
    if (line.starts_with("cmd=put"))
        return {reply::answer, "cmd=put_result rc=0 msg=success"};
    if (line == "cmd=barrier_in")
        return {reply::answer, "cmd=barrier_out"};
    if (line == "cmd=finalize")
        return {reply::answer, "cmd=finalize_ack"};
    return {reply::answer, "cmd=get_result rc=-1 msg=key_not_found value=unknown"};
}

} // namespace

TEST(PmiStore, WithoutALauncherItSaysWhatIsMissing) {
    for (const char* n : {"PMI_FD", "PMI_RANK", "PMI_SIZE"})
        ::unsetenv(n);
    asio::io_context io;
    error_code ec;
    std::string why;
    ucx::pmi_store s(io.get_executor(), ec, &why);
    EXPECT_EQ(ec, ucx::error::pmi_failed);
    EXPECT_NE(why.find("PMI_FD"), std::string::npos) << why;
    // Unusable, not undefined.
    auto [e, v] = pump(io, s.async_get("k", tuple_future));
    EXPECT_EQ(e, ucx::error::pmi_failed);
    EXPECT_THROW(ucx::pmi_store(io.get_executor()), boost::system::system_error);
}

// One process: its own keys without a round, a round (puts, barrier), and
// the goodbye when the store is done.
TEST(PmiStore, OneProcessRoundAndGoodbye) {
    fake_server server(hydra_alone);
    asio::io_context io;
    {
        error_code ec;
        std::string why;
        ucx::pmi_store s(io.get_executor(), server.client_fd, 0, 1, ec, &why);
        ASSERT_FALSE(ec) << why;
        EXPECT_EQ(s.kvsname(), "kvs_test_0");
        EXPECT_EQ(s.size(), 1u);
        const std::string long_key(1000, 'k');
        ASSERT_FALSE(std::get<0>(pump(io, s.async_set(long_key, bytes("v"), tuple_future))));
        auto [e, v] = pump(io, s.async_get(long_key, tuple_future));
        EXPECT_FALSE(e);
        EXPECT_EQ(text(v), "v");
        EXPECT_EQ(s.rounds(), 0u);
        // A key nobody sets: rounds until the timeout.
        s.set_timeout(300ms);
        auto [e2, v2] = pump(io, s.async_get("never", tuple_future));
        EXPECT_EQ(e2, ucx::error::store_timeout);
        EXPECT_GE(s.rounds(), 1u);
        std::vector<std::string> keys{long_key};
        EXPECT_TRUE(std::get<1>(pump(io, s.async_check(keys, tuple_future))));
        auto [e3, n] = pump(io, s.async_num_keys(tuple_future));
        EXPECT_EQ(e3, asio::error::operation_not_supported);
    }
    // Until the last round's thread has handed its result back.
    io.restart();
    io.run();
    server.stop();
    ASSERT_GE(server.lines.size(), 7u);
    EXPECT_EQ(server.lines[0], "cmd=init pmi_version=1 pmi_subversion=1");
    // The first round's value (a key of 1000 bytes and its value "v": 1009
    // bytes) in chunks of 511 bytes (1022 characters: a value of Hydra's
    // vallen_max counts its NUL), then their count.
    std::string hex = "e8030000";
    for (int i = 0; i < 1000; ++i)
        hex += "6b";
    hex += "0100000076";
    const std::string put = "cmd=put kvsname=kvs_test_0 key=ucxasio-1-0";
    EXPECT_EQ(server.lines[3], put + "-0 value=" + hex.substr(0, 1022));
    EXPECT_EQ(server.lines[4], put + "-1 value=" + hex.substr(1022));
    EXPECT_EQ(server.lines[5], put + " value=2");
    EXPECT_EQ(server.lines[6], "cmd=barrier_in");
    EXPECT_EQ(server.lines.back(), "cmd=finalize");
}

// Wrong answers at the start: a refusal, a line that is not PMI-1, a closed
// socket. Each is pmi_failed with the reason.
TEST(PmiStore, ABadStartIsPmiFailedWithTheReason) {
    struct bad_case {
        std::function<reply(const std::string&)> serve;
        std::string reason_holds;
    };
    const std::vector<bad_case> cases = {
        {[](const std::string&) {
             return reply{reply::answer, "cmd=response_to_init rc=-1"};
         },
         "rc=-1"},
        {[](const std::string&) {
             return reply{reply::answer, "HTTP/1.1 400 Bad Request"};
         },
         "not PMI-1"},
        {[](const std::string&) {
             return reply{reply::close, ""};
         },
         "closed"},
    };
    for (const auto& c : cases) {
        fake_server server(c.serve);
        asio::io_context io;
        error_code ec;
        std::string why;
        ucx::pmi_store s(io.get_executor(), server.client_fd, 0, 2, ec, &why);
        EXPECT_EQ(ec, ucx::error::pmi_failed) << why;
        EXPECT_NE(why.find(c.reason_holds), std::string::npos) << why;
    }
}

// A server that goes away during a round (a launcher that died), and one that
// never answers the barrier (a process of the job that never comes): the
// waiting get fails, pmi_failed and store_timeout.
TEST(PmiStore, AServerThatGoesAwayOrAProcessThatNeverComes) {
    for (const bool close : {true, false}) {
        fake_server server([close](const std::string& line) {
            if (line == "cmd=barrier_in")
                return close ? reply{reply::close, ""} : reply{reply::nothing, ""};
            return hydra_alone(line);
        });
        asio::io_context io;
        {
            error_code ec;
            std::string why;
            ucx::pmi_store s(io.get_executor(), server.client_fd, 0, 2, ec, &why);
            ASSERT_FALSE(ec) << why;
            s.set_timeout(500ms);
            ASSERT_FALSE(std::get<0>(pump(io, s.async_set("mine", bytes("v"), tuple_future))));
            auto [e, v] = pump(io, s.async_get("theirs", tuple_future));
            EXPECT_EQ(e, close ? ucx::error::pmi_failed : ucx::error::store_timeout) << e.message();
            // A later get: the conversation is broken, so pmi_failed at once
            // or, while the silent server's round still waits, its timeout.
            auto [e2, v2] = pump(io, s.async_get("theirs", tuple_future));
            EXPECT_TRUE(e2 == ucx::error::pmi_failed || e2 == ucx::error::store_timeout)
                << e2.message();
        }
        // Until the round's thread has ended (at its deadline, for the
        // silent server).
        io.restart();
        io.run();
        server.stop();
        EXPECT_NE(std::find(server.lines.begin(), server.lines.end(), "cmd=barrier_in"),
                  server.lines.end());
        // No goodbye on a broken conversation.
        EXPECT_EQ(std::find(server.lines.begin(), server.lines.end(), "cmd=finalize"),
                  server.lines.end());
    }
}
