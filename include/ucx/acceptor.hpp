// ucx::acceptor: accepts ucx::stream connections, mirroring asio::ip::tcp::acceptor.
#pragma once

#include <ucx/listener.hpp>
#include <ucx/stream.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <memory>
#include <utility>

namespace ucx {

/// Accepts connections from `ucx::stream::async_connect` on an address and
/// port, as `asio::ip::tcp::acceptor` does for sockets: porting a TCP server
/// means swapping `tcp::acceptor` for `ucx::acceptor` and `tcp::socket` for
/// `ucx::stream`. Built on `ucx::listener` (one listener per acceptor).
///
/// Closing (or destroying) the acceptor fails pending accepts with
/// `asio::error::operation_aborted`. Movable, not copyable.
class acceptor {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Listens on `bind` (port 0 picks a free port; see `local_endpoint()`).
    /// Throws `boost::system::system_error` (for example when the port is taken).
    acceptor(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options = {})
        : listener_(w, bind, std::move(options)) {}
    /// As above; reports failure through `ec`.
    acceptor(worker& w, const boost::asio::ip::tcp::endpoint& bind, listener_options options,
             error_code& ec)
        : listener_(w, bind, std::move(options), ec) {}

    acceptor(acceptor&&) noexcept = default;
    acceptor& operator=(acceptor&&) noexcept = default;
    ~acceptor() = default;

    executor_type get_executor() const noexcept { return listener_.get_executor(); }

    /// The address and port the acceptor listens on.
    boost::asio::ip::tcp::endpoint local_endpoint() const { return listener_.local_endpoint(); }
    boost::asio::ip::tcp::endpoint local_endpoint(error_code& ec) const {
        return listener_.local_endpoint(ec);
    }

    bool is_open() const noexcept { return listener_.is_open(); }
    /// Stops listening; pending accepts fail with `operation_aborted`. Idempotent.
    void close() noexcept { listener_.close(); }
    void close(error_code& ec) noexcept {
        listener_.close();
        ec = {};
    }

    /// Accepts the next connection into `s`, which must not be connected
    /// (`asio::error::already_open` otherwise). Cancellable through the
    /// handler's cancellation slot. Completion signature: `void(error_code)`.
    template <class Executor,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        basic_stream<Executor>& s,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_compose<CompletionToken, void(error_code)>(
            accept_into_op{&listener_, s.impl()}, token, get_executor());
    }

    /// Accepts the next connection as a new stream. Cancellable.
    /// Completion signature: `void(error_code, ucx::stream)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_accept(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return boost::asio::async_compose<CompletionToken, void(error_code, stream)>(
            accept_new_op{&listener_}, token, get_executor());
    }

    /// The underlying listener.
    ucx::listener& listener() noexcept { return listener_; }

private:
    struct accept_into_op {
        ucx::listener* l;
        std::shared_ptr<detail::stream_impl> s;

        template <class Self>
        void operator()(Self& self) {
            if (!s || s->endpoint()) {
                const auto ex = l->get_executor();
                return boost::asio::post(ex, [self = std::move(self)]() mutable {
                    self.complete(boost::asio::error::already_open);
                });
            }
            l->async_accept(std::move(self));
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

        template <class Self>
        void operator()(Self& self) {
            l->async_accept(std::move(self));
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

    ucx::listener listener_;
};

} // namespace ucx
