// Internal: worker metrics in the Prometheus text exposition format
// (version 0.0.4), sans-io.
//
// The format, as Prometheus reads it: one `# HELP` and one `# TYPE` line per
// metric family, then its samples, all of a family together; a sample is
// `name{label="value",...} number`; label values escape `\`, `"` and newline
// as `\\`, `\"` and `\n`; a histogram family `x` has the samples
// `x_bucket{le="..."}` (cumulative, the last one `le="+Inf"`), `x_sum` and
// `x_count`; counters end in `_total`.
#pragma once

#include <ucx/endpoint_report.hpp>
#include <ucx/metrics.hpp>

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ucx::detail {

/// Whether `name` is a valid Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`,
/// not starting with `__`, which Prometheus reserves).
bool valid_label_name(std::string_view name) noexcept;

/// Appends `value` to `out` escaped as a label value.
void append_label_value(std::string& out, std::string_view value);

/// `name="value"` pairs, joined with commas (no braces); the names must be valid.
std::string render_labels(std::span<const std::pair<std::string, std::string>> labels);

/// One worker's snapshot and its labels (rendered by `render_labels`).
struct labelled_worker {
    std::string labels;
    worker_metrics metrics;
};

/// Appends the metric families of `workers` to `out`.
void write_worker_metrics(std::string& out, std::span<const labelled_worker> workers);

/// One group's snapshot on this rank and its labels.
struct labelled_group {
    std::string labels;
    group_metrics metrics;
};

/// Appends the metric families of `groups` to `out` (nothing for none).
void write_group_metrics(std::string& out, std::span<const labelled_group> groups);

/// One listener's snapshot and its labels.
struct labelled_listener {
    std::string labels;
    listener_metrics metrics;
};

/// Appends the metric families of `listeners` to `out` (nothing for none).
void write_listener_metrics(std::string& out, std::span<const labelled_listener> listeners);

/// One store's snapshot and its labels.
struct labelled_store {
    std::string labels;
    store_metrics metrics;
};

/// Appends the metric families of `stores` to `out` (nothing for none).
void write_store_metrics(std::string& out, std::span<const labelled_store> stores);

/// One endpoint's report and its labels (its worker's, with `endpoint="ID"`).
struct labelled_endpoint {
    std::string labels;
    endpoint_report report;
};

/// Appends the families of `endpoints` to `out` (nothing for none): each
/// endpoint's `ucx_endpoint_info`, its lanes, its operations by kind (the
/// kinds it has counts of only), and the round trip of its last ping.
void write_endpoint_metrics(std::string& out, std::span<const labelled_endpoint> endpoints);

/// The label names the exporter's series use itself: an exporter's own
/// labels may not take them.
bool reserved_label_name(std::string_view name) noexcept;

} // namespace ucx::detail
