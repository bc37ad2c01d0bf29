// ucx::context_options from outside the program: named settings from the
// environment (with a prefix) or from a configuration file.
#pragma once

#include <ucx/context.hpp>
#include <ucx/error.hpp>

#include <string>
#include <string_view>

namespace ucx {

/// The default prefix of the environment variables read by
/// `context_options_from_environment`.
inline constexpr std::string_view default_environment_prefix = "UCXASIO_";

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
/// | `environment__NAME` | any text | `config["NAME"]`: UCX setting `UCX_NAME` |
///
/// A boolean is `true`/`false`, `yes`/`no`, `on`/`off` or `1`/`0` (any
/// case). Returns `error::unknown_option` for a name not in the table and
/// `error::invalid_option` for a value the option does not take; `options`
/// is then unchanged.
error_code set_context_option(context_options& options, std::string_view name,
                              std::string_view value);

/// Applies every environment variable whose name starts with `prefix` (the
/// rest of the name is the option's name, as `set_context_option`; for
/// example `UCXASIO_TCP=false`, `UCXASIO_NET_DEVICES=mlx5_0:1`,
/// `UCXASIO_ENVIRONMENT__RNDV_THRESH=8k`) to `options`, except `LOG` (the
/// library's log level, see log.hpp) and `NCCL_LIBRARY` (the NCCL that
/// `ucx::nccl` loads, see nccl.hpp), in the environment's order. On the first
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

/// The options of a context configured from outside the program: the
/// defaults, then the file at `path` (when not empty), then the environment
/// variables with `prefix`, each overriding the one before. Throws
/// `boost::system::system_error` naming the setting that failed.
context_options configured_context_options(const std::string& path = {},
                                           std::string_view prefix = default_environment_prefix);

} // namespace ucx
