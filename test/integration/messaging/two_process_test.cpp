// Tag messaging between two processes, over TCP and shared memory.
#include "child_process.hpp"
#include "test_support.hpp"

using namespace ucx_test;

namespace {

using param = std::tuple<transport, ucx::progress_mode>;

class two_process : public testing::TestWithParam<param> {
protected:
    transport t = std::get<0>(GetParam());
    ucx::progress_mode mode = std::get<1>(GetParam());
};

std::string param_name(const testing::TestParamInfo<param>& info) {
    return to_string(std::get<0>(info.param)) + "_" +
           std::string(ucx::to_string(std::get<1>(info.param)));
}

struct connection {
    connection(transport t, ucx::progress_mode mode)
        : child({UCX_ASIO_TAG_PEER, to_string(t), std::string(ucx::to_string(mode))}),
          ctx(options_for(t)), w(ctx, io, strict_worker_options(mode)) {
        std::string line;
        do
            line = child.read_line();
        while (!line.empty() && line.rfind("ADDRESS ", 0) != 0);
        auto peer = ucx::worker_address::deserialize(from_hex(line.substr(line.find(' ') + 1)));
        child.write_line(to_hex(w.address().serialize()));
        ep = ucx::endpoint(w, peer);
    }

    // Sends `data` with tag 1 and returns what comes back with tag 2.
    std::vector<char> echo(const std::vector<char>& data) {
        std::vector<char> in(data.size() + 1);
        std::optional<ucx::error_code> s, r;
        std::size_t n = 0;
        ucx::tag_t tag = 0;
        ucx::async_tag_recv(w, asio::buffer(in), 2, ucx::tag_mask_full,
                            [&](ucx::error_code ec, std::size_t len, ucx::tag_t t) {
                                r = ec;
                                n = len;
                                tag = t;
                            });
        ucx::async_tag_send(ep, asio::buffer(data), 1,
                            [&](ucx::error_code ec, std::size_t) { s = ec; });
        EXPECT_TRUE(run_until(io, [&] { return s && r; }));
        const ucx::error_code timed_out = asio::error::timed_out;
        EXPECT_FALSE(s.value_or(timed_out)) << s.value_or(timed_out).message();
        EXPECT_FALSE(r.value_or(timed_out)) << r.value_or(timed_out).message();
        EXPECT_EQ(tag, 2u);
        EXPECT_EQ(n, data.size());
        in.resize(n);
        return in;
    }

    void quit() {
        std::optional<ucx::error_code> s;
        ucx::async_tag_send(ep, asio::const_buffer(), 3,
                            [&](ucx::error_code ec, std::size_t) { s = ec; });
        EXPECT_TRUE(run_until(io, [&] { return s.has_value(); }));
    }

    child_process child;
    asio::io_context io;
    ucx::context ctx;
    ucx::worker w;
    ucx::endpoint ep;
};

TEST_P(two_process, echo_sizes_and_many_round_trips) {
    connection c(t, mode);
    std::uint32_t seed = 7;
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{8192},
                             std::size_t{1} << 20, std::size_t{16} << 20}) {
        SCOPED_TRACE("size " + std::to_string(size));
        auto data = pattern(size, seed++);
        EXPECT_EQ(c.echo(data), data);
    }
    for (int i = 0; i < 1000; ++i) {
        auto data = pattern(64, seed++);
        ASSERT_EQ(c.echo(data), data) << "round " << i;
    }
    c.quit();
    EXPECT_EQ(c.child.wait(), 0);
}

INSTANTIATE_TEST_SUITE_P(all, two_process,
                         testing::Combine(testing::Values(transport::tcp, transport::shared_memory),
                                          testing::Values(ucx::progress_mode::event,
                                                          ucx::progress_mode::poll,
                                                          ucx::progress_mode::hybrid)),
                         param_name);

// A SIGKILLed peer: pending and later sends fail with an error; nothing hangs.
TEST(two_process_failure, killed_peer_fails_sends_over_tcp) {
    connection c(transport::tcp, ucx::progress_mode::event);
    auto data = pattern(64, 1);
    ASSERT_EQ(c.echo(data), data);
    c.child.kill_now();
    EXPECT_EQ(c.child.wait(), 128 + SIGKILL);

    std::optional<ucx::error_code> failure;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!failure && std::chrono::steady_clock::now() < deadline) {
        std::optional<ucx::error_code> s;
        ucx::async_tag_send(c.ep, asio::buffer(data), 1,
                            [&](ucx::error_code ec, std::size_t) { s = ec; });
        ASSERT_TRUE(run_until(
            c.io, [&] { return s.has_value(); }, std::chrono::seconds(20)))
            << "a send to a dead peer hung";
        if (*s)
            failure = *s;
        run_until(
            c.io, [] { return false; }, std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(failure.has_value()) << "no error within 20 s of the peer's death";
    EXPECT_NE(*failure, asio::error::operation_aborted);
    EXPECT_FALSE(c.ep.is_open());
    EXPECT_TRUE(c.ep.error());
}

} // namespace
