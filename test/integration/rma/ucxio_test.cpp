// ucx::ucxio between two workers of one process, over TCP and shared memory:
// random offsets and sizes against a local model of the region, Asio's
// random-access and stream algorithms, seek/tell, and EOF exactly at the end.
#include "test_support.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/read_at.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/write_at.hpp>

#include <algorithm>
#include <cstring>

using namespace ucx_test;

namespace {

using ucx::error_code;
using basis = ucx::ucxio::seek_basis;

struct io_fixture {
    io_fixture(transport t, std::size_t size)
        : ctx(options_for(t)), a(ctx, io, strict_worker_options(ucx::progress_mode::event)),
          b(ctx, io, strict_worker_options(ucx::progress_mode::event)), a_to_b(a, b.address()),
          region(ucx::memory_region::allocate(ctx, size)), model(pattern(size, 77)) {
        std::memcpy(region.data(), model.data(), size);
        dev.emplace(ucx::remote_key(a_to_b, region.pack_key()));
    }

    template <class Init>
    std::pair<error_code, std::size_t> wait(Init init) {
        std::optional<std::pair<error_code, std::size_t>> r;
        init([&](error_code ec, std::size_t n) { r.emplace(ec, n); });
        EXPECT_FALSE(r.has_value()) << "completed inside the initiating function";
        EXPECT_TRUE(run_until(io, [&] { return r.has_value(); })) << "operation hung";
        return r.value_or(std::pair<error_code, std::size_t>(asio::error::timed_out, 0));
    }
    error_code flush() {
        std::optional<error_code> r;
        dev->async_flush([&](error_code ec) { r = ec; });
        EXPECT_TRUE(run_until(io, [&] { return r.has_value(); }));
        return r.value_or(asio::error::timed_out);
    }
    bool region_matches_model() const {
        return std::memcmp(region.data(), model.data(), model.size()) == 0;
    }

    asio::io_context io;
    ucx::context ctx;
    ucx::worker a, b;
    ucx::endpoint a_to_b;
    ucx::memory_region region;
    std::vector<char> model;
    std::optional<ucx::ucxio> dev;
};

class ucxio_test : public testing::TestWithParam<transport> {};

std::string param_name(const testing::TestParamInfo<transport>& info) {
    return to_string(info.param);
}

TEST_P(ucxio_test, random_offsets_and_sizes_against_a_model) {
    const std::size_t size = (1u << 20) + 123;
    io_fixture f(GetParam(), size);
    EXPECT_EQ(f.dev->size(), size);
    std::mt19937_64 gen(2024);
    std::vector<char> buf(70000);
    std::size_t reads = 0, writes = 0, eofs = 0, refused = 0;
    for (int i = 0; i < 1500; ++i) {
        const std::uint64_t offset = gen() % (size + 200);
        const std::size_t n = (i % 10 == 0) ? 0 : gen() % buf.size();
        const std::size_t expect =
            offset < size ? std::min<std::uint64_t>(n, size - offset) : std::size_t{0};
        SCOPED_TRACE("op " + std::to_string(i) + " offset " + std::to_string(offset) + " size " +
                     std::to_string(n));
        if (gen() % 2 == 0) {
            auto [ec, got] = f.wait([&](auto h) {
                f.dev->async_read_some_at(offset, asio::buffer(buf.data(), n), std::move(h));
            });
            if (n > 0 && offset >= size) {
                ASSERT_EQ(ec, asio::error::eof);
                ++eofs;
                continue;
            }
            ASSERT_FALSE(ec) << ec.message();
            ASSERT_EQ(got, expect);
            ASSERT_TRUE(std::equal(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(got),
                                   f.model.begin() + static_cast<std::ptrdiff_t>(offset)));
            ++reads;
        } else {
            auto data = pattern(n, static_cast<std::uint32_t>(i));
            auto [ec, got] = f.wait([&](auto h) {
                f.dev->async_write_some_at(offset, asio::buffer(data), std::move(h));
            });
            if (n > 0 && offset >= size) {
                ASSERT_EQ(ec, ucx::error::out_of_bounds);
                ++refused;
                continue;
            }
            ASSERT_FALSE(ec) << ec.message();
            ASSERT_EQ(got, expect);
            std::copy_n(data.begin(), got, f.model.begin() + static_cast<std::ptrdiff_t>(offset));
            ASSERT_FALSE(f.flush());
            ++writes;
        }
    }
    EXPECT_TRUE(f.region_matches_model());
    EXPECT_GT(reads, 0u);
    EXPECT_GT(writes, 0u);
    EXPECT_GT(eofs + refused, 0u);
}

TEST_P(ucxio_test, eof_exactly_at_the_end) {
    const std::size_t size = 4096;
    io_fixture f(GetParam(), size);
    char c[2] = {};
    auto r1 = f.wait([&](auto h) { f.dev->async_read_some_at(size - 1, asio::buffer(c, 1), h); });
    EXPECT_FALSE(r1.first);
    EXPECT_EQ(r1.second, 1u);
    EXPECT_EQ(c[0], f.model[size - 1]);
    auto r2 = f.wait([&](auto h) { f.dev->async_read_some_at(size - 1, asio::buffer(c, 2), h); });
    EXPECT_FALSE(r2.first);
    EXPECT_EQ(r2.second, 1u); // short, never past the end
    auto r3 = f.wait([&](auto h) { f.dev->async_read_some_at(size, asio::buffer(c, 1), h); });
    EXPECT_EQ(r3.first, asio::error::eof);
    EXPECT_EQ(r3.second, 0u);
    auto r4 = f.wait([&](auto h) { f.dev->async_read_some_at(size + 100, asio::buffer(c, 1), h); });
    EXPECT_EQ(r4.first, asio::error::eof);
    // An empty buffer completes with 0 anywhere.
    auto r5 = f.wait([&](auto h) { f.dev->async_read_some_at(size + 100, asio::buffer(c, 0), h); });
    EXPECT_FALSE(r5.first);
    EXPECT_EQ(r5.second, 0u);
    // Writes: short at the end, refused past it.
    auto w1 = f.wait([&](auto h) { f.dev->async_write_some_at(size - 1, asio::buffer(c, 2), h); });
    EXPECT_FALSE(w1.first);
    EXPECT_EQ(w1.second, 1u);
    auto w2 = f.wait([&](auto h) { f.dev->async_write_some_at(size, asio::buffer(c, 1), h); });
    EXPECT_EQ(w2.first, ucx::error::out_of_bounds);
}

TEST_P(ucxio_test, asio_read_at_and_write_at_in_parallel_chunks) {
    const std::size_t size = (4u << 20) + 17;
    io_fixture f(GetParam(), size);
    auto data = pattern(size, 5);
    constexpr std::size_t parts = 8;
    const std::size_t chunk = (size + parts - 1) / parts;
    std::size_t done = 0;
    for (std::size_t i = 0; i < parts; ++i) {
        const std::size_t off = i * chunk, n = std::min(chunk, size - off);
        asio::async_write_at(*f.dev, off, asio::buffer(data.data() + off, n),
                             [&, n](error_code ec, std::size_t got) {
                                 EXPECT_FALSE(ec) << ec.message();
                                 EXPECT_EQ(got, n);
                                 ++done;
                             });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return done == parts; }));
    ASSERT_FALSE(f.flush());
    ASSERT_EQ(std::memcmp(f.region.data(), data.data(), size), 0);
    std::memcpy(f.model.data(), data.data(), size);

    std::vector<char> back(size);
    done = 0;
    for (std::size_t i = 0; i < parts; ++i) {
        const std::size_t off = i * chunk, n = std::min(chunk, size - off);
        asio::async_read_at(*f.dev, off, asio::buffer(back.data() + off, n),
                            [&, n](error_code ec, std::size_t got) {
                                EXPECT_FALSE(ec) << ec.message();
                                EXPECT_EQ(got, n);
                                ++done;
                            });
    }
    ASSERT_TRUE(run_until(f.io, [&] { return done == parts; }));
    EXPECT_EQ(back, data);

    // A composed read across the end stops with eof and the bytes it got.
    std::vector<char> tail(1000);
    auto r = f.wait(
        [&](auto h) { asio::async_read_at(*f.dev, size - 300, asio::buffer(tail), std::move(h)); });
    EXPECT_EQ(r.first, asio::error::eof);
    EXPECT_EQ(r.second, 300u);
    EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 300, data.end() - 300));
    // A composed write across the end writes what fits, then fails.
    auto w = f.wait(
        [&](auto h) { asio::async_write_at(*f.dev, size - 10, asio::buffer(tail), std::move(h)); });
    EXPECT_EQ(w.first, ucx::error::out_of_bounds);
    EXPECT_EQ(w.second, 10u);
    // A buffer sequence: several buffers, moved one after the other.
    std::vector<char> p1(100), p2(5000), p3(7);
    std::array<asio::mutable_buffer, 3> seq{asio::buffer(p1), asio::buffer(p2), asio::buffer(p3)};
    auto s = f.wait([&](auto h) { asio::async_read_at(*f.dev, 1000, seq, std::move(h)); });
    EXPECT_FALSE(s.first);
    EXPECT_EQ(s.second, 5107u);
    EXPECT_TRUE(std::equal(p1.begin(), p1.end(), data.begin() + 1000));
    EXPECT_TRUE(std::equal(p2.begin(), p2.end(), data.begin() + 1100));
    EXPECT_TRUE(std::equal(p3.begin(), p3.end(), data.begin() + 6100));
}

TEST_P(ucxio_test, stream_face_with_seek_and_tell) {
    const std::size_t size = 100000;
    io_fixture f(GetParam(), size);
    auto& d = *f.dev;
    EXPECT_EQ(d.tell(), 0u);
    // Read everything with asio::async_read: eof exactly at the end.
    std::vector<char> all(size + 50);
    auto r = f.wait([&](auto h) { asio::async_read(d, asio::buffer(all), std::move(h)); });
    EXPECT_EQ(r.first, asio::error::eof);
    EXPECT_EQ(r.second, size);
    EXPECT_TRUE(std::equal(f.model.begin(), f.model.end(), all.begin()));
    EXPECT_EQ(d.tell(), size);

    // seek from begin, current, end.
    EXPECT_EQ(d.seek(10, basis::begin), 10u);
    EXPECT_EQ(d.seek(5, basis::current), 15u);
    EXPECT_EQ(d.seek(-5, basis::current), 10u);
    EXPECT_EQ(d.seek(-100, basis::end), size - 100);
    EXPECT_EQ(d.seek(0, basis::end), size);
    // Negative results are errors and leave the position alone.
    error_code ec;
    d.seek(-1, basis::begin, ec);
    EXPECT_EQ(ec, asio::error::invalid_argument);
    EXPECT_EQ(d.tell(), size);
    d.seek(-static_cast<std::int64_t>(size) - 1, basis::end, ec);
    EXPECT_EQ(ec, asio::error::invalid_argument);
    d.seek(std::numeric_limits<std::int64_t>::min(), basis::current, ec);
    EXPECT_EQ(ec, asio::error::invalid_argument);
    EXPECT_THROW(d.seek(-1, basis::begin), boost::system::system_error);
    EXPECT_EQ(d.tell(), size);
    // Past the end: allowed; reads there give eof, writes out_of_range.
    EXPECT_EQ(d.seek(10, basis::end), size + 10);
    char c[4] = {};
    auto re = f.wait([&](auto h) { d.async_read_some(asio::buffer(c), std::move(h)); });
    EXPECT_EQ(re.first, asio::error::eof);
    auto we = f.wait([&](auto h) { d.async_write_some(asio::buffer(c), std::move(h)); });
    EXPECT_EQ(we.first, ucx::error::out_of_bounds);
    EXPECT_EQ(d.tell(), size + 10);

    // Write with asio::async_write from a position, read it back as a stream.
    auto data = pattern(30000, 9);
    d.seek(-30000, basis::end);
    auto w = f.wait([&](auto h) { asio::async_write(d, asio::buffer(data), std::move(h)); });
    EXPECT_FALSE(w.first);
    EXPECT_EQ(w.second, data.size());
    EXPECT_EQ(d.tell(), size);
    ASSERT_FALSE(f.flush());
    EXPECT_TRUE(std::equal(data.begin(), data.end(),
                           static_cast<const char*>(f.region.data()) + size - 30000));
    d.seek(-30000, basis::current);
    std::vector<char> back(30000);
    auto rb = f.wait([&](auto h) { asio::async_read(d, asio::buffer(back), std::move(h)); });
    EXPECT_FALSE(rb.first);
    EXPECT_EQ(back, data);
    // A write across the end with async_write: the part that fits, then the error.
    d.seek(-10, basis::end);
    auto wx = f.wait([&](auto h) { asio::async_write(d, asio::buffer(data), std::move(h)); });
    EXPECT_EQ(wx.first, ucx::error::out_of_bounds);
    EXPECT_EQ(wx.second, 10u);
    EXPECT_EQ(d.tell(), size);
}

TEST_P(ucxio_test, every_completion_style) {
    io_fixture f(GetParam(), 65536);
    for (style st : all_styles()) {
        SCOPED_TRACE(to_string(st));
        std::vector<char> buf(1000);
        auto p = start<std::size_t>(st, f.io, [&](auto&& token) {
            return f.dev->async_read_some_at(500, asio::buffer(buf),
                                             std::forward<decltype(token)>(token));
        });
        ASSERT_TRUE(run_until(f.io, [&] { return p.ready(); }));
        ASSERT_FALSE(std::get<0>(p.get()));
        EXPECT_EQ(std::get<1>(p.get()), 1000u);
        EXPECT_TRUE(std::equal(buf.begin(), buf.end(), f.model.begin() + 500));
        auto e = start<std::size_t>(st, f.io, [&](auto&& token) {
            return f.dev->async_read_some_at(65536, asio::buffer(buf),
                                             std::forward<decltype(token)>(token));
        });
        ASSERT_TRUE(run_until(f.io, [&] { return e.ready(); }));
        EXPECT_EQ(std::get<0>(e.get()), asio::error::eof);
    }
}

TEST_P(ucxio_test, empty_key_is_refused) {
    EXPECT_THROW(ucx::ucxio{ucx::remote_key{}}, boost::system::system_error);
}

INSTANTIATE_TEST_SUITE_P(all, ucxio_test, testing::Values(transport::tcp, transport::shared_memory),
                         param_name);

} // namespace
