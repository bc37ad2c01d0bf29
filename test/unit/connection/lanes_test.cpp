// The lanes of an endpoint read from UCX's text (detail::parse_lanes): the
// forms UCX 1.9 to 1.22 print, real outputs of this machine's UCX 1.13 over
// TCP and shared memory, proxies, the connection manager's lane, and text
// that is not a lane.
#include "connection/lanes.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using ucx::endpoint_lane;
using ucx::detail::parse_lanes;

endpoint_lane lane(int index, std::string transport, std::string device,
                   std::vector<std::string> uses) {
    return {index, std::move(transport), std::move(device), std::move(uses)};
}

TEST(lanes, tcp_as_ucx_1_13_prints_it) {
    const char* text = "#\n"
                       "# UCP endpoint \n"
                       "#\n"
                       "#               peer: <no debug data>\n"
                       "#                 lane[0]:  0:tcp/lo.0 md[0]                -> "
                       "md[0]/tcp/sysdev[255] am am_bw#0 wireup\n"
                       "#\n"
                       "#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..20553.."
                       "<rndv>..(inf)\n"
                       "#                  rma_bw: mds rndv_rkey_size 9\n";
    EXPECT_EQ(parse_lanes(text),
              (std::vector<endpoint_lane>{lane(0, "tcp", "lo", {"am", "am_bw#0", "wireup"})}));
}

TEST(lanes, shared_memory_as_ucx_1_13_prints_it) {
    const char* text = "#                 lane[0]:  2:sysv/memory.0 md[2]           -> "
                       "md[2]/sysv/sysdev[255] amo#0 am am_bw#0\n"
                       "#                 lane[1]:  3:posix/memory.0 md[3]          -> "
                       "md[3]/posix/sysdev[255] amo#1\n"
                       "#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)\n";
    EXPECT_EQ(parse_lanes(text),
              (std::vector<endpoint_lane>{lane(0, "sysv", "memory", {"amo#0", "am", "am_bw#0"}),
                                          lane(1, "posix", "memory", {"amo#1"})}));
}

TEST(lanes, newer_ucx_prints_the_segment_size) {
    EXPECT_EQ(
        parse_lanes("#                 lane[1]:  5:rc_mlx5/mlx5_0:1.0 md[3]      -> "
                    "md[3]/ib/sysdev[1] seg 8256 rma_bw#0 am_bw#1\n"),
        (std::vector<endpoint_lane>{lane(1, "rc_mlx5", "mlx5_0:1", {"rma_bw#0", "am_bw#1"})}));
}

TEST(lanes, older_ucx_has_no_path_index_and_may_print_the_address_index) {
    EXPECT_EQ(parse_lanes("lane[0]:  1:tcp/eth0 md[1]   -> addr[2].md[1]/tcp      am wireup\n"),
              (std::vector<endpoint_lane>{lane(0, "tcp", "eth0", {"am", "wireup"})}));
}

TEST(lanes, a_device_name_with_a_dot_keeps_it) {
    // A VLAN interface, with UCX's path index after it.
    EXPECT_EQ(parse_lanes("lane[0]:  1:tcp/eth0.100.0 md[1] -> md[1]/tcp/sysdev[255] am\n"),
              (std::vector<endpoint_lane>{lane(0, "tcp", "eth0.100", {"am"})}));
}

TEST(lanes, a_proxy_lane_has_the_transport_of_the_lane_it_proxies) {
    const char* text = "lane[0]:  4:rc_mlx5/mlx5_0:1.0 md[1] <proxy> -> md[1]/ib/sysdev[255] "
                       "rma_bw#0\n"
                       "lane[1]: proxy to lane[0]              -> md[1]/ib am\n";
    EXPECT_EQ(parse_lanes(text),
              (std::vector<endpoint_lane>{lane(0, "rc_mlx5", "mlx5_0:1", {"rma_bw#0"}),
                                          lane(1, "rc_mlx5", "mlx5_0:1", {"am"})}));
}

TEST(lanes, the_wireup_lane_drops_its_auxiliary_transport) {
    EXPECT_EQ(parse_lanes("lane[2]:  6:rc_verbs/mlx5_0:1.0 md[1] -> md[1]/ib/sysdev[255] "
                          "wireup{ud_verbs/mlx5_0:1}\n"),
              (std::vector<endpoint_lane>{lane(2, "rc_verbs", "mlx5_0:1", {"wireup"})}));
}

TEST(lanes, the_connection_managers_lane) {
    EXPECT_EQ(parse_lanes("#                 lane[3]: cm tcp\n"),
              (std::vector<endpoint_lane>{lane(3, "tcp", "", {"cm"})}));
    EXPECT_EQ(parse_lanes("lane[0]: cm <unknown>\n"),
              (std::vector<endpoint_lane>{lane(0, "<unknown>", "", {"cm"})}));
}

TEST(lanes, a_lane_without_uses) {
    EXPECT_EQ(parse_lanes("lane[0]:  0:self/memory0.0 md[0] -> md[0]/self/sysdev[255]\n"),
              (std::vector<endpoint_lane>{lane(0, "self", "memory0", {})}));
}

TEST(lanes, what_is_not_a_lane_is_skipped) {
    for (const char* text :
         {"", "\n\n", "#\n", "# lane", "lane[0]:", "lane[0]: 0:tcp/lo",
          "lane[x]: 0:tcp/lo -> md[0] am", "lane[-1]: 0:tcp/lo -> md[0] am",
          "lane[0] 0:tcp/lo -> md[0] am", "lane[0]: tcp/lo -> md[0] am",
          "lane[0]: 0:tcp -> md[0] am", "lane[0]: 0:/lo -> md am", "lane[0]: 0:tcp/ -> md am",
          "lane[0]: cm", "lane[1]: proxy to -> md[0] am", "lane[1]: proxy lane[0] -> md[0] am",
          "put[0]: 0..<short>..(inf)"}) {
        EXPECT_TRUE(parse_lanes(text).empty()) << text;
    }
    // A line it cannot read does not hide the next one.
    EXPECT_EQ(parse_lanes("lane[0]: garbage\nlane[1]:  0:tcp/lo.0 md[0] -> md[0]/tcp am\n"),
              (std::vector<endpoint_lane>{lane(1, "tcp", "lo", {"am"})}));
}

// Cut and corrupted reports (seeded): never more lanes than lane lines, and
// every lane read has its number (under the sanitizers: no read past the
// text).
TEST(lanes, cut_and_corrupted_text_is_read_safely) {
    const std::string report =
        "#                 lane[0]:  2:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] "
        "amo#0 am am_bw#0\n"
        "#                 lane[1]: proxy to lane[0]   -> md[3]/posix seg 8256 amo#1\n"
        "#                 lane[2]: cm tcp\n"
        "#                 lane[3]:  4:rc_mlx5/mlx5_0:1.0 md[1] <proxy> -> addr[1].md[1]/ib "
        "wireup{ud/mlx5_0:1}\n";
    std::mt19937 rng(20261129);
    for (int round = 0; round < 5000; ++round) {
        std::string text = report.substr(0, rng() % (report.size() + 1));
        const int flips = static_cast<int>(rng() % 4);
        for (int k = 0; k < flips && !text.empty(); ++k) {
            const char pool[] = "[]:/.#- \n0123456789lanecmproxyto{}";
            text[rng() % text.size()] = pool[rng() % (sizeof pool - 1)];
        }
        const auto lanes = parse_lanes(text);
        std::size_t lines = 0;
        for (std::size_t at = 0; (at = text.find("lane[", at)) != std::string::npos; ++at)
            ++lines;
        EXPECT_LE(lanes.size(), lines) << text;
        for (const auto& l : lanes)
            EXPECT_GE(l.index, 0) << text;
    }
}

TEST(lanes, a_proxy_of_a_missing_lane_keeps_no_transport) {
    EXPECT_EQ(parse_lanes("lane[1]: proxy to lane[7] -> md[1]/ib am\n"),
              (std::vector<endpoint_lane>{lane(1, "", "", {"am"})}));
}

} // namespace
