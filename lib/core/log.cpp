#include <ucx/log.hpp>

#include <ucx/configuration.hpp>

#include <boost/core/null_deleter.hpp>
#include <boost/log/attributes/constant.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/sync_frontend.hpp>
#include <boost/log/sinks/text_ostream_backend.hpp>
#include <boost/log/sources/record_ostream.hpp>
#include <boost/log/sources/severity_channel_logger.hpp>

#include <array>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <ostream>

namespace ucx::log {
namespace {

constexpr std::array<std::string_view, 6> names{"trace",   "debug", "info",
                                                "warning", "error", "off"};

severity initial_level() noexcept {
    severity s = severity::off;
    if (const char* env = std::getenv(ucx::env::log))
        parse_severity(env, s);
    return s;
}

std::atomic<severity>& threshold() noexcept {
    static std::atomic<severity> value{initial_level()};
    return value;
}

using logger_type = boost::log::sources::severity_channel_logger_mt<severity, std::string>;

BOOST_LOG_ATTRIBUTE_KEYWORD(channel_keyword, "Channel", std::string)
BOOST_LOG_ATTRIBUTE_KEYWORD(severity_keyword, "Severity", severity)

// With UCXASIO_LOG set, records should show up without any set-up.
void add_environment_sink_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        if (std::getenv(ucx::env::log))
            add_stream_sink(std::clog);
    });
}

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

boost::shared_ptr<boost::log::sinks::sink> add_stream_sink(std::ostream& os) {
    namespace expr = boost::log::expressions;
    using backend_type = boost::log::sinks::text_ostream_backend;
    auto backend = boost::make_shared<backend_type>();
    backend->add_stream(boost::shared_ptr<std::ostream>(&os, boost::null_deleter()));
    backend->auto_flush(true);
    auto sink = boost::make_shared<boost::log::sinks::synchronous_sink<backend_type>>(backend);
    sink->set_filter(channel_keyword == "ucx");
    sink->set_formatter(expr::stream << "[ucx] " << severity_keyword << ": " << expr::smessage);
    boost::log::core::get()->add_sink(sink);
    return sink;
}

void write(severity s, std::string_view message) {
    if (!enabled(s))
        return;
    add_environment_sink_once();
    BOOST_LOG_SEV(logger(), s) << message;
}

} // namespace ucx::log
