// ucx::nccl with a real NCCL on a GPU: a communicator of a group of one rank
// that runs an NCCL allreduce on device memory and closes gracefully; two
// ranks of one process on one GPU (NCCL either builds the communicator or
// refuses it on every rank, never hangs); the deadline and the cancellation
// of an initialization whose other rank never comes (NCCL is aborted); bad
// arguments. Skipped, with the reason, without a GPU or a loadable NCCL
// (UCXASIO_NCCL_LIBRARY names it). The suite nccl_missing runs with a
// library that cannot be loaded (its own ctest entry sets the variables).
#include "test_support.hpp"

#include <ucx/asio.hpp>
#include <ucx/nccl.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <optional>
#include <vector>

using namespace ucx_test;

namespace {

using ucx::nccl::communicator;

/// Why the tests with NCCL cannot run here ("" when they can).
std::string why_not() {
    // NCCL's bootstrap stays on loopback, as UCX does (UCX_NET_DEVICES=lo).
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    if (ucx::cuda_device_count() == 0)
        return "no CUDA device";
    if (auto ec = ucx::nccl::load_library())
        return "NCCL cannot be loaded (" + ec.message() +
               "; UCXASIO_NCCL_LIBRARY names libnccl.so.2)";
    return {};
}

#define REQUIRE_NCCL()                                                                             \
    do {                                                                                           \
        if (const std::string why = why_not(); !why.empty())                                       \
            GTEST_SKIP() << why;                                                                   \
    } while (0)

/// `n` ranks of one process joined through a memory store.
struct ranks : local_ranks {
    explicit ranks(int n)
        : local_ranks(n, "nccl", strict_worker_options(ucx::progress_mode::event), transport::tcp) {
    }
};

struct made {
    ucx::error_code ec;
    communicator comm;
};

TEST(nccl, a_group_of_one_rank_runs_an_allreduce_on_device_memory) {
    REQUIRE_NCCL();
    std::cout << "NCCL " << ucx::nccl::library_version() << " from " << ucx::nccl::library_path()
              << std::endl;
    ranks r(1);
    ASSERT_TRUE(r.joined);
    std::optional<made> m;
    ucx::nccl::communicator_options o;
    o.timeout = std::chrono::seconds(60);
    o.device = 0;
    ucx::nccl::async_make_communicator(r.groups[0], o, [&](ucx::error_code ec, communicator c) {
        m = made{ec, std::move(c)};
    });
    ASSERT_TRUE(run_until(
        r.io, [&] { return m.has_value(); }, std::chrono::seconds(90)));
    ASSERT_FALSE(m->ec) << m->ec.message();
    ASSERT_TRUE(m->comm);
    EXPECT_EQ(m->comm.rank(), 0);
    EXPECT_EQ(m->comm.size(), 1);
    EXPECT_FALSE(m->comm.status());

    // NCCL's own call on the communicator, through the library it loaded.
    using all_reduce_fn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                           ncclComm_t, cudaStream_t);
    auto all_reduce = reinterpret_cast<all_reduce_fn>(dlsym(RTLD_DEFAULT, "ncclAllReduce"));
    ASSERT_NE(all_reduce, nullptr);
    const std::size_t count = 1 << 20;
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i)
        host[i] = static_cast<float>(i % 1000) * 0.5f;
    float* d_in = nullptr;
    float* d_out = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_in, count * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_out, count * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_in, host.data(), count * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    const ncclResult_t started =
        all_reduce(d_in, d_out, count, ncclFloat32, ncclSum, m->comm.native_handle(), stream);
    ASSERT_TRUE(started == ncclSuccess || started == ncclInProgress) << started;
    std::optional<ucx::error_code> ready;
    ucx::nccl::async_wait_ready(r.io.get_executor(), m->comm, std::chrono::seconds(30),
                                std::chrono::microseconds(200),
                                [&](ucx::error_code ec) { ready = ec; });
    ASSERT_TRUE(run_until(r.io, [&] { return ready.has_value(); }));
    ASSERT_FALSE(*ready) << ready->message();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> back(count);
    ASSERT_EQ(cudaMemcpy(back.data(), d_out, count * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(back, host); // a sum over one rank is the input

    std::optional<ucx::error_code> closed;
    ucx::nccl::async_close(r.io.get_executor(), m->comm, std::chrono::seconds(30),
                           [&](ucx::error_code ec) { closed = ec; });
    EXPECT_FALSE(m->comm); // taken at once
    ASSERT_TRUE(run_until(r.io, [&] { return closed.has_value(); }));
    EXPECT_FALSE(*closed) << closed->message();
    cudaStreamDestroy(stream);
    cudaFree(d_in);
    cudaFree(d_out);
}

TEST(nccl, two_ranks_on_one_gpu_complete_on_both_sides_alike) {
    REQUIRE_NCCL();
    ranks r(2);
    ASSERT_TRUE(r.joined);
    std::vector<std::optional<made>> m(2);
    ucx::nccl::communicator_options o;
    o.timeout = std::chrono::seconds(60);
    o.device = 0;
    for (int i = 0; i < 2; ++i)
        ucx::nccl::async_make_communicator(r.groups[i], o,
                                           [&, i](ucx::error_code ec, communicator c) {
                                               m[i] = made{ec, std::move(c)};
                                           });
    ASSERT_TRUE(run_until(
        r.io, [&] { return m[0] && m[1]; }, std::chrono::seconds(120)))
        << "an initialization hung";
    std::cout << "two ranks on one GPU: " << m[0]->ec.message() << " / " << m[1]->ec.message()
              << std::endl;
    // NCCL either builds it on both ranks or refuses it with its own error
    // (a GPU used by two ranks); never a half-made one, never our timeout.
    EXPECT_NE(m[0]->ec, asio::error::timed_out);
    EXPECT_NE(m[1]->ec, asio::error::timed_out);
    for (int i = 0; i < 2; ++i) {
        if (!m[i]->ec) {
            EXPECT_EQ(m[i]->comm.rank(), i);
            EXPECT_EQ(m[i]->comm.size(), 2);
        } else {
            EXPECT_EQ(&m[i]->ec.category(), &ucx::nccl::category()) << m[i]->ec.message();
            EXPECT_FALSE(m[i]->comm);
        }
    }
    // The group is still usable afterwards.
    std::vector<std::optional<ucx::error_code>> b(2);
    for (int i = 0; i < 2; ++i)
        r.groups[i].async_barrier([&, i](ucx::error_code ec) { b[i] = ec; });
    ASSERT_TRUE(run_until(r.io, [&] { return b[0] && b[1]; }));
    EXPECT_FALSE(*b[0]);
    EXPECT_FALSE(*b[1]);
}

TEST(nccl, an_initialization_whose_peer_never_comes_is_aborted_at_the_deadline) {
    REQUIRE_NCCL();
    asio::io_context io;
    ncclUniqueId id{};
    ASSERT_FALSE(ucx::nccl::make_unique_id(id));
    ucx::nccl::communicator_options o;
    o.timeout = std::chrono::milliseconds(1500);
    o.device = 0;
    std::optional<made> m;
    const auto start = std::chrono::steady_clock::now();
    ucx::nccl::async_init_rank(io.get_executor(), 2, 0, id, o,
                               [&](ucx::error_code ec, communicator c) {
                                   m = made{ec, std::move(c)};
                               });
    ASSERT_TRUE(run_until(
        io, [&] { return m.has_value(); }, std::chrono::seconds(120)));
    const auto took = std::chrono::steady_clock::now() - start;
    std::cout << "timed out after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms"
              << std::endl;
    EXPECT_EQ(m->ec, asio::error::timed_out) << m->ec.message();
    EXPECT_FALSE(m->comm);
    EXPECT_GE(took, std::chrono::milliseconds(1500));
}

TEST(nccl, a_cancelled_initialization_is_aborted) {
    REQUIRE_NCCL();
    asio::io_context io;
    ncclUniqueId id{};
    ASSERT_FALSE(ucx::nccl::make_unique_id(id));
    ucx::nccl::communicator_options o;
    o.device = 0; // no deadline: only the cancellation ends it
    std::optional<made> m;
    asio::cancellation_signal cancel;
    ucx::nccl::async_init_rank(
        io.get_executor(), 2, 1, id, o,
        asio::bind_cancellation_slot(cancel.slot(), [&](ucx::error_code ec, communicator c) {
            m = made{ec, std::move(c)};
        }));
    asio::steady_timer t(io, std::chrono::milliseconds(300));
    t.async_wait([&](ucx::error_code) { cancel.emit(asio::cancellation_type::terminal); });
    ASSERT_TRUE(run_until(
        io, [&] { return m.has_value(); }, std::chrono::seconds(120)));
    EXPECT_EQ(m->ec, asio::error::operation_aborted) << m->ec.message();
    EXPECT_FALSE(m->comm);
}

TEST(nccl, bad_arguments_are_refused) {
    REQUIRE_NCCL();
    asio::io_context io;
    ncclUniqueId id{};
    std::vector<ucx::error_code> got;
    for (auto [size, rank] : {std::pair{0, 0}, std::pair{2, 2}, std::pair{2, -1}})
        ucx::nccl::async_init_rank(io.get_executor(), size, rank, id, {},
                                   [&](ucx::error_code ec, communicator) { got.push_back(ec); });
    communicator empty;
    ucx::nccl::async_wait_ready(io.get_executor(), empty, std::chrono::milliseconds(0),
                                std::chrono::microseconds(100),
                                [&](ucx::error_code ec) { got.push_back(ec); });
    EXPECT_TRUE(got.empty()); // never inside the call
    ASSERT_TRUE(run_until(io, [&] { return got.size() == 4; }));
    EXPECT_EQ(got[0], asio::error::invalid_argument);
    EXPECT_EQ(got[1], asio::error::invalid_argument);
    EXPECT_EQ(got[2], asio::error::invalid_argument);
    EXPECT_EQ(got[3], asio::error::bad_descriptor);
    EXPECT_EQ(empty.status(), asio::error::bad_descriptor);
    EXPECT_EQ(empty.rank(), -1);
    EXPECT_EQ(empty.size(), 0);
}

TEST(nccl_missing, every_operation_reports_that_nccl_is_unavailable) {
    if (!std::getenv("UCXASIO_NCCL_TEST_MISSING"))
        GTEST_SKIP() << "runs as nccl_communicator.missing_library, with a library that cannot "
                        "be loaded";
    EXPECT_EQ(ucx::nccl::load_library(), ucx::error::nccl_unavailable);
    EXPECT_EQ(ucx::nccl::library_version(), 0);
    EXPECT_EQ(ucx::nccl::library_path(), "");
    ncclUniqueId id{};
    EXPECT_EQ(ucx::nccl::make_unique_id(id), ucx::error::nccl_unavailable);

    ranks r(1);
    ASSERT_TRUE(r.joined);
    std::vector<ucx::error_code> got;
    ucx::nccl::async_make_communicator(r.groups[0], {}, [&](ucx::error_code ec, communicator c) {
        EXPECT_FALSE(c);
        got.push_back(ec);
    });
    ucx::nccl::async_init_rank(r.io.get_executor(), 1, 0, id, {},
                               [&](ucx::error_code ec, communicator) { got.push_back(ec); });
    ASSERT_TRUE(run_until(r.io, [&] { return got.size() == 2; }));
    EXPECT_EQ(got[0], ucx::error::nccl_unavailable);
    EXPECT_EQ(got[1], ucx::error::nccl_unavailable);
    EXPECT_EQ(got[0].message(), "NCCL could not be loaded");
    // NCCL's codes still have their messages without the library.
    EXPECT_EQ(ucx::nccl::make_error_code(ncclInvalidUsage).message(), "invalid usage");
    EXPECT_EQ(ucx::nccl::make_error_code(ncclInvalidUsage), boost::system::errc::invalid_argument);
    EXPECT_FALSE(ucx::nccl::make_error_code(ncclSuccess));
}

} // namespace
