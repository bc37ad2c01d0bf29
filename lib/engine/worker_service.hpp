// Internal: the services of a worker, found by their type (after Asio's
// execution_context::service and use_service). The parts of the library above
// the engine that a worker has at most one of (the control channel, the
// active-message registry) are services: the worker owns them and ends them
// through the component hooks, without knowing their types.
#pragma once

#include "engine/worker_component.hpp"

#include <cstddef>

namespace ucx {
struct worker_metrics;
}

namespace ucx::detail {

class worker_impl;

/// A part of the library a worker has at most one of, found by its type
/// (`find_service`, `use_service`). It is a component of kind `service`,
/// registered when the worker takes it (`worker_impl::add_service`), so the
/// worker's shutdown ends it and its `keeps_worker_running` counts; the worker
/// owns it until the worker is destroyed, so what holds the worker may still
/// reach it after shutdown. A service type is constructible from
/// `worker_impl&` when `use_service` may create it.
class worker_service : public worker_component {
public:
    /// The UCP worker goes (the last step of shutdown, after every request
    /// called back and the worker's resources were released): services are
    /// released in the reverse order of their coming. Nothing by default.
    virtual void release_service() noexcept {}
    /// Adds what it counts to the worker's metrics (`worker::metrics()`,
    /// from any thread: what it reads must be safe to read there, such as
    /// `counter`s). Nothing by default.
    virtual void add_metrics(worker_metrics& /*m*/) const noexcept {}

protected:
    worker_service() noexcept : worker_component(component_kind::service) {}
    ~worker_service() = default;
};

/// The key of a new service type (an index into the worker's table: looking
/// a service up costs an index, not a search).
std::size_t next_service_key() noexcept;

/// The key of `Service`, taken the first time it is asked for.
template <class Service>
std::size_t service_key() noexcept {
    static const std::size_t key = next_service_key();
    return key;
}

} // namespace ucx::detail
