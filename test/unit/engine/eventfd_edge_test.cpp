// The progress engine's ordering rule (arm the worker, then put the event fd
// in the reactor and queue the wait; take it out when the wait completes),
// checked with a plain Linux eventfd (no UCX): Asio's epoll reactor
// registers descriptors edge-triggered (EPOLLET) and async_wait is not
// speculative. What that means for a wait queued after the edge, on a
// descriptor that stays registered, with this Boost (1.81), is pinned down by
// the first tests (see the comment on
// LateWaitOnStillReadableFdCompletesWithThisAsio); what a fresh registration
// sees, by FreshRegistrationReportsAnFdAlreadyReadable. The last tests drive
// the real progress_fsm with an eventfd backend whose arm() drains the fd,
// and check that no signal is lost.
#include "engine/progress_fsm.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using descriptor = asio::posix::stream_descriptor;

int make_eventfd() {
    const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        ADD_FAILURE() << "eventfd: " << errno;
    return fd;
}

void signal_fd(int fd) {
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
}

// Reads the eventfd dry; returns the counter (0 if it was not readable).
std::uint64_t drain_fd(int fd) {
    std::uint64_t v = 0;
    if (::read(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v))
        return 0;
    return v;
}

bool readable_now(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// Lets the reactor run epoll_wait for a while with no wait queued on the fd.
void run_reactor_idle(asio::io_context& io, std::chrono::milliseconds d) {
    asio::steady_timer t(io, d);
    t.async_wait([](const boost::system::error_code&) {});
    io.restart();
    io.run();
}

// Registers the fd with the reactor and completes one wait/signal/read cycle.
void warm_up(asio::io_context& io, descriptor& sd, int fd) {
    bool fired = false;
    sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code& ec) {
        EXPECT_FALSE(ec);
        fired = true;
    });
    signal_fd(fd);
    io.restart();
    io.run_for(1s);
    ASSERT_TRUE(fired);
    EXPECT_EQ(drain_fd(fd), 1u);
    EXPECT_FALSE(readable_now(fd));
}

// (a) "Late wait": the edge fires and the reactor's epoll_wait reports it while
// no wait is queued on the descriptor (Asio drops that event: no operation to
// complete), then async_wait(wait_read) is queued with the fd still readable.
//
// A reading of the reactor's edge-triggered registration expects this edge
// to be lost. Observed on this
// machine with Boost 1.81 (Asio 1.26) and its default epoll reactor: it is NOT
// lost, the late wait completes. The reason is in
// boost/asio/detail/impl/epoll_reactor.ipp, epoll_reactor::start_op: when a
// non-speculative operation (async_wait is one) is queued on an empty queue,
// Asio re-issues epoll_ctl(EPOLL_CTL_MOD) with the same EPOLLET event mask,
// and the kernel re-evaluates the fd's readiness on MOD, reporting a fresh
// edge if it is readable (RawEpollModRearmsAnEdgeTriggeredFd shows the kernel
// side). So with this Asio a late wait is only missed when the fd stops being
// readable before the wait is queued - e.g. when something (ucp_worker_arm)
// drains it. The engine does not rely on the MOD: its fd is in the reactor
// only while it sleeps, and joins it after the arm, and a fresh registration
// (EPOLL_CTL_ADD) reads the readiness by the kernel's own rule
// (FreshRegistrationReportsAnFdAlreadyReadable).
TEST(EventfdEdge, LateWaitOnStillReadableFdCompletesWithThisAsio) {
    asio::io_context io;
    const int fd = make_eventfd();
    descriptor sd(io, fd);
    warm_up(io, sd, fd);

    signal_fd(fd);
    run_reactor_idle(io, 50ms); // epoll_wait reports the edge; nothing is queued on sd
    ASSERT_TRUE(readable_now(fd)) << "the eventfd counter is still non-zero";

    bool fired = false;
    sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code&) { fired = true; });
    io.restart();
    io.run_for(200ms);
    EXPECT_TRUE(fired) << "the late wait did not complete: the edge was lost (Asio did "
                          "not re-arm the fd when the wait was queued)";
    EXPECT_EQ(drain_fd(fd), 1u);
}

// The same without the reactor polling in between: the edge is still in epoll's
// ready list when the wait is queued, so it completes in any case.
TEST(EventfdEdge, EdgeNotYetPolledCompletesALateWait) {
    asio::io_context io;
    const int fd = make_eventfd();
    descriptor sd(io, fd);
    warm_up(io, sd, fd);

    signal_fd(fd); // no epoll_wait between this and the async_wait below
    bool fired = false;
    sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code&) { fired = true; });
    io.restart();
    io.run_for(200ms);
    EXPECT_TRUE(fired);
    EXPECT_EQ(drain_fd(fd), 1u);
}

// What a late wait does lose: an fd drained (as ucp_worker_arm consumes the
// events of its fd) after the edge and before the wait is queued. Readiness is
// gone, so only a new signal wakes the wait.
TEST(EventfdEdge, LateWaitAfterDrainWaitsForTheNextSignal) {
    asio::io_context io;
    const int fd = make_eventfd();
    descriptor sd(io, fd);
    warm_up(io, sd, fd);

    signal_fd(fd);
    run_reactor_idle(io, 20ms);
    EXPECT_EQ(drain_fd(fd), 1u);

    bool fired = false;
    sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code&) { fired = true; });
    io.restart();
    io.run_for(200ms);
    EXPECT_FALSE(fired);
    signal_fd(fd);
    io.restart();
    io.run_for(1s);
    EXPECT_TRUE(fired);
}

// The engine's order: the fd is drained (armed) while in no epoll set, an
// event comes, and only then does the fd join the reactor (epoll_ctl ADD,
// through assign) and the wait is queued. The registration reads the fd's
// readiness as it is made: the wait completes without a new signal. Taken
// out again (release: EPOLL_CTL_DEL, the fd stays open), and added again with
// nothing to read, the wait waits for the next signal.
TEST(EventfdEdge, FreshRegistrationReportsAnFdAlreadyReadable) {
    asio::io_context io;
    const int fd = make_eventfd();
    descriptor sd(io);
    for (int round = 0; round < 3; ++round) {
        EXPECT_EQ(drain_fd(fd), 0u);
        signal_fd(fd); // after the "arm", before the registration
        sd.assign(fd);
        bool fired = false;
        sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code& ec) {
            EXPECT_FALSE(ec);
            fired = true;
        });
        io.restart();
        io.run_for(1s);
        EXPECT_TRUE(fired) << "round " << round;
        EXPECT_EQ(sd.release(), fd);
        EXPECT_EQ(drain_fd(fd), 1u);
    }
    sd.assign(fd);
    bool fired = false;
    sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code&) { fired = true; });
    io.restart();
    io.run_for(50ms);
    EXPECT_FALSE(fired) << "nothing to read: the wait waits";
    signal_fd(fd);
    io.restart();
    io.run_for(1s);
    EXPECT_TRUE(fired);
    sd.release();
    ::close(fd);
}

// The kernel side of the above, without Asio: an EPOLLET registration reports
// an edge once, even while the fd stays readable; EPOLL_CTL_MOD re-arms it.
TEST(EventfdEdge, RawEpollModRearmsAnEdgeTriggeredFd) {
    const int fd = make_eventfd();
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    ASSERT_GE(ep, 0);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.fd = fd;
    ASSERT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    epoll_event out{};
    EXPECT_EQ(::epoll_wait(ep, &out, 1, 0), 0) << "not readable yet";
    signal_fd(fd);
    EXPECT_EQ(::epoll_wait(ep, &out, 1, 0), 1) << "the edge";
    EXPECT_EQ(::epoll_wait(ep, &out, 1, 50), 0) << "edge-triggered: reported once";
    EXPECT_TRUE(readable_now(fd));
    ASSERT_EQ(::epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev), 0);
    EXPECT_EQ(::epoll_wait(ep, &out, 1, 0), 1) << "MOD re-evaluates readiness";
    ::close(ep);
    ::close(fd);
}

// (b) A wait queued before the signal is woken, from this thread or another one.
TEST(EventfdEdge, WaitQueuedFirstIsWoken) {
    asio::io_context io;
    const int fd = make_eventfd();
    descriptor sd(io, fd);
    warm_up(io, sd, fd);

    for (int round = 0; round < 20; ++round) {
        bool fired = false;
        sd.async_wait(descriptor::wait_read, [&](const boost::system::error_code& ec) {
            EXPECT_FALSE(ec);
            fired = true;
        });
        io.restart();
        io.run_for(5ms); // the reactor polls with the wait queued
        EXPECT_FALSE(fired);
        if (round % 2 == 0) {
            signal_fd(fd);
        } else {
            std::thread t([fd] { signal_fd(fd); });
            t.join();
        }
        io.restart();
        io.run_for(1s);
        EXPECT_TRUE(fired) << "round " << round;
        EXPECT_EQ(drain_fd(fd), 1u);
    }
}

// (c) The engine's ordering against the eventfd: queue_wait() puts the fd in
// the reactor and does the real async_wait, as the worker does, and the wait's
// completion takes it out again; arm() reads the eventfd dry (as
// ucp_worker_arm consumes the events of its fd) and answers BUSY when events
// arrived since the last progress. Signals come right after arm, before the
// wait is queued.
class eventfd_engine {
public:
    eventfd_engine(asio::io_context& io, std::uint64_t n)
        : io_(io), fd_(make_eventfd()), sd_(io), n_(n) {}
    ~eventfd_engine() {
        if (sd_.is_open())
            sd_.release();
        ::close(fd_);
    }

    // ---- the backend of run_progress_pass
    std::size_t progress() {
        ++progress_calls;
        const std::uint64_t p = produced_.load();
        const std::uint64_t n = p - consumed;
        consumed = p;
        if (consumed >= n_)
            io_.stop(); // all seen: end run_for early (the engine stays armed)
        return static_cast<std::size_t>(n);
    }
    bool work_pending() const { return consumed < n_; }
    bool submissions_queued() const { return false; }
    void relax() {}
    bool queue_wait() {
        EXPECT_GT(arms_ok.load(), queued_waits) << "a wait queued without a successful arm";
        ++queued_waits;
        if (!sd_.is_open())
            sd_.assign(fd_);
        sd_.async_wait(descriptor::wait_read, [this](const boost::system::error_code& ec) {
            fsm.on_wait_done();
            if (ec)
                return;
            sd_.release();
            ++wakeups;
            if (!fsm.pass_scheduled() && !fsm.in_pass())
                run_pass();
        });
        return true;
    }
    bool arm() {
        drain_fd(fd_);
        if (produced_.load() != consumed) {
            ++busy;
            return true;
        }
        arms_ok.fetch_add(1);
        if (after_arm)
            after_arm();
        return false;
    }
    void post_pass() {
        asio::post(io_, [this] { run_pass(); });
    }
    void post_pass_after(std::chrono::nanoseconds) {
        // Its arm is never busy without events: no back-off here.
        ADD_FAILURE() << "unexpected back-off";
        post_pass();
    }
    void park() {
        // Event mode only: nothing spins, so nothing parks.
        ADD_FAILURE() << "unexpected park";
        post_pass();
    }
    bool stopped() const { return false; }

    // ---- driving
    void run_pass() { ucx::detail::run_progress_pass(fsm, *this); }
    void request() {
        if (fsm.request(ucx::detail::progress_fsm::clock::now()))
            post_pass();
    }
    // The event source: safe from any thread.
    void signal() {
        produced_.fetch_add(1);
        signal_fd(fd_);
    }
    std::uint64_t produced() const { return produced_.load(); }

    ucx::detail::progress_fsm fsm{};
    std::function<void()> after_arm;
    std::uint64_t consumed = 0;
    std::atomic<std::uint64_t> arms_ok{0};
    std::size_t progress_calls = 0, queued_waits = 0, wakeups = 0, busy = 0;

private:
    asio::io_context& io_;
    int fd_;
    descriptor sd_;
    std::uint64_t n_;
    std::atomic<std::uint64_t> produced_{0};
};

constexpr std::uint64_t N = 1000;

TEST(EventfdEdge, EngineSeesEverySignalPostedAfterArm) {
    asio::io_context io;
    eventfd_engine e(io, N);
    e.after_arm = [&] {
        if (e.produced() < N)
            asio::post(io, [&] { e.signal(); });
    };
    e.request();
    const auto start = std::chrono::steady_clock::now();
    io.run_for(2s);
    EXPECT_EQ(e.consumed, N);
    EXPECT_EQ(e.produced(), N);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "the engine stalled";
    // Every signal came while the engine slept armed: each needed a wake-up of the fd.
    EXPECT_GE(e.wakeups, N);
    EXPECT_EQ(e.queued_waits, e.wakeups + 1) << "one wait queued per wake-up, plus the first";
}

TEST(EventfdEdge, EngineSeesEverySignalFromAnotherThreadAfterArm) {
    asio::io_context io;
    eventfd_engine e(io, N);
    std::atomic<bool> stop{false};
    std::thread source([&] {
        std::uint64_t seen_arms = 0;
        for (std::uint64_t i = 0; i < N && !stop.load(); ++i) {
            // Wait for the engine to arm, then signal right after.
            while (e.arms_ok.load() <= seen_arms && !stop.load())
                std::this_thread::yield();
            seen_arms = e.arms_ok.load();
            e.signal();
        }
    });
    e.request();
    io.run_for(2s);
    stop = true;
    source.join();
    EXPECT_EQ(e.produced(), N);
    EXPECT_EQ(e.consumed, N) << "a signal after arm was lost";
}

TEST(EventfdEdge, EngineSeesEverySignalFromAnotherThreadAtRandomTimes) {
    asio::io_context io;
    eventfd_engine e(io, N);
    std::atomic<bool> stop{false};
    std::thread source([&] {
        std::mt19937 rng(42);
        for (std::uint64_t i = 0; i < N && !stop.load(); ++i) {
            e.signal();
            const auto pause = std::uniform_int_distribution<int>(0, 30)(rng);
            if (pause > 20)
                std::this_thread::sleep_for(std::chrono::microseconds(pause));
            else
                for (int k = 0; k < pause * 50; ++k)
                    std::atomic_signal_fence(std::memory_order_seq_cst);
        }
    });
    e.request();
    io.run_for(2s);
    stop = true;
    source.join();
    EXPECT_EQ(e.produced(), N);
    EXPECT_EQ(e.consumed, N) << "a signal was lost";
}

} // namespace
