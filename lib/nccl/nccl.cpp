// ucx::nccl: NCCL loaded with dlopen, its results as an error category, and
// the operations that make, wait for and close communicators, each an I/O
// object executing the actions of `nccl_plan` (lib/nccl/nccl_plan.hpp).
#include "nccl/nccl_plan.hpp"

#include <ucx/configuration.hpp>
#include <ucx/log.hpp>
#include <ucx/nccl.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

namespace ucx::nccl {

namespace {

// ---- the library, loaded once per process ----

struct api {
    void* handle = nullptr;
    std::string path;
    int version = 0;
    error_code error;
    ncclResult_t (*get_version)(int*) = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
    ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
    ncclResult_t (*abort)(ncclComm_t) = nullptr;
    ncclResult_t (*destroy)(ncclComm_t) = nullptr;
    ncclResult_t (*finalize)(ncclComm_t) = nullptr;
    ncclResult_t (*count)(const ncclComm_t, int*) = nullptr;
    ncclResult_t (*user_rank)(const ncclComm_t, int*) = nullptr;
    const char* (*error_string)(ncclResult_t) = nullptr;
};

api& the_api() {
    static api a;
    return a;
}

template <class F>
bool resolve(void* handle, const char* name, F& f) {
    f = reinterpret_cast<F>(dlsym(handle, name));
    if (!f)
        log::write(log::severity::warning, std::string("nccl: the library has no ") + name +
                                               ": it is not NCCL 2.14 or later");
    return f != nullptr;
}

void load_once(api& a) {
    const char* named = std::getenv(env::nccl_library);
    const char* file = named && *named ? named : "libnccl.so.2";
    // RTLD_GLOBAL: the program's own NCCL calls (through a later dlopen or
    // symbol lookup) find this same copy.
    void* h = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char* why = dlerror();
        log::write(log::severity::warning, std::string("nccl: cannot load ") + file + ": " +
                                               (why ? why : "unknown reason") +
                                               " (UCXASIO_NCCL_LIBRARY names the file)");
        a.error = ucx::error::nccl_unavailable;
        return;
    }
    bool ok = resolve(h, "ncclGetVersion", a.get_version) &&
              resolve(h, "ncclGetUniqueId", a.get_unique_id) &&
              resolve(h, "ncclCommInitRankConfig", a.init_rank_config) &&
              resolve(h, "ncclCommGetAsyncError", a.get_async_error) &&
              resolve(h, "ncclCommAbort", a.abort) && resolve(h, "ncclCommDestroy", a.destroy) &&
              resolve(h, "ncclCommFinalize", a.finalize) && resolve(h, "ncclCommCount", a.count) &&
              resolve(h, "ncclCommUserRank", a.user_rank) &&
              resolve(h, "ncclGetErrorString", a.error_string);
    if (!ok) {
        dlclose(h);
        a = api{};
        a.error = ucx::error::nccl_unavailable;
        return;
    }
    a.handle = h;
    if (a.get_version(&a.version) != ncclSuccess)
        a.version = 0;
    char where[4096] = {};
    // The file dlopen found (the loader's path, or the name given).
    if (auto* sym = reinterpret_cast<void*>(a.get_version); sym) {
        Dl_info info{};
        if (dladdr(sym, &info) && info.dli_fname)
            std::strncpy(where, info.dli_fname, sizeof where - 1);
    }
    a.path = where[0] ? where : file;
    log::write(log::severity::debug,
               "nccl: loaded " + a.path + ", version " + std::to_string(a.version));
}

const api* loaded() noexcept {
    static std::once_flag once;
    try {
        std::call_once(once, [] { load_once(the_api()); });
    } catch (...) {
        return nullptr;
    }
    const api& a = the_api();
    return a.handle ? &a : nullptr;
}

// ---- the error category ----

class nccl_category final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "ucx.nccl"; }
    std::string message(int ev) const override {
        if (const api* a = loaded(); a && a->error_string)
            if (const char* s = a->error_string(static_cast<ncclResult_t>(ev)))
                return s;
        switch (ev) {
        case ncclSuccess:
            return "no error";
        case ncclUnhandledCudaError:
            return "unhandled cuda error";
        case ncclSystemError:
            return "unhandled system error";
        case ncclInternalError:
            return "internal error";
        case ncclInvalidArgument:
            return "invalid argument";
        case ncclInvalidUsage:
            return "invalid usage";
        case ncclRemoteError:
            return "remote process exited or there was a network error";
        case ncclInProgress:
            return "NCCL operation in progress";
        default:
            return "NCCL error " + std::to_string(ev);
        }
    }
    boost::system::error_condition default_error_condition(int ev) const noexcept override {
        using boost::system::errc::errc_t;
        switch (ev) {
        case ncclInvalidArgument:
        case ncclInvalidUsage:
            return make_error_condition(errc_t::invalid_argument);
        case ncclSystemError:
            return make_error_condition(errc_t::io_error);
        case ncclRemoteError:
            return make_error_condition(errc_t::connection_aborted);
        case ncclInProgress:
            return make_error_condition(errc_t::operation_in_progress);
        case 8: // ncclTimeout (NCCL 2.27 and later)
            return make_error_condition(errc_t::timed_out);
        default:
            return {ev, *this};
        }
    }
};

// ---- the operations ----

/// One operation: making a communicator (of a group or from an id) or
/// waiting for NCCL on one (and finalizing it). Owned by its pending
/// callbacks; completes once.
class nccl_op : public std::enable_shared_from_this<nccl_op> {
public:
    enum class kind : std::uint8_t { make, wait };

    nccl_op(const boost::asio::any_io_executor& ex, kind k) : ex_(ex), kind_(k), timer_(ex) {}

    /// Making: by a group (`g` set) or from an id.
    group* group_ = nullptr;
    int size_ = 0;
    int rank_ = 0;
    communicator_options options_;
    // The broadcast of the root's status and id: 4 bytes of status, then
    // the id.
    std::array<unsigned char, 4 + NCCL_UNIQUE_ID_BYTES> exchange_{};
    ncclUniqueId id_{};
    ncclComm_t comm_ = nullptr;
    bool finalize_ = false;
    /// Waiting (not finalizing): the caller's communicator, aborted through
    /// it so that it does not keep a dead handle.
    communicator* owner_ = nullptr;
    std::chrono::milliseconds timeout_{0};
    std::chrono::microseconds interval_{500};
    // Emplaced, never assigned: Boost 1.81's any_completion_handler wraps
    // itself on move assignment (and recurses without end when called).
    std::optional<detail::communicator_handler> made_;
    std::optional<detail::done_handler> done_;

    void start_make() {
        init_slot(*made_);
        if (group_) {
            plan_.start_make(group_->rank() == 0);
        } else {
            plan_.start_init(); // the id is the caller's
        }
        drive();
    }

    void start_wait(ncclResult_t first) {
        init_slot(*done_);
        deadline_set();
        int r = first;
        if (finalize_)
            r = api_->finalize(comm_);
        plan_.start_wait(r);
        drive();
    }

    const api* api_ = nullptr;

private:
    template <class Handler>
    void init_slot(Handler& h) {
        auto slot = boost::asio::get_associated_cancellation_slot(h);
        if (slot.is_connected()) {
            slot_ = slot;
            slot.assign([w = weak_from_this()](boost::asio::cancellation_type t) {
                if (!(t & (boost::asio::cancellation_type::terminal |
                           boost::asio::cancellation_type::partial |
                           boost::asio::cancellation_type::total)))
                    return;
                if (auto self = w.lock()) {
                    self->plan_.cancel();
                    self->timer_.cancel();
                    self->drive();
                }
            });
        }
    }

    void deadline_set() {
        if (timeout_.count() > 0)
            deadline_ = std::chrono::steady_clock::now() + timeout_;
    }

    void drive() {
        if (driving_)
            return; // the outer loop takes the new actions
        driving_ = true;
        for (;;) {
            ucx::detail::nccl_action a = plan_.next();
            if (a.kind == ucx::detail::nccl_action::none)
                break;
            execute(a);
        }
        driving_ = false;
    }

    void execute(const ucx::detail::nccl_action& a) {
        switch (a.kind) {
        case ucx::detail::nccl_action::none:
            return;
        case ucx::detail::nccl_action::make_id: {
            const ncclResult_t r = api_->get_unique_id(&id_);
            const auto status = static_cast<std::uint32_t>(r);
            std::memcpy(exchange_.data(), &status, 4);
            std::memcpy(exchange_.data() + 4, &id_, sizeof id_);
            if (r != ncclSuccess)
                log::write(log::severity::warning,
                           std::string("nccl: ncclGetUniqueId failed: ") + category().message(r));
            plan_.id_made(r);
            return;
        }
        case ucx::detail::nccl_action::exchange_id:
            group_->async_broadcast(
                boost::asio::buffer(exchange_), 0, [self = shared_from_this()](error_code ec) {
                    std::uint32_t status = 0;
                    std::memcpy(&status, self->exchange_.data(), 4);
                    std::memcpy(&self->id_, self->exchange_.data() + 4, sizeof self->id_);
                    self->plan_.id_exchanged(ec, static_cast<int>(status));
                    self->drive();
                });
            return;
        case ucx::detail::nccl_action::init: {
            deadline_set();
            ncclConfig_t config = options_.config;
            config.blocking = 0;
            int previous = -1;
            if (options_.device >= 0) {
                if (cudaGetDevice(&previous) != cudaSuccess)
                    previous = -1;
                if (cudaSetDevice(options_.device) != cudaSuccess) {
                    (void)cudaGetLastError();
                    log::write(log::severity::warning, "nccl: cannot make CUDA device " +
                                                           std::to_string(options_.device) +
                                                           " current");
                    plan_.call_failed(ucx::error::cuda_unavailable);
                    return;
                }
            }
            const ncclResult_t r = api_->init_rank_config(&comm_, size_, id_, rank_, &config);
            if (previous >= 0)
                (void)cudaSetDevice(previous);
            log::write(log::severity::debug,
                       "nccl: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                           ": ncclCommInitRankConfig: " + category().message(r));
            plan_.called(r);
            return;
        }
        case ucx::detail::nccl_action::wait:
            timer_.expires_after(interval_);
            timer_.async_wait([self = shared_from_this()](error_code) {
                const bool passed =
                    self->deadline_ && std::chrono::steady_clock::now() >= *self->deadline_;
                self->plan_.tick(passed);
                self->drive();
            });
            return;
        case ucx::detail::nccl_action::poll: {
            ncclResult_t state = ncclInProgress;
            const ncclResult_t r = api_->get_async_error(comm_, &state);
            plan_.polled(r != ncclSuccess ? r : state);
            return;
        }
        case ucx::detail::nccl_action::abort:
            if (owner_)
                owner_->abort(); // the caller's communicator: it is empty now
            else if (comm_)
                (void)api_->abort(comm_);
            comm_ = nullptr;
            return;
        case ucx::detail::nccl_action::complete: {
            error_code ec = a.ec;
            if (!ec && a.nccl_result != ncclSuccess)
                ec = make_error_code(static_cast<ncclResult_t>(a.nccl_result));
            log::write(log::severity::debug, std::string("nccl: ") +
                                                 (kind_ == kind::make ? "make" : "wait") +
                                                 " done: " + (ec ? ec.message() : "success"));
            timer_.cancel();
            if (slot_.is_connected())
                slot_.clear();
            if (kind_ == kind::make) {
                communicator c(ec ? nullptr : comm_);
                comm_ = nullptr;
                boost::asio::post(ex_, boost::asio::append(std::move(*made_), ec, std::move(c)));
            } else {
                if (finalize_ && comm_) {
                    // Finalized (or aborted above): its resources go now.
                    if (!ec)
                        (void)api_->destroy(comm_);
                    else
                        (void)api_->abort(comm_);
                }
                comm_ = nullptr;
                boost::asio::post(ex_, boost::asio::append(std::move(*done_), ec));
            }
            return;
        }
        }
    }

    boost::asio::any_io_executor ex_;
    kind kind_;
    boost::asio::steady_timer timer_;
    ucx::detail::nccl_plan plan_;
    std::optional<std::chrono::steady_clock::time_point> deadline_;
    boost::asio::cancellation_slot slot_;
    bool driving_ = false;
};

} // namespace

const boost::system::error_category& category() noexcept {
    static const nccl_category c;
    return c;
}

error_code load_library() noexcept {
    if (loaded())
        return {};
    return ucx::error::nccl_unavailable;
}

int library_version() noexcept {
    const api* a = loaded();
    return a ? a->version : 0;
}

std::string library_path() {
    const api* a = loaded();
    return a ? a->path : std::string();
}

error_code make_unique_id(ncclUniqueId& id) noexcept {
    const api* a = loaded();
    if (!a)
        return ucx::error::nccl_unavailable;
    return make_error_code(a->get_unique_id(&id));
}

int communicator::rank() const noexcept {
    const api* a = loaded();
    int r = -1;
    if (!comm_ || !a || a->user_rank(comm_, &r) != ncclSuccess)
        return -1;
    return r;
}

int communicator::size() const noexcept {
    const api* a = loaded();
    int n = 0;
    if (!comm_ || !a || a->count(comm_, &n) != ncclSuccess)
        return 0;
    return n;
}

error_code communicator::status() const noexcept {
    if (!comm_)
        return boost::asio::error::bad_descriptor;
    const api* a = loaded();
    if (!a)
        return ucx::error::nccl_unavailable;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = a->get_async_error(comm_, &state);
    return make_error_code(r != ncclSuccess ? r : state);
}

void communicator::abort() noexcept {
    if (!comm_)
        return;
    if (const api* a = loaded())
        (void)a->abort(comm_);
    comm_ = nullptr;
}

void communicator::reset() noexcept {
    if (!comm_)
        return;
    if (const api* a = loaded()) {
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = a->get_async_error(comm_, &state);
        if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
            (void)a->abort(comm_);
        else
            (void)a->destroy(comm_);
    }
    comm_ = nullptr;
}

namespace {

/// An operation that makes rank `rank` of `size`.
std::shared_ptr<nccl_op> make_op(const boost::asio::any_io_executor& ex, const api& a, int size,
                                 int rank, const communicator_options& o,
                                 detail::communicator_handler h) {
    auto op = std::make_shared<nccl_op>(ex, nccl_op::kind::make);
    op->api_ = &a;
    op->size_ = size;
    op->rank_ = rank;
    op->options_ = o;
    op->timeout_ = o.timeout;
    op->interval_ = o.poll_interval.count() > 0 ? o.poll_interval : std::chrono::microseconds(1);
    op->made_.emplace(std::move(h));
    return op;
}

} // namespace

namespace detail {

void make_communicator(group& g, const communicator_options& o, communicator_handler h) {
    const boost::asio::any_io_executor ex = g.get_executor();
    const api* a = loaded();
    if (!a || !g.is_open()) {
        const error_code ec = a ? g.error() : error_code(ucx::error::nccl_unavailable);
        boost::asio::post(ex, boost::asio::append(std::move(h), ec, communicator()));
        return;
    }
    auto op = make_op(ex, *a, g.size(), g.rank(), o, std::move(h));
    op->group_ = &g;
    op->start_make();
}

void init_rank(const boost::asio::any_io_executor& ex, int size, int rank, const ncclUniqueId& id,
               const communicator_options& o, communicator_handler h) {
    const api* a = loaded();
    if (!a || size < 1 || rank < 0 || rank >= size) {
        const error_code ec = a ? error_code(boost::asio::error::invalid_argument)
                                : error_code(ucx::error::nccl_unavailable);
        boost::asio::post(ex, boost::asio::append(std::move(h), ec, communicator()));
        return;
    }
    auto op = make_op(ex, *a, size, rank, o, std::move(h));
    op->id_ = id;
    op->start_make();
}

void wait_ready(const boost::asio::any_io_executor& ex, communicator* owner, ncclComm_t comm,
                ncclResult_t first, std::chrono::milliseconds timeout,
                std::chrono::microseconds poll_interval, bool finalize, done_handler h) {
    const api* a = loaded();
    if (!a || !comm) {
        const error_code ec = a ? error_code(boost::asio::error::bad_descriptor)
                                : error_code(ucx::error::nccl_unavailable);
        boost::asio::post(ex, boost::asio::append(std::move(h), ec));
        return;
    }
    auto op = std::make_shared<nccl_op>(ex, nccl_op::kind::wait);
    op->api_ = a;
    op->comm_ = comm;
    op->owner_ = owner;
    op->finalize_ = finalize;
    op->timeout_ = timeout;
    op->interval_ = poll_interval.count() > 0 ? poll_interval : std::chrono::microseconds(1);
    op->done_.emplace(std::move(h));
    op->start_wait(first);
}

} // namespace detail

} // namespace ucx::nccl
