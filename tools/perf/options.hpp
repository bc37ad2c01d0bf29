// ucx-asio-perf: test settings, command-line parsing and the wire form the
// client sends to the server.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace perf {

/// What is measured: a ping-pong (latency) or a one-way stream (bandwidth).
enum class kind { latency, bandwidth };

/// The message API a test exercises.
enum class api { tag, am, stream, rma };

/// One test of the tool (`tag_lat`, `tag_bw`, ...).
struct test_info {
    const char* name;
    perf::api api;
    perf::kind kind;
};

/// Every test the tool knows, whether or not this build has it.
const std::vector<test_info>& all_tests();

/// The test called `name`, or null.
const test_info* find_test(const std::string& name);

/// Whether this build of the library provides the API a test needs.
bool api_available(api a);

/// Which code path carries the messages.
enum class transport {
    library, ///< ucx-asio (this library)
    ucp,     ///< raw UCP calls, the floor for the library's overhead
    tcp,     ///< plain Asio TCP sockets with TCP_NODELAY, what an Asio user has today
};

enum class progress { event, poll, hybrid };
/// How the library's operations complete: a callback each, a coroutine each,
/// or batch (tag_bw): the sender sends with ucx::try_tag_send (a callback
/// for what it does not take), the receiver takes a batch of messages per
/// handler from a ucx::tag_receiver.
enum class style { callback, coroutine, batch };
enum class format { table, csv, json };
/// Where the messages live: host memory, or CUDA device memory on both sides.
enum class memory { host, cuda };

/// Everything a run needs; the client sends the test part to the server.
struct settings {
    // Test (sent to the server).
    std::string test = "tag_lat";
    perf::transport transport = perf::transport::library;
    perf::progress progress = perf::progress::event;
    perf::style style = perf::style::callback;
    perf::memory memory = perf::memory::host;
    std::size_t size = 8;
    std::size_t iters = 0;  ///< 0: a default that depends on the test and size
    std::size_t warmup = 0; ///< 0: a default (iters / 10, at least 1)
    std::size_t window = 64;
    bool check = false;
    bool error_handling = true; ///< peer error mode (ucp transport only; the library always has it)
    bool ucx_defaults = false;  ///< library, ucp: UCX's defaults (no MM_ERROR_HANDLING=y)
    /// Library streams: connect by host:port (a listener, UCX's sockaddr
    /// connection) instead of by worker address.
    bool sockaddr_connect = false;
    unsigned spin_us = 50;  ///< hybrid mode: spin before sleeping (the library's default)
    unsigned max_steps = 0; ///< library: worker_options::max_steps_per_handler (0: its default)
    bool latency_histograms = false; ///< library: worker_options::latency_histograms
    unsigned latency_sampling = 0;   ///< library: worker_options::latency_sampling (0: its default)

    // Process roles (not sent).
    bool server = false;
    bool local = false; ///< start a server process here and run the client against it
    std::string host;   ///< client: server host
    unsigned short port = 13347;
    int port_fd = -1;       ///< server: write the chosen port to this descriptor
    std::size_t serves = 1; ///< server: the tests it serves in turn before it exits
    perf::format format = perf::format::table;
    bool header = true;
    bool count_allocations = false;
    std::string label;

    /// The test's resolved iteration counts.
    std::size_t measured_iters() const;
    std::size_t warmup_iters() const;
};

const char* to_string(transport t);
const char* to_string(progress p);
const char* to_string(style s);
const char* to_string(memory m);

/// Parses the command line into `s`; returns an error message or "".
std::string parse(int argc, const char* const* argv, settings& s);

/// The test part of `s` as command-line words (what the client sends).
std::string wire_form(const settings& s);

/// Parses a wire form; returns an error message or "".
std::string parse_wire(const std::string& line, settings& s);

/// The usage text.
const char* usage();

} // namespace perf
