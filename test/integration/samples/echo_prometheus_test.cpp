// A real Prometheus server scrapes echo_server's metrics: after a known number
// of echoes, Prometheus's HTTP API returns the series with the expected values.
#include "child_process.hpp"
#include "test_support.hpp"

#include <boost/asio/connect.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

using namespace ucx_test;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

/// `name HOST:PORT` from the lines the server prints first.
std::uint16_t port_after(const std::string& line, const std::string& before) {
    const auto at = line.find(before);
    if (at == std::string::npos)
        return 0;
    const auto colon = line.find(':', line.find("127.0.0.1", at));
    return static_cast<std::uint16_t>(std::stoul(line.substr(colon + 1)));
}

/// A port nobody listens on now (the system's pick, released).
std::uint16_t free_port() {
    asio::io_context io;
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    return a.local_endpoint().port();
}

/// GET `target` from 127.0.0.1:`port`: the body, or empty if nothing answers.
std::string http_get(std::uint16_t port, const std::string& target) {
    try {
        asio::io_context io;
        tcp::socket s(io);
        s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        http::request<http::empty_body> req(http::verb::get, target, 11);
        req.set(http::field::host, "127.0.0.1");
        http::write(s, req);
        boost::beast::flat_buffer buf;
        http::response<http::string_body> res;
        http::read(s, buf, res);
        return res.result() == http::status::ok ? res.body() : std::string();
    } catch (const std::exception&) {
        return {};
    }
}

std::string url_encode(const std::string& s) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '_' || c == '-' || c == '.')
            out += static_cast<char>(c);
        else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// The value of an instant query's single result (Prometheus's JSON:
/// `"value":[<time>,"<number>"]`), or empty.
std::string query(std::uint16_t port, const std::string& promql) {
    const std::string body = http_get(port, "/api/v1/query?query=" + url_encode(promql));
    const auto at = body.find("\"value\":[");
    if (at == std::string::npos)
        return {};
    const auto open = body.find('"', body.find(',', at));
    const auto close = body.find('"', open + 1);
    if (open == std::string::npos || close == std::string::npos)
        return {};
    return body.substr(open + 1, close - open - 1);
}

TEST(echo_prometheus, a_prometheus_server_scrapes_the_counts_of_the_echoes) {
    ASSERT_TRUE(std::filesystem::exists(UCX_ASIO_PROMETHEUS))
        << UCX_ASIO_PROMETHEUS << " is missing (Debian's prometheus package, tools/setup.sh)";
    child_process server({UCX_ASIO_ECHO_SERVER, "--quiet", "--metrics", "127.0.0.1:0"});
    const std::uint16_t metrics_port = port_after(server.read_line(), "metrics on");
    const std::uint16_t port = port_after(server.read_line(), "listening on");
    ASSERT_NE(metrics_port, 0);
    ASSERT_NE(port, 0);

    char dir_template[] = "/tmp/ucx-asio-prometheus-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    const std::filesystem::path dir = dir_template;
    {
        std::ofstream cfg(dir / "prometheus.yml");
        cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            << "scrape_configs:\n  - job_name: echo\n    static_configs:\n"
            << "      - targets: ['127.0.0.1:" << metrics_port << "']\n"
            << "        labels: {sample: echo_server}\n";
    }
    // Prometheus on a port of its own; another process may take that port
    // between our look and its bind: then it exits, and it starts again.
    std::optional<child_process> prometheus;
    std::uint16_t prom_port = 0;
    for (int attempt = 0; attempt < 5 && !prometheus; ++attempt) {
        prom_port = free_port();
        prometheus.emplace(std::vector<std::string>{
            UCX_ASIO_PROMETHEUS, "--config.file=" + (dir / "prometheus.yml").string(),
            "--storage.tsdb.path=" + (dir / "data").string(),
            "--web.listen-address=127.0.0.1:" + std::to_string(prom_port), "--log.level=error"});
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (http_get(prom_port, "/-/ready").empty() && !prometheus->exited() &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (prometheus->exited())
            prometheus.reset();
    }
    ASSERT_TRUE(prometheus) << "prometheus did not start";
    ASSERT_FALSE(http_get(prom_port, "/-/ready").empty()) << "prometheus is not ready";

    // Seven echoes of 100 bytes over UCX.
    constexpr std::size_t n = 7, size = 100;
    {
        asio::io_context io;
        ucx::context ctx(options_for(transport::shared_memory, true));
        ucx::worker w(ctx, io, strict_worker_options(ucx::progress_mode::event));
        std::optional<std::pair<ucx::error_code, ucx::endpoint>> c;
        ucx::async_connect(w, "127.0.0.1", std::to_string(port),
                           [&](auto ec, ucx::endpoint ep) { c.emplace(ec, std::move(ep)); });
        ASSERT_TRUE(run_until(io, [&] { return c.has_value(); }));
        ASSERT_FALSE(c->first) << c->first.message();
        for (std::uint32_t i = 0; i < n; ++i) {
            const auto data = pattern(size, i);
            std::vector<char> in(size);
            std::optional<ucx::error_code> s, r;
            std::size_t got = 0;
            c->second.async_recv(asio::buffer(in), [&](ucx::error_code ec, std::size_t len) {
                r = ec;
                got = len;
            });
            c->second.async_send(asio::buffer(data),
                                 [&](ucx::error_code ec, std::size_t) { s = ec; });
            expect_delivered(io, s, r, got, in, data);
        }
    }

    // Prometheus scrapes every second: wait (bounded) until it has what the
    // server did, then check each series.
    const std::string sel = R"({job="echo",sample="echo_server",worker="shard0"})";
    const auto series = [&](const std::string& name, const std::string& kind) {
        return query(prom_port, name + sel.substr(0, sel.size() - 1) + ",kind=\"" + kind + "\"}");
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    while (series("ucx_operations_completed_total", "tag_send") != std::to_string(n) &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(query(prom_port, "up{job=\"echo\"}"), "1");
    EXPECT_EQ(series("ucx_operations_completed_total", "tag_send"), std::to_string(n));
    EXPECT_EQ(series("ucx_operations_failed_total", "tag_send"), "0");
    EXPECT_EQ(series("ucx_bytes_sent_total", "tag_send"), std::to_string(n * size));
    EXPECT_EQ(series("ucx_operations_completed_total", "accept"), "1");
    // The echoes' receives: n done; the client's close ended one more.
    const std::string recv_done = series("ucx_operations_completed_total", "tag_recv");
    EXPECT_TRUE(recv_done == std::to_string(n) || recv_done == std::to_string(n + 1)) << recv_done;
    EXPECT_EQ(series("ucx_bytes_received_total", "tag_recv"), std::to_string(n * size));
    // A gauge too (its value depends on when the client's close was seen).
    EXPECT_FALSE(query(prom_port, "ucx_operations_in_flight" + sel).empty());

    prometheus.reset();
    std::filesystem::remove_all(dir);
}

} // namespace
