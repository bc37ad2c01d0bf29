// The flight recorder of a ucx::group: the last collectives and messages by
// rank of each rank, as a record (`group::flight_record()`, or the JSON files
// a group writes when it fails, see `group_options::flight_recorder_dump`),
// and the diagnosis of the records of several ranks: the rank that diverged,
// or that never called the collective the others wait in.
#pragma once

#include <boost/system/error_code.hpp>
#include <ucx/metrics.hpp>
#include <ucx/reduction.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ucx {

/// What a flight recorder event is.
enum class flight_event_kind : std::uint8_t {
    collective, ///< a collective (`flight_event::collective` says which)
    send,       ///< `group::async_send`
    recv,       ///< `group::async_recv`
    check,      ///< the comparison of the next collective's arguments across
                ///< ranks (`group_options::check_collectives`)
};

/// Where an event stands.
enum class flight_state : std::uint8_t {
    queued,    ///< called, waiting for the collectives before it
    running,   ///< started: its messages are in flight
    completed, ///< completed successfully
    failed,    ///< completed with an error (`flight_event::error`)
};

/// The name of `k` in a record ("collective", "send", ...).
std::string_view to_string(flight_event_kind k) noexcept;
/// The name of `s` in a record ("queued", "running", ...).
std::string_view to_string(flight_state s) noexcept;

/// One collective or message of a group on one rank.
struct flight_event {
    /// Its number among the events of the group on this rank, from 0.
    std::uint64_t id = 0;
    flight_event_kind kind = flight_event_kind::collective;
    flight_state state = flight_state::queued;
    /// A collective (or a check): which, and its number among the group's
    /// collectives, from 0. Every rank calls the same collectives in the
    /// same order, so the `seq`-th collective of every rank is the same
    /// call. (A check takes the number before its collective's.)
    collective_kind collective = collective_kind::barrier;
    std::uint64_t seq = 0;
    /// A rooted collective's root, or -1.
    int root = -1;
    /// A reduction's element type and operation (`has_reduction`).
    bool has_reduction = false;
    datatype type = datatype::uint8;
    reduce_op op = reduce_op::sum;
    /// The bytes of its input and of its result here (a message: its size,
    /// in `in_bytes` for a send and `out_bytes` for a receive).
    std::size_t in_bytes = 0;
    std::size_t out_bytes = 0;
    /// A message: the rank it goes to or comes from, and its tag.
    int peer = -1;
    std::uint64_t tag = 0;
    /// When it was called and when it completed (0: not yet), in
    /// microseconds since the Unix epoch on this host's clock.
    std::int64_t start_us = 0;
    std::int64_t end_us = 0;
    /// A running collective: the round it is in (from 0) and its rounds,
    /// and the ranks whose messages of that round it still waits for
    /// (sending to or receiving from), when recorded.
    std::uint32_t round = 0;
    std::uint32_t rounds = 0;
    std::vector<int> waiting_for;
    /// `failed`: the error's message.
    std::string error;
};

/// The flight record of one rank of a group: its last events, oldest first.
struct flight_record {
    /// The group's name (`group_options::name`; a split group's has
    /// "/split" and its number appended).
    std::string group;
    int rank = -1;
    int size = 0;
    /// The host and process it was taken in.
    std::string host;
    std::int64_t pid = 0;
    /// When it was taken (microseconds since the Unix epoch).
    std::int64_t time_us = 0;
    /// Why: "request" (`group::flight_record()`), "timeout", "mismatch",
    /// "aborted", "failed".
    std::string reason;
    /// The group's error, if it failed.
    std::string error;
    /// The collectives called on this rank so far (the next one's `seq`).
    std::uint64_t collectives = 0;
    /// Events older than the oldest kept (the recorder keeps
    /// `group_options::flight_recorder_entries`).
    std::uint64_t dropped = 0;
    std::vector<flight_event> events;
};

/// `r` as a JSON document (the format that `docs/guide/groups.md` describes).
std::string to_json(const flight_record& r);

/// Parses a JSON document made by `to_json` into `r`. Fails with
/// `boost::asio::error::invalid_argument` when `json` is not valid JSON or
/// not a flight record (a field of the wrong type, a missing field, an
/// unknown name of a kind, a state, a type or an operation, or nesting
/// deeper than 16); `r` is then unspecified. Unknown fields are ignored.
boost::system::error_code from_json(std::string_view json, flight_record& r);

/// What the records of a group's ranks say (`diagnose`).
struct flight_diagnosis {
    /// The ranks that diverged or never called a collective the others
    /// waited in, or that sent no record.
    std::vector<int> culprits;
    /// The ranks whose record is missing (the first `max_missing`).
    std::vector<int> missing;
    static constexpr std::size_t max_missing = 4096;
    /// One line per finding, the most telling first: "rank 3 never called
    /// collective 5 (barrier) that ranks 0, 1, 2 waited in", "collective 2:
    /// rank 1 called allreduce of 4096 bytes float32 sum, ranks 0, 2, 3
    /// allreduce of 8192 bytes float32 sum", "rank 1 waits for a message
    /// from rank 2 (tag 7)". Empty: the records show nothing wrong.
    std::vector<std::string> findings;
};

/// Compares the records of the ranks of one group (any order; records of
/// other groups than the first's, and second records of a rank, are
/// ignored) and names the ranks that diverged or never arrived.
flight_diagnosis diagnose(std::span<const flight_record> records);

} // namespace ucx
