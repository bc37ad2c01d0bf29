// Logging: ucx-asio writes through Boost.Log on the channel "ucx".
#pragma once

#include <iosfwd>
#include <string_view>

namespace ucx::log {

/// Severity of a log record, from the most to the least verbose.
enum class severity { trace, debug, info, warning, error, off };

/// Writes the level name (`"debug"`, ...), for Boost.Log formatters.
std::ostream& operator<<(std::ostream& os, severity s);

/// Sets the least severe level that is logged. The library is quiet by
/// default (`severity::off`) unless the environment variable `UCXASIO_LOG`
/// names a level (`trace`, `debug`, `info`, `warning`, `error`, `off`).
void set_level(severity level) noexcept;

/// The current threshold.
severity level() noexcept;

/// Whether a record of this severity would be logged.
bool enabled(severity s) noexcept;

/// Parses a level name; returns false (and leaves `out` alone) when unknown.
bool parse_severity(std::string_view name, severity& out) noexcept;

/// Writes one record on the "ucx" channel. Records go to the Boost.Log core,
/// so an application's own sinks and filters apply; the attribute "Channel"
/// is "ucx" and "Severity" is a `ucx::log::severity`.
void write(severity s, std::string_view message);

} // namespace ucx::log
