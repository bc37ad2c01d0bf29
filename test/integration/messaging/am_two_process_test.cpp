// Active messages between two processes, over TCP and shared memory.
#include "child_process.hpp"
#include "test_support.hpp"

#include <csignal>
#include <cstring>

using namespace ucx_test;

namespace {

struct peer {
    peer(transport t, const std::string& scenario, std::size_t bound = std::size_t(64) << 20)
        : child({UCX_ASIO_AM_PEER, to_string(t), scenario}), ctx(context_options(t)),
          w(ctx, io, worker_options(bound)) {
        std::string line;
        do
            line = child.read_line();
        while (!line.empty() && line.rfind("ADDRESS ", 0) != 0);
        auto address = ucx::worker_address::deserialize(from_hex(line.substr(line.find(' ') + 1)));
        child.write_line(to_hex(w.address().serialize()));
        ep = ucx::endpoint(w, address);
    }

    static ucx::context_options context_options(transport t) {
        auto o = options_for(t);
        o.config["KEEPALIVE_INTERVAL"] = "500ms";
        return o;
    }
    static ucx::worker_options worker_options(std::size_t bound) {
        auto o = strict_worker_options(ucx::progress_mode::event);
        o.am_queue_bytes = bound;
        return o;
    }

    child_process child;
    asio::io_context io;
    ucx::context ctx;
    ucx::worker w;
    ucx::endpoint ep;
};

class am_two_process : public testing::TestWithParam<transport> {};

// Sizes from 0 B to 64 MiB with headers, echoed by the other process through
// the message's reply endpoint; content checked.
TEST_P(am_two_process, echo_sizes) {
    peer p(GetParam(), "echo");
    std::uint32_t seed = 3;
    const std::size_t max_header = ucx::max_am_header(p.w);
    for (std::size_t size : {std::size_t(0), std::size_t(1), std::size_t(4096), std::size_t(200000),
                             std::size_t(8) << 20, std::size_t(64) << 20}) {
        SCOPED_TRACE("size " + std::to_string(size));
        const auto data = pattern(size, ++seed);
        const auto header = pattern(std::min<std::size_t>(seed * 37, max_header), seed);
        std::optional<ucx::error_code> s;
        ucx::async_am_send(p.ep, 1, asio::buffer(header), asio::buffer(data),
                           [&](ucx::error_code ec, std::size_t) { s = ec; });
        std::optional<ucx::error_code> r;
        ucx::am_message m;
        ucx::async_am_recv(p.w, 2, [&](ucx::error_code ec, ucx::am_message msg) {
            r = ec;
            m = std::move(msg);
        });
        ASSERT_TRUE(run_until(p.io, [&] { return s && r; }));
        ASSERT_FALSE(*s) << s->message();
        ASSERT_FALSE(*r) << r->message();
        ASSERT_EQ(m.size(), data.size());
        if (size > 0) {
            EXPECT_EQ(std::memcmp(m.data().data(), data.data(), data.size()), 0);
        }
        ASSERT_EQ(m.header().size(), header.size());
        if (!header.empty()) {
            EXPECT_EQ(std::memcmp(m.header().data(), header.data(), header.size()), 0);
        }
    }
    std::optional<ucx::error_code> s;
    ucx::async_am_send(p.ep, 99, asio::const_buffer(), asio::const_buffer(),
                       [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(p.io, [&] { return s.has_value(); }));
    EXPECT_EQ(p.child.wait(), 0);
}

// The sender dies while its rendezvous message waits to be fetched (held
// back by the queue bound): the receiver gets the message before it intact,
// then an error for the rendezvous one; no hang, no corrupt data.
TEST_P(am_two_process, sender_killed_during_rendezvous) {
    peer p(GetParam(), "rndv_and_wait", std::size_t(1) << 20);
    // Both messages arrived; the rendezvous data waits at the sender.
    ASSERT_TRUE(run_until(p.io, [&] { return ucx::am_queue(p.w, 3).messages == 2; }));
    p.child.kill_now();
    EXPECT_EQ(p.child.wait(), 128 + SIGKILL);

    std::optional<ucx::error_code> first, second;
    ucx::am_message m1, m2;
    ucx::async_am_recv(p.w, 3, [&](ucx::error_code ec, ucx::am_message m) {
        first = ec;
        m1 = std::move(m);
    });
    ucx::async_am_recv(p.w, 3, [&](ucx::error_code ec, ucx::am_message m) {
        second = ec;
        m2 = std::move(m);
    });
    ASSERT_TRUE(run_until(
        p.io, [&] { return first && second; }, std::chrono::seconds(60)))
        << "a receive from a dead sender hung";
    ASSERT_FALSE(*first) << first->message();
    ASSERT_EQ(m1.size(), std::size_t(2) << 20);
    const char* d = static_cast<const char*>(m1.data().data());
    EXPECT_TRUE(std::all_of(d, d + m1.size(), [](char c) { return c == 's'; }));
    EXPECT_TRUE(*second) << "the rendezvous message of a dead sender must fail";
    EXPECT_NE(*second, asio::error::operation_aborted);
    EXPECT_EQ(m2.size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(all, am_two_process,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const testing::TestParamInfo<transport>& info) {
                             return to_string(info.param);
                         });

} // namespace
