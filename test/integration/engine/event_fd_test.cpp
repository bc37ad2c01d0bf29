// A worker's event fd is in the io_context's reactor only while the worker
// sleeps: it joins the reactor after a successful arm and leaves it when the
// wait on it completes. While the worker runs (its handlers are delivered),
// the fd is in no epoll set but UCX's own, so the events UCX signals on it
// cost no more than they do for a program that sleeps on it with poll().
// Read from the kernel's own account: /proc/self/fdinfo of every epoll set
// of this process lists the fds it watches.
#include "test_support.hpp"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace ucx_test;

namespace {

/// The epoll sets of this process that watch `fd` (their fds).
std::vector<int> epoll_sets_watching(int fd) {
    std::vector<int> sets;
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) {
        ADD_FAILURE() << "cannot read /proc/self/fd";
        return sets;
    }
    while (const dirent* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..")
            continue;
        char target[64] = {};
        const std::string link = "/proc/self/fd/" + name;
        if (::readlink(link.c_str(), target, sizeof target - 1) <= 0)
            continue;
        if (std::string(target) != "anon_inode:[eventpoll]")
            continue;
        std::ifstream info("/proc/self/fdinfo/" + name);
        for (std::string line; std::getline(info, line);) {
            std::istringstream words(line);
            std::string key;
            int watched = -1;
            if (words >> key >> watched && key == "tfd:" && watched == fd)
                sets.push_back(std::stoi(name));
        }
    }
    ::closedir(dir);
    return sets;
}

int event_fd_of(const ucx::worker& w) {
    int fd = -1;
    EXPECT_EQ(ucp_worker_get_efd(w.native_handle(), &fd), UCS_OK);
    return fd;
}

class event_fd_test : public testing::TestWithParam<std::tuple<transport, ucx::progress_mode>> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(std::get<0>(GetParam()))};
    ucx::worker_options opts() const { return strict_worker_options(std::get<1>(GetParam())); }
};

TEST_P(event_fd_test, is_in_the_reactor_only_while_the_worker_sleeps) {
    ucx::worker a(ctx, io, opts());
    ucx::worker b(ctx, io, opts());
    const int afd = event_fd_of(a), bfd = event_fd_of(b);
    ASSERT_GE(afd, 0);
    ASSERT_GE(bfd, 0);
    const auto asleep = [&](int fd) { return epoll_sets_watching(fd).size() == 1; };
    // Opened and idle: each sleeps, its fd in one set (the reactor's).
    ASSERT_TRUE(run_until(io, [&] { return asleep(afd) && asleep(bfd); }));
    EXPECT_EQ(epoll_sets_watching(afd), epoll_sets_watching(bfd)) << "the same reactor";

    // Ping-pong: each receive's handler runs in its worker's pass. From the
    // second round on every operation starts in such a handler, so each pass
    // follows a wake-up of the fd, which took it out of the reactor. (The
    // first round's operations start outside the workers' passes, which then
    // run while the wait of the first sleep may still be queued.)
    ucx::endpoint to_b(a, b.address());
    ucx::endpoint to_a(b, a.address());
    struct side {
        ucx::worker& w;
        int fd;
        ucx::endpoint& out;
        ucx::tag_t in_tag, out_tag;
        int received = 0;
        std::uint64_t got = 0;
    };
    side pinger{a, afd, to_b, 2, 1}, ponger{b, bfd, to_a, 1, 2};
    constexpr int rounds = 200;
    const std::uint64_t token = 42;
    int registered_in_handler = 0;
    const auto send = [&](side& s) {
        ucx::async_tag_send(s.out, asio::buffer(&token, sizeof token), s.out_tag,
                            [](ucx::error_code ec, std::size_t) { EXPECT_FALSE(ec); });
    };
    std::function<void(side&)> post_recv = [&](side& s) {
        ucx::async_tag_recv(s.w, asio::buffer(&s.got, sizeof s.got), s.in_tag, ucx::tag_mask_full,
                            [&, me = &s](ucx::error_code ec, std::size_t, ucx::tag_t) {
                                ASSERT_FALSE(ec);
                                if (me->received++ > 0 && !epoll_sets_watching(me->fd).empty())
                                    ++registered_in_handler;
                                if (me->received < rounds)
                                    post_recv(*me);
                                // Every ping is answered; every pong but the last
                                // is followed by the next ping.
                                if (me == &ponger || me->received < rounds)
                                    send(*me);
                            });
    };
    post_recv(ponger);
    post_recv(pinger);
    send(pinger);
    ASSERT_TRUE(run_until(io, [&] { return pinger.received == rounds; }));
    EXPECT_EQ(ponger.received, rounds);
    EXPECT_EQ(ponger.got, token);
    EXPECT_EQ(pinger.got, token);
    EXPECT_EQ(registered_in_handler, 0)
        << "a handler ran while its worker's fd was in an epoll set besides UCX's";

    // Idle again: asleep, each fd back in the reactor, once.
    EXPECT_TRUE(run_until(io, [&] { return asleep(afd) && asleep(bfd); }));
    if (std::get<1>(GetParam()) == ucx::progress_mode::event) {
        // Event mode sleeps between the messages (hybrid mode may spin through).
        EXPECT_GT(a.stats().wakeups + b.stats().wakeups, 0u) << "the workers slept and were woken";
    }
}

INSTANTIATE_TEST_SUITE_P(
    all, event_fd_test,
    testing::Combine(testing::Values(transport::tcp, transport::shared_memory),
                     testing::Values(ucx::progress_mode::event, ucx::progress_mode::hybrid)),
    [](const auto& info) {
        return to_string(std::get<0>(info.param)) +
               (std::get<1>(info.param) == ucx::progress_mode::event ? "_event" : "_hybrid");
    });

} // namespace
