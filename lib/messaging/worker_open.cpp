// The public worker's constructor, above the layers whose services a worker
// opens with it: the engine (lib/engine/worker.cpp) knows none of them, and
// takes them as a function to call while it opens.
#include <ucx/worker.hpp>

#include "connection/control_channel.hpp"
#include "core/context_impl.hpp"
#include "engine/worker_impl.hpp"
#include "gpu/device_staging.hpp"
#include "messaging/am_registry.hpp"

#include <memory>

namespace ucx {
namespace detail {
namespace {

/// Active messages carry the control channel, and the registry on top; both
/// serve the peers from the start (a message that arrives before the
/// application asks for its id is queued, not lost). The channel exists, not
/// open, without active messages: the connection layer asks it. Device
/// buffers go through host memory where UCX cannot move them; where it can,
/// only the collectives' arithmetic needs host copies.
void open_worker_services(worker_impl& w) {
    control_channel& channel = control_channel::of(w);
    if ((w.context().features() & feature::am) == feature::am && channel.open())
        open_am_registry(w);
    w.set_staging(make_device_staging(w));
}

} // namespace
} // namespace detail

worker::worker(const context& ctx, const executor_type& ex, const worker_options& options)
    : impl_(std::make_shared<detail::worker_impl>(detail::access::get_impl(ctx), ex, options)) {
    impl_->open(&detail::open_worker_services);
}

} // namespace ucx
