#include <ucx/configuration.hpp>
#include <ucx/file_store.hpp>
#include <ucx/launch.hpp>
#include <ucx/pmi_store.hpp>
#include <ucx/tcp_store.hpp>
#if UCX_ASIO_HAS_PMIX
#include <ucx/pmix_store.hpp>
#endif

#include <boost/asio/append.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
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

// Tried in this order: when launchers nest (an mpirun in a Slurm batch
// script, torchrun under mpirun), the process sees the variables of each, and
// the launcher nearest the process wins. A launcher started inside another
// sets its own variables over the outer one's, and Slurm only ever starts
// the outermost (a batch step's SLURM_PROCID=0 reaches every rank of an
// mpirun in it), so: explicit variables, torchrun, Open MPI, PMI, Slurm.
constexpr launcher_names launchers[] = {
    {"explicit", env::rank, env::size, env::local_rank, env::local_size, env::node_rank, nullptr,
     nullptr},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
     "MASTER_ADDR", "MASTER_PORT"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr, nullptr},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr, nullptr,
     nullptr},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "SLURM_NODEID", nullptr,
     nullptr},
};

constexpr const char* rendezvous_variable = env::rendezvous;

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
        // The launchers outside this one (whose variables are set too).
        for (const launcher_names* o = &l + 1; o != std::end(launchers); ++o)
            if (getenv(o->rank) && getenv(o->size))
                env.enclosing += std::string(env.enclosing.empty() ? "" : ",") + o->launcher;
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

bool pmix_supported() noexcept {
#if UCX_ASIO_HAS_PMIX
    return true;
#else
    return false;
#endif
}

namespace {

constexpr const char* agent_store_variable = "TORCHELASTIC_USE_AGENT_STORE";

bool is_true(const char* v) {
    const std::string_view s = v ? v : "";
    return s == "True" || s == "true" || s == "TRUE" || s == "1";
}

/// The namespace of the run's keys that the innermost launcher gives, or
/// empty (see store_plan::run_namespace).
std::string run_namespace_of(const launch_environment& env,
                             const std::function<const char*(const char*)>& getenv) {
    auto value = [&](const char* name) {
        const char* v = getenv(name);
        return std::string(v ? v : "");
    };
    if (env.launcher == "torchrun") {
        // torchrun's agent sets both for its workers; a restart's workers
        // get the next count.
        const std::string id = value("TORCHELASTIC_RUN_ID");
        const std::string count = value("TORCHELASTIC_RESTART_COUNT");
        if (id.empty() && count.empty())
            return {};
        return "torchrun/" + (id.empty() ? std::string("none") : id) + "/" +
               (count.empty() ? std::string("0") : count);
    }
    if (env.launcher == "openmpi" || env.launcher == "slurm") {
        if (const std::string ns = value("PMIX_NAMESPACE"); !ns.empty())
            return "pmix/" + ns;
    }
    if (env.launcher == "slurm") {
        const std::string job = value("SLURM_JOB_ID");
        if (!job.empty())
            return "slurm/" + job + "." + value("SLURM_STEP_ID");
    }
    return {};
}

} // namespace

store_plan plan_store(const launch_environment& env,
                      const std::function<const char*(const char*)>& getenv, error_code& ec,
                      std::string* culprit) {
    ec = {};
    auto fail = [&](error e, std::string what) {
        ec = make_error_code(e);
        if (culprit)
            *culprit = std::move(what);
        return store_plan{};
    };
    store_plan p;
    if (const char* id = getenv(env::run_id)) {
        const std::string_view v(id);
        const bool ok = !v.empty() && std::all_of(v.begin(), v.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
        });
        if (!ok)
            return fail(error::invalid_launch_environment, std::string(env::run_id) + "=" + id);
        p.run_namespace = std::string("run/") + id;
    } else {
        p.run_namespace = run_namespace_of(env, getenv);
    }
    if (const char* dir = getenv(env::store_dir)) {
        if (!*dir)
            return fail(error::invalid_launch_environment, std::string(env::store_dir) + "=");
        p.which = store_plan::kind::file;
        p.directory = dir;
        p.reason = env::store_dir;
        return p;
    }
    bool external = false;
    if (const char* v = getenv(env::store_server)) {
        if (std::string_view(v) != "external")
            return fail(error::invalid_launch_environment,
                        std::string(env::store_server) + "=" + v);
        external = true;
    }
    if (!env.rendezvous_host.empty()) {
        const auto port = parse_int(env.rendezvous_port, 1, 65535);
        if (!port)
            return fail(error::invalid_launch_environment, "port=" + env.rendezvous_port);
        p.which = store_plan::kind::tcp;
        p.host = env.rendezvous_host;
        p.port = static_cast<std::uint16_t>(*port);
        const bool named = getenv(env::rendezvous) != nullptr;
        // torchrun's agent serves a TCPStore on MASTER_PORT already (a second
        // server's bind fails) and says so to its workers.
        const bool agent =
            !named && env.launcher == "torchrun" && is_true(getenv(agent_store_variable));
        p.serve = env.rank == 0 && !external && !agent;
        p.reason = named ? env::rendezvous : "MASTER_ADDR:MASTER_PORT";
        p.reason += agent ? std::string(", torchrun's agent store (") + agent_store_variable + ")"
                    : external ? std::string(", ") + env::store_server + "=external"
                               : std::string(", served by rank 0");
        return p;
    }
    // PMI-1 (MPICH's Hydra) when the innermost launcher is the one that
    // serves it, or when there is no PMIx.
    const bool pmi = getenv("PMI_FD") && getenv("PMI_RANK") && getenv("PMI_SIZE");
    const bool pmix = getenv("PMIX_NAMESPACE") && getenv("PMIX_RANK");
    if (pmi && (env.launcher == "pmi" || !pmix)) {
        p.which = store_plan::kind::pmi;
        p.reason = "PMI_FD, the launcher's PMI-1";
        return p;
    }
    if (pmix) {
        if (!pmix_supported())
            return fail(error::no_launch_store,
                        "PMIX_NAMESPACE is set (a PMIx launcher), but this build of the library "
                        "has no PMIx (libpmix-dev, UCX_ASIO_WITH_PMIX); set " +
                            std::string(env::store_dir) + " or " + env::rendezvous);
        p.which = store_plan::kind::pmix;
        p.reason = "PMIX_NAMESPACE, the launcher's PMIx";
        return p;
    }
    return fail(error::no_launch_store,
                std::string("none of ") + env::store_dir + ", " + env::rendezvous +
                    ", MASTER_ADDR and MASTER_PORT (torchrun), PMIX_NAMESPACE (a PMIx "
                    "launcher such as Open MPI's mpirun) or PMI_FD (a PMI-1 launcher such as "
                    "MPICH's mpiexec.hydra) is set" +
                    // srun serves a store only with an MPI plugin.
                    (env.launcher == "slurm" ? std::string("; under srun, ask for one with "
                                                           "--mpi=pmix or --mpi=pmi2")
                                             : std::string()));
}

store_plan plan_store(const launch_environment& env, error_code& ec, std::string* culprit) {
    return plan_store(
        env, [](const char* n) { return std::getenv(n); }, ec, culprit);
}

struct launch_store::impl {
    std::unique_ptr<store> s;
    tcp_store* tcp = nullptr;
    std::unique_ptr<tcp_store_server> server;
    std::string description;
    std::string run_namespace;
    /// The view under run_namespace (destroyed before the store).
    std::unique_ptr<prefix_store> view;
};

struct launch_store_access {
    static launch_store make(std::unique_ptr<launch_store::impl> i) {
        launch_store l;
        l.impl_ = std::move(i);
        return l;
    }
};

launch_store::launch_store() = default;
launch_store::launch_store(launch_store&&) noexcept = default;
launch_store& launch_store::operator=(launch_store&&) noexcept = default;
launch_store::~launch_store() {
    close();
}

launch_store::operator bool() const noexcept {
    return impl_ && impl_->s;
}
store& launch_store::get() const noexcept {
    if (impl_->view)
        return *impl_->view;
    return *impl_->s;
}
bool launch_store::serving() const noexcept {
    return impl_ && impl_->server;
}
const std::string& launch_store::description() const noexcept {
    static const std::string none;
    return impl_ ? impl_->description : none;
}
void launch_store::close() {
    if (!impl_)
        return;
    if (impl_->tcp)
        impl_->tcp->close();
    if (impl_->server)
        impl_->server->close();
}

namespace detail {

namespace {

using open_handler = boost::asio::any_completion_handler<void(error_code, launch_store)>;

void finish(const boost::asio::any_io_executor& ex, open_handler h, error_code ec,
            std::unique_ptr<launch_store::impl> i) {
    if (ec) {
        i->s.reset(), i->server.reset(), i->tcp = nullptr;
    } else if (!i->run_namespace.empty()) {
        i->view = std::make_unique<prefix_store>(*i->s, i->run_namespace);
        i->description += ", this run's keys under " + i->run_namespace + "/";
    }
    boost::asio::post(
        ex, boost::asio::append(std::move(h), ec, launch_store_access::make(std::move(i))));
}

std::string endpoint_text(const boost::asio::ip::tcp::endpoint& ep) {
    const auto a = ep.address();
    return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" +
           std::to_string(ep.port());
}

/// A TCP store's opening: the resolve in flight and its bound.
struct tcp_opening {
    boost::asio::any_io_executor ex;
    boost::asio::ip::tcp::resolver resolver;
    boost::asio::steady_timer timer;
    open_handler handler;
    std::unique_ptr<launch_store::impl> result = std::make_unique<launch_store::impl>();
    store_plan plan;
    std::string who;
    open_store_options options;
    bool done = false;

    explicit tcp_opening(boost::asio::any_io_executor e) : ex(e), resolver(e), timer(e) {}

    std::string where() const {
        return plan.host + ":" + std::to_string(plan.port) + " (" + plan.reason + ")";
    }

    void resolved(error_code ec, const boost::asio::ip::tcp::resolver::results_type& rs) {
        if (done)
            return; // the bound passed: reported already
        done = true;
        timer.cancel();
        if (ec) {
            result->description =
                who + ": cannot resolve the rendezvous host of " + where() + ": " + ec.message();
            return finish(ex, std::move(handler), ec, std::move(result));
        }
        std::string bound;
        if (plan.serve) {
            error_code first;
            std::string first_at;
            for (const auto& entry : rs) {
                try {
                    result->server = std::make_unique<tcp_store_server>(ex, entry.endpoint());
                    bound = endpoint_text(result->server->local_endpoint());
                    break;
                } catch (const boost::system::system_error& e) {
                    if (!first) {
                        first = e.code();
                        first_at = endpoint_text(entry.endpoint());
                    }
                }
            }
            if (!result->server) {
                if (!first)
                    first = boost::asio::error::host_not_found;
                result->description = who + ": cannot serve the store at " + where() + ", " +
                                      (first_at.empty() ? "no address" : first_at) + ": " +
                                      first.message();
                return finish(ex, std::move(handler), first, std::move(result));
            }
        }
        auto t = std::make_unique<tcp_store>(ex, plan.host, plan.port);
        result->tcp = t.get();
        result->s = std::move(t);
        result->s->set_timeout(options.store_timeout);
        result->description = "tcp store at " + where() +
                              (bound.empty() ? "" : ", served by this process at " + bound);
        finish(ex, std::move(handler), {}, std::move(result));
    }
};

/// Opens the key-value space of the launcher (a PMIx or PMI-1 store, a short
/// blocking connection), or says why it cannot.
template <class Store, class Name>
void open_launcher_store(const boost::asio::any_io_executor& ex, open_handler h,
                         std::unique_ptr<launch_store::impl> result, const std::string& who,
                         const store_plan& plan, const open_store_options& options,
                         const char* server, Name name) {
    error_code ec;
    std::string why;
    auto p = std::make_unique<Store>(ex, ec, &why);
    if (ec) {
        result->description = who + ": cannot connect to the launcher's " + server + " server (" +
                              plan.reason + "): " + why;
        return finish(ex, std::move(h), ec, std::move(result));
    }
    result->description = name(*p) + " (" + plan.reason + ")";
    result->s = std::move(p);
    result->s->set_timeout(options.store_timeout);
    finish(ex, std::move(h), {}, std::move(result));
}

} // namespace

void open_store(boost::asio::any_io_executor ex, const launch_environment& env,
                const store_plan& plan, const open_store_options& options, open_handler h) {
    auto result = std::make_unique<launch_store::impl>();
    result->run_namespace = plan.run_namespace;
    const std::string who = "rank " + std::to_string(env.rank);
    switch (plan.which) {
    case store_plan::kind::file:
        try {
            result->s = std::make_unique<file_store>(ex, plan.directory);
        } catch (const std::filesystem::filesystem_error& e) {
            result->description = who + ": cannot open the store directory " + plan.directory +
                                  " (" + plan.reason + "): " + e.code().message();
            return finish(ex, std::move(h), e.code(), std::move(result));
        }
        result->s->set_timeout(options.store_timeout);
        result->description = "file store in " + plan.directory + " (" + plan.reason + ")";
        return finish(ex, std::move(h), {}, std::move(result));
    case store_plan::kind::pmix:
#if UCX_ASIO_HAS_PMIX
        return open_launcher_store<pmix_store>(
            ex, std::move(h), std::move(result), who, plan, options, "PMIx",
            [](const pmix_store& p) { return "pmix store of namespace " + p.nspace(); });
#else
        result->description = who + ": this build of the library has no PMIx";
        return finish(ex, std::move(h), make_error_code(error::no_launch_store), std::move(result));
#endif
    case store_plan::kind::pmi:
        return open_launcher_store<pmi_store>(
            ex, std::move(h), std::move(result), who, plan, options, "PMI-1",
            [](const pmi_store& p) { return "pmi store of key-value space " + p.kvsname(); });
    case store_plan::kind::tcp:
        break;
    }
    auto o = std::make_shared<tcp_opening>(ex);
    o->handler.swap(h); // (Asio 1.26: no assignment of an any_completion_handler)
    o->plan = plan;
    o->who = who;
    o->options = options;
    o->result = std::move(result);
    if (options.resolve_timeout.count() > 0) {
        o->timer.expires_after(options.resolve_timeout);
        // The name lookup runs on Asio's resolver thread, which a hung name
        // service may keep: the open completes at the bound regardless.
        o->timer.async_wait([o](error_code ec) {
            if (ec || o->done)
                return;
            o->resolved(boost::asio::error::timed_out, {});
            o->resolver.cancel();
        });
    }
    o->resolver.async_resolve(
        plan.host, std::to_string(plan.port),
        [o](error_code ec, const boost::asio::ip::tcp::resolver::results_type& rs) {
            o->resolved(ec, rs);
        });
}

} // namespace detail

} // namespace ucx
