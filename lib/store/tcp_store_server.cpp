// ucx::tcp_store_server: torch.distributed's TCPStore protocol over Asio
// sockets. The keys and the answer to each query are the sans-io rules
// (store_rules, tcp_store_protocol::answer); this file is the I/O: accepting
// within the connection cap, reading and writing with back-pressure, the
// waits, and the deadlines of idle connections and of requests.
#include <ucx/log.hpp>
#include <ucx/tcp_store.hpp>

#include "store/store_rules.hpp"
#include "store/tcp_store_protocol.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ucx {

namespace asio = boost::asio;
namespace proto = detail::tcp_store_protocol;
namespace rules = detail::store_rules;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

class session;

/// A WAIT not answered yet: the keys it still needs.
struct key_waiter {
    std::weak_ptr<session> s;
    std::vector<std::string> keys;
    std::size_t missing = 0;
    /// What it counts against its connection's bound.
    std::size_t cost = 0;
};

/// What a pending WAIT's key counts beyond its bytes (the bookkeeping).
constexpr std::size_t wait_key_overhead = 32;

std::string peer_name(const tcp::socket& s) {
    error_code ec;
    const auto ep = s.remote_endpoint(ec);
    if (ec)
        return "a client";
    return ep.address().to_string() + ":" + std::to_string(ep.port());
}

/// Logs a line of the server; a failing sink does not stop the server.
void log_line(log::severity sev, const std::string& what) noexcept {
    if (!log::enabled(sev))
        return;
    try {
        log::write(sev, "tcp_store_server: " + what);
    } catch (...) {
    }
}

} // namespace

struct tcp_store_server::impl : std::enable_shared_from_this<tcp_store_server::impl> {
    asio::any_io_executor ex;
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    tcp_store_server_options options;
    rules::key_map keys;
    std::unordered_map<std::string, std::vector<std::shared_ptr<key_waiter>>> waiting;
    std::unordered_set<std::shared_ptr<session>> sessions;
    /// Accept failures in a row (logged at the first and when they end).
    std::size_t accept_failures = 0;
    bool closed = false;

    impl(asio::any_io_executor e, tcp_store_server_options o)
        : ex(e), acceptor(e), retry(e), options(o) {}

    void accept();
    void wake(const std::string& key);
};

namespace {

/// A client's connection: its queries, parsed as they come, and their
/// replies, written in order; the deadlines of its requests and of its
/// idleness.
class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket s, tcp_store_server::impl& server)
        : sock_(std::move(s)), server_(&server), timer_(server.ex), name_(peer_name(sock_)),
          parser_(proto::limits{.max_key_size = server.options.max_key_size,
                                .max_value_size = server.options.max_value_size,
                                .max_keys = server.options.max_keys,
                                .max_request_size = server.options.max_request_size}),
          last_activity_(clock_type::now()) {}

    void start() {
        error_code ignored;
        sock_.set_option(tcp::no_delay(true), ignored);
        read();
        update_timer();
    }

    /// Closes the connection and forgets the session's waits.
    void close() {
        if (closed_)
            return;
        closed_ = true;
        error_code ignored;
        sock_.close(ignored);
        timer_.cancel();
        for (auto& w : waits_) {
            for (const auto& k : w->keys) {
                auto it = server_->waiting.find(k);
                if (it == server_->waiting.end())
                    continue;
                std::erase(it->second, w);
                if (it->second.empty())
                    server_->waiting.erase(it);
            }
        }
        waits_.clear();
        server_->sessions.erase(shared_from_this());
    }

    /// The keys of `w` are all set.
    void wait_done(const std::shared_ptr<key_waiter>& w) {
        std::erase(waits_, w);
        wait_cost_ -= w->cost;
        // The answer counts as activity: the idle time starts again now.
        last_activity_ = clock_type::now();
        proto::encode_byte_reply(out_, proto::wait_stop_waiting);
        write();
        update_timer();
    }

private:
    /// Output beyond this stops the reading of queries until it is written.
    std::size_t high_water() const { return server_->options.max_value_size + 64 * 1024; }

    /// Drops the client, saying why.
    void drop(const std::string& why) {
        log_line(log::severity::warning, "client " + name_ + " disconnected: " + why);
        close();
    }

    void read() {
        if (closed_ || reading_ || rpos_ < rlen_ || out_.size() + pending_.size() > high_water())
            return;
        reading_ = true;
        sock_.async_read_some(asio::buffer(rbuf_),
                              [self = shared_from_this()](error_code ec, std::size_t n) {
                                  self->reading_ = false;
                                  if (self->closed_)
                                      return;
                                  if (ec)
                                      return self->close();
                                  self->last_activity_ = clock_type::now();
                                  self->on_bytes(n);
                              });
    }

    void on_bytes(std::size_t n) {
        rpos_ = 0;
        rlen_ = n;
        process();
    }

    /// Applies the queries read, pausing while too many replies wait to be
    /// written.
    void process() {
        while (rpos_ < rlen_) {
            if (out_.size() + pending_.size() > high_water())
                return write();
            if (parser_.size() == 0)
                request_start_ = clock_type::now();
            rpos_ += parser_.feed(proto::bytes_view(rbuf_.data() + rpos_, rlen_ - rpos_));
            if (parser_.status() == proto::parse_status::error)
                return drop("a query that is not the protocol or over the server's bounds");
            if (parser_.status() == proto::parse_status::done) {
                handle(parser_.get());
                if (closed_)
                    return;
                parser_.reset();
            }
        }
        write();
        read();
        update_timer();
    }

    /// Applies a query (or drops the client).
    void handle(proto::request& q) {
        auto& s = *server_;
        const auto r = proto::answer(s.keys, q, out_);
        switch (r.status) {
        case proto::answer_status::replied:
            if (r.key_set)
                s.wake(q.keys[0]);
            return;
        case proto::answer_status::wait:
            return add_wait(q);
        case proto::answer_status::missing_key:
        case proto::answer_status::not_a_counter:
        case proto::answer_status::overflow:
        case proto::answer_status::unsupported:
            break;
        }
        drop(proto::refusal_reason(r.status));
    }

    void add_wait(proto::request& q) {
        auto& s = *server_;
        auto w = std::make_shared<key_waiter>();
        w->s = weak_from_this();
        for (auto& k : q.keys) {
            if (s.keys.find(k))
                continue;
            w->cost += k.size() + wait_key_overhead;
            w->keys.push_back(std::move(k));
        }
        if (w->cost > server_->options.max_request_size -
                          std::min(wait_cost_, server_->options.max_request_size))
            return drop("its pending WAITs hold more keys than max_request_size");
        // A WAIT may name a key twice: it is due when each is set.
        for (const auto& k : w->keys) {
            auto& list = s.waiting[k];
            if (std::find(list.begin(), list.end(), w) != list.end())
                continue;
            list.push_back(w);
            ++w->missing;
        }
        wait_cost_ += w->cost;
        waits_.push_back(std::move(w));
    }

    void write() {
        if (closed_ || writing_ || out_.empty())
            return;
        writing_ = true;
        pending_.swap(out_);
        out_.clear();
        asio::async_write(sock_, asio::buffer(pending_),
                          [self = shared_from_this()](error_code ec, std::size_t) {
                              self->writing_ = false;
                              self->pending_.clear();
                              if (self->closed_)
                                  return;
                              if (ec)
                                  return self->close();
                              self->last_activity_ = clock_type::now();
                              self->write();
                              if (self->rpos_ < self->rlen_)
                                  self->process();
                              else
                                  self->read();
                              self->update_timer();
                          });
    }

    // ---- deadlines ----

    /// The next deadline of the connection: the end of the current request's
    /// time, or of its idleness (no byte either way, no WAIT pending).
    std::optional<clock_type::time_point> next_deadline() const {
        const auto& o = server_->options;
        std::optional<clock_type::time_point> at;
        if (o.request_timeout.count() > 0 && parser_.size() > 0)
            at = request_start_ + o.request_timeout;
        if (o.idle_timeout.count() > 0 && waits_.empty()) {
            const auto idle_end = last_activity_ + o.idle_timeout;
            if (!at || idle_end < *at)
                at = idle_end;
        }
        return at;
    }

    /// Arms the timer for the next deadline, unless it fires earlier anyway
    /// (it then looks again).
    void update_timer() {
        if (closed_)
            return;
        const auto at = next_deadline();
        if (!at || (timer_armed_ && timer_.expiry() <= *at))
            return;
        timer_armed_ = true;
        timer_.expires_at(*at);
        timer_.async_wait([self = shared_from_this(), gen = ++timer_gen_](error_code ec) {
            if (gen != self->timer_gen_ || self->closed_)
                return;
            self->timer_armed_ = false;
            if (ec)
                return;
            self->on_timer();
        });
    }

    void on_timer() {
        const auto& o = server_->options;
        const auto now = clock_type::now();
        if (o.request_timeout.count() > 0 && parser_.size() > 0 &&
            now >= request_start_ + o.request_timeout)
            return drop("a request not whole within request_timeout (" +
                        std::to_string(o.request_timeout.count()) + " ms)");
        if (o.idle_timeout.count() > 0 && waits_.empty() &&
            now >= last_activity_ + o.idle_timeout) {
            log_line(log::severity::info, "client " + name_ +
                                              " disconnected: idle for idle_timeout (" +
                                              std::to_string(o.idle_timeout.count()) + " ms)");
            return close();
        }
        update_timer();
    }

    tcp::socket sock_;
    tcp_store_server::impl* server_;
    asio::steady_timer timer_;
    std::string name_;
    proto::request_parser parser_;
    std::array<std::byte, 16 * 1024> rbuf_{};
    proto::buffer out_;
    proto::buffer pending_;
    std::vector<std::shared_ptr<key_waiter>> waits_;
    std::size_t wait_cost_ = 0;
    clock_type::time_point last_activity_;
    clock_type::time_point request_start_;
    std::size_t rpos_ = 0;
    std::size_t rlen_ = 0;
    std::uint64_t timer_gen_ = 0;
    bool timer_armed_ = false;
    bool reading_ = false;
    bool writing_ = false;
    bool closed_ = false;
};

} // namespace

void tcp_store_server::impl::accept() {
    acceptor.async_accept([self = shared_from_this()](error_code ec, tcp::socket s) {
        if (self->closed)
            return;
        if (ec) {
            // Out of descriptors, for instance: try again a little later.
            if (self->accept_failures++ == 0)
                log_line(log::severity::warning,
                         "accepting failed (trying again every 10 ms): " + ec.message());
            self->retry.expires_after(std::chrono::milliseconds(10));
            self->retry.async_wait([self](error_code ec) {
                if (!ec && !self->closed)
                    self->accept();
            });
            return;
        }
        if (self->accept_failures > 0) {
            log_line(log::severity::warning, "accepting again after " +
                                                 std::to_string(self->accept_failures) +
                                                 " failed attempts");
            self->accept_failures = 0;
        }
        if (self->sessions.size() >= self->options.max_connections) {
            log_line(log::severity::warning, "connection of " + peer_name(s) + " refused: " +
                                                 std::to_string(self->sessions.size()) +
                                                 " clients connected, max_connections reached");
            error_code ignored;
            s.close(ignored);
        } else {
            auto ss = std::make_shared<session>(std::move(s), *self);
            self->sessions.insert(ss);
            ss->start();
        }
        self->accept();
    });
}

void tcp_store_server::impl::wake(const std::string& key) {
    auto it = waiting.find(key);
    if (it == waiting.end())
        return;
    auto ws = std::move(it->second);
    waiting.erase(it);
    for (auto& w : ws) {
        if (--w->missing > 0)
            continue;
        if (auto s = w->s.lock())
            s->wait_done(w);
    }
}

tcp_store_server::tcp_store_server(executor_type ex, const tcp::endpoint& bind,
                                   tcp_store_server_options options)
    : ex_(ex), impl_(std::make_shared<impl>(ex, options)) {
    auto& a = impl_->acceptor;
    a.open(bind.protocol());
    a.set_option(tcp::acceptor::reuse_address(true));
    a.bind(bind);
    a.listen(options.backlog);
    impl_->accept();
}

tcp_store_server::~tcp_store_server() {
    close();
}

tcp::endpoint tcp_store_server::local_endpoint() const {
    return impl_->acceptor.local_endpoint();
}

std::size_t tcp_store_server::num_keys() const noexcept {
    return impl_->keys.size();
}

std::size_t tcp_store_server::num_connections() const noexcept {
    return impl_->sessions.size();
}

void tcp_store_server::close() {
    if (impl_->closed)
        return;
    impl_->closed = true;
    error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->retry.cancel();
    auto sessions = impl_->sessions;
    for (auto& s : sessions)
        s->close();
    impl_->sessions.clear();
    impl_->waiting.clear();
}

} // namespace ucx
