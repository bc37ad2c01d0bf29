// Device buffers of tag operations staged through host memory, with real UCX
// traffic between two workers (TCP and shared memory). No GPU is needed: the
// workers stage with a classifier that calls some host buffers "device
// memory" and a fake copy engine over host memory, so the whole path runs
// (copy out, send from the staging buffer; receive into it, copy in) and the
// tests can hold copies back, fail them, cancel and shut down in the middle.
#include "test_support.hpp"

#include "copy_engine.hpp"
#include "device_staging.hpp"
#include "worker_impl.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <map>

using namespace ucx_test;
using ucx::detail::device_staging;
using ucx::detail::fake_copy_engine;

namespace {

/// Host buffers that the classifier calls device memory.
struct fake_device {
    std::map<const char*, std::size_t> ranges;

    std::vector<char> make(std::size_t n, std::uint32_t seed) {
        std::vector<char> v = pattern(n == 0 ? 1 : n, seed);
        v.resize(n == 0 ? 1 : n);
        ranges[v.data()] = v.size();
        return v;
    }
    void mark(const std::vector<char>& v) { ranges[v.data()] = v.size(); }
    ucx::memory_type classify(const void* p) const {
        const char* c = static_cast<const char*>(p);
        auto it = ranges.upper_bound(c);
        if (it == ranges.begin())
            return ucx::memory_type::host;
        --it;
        return c < it->first + it->second ? ucx::memory_type::cuda : ucx::memory_type::host;
    }
};

class device_staging_pair : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker a{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker b{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::endpoint a_to_b{a, b.address()};
    fake_device device;
    std::shared_ptr<fake_copy_engine> engine_a = std::make_shared<fake_copy_engine>();
    std::shared_ptr<fake_copy_engine> engine_b = std::make_shared<fake_copy_engine>();

    void SetUp() override {
        device_staging::settings s;
        s.chunk = 64 * 1024; // several chunks per message in the larger tests
        s.slots = 3;
        s.max_buffers = 512;
        auto classify = [this](const void* p) { return device.classify(p); };
        ucx::detail::use_device_staging(*ucx::detail::access::get_impl(a), classify, engine_a, s);
        ucx::detail::use_device_staging(*ucx::detail::access::get_impl(b), classify, engine_b, s);
    }

    device_staging& staging_of(ucx::worker& w) {
        return *ucx::detail::access::get_impl(w)->staging();
    }
};

// Device to device, device to host and host to device, sizes from empty to
// several chunks: the bytes arrive intact, and the copies went the expected
// ways (so the staged path really ran).
TEST_P(device_staging_pair, device_buffers_arrive_intact_every_way) {
    for (std::size_t size : {std::size_t(0), std::size_t(1), std::size_t(4096),
                             std::size_t(64 * 1024), std::size_t(1 << 20) + 17}) {
        for (int way = 0; way < 3; ++way) {
            SCOPED_TRACE("size " + std::to_string(size) + " way " + std::to_string(way));
            const bool send_device = way != 2, recv_device = way != 1;
            std::vector<char> out = pattern(size, static_cast<std::uint32_t>(size + way));
            std::vector<char> in(size + 8, 0);
            if (send_device)
                device.mark(out);
            if (recv_device)
                device.mark(in);
            const std::size_t to_host0 = engine_a->device_to_host();
            const std::size_t to_device0 = engine_b->host_to_device();
            std::optional<ucx::error_code> s, r;
            std::size_t n = 0;
            ucx::tag_t got_tag = 0;
            ucx::async_tag_recv(b, asio::buffer(in), 40 + way, ucx::tag_mask_full,
                                [&](ucx::error_code ec, std::size_t len, ucx::tag_t t) {
                                    r = ec;
                                    n = len;
                                    got_tag = t;
                                });
            ucx::async_tag_send(a_to_b, asio::buffer(out), 40 + way,
                                [&](ucx::error_code ec, std::size_t) { s = ec; });
            ASSERT_TRUE(run_until(io, [&] { return s && r; }));
            ASSERT_FALSE(*s) << s->message();
            ASSERT_FALSE(*r) << r->message();
            ASSERT_EQ(n, size);
            EXPECT_EQ(got_tag, static_cast<ucx::tag_t>(40 + way));
            EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin()));
            const std::size_t copied_out = engine_a->device_to_host() - to_host0;
            const std::size_t copied_in = engine_b->host_to_device() - to_device0;
            EXPECT_EQ(copied_out > 0, send_device && size > 0);
            EXPECT_EQ(copied_in > 0, recv_device && size > 0);
            device.ranges.clear();
        }
    }
    EXPECT_GT(staging_of(a).staged_operations(), 0u);
    EXPECT_GT(staging_of(b).staged_operations(), 0u);
    // What the application sees of it.
    EXPECT_EQ(a.stats().staged_operations, staging_of(a).staged_operations());
    EXPECT_GT(b.stats().staged_bytes, std::size_t(1) << 20);
}

// A staged receive takes the messages in order, one after another, as a
// direct one does; a host receive after it is not disturbed.
TEST_P(device_staging_pair, staged_and_direct_operations_keep_their_order) {
    constexpr int count = 20;
    std::vector<std::vector<char>> outs, ins;
    for (int i = 0; i < count; ++i) {
        outs.push_back(pattern(1000 + static_cast<std::size_t>(i) * 3000, 100 + i));
        ins.emplace_back(outs.back().size());
        if (i % 2 == 0)
            device.mark(outs.back());
        if (i % 3 == 0)
            device.mark(ins.back());
    }
    int received = 0, sent = 0;
    bool failed = false;
    for (int i = 0; i < count; ++i)
        ucx::async_tag_recv(b, asio::buffer(ins[i]), 9, ucx::tag_mask_full,
                            [&, i](ucx::error_code ec, std::size_t len, ucx::tag_t) {
                                failed |= ec || len != outs[i].size() || ins[i] != outs[i];
                                ++received;
                            });
    for (int i = 0; i < count; ++i)
        ucx::async_tag_send(a_to_b, asio::buffer(outs[i]), 9, [&](ucx::error_code ec, std::size_t) {
            failed |= static_cast<bool>(ec);
            ++sent;
        });
    ASSERT_TRUE(run_until(io, [&] { return sent == count && received == count; }));
    EXPECT_FALSE(failed);
}

// Copies held back by the engine: the io_context keeps running other work,
// the operation completes once the copies finish.
TEST_P(device_staging_pair, held_copies_do_not_block_the_io_context) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(300 * 1024, 5);
    std::vector<char> in(out.size());
    std::optional<ucx::error_code> s, r;
    ucx::async_tag_recv(b, asio::buffer(in), 3, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(out), 3,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    int ticks = 0;
    asio::steady_timer t(io);
    std::function<void()> tick = [&] {
        t.expires_after(std::chrono::milliseconds(1));
        t.async_wait([&](ucx::error_code) {
            if (++ticks < 20)
                tick();
        });
    };
    tick();
    ASSERT_TRUE(run_until(io, [&] { return ticks >= 20; }));
    EXPECT_FALSE(s) << "completed with its copies held";
    EXPECT_FALSE(r);
    EXPECT_GT(engine_a->held(), 0u);
    engine_a->set_mode(fake_copy_engine::mode::immediate);
    engine_a->release();
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    EXPECT_FALSE(*s);
    EXPECT_FALSE(*r);
    EXPECT_EQ(in, out);
}

// A copy that fails: the send reports the engine's error and sends nothing
// (the receive still waits, then is cancelled).
TEST_P(device_staging_pair, a_failed_copy_fails_the_send_and_sends_nothing) {
    engine_a->fail_completion(engine_a->started() + 1,
                              ucx::make_error_code(ucx::error::cuda_error));
    std::vector<char> out = device.make(200 * 1024, 6);
    std::vector<char> in(out.size());
    std::optional<ucx::error_code> s, r;
    asio::cancellation_signal cancel;
    ucx::async_tag_recv(
        b, asio::buffer(in), 4, ucx::tag_mask_full,
        asio::bind_cancellation_slot(cancel.slot(),
                                     [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; }));
    ucx::async_tag_send(a_to_b, asio::buffer(out), 4,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
    EXPECT_EQ(*s, ucx::error::cuda_error) << s->message();
    // Nothing arrives: give it time to, then cancel the receive.
    run_until(
        io, [&] { return r.has_value(); }, std::chrono::milliseconds(200));
    EXPECT_FALSE(r) << "a message arrived from a failed send";
    cancel.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
}

// Sends behind a staged send that fails (or is cancelled) before it reached
// UCX still go, in order, and only they arrive.
TEST_P(device_staging_pair, sends_behind_a_failed_staged_send_go_on) {
    engine_a->fail_start(engine_a->started(), ucx::make_error_code(ucx::error::cuda_error));
    std::vector<char> bad = device.make(100 * 1024, 14);
    std::vector<char> first = pattern(1000, 15), second = device.make(2000, 16);
    std::vector<char> in1(4096), in2(4096);
    std::optional<ucx::error_code> s0, s1, s2, r1, r2;
    std::size_t n1 = 0, n2 = 0;
    ucx::async_tag_recv(b, asio::buffer(in1), 11, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t n, ucx::tag_t) { r1 = ec, n1 = n; });
    ucx::async_tag_recv(b, asio::buffer(in2), 11, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t n, ucx::tag_t) { r2 = ec, n2 = n; });
    ucx::async_tag_send(a_to_b, asio::buffer(bad), 11,
                        [&](ucx::error_code ec, std::size_t) { s0 = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(first), 11,
                        [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(second), 11,
                        [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s0 && s1 && s2 && r1 && r2; }));
    EXPECT_EQ(*s0, ucx::error::cuda_error);
    EXPECT_FALSE(*s1);
    EXPECT_FALSE(*s2);
    ASSERT_FALSE(*r1);
    ASSERT_FALSE(*r2);
    ASSERT_EQ(n1, first.size());
    ASSERT_EQ(n2, second.size());
    EXPECT_TRUE(std::equal(first.begin(), first.end(), in1.begin()));
    EXPECT_TRUE(std::equal(second.begin(), second.end(), in2.begin()));
}

// A message larger than the device buffer: truncation, as without staging.
TEST_P(device_staging_pair, a_message_too_large_is_truncated_as_without_staging) {
    std::vector<char> out = pattern(100 * 1024, 7);
    std::vector<char> in = device.make(10 * 1024, 8);
    std::optional<ucx::error_code> s, r;
    ucx::async_tag_recv(b, asio::buffer(in), 5, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(out), 5,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    EXPECT_EQ(*r, ucx::errc::message_truncated) << r->message();
}

// A staged receive with no message: cancelled through its slot.
TEST_P(device_staging_pair, a_staged_receive_is_cancelled) {
    std::vector<char> in = device.make(4096, 9);
    std::optional<ucx::error_code> r;
    asio::cancellation_signal cancel;
    ucx::async_tag_recv(
        b, asio::buffer(in), 6, ucx::tag_mask_full,
        asio::bind_cancellation_slot(cancel.slot(),
                                     [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; }));
    run_until(
        io, [&] { return r.has_value(); }, std::chrono::milliseconds(50));
    ASSERT_FALSE(r);
    cancel.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    // The worker still receives afterwards.
    std::vector<char> out = pattern(4096, 10);
    std::optional<ucx::error_code> s, r2;
    ucx::async_tag_recv(b, asio::buffer(in), 6, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r2 = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(out), 6,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r2; }));
    EXPECT_FALSE(*r2);
    EXPECT_EQ(in, out);
}

// A staged send cancelled while its copies are held: nothing was sent, it
// completes with operation_aborted.
TEST_P(device_staging_pair, a_staged_send_is_cancelled_before_it_is_sent) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(128 * 1024, 11);
    std::optional<ucx::error_code> s;
    asio::cancellation_signal cancel;
    ucx::async_tag_send(a_to_b, asio::buffer(out), 7,
                        asio::bind_cancellation_slot(
                            cancel.slot(), [&](ucx::error_code ec, std::size_t) { s = ec; }));
    run_until(
        io, [&] { return s.has_value(); }, std::chrono::milliseconds(20));
    ASSERT_FALSE(s);
    cancel.emit(asio::cancellation_type::terminal);
    engine_a->release();
    ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
    EXPECT_EQ(*s, asio::error::operation_aborted);
}

// The worker shuts down under a staged receive and a send whose copies are
// held: both complete with operation_aborted, nothing leaks or crashes.
TEST_P(device_staging_pair, shutdown_ends_staged_operations) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(128 * 1024, 12);
    std::vector<char> in = device.make(4096, 13);
    std::optional<ucx::error_code> s, r;
    ucx::async_tag_send(a_to_b, asio::buffer(out), 8,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    ucx::async_tag_recv(b, asio::buffer(in), 99, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; });
    run_until(
        io, [&] { return s || r; }, std::chrono::milliseconds(20));
    a.close();
    b.close();
    ASSERT_TRUE(run_until(io, [&] { return s && r; }));
    EXPECT_TRUE(*s) << "the send succeeded with its copies held";
    EXPECT_EQ(*r, asio::error::operation_aborted) << r->message();
}

INSTANTIATE_TEST_SUITE_P(all, device_staging_pair,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// Per-endpoint messaging (a listener's connection) with device buffers.
class device_staging_connection : public testing::TestWithParam<transport> {
protected:
    asio::io_context io;
    ucx::context ctx{options_for(GetParam(), true)};
    ucx::worker server_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::worker client_worker{ctx, io, strict_worker_options(ucx::progress_mode::event)};
    ucx::listener server{server_worker,
                         asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    fake_device device;
    std::shared_ptr<fake_copy_engine> engine = std::make_shared<fake_copy_engine>();
};

TEST_P(device_staging_connection, endpoint_messages_from_and_into_device_buffers) {
    auto classify = [this](const void* p) { return device.classify(p); };
    ucx::detail::use_device_staging(*ucx::detail::access::get_impl(server_worker), classify,
                                    engine);
    ucx::detail::use_device_staging(*ucx::detail::access::get_impl(client_worker), classify,
                                    engine);
    auto [client, peer] = connect_pair(io, server, client_worker);
    ASSERT_TRUE(client.is_open() && peer.is_open());
    for (std::size_t size : {std::size_t(10), std::size_t(3 << 20)}) {
        std::vector<char> out = device.make(size, 21);
        std::vector<char> in = device.make(size, 22);
        std::optional<ucx::error_code> s, r;
        std::size_t n = 0;
        std::uint32_t tag = 0;
        peer.async_recv(asio::buffer(in), 0, 0,
                        [&](ucx::error_code ec, std::size_t len, std::uint32_t t) {
                            r = ec;
                            n = len;
                            tag = t;
                        });
        client.async_send(asio::buffer(out), 77, [&](ucx::error_code ec, std::size_t) { s = ec; });
        ASSERT_TRUE(run_until(io, [&] { return s && r; }));
        ASSERT_FALSE(*s) << s->message();
        ASSERT_FALSE(*r) << r->message();
        EXPECT_EQ(n, size);
        EXPECT_EQ(tag, 77u);
        EXPECT_EQ(in, out);
    }
    EXPECT_GT(engine->device_to_host(), 0u);
    EXPECT_GT(engine->host_to_device(), 0u);
}

INSTANTIATE_TEST_SUITE_P(all, device_staging_connection,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

} // namespace
