// How a worker waits for UCX events.
#pragma once

#include <ucx/detail/enum_names.hpp>

#include <optional>
#include <string_view>

namespace ucx {

/// How a worker drives UCX progress on its executor.
enum class progress_mode {
    /// Progress until idle, arm the worker's event fd and sleep on it (in the
    /// io_context's reactor) until UCX signals. Lowest CPU use; every wake-up
    /// costs the operating system's wake-up latency.
    event,
    /// Busy-progress (yielding to other handlers between rounds) while
    /// operations are in flight; sleep on the event fd when there are none.
    poll,
    /// Keep progressing for a bounded time after the last activity, then arm
    /// and sleep as in `event` mode. Close to `poll` latency for request/response
    /// traffic, close to `event` CPU use when idle. The default: its window
    /// follows the traffic (`worker_options::adaptive_spin`), so traffic
    /// sparser than a wake-up costs no spinning.
    hybrid,
};

namespace detail {
inline constexpr std::string_view progress_mode_names[] = {"event", "poll", "hybrid"};
} // namespace detail

/// "event", "poll" or "hybrid".
constexpr std::string_view to_string(progress_mode m) noexcept {
    return detail::enum_name(m, detail::progress_mode_names);
}

/// Parses "event", "poll" or "hybrid".
constexpr std::optional<progress_mode> parse_progress_mode(std::string_view s) noexcept {
    return detail::enum_from_name<progress_mode>(s, detail::progress_mode_names);
}

} // namespace ucx
