// Unit tests of the NCCL plan (ucx::detail::nccl_plan): the steps of making a
// communicator over a group on the root and on the other ranks, from an id
// given by the caller, and of waiting for a non-blocking call; NCCL's
// errors, the root's failure reaching every rank, the deadline, cancellation
// in every state, and inputs out of turn. NCCL's results are plain integers
// here, so these run without NCCL.
#include "nccl/nccl_plan.hpp"

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <vector>

namespace {

using ucx::detail::nccl_action;
using ucx::detail::nccl_in_progress;
using ucx::detail::nccl_plan;
using ucx::detail::nccl_success;
using error_code = boost::system::error_code;
using kind = nccl_action::kind_type;

constexpr int invalid_usage = 5; // ncclInvalidUsage
constexpr int system_error = 2;  // ncclSystemError

/// Every action the plan has for now.
std::vector<nccl_action> drain(nccl_plan& p) {
    std::vector<nccl_action> out;
    for (nccl_action a = p.next(); a.kind != nccl_action::none; a = p.next())
        out.push_back(a);
    return out;
}

std::vector<kind> kinds(const std::vector<nccl_action>& v) {
    std::vector<kind> k;
    for (auto& a : v)
        k.push_back(a.kind);
    return k;
}

/// The plan of a non-root rank made to wait for NCCL's initialization.
nccl_plan initializing() {
    nccl_plan p;
    p.start_make(false);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::exchange_id});
    p.id_exchanged({}, nccl_success);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::init});
    p.called(nccl_in_progress);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::wait});
    return p;
}

TEST(nccl_plan, the_root_makes_the_id_then_every_step_follows) {
    nccl_plan p;
    p.start_make(true);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::make_id});
    p.id_made(nccl_success);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::exchange_id});
    p.id_exchanged({}, nccl_success);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::init});
    p.called(nccl_in_progress);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::wait});
    p.tick(false);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::poll});
    p.polled(nccl_in_progress);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::wait});
    p.tick(false);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::poll});
    p.polled(nccl_success);
    auto last = drain(p);
    ASSERT_EQ(kinds(last), std::vector<kind>{nccl_action::complete});
    EXPECT_FALSE(last[0].ec);
    EXPECT_EQ(last[0].nccl_result, nccl_success);
    EXPECT_TRUE(p.done());
}

TEST(nccl_plan, other_ranks_start_with_the_exchange) {
    nccl_plan p;
    p.start_make(false);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::exchange_id});
    // An id_made out of turn changes nothing.
    p.id_made(nccl_success);
    EXPECT_TRUE(drain(p).empty());
}

TEST(nccl_plan, an_init_done_at_once_completes_without_polling) {
    nccl_plan p;
    p.start_init();
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::init});
    p.called(nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_FALSE(a[0].ec);
}

TEST(nccl_plan, a_root_that_could_not_make_the_id_still_broadcasts_and_every_rank_fails) {
    nccl_plan root;
    root.start_make(true);
    drain(root);
    root.id_made(system_error);
    // The status must reach the others: the exchange happens anyway.
    EXPECT_EQ(kinds(drain(root)), std::vector<kind>{nccl_action::exchange_id});
    root.id_exchanged({}, system_error);
    auto a = drain(root);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_EQ(a[0].nccl_result, system_error);

    nccl_plan other;
    other.start_make(false);
    drain(other);
    other.id_exchanged({}, system_error);
    auto b = drain(other);
    ASSERT_EQ(kinds(b), std::vector<kind>{nccl_action::complete}); // no init, no abort
    EXPECT_EQ(b[0].nccl_result, system_error);
}

TEST(nccl_plan, a_failed_exchange_fails_with_the_groups_error_without_nccl) {
    nccl_plan p;
    p.start_make(false);
    drain(p);
    const error_code group_error = boost::asio::error::connection_aborted;
    p.id_exchanged(group_error, nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_EQ(a[0].ec, group_error);
}

TEST(nccl_plan, an_init_that_fails_at_once_is_aborted_and_reported) {
    nccl_plan p;
    p.start_init();
    drain(p);
    p.called(invalid_usage);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].nccl_result, invalid_usage);
    EXPECT_FALSE(a[1].ec);
}

TEST(nccl_plan, an_error_reported_by_a_poll_aborts) {
    nccl_plan p = initializing();
    p.tick(false);
    drain(p);
    p.polled(invalid_usage);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].nccl_result, invalid_usage);
}

TEST(nccl_plan, past_the_deadline_the_communicator_is_aborted_and_the_operation_times_out) {
    nccl_plan p = initializing();
    p.tick(true);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].ec, boost::asio::error::timed_out);
    // A late poll result or tick is ignored.
    p.polled(nccl_success);
    p.tick(false);
    EXPECT_TRUE(drain(p).empty());
}

TEST(nccl_plan, cancelled_while_nccl_works_aborts_at_once) {
    nccl_plan p = initializing();
    p.cancel();
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].ec, boost::asio::error::operation_aborted);
    p.cancel(); // twice: nothing more
    EXPECT_TRUE(drain(p).empty());
}

TEST(nccl_plan, cancelled_during_the_exchange_waits_for_it_and_never_calls_nccl) {
    nccl_plan p;
    p.start_make(true);
    drain(p);
    p.id_made(nccl_success);
    drain(p);
    p.cancel();
    EXPECT_TRUE(drain(p).empty()); // the broadcast still uses the buffers
    p.id_exchanged({}, nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_EQ(a[0].ec, boost::asio::error::operation_aborted);
}

TEST(nccl_plan, cancelled_while_making_the_id_still_takes_part_in_the_exchange) {
    nccl_plan p;
    p.start_make(true);
    drain(p);
    p.cancel();
    p.id_made(nccl_success);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::exchange_id});
    p.id_exchanged({}, nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_EQ(a[0].ec, boost::asio::error::operation_aborted);
}

TEST(nccl_plan, cancelled_during_the_call_aborts_when_it_returns_in_progress) {
    nccl_plan p;
    p.start_init();
    drain(p);
    p.cancel(); // the call is on its way
    p.called(nccl_in_progress);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].ec, boost::asio::error::operation_aborted);
}

TEST(nccl_plan, a_call_done_before_the_cancellation_is_a_success) {
    nccl_plan p;
    p.start_init();
    drain(p);
    p.cancel();
    p.called(nccl_success); // NCCL finished: the communicator is whole
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_FALSE(a[0].ec);
}

TEST(nccl_plan, a_call_that_could_not_be_made_fails_without_abort) {
    nccl_plan p;
    p.start_init();
    drain(p);
    const error_code no_device =
        boost::system::errc::make_error_code(boost::system::errc::no_such_device);
    p.call_failed(no_device);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_EQ(a[0].ec, no_device);
}

TEST(nccl_plan, waiting_for_a_call_polls_until_nccl_is_done) {
    nccl_plan p;
    p.start_wait(nccl_in_progress);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::wait});
    p.tick(false);
    EXPECT_EQ(kinds(drain(p)), std::vector<kind>{nccl_action::poll});
    p.polled(nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_FALSE(a[0].ec);
}

TEST(nccl_plan, waiting_for_a_call_that_is_done_completes_at_once) {
    nccl_plan p;
    p.start_wait(nccl_success);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), std::vector<kind>{nccl_action::complete});
    EXPECT_FALSE(a[0].ec);
}

TEST(nccl_plan, waiting_for_a_call_that_failed_aborts) {
    nccl_plan p;
    p.start_wait(system_error);
    auto a = drain(p);
    ASSERT_EQ(kinds(a), (std::vector<kind>{nccl_action::abort, nccl_action::complete}));
    EXPECT_EQ(a[1].nccl_result, system_error);
}

TEST(nccl_plan, inputs_before_start_or_after_the_end_are_ignored) {
    nccl_plan p;
    p.called(nccl_success);
    p.tick(true);
    p.polled(invalid_usage);
    p.id_exchanged({}, nccl_success);
    p.cancel();
    EXPECT_TRUE(drain(p).empty());
    EXPECT_FALSE(p.done());
    p.start_init();
    drain(p);
    p.called(nccl_success);
    drain(p);
    EXPECT_TRUE(p.done());
    p.start_make(true);
    p.start_wait(nccl_in_progress);
    p.cancel();
    EXPECT_TRUE(drain(p).empty());
}

} // namespace
