// Internal: what the parts of the library that live on a worker (endpoints,
// listeners, the control channel, the active-message registry) implement to
// plug into its progress engine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ucx::detail {

/// The stages of the work done after every ucp_worker_progress call, outside
/// UCX callbacks, in this order. Components queue work for a stage from their
/// UCX callbacks with `worker_impl::defer`.
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
    // (the progress observers run here)
    /// Received active messages.
    messages,
};
inline constexpr std::size_t deferred_stage_count = 5;

/// Which components shutdown ends first: listeners close (rejecting
/// requests), then endpoints are force-closed, then the rest.
enum class component_kind : unsigned char { listener, endpoint, service };
inline constexpr std::size_t component_kind_count = 3;

/// A part of the library that lives on a worker (an endpoint, a listener,
/// the active-message registry). The worker knows none of their types: it
/// runs their deferred work after progress and ends them at shutdown.
class worker_component {
public:
    /// Runs the work queued with `worker_impl::defer(*this, stage)`. May
    /// queue operations with `worker_impl::finished`, never run handlers.
    /// Returns how many events it handled.
    virtual std::size_t run_deferred(deferred_stage stage) noexcept = 0;
    /// The worker shuts down (its first step): end everything, and leave the
    /// worker (`remove_component`).
    virtual void shutdown() noexcept = 0;

    /// The next registered component of the same kind.
    worker_component* next_component() const noexcept { return next_; }

protected:
    explicit worker_component(component_kind kind) noexcept : kind_(kind) {}
    ~worker_component() = default;
    worker_component(const worker_component&) = delete;
    worker_component& operator=(const worker_component&) = delete;

private:
    friend class worker_impl;
    worker_component* next_ = nullptr;
    worker_component* prev_ = nullptr;
    component_kind kind_;
    bool linked_ = false;
    /// One bit per deferred_stage it is queued for.
    std::uint8_t queued_ = 0;
};

} // namespace ucx::detail
