// ucx::context: a UCP context (the UCX library instance) and its options.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/error.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ucx {

/// UCP features a context is created with. Combine with `|`.
enum class feature : std::uint64_t {
    tag = UCP_FEATURE_TAG,
    rma = UCP_FEATURE_RMA,
    amo32 = UCP_FEATURE_AMO32,
    amo64 = UCP_FEATURE_AMO64,
    stream = UCP_FEATURE_STREAM,
    am = UCP_FEATURE_AM,
    /// Required for the `event` and `hybrid` progress modes; always added.
    wakeup = UCP_FEATURE_WAKEUP,
    all = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 |
          UCP_FEATURE_STREAM | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
};

constexpr feature operator|(feature a, feature b) noexcept {
    return static_cast<feature>(static_cast<std::uint64_t>(a) | static_cast<std::uint64_t>(b));
}
constexpr feature operator&(feature a, feature b) noexcept {
    return static_cast<feature>(static_cast<std::uint64_t>(a) & static_cast<std::uint64_t>(b));
}

/// Which UCX transports a context may use. All are enabled by default, which
/// leaves UCX's choice (and `UCX_TLS` from the environment) alone; disabling
/// any of them sets `UCX_TLS` to "all but those". `self` (loopback within a
/// worker) is always enabled.
struct transports {
    bool tcp = true;           ///< TCP sockets ("tcp"); needed for host:port connections.
    bool shared_memory = true; ///< Memory-mapped shared memory: posix, sysv, xpmem ("mm").
    bool cma = true;           ///< Cross-memory attach between processes ("cma").
    bool rdma = true;          ///< InfiniBand / RoCE verbs ("ib").
    bool cuda_copy = true;     ///< Staging of CUDA memory ("cuda_copy").
    bool nvlink = true;        ///< CUDA IPC over NVLink/PCIe ("cuda_ipc").
};

/// GPU settings of a context. They take effect only in a library built with
/// CUDA (`built_with_cuda()`); elsewhere only `create_context` is looked at
/// (and fails).
struct cuda_options {
    /// Make the CUDA primary context of `device` current on the constructing
    /// thread before UCX initialises (`cudaSetDevice`, then a call that
    /// creates the context), so that UCX's CUDA transports find the device
    /// the process uses instead of none or device 0. Constructing the context
    /// then fails with `ucx::error::cuda_unavailable` when the library has no
    /// CUDA support, no driver or device is present, or `device` is not
    /// below the number of devices, and with `ucx::error::cuda_error` when
    /// the CUDA runtime refuses.
    bool create_context = false;
    /// The device `create_context` makes current.
    int device = 0;
    /// Bytes of device memory allocated once, on first use, and carved up for
    /// active messages received into CUDA memory (`cuda_pool_allocator`):
    /// mapping new device memory can cost up to ~100 ms, a pool pays it once.
    /// 0: each such message gets its own `cudaMalloc`.
    std::size_t pool_size = 0;
};

/// Bounds of `context_options::shared_memory_segment_size` (bytes).
inline constexpr std::size_t min_shared_memory_segment_size = 1024;
inline constexpr std::size_t max_shared_memory_segment_size = 65535;

/// Options of a context. Precedence, lowest to highest: UCX's defaults, the
/// library's defaults, the process environment (`UCX_*`), then whatever is set
/// explicitly here (`transports`, `net_devices`, `config`).
struct context_options {
    /// UCP features; `wakeup` is always added.
    feature features = feature::all;
    /// Transport switches (see `transports`).
    ucx::transports transports{};
    /// Network devices, as `UCX_NET_DEVICES` (e.g. {"lo"} or {"eth0", "mlx5_0:1"}).
    /// Empty: leave UCX's choice (or the environment's) alone.
    std::vector<std::string> net_devices{};
    /// Keep shared memory usable for endpoints in peer error mode, which every
    /// endpoint of this library uses: turns on error handling of the posix and
    /// sysv transports (`MM_ERROR_HANDLING=y`, which both inherit) unless the
    /// environment sets `UCX_MM_ERROR_HANDLING`, `UCX_POSIX_ERROR_HANDLING` or
    /// `UCX_SYSV_ERROR_HANDLING`. Without it, UCX 1.13 silently routes
    /// intra-node traffic over TCP (8 B latency 4.9 us instead of 0.15 us).
    bool shared_memory_error_handling = true;
    /// Size of one shared-memory FIFO segment in bytes, headers included
    /// (`MM_SEG_SIZE`, which posix and sysv inherit; UCX's default is 8256).
    /// With peer error handling every byte crosses shared memory through
    /// these segments (UCX 1.13 uses no zero-copy lane then), so larger ones
    /// move a large message in fewer fragments: 1 MiB tag and 64 KiB stream
    /// bandwidth rose 2 to 3 times here (docs/development/measurements.md). Each worker's
    /// FIFO holds 64 segments (2 MiB of shared memory at this size). Must
    /// stay below 64 KiB: UCX 1.13's stream receive keeps fragment lengths
    /// in 16 bits and asserts above. Ignored when the environment sets
    /// `UCX_MM_SEG_SIZE`, `UCX_POSIX_SEG_SIZE` or `UCX_SYSV_SEG_SIZE`, or
    /// when shared memory is not among the transports; 0 leaves UCX's default.
    /// Out of [min_shared_memory_segment_size, max_shared_memory_segment_size]
    /// (and not 0), constructing the context fails with
    /// `ucx::error::invalid_option`.
    std::size_t shared_memory_segment_size = 32832;
    /// UCX's own keepalive on endpoints (`KEEPALIVE_INTERVAL`). Off by
    /// default: connected endpoints are watched by the library's heartbeats
    /// (`worker_options::peer_timeout`), which also cover a stopped peer and
    /// shared memory, while UCX 1.13's keepalive only reaches the side that
    /// opened the TCP connection and has aborted a surviving process on an
    /// assertion after many peers were killed at once. Ignored when the
    /// environment sets `UCX_KEEPALIVE_INTERVAL`.
    bool ucx_keepalive = false;
    /// Arbitrary UCX settings, by name without the `UCX_` prefix
    /// (e.g. {"RNDV_THRESH", "64k"}); they override the environment. A name
    /// that is not a setting of the UCX library loaded fails the context
    /// with `ucx::error::unknown_option` (it would have no effect).
    std::map<std::string, std::string> config{};
    /// Size hint for the number of endpoints (0: UCX's default).
    std::size_t estimated_endpoints = 0;
    /// Create workers in `UCS_THREAD_MODE_MULTI`. Not needed when each worker
    /// is used from one executor at a time (a thread or a strand), the model of
    /// this library (`UCS_THREAD_MODE_SERIALIZED`). Workers of one context may
    /// always run on different threads.
    bool multi_threaded = false;
    /// GPU settings (see `cuda_options`).
    cuda_options cuda{};
};

/// The settings a `context_options` turns into, in the order they are applied
/// to the UCX configuration, as (name without `UCX_`, value) pairs.
/// `getenv` answers whether a `UCX_*` variable is set in the environment.
std::vector<std::pair<std::string, std::string>>
make_config_settings(const context_options& options,
                     const std::function<const char*(const char*)>& getenv);

namespace detail {
class context_impl;
}

/// A UCP context: the UCX library instance from which workers are created.
/// Cheap to copy (shared ownership): workers keep their context alive, so
/// destroying the last handle while workers exist is safe.
class context {
public:
    /// Creates a context with default options. Throws `boost::system::system_error`.
    context();
    /// Creates a context with the given options. Throws `boost::system::system_error`:
    /// `ucx::error::invalid_option` for an option out of its bounds,
    /// `ucx::error::unknown_option` for a `config` name UCX does not have,
    /// UCX's status when UCX refuses the configuration.
    explicit context(const context_options& options);
    /// Creates a context with the given options; reports failure through `ec`.
    context(const context_options& options, error_code& ec);

    /// The UCP handle (null if construction failed with an error code).
    ucp_context_h native_handle() const noexcept;
    /// The features the context was created with.
    feature features() const noexcept;
    /// The effective value of a UCP-level setting (name without `UCX_`, such as
    /// "TLS" or "NET_DEVICES") as UCX prints it; `std::nullopt` for names that
    /// are not UCP-level (transport settings like "MM_ERROR_HANDLING" included).
    std::optional<std::string> config_value(const std::string& name) const;
    /// Whether atomics (`async_atomic_*`) work on this context's endpoints.
    /// False with UCX 1.16 and later while their protocol layer is on (UCX's
    /// default, `PROTO_ENABLE`): UCX has no atomic protocol for endpoints in
    /// peer error mode, which every endpoint of this library is in, and would
    /// fail the whole endpoint. The atomics then complete with
    /// `ucx::error::atomics_unsupported` without reaching UCX.
    bool supports_atomics() const noexcept;
    /// Whether UCX itself moves CUDA device memory with this context (its
    /// build has CUDA transports, such as `cuda_copy`, and they are
    /// enabled). Debian's UCX 1.13 has none.
    bool ucx_supports_cuda_memory() const noexcept;
    /// The context's GPU settings.
    const cuda_options& cuda() const noexcept;

private:
    friend struct detail::access;

    std::shared_ptr<detail::context_impl> impl_;
};

/// A UCX version: major, minor, release (1.13.1 is {1, 13, 1}).
struct ucx_version {
    unsigned major = 0;
    unsigned minor = 0;
    unsigned release = 0;

    friend auto operator<=>(const ucx_version&, const ucx_version&) = default;
    /// "major.minor.release".
    std::string to_string() const;
};

/// The version of the UCX library this process runs with (`ucp_get_version`).
ucx_version ucx_runtime_version() noexcept;

/// The version of the UCX this library was built against (what pkg-config
/// reported when it was configured). A process that finds another UCX at run
/// time (`ucx_runtime_version`) may misbehave: rebuild against that one.
ucx_version ucx_build_version() noexcept;

} // namespace ucx
