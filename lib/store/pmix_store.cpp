// ucx::pmix_store: rounds of PMIx_Put, PMIx_Commit, PMIx_Fence and PMIx_Get
// on a thread of the store's own, their results handed to its executor.
//
// Why rounds. PMIx keys belong to the process that put them: a PMIx_Get names
// the process (measured with Open MPI 4.1.4's mpirun and PMIx 4.2: a get of
// another process's key with PMIX_RANK_UNDEF, or with the wrong rank, is
// NOT-FOUND even after a fence with data collection). A get of a named
// process's key before any fence works in that Open MPI (the server fetches
// it from the owner, "direct modex"), but a store's key says nothing of the
// process that sets it. So each round publishes every key this process set
// since the last round as one value, "ucxasio.store.<round>", fences every
// process of the job with data collection, then reads that value of every
// other process, now local to this node (PMIX_OPTIONAL: a process that set
// nothing is NOT-FOUND, not a wait). Rounds are numbered in each process;
// they are collective, so round n of one process meets round n of the
// others. A join (every rank sets its address, then gets every other) takes
// one round.
#include <ucx/pmix_store.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>

#include <pmix.h>

#include <cstring>
#include <list>
#include <map>
#include <thread>

namespace ucx {

namespace {

/// The key of round `n`'s value.
std::string round_key(std::uint64_t n) {
    return "ucxasio.store." + std::to_string(n);
}

void put_u32(std::vector<std::byte>& out, std::size_t n) {
    for (int i = 0; i < 4; ++i)
        out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
}

/// A round's value: for each key, its size, its bytes, its value's size and
/// bytes (sizes as 32-bit little-endian).
std::vector<std::byte> encode(const std::map<std::string, store::value_type>& keys) {
    std::vector<std::byte> out;
    for (const auto& [k, v] : keys) {
        put_u32(out, k.size());
        const auto* p = reinterpret_cast<const std::byte*>(k.data());
        out.insert(out.end(), p, p + k.size());
        put_u32(out, v.size());
        out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

/// Decodes a round's value into `keys`; false when malformed.
bool decode(const char* data, std::size_t size, std::map<std::string, store::value_type>& keys) {
    std::size_t at = 0;
    auto u32 = [&](std::size_t& n) {
        if (size - at < 4)
            return false;
        n = 0;
        for (int i = 0; i < 4; ++i)
            n |= static_cast<std::size_t>(static_cast<unsigned char>(data[at + i])) << (8 * i);
        at += 4;
        return n <= size - at;
    };
    while (at < size) {
        std::size_t n = 0;
        if (!u32(n))
            return false;
        std::string k(data + at, n);
        at += n;
        if (!u32(n))
            return false;
        const auto* p = reinterpret_cast<const std::byte*>(data + at);
        keys[std::move(k)] = store::value_type(p, p + n);
        at += n;
    }
    return true;
}

/// A `get` or `wait` waiting for keys.
struct waiter {
    std::vector<std::string> keys;
    std::function<void(error_code, store::value_type)> finish; // on the store's executor
    std::unique_ptr<boost::asio::steady_timer> timer;
    bool done = false;
};

/// What a round brings back to the executor.
struct round_result {
    pmix_status_t status = PMIX_SUCCESS;
    const char* call = "";
    std::map<std::string, store::value_type> keys;
};

error_code pmix_error(pmix_status_t s) {
    if (s == PMIX_ERR_TIMEOUT)
        return make_error_code(error::store_timeout);
    return make_error_code(error::pmix_failed);
}

} // namespace

/// The store's state: used on the store's executor, except `me` and `size`
/// (constant) and the PMIx connection, which the last owner finalizes (the
/// store, or a round's thread that outlives it).
struct pmix_store::impl : std::enable_shared_from_this<impl> {
    executor_type ex;
    pmix_proc_t me{};
    std::uint32_t size = 0;
    std::string nspace;
    bool initialized = false;

    std::map<std::string, value_type> known;  // every key seen
    std::map<std::string, value_type> unsent; // set since the last round
    std::list<std::shared_ptr<waiter>> waiters;
    std::uint64_t rounds = 0;
    bool in_round = false;
    bool closed = false;

    explicit impl(executor_type e) : ex(std::move(e)) {}
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;
    ~impl() {
        if (initialized)
            PMIx_Finalize(nullptr, 0);
    }

    bool has_all(const std::vector<std::string>& ks) const {
        for (const auto& k : ks)
            if (!known.contains(k))
                return false;
        return true;
    }

    void end(const std::shared_ptr<waiter>& w, error_code ec) {
        if (w->done)
            return;
        w->done = true;
        waiters.remove(w);
        if (w->timer)
            w->timer->cancel();
        w->finish(ec, ec ? value_type{} : known.at(w->keys.front()));
    }

    /// Starts a round on a thread of its own; its result comes back through
    /// `round_done` on the executor.
    void start_round(duration timeout) {
        in_round = true;
        const std::uint64_t n = ++rounds;
        std::vector<std::byte> mine = encode(unsent);
        unsent.clear();
        auto work = boost::asio::make_work_guard(ex);
        std::thread([self = shared_from_this(), n, mine = std::move(mine), timeout,
                     work = std::move(work)]() mutable {
            auto r = std::make_shared<round_result>();
            self->run_round(n, mine, timeout, *r);
            auto ex = self->ex;
            boost::asio::post(ex, [self, r] { self->round_done(*r); });
            // This thread lets go of the state before the executor may run
            // out of work: once the io_context's run() returns, the store is
            // its last owner, and its destructor finalizes PMIx (a process
            // that exits without PMIx_Finalize is an abnormal termination to
            // Open MPI's mpirun).
            self.reset();
            work.reset();
        }).detach();
    }

    /// The blocking part of a round (on the round's thread; reads only the
    /// constant members).
    void run_round(std::uint64_t n, std::vector<std::byte>& mine, duration timeout,
                   round_result& r) const {
        const std::string key = round_key(n);
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = reinterpret_cast<char*>(mine.data());
        v.data.bo.size = mine.size();
        r.status = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
        // The value's bytes are ours (mine), not PMIx's: not destructed.
        if (r.status != PMIX_SUCCESS) {
            r.call = "PMIx_Put";
            return;
        }
        if ((r.status = PMIx_Commit()) != PMIX_SUCCESS) {
            r.call = "PMIx_Commit";
            return;
        }
        pmix_proc_t all;
        PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
        pmix_info_t info[2];
        PMIX_INFO_CONSTRUCT(&info[0]);
        PMIX_INFO_CONSTRUCT(&info[1]);
        bool collect = true;
        PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        std::size_t ninfo = 1;
        if (timeout.count() > 0) {
            int seconds = static_cast<int>((timeout.count() + 999) / 1000);
            PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
            ninfo = 2;
        }
        r.status = PMIx_Fence(&all, 1, info, ninfo);
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        if (r.status != PMIX_SUCCESS) {
            r.call = "PMIx_Fence";
            return;
        }
        pmix_info_t optional;
        PMIX_INFO_CONSTRUCT(&optional);
        bool yes = true;
        PMIX_INFO_LOAD(&optional, PMIX_OPTIONAL, &yes, PMIX_BOOL);
        for (std::uint32_t rank = 0; rank < size; ++rank) {
            if (rank == me.rank)
                continue;
            pmix_proc_t p;
            PMIX_LOAD_PROCID(&p, me.nspace, rank);
            pmix_value_t* got = nullptr;
            const pmix_status_t s = PMIx_Get(&p, key.c_str(), &optional, 1, &got);
            if (s == PMIX_ERR_NOT_FOUND)
                continue; // that process set nothing in this round
            if (s != PMIX_SUCCESS || got->type != PMIX_BYTE_OBJECT ||
                !decode(got->data.bo.bytes, got->data.bo.size, r.keys)) {
                if (got)
                    PMIX_VALUE_RELEASE(got);
                r.status = s != PMIX_SUCCESS ? s : PMIX_ERR_BAD_PARAM;
                r.call = "PMIx_Get";
                break;
            }
            PMIX_VALUE_RELEASE(got);
        }
        PMIX_INFO_DESTRUCT(&optional);
    }

    void round_done(round_result& r) {
        in_round = false;
        if (closed)
            return;
        if (r.status != PMIX_SUCCESS) {
            const error_code ec = pmix_error(r.status);
            while (!waiters.empty())
                end(waiters.front(), ec);
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

    duration timeout_of_round{};
};

pmix_store::pmix_store(executor_type ex) : ex_(ex) {
    error_code ec;
    std::string why;
    pmix_store s(ex, ec, &why);
    if (ec)
        throw boost::system::system_error(ec, "ucx::pmix_store: " + why);
    impl_ = std::move(s.impl_);
}

pmix_store::pmix_store(executor_type ex, error_code& ec, std::string* why)
    : ex_(ex), impl_(std::make_shared<impl>(ex)) {
    ec = {};
    auto fail = [&](const char* call, pmix_status_t s) {
        ec = make_error_code(error::pmix_failed);
        if (why)
            *why = std::string(call) + ": " + PMIx_Error_string(s);
    };
    pmix_status_t s = PMIx_Init(&impl_->me, nullptr, 0);
    if (s != PMIX_SUCCESS) {
        fail("PMIx_Init", s);
        return;
    }
    impl_->initialized = true;
    impl_->nspace = impl_->me.nspace;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, impl_->me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* v = nullptr;
    s = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
    if (s != PMIX_SUCCESS) {
        fail("PMIx_Get(PMIX_JOB_SIZE)", s);
        return;
    }
    impl_->size = v->type == PMIX_UINT32 ? v->data.uint32 : 0;
    PMIX_VALUE_RELEASE(v);
    if (impl_->size == 0 || impl_->me.rank >= impl_->size) {
        fail("PMIx_Get(PMIX_JOB_SIZE)", PMIX_ERR_BAD_PARAM);
        return;
    }
}

pmix_store::~pmix_store() {
    if (!impl_)
        return;
    impl_->closed = true;
    while (!impl_->waiters.empty())
        impl_->end(impl_->waiters.front(), boost::asio::error::operation_aborted);
}

std::uint32_t pmix_store::rank() const noexcept {
    return impl_->me.rank;
}
std::uint32_t pmix_store::size() const noexcept {
    return impl_->size;
}
const std::string& pmix_store::nspace() const noexcept {
    return impl_->nspace;
}
std::uint64_t pmix_store::rounds() const noexcept {
    return impl_->rounds;
}

namespace {

template <class Handler, class... Args>
void complete(const store::executor_type& ex, Handler h, Args&&... args) {
    boost::asio::post(ex, boost::asio::append(std::move(h), std::forward<Args>(args)...));
}

bool valid_key(const std::string& k) {
    return k.size() <= PMIX_MAX_KEYLEN;
}

} // namespace

void pmix_store::do_set(std::string key, value_type value, done_handler h) {
    if (!valid_key(key))
        return complete(ex_, std::move(h), error_code(boost::asio::error::invalid_argument));
    impl_->unsent[key] = value;
    impl_->known[key] = std::move(value);
    // A waiter of this process for that key.
    for (auto it = impl_->waiters.begin(); it != impl_->waiters.end();) {
        auto w = *it++;
        if (impl_->has_all(w->keys))
            impl_->end(w, {});
    }
    complete(ex_, std::move(h), error_code());
}

namespace {

/// Waits for `keys` (any completion of `finish`: on the store's executor).
template <class Handler, class Done>
void wait_keys(const std::shared_ptr<pmix_store::impl>& s, store::duration timeout,
               std::vector<std::string> keys, Handler h, Done done) {
    for (const auto& k : keys)
        if (!valid_key(k))
            return done(std::move(h), error_code(boost::asio::error::invalid_argument),
                        store::value_type{});
    auto w = std::make_shared<waiter>();
    w->keys = std::move(keys);
    auto slot = boost::asio::get_associated_cancellation_slot(h);
    auto hp = std::make_shared<Handler>(std::move(h));
    w->finish = [hp, done, slot](error_code ec, store::value_type v) mutable {
        if (slot.is_connected())
            slot.clear();
        done(std::move(*hp), ec, std::move(v));
    };
    if (s->has_all(w->keys)) {
        w->done = true;
        return w->finish({}, s->known.at(w->keys.front()));
    }
    s->waiters.push_back(w);
    std::weak_ptr<pmix_store::impl> ws = s;
    if (timeout.count() > 0) {
        w->timer = std::make_unique<boost::asio::steady_timer>(s->ex, timeout);
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
    if (!s->in_round) {
        s->timeout_of_round = timeout;
        s->start_round(timeout);
    }
}

} // namespace

void pmix_store::do_get(std::string key, value_handler h) {
    wait_keys(impl_, timeout(), std::vector<std::string>{std::move(key)}, std::move(h),
              [ex = ex_](value_handler h, error_code ec, value_type v) {
                  complete(ex, std::move(h), ec, std::move(v));
              });
}

void pmix_store::do_wait(std::vector<std::string> keys, done_handler h) {
    if (keys.empty())
        return complete(ex_, std::move(h), error_code());
    wait_keys(
        impl_, timeout(), std::move(keys), std::move(h),
        [ex = ex_](done_handler h, error_code ec, value_type) { complete(ex, std::move(h), ec); });
}

void pmix_store::do_check(std::vector<std::string> keys, bool_handler h) {
    complete(ex_, std::move(h), error_code(), impl_->has_all(keys));
}

void pmix_store::do_add(std::string, std::int64_t, count_handler h) {
    complete(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
             std::int64_t{0});
}

void pmix_store::do_compare_set(std::string, value_type, value_type, value_handler h) {
    complete(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
             value_type{});
}

void pmix_store::do_erase(std::string, bool_handler h) {
    complete(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported), false);
}

void pmix_store::do_num_keys(count_handler h) {
    complete(ex_, std::move(h), error_code(boost::asio::error::operation_not_supported),
             std::int64_t{0});
}

} // namespace ucx
