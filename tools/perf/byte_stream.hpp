// ucx-asio-perf: the tests over a byte stream (fixed-size messages on one
// connection), shared by Asio TCP sockets and ucx::stream. A stream has
// neither tags nor message boundaries: a message is `size` bytes, and the
// content check knows each message's number from its position.
#pragma once

#include "common.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <exception>

namespace perf::bytes {

inline void throw_if(const boost::system::error_code& ec, const char* what) {
    if (ec)
        throw failure(std::string(what) + ": " + ec.message());
}

// Runs handlers until `done`.
inline void drive(asio::io_context& io, const settings& s, const bool& done) {
    switch (s.progress) {
    case progress::event:
        while (!done && io.run_one() != 0) {
        }
        break;
    case progress::poll:
        while (!done) {
            io.poll();
            if (io.stopped())
                io.restart();
        }
        break;
    case progress::hybrid: {
        const auto spin = std::chrono::microseconds(s.spin_us);
        auto last = clock_type::now();
        while (!done) {
            if (io.poll() != 0) {
                last = clock_type::now();
                continue;
            }
            if (io.stopped())
                io.restart();
            if (clock_type::now() - last >= spin) {
                io.run_one();
                last = clock_type::now();
            }
        }
        break;
    }
    }
}

struct counts {
    std::size_t alloc_start = 0, alloc_end = 0;
    void begin() {
        alloc_start = allocations();
        counting(true);
    }
    void end() {
        counting(false);
        alloc_end = allocations();
    }
};

template <class Socket>
struct side {
    const settings& s;
    Socket& sock;
    std::size_t warmup = s.warmup_iters();
    std::size_t total = s.warmup_iters() + s.measured_iters();
    counts c{};
    bool done = false;
};

// ---- callbacks ----

template <class Socket>
struct lat_client_cb : side<Socket> {
    using side<Socket>::s;
    using side<Socket>::sock;
    using side<Socket>::warmup;
    using side<Socket>::total;
    using side<Socket>::c;
    using side<Socket>::done;
    result& r;
    std::vector<std::byte> out = std::vector<std::byte>(s.size);
    std::vector<std::byte> in = std::vector<std::byte>(s.size);
    std::size_t i = 0;
    int pending = 0;
    clock_type::time_point t0{}, t1{};

    void start() {
        if (i == warmup)
            c.begin();
        if (s.check)
            fill(out, i);
        pending = 2;
        t0 = clock_type::now();
        asio::async_read(sock, asio::buffer(in), [this](boost::system::error_code ec, std::size_t) {
            t1 = clock_type::now();
            throw_if(ec, "read");
            done_one();
        });
        asio::async_write(sock, asio::buffer(out),
                          [this](boost::system::error_code ec, std::size_t) {
                              throw_if(ec, "write");
                              done_one();
                          });
    }
    void done_one() {
        if (--pending != 0)
            return;
        if (s.check)
            check(in, i, "reply");
        if (i >= warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
        if (++i < total)
            return start();
        c.end();
        done = true;
    }
};

template <class Socket>
struct lat_server_cb : side<Socket> {
    using side<Socket>::s;
    using side<Socket>::sock;
    using side<Socket>::warmup;
    using side<Socket>::total;
    using side<Socket>::c;
    using side<Socket>::done;
    std::vector<std::byte> buf = std::vector<std::byte>(s.size);
    std::size_t k = 0;

    void start() {
        asio::async_read(sock, asio::buffer(buf),
                         [this](boost::system::error_code ec, std::size_t) {
                             throw_if(ec, "read");
                             if (s.check)
                                 check(buf, k, "ping");
                             if (k + 1 == warmup)
                                 c.begin();
                             asio::async_write(sock, asio::buffer(buf),
                                               [this](boost::system::error_code ec, std::size_t) {
                                                   throw_if(ec, "write");
                                                   if (++k < total)
                                                       return start();
                                                   c.end();
                                                   done = true;
                                               });
                         });
    }
};

template <class Socket>
struct bw_client_cb : side<Socket> {
    using side<Socket>::s;
    using side<Socket>::sock;
    using side<Socket>::warmup;
    using side<Socket>::total;
    using side<Socket>::c;
    using side<Socket>::done;
    result& r;
    std::vector<std::byte> buf = std::vector<std::byte>(s.size);
    std::uint64_t ack = 0;
    std::uint64_t next = 0;
    std::size_t remaining = 0;
    int round = 0;
    clock_type::time_point t0{};

    void start() {
        if (!s.check)
            fill(buf, 0);
        start_round(warmup);
    }
    void start_round(std::size_t n) {
        remaining = n;
        if (round == 1) {
            c.begin();
            t0 = clock_type::now();
        }
        write_one();
    }
    void write_one() {
        if (remaining == 0) {
            asio::async_read(sock, asio::buffer(&ack, sizeof ack),
                             [this](boost::system::error_code ec, std::size_t) {
                                 throw_if(ec, "acknowledgement read");
                                 if (round++ == 0)
                                     return start_round(s.measured_iters());
                                 r.seconds =
                                     std::chrono::duration<double>(clock_type::now() - t0).count();
                                 c.end();
                                 done = true;
                             });
            return;
        }
        --remaining;
        if (s.check)
            fill(buf, next);
        ++next;
        asio::async_write(sock, asio::buffer(buf),
                          [this](boost::system::error_code ec, std::size_t) {
                              throw_if(ec, "write");
                              write_one();
                          });
    }
};

template <class Socket>
struct bw_server_cb : side<Socket> {
    using side<Socket>::s;
    using side<Socket>::sock;
    using side<Socket>::warmup;
    using side<Socket>::total;
    using side<Socket>::c;
    using side<Socket>::done;
    std::vector<std::byte> buf = std::vector<std::byte>(s.size);
    std::uint64_t ack = 0;
    std::size_t received = 0;

    void start() {
        asio::async_read(
            sock, asio::buffer(buf), [this](boost::system::error_code ec, std::size_t) {
                throw_if(ec, "read");
                if (s.check)
                    check(buf, received, "data");
                ++received;
                if (received == warmup || received == total) {
                    if (received == warmup)
                        c.begin();
                    asio::async_write(sock, asio::buffer(&ack, sizeof ack),
                                      [this](boost::system::error_code ec, std::size_t) {
                                          throw_if(ec, "acknowledgement write");
                                          if (received < total)
                                              return start();
                                          c.end();
                                          done = true;
                                      });
                    return;
                }
                start();
            });
    }
};

// ---- coroutines ----

using asio::awaitable;
using asio::use_awaitable;

template <class Socket>
awaitable<void> lat_client_co(side<Socket>& sd, result& r) {
    const settings& s = sd.s;
    std::vector<std::byte> out(s.size), in(s.size);
    for (std::size_t i = 0; i < sd.total; ++i) {
        if (i == sd.warmup)
            sd.c.begin();
        if (s.check)
            fill(out, i);
        const auto t0 = clock_type::now();
        co_await asio::async_write(sd.sock, asio::buffer(out), use_awaitable);
        co_await asio::async_read(sd.sock, asio::buffer(in), use_awaitable);
        const auto t1 = clock_type::now();
        if (s.check)
            check(in, i, "reply");
        if (i >= sd.warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    sd.c.end();
}

template <class Socket>
awaitable<void> lat_server_co(side<Socket>& sd) {
    std::vector<std::byte> buf(sd.s.size);
    for (std::size_t k = 0; k < sd.total; ++k) {
        co_await asio::async_read(sd.sock, asio::buffer(buf), use_awaitable);
        if (sd.s.check)
            check(buf, k, "ping");
        if (k + 1 == sd.warmup)
            sd.c.begin();
        co_await asio::async_write(sd.sock, asio::buffer(buf), use_awaitable);
    }
    sd.c.end();
}

template <class Socket>
awaitable<void> bw_client_co(side<Socket>& sd, result& r) {
    const settings& s = sd.s;
    std::vector<std::byte> buf(s.size);
    if (!s.check)
        fill(buf, 0);
    std::uint64_t ack = 0, next = 0;
    for (int round = 0; round < 2; ++round) {
        clock_type::time_point t0{};
        if (round == 1) {
            sd.c.begin();
            t0 = clock_type::now();
        }
        const std::size_t n = round == 0 ? sd.warmup : s.measured_iters();
        for (std::size_t k = 0; k < n; ++k) {
            if (s.check)
                fill(buf, next);
            ++next;
            co_await asio::async_write(sd.sock, asio::buffer(buf), use_awaitable);
        }
        co_await asio::async_read(sd.sock, asio::buffer(&ack, sizeof ack), use_awaitable);
        if (round == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    sd.c.end();
}

template <class Socket>
awaitable<void> bw_server_co(side<Socket>& sd) {
    std::vector<std::byte> buf(sd.s.size);
    std::uint64_t ack = 0;
    for (std::size_t k = 0; k < sd.total; ++k) {
        co_await asio::async_read(sd.sock, asio::buffer(buf), use_awaitable);
        if (sd.s.check)
            check(buf, k, "data");
        if (k + 1 == sd.warmup || k + 1 == sd.total) {
            if (k + 1 == sd.warmup)
                sd.c.begin();
            co_await asio::async_write(sd.sock, asio::buffer(&ack, sizeof ack), use_awaitable);
        }
    }
    sd.c.end();
}

template <class Socket>
void run_co(asio::io_context& io, side<Socket>& sd, awaitable<void> a) {
    std::exception_ptr error;
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e) {
        error = e;
        sd.done = true;
    });
    drive(io, sd.s, sd.done);
    if (error)
        std::rethrow_exception(error);
}

/// Runs the client side of the test in `s` over `sock`.
template <class Socket>
result run_client(asio::io_context& io, const settings& s, Socket& sock) {
    result r;
    r.one_way_us.reserve(s.measured_iters());
    side<Socket> sd{s, sock};
    const bool lat = find_test(s.test)->kind == kind::latency;
    if (s.style == style::callback) {
        if (lat) {
            lat_client_cb<Socket> c{sd, r};
            c.start();
            drive(io, s, c.done);
            sd.c = c.c;
        } else {
            bw_client_cb<Socket> c{sd, r};
            c.start();
            drive(io, s, c.done);
            sd.c = c.c;
        }
    } else {
        run_co(io, sd, lat ? lat_client_co(sd, r) : bw_client_co(sd, r));
    }
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = sd.c.alloc_end - sd.c.alloc_start;
    r.operations = lat ? 2 * s.measured_iters() : s.measured_iters() + 1;
    return r;
}

/// Starts the server side (callbacks: before `ready` is sent) and runs it;
/// returns (allocations, operations) of the measured phase.
template <class Socket, class Ready>
std::pair<std::size_t, std::size_t> run_server(asio::io_context& io, const settings& s,
                                               Socket& sock, Ready ready) {
    side<Socket> sd{s, sock};
    const bool lat = find_test(s.test)->kind == kind::latency;
    if (s.style == style::callback) {
        if (lat) {
            lat_server_cb<Socket> c{sd};
            c.start();
            ready();
            drive(io, s, c.done);
            sd.c = c.c;
        } else {
            bw_server_cb<Socket> c{sd};
            c.start();
            ready();
            drive(io, s, c.done);
            sd.c = c.c;
        }
    } else {
        ready();
        run_co(io, sd, lat ? lat_server_co(sd) : bw_server_co(sd));
    }
    return {sd.c.alloc_end - sd.c.alloc_start,
            lat ? 2 * s.measured_iters() : s.measured_iters() + 1};
}

} // namespace perf::bytes
