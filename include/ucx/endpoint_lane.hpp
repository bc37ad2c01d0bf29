// ucx::endpoint_lane: a transport and device UCX chose for part of an
// endpoint's traffic (endpoint::lanes()).
#pragma once

#include <string>
#include <vector>

namespace ucx {

/// One lane of an endpoint: a transport on a device that UCX chose, when it
/// connected the endpoint, for some of its traffic. UCX picks the lanes from
/// the transports both sides share (context_options::transports,
/// `UCX_TLS`) by its own estimate of their speed.
struct endpoint_lane {
    /// The lane's number in the endpoint.
    int index = -1;
    /// UCX's name of the transport: `tcp`, `posix` and `sysv` (shared
    /// memory), `cma` (cross-memory attach), `self`, `rc_mlx5`, `dc_mlx5`,
    /// `ud_verbs` (InfiniBand), `cuda_copy`, `cuda_ipc`, `gdr_copy`, ...; for
    /// the connection manager's lane, the manager's name (`tcp`, `rdmacm`).
    std::string transport;
    /// The device: `lo`, `eth0` (a network interface), `memory` (shared
    /// memory, `cma`), `mlx5_0:1` (a port of an InfiniBand adapter), `cuda`
    /// (`cuda_copy`), ...; empty for the connection manager's lane.
    std::string device;
    /// What UCX uses the lane for, in UCX's words and order: `rma#N` (small
    /// puts and gets), `rma_bw#N` (rendezvous data, large puts and gets),
    /// `amo#N` (atomics), `am` (active messages, which carry eager tag,
    /// stream and active messages), `am_bw#N` (large messages sent as active
    /// messages), `tag_offload` (tag matching in the adapter), `wireup`
    /// (connection set-up), `cm` (the connection manager's lane); `#N` is the
    /// lane's rank among those of one use (0 first).
    std::vector<std::string> uses;

    bool operator==(const endpoint_lane&) const = default;
};

} // namespace ucx
