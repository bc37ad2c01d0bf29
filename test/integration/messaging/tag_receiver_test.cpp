// ucx::tag_receiver between two workers of one process, over TCP and shared
// memory, in every progress mode: order, content, sizes, truncation,
// cancellation, close, and the worker's shutdown.
#include "test_support.hpp"

#include <ucx/tag_receiver.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <cstring>
#include <functional>
#include <memory>

using namespace ucx_test;

namespace {

struct pair_fixture {
    pair_fixture(transport t, ucx::progress_mode mode)
        : ctx(options_for(t)), a(ctx, io, strict_worker_options(mode)),
          b(ctx, io, strict_worker_options(mode)), a_to_b(a, b.address()) {}

    asio::io_context io;
    ucx::context ctx;
    ucx::worker a, b;
    ucx::endpoint a_to_b;
};

using param = std::tuple<transport, ucx::progress_mode>;

std::string param_name(const testing::TestParamInfo<param>& info) {
    return to_string(std::get<0>(info.param)) + "_" +
           std::string(ucx::to_string(std::get<1>(info.param)));
}

class tag_receiver_pair : public testing::TestWithParam<param> {
protected:
    pair_fixture f{std::get<0>(GetParam()), std::get<1>(GetParam())};

    /// Sends `data` tagged `tag` from a to b; counts failures.
    void send(std::shared_ptr<std::vector<char>> data, ucx::tag_t tag) {
        ++sends_pending;
        ucx::async_tag_send(f.a_to_b, asio::buffer(*data), tag,
                            [this, data](ucx::error_code ec, std::size_t) {
                                --sends_pending;
                                if (ec)
                                    ++send_failures;
                            });
    }

    /// Runs `f` on the workers' executor (where an initiation starts at
    /// once, so a `cancel()` or `close()` right after it finds it started).
    template <class F>
    void on_io(F f) {
        bool ran = false;
        asio::post(f_io(), [&] {
            f();
            ran = true;
        });
        ASSERT_TRUE(run_until(f_io(), [&] { return ran; }));
    }
    asio::io_context& f_io() { return f.io; }

    std::size_t sends_pending = 0;
    std::size_t send_failures = 0;
};

constexpr ucx::tag_t high = ucx::tag_t{0xA5} << 56;
constexpr ucx::tag_t high_mask = ucx::tag_t{0xFF} << 56;

// 10,000 messages of varied sizes, a window of them in flight at a time
// (more than the receiver's slots: some wait in UCX's unexpected queue),
// every one received once, in order, with its content and tag.
TEST_P(tag_receiver_pair, many_messages_in_order_with_content) {
    constexpr std::size_t total = 10000;
    constexpr std::size_t window = 48;
    ucx::tag_receiver rx(f.b, high, high_mask, {16, 512});
    EXPECT_TRUE(rx.is_open());
    EXPECT_EQ(rx.slots(), 16u);

    std::size_t sent = 0, received = 0, batches = 0;
    bool failed = false;
    std::string why;
    const auto size_of = [](std::size_t i) { return i % 500 + 1; };
    std::function<void()> fill = [&] {
        while (sent < total && sent - received < window) {
            send(std::make_shared<std::vector<char>>(pattern(size_of(sent), sent)), high | sent);
            ++sent;
        }
    };
    std::function<void()> take = [&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
            if (ec) {
                failed = true;
                why = ec.message();
                return;
            }
            if (batch.empty()) {
                failed = true;
                why = "empty batch";
            }
            ++batches;
            for (const ucx::tag_message& m : batch) {
                const auto want = pattern(size_of(received), received);
                if (m.error || m.tag != (high | received) || m.data.size() != want.size() ||
                    std::memcmp(m.data.data(), want.data(), want.size()) != 0) {
                    failed = true;
                    why = "message " + std::to_string(received) + " differs";
                }
                ++received;
            }
            batch.release();
            EXPECT_TRUE(batch.empty());
            fill();
            if (received < total && !failed)
                take();
        });
    };
    fill();
    take();
    ASSERT_TRUE(
        run_until(f.io, [&] { return failed || (received == total && sends_pending == 0); }));
    EXPECT_FALSE(failed) << why;
    EXPECT_EQ(received, total);
    EXPECT_EQ(send_failures, 0u);
    EXPECT_GE(batches, 1u);
    EXPECT_LE(batches, total);
}

// Messages sent before the receiver exists wait in UCX and are received;
// messages with other tags are not taken.
TEST_P(tag_receiver_pair, earlier_messages_and_other_tags) {
    for (std::size_t i = 0; i < 5; ++i)
        send(std::make_shared<std::vector<char>>(pattern(8, i)), high | i);
    send(std::make_shared<std::vector<char>>(pattern(8, 99)), 99);
    ASSERT_TRUE(run_until(f.io, [&] { return sends_pending == 0; }));

    ucx::tag_receiver rx(f.b, high, high_mask, {4, 64});
    std::vector<ucx::tag_t> tags;
    std::function<void()> take = [&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
            ASSERT_FALSE(ec) << ec.message();
            for (const ucx::tag_message& m : batch)
                tags.push_back(m.tag);
            if (tags.size() < 5)
                take();
        });
    };
    take();
    ASSERT_TRUE(run_until(f.io, [&] { return tags.size() >= 5; }));
    EXPECT_EQ(tags, (std::vector<ucx::tag_t>{high | 0, high | 1, high | 2, high | 3, high | 4}));

    // The other tag is still there for a plain receive.
    char in[8];
    std::optional<ucx::tag_t> other;
    ucx::async_tag_recv(f.b, asio::buffer(in), 99, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t t) {
                            EXPECT_FALSE(ec);
                            other = t;
                        });
    ASSERT_TRUE(run_until(f.io, [&] { return other.has_value(); }));
    EXPECT_EQ(*other, 99u);
}

// A message longer than a slot comes as a message with message_truncated and
// no data; the slot is posted again and takes the next message.
TEST_P(tag_receiver_pair, longer_than_a_slot_is_truncated) {
    ucx::tag_receiver rx(f.b, high, high_mask, {1, 64});
    send(std::make_shared<std::vector<char>>(pattern(100, 1)), high | 1);
    std::optional<ucx::error_code> first_error;
    rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
        ASSERT_FALSE(ec);
        ASSERT_EQ(batch.size(), 1u);
        const ucx::tag_message m = *batch.begin();
        first_error = m.error;
        EXPECT_EQ(m.data.size(), 0u);
    });
    ASSERT_TRUE(run_until(f.io, [&] { return first_error.has_value(); }));
    EXPECT_EQ(*first_error, ucx::make_error_code(ucx::errc::message_truncated))
        << first_error->message();

    const auto data = std::make_shared<std::vector<char>>(pattern(64, 2));
    send(data, high | 2);
    std::optional<std::vector<char>> got;
    rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
        ASSERT_FALSE(ec);
        ASSERT_EQ(batch.size(), 1u);
        const ucx::tag_message m = *batch.begin();
        EXPECT_FALSE(m.error);
        const auto* p = static_cast<const char*>(m.data.data());
        got.emplace(p, p + m.data.size());
    });
    ASSERT_TRUE(run_until(f.io, [&] { return got.has_value(); }));
    EXPECT_EQ(*got, *data);
}

// Messages past UCX's eager sizes (rendezvous), content checked.
TEST_P(tag_receiver_pair, large_messages) {
    constexpr std::size_t size = 1 << 20;
    ucx::tag_receiver rx(f.b, high, high_mask, {2, size});
    for (std::size_t i = 0; i < 4; ++i)
        send(std::make_shared<std::vector<char>>(pattern(size, 10 + i)), high | i);
    std::size_t received = 0;
    std::function<void()> take = [&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
            ASSERT_FALSE(ec) << ec.message();
            for (const ucx::tag_message& m : batch) {
                EXPECT_FALSE(m.error);
                const auto want = pattern(size, 10 + received);
                ASSERT_EQ(m.data.size(), size);
                EXPECT_EQ(std::memcmp(m.data.data(), want.data(), size), 0);
                ++received;
            }
            if (received < 4)
                take();
        });
    };
    take();
    ASSERT_TRUE(run_until(f.io, [&] { return received == 4 && sends_pending == 0; }));
    EXPECT_EQ(send_failures, 0u);
}

// Batches held while more messages come, then released newest first: the
// messages wait in UCX meanwhile, every slot goes back once, and the order
// holds.
TEST_P(tag_receiver_pair, batches_held_and_released_in_any_order) {
    ucx::tag_receiver rx(f.b, high, high_mask, {4, 64});
    std::vector<ucx::tag_batch> held;
    std::size_t received = 0, held_messages = 0;
    bool failed = false;
    std::function<void()> take = [&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch batch) {
            if (ec) {
                failed = true;
                return;
            }
            for (const ucx::tag_message& m : batch) {
                if (m.tag != (high | received))
                    failed = true;
                ++received;
            }
            held_messages += batch.size();
            held.push_back(std::move(batch));
            if (held_messages < 4)
                take();
        });
    };
    std::size_t next_tag = 0;
    for (std::size_t round = 0; round < 5; ++round) {
        // Four for the slots, four more that wait in UCX until they are free.
        for (std::size_t k = 0; k < 8; ++k, ++next_tag)
            send(std::make_shared<std::vector<char>>(pattern(8, next_tag)), high | next_tag);
        for (int half = 0; half < 2; ++half) {
            held_messages = 0;
            take();
            ASSERT_TRUE(run_until(f.io, [&] { return failed || held_messages == 4; }));
            ASSERT_FALSE(failed);
            // Newest first.
            while (!held.empty())
                held.pop_back();
        }
        ASSERT_TRUE(run_until(f.io, [&] { return sends_pending == 0; }));
    }
    EXPECT_EQ(received, 40u);
    EXPECT_EQ(send_failures, 0u);
}

// Cancelling a waiting receive loses nothing; one receive at a time.
TEST_P(tag_receiver_pair, cancel_and_one_at_a_time) {
    ucx::tag_receiver rx(f.b, high, high_mask, {4, 64});
    asio::cancellation_signal signal;
    std::optional<ucx::error_code> first, second;
    rx.async_receive(
        asio::bind_cancellation_slot(signal.slot(), [&](ucx::error_code ec, ucx::tag_batch b) {
            first = ec;
            EXPECT_TRUE(b.empty());
        }));
    rx.async_receive([&](ucx::error_code ec, ucx::tag_batch b) {
        second = ec;
        EXPECT_TRUE(b.empty());
    });
    ASSERT_TRUE(run_until(f.io, [&] { return second.has_value(); }));
    EXPECT_EQ(*second, asio::error::already_started);
    EXPECT_FALSE(first.has_value());
    signal.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(f.io, [&] { return first.has_value(); }));
    EXPECT_EQ(*first, asio::error::operation_aborted);

    send(std::make_shared<std::vector<char>>(pattern(8, 5)), high | 5);
    std::optional<ucx::tag_t> tag;
    rx.async_receive([&](ucx::error_code ec, ucx::tag_batch b) {
        ASSERT_FALSE(ec);
        ASSERT_EQ(b.size(), 1u);
        tag = (*b.begin()).tag;
    });
    ASSERT_TRUE(run_until(f.io, [&] { return tag.has_value(); }));
    EXPECT_EQ(*tag, high | 5);

    // cancel(): the waiting receive ends at once.
    std::optional<ucx::error_code> third;
    on_io([&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch) { third = ec; });
        rx.cancel();
    });
    ASSERT_TRUE(run_until(f.io, [&] { return third.has_value(); }));
    EXPECT_EQ(*third, asio::error::operation_aborted);
}

// Close: the waiting receive aborts, later ones fail with bad_descriptor, a
// batch held across the close stays readable, and the tags the receiver
// held go back to UCX (a plain receive gets the next message).
TEST_P(tag_receiver_pair, close_keeps_held_batches) {
    auto rx =
        std::make_unique<ucx::tag_receiver>(f.b, high, high_mask, ucx::tag_receiver_options{2, 64});
    const auto data = std::make_shared<std::vector<char>>(pattern(32, 7));
    send(data, high | 7);
    ucx::tag_batch kept;
    rx->async_receive([&](ucx::error_code ec, ucx::tag_batch b) {
        ASSERT_FALSE(ec);
        kept = std::move(b);
    });
    ASSERT_TRUE(run_until(f.io, [&] { return !kept.empty(); }));

    std::optional<ucx::error_code> waiting, after;
    on_io([&] {
        rx->async_receive([&](ucx::error_code ec, ucx::tag_batch) { waiting = ec; });
        rx->close();
        EXPECT_FALSE(rx->is_open());
        rx->async_receive([&](ucx::error_code ec, ucx::tag_batch) { after = ec; });
    });
    ASSERT_TRUE(run_until(f.io, [&] { return waiting && after; }));
    EXPECT_EQ(*waiting, asio::error::operation_aborted);
    EXPECT_EQ(*after, asio::error::bad_descriptor);
    rx.reset();

    ASSERT_EQ(kept.size(), 1u);
    const ucx::tag_message m = *kept.begin();
    ASSERT_EQ(m.data.size(), data->size());
    EXPECT_EQ(std::memcmp(m.data.data(), data->data(), data->size()), 0);
    kept.release();

    send(std::make_shared<std::vector<char>>(pattern(8, 8)), high | 8);
    char in[8];
    std::optional<ucx::tag_t> got;
    ucx::async_tag_recv(f.b, asio::buffer(in), high, high_mask,
                        [&](ucx::error_code ec, std::size_t, ucx::tag_t t) {
                            EXPECT_FALSE(ec);
                            got = t;
                        });
    ASSERT_TRUE(run_until(f.io, [&] { return got.has_value(); }));
    EXPECT_EQ(*got, high | 8);
}

// The worker closes under a waiting receive: it ends with operation_aborted,
// the receiver reports closed, and nothing hangs.
TEST_P(tag_receiver_pair, worker_close_ends_the_receiver) {
    ucx::tag_receiver rx(f.b, high, high_mask, {8, 64});
    std::optional<ucx::error_code> r;
    on_io([&] {
        rx.async_receive([&](ucx::error_code ec, ucx::tag_batch) { r = ec; });
        f.b.close();
    });
    ASSERT_TRUE(run_until(f.io, [&] { return r.has_value(); }));
    EXPECT_EQ(*r, asio::error::operation_aborted);
    EXPECT_FALSE(rx.is_open());
    std::optional<ucx::error_code> later;
    rx.async_receive([&](ucx::error_code ec, ucx::tag_batch) { later = ec; });
    ASSERT_TRUE(run_until(f.io, [&] { return later.has_value(); }));
    EXPECT_TRUE(*later == asio::error::operation_aborted || *later == asio::error::bad_descriptor)
        << later->message();
}

INSTANTIATE_TEST_SUITE_P(all, tag_receiver_pair,
                         testing::Combine(testing::Values(transport::tcp, transport::shared_memory),
                                          testing::Values(ucx::progress_mode::event,
                                                          ucx::progress_mode::poll,
                                                          ucx::progress_mode::hybrid)),
                         param_name);

TEST(tag_receiver, options_out_of_range) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    for (const ucx::tag_receiver_options& o :
         {ucx::tag_receiver_options{0, 64}, ucx::tag_receiver_options{65537, 64},
          ucx::tag_receiver_options{4, 0},
          ucx::tag_receiver_options{4, (std::size_t{1} << 30) + 1}}) {
        try {
            ucx::tag_receiver rx(w, 1, ucx::tag_mask_full, o);
            ADD_FAILURE() << "no exception for " << o.slots << " x " << o.slot_size;
        } catch (const boost::system::system_error& e) {
            EXPECT_EQ(e.code(), asio::error::invalid_argument);
        }
    }
    w.close();
    try {
        ucx::tag_receiver rx(w, 1, ucx::tag_mask_full);
        ADD_FAILURE() << "no exception on a closed worker";
    } catch (const boost::system::system_error& e) {
        EXPECT_EQ(e.code(), asio::error::bad_descriptor);
    }
}

// A moved-from receiver: closed, no slots, and async_receive throws.
TEST(tag_receiver, moved_from) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    ucx::tag_receiver a(w, 1, ucx::tag_mask_full, {2, 16});
    ucx::tag_receiver b(std::move(a));
    EXPECT_TRUE(b.is_open());
    EXPECT_FALSE(a.is_open()); // NOLINT(bugprone-use-after-move): a moved-from receiver is closed
    EXPECT_EQ(a.slots(), 0u);
    EXPECT_THROW(a.async_receive([](ucx::error_code, ucx::tag_batch) {}),
                 boost::system::system_error);
}

// A receiver that is never asked is no work of the io_context: with no
// endpoint on the worker, run() returns.
TEST(tag_receiver, an_idle_receiver_is_no_work) {
    asio::io_context io;
    ucx::context ctx(options_for(transport::shared_memory));
    ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
    ucx::tag_receiver rx(w, 1, ucx::tag_mask_full, {8, 64});
    io.run_for(std::chrono::seconds(30));
    EXPECT_TRUE(io.stopped());
    EXPECT_TRUE(rx.is_open());
}

} // namespace
