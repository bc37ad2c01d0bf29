// Rounds over a launcher's key-value space (round_store.hpp).
#include "store/round_store.hpp"

#include "store/post_result.hpp"

#include <ucx/log.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <list>
#include <thread>

namespace ucx::detail {

namespace {

/// A `get` or `wait` waiting for keys.
struct round_waiter {
    std::vector<std::string> keys;
    std::function<void(error_code, store::value_type)> finish; // on the store's executor
    std::unique_ptr<boost::asio::steady_timer> timer;
    bool done = false;
};

} // namespace

/// Used on the store's executor, except `service`, which only the round's
/// thread uses (one round at a time) and the last owner destroys.
struct round_store::state : std::enable_shared_from_this<state> {
    store::executor_type ex;
    std::unique_ptr<round_service> service;
    std::size_t max_key = 0;

    round_keys known;  // every key seen
    round_keys unsent; // set since the last round
    std::list<std::shared_ptr<round_waiter>> waiters;
    std::uint64_t rounds = 0;
    bool in_round = false;
    bool closed = false;
    store::duration timeout_of_round{};

    state(store::executor_type e, std::unique_ptr<round_service> s, std::size_t m)
        : ex(std::move(e)), service(std::move(s)), max_key(m) {}

    bool has_all(const std::vector<std::string>& ks) const {
        for (const auto& k : ks)
            if (!known.contains(k))
                return false;
        return true;
    }

    // By value: `w` may be the list's own element, which remove() destroys.
    void end(std::shared_ptr<round_waiter> w, error_code ec) {
        if (w->done)
            return;
        w->done = true;
        waiters.remove(w);
        if (w->timer)
            w->timer->cancel();
        w->finish(ec, ec ? store::value_type{} : known.at(w->keys.front()));
    }

    /// Starts a round on a thread of its own; its result comes back through
    /// `round_done` on the executor.
    void start_round(store::duration timeout) {
        in_round = true;
        const std::uint64_t n = ++rounds;
        std::vector<std::byte> mine = encode_round(unsent);
        unsent.clear();
        auto work = boost::asio::make_work_guard(ex);
        std::thread([self = shared_from_this(), n, mine = std::move(mine), timeout,
                     work = std::move(work)]() mutable {
            auto r = std::make_shared<round_result>();
            self->service->run_round(n, mine, timeout, *r);
            auto ex = self->ex;
            boost::asio::post(ex, [self, r] { self->round_done(*r); });
            // This thread lets go of the state before the executor may run
            // out of work: once the io_context's run() returns, the store is
            // its last owner, and its destructor ends the service's
            // connection to the launcher (a process that exits without
            // saying goodbye is an abnormal termination to some launchers).
            self.reset();
            work.reset();
        }).detach();
    }

    void round_done(round_result& r) {
        in_round = false;
        if (r.ec && log::enabled(log::severity::warning)) {
            try {
                log::write(log::severity::warning, "store round " + std::to_string(rounds) +
                                                       " failed: " + r.failed_call + ": " +
                                                       r.ec.message());
            } catch (...) {
                // (a log record that cannot be made is dropped)
            }
        }
        if (closed)
            return;
        if (r.ec) {
            while (!waiters.empty())
                end(waiters.front(), r.ec);
            return;
        }
        for (auto& [k, v] : r.keys)
            known[k] = std::move(v);
        for (auto it = waiters.begin(); it != waiters.end();) {
            auto w = *it++;
            if (has_all(w->keys))
                end(w, {});
        }
        // Keys still missing: the next round (the other processes start it
        // when they miss keys of their own, or they have set them since).
        if (!waiters.empty())
            start_round(timeout_of_round);
    }

    /// Waits for `keys`; `done` completes the handler (on the store's
    /// executor).
    template <class Handler, class Done>
    void wait_keys(store::duration timeout, std::vector<std::string> keys, Handler h, Done done) {
        for (const auto& k : keys)
            if (k.size() > max_key)
                return done(std::move(h), error_code(boost::asio::error::invalid_argument),
                            store::value_type{});
        auto w = std::make_shared<round_waiter>();
        w->keys = std::move(keys);
        auto slot = boost::asio::get_associated_cancellation_slot(h);
        auto hp = std::make_shared<Handler>(std::move(h));
        w->finish = [hp, done, slot](error_code ec, store::value_type v) mutable {
            if (slot.is_connected())
                slot.clear();
            done(std::move(*hp), ec, std::move(v));
        };
        if (has_all(w->keys)) {
            w->done = true;
            return w->finish({}, known.at(w->keys.front()));
        }
        waiters.push_back(w);
        std::weak_ptr<state> ws = shared_from_this();
        if (timeout.count() > 0) {
            w->timer = std::make_unique<boost::asio::steady_timer>(ex, timeout);
            w->timer->async_wait([ws, w](error_code e) {
                if (auto s = ws.lock(); s && !e)
                    s->end(w, make_error_code(error::store_timeout));
            });
        }
        if (slot.is_connected())
            slot.assign([ws, w](boost::asio::cancellation_type) {
                if (auto s = ws.lock())
                    s->end(w, boost::asio::error::operation_aborted);
            });
        if (!in_round) {
            timeout_of_round = timeout;
            start_round(timeout);
        }
    }
};

round_store::round_store(store::executor_type ex, std::unique_ptr<round_service> service,
                         std::size_t max_key)
    : ex_(ex), state_(std::make_shared<state>(ex, std::move(service), max_key)) {}

round_store::round_store(store::executor_type ex, error_code unusable)
    : ex_(ex), unusable_(unusable) {}

round_store::~round_store() {
    if (!state_)
        return;
    state_->closed = true;
    while (!state_->waiters.empty())
        state_->end(state_->waiters.front(), boost::asio::error::operation_aborted);
}

void round_store::set(std::string key, store::value_type value, done_handler h) {
    if (!state_)
        return post_result(ex_, std::move(h), unusable_);
    if (key.size() > state_->max_key)
        return post_result(ex_, std::move(h), error_code(boost::asio::error::invalid_argument));
    state_->unsent[key] = value;
    state_->known[key] = std::move(value);
    // A waiter of this process for that key.
    for (auto it = state_->waiters.begin(); it != state_->waiters.end();) {
        auto w = *it++;
        if (state_->has_all(w->keys))
            state_->end(w, {});
    }
    post_result(ex_, std::move(h), error_code());
}

void round_store::get(std::string key, store::duration timeout, value_handler h) {
    if (!state_)
        return post_result(ex_, std::move(h), unusable_, store::value_type{});
    state_->wait_keys(timeout, std::vector<std::string>{std::move(key)}, std::move(h),
                      [ex = ex_](value_handler h, error_code ec, store::value_type v) {
                          post_result(ex, std::move(h), ec, std::move(v));
                      });
}

void round_store::wait(std::vector<std::string> keys, store::duration timeout, done_handler h) {
    if (!state_)
        return post_result(ex_, std::move(h), unusable_);
    if (keys.empty())
        return post_result(ex_, std::move(h), error_code());
    state_->wait_keys(timeout, std::move(keys), std::move(h),
                      [ex = ex_](done_handler h, error_code ec, store::value_type) {
                          post_result(ex, std::move(h), ec);
                      });
}

void round_store::check(const std::vector<std::string>& keys, bool_handler h) {
    if (!state_)
        return post_result(ex_, std::move(h), unusable_, false);
    post_result(ex_, std::move(h), error_code(), state_->has_all(keys));
}

void round_store::add(count_handler h) {
    post_result(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
                std::int64_t{0});
}

void round_store::compare_set(value_handler h) {
    post_result(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
                store::value_type{});
}

void round_store::erase(bool_handler h) {
    post_result(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported), false);
}

void round_store::num_keys(count_handler h) {
    post_result(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
                std::int64_t{0});
}

std::uint64_t round_store::rounds() const noexcept {
    return state_ ? state_->rounds : 0;
}

} // namespace ucx::detail
