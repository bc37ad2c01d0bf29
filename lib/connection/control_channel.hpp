// Internal: the worker's control channel. It owns the library's control
// active-message id (`control_am_id`): sends control messages, decodes the
// received ones inside the UCX callback, and routes them after progress to
// the endpoint registered for their UCP endpoint or, for a hello over a UCP
// endpoint the worker does not know (a peer that connected from a worker
// address), to the listener that expects that peer (its handshake passed the
// listener's door) or else to the worker's address acceptor.
#pragma once

#include <ucx/worker_address.hpp>

#include "connection/control_message.hpp"
#include "engine/worker_impl.hpp"
#include "engine/worker_service.hpp"
#include "util/guarded_timer.hpp"

#include <ucp/api/ucp.h>

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
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
    /// Whether the hello of the worker at `peer` is for it. `ticket` is the
    /// door ticket the hello carried (empty for a connection made from a
    /// worker address alone): one worker may connect many times at once, and
    /// the ticket says which of its door handshakes a hello follows.
    virtual bool expects(const worker_address& peer,
                         std::span<const std::byte> ticket) const noexcept = 0;
    /// Whether another connection fits in its backlog.
    virtual bool has_room() const noexcept = 0;
    /// The timeouts of the connections it takes.
    virtual connection_timeouts timeouts() const noexcept = 0;
    /// A connection from `peer` (with `ticket`, as `expects`) whose handshake
    /// is done; false when it could not be queued.
    virtual bool offer(std::shared_ptr<endpoint_impl> ep, const worker_address& peer,
                       std::span<const std::byte> ticket) noexcept = 0;
    /// The worker's control channel goes away (the worker shuts down).
    virtual void channel_gone() noexcept = 0;
    /// Whether its connections get fabric ids (fabric_tag):
    /// the worker's address acceptor's do (a group's fabric holds it while
    /// the worker has a group), a listener's do not.
    virtual bool fabric_ids() const noexcept { return false; }

protected:
    ~hello_taker() = default;
};

/// A service of the worker (worker_service), made and opened with it
/// (lib/messaging/worker_open.cpp), before any connection.
class control_channel final : public worker_service {
public:
    explicit control_channel(worker_impl& w) noexcept : worker_(w) {}
    ~control_channel();

    /// The control channel of `w`.
    static control_channel& of(worker_impl& w) { return use_service<control_channel>(w); }

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
    /// The taker of a hello from `peer` with `ticket`: a door that expects
    /// it, else the address acceptor (null: refused).
    hello_taker* taker_for(const worker_address& peer,
                           std::span<const std::byte> ticket) const noexcept;

    /// The UCP endpoint, created by this worker, that UCX pairs with the
    /// peer's connection whose messages arrive over `reply_ep` (the endpoint
    /// UCX made for it), or null when none could be had. The caller owns it.
    /// Its errors reach the endpoint mapped to it (`map`).
    ///
    /// UCX pairs the n-th endpoint a worker creates to a peer worker's
    /// address with the n-th that peer created to it, whatever order their
    /// first messages come in. A peer making many connections at once has
    /// their hellos arrive out of that order; so this creates endpoints until
    /// UCX answers with `reply_ep`, and keeps the others, each paired with
    /// one of the peer's connections whose hello is still to come, for
    /// those hellos (at most `max_unclaimed`; unclaimed for the worker's
    /// handshake timeout, or failed, they are closed).
    ucp_ep_h own_endpoint(ucp_ep_h reply_ep, const worker_address& peer) noexcept;
    /// Endpoints created for hellos still to come.
    std::size_t unclaimed() const noexcept { return unclaimed_.size(); }

    /// Fills `params` (a UCP endpoint's) to connect this worker to itself.
    /// UCX makes an endpoint that a worker creates to its own address a loop
    /// to itself: both ends of the connection would be that one UCP
    /// endpoint, and the peer's hello would come back on the connector's own
    /// endpoint. So a connection of a worker to its own listener or acceptor
    /// goes through UCX's connection manager, to a listener of this channel
    /// on the loopback address (made at the first such connection): UCX
    /// pairs the endpoint it makes for the request with the connector's, and
    /// that endpoint waits, unclaimed (as `own_endpoint`'s), for the hello.
    /// `ec`: the error of creating that listener (UCX's connection manager
    /// missing from the context, say).
    void self_connect_params(ucp_ep_params_t& params, error_code& ec) noexcept;
    static constexpr std::size_t max_unclaimed = 1024;

    std::size_t run_deferred(deferred_stage stage) noexcept override;
    /// Drops what is queued (the worker shuts down), and leaves the
    /// components: after the listeners and the endpoints, which may still
    /// send control messages as they end.
    void shutdown() noexcept override;
    /// An address acceptor waits for peers.
    bool keeps_worker_running() const noexcept override { return acceptor_ != nullptr; }
    /// The UCP worker goes: the acceptor is told.
    void release_service() noexcept override;

    /// The heartbeats of the worker's connections, counted by their
    /// endpoints (owner thread), read by `worker::metrics()` (any thread).
    struct liveness_counters {
        counter pings;
        counter pongs;
        counter unresponsive;
        histogram_counters round_trip;
    };
    liveness_counters& liveness() noexcept { return liveness_; }
    void add_metrics(worker_metrics& m) const noexcept override;

private:
    liveness_counters liveness_;
    static ucs_status_t on_message(void* arg, const void* header, std::size_t header_length,
                                   void* data, std::size_t length,
                                   const ucp_am_recv_param_t* param) noexcept;
    static void sent(void* request, ucs_status_t status, void* user_data) noexcept;
    std::size_t route() noexcept;
    struct send_state;
    send_state* take_state() noexcept;
    void recycle(send_state* s) noexcept;
    std::size_t take_hellos() noexcept;
    static void owned_error(void* arg, ucp_ep_h ep, ucs_status_t status) noexcept;
    /// Closes the unclaimed endpoints that failed or waited too long.
    void sweep_unclaimed() noexcept;
    void arm_unclaimed_timer() noexcept;
    /// Keeps `ep`, made by this worker for a peer's connection whose hello
    /// is still to come; false (and `ep` closed) when there is no room.
    bool keep_unclaimed(ucp_ep_h ep) noexcept;
    static void self_request(ucp_conn_request_h request, void* arg) noexcept;
    void take_self_requests() noexcept;
    void close_self_listener() noexcept;

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

    struct unclaimed_endpoint {
        ucp_ep_h ep;
        std::chrono::steady_clock::time_point deadline;
        bool failed = false;
    };
    std::vector<unclaimed_endpoint> unclaimed_;
    std::unique_ptr<guarded_timer> unclaimed_timer_;

    /// The listener for connections of this worker to itself, and its address.
    ucp_listener_h self_listener_ = nullptr;
    sockaddr_in self_address_{};
    std::vector<ucp_conn_request_h> self_requests_;
};

/// The endpoint of `w` mapped to a UCP endpoint, or null (see control_channel::find).
inline endpoint_impl* find_endpoint(worker_impl& w, ucp_ep_h ep) noexcept {
    return control_channel::of(w).find(ep);
}
/// Whether `w` has its control channel open: the context has active
/// messages (needed for connected endpoints).
bool has_control_channel(const worker_impl& w) noexcept;
/// Whether connections can be accepted on `w`: `bad_descriptor` when it is
/// closed, `error::feature_not_enabled` without the control channel (the
/// context has no active messages).
error_code accept_support(const worker_impl& w) noexcept;

} // namespace ucx::detail
