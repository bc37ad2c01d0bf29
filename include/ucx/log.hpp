// Logging: ucx-asio writes through Boost.Log on the channel "ucx".
#pragma once

#include <boost/log/sinks/sink.hpp>
#include <boost/smart_ptr/shared_ptr.hpp>

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

/// Adds a Boost.Log sink that writes the "ucx" channel's records to `os` as
/// `[ucx] <severity>: <message>` lines (for applications without sinks of
/// their own). `os` must outlive the logging. When `UCXASIO_LOG` is set, the
/// library adds such a sink for `std::clog` before its first record.
/// Returns the sink, for `boost::log::core::get()->remove_sink()`.
boost::shared_ptr<boost::log::sinks::sink> add_stream_sink(std::ostream& os);

/// Writes one record on the "ucx" channel. Records go to the Boost.Log core,
/// so an application's own sinks and filters apply; the attribute "Channel"
/// is "ucx" and "Severity" is a `ucx::log::severity`.
void write(severity s, std::string_view message);

} // namespace ucx::log
