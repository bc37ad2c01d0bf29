#include <ucx/acceptor.hpp>
#include <ucx/error.hpp>
#include <ucx/log.hpp>

#include "connection/address_acceptor.hpp"
#include "connection/control_channel.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <string>

namespace ucx::detail {

namespace {

/// Says `refused`, then closes the endpoint (flush: the answer goes first).
void refuse(worker_impl& w, ucp_ep_h ep, bool owned) noexcept {
    control_channel::of(w).send(ep, control_message{control_type::refused, 0});
    if (owned)
        w.close_ucp_endpoint(ep, false);
}

} // namespace

void take_hello(worker_impl& w, control_channel& channel, ucp_ep_h reply_ep,
                const control_message& hello, std::span<const std::byte> payload) noexcept {
    try {
        // The connector's address in its wire form. Checked here, before
        // UCX's address parser sees it (that one aborts the process on
        // garbage): a malformed one leaves `peer` empty and is refused.
        const auto [address, ticket] = split_hello_payload(payload);
        error_code ec;
        const worker_address peer = worker_address::deserialize(address, ec);
        hello_taker* acceptor = peer.empty() ? nullptr : channel.taker_for(peer, ticket);
        if (acceptor && acceptor->has_room()) {
            ucp_ep_h own = channel.own_endpoint(reply_ep, peer);
            if (own == nullptr) {
                log::write(log::severity::warning,
                           "address acceptor: no endpoint of this worker pairs with the "
                           "connection: refused");
                refuse(w, reply_ep, false);
                return;
            }
            std::shared_ptr<endpoint_impl> e;
            try {
                e = std::make_shared<endpoint_impl>(w.shared_from_this());
            } catch (...) {
                log::write(log::severity::warning, "address acceptor: out of memory");
                refuse(w, own, true);
                return;
            }
            if (acceptor->fabric_ids())
                e->mark_fabric();
            e->accept_address(own, hello, acceptor->timeouts(), ec);
            if (!ec) {
                acceptor->offer(std::move(e), peer, ticket);
                return;
            }
            // accept_address closed `own` (the endpoint the hello came on):
            // nothing is left to answer on, and the connector sees the close.
            log::write(log::severity::warning,
                       "address acceptor: accepting failed: " + ec.message());
            return;
        }
        log::write(log::severity::info,
                   peer.empty() ? "address acceptor: hello without a valid address, refused"
                   : acceptor   ? "address acceptor: backlog full, connection refused"
                                : "no address acceptor: connection refused");
        // Refused on this worker's own endpoint for the connection, if it can
        // have it: that keeps UCX's pairing of endpoints between the two
        // workers in step (see control_channel::own_endpoint).
        ucp_ep_h own = peer.empty() ? nullptr : channel.own_endpoint(reply_ep, peer);
        refuse(w, own ? own : reply_ep, own != nullptr);
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
    if (ec = accept_support(*worker_); ec)
        return;
    if (attached_) {
        ec = {};
        return;
    }
    if (!control_channel::of(*worker_).attach_acceptor(this)) {
        ec = boost::asio::error::address_in_use;
        return;
    }
    attached_ = true;
    ec = {};
}

void address_acceptor_impl::close() noexcept {
    if (attached_) {
        control_channel::of(*worker_).detach_acceptor(this);
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

bool address_acceptor_impl::offer(std::shared_ptr<endpoint_impl> ep, const worker_address&,
                                  std::span<const std::byte>) noexcept {
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

// The non-template functions the public headers' templates call (<ucx/acceptor.hpp>): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

worker_core& core_of(const address_acceptor_impl& a) noexcept {
    return *a.worker();
}
std::shared_ptr<address_acceptor_impl> open_address_acceptor(const std::shared_ptr<worker_impl>& w,
                                                             std::size_t backlog, error_code& ec) {
    auto a = std::make_shared<address_acceptor_impl>(w, backlog);
    a->open(ec);
    return a;
}
bool address_acceptor_is_open(const address_acceptor_impl& a) noexcept {
    return a.is_open();
}
void address_acceptor_close(address_acceptor_impl& a) noexcept {
    a.close();
}
worker_address address_acceptor_address(const address_acceptor_impl& a) {
    return a.worker()->address();
}
void address_acceptor_accept(address_acceptor_impl& a, endpoint_op* op) noexcept {
    op->kind = operation_kind::accept;
    a.accept(op);
}

} // namespace ucx::detail
