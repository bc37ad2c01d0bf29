// The remote key blob: round trip, and rejection of truncated, corrupt and
// foreign input (fuzzed: random bytes, every truncation, every bit flip).
// Memory regions: registration, allocation, bad arguments (no traffic).
#include "test_support.hpp"

#include <random>

using namespace ucx_test;

namespace {

std::vector<std::byte> sample_rkey(std::size_t n, std::uint32_t seed) {
    std::vector<std::byte> v(n);
    std::mt19937 gen(seed);
    for (auto& b : v)
        b = static_cast<std::byte>(gen());
    return v;
}

ucx::key_blob parse(const std::vector<std::byte>& blob, ucx::error_code& ec) {
    return ucx::key_blob::parse(blob, ec);
}

TEST(key_blob, round_trip) {
    const auto rkey = sample_rkey(37, 1);
    const auto blob =
        ucx::key_blob::build(0x7f0012345678, 1 << 20, ucx::memory_type::cuda_managed, rkey);
    ASSERT_EQ(blob.size(), ucx::key_blob::header_size + rkey.size() + ucx::key_blob::trailer_size);
    ucx::error_code ec;
    const auto k = parse(blob, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(k.address, 0x7f0012345678u);
    EXPECT_EQ(k.length, 1u << 20);
    EXPECT_EQ(k.memory_type, ucx::memory_type::cuda_managed);
    EXPECT_TRUE(std::equal(k.rkey.begin(), k.rkey.end(), rkey.begin(), rkey.end()));
}

TEST(key_blob, every_truncation_is_rejected) {
    const auto blob = ucx::key_blob::build(4096, 100, ucx::memory_type::host, sample_rkey(50, 2));
    for (std::size_t n = 0; n < blob.size(); ++n) {
        ucx::error_code ec;
        std::vector<std::byte> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(n));
        parse(cut, ec);
        EXPECT_EQ(ec, ucx::key_errc::truncated) << "length " << n << ": " << ec.message();
    }
}

TEST(key_blob, every_bit_flip_is_rejected) {
    const auto blob = ucx::key_blob::build(4096, 100, ucx::memory_type::host, sample_rkey(50, 3));
    for (std::size_t i = 0; i < blob.size() * 8; ++i) {
        auto bad = blob;
        bad[i / 8] ^= static_cast<std::byte>(1u << (i % 8));
        ucx::error_code ec;
        parse(bad, ec);
        EXPECT_TRUE(ec) << "bit " << i << " flipped was accepted";
        EXPECT_EQ(&ec.category(), &ucx::key_category()) << ec.message();
    }
}

TEST(key_blob, trailing_bytes_are_rejected) {
    auto blob = ucx::key_blob::build(4096, 100, ucx::memory_type::host, sample_rkey(8, 4));
    blob.push_back(std::byte{0});
    ucx::error_code ec;
    parse(blob, ec);
    EXPECT_EQ(ec, ucx::key_errc::corrupt);
}

TEST(key_blob, foreign_input_is_rejected) {
    ucx::error_code ec;
    // A worker address is not a key.
    const auto address = ucx::worker_address(sample_rkey(40, 5)).serialize();
    parse(address, ec);
    EXPECT_EQ(ec, ucx::key_errc::not_a_key);
    const std::string text = "GET / HTTP/1.1\r\n\r\n";
    std::vector<std::byte> bytes(text.size());
    std::memcpy(bytes.data(), text.data(), text.size());
    parse(bytes, ec);
    EXPECT_EQ(ec, ucx::key_errc::not_a_key);
    // Another version.
    auto blob = ucx::key_blob::build(4096, 100, ucx::memory_type::host, sample_rkey(8, 6));
    blob[4] = std::byte{2};
    parse(blob, ec);
    EXPECT_EQ(ec, ucx::key_errc::unsupported_version);
}

TEST(key_blob, impossible_regions_are_rejected) {
    ucx::error_code ec;
    // Valid framing and checksum, but an empty region / one that wraps around.
    parse(ucx::key_blob::build(4096, 0, ucx::memory_type::host, sample_rkey(8, 7)), ec);
    EXPECT_EQ(ec, ucx::key_errc::corrupt);
    parse(ucx::key_blob::build(~std::uint64_t{0} - 10, 100, ucx::memory_type::host,
                               sample_rkey(8, 7)),
          ec);
    EXPECT_EQ(ec, ucx::key_errc::corrupt);
    parse(ucx::key_blob::build(4096, 100, ucx::memory_type::host, {}), ec);
    EXPECT_EQ(ec, ucx::key_errc::corrupt);
    // Too large for any packed rkey: build refuses it.
    EXPECT_TRUE(ucx::key_blob::build(4096, 100, ucx::memory_type::host,
                                     sample_rkey(ucx::key_blob::max_rkey_size + 1, 8))
                    .empty());
}

TEST(key_blob, random_bytes_never_crash) {
    std::mt19937 gen(12345);
    const auto good = ucx::key_blob::build(4096, 100, ucx::memory_type::host, sample_rkey(30, 9));
    for (int i = 0; i < 20000; ++i) {
        std::vector<std::byte> v;
        if (i % 2 == 0) {
            v.resize(gen() % 128);
            for (auto& b : v)
                b = static_cast<std::byte>(gen());
            // Half of them with the right magic and version, to go deeper.
            if (i % 4 == 0 && v.size() >= 5)
                std::copy(good.begin(), good.begin() + 5, v.begin());
        } else {
            v = good;
            for (int k = 0, flips = 1 + static_cast<int>(gen() % 8); k < flips; ++k)
                v[gen() % v.size()] = static_cast<std::byte>(gen());
            if (v == good)
                continue;
        }
        ucx::error_code ec;
        const auto k = parse(v, ec);
        if (!ec) {
            // Only a blob with a matching CRC-32 passes: it must be consistent.
            EXPECT_EQ(v.size(),
                      ucx::key_blob::header_size + k.rkey.size() + ucx::key_blob::trailer_size);
            EXPECT_GT(k.length, 0u);
        } else {
            EXPECT_EQ(&ec.category(), &ucx::key_category());
        }
    }
}

TEST(key_errors, messages_are_clear) {
    EXPECT_EQ(ucx::error_code(ucx::key_errc::truncated).message(), "remote key blob is truncated");
    EXPECT_EQ(ucx::error_code(ucx::key_errc::wrong_endpoint).message(),
              "remote key belongs to another endpoint");
    EXPECT_STREQ(ucx::key_category().name(), "ucx.remote_key");
}

TEST(memory_region, registers_user_memory_and_packs_a_key) {
    ucx::context ctx;
    std::vector<char> mem(12345);
    ucx::memory_region r(ctx, mem.data(), mem.size());
    ASSERT_TRUE(r.is_registered());
    EXPECT_EQ(r.data(), mem.data());
    EXPECT_EQ(r.size(), mem.size());
    EXPECT_EQ(r.memory_type(), ucx::memory_type::host);
    ucx::error_code ec;
    const auto blob = r.pack_key(ec);
    ASSERT_FALSE(ec) << ec.message();
    const auto k = ucx::key_blob::parse(blob, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(k.address, reinterpret_cast<std::uintptr_t>(mem.data()));
    EXPECT_EQ(k.length, mem.size());
    EXPECT_FALSE(k.rkey.empty());
    r.reset();
    EXPECT_FALSE(r.is_registered());
    r.pack_key(ec);
    EXPECT_EQ(ec, asio::error::bad_descriptor);
}

TEST(memory_region, allocates_and_moves) {
    ucx::context ctx;
    auto r = ucx::memory_region::allocate(ctx, 1 << 20);
    ASSERT_TRUE(r.is_registered());
    ASSERT_NE(r.data(), nullptr);
    EXPECT_GE(r.size(), std::size_t{1} << 20);
    std::memset(r.data(), 0x5a, 1 << 20); // writable
    void* p = r.data();
    ucx::memory_region moved(std::move(r));
    EXPECT_FALSE(r.is_registered());
    EXPECT_EQ(moved.data(), p);
    ucx::memory_region other;
    other = std::move(moved);
    EXPECT_EQ(other.data(), p);
    EXPECT_EQ(other.buffer().size(), other.size());
}

TEST(memory_region, bad_arguments_are_errors) {
    ucx::context ctx;
    ucx::error_code ec;
    char c = 0;
    ucx::memory_region a(ctx, &c, 0, {}, ec);
    EXPECT_EQ(ec, ucx::error::invalid_region);
    EXPECT_FALSE(a.is_registered());
    ucx::memory_region b(ctx, nullptr, 16, {}, ec);
    EXPECT_EQ(ec, ucx::error::invalid_region);
    auto z = ucx::memory_region::allocate(ctx, 0, {}, ec);
    EXPECT_EQ(ec, ucx::error::invalid_region);
    EXPECT_THROW(ucx::memory_region(ctx, nullptr, 16), boost::system::system_error);
}

TEST(memory_region, cuda_memory) {
    if (!ucx::built_with_cuda() || ucx::cuda_device_count() == 0)
        GTEST_SKIP() << "CUDA memory regions need a library built with CUDA and a GPU; "
                        "built with CUDA: "
                     << ucx::built_with_cuda() << ", devices: " << ucx::cuda_device_count();
    // UCX allocates device memory in the CUDA context current on the
    // calling thread: the context makes the device's primary one current.
    ucx::context_options co;
    co.cuda.create_context = true;
    ucx::context ctx(co);
    ucx::error_code ec;
    ucx::region_options o;
    o.memory_type = ucx::memory_type::cuda;
    auto r = ucx::memory_region::allocate(ctx, 1 << 20, o, ec);
    if (!ctx.ucx_supports_cuda_memory()) {
        EXPECT_EQ(ec, ucx::error::memory_type_not_supported);
        GTEST_SKIP() << "this UCX has no CUDA transports: memory_type_not_supported, as expected";
    }
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(r.memory_type(), ucx::memory_type::cuda);
    const auto blob = r.pack_key();
    const auto k = ucx::key_blob::parse(blob, ec);
    ASSERT_FALSE(ec);
    EXPECT_EQ(k.memory_type, ucx::memory_type::cuda);
}

} // namespace
