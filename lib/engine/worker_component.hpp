// Internal: what the parts of the library that live on a worker (endpoints,
// listeners, the control channel, the active-message registry, streams)
// implement to plug into its progress engine.
#pragma once

#include <ucx/error.hpp>

#include <cstddef>
#include <cstdint>

namespace ucx {
struct worker_stats;
}

namespace ucx::detail {

class endpoint_impl;

/// The stages of the work done after every ucp_worker_progress call, outside
/// UCX callbacks, in this order. Parts queue work for a stage with
/// `worker_impl::defer` (from their UCX callbacks, or from the owner thread).
/// Work queued for a stage while that stage runs (a part that must look
/// again after the next progress call, such as a stream polling for data)
/// runs in the next pass.
enum class deferred_stage : unsigned char {
    /// Control messages first: a goodbye arrives before the disconnect that
    /// follows it, and must win over the reset UCX reports for it.
    control,
    /// Endpoints whose sends drained during a graceful close.
    close_ready,
    /// Connection requests (listeners, hellos for the address acceptor).
    requests,
    /// Endpoints whose error callback fired.
    failure,
    /// Streams with pending reads, or stream data UCX queued: moving
    /// received stream data to the reads, or out of UCX's queue (UCX has no
    /// callback for stream data; a stream queues itself again while reads
    /// are pending, and the worker queues it when UCX lists it as ready).
    stream_data,
    /// Received messages: active messages, and the batches of standing tag
    /// receives.
    messages,
};
inline constexpr std::size_t deferred_stage_count = 6;
// A bit each in the worker's mask of stages with work queued (one byte).
static_assert(deferred_stage_count <= 8);

/// Which components shutdown ends first: listeners close (rejecting
/// requests), then endpoints are force-closed, then the rest.
enum class component_kind : unsigned char { listener, endpoint, service };
inline constexpr std::size_t component_kind_count = 3;

/// Something that queues work for the stages after progress. The worker
/// knows none of their types: it runs `run_deferred` for each queued stage.
class deferred_work {
public:
    /// Runs the work queued with `worker_impl::defer(*this, stage)`. May
    /// complete operations (`worker_impl::complete`, `finished`), never run
    /// handlers. Returns how many events it handled.
    virtual std::size_t run_deferred(deferred_stage stage) noexcept = 0;

protected:
    deferred_work() noexcept = default;
    ~deferred_work() = default;
    deferred_work(const deferred_work&) = delete;
    deferred_work& operator=(const deferred_work&) = delete;

private:
    friend class worker_impl;
    /// One bit per deferred_stage it is queued for.
    std::uint8_t queued_ = 0;
};

/// A part of the library that lives on a worker for its whole life (an
/// endpoint, a listener, the control channel, the active-message registry):
/// registered with it, and ended by its shutdown.
class worker_component : public deferred_work {
public:
    /// The worker shuts down (its first step): end everything, and leave the
    /// worker (`remove_component`).
    virtual void shutdown() noexcept = 0;
    /// Whether it has work under way that the worker's shutdown lets finish
    /// first (a graceful close whose peer is still there).
    virtual bool finishing() const noexcept { return false; }
    /// Whether it keeps the worker counted as outstanding work of its
    /// io_context (see worker_impl::needed): an endpoint, a listener or a
    /// connection under way does; the library's own services (the control
    /// channel without an address acceptor, the active-message registry) do
    /// not.
    virtual bool keeps_worker_running() const noexcept { return true; }
    /// An endpoint of the worker failed with `ec` (`worker_impl::endpoint_failed`,
    /// called by the endpoint once its own operations know): a service that
    /// keeps work bound to that endpoint ends it. Nothing by default.
    virtual void endpoint_failed(endpoint_impl* /*ep*/, const error_code& /*ec*/) noexcept {}
    /// Adds what it counts to the worker's statistics (`worker::stats`, for
    /// the components the worker holds: the staging of device buffers).
    /// Nothing by default.
    virtual void add_stats(worker_stats& /*s*/) const noexcept {}

    /// The next registered component of the same kind.
    worker_component* next_component() const noexcept { return next_; }

protected:
    explicit worker_component(component_kind kind) noexcept : kind_(kind) {}
    ~worker_component() = default;

private:
    friend class worker_impl;
    worker_component* next_ = nullptr;
    worker_component* prev_ = nullptr;
    component_kind kind_;
    bool linked_ = false;
};

} // namespace ucx::detail
