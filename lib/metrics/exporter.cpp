// The Prometheus exporter: a small HTTP server (Beast) on the application's
// executor that answers the workers' metrics in the text format.
#include <ucx/log.hpp>
#include <ucx/metrics_exporter.hpp>

#include "engine/worker_impl.hpp"
#include "group/group_impl.hpp"
#include "metrics/exposition.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_set>

namespace ucx {
namespace detail {

namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

class metrics_exporter_impl : public std::enable_shared_from_this<metrics_exporter_impl> {
public:
    metrics_exporter_impl(const boost::asio::any_io_executor& ex, const tcp::endpoint& at,
                          const metrics_exporter_options& options)
        : ex_(ex), acceptor_(ex), retry_(ex), options_(options) {
        for (const auto& [name, value] : options.labels)
            if (!valid_label_name(name) || name == "worker" || name == "group")
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

    void add(std::weak_ptr<worker_impl> w, std::string name) {
        std::lock_guard lock(mu_);
        for (const source& s : sources_)
            if (s.name == name && !s.worker.expired())
                throw boost::system::system_error(boost::asio::error::invalid_argument,
                                                  "ucx::metrics_exporter::add: worker \"" + name +
                                                      "\" is there already");
        std::erase_if(sources_, [](const source& s) { return s.worker.expired(); });
        sources_.push_back({std::move(name), std::move(w)});
    }

    void add_group(std::weak_ptr<group_impl> g, std::string name) {
        std::lock_guard lock(mu_);
        for (const group_source& s : groups_)
            if (s.name == name && !s.group.expired())
                throw boost::system::system_error(boost::asio::error::invalid_argument,
                                                  "ucx::metrics_exporter::add: group \"" + name +
                                                      "\" is there already");
        std::erase_if(groups_, [](const group_source& s) { return s.group.expired(); });
        groups_.push_back({std::move(name), std::move(g)});
    }

    std::string exposition() {
        std::vector<labelled_worker> workers;
        std::vector<labelled_group> groups;
        const auto labelled = [this](std::string_view key, const std::string& name) {
            const std::pair<std::string, std::string> own[] = {{std::string(key), name}};
            return labels_.empty() ? render_labels(own) : labels_ + ',' + render_labels(own);
        };
        {
            std::lock_guard lock(mu_);
            workers.reserve(sources_.size());
            for (const source& s : sources_) {
                if (auto w = s.worker.lock()) {
                    labelled_worker& lw = workers.emplace_back();
                    lw.labels = labelled("worker", s.name);
                    w->metrics(lw.metrics);
                }
            }
            for (const group_source& s : groups_) {
                if (auto g = s.group.lock()) {
                    labelled_group& lg = groups.emplace_back();
                    lg.labels = labelled("group", s.name);
                    g->metrics(lg.metrics);
                }
            }
        }
        std::string out;
        write_worker_metrics(out, workers);
        write_group_metrics(out, groups);
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
            : owner_(std::move(owner)), stream_(std::move(s)) {}

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
        }

    private:
        void on_read(const error_code& ec) {
            if (ec) // closed, timed out, not HTTP, too large, a body: the connection ends
                return finish();
            const auto& req = parser_->get();
            response_ = {};
            response_.version(req.version());
            response_.keep_alive(req.keep_alive());
            response_.set(http::field::server, "ucx-asio");
            std::string_view target(req.target().data(), req.target().size());
            target = target.substr(0, target.find('?'));
            if (req.method() != http::verb::get && req.method() != http::verb::head) {
                response_.result(http::status::method_not_allowed);
                response_.set(http::field::allow, "GET, HEAD");
                response_.set(http::field::content_type, "text/plain; charset=utf-8");
                response_.body() = "only GET and HEAD\n";
            } else if (target != "/metrics") {
                response_.result(http::status::not_found);
                response_.set(http::field::content_type, "text/plain; charset=utf-8");
                response_.body() = "not found: the metrics are at /metrics\n";
            } else {
                response_.result(http::status::ok);
                response_.set(http::field::content_type,
                              "text/plain; version=0.0.4; charset=utf-8");
                response_.body() = owner_->exposition();
            }
            response_.prepare_payload();
            if (req.method() == http::verb::head) {
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
            owner_->sessions_.erase(this);
        }

        std::shared_ptr<metrics_exporter_impl> owner_;
        boost::beast::tcp_stream stream_;
        boost::beast::flat_buffer buffer_;
        std::optional<http::request_parser<http::empty_body>> parser_;
        http::response<http::string_body> response_;
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
                self->sessions_.insert(session_ptr.get());
                self->live_.push_back(session_ptr);
                session_ptr->read();
            }
            std::erase_if(self->live_, [](const std::weak_ptr<session>& w) { return w.expired(); });
            self->accept();
        });
    }

    void shut() {
        error_code ignored;
        acceptor_.close(ignored);
        retry_.cancel();
        for (const auto& w : live_)
            if (auto s = w.lock())
                s->stop();
        live_.clear();
    }

    struct source {
        std::string name;
        std::weak_ptr<worker_impl> worker;
    };
    struct group_source {
        std::string name;
        std::weak_ptr<group_impl> group;
    };

    boost::asio::any_io_executor ex_;
    tcp::acceptor acceptor_;
    boost::asio::steady_timer retry_;
    metrics_exporter_options options_;
    std::string labels_;
    tcp::endpoint local_;
    std::atomic<bool> closed_{false};
    std::mutex mu_;
    std::vector<source> sources_;
    std::vector<group_source> groups_;
    // On the executor: the sessions being served (counted against
    // max_connections), and weak references to close them.
    std::unordered_set<session*> sessions_;
    std::vector<std::weak_ptr<session>> live_;
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
    impl_->add(wi, std::move(name));
}

void metrics_exporter::add(const group& g, std::string name) {
    const auto& gi = detail::access::get_impl(g);
    if (!impl_ || !gi)
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx::metrics_exporter::add");
    impl_->add_group(gi, std::move(name));
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
