// ucx::pmi_store: rounds (store/round_store.hpp) of PMI-1 puts, a barrier and
// gets, spoken by pmi_client (store/pmi_protocol.hpp) over the launcher's
// socket with blocking, bounded calls.
#include <ucx/pmi_store.hpp>

#include "store/pmi_protocol.hpp"
#include "store/round_store.hpp"

#include <boost/system/system_error.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ucx {

namespace {

using steady = std::chrono::steady_clock;

/// The bound of the start and of the goodbye.
constexpr std::chrono::seconds start_bound{30};
constexpr std::chrono::seconds goodbye_bound{5};

/// What a conversation ended with.
struct outcome {
    error_code ec;
    std::string why;
};

/// The socket to the launcher's PMI-1 server, and the client's state.
class pmi_service final : public detail::round_service {
public:
    pmi_service(int fd, std::uint32_t rank, std::uint32_t size) : fd_(fd), client_(rank, size) {}
    pmi_service(const pmi_service&) = delete;
    pmi_service& operator=(const pmi_service&) = delete;
    ~pmi_service() override {
        if (!started_ || broken_)
            return;
        client_.start_finalize();
        (void)converse(steady::now() + goodbye_bound);
    }

    outcome start() {
        client_.start();
        outcome o = converse(steady::now() + start_bound);
        started_ = !o.ec;
        return o;
    }

    const detail::pmi_client& client() const { return client_; }

    void run_round(std::uint64_t n, const std::vector<std::byte>& mine, store::duration timeout,
                   detail::round_result& r) override {
        if (broken_) {
            r.ec = make_error_code(error::pmi_failed);
            r.failed_call = "an earlier round failed";
            return;
        }
        client_.start_round(n, mine);
        const steady::time_point deadline =
            timeout.count() > 0 ? steady::now() + timeout : steady::time_point::max();
        outcome o = converse(deadline);
        if (o.ec) {
            r.ec = o.ec;
            r.failed_call = std::move(o.why);
            return;
        }
        r.keys = std::move(client_.keys());
    }

private:
    /// Sends the client's commands and feeds it the replies until its queue
    /// is done, failed, or the deadline passed (none: time_point::max()). A failure leaves the
    /// conversation broken: a reply may be half read.
    outcome converse(steady::time_point deadline) {
        while (!client_.command().empty()) {
            const std::string command = client_.command();
            if (outcome o = send_all(command, deadline); o.ec)
                return broken(std::move(o));
            std::string line;
            if (outcome o = read_line(line, deadline); o.ec)
                return broken(std::move(o));
            if (!client_.on_reply(line))
                return broken({make_error_code(error::pmi_failed), client_.why()});
        }
        return {};
    }

    outcome broken(outcome o) {
        broken_ = true;
        return o;
    }

    /// Waits until `fd_` is ready for `events`, within the deadline.
    outcome wait(short events, steady::time_point deadline) {
        for (;;) {
            int ms = -1; // no deadline
            if (deadline != steady::time_point::max()) {
                const auto left =
                    std::chrono::ceil<std::chrono::milliseconds>(deadline - steady::now());
                if (left.count() <= 0)
                    return {make_error_code(error::store_timeout),
                            "no answer from the PMI server in time (a process of the job did not "
                            "reach the barrier?)"};
                ms = static_cast<int>(std::min<long long>(left.count(), 1 << 30));
            }
            pollfd p{fd_, events, 0};
            const int n = ::poll(&p, 1, ms);
            if (n > 0)
                return {};
            if (n < 0 && errno != EINTR)
                return {make_error_code(error::pmi_failed),
                        std::string("poll on the PMI socket: ") + std::strerror(errno)};
        }
    }

    outcome send_all(const std::string& text, steady::time_point deadline) {
        std::size_t at = 0;
        while (at < text.size()) {
            if (outcome o = wait(POLLOUT, deadline); o.ec)
                return o;
            ssize_t n = ::send(fd_, text.data() + at, text.size() - at, MSG_NOSIGNAL);
            if (n < 0 && errno == ENOTSOCK)
                n = ::write(fd_, text.data() + at, text.size() - at);
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                    continue;
                return {make_error_code(error::pmi_failed),
                        std::string("writing to the PMI server: ") + std::strerror(errno)};
            }
            at += static_cast<std::size_t>(n);
        }
        return {};
    }

    outcome read_line(std::string& line, steady::time_point deadline) {
        for (;;) {
            if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
                line = buffer_.substr(0, nl);
                buffer_.erase(0, nl + 1);
                return {};
            }
            if (buffer_.size() > detail::pmi_max_line)
                return {make_error_code(error::pmi_failed),
                        "the PMI server sent a line longer than " +
                            std::to_string(detail::pmi_max_line) + " bytes"};
            if (outcome o = wait(POLLIN, deadline); o.ec)
                return o;
            char chunk[4096];
            const ssize_t n = ::read(fd_, chunk, sizeof chunk);
            if (n == 0)
                return {make_error_code(error::pmi_failed),
                        "the PMI server closed the connection (the launcher went away)"};
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                    continue;
                return {make_error_code(error::pmi_failed),
                        std::string("reading from the PMI server: ") + std::strerror(errno)};
            }
            buffer_.append(chunk, static_cast<std::size_t>(n));
        }
    }

    int fd_;
    detail::pmi_client client_;
    std::string buffer_; // read past the last line
    bool started_ = false;
    bool broken_ = false;
};

std::optional<std::uint32_t> env_number(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v)
        return std::nullopt;
    std::uint32_t n = 0;
    const char* end = v + std::strlen(v);
    const auto [p, ec] = std::from_chars(v, end, n);
    if (ec != std::errc() || p != end)
        return std::nullopt;
    return n;
}

} // namespace

struct pmi_store::impl {
    std::uint32_t rank = 0;
    std::uint32_t size = 0;
    std::string kvsname;
    std::unique_ptr<detail::round_store> rounds;
};

pmi_store::pmi_store(executor_type ex) : ex_(ex) {
    error_code ec;
    std::string why;
    pmi_store s(ex, ec, &why);
    if (ec)
        throw boost::system::system_error(ec, "ucx::pmi_store: " + why);
    impl_ = std::move(s.impl_);
}

pmi_store::pmi_store(executor_type ex, error_code& ec, std::string* why)
    : ex_(ex), impl_(std::make_shared<impl>()) {
    const auto fd = env_number("PMI_FD");
    const auto rank = env_number("PMI_RANK");
    const auto size = env_number("PMI_SIZE");
    if (!fd || !rank || !size || *size == 0 || *rank >= *size ||
        *fd > static_cast<std::uint32_t>(INT32_MAX)) {
        ec = make_error_code(error::pmi_failed);
        if (why)
            *why = "PMI_FD, PMI_RANK and PMI_SIZE do not name a PMI-1 server (MPICH's "
                   "mpiexec.hydra sets them)";
        impl_->rounds = std::make_unique<detail::round_store>(ex, ec);
        return;
    }
    pmi_store s(ex, static_cast<int>(*fd), *rank, *size, ec, why);
    impl_ = std::move(s.impl_);
}

pmi_store::pmi_store(executor_type ex, int fd, std::uint32_t rank, std::uint32_t size,
                     error_code& ec, std::string* why)
    : ex_(ex), impl_(std::make_shared<impl>()) {
    ec = {};
    if (size == 0 || rank >= size || fd < 0) {
        ec = make_error_code(error::pmi_failed);
        if (why)
            *why = "rank " + std::to_string(rank) + " of " + std::to_string(size) + " on fd " +
                   std::to_string(fd) + " is not a process of a job";
        impl_->rounds = std::make_unique<detail::round_store>(ex, ec);
        return;
    }
    auto service = std::make_unique<pmi_service>(fd, rank, size);
    if (outcome o = service->start(); o.ec) {
        ec = o.ec;
        if (why)
            *why = o.why;
        // Unusable: every operation fails with pmi_failed.
        impl_->rounds =
            std::make_unique<detail::round_store>(ex, make_error_code(error::pmi_failed));
        return;
    }
    impl_->rank = rank;
    impl_->size = size;
    impl_->kvsname = service->client().kvsname();
    // A store's key travels inside a round's value: any length.
    impl_->rounds =
        std::make_unique<detail::round_store>(ex, std::move(service), std::string().max_size());
}

pmi_store::~pmi_store() = default;

std::uint32_t pmi_store::rank() const noexcept {
    return impl_->rank;
}
std::uint32_t pmi_store::size() const noexcept {
    return impl_->size;
}
const std::string& pmi_store::kvsname() const noexcept {
    return impl_->kvsname;
}
std::uint64_t pmi_store::rounds() const noexcept {
    return impl_->rounds->rounds();
}

void pmi_store::do_set(std::string key, value_type value, done_handler h) {
    impl_->rounds->set(std::move(key), std::move(value), std::move(h));
}

void pmi_store::do_get(std::string key, value_handler h) {
    impl_->rounds->get(std::move(key), timeout(), std::move(h));
}

void pmi_store::do_wait(std::vector<std::string> keys, done_handler h) {
    impl_->rounds->wait(std::move(keys), timeout(), std::move(h));
}

void pmi_store::do_check(std::vector<std::string> keys, bool_handler h) {
    impl_->rounds->check(keys, std::move(h));
}

void pmi_store::do_add(std::string, std::int64_t, count_handler h) {
    impl_->rounds->add(std::move(h));
}

void pmi_store::do_compare_set(std::string, value_type, value_type, value_handler h) {
    impl_->rounds->compare_set(std::move(h));
}

void pmi_store::do_erase(std::string, bool_handler h) {
    impl_->rounds->erase(std::move(h));
}

void pmi_store::do_num_keys(count_handler h) {
    impl_->rounds->num_keys(std::move(h));
}

} // namespace ucx
