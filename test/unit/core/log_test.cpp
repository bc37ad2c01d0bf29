// Unit tests of ucx::log (Boost.Log on the channel "ucx").
#include <ucx/log.hpp>

#include <boost/core/null_deleter.hpp>
#include <boost/log/core.hpp>
#include <boost/log/expressions.hpp>
#include <boost/log/sinks/sync_frontend.hpp>
#include <boost/log/sinks/text_ostream_backend.hpp>
#include <boost/log/sources/channel_logger.hpp>
#include <boost/log/sources/record_ostream.hpp>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

namespace {

using ucx::log::severity;
namespace logging = boost::log;
namespace expr = boost::log::expressions;

TEST(Log, ParseSeverityNames) {
    const std::pair<const char*, severity> names[] = {
        {"trace", severity::trace},     {"debug", severity::debug}, {"info", severity::info},
        {"warning", severity::warning}, {"error", severity::error}, {"off", severity::off},
    };
    for (const auto& [name, expected] : names) {
        severity s = expected == severity::trace ? severity::off : severity::trace;
        EXPECT_TRUE(ucx::log::parse_severity(name, s)) << name;
        EXPECT_EQ(s, expected) << name;
        std::ostringstream os;
        os << expected;
        EXPECT_EQ(os.str(), name);
    }
    for (const char* bad : {"", "verbose", "Debug", "warn", "debug ", "offf"}) {
        severity s = severity::info;
        EXPECT_FALSE(ucx::log::parse_severity(bad, s)) << bad;
        EXPECT_EQ(s, severity::info) << "left alone on failure: " << bad;
    }
}

// Restores the threshold after a test.
struct level_guard {
    severity saved = ucx::log::level();
    ~level_guard() { ucx::log::set_level(saved); }
};

TEST(Log, SetLevelAndEnabled) {
    level_guard guard;
    ucx::log::set_level(severity::warning);
    EXPECT_EQ(ucx::log::level(), severity::warning);
    EXPECT_FALSE(ucx::log::enabled(severity::trace));
    EXPECT_FALSE(ucx::log::enabled(severity::debug));
    EXPECT_FALSE(ucx::log::enabled(severity::info));
    EXPECT_TRUE(ucx::log::enabled(severity::warning));
    EXPECT_TRUE(ucx::log::enabled(severity::error));
    EXPECT_FALSE(ucx::log::enabled(severity::off)) << "off is never a record severity";

    ucx::log::set_level(severity::trace);
    EXPECT_TRUE(ucx::log::enabled(severity::trace));
    EXPECT_TRUE(ucx::log::enabled(severity::error));

    ucx::log::set_level(severity::off);
    for (severity s : {severity::trace, severity::debug, severity::info, severity::warning,
                       severity::error, severity::off})
        EXPECT_FALSE(ucx::log::enabled(s));
}

// A Boost.Log sink that captures the "ucx" channel into a string.
class capture_sink {
public:
    using backend = logging::sinks::text_ostream_backend;
    using frontend = logging::sinks::synchronous_sink<backend>;

    capture_sink() {
        auto be = boost::make_shared<backend>();
        be->add_stream(boost::shared_ptr<std::ostream>(&out_, boost::null_deleter()));
        be->auto_flush(true);
        sink_ = boost::make_shared<frontend>(be);
        sink_->set_filter(expr::attr<std::string>("Channel") == "ucx");
        sink_->set_formatter(expr::stream << "[" << expr::attr<std::string>("Channel") << "] "
                                          << expr::attr<severity>("Severity") << ": "
                                          << expr::smessage);
        logging::core::get()->add_sink(sink_);
    }
    ~capture_sink() {
        logging::core::get()->remove_sink(sink_);
        sink_->flush();
    }
    capture_sink(const capture_sink&) = delete;
    capture_sink& operator=(const capture_sink&) = delete;

    std::string text() {
        sink_->flush();
        return out_.str();
    }

private:
    std::ostringstream out_;
    boost::shared_ptr<frontend> sink_;
};

TEST(Log, WriteAtEnabledSeverityReachesTheSink) {
    level_guard guard;
    capture_sink sink;
    ucx::log::set_level(severity::info);
    ucx::log::write(severity::warning, "hello from the test 42");
    const std::string text = sink.text();
    EXPECT_NE(text.find("hello from the test 42"), std::string::npos) << text;
    EXPECT_NE(text.find("[ucx] warning: hello from the test 42"), std::string::npos) << text;
}

TEST(Log, WriteBelowThresholdProducesNothing) {
    level_guard guard;
    capture_sink sink;
    ucx::log::set_level(severity::error);
    ucx::log::write(severity::warning, "should not appear");
    ucx::log::write(severity::debug, "should not appear either");
    ucx::log::write(severity::off, "never");
    EXPECT_EQ(sink.text(), "");
    // The threshold itself is logged.
    ucx::log::write(severity::error, "an error");
    EXPECT_NE(sink.text().find("an error"), std::string::npos);
    EXPECT_EQ(sink.text().find("should not appear"), std::string::npos);
}

TEST(Log, OtherChannelsAreFilteredBySinkNotByLibrary) {
    // Sanity check of the filter used above: a record of another channel is not captured,
    // so the captures above really came from the "ucx" channel.
    level_guard guard;
    capture_sink sink;
    logging::sources::channel_logger<std::string> other(logging::keywords::channel = "app");
    BOOST_LOG(other) << "other channel";
    EXPECT_EQ(sink.text(), "");
    ucx::log::set_level(severity::trace);
    ucx::log::write(severity::trace, "ucx channel");
    EXPECT_NE(sink.text().find("ucx channel"), std::string::npos);
}

// The initial threshold comes from UCXASIO_LOG, read once. Checked in a fresh
// process (threadsafe death-test style re-executes the binary), where nothing
// has read the threshold yet.
TEST(LogDeathTest, DefaultThresholdIsOffWithoutEnvironment) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ::unsetenv("UCXASIO_LOG");
            const bool ok =
                ucx::log::level() == severity::off && !ucx::log::enabled(severity::error);
            std::_Exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST(LogDeathTest, ThresholdFromEnvironment) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            ::setenv("UCXASIO_LOG", "debug", 1);
            const bool ok = ucx::log::level() == severity::debug &&
                            ucx::log::enabled(severity::debug) &&
                            !ucx::log::enabled(severity::trace);
            std::_Exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
    EXPECT_EXIT(
        {
            ::setenv("UCXASIO_LOG", "nonsense", 1);
            std::_Exit(ucx::log::level() == severity::off ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
}

} // namespace

TEST(LogStreamSink, WritesChannelRecordsWithTheirSeverity) {
    std::ostringstream out;
    const auto sink = ucx::log::add_stream_sink(out);
    const auto before = ucx::log::level();
    ucx::log::set_level(ucx::log::severity::debug);
    ucx::log::write(ucx::log::severity::debug, "stream sink check");
    ucx::log::write(ucx::log::severity::trace, "below the threshold");
    ucx::log::set_level(before);
    boost::log::core::get()->remove_sink(sink);
    EXPECT_NE(out.str().find("[ucx] debug: stream sink check"), std::string::npos) << out.str();
    EXPECT_EQ(out.str().find("below the threshold"), std::string::npos) << out.str();
}
