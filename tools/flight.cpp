// ucx-asio-flight: reads the flight records of a group's ranks (the JSON
// files a ucx::group writes when it fails, group_options::flight_recorder_dump,
// or those of group::flight_record()), or asks running ranks for them over
// HTTP (the /flight answers of a ucx::metrics_exporter), and says which rank
// diverged or never called the collective the others waited in.
//
//   ucx-asio-flight [--timeout MS] SOURCE...
//
// A SOURCE is a file, or a URL http://HOST:PORT[/flight/NAME]: the record of
// the group the exporter serves as NAME; without the path, that of the one
// group the exporter serves (it lists them at /flight). --timeout bounds each
// request (default 10000 ms): a rank that is stopped, or whose group's
// executor does not answer, is reported rather than waited for.
//
// Prints one line per rank read, then the findings (ucx::diagnose), the most
// telling first, and "culprit: rank(s) ..." when a rank is to blame. Exits 0
// when the records name a culprit, 1 when they show nothing wrong, and 2 when
// a source cannot be read or is not a flight record (it is named, with why).
#include <ucx/flight_recorder.hpp>

#include "http_get.hpp"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

/// The names in the exporter's `{"groups":["a","b"]}`.
std::vector<std::string> group_names(std::string_view json) {
    std::vector<std::string> names;
    const auto open = json.find('[');
    if (open == std::string_view::npos)
        return names;
    for (std::size_t i = open + 1; i < json.size() && json[i] != ']'; ++i) {
        if (json[i] != '"')
            continue;
        std::string name;
        for (++i; i < json.size() && json[i] != '"'; ++i) {
            if (json[i] == '\\' && i + 1 < json.size())
                ++i;
            name += json[i];
        }
        names.push_back(std::move(name));
    }
    return names;
}

/// Percent-encodes what a path segment cannot hold as it is.
std::string path_segment(std::string_view s) {
    std::string out;
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += c;
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", u);
            out += buf;
        }
    }
    return out;
}

/// The record at `url` (http://HOST:PORT[/PATH]).
bool fetch(const std::string& url, std::chrono::milliseconds timeout, std::string& json,
           std::string& why) {
    ucx_tools::http_url at;
    if (!ucx_tools::parse_http_url(url, at)) {
        why = "not http://HOST:PORT[/flight/NAME]";
        return false;
    }
    std::string path = at.path;
    if (path.empty() || path == "/" || path == "/flight") {
        std::string list;
        if (!ucx_tools::http_get(at.host, at.port, "/flight", timeout, list, why))
            return false;
        const auto names = group_names(list);
        if (names.size() != 1) {
            why = names.empty() ? "the exporter serves no group"
                                : "the exporter serves several groups: name one, as " + url +
                                      (path.empty() || path == "/" ? "/flight/" : "/") +
                                      path_segment(names[0]);
            return false;
        }
        path = "/flight/" + path_segment(names[0]);
    }
    return ucx_tools::http_get(at.host, at.port, path, timeout, json, why);
}

} // namespace

int main(int argc, char** argv) {
    std::chrono::milliseconds timeout(10000);
    int first = 1;
    if (argc > 2 && std::string_view(argv[1]) == "--timeout") {
        timeout = std::chrono::milliseconds(std::atol(argv[2]));
        first = 3;
    }
    if (argc <= first || timeout.count() <= 0) {
        std::fprintf(stderr, "usage: %s [--timeout MS] FILE|http://HOST:PORT[/flight/NAME]...\n",
                     argv[0]);
        return 2;
    }
    std::vector<ucx::flight_record> records;
    for (int i = first; i < argc; ++i) {
        const std::string source = argv[i];
        std::string text;
        if (source.starts_with("http://")) {
            std::string why;
            if (!fetch(source, timeout, text, why)) {
                std::fprintf(stderr, "%s: %s\n", argv[i], why.c_str());
                return 2;
            }
        } else {
            std::ifstream f(source, std::ios::binary);
            std::ostringstream in;
            in << f.rdbuf();
            if (!f) {
                std::fprintf(stderr, "%s: cannot be read\n", argv[i]);
                return 2;
            }
            text = in.str();
        }
        ucx::flight_record r;
        if (ucx::from_json(text, r)) {
            std::fprintf(stderr, "%s: not a flight record\n", argv[i]);
            return 2;
        }
        std::printf("rank %d of %d (group %s, %s, pid %lld): %s%s%s, %llu collectives, %zu "
                    "events\n",
                    r.rank, r.size, r.group.c_str(), r.host.c_str(), static_cast<long long>(r.pid),
                    r.reason.c_str(), r.error.empty() ? "" : ": ", r.error.c_str(),
                    static_cast<unsigned long long>(r.collectives), r.events.size());
        records.push_back(std::move(r));
    }
    const ucx::flight_diagnosis d = ucx::diagnose(records);
    for (const std::string& line : d.findings)
        std::printf("%s\n", line.c_str());
    if (d.culprits.empty()) {
        std::printf("no culprit: the records show no rank that diverged or never arrived\n");
        return 1;
    }
    std::string ranks;
    for (const int r : d.culprits)
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    std::printf("culprit: rank%s %s\n", d.culprits.size() > 1 ? "s" : "", ranks.c_str());
    return 0;
}
