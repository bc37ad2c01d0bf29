// ucx-asio-perf: the message kind of a byte stream (fixed-size messages on
// one connection), shared by Asio TCP sockets and ucx::stream. A stream has
// neither tags nor message boundaries: a message is `size` bytes, and the
// content check knows each message's number from its position.
#pragma once

#include "patterns.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace perf {

/// Runs handlers until `done`: sleeping in the io_context (event), busy
/// polling it (poll), or polling for `spin_us` after the last handler before
/// sleeping (hybrid).
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

/// Messages of `size` bytes on a stream socket, one read and one write at a
/// time (see patterns.hpp). Every role is the same write or read; the latency
/// client posts the reply's read before the ping's write.
template <class Socket>
struct byte_ops {
    Socket& sock;

    using message = received_bytes;
    static constexpr const char* send_what = "write";
    static constexpr const char* recv_what = "read";
    static constexpr bool own_buffers = true, numbered = false, numbered_data = false;
    static constexpr bool one_at_a_time = true, reply_posted_first = true;
    static std::size_t receivers(const settings&) { return 1; }
    static void run(asio::io_context& io, const settings& s, const bool& done) {
        drive(io, s, done);
    }

    template <class T>
    auto send_ping(std::uint64_t&, asio::const_buffer b, T&& token) {
        return asio::async_write(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto send_reply(std::uint64_t&, asio::const_buffer b, T&& token) {
        return asio::async_write(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto send_data(std::uint64_t&, asio::const_buffer b, T&& token) {
        return asio::async_write(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto send_ack(std::uint64_t& ack, T&& token) {
        return asio::async_write(sock, asio::buffer(&ack, sizeof ack), std::forward<T>(token));
    }
    template <class T>
    auto recv_ping(std::uint64_t, asio::mutable_buffer b, T&& token) {
        return asio::async_read(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto recv_reply(std::uint64_t, asio::mutable_buffer b, T&& token) {
        return asio::async_read(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto recv_data(asio::mutable_buffer b, T&& token) {
        return asio::async_read(sock, b, std::forward<T>(token));
    }
    template <class T>
    auto recv_ack(std::uint64_t& ack, T&& token) {
        return asio::async_read(sock, asio::buffer(&ack, sizeof ack), std::forward<T>(token));
    }

    static message received(asio::mutable_buffer b, std::size_t n) { return {asio::buffer(b, n)}; }
    static std::uint64_t seq(const message&) { return 0; } // not numbered: by position
    static asio::const_buffer payload(const message& m) { return m.bytes; }
};

} // namespace perf
