// Real CUDA device memory (cudaMalloc) through the library, between workers of
// one process, over TCP and shared memory:
// - tag messages over an endpoint: device to device, device to host and host
//   to device, at an eager size (100 B) and a rendezvous one (3 MiB + 17 B);
//   several sends from device memory in a row arrive in the order sent;
//   staged copies wait for the work queued before on the default stream;
// - a group of 3 ranks (one memory_store): allreduce (float sum, int32 max;
//   1, 1000 and 300000 elements), broadcast from rank 1 (1 MiB + 3 B),
//   allgather, alltoall, reduce to rank 2, gather, barrier, all on device
//   buffers, then again with some ranks on device and others on host buffers;
// - a group's messages by rank (async_send, async_recv, async_recv_from_any) from
//   and into device memory, small and large, in order.
// Every check copies the device memory back to the host (cudaMemcpy) and
// compares it with the expected bytes, computed on the host (the reductions'
// values are small integers and halves, so float sums are exact).
//
// Needs an NVIDIA GPU and a library built with CUDA (UCX_ASIO_WITH_CUDA):
// without a device (ucx::cuda_device_count() == 0) every test is skipped.
// Where UCX cannot move device memory itself, the workers stage it through
// pinned host memory, and the tests check that the staging ran.
#include "test_support.hpp"

#include <ucx/asio.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ucx_test;

namespace {

/// Where a test buffer lives.
enum class memory { host, device };

std::string to_string(memory m) {
    return m == memory::host ? "host" : "device";
}

/// A buffer of host memory or of CUDA device memory (cudaMalloc); throws
/// when the allocation or a copy fails.
class test_buffer {
public:
    test_buffer(memory m, std::size_t size) : kind_(m), size_(size) {
        if (m == memory::host) {
            host_.assign(size, 0);
            data_ = host_.data();
            return;
        }
        check(cudaMalloc(&data_, std::max<std::size_t>(size, 1)), "cudaMalloc");
        check(cudaMemset(data_, 0, std::max<std::size_t>(size, 1)), "cudaMemset");
    }
    test_buffer(const test_buffer&) = delete;
    test_buffer& operator=(const test_buffer&) = delete;
    ~test_buffer() {
        if (kind_ == memory::device && data_)
            cudaFree(data_);
    }

    memory kind() const { return kind_; }
    void* data() const { return data_; }
    std::size_t size() const { return size_; }
    asio::mutable_buffer buffer() const { return {data_, size_}; }
    template <class T>
    std::span<T> span() const {
        return {static_cast<T*>(data_), size_ / sizeof(T)};
    }

    /// Writes `bytes` at the start of the buffer.
    void store(const void* bytes, std::size_t n) {
        if (n > size_)
            throw std::length_error("test_buffer: too many bytes");
        if (kind_ == memory::host)
            std::memcpy(data_, bytes, n);
        else
            check(cudaMemcpy(data_, bytes, n, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    }
    void store(const std::vector<char>& bytes) { store(bytes.data(), bytes.size()); }
    template <class T>
    void store_values(const std::vector<T>& values) {
        store(values.data(), values.size() * sizeof(T));
    }

    /// The buffer's bytes, read back to the host.
    std::vector<char> load() const {
        std::vector<char> v(size_);
        if (kind_ == memory::host)
            std::memcpy(v.data(), data_, size_);
        else if (size_)
            check(cudaMemcpy(v.data(), data_, size_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
        return v;
    }
    template <class T>
    std::vector<T> load_values() const {
        const std::vector<char> bytes = load();
        std::vector<T> v(size_ / sizeof(T));
        std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
        return v;
    }

private:
    static void check(cudaError_t e, const char* what) {
        if (e != cudaSuccess)
            throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
    }

    memory kind_;
    std::size_t size_;
    void* data_ = nullptr;
    std::vector<char> host_;
};

/// The buffers of a test. Declared before the io_context and the workers
/// that use them, so that they are freed after them, at the end of the test.
class buffers {
public:
    test_buffer& make(memory m, std::size_t size) {
        all_.push_back(std::make_unique<test_buffer>(m, size));
        return *all_.back();
    }
    test_buffer& make(memory m, const std::vector<char>& bytes) {
        test_buffer& b = make(m, bytes.size());
        b.store(bytes);
        return b;
    }
    template <class T>
    test_buffer& make_values(memory m, const std::vector<T>& values) {
        test_buffer& b = make(m, values.size() * sizeof(T));
        b.store_values(values);
        return b;
    }

private:
    std::vector<std::unique_ptr<test_buffer>> all_;
};

/// The result of an operation that reports bytes.
struct result {
    ucx::error_code ec;
    std::size_t bytes = 0;
};

/// The result of a tag receive.
struct tag_result {
    ucx::error_code ec;
    std::size_t bytes = 0;
    ucx::tag_t tag = 0;
};

constexpr std::size_t small_size = 100;
constexpr std::size_t large_size = (std::size_t{3} << 20) + 17;

std::string param_name(const testing::TestParamInfo<transport>& info) {
    return to_string(info.param);
}

// ---- tag messages ----

/// Two workers of one process, a -> b by b's worker address.
struct tag_pair {
    explicit tag_pair(transport t)
        : ctx(options_for(t)), a(ctx, io, strict_worker_options(ucx::progress_mode::event)),
          b(ctx, io, strict_worker_options(ucx::progress_mode::event)), a_to_b(a, b.address()) {}

    asio::io_context io;
    ucx::context ctx;
    ucx::worker a, b;
    ucx::endpoint a_to_b;
};

class cuda_device_tag : public testing::TestWithParam<transport> {
protected:
    void SetUp() override {
        if (ucx::cuda_device_count() == 0)
            GTEST_SKIP() << "no CUDA device";
        p = std::make_unique<tag_pair>(GetParam());
    }

    /// Sends `size` bytes from `from` memory of a to `to` memory of b (one
    /// byte larger than the message) and checks what arrived.
    void send_and_check(memory from, memory to, std::size_t size, std::uint32_t seed) {
        SCOPED_TRACE(to_string(from) + " to " + to_string(to) + ", " + std::to_string(size) +
                     " bytes");
        const std::vector<char> expected = pattern(size, seed);
        test_buffer& out = mem.make(from, expected);
        test_buffer& in = mem.make(to, size + 1);
        const ucx::tag_t tag = 1000 + seed;
        std::optional<tag_result> r;
        std::optional<result> s;
        ucx::async_tag_recv(p->b, in.buffer(), tag, ucx::tag_mask_full,
                            [&](ucx::error_code ec, std::size_t n, ucx::tag_t t) {
                                r = tag_result{ec, n, t};
                            });
        ucx::async_tag_send(p->a_to_b, asio::buffer(out.data(), size), tag,
                            [&](ucx::error_code ec, std::size_t n) {
                                s = result{ec, n};
                            });
        ASSERT_TRUE(run_until(p->io, [&] { return r && s; }));
        ASSERT_FALSE(s->ec) << s->ec.message();
        ASSERT_FALSE(r->ec) << r->ec.message();
        EXPECT_EQ(s->bytes, size);
        EXPECT_EQ(r->bytes, size);
        EXPECT_EQ(r->tag, tag);
        std::vector<char> got = in.load();
        EXPECT_EQ(got.back(), 0) << "a byte past the message was written";
        got.pop_back();
        EXPECT_TRUE(got == expected) << "the bytes that arrived differ";
        // The sent buffer is left as it was.
        EXPECT_TRUE(out.load() == expected);
    }

    buffers mem;
    std::unique_ptr<tag_pair> p;
};

TEST_P(cuda_device_tag, device_and_host_buffers_at_eager_and_rendezvous_sizes) {
    std::uint32_t seed = 1;
    for (std::size_t size : {small_size, large_size}) {
        send_and_check(memory::device, memory::device, size, seed++);
        send_and_check(memory::device, memory::host, size, seed++);
        send_and_check(memory::host, memory::device, size, seed++);
    }
    ASSERT_FALSE(HasFailure());
    // Where UCX cannot move device memory, the workers staged it: every
    // message had a device buffer on at least one side.
    if (!p->ctx.ucx_supports_cuda_memory()) {
        EXPECT_GE(p->a.stats().staged_bytes, 2 * (small_size + large_size));
        EXPECT_GE(p->b.stats().staged_bytes, 2 * (small_size + large_size));
        EXPECT_GE(p->a.stats().staged_operations, 4u);
        EXPECT_GE(p->b.stats().staged_operations, 4u);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Sends from device memory in a row, of sizes whose copies take different
// times (and one from host memory among them), arrive in the order sent:
// each receive, posted in order with the same tag, gets its message.
TEST_P(cuda_device_tag, device_sends_in_a_row_arrive_in_order) {
    struct message {
        memory from;
        std::size_t size;
    };
    const std::vector<message> messages{
        {memory::device, large_size},
        {memory::device, small_size},
        {memory::device, 64 * 1024},
        {memory::host, small_size},
        {memory::device, 1},
        {memory::device, large_size},
        {memory::device, (1u << 20) + 1},
        {memory::device, small_size},
    };
    const std::size_t n = messages.size();
    std::vector<std::vector<char>> expected;
    std::vector<test_buffer*> out, in;
    for (std::size_t i = 0; i < n; ++i) {
        expected.push_back(pattern(messages[i].size, 100 + static_cast<std::uint32_t>(i)));
        out.push_back(&mem.make(messages[i].from, expected.back()));
        // Every receive can hold any of the messages.
        in.push_back(&mem.make(i % 2 ? memory::host : memory::device, large_size));
    }
    constexpr ucx::tag_t tag = 77;
    std::vector<std::optional<result>> sent(n);
    std::vector<std::optional<tag_result>> received(n);
    for (std::size_t i = 0; i < n; ++i)
        ucx::async_tag_send(p->a_to_b, asio::buffer(out[i]->data(), messages[i].size), tag,
                            [&sent, i](ucx::error_code ec, std::size_t bytes) {
                                sent[i] = result{ec, bytes};
                            });
    for (std::size_t i = 0; i < n; ++i)
        ucx::async_tag_recv(p->b, in[i]->buffer(), tag, ucx::tag_mask_full,
                            [&received, i](ucx::error_code ec, std::size_t bytes, ucx::tag_t t) {
                                received[i] = tag_result{ec, bytes, t};
                            });
    ASSERT_TRUE(run_until(p->io, [&] { return all_set(sent) && all_set(received); }));
    for (std::size_t i = 0; i < n; ++i) {
        SCOPED_TRACE("message " + std::to_string(i));
        ASSERT_FALSE(sent[i]->ec) << sent[i]->ec.message();
        ASSERT_FALSE(received[i]->ec) << received[i]->ec.message();
        EXPECT_EQ(sent[i]->bytes, messages[i].size);
        ASSERT_EQ(received[i]->bytes, messages[i].size) << "a message arrived out of order";
        std::vector<char> got = in[i]->load();
        got.resize(messages[i].size);
        EXPECT_TRUE(got == expected[i]) << "a message arrived out of order or damaged";
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Staged copies are ordered after the work queued before on CUDA's legacy
// default stream: the sent buffer is filled, and the receive buffer cleared,
// by copies queued on that stream behind long ones and not waited for when
// the operations start. A stream of the library's own that ignored that
// order would send the buffer's old bytes and see its received bytes
// cleared after the handler.
TEST_P(cuda_device_tag, staged_copies_wait_for_the_default_streams_work) {
    if (p->ctx.ucx_supports_cuda_memory())
        GTEST_SKIP() << "UCX moves device memory itself here: nothing is staged";
    const std::vector<char> expected = pattern(small_size, 500);
    test_buffer& out = mem.make(memory::device, pattern(small_size, 501));
    test_buffer& in = mem.make(memory::device, pattern(small_size + 1, 502));
    // Long device-to-device copies (a few milliseconds), then the message's
    // bytes from pinned memory, then the receive buffer cleared: all on the
    // default stream, none waited for.
    constexpr std::size_t long_copy = std::size_t{256} << 20;
    void* from = nullptr;
    void* to = nullptr;
    void* pinned = nullptr;
    ASSERT_EQ(cudaMalloc(&from, long_copy), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&to, long_copy), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&pinned, small_size), cudaSuccess);
    const std::unique_ptr<void, cudaError_t (*)(void*)> free_from(from, cudaFree),
        free_to(to, cudaFree), free_pinned(pinned, cudaFreeHost);
    std::memcpy(pinned, expected.data(), small_size);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int i = 0; i < 16; ++i)
        ASSERT_EQ(cudaMemcpyAsync(to, from, long_copy, cudaMemcpyDeviceToDevice, 0), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(out.data(), pinned, small_size, cudaMemcpyHostToDevice, 0),
              cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(in.data(), 0, small_size + 1, 0), cudaSuccess);

    std::optional<tag_result> r;
    std::optional<result> s;
    ucx::async_tag_recv(p->b, in.buffer(), 9, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t n, ucx::tag_t t) {
                            r = tag_result{ec, n, t};
                        });
    ucx::async_tag_send(p->a_to_b, asio::buffer(out.data(), small_size), 9,
                        [&](ucx::error_code ec, std::size_t n) {
                            s = result{ec, n};
                        });
    ASSERT_TRUE(run_until(p->io, [&] { return r && s; }));
    ASSERT_FALSE(s->ec) << s->ec.message();
    ASSERT_FALSE(r->ec) << r->ec.message();
    EXPECT_EQ(r->bytes, small_size);
    std::vector<char> got = in.load();
    EXPECT_EQ(got.back(), 0) << "a byte past the message was written, or the clearing was lost";
    got.pop_back();
    EXPECT_TRUE(got == expected) << "the bytes that arrived are not those the default stream wrote";
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(transports, cuda_device_tag,
                         testing::Values(transport::tcp, transport::shared_memory), param_name);

// ---- groups ----

/// `n` ranks of one process: a worker each, joined through one memory_store.
class ranks {
public:
    ranks(transport t, int n) : ctx_(options_for(t)), store_(io.get_executor()) {
        joined = join_ranks(io, ctx_, store_, n, workers, groups, "cuda", group_worker_options());
    }

    int size() const { return static_cast<int>(groups.size()); }

    /// Starts `f(rank, handler)` (an operation with a `void(error_code)`
    /// handler) on every rank, runs until all completed and checks that each
    /// succeeded.
    template <class F>
    void on_all(F f) {
        const int n = size();
        std::vector<std::optional<ucx::error_code>> r(n);
        for (int i = 0; i < n; ++i)
            f(i, [&r, i](ucx::error_code ec) { r[i] = ec; });
        ASSERT_TRUE(run_until(io, [&] { return all_set(r); })) << "a collective hung";
        for (int i = 0; i < n; ++i)
            EXPECT_FALSE(*r[i]) << "rank " << i << ": " << r[i]->message();
    }

    asio::io_context io;
    ucx::context ctx_;
    ucx::memory_store store_;
    std::vector<std::unique_ptr<ucx::worker>> workers;
    std::vector<ucx::group> groups;
    bool joined = false;
};

constexpr int group_size = 3;

/// Which memory each rank passes, for inputs and for outputs.
struct placement {
    std::vector<memory> in, out;
};

placement all_device() {
    return {std::vector<memory>(group_size, memory::device),
            std::vector<memory>(group_size, memory::device)};
}

/// Some ranks on device memory, others on host memory, inputs and outputs
/// differing on some ranks.
placement mixed() {
    return {{memory::device, memory::host, memory::host},
            {memory::device, memory::host, memory::device}};
}

/// Small integers and halves: float sums of a few of them are exact.
float float_value(int rank, std::size_t k) {
    return static_cast<float>(static_cast<int>((rank * 7 + k) % 13) - 6) * 0.5f;
}

std::int32_t int_value(int rank, std::size_t k) {
    return static_cast<std::int32_t>((rank * 1000003 + k * 7919) % 2000001) - 1000000;
}

class cuda_device_group : public testing::TestWithParam<transport> {
protected:
    void SetUp() override {
        if (ucx::cuda_device_count() == 0)
            GTEST_SKIP() << "no CUDA device";
        r = std::make_unique<ranks>(GetParam(), group_size);
        ASSERT_TRUE(r->joined) << "the ranks did not join";
    }

    void allreduce_float_sum(const placement& where, std::size_t count) {
        SCOPED_TRACE("allreduce float sum of " + std::to_string(count));
        const int n = r->size();
        std::vector<float> expected(count, 0.0f);
        std::vector<test_buffer*> in, out;
        for (int i = 0; i < n; ++i) {
            std::vector<float> v(count);
            for (std::size_t k = 0; k < count; ++k) {
                v[k] = float_value(i, k);
                expected[k] += v[k];
            }
            in.push_back(&mem.make_values(where.in[i], v));
            out.push_back(&mem.make(where.out[i], count * sizeof(float)));
        }
        r->on_all([&](int i, auto h) {
            r->groups[i].async_allreduce(std::span<const float>(in[i]->span<float>()),
                                         out[i]->span<float>(), ucx::reduce_op::sum, h);
        });
        for (int i = 0; i < n; ++i)
            EXPECT_TRUE(out[i]->load_values<float>() == expected) << "rank " << i;
    }

    // In place.
    void allreduce_int_max(const placement& where, std::size_t count) {
        SCOPED_TRACE("allreduce int32 max of " + std::to_string(count));
        const int n = r->size();
        std::vector<std::int32_t> expected(count);
        std::vector<test_buffer*> data;
        for (int i = 0; i < n; ++i) {
            std::vector<std::int32_t> v(count);
            for (std::size_t k = 0; k < count; ++k) {
                v[k] = int_value(i, k);
                expected[k] = i == 0 ? v[k] : std::max(expected[k], v[k]);
            }
            data.push_back(&mem.make_values(where.out[i], v));
        }
        r->on_all([&](int i, auto h) {
            r->groups[i].async_allreduce(data[i]->span<std::int32_t>(), ucx::reduce_op::max, h);
        });
        for (int i = 0; i < n; ++i)
            EXPECT_TRUE(data[i]->load_values<std::int32_t>() == expected) << "rank " << i;
    }

    void broadcast(const placement& where, std::size_t bytes, int root) {
        SCOPED_TRACE("broadcast of " + std::to_string(bytes) + " from " + std::to_string(root));
        const int n = r->size();
        const std::vector<char> expected = pattern(bytes, 5);
        std::vector<test_buffer*> data;
        for (int i = 0; i < n; ++i) {
            data.push_back(&mem.make(where.out[i], bytes));
            if (i == root)
                data.back()->store(expected);
        }
        r->on_all([&](int i, auto h) { r->groups[i].async_broadcast(data[i]->buffer(), root, h); });
        for (int i = 0; i < n; ++i)
            EXPECT_TRUE(data[i]->load() == expected) << "rank " << i;
    }

    void allgather(const placement& where, std::size_t block) {
        SCOPED_TRACE("allgather of " + std::to_string(block));
        const int n = r->size();
        std::vector<char> expected;
        std::vector<test_buffer*> in, out;
        for (int i = 0; i < n; ++i) {
            const std::vector<char> b = pattern(block, 200 + i);
            expected.insert(expected.end(), b.begin(), b.end());
            in.push_back(&mem.make(where.in[i], b));
            out.push_back(&mem.make(where.out[i], block * n));
        }
        r->on_all([&](int i, auto h) {
            r->groups[i].async_allgather(in[i]->buffer(), out[i]->buffer(), h);
        });
        for (int i = 0; i < n; ++i)
            EXPECT_TRUE(out[i]->load() == expected) << "rank " << i;
    }

    void alltoall(const placement& where, std::size_t block) {
        SCOPED_TRACE("alltoall of " + std::to_string(block));
        const int n = r->size();
        std::vector<std::vector<char>> sent;
        std::vector<test_buffer*> in, out;
        for (int i = 0; i < n; ++i) {
            sent.push_back(pattern(block * n, 300 + i));
            in.push_back(&mem.make(where.in[i], sent.back()));
            out.push_back(&mem.make(where.out[i], block * n));
        }
        r->on_all([&](int i, auto h) {
            r->groups[i].async_alltoall(in[i]->buffer(), out[i]->buffer(), h);
        });
        for (int j = 0; j < n; ++j) {
            // Block i of rank j's out is block j of rank i's in.
            std::vector<char> expected;
            for (int i = 0; i < n; ++i)
                expected.insert(expected.end(), sent[i].begin() + j * block,
                                sent[i].begin() + (j + 1) * block);
            EXPECT_TRUE(out[j]->load() == expected) << "rank " << j;
        }
    }

    void reduce_float_sum(const placement& where, std::size_t count, int root) {
        SCOPED_TRACE("reduce float sum of " + std::to_string(count) + " to " +
                     std::to_string(root));
        const int n = r->size();
        std::vector<float> expected(count, 0.0f);
        std::vector<test_buffer*> in;
        for (int i = 0; i < n; ++i) {
            std::vector<float> v(count);
            for (std::size_t k = 0; k < count; ++k) {
                v[k] = float_value(i + 5, k);
                expected[k] += v[k];
            }
            in.push_back(&mem.make_values(where.in[i], v));
        }
        test_buffer& at_root = mem.make(where.out[root], count * sizeof(float));
        r->on_all([&](int i, auto h) {
            r->groups[i].async_reduce(std::span<const float>(in[i]->span<float>()),
                                      i == root ? at_root.span<float>() : std::span<float>(),
                                      ucx::reduce_op::sum, root, h);
        });
        EXPECT_TRUE(at_root.load_values<float>() == expected);
    }

    void gather(const placement& where, std::size_t block, int root) {
        SCOPED_TRACE("gather of " + std::to_string(block) + " to " + std::to_string(root));
        const int n = r->size();
        std::vector<char> expected;
        std::vector<test_buffer*> in;
        for (int i = 0; i < n; ++i) {
            const std::vector<char> b = pattern(block, 400 + i);
            expected.insert(expected.end(), b.begin(), b.end());
            in.push_back(&mem.make(where.in[i], b));
        }
        test_buffer& at_root = mem.make(where.out[root], block * n);
        r->on_all([&](int i, auto h) {
            r->groups[i].async_gather(
                in[i]->buffer(), i == root ? at_root.buffer() : asio::mutable_buffer(), root, h);
        });
        EXPECT_TRUE(at_root.load() == expected);
    }

    void barrier() {
        SCOPED_TRACE("barrier");
        r->on_all([&](int i, auto h) { r->groups[i].async_barrier(h); });
    }

    // Declared before the ranks: freed after them.
    buffers mem;
    std::unique_ptr<ranks> r;
};

TEST_P(cuda_device_group, collectives_on_device_buffers) {
    const placement where = all_device();
    barrier();
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
        allreduce_float_sum(where, count);
        allreduce_int_max(where, count);
    }
    barrier();
    broadcast(where, (std::size_t{1} << 20) + 3, 1);
    allgather(where, 100003);
    alltoall(where, 50001);
    reduce_float_sum(where, 1000, 2);
    reduce_float_sum(where, 300000, 2);
    gather(where, 100003, 0);
    barrier();
    ASSERT_FALSE(HasFailure());
    // Every rank copied its device buffers through host memory.
    for (int i = 0; i < r->size(); ++i) {
        EXPECT_GT(r->workers[i]->stats().staged_operations, 0u) << "rank " << i;
        EXPECT_TRUE(r->groups[i].is_open()) << "rank " << i;
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_P(cuda_device_group, collectives_with_device_and_host_buffers_mixed) {
    const placement where = mixed();
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
        allreduce_float_sum(where, count);
        allreduce_int_max(where, count);
    }
    barrier();
    broadcast(where, (std::size_t{1} << 20) + 3, 1);
    // The root on device memory, and on host memory.
    broadcast(where, 4099, 0);
    allgather(where, 100003);
    alltoall(where, 50001);
    reduce_float_sum(where, 300000, 2);
    reduce_float_sum(where, 1000, 0);
    gather(where, 100003, 0);
    gather(where, 1001, 1);
    barrier();
    ASSERT_FALSE(HasFailure());
    for (int i = 0; i < r->size(); ++i)
        EXPECT_TRUE(r->groups[i].is_open()) << "rank " << i;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Messages by rank from and into device memory: from one rank (async_recv)
// and from any rank (async_recv_from_any), small and large; and several in a row
// from one rank arrive in the order sent.
TEST_P(cuda_device_group, messages_by_rank_with_device_buffers) {
    std::uint32_t seed = 500;
    for (std::size_t size : {small_size, large_size}) {
        SCOPED_TRACE(std::to_string(size) + " bytes");
        const std::vector<char> m1 = pattern(size, seed++), m2 = pattern(size, seed++),
                                m0 = pattern(size, seed++);
        test_buffer& from1 = mem.make(memory::device, m1);
        test_buffer& from2 = mem.make(memory::device, m2);
        test_buffer& from0 = mem.make(memory::device, m0);
        test_buffer& into0 = mem.make(memory::device, size);
        test_buffer& any0 = mem.make(memory::device, size + 1);
        test_buffer& into2 = mem.make(memory::host, size);
        std::optional<result> sent1, sent2, sent0, got0, got2;
        std::optional<result> got_any;
        int from = -2;
        // 1 -> 0, device to device (from rank 1).
        r->groups[0].async_recv(1, into0.buffer(), 4, [&](ucx::error_code ec, std::size_t n) {
            got0 = result{ec, n};
        });
        // 2 -> 0, device to device (from any rank).
        r->groups[0].async_recv_from_any(any0.buffer(), 5,
                                         [&](ucx::error_code ec, std::size_t n, int who) {
                                             got_any = result{ec, n};
                                             from = who;
                                         });
        // 0 -> 2, device to host.
        r->groups[2].async_recv(0, into2.buffer(), 6, [&](ucx::error_code ec, std::size_t n) {
            got2 = result{ec, n};
        });
        r->groups[1].async_send(0, from1.buffer(), 4, [&](ucx::error_code ec, std::size_t n) {
            sent1 = result{ec, n};
        });
        r->groups[2].async_send(0, from2.buffer(), 5, [&](ucx::error_code ec, std::size_t n) {
            sent2 = result{ec, n};
        });
        r->groups[0].async_send(2, from0.buffer(), 6, [&](ucx::error_code ec, std::size_t n) {
            sent0 = result{ec, n};
        });
        ASSERT_TRUE(
            run_until(r->io, [&] { return sent1 && sent2 && sent0 && got0 && got2 && got_any; }));
        for (auto* x : {&sent1, &sent2, &sent0, &got0, &got2, &got_any}) {
            ASSERT_FALSE((*x)->ec) << (*x)->ec.message();
            EXPECT_EQ((*x)->bytes, size);
        }
        EXPECT_EQ(from, 2);
        EXPECT_TRUE(into0.load() == m1);
        std::vector<char> any = any0.load();
        EXPECT_EQ(any.back(), 0) << "a byte past the message was written";
        any.pop_back();
        EXPECT_TRUE(any == m2);
        EXPECT_TRUE(into2.load() == m0);
    }

    // Several in a row from rank 1 to rank 2, from device memory into device
    // and host memory, by rank and from any rank. The barrier first: rank 2
    // then holds its connection to rank 1, so its receives by rank and from
    // any rank count from when they are posted.
    r->on_all([&](int i, auto h) { r->groups[i].async_barrier(h); });
    const std::vector<std::size_t> sizes{large_size, small_size, 64 * 1024,
                                         1,          large_size, small_size};
    const std::size_t n = sizes.size();
    std::vector<std::vector<char>> expected;
    std::vector<test_buffer*> out, in;
    for (std::size_t i = 0; i < n; ++i) {
        expected.push_back(pattern(sizes[i], 600 + static_cast<std::uint32_t>(i)));
        out.push_back(&mem.make(memory::device, expected.back()));
        in.push_back(&mem.make(i % 2 ? memory::host : memory::device, large_size));
    }
    std::vector<std::optional<result>> sent(n), received(n);
    std::vector<int> senders(n, -2);
    for (std::size_t i = 0; i < n; ++i)
        r->groups[1].async_send(2, asio::buffer(out[i]->data(), sizes[i]), 8,
                                [&sent, i](ucx::error_code ec, std::size_t bytes) {
                                    sent[i] = result{ec, bytes};
                                });
    for (std::size_t i = 0; i < n; ++i) {
        if (i % 3 == 2)
            r->groups[2].async_recv_from_any(
                in[i]->buffer(), 8, [&, i](ucx::error_code ec, std::size_t bytes, int who) {
                    received[i] = result{ec, bytes};
                    senders[i] = who;
                });
        else
            r->groups[2].async_recv(1, in[i]->buffer(), 8,
                                    [&, i](ucx::error_code ec, std::size_t bytes) {
                                        received[i] = result{ec, bytes};
                                        senders[i] = 1;
                                    });
    }
    ASSERT_TRUE(run_until(r->io, [&] { return all_set(sent) && all_set(received); }));
    for (std::size_t i = 0; i < n; ++i) {
        SCOPED_TRACE("message " + std::to_string(i));
        ASSERT_FALSE(sent[i]->ec) << sent[i]->ec.message();
        ASSERT_FALSE(received[i]->ec) << received[i]->ec.message();
        EXPECT_EQ(senders[i], 1);
        ASSERT_EQ(received[i]->bytes, sizes[i]) << "a message arrived out of order";
        std::vector<char> got = in[i]->load();
        got.resize(sizes[i]);
        EXPECT_TRUE(got == expected[i]) << "a message arrived out of order or damaged";
    }
    if (!r->ctx_.ucx_supports_cuda_memory()) {
        for (int i = 0; i < r->size(); ++i)
            EXPECT_GT(r->workers[i]->stats().staged_operations, 0u) << "rank " << i;
    }
    for (int i = 0; i < r->size(); ++i)
        EXPECT_TRUE(r->groups[i].is_open()) << "rank " << i;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(transports, cuda_device_group,
                         testing::Values(transport::tcp, transport::shared_memory), param_name);

} // namespace
