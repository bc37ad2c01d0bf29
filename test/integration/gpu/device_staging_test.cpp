// Device buffers of tag operations staged through host memory, with real UCX
// traffic between two workers (TCP and shared memory). No GPU is needed: the
// workers stage with a classifier that calls some host buffers "device
// memory" and a fake copy engine over host memory, so the whole path runs
// (copy out, send from the staging buffer; receive into it, copy in) and the
// tests can hold copies back, fail them, cancel and shut down in the middle.
#include "fake_device.hpp"
#include "test_support.hpp"

#include "engine/worker_impl.hpp"
#include "gpu/copy_engine.hpp"
#include "gpu/device_staging.hpp"

#include <ucx/am.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <algorithm>
#include <array>
#include <map>

using namespace ucx_test;
using ucx::detail::device_staging;
using ucx::detail::fake_copy_engine;

namespace {

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
        return *ucx::detail::staging_of(*ucx::detail::access::get_impl(w));
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
    ASSERT_TRUE(run_ticks(io));
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

// A graceful close waits for the sends made before it, staged ones too:
// while a staged send is still copied from the device the close waits; then
// the message goes, arrives intact, and the close completes.
TEST_P(device_staging_pair, a_graceful_close_waits_for_staged_sends) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(200 * 1024, 21);
    std::vector<char> host = pattern(1000, 22);
    std::vector<char> in(out.size()), in_host(host.size());
    std::optional<ucx::error_code> s, s_host, r, r_host, closed;
    ucx::async_tag_recv(b, asio::buffer(in), 31, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r = ec; });
    ucx::async_tag_recv(b, asio::buffer(in_host), 32, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { r_host = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(out), 31,
                        [&](ucx::error_code ec, std::size_t) { s = ec; });
    // A host send behind it waits its turn, and the close waits for both.
    ucx::async_tag_send(a_to_b, asio::buffer(host), 32,
                        [&](ucx::error_code ec, std::size_t) { s_host = ec; });
    a_to_b.async_close([&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_ticks(io));
    EXPECT_FALSE(closed) << "closed while a staged send was still being copied";
    EXPECT_FALSE(s);
    EXPECT_FALSE(s_host);
    engine_a->set_mode(fake_copy_engine::mode::immediate);
    engine_a->release();
    ASSERT_TRUE(run_until(io, [&] { return s && s_host && r && r_host && closed; }))
        << (s ? s->message() : "-") << "/" << (s_host ? s_host->message() : "-") << "/"
        << (closed ? closed->message() : "-");
    EXPECT_FALSE(*s) << s->message();
    EXPECT_FALSE(*s_host) << s_host->message();
    EXPECT_FALSE(*r) << r->message();
    EXPECT_FALSE(*r_host) << r_host->message();
    EXPECT_FALSE(*closed) << closed->message();
    EXPECT_EQ(in, out);
    EXPECT_EQ(in_host, host);
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

// ---- active messages ----

/// Receive memory for an id whose memory type is cuda: host memory that the
/// classifier calls device memory.
class fake_device_allocator final : public ucx::am_allocator {
public:
    explicit fake_device_allocator(fake_device& d) : device_(d) {}
    ucx::memory_type memory_type() const noexcept override { return ucx::memory_type::cuda; }
    void* allocate(std::size_t size) noexcept override {
        auto* p = static_cast<char*>(::operator new(size == 0 ? 1 : size, std::nothrow));
        if (p) {
            device_.ranges[p] = size == 0 ? 1 : size;
            ++live;
            ++allocations;
        }
        return p;
    }
    void deallocate(void* p, std::size_t) noexcept override {
        device_.ranges.erase(static_cast<char*>(p));
        --live;
        ::operator delete(p);
    }
    std::size_t live = 0, allocations = 0;

private:
    fake_device& device_;
};

/// What an active-message receive got.
struct am_received {
    std::optional<ucx::error_code> ec;
    std::vector<char> data, header;
    ucx::memory_type mem = ucx::memory_type::host;
    bool rendezvous = false;
};

class device_staging_am : public device_staging_pair {
protected:
    std::shared_ptr<fake_device_allocator> alloc = std::make_shared<fake_device_allocator>(device);
    static constexpr unsigned device_id = 21; ///< received into (fake) device memory
    static constexpr unsigned host_id = 22;

    void SetUp() override {
        device_staging_pair::SetUp();
        ucx::register_am_allocator(b, alloc);
        ucx::set_am_memory_type(b, device_id, ucx::memory_type::cuda);
    }

    static ucx::am_send_options rendezvous() {
        ucx::am_send_options o;
        o.protocol = ucx::am_protocol::rendezvous;
        return o;
    }

    /// Receives one message on `id` of `b` into `r`.
    void recv(unsigned id, am_received& r) {
        ucx::async_am_recv(b, id, [&r](ucx::error_code ec, ucx::am_message m) {
            const auto* p = static_cast<const char*>(m.data().data());
            r.data.assign(p, p + m.size());
            const auto h = m.header();
            r.header.assign(reinterpret_cast<const char*>(h.data()),
                            reinterpret_cast<const char*>(h.data()) + h.size());
            r.mem = m.memory_type();
            r.rendezvous = m.rendezvous();
            r.ec = ec;
        });
    }
};

// Device to device, device to host and host to device, from empty to several
// chunks: the bytes and the header arrive intact, and the copies went the
// expected ways (so the staged path really ran).
TEST_P(device_staging_am, device_buffers_arrive_intact_every_way) {
    const std::size_t staged0 = staging_of(a).staged_operations();
    const std::size_t fetched0 = staging_of(b).staged_operations();
    for (std::size_t size :
         {std::size_t(0), std::size_t(1), std::size_t(4096), std::size_t(3 * 64 * 1024) + 17}) {
        for (int way = 0; way < 3; ++way) {
            SCOPED_TRACE("size " + std::to_string(size) + " way " + std::to_string(way));
            const bool send_device = way != 2, recv_device = way != 1;
            std::vector<char> out = pattern(size, static_cast<std::uint32_t>(size + way));
            if (send_device)
                device.mark(out);
            const std::size_t to_host0 = engine_a->device_to_host();
            const std::size_t to_device0 = engine_b->host_to_device();
            const std::string header = "way " + std::to_string(way);
            const unsigned id = recv_device ? device_id : host_id;
            std::optional<ucx::error_code> s;
            std::size_t sent = 0;
            am_received r;
            recv(id, r);
            ucx::async_am_send(a_to_b, id, asio::buffer(header), asio::buffer(out), rendezvous(),
                               [&](ucx::error_code ec, std::size_t n) {
                                   s = ec;
                                   sent = n;
                               });
            ASSERT_TRUE(run_until(io, [&] { return s && r.ec; }));
            ASSERT_FALSE(*s) << s->message();
            ASSERT_FALSE(*r.ec) << r.ec->message();
            EXPECT_EQ(sent, size);
            EXPECT_EQ(r.data, out);
            EXPECT_EQ(std::string(r.header.begin(), r.header.end()), header);
            const std::size_t copied_out = engine_a->device_to_host() - to_host0;
            const std::size_t copied_in = engine_b->host_to_device() - to_device0;
            EXPECT_EQ(copied_out > 0, send_device && size > 0);
            if (r.rendezvous) {
                EXPECT_EQ(r.mem, recv_device ? ucx::memory_type::cuda : ucx::memory_type::host);
                EXPECT_EQ(copied_in > 0, recv_device && size > 0);
            }
            device.ranges.erase(out.data());
        }
    }
    // Empty buffers have nothing to copy: they go to UCX directly.
    EXPECT_EQ(staging_of(a).staged_operations() - staged0, 6u);
    EXPECT_GE(staging_of(b).staged_operations() - fetched0, 6u);
    EXPECT_GT(b.stats().staged_bytes, std::size_t(3 * 64 * 1024));
    EXPECT_TRUE(run_until(io, [&] { return alloc->live == 0; }));
}

// Eager messages to an id of device memory stay in host memory.
TEST_P(device_staging_am, eager_messages_stay_in_host_memory) {
    std::vector<char> out = device.make(100, 30);
    ucx::am_send_options eager;
    eager.protocol = ucx::am_protocol::eager;
    std::optional<ucx::error_code> s;
    am_received r;
    recv(device_id, r);
    ucx::async_am_send(a_to_b, device_id, asio::const_buffer(), asio::buffer(out), eager,
                       [&](ucx::error_code ec, std::size_t) { s = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s && r.ec; }));
    ASSERT_FALSE(*r.ec);
    EXPECT_EQ(r.data, out);
    EXPECT_FALSE(r.rendezvous);
    EXPECT_EQ(r.mem, ucx::memory_type::host);
    EXPECT_GT(engine_a->device_to_host(), 0u);
    EXPECT_EQ(engine_b->host_to_device(), 0u);
}

// A sequence of host and device buffers is gathered into one message.
TEST_P(device_staging_am, a_buffer_sequence_with_device_buffers_is_gathered) {
    std::vector<char> p1 = pattern(100, 31), p2 = device.make(70 * 1024, 32), p3 = pattern(5, 33),
                      p4 = device.make(3, 34);
    std::array<asio::const_buffer, 5> seq{asio::buffer(p1), asio::buffer(p2), asio::const_buffer(),
                                          asio::buffer(p3), asio::buffer(p4)};
    std::vector<char> expect(p1);
    for (const auto* p : {&p2, &p3, &p4})
        expect.insert(expect.end(), p->begin(), p->end());
    for (unsigned id : {host_id, device_id}) {
        const std::size_t to_host0 = engine_a->device_to_host();
        std::optional<ucx::error_code> s;
        std::size_t sent = 0;
        am_received r;
        recv(id, r);
        ucx::async_am_send(a_to_b, id, asio::buffer("seq", 3), seq, rendezvous(),
                           [&](ucx::error_code ec, std::size_t n) {
                               s = ec;
                               sent = n;
                           });
        ASSERT_TRUE(run_until(io, [&] { return s && r.ec; }));
        ASSERT_FALSE(*s) << s->message();
        ASSERT_FALSE(*r.ec) << r.ec->message();
        EXPECT_EQ(sent, expect.size());
        EXPECT_EQ(r.data, expect);
        EXPECT_EQ(std::string(r.header.begin(), r.header.end()), "seq");
        // p2 spans two chunks, p4 one: at least three copies from the device.
        EXPECT_GE(engine_a->device_to_host() - to_host0, 3u);
    }
    // A device copy of the gather that fails: nothing is sent.
    // The second chunk copies the rest of p2, then p4: fail the first or
    // the second of these when it starts, or the second when it ends.
    for (int how = 0; how < 3; ++how) {
        SCOPED_TRACE(how);
        const auto ec = ucx::make_error_code(ucx::error::cuda_error);
        if (how < 2)
            engine_a->fail_start(engine_a->started() + 1 + static_cast<std::size_t>(how), ec);
        else
            engine_a->fail_completion(engine_a->started() + 2, ec);
        std::optional<ucx::error_code> s;
        ucx::async_am_send(a_to_b, host_id, asio::buffer("seq", 3), seq,
                           [&](ucx::error_code e, std::size_t) { s = e; });
        ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
        EXPECT_EQ(*s, ucx::error::cuda_error) << s->message();
    }
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(50));
    EXPECT_EQ(ucx::am_queue(b, host_id).messages, 0u) << "a message arrived from a failed send";
    EXPECT_EQ(engine_a->outstanding(), 0u);
}

// Staged and host active messages and tag messages on one endpoint reach
// UCX in the order they were made.
TEST_P(device_staging_am, sends_keep_their_order_across_kinds) {
    constexpr int count = 24;
    std::vector<std::vector<char>> outs;
    for (int i = 0; i < count; ++i) {
        outs.push_back(pattern(500 + static_cast<std::size_t>(i) * 7000, 200 + i));
        if (i % 3 != 2)
            device.mark(outs.back());
    }
    std::vector<am_received> am_in(count);
    std::vector<std::vector<char>> tag_in(count);
    int sent = 0, tags = 0;
    bool failed = false;
    for (int i = 0; i < count; ++i) {
        if (i % 4 == 3) {
            tag_in[i].resize(outs[i].size());
            ucx::async_tag_recv(b, asio::buffer(tag_in[i]), 12, ucx::tag_mask_full,
                                [&, i](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                    failed |= ec || n != outs[i].size() || tag_in[i] != outs[i];
                                    ++tags;
                                });
        } else {
            recv(i % 2 ? host_id : device_id, am_in[i]);
        }
    }
    for (int i = 0; i < count; ++i) {
        auto done = [&](ucx::error_code ec, std::size_t) {
            failed |= static_cast<bool>(ec);
            ++sent;
        };
        if (i % 4 == 3)
            ucx::async_tag_send(a_to_b, asio::buffer(outs[i]), 12, done);
        else
            ucx::async_am_send(a_to_b, i % 2 ? host_id : device_id, asio::const_buffer(),
                               asio::buffer(outs[i]), i % 5 ? rendezvous() : ucx::am_send_options{},
                               done);
    }
    const auto all_received = [&] {
        for (int i = 0; i < count; ++i)
            if (i % 4 != 3 && !am_in[i].ec)
                return false;
        return true;
    };
    ASSERT_TRUE(
        run_until(io, [&] { return sent == count && tags == count / 4 && all_received(); }));
    EXPECT_FALSE(failed);
    for (int i = 0; i < count; ++i) {
        if (i % 4 == 3)
            continue;
        SCOPED_TRACE(i);
        ASSERT_TRUE(am_in[i].ec);
        EXPECT_FALSE(*am_in[i].ec);
        EXPECT_EQ(am_in[i].data, outs[i]);
    }
    EXPECT_GT(engine_b->host_to_device(), 0u);
}

// A host tag send and a host active message made after a staged active
// message whose copies are held wait for it: nothing arrives before it.
TEST_P(device_staging_am, host_sends_wait_behind_a_staged_active_message) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> first = device.make(100 * 1024, 40), second = pattern(300, 41),
                      third = pattern(200, 42);
    std::vector<char> tag_in(second.size());
    std::optional<ucx::error_code> s1, s2, s3, t;
    am_received r1, r3;
    recv(host_id, r1);
    recv(host_id, r3);
    ucx::async_tag_recv(b, asio::buffer(tag_in), 13, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { t = ec; });
    ucx::async_am_send(a_to_b, host_id, asio::const_buffer(), asio::buffer(first),
                       [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    ucx::async_tag_send(a_to_b, asio::buffer(second), 13,
                        [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ucx::async_am_send(a_to_b, host_id, asio::const_buffer(), asio::buffer(third),
                       [&](ucx::error_code ec, std::size_t) { s3 = ec; });
    run_until(
        io, [&] { return t || r1.ec; }, std::chrono::milliseconds(100));
    EXPECT_FALSE(t) << "a tag message overtook a staged active message";
    EXPECT_FALSE(r1.ec);
    EXPECT_GT(engine_a->held(), 0u);
    engine_a->set_mode(fake_copy_engine::mode::immediate);
    engine_a->release();
    ASSERT_TRUE(run_until(io, [&] { return s1 && s2 && s3 && t && r1.ec && r3.ec; }));
    EXPECT_FALSE(*s1 || *s2 || *s3 || *t || *r1.ec || *r3.ec);
    EXPECT_EQ(r1.data, first);
    EXPECT_EQ(tag_in, second);
    EXPECT_EQ(r3.data, third);
}

// A staged send cancelled while its copies are held: nothing was sent. An
// invalid id or header fails before anything is copied.
TEST_P(device_staging_am, a_staged_send_is_cancelled_or_refused_before_it_is_sent) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(128 * 1024, 49);
    std::optional<ucx::error_code> s, bad_id, bad_header;
    asio::cancellation_signal cancel;
    ucx::async_am_send(a_to_b, host_id, asio::const_buffer(), asio::buffer(out),
                       asio::bind_cancellation_slot(
                           cancel.slot(), [&](ucx::error_code ec, std::size_t) { s = ec; }));
    run_until(
        io, [&] { return s.has_value(); }, std::chrono::milliseconds(20));
    ASSERT_FALSE(s);
    cancel.emit(asio::cancellation_type::terminal);
    engine_a->release();
    ASSERT_TRUE(run_until(io, [&] { return s.has_value(); }));
    EXPECT_EQ(*s, asio::error::operation_aborted);
    const std::size_t started = engine_a->started();
    const std::vector<char> header(ucx::max_am_header(a) + 1, 'h');
    ucx::async_am_send(a_to_b, ucx::am_max_id + 1, asio::const_buffer(), asio::buffer(out),
                       [&](ucx::error_code ec, std::size_t) { bad_id = ec; });
    ucx::async_am_send(a_to_b, host_id, asio::buffer(header), asio::buffer(out),
                       [&](ucx::error_code ec, std::size_t) { bad_header = ec; });
    ASSERT_TRUE(run_until(io, [&] { return bad_id && bad_header; }));
    EXPECT_EQ(*bad_id, ucx::error::invalid_am_id);
    EXPECT_EQ(*bad_header, ucx::error::header_too_large);
    EXPECT_EQ(engine_a->started(), started);
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(50));
    EXPECT_EQ(ucx::am_queue(b, host_id).messages, 0u);
}

// A copy that fails: the send reports the engine's error and sends nothing;
// the message made after it still arrives.
TEST_P(device_staging_am, a_failed_copy_fails_the_send_and_sends_nothing) {
    engine_a->fail_completion(engine_a->started() + 1,
                              ucx::make_error_code(ucx::error::cuda_error));
    std::vector<char> bad = device.make(200 * 1024, 43), good = device.make(1000, 44);
    std::optional<ucx::error_code> s1, s2;
    am_received r;
    recv(host_id, r);
    ucx::async_am_send(a_to_b, host_id, asio::buffer("bad", 3), asio::buffer(bad),
                       [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    ucx::async_am_send(a_to_b, host_id, asio::buffer("good", 4), asio::buffer(good),
                       [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s1 && s2 && r.ec; }));
    EXPECT_EQ(*s1, ucx::error::cuda_error) << s1->message();
    EXPECT_FALSE(*s2);
    ASSERT_FALSE(*r.ec);
    EXPECT_EQ(r.data, good);
    EXPECT_EQ(std::string(r.header.begin(), r.header.end()), "good");
    run_until(
        io, [] { return false; }, std::chrono::milliseconds(100));
    EXPECT_EQ(ucx::am_queue(b, host_id).messages, 0u) << "a message arrived from a failed send";
}

// A copy to the device that fails on the receiving side: the message comes
// with the error and without data; the device memory goes back, and the
// next message arrives.
TEST_P(device_staging_am, a_failed_copy_to_the_device_gives_the_receiver_the_error) {
    engine_b->fail_completion(engine_b->started(), ucx::make_error_code(ucx::error::cuda_error));
    const std::vector<char> first = pattern(200 * 1024, 45), second = pattern(100 * 1024, 46);
    std::optional<ucx::error_code> s1, s2;
    am_received r1, r2;
    recv(device_id, r1);
    recv(device_id, r2);
    ucx::async_am_send(a_to_b, device_id, asio::buffer("h1", 2), asio::buffer(first), rendezvous(),
                       [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    ucx::async_am_send(a_to_b, device_id, asio::buffer("h2", 2), asio::buffer(second), rendezvous(),
                       [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s1 && s2 && r1.ec && r2.ec; }));
    EXPECT_EQ(*r1.ec, ucx::error::cuda_error) << r1.ec->message();
    EXPECT_TRUE(r1.data.empty());
    EXPECT_EQ(std::string(r1.header.begin(), r1.header.end()), "h1");
    ASSERT_FALSE(*r2.ec) << r2.ec->message();
    EXPECT_EQ(r2.data, second);
    EXPECT_TRUE(run_until(io, [&] { return alloc->live == 0; }));
    EXPECT_EQ(alloc->allocations, 2u);
}

// A message larger than all the pinned memory of the receiver: it comes
// with allocation_failed and no data; the next one arrives.
TEST_P(device_staging_am, a_fetch_without_pinned_memory_fails_that_message) {
    const std::vector<char> big = pattern(33u << 20, 52), small = pattern(100 * 1024, 53);
    std::optional<ucx::error_code> s1, s2;
    am_received r1, r2;
    recv(device_id, r1);
    recv(device_id, r2);
    ucx::async_am_send(a_to_b, device_id, asio::const_buffer(), asio::buffer(big), rendezvous(),
                       [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    ucx::async_am_send(a_to_b, device_id, asio::const_buffer(), asio::buffer(small), rendezvous(),
                       [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ASSERT_TRUE(run_until(io, [&] { return s2 && r1.ec && r2.ec; }));
    EXPECT_EQ(*r1.ec, ucx::error::allocation_failed) << r1.ec->message();
    EXPECT_TRUE(r1.data.empty());
    ASSERT_FALSE(*r2.ec) << r2.ec->message();
    EXPECT_EQ(r2.data, small);
    EXPECT_TRUE(run_until(io, [&] { return alloc->live == 0; }));
}

// The workers shut down while a staged send's copies and a staged fetch's
// copies to the device are held: everything ends, the device memory goes
// back once the copies end.
TEST_P(device_staging_am, shutdown_ends_staged_active_messages) {
    engine_a->set_mode(fake_copy_engine::mode::held);
    engine_b->set_mode(fake_copy_engine::mode::held);
    std::vector<char> out = device.make(128 * 1024, 47);
    const std::vector<char> host_out = pattern(256 * 1024, 48);
    std::optional<ucx::error_code> s1, s2;
    am_received r;
    recv(device_id, r);
    ucx::async_am_send(a_to_b, device_id, asio::const_buffer(), asio::buffer(host_out),
                       rendezvous(), [&](ucx::error_code ec, std::size_t) { s2 = ec; });
    ucx::async_am_send(a_to_b, host_id, asio::const_buffer(), asio::buffer(out),
                       [&](ucx::error_code ec, std::size_t) { s1 = ec; });
    // A staged tag receive waits meanwhile.
    std::vector<char> tag_in = device.make(4096, 51);
    std::optional<ucx::error_code> t;
    ucx::async_tag_recv(b, asio::buffer(tag_in), 98, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t) { t = ec; });
    ASSERT_TRUE(run_until(io, [&] { return engine_b->held() > 0 && engine_a->held() > 0; }));
    EXPECT_FALSE(r.ec);
    a.close();
    b.close();
    ASSERT_TRUE(run_until(io, [&] { return s1 && s2 && r.ec && t; }));
    EXPECT_EQ(*t, asio::error::operation_aborted);
    EXPECT_TRUE(*s1) << "the send succeeded with its copies held";
    EXPECT_EQ(*r.ec, asio::error::operation_aborted) << r.ec->message();
    EXPECT_EQ(alloc->live, 1u); // still written by a held copy
    engine_a->release();
    engine_b->release();
    EXPECT_TRUE(run_until(io, [&] { return alloc->live == 0; }));
}

INSTANTIATE_TEST_SUITE_P(all, device_staging_am,
                         testing::Values(transport::tcp, transport::shared_memory),
                         [](const auto& info) { return to_string(info.param); });

// Shutdown with a staged fetch's copies held that never end: the io_context
// goes away first, and the device memory still goes back.
class device_staging_am_teardown : public testing::TestWithParam<transport> {};

TEST_P(device_staging_am_teardown, held_copies_that_never_end_release_the_device_memory) {
    fake_device device;
    auto engine = std::make_shared<fake_copy_engine>(fake_copy_engine::mode::held);
    auto alloc = std::make_shared<fake_device_allocator>(device);
    {
        asio::io_context io;
        ucx::context ctx{options_for(GetParam(), true)};
        ucx::worker a{ctx, io, strict_worker_options(ucx::progress_mode::event)};
        ucx::worker b{ctx, io, strict_worker_options(ucx::progress_mode::event)};
        ucx::endpoint a_to_b{a, b.address()};
        auto classify = [&device](const void* p) { return device.classify(p); };
        ucx::detail::use_device_staging(*ucx::detail::access::get_impl(b), classify, engine);
        ucx::register_am_allocator(b, alloc);
        ucx::set_am_memory_type(b, 3, ucx::memory_type::cuda);
        const std::vector<char> out = pattern(64 * 1024, 50);
        ucx::am_send_options o;
        o.protocol = ucx::am_protocol::rendezvous;
        std::optional<ucx::error_code> r;
        ucx::async_am_recv(b, 3, [&](ucx::error_code ec, ucx::am_message) { r = ec; });
        ucx::async_am_send(a_to_b, 3, asio::const_buffer(), asio::buffer(out), o,
                           [](ucx::error_code, std::size_t) {});
        ASSERT_TRUE(run_until(io, [&] { return engine->held() > 0; }));
        EXPECT_EQ(alloc->live, 1u);
        b.close();
        a.close();
        run_until(
            io, [&] { return r.has_value(); }, std::chrono::milliseconds(50));
    }
    EXPECT_EQ(alloc->live, 0u);
    EXPECT_EQ(engine->outstanding(), 0u);
}

INSTANTIATE_TEST_SUITE_P(all, device_staging_am_teardown,
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
