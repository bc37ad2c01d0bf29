// pipe_pingpong: the operating system's wake-up floor. Two processes bounce an
// 8-byte message over a pair of pipes, each sleeping in read() until the other
// writes: the cost every event-driven transport pays per message when its
// thread sleeps between messages.
//
//   pipe_pingpong [--iters N] [--warmup N] [--size BYTES] [--format table|csv]
//
// Prints the one-way latency (half the round trip): median, p99, average.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

bool full_io(bool writing, int fd, char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t r = writing ? ::write(fd, p, n) : ::read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

} // namespace

int main(int argc, char** argv) {
    std::size_t iters = 20000, warmup = 1000, size = 8;
    bool csv = false;
    for (int i = 1; i < argc; i += 2) {
        const std::string a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (a == "--format" && v) {
            csv = std::strcmp(v, "csv") == 0;
        } else if ((a == "--iters" || a == "--warmup" || a == "--size") && v) {
            char* end = nullptr;
            const unsigned long long n = std::strtoull(v, &end, 10);
            if (*end != '\0' || (a == "--size" && (n == 0 || n > 65536))) {
                std::fprintf(stderr, "pipe_pingpong: bad value for %s\n", a.c_str());
                return 2;
            }
            (a == "--iters" ? iters : a == "--warmup" ? warmup : size) = n;
        } else {
            std::fprintf(stderr,
                         "usage: pipe_pingpong [--iters N] [--warmup N] [--size BYTES<=65536] "
                         "[--format table|csv]\n");
            return 2;
        }
    }
    int ping[2], pong[2];
    if (::pipe(ping) != 0 || ::pipe(pong) != 0) {
        std::perror("pipe_pingpong: pipe");
        return 1;
    }
    const std::size_t total = warmup + iters;
    const pid_t pid = ::fork();
    if (pid < 0) {
        std::perror("pipe_pingpong: fork");
        return 1;
    }
    std::vector<char> buf(size, 'x');
    if (pid == 0) {
        for (std::size_t k = 0; k < total; ++k)
            if (!full_io(false, ping[0], buf.data(), size) ||
                !full_io(true, pong[1], buf.data(), size))
                ::_exit(1);
        ::_exit(0);
    }
    std::vector<double> one_way;
    one_way.reserve(iters);
    for (std::size_t k = 0; k < total; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!full_io(true, ping[1], buf.data(), size) ||
            !full_io(false, pong[0], buf.data(), size)) {
            std::fprintf(stderr, "pipe_pingpong: the peer went away\n");
            return 1;
        }
        const auto t1 = std::chrono::steady_clock::now();
        if (k >= warmup)
            one_way.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::sort(one_way.begin(), one_way.end());
    const double median = one_way.empty() ? 0 : one_way[one_way.size() / 2];
    const double p99 =
        one_way.empty() ? 0 : one_way[std::min(one_way.size() - 1, one_way.size() * 99 / 100)];
    const double avg = one_way.empty() ? 0
                                       : std::accumulate(one_way.begin(), one_way.end(), 0.0) /
                                             static_cast<double>(one_way.size());
    if (csv)
        std::printf("pipe,pingpong,event,-,%zu,%zu,1,%.4f,%.4f,%.4f,,,,\n", size, iters, median,
                    p99, avg);
    else
        std::printf("pipe ping-pong, %zu B, %zu round trips: one-way median %.3f us, p99 %.3f us, "
                    "average %.3f us\n",
                    size, iters, median, p99, avg);
    return 0;
}
