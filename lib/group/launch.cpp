#include <ucx/launch.hpp>

#include <boost/system/system_error.hpp>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <vector>

namespace ucx {

namespace {

/// The variables of one launcher.
struct launcher_names {
    const char* launcher;
    const char* rank;
    const char* size;
    const char* local_rank;
    const char* local_size; // null: derived (Slurm) or unknown
    const char* node_rank;
    const char* rendezvous_host; // null: only UCXASIO_RENDEZVOUS
    const char* rendezvous_port;
};

constexpr launcher_names launchers[] = {
    {"explicit", "UCXASIO_RANK", "UCXASIO_SIZE", "UCXASIO_LOCAL_RANK", "UCXASIO_LOCAL_SIZE",
     "UCXASIO_NODE_RANK", nullptr, nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
     "MASTER_ADDR", "MASTER_PORT"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "SLURM_NODEID", nullptr,
     nullptr},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr, nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr, nullptr,
     nullptr},
};

constexpr const char* rendezvous_variable = "UCXASIO_RENDEZVOUS";

/// A whole decimal number in [min, max], or nothing.
std::optional<int> parse_int(std::string_view s, int min, int max) {
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < min || v > max)
        return std::nullopt;
    return v;
}

/// Slurm's SLURM_TASKS_PER_NODE ("2(x3),1": two tasks on each of three nodes,
/// then one) expanded to one count per node; empty when malformed.
std::vector<int> slurm_tasks_per_node(std::string_view s) {
    std::vector<int> counts;
    while (!s.empty()) {
        const auto comma = s.find(',');
        std::string_view item = s.substr(0, comma);
        s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
        int repeat = 1;
        if (const auto paren = item.find('('); paren != std::string_view::npos) {
            if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')')
                return {};
            const auto r = parse_int(item.substr(paren + 2, item.size() - paren - 3), 1, 1 << 20);
            if (!r)
                return {};
            repeat = *r;
            item = item.substr(0, paren);
        }
        const auto n = parse_int(item, 0, 1 << 20);
        if (!n || counts.size() + static_cast<std::size_t>(repeat) > (1u << 20))
            return {};
        counts.insert(counts.end(), static_cast<std::size_t>(repeat), *n);
    }
    return counts;
}

} // namespace

launch_environment detect_environment(const std::function<const char*(const char*)>& getenv,
                                      error_code& ec, std::string* culprit) {
    auto fail = [&](error e, const char* name, const char* value) {
        ec = make_error_code(e);
        if (culprit)
            *culprit = std::string(name) + "=" + (value ? value : "");
        return launch_environment{};
    };
    for (const launcher_names& l : launchers) {
        const char* rank = getenv(l.rank);
        const char* size = getenv(l.size);
        if (!rank || !size)
            continue;
        launch_environment env;
        env.launcher = l.launcher;
        const auto s = parse_int(size, 1, 1 << 30);
        if (!s)
            return fail(error::invalid_launch_environment, l.size, size);
        const auto r = parse_int(rank, 0, *s - 1);
        if (!r)
            return fail(error::invalid_launch_environment, l.rank, rank);
        env.rank = *r;
        env.size = *s;
        if (l.node_rank) {
            if (const char* v = getenv(l.node_rank)) {
                const auto n = parse_int(v, 0, 1 << 30);
                if (!n)
                    return fail(error::invalid_launch_environment, l.node_rank, v);
                env.node_rank = *n;
            }
        }
        if (l.local_size) {
            if (const char* v = getenv(l.local_size)) {
                const auto n = parse_int(v, 1, env.size);
                if (!n)
                    return fail(error::invalid_launch_environment, l.local_size, v);
                env.local_size = *n;
            }
        } else if (const char* v = getenv("SLURM_TASKS_PER_NODE"); v && env.node_rank >= 0) {
            // Slurm: this node's entry of the per-node task counts.
            const auto counts = slurm_tasks_per_node(v);
            if (counts.empty() || static_cast<std::size_t>(env.node_rank) >= counts.size())
                return fail(error::invalid_launch_environment, "SLURM_TASKS_PER_NODE", v);
            env.local_size = counts[static_cast<std::size_t>(env.node_rank)];
        }
        if (const char* v = getenv(l.local_rank)) {
            const int limit = env.local_size > 0 ? env.local_size - 1 : env.size - 1;
            const auto n = parse_int(v, 0, limit);
            if (!n)
                return fail(error::invalid_launch_environment, l.local_rank, v);
            env.local_rank = *n;
        }
        if (const char* v = getenv(rendezvous_variable)) {
            // host:port, [v6]:port
            const std::string_view hp(v);
            const auto colon = hp.rfind(':');
            if (colon == std::string_view::npos || colon == 0 || colon + 1 == hp.size())
                return fail(error::invalid_launch_environment, rendezvous_variable, v);
            std::string_view host = hp.substr(0, colon);
            if (host.size() > 2 && host.front() == '[' && host.back() == ']')
                host = host.substr(1, host.size() - 2);
            if (!parse_int(hp.substr(colon + 1), 1, 65535))
                return fail(error::invalid_launch_environment, rendezvous_variable, v);
            env.rendezvous_host = host;
            env.rendezvous_port = hp.substr(colon + 1);
        } else if (l.rendezvous_host) {
            const char* host = getenv(l.rendezvous_host);
            const char* port = getenv(l.rendezvous_port);
            if (host && port) {
                if (!parse_int(port, 1, 65535))
                    return fail(error::invalid_launch_environment, l.rendezvous_port, port);
                env.rendezvous_host = host;
                env.rendezvous_port = port;
            }
        }
        ec = {};
        return env;
    }
    ec = make_error_code(error::no_launch_environment);
    if (culprit) {
        std::string looked;
        for (const launcher_names& l : launchers)
            looked += std::string(looked.empty() ? "" : ", ") + l.rank + "/" + l.size + " (" +
                      l.launcher + ")";
        *culprit = "none of " + looked + " is set";
    }
    return {};
}

launch_environment detect_environment(error_code& ec, std::string* culprit) {
    return detect_environment([](const char* n) { return std::getenv(n); }, ec, culprit);
}

launch_environment detect_environment() {
    error_code ec;
    std::string culprit;
    auto env = detect_environment(ec, &culprit);
    if (ec)
        throw boost::system::system_error(ec, "ucx::detect_environment: " + culprit);
    return env;
}

} // namespace ucx
