// Internal: the state behind an address acceptor (`ucx::acceptor(worker&)`).
// The worker's control channel hands it the hellos that arrive over a UCP
// endpoint UCX made for a peer that connected from a worker address; it pairs
// an endpoint with each, or refuses the connection.
#pragma once

#include <ucx/detail/operation.hpp>

#include "connection/accept_queue.hpp"
#include "connection/control_channel.hpp"
#include "connection/control_message.hpp"
#include "connection/endpoint_impl.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <span>

namespace ucx::detail {

class worker_impl;

/// A hello over `reply_ep`, a UCP endpoint the worker does not know, from
/// the peer whose worker address (wire form, then the door ticket if the
/// connection passed a listener's door) is `payload`: accepted by the
/// channel's taker for that peer when it has room, else refused (owner
/// thread, after progress).
void take_hello(worker_impl& w, control_channel& channel, ucp_ep_h reply_ep,
                const control_message& hello, std::span<const std::byte> payload) noexcept;

/// Takes the connections from a worker address. One per worker at a time.
class address_acceptor_impl final : public hello_taker,
                                    public std::enable_shared_from_this<address_acceptor_impl> {
public:
    address_acceptor_impl(std::shared_ptr<worker_impl> w, std::size_t backlog);
    ~address_acceptor_impl();
    address_acceptor_impl(const address_acceptor_impl&) = delete;
    address_acceptor_impl& operator=(const address_acceptor_impl&) = delete;

    const std::shared_ptr<worker_impl>& worker() const noexcept { return worker_; }
    /// Starts taking connections (owner thread). `address_in_use` when the
    /// worker has an open address acceptor already.
    void open(error_code& ec);
    bool is_open() const noexcept { return attached_; }
    /// Refuses later connections, drops unaccepted ones, aborts accepts. Idempotent.
    void close() noexcept;
    /// Starts an accept (owner thread); completes with an endpoint.
    void accept(endpoint_op* op) noexcept;

    // hello_taker: any peer.
    bool expects(const worker_address&, std::span<const std::byte>) const noexcept override {
        return true;
    }
    bool has_room() const noexcept override { return queue_.ready() < backlog_; }
    connection_timeouts timeouts() const noexcept override;
    bool offer(std::shared_ptr<endpoint_impl> ep, const worker_address& peer,
               std::span<const std::byte> ticket) noexcept override;
    void channel_gone() noexcept override;
    /// Its connections get fabric ids (see hello_taker::fabric_ids).
    bool fabric_ids() const noexcept override { return true; }

private:
    std::shared_ptr<worker_impl> worker_;
    std::size_t backlog_;
    bool attached_ = false;
    accept_queue queue_{*worker_};
};

} // namespace ucx::detail
