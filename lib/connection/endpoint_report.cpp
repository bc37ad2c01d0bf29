// Endpoint reports as JSON, both ways (sans-io).
#include <ucx/endpoint_report.hpp>

#include "util/json.hpp"

#include <boost/asio/error.hpp>

namespace ucx {

namespace {

using detail::append_json_string;
using detail::json;
using detail::json_array;
using detail::json_fields;
using detail::json_object;

void put_key(std::string& out, std::string_view name, bool first = false) {
    if (!first)
        out += ',';
    append_json_string(out, name);
    out += ':';
}

void put_text(std::string& out, std::string_view name, std::string_view value, bool first = false) {
    put_key(out, name, first);
    append_json_string(out, value);
}

/// `,"name":["a","b"]`.
void put_strings(std::string& out, std::string_view name, const std::vector<std::string>& v) {
    put_key(out, name);
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i)
            out += ',';
        append_json_string(out, v[i]);
    }
    out += ']';
}

void put_lane(std::string& out, const endpoint_lane& l) {
    out += "{\"index\":" + std::to_string(l.index);
    put_text(out, "transport", l.transport);
    put_text(out, "device", l.device);
    put_strings(out, "uses", l.uses);
    out += '}';
}

const json_array* array_of(const json_fields& f, std::string_view name) {
    const json* j = f.find(name);
    return j ? std::get_if<json_array>(&j->v) : nullptr;
}

bool read_strings(const json_array& a, std::vector<std::string>& out) {
    for (const json& j : a) {
        const auto* s = std::get_if<std::string>(&j.v);
        if (!s)
            return false;
        out.push_back(*s);
    }
    return true;
}

bool read_lane(const json& j, endpoint_lane& l) {
    const auto* o = std::get_if<json_object>(&j.v);
    if (!o)
        return false;
    json_fields f(*o);
    f.integer("index", l.index);
    f.text("transport", l.transport);
    f.text("device", l.device);
    const json_array* uses = array_of(f, "uses");
    return f.ok() && uses && read_strings(*uses, l.uses);
}

/// `,"operations":[{"kind":"tag_send","started":1,...},...]`: the kinds
/// with any count.
void put_operations(std::string& out, const endpoint_metrics& m) {
    out += ",\"in_flight\":" + std::to_string(m.in_flight);
    put_key(out, "operations");
    out += '[';
    bool first = true;
    for (std::size_t k = 0; k < operation_kind_count; ++k) {
        const operation_counts& c = m.operations[k];
        if (c == operation_counts{})
            continue;
        out += first ? "{" : ",{";
        first = false;
        put_text(out, "kind", to_string(static_cast<operation_kind>(k)), true);
        out += ",\"started\":" + std::to_string(c.started);
        out += ",\"completed\":" + std::to_string(c.completed);
        out += ",\"failed\":" + std::to_string(c.failed);
        out += ",\"bytes\":" + std::to_string(c.bytes) + "}";
    }
    out += ']';
}

/// One entry of "operations"; a kind this library does not know is skipped.
bool read_operation(const json& j, endpoint_metrics& m) {
    const auto* o = std::get_if<json_object>(&j.v);
    if (!o)
        return false;
    json_fields f(*o);
    std::string kind;
    operation_counts c;
    f.text("kind", kind);
    f.integer("started", c.started);
    f.integer("completed", c.completed);
    f.integer("failed", c.failed);
    f.integer("bytes", c.bytes);
    if (!f.ok())
        return false;
    for (std::size_t k = 0; k < operation_kind_count; ++k)
        if (to_string(static_cast<operation_kind>(k)) == kind)
            m.operations[k] = c;
    return true;
}

bool read_endpoint(const json& j, endpoint_report& e) {
    const auto* o = std::get_if<json_object>(&j.v);
    if (!o)
        return false;
    json_fields f(*o);
    f.text("worker", e.worker);
    f.integer("id", e.id);
    f.text("role", e.role);
    f.text("state", e.state);
    f.text("error", e.error);
    f.text("local", e.local);
    f.text("remote", e.remote);
    f.integer("pings", e.pings);
    f.integer("pongs", e.pongs);
    f.integer("round_trip_ns", e.round_trip_ns);
    const json* fabric = f.find("fabric");
    const auto* b = fabric ? std::get_if<bool>(&fabric->v) : nullptr;
    if (!b)
        return false;
    e.fabric = *b;
    const json_array* lanes = array_of(f, "lanes");
    if (!f.ok() || !lanes)
        return false;
    for (const json& l : *lanes)
        if (!read_lane(l, e.lanes.emplace_back()))
            return false;
    // The operations are optional: a report from a process that does not
    // count them has none.
    if (f.find("operations")) {
        const json_array* ops = array_of(f, "operations");
        f.integer("in_flight", e.metrics.in_flight);
        if (!ops || !f.ok())
            return false;
        for (const json& op : *ops)
            if (!read_operation(op, e.metrics))
                return false;
    }
    return true;
}

} // namespace

std::string to_json(const endpoints_report& r) {
    std::string out = "{";
    put_text(out, "format", "ucx-asio-endpoints", true);
    out += ",\"version\":1";
    put_text(out, "host", r.host);
    out += ",\"pid\":" + std::to_string(r.pid);
    put_text(out, "ucx_version", r.ucx_version);
    put_strings(out, "unanswered", r.unanswered);
    out += ",\"endpoints\":[";
    for (std::size_t i = 0; i < r.endpoints.size(); ++i) {
        const endpoint_report& e = r.endpoints[i];
        out += i ? ",\n{" : "\n{";
        put_text(out, "worker", e.worker, true);
        out += ",\"id\":" + std::to_string(e.id);
        put_text(out, "role", e.role);
        put_text(out, "state", e.state);
        put_text(out, "error", e.error);
        out += e.fabric ? ",\"fabric\":true" : ",\"fabric\":false";
        put_text(out, "local", e.local);
        put_text(out, "remote", e.remote);
        out += ",\"pings\":" + std::to_string(e.pings);
        out += ",\"pongs\":" + std::to_string(e.pongs);
        out += ",\"round_trip_ns\":" + std::to_string(e.round_trip_ns);
        put_operations(out, e.metrics);
        put_key(out, "lanes");
        out += '[';
        for (std::size_t k = 0; k < e.lanes.size(); ++k) {
            if (k)
                out += ',';
            put_lane(out, e.lanes[k]);
        }
        out += "]}";
    }
    out += "\n]}\n";
    return out;
}

boost::system::error_code from_json(std::string_view text, endpoints_report& r) {
    const boost::system::error_code bad = boost::asio::error::invalid_argument;
    json doc;
    if (!detail::json_reader(text).document(doc))
        return bad;
    const auto* o = std::get_if<json_object>(&doc.v);
    if (!o)
        return bad;
    json_fields f(*o);
    std::string format;
    int version = 0;
    f.text("format", format);
    f.integer("version", version);
    f.text("host", r.host);
    f.integer("pid", r.pid);
    f.text("ucx_version", r.ucx_version);
    if (!f.ok() || format != "ucx-asio-endpoints" || version != 1)
        return bad;
    const json_array* unanswered = array_of(f, "unanswered");
    const json_array* endpoints = array_of(f, "endpoints");
    if (!unanswered || !endpoints || !read_strings(*unanswered, r.unanswered))
        return bad;
    for (const json& e : *endpoints)
        if (!read_endpoint(e, r.endpoints.emplace_back()))
            return bad;
    return {};
}

} // namespace ucx
