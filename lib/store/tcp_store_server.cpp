#include <ucx/tcp_store.hpp>

#include "store/tcp_store_protocol.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <charconv>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace ucx {

namespace asio = boost::asio;
namespace proto = detail::tcp_store_protocol;
using tcp = asio::ip::tcp;

namespace {

class session;

/// A WAIT not answered yet: the keys it still needs.
struct waiter {
    std::weak_ptr<session> s;
    std::vector<std::string> keys;
    std::size_t missing = 0;
};

} // namespace

struct tcp_store_server::impl : std::enable_shared_from_this<tcp_store_server::impl> {
    asio::any_io_executor ex;
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    tcp_store_server_options options;
    std::unordered_map<std::string, proto::buffer> keys;
    std::unordered_map<std::string, std::vector<std::shared_ptr<waiter>>> waiting;
    std::unordered_set<std::shared_ptr<session>> sessions;
    bool closed = false;

    impl(asio::any_io_executor e, tcp_store_server_options o)
        : ex(e), acceptor(e), retry(e), options(o) {}

    void accept();
    void set(const std::string& key, proto::buffer value);
    void wake(const std::string& key);
};

namespace {

/// A client's connection: its queries, parsed as they come, and their
/// replies, written in order.
class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket s, tcp_store_server::impl& server)
        : sock_(std::move(s)), server_(&server),
          parser_(proto::limits{.max_key_size = server.options.max_key_size,
                                .max_value_size = server.options.max_value_size,
                                .max_keys = server.options.max_keys}) {}

    void start() {
        error_code ignored;
        sock_.set_option(tcp::no_delay(true), ignored);
        read();
    }

    /// Closes the connection and forgets the session's waits.
    void close() {
        if (closed_)
            return;
        closed_ = true;
        error_code ignored;
        sock_.close(ignored);
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
    void wait_done(const std::shared_ptr<waiter>& w) {
        std::erase(waits_, w);
        proto::encode_byte_reply(out_, proto::wait_stop_waiting);
        write();
    }

private:
    /// Output beyond this stops the reading of queries until it is written.
    std::size_t high_water() const { return server_->options.max_value_size + 64 * 1024; }

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
            rpos_ += parser_.feed(proto::bytes_view(rbuf_.data() + rpos_, rlen_ - rpos_));
            if (parser_.status() == proto::parse_status::error)
                return close();
            if (parser_.status() == proto::parse_status::done) {
                if (!handle(parser_.get()))
                    return close();
                if (closed_)
                    return;
                parser_.reset();
            }
        }
        write();
        read();
    }

    /// Applies a query; false: the client is to be disconnected.
    bool handle(proto::request& q) {
        auto& s = *server_;
        switch (q.type) {
        case proto::query_type::set:
            s.set(q.keys[0], std::move(q.values[0]));
            return true;
        case proto::query_type::compare_set: {
            auto it = s.keys.find(q.keys[0]);
            if (it == s.keys.end()) {
                if (q.values[0].empty()) {
                    proto::encode_value_reply(out_, q.values[1]);
                    s.set(q.keys[0], std::move(q.values[1]));
                } else {
                    proto::encode_value_reply(out_, q.values[0]);
                }
            } else {
                if (it->second == q.values[0]) {
                    proto::encode_value_reply(out_, q.values[1]);
                    s.set(q.keys[0], std::move(q.values[1]));
                } else {
                    proto::encode_value_reply(out_, it->second);
                }
            }
            return true;
        }
        case proto::query_type::get: {
            auto it = s.keys.find(q.keys[0]);
            if (it == s.keys.end())
                return false;
            proto::encode_value_reply(out_, it->second);
            return true;
        }
        case proto::query_type::add: {
            std::int64_t v = 0;
            auto it = s.keys.find(q.keys[0]);
            if (it != s.keys.end()) {
                const auto* b = reinterpret_cast<const char*>(it->second.data());
                const auto* e = b + it->second.size();
                auto [p, ec] = std::from_chars(b, e, v);
                if (ec != std::errc() || p != e || b == e)
                    return false;
            }
            std::int64_t sum = 0;
            if (__builtin_add_overflow(v, q.number, &sum))
                return false;
            const auto text = std::to_string(sum);
            const auto* p = reinterpret_cast<const std::byte*>(text.data());
            proto::encode_int64_reply(out_, sum);
            s.set(q.keys[0], proto::buffer(p, p + text.size()));
            return true;
        }
        case proto::query_type::check: {
            bool all = true;
            for (const auto& k : q.keys)
                all = all && s.keys.contains(k);
            proto::encode_byte_reply(out_, all ? proto::check_ready : proto::check_not_ready);
            return true;
        }
        case proto::query_type::wait: {
            auto w = std::make_shared<waiter>();
            w->s = weak_from_this();
            for (auto& k : q.keys) {
                if (s.keys.contains(k))
                    continue;
                ++w->missing;
                s.waiting[k].push_back(w);
                w->keys.push_back(std::move(k));
            }
            if (w->missing == 0)
                proto::encode_byte_reply(out_, proto::wait_stop_waiting);
            else
                waits_.push_back(w);
            return true;
        }
        case proto::query_type::get_num_keys:
            proto::encode_int64_reply(out_, static_cast<std::int64_t>(s.keys.size()));
            return true;
        case proto::query_type::delete_key:
            proto::encode_int64_reply(out_, s.keys.erase(q.keys[0]) ? 1 : 0);
            return true;
        case proto::query_type::watch_key:
            return false;
        }
        return false;
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
                              self->write();
                              if (self->rpos_ < self->rlen_)
                                  self->process();
                              else
                                  self->read();
                          });
    }

    tcp::socket sock_;
    tcp_store_server::impl* server_;
    proto::request_parser parser_;
    std::array<std::byte, 16 * 1024> rbuf_{};
    proto::buffer out_;
    proto::buffer pending_;
    std::vector<std::shared_ptr<waiter>> waits_;
    std::size_t rpos_ = 0;
    std::size_t rlen_ = 0;
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
            self->retry.expires_after(std::chrono::milliseconds(10));
            self->retry.async_wait([self](error_code ec) {
                if (!ec && !self->closed)
                    self->accept();
            });
            return;
        }
        auto ss = std::make_shared<session>(std::move(s), *self);
        self->sessions.insert(ss);
        ss->start();
        self->accept();
    });
}

void tcp_store_server::impl::set(const std::string& key, proto::buffer value) {
    keys[key] = std::move(value);
    wake(key);
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
