// ucx::file_store: one file per key in a shared directory.
#include <ucx/file_store.hpp>

#include "store/post_result.hpp"
#include "store/store_rules.hpp"
#include "util/random.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cerrno>
#include <functional>
#include <optional>
#include <random>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ucx {

namespace asio = boost::asio;
namespace rules = detail::store_rules;

namespace {

using done_handler = asio::any_completion_handler<void(error_code)>;
using value_handler = asio::any_completion_handler<void(error_code, store::value_type)>;

/// The longest file name most file systems take.
constexpr std::size_t max_name = 255;
constexpr std::string_view key_file_prefix = "k_";
constexpr const char* lock_file_name = ".lock";

error_code last_error() {
    return error_code(errno, boost::system::system_category());
}

error_code sys_error(int e) {
    return error_code(e, boost::system::system_category());
}

/// An open file descriptor, closed at the end of its scope.
struct fd_guard {
    int fd = -1;
    ~fd_guard() {
        if (fd >= 0)
            ::close(fd);
    }
};

error_code key_path(const std::filesystem::path& dir, std::string_view key,
                    std::filesystem::path& out) {
    auto name = file_store::file_name(key);
    if (name.size() > max_name)
        return sys_error(ENAMETOOLONG);
    out = dir / name;
    return {};
}

/// Reads the whole file `p`, a regular file of at most `max` bytes: ENOENT
/// when there is none, `store_not_regular_file` for another kind of file (a
/// FIFO, which would block, a device, a symbolic link, which may lead to one),
/// `store_value_too_large` for a larger one. Nothing here blocks on the file:
/// its kind is checked before it is opened (without following a link and
/// without waiting for a writer), and again on the open descriptor.
error_code read_file(const std::filesystem::path& p, std::size_t max, store::value_type& out) {
    out.clear();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0)
        return last_error();
    if (!S_ISREG(st.st_mode))
        return make_error_code(error::store_not_regular_file);
    fd_guard f{::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)};
    if (f.fd < 0) {
        // Replaced by a symbolic link since the lstat.
        if (errno == ELOOP)
            return make_error_code(error::store_not_regular_file);
        return last_error();
    }
    if (::fstat(f.fd, &st) != 0)
        return last_error();
    if (!S_ISREG(st.st_mode))
        return make_error_code(error::store_not_regular_file);
    if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > max)
        return make_error_code(error::store_value_too_large);
    out.reserve(static_cast<std::size_t>(st.st_size));
    std::byte buf[16 * 1024];
    for (;;) {
        // One byte more than the bound tells a file that grew over it.
        const std::size_t room = max + 1 - out.size();
        const auto n = ::read(f.fd, buf, std::min(sizeof buf, room));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return last_error();
        }
        if (n == 0)
            return {};
        out.insert(out.end(), buf, buf + n);
        if (out.size() > max) {
            out.clear();
            return make_error_code(error::store_value_too_large);
        }
    }
}

/// Writes `value` to a temporary file of `dir` and renames it to `p`.
error_code write_file(const std::filesystem::path& dir, const std::filesystem::path& p,
                      const store::value_type& value) {
    static std::atomic<unsigned> counter{0};
    thread_local std::mt19937_64 rng{detail::random_u64()};
    const auto tmp = dir / (".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) +
                            "." + std::to_string(rng()));
    error_code ec;
    {
        fd_guard f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
        if (f.fd < 0)
            return last_error();
        std::size_t done = 0;
        while (done < value.size()) {
            const auto n = ::write(f.fd, value.data() + done, value.size() - done);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                ec = last_error();
                break;
            }
            done += static_cast<std::size_t>(n);
        }
        if (!ec && ::close(f.fd) != 0)
            ec = last_error();
        f.fd = -1;
    }
    if (!ec && ::rename(tmp.c_str(), p.c_str()) != 0)
        ec = last_error();
    if (ec)
        ::unlink(tmp.c_str());
    return ec;
}

/// The directory's exclusive lock, held for its scope, taken without waiting:
/// `busy` when another process (or store) holds it.
struct dir_lock {
    fd_guard f;
    error_code ec;
    bool busy = false;
    explicit dir_lock(const std::filesystem::path& dir) {
        const auto p = dir / lock_file_name;
        f.fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
                      0644);
        if (f.fd < 0) {
            ec = errno == ELOOP ? make_error_code(error::store_not_regular_file) : last_error();
            return;
        }
        struct stat st;
        if (::fstat(f.fd, &st) != 0) {
            ec = last_error();
            return;
        }
        if (!S_ISREG(st.st_mode)) {
            ec = make_error_code(error::store_not_regular_file);
            return;
        }
        while (::flock(f.fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) {
                busy = true;
                return;
            }
            if (errno != EINTR) {
                ec = last_error();
                return;
            }
        }
    }
};

/// Whether the key's file is there (of any kind: reading it says more).
bool key_exists(const std::filesystem::path& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0;
}

} // namespace

/// The growing intervals at which a wait looks again, up to its deadline:
/// each interval is half as long again as the one before, up to a bound.
/// (Outside the anonymous namespace: the store's nested types hold one.)
struct file_store_backoff {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    std::chrono::milliseconds interval{1};
    std::chrono::milliseconds max_interval{50};

    /// The intervals of `options`; the deadline `timeout` from now (none
    /// when it is not positive).
    file_store_backoff(const file_store_options& options, store::duration timeout)
        : interval(options.poll_interval.count() > 0 ? options.poll_interval
                                                     : std::chrono::milliseconds(1)),
          max_interval(std::max(options.max_poll_interval, interval)) {
        if (timeout.count() > 0)
            deadline = std::chrono::steady_clock::now() + timeout;
    }

    /// When to look next, or nothing once the deadline has passed.
    std::optional<std::chrono::steady_clock::time_point> next() {
        const auto now = std::chrono::steady_clock::now();
        if (deadline && now >= *deadline)
            return std::nullopt;
        auto at = now + interval;
        if (deadline && at > *deadline)
            at = *deadline;
        interval = std::min(interval + interval / 2 + std::chrono::milliseconds(1), max_interval);
        return at;
    }
};

/// A get or wait that looks for its keys until they are there.
struct file_store::poll : std::enable_shared_from_this<file_store::poll> {
    // (Boost 1.81's any_completion_handler has no working move assignment:
    // the handlers are moved in by construction.)
    poll(executor_type e, file_store_backoff b, value_handler v, done_handler d)
        : ex(e), timer(e), vh(std::move(v)), dh(std::move(d)), wait(b) {}

    executor_type ex;
    asio::steady_timer timer;
    std::vector<std::filesystem::path> paths;
    bool want_value = false;
    value_handler vh;
    done_handler dh;
    file_store_backoff wait;
    bool done = false;
    bool cancellable = false;
    std::size_t max_value_size = rules::default_max_value_size;

    /// Looks once; true when it completed.
    bool look() {
        if (want_value) {
            store::value_type v;
            auto ec = read_file(paths[0], max_value_size, v);
            if (ec == sys_error(ENOENT))
                return false;
            finish(ec, std::move(v));
            return true;
        }
        for (const auto& p : paths)
            if (!key_exists(p))
                return false;
        finish({}, {});
        return true;
    }

    void schedule() {
        const auto at = wait.next();
        if (!at)
            return finish(make_error_code(error::store_timeout), {});
        timer.expires_at(*at);
        timer.async_wait([self = shared_from_this()](error_code ec) {
            if (ec || self->done)
                return;
            if (!self->look())
                self->schedule();
        });
    }

    void finish(error_code ec, store::value_type v) {
        if (done)
            return;
        done = true;
        timer.cancel();
        if (want_value) {
            if (cancellable)
                asio::get_associated_cancellation_slot(vh).clear();
            detail::post_result(ex, std::move(vh), ec, std::move(v));
        } else {
            if (cancellable)
                asio::get_associated_cancellation_slot(dh).clear();
            detail::post_result(ex, std::move(dh), ec);
        }
    }
};

/// An add or compare_set waiting for the directory's lock, which another
/// store holds: it tries again at growing intervals until the timeout.
struct file_store::lock_wait : std::enable_shared_from_this<file_store::lock_wait> {
    lock_wait(executor_type e, file_store_backoff b) : timer(e), wait(b) {}

    asio::steady_timer timer;
    std::filesystem::path dir;
    /// Runs with the lock held (an empty code) or with the error that ends
    /// the wait; called once.
    std::function<void(error_code)> body;
    file_store_backoff wait;
    bool done = false;

    void finish(error_code ec) {
        if (std::exchange(done, true))
            return;
        timer.cancel();
        body(ec);
    }

    void schedule() {
        const auto at = wait.next();
        if (!at)
            return finish(make_error_code(error::store_timeout));
        timer.expires_at(*at);
        timer.async_wait([self = shared_from_this()](error_code ec) {
            if (ec || self->done)
                return;
            dir_lock lock(self->dir);
            if (lock.busy)
                return self->schedule();
            self->done = true;
            self->body(lock.ec);
        });
    }
};

std::string file_store::file_name(std::string_view key) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string name(key_file_prefix);
    for (unsigned char c : key) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_') {
            name += static_cast<char>(c);
        } else {
            name += '%';
            name += hex[c >> 4];
            name += hex[c & 15];
        }
    }
    return name;
}

file_store::file_store(executor_type ex, std::filesystem::path directory,
                       file_store_options options)
    : ex_(ex), dir_(std::move(directory)), options_(options) {
    std::filesystem::create_directories(dir_);
}

file_store::~file_store() {
    for (auto& w : polls_)
        if (auto p = w.lock())
            p->finish(asio::error::operation_aborted, {});
    for (auto& w : lock_waits_)
        if (auto l = w.lock())
            l->finish(asio::error::operation_aborted);
}

void file_store::do_set(std::string key, value_type value, done_handler h) {
    std::filesystem::path p;
    auto ec = key_path(dir_, key, p);
    if (!ec && value.size() > options_.max_value_size)
        ec = make_error_code(error::store_value_too_large);
    if (!ec)
        ec = write_file(dir_, p, value);
    detail::post_result(ex_, std::move(h), ec);
}

void file_store::do_get(std::string key, value_handler h) {
    start_poll({std::move(key)}, true, std::move(h), {});
}

void file_store::do_wait(std::vector<std::string> keys, done_handler h) {
    start_poll(std::move(keys), false, {}, std::move(h));
}

void file_store::start_poll(std::vector<std::string> keys, bool want_value, value_handler vh,
                            done_handler dh) {
    auto p = std::make_shared<poll>(ex_, file_store_backoff(options_, timeout()), std::move(vh),
                                    std::move(dh));
    p->want_value = want_value;
    p->max_value_size = options_.max_value_size;
    for (const auto& k : keys) {
        std::filesystem::path path;
        if (auto ec = key_path(dir_, k, path)) {
            p->finish(ec, {});
            return;
        }
        p->paths.push_back(std::move(path));
    }
    if (p->look())
        return;
    auto slot = want_value ? asio::get_associated_cancellation_slot(p->vh)
                           : asio::get_associated_cancellation_slot(p->dh);
    if (slot.is_connected()) {
        p->cancellable = true;
        slot.assign([ex = ex_, w = std::weak_ptr<poll>(p)](asio::cancellation_type t) {
            if (t == asio::cancellation_type::none)
                return;
            asio::post(ex, [w] {
                if (auto p = w.lock())
                    p->finish(asio::error::operation_aborted, {});
            });
        });
    }
    std::erase_if(polls_, [](const std::weak_ptr<poll>& w) { return w.expired(); });
    polls_.push_back(p);
    p->schedule();
}

void file_store::with_lock(std::function<void(error_code)> body) {
    {
        dir_lock lock(dir_);
        if (!lock.busy)
            return body(lock.ec);
    }
    auto w = std::make_shared<lock_wait>(ex_, file_store_backoff(options_, timeout()));
    w->dir = dir_;
    w->body = std::move(body);
    std::erase_if(lock_waits_, [](const std::weak_ptr<lock_wait>& x) { return x.expired(); });
    lock_waits_.push_back(w);
    w->schedule();
}

void file_store::do_add(std::string key, std::int64_t delta, count_handler h) {
    std::filesystem::path p;
    if (auto ec = key_path(dir_, key, p))
        return detail::post_result(ex_, std::move(h), ec, std::int64_t{0});
    auto hp = std::make_shared<count_handler>(std::move(h));
    // The body runs with the lock held, and touches the store only then (an
    // error: the store may be gone).
    with_lock([this, hp, ex = ex_, p = std::move(p), delta](error_code ec) {
        std::int64_t result = 0;
        if (!ec) {
            value_type v;
            ec = read_file(p, options_.max_value_size, v);
            const bool present = !ec;
            if (ec == sys_error(ENOENT))
                ec = {};
            if (!ec) {
                const auto r = rules::add(present ? &v : nullptr, delta);
                if (r.st != rules::status::ok)
                    ec = make_error_code(error::store_protocol_error);
                else
                    result = r.value;
            }
            if (!ec)
                ec = write_file(dir_, p, rules::counter_value(result));
        }
        detail::post_result(ex, std::move(*hp), ec, ec ? std::int64_t{0} : result);
    });
}

void file_store::do_compare_set(std::string key, value_type expected, value_type desired,
                                value_handler h) {
    std::filesystem::path p;
    auto ec = key_path(dir_, key, p);
    if (!ec && desired.size() > options_.max_value_size)
        ec = make_error_code(error::store_value_too_large);
    if (ec)
        return detail::post_result(ex_, std::move(h), ec, value_type{});
    auto hp = std::make_shared<value_handler>(std::move(h));
    with_lock([this, hp, ex = ex_, p = std::move(p), expected = std::move(expected),
               desired = std::move(desired)](error_code ec) mutable {
        value_type result;
        if (!ec) {
            value_type current;
            ec = read_file(p, options_.max_value_size, current);
            const bool present = !ec;
            if (ec == sys_error(ENOENT))
                ec = {};
            if (!ec) {
                switch (rules::compare_set(present ? &current : nullptr, expected)) {
                case rules::cas_outcome::set_desired:
                    ec = write_file(dir_, p, desired);
                    result = std::move(desired);
                    break;
                case rules::cas_outcome::keep_current:
                    result = std::move(current);
                    break;
                case rules::cas_outcome::keep_missing:
                    result = std::move(expected);
                    break;
                }
            }
        }
        if (ec)
            result.clear();
        detail::post_result(ex, std::move(*hp), ec, std::move(result));
    });
}

void file_store::do_check(std::vector<std::string> keys, bool_handler h) {
    bool all = true;
    error_code ec;
    for (const auto& k : keys) {
        std::filesystem::path p;
        if ((ec = key_path(dir_, k, p)))
            break;
        if (!key_exists(p)) {
            all = false;
            break;
        }
    }
    detail::post_result(ex_, std::move(h), ec, !ec && all);
}

void file_store::do_erase(std::string key, bool_handler h) {
    std::filesystem::path p;
    bool erased = false;
    auto ec = key_path(dir_, key, p);
    if (!ec) {
        if (::unlink(p.c_str()) == 0)
            erased = true;
        else if (errno != ENOENT)
            ec = last_error();
    }
    detail::post_result(ex_, std::move(h), ec, erased);
}

void file_store::do_num_keys(count_handler h) {
    std::int64_t n = 0;
    error_code ec;
    if (DIR* d = ::opendir(dir_.c_str())) {
        while (const dirent* e = ::readdir(d))
            if (std::string_view(e->d_name).starts_with(key_file_prefix))
                ++n;
        ::closedir(d);
    } else {
        ec = last_error();
    }
    detail::post_result(ex_, std::move(h), ec, ec ? std::int64_t{0} : n);
}

} // namespace ucx
