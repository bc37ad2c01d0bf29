#include "report.hpp"

#include <algorithm>
#include <numeric>

namespace perf {

summary summarise(const settings& s, result r) {
    summary out;
    auto& v = r.one_way_us;
    if (!v.empty()) {
        std::sort(v.begin(), v.end());
        out.median_us = v[v.size() / 2];
        out.p99_us = v[std::min(v.size() - 1, v.size() * 99 / 100)];
        out.average_us = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
        const double seconds = out.average_us * 1e-6;
        out.mib_per_s = static_cast<double>(s.size) / seconds / (1 << 20);
        out.messages_per_s = 1 / seconds;
    } else if (r.seconds > 0 && r.messages > 0) {
        out.average_us = r.seconds * 1e6 / static_cast<double>(r.messages);
        out.median_us = out.p99_us = 0;
        out.mib_per_s = static_cast<double>(r.bytes) / r.seconds / (1 << 20);
        out.messages_per_s = static_cast<double>(r.messages) / r.seconds;
    }
    if (r.operations > 0)
        out.allocations_per_op =
            static_cast<double>(r.allocations) / static_cast<double>(r.operations);
    return out;
}

void print(std::FILE* out, const settings& s, const summary& m) {
    const bool lat = find_test(s.test)->kind == kind::latency;
    const char* style = s.transport == transport::ucp ? "-" : to_string(s.style);
    switch (s.format) {
    case format::table:
        if (s.header)
            std::fprintf(out, "%-8s %-10s %-7s %-9s %9s %8s %10s %10s %10s %11s %12s %9s  %s\n",
                         "transp", "test", "progr", "style", "size", "iters", "median_us", "p99_us",
                         "avg_us", "MiB/s", "msg/s", "allocs/op", "label");
        if (lat)
            std::fprintf(
                out,
                "%-8s %-10s %-7s %-9s %9zu %8zu %10.3f %10.3f %10.3f %11.1f %12.0f %9.3f  %s\n",
                to_string(s.transport), s.test.c_str(), to_string(s.progress), style, s.size,
                s.measured_iters(), m.median_us, m.p99_us, m.average_us, m.mib_per_s,
                m.messages_per_s, m.allocations_per_op, s.label.c_str());
        else
            std::fprintf(
                out, "%-8s %-10s %-7s %-9s %9zu %8zu %10s %10s %10.3f %11.1f %12.0f %9.3f  %s\n",
                to_string(s.transport), s.test.c_str(), to_string(s.progress), style, s.size,
                s.measured_iters(), "-", "-", m.average_us, m.mib_per_s, m.messages_per_s,
                m.allocations_per_op, s.label.c_str());
        if (s.memory == memory::cuda)
            std::fprintf(out,
                         "memory cuda: cudaMemcpy ceiling %.1f MiB/s (the slower way between "
                         "device and pinned host memory); this run %.2f of it\n",
                         m.ceiling_mib_per_s,
                         m.ceiling_mib_per_s > 0 ? m.mib_per_s / m.ceiling_mib_per_s : 0.0);
        break;
    case format::csv:
        if (s.header)
            std::fprintf(out, "transport,test,progress,style,size,iters,window,median_us,p99_us,"
                              "avg_us,mib_per_s,msg_per_s,allocs_per_op,label,memory,"
                              "ceiling_mib_per_s\n");
        std::fprintf(out, "%s,%s,%s,%s,%zu,%zu,%zu,%.4f,%.4f,%.4f,%.2f,%.1f,%.4f,%s,%s,%.2f\n",
                     to_string(s.transport), s.test.c_str(), to_string(s.progress), style, s.size,
                     s.measured_iters(), s.window, m.median_us, m.p99_us, m.average_us, m.mib_per_s,
                     m.messages_per_s, m.allocations_per_op, s.label.c_str(), to_string(s.memory),
                     m.ceiling_mib_per_s);
        break;
    case format::json:
        std::fprintf(out,
                     "{\"transport\": \"%s\", \"test\": \"%s\", \"progress\": \"%s\", "
                     "\"style\": \"%s\", \"size\": %zu, \"iters\": %zu, \"window\": %zu, "
                     "\"median_us\": %.4f, \"p99_us\": %.4f, \"avg_us\": %.4f, "
                     "\"mib_per_s\": %.2f, \"msg_per_s\": %.1f, \"allocs_per_op\": %.4f, "
                     "\"label\": \"%s\", \"memory\": \"%s\", \"ceiling_mib_per_s\": %.2f}\n",
                     to_string(s.transport), s.test.c_str(), to_string(s.progress), style, s.size,
                     s.measured_iters(), s.window, m.median_us, m.p99_us, m.average_us, m.mib_per_s,
                     m.messages_per_s, m.allocations_per_op, s.label.c_str(), to_string(s.memory),
                     m.ceiling_mib_per_s);
        break;
    }
}

} // namespace perf
