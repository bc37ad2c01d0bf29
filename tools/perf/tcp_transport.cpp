// ucx-asio-perf over plain Asio TCP sockets (TCP_NODELAY): the baseline an
// Asio user has today. Every test maps to fixed-size messages on one
// connection (see byte_stream.hpp). Progress: event runs the io_context
// (sleeping in epoll), poll busy-polls it, hybrid polls for a while after the
// last handler before sleeping.
#include "byte_stream.hpp"

namespace perf {

using asio::ip::tcp;

result tcp_client(const settings& s, control& ctl) {
    asio::io_context io(1);
    tcp::socket sock(io);
    const auto port = static_cast<unsigned short>(std::stoul(ctl.expect("port")));
    sock.connect(tcp::endpoint(ctl.remote_address(), port));
    sock.set_option(tcp::no_delay(true));
    ctl.expect("ready");
    result r = run_client(io, s, byte_ops<tcp::socket>{sock});
    finish_client(ctl, r);
    return r;
}

void tcp_server(const settings& s, control& ctl) {
    asio::io_context io(1);
    tcp::acceptor acceptor(io, tcp::endpoint(ctl.local_address(), 0));
    ctl.send("port " + std::to_string(acceptor.local_endpoint().port()));
    tcp::socket sock = acceptor.accept();
    sock.set_option(tcp::no_delay(true));
    auto [allocs, ops] =
        run_server(io, s, byte_ops<tcp::socket>{sock}, [&] { ctl.send("ready go"); });
    finish_server(ctl, allocs, ops);
}

} // namespace perf
