#include <ucx/listener.hpp>
#include <ucx/log.hpp>

#include "created.hpp"
#include "listener_impl.hpp"
#include "worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <string>

namespace ucx {
namespace detail {

listener_impl::listener_impl(std::shared_ptr<worker_impl> worker, std::size_t backlog,
                             filter_type filter, const connection_timeouts& timeouts)
    : worker_component(component_kind::listener), worker_(std::move(worker)),
      backlog_(std::max<std::size_t>(1, backlog)), timeouts_(timeouts), filter_(std::move(filter)) {
}

listener_impl::~listener_impl() {
    close();
}

void listener_impl::open(const boost::asio::ip::tcp::endpoint& bind, error_code& ec) {
    if (ec = worker_->accept_support(); ec)
        return;
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = bind.data();
    params.sockaddr.addrlen = static_cast<socklen_t>(bind.size());
    params.conn_handler.cb = &listener_impl::conn_callback;
    params.conn_handler.arg = this;
    if (!created(ucp_listener_create(worker_->native(), &params, &handle_), handle_, ec))
        return;
    worker_->add_component(*this);
    ec = {};
}

boost::asio::ip::tcp::endpoint listener_impl::local_endpoint(error_code& ec) const {
    if (!handle_) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucs_status_t st = ucp_listener_query(handle_, &attr); st != UCS_OK) {
        ec = make_error_code(st);
        return {};
    }
    ec = {};
    return to_tcp_endpoint(attr.sockaddr);
}

void listener_impl::conn_callback(ucp_conn_request_h request, void* arg) noexcept {
    // Inside ucp_worker_progress: queue only.
    auto* self = static_cast<listener_impl*>(arg);
    self->requests_.push_back(request);
    self->worker_->defer(*self, deferred_stage::requests);
}

void listener_impl::process_requests() noexcept {
    auto requests = std::move(requests_);
    requests_.clear();
    for (ucp_conn_request_h request : requests) {
        if (!handle_)
            break;
        boost::asio::ip::tcp::endpoint client;
        ucp_conn_request_attr_t attr{};
        attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
        if (ucp_conn_request_query(request, &attr) == UCS_OK)
            client = to_tcp_endpoint(attr.client_address);
        const bool full = handshaking_.size() + queue_.ready() >= backlog_;
        if (full || (filter_ && !filter_(client))) {
            ++rejected_;
            log::write(log::severity::info, full ? "listener: backlog full, connection rejected"
                                                 : "listener: connection rejected by filter");
            ucp_listener_reject(handle_, request);
            continue;
        }
        auto ep = std::make_shared<endpoint_impl>(worker_);
        error_code ec;
        ep->accept_request(request, this, timeouts_, ec);
        if (ec) {
            log::write(log::severity::warning, "listener: accepting failed: " + ec.message());
            continue;
        }
        handshaking_.push_back(std::move(ep));
    }
}

void listener_impl::on_established(std::shared_ptr<endpoint_impl> ep) noexcept {
    std::erase(handshaking_, ep);
    queue_.offer(std::move(ep));
}

void listener_impl::on_failed(endpoint_impl* ep) noexcept {
    std::erase_if(handshaking_, [ep](const auto& p) { return p.get() == ep; });
}

void listener_impl::accept(endpoint_op* op) noexcept {
    queue_.accept(op, handle_ != nullptr);
}

void listener_impl::close() noexcept {
    if (!handle_)
        return;
    for (ucp_conn_request_h request : requests_)
        ucp_listener_reject(handle_, request);
    requests_.clear();
    ucp_listener_destroy(handle_);
    handle_ = nullptr;
    worker_->remove_component(*this);
    for (auto& ep : handshaking_)
        ep->forget_listener();
    handshaking_.clear(); // force-closes them
    queue_.close();
}

namespace {
std::shared_ptr<listener_impl> make_listener(worker& w, listener_options& options) {
    const std::shared_ptr<worker_impl>& impl = checked(w);
    const worker_options& defaults = impl->options();
    const connection_timeouts timeouts{
        options.peer_timeout.value_or(defaults.peer_timeout),
        options.handshake_timeout.value_or(defaults.handshake_timeout)};
    return std::make_shared<listener_impl>(impl, options.backlog, std::move(options.accept_filter),
                                           timeouts);
}
} // namespace

} // namespace detail

listener::listener(worker& w, const boost::asio::ip::tcp::endpoint& bind,
                   listener_options options) {
    error_code ec;
    impl_ = detail::make_listener(w, options);
    impl_->open(bind, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::listener");
}

listener::listener(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options,
                   error_code& ec)
    : impl_(detail::make_listener(w, options)) {
    impl_->open(bind, ec);
}

listener& listener::operator=(listener&& other) noexcept {
    if (this != &other) {
        close();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

listener::~listener() {
    close();
}

listener::executor_type listener::get_executor() const noexcept {
    return impl_ ? impl_->worker()->get_executor() : executor_type();
}

boost::asio::ip::tcp::endpoint listener::local_endpoint(error_code& ec) const {
    if (!impl_) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    return impl_->local_endpoint(ec);
}

boost::asio::ip::tcp::endpoint listener::local_endpoint() const {
    error_code ec;
    auto ep = local_endpoint(ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::listener::local_endpoint");
    return ep;
}

bool listener::is_open() const noexcept {
    return impl_ && impl_->is_open();
}

void listener::close() noexcept {
    if (impl_)
        impl_->close();
}

std::size_t listener::rejected() const noexcept {
    return impl_ ? impl_->rejected() : 0;
}

} // namespace ucx
