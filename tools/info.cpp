// ucx-asio-info: what UCX and this library will do on this machine.
//
//   ucx-asio-info [--config FILE] [--prefix PREFIX] [--connect HOST:PORT]
//                 [--method handshake|ucx_sockaddr|plain] [--no-connection]
//   ucx-asio-info --endpoints http://HOST:PORT [--timeout MS]
//   ucx-asio-info --launch
//
// With --launch it prints only this process's place in its job, as
// ucx::detect_environment reads it from a launcher's variables (one line:
// "launch: launcher=L rank=R size=S local_rank=LR local_size=LS node_rank=N
// rendezvous=HOST:PORT enclosing=OUTER"), or the error naming the variable,
// and exits 0 or 2; then the store ucx::plan_store chooses ("store: KIND ...
// (VARIABLES)", or "store: none: what was looked for") and the namespace of
// the run's keys ("run namespace: ..."), which does not change
// the exit status.
//
// Prints, in sections:
// - versions: this library's, the UCX running and the one the library was
//   built against
//   (a mismatch is a warning);
// - configuration: the context options built from the configuration file
//   (`name = value` lines, or Dask's YAML) and the environment (Dask's DASK_*
//   variables, then PREFIX + name, "UCXASIO_" by default; see
//   docs/guide/configuration.md), the Dask keys that have no effect here (as
//   warnings), the UCX settings they turn into, and the effective values of
//   UCX's main settings;
// - resources: the transports and devices the context found (UCX's own
//   listing);
// - connection: a test connection, to HOST:PORT (a ucx-asio listener of that
//   method) or, by default, between two workers of this process over the
//   loopback address, with the lanes UCX chose for it (UCX's text, then
//   endpoint::lanes(): number, transport/device, uses). Both ends of a
//   loopback connection share this host: if the lanes carry no shared-memory
//   transport while the context allows one, the tool warns (UCX leaves shared
//   memory out of peer error mode unless its error handling is on, and then
//   moves intra-node traffic over TCP).
// - atomics: with UCX 1.16 and later (and its protocol layer on, the default)
//   the tool warns that atomics fail endpoints in peer error mode.
//
// With --endpoints URL (http://HOST:PORT, a ucx::metrics_exporter of a
// running process) it prints, instead, that process's endpoints (its
// /endpoints: each endpoint's worker, role, state, addresses and lanes), and
// warns about the same traps in them: a peer on the same host (its address
// that of the endpoint, or loopback) with no shared-memory lane, and
// atomics on endpoints in peer error mode under UCX 1.16 and later (the
// process's UCX); and names the workers that did not answer. --timeout MS
// bounds the request (default 10000).
//
// Exit status: 0; 1 when a warning was printed; 2 for a bad command line or
// configuration, or a failed test connection (with --endpoints: an address
// that does not answer, or an answer that is not an endpoints report).
#include <ucx/asio.hpp>

#include "http_get.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace asio = boost::asio;

namespace {

int warnings = 0;

void warn(const std::string& what) {
    std::printf("WARNING: %s\n", what.c_str());
    ++warnings;
}

int usage() {
    std::fprintf(stderr,
                 "usage: ucx-asio-info [--config FILE] [--prefix PREFIX] [--connect HOST:PORT]\n"
                 "                     [--method handshake|ucx_sockaddr|plain] [--no-connection]\n"
                 "       ucx-asio-info --endpoints http://HOST:PORT [--timeout MS]\n"
                 "       ucx-asio-info --launch\n");
    return 2;
}

std::string yes_no(bool b) {
    return b ? "yes" : "no";
}

void print_options(const ucx::context_options& o) {
    std::printf("  tcp=%s shared_memory=%s cma=%s infiniband=%s cuda_copy=%s nvlink=%s\n",
                yes_no(o.transports.tcp).c_str(), yes_no(o.transports.shared_memory).c_str(),
                yes_no(o.transports.cma).c_str(), yes_no(o.transports.rdma).c_str(),
                yes_no(o.transports.cuda_copy).c_str(), yes_no(o.transports.nvlink).c_str());
    std::printf("  shared_memory_error_handling=%s shared_memory_segment_size=%zu "
                "multi_threaded=%s\n",
                yes_no(o.shared_memory_error_handling).c_str(), o.shared_memory_segment_size,
                yes_no(o.multi_threaded).c_str());
    std::printf("  create_cuda_context=%s cuda_device=%d cuda_pool_size=%zu\n",
                yes_no(o.cuda.create_context).c_str(), o.cuda.device, o.cuda.pool_size);
    for (const auto& [name, value] : o.config)
        std::printf("  environment: %s=%s\n", name.c_str(), value.c_str());
}

/// The lanes UCX chose for an endpoint (its own description).
std::string lanes_of(ucp_ep_h ep) {
    if (!ep)
        return {};
    char* buf = nullptr;
    std::size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    if (!f)
        return {};
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    std::string s(buf, len);
    std::free(buf);
    return s;
}

bool has_shared_memory_lane(const std::vector<ucx::endpoint_lane>& lanes) {
    for (const auto& lane : lanes)
        for (const char* t : {"posix", "sysv", "xpmem", "cma", "knem"})
            if (lane.transport == t)
                return true;
    return false;
}

/// Whether `remote` is on the host of `local` ("ADDRESS:PORT", IPv6 in
/// brackets): the same address, or a loopback one.
bool same_host(const std::string& local, const std::string& remote) {
    const auto address_of = [](const std::string& at) {
        std::string a = at.substr(0, at.rfind(':'));
        if (a.size() > 2 && a.front() == '[')
            a = a.substr(1, a.size() - 2);
        boost::system::error_code ec;
        const auto parsed = asio::ip::make_address(a, ec);
        return ec ? std::optional<asio::ip::address>() : parsed;
    };
    const auto l = address_of(local), r = address_of(remote);
    return r && (r->is_loopback() || (l && *l == *r));
}

/// --endpoints: the endpoints of the process serving metrics at `url`.
int print_endpoints(const std::string& url, std::chrono::milliseconds timeout) {
    ucx_tools::http_url at;
    if (!ucx_tools::parse_http_url(url, at)) {
        std::fprintf(stderr, "ucx-asio-info: %s: not http://HOST:PORT\n", url.c_str());
        return 2;
    }
    std::string body, why;
    if (!ucx_tools::http_get(at.host, at.port, "/endpoints", timeout, body, why)) {
        std::printf("ERROR: %s/endpoints: %s\n", url.c_str(), why.c_str());
        return 2;
    }
    ucx::endpoints_report r;
    if (ucx::from_json(body, r)) {
        std::printf("ERROR: %s/endpoints: not an endpoints report\n", url.c_str());
        return 2;
    }
    std::printf("== endpoints of %s, pid %lld (UCX %s): %zu\n", r.host.c_str(),
                static_cast<long long>(r.pid), r.ucx_version.c_str(), r.endpoints.size());
    bool any_open = false;
    for (const auto& e : r.endpoints) {
        std::printf("  worker %s, endpoint %llu: %s%s, %s%s%s", e.worker.c_str(),
                    static_cast<unsigned long long>(e.id), e.role.c_str(),
                    e.fabric ? " (group)" : "", e.state.c_str(), e.error.empty() ? "" : ": ",
                    e.error.c_str());
        if (!e.local.empty() || !e.remote.empty())
            std::printf(", %s -> %s", e.local.empty() ? "?" : e.local.c_str(),
                        e.remote.empty() ? "?" : e.remote.c_str());
        std::printf("\n");
        for (const auto& lane : e.lanes) {
            std::printf("    %d: %s/%s", lane.index, lane.transport.c_str(),
                        lane.device.empty() ? "-" : lane.device.c_str());
            for (const auto& use : lane.uses)
                std::printf(" %s", use.c_str());
            std::printf("\n");
        }
        for (std::size_t k = 0; k < ucx::operation_kind_count; ++k) {
            const ucx::operation_counts& c = e.metrics.operations[k];
            if (c == ucx::operation_counts{})
                continue;
            std::printf("    %s: %llu started, %llu completed, %llu failed, %llu bytes\n",
                        std::string(ucx::to_string(static_cast<ucx::operation_kind>(k))).c_str(),
                        static_cast<unsigned long long>(c.started),
                        static_cast<unsigned long long>(c.completed),
                        static_cast<unsigned long long>(c.failed),
                        static_cast<unsigned long long>(c.bytes));
        }
        any_open = any_open || e.state == "open";
        if (e.state == "open" && !e.remote.empty() && same_host(e.local, e.remote) &&
            !has_shared_memory_lane(e.lanes))
            warn("worker " + e.worker + ", endpoint " + std::to_string(e.id) +
                 ": the peer is on this host but no lane uses shared memory: its traffic goes "
                 "over the network transports. Either the process's transports leave shared "
                 "memory out (UCX_TLS, context_options::transports), or its error handling is "
                 "off, which UCX 1.13 needs under peer error mode (shared_memory_error_handling, "
                 "or UCX_MM_ERROR_HANDLING=y)");
    }
    for (const auto& w : r.unanswered)
        warn("worker " + w + " did not answer: its executor did not run the request in time");
    ucx::ucx_version version;
    const bool parsed = std::sscanf(r.ucx_version.c_str(), "%u.%u.%u", &version.major,
                                    &version.minor, &version.release) == 3;
    if (any_open && parsed && version >= ucx::ucx_version{1, 16, 0})
        warn("the process runs UCX " + r.ucx_version +
             ": an atomic fails an endpoint in peer error mode (every endpoint of this library) "
             "unless its protocol layer is off (UCX_PROTO_ENABLE=n)");
    return warnings ? 1 : 0;
}

/// Runs `io` until `done` or 10 s passed.
template <class Pred>
bool run_until(asio::io_context& io, Pred done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
        if (io.stopped())
            io.restart();
        io.run_one_for(std::chrono::milliseconds(10));
    }
    return done();
}

} // namespace

int main(int argc, char** argv) {
    std::string config_file, prefix = "UCXASIO_", connect_to, method_name = "handshake";
    bool connection = true;
    if (argc == 2 && std::string(argv[1]) == "--launch") {
        ucx::error_code ec;
        std::string culprit;
        const ucx::launch_environment env = ucx::detect_environment(ec, &culprit);
        if (ec) {
            std::printf("launch: ERROR %s: %s\n", ec.message().c_str(), culprit.c_str());
            return 2;
        }
        std::printf("launch: launcher=%s rank=%d size=%d local_rank=%d local_size=%d node_rank=%d "
                    "rendezvous=%s%s%s enclosing=%s\n",
                    env.launcher.c_str(), env.rank, env.size, env.local_rank, env.local_size,
                    env.node_rank, env.rendezvous_host.c_str(),
                    env.rendezvous_port.empty() ? "" : ":", env.rendezvous_port.c_str(),
                    env.enclosing.empty() ? "none" : env.enclosing.c_str());
        const ucx::store_plan plan = ucx::plan_store(env, ec, &culprit);
        using kind = ucx::store_plan::kind;
        if (ec)
            std::printf("store: none: %s: %s\n", ec.message().c_str(), culprit.c_str());
        else if (plan.which == kind::file)
            std::printf("store: file %s (%s)\n", plan.directory.c_str(), plan.reason.c_str());
        else if (plan.which == kind::tcp)
            std::printf("store: tcp %s:%u%s (%s)\n", plan.host.c_str(), plan.port,
                        plan.serve ? ", served by this process" : "", plan.reason.c_str());
        else if (plan.which == kind::pmix)
            std::printf("store: pmix (%s)\n", plan.reason.c_str());
        else
            std::printf("store: pmi (%s)\n", plan.reason.c_str());
        if (!ec)
            std::printf("run namespace: %s\n", plan.run_namespace.empty()
                                                   ? "none (the store's own keys)"
                                                   : plan.run_namespace.c_str());
        return 0;
    }
    if (argc >= 3 && std::string(argv[1]) == "--endpoints") {
        std::chrono::milliseconds timeout(10000);
        if (argc == 5 && std::string(argv[3]) == "--timeout")
            timeout = std::chrono::milliseconds(std::atol(argv[4]));
        else if (argc != 3)
            return usage();
        if (timeout.count() <= 0)
            return usage();
        return print_endpoints(argv[2], timeout);
    }
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::optional<std::string> {
            if (i + 1 >= argc)
                return std::nullopt;
            return std::string(argv[++i]);
        };
        std::optional<std::string> v;
        if (arg == "--no-connection")
            connection = false;
        else if (arg == "--help" || arg == "-h")
            return usage();
        else if (!(v = value()))
            return usage();
        else if (arg == "--config")
            config_file = *v;
        else if (arg == "--prefix")
            prefix = *v;
        else if (arg == "--connect")
            connect_to = *v;
        else if (arg == "--method")
            method_name = *v;
        else
            return usage();
    }
    ucx::connection_method method = ucx::connection_method::handshake;
    if (method_name == "ucx_sockaddr")
        method = ucx::connection_method::ucx_sockaddr;
    else if (method_name == "plain")
        method = ucx::connection_method::plain;
    else if (method_name != "handshake")
        return usage();

    std::printf("== versions\n");
    std::printf("  ucx-asio: %d.%d.%d\n", ucx::library_version() / 10000,
                ucx::library_version() / 100 % 100, ucx::library_version() % 100);
    const auto running = ucx::ucx_runtime_version(), built = ucx::ucx_build_version();
    std::printf("  UCX running: %s\n  UCX built against: %s\n", running.to_string().c_str(),
                built.to_string().c_str());
    if (running != built)
        warn("this process runs another UCX than the library was built against: rebuild, or "
             "set LD_LIBRARY_PATH to the UCX it was built with");

    std::printf("== configuration (file: %s, environment prefix: %s)\n",
                config_file.empty() ? "none" : config_file.c_str(), prefix.c_str());
    ucx::context_options options;
    std::vector<std::string> notes;
    try {
        options = ucx::configured_context_options(config_file, prefix, &notes);
    } catch (const boost::system::system_error& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    print_options(options);
    // Dask's keys that have no effect here, each with its reason.
    for (const std::string& n : notes)
        warn("Dask configuration: " + n);
    // The library's other variables (its registry): read elsewhere, not options.
    for (const ucx::environment_variable& v : ucx::library_environment)
        if (const char* value = std::getenv(std::string(v.name).c_str()))
            std::printf("  %s=%s: %.*s\n", std::string(v.name).c_str(), value,
                        static_cast<int>(v.meaning.size()), v.meaning.data());
    std::printf("  UCX settings from these options (over UCX's defaults and UCX_*):\n");
    const auto settings =
        ucx::make_config_settings(options, [](const char* n) { return std::getenv(n); });
    if (settings.empty())
        std::printf("    (none)\n");
    for (const auto& [name, value] : settings)
        std::printf("    UCX_%s=%s\n", name.c_str(), value.c_str());
    ucx::error_code ec;
    ucx::context ctx(options, ec);
    if (ec) {
        std::printf("ERROR: the context could not be created: %s\n", ec.message().c_str());
        return 2;
    }
    std::printf("  effective:");
    for (const char* name : {"TLS", "NET_DEVICES", "RNDV_THRESH", "KEEPALIVE_INTERVAL"}) {
        const auto value = ctx.config_value(name);
        std::printf(" %s=%s", name, value ? value->c_str() : "?");
    }
    std::printf("\n");
    std::printf("  cuda: built=%s devices=%d ucx_moves_cuda_memory=%s create_context=%s "
                "device=%d pool_size=%zu\n",
                yes_no(ucx::built_with_cuda()).c_str(), ucx::cuda_device_count(),
                yes_no(ctx.ucx_supports_cuda_memory()).c_str(),
                yes_no(ctx.cuda().create_context).c_str(), ctx.cuda().device, ctx.cuda().pool_size);

    if (!ctx.supports_atomics())
        warn("this UCX (" + running.to_string() +
             ") has no atomic protocol for endpoints in peer error mode (every endpoint of "
             "this library): an atomic fails its endpoint. Use puts and gets, or run with "
             "UCX_PROTO_ENABLE=n (which UCX 1.22 answers with other failures)");

    std::printf("== resources (UCX's listing)\n");
    std::fflush(stdout);
    ucp_context_print_info(ctx.native_handle(), stdout);
    std::fflush(stdout);

    if (!connection)
        return warnings ? 1 : 0;
    asio::io_context io;
    ucx::worker_options wo;
    wo.method = method;
    ucx::worker client(ctx, io, wo);
    std::optional<ucx::worker> server;
    std::optional<ucx::listener> listener;
    // The accepted endpoint lives until the end: dropped, it would close the
    // connection under the client.
    std::optional<ucx::endpoint> accepted;
    std::string host = "127.0.0.1", port;
    if (connect_to.empty()) {
        server.emplace(ctx, io, wo);
        listener.emplace(*server, asio::ip::tcp::endpoint(asio::ip::make_address(host), 0));
        port = std::to_string(listener->local_endpoint().port());
        listener->async_accept([&](ucx::error_code e, ucx::endpoint ep) {
            if (!e)
                accepted.emplace(std::move(ep));
        });
    } else {
        const auto colon = connect_to.rfind(':');
        if (colon == std::string::npos)
            return usage();
        host = connect_to.substr(0, colon);
        port = connect_to.substr(colon + 1);
        if (host.size() > 2 && host.front() == '[' && host.back() == ']')
            host = host.substr(1, host.size() - 2);
    }
    std::printf("== connection to %s:%s (%s method%s)\n", host.c_str(), port.c_str(),
                method_name.c_str(), connect_to.empty() ? ", loopback in this process" : "");
    std::optional<std::pair<ucx::error_code, ucx::endpoint>> connected;
    const auto t0 = std::chrono::steady_clock::now();
    ucx::async_connect(client, host, port, [&](ucx::error_code e, ucx::endpoint ep) {
        connected.emplace(e, std::move(ep));
    });
    if (!run_until(io, [&] { return connected.has_value(); })) {
        std::printf("ERROR: the connection did not complete in 10 s\n");
        return 2;
    }
    if (connected->first) {
        std::printf("ERROR: the connection failed: %s\n", connected->first.message().c_str());
        return 2;
    }
    std::printf(
        "  connected in %.1f ms\n",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::printf("%s", lanes_of(connected->second.native_handle()).c_str());
    ucx::error_code lanes_ec;
    const std::vector<ucx::endpoint_lane> lanes = connected->second.lanes(lanes_ec);
    if (lanes_ec) {
        std::printf("ERROR: the connection's lanes: %s\n", lanes_ec.message().c_str());
        return 2;
    }
    std::printf("  lanes:\n");
    for (const auto& lane : lanes) {
        std::printf("    %d: %s/%s", lane.index, lane.transport.c_str(),
                    lane.device.empty() ? "-" : lane.device.c_str());
        for (const auto& use : lane.uses)
            std::printf(" %s", use.c_str());
        std::printf("\n");
    }
    const bool local_peer =
        connect_to.empty() || host == "127.0.0.1" || host == "::1" || host == "localhost";
    if (local_peer && options.transports.shared_memory && !has_shared_memory_lane(lanes))
        warn("the peer is on this host but no lane uses shared memory: intra-node traffic goes "
             "over the network transports. With peer error handling (every endpoint of this "
             "library, and UCXX/UCX-Py's default) UCX 1.13 needs the shared-memory transports' "
             "error handling on (shared_memory_error_handling, or UCX_MM_ERROR_HANDLING=y)");
    connected->second.close();
    return warnings ? 1 : 0;
}
