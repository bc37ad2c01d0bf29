// The lanes of an endpoint, read from the text UCX prints for it
// (ucp_ep_print_info), free of I/O: UCX before 1.14 has no query for them.
#pragma once

#include <ucx/endpoint_lane.hpp>

#include <string_view>
#include <vector>

namespace ucx::detail {

/// The lanes in `text`, as `ucp_ep_print_info` prints them, in their order.
/// Lines that are not lanes are skipped, and so is a lane line this parser
/// cannot read; a lane that proxies another has that lane's transport and
/// device. The forms read (UCX 1.9 to 1.22):
///
///     lane[0]:  2:sysv/memory.0 md[2]   -> md[2]/sysv/sysdev[255] amo#0 am am_bw#0
///     lane[1]:  0:tcp/lo md[0]          -> addr[1].md[0]/tcp      am wireup{ud/mlx5_0:1}
///     lane[2]:  5:rc_mlx5/mlx5_0:1.0 md[3] <proxy> -> md[3]/ib/sysdev[1] seg 8256 rma_bw#0
///     lane[3]: proxy to lane[2]             -> md[3]/ib          am
///     lane[4]: cm tcp
std::vector<endpoint_lane> parse_lanes(std::string_view text);

} // namespace ucx::detail
