// Endpoint reports (a metrics exporter's /endpoints) as JSON, both ways.
#include <ucx/endpoint_report.hpp>

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

ucx::endpoints_report sample() {
    ucx::endpoints_report r;
    r.host = "node-1";
    r.pid = 4242;
    r.ucx_version = "1.13.1";
    r.unanswered = {"stalled \"one\""};
    ucx::endpoint_report& c = r.endpoints.emplace_back();
    c.worker = "main";
    c.id = 7;
    c.role = "client";
    c.state = "open";
    c.local = "127.0.0.1:40000";
    c.remote = "[::1]:5000";
    c.lanes.push_back({0, "sysv", "memory", {"amo#0", "am", "am_bw#0"}});
    c.lanes.push_back({1, "tcp", "lo", {"rma_bw#0", "wireup"}});
    c.lanes.push_back({2, "tcp", "", {"cm"}});
    c.metrics.operations[static_cast<std::size_t>(ucx::operation_kind::tag_send)] = {5, 4, 1, 4000};
    c.metrics.operations[static_cast<std::size_t>(ucx::operation_kind::connect)] = {1, 1, 0, 0};
    c.metrics.operations[static_cast<std::size_t>(ucx::operation_kind::get)] = {0, 0, 0,
                                                                                9007199254740991};
    c.metrics.in_flight = 1;
    ucx::endpoint_report& f = r.endpoints.emplace_back();
    f.worker = "w\\2\n";
    f.id = 9007199254740991; // 2^53 - 1: the largest exact in a JSON number
    f.role = "address";
    f.state = "closed";
    f.error = "connection reset by peer";
    f.fabric = true;
    return r;
}

TEST(endpoint_report, json_round_trips_every_field) {
    const ucx::endpoints_report r = sample();
    const std::string json = ucx::to_json(r);
    ucx::endpoints_report back;
    ASSERT_FALSE(ucx::from_json(json, back)) << json;
    EXPECT_EQ(back, r) << json;
    // An empty report too.
    ucx::endpoints_report empty, empty_back;
    ASSERT_FALSE(ucx::from_json(ucx::to_json(empty), empty_back));
    EXPECT_EQ(empty_back, empty);
}

TEST(endpoint_report, json_ignores_unknown_fields) {
    ucx::endpoints_report back;
    ASSERT_FALSE(ucx::from_json(R"({"format":"ucx-asio-endpoints","version":1,"host":"h","pid":1,
        "ucx_version":"1.13.1","unanswered":[],"future":{"x":[1,2]},"endpoints":[
        {"worker":"w","id":1,"role":"server","state":"open","error":"","fabric":false,
         "local":"","remote":"","pings":0,"pongs":0,"round_trip_ns":-1,"lanes":[{"index":0,"transport":"tcp","device":"lo",
         "uses":["am"],"speed":3}],"more":null}]})",
                                back));
    ASSERT_EQ(back.endpoints.size(), 1u);
    EXPECT_EQ(back.endpoints[0].lanes.at(0).uses, std::vector<std::string>{"am"});
}

TEST(endpoint_report, json_holds_only_the_kinds_with_counts_and_skips_unknown_ones) {
    const std::string json = ucx::to_json(sample());
    EXPECT_NE(json.find(R"({"kind":"tag_send","started":5,"completed":4,"failed":1,"bytes":4000})"),
              std::string::npos)
        << json;
    EXPECT_EQ(json.find(R"("kind":"put")"), std::string::npos) << json;
    // A report with no operations (an older process's) reads as zeros; a
    // kind this library does not know is skipped.
    ucx::endpoints_report back;
    ASSERT_FALSE(ucx::from_json(R"({"format":"ucx-asio-endpoints","version":1,"host":"h","pid":1,
        "ucx_version":"1.13.1","unanswered":[],"endpoints":[
        {"worker":"w","id":1,"role":"server","state":"open","error":"","fabric":false,
         "local":"","remote":"","pings":0,"pongs":0,"round_trip_ns":-1,"lanes":[]},
        {"worker":"w","id":2,"role":"server","state":"open","error":"","fabric":false,
         "local":"","remote":"","pings":0,"pongs":0,"round_trip_ns":-1,"lanes":[],"in_flight":2,
         "operations":[{"kind":"teleport","started":1,"completed":1,"failed":0,"bytes":1},
                       {"kind":"put","started":3,"completed":1,"failed":0,"bytes":10}]}]})",
                                back));
    ASSERT_EQ(back.endpoints.size(), 2u);
    EXPECT_EQ(back.endpoints[0].metrics, ucx::endpoint_metrics{});
    EXPECT_EQ(back.endpoints[1].metrics.in_flight, 2u);
    EXPECT_EQ(back.endpoints[1].metrics.of(ucx::operation_kind::put),
              (ucx::operation_counts{3, 1, 0, 10}));
    EXPECT_EQ(back.endpoints[1].metrics.of(ucx::operation_kind::other), ucx::operation_counts{});
}

TEST(endpoint_report, refuses_what_is_not_a_report) {
    const std::string good = ucx::to_json(sample());
    const auto replaced = [&](const std::string& what, const std::string& with) {
        std::string s = good;
        const auto at = s.find(what);
        EXPECT_NE(at, std::string::npos) << what;
        return at == std::string::npos ? s : s.replace(at, what.size(), with);
    };
    const std::string bad[] = {
        "",
        "[]",
        "{}",
        good.substr(0, good.size() / 2),
        good + "x",
        replaced("\"ucx-asio-endpoints\"", "\"ucx-asio-flight-record\""),
        replaced("\"version\":1", "\"version\":2"),
        replaced("\"pid\":4242", "\"pid\":\"4242\""),
        replaced("\"id\":7", "\"id\":-7"),
        replaced("\"id\":7", "\"id\":7.5"),
        replaced("\"fabric\":true", "\"fabric\":1"),
        replaced("\"index\":0", "\"index\":null"),
        replaced("\"uses\":[\"amo#0\"", "\"uses\":[0"),
        replaced("\"unanswered\":[", "\"unanswered\":[1,"),
        replaced("\"role\":\"client\",", ""),
        replaced("\"lanes\":[]", "\"lanes\":{}"),
        replaced("\"operations\":[{", "\"operations\":[7,{"),
        replaced("\"operations\":[{", "\"operations\":{"),
        replaced("\"started\":5", "\"started\":-5"),
        replaced("\"kind\":\"tag_send\"", "\"kind\":3"),
        replaced("\"in_flight\":1", "\"in_flight\":\"1\""),
        replaced(",\"bytes\":4000", ""),
        std::string(40, '[') + std::string(40, ']'),
    };
    for (const std::string& doc : bad) {
        ucx::endpoints_report r;
        EXPECT_EQ(ucx::from_json(doc, r), boost::asio::error::invalid_argument) << doc;
    }
}

} // namespace
