#include "engine/spin_group.hpp"

#include "engine/worker_impl.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

namespace ucx::detail {

namespace {

/// Keeps the spin group of one io_context, created on first use.
class spin_service : public boost::asio::execution_context::service {
public:
    static inline boost::asio::execution_context::id id;

    explicit spin_service(boost::asio::execution_context& ctx)
        : boost::asio::execution_context::service(ctx),
          group(static_cast<boost::asio::io_context&>(ctx)) {}

    spin_group group;

private:
    // Handlers the io_context destroys unrun (a worker's last reference
    // among them) may still leave the group after this: it stays until the
    // io_context destroys its services, after every handler.
    void shutdown() override {}
};

} // namespace

spin_group& spin_group::of(boost::asio::io_context& ctx) {
    return boost::asio::use_service<spin_service>(ctx).group;
}

void spin_group::join(worker_impl& w) {
    if (std::find(members_.begin(), members_.end(), &w) != members_.end())
        return;
    members_.push_back(&w);
    update_sharing();
}

void spin_group::leave(worker_impl& w) noexcept {
    std::erase(members_, &w);
    std::erase(parked_, &w);
    std::replace(turn_.begin(), turn_.end(), &w, static_cast<worker_impl*>(nullptr));
    w.set_shared_spin(false);
    update_sharing();
}

void spin_group::update_sharing() noexcept {
    const bool shared = members_.size() > 1;
    auto slice = std::chrono::nanoseconds::max();
    for (worker_impl* m : members_) {
        m->set_shared_spin(shared);
        slice = std::min(slice, m->options().shared_spin_slice);
    }
    if (!members_.empty())
        slice_ = slice;
}

void spin_group::park(worker_impl& w) {
    parked_.push_back(&w);
    if (scheduled_)
        return;
    scheduled_ = true;
    boost::asio::post(ctx_, [this] { run_turns(); });
}

void spin_group::run_turns() {
    const auto start = clock::now();
    // Each turn runs the passes parked before it; a pass that parks again
    // waits for the next turn. A member that leaves meanwhile is taken out.
    while (!parked_.empty()) {
        turn_.swap(parked_);
        for (std::size_t i = 0; i < turn_.size(); ++i)
            if (worker_impl* w = turn_[i])
                w->run_parked_pass();
        turn_.clear();
        if (clock::now() - start >= slice_)
            break;
    }
    if (parked_.empty()) {
        scheduled_ = false;
        return;
    }
    // Slice spent: let the io_context run its other handlers, then go on.
    // Two hops: the first post lets the reactor run (it polls epoll when it
    // comes to the front of the queue) and queue what is ready (a due timer,
    // a socket) behind this post; the second goes behind those.
    boost::asio::post(ctx_, [this] { boost::asio::post(ctx_, [this] { run_turns(); }); });
}

} // namespace ucx::detail
