#include <ucx/tcp_store.hpp>

#include "store/tcp_store_protocol.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <deque>
#include <optional>
#include <variant>

namespace ucx {

namespace asio = boost::asio;
namespace proto = detail::tcp_store_protocol;
using tcp = asio::ip::tcp;

namespace {

using done_handler = asio::any_completion_handler<void(error_code)>;
using value_handler = asio::any_completion_handler<void(error_code, store::value_type)>;
using count_handler = asio::any_completion_handler<void(error_code, std::int64_t)>;
using bool_handler = asio::any_completion_handler<void(error_code, bool)>;
using any_handler =
    std::variant<std::monostate, done_handler, value_handler, count_handler, bool_handler>;

/// How many idle connections of waits a store keeps for later waits.
constexpr std::size_t max_idle_wait_channels = 4;

struct request {
    proto::buffer bytes;
    proto::query_type type = proto::query_type::set;
    proto::reply_kind reply = proto::reply_kind::none;
    any_handler handler;
    /// For a get: WAIT first, then GET of this key on the same connection.
    bool then_get = false;
    std::string get_key;
    enum class state { queued, sent, done } st = state::queued;
    std::optional<asio::steady_timer> timer;
    bool cancellable = false;
};
using request_ptr = std::shared_ptr<request>;

template <class Handler>
void clear_slot(Handler& h) {
    auto slot = asio::get_associated_cancellation_slot(h);
    if (slot.is_connected())
        slot.clear();
}

struct config {
    std::string host;
    std::uint16_t port = 0;
    tcp_store_options options;
};

/// One connection to the server and the queries on it, in order: queued
/// (not written yet), being written, awaiting their replies.
class channel : public std::enable_shared_from_this<channel> {
public:
    channel(store::executor_type ex, std::shared_ptr<const config> cfg)
        : ex_(ex), cfg_(std::move(cfg)), resolver_(ex), sock_(ex), retry_timer_(ex),
          parser_(proto::limits{
              .max_key_size = 0, .max_value_size = cfg_->options.max_value_size, .max_keys = 0}),
          backoff_(cfg_->options.connect_retry_interval) {}

    /// Called once connected, before any query is written.
    std::function<void(channel&)> on_connect;

    bool idle() const noexcept { return queue_.empty() && awaiting_.empty() && !writing_; }

    void submit(request_ptr r, bool front = false) {
        if (closed_)
            return finish(r, asio::error::operation_aborted);
        if (front)
            queue_.push_front(r);
        else
            queue_.push_back(r);
        if (cs_ == conn_state::disconnected)
            connect();
        else
            start_write();
    }

    /// Arms the request's timeout and, with `cancellable` (the gets and
    /// waits, alone on their connections), its cancellation.
    void arm(const request_ptr& r, std::chrono::milliseconds timeout, bool cancellable = false) {
        if (timeout.count() > 0) {
            r->timer.emplace(ex_);
            r->timer->expires_after(timeout);
            r->timer->async_wait(
                [self = shared_from_this(), wr = std::weak_ptr<request>(r)](error_code ec) {
                    auto r = wr.lock();
                    if (!ec && r)
                        self->abort(r, make_error_code(error::store_timeout));
                });
        }
        if (!cancellable)
            return;
        std::visit(
            [&](auto& h) {
                if constexpr (!std::is_same_v<std::decay_t<decltype(h)>, std::monostate>) {
                    auto slot = asio::get_associated_cancellation_slot(h);
                    if (!slot.is_connected())
                        return;
                    r->cancellable = true;
                    slot.assign([ex = ex_, wc = weak_from_this(),
                                 wr = std::weak_ptr<request>(r)](asio::cancellation_type t) {
                        if (t == asio::cancellation_type::none)
                            return;
                        asio::post(ex, [wc, wr] {
                            auto c = wc.lock();
                            auto r = wr.lock();
                            if (c && r)
                                c->abort(r, asio::error::operation_aborted);
                        });
                    });
                }
            },
            r->handler);
    }

    /// Fails `r` with `ec` (its timeout or cancellation). A query already
    /// sent takes its connection down: its reply would come late.
    void abort(const request_ptr& r, error_code ec) {
        if (closed_ || r->st == request::state::done)
            return;
        if (r->st == request::state::queued) {
            std::erase(queue_, r);
            finish(r, ec);
            return;
        }
        finish(r, ec);
        reset_connection(make_error_code(error::store_timeout));
    }

    /// Fails everything with operation_aborted and closes for good.
    void shutdown() {
        if (closed_)
            return;
        closed_ = true;
        ++gen_;
        error_code ignored;
        sock_.close(ignored);
        resolver_.cancel();
        retry_timer_.cancel();
        auto w = std::move(writing_);
        auto a = std::move(awaiting_);
        auto q = std::move(queue_);
        writing_.reset();
        awaiting_.clear();
        queue_.clear();
        if (w)
            finish(w, asio::error::operation_aborted);
        for (auto& r : a)
            finish(r, asio::error::operation_aborted);
        for (auto& r : q)
            finish(r, asio::error::operation_aborted);
    }

private:
    enum class conn_state { disconnected, connecting, connected };

    void connect() {
        if (closed_ || cs_ != conn_state::disconnected)
            return;
        cs_ = conn_state::connecting;
        resolver_.async_resolve(
            cfg_->host, std::to_string(cfg_->port),
            [self = shared_from_this(), g = gen_](error_code ec, tcp::resolver::results_type rs) {
                if (self->closed_ || g != self->gen_)
                    return;
                if (ec)
                    return self->retry();
                asio::async_connect(self->sock_, rs,
                                    [self, g](error_code ec, const tcp::endpoint&) {
                                        if (self->closed_ || g != self->gen_)
                                            return;
                                        if (ec || self->connected_to_itself())
                                            return self->retry();
                                        self->on_connected();
                                    });
            });
    }

    /// A connect to a local port nobody listens on yet can meet itself: the
    /// kernel may give the socket, as its own port, the port it connects to
    /// (both in the ephemeral range), and TCP's simultaneous open then
    /// connects the socket to itself, holding the port the server is about
    /// to bind. Such a connection is closed and tried again.
    bool connected_to_itself() const {
        error_code a, b;
        const tcp::endpoint local = sock_.local_endpoint(a), remote = sock_.remote_endpoint(b);
        return !a && !b && local == remote;
    }

    void retry() {
        error_code ignored;
        sock_.close(ignored);
        if (queue_.empty()) {
            cs_ = conn_state::disconnected;
            return;
        }
        retry_timer_.expires_after(backoff_);
        backoff_ = std::min(backoff_ * 2, cfg_->options.max_connect_retry_interval);
        retry_timer_.async_wait([self = shared_from_this(), g = gen_](error_code ec) {
            if (ec || self->closed_ || g != self->gen_)
                return;
            self->cs_ = conn_state::disconnected;
            if (!self->queue_.empty())
                self->connect();
        });
    }

    void on_connected() {
        cs_ = conn_state::connected;
        backoff_ = cfg_->options.connect_retry_interval;
        error_code ignored;
        sock_.set_option(tcp::no_delay(true), ignored);
        if (on_connect)
            on_connect(*this);
        start_read();
        start_write();
    }

    void start_write() {
        if (closed_ || cs_ != conn_state::connected || writing_ || queue_.empty())
            return;
        auto r = queue_.front();
        queue_.pop_front();
        r->st = request::state::sent;
        writing_ = r;
        if (r->reply != proto::reply_kind::none) {
            awaiting_.push_back(r);
            if (awaiting_.size() == 1)
                parser_.expect(r->reply);
        }
        asio::async_write(sock_, asio::buffer(r->bytes),
                          [self = shared_from_this(), g = gen_, r](error_code ec, std::size_t) {
                              if (self->closed_ || g != self->gen_)
                                  return;
                              self->writing_.reset();
                              if (ec)
                                  return self->reset_connection(ec);
                              if (r->reply == proto::reply_kind::none)
                                  self->finish(r, {});
                              self->start_write();
                          });
    }

    void start_read() {
        sock_.async_read_some(asio::buffer(rbuf_),
                              [self = shared_from_this(), g = gen_](error_code ec, std::size_t n) {
                                  if (self->closed_ || g != self->gen_)
                                      return;
                                  if (ec)
                                      return self->reset_connection(ec);
                                  self->on_bytes(n);
                              });
    }

    void on_bytes(std::size_t n) {
        const auto g = gen_;
        proto::bytes_view data(rbuf_.data(), n);
        while (!data.empty()) {
            if (awaiting_.empty())
                return reset_connection(make_error_code(error::store_protocol_error));
            data = data.subspan(parser_.feed(data));
            if (parser_.status() == proto::parse_status::error)
                return reset_connection(make_error_code(error::store_protocol_error));
            if (parser_.status() != proto::parse_status::done)
                continue;
            auto r = awaiting_.front();
            awaiting_.pop_front();
            on_reply(r);
            if (closed_ || g != gen_)
                return;
            if (!awaiting_.empty())
                parser_.expect(awaiting_.front()->reply);
        }
        start_read();
    }

    void on_reply(const request_ptr& r) {
        if (r->st == request::state::done)
            return;
        if (r->then_get && r->type == proto::query_type::wait) {
            // The key is set: now GET it, on this same connection.
            r->type = proto::query_type::get;
            r->reply = proto::reply_kind::value;
            r->bytes.clear();
            proto::encode_get(r->bytes, r->get_key);
            r->st = request::state::queued;
            queue_.push_front(r);
            start_write();
            return;
        }
        finish(r, {}, &parser_);
    }

    /// The connection failed (or is given up): the queries sent fail with
    /// `ec`; the queued ones go on over a new connection.
    void reset_connection(error_code ec) {
        ++gen_;
        error_code ignored;
        sock_.close(ignored);
        resolver_.cancel();
        retry_timer_.cancel();
        cs_ = conn_state::disconnected;
        auto w = std::move(writing_);
        auto a = std::move(awaiting_);
        writing_.reset();
        awaiting_.clear();
        if (w)
            finish(w, ec);
        for (auto& r : a)
            finish(r, ec);
        if (!queue_.empty())
            connect();
    }

    void finish(const request_ptr& r, error_code ec, proto::reply_parser* p = nullptr) {
        if (r->st == request::state::done)
            return;
        r->st = request::state::done;
        if (r->timer)
            r->timer->cancel();
        auto h = std::move(r->handler);
        r->handler = std::monostate{};
        const auto type = r->type;
        std::visit(
            [&](auto& handler) {
                using H = std::decay_t<decltype(handler)>;
                if constexpr (!std::is_same_v<H, std::monostate>) {
                    if (r->cancellable)
                        clear_slot(handler);
                    if constexpr (std::is_same_v<H, done_handler>) {
                        asio::post(ex_, asio::append(std::move(handler), ec));
                    } else if constexpr (std::is_same_v<H, value_handler>) {
                        store::value_type v;
                        if (p && !ec)
                            v = std::move(p->value());
                        asio::post(ex_, asio::append(std::move(handler), ec, std::move(v)));
                    } else if constexpr (std::is_same_v<H, count_handler>) {
                        const std::int64_t n = (p && !ec) ? p->number() : 0;
                        asio::post(ex_, asio::append(std::move(handler), ec, n));
                    } else {
                        bool b = false;
                        if (p && !ec)
                            b = type == proto::query_type::check ? p->ready() : p->number() == 1;
                        asio::post(ex_, asio::append(std::move(handler), ec, b));
                    }
                }
            },
            h);
    }

    store::executor_type ex_;
    std::shared_ptr<const config> cfg_;
    tcp::resolver resolver_;
    tcp::socket sock_;
    asio::steady_timer retry_timer_;
    proto::reply_parser parser_;
    std::chrono::milliseconds backoff_;
    conn_state cs_ = conn_state::disconnected;
    bool closed_ = false;
    unsigned gen_ = 0;
    std::deque<request_ptr> queue_;
    std::deque<request_ptr> awaiting_;
    request_ptr writing_;
    std::array<std::byte, 16 * 1024> rbuf_{};
};

} // namespace

struct tcp_store::impl {
    store::executor_type ex;
    std::shared_ptr<config> cfg;
    std::shared_ptr<channel> main;
    std::vector<std::shared_ptr<channel>> waits;
    bool join_sent = false;

    std::shared_ptr<channel> make_main() {
        auto c = std::make_shared<channel>(ex, cfg);
        c->on_connect = [this](channel& ch) {
            if (!cfg->options.join_as_worker || join_sent)
                return;
            join_sent = true;
            ch.submit(join_request(), true);
        };
        return c;
    }

    request_ptr join_request() {
        auto r = std::make_shared<request>();
        r->type = proto::query_type::add;
        r->reply = proto::reply_kind::int64;
        proto::encode_add(r->bytes, "init/", 1);
        return r;
    }

    std::shared_ptr<channel> wait_channel() {
        std::shared_ptr<channel> found;
        std::size_t idle = 0;
        std::erase_if(waits, [&](const std::shared_ptr<channel>& c) {
            if (!c->idle())
                return false;
            if (!found) {
                found = c;
                return false;
            }
            if (++idle > max_idle_wait_channels) {
                c->shutdown();
                return true;
            }
            return false;
        });
        if (!found) {
            found = std::make_shared<channel>(ex, cfg);
            waits.push_back(found);
        }
        return found;
    }

    void shutdown() {
        if (main)
            main->shutdown();
        for (auto& c : waits)
            c->shutdown();
        waits.clear();
    }

    std::string key(const std::string& k) const { return cfg->options.key_prefix + k; }
};

tcp_store::tcp_store(executor_type ex, std::string host, std::uint16_t port,
                     tcp_store_options options)
    : ex_(ex), impl_(std::make_shared<impl>()) {
    impl_->ex = ex;
    impl_->cfg = std::make_shared<config>(config{std::move(host), port, std::move(options)});
    impl_->main = impl_->make_main();
}

tcp_store::~tcp_store() {
    impl_->shutdown();
}

const std::string& tcp_store::host() const noexcept {
    return impl_->cfg->host;
}

std::uint16_t tcp_store::port() const noexcept {
    return impl_->cfg->port;
}

void tcp_store::close() {
    impl_->shutdown();
    impl_->main = impl_->make_main();
}

namespace {

template <class Handler>
request_ptr make_request(proto::query_type type, Handler h) {
    auto r = std::make_shared<request>();
    r->type = type;
    r->reply = proto::reply_of(type);
    r->handler = std::move(h);
    return r;
}

} // namespace

void tcp_store::do_connect(done_handler h) {
    request_ptr r;
    if (impl_->cfg->options.join_as_worker && !impl_->join_sent) {
        impl_->join_sent = true;
        r = impl_->join_request();
        r->handler = std::move(h);
    } else {
        // Nothing to send: it completes once written, that is, connected.
        r = make_request(proto::query_type::set, std::move(h));
    }
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_set(std::string key, value_type value, done_handler h) {
    auto r = make_request(proto::query_type::set, std::move(h));
    proto::encode_set(r->bytes, impl_->key(key), value);
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_get(std::string key, value_handler h) {
    auto r = make_request(proto::query_type::wait, std::move(h));
    r->then_get = true;
    r->get_key = impl_->key(key);
    const std::string keys[] = {r->get_key};
    proto::encode_wait(r->bytes, keys);
    auto c = impl_->wait_channel();
    c->arm(r, timeout(), true);
    c->submit(r);
}

void tcp_store::do_add(std::string key, std::int64_t delta, count_handler h) {
    auto r = make_request(proto::query_type::add, std::move(h));
    proto::encode_add(r->bytes, impl_->key(key), delta);
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_compare_set(std::string key, value_type expected, value_type desired,
                               value_handler h) {
    auto r = make_request(proto::query_type::compare_set, std::move(h));
    proto::encode_compare_set(r->bytes, impl_->key(key), expected, desired);
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_check(std::vector<std::string> keys, bool_handler h) {
    auto r = make_request(proto::query_type::check, std::move(h));
    for (auto& k : keys)
        k = impl_->key(k);
    proto::encode_check(r->bytes, keys);
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_wait(std::vector<std::string> keys, done_handler h) {
    auto r = make_request(proto::query_type::wait, std::move(h));
    for (auto& k : keys)
        k = impl_->key(k);
    proto::encode_wait(r->bytes, keys);
    auto c = impl_->wait_channel();
    c->arm(r, timeout(), true);
    c->submit(r);
}

void tcp_store::do_erase(std::string key, bool_handler h) {
    auto r = make_request(proto::query_type::delete_key, std::move(h));
    proto::encode_delete_key(r->bytes, impl_->key(key));
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

void tcp_store::do_num_keys(count_handler h) {
    auto r = make_request(proto::query_type::get_num_keys, std::move(h));
    proto::encode_get_num_keys(r->bytes);
    impl_->main->arm(r, timeout());
    impl_->main->submit(r);
}

} // namespace ucx
