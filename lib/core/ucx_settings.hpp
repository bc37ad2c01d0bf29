// The names of the settings the UCX library in this process knows, read from
// UCX's own configuration tables: a name given as a UCX setting
// (`context_options::config`, a configuration's `environment` entries) is
// checked against them, so that a misspelt one fails instead of having no
// effect.
#pragma once

#include <string>
#include <string_view>

namespace ucx::detail {

/// Whether `name` (without `UCX_`, any case) is a setting of the UCX library
/// loaded in this process: a setting of UCP's table (`RNDV_THRESH`, `TLS`),
/// or a setting of a transport or component table under one of UCX's table
/// prefixes (`TCP_TX_SEG_SIZE`, `MM_SEG_SIZE`, `POSIX_SEG_SIZE`), or without
/// one where UCX applies it to every table that has it (`SEG_SIZE`). The
/// tables are those of the transports UCX loaded: on a UCX built without
/// CUDA, `CUDA_COPY_*` are unknown.
bool is_ucx_setting(std::string_view name);

/// `name` in UCX's spelling: upper case, `-` as `_`, without a leading `UCX_`.
std::string ucx_setting_name(std::string_view name);

} // namespace ucx::detail
