// ucx-asio-flight: reads the flight records of a group's ranks (the JSON
// files a ucx::group writes when it fails, group_options::flight_recorder_dump,
// or those of group::flight_record()) and says which rank diverged or never
// called the collective the others waited in.
//
//   ucx-asio-flight FILE...
//
// Prints one line per rank read, then the findings (ucx::diagnose), the most
// telling first, and "culprit: rank(s) ..." when a rank is to blame. Exits 0
// when the records name a culprit, 1 when they show nothing wrong, and 2 when
// a file cannot be read or is not a flight record (its name is printed).
#include <ucx/flight_recorder.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE...\n", argv[0]);
        return 2;
    }
    std::vector<ucx::flight_record> records;
    for (int i = 1; i < argc; ++i) {
        std::ifstream f(argv[i], std::ios::binary);
        std::ostringstream text;
        text << f.rdbuf();
        if (!f) {
            std::fprintf(stderr, "%s: cannot be read\n", argv[i]);
            return 2;
        }
        ucx::flight_record r;
        if (ucx::from_json(text.str(), r)) {
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
