// ucx-asio-gpu-group: the processes of a job join a ucx::group and run its
// collectives and its messages by rank on CUDA device buffers, each result
// checked on the host; with --nccl, an NCCL communicator is made over the
// group and runs an NCCL allreduce. It is the multi-process step of the GPU
// bundle (tools/gpu-bundle.sh) and of its tests.
//
// Processes are started as group_allreduce's are (ucx::detect_environment,
// ucx::plan_store), for example:
//
//   UCXASIO_RANK=r UCXASIO_SIZE=n UCXASIO_STORE_DIR=/tmp/dir ucx-asio-gpu-group
//   mpirun -np 4 ucx-asio-gpu-group --nccl
//
// Options:
//   --memory cuda|host  where the buffers live (default cuda; host runs the
//                       same checks on host memory, on machines without GPU)
//   --count N           floats of the large allreduce (default 4194304)
//   --nccl              also make an NCCL communicator and allreduce with it
//                       (NCCL takes one GPU per rank: it is made over the
//                       first min(ranks, devices) ranks, split off the group)
//   --timeout S         the group's and NCCL's deadline (default 120)
//
// Each rank runs on device local_rank % devices (rank % devices without a
// local rank), prints one line per check ("rank R of N: allreduce float sum
// of 4194304 on cuda: ok") and a last line "rank R of N: all checks passed".
// Exit status: 0 when every check passed; 1 when one failed or an operation
// reported an error (the line names it); 2 for a bad option or launch
// environment; 77 when what was asked for is not here (--memory cuda without
// a CUDA device, --nccl without a loadable NCCL or a build without it): the
// line "skipped: REASON" says why.
#include <ucx/asio.hpp>
#if UCX_ASIO_GPU_GROUP_NCCL
#include <dlfcn.h>
#include <ucx/nccl.hpp>
#endif

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

namespace {

constexpr int skipped_status = 77;

struct settings {
    bool cuda = true;
    std::size_t count = std::size_t(1) << 22;
    bool nccl = false;
    int timeout_s = 120;
};

/// A buffer in device or host memory, filled and read from the host.
class buffer {
public:
    buffer(bool cuda, std::size_t bytes) : cuda_(cuda), bytes_(bytes) {
        if (cuda_) {
            if (bytes_ != 0 && cudaMalloc(&data_, bytes_) != cudaSuccess)
                throw std::runtime_error("cudaMalloc of " + std::to_string(bytes_) +
                                         " bytes failed");
        } else {
            host_.resize(bytes_);
            data_ = host_.data();
        }
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() {
        if (cuda_ && data_)
            cudaFree(data_);
    }

    template <class T>
    void store(const std::vector<T>& v) {
        if (v.size() * sizeof(T) != bytes_)
            throw std::logic_error("store: size mismatch");
        if (!cuda_)
            std::memcpy(data_, v.data(), bytes_);
        else if (bytes_ &&
                 cudaMemcpy(data_, v.data(), bytes_, cudaMemcpyHostToDevice) != cudaSuccess)
            throw std::runtime_error("cudaMemcpy to the device failed");
    }
    template <class T>
    std::vector<T> load() const {
        std::vector<T> v(bytes_ / sizeof(T));
        if (!cuda_)
            std::memcpy(v.data(), data_, bytes_);
        else if (bytes_ &&
                 cudaMemcpy(v.data(), data_, bytes_, cudaMemcpyDeviceToHost) != cudaSuccess)
            throw std::runtime_error("cudaMemcpy from the device failed");
        return v;
    }
    template <class T>
    std::span<T> span() {
        return {static_cast<T*>(data_), bytes_ / sizeof(T)};
    }
    asio::mutable_buffer mutable_bytes() { return {data_, bytes_}; }
    asio::const_buffer bytes() const { return {data_, bytes_}; }
    void* data() { return data_; }

private:
    bool cuda_;
    std::size_t bytes_;
    void* data_ = nullptr;
    std::vector<char> host_;
};

struct job {
    settings cfg;
    int rank = 0;
    int size = 0;
    int device = -1;
    int failures = 0;
    const char* where() const { return cfg.cuda ? "cuda" : "host"; }

    void check(bool ok, const std::string& what) {
        std::printf("rank %d of %d: %s on %s: %s\n", rank, size, what.c_str(), where(),
                    ok ? "ok" : "WRONG RESULT");
        std::fflush(stdout);
        if (!ok)
            ++failures;
    }
};

/// `n` bytes that differ per rank and per position (a multiplicative walk).
std::vector<char> bytes_of(int rank, std::size_t n) {
    std::vector<char> v(n);
    std::uint32_t x = 2166136261u ^ static_cast<std::uint32_t>(rank + 1);
    for (char& c : v) {
        x = (x ^ 0x5bd1e995u) * 16777619u;
        c = static_cast<char>(x >> 24);
    }
    return v;
}

/// Small integers and halves: float sums of a few of them are exact.
float float_value(int rank, std::size_t k) {
    return static_cast<float>(static_cast<int>((rank * 7 + k) % 13) - 6) * 0.5f;
}

awaitable<void> collectives(ucx::group& g, job& j) {
    const int n = g.size(), r = g.rank();
    const bool cuda = j.cfg.cuda;

    // allreduce, out of place, float sum: the large one runs the ring.
    for (std::size_t count : {std::size_t(1000), j.cfg.count}) {
        std::vector<float> mine(count), want(count, 0.0f);
        for (std::size_t k = 0; k < count; ++k) {
            mine[k] = float_value(r, k);
            for (int i = 0; i < n; ++i)
                want[k] += float_value(i, k);
        }
        buffer in(cuda, count * sizeof(float)), out(cuda, count * sizeof(float));
        in.store(mine);
        co_await g.async_allreduce(std::span<const float>(in.span<float>()), out.span<float>(),
                                   ucx::reduce_op::sum, use_awaitable);
        j.check(out.load<float>() == want, "allreduce float sum of " + std::to_string(count));
    }

    // reduce, in place on the root, int32 max.
    {
        const std::size_t count = 100000;
        std::vector<std::int32_t> mine(count), want(count);
        for (std::size_t k = 0; k < count; ++k) {
            mine[k] = static_cast<std::int32_t>((r * 1000003 + k * 7919) % 2000001) - 1000000;
            for (int i = 0; i < n; ++i) {
                const auto x =
                    static_cast<std::int32_t>((i * 1000003 + k * 7919) % 2000001) - 1000000;
                want[k] = i == 0 ? x : std::max(want[k], x);
            }
        }
        buffer in(cuda, count * sizeof(std::int32_t)), out(cuda, r == 0 ? count * 4 : 0);
        in.store(mine);
        co_await g.async_reduce(std::span<const std::int32_t>(in.span<std::int32_t>()),
                                out.span<std::int32_t>(), ucx::reduce_op::max, 0, use_awaitable);
        if (r == 0)
            j.check(out.load<std::int32_t>() == want, "reduce int32 max of 100000 to rank 0");
    }

    // broadcast from the last rank, eager and rendezvous sizes.
    for (std::size_t bytes : {std::size_t(100), std::size_t(3) << 20}) {
        const int root = n - 1;
        buffer b(cuda, bytes);
        b.store(r == root ? bytes_of(root, bytes) : std::vector<char>(bytes));
        co_await g.async_broadcast(b.mutable_bytes(), root, use_awaitable);
        j.check(b.load<char>() == bytes_of(root, bytes), "broadcast of " + std::to_string(bytes) +
                                                             " bytes from rank " +
                                                             std::to_string(root));
    }

    // allgather and gather.
    {
        const std::size_t block = 65536;
        std::vector<char> want;
        for (int i = 0; i < n; ++i) {
            const auto x = bytes_of(i, block);
            want.insert(want.end(), x.begin(), x.end());
        }
        buffer mine(cuda, block), all(cuda, block * n), gathered(cuda, r == 0 ? block * n : 0);
        mine.store(bytes_of(r, block));
        co_await g.async_allgather(mine.bytes(), all.mutable_bytes(), use_awaitable);
        j.check(all.load<char>() == want, "allgather of 65536 bytes per rank");
        co_await g.async_gather(mine.bytes(), gathered.mutable_bytes(), 0, use_awaitable);
        if (r == 0)
            j.check(gathered.load<char>() == want, "gather of 65536 bytes per rank to rank 0");
    }

    // alltoall.
    {
        std::vector<std::int32_t> to(n), want(n);
        for (int i = 0; i < n; ++i) {
            to[i] = r * 1000 + i;
            want[i] = i * 1000 + r;
        }
        buffer out(cuda, n * sizeof(std::int32_t)), in(cuda, n * sizeof(std::int32_t));
        out.store(to);
        co_await g.async_alltoall(out.bytes(), in.mutable_bytes(), use_awaitable);
        j.check(in.load<std::int32_t>() == want, "alltoall of one int32 per rank");
    }

    // messages by rank: each rank sends to the next and receives from the
    // previous, a small and a large message.
    for (std::size_t bytes : {std::size_t(64), std::size_t(2) << 20}) {
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        buffer out(cuda, bytes), in(cuda, bytes);
        out.store(bytes_of(r, bytes));
        // Both in flight at once; both complete before the buffers go.
        auto [order, send_ec, sent, recv_ec, got] =
            co_await asio::experimental::make_parallel_group(
                g.async_send(next, out.bytes(), 7, asio::deferred),
                g.async_recv(prev, in.mutable_bytes(), 7, asio::deferred))
                .async_wait(asio::experimental::wait_for_all(), use_awaitable);
        (void)order;
        if (send_ec)
            throw std::runtime_error("send to rank " + std::to_string(next) + ": " +
                                     send_ec.message());
        if (recv_ec)
            throw std::runtime_error("receive from rank " + std::to_string(prev) + ": " +
                                     recv_ec.message());
        j.check(sent == bytes && got == bytes && in.load<char>() == bytes_of(prev, bytes),
                "message of " + std::to_string(bytes) + " bytes from rank " + std::to_string(prev));
    }
}

#if UCX_ASIO_GPU_GROUP_NCCL
/// An NCCL allreduce over the first min(size, devices) ranks.
awaitable<void> nccl_allreduce(ucx::group& g, job& j, int devices) {
    const int members = std::min(g.size(), devices);
    const bool in = g.rank() < members;
    ucx::group sub = co_await g.async_split(in ? 0 : -1, g.rank(), use_awaitable);
    if (!in) {
        std::printf("rank %d of %d: nccl: not a member (%d GPUs, one rank each)\n", j.rank, j.size,
                    devices);
        co_return;
    }
    ucx::nccl::communicator_options o;
    o.timeout = std::chrono::seconds(j.cfg.timeout_s);
    o.device = j.device;
    auto [ec, comm] =
        co_await ucx::nccl::async_make_communicator(sub, o, asio::as_tuple(use_awaitable));
    if (ec)
        throw std::runtime_error("NCCL communicator of " + std::to_string(members) +
                                 " ranks: " + ec.message());
    using all_reduce_fn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                           ncclComm_t, cudaStream_t);
    auto all_reduce = reinterpret_cast<all_reduce_fn>(dlsym(RTLD_DEFAULT, "ncclAllReduce"));
    if (!all_reduce)
        throw std::runtime_error("ncclAllReduce not found in the loaded NCCL");
    const std::size_t count = j.cfg.count;
    std::vector<float> mine(count), want(count, 0.0f);
    for (std::size_t k = 0; k < count; ++k) {
        mine[k] = float_value(sub.rank(), k);
        for (int i = 0; i < members; ++i)
            want[k] += float_value(i, k);
    }
    buffer din(true, count * sizeof(float)), dout(true, count * sizeof(float));
    din.store(mine);
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess)
        throw std::runtime_error("cudaStreamCreate failed");
    const std::unique_ptr<CUstream_st, decltype(&cudaStreamDestroy)> stream_guard(
        stream, &cudaStreamDestroy);
    const ncclResult_t started = all_reduce(din.data(), dout.data(), count, ncclFloat32, ncclSum,
                                            comm.native_handle(), stream);
    if (started != ncclSuccess && started != ncclInProgress)
        throw std::runtime_error("ncclAllReduce: NCCL result " + std::to_string(started));
    auto [wait_ec] = co_await ucx::nccl::async_wait_ready(
        g.get_executor(), comm, std::chrono::seconds(j.cfg.timeout_s),
        std::chrono::microseconds(200), asio::as_tuple(use_awaitable));
    if (wait_ec)
        throw std::runtime_error("ncclAllReduce: " + wait_ec.message());
    // The kernel ends when every rank has run its part: polled on the event
    // loop with the deadline; past it, NCCL is aborted (its kernel stops)
    // before the buffers go.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(j.cfg.timeout_s);
    asio::steady_timer timer(g.get_executor());
    for (;;) {
        const cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess)
            break;
        if (q != cudaErrorNotReady || std::chrono::steady_clock::now() > deadline) {
            comm.abort();
            throw std::runtime_error(q != cudaErrorNotReady
                                         ? std::string("the NCCL allreduce failed: ") +
                                               cudaGetErrorString(q)
                                         : "the NCCL allreduce did not end within the deadline");
        }
        timer.expires_after(std::chrono::microseconds(200));
        co_await timer.async_wait(use_awaitable);
    }
    std::printf("rank %d of %d: NCCL %d from %s, %d ranks\n", j.rank, j.size,
                ucx::nccl::library_version(), ucx::nccl::library_path().c_str(), members);
    j.check(dout.load<float>() == want, "NCCL allreduce float sum of " + std::to_string(count));
    auto [close_ec] = co_await ucx::nccl::async_close(g.get_executor(), comm,
                                                      std::chrono::seconds(j.cfg.timeout_s),
                                                      asio::as_tuple(use_awaitable));
    if (close_ec)
        throw std::runtime_error("NCCL communicator close: " + close_ec.message());
}
#endif

awaitable<void> run(ucx::worker& w, ucx::store& s, const ucx::launch_environment& env, job& j,
                    int devices) {
    ucx::group_options o;
    o.rank = env.rank;
    o.size = env.size;
    o.name = "gpu_group";
    o.timeout = std::chrono::seconds(j.cfg.timeout_s);
    ucx::group g = co_await ucx::async_join(w, s, o, use_awaitable);
    co_await collectives(g, j);
#if UCX_ASIO_GPU_GROUP_NCCL
    if (j.cfg.nccl)
        co_await nccl_allreduce(g, j, devices);
#else
    (void)devices;
#endif
    co_await g.async_barrier(use_awaitable);
    co_await g.async_close(use_awaitable);
}

int skip(const ucx::launch_environment& env, const std::string& why) {
    std::printf("rank %d of %d: skipped: %s\n", env.rank, env.size, why.c_str());
    return skipped_status;
}

} // namespace

int main(int argc, char** argv) {
    job j;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--memory" && i + 1 < argc &&
            (std::strcmp(argv[i + 1], "cuda") == 0 || std::strcmp(argv[i + 1], "host") == 0))
            j.cfg.cuda = std::strcmp(argv[++i], "cuda") == 0;
        else if (a == "--count" && i + 1 < argc)
            j.cfg.count = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--nccl")
            j.cfg.nccl = true;
        else if (a == "--timeout" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
            j.cfg.timeout_s = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr,
                         "usage: ucx-asio-gpu-group [--memory cuda|host] [--count N] [--nccl] "
                         "[--timeout S]\n");
            return 2;
        }
    }
    ucx::error_code ec;
    std::string culprit;
    const ucx::launch_environment env = ucx::detect_environment(ec, &culprit);
    if (ec) {
        std::fprintf(stderr, "ucx-asio-gpu-group: %s: %s\n", ec.message().c_str(), culprit.c_str());
        return 2;
    }
    j.rank = env.rank;
    j.size = env.size;

    // What is asked for and missing is said before the group is joined: every
    // rank finds the same on one machine.
    const int devices = ucx::cuda_device_count();
    if ((j.cfg.cuda || j.cfg.nccl) && devices == 0)
        return skip(env, ucx::built_with_cuda() ? "no CUDA device (the CUDA runtime reports none)"
                                                : "built without CUDA");
#if UCX_ASIO_GPU_GROUP_NCCL
    if (j.cfg.nccl) {
        setenv("NCCL_SOCKET_IFNAME", "lo", 0); // NCCL's bootstrap on loopback, as UCX's
        if (auto e = ucx::nccl::load_library())
            return skip(env, "NCCL cannot be loaded (" + e.message() +
                                 "; UCXASIO_NCCL_LIBRARY names libnccl.so.2)");
    }
#else
    if (j.cfg.nccl)
        return skip(env, "built without NCCL (UCX_ASIO_WITH_NCCL)");
#endif

    const ucx::store_plan plan = ucx::plan_store(env, ec, &culprit);
    if (ec) {
        std::fprintf(stderr, "ucx-asio-gpu-group: rank %d: %s: %s\n", env.rank,
                     ec.message().c_str(), culprit.c_str());
        return 2;
    }
    ucx::context_options co;
    if (devices > 0) {
        const int local = env.local_rank >= 0 ? env.local_rank : env.rank;
        j.device = local % devices;
        co.cuda.create_context = true;
        co.cuda.device = j.device;
    }
    std::optional<ucx::context> ctx;
    try {
        ctx.emplace(co);
    } catch (const std::exception& e) {
        std::printf("rank %d of %d: failed: the context: %s\n", env.rank, env.size, e.what());
        return 1;
    }
    std::printf("rank %d of %d: memory %s, device %d of %d, UCX moves CUDA memory: %s\n", env.rank,
                env.size, j.where(), j.device, devices,
                ctx->ucx_supports_cuda_memory() ? "yes" : "no (staged)");
    std::fflush(stdout);

    asio::io_context io;
    ucx::worker w(*ctx, io);
    ucx::launch_store store;
    std::string failure;
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
            ucx::open_store_options so;
            so.store_timeout = std::chrono::seconds(j.cfg.timeout_s);
            auto [e, s] = co_await ucx::async_open_store(io.get_executor(), env, plan, so,
                                                         asio::as_tuple(use_awaitable));
            store = std::move(s);
            if (e)
                throw std::runtime_error("the store (" + store.description() + "): " + e.message());
            co_await run(w, store.get(), env, j, devices);
        },
        [&](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& x) {
                    failure = x.what();
                }
            }
            store.close(); // a TCP store's connections would keep io.run() going
        });
    io.run();
    if (!failure.empty()) {
        std::printf("rank %d of %d: failed: %s\n", env.rank, env.size, failure.c_str());
        return 1;
    }
    if (j.failures != 0)
        return 1;
    std::printf("rank %d of %d: all checks passed\n", env.rank, env.size);
    return 0;
}
