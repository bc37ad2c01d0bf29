#include "metrics/exposition.hpp"

#include <charconv>
#include <cstdint>

namespace ucx {

std::string_view to_string(operation_kind k) noexcept {
    switch (k) {
    case operation_kind::other:
        return "other";
    case operation_kind::tag_send:
        return "tag_send";
    case operation_kind::tag_recv:
        return "tag_recv";
    case operation_kind::am_send:
        return "am_send";
    case operation_kind::am_recv:
        return "am_recv";
    case operation_kind::stream_write:
        return "stream_write";
    case operation_kind::stream_read:
        return "stream_read";
    case operation_kind::put:
        return "put";
    case operation_kind::get:
        return "get";
    case operation_kind::atomic:
        return "atomic";
    case operation_kind::connect:
        return "connect";
    case operation_kind::accept:
        return "accept";
    case operation_kind::close:
        return "close";
    }
    return "unknown";
}

std::string_view to_string(collective_kind k) noexcept {
    switch (k) {
    case collective_kind::barrier:
        return "barrier";
    case collective_kind::broadcast:
        return "broadcast";
    case collective_kind::gather:
        return "gather";
    case collective_kind::allgather:
        return "allgather";
    case collective_kind::allgatherv:
        return "allgatherv";
    case collective_kind::reduce:
        return "reduce";
    case collective_kind::allreduce:
        return "allreduce";
    case collective_kind::alltoall:
        return "alltoall";
    }
    return "unknown";
}

std::string_view to_string(store_operation op) noexcept {
    switch (op) {
    case store_operation::set:
        return "set";
    case store_operation::get:
        return "get";
    case store_operation::add:
        return "add";
    case store_operation::compare_set:
        return "compare_set";
    case store_operation::check:
        return "check";
    case store_operation::wait:
        return "wait";
    case store_operation::erase:
        return "erase";
    case store_operation::num_keys:
        return "num_keys";
    }
    return "unknown";
}

std::string_view to_string(refusal_cause c) noexcept {
    switch (c) {
    case refusal_cause::backlog_full:
        return "backlog_full";
    case refusal_cause::filter:
        return "filter";
    case refusal_cause::out_of_descriptors:
        return "out_of_descriptors";
    case refusal_cause::handshake_timeout:
        return "handshake_timeout";
    case refusal_cause::handshake_failed:
        return "handshake_failed";
    }
    return "unknown";
}

} // namespace ucx

namespace ucx::detail {

bool valid_label_name(std::string_view name) noexcept {
    if (name.empty() || name.starts_with("__"))
        return false;
    for (std::size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!letter && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

void append_label_value(std::string& out, std::string_view value) {
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
}

namespace {

/// `name="value"`, after a comma unless `out` is empty.
void append_label(std::string& out, std::string_view name, std::string_view value) {
    if (!out.empty())
        out += ',';
    out += name;
    out += "=\"";
    append_label_value(out, value);
    out += '"';
}

} // namespace

std::string render_labels(std::span<const std::pair<std::string, std::string>> labels) {
    std::string out;
    for (const auto& [name, value] : labels)
        append_label(out, name, value);
    return out;
}

namespace {

void append_number(std::string& out, std::uint64_t v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void append_seconds(std::string& out, std::chrono::nanoseconds d) {
    // Seconds with nanosecond precision, without a floating-point round trip.
    const std::int64_t ns = d.count() < 0 ? 0 : d.count();
    append_number(out, static_cast<std::uint64_t>(ns / 1'000'000'000));
    std::int64_t frac = ns % 1'000'000'000;
    if (frac == 0)
        return;
    char digits[10] = "000000000";
    for (int i = 8; i >= 0; --i, frac /= 10)
        digits[i] = static_cast<char>('0' + frac % 10);
    std::size_t n = 9;
    while (digits[n - 1] == '0')
        --n;
    out += '.';
    out.append(digits, n);
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
}

/// `name{labels,extra} value\n`.
void write_sample(std::string& out, std::string_view name, const std::string& labels,
                  std::string_view extra, std::uint64_t value) {
    out += name;
    if (!labels.empty() || !extra.empty()) {
        out += '{';
        out += labels;
        if (!labels.empty() && !extra.empty())
            out += ',';
        out += extra;
        out += '}';
    }
    out += ' ';
    append_number(out, value);
    out += '\n';
}

template <class Kind>
std::string kind_label(Kind k) {
    std::string s = "kind=\"";
    s += to_string(k);
    s += '"';
    return s;
}

/// The samples of one histogram (`name`_bucket, _sum, _count); `kind`: its
/// own label (`kind="..."`), or empty.
void histogram_samples(std::string& out, std::string_view name, const std::string& labels,
                       const std::string& kind, const latency_histogram& h) {
    const std::string bucket = std::string(name) + "_bucket";
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < latency_histogram::bucket_count; ++b) {
        cumulative += h.buckets[b];
        std::string extra = kind.empty() ? "le=\"" : kind + ",le=\"";
        if (b + 1 < latency_histogram::bucket_count)
            append_seconds(extra, latency_histogram::upper_bound(b));
        else
            extra += "+Inf";
        extra += '"';
        write_sample(out, bucket, labels, extra, cumulative);
    }
    out += name;
    out += "_sum";
    if (!labels.empty() || !kind.empty()) {
        out += '{';
        out += labels;
        if (!labels.empty() && !kind.empty())
            out += ',';
        out += kind;
        out += '}';
    }
    out += ' ';
    append_seconds(out, h.sum);
    out += '\n';
    write_sample(out, std::string(name) + "_count", labels, kind, h.count);
}

template <class Get>
void per_worker(std::string& out, std::span<const labelled_worker> workers, std::string_view name,
                std::string_view type, std::string_view help, Get get) {
    header(out, name, type, help);
    for (const labelled_worker& w : workers)
        write_sample(out, name, w.labels, {}, get(w.metrics));
}

template <class Get>
void per_kind(std::string& out, std::span<const labelled_worker> workers, std::string_view name,
              std::string_view help, Get get, bool (*include)(operation_kind) = nullptr) {
    header(out, name, "counter", help);
    for (const labelled_worker& w : workers)
        for (std::size_t k = 0; k < operation_kind_count; ++k) {
            const auto kind = static_cast<operation_kind>(k);
            if (include && !include(kind))
                continue;
            write_sample(out, name, w.labels, kind_label(kind), get(w.metrics.operations[k]));
        }
}

bool moves_bytes(operation_kind k) noexcept {
    return k != operation_kind::other && k != operation_kind::atomic &&
           k != operation_kind::connect && k != operation_kind::accept &&
           k != operation_kind::close;
}

} // namespace

void write_worker_metrics(std::string& out, std::span<const labelled_worker> workers) {
    using m = worker_metrics;
    per_kind(out, workers, "ucx_operations_started_total", "Operations started, by kind.",
             [](const operation_counts& c) { return c.started; });
    per_kind(out, workers, "ucx_operations_completed_total",
             "Operations completed (failed or not), by kind.",
             [](const operation_counts& c) { return c.completed; });
    per_kind(out, workers, "ucx_operations_failed_total",
             "Operations completed with an error (cancellations included), by kind.",
             [](const operation_counts& c) { return c.failed; });
    per_kind(
        out, workers, "ucx_bytes_sent_total",
        "Bytes sent, written or put by the operations that succeeded, by kind.",
        [](const operation_counts& c) { return c.bytes; },
        +[](operation_kind k) { return sends_bytes(k); });
    per_kind(
        out, workers, "ucx_bytes_received_total",
        "Bytes received, read or got by the operations that succeeded, by kind.",
        [](const operation_counts& c) { return c.bytes; },
        +[](operation_kind k) { return moves_bytes(k) && !sends_bytes(k); });
    per_worker(out, workers, "ucx_operations_in_flight", "gauge", "Operations in flight.",
               [](const m& x) { return x.in_flight; });

    header(out, "ucx_operation_errors_total", "counter",
           "Operations completed with an error, by error (category:value) and its message; "
           "error=\"other\" counts the codes past the 16 first seen.");
    for (const labelled_worker& w : workers) {
        for (const error_count& e : w.metrics.errors) {
            std::string extra = "error=\"";
            append_label_value(extra, e.code.category().name());
            extra += ':';
            extra += std::to_string(e.code.value());
            extra += "\",message=\"";
            append_label_value(extra, e.code.message());
            extra += '"';
            write_sample(out, "ucx_operation_errors_total", w.labels, extra, e.count);
        }
        if (w.metrics.other_errors)
            write_sample(out, "ucx_operation_errors_total", w.labels,
                         "error=\"other\",message=\"\"", w.metrics.other_errors);
    }

    per_worker(out, workers, "ucx_progress_passes_total", "counter", "Progress passes run.",
               [](const m& x) { return x.passes; });
    per_worker(out, workers, "ucx_progress_calls_total", "counter", "ucp_worker_progress calls.",
               [](const m& x) { return x.progress_calls; });
    per_worker(out, workers, "ucx_progress_arms_total", "counter", "ucp_worker_arm calls.",
               [](const m& x) { return x.arms; });
    per_worker(out, workers, "ucx_progress_arm_busy_total", "counter",
               "ucp_worker_arm calls that answered busy (events were pending).",
               [](const m& x) { return x.arm_busy; });
    per_worker(out, workers, "ucx_progress_wakeups_total", "counter",
               "Wake-ups on the worker's event file descriptor.",
               [](const m& x) { return x.wakeups; });
    per_worker(out, workers, "ucx_progress_yields_total", "counter",
               "Passes that yielded to the other handlers of the executor.",
               [](const m& x) { return x.yields; });
    per_worker(out, workers, "ucx_progress_cpu_yields_total", "counter",
               "Times a spinning pass gave the processor to other threads.",
               [](const m& x) { return x.cpu_yields; });
    per_worker(out, workers, "ucx_progress_backoffs_total", "counter",
               "Passes that ended in a short back-off.", [](const m& x) { return x.backoffs; });
    per_worker(out, workers, "ucx_progress_parks_total", "counter",
               "Passes that ended parked, spinning in turns with other workers.",
               [](const m& x) { return x.parks; });
    per_worker(out, workers, "ucx_progress_safety_timer_passes_total", "counter",
               "Passes started by the safety timer.",
               [](const m& x) { return x.safety_timer_passes; });
    per_worker(out, workers, "ucx_staged_operations_total", "counter",
               "Operations whose device buffer went through pinned host memory.",
               [](const m& x) { return x.staged_operations; });
    per_worker(out, workers, "ucx_staged_bytes_total", "counter",
               "Bytes of the operations staged through pinned host memory.",
               [](const m& x) { return x.staged_bytes; });
    per_worker(out, workers, "ucx_heartbeat_pings_total", "counter",
               "Pings sent to peers that were silent for a heartbeat tick.",
               [](const m& x) { return x.heartbeat_pings; });
    per_worker(out, workers, "ucx_heartbeat_pongs_total", "counter",
               "Pongs received in answer to pings.", [](const m& x) { return x.heartbeat_pongs; });
    per_worker(out, workers, "ucx_peers_unresponsive_total", "counter",
               "Connections failed because their peer stopped answering.",
               [](const m& x) { return x.peers_unresponsive; });
    if (!workers.empty()) {
        constexpr std::string_view rtt = "ucx_heartbeat_round_trip_seconds";
        header(out, rtt, "histogram", "Time from a connection's last ping to the pong.");
        for (const labelled_worker& w : workers)
            histogram_samples(out, rtt, w.labels, {}, w.metrics.heartbeat_round_trip);
    }

    bool any_latency = false;
    for (const labelled_worker& w : workers)
        any_latency = any_latency || w.metrics.has_latency;
    if (!any_latency)
        return;
    constexpr std::string_view hist = "ucx_operation_duration_seconds";
    header(out, hist, "histogram",
           "Time from an operation's start to its completion, by kind, of the "
           "operations measured (workers with latency histograms on: one "
           "operation in latency_sampling).");
    for (const labelled_worker& w : workers) {
        if (!w.metrics.has_latency)
            continue;
        for (std::size_t k = 0; k < operation_kind_count; ++k)
            histogram_samples(out, hist, w.labels, kind_label(static_cast<operation_kind>(k)),
                              w.metrics.latency[k]);
    }
}

void write_group_metrics(std::string& out, std::span<const labelled_group> groups) {
    if (groups.empty())
        return;
    const auto per_kind = [&](std::string_view name, std::string_view help, auto get) {
        header(out, name, "counter", help);
        for (const labelled_group& g : groups)
            for (std::size_t k = 0; k < collective_kind_count; ++k)
                write_sample(out, name, g.labels, kind_label(static_cast<collective_kind>(k)),
                             get(g.metrics.collectives[k]));
    };
    per_kind("ucx_collectives_started_total", "Collectives called on this rank, by kind.",
             [](const operation_counts& c) { return c.started; });
    per_kind("ucx_collectives_completed_total",
             "Collectives completed on this rank (failed or not), by kind.",
             [](const operation_counts& c) { return c.completed; });
    per_kind("ucx_collectives_failed_total", "Collectives that failed on this rank, by kind.",
             [](const operation_counts& c) { return c.failed; });
    per_kind("ucx_collective_bytes_total",
             "Bytes of this rank's input to the collectives that succeeded, by kind.",
             [](const operation_counts& c) { return c.bytes; });
    const auto gauge = [&](std::string_view name, std::string_view help, auto get) {
        header(out, name, "gauge", help);
        for (const labelled_group& g : groups)
            write_sample(out, name, g.labels, {}, get(g.metrics));
    };
    gauge("ucx_collectives_in_flight", "Collectives called and not completed (queued or running).",
          [](const group_metrics& m) { return m.in_flight; });
    gauge("ucx_group_size", "The group's number of ranks.",
          [](const group_metrics& m) { return static_cast<std::uint64_t>(m.size); });
    gauge("ucx_group_rank", "This process's rank in the group.", [](const group_metrics& m) {
        return static_cast<std::uint64_t>(m.rank < 0 ? 0 : m.rank);
    });
    constexpr std::string_view hist = "ucx_collective_duration_seconds";
    header(out, hist, "histogram",
           "Time from a collective's call to its completion on this rank, by kind.");
    for (const labelled_group& g : groups)
        for (std::size_t k = 0; k < collective_kind_count; ++k)
            histogram_samples(out, hist, g.labels, kind_label(static_cast<collective_kind>(k)),
                              g.metrics.latency[k]);
}

void write_listener_metrics(std::string& out, std::span<const labelled_listener> listeners) {
    if (listeners.empty())
        return;
    header(out, "ucx_listener_accepted_total", "counter",
           "Connections whose handshake finished, queued for an accept.");
    for (const labelled_listener& l : listeners)
        write_sample(out, "ucx_listener_accepted_total", l.labels, {}, l.metrics.accepted);
    header(out, "ucx_listener_refused_total", "counter", "Connections refused, by cause.");
    for (const labelled_listener& l : listeners)
        for (std::size_t c = 0; c < refusal_cause_count; ++c) {
            std::string cause = "cause=\"";
            cause += to_string(static_cast<refusal_cause>(c));
            cause += '"';
            write_sample(out, "ucx_listener_refused_total", l.labels, cause, l.metrics.refused[c]);
        }
}

void write_store_metrics(std::string& out, std::span<const labelled_store> stores) {
    if (stores.empty())
        return;
    const auto per_op = [&](std::string_view name, std::string_view help, auto get) {
        header(out, name, "counter", help);
        for (const labelled_store& st : stores)
            for (std::size_t k = 0; k < store_operation_count; ++k) {
                std::string op = "op=\"";
                op += to_string(static_cast<store_operation>(k));
                op += '"';
                write_sample(out, name, st.labels, op, get(st.metrics.operations[k]));
            }
    };
    per_op("ucx_store_operations_started_total", "Store operations started, by operation.",
           [](const operation_counts& c) { return c.started; });
    per_op("ucx_store_operations_completed_total",
           "Store operations completed (failed or not), by operation.",
           [](const operation_counts& c) { return c.completed; });
    per_op("ucx_store_operations_failed_total",
           "Store operations that failed (timeouts and cancellations included), by operation.",
           [](const operation_counts& c) { return c.failed; });
    header(out, "ucx_store_operations_in_flight", "gauge", "Store operations in flight.");
    for (const labelled_store& st : stores)
        write_sample(out, "ucx_store_operations_in_flight", st.labels, {}, st.metrics.in_flight);
}

bool reserved_label_name(std::string_view name) noexcept {
    constexpr std::string_view names[] = {"worker",  "group", "listener",  "store",  "endpoint",
                                          "kind",    "op",    "cause",     "le",     "error",
                                          "message", "role",  "state",     "local",  "remote",
                                          "fabric",  "lane",  "transport", "device", "uses"};
    for (std::string_view n : names)
        if (n == name)
            return true;
    return false;
}

namespace {

/// The operation kinds an endpoint has counts of.
bool has_counts(const endpoint_metrics& m, std::size_t k) noexcept {
    return m.operations[k] != operation_counts{};
}

} // namespace

void write_endpoint_metrics(std::string& out, std::span<const labelled_endpoint> endpoints) {
    if (endpoints.empty())
        return;
    header(out, "ucx_endpoint_info", "gauge",
           "An endpoint (1): how it was made, where it stands, its socket addresses.");
    for (const labelled_endpoint& e : endpoints) {
        const endpoint_report& r = e.report;
        std::string extra;
        append_label(extra, "role", r.role);
        append_label(extra, "state", r.state);
        append_label(extra, "local", r.local);
        append_label(extra, "remote", r.remote);
        append_label(extra, "fabric", r.fabric ? "true" : "false");
        write_sample(out, "ucx_endpoint_info", e.labels, extra, 1);
    }
    header(out, "ucx_endpoint_lane_info", "gauge",
           "A lane UCX chose for an endpoint (1): its transport, device and uses.");
    for (const labelled_endpoint& e : endpoints)
        for (const endpoint_lane& l : e.report.lanes) {
            std::string extra;
            append_label(extra, "lane", std::to_string(l.index));
            append_label(extra, "transport", l.transport);
            append_label(extra, "device", l.device);
            std::string uses;
            for (const std::string& u : l.uses) {
                if (!uses.empty())
                    uses += ',';
                uses += u;
            }
            append_label(extra, "uses", uses);
            write_sample(out, "ucx_endpoint_lane_info", e.labels, extra, 1);
        }
    const auto per_kind = [&](std::string_view name, std::string_view help, auto get,
                              bool (*include)(operation_kind)) {
        header(out, name, "counter", help);
        for (const labelled_endpoint& e : endpoints)
            for (std::size_t k = 0; k < operation_kind_count; ++k) {
                const auto kind = static_cast<operation_kind>(k);
                if (has_counts(e.report.metrics, k) && (!include || include(kind)))
                    write_sample(out, name, e.labels, kind_label(kind),
                                 get(e.report.metrics.operations[k]));
            }
    };
    per_kind(
        "ucx_endpoint_operations_started_total", "Operations started on an endpoint, by kind.",
        [](const operation_counts& c) { return c.started; }, nullptr);
    per_kind(
        "ucx_endpoint_operations_completed_total",
        "Operations of an endpoint completed (failed or not), by kind.",
        [](const operation_counts& c) { return c.completed; }, nullptr);
    per_kind(
        "ucx_endpoint_operations_failed_total",
        "Operations of an endpoint completed with an error (cancellations included), by kind.",
        [](const operation_counts& c) { return c.failed; }, nullptr);
    per_kind(
        "ucx_endpoint_bytes_sent_total",
        "Bytes an endpoint's operations sent, wrote or put (those that succeeded), by kind.",
        [](const operation_counts& c) { return c.bytes; },
        +[](operation_kind k) { return sends_bytes(k); });
    per_kind(
        "ucx_endpoint_bytes_received_total",
        "Bytes an endpoint's operations received, read or got (those that succeeded), by kind.",
        [](const operation_counts& c) { return c.bytes; },
        +[](operation_kind k) { return moves_bytes(k) && !sends_bytes(k); });
    header(out, "ucx_endpoint_operations_in_flight", "gauge",
           "Operations of an endpoint in flight.");
    for (const labelled_endpoint& e : endpoints)
        write_sample(out, "ucx_endpoint_operations_in_flight", e.labels, {},
                     e.report.metrics.in_flight);
    constexpr std::string_view rtt = "ucx_endpoint_heartbeat_round_trip_seconds";
    header(out, rtt, "gauge",
           "Round trip of an endpoint's last ping answered (endpoints with one only).");
    for (const labelled_endpoint& e : endpoints) {
        if (e.report.round_trip_ns < 0)
            continue;
        out += rtt;
        out += '{';
        out += e.labels;
        out += "} ";
        append_seconds(out, std::chrono::nanoseconds(e.report.round_trip_ns));
        out += '\n';
    }
}

} // namespace ucx::detail
