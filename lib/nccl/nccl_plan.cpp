#include "nccl/nccl_plan.hpp"

#include <boost/asio/error.hpp>

namespace ucx::detail {

namespace {

nccl_action act(nccl_action::kind_type k) {
    nccl_action a;
    a.kind = k;
    return a;
}

} // namespace

void nccl_plan::start_make(bool root) {
    if (state_ != state::idle)
        return;
    if (root) {
        state_ = state::making_id;
        pending_ = act(nccl_action::make_id);
    } else {
        state_ = state::exchanging;
        pending_ = act(nccl_action::exchange_id);
    }
}

void nccl_plan::start_init() {
    if (state_ != state::idle)
        return;
    state_ = state::calling;
    pending_ = act(nccl_action::init);
}

void nccl_plan::call_failed(boost::system::error_code ec) {
    if (state_ != state::calling)
        return;
    fail(ec, nccl_success, false);
}

void nccl_plan::start_wait(int result) {
    if (state_ != state::idle)
        return;
    state_ = state::calling;
    called(result);
}

void nccl_plan::id_made(int result) {
    if (state_ != state::making_id)
        return;
    // The root's status travels with the id, success or not: every rank must
    // take part in the broadcast.
    (void)result;
    state_ = state::exchanging;
    pending_ = act(nccl_action::exchange_id);
}

void nccl_plan::id_exchanged(boost::system::error_code ec, int root_result) {
    if (state_ != state::exchanging)
        return;
    if (ec)
        return fail(ec, nccl_success, false);
    if (cancelled_)
        return fail(boost::asio::error::operation_aborted, nccl_success, false);
    if (root_result != nccl_success)
        return fail({}, root_result, false);
    state_ = state::calling;
    pending_ = act(nccl_action::init);
}

void nccl_plan::called(int result) {
    if (state_ != state::calling)
        return;
    if (result == nccl_success) {
        state_ = state::done;
        finish_ = act(nccl_action::complete);
        return;
    }
    if (result != nccl_in_progress)
        return fail({}, result, true);
    if (cancelled_)
        return fail(boost::asio::error::operation_aborted, nccl_success, true);
    state_ = state::waiting;
    pending_ = act(nccl_action::wait);
}

void nccl_plan::tick(bool deadline_passed) {
    if (state_ != state::waiting)
        return;
    if (deadline_passed)
        return fail(boost::asio::error::timed_out, nccl_success, true);
    state_ = state::polling;
    pending_ = act(nccl_action::poll);
}

void nccl_plan::polled(int result) {
    if (state_ != state::polling)
        return;
    state_ = state::calling;
    called(result);
}

void nccl_plan::cancel() {
    switch (state_) {
    case state::making_id:
    case state::exchanging:
        cancelled_ = true; // the broadcast ends first (see the file comment)
        return;
    case state::calling:
        cancelled_ = true; // `called` comes next and sees it
        return;
    case state::waiting:
    case state::polling:
        // A poll in flight returns on its own; NCCL is aborted now and its
        // answer is then ignored.
        return fail(boost::asio::error::operation_aborted, nccl_success, true);
    case state::idle:
    case state::done:
        return;
    }
}

void nccl_plan::fail(boost::system::error_code ec, int nccl_result, bool abort) {
    state_ = state::done;
    pending_.reset();
    if (abort)
        pending_ = act(nccl_action::abort);
    finish_ = act(nccl_action::complete);
    finish_->ec = ec;
    finish_->nccl_result = nccl_result;
}

nccl_action nccl_plan::next() {
    std::optional<nccl_action>& slot = pending_ ? pending_ : finish_;
    const nccl_action a = slot.value_or(nccl_action{});
    slot.reset();
    return a;
}

} // namespace ucx::detail
