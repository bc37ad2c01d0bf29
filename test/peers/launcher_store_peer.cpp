// launcher_store_peer pmix|pmi: one process of a job under a PMIx launcher
// (Open MPI's mpirun -np N) or a PMI-1 launcher (MPICH's mpiexec.hydra -n N)
// exercising ucx::pmix_store or ucx::pmi_store: two rounds of "every process
// sets, then gets every other's" (the second with async_wait), a get of a key
// this process set (no round), async_check, and the operations the launcher's
// key-value space cannot do.
//
// Prints "rank R of N: pmix store ok, rounds 2" (or "pmi store") and exits 0,
// or prints what failed and exits 1.
#include <ucx/pmi_store.hpp>
#if UCX_ASIO_PEER_WITH_PMIX
#include <ucx/pmix_store.hpp>
#endif

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {

int failures = 0;

void expect(bool ok, int rank, const std::string& what) {
    if (!ok) {
        std::printf("rank %d: %s: FAILED\n", rank, what.c_str());
        ++failures;
    }
}

std::string text(const ucx::store::value_type& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

template <class Store>
asio::awaitable<void> run(Store& s, const char* kind) {
    const int r = static_cast<int>(s.rank()), n = static_cast<int>(s.size());
    ucx::error_code ec;
    co_await s.async_set("first/" + std::to_string(r), "value " + std::to_string(r), use_awaitable);
    // One's own key: known at once, no round.
    auto mine = co_await s.async_get("first/" + std::to_string(r), use_awaitable);
    expect(text(mine) == "value " + std::to_string(r), r, "own key");
    expect(s.rounds() == 0, r, "no round for an own key");
    for (int p = 0; p < n; ++p) {
        auto v = co_await s.async_get("first/" + std::to_string(p), use_awaitable);
        expect(text(v) == "value " + std::to_string(p), r, "first/" + std::to_string(p));
    }
    expect(s.rounds() == 1, r, "one round for the first exchange");

    const std::string large(100000, static_cast<char>('a' + r % 26));
    co_await s.async_set("second/" + std::to_string(r), large, use_awaitable);
    std::vector<std::string> keys;
    for (int p = 0; p < n; ++p)
        keys.push_back("second/" + std::to_string(p));
    co_await s.async_wait(keys, use_awaitable);
    expect(co_await s.async_check(keys, use_awaitable), r, "check after wait");
    std::vector<std::string> missing{"never/set"};
    expect(!co_await s.async_check(missing, use_awaitable), r, "check of a missing key");
    auto last = co_await s.async_get("second/" + std::to_string(n - 1), use_awaitable);
    const auto want = static_cast<std::byte>('a' + (n - 1) % 26);
    expect(last.size() == 100000 && last.front() == want && last.back() == want, r,
           "a large value");
    expect(s.rounds() == 2, r, "two rounds");

    co_await s.async_add("counter", 1, asio::redirect_error(use_awaitable, ec));
    expect(ec == asio::error::operation_not_supported, r, "add: " + ec.message());
    co_await s.async_erase("first/0", asio::redirect_error(use_awaitable, ec));
    expect(ec == asio::error::operation_not_supported, r, "erase: " + ec.message());
    if (std::string(kind) == "pmix") {
        const std::string too_long(600, 'k');
        co_await s.async_get(too_long, asio::redirect_error(use_awaitable, ec));
        expect(ec == asio::error::invalid_argument, r, "a key too long: " + ec.message());
    }
    std::printf("rank %d of %d: %s store %s, rounds %llu\n", r, n, kind,
                failures == 0 ? "ok" : "FAILED", static_cast<unsigned long long>(s.rounds()));
    std::fflush(stdout);
}

template <class Store>
int serve(const char* kind) {
    asio::io_context io;
    ucx::error_code ec;
    std::string why;
    Store s(io.get_executor(), ec, &why);
    if (ec) {
        std::printf("launcher_store_peer: %s store: %s: %s\n", kind, ec.message().c_str(),
                    why.c_str());
        return 1;
    }
    s.set_timeout(std::chrono::seconds(60));
    std::exception_ptr error;
    asio::co_spawn(io, run(s, kind), [&](std::exception_ptr e) { error = e; });
    io.run();
    if (error) {
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            std::printf("rank %u: failed: %s\n", s.rank(), e.what());
        }
        return 1;
    }
    return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    const std::string kind = argc == 2 ? argv[1] : "";
#if UCX_ASIO_PEER_WITH_PMIX
    if (kind == "pmix")
        return serve<ucx::pmix_store>("pmix");
#endif
    if (kind == "pmi")
        return serve<ucx::pmi_store>("pmi");
    std::printf("usage: launcher_store_peer pmix|pmi (pmix only in a build with PMIx)\n");
    return 2;
}
