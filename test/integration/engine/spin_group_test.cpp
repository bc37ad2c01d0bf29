// Polling workers that share one io_context spin in turns (the spin group):
// messages between them complete, and the io_context's timers and posted
// handlers keep running while they spin. No timing is asserted: a worker or
// a timer that starved would leave the test unfinished.
#include "test_support.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <memory>

using namespace ucx_test;

namespace {

using param = std::tuple<transport, ucx::progress_mode>;

std::string param_name(const testing::TestParamInfo<param>& info) {
    return to_string(std::get<0>(info.param)) + "_" +
           std::string(ucx::to_string(std::get<1>(info.param)));
}

// Workers on one io_context connected in a ring: worker i sends to i + 1.
struct ring {
    ring(asio::io_context& io, ucx::context& ctx, const std::vector<ucx::worker_options>& modes) {
        for (const auto& o : modes)
            workers.push_back(std::make_unique<ucx::worker>(ctx, io, o));
        for (std::size_t i = 0; i < workers.size(); ++i)
            next.push_back(std::make_unique<ucx::endpoint>(
                *workers[i], workers[(i + 1) % workers.size()]->address()));
    }
    std::vector<std::unique_ptr<ucx::worker>> workers;
    std::vector<std::unique_ptr<ucx::endpoint>> next;
};

// A token goes round the ring, each worker receiving it and sending it on
// incremented, until `stop()` says so; counts the laps and checks the value.
class token_ring {
public:
    token_ring(ring& r, std::function<bool()> stop) : r_(r), stop_(std::move(stop)) {
        in_.resize(r.workers.size());
        out_.resize(r.workers.size());
    }

    void start() {
        for (std::size_t i = 0; i < r_.workers.size(); ++i)
            receive(i);
        send(0, 0);
    }

    std::uint64_t hops() const { return hops_; }
    bool failed() const { return failed_; }
    bool done() const { return done_ || failed_; }

private:
    void receive(std::size_t i) {
        ucx::async_tag_recv(*r_.workers[i], asio::buffer(&in_[i], sizeof in_[i]), 5,
                            ucx::tag_mask_full,
                            [this, i](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                if (ec || n != sizeof in_[i] || in_[i] != hops_) {
                                    ADD_FAILURE() << "worker " << i << ": " << ec.message()
                                                  << " value " << in_[i] << " expected " << hops_;
                                    failed_ = true;
                                    return;
                                }
                                ++hops_;
                                if (stop_()) {
                                    done_ = true;
                                    return;
                                }
                                receive(i);
                                send(i, in_[i] + 1);
                            });
    }
    void send(std::size_t i, std::uint64_t value) {
        out_[i] = value;
        ucx::async_tag_send(*r_.next[i], asio::buffer(&out_[i], sizeof out_[i]), 5,
                            [this](ucx::error_code ec, std::size_t) {
                                if (ec) {
                                    ADD_FAILURE() << "send: " << ec.message();
                                    failed_ = true;
                                }
                            });
    }

    ring& r_;
    std::function<bool()> stop_;
    std::vector<std::uint64_t> in_, out_;
    std::uint64_t hops_ = 0;
    bool failed_ = false;
    bool done_ = false;
};

class spin_group_test : public testing::TestWithParam<param> {
protected:
    ucx::worker_options opts(ucx::progress_mode m) const { return strict_worker_options(m); }
    asio::io_context io;
    ucx::context ctx{options_for(std::get<0>(GetParam()))};
    ucx::progress_mode mode = std::get<1>(GetParam());
};

// Three spinning workers and a timer: the token goes round until the timer
// has fired 20 times (every 2 ms), and a handler posted from another
// thread runs too. Each worker parked (it spun in turns, not alone).
TEST_P(spin_group_test, three_spinning_workers_and_a_timer_share_one_io_context) {
    ring r(io, ctx, {opts(mode), opts(mode), opts(mode)});
    asio::steady_timer timer(io);
    int ticks = 0;
    std::function<void()> tick = [&] {
        timer.expires_after(std::chrono::milliseconds(2));
        timer.async_wait([&](const ucx::error_code& ec) {
            if (!ec && ++ticks < 20)
                tick();
        });
    };
    std::atomic<bool> posted_ran{false};
    token_ring t(r, [&] { return ticks >= 20 && posted_ran.load(); });
    t.start();
    tick();
    std::thread poster([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        asio::post(io, [&] { posted_ran = true; });
    });
    EXPECT_TRUE(run_until(io, [&] { return t.done(); }))
        << "hops " << t.hops() << ", timer ticks " << ticks;
    poster.join();
    EXPECT_FALSE(t.failed());
    EXPECT_EQ(ticks, 20);
    EXPECT_GT(t.hops(), 3u);
    for (auto& w : r.workers)
        EXPECT_GT(w->stats().parks, 0u) << "spun in turns";
}

// An event-mode worker on the same io_context is served between the turns,
// and a spinning worker closed in a handler leaves the group: the others go on.
TEST_P(spin_group_test, a_member_closed_mid_run_leaves_the_others_spinning) {
    ring r(io, ctx, {opts(mode), opts(mode), opts(ucx::progress_mode::event)});
    // A fourth spinning worker with nothing to do but to be closed.
    auto extra = std::make_unique<ucx::worker>(ctx, io, opts(mode));
    std::uint64_t closed_at = 0;
    token_ring* tp = nullptr;
    token_ring t(r, [&] {
        if (tp->hops() == 500 && extra) {
            extra->close();
            extra.reset();
            closed_at = tp->hops();
        }
        return tp->hops() >= 3000;
    });
    tp = &t;
    t.start();
    EXPECT_TRUE(run_until(io, [&] { return t.done(); })) << "hops " << t.hops();
    EXPECT_FALSE(t.failed());
    EXPECT_EQ(closed_at, 500u);
    EXPECT_EQ(t.hops(), 3000u);
    EXPECT_GT(r.workers[0]->stats().parks, 0u);
    EXPECT_EQ(r.workers[2]->stats().parks, 0u) << "an event-mode worker never spins";
}

// Alone on its io_context, a spinning worker spins in its own handler.
TEST_P(spin_group_test, a_worker_alone_on_its_io_context_does_not_park) {
    asio::io_context other;
    ucx::worker a(ctx, io, opts(mode));
    ucx::worker b(ctx, other, opts(mode));
    ucx::endpoint a_to_b(a, b.address()), b_to_a(b, a.address());
    std::uint64_t v = 42, got = 0;
    bool sent = false, received = false;
    ucx::async_tag_recv(b, asio::buffer(&got, sizeof got), 1, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { received = !ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(&v, sizeof v), 1,
                        [&](ucx::error_code ec, std::size_t) { sent = !ec; });
    // One handler of the other io_context per step: a spinning worker's
    // yielded pass is always ready, so poll() would never return.
    EXPECT_TRUE(run_until(io, [&] {
        other.poll_one();
        return sent && received;
    }));
    EXPECT_EQ(got, 42u);
    EXPECT_EQ(a.stats().parks, 0u);
    EXPECT_EQ(b.stats().parks, 0u);
}

INSTANTIATE_TEST_SUITE_P(all, spin_group_test,
                         testing::Combine(testing::Values(transport::tcp, transport::shared_memory),
                                          testing::Values(ucx::progress_mode::poll,
                                                          ucx::progress_mode::hybrid)),
                         param_name);

} // namespace
