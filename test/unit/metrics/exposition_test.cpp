// The Prometheus text format of worker metrics (sans-io): label names and
// values, the families and their samples, histograms' cumulative buckets.
#include "metrics/exposition.hpp"

#include <boost/asio/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

namespace {

using ucx::detail::labelled_worker;

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        out.push_back(line);
    return out;
}

bool has_line(const std::string& text, const std::string& line) {
    for (const auto& l : lines_of(text))
        if (l == line)
            return true;
    return false;
}

TEST(exposition, label_names_follow_prometheus_rules) {
    using ucx::detail::valid_label_name;
    EXPECT_TRUE(valid_label_name("rank"));
    EXPECT_TRUE(valid_label_name("_x9"));
    EXPECT_TRUE(valid_label_name("Job_1"));
    EXPECT_FALSE(valid_label_name(""));
    EXPECT_FALSE(valid_label_name("9x"));
    EXPECT_FALSE(valid_label_name("__name"));
    EXPECT_FALSE(valid_label_name("a-b"));
    EXPECT_FALSE(valid_label_name("a b"));
    EXPECT_FALSE(valid_label_name("é"));
}

TEST(exposition, label_values_escape_backslash_quote_and_newline) {
    const std::vector<std::pair<std::string, std::string>> labels{
        {"a", "plain"}, {"b", "q\"uote"}, {"c", "back\\slash"}, {"d", "two\nlines"}};
    EXPECT_EQ(ucx::detail::render_labels(labels),
              R"(a="plain",b="q\"uote",c="back\\slash",d="two\nlines")");
    EXPECT_EQ(ucx::detail::render_labels({}), "");
}

TEST(exposition, every_family_has_help_type_and_one_sample_per_worker_and_kind) {
    std::vector<labelled_worker> w(2);
    w[0].labels = R"(worker="a")";
    w[1].labels = R"(worker="b")";
    auto& tag_send =
        w[0].metrics.operations[static_cast<std::size_t>(ucx::operation_kind::tag_send)];
    tag_send = {10, 9, 1, 4096};
    auto& tag_recv =
        w[1].metrics.operations[static_cast<std::size_t>(ucx::operation_kind::tag_recv)];
    tag_recv = {7, 7, 0, 700};
    w[0].metrics.in_flight = 1;
    w[1].metrics.passes = 123;
    std::string out;
    ucx::detail::write_worker_metrics(out, w);

    EXPECT_TRUE(has_line(out, R"(ucx_operations_started_total{worker="a",kind="tag_send"} 10)"));
    EXPECT_TRUE(has_line(out, R"(ucx_operations_completed_total{worker="a",kind="tag_send"} 9)"));
    EXPECT_TRUE(has_line(out, R"(ucx_operations_failed_total{worker="a",kind="tag_send"} 1)"));
    EXPECT_TRUE(has_line(out, R"(ucx_bytes_sent_total{worker="a",kind="tag_send"} 4096)"));
    EXPECT_TRUE(has_line(out, R"(ucx_bytes_received_total{worker="b",kind="tag_recv"} 700)"));
    EXPECT_TRUE(has_line(out, R"(ucx_operations_in_flight{worker="a"} 1)"));
    EXPECT_TRUE(has_line(out, R"(ucx_progress_passes_total{worker="b"} 123)"));
    EXPECT_TRUE(has_line(out, "# TYPE ucx_operations_in_flight gauge"));
    EXPECT_TRUE(has_line(out, "# TYPE ucx_progress_passes_total counter"));
    // Sends are not received bytes and the other way round.
    EXPECT_FALSE(has_line(out, R"(ucx_bytes_received_total{worker="a",kind="tag_send"} 0)"));
    EXPECT_FALSE(has_line(out, R"(ucx_bytes_sent_total{worker="b",kind="tag_recv"} 0)"));
    // No latency family without histograms.
    EXPECT_EQ(out.find("ucx_operation_duration_seconds"), std::string::npos);

    // Each family: HELP then TYPE, once, and its samples right after, all together.
    std::string family;
    std::vector<std::string> seen;
    for (const auto& line : lines_of(out)) {
        ASSERT_FALSE(line.empty());
        if (line.rfind("# HELP ", 0) == 0) {
            family = line.substr(7, line.find(' ', 7) - 7);
            EXPECT_EQ(std::count(seen.begin(), seen.end(), family), 0) << family;
            seen.push_back(family);
            continue;
        }
        if (line.rfind("# TYPE ", 0) == 0) {
            EXPECT_EQ(line.substr(7, family.size()), family);
            continue;
        }
        EXPECT_EQ(line.rfind(family, 0), 0u) << line << " outside its family " << family;
    }
    // Every kind of a counted family, for both workers.
    std::size_t started = 0;
    for (const auto& line : lines_of(out))
        started += line.rfind("ucx_operations_started_total{", 0) == 0;
    EXPECT_EQ(started, 2 * ucx::operation_kind_count);
}

TEST(exposition, errors_carry_category_value_and_escaped_message) {
    std::vector<labelled_worker> w(1);
    w[0].labels = R"(rank="0",worker="w")";
    w[0].metrics.errors.push_back({make_error_code(boost::asio::error::operation_aborted), 3});
    w[0].metrics.other_errors = 2;
    std::string out;
    ucx::detail::write_worker_metrics(out, w);
    const auto ec = make_error_code(boost::asio::error::operation_aborted);
    EXPECT_TRUE(has_line(out, "ucx_operation_errors_total{rank=\"0\",worker=\"w\",error=\"" +
                                  std::string(ec.category().name()) + ":" +
                                  std::to_string(ec.value()) + "\",message=\"" + ec.message() +
                                  "\"} 3"))
        << out;
    EXPECT_TRUE(has_line(
        out, R"(ucx_operation_errors_total{rank="0",worker="w",error="other",message=""} 2)"));
}

TEST(exposition, histogram_buckets_are_cumulative_and_end_at_the_count) {
    using ucx::latency_histogram;
    std::vector<labelled_worker> w(1);
    w[0].labels = R"(worker="w")";
    w[0].metrics.has_latency = true;
    auto& h = w[0].metrics.latency[static_cast<std::size_t>(ucx::operation_kind::put)];
    h.buckets[0] = 2; // <= 1 us
    h.buckets[3] = 5; // <= 8 us
    h.buckets[latency_histogram::bucket_count - 1] = 1;
    h.count = 8;
    h.sum = std::chrono::nanoseconds(1'500'000'250);
    std::string out;
    ucx::detail::write_worker_metrics(out, w);
    EXPECT_TRUE(has_line(out, "# TYPE ucx_operation_duration_seconds histogram"));
    const std::string p = R"(ucx_operation_duration_seconds_bucket{worker="w",kind="put",le=")";
    EXPECT_TRUE(has_line(out, p + R"(0.000001"} 2)")) << out;
    EXPECT_TRUE(has_line(out, p + R"(0.000002"} 2)"));
    EXPECT_TRUE(has_line(out, p + R"(0.000008"} 7)"));
    EXPECT_TRUE(has_line(out, p + R"(4.194304"} 7)"));
    EXPECT_TRUE(has_line(out, p + R"(+Inf"} 8)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_operation_duration_seconds_sum{worker="w",kind="put"} 1.50000025)"));
    EXPECT_TRUE(has_line(out, R"(ucx_operation_duration_seconds_count{worker="w",kind="put"} 8)"));
}

TEST(exposition, group_families_by_kind_with_size_rank_and_latency) {
    std::vector<ucx::detail::labelled_group> g(1);
    g[0].labels = R"(group="world")";
    g[0].metrics.rank = 2;
    g[0].metrics.size = 4;
    g[0].metrics.in_flight = 1;
    g[0].metrics.collectives[static_cast<std::size_t>(ucx::collective_kind::allreduce)] = {5, 4, 1,
                                                                                           400};
    auto& h = g[0].metrics.latency[static_cast<std::size_t>(ucx::collective_kind::allreduce)];
    h.buckets[5] = 4;
    h.count = 4;
    h.sum = std::chrono::microseconds(100);
    std::string out;
    ucx::detail::write_group_metrics(out, g);
    EXPECT_TRUE(
        has_line(out, R"(ucx_collectives_started_total{group="world",kind="allreduce"} 5)"));
    EXPECT_TRUE(has_line(out, R"(ucx_collectives_failed_total{group="world",kind="allreduce"} 1)"));
    EXPECT_TRUE(has_line(out, R"(ucx_collective_bytes_total{group="world",kind="allreduce"} 400)"));
    EXPECT_TRUE(has_line(out, R"(ucx_collectives_in_flight{group="world"} 1)"));
    EXPECT_TRUE(has_line(out, R"(ucx_group_size{group="world"} 4)"));
    EXPECT_TRUE(has_line(out, R"(ucx_group_rank{group="world"} 2)"));
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_collective_duration_seconds_bucket{group="world",kind="allreduce",le="0.000032"} 4)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_collective_duration_seconds_sum{group="world",kind="allreduce"} 0.0001)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_collectives_completed_total{group="world",kind="barrier"} 0)"));
    // No group, no families.
    std::string none;
    ucx::detail::write_group_metrics(none, {});
    EXPECT_EQ(none, "");
}

TEST(exposition, heartbeat_families_and_a_histogram_without_a_kind) {
    std::vector<labelled_worker> w(1);
    w[0].labels = R"(worker="a")";
    w[0].metrics.heartbeat_pings = 5;
    w[0].metrics.heartbeat_pongs = 4;
    w[0].metrics.peers_unresponsive = 1;
    w[0].metrics.heartbeat_round_trip.buckets[3] = 4; // 4 to 8 us
    w[0].metrics.heartbeat_round_trip.count = 4;
    w[0].metrics.heartbeat_round_trip.sum = std::chrono::microseconds(20);
    std::string out;
    ucx::detail::write_worker_metrics(out, w);
    EXPECT_TRUE(has_line(out, R"(ucx_heartbeat_pings_total{worker="a"} 5)"));
    EXPECT_TRUE(has_line(out, R"(ucx_heartbeat_pongs_total{worker="a"} 4)"));
    EXPECT_TRUE(has_line(out, R"(ucx_peers_unresponsive_total{worker="a"} 1)"));
    EXPECT_TRUE(has_line(out, "# TYPE ucx_heartbeat_round_trip_seconds histogram"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_heartbeat_round_trip_seconds_bucket{worker="a",le="0.000004"} 0)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_heartbeat_round_trip_seconds_bucket{worker="a",le="0.000008"} 4)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_heartbeat_round_trip_seconds_bucket{worker="a",le="+Inf"} 4)"));
    EXPECT_TRUE(has_line(out, R"(ucx_heartbeat_round_trip_seconds_sum{worker="a"} 0.00002)"));
    EXPECT_TRUE(has_line(out, R"(ucx_heartbeat_round_trip_seconds_count{worker="a"} 4)"));

    // Without labels at all: no braces, no stray comma.
    std::vector<labelled_worker> bare(1);
    std::string plain;
    ucx::detail::write_worker_metrics(plain, bare);
    EXPECT_TRUE(has_line(plain, R"(ucx_heartbeat_round_trip_seconds_bucket{le="+Inf"} 0)"));
    EXPECT_TRUE(has_line(plain, "ucx_heartbeat_round_trip_seconds_sum 0")) << plain;
    EXPECT_TRUE(has_line(plain, "ucx_heartbeat_round_trip_seconds_count 0"));
}

TEST(exposition, listener_families_by_cause) {
    std::vector<ucx::detail::labelled_listener> l(1);
    l[0].labels = R"(listener="door")";
    l[0].metrics.accepted = 12;
    l[0].metrics.refused[static_cast<std::size_t>(ucx::refusal_cause::handshake_timeout)] = 3;
    std::string out;
    ucx::detail::write_listener_metrics(out, l);
    EXPECT_TRUE(has_line(out, "# TYPE ucx_listener_accepted_total counter"));
    EXPECT_TRUE(has_line(out, R"(ucx_listener_accepted_total{listener="door"} 12)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_listener_refused_total{listener="door",cause="handshake_timeout"} 3)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_listener_refused_total{listener="door",cause="backlog_full"} 0)"));
    std::size_t causes = 0;
    for (const auto& line : lines_of(out))
        causes += line.rfind("ucx_listener_refused_total{", 0) == 0;
    EXPECT_EQ(causes, ucx::refusal_cause_count);
    std::string none;
    ucx::detail::write_listener_metrics(none, {});
    EXPECT_TRUE(none.empty());
}

TEST(exposition, store_families_by_operation) {
    std::vector<ucx::detail::labelled_store> st(1);
    st[0].labels = R"(store="rdv")";
    st[0].metrics.operations[static_cast<std::size_t>(ucx::store_operation::get)] = {3, 2, 1, 0};
    st[0].metrics.in_flight = 1;
    std::string out;
    ucx::detail::write_store_metrics(out, st);
    EXPECT_TRUE(has_line(out, R"(ucx_store_operations_started_total{store="rdv",op="get"} 3)"));
    EXPECT_TRUE(has_line(out, R"(ucx_store_operations_completed_total{store="rdv",op="get"} 2)"));
    EXPECT_TRUE(has_line(out, R"(ucx_store_operations_failed_total{store="rdv",op="get"} 1)"));
    EXPECT_TRUE(
        has_line(out, R"(ucx_store_operations_started_total{store="rdv",op="num_keys"} 0)"));
    EXPECT_TRUE(has_line(out, R"(ucx_store_operations_in_flight{store="rdv"} 1)"));
    EXPECT_TRUE(has_line(out, "# TYPE ucx_store_operations_in_flight gauge"));
    std::string none;
    ucx::detail::write_store_metrics(none, {});
    EXPECT_TRUE(none.empty());
}

/// Every value of `Enum` (`count` of them) has a name, none "unknown", no
/// two the same.
template <class Enum>
void expect_distinct_names(std::size_t count) {
    std::vector<std::string_view> names;
    for (std::size_t k = 0; k < count; ++k) {
        const auto n = ucx::to_string(static_cast<Enum>(k));
        EXPECT_NE(n, "unknown");
        EXPECT_EQ(std::count(names.begin(), names.end(), n), 0) << n;
        names.push_back(n);
    }
}

TEST(exposition, kinds_have_distinct_names) {
    expect_distinct_names<ucx::operation_kind>(ucx::operation_kind_count);
    expect_distinct_names<ucx::refusal_cause>(ucx::refusal_cause_count);
    expect_distinct_names<ucx::store_operation>(ucx::store_operation_count);
    expect_distinct_names<ucx::collective_kind>(ucx::collective_kind_count);
}

TEST(exposition, endpoint_families_hold_the_kinds_with_counts_and_each_lane) {
    std::vector<ucx::detail::labelled_endpoint> eps(2);
    eps[0].labels = R"(worker="w",endpoint="3")";
    eps[0].report.role = "client";
    eps[0].report.state = "open";
    eps[0].report.remote = "127.0.0.1:5000";
    eps[0].report.lanes.push_back({0, "sysv", "memory", {"amo#0", "am"}});
    eps[0].report.lanes.push_back({1, "tcp", "lo", {"cm"}});
    eps[0].report.metrics.operations[static_cast<std::size_t>(ucx::operation_kind::tag_send)] = {
        4, 3, 1, 300};
    eps[0].report.metrics.operations[static_cast<std::size_t>(ucx::operation_kind::get)] = {1, 1, 0,
                                                                                            64};
    eps[0].report.metrics.in_flight = 1;
    eps[0].report.round_trip_ns = 1'500'000;
    eps[1].labels = R"(worker="w",endpoint="4")";
    eps[1].report.role = "server";
    eps[1].report.state = "closed";
    eps[1].report.fabric = true;
    std::string out;
    ucx::detail::write_endpoint_metrics(out, eps);
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_endpoint_info{worker="w",endpoint="3",role="client",state="open",local="",remote="127.0.0.1:5000",fabric="false"} 1)"))
        << out;
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_endpoint_info{worker="w",endpoint="4",role="server",state="closed",local="",remote="",fabric="true"} 1)"));
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_endpoint_lane_info{worker="w",endpoint="3",lane="0",transport="sysv",device="memory",uses="amo#0,am"} 1)"));
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_endpoint_lane_info{worker="w",endpoint="3",lane="1",transport="tcp",device="lo",uses="cm"} 1)"));
    EXPECT_TRUE(has_line(
        out,
        R"(ucx_endpoint_operations_started_total{worker="w",endpoint="3",kind="tag_send"} 4)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_endpoint_operations_failed_total{worker="w",endpoint="3",kind="tag_send"} 1)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_endpoint_bytes_sent_total{worker="w",endpoint="3",kind="tag_send"} 300)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_endpoint_bytes_received_total{worker="w",endpoint="3",kind="get"} 64)"));
    EXPECT_TRUE(has_line(out, R"(ucx_endpoint_operations_in_flight{worker="w",endpoint="3"} 1)"));
    EXPECT_TRUE(has_line(out, R"(ucx_endpoint_operations_in_flight{worker="w",endpoint="4"} 0)"));
    EXPECT_TRUE(has_line(
        out, R"(ucx_endpoint_heartbeat_round_trip_seconds{worker="w",endpoint="3"} 0.0015)"));
    // Only the kinds with counts, the right direction, and no round trip
    // before a ping was answered.
    EXPECT_EQ(out.find(R"(kind="put")"), std::string::npos) << out;
    EXPECT_EQ(
        out.find(R"(ucx_endpoint_bytes_received_total{worker="w",endpoint="3",kind="tag_send")"),
        std::string::npos);
    EXPECT_EQ(out.find(R"(round_trip_seconds{worker="w",endpoint="4"})"), std::string::npos);
    // Each family once, its samples together.
    std::vector<std::string> types;
    for (const auto& l : lines_of(out))
        if (l.starts_with("# TYPE "))
            types.push_back(l);
    std::sort(types.begin(), types.end());
    EXPECT_EQ(std::adjacent_find(types.begin(), types.end()), types.end());
    std::string none;
    ucx::detail::write_endpoint_metrics(none, {});
    EXPECT_TRUE(none.empty());
    EXPECT_TRUE(ucx::detail::reserved_label_name("endpoint"));
    EXPECT_TRUE(ucx::detail::reserved_label_name("kind"));
    EXPECT_FALSE(ucx::detail::reserved_label_name("rank"));
}

} // namespace
