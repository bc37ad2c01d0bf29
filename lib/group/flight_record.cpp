// Flight records (<ucx/flight_recorder.hpp>) as JSON, back from JSON, and the
// diagnosis of the records of a group's ranks. Free of I/O.
#include <ucx/flight_recorder.hpp>

#include "util/json.hpp"
#include "util/text.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

namespace ucx {

namespace {

using detail::append_json_string;
using detail::json;
using detail::json_array;
using detail::json_fields;
using detail::json_object;
using detail::json_reader;
using detail::value_of;

constexpr std::array<std::string_view, 4> event_kind_names = {"collective", "send", "recv",
                                                              "check"};
constexpr std::array<std::string_view, 4> state_names = {"queued", "running", "completed",
                                                         "failed"};
constexpr std::array<std::string_view, 10> datatype_names = {
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32", "float64"};
constexpr std::array<std::string_view, 4> reduce_op_names = {"sum", "prod", "min", "max"};
constexpr std::array<std::string_view, collective_kind_count> collective_names = {
    "barrier", "broadcast", "gather", "allgather", "allgatherv", "reduce", "allreduce", "alltoall"};

template <std::size_t N, class E>
std::string_view name_of(const std::array<std::string_view, N>& names, E v) noexcept {
    const auto i = static_cast<std::size_t>(v);
    return i < N ? names[i] : std::string_view("unknown");
}

// --- writing ---

template <class T>
void put_number(std::string& out, T v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

/// Writes `"name":` (with the comma before it unless `first`).
void key(std::string& out, std::string_view name, bool first = false) {
    if (!first)
        out += ',';
    append_json_string(out, name);
    out += ':';
}

void put_event(std::string& out, const flight_event& e) {
    out += '{';
    key(out, "id", true);
    put_number(out, e.id);
    key(out, "kind");
    append_json_string(out, to_string(e.kind));
    key(out, "state");
    append_json_string(out, to_string(e.state));
    if (e.kind == flight_event_kind::collective || e.kind == flight_event_kind::check) {
        key(out, "collective");
        append_json_string(out, name_of(collective_names, e.collective));
        key(out, "seq");
        put_number(out, e.seq);
        key(out, "root");
        put_number(out, e.root);
    } else {
        key(out, "peer");
        put_number(out, e.peer);
        key(out, "tag");
        put_number(out, e.tag);
    }
    if (e.has_reduction) {
        key(out, "type");
        append_json_string(out, to_string(e.type));
        key(out, "op");
        append_json_string(out, to_string(e.op));
    }
    key(out, "in_bytes");
    put_number(out, e.in_bytes);
    key(out, "out_bytes");
    put_number(out, e.out_bytes);
    key(out, "start_us");
    put_number(out, e.start_us);
    key(out, "end_us");
    put_number(out, e.end_us);
    if (e.rounds > 0 || e.round > 0 || !e.waiting_for.empty() || e.state == flight_state::running) {
        key(out, "round");
        put_number(out, e.round);
        key(out, "rounds");
        put_number(out, e.rounds);
        key(out, "waiting_for");
        out += '[';
        for (std::size_t i = 0; i < e.waiting_for.size(); ++i) {
            if (i > 0)
                out += ',';
            put_number(out, e.waiting_for[i]);
        }
        out += ']';
    }
    if (!e.error.empty()) {
        key(out, "error");
        append_json_string(out, e.error);
    }
    out += '}';
}

bool read_event(const json& j, flight_event& e) {
    const auto* o = std::get_if<json_object>(&j.v);
    if (!o)
        return false;
    json_fields f(*o);
    f.integer("id", e.id);
    f.named("kind", event_kind_names, e.kind);
    f.named("state", state_names, e.state);
    if (!f.ok())
        return false;
    if (e.kind == flight_event_kind::collective || e.kind == flight_event_kind::check) {
        f.named("collective", collective_names, e.collective);
        f.integer("seq", e.seq);
        f.integer("root", e.root);
    } else {
        f.integer("peer", e.peer);
        f.integer("tag", e.tag);
    }
    e.has_reduction = f.named("type", datatype_names, e.type, false);
    if (e.has_reduction)
        f.named("op", reduce_op_names, e.op);
    f.integer("in_bytes", e.in_bytes);
    f.integer("out_bytes", e.out_bytes);
    f.integer("start_us", e.start_us);
    f.integer("end_us", e.end_us);
    f.integer("round", e.round, false);
    f.integer("rounds", e.rounds, false);
    f.text("error", e.error, false);
    if (const json* w = f.find("waiting_for")) {
        const auto* a = std::get_if<json_array>(&w->v);
        if (!a)
            return false;
        for (const json& r : *a) {
            const auto* d = std::get_if<double>(&r.v);
            if (!d || !(*d >= -1 && *d <= 1e9) || *d != static_cast<double>(static_cast<int>(*d)))
                return false;
            e.waiting_for.push_back(static_cast<int>(*d));
        }
    }
    return f.ok();
}

// --- diagnosing ---

std::string rank_list(const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        if (i > 0)
            s += ", ";
        s += std::to_string(ranks[i]);
    }
    return s;
}

/// What a collective call was, as the ranks must agree on it.
std::string call_of(const flight_event& e) {
    std::string s(name_of(collective_names, e.collective));
    if (e.root >= 0)
        s += " to/from root " + std::to_string(e.root);
    if (e.collective != collective_kind::barrier)
        s += " of " + std::to_string(e.in_bytes) + " bytes";
    if (e.has_reduction) {
        s += ' ';
        s += to_string(e.type);
        s += ' ';
        s += to_string(e.op);
    }
    return s;
}

/// The arguments every rank must agree on (an allgatherv's sizes differ by
/// rank; a broadcast's size is its result's).
std::string agreed_part(const flight_event& e) {
    std::string s(name_of(collective_names, e.collective));
    s += '/';
    s += std::to_string(e.root);
    if (e.collective != collective_kind::barrier && e.collective != collective_kind::allgatherv &&
        e.collective != collective_kind::broadcast)
        s += '/' + std::to_string(e.in_bytes);
    if (e.collective == collective_kind::broadcast)
        s += '/' + std::to_string(e.out_bytes);
    if (e.has_reduction) {
        s += '/';
        s += to_string(e.type);
        s += '/';
        s += to_string(e.op);
    }
    return s;
}

bool unfinished(flight_state s) noexcept {
    return s == flight_state::queued || s == flight_state::running;
}

} // namespace

std::string_view to_string(flight_event_kind k) noexcept {
    return name_of(event_kind_names, k);
}
std::string_view to_string(flight_state s) noexcept {
    return name_of(state_names, s);
}
std::string_view to_string(datatype t) noexcept {
    return name_of(datatype_names, t);
}
std::string_view to_string(reduce_op op) noexcept {
    return name_of(reduce_op_names, op);
}

std::string to_json(const flight_record& r) {
    std::string out = "{";
    key(out, "format", true);
    append_json_string(out, "ucx-asio-flight-record");
    key(out, "version");
    put_number(out, 1);
    key(out, "group");
    append_json_string(out, r.group);
    key(out, "rank");
    put_number(out, r.rank);
    key(out, "size");
    put_number(out, r.size);
    key(out, "host");
    append_json_string(out, r.host);
    key(out, "pid");
    put_number(out, r.pid);
    key(out, "time_us");
    put_number(out, r.time_us);
    key(out, "reason");
    append_json_string(out, r.reason);
    key(out, "error");
    append_json_string(out, r.error);
    key(out, "collectives");
    put_number(out, r.collectives);
    key(out, "dropped");
    put_number(out, r.dropped);
    key(out, "events");
    out += "[\n";
    for (std::size_t i = 0; i < r.events.size(); ++i) {
        if (i > 0)
            out += ",\n";
        put_event(out, r.events[i]);
    }
    out += "\n]}\n";
    return out;
}

boost::system::error_code from_json(std::string_view text, flight_record& r) {
    const auto invalid = make_error_code(boost::asio::error::invalid_argument);
    json doc;
    if (!json_reader(text).document(doc))
        return invalid;
    const auto* o = std::get_if<json_object>(&doc.v);
    if (!o)
        return invalid;
    json_fields f(*o);
    std::string format;
    f.text("format", format);
    if (!f.ok() || format != "ucx-asio-flight-record")
        return invalid;
    int version = 0;
    f.integer("version", version);
    if (version != 1)
        return invalid;
    f.text("group", r.group);
    f.integer("rank", r.rank);
    f.integer("size", r.size);
    f.text("host", r.host, false);
    f.integer("pid", r.pid, false);
    f.integer("time_us", r.time_us, false);
    f.text("reason", r.reason, false);
    f.text("error", r.error, false);
    f.integer("collectives", r.collectives);
    f.integer("dropped", r.dropped, false);
    if (!f.ok() || r.size < 1 || r.rank < 0 || r.rank >= r.size)
        return invalid;
    const json* events = f.find("events");
    const auto* a = events ? std::get_if<json_array>(&events->v) : nullptr;
    if (!a)
        return invalid;
    r.events.clear();
    r.events.reserve(a->size());
    for (const json& j : *a) {
        flight_event e;
        if (!read_event(j, e))
            return invalid;
        r.events.push_back(std::move(e));
    }
    return {};
}

flight_diagnosis diagnose(std::span<const flight_record> records) {
    flight_diagnosis d;
    if (records.empty())
        return d;
    const std::string& group = records.front().group;
    const int size = records.front().size;
    // Memory and time in proportion to the records, whatever size they
    // claim.
    std::map<int, const flight_record*> by_rank;
    for (const flight_record& r : records)
        if (r.group == group && r.size == size && r.rank >= 0 && r.rank < size)
            by_rank.emplace(r.rank, &r);
    std::vector<int> present;
    for (const auto& [rank, r] : by_rank)
        present.push_back(rank);
    std::uint64_t missing_count = 0;
    {
        int next = 0;
        const auto gap = [&](int upto) { // ranks next to upto - 1 sent none
            missing_count += static_cast<std::uint64_t>(upto - next);
            for (int r = next; r < upto && d.missing.size() < flight_diagnosis::max_missing; ++r)
                d.missing.push_back(r);
        };
        for (const int r : present) {
            gap(r);
            next = r + 1;
        }
        gap(size);
    }
    std::set<int> culprits;

    // Each rank's collectives by number, from the oldest every record holds.
    std::map<int, std::map<std::uint64_t, const flight_event*>> calls;
    std::set<std::uint64_t> numbers;
    std::uint64_t first = 0;
    for (const auto& [rank, rec] : by_rank) {
        auto& m = calls[rank];
        for (const flight_event& e : rec->events)
            if (e.kind == flight_event_kind::collective) {
                m[e.seq] = &e;
                numbers.insert(e.seq);
            }
        if (!m.empty() && rec->dropped > 0)
            first = std::max(first, m.begin()->first);
    }

    // The first collective the ranks disagree on: one called differently,
    // or not called by a rank while others did and did not complete it.
    for (auto n = numbers.lower_bound(first); n != numbers.end(); ++n) {
        const std::uint64_t seq = *n;
        std::map<std::string, std::vector<int>> variants;
        std::vector<int> absent, waiting;
        const flight_event* example = nullptr;
        std::map<std::string, const flight_event*> example_of;
        for (int r : present) {
            const auto& m = calls[r];
            const auto it = m.find(seq);
            if (it == m.end()) {
                // Called but no longer (or not yet: a check's number) in the
                // ring: only a rank that never called it counts as absent.
                if (by_rank[r]->collectives <= seq)
                    absent.push_back(r);
                continue;
            }
            const std::string part = agreed_part(*it->second);
            variants[part].push_back(r);
            example_of.emplace(part, it->second);
            example = it->second;
            if (unfinished(it->second->state) ||
                (it->second->state == flight_state::failed && it->second->end_us == 0))
                waiting.push_back(r);
        }
        if (variants.size() > 1) {
            std::string line = "collective " + std::to_string(seq) + ": ";
            // The smallest variant's ranks diverged (ties: all of them).
            std::size_t fewest = present.size();
            for (const auto& [part, ranks] : variants)
                fewest = std::min(fewest, ranks.size());
            bool first_variant = true;
            for (const auto& [part, ranks] : variants) {
                if (!first_variant)
                    line += "; ";
                first_variant = false;
                line += rank_list(ranks) + " called " + call_of(*example_of[part]);
                if (ranks.size() == fewest)
                    culprits.insert(ranks.begin(), ranks.end());
            }
            d.findings.push_back(std::move(line));
            break;
        }
        if (!absent.empty() && example) {
            std::vector<int> others;
            for (const auto& [part, ranks] : variants)
                others.insert(others.end(), ranks.begin(), ranks.end());
            std::sort(others.begin(), others.end());
            std::string line = rank_list(absent) + " never called collective " +
                               std::to_string(seq) + " (" + call_of(*example) + ")";
            line += ", which " + rank_list(others) + " called";
            if (!waiting.empty())
                line += " (" + rank_list(waiting) + " waited in it)";
            d.findings.push_back(std::move(line));
            culprits.insert(absent.begin(), absent.end());
            break;
        }
    }

    // What the collectives in flight wait for, and the messages in flight.
    for (int r : present) {
        for (const flight_event& e : by_rank[r]->events) {
            if (!unfinished(e.state))
                continue;
            if (e.kind == flight_event_kind::collective && e.state == flight_state::running) {
                std::string line = "rank " + std::to_string(r) + ": collective " +
                                   std::to_string(e.seq) + " (" + call_of(e) + ") in round " +
                                   std::to_string(e.round + 1) + " of " + std::to_string(e.rounds);
                if (!e.waiting_for.empty())
                    line += ", waiting for " + rank_list(e.waiting_for);
                d.findings.push_back(std::move(line));
            } else if (e.kind == flight_event_kind::send || e.kind == flight_event_kind::recv) {
                d.findings.push_back(
                    "rank " + std::to_string(r) + ": a " + std::string(to_string(e.kind)) +
                    (e.kind == flight_event_kind::send ? " to rank " : " from rank ") +
                    std::to_string(e.peer) + " (tag " + std::to_string(e.tag) + ", " +
                    std::to_string(e.kind == flight_event_kind::send ? e.in_bytes : e.out_bytes) +
                    " bytes) in flight");
            }
        }
    }
    if (!d.missing.empty()) {
        std::string line = "no record from " + rank_list(d.missing);
        if (missing_count > d.missing.size())
            line += " and " + std::to_string(missing_count - d.missing.size()) + " more";
        d.findings.push_back(std::move(line));
        // A rank without a record is to blame only when nothing else is.
        if (culprits.empty())
            culprits.insert(d.missing.begin(), d.missing.end());
    }
    d.culprits.assign(culprits.begin(), culprits.end());
    return d;
}

} // namespace ucx
