// group_allreduce: the processes of a job join a ucx::group and allreduce.
//
// Where a process stands comes from its launcher (ucx::detect_environment),
// and so does the store the processes meet in (ucx::plan_store), with no
// variable of this library:
//
//   mpirun -np 4 group_allreduce                      (Open MPI: its PMIx)
//   mpiexec.hydra -n 4 group_allreduce                (MPICH: its PMI-1)
//   torchrun --nproc_per_node 4 --no_python group_allreduce
//                                                      (torchrun's agent store)
//   torchrun --standalone --nproc_per_node 4 --no_python group_allreduce
//                                                      (rank 0 serves the store)
//   UCXASIO_RANK=.. UCXASIO_SIZE=.. UCXASIO_STORE_DIR=/shared/dir group_allreduce
//   UCXASIO_RANK=.. UCXASIO_SIZE=.. UCXASIO_RENDEZVOUS=host:port group_allreduce
//
// The store: a directory (file_store) when UCXASIO_STORE_DIR is set, else the
// rendezvous address (UCXASIO_RENDEZVOUS, or MASTER_ADDR:MASTER_PORT), whose
// TCP store rank 0 serves unless torchrun's agent serves it
// (TORCHELASTIC_USE_AGENT_STORE=True) or UCXASIO_STORE_SERVER=external says
// someone else does (such as torch.distributed's TCPStore); else the PMIx
// launcher's key-value space (pmix_store), or the PMI-1 launcher's
// (pmi_store).
//
// Options:
//   --count N        floats to allreduce (default 1048576)
//   --check          also run every other collective and check its result
//   --loop           allreduce until the group fails, then report how long
//                    the failure took to notice (for fault tests)
//   --peer-timeout MS  the worker's peer timeout (default 5000)
//   --name NAME      the group's name in the store (default group_allreduce)
//   --lazy           connections on first use (group_options::lazy_connections)
//   --metrics ADDRESS:PORT  serve the worker's and the group's metrics to
//                    Prometheus while the job runs, labelled with the rank, at
//                    http://ADDRESS:(PORT + local rank)/metrics (PORT 0: a
//                    port the system picks); each rank prints where
//   --timeout MS     the deadline of each collective after the first
//                    allreduce (and the checks), by which every rank has
//                    started (group::set_timeout; default none)
//   --flight-recorder PREFIX  where each rank writes its flight record when
//                    the group fails: PREFIX<rank>.json
//                    (group_options::flight_recorder_dump); read them all
//                    with ucx-asio-flight
//   --skip-barrier RANK  a fault to diagnose: after the allreduce, every rank
//                    but RANK calls a barrier; RANK waits for the group to
//                    fail instead (docs/guide/flight-recorder.md)
//
// Prints one line per rank: "rank R of N: allreduce of COUNT floats ok, sum S",
// and "rank R: store: ..." (which store, from which variables) on stderr.
// Exit status: 0 when every check passed; 1 when a check failed, the store
// could not be opened (the message names the rank, the address and the
// cause), the join or a collective failed, or, with --loop, once the group
// failed (as a fault test expects), and with --skip-barrier; 2 for a bad option or launch
// environment.
#include <ucx/asio.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

namespace {

struct settings {
    std::size_t count = 1 << 20;
    bool check = false;
    bool loop = false;
    int peer_timeout_ms = 5000;
    std::string name = "group_allreduce";
    bool lazy = false;
    std::string metrics_at;
    int timeout_ms = 0;
    std::string flight_recorder;
    int skip_barrier = -1;
};

int failures = 0;

void expect(bool ok, const ucx::launch_environment& env, const char* what) {
    if (!ok) {
        std::printf("rank %d: %s: WRONG RESULT\n", env.rank, what);
        ++failures;
    }
}

std::vector<char> bytes_of(int rank, std::size_t n) {
    std::vector<char> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<char>((rank * 31 + i * 7) & 0x7f);
    return v;
}

/// Every collective once, each checked against a local computation.
awaitable<void> check_all(ucx::group& g, const ucx::launch_environment& env) {
    const int n = g.size(), r = g.rank();
    co_await g.async_barrier(use_awaitable);

    std::vector<char> b = r == 0 ? bytes_of(0, 100000) : std::vector<char>(100000);
    co_await g.async_broadcast(asio::buffer(b), 0, use_awaitable);
    expect(b == bytes_of(0, 100000), env, "broadcast");

    const std::size_t block = 4096;
    std::vector<char> mine = bytes_of(r, block), all(block * n), expected;
    for (int i = 0; i < n; ++i) {
        auto x = bytes_of(i, block);
        expected.insert(expected.end(), x.begin(), x.end());
    }
    co_await g.async_allgather(asio::buffer(mine), asio::buffer(all), use_awaitable);
    expect(all == expected, env, "allgather");
    std::vector<char> gathered(r == n - 1 ? block * n : 0);
    co_await g.async_gather(asio::buffer(mine), asio::buffer(gathered), n - 1, use_awaitable);
    if (r == n - 1)
        expect(gathered == expected, env, "gather");

    std::vector<std::size_t> sizes(n);
    std::vector<char> vexpected;
    for (int i = 0; i < n; ++i) {
        sizes[i] = static_cast<std::size_t>(i + 1) * 100;
        auto x = bytes_of(i, sizes[i]);
        vexpected.insert(vexpected.end(), x.begin(), x.end());
    }
    std::vector<char> vmine = bytes_of(r, sizes[r]), vall(vexpected.size());
    co_await g.async_allgatherv(asio::buffer(vmine), asio::buffer(vall), sizes, use_awaitable);
    expect(vall == vexpected, env, "allgatherv");

    std::vector<std::int32_t> to(n), from(n);
    for (int j = 0; j < n; ++j)
        to[j] = r * 1000 + j;
    co_await g.async_alltoall(asio::buffer(to), asio::buffer(from), use_awaitable);
    bool ok = true;
    for (int j = 0; j < n; ++j)
        ok = ok && from[j] == j * 1000 + r;
    expect(ok, env, "alltoall");

    for (ucx::reduce_op op :
         {ucx::reduce_op::sum, ucx::reduce_op::prod, ucx::reduce_op::min, ucx::reduce_op::max}) {
        std::vector<std::int64_t> v(1000), want(1000);
        for (std::size_t k = 0; k < v.size(); ++k) {
            v[k] = static_cast<std::int64_t>(r + 1) * (static_cast<std::int64_t>(k % 3) + 1);
            std::int64_t e = static_cast<std::int64_t>(k % 3) + 1, acc = e;
            for (int i = 1; i < n; ++i) {
                const std::int64_t x = (i + 1) * e;
                acc = op == ucx::reduce_op::sum    ? acc + x
                      : op == ucx::reduce_op::prod ? acc * x
                      : op == ucx::reduce_op::min  ? std::min(acc, x)
                                                   : std::max(acc, x);
            }
            want[k] = acc;
        }
        std::vector<std::int64_t> out(1000), root_out(r == 0 ? 1000 : 0);
        co_await g.async_allreduce(std::span<const std::int64_t>(v), std::span<std::int64_t>(out),
                                   op, use_awaitable);
        expect(out == want, env, "allreduce int64");
        co_await g.async_reduce(std::span<const std::int64_t>(v), std::span<std::int64_t>(root_out),
                                op, 0, use_awaitable);
        if (r == 0)
            expect(root_out == want, env, "reduce int64");
    }
    std::vector<double> d(300000, 0.5 * (r + 1));
    co_await g.async_allreduce(std::span<double>(d), ucx::reduce_op::sum, use_awaitable);
    expect(d[0] == 0.25 * n * (n + 1) && d.back() == d[0], env, "allreduce double (ring)");
    std::printf("rank %d of %d: every collective checked\n", r, n);
    std::fflush(stdout);
}

awaitable<void> run(ucx::worker& w, ucx::store& s, ucx::launch_environment env, settings cfg,
                    ucx::metrics_exporter* exporter) {
    ucx::group_options o;
    o.rank = env.rank;
    o.size = env.size;
    o.name = cfg.name;
    o.lazy_connections = cfg.lazy;
    o.flight_recorder_dump = cfg.flight_recorder;
    const auto start = std::chrono::steady_clock::now();
    ucx::group g = co_await ucx::async_join(w, s, o, use_awaitable);
    if (exporter)
        exporter->add(g, "world");
    std::printf("rank %d of %d: joined in %.1f ms\n", g.rank(), g.size(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());

    std::vector<float> v(cfg.count, static_cast<float>(g.rank() + 1));
    co_await g.async_allreduce(std::span<float>(v), ucx::reduce_op::sum, use_awaitable);
    const float sum = static_cast<float>(g.size()) * static_cast<float>(g.size() + 1) / 2;
    expect(v.empty() || (v.front() == sum && v.back() == sum), env, "allreduce");
    std::printf("rank %d of %d: allreduce of %zu floats ok, sum %g\n", g.rank(), g.size(),
                cfg.count, v.empty() ? 0.0 : static_cast<double>(v.front()));
    std::fflush(stdout);

    if (cfg.check)
        co_await check_all(g, env);
    // Every rank has started: the collectives from here on have a deadline.
    g.set_timeout(std::chrono::milliseconds(cfg.timeout_ms));

    if (cfg.skip_barrier >= 0) {
        ucx::error_code ec;
        if (g.rank() == cfg.skip_barrier) {
            std::printf("rank %d: skipping the barrier\n", g.rank());
            std::fflush(stdout);
            co_await g.async_wait_failure(asio::redirect_error(use_awaitable, ec));
        } else {
            co_await g.async_barrier(asio::redirect_error(use_awaitable, ec));
        }
        std::printf("rank %d: group failed: %s\n", g.rank(),
                    ec ? ec.message().c_str() : "no failure");
        std::fflush(stdout);
        ++failures;
        co_return;
    }
    if (cfg.loop) {
        std::printf("rank %d: looping\n", g.rank());
        std::fflush(stdout);
        ucx::error_code ec;
        auto last = std::chrono::steady_clock::now();
        while (!ec) {
            last = std::chrono::steady_clock::now();
            co_await g.async_allreduce(std::span<float>(v), ucx::reduce_op::max,
                                       asio::redirect_error(use_awaitable, ec));
        }
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - last)
                            .count();
        std::printf("rank %d: group failed after %lld ms: %s\n", g.rank(),
                    static_cast<long long>(ms), ec.message().c_str());
        std::fflush(stdout);
        ++failures;
        co_return;
    }
    co_await g.async_barrier(use_awaitable);
    co_await g.async_close(use_awaitable);
}

} // namespace

int main(int argc, char** argv) {
    settings cfg;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--count" && i + 1 < argc)
            cfg.count = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--check")
            cfg.check = true;
        else if (a == "--loop")
            cfg.loop = true;
        else if (a == "--peer-timeout" && i + 1 < argc)
            cfg.peer_timeout_ms = std::atoi(argv[++i]);
        else if (a == "--name" && i + 1 < argc)
            cfg.name = argv[++i];
        else if (a == "--lazy")
            cfg.lazy = true;
        else if (a == "--timeout" && i + 1 < argc)
            cfg.timeout_ms = std::atoi(argv[++i]);
        else if (a == "--flight-recorder" && i + 1 < argc)
            cfg.flight_recorder = argv[++i];
        else if (a == "--skip-barrier" && i + 1 < argc)
            cfg.skip_barrier = std::atoi(argv[++i]);
        else if (a == "--metrics" && i + 1 < argc && std::strchr(argv[i + 1], ':'))
            cfg.metrics_at = argv[++i];
        else {
            std::fprintf(stderr, "group_allreduce: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    ucx::error_code ec;
    std::string culprit;
    const ucx::launch_environment env = ucx::detect_environment(ec, &culprit);
    if (ec) {
        std::fprintf(stderr, "group_allreduce: %s: %s\n", ec.message().c_str(), culprit.c_str());
        return 2;
    }

    const ucx::store_plan plan = ucx::plan_store(env, ec, &culprit);
    if (ec) {
        std::fprintf(stderr, "group_allreduce: rank %d: %s: %s\n", env.rank, ec.message().c_str(),
                     culprit.c_str());
        return 2;
    }

    asio::io_context io;
    ucx::context ctx;
    ucx::worker_options wo;
    wo.peer_timeout = std::chrono::milliseconds(cfg.peer_timeout_ms);
    ucx::worker w(ctx, io, wo);
    std::optional<ucx::metrics_exporter> exporter;
    if (!cfg.metrics_at.empty()) {
        const auto colon = cfg.metrics_at.rfind(':');
        const auto base = std::strtoul(cfg.metrics_at.c_str() + colon + 1, nullptr, 10);
        const auto port =
            base == 0 ? 0 : base + static_cast<unsigned long>(std::max(env.local_rank, 0));
        ucx::metrics_exporter_options mo;
        mo.labels = {{"rank", std::to_string(env.rank)}};
        try {
            exporter.emplace(
                io,
                asio::ip::tcp::endpoint(asio::ip::make_address(cfg.metrics_at.substr(0, colon)),
                                        static_cast<unsigned short>(port)),
                mo);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "group_allreduce: rank %d: --metrics %s: %s\n", env.rank,
                         cfg.metrics_at.c_str(), e.what());
            return 2;
        }
        exporter->add(w, "main");
        const auto at = exporter->local_endpoint();
        std::printf("rank %d: metrics on http://%s:%u/metrics\n", env.rank,
                    at.address().to_string().c_str(), at.port());
        std::fflush(stdout);
    }
    ucx::launch_store store;
    std::exception_ptr error;
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
            ucx::open_store_options so;
            so.store_timeout = std::chrono::seconds(60);
            auto [e, s] = co_await ucx::async_open_store(io.get_executor(), env, plan, so,
                                                         asio::as_tuple(use_awaitable));
            store = std::move(s);
            if (e) {
                ec = e;
                co_return;
            }
            std::fprintf(stderr, "rank %d: store: %s\n", env.rank, store.description().c_str());
            co_await run(w, store.get(), env, cfg, exporter ? &*exporter : nullptr);
        },
        [&](std::exception_ptr e) {
            error = e;
            store.close(); // a TCP store's connections would keep io.run() going
            if (exporter)
                exporter->close(); // and so would the exporter's listening socket
        });
    io.run();
    if (ec) {
        std::fprintf(stderr, "group_allreduce: %s\n", store.description().c_str());
        return 1;
    }
    if (error) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            std::printf("rank %d: failed: %s\n", env.rank, e.what());
            std::fprintf(stderr, "group_allreduce: rank %d: failed: %s\n", env.rank, e.what());
        }
        return 1;
    }
    return failures == 0 ? 0 : 1;
}
