// Fuzz target: endpoint reports read back from JSON (ucx::from_json), as
// ucx-asio-info --endpoints reads a metrics exporter's answer. Checked: a
// document that parses writes back (to_json) to one that parses to the same
// report (every field of every endpoint and lane).
//
// Input: the document's bytes.
#include "fuzz.hpp"

#include <ucx/endpoint_report.hpp>

#include <string>

namespace ucx::fuzz {

void endpoint_report(input data) {
    const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
    endpoints_report r;
    if (from_json(text, r))
        return;
    endpoints_report back;
    if (from_json(to_json(r), back))
        violated("a report written back parses", __FILE__, __LINE__);
    if (!(back == r))
        violated("the same report", __FILE__, __LINE__);
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(endpoint_report)
