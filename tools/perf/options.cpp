#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace perf {

const std::vector<test_info>& all_tests() {
    static const std::vector<test_info> tests{
        {"tag_lat", api::tag, kind::latency},       {"tag_bw", api::tag, kind::bandwidth},
        {"am_lat", api::am, kind::latency},         {"am_bw", api::am, kind::bandwidth},
        {"stream_lat", api::stream, kind::latency}, {"stream_bw", api::stream, kind::bandwidth},
        {"put_bw", api::rma, kind::bandwidth},      {"get_bw", api::rma, kind::bandwidth},
    };
    return tests;
}

const test_info* find_test(const std::string& name) {
    for (const auto& t : all_tests())
        if (name == t.name)
            return &t;
    return nullptr;
}

bool api_available(api a) {
    switch (a) {
    case api::tag:
        return true;
    case api::am:
        return true;
    case api::stream:
        return true;
    case api::rma:
        return true;
    }
    return false;
}

std::size_t settings::measured_iters() const {
    if (iters != 0)
        return iters;
    const test_info* t = find_test(test);
    const bool lat = t && t->kind == kind::latency;
    if (transport == transport::tcp || progress == progress::event) {
        // Every message costs an operating-system wake-up (tens of microseconds).
        if (size >= (1u << 20))
            return lat ? 200 : 1000;
        return lat ? 20000 : (size >= 65536 ? 20000 : 200000);
    }
    if (size >= (8u << 20))
        return lat ? 100 : 300;
    if (size >= (1u << 20))
        return lat ? 1000 : 3000;
    if (size >= 65536)
        return lat ? 20000 : 30000;
    return lat ? 200000 : 1000000;
}

std::size_t settings::warmup_iters() const {
    if (warmup != 0)
        return warmup;
    std::size_t n = std::max<std::size_t>(1, measured_iters() / 10);
    // A bandwidth test's warm-up comes in two rounds (see warmup_halves);
    // each fills the window, as the measured round does, so that the
    // measured round finds every operation state it needs already made
    // (the worker's pool keeps as many as were in flight at once).
    const test_info* t = find_test(test);
    if (t && t->kind != kind::latency)
        n = std::max(n, 2 * (window + 1));
    return n;
}

namespace {

// The names of an option's values, for parsing and printing.
template <class E>
struct named {
    E value;
    const char* name;
};
constexpr named<transport> transports[] = {
    {transport::library, "library"}, {transport::ucp, "ucp"}, {transport::tcp, "tcp"}};
constexpr named<progress> progress_modes[] = {
    {progress::event, "event"}, {progress::poll, "poll"}, {progress::hybrid, "hybrid"}};
constexpr named<style> styles[] = {
    {style::callback, "callback"}, {style::coroutine, "coroutine"}, {style::batch, "batch"}};
constexpr named<format> formats[] = {
    {format::table, "table"}, {format::csv, "csv"}, {format::json, "json"}};
constexpr named<memory> memories[] = {{memory::host, "host"}, {memory::cuda, "cuda"}};

template <class E, std::size_t N>
const char* name_of(const named<E> (&table)[N], E e) {
    for (const auto& x : table)
        if (x.value == e)
            return x.name;
    return "?";
}

// Sets `out` to the value called `name`; returns an error message or "".
template <class E, std::size_t N>
std::string choose(const named<E> (&table)[N], const char* what, const std::string& name, E& out) {
    std::string names;
    for (std::size_t i = 0; i < N; ++i) {
        if (name == table[i].name) {
            out = table[i].value;
            return "";
        }
        names += i == 0 ? "" : i + 1 == N ? " or " : ", ";
        names += table[i].name;
    }
    return "unknown " + std::string(what) + " '" + name + "' (" + names + ")";
}

} // namespace

const char* to_string(transport t) {
    return name_of(transports, t);
}

const char* to_string(progress p) {
    return name_of(progress_modes, p);
}

const char* to_string(style s) {
    return name_of(styles, s);
}

const char* to_string(memory m) {
    return name_of(memories, m);
}

namespace {

bool number(const std::string& v, std::size_t& out) {
    if (v.empty())
        return false;
    std::size_t mult = 1;
    std::string digits = v;
    switch (digits.back()) {
    case 'k':
    case 'K':
        mult = 1024;
        break;
    case 'm':
    case 'M':
        mult = 1024 * 1024;
        break;
    case 'g':
    case 'G':
        mult = std::size_t{1024} * 1024 * 1024;
        break;
    default:
        break;
    }
    if (mult != 1)
        digits.pop_back();
    std::size_t n = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || p != digits.data() + digits.size())
        return false;
    out = n * mult;
    return true;
}

} // namespace

std::string parse(int argc, const char* const* argv, settings& s) {
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](std::string& out) {
            if (i + 1 >= argc)
                return false;
            out = argv[++i];
            return true;
        };
        std::string v;
        std::size_t n = 0;
        if (arg == "--server") {
            s.server = true;
        } else if (arg == "--local") {
            s.local = true;
        } else if (arg == "--check") {
            s.check = true;
        } else if (arg == "--no-header") {
            s.header = false;
        } else if (arg == "--count-allocations") {
            s.count_allocations = true;
        } else if (arg == "--ucx-defaults") {
            s.ucx_defaults = true;
        } else if (arg == "--latency-histograms") {
            s.latency_histograms = true;
        } else if (arg == "--connect") {
            if (!value(v) || (v != "address" && v != "sockaddr"))
                return "--connect takes address or sockaddr";
            s.sockaddr_connect = v == "sockaddr";
        } else if (arg == "-t" || arg == "--test") {
            if (!value(v) || !find_test(v))
                return "unknown test '" + v + "'";
            s.test = v;
        } else if (arg == "--transport" || arg == "--progress" || arg == "--style" ||
                   arg == "--format" || arg == "-m" || arg == "--memory") {
            if (!value(v))
                return arg + " needs a value";
            const std::string err =
                arg == "--transport"  ? choose(transports, "transport", v, s.transport)
                : arg == "--progress" ? choose(progress_modes, "progress mode", v, s.progress)
                : arg == "--style"    ? choose(styles, "completion style", v, s.style)
                : arg == "--format"   ? choose(formats, "format", v, s.format)
                                      : choose(memories, "memory", v, s.memory);
            if (!err.empty())
                return err;
        } else if (arg == "--error-handling") {
            if (!value(v) || (v != "on" && v != "off"))
                return "--error-handling takes on or off";
            s.error_handling = v == "on";
        } else if (arg == "-s" || arg == "--size" || arg == "-n" || arg == "--iters" ||
                   arg == "-w" || arg == "--warmup" || arg == "--window" || arg == "-p" ||
                   arg == "--port" || arg == "--port-fd" || arg == "--spin-us" ||
                   arg == "--max-steps" || arg == "--serves" || arg == "--latency-sampling") {
            if (!value(v) || !number(v, n))
                return arg + " needs a number";
            if (arg == "-s" || arg == "--size")
                s.size = n;
            else if (arg == "-n" || arg == "--iters")
                s.iters = n;
            else if (arg == "-w" || arg == "--warmup")
                s.warmup = n;
            else if (arg == "--window")
                s.window = n;
            else if (arg == "-p" || arg == "--port") {
                if (n > 65535)
                    return "port out of range";
                s.port = static_cast<unsigned short>(n);
            } else if (arg == "--port-fd")
                s.port_fd = static_cast<int>(n);
            else if (arg == "--serves") {
                if (n == 0)
                    return "--serves must be at least 1";
                s.serves = n;
            } else if (arg == "--max-steps")
                s.max_steps = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
            else if (arg == "--latency-sampling")
                s.latency_sampling = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
            else
                s.spin_us = static_cast<unsigned>(n);
        } else if (arg == "--label") {
            if (!value(s.label))
                return "--label needs a value";
        } else if (!arg.empty() && arg[0] == '-') {
            return "unknown option '" + arg + "'";
        } else {
            positional.push_back(arg);
        }
    }
    if (positional.size() > 1)
        return "more than one server host given";
    if (!positional.empty())
        s.host = positional[0];
    if (s.window == 0)
        return "--window must be at least 1";
    if (s.size == 0)
        return "--size must be at least 1";
    if (s.size > (std::size_t{1} << 30))
        return "--size is limited to 1 GiB";
    const test_info* t = find_test(s.test);
    if (s.size < 8 && t->kind == kind::latency && s.check)
        return "--check needs --size of at least 8";
    if (!s.server && !s.local && s.host.empty())
        return "give a server host, --local or --server";
    if (s.style == style::batch &&
        (s.transport != transport::library || s.test != "tag_bw" || s.memory != memory::host))
        return "--style batch runs tag_bw over the library in host memory";
    if (s.memory == memory::cuda && s.transport != transport::library)
        return "--memory cuda runs with --transport library (compare raw UCX with "
               "ucx_perftest -m cuda)";
    if (s.memory == memory::cuda && t->kind != kind::bandwidth)
        return "--memory cuda runs the bandwidth tests (tag_bw am_bw stream_bw put_bw get_bw)";
    return "";
}

std::string wire_form(const settings& s) {
    std::ostringstream out;
    out << "--test " << s.test << " --transport " << to_string(s.transport) << " --progress "
        << to_string(s.progress) << " --style " << to_string(s.style) << " --size " << s.size
        << " --iters " << s.measured_iters() << " --warmup " << s.warmup_iters() << " --window "
        << s.window << " --error-handling " << (s.error_handling ? "on" : "off") << " --spin-us "
        << s.spin_us;
    if (s.max_steps != 0)
        out << " --max-steps " << s.max_steps;
    if (s.memory != memory::host)
        out << " --memory " << to_string(s.memory);
    if (s.check)
        out << " --check";
    if (s.ucx_defaults)
        out << " --ucx-defaults";
    if (s.latency_histograms)
        out << " --latency-histograms";
    if (s.latency_sampling != 0)
        out << " --latency-sampling " << s.latency_sampling;
    if (s.sockaddr_connect)
        out << " --connect sockaddr";
    if (s.count_allocations)
        out << " --count-allocations";
    return out.str();
}

std::string parse_wire(const std::string& line, settings& s) {
    std::istringstream in(line);
    std::vector<std::string> words{"ucx-asio-perf"};
    for (std::string w; in >> w;)
        words.push_back(w);
    words.push_back("--server");
    std::vector<const char*> argv;
    for (const auto& w : words)
        argv.push_back(w.c_str());
    return parse(static_cast<int>(argv.size()), argv.data(), s);
}

const char* usage() {
    return "usage:\n"
           "  ucx-asio-perf --server [-p PORT] [--serves N]  serve N tests (1), then exit\n"
           "  ucx-asio-perf HOST [-p PORT] [options]      run a test against a server\n"
           "  ucx-asio-perf --local [options]             start a server process here, then "
           "run\n"
           "options:\n"
           "  -t, --test NAME        tag_lat tag_bw am_lat am_bw stream_lat stream_bw put_bw "
           "get_bw\n"
           "                         (tag_lat); a comma-separated list runs each in turn\n"
           "  --transport T          library (ucx-asio), ucp (raw UCP) or tcp (Asio TCP) "
           "(library)\n"
           "  --progress MODE        event, poll or hybrid (event)\n"
           "  --style S              callback or coroutine completions, or batch: tag_bw\n"
           "                         sent with ucx::try_tag_send (async_tag_send for what\n"
           "                         it does not take) and received with a\n"
           "                         ucx::tag_receiver (callback)\n"
           "  -s, --size BYTES       message size, k/m/g suffixes allowed (8); a comma-\n"
           "                         separated list runs each test at each size in turn\n"
           "  -n, --iters N          measured iterations (depends on test and size)\n"
           "  -w, --warmup N         warm-up iterations (iters/10; bandwidth tests at least\n"
           "                         two windows and two)\n"
           "  --window N             bandwidth tests: sends (puts, gets) in flight (64)\n"
           "  -m, --memory M         host or cuda: the messages in device memory on both sides\n"
           "                         (bandwidth tests, --transport library; prints the\n"
           "                         cudaMemcpy bandwidth of the size beside: the ceiling of\n"
           "                         device memory staged through host memory) (host)\n"
           "  --check                verify the content of every message\n"
           "  --format F             table, csv or json (table)\n"
           "  --no-header            leave out the table or csv header\n"
           "  --label TEXT           a label printed with the results\n"
           "  --count-allocations    also print the raw operator new count of the measured phase\n"
           "                         (allocs/op is always reported)\n"
           "  --error-handling on|off  ucp transport: peer error mode (on, as the library)\n"
           "  --connect address|sockaddr  library streams: connect by worker address (as\n"
           "                         ucx_perftest's peers) or by host:port (address)\n"
           "  --ucx-defaults         library and ucp: UCX's defaults, without the library's\n"
           "                         MM_ERROR_HANDLING=y and MM_SEG_SIZE\n"
           "  --spin-us N            hybrid mode: spin before sleeping (50, as the library)\n"
           "  --max-steps N          library: progress steps per handler before yielding\n"
           "                         (worker_options::max_steps_per_handler; 0: its default)\n"
           "  --latency-histograms   library: measure the operations' latencies\n"
           "                         (worker_options::latency_histograms)\n"
           "  --latency-sampling N   library: of one operation in N (worker_options::\n"
           "                         latency_sampling; 0: its default, 16)\n"
           "  --print-config         print the UCX settings the library applies by default\n"
           "Every UCX setting comes from the environment (UCX_TLS, UCX_NET_DEVICES, ...).\n";
}

} // namespace perf
