#include <ucx/listener.hpp>
#include <ucx/log.hpp>

#include "connection/control_channel.hpp"
#include "connection/listener_impl.hpp"
#include "core/context_impl.hpp"
#include "core/created.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace ucx {
namespace detail {

listener_impl::listener_impl(std::shared_ptr<worker_impl> worker, settings s)
    : worker_component(component_kind::listener), worker_(std::move(worker)),
      backlog_(std::max<std::size_t>(1, s.backlog)), timeouts_(s.timeouts),
      filter_(std::move(s.filter)), method_(s.method), secret_(std::move(s.secret)),
      reuse_address_(s.reuse_address), reuse_port_(s.reuse_port) {}

listener_impl::~listener_impl() {
    close();
}

void listener_impl::open(const boost::asio::ip::tcp::endpoint& bind, error_code& ec) {
    if (ec = accept_support(*worker_); ec)
        return;
    if (method_ == connection_method::handshake)
        return open_door(bind, ec);
    if (reuse_port_) {
        // UCX's connection manager opens the socket itself, without it.
        ec = boost::asio::error::operation_not_supported;
        return;
    }
    if (!ucx_connects_over(worker_->context(), bind.address())) {
        ec = boost::asio::error::address_family_not_supported;
        return;
    }
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
    if (acceptor_ && door_attached_)
        return acceptor_->local_endpoint(ec);
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
            if (full)
                refuse(refusal_cause::backlog_full, "backlog full");
            else
                refuse(refusal_cause::filter, "rejected by the filter");
            ucp_listener_reject(handle_, request);
            continue;
        }
        auto ep = std::make_shared<endpoint_impl>(worker_);
        error_code ec;
        const bool plain = method_ == connection_method::plain;
        ep->accept_request(request, this, plain, timeouts_, ec);
        if (ec) {
            log::write(log::severity::warning, "listener: accepting failed: " + ec.message());
            continue;
        }
        if (plain)
            queue_accepted(std::move(ep)); // no handshake: connected now
        else
            handshaking_.push_back(std::move(ep));
    }
}

void listener_impl::on_established(std::shared_ptr<endpoint_impl> ep) noexcept {
    std::erase(handshaking_, ep);
    queue_accepted(std::move(ep));
}

void listener_impl::on_failed(endpoint_impl* ep) noexcept {
    const auto gone = std::erase_if(handshaking_, [ep](const auto& p) { return p.get() == ep; });
    if (gone == 0 || !ep->error())
        return;
    if (ep->error() == error::handshake_timeout)
        refuse(refusal_cause::handshake_timeout, "handshake timed out");
    else
        refuse(refusal_cause::handshake_failed, "handshake failed: " + ep->error().message());
}

bool listener_impl::queue_accepted(std::shared_ptr<endpoint_impl> ep) noexcept {
    if (!queue_.offer(std::move(ep)))
        return false;
    ++accepted_;
    return true;
}

std::size_t listener_impl::rejected() const noexcept {
    std::size_t n = 0;
    for (const counter& c : refused_)
        n += c.load();
    return n;
}

void listener_impl::metrics(listener_metrics& m) const noexcept {
    m.accepted = accepted_.load();
    for (std::size_t i = 0; i < refusal_cause_count; ++i)
        m.refused[i] = refused_[i].load();
}

void listener_impl::accept(endpoint_op* op) noexcept {
    queue_.accept(op, is_open());
}

void listener_impl::close() noexcept {
    if (door_attached_) {
        door_attached_ = false;
        control_channel::of(*worker_).detach_door(this);
        error_code ignored;
        acceptor_->close(ignored);
        if (retry_timer_)
            retry_timer_->cancel();
        if (spare_fd_ >= 0)
            ::close(std::exchange(spare_fd_, -1));
        if (expiry_timer_)
            expiry_timer_->cancel();
        for (auto& s : std::exchange(sessions_, {}))
            s->stop();
        expected_.clear();
        worker_->remove_component(*this);
        queue_.close();
        return;
    }
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

// ---- the handshake method ----

void listener_impl::open_door(const boost::asio::ip::tcp::endpoint& bind, error_code& ec) {
    namespace ip = boost::asio::ip;
    auto acceptor = std::make_unique<ip::tcp::acceptor>(worker_->get_executor());
    if (acceptor->open(bind.protocol(), ec); ec)
        return;
    if (reuse_address_)
        acceptor->set_option(ip::tcp::acceptor::reuse_address(true), ec);
    if (reuse_port_ && !ec)
        acceptor->set_option(
            boost::asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
    if (!ec)
        acceptor->bind(bind, ec);
    if (!ec)
        acceptor->listen(static_cast<int>(std::min<std::size_t>(backlog_, SOMAXCONN)), ec);
    if (ec)
        return;
    acceptor_ = std::move(acceptor);
    retry_timer_ = std::make_unique<boost::asio::steady_timer>(worker_->get_executor());
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    expiry_timer_ = std::make_unique<boost::asio::steady_timer>(worker_->get_executor());
    control_channel::of(*worker_).attach_door(this);
    door_attached_ = true;
    worker_->add_component(*this);
    accept_next();
}

void listener_impl::accept_next() {
    if (!door_attached_)
        return;
    acceptor_->async_accept(
        [weak = weak_from_this()](const error_code& ec, boost::asio::ip::tcp::socket socket) {
            if (auto self = weak.lock())
                self->on_tcp_accept(ec, std::move(socket));
        });
}

std::size_t listener_impl::waiting() const noexcept {
    return sessions_.size() + expected_.size() + queue_.ready();
}

void listener_impl::refuse(refusal_cause cause, const std::string& why) noexcept {
    ++refused_[static_cast<std::size_t>(cause)];
    log::write(log::severity::info, "listener: connection refused: " + why);
}

namespace {

bool out_of_descriptors(const error_code& ec) noexcept {
    return ec == boost::asio::error::no_descriptors || ec.value() == ENFILE;
}

/// Whether `n` more descriptors can be opened now (the probes are closed
/// again at once).
bool descriptors_free(int n) noexcept {
    int probes[4] = {-1, -1, -1, -1};
    bool ok = true;
    for (int i = 0; i < n && i < 4 && ok; ++i)
        ok = (probes[i] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
    for (int fd : probes)
        if (fd >= 0)
            ::close(fd);
    return ok;
}

} // namespace

void listener_impl::restore_reserve() noexcept {
    // The reserve is given up for one accept at the limit and reopened at
    // once; if another descriptor was taken meanwhile (by UCX, by another
    // thread of the application) the reopen fails. Without this the
    // listener would stay without a reserve, and every later client at the
    // limit would wait for its deadline instead of being refused.
    if (spare_fd_ < 0)
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void listener_impl::on_tcp_accept(const error_code& ec, boost::asio::ip::tcp::socket socket) {
    if (!door_attached_ || ec == boost::asio::error::operation_aborted)
        return;
    restore_reserve();
    if (out_of_descriptors(ec)) {
        // Linux fails accept() with EMFILE before it looks for a waiting
        // client, so this says nothing about one: wait until a client is
        // waiting, then take it or refuse it (no spinning at the limit).
        return await_client_out_of_descriptors();
    }
    if (ec) {
        // Another passing failure: try again shortly rather than spin.
        log::write(log::severity::warning, "listener: accepting failed: " + ec.message());
        return retry_accept_later();
    }
    take_door_client(std::move(socket));
    accept_next();
}

void listener_impl::retry_accept_later() {
    retry_timer_->expires_after(std::chrono::milliseconds(100));
    retry_timer_->async_wait([weak = weak_from_this()](const error_code& e) {
        if (auto self = weak.lock(); self && !e && self->door_attached_)
            self->accept_next();
    });
}

void listener_impl::await_client_out_of_descriptors() {
    acceptor_->async_wait(boost::asio::ip::tcp::acceptor::wait_read,
                          [weak = weak_from_this()](const error_code& e) {
                              auto self = weak.lock();
                              if (self && !e && self->door_attached_)
                                  self->take_client_out_of_descriptors();
                          });
}

void listener_impl::take_client_out_of_descriptors() {
    // A client is waiting. Descriptors may have been freed meanwhile: take it
    // as usual; if not, give up the reserve for the one accept and refuse it
    // at once with a clear answer instead of leaving it to its deadline.
    restore_reserve();
    error_code ec;
    acceptor_->non_blocking(true, ec);
    boost::asio::ip::tcp::socket client(worker_->get_executor());
    acceptor_->accept(client, ec);
    if (out_of_descriptors(ec) && spare_fd_ >= 0) {
        ::close(std::exchange(spare_fd_, -1));
        acceptor_->accept(client, ec);
        if (!ec) {
            refuse(refusal_cause::out_of_descriptors, "out of descriptors");
            refuse_door_client(std::move(client), door_status::refused);
        }
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    error_code ignored;
    acceptor_->non_blocking(false, ignored);
    if (!ec && client.is_open()) {
        take_door_client(std::move(client));
        return accept_next();
    }
    if (!ec || ec == boost::asio::error::would_block || ec == boost::asio::error::try_again)
        return accept_next(); // refused, or the client gave up meanwhile
    if (out_of_descriptors(ec))
        return retry_accept_later(); // and no reserve (it could not be reopened)
    log::write(log::severity::warning, "listener: accepting failed: " + ec.message());
    retry_accept_later();
}

void listener_impl::take_door_client(boost::asio::ip::tcp::socket socket) {
    error_code ignored;
    const auto client = socket.remote_endpoint(ignored);
    if (!descriptors_free(connection_descriptors)) {
        // The lifeline is open but the connection would fail for want of
        // descriptors (UCX opens some to connect: a TCP socket, the peer's
        // shared memory): refuse now rather than let the client wait.
        refuse(refusal_cause::out_of_descriptors, "out of descriptors");
        refuse_door_client(std::move(socket), door_status::refused);
    } else if (waiting() >= backlog_) {
        refuse(refusal_cause::backlog_full, "backlog full");
        refuse_door_client(std::move(socket), door_status::refused);
    } else if (filter_ && !filter_(client)) {
        refuse(refusal_cause::filter, "rejected by the filter");
        refuse_door_client(std::move(socket), door_status::refused);
    } else {
        try {
            auto session = std::make_shared<door_session>(
                std::move(socket), timeouts_.handshake_timeout, secret_, worker_->address(),
                [weak = weak_from_this()] {
                    auto self = weak.lock();
                    return self && self->door_attached_ && self->has_room();
                },
                [weak = weak_from_this()](door_session& s, const error_code& e,
                                          const worker_address& peer) {
                    if (auto self = weak.lock())
                        self->session_done(s, e, peer);
                });
            sessions_.push_back(session);
            session->start();
        } catch (const std::exception& e) {
            log::write(log::severity::warning,
                       std::string("listener: could not start a handshake: ") + e.what());
        }
    }
}

void listener_impl::session_done(door_session& s, const error_code& ec,
                                 const worker_address& peer) {
    std::erase_if(sessions_, [&s](const auto& p) { return p.get() == &s; });
    if (ec) {
        refuse(ec == error::handshake_timeout ? refusal_cause::handshake_timeout
                                              : refusal_cause::handshake_failed,
               "handshake with " + s.remote().address().to_string() + ":" +
                   std::to_string(s.remote().port()) + " failed: " + ec.message());
        return;
    }
    const auto wait = timeouts_.handshake_timeout.count() > 0 ? timeouts_.handshake_timeout
                                                              : std::chrono::milliseconds(60000);
    expected_.push_back(expected_client{peer, s.ticket(), s.take_socket(),
                                        std::chrono::steady_clock::now() + wait});
    // The client's UCX connection is coming. Measured with UCX 1.13: an
    // armed worker is not woken by the first packets of a connection made
    // to it from a worker address, and the connect waited for the safety
    // timer (98 ms of an event-mode server); a pass now (progress, arm
    // again) takes them at once (0.5 ms).
    worker_->request_progress();
    if (expected_.size() == 1) {
        expiry_timer_->expires_at(expected_.front().deadline);
        expiry_timer_->async_wait([weak = weak_from_this()](const error_code& e) {
            if (auto self = weak.lock(); self && !e)
                self->expire_clients();
        });
    }
}

void listener_impl::expire_clients() noexcept {
    const auto now = std::chrono::steady_clock::now();
    while (!expected_.empty() && expected_.front().deadline <= now) {
        expected_.pop_front();
        refuse(refusal_cause::handshake_timeout, "admitted client did not connect in time");
    }
    if (expected_.empty() || !door_attached_)
        return;
    expiry_timer_->expires_at(expected_.front().deadline);
    expiry_timer_->async_wait([weak = weak_from_this()](const error_code& e) {
        if (auto self = weak.lock(); self && !e)
            self->expire_clients();
    });
}

namespace {
bool same_ticket(const door_nonce& a, std::span<const std::byte> b) noexcept {
    return b.size() == a.size() && std::equal(a.begin(), a.end(), b.begin());
}
} // namespace

bool listener_impl::expects(const worker_address& peer,
                            std::span<const std::byte> ticket) const noexcept {
    return door_attached_ && std::any_of(expected_.begin(), expected_.end(), [&](const auto& c) {
               return same_ticket(c.ticket, ticket) && c.peer == peer;
           });
}

bool listener_impl::offer(std::shared_ptr<endpoint_impl> ep, const worker_address& peer,
                          std::span<const std::byte> ticket) noexcept {
    auto it = std::find_if(expected_.begin(), expected_.end(), [&](const auto& c) {
        return same_ticket(c.ticket, ticket) && c.peer == peer;
    });
    if (it == expected_.end())
        return false;
    ep->adopt_lifeline(std::move(it->socket));
    expected_.erase(it);
    return queue_accepted(std::move(ep));
}

void listener_impl::channel_gone() noexcept {
    // The worker shuts down: it ended this listener first (shutdown()).
    door_attached_ = false;
}

namespace {
std::shared_ptr<listener_impl> make_listener(worker& w, listener_options& options) {
    const std::shared_ptr<worker_impl>& impl = checked(w);
    const worker_options& defaults = impl->options();
    listener_impl::settings s;
    s.backlog = options.backlog;
    s.filter = std::move(options.accept_filter);
    s.timeouts = {options.peer_timeout.value_or(defaults.peer_timeout),
                  options.handshake_timeout.value_or(defaults.handshake_timeout)};
    s.method = options.method.value_or(defaults.method);
    s.secret = options.secret.value_or(defaults.secret);
    s.reuse_address = options.reuse_address;
    s.reuse_port = options.reuse_port;
    return std::make_shared<listener_impl>(impl, std::move(s));
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

listener_metrics listener::metrics() const noexcept {
    listener_metrics m;
    if (impl_)
        impl_->metrics(m);
    return m;
}

} // namespace ucx

// The non-template functions the public headers' templates call (<ucx/listener.hpp>): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

worker_core& core_of(const listener_impl& l) noexcept {
    return *l.worker();
}
void listener_accept(listener_impl& l, endpoint_op* op) noexcept {
    op->kind = operation_kind::accept;
    l.accept(op);
}

} // namespace ucx::detail
