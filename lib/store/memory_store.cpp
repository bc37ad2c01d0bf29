// ucx::memory_store: keys in this process's memory, shared by copies of the
// store and safe to use from any thread.
#include <ucx/store.hpp>

#include "store/post_result.hpp"
#include "store/store_rules.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <list>
#include <mutex>

namespace ucx {

namespace rules = detail::store_rules;

namespace {

/// A `get` or `wait` waiting for keys: completed once, by the set that makes
/// its last key present, its timer, a cancellation or the state's end.
struct memory_waiter {
    std::vector<std::string> keys;
    /// Completes the handler on its executor (posts); called at most once.
    std::function<void(error_code, store::value_type)> finish;
    std::shared_ptr<boost::asio::steady_timer> timer;
    /// The first key's value, taken when the keys became present.
    store::value_type value;
    bool done = false;
};

} // namespace

struct memory_store::state {
    std::mutex mutex;
    rules::key_map keys;
    std::list<std::shared_ptr<memory_waiter>> waiters;

    bool has_all(const std::vector<std::string>& ks) const { return keys.check(ks); }

    /// Takes the waiters whose keys are all present (under the lock).
    std::vector<std::shared_ptr<memory_waiter>> take_ready() {
        std::vector<std::shared_ptr<memory_waiter>> ready;
        for (auto it = waiters.begin(); it != waiters.end();) {
            if (has_all((*it)->keys)) {
                (*it)->done = true;
                (*it)->value = *keys.find((*it)->keys.front());
                ready.push_back(std::move(*it));
                it = waiters.erase(it);
            } else {
                ++it;
            }
        }
        return ready;
    }

    ~state() {
        for (auto& w : waiters)
            if (!std::exchange(w->done, true))
                w->finish(boost::asio::error::operation_aborted, {});
    }
};

namespace {

void wake(std::vector<std::shared_ptr<memory_waiter>> ready) {
    for (auto& w : ready)
        w->finish({}, std::move(w->value));
}

} // namespace

memory_store::memory_store(executor_type ex)
    : ex_(std::move(ex)), state_(std::make_shared<state>()) {}
memory_store::memory_store(const memory_store& other, executor_type ex)
    : store(other), ex_(std::move(ex)), state_(other.state_) {}
memory_store::memory_store(const memory_store&) = default;
memory_store& memory_store::operator=(const memory_store&) = default;
memory_store::~memory_store() = default;

void memory_store::do_set(std::string key, value_type value, done_handler h) {
    std::vector<std::shared_ptr<memory_waiter>> ready;
    {
        std::lock_guard lock(state_->mutex);
        state_->keys.set(key, std::move(value));
        ready = state_->take_ready();
    }
    wake(std::move(ready));
    detail::post_result(ex_, std::move(h), error_code());
}

namespace {

/// Completes `h` through `done(h, ec, value of the first key)` once every key
/// of `keys` is present, the timeout passes or the wait is cancelled.
template <class Handler, class Done>
void wait_keys(const std::shared_ptr<memory_store::state>& state_, const store::executor_type& ex_,
               store::duration timeout, std::vector<std::string> keys, Handler h, Done done) {
    using value_type = store::value_type;
    auto w = std::make_shared<memory_waiter>();
    w->keys = std::move(keys);
    auto slot = boost::asio::get_associated_cancellation_slot(h);
    std::shared_ptr<boost::asio::steady_timer> timer;
    if (timeout.count() > 0)
        timer = std::make_shared<boost::asio::steady_timer>(ex_, timeout);
    auto hp = std::make_shared<Handler>(std::move(h));
    // The completion runs on the store's executor (which owns the timer), then
    // the handler's.
    w->finish = [ex_, hp, done, timer, slot](error_code ec, value_type v) mutable {
        boost::asio::post(ex_, [hp, done, timer, slot, ec, v = std::move(v)]() mutable {
            if (timer)
                timer->cancel();
            if (slot.is_connected())
                slot.clear();
            done(std::move(*hp), ec, std::move(v));
        });
    };
    value_type value;
    bool ready = false;
    {
        std::lock_guard lock(state_->mutex);
        if (state_->has_all(w->keys)) {
            ready = true;
            value = *state_->keys.find(w->keys.front());
        } else {
            state_->waiters.push_back(w);
        }
    }
    if (ready) {
        w->done = true;
        return w->finish({}, std::move(value));
    }
    std::weak_ptr<memory_store::state> ws = state_;
    // Ends the wait with `ec` unless something else ended it first.
    auto end = [w, ws](error_code ec) {
        auto s = ws.lock();
        if (!s)
            return;
        {
            std::lock_guard lock(s->mutex);
            if (w->done)
                return;
            w->done = true;
            s->waiters.remove(w);
        }
        w->finish(ec, {});
    };
    if (timer)
        timer->async_wait([end](error_code e) {
            if (!e)
                end(make_error_code(error::store_timeout));
        });
    if (slot.is_connected())
        slot.assign(
            [end](boost::asio::cancellation_type) { end(boost::asio::error::operation_aborted); });
}

} // namespace

void memory_store::do_get(std::string key, value_handler h) {
    wait_keys(state_, ex_, timeout(), std::vector<std::string>{std::move(key)}, std::move(h),
              [](value_handler h, error_code ec, value_type v) {
                  boost::asio::dispatch(boost::asio::append(std::move(h), ec, std::move(v)));
              });
}

void memory_store::do_wait(std::vector<std::string> keys, done_handler h) {
    if (keys.empty())
        return detail::post_result(ex_, std::move(h), error_code());
    wait_keys(state_, ex_, timeout(), std::move(keys), std::move(h),
              [](done_handler h, error_code ec, value_type) {
                  boost::asio::dispatch(boost::asio::append(std::move(h), ec));
              });
}

void memory_store::do_add(std::string key, std::int64_t delta, count_handler h) {
    std::vector<std::shared_ptr<memory_waiter>> ready;
    error_code ec;
    std::int64_t result = 0;
    {
        std::lock_guard lock(state_->mutex);
        const auto r = state_->keys.add(key, delta);
        if (r.st == rules::status::ok) {
            result = r.value;
            ready = state_->take_ready();
        } else {
            ec = make_error_code(error::store_protocol_error);
        }
    }
    wake(std::move(ready));
    detail::post_result(ex_, std::move(h), ec, result);
}

void memory_store::do_compare_set(std::string key, value_type expected, value_type desired,
                                  value_handler h) {
    std::vector<std::shared_ptr<memory_waiter>> ready;
    value_type result;
    {
        std::lock_guard lock(state_->mutex);
        auto r = state_->keys.compare_set(key, expected, std::move(desired));
        result = std::move(r.answer);
        if (r.set)
            ready = state_->take_ready();
    }
    wake(std::move(ready));
    detail::post_result(ex_, std::move(h), error_code(), std::move(result));
}

void memory_store::do_check(std::vector<std::string> keys, bool_handler h) {
    bool all = false;
    {
        std::lock_guard lock(state_->mutex);
        all = state_->has_all(keys);
    }
    detail::post_result(ex_, std::move(h), error_code(), all);
}

void memory_store::do_erase(std::string key, bool_handler h) {
    bool erased = false;
    {
        std::lock_guard lock(state_->mutex);
        erased = state_->keys.erase(key);
    }
    detail::post_result(ex_, std::move(h), error_code(), erased);
}

void memory_store::do_num_keys(count_handler h) {
    std::int64_t n = 0;
    {
        std::lock_guard lock(state_->mutex);
        n = static_cast<std::int64_t>(state_->keys.size());
    }
    detail::post_result(ex_, std::move(h), error_code(), n);
}

} // namespace ucx
