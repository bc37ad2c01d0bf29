// ucx::pmix_store: rounds (store/round_store.hpp) of PMIx_Put, PMIx_Commit,
// PMIx_Fence and PMIx_Get.
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
// nothing is NOT-FOUND, not a wait).
#include <ucx/pmix_store.hpp>

#include "store/round_store.hpp"

#include <boost/system/system_error.hpp>

#include <pmix.h>

namespace ucx {

namespace {

/// The key of round `n`'s value.
std::string round_key(std::uint64_t n) {
    return "ucxasio.store." + std::to_string(n);
}

error_code pmix_error(pmix_status_t s) {
    if (s == PMIX_ERR_TIMEOUT)
        return make_error_code(error::store_timeout);
    return make_error_code(error::pmix_failed);
}

/// The connection to the launcher's PMIx server; its destructor disconnects
/// (a process that exits without PMIx_Finalize is an abnormal termination to
/// Open MPI's mpirun).
class pmix_service final : public detail::round_service {
public:
    pmix_proc_t me{};
    std::uint32_t size = 0;
    bool initialized = false;

    pmix_service() = default;
    pmix_service(const pmix_service&) = delete;
    pmix_service& operator=(const pmix_service&) = delete;
    ~pmix_service() override {
        if (initialized)
            PMIx_Finalize(nullptr, 0);
    }

    void run_round(std::uint64_t n, const std::vector<std::byte>& mine, store::duration timeout,
                   detail::round_result& r) override {
        const std::string key = round_key(n);
        auto fail = [&](const char* call, pmix_status_t s) {
            r.ec = pmix_error(s);
            r.failed_call = call;
        };
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        // PMIx copies the bytes (PMIx_Put): they stay ours, not destructed.
        v.data.bo.bytes = const_cast<char*>(reinterpret_cast<const char*>(mine.data()));
        v.data.bo.size = mine.size();
        if (pmix_status_t s = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v); s != PMIX_SUCCESS)
            return fail("PMIx_Put", s);
        if (pmix_status_t s = PMIx_Commit(); s != PMIX_SUCCESS)
            return fail("PMIx_Commit", s);
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
        const pmix_status_t fenced = PMIx_Fence(&all, 1, info, ninfo);
        PMIX_INFO_DESTRUCT(&info[0]);
        PMIX_INFO_DESTRUCT(&info[1]);
        if (fenced != PMIX_SUCCESS)
            return fail("PMIx_Fence", fenced);
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
                !detail::decode_round(got->data.bo.bytes, got->data.bo.size, r.keys)) {
                if (got)
                    PMIX_VALUE_RELEASE(got);
                fail("PMIx_Get", s != PMIX_SUCCESS ? s : PMIX_ERR_BAD_PARAM);
                break;
            }
            PMIX_VALUE_RELEASE(got);
        }
        PMIX_INFO_DESTRUCT(&optional);
    }
};

} // namespace

struct pmix_store::impl {
    std::uint32_t rank = 0;
    std::uint32_t size = 0;
    std::string nspace;
    std::unique_ptr<detail::round_store> rounds;
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
    : ex_(ex), impl_(std::make_shared<impl>()) {
    ec = {};
    auto service = std::make_unique<pmix_service>();
    // Unusable unless connected: every operation fails with pmix_failed.
    auto fail = [&](const char* call, pmix_status_t s) {
        ec = make_error_code(error::pmix_failed);
        impl_->rounds = std::make_unique<detail::round_store>(ex, ec);
        if (why)
            *why = std::string(call) + ": " + PMIx_Error_string(s);
    };
    pmix_status_t s = PMIx_Init(&service->me, nullptr, 0);
    if (s != PMIX_SUCCESS) {
        fail("PMIx_Init", s);
        return;
    }
    service->initialized = true;
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, service->me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* v = nullptr;
    s = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
    if (s != PMIX_SUCCESS) {
        fail("PMIx_Get(PMIX_JOB_SIZE)", s);
        return;
    }
    service->size = v->type == PMIX_UINT32 ? v->data.uint32 : 0;
    PMIX_VALUE_RELEASE(v);
    if (service->size == 0 || service->me.rank >= service->size) {
        fail("PMIx_Get(PMIX_JOB_SIZE)", PMIX_ERR_BAD_PARAM);
        return;
    }
    impl_->rank = service->me.rank;
    impl_->size = service->size;
    impl_->nspace = service->me.nspace;
    impl_->rounds = std::make_unique<detail::round_store>(ex, std::move(service), PMIX_MAX_KEYLEN);
}

pmix_store::~pmix_store() = default;

std::uint32_t pmix_store::rank() const noexcept {
    return impl_->rank;
}
std::uint32_t pmix_store::size() const noexcept {
    return impl_->size;
}
const std::string& pmix_store::nspace() const noexcept {
    return impl_->nspace;
}
std::uint64_t pmix_store::rounds() const noexcept {
    return impl_->rounds->rounds();
}

void pmix_store::do_set(std::string key, value_type value, done_handler h) {
    impl_->rounds->set(std::move(key), std::move(value), std::move(h));
}

void pmix_store::do_get(std::string key, value_handler h) {
    impl_->rounds->get(std::move(key), timeout(), std::move(h));
}

void pmix_store::do_wait(std::vector<std::string> keys, done_handler h) {
    impl_->rounds->wait(std::move(keys), timeout(), std::move(h));
}

void pmix_store::do_check(std::vector<std::string> keys, bool_handler h) {
    impl_->rounds->check(keys, std::move(h));
}

void pmix_store::do_add(std::string, std::int64_t, count_handler h) {
    impl_->rounds->add(std::move(h));
}

void pmix_store::do_compare_set(std::string, value_type, value_type, value_handler h) {
    impl_->rounds->compare_set(std::move(h));
}

void pmix_store::do_erase(std::string, bool_handler h) {
    impl_->rounds->erase(std::move(h));
}

void pmix_store::do_num_keys(count_handler h) {
    impl_->rounds->num_keys(std::move(h));
}

} // namespace ucx
