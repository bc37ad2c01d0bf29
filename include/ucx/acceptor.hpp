// ucx::acceptor: accepts ucx::stream connections, mirroring asio::ip::tcp::acceptor.
#pragma once

#include <ucx/listener.hpp>
#include <ucx/stream.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

namespace ucx {

/// Accepts connections from `ucx::stream::async_connect`, as
/// `asio::ip::tcp::acceptor` does for sockets: porting a TCP server means
/// swapping `tcp::acceptor` for `ucx::acceptor` and `tcp::socket` for
/// `ucx::stream`. Two kinds:
///
/// - bound to an address and port (`acceptor(worker, tcp::endpoint)`), for
///   `stream::async_connect(host, port)`; built on `ucx::listener`;
/// - an address acceptor (`acceptor(worker)`), for
///   `stream::async_connect(worker_address)`: no IP addressing, the peers
///   connect to the worker's address (`local_address()`). One per worker at
///   a time. A connection that arrives while the worker has no address
///   acceptor open (after it closed), or while `backlog` connections wait to
///   be accepted, is refused: the connector gets `connection_refused`.
///   A worker that never had an address acceptor does not answer such
///   connections (their connect waits until cancelled).
///
/// Closing (or destroying) the acceptor fails pending accepts with
/// `asio::error::operation_aborted`; connections it had not handed out yet
/// are closed abortively. Movable, not copyable.
class acceptor {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Listens on `bind` (port 0 picks a free port; see `local_endpoint()`).
    /// Throws `boost::system::system_error` as `listener`'s constructor.
    acceptor(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options = {})
        : listener_(std::in_place, w, bind, std::move(options)) {}
    /// As above; reports failure through `ec`.
    acceptor(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options,
             error_code& ec)
        : listener_(std::in_place, w, bind, std::move(options), ec) {}

    /// An address acceptor on `w` (see the class description); at most
    /// `backlog` connections wait to be accepted. Throws
    /// `boost::system::system_error`: `asio::error::address_in_use` when `w`
    /// has an open address acceptor already, `ucx::error::feature_not_enabled`
    /// when the context has no `feature::am`, `ucx::error::allocation_failed`.
    explicit acceptor(worker& w, std::size_t backlog = 16) {
        error_code ec;
        open_address(w, backlog, ec);
        if (ec)
            throw boost::system::system_error(ec, "ucx::acceptor");
    }
    /// As above; reports failure through `ec`.
    acceptor(worker& w, std::size_t backlog, error_code& ec) { open_address(w, backlog, ec); }

    acceptor(acceptor&&) noexcept = default;
    acceptor& operator=(acceptor&& other) noexcept {
        if (this != &other) {
            if (address_)
                address_->close();
            listener_ = std::move(other.listener_);
            address_ = std::move(other.address_);
        }
        return *this;
    }
    /// Closes the acceptor (see `close()`).
    ~acceptor() {
        if (address_)
            address_->close();
    }

    executor_type get_executor() const noexcept {
        if (listener_)
            return listener_->get_executor();
        return address_ ? address_->worker()->get_executor() : executor_type();
    }

    /// The address and port the acceptor listens on
    /// (`ucx::error::no_socket_address` for an address acceptor).
    boost::asio::ip::tcp::endpoint local_endpoint() const {
        error_code ec;
        auto e = local_endpoint(ec);
        if (ec)
            throw boost::system::system_error(ec, "ucx::acceptor::local_endpoint");
        return e;
    }
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const {
        if (listener_)
            return listener_->local_endpoint(ec);
        ec = address_ ? make_error_code(error::no_socket_address)
                      : error_code(boost::asio::error::bad_descriptor);
        return {};
    }
    /// The address peers connect to with `stream::async_connect(worker_address)`:
    /// the worker's address (an address acceptor only; throws
    /// `boost::system::system_error` with `ucx::error::wrong_acceptor_kind`
    /// otherwise).
    worker_address local_address() const {
        if (!address_)
            throw boost::system::system_error(make_error_code(error::wrong_acceptor_kind),
                                              "ucx::acceptor::local_address");
        return address_->worker()->address();
    }
    /// Whether this is an address acceptor.
    bool is_address_acceptor() const noexcept { return address_ != nullptr; }

    bool is_open() const noexcept {
        return listener_ ? listener_->is_open() : address_ && address_->is_open();
    }
    /// Stops accepting; pending accepts fail with `operation_aborted`. Idempotent.
    void close() noexcept {
        if (listener_)
            listener_->close();
        if (address_)
            address_->close();
    }
    void close(error_code& ec) noexcept {
        close();
        ec = {};
    }

    /// Accepts the next connection into `s`, which must not be connected
    /// (`asio::error::already_open` otherwise). Cancellable through the
    /// handler's cancellation slot. Completion signature: `void(error_code)`.
    /// Library errors: `ucx::error::allocation_failed` (address acceptor).
    template <class Executor,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        basic_stream<Executor>& s,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            accept_into_op{listener_ ? &*listener_ : nullptr, address_, s.impl()}, token,
            get_executor());
    }

    /// Accepts the next connection as a new stream. Cancellable. Errors as
    /// above.
    /// Completion signature: `void(error_code, ucx::stream)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_compose<CompletionToken, void(error_code, stream)>(
            accept_new_op{listener_ ? &*listener_ : nullptr, address_}, token, get_executor());
    }

    /// The underlying listener (throws `boost::system::system_error` with
    /// `ucx::error::wrong_acceptor_kind` for an address acceptor).
    ucx::listener& listener() {
        if (!listener_)
            throw boost::system::system_error(make_error_code(error::wrong_acceptor_kind),
                                              "ucx::acceptor::listener");
        return *listener_;
    }

private:
    void open_address(worker& w, std::size_t backlog, error_code& ec) {
        address_ = std::make_shared<detail::address_acceptor_impl>(detail::checked(w), backlog);
        address_->open(ec);
    }

    /// Starts the accept of an endpoint on whichever kind this is.
    template <class Self>
    static void start_accept(ucx::listener* l, std::shared_ptr<detail::address_acceptor_impl> a,
                             Self&& self) {
        // `a` is a copy: `self`, which holds the original, moves away below.
        if (a) {
            detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
                a, *a->worker(), std::move(self),
                [](detail::address_acceptor_impl& impl, detail::operation* op) {
                    impl.accept(op);
                });
            return;
        }
        l->async_accept(std::move(self));
    }

    struct accept_into_op {
        ucx::listener* l;
        std::shared_ptr<detail::address_acceptor_impl> a;
        std::shared_ptr<detail::stream_impl> s;

        template <class Self>
        void operator()(Self& self) {
            if (!s || s->endpoint()) {
                const auto ex = self.get_io_executor();
                return boost::asio::post(ex, [self = std::move(self)]() mutable {
                    self.complete(boost::asio::error::already_open);
                });
            }
            start_accept(l, a, std::move(self));
        }
        template <class Self>
        void operator()(Self& self, error_code ec, endpoint ep) {
            if (!ec)
                s->assign(ep.impl(), ec);
            self.complete(ec);
        }
    };

    struct accept_new_op {
        ucx::listener* l;
        std::shared_ptr<detail::address_acceptor_impl> a;

        template <class Self>
        void operator()(Self& self) {
            start_accept(l, a, std::move(self));
        }
        template <class Self>
        void operator()(Self& self, error_code ec, endpoint ep) {
            if (ec)
                return self.complete(ec, stream(std::shared_ptr<detail::stream_impl>()));
            stream s{std::shared_ptr<detail::stream_impl>()};
            try {
                s = stream(std::move(ep));
            } catch (const boost::system::system_error& e) {
                ec = e.code();
            }
            self.complete(ec, std::move(s));
        }
    };

    std::optional<ucx::listener> listener_;
    std::shared_ptr<detail::address_acceptor_impl> address_;
};

} // namespace ucx
