// ucx::acceptor: accepts ucx::stream connections, mirroring asio::ip::tcp::acceptor.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
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

namespace detail {
// The address acceptor's functions (lib/connection/address_acceptor.cpp).
/// Makes an address acceptor on `w` and opens it (`ec` says whether that
/// worked; the acceptor is returned either way).
std::shared_ptr<address_acceptor_impl> open_address_acceptor(const std::shared_ptr<worker_impl>& w,
                                                             std::size_t backlog, error_code& ec);
bool address_acceptor_is_open(const address_acceptor_impl& a) noexcept;
void address_acceptor_close(address_acceptor_impl& a) noexcept;
worker_address address_acceptor_address(const address_acceptor_impl& a);
/// Starts an accept (on the worker's executor).
void address_acceptor_accept(address_acceptor_impl& a, endpoint_op* op) noexcept;
} // namespace detail

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
                detail::address_acceptor_close(*address_);
            listener_ = std::move(other.listener_);
            address_ = std::move(other.address_);
        }
        return *this;
    }
    /// Closes the acceptor (see `close()`).
    ~acceptor() {
        if (address_)
            detail::address_acceptor_close(*address_);
    }

    executor_type get_executor() const noexcept {
        if (listener_)
            return listener_->get_executor();
        return address_ ? detail::core_of(*address_).get_executor() : executor_type();
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
        return detail::address_acceptor_address(*address_);
    }
    /// Whether this is an address acceptor.
    bool is_address_acceptor() const noexcept { return address_ != nullptr; }

    bool is_open() const noexcept {
        return listener_ ? listener_->is_open()
                         : address_ && detail::address_acceptor_is_open(*address_);
    }
    /// Stops accepting; pending accepts fail with `operation_aborted`. Idempotent.
    void close() noexcept {
        if (listener_)
            listener_->close();
        if (address_)
            detail::address_acceptor_close(*address_);
    }
    void close(error_code& ec) noexcept {
        close();
        ec = {};
    }

    /// Accepts the next connection into `s`, which must not be connected
    /// (`asio::error::already_open` otherwise). Cancellable through the
    /// handler's cancellation slot. Completion signature: `void(error_code)`.
    /// Library errors: `ucx::error::allocation_failed` (the address
    /// acceptor's records, or the stream's, as `basic_stream::assign`).
    template <class Executor,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        basic_stream<Executor>& s,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            accept_into_op{listener_ ? &*listener_ : nullptr, address_,
                           detail::access::get_impl(s)},
            token, get_executor());
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
        address_ = detail::open_address_acceptor(detail::checked(w), backlog, ec);
    }

    /// Starts the accept of an endpoint on whichever kind this is.
    template <class Self>
    static void start_accept(ucx::listener* l, std::shared_ptr<detail::address_acceptor_impl> a,
                             Self&& self) {
        // `a` is a copy: `self`, which holds the original, moves away below.
        if (a) {
            detail::initiate<void(error_code, endpoint), detail::endpoint_result>(
                a, std::move(self),
                [](detail::address_acceptor_impl& impl, detail::endpoint_op* op) {
                    detail::address_acceptor_accept(impl, op);
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
            if (!s || detail::stream_has_endpoint(*s)) {
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
                detail::stream_assign(*s, detail::access::get_impl(ep), ec);
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
                return self.complete(ec, empty_stream());
            stream s = empty_stream();
            try {
                s = stream(std::move(ep));
            } catch (const boost::system::system_error& e) {
                ec = e.code();
            }
            self.complete(ec, std::move(s));
        }
    };

    /// A stream without state (what a failed accept completes with).
    static stream empty_stream() noexcept {
        return detail::access::construct<stream>(std::shared_ptr<detail::stream_impl>());
    }

    std::optional<ucx::listener> listener_;
    std::shared_ptr<detail::address_acceptor_impl> address_;
};

} // namespace ucx
