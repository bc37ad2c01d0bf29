#include <ucx/error.hpp>
#include <ucx/log.hpp>

#include "address_acceptor.hpp"
#include "worker_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <string>

namespace ucx::detail {

namespace {

void ignore_error(void*, ucp_ep_h, ucs_status_t) noexcept {}

/// The endpoint to answer a refused connection on: an endpoint created to
/// the connector keeps UCX's pairing of endpoints between the two workers
/// in step, and is the reply endpoint itself; else the reply endpoint.
ucp_ep_h paired(worker_impl& w, ucp_ep_h reply_ep, const worker_address& peer) noexcept {
    if (peer.empty())
        return reply_ep;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer.ucx_bytes().data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &ignore_error;
    params.err_handler.arg = nullptr;
    ucp_ep_h ep = nullptr;
    if (ucp_ep_create(w.native(), &params, &ep) != UCS_OK)
        return reply_ep;
    if (ep != reply_ep) {
        w.close_ucp_endpoint(ep, true);
        return reply_ep;
    }
    return ep;
}

/// Says `refused`, then closes the endpoint (flush: the answer goes first).
void refuse(worker_impl& w, ucp_ep_h ep, bool owned) noexcept {
    w.send_control(ep, control_message{control_type::refused, 0});
    if (owned)
        w.close_ucp_endpoint(ep, false);
}

} // namespace

void take_hello(worker_impl& w, control_channel& channel, ucp_ep_h reply_ep,
                const control_message& hello, std::span<const std::byte> address) noexcept {
    try {
        // The connector's address in its wire form. Checked here, before
        // UCX's address parser sees it (that one aborts the process on
        // garbage): a malformed one leaves `peer` empty and is refused.
        error_code ec;
        const worker_address peer = worker_address::deserialize(address, ec);
        hello_taker* acceptor = peer.empty() ? nullptr : channel.taker_for(peer);
        if (acceptor && acceptor->has_room()) {
            try {
                auto e = std::make_shared<endpoint_impl>(w.shared_from_this());
                e->accept_address(reply_ep, hello, peer, acceptor->timeouts(), ec);
                if (!ec) {
                    acceptor->offer(std::move(e), peer);
                    return;
                }
                log::write(log::severity::warning,
                           "address acceptor: accepting failed: " + ec.message());
                refuse(w, reply_ep, false);
                return;
            } catch (...) {
                log::write(log::severity::warning, "address acceptor: out of memory");
            }
        } else {
            log::write(log::severity::info,
                       peer.empty() ? "address acceptor: hello without a valid address, refused"
                       : acceptor   ? "address acceptor: backlog full, connection refused"
                                    : "no address acceptor: connection refused");
        }
        refuse(w, paired(w, reply_ep, peer), true);
    } catch (...) {
        // Unanswered: the connector waits for its peer's failure or a cancel.
    }
}

address_acceptor_impl::address_acceptor_impl(std::shared_ptr<worker_impl> w, std::size_t backlog)
    : worker_(std::move(w)), backlog_(std::max<std::size_t>(1, backlog)) {}

address_acceptor_impl::~address_acceptor_impl() {
    close();
}

void address_acceptor_impl::open(error_code& ec) {
    if (ec = worker_->accept_support(); ec)
        return;
    if (attached_) {
        ec = {};
        return;
    }
    if (!worker_->control().attach_acceptor(this)) {
        ec = boost::asio::error::address_in_use;
        return;
    }
    attached_ = true;
    ec = {};
}

void address_acceptor_impl::close() noexcept {
    if (attached_) {
        worker_->control().detach_acceptor(this);
        attached_ = false;
    }
    queue_.close(); // the connectors of unaccepted connections see a reset
}

void address_acceptor_impl::channel_gone() noexcept {
    // The worker shuts down: it has completed the pending accepts already
    // (as operation_aborted) and detached the endpoints.
    attached_ = false;
    queue_.clear();
}

bool address_acceptor_impl::offer(std::shared_ptr<endpoint_impl> ep,
                                  const worker_address&) noexcept {
    return has_room() && queue_.offer(std::move(ep));
}

connection_timeouts address_acceptor_impl::timeouts() const noexcept {
    const worker_options& o = worker_->options();
    return {o.peer_timeout, o.handshake_timeout};
}

void address_acceptor_impl::accept(endpoint_op* op) noexcept {
    queue_.accept(op, attached_);
}

} // namespace ucx::detail
