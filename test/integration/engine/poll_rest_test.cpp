// A `poll` worker spins for the operations someone waits for, and only for
// them: the standing waits of the library and of the application (an
// endpoint's error watch, an accept, a group's connections) let it sleep on
// its event fd. A worker that spun for them would keep a core busy for as
// long as a connection is open, and a run_one() loop would get its thread
// back only at the end of each spin slice.
#include "test_support.hpp"

#include <ucx/asio.hpp>

#include <optional>

using namespace ucx_test;

namespace {

constexpr auto rest = std::chrono::milliseconds(300);

/// Progress calls made while `io` runs for `rest`.
std::size_t progress_calls_at_rest(asio::io_context& io, const std::vector<ucx::worker*>& ws) {
    std::size_t before = 0, after = 0;
    for (auto* w : ws)
        before += w->stats().progress_calls;
    io.restart();
    io.run_for(rest);
    for (auto* w : ws)
        after += w->stats().progress_calls;
    return after - before;
}

TEST(poll_rest, standing_waits_let_a_poll_worker_sleep_and_a_receive_does_not) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker a(ctx, io, strict_worker_options(ucx::progress_mode::poll));
    ucx::worker b(ctx, io, strict_worker_options(ucx::progress_mode::poll));
    ucx::listener acc(b, {asio::ip::make_address("127.0.0.1"), 0});
    std::optional<ucx::endpoint> accepted, connected;
    acc.async_accept([&](ucx::error_code ec, ucx::endpoint ep) {
        EXPECT_FALSE(ec) << ec.message();
        accepted.emplace(std::move(ep));
    });
    ucx::async_connect(a, "127.0.0.1", std::to_string(acc.local_endpoint().port()),
                       [&](ucx::error_code ec, ucx::endpoint ep) {
                           EXPECT_FALSE(ec) << ec.message();
                           connected.emplace(std::move(ep));
                       });
    ASSERT_TRUE(run_until(io, [&] { return connected.has_value(); }));
    ucx::endpoint& ab = *connected;
    ASSERT_TRUE(run_until(io, [&] { return accepted.has_value(); }));

    // The standing waits: a second accept, and each side watches its endpoint.
    std::optional<ucx::error_code> watch_a, watch_b, second_accept;
    ab.async_wait_error([&](ucx::error_code ec) { watch_a = ec; });
    accepted->async_wait_error([&](ucx::error_code ec) { watch_b = ec; });
    acc.async_accept([&](ucx::error_code ec, ucx::endpoint) { second_accept = ec; });
    // Traffic while they stand: the workers progress, then come to rest.
    std::uint64_t hello = 1, got = 0;
    bool first = false;
    ucx::async_tag_recv(b, asio::buffer(&got, sizeof got), 1, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) {
                            EXPECT_FALSE(ec);
                            first = true;
                        });
    ucx::async_tag_send(ab, asio::buffer(&hello, sizeof hello), 1,
                        [](ucx::error_code ec, std::size_t) { EXPECT_FALSE(ec); });
    ASSERT_TRUE(run_until(io, [&] { return first; }));
    EXPECT_EQ(got, hello);
    EXPECT_EQ(a.pending_operations(), 1u);
    EXPECT_EQ(b.pending_operations(), 2u);

    const std::size_t resting = progress_calls_at_rest(io, {&a, &b});
    EXPECT_FALSE(watch_a || watch_b || second_accept);

    // A receive someone waits for: the worker spins for it.
    std::optional<ucx::error_code> received;
    std::uint64_t value = 0;
    ucx::async_tag_recv(b, asio::buffer(&value, sizeof value), 2, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { received = ec; });
    const std::size_t spinning = progress_calls_at_rest(io, {&a, &b});
    EXPECT_FALSE(received);
    std::cout << "progress calls in " << rest.count() << " ms: " << resting
              << " with standing waits only, " << spinning << " with a receive pending"
              << std::endl;
    // Sleeping costs a handful of calls per wake-up; spinning, one per
    // tens of nanoseconds for the whole time.
    EXPECT_GT(spinning, 20 * (resting + 1));

    ucx::async_tag_send(ab, asio::buffer(&hello, sizeof hello), 2,
                        [](ucx::error_code ec, std::size_t) { EXPECT_FALSE(ec); });
    ASSERT_TRUE(run_until(io, [&] { return received.has_value(); }));
    EXPECT_FALSE(*received);
    EXPECT_EQ(value, hello);
}

TEST(poll_rest, a_joined_group_at_rest_sleeps) {
    ucx::worker_options wo = group_worker_options();
    wo.mode = ucx::progress_mode::poll;
    local_ranks ranks(3, "rest", wo);
    ASSERT_TRUE(ranks.joined);
    auto& io = ranks.io;
    auto& groups = ranks.groups;
    // Every connection made, and used once.
    std::vector<std::optional<ucx::error_code>> done(3);
    for (int i = 0; i < 3; ++i)
        groups[i].async_barrier([&, i](ucx::error_code ec) { done[i] = ec; });
    ASSERT_TRUE(run_until(io, [&] { return done[0] && done[1] && done[2]; }));
    for (const auto& d : done)
        EXPECT_FALSE(*d);

    std::vector<ucx::worker*> ws;
    for (auto& w : ranks.workers)
        ws.push_back(w.get());
    const std::size_t resting = progress_calls_at_rest(io, ws);

    // The same group with a collective waiting for a rank that does not come.
    std::vector<std::optional<ucx::error_code>> waiting(2);
    for (int i = 0; i < 2; ++i)
        groups[i].async_barrier([&, i](ucx::error_code ec) { waiting[i] = ec; });
    const std::size_t spinning = progress_calls_at_rest(io, ws);
    std::cout << "progress calls in " << rest.count() << " ms: " << resting << " at rest, "
              << spinning << " with a barrier waiting" << std::endl;
    EXPECT_GT(spinning, 20 * (resting + 1));
    groups[2].async_barrier([](ucx::error_code) {});
    ASSERT_TRUE(run_until(io, [&] { return waiting[0] && waiting[1]; }));
    EXPECT_FALSE(*waiting[0]);
    EXPECT_FALSE(*waiting[1]);
}

} // namespace
