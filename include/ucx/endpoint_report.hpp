// What a process's endpoints are, and the lanes UCX chose for each: the
// answer of a metrics exporter's /endpoints, as a value and as JSON (see
// docs/guide/metrics.md).
#pragma once

#include <ucx/endpoint_lane.hpp>
#include <ucx/metrics.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ucx {

/// One endpoint of a worker, as its worker's executor saw it.
struct endpoint_report {
    /// The name its worker is served under (`metrics_exporter::add`).
    std::string worker;
    /// A number no other endpoint of the process has.
    std::uint64_t id = 0;
    /// How it was made: "client" and "server" (the two sides of a
    /// connection with the library's handshake: a connect and a listener's,
    /// an address acceptor's or a group's connection), "address" (made from
    /// a worker address, with no handshake), "plain_client" and
    /// "plain_server" (a plain UCP connection), "borrowed" (the reply
    /// endpoint of an active message).
    std::string role;
    /// Where it stands: "idle", "connecting", "accepting", "open",
    /// "closing", "lingering" (a graceful close waiting for the peer's
    /// acknowledgement), "closed".
    std::string state;
    /// Why it is not usable (the error's message); empty while it is.
    std::string error;
    /// Whether it is one of a group's connections.
    bool fabric = false;
    /// The socket addresses of the connection, "ADDRESS:PORT" (IPv6 in
    /// brackets), where it has them (client and server endpoints); empty
    /// otherwise.
    std::string local;
    std::string remote;
    /// The lanes UCX chose for it (`endpoint::lanes()`); empty unless open.
    std::vector<endpoint_lane> lanes;
    /// Its heartbeats (`worker_options::peer_timeout`): pings sent after a
    /// tick in which nothing came from the peer, pongs received, and the
    /// round trip of the last ping answered, in nanoseconds (-1: none yet).
    std::uint64_t pings = 0;
    std::uint64_t pongs = 0;
    std::int64_t round_trip_ns = -1;
    /// The operations made on it (`endpoint::metrics()`).
    endpoint_metrics metrics{};

    bool operator==(const endpoint_report&) const = default;
};

/// A process's endpoints: what a metrics exporter answers at /endpoints.
struct endpoints_report {
    /// The host and process.
    std::string host;
    std::int64_t pid = 0;
    /// The UCX the process runs ("1.13.1").
    std::string ucx_version;
    /// The endpoints of every worker that answered, by worker in the order
    /// they were added, then by id.
    std::vector<endpoint_report> endpoints;
    /// The workers whose executor did not answer in time.
    std::vector<std::string> unanswered;

    bool operator==(const endpoints_report&) const = default;
};

/// `r` as a JSON document (docs/guide/metrics.md describes it).
std::string to_json(const endpoints_report& r);

/// Parses a document made by `to_json` into `r`. Fails with
/// `boost::asio::error::invalid_argument` when `json` is not valid JSON or
/// not such a report (a field of the wrong type, a missing field, nesting
/// deeper than 16); `r` is then unspecified. Unknown fields are ignored.
boost::system::error_code from_json(std::string_view json, endpoints_report& r);

} // namespace ucx
