// ucx-asio-perf: summary statistics and output as a table, CSV or JSON.
#pragma once

#include "common.hpp"

#include <cstdio>

namespace perf {

/// What a run reports.
struct summary {
    double median_us = 0, p99_us = 0, average_us = 0; ///< one-way latency
    double mib_per_s = 0;                             ///< payload bandwidth
    double messages_per_s = 0;                        ///< message rate
    double allocations_per_op = 0; ///< operator new calls per operation, both sides
    /// --memory cuda: the slower way of plain cudaMemcpy between device and
    /// pinned host memory at the test's size (MiB/s), the ceiling of a
    /// transfer staged through host memory; 0 otherwise.
    double ceiling_mib_per_s = 0;
};

/// Summarises a client's measurements.
summary summarise(const settings& s, result r);

/// Prints `sum` for the test in `s` to `out` in the chosen format.
void print(std::FILE* out, const settings& s, const summary& sum);

} // namespace perf
