// The Prometheus exporter: a small HTTP server (Beast) on the application's
// executor that answers the workers' metrics in the text format.
#include <ucx/context.hpp>
#include <ucx/log.hpp>
#include <ucx/metrics_exporter.hpp>

#include "connection/endpoint_impl.hpp"
#include "connection/listener_impl.hpp"
#include "engine/worker_impl.hpp"
#include "group/group_impl.hpp"
#include "metrics/exposition.hpp"
#include "util/json.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <unistd.h>

namespace ucx {
namespace detail {

namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

constexpr std::string_view exposition_type = "text/plain; version=0.0.4; charset=utf-8";

/// `in` with its `%XX` escapes decoded (a path segment, RFC 3986); false for
/// a `%` not followed by two hexadecimal digits.
bool percent_decode(std::string_view in, std::string& out) {
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '%') {
            out += in[i];
            continue;
        }
        const int hi = i + 2 < in.size() ? hex_digit(in[i + 1]) : -1;
        const int lo = i + 2 < in.size() ? hex_digit(in[i + 2]) : -1;
        if (hi < 0 || lo < 0)
            return false;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return true;
}

} // namespace

/// Something served, under its name, while it lives.
template <class Impl>
struct exported {
    std::string name;
    std::weak_ptr<Impl> impl;
};

class metrics_exporter_impl : public std::enable_shared_from_this<metrics_exporter_impl> {
public:
    metrics_exporter_impl(const boost::asio::any_io_executor& ex, const tcp::endpoint& at,
                          const metrics_exporter_options& options)
        : ex_(ex), acceptor_(ex), retry_(ex), options_(options) {
        for (const auto& [name, value] : options.labels)
            if (!valid_label_name(name) || reserved_label_name(name))
                throw boost::system::system_error(boost::asio::error::invalid_argument,
                                                  "ucx::metrics_exporter: label name \"" + name +
                                                      "\"");
        labels_ = render_labels(options.labels);
        acceptor_.open(at.protocol());
        acceptor_.set_option(tcp::acceptor::reuse_address(true));
        acceptor_.bind(at);
        acceptor_.listen();
        local_ = acceptor_.local_endpoint();
    }

    void start() {
        boost::asio::dispatch(ex_, [self = shared_from_this()] { self->accept(); });
    }

    /// Serves `p` as `name` in `list` (of `what`s): names are unique among
    /// the live ones; the expired ones are dropped.
    template <class Impl>
    void add(std::vector<exported<Impl>>& list, std::weak_ptr<Impl> p, std::string name,
             const char* what) {
        std::lock_guard lock(mu_);
        for (const exported<Impl>& s : list)
            if (s.name == name && !s.impl.expired())
                throw boost::system::system_error(boost::asio::error::invalid_argument,
                                                  std::string("ucx::metrics_exporter::add: ") +
                                                      what + " \"" + name + "\" is there already");
        std::erase_if(list, [](const exported<Impl>& s) { return s.impl.expired(); });
        list.push_back({std::move(name), std::move(p)});
    }
    void add_worker(std::weak_ptr<worker_impl> w, std::string name) {
        add(workers_, std::move(w), std::move(name), "worker");
    }
    void add_group(std::weak_ptr<group_impl> g, std::string name) {
        add(groups_, std::move(g), std::move(name), "group");
    }
    void add_listener(std::weak_ptr<listener_impl> l, std::string name) {
        add(listeners_, std::move(l), std::move(name), "listener");
    }
    void add_store(std::weak_ptr<const store_counters> s, std::string name) {
        add(stores_, std::move(s), std::move(name), "store");
    }

    /// The live group added as `name`, or null.
    std::shared_ptr<group_impl> find_group(std::string_view name) {
        std::lock_guard lock(mu_);
        for (const exported<group_impl>& s : groups_)
            if (s.name == name)
                if (auto g = s.impl.lock())
                    return g;
        return nullptr;
    }

    /// The live workers added, with their names, in the order added.
    std::vector<std::pair<std::string, std::shared_ptr<worker_impl>>> live_workers() {
        std::vector<std::pair<std::string, std::shared_ptr<worker_impl>>> out;
        std::lock_guard lock(mu_);
        for (const exported<worker_impl>& s : workers_)
            if (auto w = s.impl.lock())
                out.emplace_back(s.name, std::move(w));
        return out;
    }

    /// `{"groups":["name",...]}`: the live groups' names, as JSON.
    std::string group_names() {
        std::string out = "{\"groups\":[";
        std::lock_guard lock(mu_);
        bool first = true;
        for (const exported<group_impl>& s : groups_) {
            if (s.impl.expired())
                continue;
            if (!first)
                out += ',';
            first = false;
            append_json_string(out, s.name);
        }
        out += "]}\n";
        return out;
    }

    /// The labels of the series of something served as `name` (`key`: the
    /// label naming it): the options' labels, then `key="name"`.
    std::string labelled(std::string_view key, const std::string& name) const {
        const std::pair<std::string, std::string> own[] = {{std::string(key), name}};
        return labels_.empty() ? render_labels(own) : labels_ + ',' + render_labels(own);
    }

    /// `exposition()` and the series of the endpoints gathered from the
    /// workers' executors (`GET /metrics`); `unanswered`: the workers whose
    /// executor did not answer.
    std::string exposition(const std::vector<endpoint_report>& endpoints, std::size_t unanswered) {
        std::string out = exposition();
        std::vector<labelled_endpoint> labelled_endpoints;
        labelled_endpoints.reserve(endpoints.size());
        for (const endpoint_report& r : endpoints) {
            labelled_endpoint& e = labelled_endpoints.emplace_back();
            e.labels = labelled("worker", r.worker);
            e.labels += ",endpoint=\"" + std::to_string(r.id) + '"';
            e.report = r;
        }
        write_endpoint_metrics(out, labelled_endpoints);
        out += "# HELP ucx_exporter_workers_unanswered Workers whose executor did not answer "
               "this scrape in time (their endpoints' series are left out).\n"
               "# TYPE ucx_exporter_workers_unanswered gauge\n"
               "ucx_exporter_workers_unanswered";
        if (!labels_.empty())
            out += '{' + labels_ + '}';
        out += ' ' + std::to_string(unanswered) + '\n';
        return out;
    }

    std::string exposition() {
        std::vector<labelled_worker> workers;
        std::vector<labelled_group> groups;
        std::vector<labelled_listener> listeners;
        std::vector<labelled_store> stores;
        {
            std::lock_guard lock(mu_);
            workers.reserve(workers_.size());
            for (const exported<worker_impl>& s : workers_) {
                if (auto w = s.impl.lock()) {
                    labelled_worker& lw = workers.emplace_back();
                    lw.labels = labelled("worker", s.name);
                    w->metrics(lw.metrics);
                }
            }
            for (const exported<group_impl>& s : groups_) {
                if (auto g = s.impl.lock()) {
                    labelled_group& lg = groups.emplace_back();
                    lg.labels = labelled("group", s.name);
                    g->metrics(lg.metrics);
                }
            }
            for (const exported<listener_impl>& s : listeners_) {
                if (auto l = s.impl.lock()) {
                    labelled_listener& ll = listeners.emplace_back();
                    ll.labels = labelled("listener", s.name);
                    l->metrics(ll.metrics);
                }
            }
            for (const exported<const store_counters>& s : stores_) {
                if (auto counts = s.impl.lock()) {
                    labelled_store& ls = stores.emplace_back();
                    ls.labels = labelled("store", s.name);
                    ls.metrics = counts->snapshot();
                }
            }
        }
        std::string out;
        write_worker_metrics(out, workers);
        write_group_metrics(out, groups);
        write_listener_metrics(out, listeners);
        write_store_metrics(out, stores);
        return out;
    }

    tcp::endpoint local_endpoint() const {
        if (closed_.load())
            throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                              "ucx::metrics_exporter::local_endpoint");
        return local_;
    }

    bool is_open() const noexcept { return !closed_.load(); }

    void close() {
        if (closed_.exchange(true))
            return;
        boost::asio::dispatch(ex_, [self = shared_from_this()] { self->shut(); });
    }

    // ---- one scraper's connection (on the executor) ----
    class session : public std::enable_shared_from_this<session> {
    public:
        session(std::shared_ptr<metrics_exporter_impl> owner, tcp::socket s)
            : owner_(std::move(owner)), stream_(std::move(s)),
              strand_(boost::asio::make_strand(owner_->ex_)), wait_(strand_) {}

        void read() {
            parser_.emplace();
            parser_->header_limit(8 * 1024);
            parser_->body_limit(0);
            stream_.expires_after(owner_->options_.request_timeout);
            http::async_read(stream_, buffer_, *parser_,
                             [self = shared_from_this()](const error_code& ec, std::size_t) {
                                 self->on_read(ec);
                             });
        }

        void stop() {
            error_code ignored;
            stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
            stream_.close();
            boost::asio::dispatch(strand_, [self = shared_from_this()] {
                self->waiting_ = false;
                self->wait_.cancel();
            });
        }

    private:
        void on_read(const error_code& ec) {
            if (ec) // closed, timed out, not HTTP, too large, a body: the connection ends
                return finish();
            const auto& req = parser_->get();
            head_ = req.method() == http::verb::head;
            response_ = {};
            response_.version(req.version());
            response_.keep_alive(req.keep_alive());
            response_.set(http::field::server, "ucx-asio");
            std::string_view target(req.target().data(), req.target().size());
            target = target.substr(0, target.find('?'));
            if (req.method() != http::verb::get && !head_) {
                answer(http::status::method_not_allowed, "text/plain; charset=utf-8",
                       "only GET and HEAD\n");
                response_.set(http::field::allow, "GET, HEAD");
            } else if (target == "/metrics") {
                if (!owner_->options_.endpoint_series)
                    answer(http::status::ok, exposition_type, owner_->exposition());
                else
                    return fetch_endpoints(true);
            } else if (target == "/endpoints") {
                return fetch_endpoints(false);
            } else if (target == "/flight") {
                answer(http::status::ok, "application/json", owner_->group_names());
            } else if (target.starts_with("/flight/")) {
                std::string name;
                if (percent_decode(target.substr(8), name))
                    if (auto g = owner_->find_group(name))
                        return fetch_record(std::move(g));
                answer(http::status::not_found, "text/plain; charset=utf-8",
                       "no group of that name: /flight lists them\n");
            } else {
                answer(http::status::not_found, "text/plain; charset=utf-8",
                       "not found: the metrics are at /metrics, the endpoints at "
                       "/endpoints, the flight records at /flight\n");
            }
            respond();
        }

        void answer(http::status status, std::string_view type, std::string body) {
            response_.result(status);
            response_.set(http::field::content_type, type);
            response_.body() = std::move(body);
        }

        /// A group's flight record is taken on the group's executor (as
        /// group::flight_record()), which may be another thread's or busy:
        /// the answer waits for it, at most `request_timeout` (503 then).
        void fetch_record(std::shared_ptr<group_impl> g) {
            wait_for_executors([self = shared_from_this()] {
                self->answer(http::status::service_unavailable, "text/plain; charset=utf-8",
                             "the group's executor did not answer in time\n");
                self->respond();
            });
            const auto& ex = g->executor();
            boost::asio::post(ex, [self = shared_from_this(), g = std::move(g)] {
                ucx::flight_record r;
                group_flight_record(*g, r);
                boost::asio::post(self->strand_, [self, json = to_json(r)]() mutable {
                    if (!std::exchange(self->waiting_, false))
                        return; // answered 503 already, or stopped
                    self->wait_.cancel();
                    self->answer(http::status::ok, "application/json", std::move(json));
                    self->respond();
                });
            });
        }

        /// Waits (on the strand) for what was posted to other executors, at
        /// most `request_timeout`; then `on_deadline` runs, unless the
        /// answer came first (it clears `waiting_`).
        template <class F>
        void wait_for_executors(F on_deadline) {
            waiting_ = true;
            wait_.expires_after(owner_->options_.request_timeout);
            wait_.async_wait([self = shared_from_this(), on_deadline](const error_code& ec) {
                if (!ec && std::exchange(self->waiting_, false))
                    on_deadline();
            });
        }

        /// Each worker's endpoints are its executor's to read: the answer
        /// gathers them there, and names the workers that did not answer
        /// within `request_timeout`.
        void fetch_endpoints(bool for_metrics) {
            for_metrics_ = for_metrics;
            auto workers = owner_->live_workers();
            names_.clear();
            parts_.assign(workers.size(), std::nullopt);
            pending_ = workers.size();
            for (const auto& w : workers)
                names_.push_back(w.first);
            if (workers.empty())
                return endpoints_gathered();
            wait_for_executors([self = shared_from_this()] { self->endpoints_gathered(); });
            for (std::size_t i = 0; i < workers.size(); ++i) {
                auto& [name, w] = workers[i];
                const auto ex = w->get_executor();
                boost::asio::post(ex, [self = shared_from_this(), w = std::move(w), i,
                                       name = std::move(name)] {
                    std::vector<endpoint_report> part;
                    report_endpoints(*w, name, part);
                    boost::asio::post(self->strand_, [self, i, part = std::move(part)]() mutable {
                        if (!self->waiting_)
                            return; // answered already, or stopped
                        self->parts_[i] = std::move(part);
                        if (--self->pending_ == 0) {
                            self->waiting_ = false;
                            self->wait_.cancel();
                            self->endpoints_gathered();
                        }
                    });
                });
            }
        }

        void endpoints_gathered() {
            if (for_metrics_) {
                std::vector<endpoint_report> endpoints;
                std::size_t unanswered = 0;
                for (auto& part : parts_) {
                    if (!part) {
                        ++unanswered;
                        continue;
                    }
                    for (auto& e : *part)
                        endpoints.push_back(std::move(e));
                }
                answer(http::status::ok, exposition_type,
                       owner_->exposition(endpoints, unanswered));
                return respond();
            }
            endpoints_report r;
            r.host = boost::asio::ip::host_name();
            r.pid = ::getpid();
            r.ucx_version = ucx_runtime_version().to_string();
            for (std::size_t i = 0; i < parts_.size(); ++i) {
                if (!parts_[i]) {
                    r.unanswered.push_back(names_[i]);
                    continue;
                }
                for (auto& e : *parts_[i])
                    r.endpoints.push_back(std::move(e));
            }
            answer(http::status::ok, "application/json", to_json(r));
            respond();
        }

        void respond() {
            response_.prepare_payload();
            if (head_) {
                const auto n = response_.body().size();
                response_.body().clear();
                response_.content_length(n);
            }
            stream_.expires_after(owner_->options_.request_timeout);
            http::async_write(stream_, response_,
                              [self = shared_from_this()](const error_code& ec, std::size_t) {
                                  if (ec || !self->response_.keep_alive())
                                      return self->finish();
                                  self->read();
                              });
        }

        void finish() {
            stop();
            boost::asio::dispatch(owner_->ex_, [self = shared_from_this()] {
                self->owner_->sessions_.erase(self.get());
            });
        }

        std::shared_ptr<metrics_exporter_impl> owner_;
        boost::beast::tcp_stream stream_;
        boost::beast::flat_buffer buffer_;
        std::optional<http::request_parser<http::empty_body>> parser_;
        http::response<http::string_body> response_;
        bool head_ = false;
        // A flight record being fetched (on the strand).
        boost::asio::strand<boost::asio::any_io_executor> strand_;
        boost::asio::steady_timer wait_;
        bool waiting_ = false;
        // The endpoints being gathered (on the strand): each worker's name and
        // its part once its executor answered.
        std::vector<std::string> names_;
        std::vector<std::optional<std::vector<endpoint_report>>> parts_;
        std::size_t pending_ = 0;
        // They answer GET /metrics (else GET /endpoints).
        bool for_metrics_ = false;
    };

private:
    void accept() {
        if (closed_.load())
            return;
        acceptor_.async_accept([self = shared_from_this()](const error_code& ec, tcp::socket s) {
            if (self->closed_.load())
                return;
            if (ec) {
                // Out of descriptors, a connection reset before it was taken:
                // try again shortly, without spinning.
                log::write(log::severity::warning, "metrics exporter: accept: " + ec.message());
                self->retry_.expires_after(std::chrono::milliseconds(100));
                self->retry_.async_wait([self](const error_code& e) {
                    if (!e)
                        self->accept();
                });
                return;
            }
            if (self->sessions_.size() >= self->options_.max_connections) {
                error_code ignored;
                s.close(ignored);
            } else {
                auto session_ptr = std::make_shared<session>(self, std::move(s));
                self->sessions_.emplace(session_ptr.get(), session_ptr);
                session_ptr->read();
            }
            self->accept();
        });
    }

    void shut() {
        error_code ignored;
        acceptor_.close(ignored);
        retry_.cancel();
        for (const auto& [ptr, w] : sessions_)
            if (auto s = w.lock())
                s->stop();
    }

    boost::asio::any_io_executor ex_;
    tcp::acceptor acceptor_;
    boost::asio::steady_timer retry_;
    metrics_exporter_options options_;
    std::string labels_;
    tcp::endpoint local_;
    std::atomic<bool> closed_{false};
    std::mutex mu_;
    std::vector<exported<worker_impl>> workers_;
    std::vector<exported<group_impl>> groups_;
    std::vector<exported<listener_impl>> listeners_;
    std::vector<exported<const store_counters>> stores_;
    // On the executor: the sessions being served (counted against
    // max_connections, closed by `close()`), until each finishes.
    std::unordered_map<session*, std::weak_ptr<session>> sessions_;
};

} // namespace detail

metrics_exporter::metrics_exporter(const executor_type& ex,
                                   const boost::asio::ip::tcp::endpoint& at,
                                   const metrics_exporter_options& options)
    : impl_(std::make_shared<detail::metrics_exporter_impl>(ex, at, options)) {
    impl_->start();
}

metrics_exporter& metrics_exporter::operator=(metrics_exporter&& other) noexcept {
    if (this != &other) {
        close();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

metrics_exporter::~metrics_exporter() {
    close();
}

void metrics_exporter::add(const worker& w, std::string name) {
    const auto& wi = detail::access::get_impl(w);
    if (!impl_ || !wi)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::add");
    impl_->add_worker(wi, std::move(name));
}

void metrics_exporter::add(const group& g, std::string name) {
    const auto& gi = detail::access::get_impl(g);
    if (!impl_ || !gi)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::add");
    impl_->add_group(gi, std::move(name));
}

void metrics_exporter::add(const listener& l, std::string name) {
    const auto& li = detail::access::get_impl(l);
    if (!impl_ || !li)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::add");
    impl_->add_listener(li, std::move(name));
}

void metrics_exporter::add(const store& s, std::string name) {
    if (!impl_)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::add");
    impl_->add_store(s.counts_, std::move(name));
}

std::string metrics_exporter::exposition() const {
    return impl_ ? impl_->exposition() : std::string();
}

boost::asio::ip::tcp::endpoint metrics_exporter::local_endpoint() const {
    if (!impl_)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::local_endpoint");
    return impl_->local_endpoint();
}

void metrics_exporter::close() {
    if (impl_)
        impl_->close();
}

bool metrics_exporter::is_open() const noexcept {
    return impl_ && impl_->is_open();
}

} // namespace ucx
