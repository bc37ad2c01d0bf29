// Serving workers' metrics to Prometheus over HTTP, on the application's own
// executor (see docs/guide/metrics.md).
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/endpoint_report.hpp>
#include <ucx/error.hpp>
#include <ucx/group.hpp>
#include <ucx/listener.hpp>
#include <ucx/store.hpp>
#include <ucx/worker.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ucx {

struct metrics_exporter_options {
    /// Labels on every series the exporter serves, as (name, value) pairs:
    /// for example {{"rank", "3"}} for one rank of a job. A name must match
    /// `[a-zA-Z_][a-zA-Z0-9_]*`, not begin with `__`, and not be one of the
    /// exporter's own: `worker`, `group`, `listener`, `store`, `endpoint`,
    /// `kind`, `op`, `cause`, `le`, `error`, `message`, `role`, `state`,
    /// `local`, `remote`, `fabric`, `lane`, `transport`, `device`, `uses`;
    /// values may hold any text.
    std::vector<std::pair<std::string, std::string>> labels;
    /// Most scrapers served at once; one more is closed at once.
    std::size_t max_connections = 16;
    /// A connection that sends no complete request for this long is closed
    /// (a scraper that stalls, or a client that opens and says nothing).
    std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
    /// Whether `GET /metrics` includes a series set per endpoint of the
    /// workers added (`ucx_endpoint_*`: what each is, its lanes, its
    /// operations by kind). Each worker's endpoints are read on its
    /// executor, as for `GET /endpoints`: the answer waits for them, at most
    /// `request_timeout`, and leaves out the workers that did not answer
    /// (counted in `ucx_exporter_workers_unanswered`). Off, a scrape reads
    /// counters only and never waits; turn it off for a process with many
    /// thousands of connections, whose endpoint series would be too many.
    bool endpoint_series = true;
};

namespace detail {
class metrics_exporter_impl;
}

/// An HTTP server of the Prometheus text format: `GET /metrics` answers the
/// metrics of the workers, groups, listeners and stores added to it
/// (`worker::metrics()`, `group::metrics()`, ...), and those of each
/// endpoint of the workers (`endpoint::metrics()`, `endpoint::lanes()`,
/// unless `metrics_exporter_options::endpoint_series` is off), as the
/// families listed in docs/guide/metrics.md, each series labelled with the
/// name it was added under and the options' labels. `GET /flight`
/// answers the names of the groups added, as JSON
/// (`{"groups":["world"]}`); `GET /flight/NAME` (NAME percent-encoded)
/// answers the flight record of the group added as NAME (`to_json`, reason
/// "request"), taken on the group's executor: 404 for a name not added (or
/// a group released), 503 when that executor does not run it within
/// `request_timeout`. `GET /endpoints` answers the endpoints of the
/// workers added, with their lanes (`endpoints_report` as JSON), each
/// worker's read on its executor; a worker whose executor does not run it
/// within `request_timeout` is listed in `unanswered`. Other paths answer
/// 404, other methods 405.
///
/// It runs on its executor, as an Asio TCP server would (for example the
/// io_context that runs the workers): while it is open, its pending accept
/// keeps that io_context's `run()` from returning. `close()` or the
/// destructor stops it. The workers may run on other threads: a scrape reads
/// their counters without stopping them. A worker that is destroyed drops
/// out of the answers, and so does a group once released.
///
/// Movable, not copyable. Its functions are safe to call from any thread.
class metrics_exporter {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Listens on `at` (port 0: a port the system picks, see
    /// `local_endpoint()`). Throws `boost::system::system_error`: the
    /// socket's errors (`address_in_use`, `access_denied`, ...), or
    /// `invalid_argument` for a label name that is not valid.
    metrics_exporter(const executor_type& ex, const boost::asio::ip::tcp::endpoint& at,
                     const metrics_exporter_options& options = {});
    template <class ExecutionContext>
    requires std::is_convertible_v<ExecutionContext&, boost::asio::execution_context&>
    metrics_exporter(ExecutionContext& ctx, const boost::asio::ip::tcp::endpoint& at,
                     const metrics_exporter_options& options = {})
        : metrics_exporter(executor_type(ctx.get_executor()), at, options) {}

    metrics_exporter(metrics_exporter&&) noexcept = default;
    metrics_exporter& operator=(metrics_exporter&& other) noexcept;
    ~metrics_exporter();

    /// Serves the metrics of `w` with the label `worker="name"`. Throws
    /// `boost::system::system_error` with `bad_descriptor` when `w` was
    /// moved from or this exporter was moved from, `invalid_argument` when
    /// another added worker has this name.
    void add(const worker& w, std::string name);

    /// Serves this rank's collective metrics of `g` (`group::metrics()`)
    /// with the label `group="name"`. Throws `boost::system::system_error`
    /// with `bad_descriptor` for an empty group or a moved-from exporter,
    /// `invalid_argument` when another added group has this name. Its
    /// worker's metrics are added separately (`add(worker, name)`).
    void add(const group& g, std::string name);

    /// Serves the metrics of `l` (`listener::metrics()`: connections
    /// accepted, refused by cause) with the label `listener="name"`. Throws
    /// `boost::system::system_error` with `bad_descriptor` for a moved-from
    /// listener or exporter, `invalid_argument` when another added listener
    /// has this name. A listener that is destroyed drops out.
    void add(const listener& l, std::string name);

    /// Serves the operation counts of `s` (`store::metrics()`) with the
    /// label `store="name"`. Throws `boost::system::system_error` with
    /// `bad_descriptor` for a moved-from exporter, `invalid_argument` when
    /// another added store has this name. A destroyed store drops out once
    /// its last operation has completed.
    void add(const store& s, std::string name);

    /// The exposition a scrape would answer now (the body of `GET /metrics`)
    /// but the endpoints' series, which only a scrape gathers (from the
    /// workers' executors). Empty for a moved-from exporter.
    std::string exposition() const;

    /// Where it listens. Throws `boost::system::system_error` with
    /// `bad_descriptor` once closed.
    boost::asio::ip::tcp::endpoint local_endpoint() const;

    /// Stops listening and closes the connections being served. Idempotent.
    void close();

    /// Whether it listens.
    bool is_open() const noexcept;

private:
    std::shared_ptr<detail::metrics_exporter_impl> impl_;
};

} // namespace ucx
