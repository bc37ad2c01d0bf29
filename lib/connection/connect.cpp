#include <ucx/connect.hpp>

#include "connection/door.hpp"
#include "connection/endpoint_impl.hpp"
#include "core/context_impl.hpp"
#include "engine/worker_impl.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

namespace ucx {
namespace detail {

namespace {
// The endpoint a connect completes with (the operation owns it until then);
// null when `op` already failed.
std::shared_ptr<endpoint_impl> connecting_endpoint(const std::shared_ptr<worker_impl>& w,
                                                   endpoint_op* op) noexcept {
    if (op->cancel_requested) {
        w->start(op);
        w->complete(op, boost::asio::error::operation_aborted);
        return nullptr;
    }
    try {
        auto ep = std::make_shared<endpoint_impl>(w);
        op->subject = ep;
        return ep;
    } catch (...) {
        w->start(op);
        w->complete(op, make_error_code(error::allocation_failed));
        return nullptr;
    }
}

void connect_endpoint(const std::shared_ptr<worker_impl>& w, endpoint_op* op,
                      const boost::asio::ip::tcp::endpoint& to) noexcept {
    if (w->options().method == connection_method::handshake)
        return door_connect::start(w, op, to);
    if (!ucx_connects_over(w->context(), to.address())) {
        w->start(op);
        return w->complete(op, boost::asio::error::address_family_not_supported);
    }
    if (auto ep = connecting_endpoint(w, op)) {
        if (w->options().method == connection_method::plain)
            ep->connect_plain(to.data(), static_cast<socklen_t>(to.size()), op);
        else
            ep->connect_to(to.data(), static_cast<socklen_t>(to.size()), op);
    }
}

/// Starts the connection once the name is resolved (owner thread).
void connect_resolved(const std::shared_ptr<worker_impl>& w, endpoint_op* op, const error_code& ec,
                      const boost::asio::ip::tcp::resolver::results_type& results) noexcept {
    if (ec || results.empty()) {
        w->start(op);
        return w->complete(op, ec ? ec : error_code(boost::asio::error::host_not_found));
    }
    auto chosen = results.begin();
    for (auto it = results.begin(); it != results.end(); ++it) {
        if (it->endpoint().address().is_v4()) {
            chosen = it;
            break;
        }
    }
    connect_endpoint(w, op, chosen->endpoint());
}
} // namespace

void connect_by_name(worker_impl& w, endpoint_op* op, const std::string& host,
                     const std::string& service) {
    op->kind = operation_kind::connect;
    auto self = w.shared_from_this();
    auto resolver = std::make_shared<boost::asio::ip::tcp::resolver>(w.get_executor());
    resolver->async_resolve(
        host, service,
        [self, op, resolver](const error_code& ec, boost::asio::ip::tcp::resolver::results_type r) {
            connect_resolved(self, op, ec, r);
        });
}

void connect_to_endpoint(worker_impl& w, endpoint_op* op,
                         const boost::asio::ip::tcp::endpoint& to) noexcept {
    op->kind = operation_kind::connect;
    connect_endpoint(w.shared_from_this(), op, to);
}

void connect_to_address(worker_impl& w, endpoint_op* op, const worker_address& to) noexcept {
    op->kind = operation_kind::connect;
    if (auto ep = connecting_endpoint(w.shared_from_this(), op))
        ep->connect_address(to, op);
}

void connect_fabric(worker_impl& w, endpoint_op* op, const worker_address& to) noexcept {
    if (auto ep = connecting_endpoint(w.shared_from_this(), op)) {
        ep->mark_fabric();
        ep->connect_address(to, op);
    }
}

bool ucx_connects_over(const context_impl& ctx, const boost::asio::ip::address& a) noexcept {
    // UCX's connection manager makes the connection over `a`, then the TCP
    // transport's endpoints connect back over the address family of the
    // transport's interface: the first family of TCP_AF_PRIO that the
    // device has. Measured with UCX 1.13.1 and 1.22.0 over loopback, when the
    // families differ:
    // - 1.13: the client's connect fails as "rejected" and the server's
    //   endpoint is never told; a process that had such a connection may
    //   crash in ucp_worker_destroy; a listener on :: fails its IPv4
    //   clients ("Endpoint is not connected");
    // - 1.22: the server writes an IPv6 address into an IPv4-sized buffer
    //   (uct_tcp_ep_set_dest_addr): heap corruption, then an abort.
    // UCX 1.13's TCP transport also leaves IPv6 loopback addresses out of
    // its interfaces (UCX 1.14 takes them).
    const bool v6 = a.is_v6() && !a.to_v6().is_v4_mapped();
    if (v6 != ctx.tcp_prefers_ipv6())
        return false;
    static const bool takes_v6_loopback = ucx_runtime_version() >= ucx_version{1, 14, 0};
    return !v6 || takes_v6_loopback || !(a.is_loopback() || a.is_unspecified());
}

} // namespace detail

std::string get_address(const std::string& ifname, error_code& ec) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        ec = error_code(errno, boost::system::system_category());
        return {};
    }
    std::string found;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        if (ifname.empty()) {
            if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
                continue;
        } else if (ifname != i->ifa_name) {
            continue;
        }
        char text[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                  sizeof text);
        found = text;
        break;
    }
    freeifaddrs(list);
    ec = found.empty() ? make_error_code(error::no_interface_address) : error_code();
    return found;
}

std::string get_address(const std::string& ifname) {
    error_code ec;
    auto a = get_address(ifname, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::get_address(" + ifname + ")");
    return a;
}

} // namespace ucx
