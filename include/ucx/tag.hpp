// Tag-matched messaging: async_tag_send and async_tag_recv.
#pragma once

#include <ucx/detail/endpoint_impl.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/worker_impl.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <cstdint>
#include <tuple>

namespace ucx {

/// A UCX message tag.
using tag_t = std::uint64_t;

/// The mask that matches a tag exactly.
inline constexpr tag_t tag_mask_full = ~tag_t{0};

namespace detail {

struct tag_send_result {
    static auto extract(const error_code& ec, const operation& op) {
        return std::tuple<error_code, std::size_t>(ec, ec ? 0 : op.bytes);
    }
};

struct tag_recv_result {
    static auto extract(const error_code& ec, const operation& op) {
        return std::tuple<error_code, std::size_t, tag_t>(ec, ec ? 0 : op.bytes,
                                                          ec ? 0 : op.sender_tag);
    }
};

/// Installed in a handler's cancellation slot: UCX can cancel tag receives.
class tag_recv_canceller {
public:
    explicit tag_recv_canceller(operation* op) noexcept : op_(op) {}
    void operator()(boost::asio::cancellation_type type) const noexcept {
        using ct = boost::asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none)
            return;
        if (op_->owner)
            op_->owner->cancel(op_);
        else
            op_->cancel_requested = true; // not yet submitted
    }

private:
    operation* op_;
};

template <class Handler, class Result>
using worker_operation = handler_operation<Handler, worker_impl::executor_type, Result>;

struct initiate_tag_send {
    template <class Handler>
    void operator()(Handler&& handler, std::shared_ptr<endpoint_impl> ep,
                    boost::asio::const_buffer data, tag_t tag) const {
        using op_type = worker_operation<std::decay_t<Handler>, tag_send_result>;
        worker_impl& w = *ep->worker();
        auto* op = op_type::create(std::move(handler), w.get_executor());
        w.run_on_owner([ep = std::move(ep), op, data, tag] {
            ep->tag_send(op, data.data(), data.size(), tag);
        });
    }
};

struct initiate_tag_recv {
    template <class Handler>
    void operator()(Handler&& handler, std::shared_ptr<worker_impl> w,
                    boost::asio::mutable_buffer data, tag_t tag, tag_t mask) const {
        using op_type = worker_operation<std::decay_t<Handler>, tag_recv_result>;
        auto* op = op_type::create(std::move(handler), w->get_executor());
        auto slot = boost::asio::get_associated_cancellation_slot(op->handler());
        if (slot.is_connected())
            slot.template emplace<tag_recv_canceller>(op);
        worker_impl* raw = w.get();
        raw->run_on_owner([w = std::move(w), op, data, tag, mask] {
            w->tag_recv(op, data.data(), data.size(), tag, mask);
        });
    }
};

inline const std::shared_ptr<endpoint_impl>& checked(const endpoint& ep) {
    if (!ep.impl())
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx: operation on an endpoint that was never connected");
    return ep.impl();
}

inline const std::shared_ptr<worker_impl>& checked(const worker& w) {
    if (!w.impl())
        throw boost::system::system_error(boost::asio::error::bad_descriptor,
                                          "ucx: operation on a moved-from worker");
    return w.impl();
}

} // namespace detail

/// Sends `data` to the peer of `ep`, tagged `tag`.
///
/// Completion signature: `void(error_code ec, std::size_t bytes_sent)`.
/// The buffer must stay valid until the completion handler is invoked. The
/// handler runs on its associated executor (by default the worker's), never
/// inside this call, even when UCX completes the send at once.
///
/// Errors: the endpoint's failure code after a peer failure;
/// `asio::error::bad_descriptor` on a closed endpoint;
/// `asio::error::operation_aborted` if the endpoint or worker is closed while
/// the send is in flight. Sends cannot be cancelled individually (UCX does not
/// support it); the cancellation slot is ignored.
///
/// Throws `boost::system::system_error` if `ep` was never connected.
template <class CompletionToken = boost::asio::default_completion_token_t<endpoint::executor_type>>
auto async_tag_send(
    endpoint& ep, boost::asio::const_buffer data, tag_t tag,
    CompletionToken&& token = boost::asio::default_completion_token_t<endpoint::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t)>(
        detail::initiate_tag_send{}, token, detail::checked(ep), data, tag);
}

/// Receives one message whose tag matches `tag` under `mask`
/// (`(sender_tag & mask) == (tag & mask)`) from any endpoint of `w`.
///
/// Completion signature:
/// `void(error_code ec, std::size_t bytes_received, tag_t sender_tag)`.
/// A message larger than the buffer fails with `errc::message_truncated`
/// (no partial data is reported as success). The handler never runs inside
/// this call.
///
/// Cancellation: supports `terminal`, `partial` and `total` cancellation
/// through the handler's associated cancellation slot; the operation then
/// completes with `asio::error::operation_aborted` once UCX has released the
/// buffer. Emit cancellation from the worker's executor.
///
/// Throws `boost::system::system_error` if `w` was moved from.
template <class CompletionToken = boost::asio::default_completion_token_t<worker::executor_type>>
auto async_tag_recv(
    worker& w, boost::asio::mutable_buffer data, tag_t tag, tag_t mask,
    CompletionToken&& token = boost::asio::default_completion_token_t<worker::executor_type>()) {
    return boost::asio::async_initiate<CompletionToken, void(error_code, std::size_t, tag_t)>(
        detail::initiate_tag_recv{}, token, detail::checked(w), data, tag, mask);
}

} // namespace ucx
