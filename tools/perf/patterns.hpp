// ucx-asio-perf: the measurement loops, each written once for every message
// kind (tags, active messages, byte streams) and for both completion styles.
//
// A kind `Ops` (tag_ops, am_ops, byte_ops) is a small value type that says
// how each role of message travels:
//   send_ping / send_reply / send_data (seq&, const_buffer, token), send_ack
//   (ack&, token): complete with (error_code, std::size_t); `seq` and `ack`
//   stay valid until then (headers).
//   recv_ping (seq, buffer, token), recv_reply (seq, buffer, token), recv_data
//   (buffer, token), recv_ack (ack&, token): complete with the operation's
//   own results, which `received(buffer, results...)` turns into the kind's
//   `message`; `payload(message)` and `seq(message)` read it.
//   run(io, settings, done): runs handlers until `done` (or io.stop()).
// And by constants: `own_buffers` (receives land in the caller's buffers),
// `numbered` (pings and replies carry their number) and `numbered_data`
// (bandwidth data do; otherwise a message's number is its place in the
// order), `one_at_a_time` (a byte stream: one read and one write at a time,
// in order), `reply_posted_first` (the latency client posts the receive of
// the reply before the ping's send), `receivers(settings)` (the bandwidth
// server's receives in flight).
//
// Dispatch is static: no allocation, virtual call or type erasure per message.
#pragma once

#include "common.hpp"
#include "memory.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <tuple>
#include <utility>

namespace perf {

using asio::awaitable;
using asio::use_awaitable;
using error_code = boost::system::error_code;

/// A received message of a kind that receives into the caller's buffer.
struct received_bytes {
    asio::const_buffer bytes;
    std::uint64_t tag = 0;
};

/// Throws unless `m` has the test's size and (with --check) message `seq`'s content.
template <class Ops>
void expect(const settings& s, const typename Ops::message& m, std::uint64_t seq,
            const char* what) {
    const asio::const_buffer p = Ops::payload(m);
    if (p.size() != s.size)
        throw failure(std::string(what) + " of the wrong size");
    if (s.check)
        check_any(p, seq, what);
}

/// A receive buffer of the test's size and memory where the kind receives
/// into the caller's (else an empty one).
template <class Ops>
buffer recv_buffer(const settings& s, std::size_t n) {
    return buffer(Ops::own_buffers ? n : 0, s.memory);
}
template <class Ops>
buffer recv_buffer(const settings& s) {
    return recv_buffer<Ops>(s, s.size);
}

/// Everything one side of a run needs.
template <class Ops>
struct session {
    const settings& s;
    asio::io_context& io;
    Ops ops;
    std::size_t warmup = s.warmup_iters();
    std::size_t total = s.warmup_iters() + s.measured_iters();
    measurement m{};
    std::exception_ptr error{};
    bool done = false;

    void begin_measuring() { m.begin(); }
    void end_measuring() { m.end(); }
    /// Ends the run (after the last completion).
    void stop() {
        done = true;
        io.stop();
    }
    /// The last completion of a callback run.
    void finish() {
        end_measuring();
        stop();
    }
    /// Runs handlers until the run ends; rethrows a coroutine's exception.
    void run() {
        Ops::run(io, s, done);
        io.restart();
        if (error)
            std::rethrow_exception(error);
    }
};

// ---- latency: callbacks ----

template <class Ops>
struct lat_client_cb {
    session<Ops>& ss;
    result& r;
    buffer out = buffer(ss.s.size, ss.s.memory);
    buffer in = recv_buffer<Ops>(ss.s);
    std::uint64_t i = 0;
    int pending = 0;
    sample_clock::time_point t0{}, t_recv{};

    void start() {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (ss.s.check)
            out.fill(i);
        pending = 2;
        t0 = sample_clock::now();
        // Send first, then post the receive, as ucx_perftest does: nothing
        // can arrive in between (no progress runs inside an initiation), and
        // the receive's set-up stays off the message's path. A byte stream
        // posts its read first.
        if constexpr (Ops::reply_posted_first)
            recv_reply();
        send_ping();
        if constexpr (!Ops::reply_posted_first)
            recv_reply();
    }
    void send_ping() {
        ss.ops.send_ping(i, out.view(), [this](error_code ec, std::size_t) {
            throw_if(ec, Ops::send_what);
            done_one();
        });
    }
    void recv_reply() {
        ss.ops.recv_reply(i, in.view(), [this](error_code ec, auto&&... got) {
            t_recv = sample_clock::now();
            throw_if(ec, Ops::recv_what);
            const auto m = Ops::received(in.view(), std::move(got)...);
            if (Ops::numbered && Ops::seq(m) != i)
                throw failure("reply out of order");
            expect<Ops>(ss.s, m, i, "reply");
            done_one();
        });
    }
    void done_one() {
        if (--pending != 0)
            return;
        if (i >= ss.warmup)
            r.one_way_us.push_back(one_way_us(t0, t_recv));
        if (++i < ss.total)
            return start();
        ss.finish();
    }
};

template <class Ops>
struct lat_server_cb {
    session<Ops>& ss;
    // Two of each: the reply to one ping may be in flight when the next
    // arrives (one at a time: one buffer).
    buffer buf[2] = {recv_buffer<Ops>(ss.s),
                     recv_buffer<Ops>(ss.s, Ops::one_at_a_time ? 0 : ss.s.size)};
    typename Ops::message held[2]{};
    std::uint64_t seq[2] = {0, 0};
    std::size_t received = 0, sent = 0;

    void start() { post_recv(); }
    void post_recv() {
        std::size_t k = Ops::one_at_a_time ? 0 : received % 2;
        ss.ops.recv_ping(received, buf[k].view(), [this, k](error_code ec, auto&&... got) {
            throw_if(ec, Ops::recv_what);
            held[k] = Ops::received(buf[k].view(), std::move(got)...);
            seq[k] = Ops::numbered ? Ops::seq(held[k]) : received;
            expect<Ops>(ss.s, held[k], seq[k], "ping");
            if (++received == ss.warmup)
                ss.begin_measuring();
            // The reply first, then the next receive (the other buffer), as
            // in the client; one at a time, once the reply is written.
            ss.ops.send_reply(seq[k], Ops::payload(held[k]), [this, k](error_code ec, std::size_t) {
                throw_if(ec, Ops::send_what);
                held[k] = {};
                if (++sent == ss.total)
                    return ss.finish();
                if (Ops::one_at_a_time)
                    post_recv();
            });
            if (!Ops::one_at_a_time && received < ss.total)
                post_recv();
        });
    }
};

// ---- bandwidth: callbacks ----

/// Whether a callback bandwidth run splits its warm-up of `n` messages into
/// two rounds, each acknowledged (see bw_client_cb::start).
inline bool warmup_halves(std::size_t n) {
    return n >= 2;
}

template <class Ops>
struct bw_client_cb {
    session<Ops>& ss;
    result& r;
    std::size_t slots = Ops::one_at_a_time ? 1 : ss.s.check ? buffer_slots(ss.s) : ss.s.window;
    std::vector<buffer> bufs{};
    std::vector<std::uint64_t> seqs{}; // each slot's message number (headers)
    std::vector<std::size_t> free_slots{};
    std::uint64_t next = 0;
    std::size_t remaining = 0, inflight = 0;
    std::uint64_t ack = 0;
    bool acked = false;
    int round = 0;
    clock_type::time_point t0{};

    void start() {
        bufs.resize(ss.s.check ? slots : 1, buffer(ss.s.size, ss.s.memory));
        seqs.resize(slots);
        if (!ss.s.check)
            bufs[0].fill(0);
        for (std::size_t k = 0; k < slots; ++k)
            free_slots.push_back(k);
        // Two warm-up rounds (when there are two messages): the second
        // starts, as the measured one does, inside the acknowledgement's
        // handler with every send and that receive in flight at once, the
        // most the run has; its operations' states are then where the
        // measured round finds them (the worker's pool), not in the heap.
        const std::size_t first = warmup_halves(ss.warmup) ? ss.warmup / 2 : ss.warmup;
        if (first == ss.warmup)
            round = 1;
        start_round(first);
    }
    void start_round(std::size_t n) {
        remaining = n;
        acked = false;
        if (round == 2) {
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        // The acknowledgement's receive first; one at a time, after the
        // last write.
        if (!Ops::one_at_a_time || remaining == 0)
            recv_ack();
        send_more();
    }
    void recv_ack() {
        ss.ops.recv_ack(ack, [this](error_code ec, auto&&...) {
            throw_if(ec, "acknowledgement receive");
            acked = true;
            if (round == 2)
                r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
            maybe_end_round();
        });
    }
    /// Sends while messages remain and a slot is free. A kind that can send
    /// without an operation (`send_at_once`: tags with --style batch) sends
    /// so what its transport takes at once, while nothing of it waits.
    void send_more() {
        while (remaining > 0 && !free_slots.empty()) {
            const std::size_t slot = free_slots.back();
            auto& b = bufs[ss.s.check ? slot : 0];
            if (ss.s.check)
                b.fill(next);
            if constexpr (requires { ss.ops.send_at_once(ss.s, b.view()); }) {
                if (inflight == 0 && ss.ops.send_at_once(ss.s, b.view())) {
                    ++next;
                    --remaining;
                    continue;
                }
            }
            free_slots.pop_back();
            seqs[slot] = next++;
            --remaining;
            ++inflight;
            ss.ops.send_data(seqs[slot], b.view(), [this, slot](error_code ec, std::size_t) {
                throw_if(ec, Ops::send_what);
                --inflight;
                free_slots.push_back(slot);
                if (remaining > 0)
                    send_more();
                else if (Ops::one_at_a_time)
                    recv_ack();
                else
                    maybe_end_round();
            });
        }
        if (remaining == 0 && !Ops::one_at_a_time)
            maybe_end_round(); // all sent at once: the round may be over
    }
    void maybe_end_round() {
        if (!acked || inflight != 0)
            return;
        switch (round++) {
        case 0:
            return start_round(ss.warmup - ss.warmup / 2);
        case 1:
            return start_round(ss.s.measured_iters());
        default:
            return ss.finish();
        }
    }
};

/// Whether a bandwidth test's receiving side acknowledges after `received`
/// messages: at the end of each round (the warm-up's one or two, the
/// measured one); the sender waits for it before the next round.
template <class Ops>
bool ack_due(const session<Ops>& ss, std::size_t received) {
    return (warmup_halves(ss.warmup) && received == ss.warmup / 2) || received == ss.warmup ||
           received == ss.total;
}

/// Sends the acknowledgement of a round that ended with message `received`;
/// after the last one the run ends, after the others `next()` runs.
template <class Ops, class Next>
void send_round_ack(session<Ops>& ss, std::uint64_t& ack, std::size_t received, Next next) {
    const bool last = received == ss.total;
    ss.ops.send_ack(ack, [&ss, last, next](error_code ec, std::size_t) mutable {
        throw_if(ec, "acknowledgement send");
        if (last)
            ss.finish();
        else
            next();
    });
    // The warm-up ends with its acknowledgement, as the client's does when
    // it receives it: the moment with every receive and the acknowledgement
    // in flight.
    if (received == ss.warmup)
        ss.begin_measuring();
}

template <class Ops>
struct bw_server_cb {
    session<Ops>& ss;
    // As many receives as the sender keeps sends in flight (with --check
    // fewer, one buffer each, within 64 MiB).
    std::size_t slots = Ops::receivers(ss.s);
    std::vector<buffer> bufs{};
    std::vector<std::uint64_t> seqs{}; // the message each slot's receive gets
    std::size_t posted = 0, received = 0;
    std::uint64_t ack = 0;

    void start() {
        // Without --check every receive lands in one buffer, as in
        // ucx_perftest (and as the sender sends from one buffer).
        bufs.resize(ss.s.check ? slots : 1, recv_buffer<Ops>(ss.s));
        seqs.resize(slots);
        for (std::size_t k = 0; k < slots && posted < ss.total; ++k)
            post_recv(k);
    }
    void post_recv(std::size_t slot) {
        seqs[slot] = posted++;
        ss.ops.recv_data(
            bufs[ss.s.check ? slot : 0].view(), [this, slot](error_code ec, auto&&... got) {
                throw_if(ec, Ops::recv_what);
                auto& b = bufs[ss.s.check ? slot : 0];
                auto m = Ops::received(b.view(), std::move(got)...);
                expect<Ops>(ss.s, m, Ops::numbered_data ? Ops::seq(m) : seqs[slot], "data");
                m = {};
                ++received;
                // One at a time: the acknowledgement before the next read.
                const bool due = ack_due(ss, received);
                if (posted < ss.total && !(Ops::one_at_a_time && due))
                    post_recv(slot);
                if (due)
                    send_round_ack(ss, ack, received, [this] {
                        if (Ops::one_at_a_time)
                            post_recv(0);
                    });
            });
    }
};

// ---- coroutines ----

template <class Ops>
awaitable<void> lat_client_co(session<Ops>& ss, result& r) {
    const settings& s = ss.s;
    buffer out(s.size, s.memory), in = recv_buffer<Ops>(s);
    for (std::uint64_t i = 0; i < ss.total; ++i) {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (s.check)
            out.fill(i);
        const auto t0 = sample_clock::now();
        co_await ss.ops.send_ping(i, out.view(), use_awaitable);
        auto got = co_await ss.ops.recv_reply(i, in.view(), use_awaitable);
        const auto t1 = sample_clock::now();
        const auto m = Ops::received(in.view(), std::move(got));
        if (Ops::numbered && Ops::seq(m) != i)
            throw failure("reply out of order");
        expect<Ops>(s, m, i, "reply");
        if (i >= ss.warmup)
            r.one_way_us.push_back(one_way_us(t0, t1));
    }
    ss.end_measuring();
}

template <class Ops>
awaitable<void> lat_server_co(session<Ops>& ss) {
    buffer buf = recv_buffer<Ops>(ss.s);
    for (std::size_t i = 0; i < ss.total; ++i) {
        const auto m =
            Ops::received(buf.view(), co_await ss.ops.recv_ping(i, buf.view(), use_awaitable));
        std::uint64_t seq = Ops::numbered ? Ops::seq(m) : i;
        expect<Ops>(ss.s, m, seq, "ping");
        if (i + 1 == ss.warmup)
            ss.begin_measuring();
        co_await ss.ops.send_reply(seq, Ops::payload(m), use_awaitable);
    }
    ss.end_measuring();
}

/// Shared by the sending coroutines of one round.
struct bw_round {
    std::uint64_t next = 0;
    std::size_t remaining = 0;
    std::size_t active = 0;
};

template <class Ops>
awaitable<void> bw_sender_co(session<Ops>& ss, bw_round& round, buffer& buf) {
    while (round.remaining > 0) {
        --round.remaining;
        std::uint64_t seq = round.next++;
        if (ss.s.check)
            buf.fill(seq);
        co_await ss.ops.send_data(seq, buf.view(), use_awaitable);
    }
}

template <class Ops>
awaitable<void> bw_client_co(session<Ops>& ss, result& r) {
    const settings& s = ss.s;
    const std::size_t senders = Ops::one_at_a_time ? 1 : s.check ? buffer_slots(s) : s.window;
    std::vector<buffer> bufs(s.check ? senders : 1, buffer(s.size, s.memory));
    if (!s.check)
        bufs[0].fill(0);
    bw_round round;
    std::uint64_t ack = 0;
    for (int k = 0; k < 2; ++k) {
        clock_type::time_point t0{};
        if (k == 1) {
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        round.remaining = k == 0 ? ss.warmup : s.measured_iters();
        if constexpr (Ops::one_at_a_time) {
            // Every write, then the acknowledgement's read.
            co_await bw_sender_co(ss, round, bufs[0]);
        } else {
            for (std::size_t j = 0; j < senders; ++j) {
                ++round.active;
                asio::co_spawn(ss.io, bw_sender_co(ss, round, bufs[s.check ? j : 0]),
                               [&round](std::exception_ptr e) {
                                   --round.active;
                                   if (e)
                                       std::rethrow_exception(e);
                               });
            }
        }
        co_await ss.ops.recv_ack(ack, use_awaitable);
        if (k == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        while (round.active > 0)
            co_await asio::post(ss.io, use_awaitable);
    }
    ss.end_measuring();
}

template <class Ops>
awaitable<void> bw_receiver_co(session<Ops>& ss, std::size_t& posted, std::size_t& received,
                               buffer& buf) {
    std::uint64_t ack = 0;
    while (posted < ss.total) {
        const std::uint64_t seq = posted++;
        auto m = Ops::received(buf.view(), co_await ss.ops.recv_data(buf.view(), use_awaitable));
        expect<Ops>(ss.s, m, Ops::numbered_data ? Ops::seq(m) : seq, "data");
        m = {};
        ++received;
        if (received == ss.warmup || received == ss.total) {
            if (received == ss.warmup)
                ss.begin_measuring();
            co_await ss.ops.send_ack(ack, use_awaitable);
        }
    }
}

/// Runs a coroutine to completion.
template <class Ops>
void spawn_and_run(session<Ops>& ss, awaitable<void> a) {
    asio::co_spawn(ss.io, std::move(a), [&ss](std::exception_ptr e) {
        ss.error = e;
        ss.stop();
    });
    ss.run();
}

/// Runs a callback-style client or server `T` to completion; `ready` runs
/// once it has started.
template <class T, class Ops, class Ready, class... Extra>
void run_callbacks(session<Ops>& ss, Ready ready, Extra&... extra) {
    T c{ss, extra...};
    c.start();
    ready();
    ss.run();
}

/// Runs the receiving coroutines of a bandwidth server to completion.
template <class Ops>
void run_receivers(session<Ops>& ss) {
    const settings& s = ss.s;
    const std::size_t count = Ops::receivers(s);
    // One buffer for every receive without --check, as in ucx_perftest.
    std::vector<buffer> bufs(s.check ? count : 1, recv_buffer<Ops>(s));
    std::size_t posted = 0, received = 0, active = 0;
    for (std::size_t j = 0; j < count; ++j) {
        ++active;
        asio::co_spawn(ss.io, bw_receiver_co(ss, posted, received, bufs[s.check ? j : 0]),
                       [&ss, &active](std::exception_ptr e) {
                           if (e && !ss.error)
                               ss.error = e;
                           if (--active == 0 || e) {
                               ss.end_measuring();
                               ss.stop();
                           }
                       });
    }
    ss.run();
}

/// Runs the client side of the test in `s`; returns its measurements.
template <class Ops>
result run_client(asio::io_context& io, const settings& s, Ops ops) {
    session<Ops> ss{s, io, ops};
    result r;
    r.one_way_us.reserve(s.measured_iters());
    const bool lat = find_test(s.test)->kind == kind::latency;
    const auto none = [] {};
    if (s.style != style::coroutine)
        lat ? run_callbacks<lat_client_cb<Ops>>(ss, none, r)
            : run_callbacks<bw_client_cb<Ops>>(ss, none, r);
    else
        spawn_and_run(ss, lat ? lat_client_co(ss, r) : bw_client_co(ss, r));
    count_measured(s, ss.m.counted(), r);
    return r;
}

/// Runs the server side (`ready` once it is ready for the first message);
/// returns (allocations, operations) of the measured phase.
template <class Ops, class Ready>
std::pair<std::size_t, std::size_t> run_server(asio::io_context& io, const settings& s, Ops ops,
                                               Ready ready) {
    session<Ops> ss{s, io, ops};
    const bool lat = find_test(s.test)->kind == kind::latency;
    if (s.style == style::callback) {
        lat ? run_callbacks<lat_server_cb<Ops>>(ss, ready)
            : run_callbacks<bw_server_cb<Ops>>(ss, ready);
    } else {
        ready();
        lat ? spawn_and_run(ss, lat_server_co(ss)) : run_receivers(ss);
    }
    return {ss.m.counted(), measured_operations(s)};
}

} // namespace perf
