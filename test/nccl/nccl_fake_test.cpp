// ucx::nccl's operations against a stand-in NCCL (fake_nccl.cpp) with real
// groups over UCX: the id made once on the root and exchanged to every rank,
// the non-blocking initialization polled to its end, NCCL's failures (the
// root's, the initialization's) on every rank, the deadline and cancellation
// (the communicator aborted), a cancellation during the exchange, waiting and
// graceful close, and coroutines. The real NCCL on a GPU: nccl_test.cpp.
#include "fake_nccl.hpp"
#include "test_support.hpp"

#include <ucx/asio.hpp>
#include <ucx/nccl.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

using namespace ucx_test;

namespace {

using ucx::nccl::communicator;

struct made {
    ucx::error_code ec;
    communicator comm;
};

class nccl_fake : public testing::Test {
protected:
    void SetUp() override {
        setenv("UCXASIO_NCCL_LIBRARY", UCX_ASIO_FAKE_NCCL, 1);
        ASSERT_FALSE(ucx::nccl::load_library());
        ASSERT_EQ(ucx::nccl::library_version(), 22809);
        auto* get = reinterpret_cast<fake_nccl_control* (*)()>(dlsym(RTLD_DEFAULT, "fake_nccl"));
        ASSERT_NE(get, nullptr);
        fake = get();
        *fake = fake_nccl_control{};
    }

    /// `n` ranks joined through a memory store.
    void join(int n) {
        ASSERT_TRUE(join_ranks(io, ctx, store, n, workers, groups, "ucx-group",
                               strict_worker_options(ucx::progress_mode::event)));
    }

    /// Every rank makes a communicator; returns what each got.
    std::vector<made> make_all(const ucx::nccl::communicator_options& o) {
        const int n = static_cast<int>(groups.size());
        std::vector<std::optional<made>> m(n);
        for (int i = 0; i < n; ++i)
            ucx::nccl::async_make_communicator(groups[i], o,
                                               [&, i](ucx::error_code ec, communicator c) {
                                                   m[i] = made{ec, std::move(c)};
                                               });
        EXPECT_TRUE(std::none_of(m.begin(), m.end(), [](const auto& x) { return x.has_value(); }))
            << "a handler ran inside the call";
        EXPECT_TRUE(run_until(io, [&] { return all_set(m); }));
        std::vector<made> out;
        for (auto& x : m)
            out.push_back(x ? std::move(*x) : made{asio::error::timed_out, {}});
        return out;
    }

    void expect_group_usable() {
        const int n = static_cast<int>(groups.size());
        std::vector<std::optional<ucx::error_code>> b(n);
        for (int i = 0; i < n; ++i)
            groups[i].async_barrier([&, i](ucx::error_code ec) { b[i] = ec; });
        ASSERT_TRUE(run_until(io, [&] { return all_set(b); }));
        for (auto& x : b)
            EXPECT_FALSE(*x) << x->message();
    }

    fake_nccl_control* fake = nullptr;
    asio::io_context io;
    ucx::context ctx{options_for(transport::tcp)};
    ucx::memory_store store{io.get_executor()};
    std::vector<std::unique_ptr<ucx::worker>> workers;
    std::vector<ucx::group> groups;
};

TEST_F(nccl_fake, three_ranks_make_one_communicator_from_the_roots_id) {
    join(3);
    fake->init_polls = 3;
    ucx::nccl::communicator_options o;
    o.poll_interval = std::chrono::microseconds(100);
    auto m = make_all(o);
    for (int i = 0; i < 3; ++i) {
        ASSERT_FALSE(m[i].ec) << "rank " << i << ": " << m[i].ec.message();
        ASSERT_TRUE(m[i].comm);
        EXPECT_EQ(m[i].comm.rank(), i);
        EXPECT_EQ(m[i].comm.size(), 3);
        EXPECT_FALSE(m[i].comm.status());
    }
    EXPECT_EQ(fake->ids, 1); // made on the root only
    EXPECT_EQ(fake->inits, 3);
    EXPECT_EQ(fake->last_blocking, 0); // non-blocking, whatever the config said
    EXPECT_EQ(std::memcmp(fake->last_id, "fake-id", 7), 0);
    EXPECT_EQ(fake->last_id[8], 1); // the root's id reached the last rank too
    EXPECT_GE(fake->polls, 9);      // three polls per rank at least
    EXPECT_EQ(fake->aborts, 0);
    m.clear(); // destroyed with the communicators
    EXPECT_EQ(fake->destroys, 3);
    expect_group_usable();
}

TEST_F(nccl_fake, a_root_that_cannot_make_an_id_fails_every_rank_with_its_error) {
    join(3);
    fake->id_result = ncclSystemError;
    auto m = make_all({});
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(m[i].ec, ucx::nccl::make_error_code(ncclSystemError)) << m[i].ec.message();
        EXPECT_FALSE(m[i].comm);
    }
    EXPECT_EQ(m[1].ec.message(), "unhandled system error (fake)"); // NCCL's own message
    EXPECT_EQ(fake->inits, 0);
    expect_group_usable();
}

TEST_F(nccl_fake, an_initialization_that_fails_is_aborted_on_every_rank) {
    join(3);
    fake->init_polls = 2;
    fake->init_result = ncclInvalidUsage;
    auto m = make_all({});
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(m[i].ec, ucx::nccl::make_error_code(ncclInvalidUsage));
        EXPECT_EQ(m[i].ec, boost::system::errc::invalid_argument);
        EXPECT_FALSE(m[i].comm);
    }
    EXPECT_EQ(fake->aborts, 3);
    EXPECT_EQ(fake->destroys, 0);
}

TEST_F(nccl_fake, an_initialization_that_never_ends_is_aborted_at_the_deadline) {
    fake->init_polls = -1;
    ncclUniqueId id{};
    ASSERT_FALSE(ucx::nccl::make_unique_id(id));
    ucx::nccl::communicator_options o;
    o.timeout = std::chrono::milliseconds(200);
    o.poll_interval = std::chrono::milliseconds(1);
    std::optional<made> m;
    const auto start = std::chrono::steady_clock::now();
    ucx::nccl::async_init_rank(io.get_executor(), 4, 2, id, o,
                               [&](ucx::error_code ec, communicator c) {
                                   m = made{ec, std::move(c)};
                               });
    ASSERT_TRUE(run_until(io, [&] { return m.has_value(); }));
    EXPECT_EQ(m->ec, asio::error::timed_out);
    EXPECT_FALSE(m->comm);
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
    EXPECT_EQ(fake->aborts, 1);
    EXPECT_GE(fake->polls, 2); // it kept polling until then
}

TEST_F(nccl_fake, a_cancelled_initialization_is_aborted_at_once) {
    fake->init_polls = -1;
    ncclUniqueId id{};
    std::optional<made> m;
    asio::cancellation_signal cancel;
    ucx::nccl::async_init_rank(
        io.get_executor(), 2, 0, id, {},
        asio::bind_cancellation_slot(cancel.slot(), [&](ucx::error_code ec, communicator c) {
            m = made{ec, std::move(c)};
        }));
    asio::steady_timer t(io, std::chrono::milliseconds(30));
    t.async_wait([&](ucx::error_code) { cancel.emit(asio::cancellation_type::terminal); });
    ASSERT_TRUE(run_until(io, [&] { return m.has_value(); }));
    EXPECT_EQ(m->ec, asio::error::operation_aborted);
    EXPECT_FALSE(m->comm);
    EXPECT_EQ(fake->aborts, 1);
    // The slot is free again: a later emit reaches nothing.
    cancel.emit(asio::cancellation_type::terminal);
    EXPECT_TRUE(run_ticks(io, 5));
}

TEST_F(nccl_fake, a_rank_cancelled_during_the_exchange_never_calls_nccl) {
    join(2);
    std::vector<std::optional<made>> m(2);
    asio::cancellation_signal cancel;
    ucx::nccl::async_make_communicator(
        groups[0], {},
        asio::bind_cancellation_slot(cancel.slot(), [&](ucx::error_code ec, communicator c) {
            m[0] = made{ec, std::move(c)};
        }));
    ucx::nccl::async_make_communicator(groups[1], {}, [&](ucx::error_code ec, communicator c) {
        m[1] = made{ec, std::move(c)};
    });
    cancel.emit(asio::cancellation_type::terminal); // the broadcast is under way
    ASSERT_TRUE(run_until(io, [&] { return m[0] && m[1]; }));
    EXPECT_EQ(m[0]->ec, asio::error::operation_aborted);
    EXPECT_FALSE(m[0]->comm);
    EXPECT_FALSE(m[1]->ec); // the stand-in needs no peer to finish
    EXPECT_EQ(fake->inits, 1);
    expect_group_usable();
}

TEST_F(nccl_fake, waiting_and_closing_gracefully) {
    join(1);
    fake->init_polls = 0; // done at once
    auto m = make_all({});
    ASSERT_FALSE(m[0].ec);
    EXPECT_EQ(fake->polls, 0);
    std::optional<ucx::error_code> ready, closed;
    ucx::nccl::async_wait_ready(io.get_executor(), m[0].comm, std::chrono::seconds(5),
                                std::chrono::microseconds(100),
                                [&](ucx::error_code ec) { ready = ec; });
    ASSERT_TRUE(run_until(io, [&] { return ready.has_value(); }));
    EXPECT_FALSE(*ready);
    EXPECT_TRUE(m[0].comm);

    fake->finalize_polls = 3;
    ucx::nccl::async_close(io.get_executor(), m[0].comm, std::chrono::seconds(5),
                           [&](ucx::error_code ec) { closed = ec; });
    EXPECT_FALSE(m[0].comm);
    ASSERT_TRUE(run_until(io, [&] { return closed.has_value(); }));
    EXPECT_FALSE(*closed) << closed->message();
    EXPECT_EQ(fake->finalizes, 1);
    EXPECT_EQ(fake->destroys, 1);
    EXPECT_EQ(fake->aborts, 0);
}

TEST_F(nccl_fake, a_close_that_never_ends_is_aborted_at_its_deadline) {
    join(1);
    fake->init_polls = 0;
    auto m = make_all({});
    ASSERT_FALSE(m[0].ec);
    fake->finalize_polls = -1;
    std::optional<ucx::error_code> closed;
    ucx::nccl::async_close(io.get_executor(), m[0].comm, std::chrono::milliseconds(100),
                           [&](ucx::error_code ec) { closed = ec; });
    ASSERT_TRUE(run_until(io, [&] { return closed.has_value(); }));
    EXPECT_EQ(*closed, asio::error::timed_out);
    EXPECT_EQ(fake->aborts, 1);
    EXPECT_EQ(fake->destroys, 0);
}

TEST_F(nccl_fake, a_cancelled_wait_aborts_the_callers_communicator) {
    join(1);
    fake->init_polls = 0;
    auto m = make_all({});
    ASSERT_FALSE(m[0].ec);
    std::optional<ucx::error_code> ready;
    asio::cancellation_signal cancel;
    ucx::nccl::async_wait_ready(
        io.get_executor(), m[0].comm, std::chrono::milliseconds(0), std::chrono::microseconds(100),
        asio::bind_cancellation_slot(cancel.slot(), [&](ucx::error_code ec) { ready = ec; }));
    cancel.emit(asio::cancellation_type::terminal);
    ASSERT_TRUE(run_until(io, [&] { return ready.has_value(); }));
    EXPECT_EQ(*ready, asio::error::operation_aborted);
    EXPECT_FALSE(m[0].comm); // aborted through it: no dead handle left behind
    EXPECT_EQ(fake->aborts, 1);
}

TEST_F(nccl_fake, with_coroutines) {
    join(2);
    fake->init_polls = 1;
    std::vector<std::optional<ucx::error_code>> done(2);
    std::vector<int> sizes(2);
    for (int i = 0; i < 2; ++i)
        asio::co_spawn(
            io,
            [&, i]() -> asio::awaitable<void> {
                communicator c = co_await ucx::nccl::async_make_communicator(
                    groups[i], ucx::nccl::communicator_options{}, asio::use_awaitable);
                sizes[i] = c.size();
                co_await ucx::nccl::async_close(co_await asio::this_coro::executor, c,
                                                std::chrono::seconds(5), asio::use_awaitable);
            },
            [&, i](std::exception_ptr e) {
                done[i] = ucx::error_code{};
                if (e)
                    try {
                        std::rethrow_exception(e);
                    } catch (const boost::system::system_error& s) {
                        done[i] = s.code();
                    }
            });
    ASSERT_TRUE(run_until(io, [&] { return done[0] && done[1]; }));
    EXPECT_FALSE(*done[0]) << done[0]->message();
    EXPECT_FALSE(*done[1]) << done[1]->message();
    EXPECT_EQ(sizes, (std::vector<int>{2, 2}));
    EXPECT_EQ(fake->destroys, 2);
}

} // namespace
