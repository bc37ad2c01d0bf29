// group-bench: this library's collectives against Open MPI's own, in the same
// processes, interleaved. Runs under mpirun:
//
//   mpirun -np 4 group-bench [--rounds R] [--quick] [--mode event|poll|hybrid]
//                            [--yield-cpu|--no-yield-cpu] [--spin-us N] [--only NAME[:BYTES]]
//                            [--run-one] [--stats] [--iterations N]
//   mpirun --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any -np 4 group-bench
//
// The worker polls (--mode poll) and sets worker_options::yield_cpu where
// the node has more ranks than cores (--yield-cpu, --no-yield-cpu force it);
// --spin-us sets the hybrid mode's spin_duration; --only runs one collective
// (barrier, broadcast, allreduce or allgather), or one size of it
// (broadcast:8); --stats prints each rank's worker_stats at the end;
// --iterations sets the calls per round of every case. The group's
// collectives run back to back as an Asio program runs them, each handler
// starting the next inside the io_context; --run-one starts each from
// outside, between run_one() calls.
//
// MPI starts the processes and gives the ranks; the ucx::group joins through
// a file store in a directory rank 0 makes (its path is broadcast with MPI).
// For each case, each round times `iterations` back-to-back operations of MPI
// and then of the group (both after a barrier); a round's time is the slowest
// rank's mean per operation; the table shows the best round of each and
// their ratio (group / MPI: below 1 the group is faster).
#include <ucx/asio.hpp>

#include <mpi.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

struct bench_case {
    std::string name;
    std::size_t bytes; // per rank
    int iterations;
};

/// Runs the io_context until `done`.
void run_until(asio::io_context& io, const bool& done) {
    io.restart();
    while (!done)
        io.run_one();
}

/// Aborts the job if a collective failed.
void check_ok(int rank, const ucx::error_code& ec) {
    if (ec) {
        std::fprintf(stderr, "rank %d: %s\n", rank, ec.message().c_str());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/// `left` collectives made by `start`, each started by the previous one's
/// handler: a lambda holding one pointer, as an application writes it.
template <class Start>
struct chain {
    const Start& start;
    int rank;
    int left;
    bool finished = false;

    void step() {
        start([this](ucx::error_code ec) { done(ec); });
    }
    void done(const ucx::error_code& ec) {
        check_ok(rank, ec);
        if (--left == 0)
            finished = true;
        else
            step();
    }
};

} // namespace

// The calls of each side go through a function of its own, never inlined:
// tools/group-callgrind.sh reads their inclusive instruction counts.
extern "C" [[gnu::noinline]] void group_bench_mpi_calls(const std::function<void(int)>* ops,
                                                        int n) {
    (*ops)(n);
}
extern "C" [[gnu::noinline]] void group_bench_group_calls(const std::function<void(int)>* ops,
                                                          int n) {
    (*ops)(n);
}

namespace {

using calls_fn = void (*)(const std::function<void(int)>*, int);

/// The slowest rank's mean seconds per call over `n` calls made by `ops(n)`
/// through `calls`.
double time_it(int n, const std::function<void(int)>& ops, calls_fn calls) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = clock_type::now();
    calls(&ops, n);
    const double mine = std::chrono::duration<double>(clock_type::now() - start).count() / n;
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

std::string format_time(double s) {
    char buf[32];
    if (s < 1e-5)
        std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
    else if (s < 1e-3)
        std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
    else
        std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    return buf;
}

std::string format_size(std::size_t b) {
    if (b >= (1u << 20))
        return std::to_string(b >> 20) + " MiB";
    if (b >= 1024)
        return std::to_string(b >> 10) + " KiB";
    return std::to_string(b) + " B";
}

} // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = 10;
    bool quick = false;
    bool stats = false;          // each rank's worker_stats at the end, on stderr
    bool run_one = false;        // each collective started between two run_one() calls
    int spin_us = -1;            // hybrid mode's spin_duration (-1: the default)
    std::string only;            // a collective's name: that one only
    int iterations_override = 0; // calls per round (0: each case's own)
    // Poll mode by default, as Open MPI polls. With more ranks on the node
    // than cores (the usual test machine), the worker yields the processor
    // while it spins, as Open MPI does when oversubscribed: a rank that spins
    // without yielding holds the core its peer needs.
    ucx::progress_mode mode = ucx::progress_mode::poll;
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const long local_ranks = local ? std::atol(local) : size;
    bool yield_cpu = local_ranks > static_cast<long>(std::thread::hardware_concurrency());
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            const auto m = ucx::parse_progress_mode(argv[++i]);
            if (!m) {
                std::fprintf(stderr, "group-bench: --mode event|poll|hybrid\n");
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            mode = *m;
            continue;
        }
        if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = std::max(1, std::atoi(argv[++i]));
        else if (std::strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (std::strcmp(argv[i], "--yield-cpu") == 0)
            yield_cpu = true;
        else if (std::strcmp(argv[i], "--no-yield-cpu") == 0)
            yield_cpu = false;
        else if (std::strcmp(argv[i], "--run-one") == 0)
            run_one = true;
        else if (std::strcmp(argv[i], "--stats") == 0)
            stats = true;
        else if (std::strcmp(argv[i], "--spin-us") == 0 && i + 1 < argc)
            spin_us = std::atoi(argv[++i]);
        else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (std::strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
            iterations_override = std::max(1, std::atoi(argv[++i]));
    }

    // The store's directory, made by rank 0.
    char dir[256] = {};
    if (rank == 0) {
        const auto p = std::filesystem::temp_directory_path() /
                       ("ucx-asio-group-bench-" + std::to_string(getpid()));
        std::filesystem::create_directories(p);
        std::snprintf(dir, sizeof dir, "%s", p.c_str());
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

    asio::io_context io;
    ucx::file_store store(io.get_executor(), dir);
    store.set_timeout(std::chrono::seconds(60));
    ucx::context ctx;
    ucx::worker_options wo;
    wo.mode = mode;
    wo.yield_cpu = yield_cpu;
    if (spin_us >= 0)
        wo.spin_duration = std::chrono::microseconds(spin_us);
    ucx::worker w(ctx, io, wo);
    std::optional<ucx::group> group;
    bool done = false;
    ucx::group_options o;
    o.rank = rank;
    o.size = size;
    o.name = "bench";
    ucx::async_join(w, store, o, [&](ucx::error_code ec, ucx::group g) {
        if (ec) {
            std::fprintf(stderr, "rank %d: join: %s\n", rank, ec.message().c_str());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        group.emplace(std::move(g));
        done = true;
    });
    run_until(io, done);
    ucx::group& g = *group;

    // `n` collectives started by `start(handler)`. By default as an Asio
    // program runs them: each one's handler starts the next, inside the
    // io_context (as a coroutine's loop does). With --run-one, each is
    // started from outside, between two io_context::run_one() calls.
    const auto ucx_ops = [&](auto start) -> std::function<void(int)> {
        return [&, start](int n) {
            bool finished = false;
            if (run_one) {
                for (int i = 0; i < n; ++i) {
                    finished = false;
                    start([&](ucx::error_code ec) {
                        check_ok(rank, ec);
                        finished = true;
                    });
                    run_until(io, finished);
                }
                return;
            }
            chain<decltype(start)> c{start, rank, n};
            asio::post(io, [&c] { c.step(); });
            run_until(io, c.finished);
        };
    };
    const auto mpi_ops = [](std::function<void()> op) {
        return [op](int n) {
            for (int i = 0; i < n; ++i)
                op();
        };
    };

    const int scale = quick ? 10 : 1;
    const std::vector<bench_case> cases = {
        {"barrier", 0, 2000 / scale},        {"broadcast", 8, 20000 / scale},
        {"broadcast", 1 << 20, 100 / scale}, {"allreduce", 8, 2000 / scale},
        {"allreduce", 1 << 20, 50 / scale},  {"allreduce", 64 << 20, quick ? 1 : 5},
        {"allgather", 8, 2000 / scale},      {"allgather", 1 << 20, 50 / scale},
    };
    if (rank == 0) {
        std::printf("group-bench: %d ranks, best of %d rounds, worker progress mode %s%s\n", size,
                    rounds, std::string(ucx::to_string(mode)).c_str(),
                    yield_cpu ? ", yield_cpu" : "");
        std::printf("| collective | size per rank | Open MPI | ucx::group | ratio |\n");
        std::printf("|---|---|---|---|---|\n");
    }
    for (const auto& c : cases) {
        if (!only.empty() && only != c.name && only != c.name + ":" + std::to_string(c.bytes))
            continue;
        const int iterations = iterations_override > 0 ? iterations_override : c.iterations;
        const std::size_t count = c.bytes / sizeof(float);
        std::vector<float> in(std::max<std::size_t>(count, 1), 1.0f), out(in.size() * size);
        std::vector<char> bytes(std::max<std::size_t>(c.bytes, 1));
        std::function<void()> mpi_op;
        std::function<void(int)> ucx_run;
        if (c.name == "barrier") {
            mpi_op = [] { MPI_Barrier(MPI_COMM_WORLD); };
            ucx_run = ucx_ops([&](auto h) { g.async_barrier(std::move(h)); });
        } else if (c.name == "broadcast") {
            mpi_op = [&] {
                MPI_Bcast(bytes.data(), static_cast<int>(c.bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
            };
            ucx_run = ucx_ops([&](auto h) {
                g.async_broadcast(asio::buffer(bytes.data(), c.bytes), 0, std::move(h));
            });
        } else if (c.name == "allreduce") {
            mpi_op = [&] {
                MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                              MPI_COMM_WORLD);
            };
            ucx_run = ucx_ops([&](auto h) {
                g.async_allreduce(std::span<const float>(in.data(), count),
                                  std::span<float>(out.data(), count), ucx::reduce_op::sum,
                                  std::move(h));
            });
        } else {
            mpi_op = [&] {
                MPI_Allgather(in.data(), static_cast<int>(count), MPI_FLOAT, out.data(),
                              static_cast<int>(count), MPI_FLOAT, MPI_COMM_WORLD);
            };
            ucx_run = ucx_ops([&](auto h) {
                g.async_allgather(asio::buffer(in.data(), c.bytes),
                                  asio::buffer(out.data(), c.bytes * size), std::move(h));
            });
        }
        const auto mpi_run = mpi_ops(mpi_op);
        // Warm-up (connections, registrations), then the rounds.
        time_it(1, mpi_run, group_bench_mpi_calls);
        time_it(1, ucx_run, group_bench_group_calls);
        double best_mpi = std::numeric_limits<double>::max(), best_ucx = best_mpi;
        for (int r = 0; r < rounds; ++r) {
            best_mpi = std::min(best_mpi, time_it(iterations, mpi_run, group_bench_mpi_calls));
            best_ucx = std::min(best_ucx, time_it(iterations, ucx_run, group_bench_group_calls));
        }
        if (rank == 0)
            std::printf("| %s | %s | %s | %s | %.2f |\n", c.name.c_str(),
                        c.name == "barrier" ? "-" : format_size(c.bytes).c_str(),
                        format_time(best_mpi).c_str(), format_time(best_ucx).c_str(),
                        best_ucx / best_mpi);
        std::fflush(stdout);
    }

    if (stats) {
        const auto st = w.stats();
        std::fprintf(stderr,
                     "rank %d: passes %zu, progress calls %zu, arms %zu (busy %zu), wake-ups %zu, "
                     "yields %zu, processor yields %zu, back-offs %zu, completions %zu\n",
                     rank, st.passes, st.progress_calls, st.arms, st.arm_busy, st.wakeups,
                     st.yields, st.cpu_yields, st.backoffs, st.completions);
    }
    done = false;
    g.async_close([&](ucx::error_code) { done = true; });
    run_until(io, done);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        std::filesystem::remove_all(dir);
    MPI_Finalize();
    return 0;
}
