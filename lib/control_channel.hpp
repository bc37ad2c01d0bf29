// Internal: the worker's control channel. It owns the library's control
// active-message id (`control_am_id`): sends control messages, decodes the
// received ones inside the UCX callback, and routes them after progress to
// the endpoint registered for their UCP endpoint or, for a hello over a UCP
// endpoint the worker does not know (a peer that connected from a worker
// address), to the listener that expects that peer (its handshake passed the
// listener's door) or else to the worker's address acceptor.
#pragma once

#include <ucx/worker_address.hpp>

#include "control_message.hpp"
#include "worker_component.hpp"

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ucx::detail {

class endpoint_impl;
class worker_impl;
struct connection_timeouts;

/// Something that takes connections from worker addresses: the address
/// acceptor (any peer), or a listener (the peers its door admitted).
class hello_taker {
public:
    /// Whether the hello of the worker at `peer` is for it.
    virtual bool expects(const worker_address& peer) const noexcept = 0;
    /// Whether another connection fits in its backlog.
    virtual bool has_room() const noexcept = 0;
    /// The timeouts of the connections it takes.
    virtual connection_timeouts timeouts() const noexcept = 0;
    /// A connection from `peer` whose handshake is done; false when it
    /// could not be queued.
    virtual bool offer(std::shared_ptr<endpoint_impl> ep, const worker_address& peer) noexcept = 0;
    /// The worker's control channel goes away (the worker shuts down).
    virtual void channel_gone() noexcept = 0;

protected:
    ~hello_taker() = default;
};

class control_channel final : public worker_component {
public:
    explicit control_channel(worker_impl& w) noexcept
        : worker_component(component_kind::service), worker_(w) {}
    ~control_channel();

    /// Installs the control-message handler on the (new) UCP worker; false
    /// when the context has no active messages.
    bool open() noexcept;
    bool is_open() const noexcept { return open_; }

    /// Sends `m` on `ep`, fire and forget: counted as the worker's internal
    /// work, so shutdown waits for it. `payload` goes as the message's data
    /// (the hello of a connection from a worker address: that worker's address).
    /// The buffers UCX reads until the send completes (UCX 1.13 cannot copy an
    /// AM header) are recycled, so steady control traffic (a stream's
    /// acknowledgements) allocates nothing. False when the message could not
    /// be handed to UCX.
    bool send(ucp_ep_h ep, const control_message& m, std::vector<std::byte> payload = {}) noexcept;

    /// Routes the control messages that arrive over `ep` to `impl`.
    void map(ucp_ep_h ep, endpoint_impl* impl);
    void unmap(ucp_ep_h ep) noexcept;
    /// The endpoint mapped to a UCP endpoint, or null. Every active message
    /// looks up its sender: the last answer is remembered (most traffic
    /// comes from the peer of the last message) until the map changes.
    endpoint_impl* find(ucp_ep_h ep) const noexcept {
        if (ep != nullptr && ep == last_found_ep_)
            return last_found_;
        auto it = endpoints_.find(ep);
        endpoint_impl* impl = it == endpoints_.end() ? nullptr : it->second;
        last_found_ep_ = ep;
        last_found_ = impl;
        return impl;
    }
    /// Control messages dropped as malformed or unroutable.
    std::size_t dropped() const noexcept { return dropped_; }

    /// Sends the hellos over unknown endpoints to `a` from now on; false when
    /// another address acceptor has them. Once a taker was attached, hellos
    /// nobody expects are refused (rather than dropped).
    bool attach_acceptor(hello_taker* a) noexcept;
    void detach_acceptor(hello_taker* a) noexcept;
    /// A listener takes the hellos of the peers it `expects` (before the
    /// address acceptor) until detached.
    void attach_door(hello_taker* d);
    void detach_door(hello_taker* d) noexcept;
    /// The taker of a hello from `peer`: a door that expects it, else the
    /// address acceptor (null: refused).
    hello_taker* taker_for(const worker_address& peer) const noexcept;

    std::size_t run_deferred(deferred_stage stage) noexcept override;
    /// Drops what is queued (the worker shuts down).
    void shutdown() noexcept override;
    /// An address acceptor waits for peers.
    bool keeps_worker_running() const noexcept override { return acceptor_ != nullptr; }
    /// The UCP worker goes: the acceptor is told.
    void release() noexcept;

private:
    static ucs_status_t on_message(void* arg, const void* header, std::size_t header_length,
                                   void* data, std::size_t length,
                                   const ucp_am_recv_param_t* param) noexcept;
    static void sent(void* request, ucs_status_t status, void* user_data) noexcept;
    std::size_t route() noexcept;
    struct send_state;
    send_state* take_state() noexcept;
    void recycle(send_state* s) noexcept;
    std::size_t take_hellos() noexcept;

    struct pending_hello {
        ucp_ep_h reply_ep;
        control_message hello;
        std::vector<std::byte> address; // the connector's worker address
    };

    worker_impl& worker_;
    bool open_ = false;
    std::unordered_map<ucp_ep_h, endpoint_impl*> endpoints_;
    mutable ucp_ep_h last_found_ep_ = nullptr;
    mutable endpoint_impl* last_found_ = nullptr;
    std::vector<std::pair<ucp_ep_h, control_message>> queue_;
    std::vector<std::pair<ucp_ep_h, control_message>> spare_;
    std::vector<pending_hello> hellos_;
    std::vector<pending_hello> hellos_spare_;
    hello_taker* acceptor_ = nullptr;
    std::vector<hello_taker*> doors_;
    /// Whether hellos over unknown endpoints are taken (an acceptor was attached).
    bool takes_hellos_ = false;
    std::size_t dropped_ = 0;
    /// Send buffers whose send completed, for the next control messages.
    std::vector<send_state*> free_states_;
};

} // namespace ucx::detail
