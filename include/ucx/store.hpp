// ucx::store: a rendezvous key-value store through which the processes of a
// job find each other (the base of memory_store, file_store, tcp_store), and
// prefix_store, a view of a store under a key prefix.
#pragma once

#include <ucx/detail/hooked_handler.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/error.hpp>
#include <ucx/metrics.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace ucx {

/// A rendezvous store: keys (strings) with byte values, shared by the
/// processes of a job, as torch.distributed's `Store`. Every operation is
/// asynchronous (any completion token), and every one is bounded by the
/// store's `timeout()`: one that has not completed by then fails with
/// `ucx::error::store_timeout`. `async_get` and `async_wait` wait for keys
/// that are not set yet; the others complete as soon as the store answered.
///
/// Handlers run on their associated executor (by default the store's), never
/// inside the initiating call. Operations may be started from any thread,
/// as the worker's: one started on a thread that runs the store's executor
/// begins at once, one started elsewhere is dispatched to the executor with
/// its arguments (the store's other members, `set_timeout` included, belong
/// to the executor's thread); a cancellation emitted before a dispatched
/// start reached the executor is kept and delivered once the operation has
/// started. A store may have any number of operations in
/// flight. Destroying the store (on its executor's thread) completes its
/// pending operations, and those still on their way to the executor, with
/// `asio::error::operation_aborted`.
///
/// Errors every operation can report: `ucx::error::store_timeout`;
/// `asio::error::operation_aborted` (the store was closed or destroyed, or
/// the handler's cancellation slot emitted a cancellation, which the stores
/// of this library support for `async_get` and `async_wait`); and a store's
/// own (I/O errors of `tcp_store` and `file_store`,
/// `ucx::error::store_protocol_error`; a `file_store`'s
/// `ucx::error::store_not_regular_file` and
/// `ucx::error::store_value_too_large`). Each store's class lists its codes.
///
/// The stores of this library follow one set of rules for what each
/// operation does to the keys (those of torch's TCPStore server): see
/// `async_add` and `async_compare_set`; an empty value is a value.
namespace detail {

/// A store's operation counts, by `store_operation`: started by any thread,
/// completed on the handlers' executors, read from any thread.
struct store_counters {
    std::array<std::atomic<std::uint64_t>, store_operation_count> started{};
    std::array<std::atomic<std::uint64_t>, store_operation_count> completed{};
    std::array<std::atomic<std::uint64_t>, store_operation_count> failed{};

    /// The counts (the ends read first: `started` is never reported below
    /// `completed`).
    store_metrics snapshot() const noexcept {
        store_metrics m;
        for (std::size_t i = 0; i < store_operation_count; ++i) {
            operation_counts& c = m.operations[i];
            c.completed = completed[i].load(std::memory_order_relaxed);
            c.failed = failed[i].load(std::memory_order_relaxed);
            const std::uint64_t s = started[i].load(std::memory_order_relaxed);
            c.started = s < c.completed ? c.completed : s;
            m.in_flight += c.started - c.completed;
        }
        return m;
    }
};

/// The hook of a store operation's handler: counts its end, then completes it.
struct store_count {
    std::shared_ptr<store_counters> counts;
    store_operation op;

    template <class Handler, class... Args>
    void operator()(Handler&& h, error_code ec, Args&&... args) {
        const auto i = static_cast<std::size_t>(op);
        counts->completed[i].fetch_add(1, std::memory_order_relaxed);
        if (ec)
            counts->failed[i].fetch_add(1, std::memory_order_relaxed);
        std::move(h)(ec, std::forward<Args>(args)...);
    }
};

} // namespace detail

class store {
public:
    using executor_type = boost::asio::any_io_executor;
    /// A value: any bytes.
    using value_type = std::vector<std::byte>;
    using duration = std::chrono::milliseconds;

    virtual ~store() = default;

    /// The executor that runs the store's I/O and, by default, its handlers.
    virtual executor_type get_executor() const noexcept = 0;

    /// The bound on every operation (default 300 s, as torch's stores).
    virtual duration timeout() const noexcept { return timeout_; }
    /// Changes the bound of the operations started from now on. Zero: no bound.
    virtual void set_timeout(duration d) noexcept { timeout_ = d; }

    /// Sets `key` to `value` (replacing any value) and wakes its waiters.
    /// Completion signature: `void(error_code)`.
    /// Errors: `store_timeout`, `operation_aborted`; a `tcp_store`'s I/O
    /// errors; a `file_store`'s system errors and `store_value_too_large`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_set(std::string key, value_type value,
              CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [this](auto handler, std::string k, value_type v) {
                start(&store::do_set, std::move(k), std::move(v),
                      done_handler(counted(store_operation::set, std::move(handler))));
            },
            token, std::move(key), std::move(value));
    }
    /// As above, with the bytes of `value`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_set(std::string key, std::string_view value,
              CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        const auto* p = reinterpret_cast<const std::byte*>(value.data());
        return async_set(std::move(key), value_type(p, p + value.size()),
                         std::forward<CompletionToken>(token));
    }

    /// Gets the value of `key`, waiting until some process sets it (at most
    /// `timeout()`). Completion signature: `void(error_code, value_type)`.
    /// Errors: `store_timeout` (the key was not set in time),
    /// `operation_aborted` (also on cancellation); a `tcp_store`'s I/O errors
    /// and `store_protocol_error`; a `file_store`'s system errors,
    /// `store_not_regular_file` and `store_value_too_large`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_get(std::string key,
              CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, value_type)>(
            [this](auto handler, std::string k) {
                start(&store::do_get, std::move(k),
                      value_handler(counted(store_operation::get, std::move(handler))));
            },
            token, std::move(key));
    }

    /// Adds `delta` to the counter `key` (a missing key counts as 0) and
    /// gives the new value. Counters are stored as decimal text, as torch
    /// stores them: an optional '-' and digits, nothing else, within int64
    /// (the empty value is not a counter). A key whose value is not one, or
    /// a sum outside int64, leaves the key unchanged and fails with
    /// `ucx::error::store_protocol_error` (memory and file stores; a TCP
    /// store's server closes the connection, as torch's does, and the
    /// operation fails with `asio::error::eof` or
    /// `asio::error::connection_reset`).
    /// Completion signature: `void(error_code, std::int64_t)`.
    /// Errors: `store_protocol_error` (not a counter, or an overflow: memory
    /// and file stores), `store_timeout`, `operation_aborted`; a `tcp_store`'s
    /// I/O errors; a `file_store`'s system errors, `store_not_regular_file`
    /// and `store_value_too_large`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_add(std::string key, std::int64_t delta,
              CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::int64_t)>(
            [this](auto handler, std::string k, std::int64_t d) {
                start(&store::do_add, std::move(k), d,
                      count_handler(counted(store_operation::add, std::move(handler))));
            },
            token, std::move(key), delta);
    }

    /// Sets `key` to `desired` if its value is `expected` (or if it is
    /// missing and `expected` is empty) and gives the value it has afterwards
    /// (`desired` when it was set; the current value, or `expected` for a
    /// missing key, when not), as torch's `compare_set`.
    /// Completion signature: `void(error_code, value_type)`.
    /// Errors: `store_timeout`, `operation_aborted`; a `tcp_store`'s I/O
    /// errors and `store_protocol_error`; a `file_store`'s system errors,
    /// `store_not_regular_file` and `store_value_too_large`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_compare_set(
        std::string key, value_type expected, value_type desired,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, value_type)>(
            [this](auto handler, std::string k, value_type e, value_type d) {
                start(&store::do_compare_set, std::move(k), std::move(e), std::move(d),
                      value_handler(counted(store_operation::compare_set, std::move(handler))));
            },
            token, std::move(key), std::move(expected), std::move(desired));
    }

    /// Whether every key of `keys` is set, without waiting.
    /// Completion signature: `void(error_code, bool)`.
    /// Errors: `store_timeout`, `operation_aborted`; a `tcp_store`'s I/O
    /// errors and `store_protocol_error`; a `file_store`'s system errors.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_check(
        std::vector<std::string> keys,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, bool)>(
            [this](auto handler, std::vector<std::string> k) {
                start(&store::do_check, std::move(k),
                      bool_handler(counted(store_operation::check, std::move(handler))));
            },
            token, std::move(keys));
    }

    /// Waits until every key of `keys` is set (at most `timeout()`).
    /// Completion signature: `void(error_code)`.
    /// Errors: `store_timeout`, `operation_aborted` (also on cancellation); a
    /// `tcp_store`'s I/O errors and `store_protocol_error`; a `file_store`'s
    /// system errors.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto
    async_wait(std::vector<std::string> keys,
               CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code)>(
            [this](auto handler, std::vector<std::string> k) {
                start(&store::do_wait, std::move(k),
                      done_handler(counted(store_operation::wait, std::move(handler))));
            },
            token, std::move(keys));
    }

    /// Deletes `key`; says whether it was set.
    /// Completion signature: `void(error_code, bool)`.
    /// Errors: `store_timeout`, `operation_aborted`; a `tcp_store`'s I/O
    /// errors and `store_protocol_error`; a `file_store`'s system errors.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_erase(
        std::string key,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, bool)>(
            [this](auto handler, std::string k) {
                start(&store::do_erase, std::move(k),
                      bool_handler(counted(store_operation::erase, std::move(handler))));
            },
            token, std::move(key));
    }

    /// The number of keys in the whole store (a `prefix_store` counts the
    /// keys of its base, as torch's `PrefixStore` does).
    /// Completion signature: `void(error_code, std::int64_t)`.
    /// Errors: `store_timeout`, `operation_aborted`; a `tcp_store`'s I/O
    /// errors and `store_protocol_error`; a `file_store`'s system errors.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_num_keys(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_initiate<CompletionToken, void(error_code, std::int64_t)>(
            [this](auto handler) {
                start(&store::do_num_keys,
                      count_handler(counted(store_operation::num_keys, std::move(handler))));
            },
            token);
    }

    /// Its operations so far, by kind: started here, completed (failed or
    /// not) and failed (docs/guide/metrics.md). Safe to call from any
    /// thread. A `prefix_store` counts its own operations (not its base's).
    store_metrics metrics() const noexcept { return counts_->snapshot(); }

protected:
    using done_handler = boost::asio::any_completion_handler<void(error_code)>;
    using value_handler = boost::asio::any_completion_handler<void(error_code, value_type)>;
    using count_handler = boost::asio::any_completion_handler<void(error_code, std::int64_t)>;
    using bool_handler = boost::asio::any_completion_handler<void(error_code, bool)>;

    store() = default;
    // A copy is another object: it gets its own liveness token.
    store(const store& other) : timeout_(other.timeout_) {}
    store& operator=(const store& other) {
        timeout_ = other.timeout_;
        return *this;
    }

    // The operations of a store. Each completes its handler exactly once,
    // never inside the call, through the handler's associated executor
    // (defaulting to `get_executor()`), within `timeout()`.
    virtual void do_set(std::string key, value_type value, done_handler h) = 0;
    virtual void do_get(std::string key, value_handler h) = 0;
    virtual void do_add(std::string key, std::int64_t delta, count_handler h) = 0;
    virtual void do_compare_set(std::string key, value_type expected, value_type desired,
                                value_handler h) = 0;
    virtual void do_check(std::vector<std::string> keys, bool_handler h) = 0;
    virtual void do_wait(std::vector<std::string> keys, done_handler h) = 0;
    virtual void do_erase(std::string key, bool_handler h) = 0;
    virtual void do_num_keys(count_handler h) = 0;

    friend class prefix_store;

private:
    friend class metrics_exporter;

    /// `h`, counted: its operation `op` as started now, and as completed
    /// (and failed) when it completes.
    template <class Handler>
    auto counted(store_operation op, Handler&& h) {
        counts_->started[static_cast<std::size_t>(op)].fetch_add(1, std::memory_order_relaxed);
        return detail::hooked_handler<std::decay_t<Handler>, detail::store_count>{
            std::forward<Handler>(h), {counts_, op}};
    }

    // Runs `(this->*f)(args...)` on the store's executor: at once when the
    // calling thread runs it, else dispatched (detail::start_on_executor). A
    // store destroyed before a dispatched start reached it completes that
    // operation with `operation_aborted` (the handler is the last argument).
    template <class... Params, class... Args>
    void start(void (store::*f)(Params...), Args&&... args) {
        detail::start_on_executor(
            get_executor(),
            [alive = std::weak_ptr<store*>(self_), ex = get_executor(), f](auto&&... a) {
                if (const auto self = alive.lock())
                    return ((**self).*f)(std::forward<decltype(a)>(a)...);
                auto& h = std::get<sizeof...(a) - 1>(std::forward_as_tuple(a...));
                aborted(ex, std::move(h));
            },
            std::forward<Args>(args)...);
    }
    template <class... T>
    static void aborted(const executor_type& ex,
                        boost::asio::any_completion_handler<void(error_code, T...)> h) {
        const auto hex = boost::asio::get_associated_executor(h, ex);
        boost::asio::post(ex, boost::asio::bind_executor(hex, [h = std::move(h)]() mutable {
                              std::move(h)(make_error_code(boost::asio::error::operation_aborted),
                                           T{}...);
                          }));
    }

    duration timeout_ = std::chrono::seconds(300);
    // Alive while the object is: a start dispatched from another thread
    // checks it on the executor's thread.
    std::shared_ptr<store*> self_ = std::make_shared<store*>(this);
    // Its operations' counts (a copy of the store counts its own), shared
    // with the handlers of the operations in flight.
    std::shared_ptr<detail::store_counters> counts_ = std::make_shared<detail::store_counters>();
};

/// A view of `base` in which every key is `prefix + "/" + key`, as
/// torch.distributed's `PrefixStore`: groups and generations of a job use
/// their own keys in one store. Its operations are those of `base`, and so
/// are its executor and its timeout (`set_timeout` on the view sets the
/// base's). `base` must outlive the view.
class prefix_store final : public store {
public:
    prefix_store(store& base, std::string prefix)
        : base_(&base), prefix_(std::move(prefix) + "/") {}

    executor_type get_executor() const noexcept override { return base_->get_executor(); }
    /// The prefix with its trailing "/".
    const std::string& prefix() const noexcept { return prefix_; }
    /// The store this is a view of.
    store& base() const noexcept { return *base_; }
    duration timeout() const noexcept override { return base_->timeout(); }
    void set_timeout(duration d) noexcept override { base_->set_timeout(d); }

private:
    std::string key(std::string k) const { return prefix_ + k; }
    std::vector<std::string> keys(std::vector<std::string> ks) const {
        for (auto& k : ks)
            k = prefix_ + k;
        return ks;
    }

    void do_set(std::string k, value_type v, done_handler h) override {
        base_->do_set(key(std::move(k)), std::move(v), std::move(h));
    }
    void do_get(std::string k, value_handler h) override {
        base_->do_get(key(std::move(k)), std::move(h));
    }
    void do_add(std::string k, std::int64_t d, count_handler h) override {
        base_->do_add(key(std::move(k)), d, std::move(h));
    }
    void do_compare_set(std::string k, value_type e, value_type d, value_handler h) override {
        base_->do_compare_set(key(std::move(k)), std::move(e), std::move(d), std::move(h));
    }
    void do_check(std::vector<std::string> ks, bool_handler h) override {
        base_->do_check(keys(std::move(ks)), std::move(h));
    }
    void do_wait(std::vector<std::string> ks, done_handler h) override {
        base_->do_wait(keys(std::move(ks)), std::move(h));
    }
    void do_erase(std::string k, bool_handler h) override {
        base_->do_erase(key(std::move(k)), std::move(h));
    }
    void do_num_keys(count_handler h) override { base_->do_num_keys(std::move(h)); }

    store* base_;
    std::string prefix_;
};

/// A store in this process's memory, for tests and for the threads of one
/// process: copies share one set of keys, which any thread may use (each
/// operation completes on its handler's associated executor, by default the
/// executor the store was made with).
class memory_store final : public store {
public:
    explicit memory_store(executor_type ex);
    /// A store sharing the keys of `other`, with its own executor.
    memory_store(const memory_store& other, executor_type ex);
    memory_store(const memory_store&);
    memory_store& operator=(const memory_store&);
    ~memory_store() override;

    executor_type get_executor() const noexcept override { return ex_; }

    struct state;

private:
    void do_set(std::string key, value_type value, done_handler h) override;
    void do_get(std::string key, value_handler h) override;
    void do_add(std::string key, std::int64_t delta, count_handler h) override;
    void do_compare_set(std::string key, value_type expected, value_type desired,
                        value_handler h) override;
    void do_check(std::vector<std::string> keys, bool_handler h) override;
    void do_wait(std::vector<std::string> keys, done_handler h) override;
    void do_erase(std::string key, bool_handler h) override;
    void do_num_keys(count_handler h) override;

    executor_type ex_;
    std::shared_ptr<state> state_;
};

} // namespace ucx
