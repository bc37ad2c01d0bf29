// Sends one tagged message between two workers through the installed package.
#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstring>

int main() {
    boost::asio::io_context io;
    ucx::context ctx;
    ucx::worker a(ctx, io), b(ctx, io);
    ucx::endpoint ep(a, b.address());
    char out[] = "installed", in[sizeof out] = {};
    bool received = false;
    ucx::async_tag_recv(b, boost::asio::buffer(in), 1, ucx::tag_mask_full,
                        [&](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                            received = !ec && n == sizeof out;
                            ep.close();
                            a.close();
                            b.close();
                        });
    ucx::async_tag_send(ep, boost::asio::buffer(out), 1, [](ucx::error_code, std::size_t) {});
    io.run();
    const bool ok = received && std::strcmp(in, out) == 0;
    // The package makes the consumer use the UCX the library was built with.
    const bool same_ucx = ucx::ucx_build_version() == ucx::ucx_runtime_version();
    std::printf("consumer: %s; UCX %s (built with %s)\n", ok ? "ok" : "FAILED",
                ucx::ucx_runtime_version().to_string().c_str(),
                ucx::ucx_build_version().to_string().c_str());
    return ok && same_ucx ? 0 : 1;
}
