#include <ucx/log.hpp>

#include <boost/log/attributes/constant.hpp>
#include <boost/log/sources/record_ostream.hpp>
#include <boost/log/sources/severity_channel_logger.hpp>

#include <array>
#include <atomic>
#include <cstdlib>
#include <ostream>

namespace ucx::log {
namespace {

constexpr std::array<std::string_view, 6> names{"trace",   "debug", "info",
                                                "warning", "error", "off"};

severity initial_level() noexcept {
    severity s = severity::off;
    if (const char* env = std::getenv("UCXASIO_LOG"))
        parse_severity(env, s);
    return s;
}

std::atomic<severity>& threshold() noexcept {
    static std::atomic<severity> value{initial_level()};
    return value;
}

using logger_type = boost::log::sources::severity_channel_logger_mt<severity, std::string>;

logger_type& logger() {
    static logger_type lg(boost::log::keywords::channel = "ucx");
    return lg;
}

} // namespace

std::ostream& operator<<(std::ostream& os, severity s) {
    return os << names[static_cast<std::size_t>(s)];
}

void set_level(severity s) noexcept {
    threshold().store(s, std::memory_order_relaxed);
}

severity level() noexcept {
    return threshold().load(std::memory_order_relaxed);
}

bool enabled(severity s) noexcept {
    return s != severity::off && s >= level();
}

bool parse_severity(std::string_view name, severity& out) noexcept {
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == name) {
            out = static_cast<severity>(i);
            return true;
        }
    }
    return false;
}

void write(severity s, std::string_view message) {
    if (!enabled(s))
        return;
    BOOST_LOG_SEV(logger(), s) << message;
}

} // namespace ucx::log
