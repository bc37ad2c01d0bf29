// Internal: a steady timer whose expiry reaches its owner only if it still
// counts.
//
// Re-arming or cancelling a timer cannot take back a completion Asio has
// already queued, and the object that armed it may be destroyed before the
// handler runs. Each arming therefore takes a generation number and the
// handler holds the owner weakly: an expiry runs the callback only while the
// owner is alive and no later arming or cancel has happened.
#pragma once

#include <ucx/error.hpp>

#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <utility>

namespace ucx::detail {

/// A member of its owner (directly or through a pointer the owner keeps for
/// its whole life): the wait reaches it only after locking the owner.
class guarded_timer {
public:
    using clock_type = boost::asio::steady_timer::clock_type;

    template <class ExecutorOrContext>
    explicit guarded_timer(ExecutorOrContext&& ex) : timer_(std::forward<ExecutorOrContext>(ex)) {}

    guarded_timer(const guarded_timer&) = delete;
    guarded_timer& operator=(const guarded_timer&) = delete;

    /// Arms the timer for `t`, replacing any earlier arming. On expiry (or an
    /// error from the wait) `handler(Owner&, const error_code&)` runs, unless
    /// the owner is gone or the timer was armed again or cancelled since.
    template <class Owner, class Handler>
    void start_at(clock_type::time_point t, std::weak_ptr<Owner> owner, Handler handler) {
        const unsigned generation = ++generation_;
        timer_.expires_at(t);
        wait(std::move(owner), generation, std::move(handler));
    }

    /// As `start_at`, `d` from now.
    template <class Owner, class Handler>
    void start_after(clock_type::duration d, std::weak_ptr<Owner> owner, Handler handler) {
        const unsigned generation = ++generation_;
        timer_.expires_after(d);
        wait(std::move(owner), generation, std::move(handler));
    }

    /// Any pending expiry is ignored from now on.
    void cancel() noexcept {
        ++generation_;
        try {
            timer_.cancel();
        } catch (...) {
            // The generation check ignores a wait that could not be cancelled.
        }
    }

private:
    template <class Owner, class Handler>
    void wait(std::weak_ptr<Owner> owner, unsigned generation, Handler handler) {
        timer_.async_wait([this, owner = std::move(owner), generation,
                           handler = std::move(handler)](const error_code& ec) mutable {
            auto self = owner.lock();
            // `this` lives as long as the owner: only read once it is locked.
            if (!self || generation != generation_)
                return;
            handler(*self, ec);
        });
    }

    boost::asio::steady_timer timer_;
    unsigned generation_ = 0;
};

} // namespace ucx::detail
