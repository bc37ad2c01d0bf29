// Memory type detection, with and without CUDA support.
#include <ucx/memory_type.hpp>

#include <gtest/gtest.h>

#include <vector>

#ifdef UCX_ASIO_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

TEST(memory_type, build_flag_matches_the_build) {
#ifdef UCX_ASIO_TEST_CUDA
    EXPECT_TRUE(ucx::built_with_cuda());
#else
    EXPECT_FALSE(ucx::built_with_cuda());
    EXPECT_EQ(ucx::cuda_device_count(), 0);
#endif
}

TEST(memory_type, host_memory_is_host) {
    std::vector<char> v(4096);
    EXPECT_EQ(ucx::detect_memory_type(v.data()), ucx::memory_type::host);
    EXPECT_EQ(ucx::detect_memory_type(nullptr), ucx::memory_type::host);
    EXPECT_EQ(ucx::to_string(ucx::memory_type::cuda), "cuda");
}

TEST(memory_type, device_memory_is_cuda) {
#ifdef UCX_ASIO_TEST_CUDA
    if (ucx::cuda_device_count() == 0)
        GTEST_SKIP() << "no CUDA device on this machine (the CUDA runtime reports none)";
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
    EXPECT_EQ(ucx::detect_memory_type(p), ucx::memory_type::cuda);
    cudaFree(p);
    void* m = nullptr;
    ASSERT_EQ(cudaMallocManaged(&m, 1 << 20), cudaSuccess);
    EXPECT_EQ(ucx::detect_memory_type(m), ucx::memory_type::cuda_managed);
    cudaFree(m);
#else
    GTEST_SKIP() << "built without CUDA support (UCX_ASIO_WITH_CUDA=OFF)";
#endif
}
