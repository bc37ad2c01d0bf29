// ucx::context_options from outside the program: named settings from the
// environment (with a prefix) or from a configuration file.
#pragma once

#include <ucx/context.hpp>
#include <ucx/error.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ucx {

/// The default prefix of the environment variables read by
/// `context_options_from_environment`.
inline constexpr std::string_view default_environment_prefix = "UCXASIO_";

/// The names of the library's environment variables that are not context
/// options (each is in `library_environment`).
namespace env {
inline constexpr const char* log = "UCXASIO_LOG";
inline constexpr const char* nccl_library = "UCXASIO_NCCL_LIBRARY";
inline constexpr const char* rank = "UCXASIO_RANK";
inline constexpr const char* size = "UCXASIO_SIZE";
inline constexpr const char* local_rank = "UCXASIO_LOCAL_RANK";
inline constexpr const char* local_size = "UCXASIO_LOCAL_SIZE";
inline constexpr const char* node_rank = "UCXASIO_NODE_RANK";
inline constexpr const char* rendezvous = "UCXASIO_RENDEZVOUS";
inline constexpr const char* store_dir = "UCXASIO_STORE_DIR";
inline constexpr const char* store_server = "UCXASIO_STORE_SERVER";
inline constexpr const char* run_id = "UCXASIO_RUN_ID";
} // namespace env

/// Who reads a variable of `library_environment`.
enum class environment_use {
    log,    ///< the library's log level (log.hpp)
    nccl,   ///< the NCCL library `ucx::nccl` loads (nccl.hpp)
    launch, ///< `detect_environment` (launch.hpp)
    store,  ///< `plan_store`: the job's rendezvous store (launch.hpp)
};

/// A variable of the library's environment that is not a context option.
struct environment_variable {
    /// The whole name, with the prefix `UCXASIO_`.
    std::string_view name;
    environment_use use;
    /// What it says, in a few words.
    std::string_view meaning;
};

// clang-format off
/// The one registry of the library's environment variables other than the
/// context options (`UCXASIO_` + a name of `set_context_option`). Every part
/// of the library that reads such a variable names it here, and
/// `apply_environment` leaves these names to their readers.
inline constexpr environment_variable library_environment[] = {
    {env::log, environment_use::log, "log level: trace, debug, info, warning, error, fatal"},
    {env::nccl_library, environment_use::nccl, "path of the NCCL library to load"},
    {env::rank, environment_use::launch, "this process's rank (explicit launch)"},
    {env::size, environment_use::launch, "the number of processes (explicit launch)"},
    {env::local_rank, environment_use::launch, "this process's rank on its node"},
    {env::local_size, environment_use::launch, "the number of processes on the node"},
    {env::node_rank, environment_use::launch, "the index of this process's node"},
    {env::rendezvous, environment_use::launch, "host:port of the job's TCP store"},
    {env::store_dir, environment_use::store, "a directory every process sees: a file store"},
    {env::store_server, environment_use::store, "external: no rank serves the TCP store"},
    {env::run_id, environment_use::store, "this run's name: the namespace of its keys in the store"},
};
// clang-format on

/// The entry of `library_environment` whose name after `UCXASIO_` is `name`
/// (in any case: "rank", "STORE_DIR"), or null.
const environment_variable* find_library_variable(std::string_view name) noexcept;

/// Sets one option of `options` by name (case-insensitive):
///
/// | name | value | sets |
/// |---|---|---|
/// | `tcp`, `shared_memory`, `cma`, `infiniband`, `cuda_copy`, `nvlink` | boolean | `transports` |
/// | `net_devices` | comma-separated devices, empty for UCX's choice | `net_devices` |
/// | `shared_memory_error_handling` | boolean | the same member |
/// | `shared_memory_segment_size` | bytes, 1024 to 65535 | the same member |
/// | `ucx_keepalive` | boolean | the same member |
/// | `estimated_endpoints` | a number | the same member |
/// | `multi_threaded` | boolean | the same member |
/// | `create_cuda_context` | boolean | `cuda.create_context` |
/// | `cuda_device` | a device number | `cuda.device` |
/// | `cuda_pool_size` | bytes, optional unit `k`, `m`, `g` (binary) | `cuda.pool_size` |
/// | `environment__NAME` | any text | `config["NAME"]`: UCX setting `UCX_NAME` (`-` as `_`) |
///
/// A boolean is `true`/`false`, `yes`/`no`, `on`/`off` or `1`/`0` (any
/// case). Returns `error::unknown_option` for a name not in the table or an
/// `environment__NAME` whose `UCX_NAME` is not a setting of the UCX library
/// loaded (a misspelt setting would have no effect), and
/// `error::invalid_option` for a value the option does not take; `options`
/// is then unchanged.
error_code set_context_option(context_options& options, std::string_view name,
                              std::string_view value);

/// Applies every environment variable whose name starts with `prefix` (the
/// rest of the name is the option's name, as `set_context_option`; for
/// example `UCXASIO_TCP=false`, `UCXASIO_NET_DEVICES=mlx5_0:1`,
/// `UCXASIO_ENVIRONMENT__RNDV_THRESH=8k`) to `options`, in the environment's
/// order, except the names of `library_environment` (the log level, the NCCL
/// library, the launch and store variables: `UCXASIO_RANK`,
/// `UCXASIO_RENDEZVOUS`, `UCXASIO_STORE_DIR`, ...), which their readers take.
/// With another prefix, `PREFIX` + the part of such a name after `UCXASIO_`
/// is skipped too (`MYAPP_RANK`). A name that is neither an option nor in the
/// registry fails with `error::unknown_option`. On the first
/// variable that fails, stops with its error; `failed` (when given) then
/// holds that variable as `NAME=value`, and `options` is unchanged. An
/// empty `prefix` is `error::invalid_option`.
void apply_environment(context_options& options, error_code& ec,
                       std::string_view prefix = default_environment_prefix,
                       std::string* failed = nullptr);

/// Applies a configuration file: one `name = value` per line, names as
/// `set_context_option`; blank lines and lines starting with `#` are
/// skipped, spaces around the name and the value are dropped. Errors: the
/// file's open error (`errc::no_such_file_or_directory`, ...),
/// `error::invalid_option` for a line without `=`, or the option's error;
/// `failed` then holds `PATH:LINE: text`.
void apply_configuration_file(context_options& options, const std::string& path, error_code& ec,
                              std::string* failed = nullptr);

/// Applies Dask's configuration of UCX, with the meaning distributed-ucxx
/// (and dask-cuda) give it: the YAML `files` in order, then the process's
/// `DASK_*` variables over them, as Dask merges its configuration
/// (docs/guide/configuration.md has every key).
///
/// Read: the sections `distributed-ucxx` and, for a key absent or null
/// there, the former `distributed.comm.ucx` and the oldest `ucx`; and
/// `distributed-ucxx.rmm.pool-size`, else `distributed.rmm.pool-size`. The
/// variables are Dask's: `DASK_DISTRIBUTED_UCXX__TCP=True`,
/// `DASK_DISTRIBUTED__COMM__UCX__NVLINK=true`, `DASK_UCX__CUDA_COPY=1`,
/// `DASK_DISTRIBUTED_UCXX__ENVIRONMENT__RNDV_THRESH=8k`,
/// `DASK_DISTRIBUTED__RMM__POOL_SIZE=1GB` (lower-cased, `__` nests, `_` and
/// `-` the same, values read as Python literals). The rest of a file (other
/// Dask settings) is not looked at.
///
/// Meaning: `tcp`, `nvlink`, `infiniband` make `UCX_TLS` the list of exactly
/// those transports (`[rc,]tcp[,cuda_copy][,cuda_ipc]`) and
/// `UCX_SOCKADDR_TLS_PRIORITY` `rdmacm` or `tcp`; `environment: {some-name:
/// v}` sets `UCX_SOME_NAME=v`; a `UCX_*` variable of the environment wins
/// over both; `create-cuda-context: true`, or a CUDA transport in `UCX_TLS`,
/// sets `cuda.create_context`; `rmm.pool-size` (1GB is 10^9) sets
/// `cuda.pool_size`; the oldest section's `net-devices` sets `net_devices`.
///
/// Errors (`failed` then names the file and line, or the variable, and the
/// key; `options` is unchanged): a file's open error
/// (`errc::no_such_file_or_directory`, ...); `error::invalid_option` for a
/// file that is not YAML or a value a key does not take (`tcp: maybe`,
/// `pool-size: 1XB`); `error::unknown_option` for a key these sections do
/// not have (`distributed-ucxx.tpc`) or an `environment` entry that is not a
/// setting of the UCX library loaded (`rndv-tresh`). Keys that have no
/// effect here (`multi-buffer: true`, `connect-timeout`, `reuse-endpoints`,
/// a setting the environment overrides) are logged as warnings and, when
/// `notes` is given, added to it, one `WHERE: KEY: why` each.
void apply_dask_configuration(context_options& options, std::span<const std::string> files,
                              error_code& ec, std::string* failed = nullptr,
                              std::vector<std::string>* notes = nullptr);

/// Whether the configuration file at `path` is YAML (Dask's) rather than
/// `name = value` lines: its name ends in `.yaml` or `.yml`, or its first
/// line that is neither blank nor a comment has no `=`.
bool is_yaml_configuration_file(const std::string& path);

/// The options of a context configured from outside the program: the
/// defaults, then the file at `path` (when not empty: Dask's YAML, see
/// `is_yaml_configuration_file`, or `name = value` lines), then Dask's
/// `DASK_*` variables (`apply_dask_configuration`, merged with a YAML file
/// as Dask merges them), then the environment variables with `prefix`, each
/// overriding the one before. Throws `boost::system::system_error` naming
/// the setting that failed. `notes`, when given, gains the Dask keys that had
/// no effect.
context_options configured_context_options(const std::string& path = {},
                                           std::string_view prefix = default_environment_prefix,
                                           std::vector<std::string>* notes = nullptr);

} // namespace ucx
