#include <ucx/file_store.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <optional>
#include <random>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ucx {

namespace asio = boost::asio;

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

/// Reads the whole file; ENOENT when there is none.
error_code read_file(const std::filesystem::path& p, store::value_type& out) {
    fd_guard f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0)
        return last_error();
    out.clear();
    std::byte buf[16 * 1024];
    for (;;) {
        const auto n = ::read(f.fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return last_error();
        }
        if (n == 0)
            return {};
        out.insert(out.end(), buf, buf + n);
    }
}

/// Writes `value` to a temporary file of `dir` and renames it to `p`.
error_code write_file(const std::filesystem::path& dir, const std::filesystem::path& p,
                      const store::value_type& value) {
    static std::atomic<unsigned> counter{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
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

/// The directory's exclusive lock, held for its scope.
struct dir_lock {
    fd_guard f;
    error_code ec;
    explicit dir_lock(const std::filesystem::path& dir) {
        const auto p = dir / lock_file_name;
        f.fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (f.fd < 0) {
            ec = last_error();
            return;
        }
        while (::flock(f.fd, LOCK_EX) != 0) {
            if (errno != EINTR) {
                ec = last_error();
                return;
            }
        }
    }
};

bool key_exists(const std::filesystem::path& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

template <class Handler, class... Args>
void complete(const store::executor_type& ex, Handler h, Args... args) {
    asio::post(ex, asio::append(std::move(h), std::move(args)...));
}

} // namespace

/// A get or wait that looks for its keys until they are there.
struct file_store::poll : std::enable_shared_from_this<file_store::poll> {
    // (Boost 1.81's any_completion_handler has no working move assignment:
    // the handlers are moved in by construction.)
    poll(executor_type e, value_handler v, done_handler d)
        : ex(e), timer(e), vh(std::move(v)), dh(std::move(d)) {}

    executor_type ex;
    asio::steady_timer timer;
    std::vector<std::filesystem::path> paths;
    bool want_value = false;
    value_handler vh;
    done_handler dh;
    std::optional<std::chrono::steady_clock::time_point> deadline;
    std::chrono::milliseconds interval{1};
    std::chrono::milliseconds max_interval{50};
    bool done = false;
    bool cancellable = false;

    /// Looks once; true when it completed.
    bool look() {
        if (want_value) {
            store::value_type v;
            auto ec = read_file(paths[0], v);
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
        auto now = std::chrono::steady_clock::now();
        if (deadline && now >= *deadline)
            return finish(make_error_code(error::store_timeout), {});
        auto at = now + interval;
        if (deadline && at > *deadline)
            at = *deadline;
        interval = std::min(interval + interval / 2 + std::chrono::milliseconds(1), max_interval);
        timer.expires_at(at);
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
            complete(ex, std::move(vh), ec, std::move(v));
        } else {
            if (cancellable)
                asio::get_associated_cancellation_slot(dh).clear();
            complete(ex, std::move(dh), ec);
        }
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
}

void file_store::do_set(std::string key, value_type value, done_handler h) {
    std::filesystem::path p;
    auto ec = key_path(dir_, key, p);
    if (!ec)
        ec = write_file(dir_, p, value);
    complete(ex_, std::move(h), ec);
}

void file_store::do_get(std::string key, value_handler h) {
    start_poll({std::move(key)}, true, std::move(h), {});
}

void file_store::do_wait(std::vector<std::string> keys, done_handler h) {
    start_poll(std::move(keys), false, {}, std::move(h));
}

void file_store::start_poll(std::vector<std::string> keys, bool want_value, value_handler vh,
                            done_handler dh) {
    auto p = std::make_shared<poll>(ex_, std::move(vh), std::move(dh));
    p->want_value = want_value;
    p->interval =
        options_.poll_interval.count() > 0 ? options_.poll_interval : std::chrono::milliseconds(1);
    p->max_interval = std::max(options_.max_poll_interval, p->interval);
    if (timeout().count() > 0)
        p->deadline = std::chrono::steady_clock::now() + timeout();
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

void file_store::do_add(std::string key, std::int64_t delta, count_handler h) {
    std::filesystem::path p;
    std::int64_t result = 0;
    auto ec = key_path(dir_, key, p);
    if (!ec) {
        dir_lock lock(dir_);
        ec = lock.ec;
        value_type v;
        if (!ec) {
            ec = read_file(p, v);
            if (ec == sys_error(ENOENT)) {
                ec = {};
                v.clear();
            }
        }
        if (!ec) {
            std::int64_t old = 0;
            if (!v.empty()) {
                const auto* b = reinterpret_cast<const char*>(v.data());
                const auto* e = b + v.size();
                auto [ptr, perr] = std::from_chars(b, e, old);
                if (perr != std::errc() || ptr != e)
                    ec = make_error_code(error::store_protocol_error);
            }
            if (!ec && __builtin_add_overflow(old, delta, &result))
                ec = make_error_code(error::store_protocol_error);
        }
        if (!ec) {
            const auto text = std::to_string(result);
            const auto* b = reinterpret_cast<const std::byte*>(text.data());
            ec = write_file(dir_, p, value_type(b, b + text.size()));
        }
    }
    complete(ex_, std::move(h), ec, ec ? std::int64_t{0} : result);
}

void file_store::do_compare_set(std::string key, value_type expected, value_type desired,
                                value_handler h) {
    std::filesystem::path p;
    value_type result;
    auto ec = key_path(dir_, key, p);
    if (!ec) {
        dir_lock lock(dir_);
        ec = lock.ec;
        value_type current;
        bool present = false;
        if (!ec) {
            ec = read_file(p, current);
            present = !ec;
            if (ec == sys_error(ENOENT))
                ec = {};
        }
        if (!ec) {
            if ((!present && expected.empty()) || (present && current == expected)) {
                ec = write_file(dir_, p, desired);
                result = std::move(desired);
            } else {
                result = present ? std::move(current) : std::move(expected);
            }
        }
    }
    if (ec)
        result.clear();
    complete(ex_, std::move(h), ec, std::move(result));
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
    complete(ex_, std::move(h), ec, !ec && all);
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
    complete(ex_, std::move(h), ec, erased);
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
    complete(ex_, std::move(h), ec, ec ? std::int64_t{0} : n);
}

} // namespace ucx
