// ucx-asio-perf over the library: ucx::worker, ucx::endpoint (from a worker
// address) and the tag, active-message, stream and RMA operations, with
// callback or coroutine completions. Each pattern (latency, bandwidth) is
// written once for both completion styles; `tag_ops` and `am_ops` say how a
// message of each role (ping, reply, data, acknowledgement) travels.
#include "byte_stream.hpp"
#include "common.hpp"

#include <ucx/acceptor.hpp>
#include <ucx/am.hpp>
#include <ucx/asio.hpp>
#include <ucx/stream.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <tuple>

namespace perf {

namespace {

using asio::awaitable;
using asio::use_awaitable;
using ucx::tag_mask_full;

ucx::context make_context(const settings& s) {
    ucx::context_options o;
    o.features = ucx::feature::tag | ucx::feature::am | ucx::feature::stream;
    if (find_test(s.test)->api == api::rma)
        o.features = o.features | ucx::feature::rma;
    if (s.ucx_defaults) {
        o.shared_memory_error_handling = false;
        o.shared_memory_segment_size = 0;
    }
    return ucx::context(o);
}

ucx::worker_options worker_options_for(const settings& s) {
    ucx::worker_options o;
    o.mode = s.progress == progress::event  ? ucx::progress_mode::event
             : s.progress == progress::poll ? ucx::progress_mode::poll
                                            : ucx::progress_mode::hybrid;
    o.spin_duration = std::chrono::microseconds(s.spin_us);
    if (s.max_steps != 0)
        o.max_steps_per_handler = s.max_steps;
    return o;
}

// The connected pair every test but the streams runs on.
struct peer {
    ucx::worker& w;
    ucx::endpoint& ep;
};

// ---- message kinds ----
//
// Each kind sends a message of a role with `send_*` and receives one with
// `recv_*`, completing with `(error_code, std::size_t)` and with the
// operation's own results, which `received` turns into the kind's
// `message` (its payload and, where it travels with it, its number).
// `own_buffers`: receives land in the caller's buffers. `numbered_data`:
// bandwidth data carry their number (otherwise it is their place in the
// order). `receivers`: the bandwidth server's receives in flight.

// A tag message in the caller's buffer.
struct tag_message {
    std::span<const std::byte> bytes;
    ucx::tag_t tag = 0;
};

// Tags: pings `data_bit | seq`, replies `reply_bit | seq`, bandwidth data
// `data_bit` received with the full mask (see common.hpp).
struct tag_ops : peer {
    using message = tag_message;
    static constexpr const char* send_what = "tag send";
    static constexpr const char* recv_what = "tag receive";
    static constexpr bool own_buffers = true;
    static constexpr bool numbered_data = false;
    static std::size_t receivers(const settings& s) { return s.check ? buffer_slots(s) : s.window; }

    template <class T>
    auto send_ping(std::uint64_t& seq, asio::const_buffer b, T&& token) {
        return ucx::async_tag_send(ep, b, data_bit | seq, std::forward<T>(token));
    }
    template <class T>
    auto send_reply(std::uint64_t& seq, asio::const_buffer b, T&& token) {
        return ucx::async_tag_send(ep, b, reply_bit | seq, std::forward<T>(token));
    }
    template <class T>
    auto send_data(std::uint64_t&, asio::const_buffer b, T&& token) {
        return ucx::async_tag_send(ep, b, data_bit, std::forward<T>(token));
    }
    template <class T>
    auto send_ack(std::uint64_t& ack, T&& token) {
        return ucx::async_tag_send(ep, asio::buffer(&ack, sizeof ack), ack_tag,
                                   std::forward<T>(token));
    }
    template <class T>
    auto recv_ping(asio::mutable_buffer b, T&& token) {
        return ucx::async_tag_recv(w, b, data_bit, data_bit, std::forward<T>(token));
    }
    template <class T>
    auto recv_reply(std::uint64_t seq, asio::mutable_buffer b, T&& token) {
        return ucx::async_tag_recv(w, b, reply_bit | seq, tag_mask_full, std::forward<T>(token));
    }
    template <class T>
    auto recv_data(asio::mutable_buffer b, T&& token) {
        return ucx::async_tag_recv(w, b, data_bit, tag_mask_full, std::forward<T>(token));
    }
    template <class T>
    auto recv_ack(std::uint64_t& ack, T&& token) {
        return ucx::async_tag_recv(w, asio::buffer(&ack, sizeof ack), ack_tag, tag_mask_full,
                                   std::forward<T>(token));
    }

    static message received(asio::mutable_buffer b, std::size_t n, ucx::tag_t tag) {
        return {{static_cast<const std::byte*>(b.data()), n}, tag};
    }
    static message received(asio::mutable_buffer b, std::tuple<std::size_t, ucx::tag_t> r) {
        return received(b, std::get<0>(r), std::get<1>(r));
    }
    static std::uint64_t seq(const message& m) { return m.tag & seq_mask; }
    static asio::const_buffer payload(const message& m) { return asio::buffer(m.bytes); }
};

// Active messages: ids 1 data (pings too), 2 replies, 3 acknowledgements;
// the header carries the message number.
struct am_ops : peer {
    using message = ucx::am_message;
    static constexpr const char* send_what = "active message send";
    static constexpr const char* recv_what = "active message receive";
    static constexpr bool own_buffers = false;
    static constexpr bool numbered_data = true;
    static std::size_t receivers(const settings& s) { return buffer_slots(s); }
    static constexpr unsigned data_id = 1, reply_id = 2, ack_id = 3;
    static constexpr ucx::am_send_options options{ucx::am_protocol::automatic, false};

    template <class T>
    auto send_ping(std::uint64_t& seq, asio::const_buffer b, T&& token) {
        return send_data(seq, b, std::forward<T>(token));
    }
    template <class T>
    auto send_reply(std::uint64_t& seq, asio::const_buffer b, T&& token) {
        return ucx::async_am_send(ep, reply_id, asio::buffer(&seq, sizeof seq), b, options,
                                  std::forward<T>(token));
    }
    template <class T>
    auto send_data(std::uint64_t& seq, asio::const_buffer b, T&& token) {
        return ucx::async_am_send(ep, data_id, asio::buffer(&seq, sizeof seq), b, options,
                                  std::forward<T>(token));
    }
    template <class T>
    auto send_ack(std::uint64_t& ack, T&& token) {
        return ucx::async_am_send(ep, ack_id, asio::buffer(&ack, sizeof ack), asio::const_buffer(),
                                  options, std::forward<T>(token));
    }
    template <class T>
    auto recv_ping(asio::mutable_buffer, T&& token) {
        return ucx::async_am_recv(w, data_id, std::forward<T>(token));
    }
    template <class T>
    auto recv_reply(std::uint64_t, asio::mutable_buffer, T&& token) {
        return ucx::async_am_recv(w, reply_id, std::forward<T>(token));
    }
    template <class T>
    auto recv_data(asio::mutable_buffer, T&& token) {
        return ucx::async_am_recv(w, data_id, std::forward<T>(token));
    }
    template <class T>
    auto recv_ack(std::uint64_t&, T&& token) {
        return ucx::async_am_recv(w, ack_id, std::forward<T>(token));
    }

    static message received(asio::mutable_buffer, message m) { return m; }
    static std::uint64_t seq(const message& m) {
        std::uint64_t seq = 0;
        if (m.header().size() != sizeof seq)
            throw failure("active message with a bad header");
        std::memcpy(&seq, m.header().data(), sizeof seq);
        return seq;
    }
    static asio::const_buffer payload(const message& m) { return m.data(); }
};

// Throws unless `m` has the test's size and (with --check) message `seq`'s content.
template <class Ops>
void expect(const settings& s, const typename Ops::message& m, std::uint64_t seq,
            const char* what) {
    const asio::const_buffer p = Ops::payload(m);
    if (p.size() != s.size)
        throw failure(std::string(what) + " of the wrong size");
    if (s.check)
        check({static_cast<const std::byte*>(p.data()), p.size()}, seq, what);
}

// A receive buffer of `n` bytes where the kind receives into the caller's.
template <class Ops>
std::vector<std::byte> recv_buffer(std::size_t n) {
    return std::vector<std::byte>(Ops::own_buffers ? n : 0);
}

// Everything one side of a run needs.
template <class Ops>
struct session {
    const settings& s;
    asio::io_context& io;
    Ops ops;
    std::size_t warmup = s.warmup_iters();
    std::size_t total = s.warmup_iters() + s.measured_iters();
    measurement m{};
    std::exception_ptr error{};

    void begin_measuring() { m.begin(); }
    void end_measuring() { m.end(); }
    // The last completion of a callback run.
    void finish() {
        end_measuring();
        io.stop();
    }
};

double one_way_us(clock_type::time_point t0, clock_type::time_point t1) {
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / 2;
}

// ---- latency: callbacks ----

template <class Ops>
struct lat_client_cb {
    session<Ops>& ss;
    result& r;
    std::vector<std::byte> out = std::vector<std::byte>(ss.s.size);
    std::vector<std::byte> in = recv_buffer<Ops>(ss.s.size);
    std::uint64_t i = 0;
    int pending = 0;
    clock_type::time_point t0{}, t_recv{};

    void start() {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (ss.s.check)
            fill(out, i);
        pending = 2;
        t0 = clock_type::now();
        // Send first, then post the receive, as ucx_perftest does: nothing
        // can arrive in between (no progress runs inside an initiation), and
        // the receive's set-up stays off the message's path.
        ss.ops.send_ping(i, asio::buffer(out), [this](ucx::error_code ec, std::size_t) {
            throw_if(ec, Ops::send_what);
            done_one();
        });
        ss.ops.recv_reply(i, asio::buffer(in), [this](ucx::error_code ec, auto&&... got) {
            t_recv = clock_type::now();
            throw_if(ec, Ops::recv_what);
            const auto m = Ops::received(asio::buffer(in), std::move(got)...);
            if (Ops::seq(m) != i)
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
    // Two of each: the reply to one ping may be in flight when the next arrives.
    std::vector<std::byte> buf[2] = {recv_buffer<Ops>(ss.s.size), recv_buffer<Ops>(ss.s.size)};
    typename Ops::message held[2]{};
    std::uint64_t seq[2] = {0, 0};
    std::size_t received = 0, sent = 0;

    void start() { post_recv(); }
    void post_recv() {
        const std::size_t k = received % 2;
        ss.ops.recv_ping(asio::buffer(buf[k]), [this, k](ucx::error_code ec, auto&&... got) {
            throw_if(ec, Ops::recv_what);
            held[k] = Ops::received(asio::buffer(buf[k]), std::move(got)...);
            seq[k] = Ops::seq(held[k]);
            expect<Ops>(ss.s, held[k], seq[k], "ping");
            if (++received == ss.warmup)
                ss.begin_measuring();
            // The reply first, then the next receive (the other buffer), as
            // in the client.
            ss.ops.send_reply(seq[k], Ops::payload(held[k]),
                              [this, k](ucx::error_code ec, std::size_t) {
                                  throw_if(ec, Ops::send_what);
                                  held[k] = {};
                                  if (++sent == ss.total)
                                      ss.finish();
                              });
            if (received < ss.total)
                post_recv();
        });
    }
};

// ---- bandwidth: callbacks ----

template <class Ops>
struct bw_client_cb {
    session<Ops>& ss;
    result& r;
    std::size_t slots = ss.s.check ? buffer_slots(ss.s) : ss.s.window;
    std::vector<std::vector<std::byte>> bufs{};
    std::vector<std::uint64_t> seqs{}; // each slot's message number (headers)
    std::vector<std::size_t> free_slots{};
    std::uint64_t next = 0;
    std::size_t remaining = 0, inflight = 0;
    std::uint64_t ack = 0;
    bool acked = false;
    int round = 0;
    clock_type::time_point t0{};

    void start() {
        bufs.resize(ss.s.check ? slots : 1, std::vector<std::byte>(ss.s.size));
        seqs.resize(slots);
        if (!ss.s.check)
            fill(bufs[0], 0);
        for (std::size_t k = 0; k < slots; ++k)
            free_slots.push_back(k);
        start_round(ss.warmup);
    }
    void start_round(std::size_t n) {
        remaining = n;
        acked = false;
        if (round == 1) {
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        ss.ops.recv_ack(ack, [this](ucx::error_code ec, auto&&...) {
            throw_if(ec, "acknowledgement receive");
            acked = true;
            if (round == 1)
                r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
            maybe_end_round();
        });
        while (remaining > 0 && !free_slots.empty())
            send_one();
    }
    void send_one() {
        const std::size_t slot = free_slots.back();
        free_slots.pop_back();
        seqs[slot] = next++;
        --remaining;
        ++inflight;
        auto& b = bufs[ss.s.check ? slot : 0];
        if (ss.s.check)
            fill(b, seqs[slot]);
        ss.ops.send_data(seqs[slot], asio::buffer(b),
                         [this, slot](ucx::error_code ec, std::size_t) {
                             throw_if(ec, Ops::send_what);
                             --inflight;
                             free_slots.push_back(slot);
                             if (remaining > 0)
                                 send_one();
                             else
                                 maybe_end_round();
                         });
    }
    void maybe_end_round() {
        if (!acked || inflight != 0)
            return;
        if (round++ == 0)
            return start_round(ss.s.measured_iters());
        ss.finish();
    }
};

template <class Ops>
struct bw_server_cb {
    session<Ops>& ss;
    // As many receives as the sender keeps sends in flight (with --check
    // fewer, one buffer each, within 64 MiB).
    std::size_t slots = Ops::receivers(ss.s);
    std::vector<std::vector<std::byte>> bufs{};
    std::vector<std::uint64_t> seqs{}; // the message each slot's receive gets
    std::size_t posted = 0, received = 0;
    std::uint64_t ack = 0;

    void start() {
        // Without --check every receive lands in one buffer, as in
        // ucx_perftest (and as the sender sends from one buffer).
        bufs.resize(ss.s.check ? slots : 1, recv_buffer<Ops>(ss.s.size));
        seqs.resize(slots);
        for (std::size_t k = 0; k < slots && posted < ss.total; ++k)
            post_recv(k);
    }
    void post_recv(std::size_t slot) {
        seqs[slot] = posted++;
        ss.ops.recv_data(asio::buffer(bufs[ss.s.check ? slot : 0]), [this, slot](ucx::error_code ec,
                                                                                 auto&&... got) {
            throw_if(ec, Ops::recv_what);
            auto& b = bufs[ss.s.check ? slot : 0];
            auto m = Ops::received(asio::buffer(b), std::move(got)...);
            expect<Ops>(ss.s, m, Ops::numbered_data ? Ops::seq(m) : seqs[slot], "data");
            m = {};
            ++received;
            if (posted < ss.total)
                post_recv(slot);
            if (received == ss.warmup || received == ss.total)
                send_ack(received == ss.total);
        });
    }
    void send_ack(bool last) {
        if (!last)
            ss.begin_measuring();
        ss.ops.send_ack(ack, [this, last](ucx::error_code ec, std::size_t) {
            throw_if(ec, "acknowledgement send");
            if (last)
                ss.finish();
        });
    }
};

// ---- coroutines ----

template <class Ops>
awaitable<void> lat_client_co(session<Ops>& ss, result& r) {
    const settings& s = ss.s;
    std::vector<std::byte> out(s.size), in = recv_buffer<Ops>(s.size);
    for (std::uint64_t i = 0; i < ss.total; ++i) {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (s.check)
            fill(out, i);
        const auto t0 = clock_type::now();
        co_await ss.ops.send_ping(i, asio::buffer(out), use_awaitable);
        auto got = co_await ss.ops.recv_reply(i, asio::buffer(in), use_awaitable);
        const auto t1 = clock_type::now();
        const auto m = Ops::received(asio::buffer(in), std::move(got));
        if (Ops::seq(m) != i)
            throw failure("reply out of order");
        expect<Ops>(s, m, i, "reply");
        if (i >= ss.warmup)
            r.one_way_us.push_back(one_way_us(t0, t1));
    }
    ss.end_measuring();
}

template <class Ops>
awaitable<void> lat_server_co(session<Ops>& ss) {
    std::vector<std::byte> buf = recv_buffer<Ops>(ss.s.size);
    for (std::size_t i = 0; i < ss.total; ++i) {
        const auto m = Ops::received(asio::buffer(buf),
                                     co_await ss.ops.recv_ping(asio::buffer(buf), use_awaitable));
        std::uint64_t seq = Ops::seq(m);
        expect<Ops>(ss.s, m, seq, "ping");
        if (i + 1 == ss.warmup)
            ss.begin_measuring();
        co_await ss.ops.send_reply(seq, Ops::payload(m), use_awaitable);
    }
    ss.end_measuring();
}

// Shared by the sending coroutines of one round.
struct bw_round {
    std::uint64_t next = 0;
    std::size_t remaining = 0;
    std::size_t active = 0;
};

template <class Ops>
awaitable<void> bw_sender_co(session<Ops>& ss, bw_round& round, std::vector<std::byte>& buf) {
    while (round.remaining > 0) {
        --round.remaining;
        std::uint64_t seq = round.next++;
        if (ss.s.check)
            fill(buf, seq);
        co_await ss.ops.send_data(seq, asio::buffer(buf), use_awaitable);
    }
}

template <class Ops>
awaitable<void> bw_client_co(session<Ops>& ss, result& r) {
    const settings& s = ss.s;
    const std::size_t senders = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs(s.check ? senders : 1, std::vector<std::byte>(s.size));
    if (!s.check)
        fill(bufs[0], 0);
    bw_round round;
    std::uint64_t ack = 0;
    for (int k = 0; k < 2; ++k) {
        clock_type::time_point t0{};
        if (k == 1) {
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        round.remaining = k == 0 ? ss.warmup : s.measured_iters();
        for (std::size_t j = 0; j < senders; ++j) {
            ++round.active;
            asio::co_spawn(ss.io, bw_sender_co(ss, round, bufs[s.check ? j : 0]),
                           [&round](std::exception_ptr e) {
                               --round.active;
                               if (e)
                                   std::rethrow_exception(e);
                           });
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
                               std::vector<std::byte>& buf) {
    std::uint64_t ack = 0;
    while (posted < ss.total) {
        const std::uint64_t seq = posted++;
        auto m = Ops::received(asio::buffer(buf),
                               co_await ss.ops.recv_data(asio::buffer(buf), use_awaitable));
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

template <class Ops>
void spawn_and_run(session<Ops>& ss, awaitable<void> a) {
    asio::co_spawn(ss.io, std::move(a), [&ss](std::exception_ptr e) {
        ss.error = e;
        ss.io.stop();
    });
    ss.io.run();
    ss.io.restart();
    if (ss.error)
        std::rethrow_exception(ss.error);
}

// Runs a callback-style client or server `T` to completion.
template <class T, class Ops, class... Extra>
void run_callbacks(session<Ops>& ss, Extra&... extra) {
    T c{ss, extra...};
    c.start();
    ss.io.run();
    ss.io.restart();
}

// Runs the receiving coroutines of a bandwidth server to completion.
template <class Ops>
void run_receivers(session<Ops>& ss) {
    const settings& s = ss.s;
    const std::size_t count = Ops::receivers(s);
    // One buffer for every receive without --check, as in ucx_perftest.
    std::vector<std::vector<std::byte>> bufs(s.check ? count : 1, recv_buffer<Ops>(s.size));
    std::size_t posted = 0, received = 0, active = 0;
    for (std::size_t j = 0; j < count; ++j) {
        ++active;
        asio::co_spawn(ss.io, bw_receiver_co(ss, posted, received, bufs[s.check ? j : 0]),
                       [&ss, &active](std::exception_ptr e) {
                           if (e && !ss.error)
                               ss.error = e;
                           if (--active == 0 || e) {
                               ss.end_measuring();
                               ss.io.stop();
                           }
                       });
    }
    ss.io.run();
    ss.io.restart();
    if (ss.error)
        std::rethrow_exception(ss.error);
}

template <class Ops>
void run_client(session<Ops>& ss, result& r) {
    const bool lat = find_test(ss.s.test)->kind == kind::latency;
    if (ss.s.style == style::callback)
        lat ? run_callbacks<lat_client_cb<Ops>>(ss, r) : run_callbacks<bw_client_cb<Ops>>(ss, r);
    else
        spawn_and_run(ss, lat ? lat_client_co(ss, r) : bw_client_co(ss, r));
}

template <class Ops>
void run_server(session<Ops>& ss) {
    const bool lat = find_test(ss.s.test)->kind == kind::latency;
    if (ss.s.style == style::callback)
        lat ? run_callbacks<lat_server_cb<Ops>>(ss) : run_callbacks<bw_server_cb<Ops>>(ss);
    else if (lat)
        spawn_and_run(ss, lat_server_co(ss));
    else
        run_receivers(ss);
}

std::size_t ops_per_measured_run(const settings& s) {
    if (find_test(s.test)->kind == kind::latency)
        return 2 * s.measured_iters(); // a send and a receive per iteration
    return s.measured_iters() + 1;     // the messages, and the acknowledgement
}

// ---- RMA: put_bw, get_bw (see common.hpp for the layout and --check) ----

// The client's state, shared by both completion styles.
struct rma_client_state {
    const settings& s;
    control& ctl;
    ucx::endpoint& ep;
    const ucx::remote_key& key;
    bool put = find_test(s.test)->name == std::string("put_bw");
    std::size_t slots = rma_slots(s);
    std::vector<std::vector<std::byte>> bufs =
        std::vector<std::vector<std::byte>>(slots, std::vector<std::byte>(s.size));
    std::vector<std::size_t> free_slots{}; // --check: slots that may be used
    std::vector<std::size_t> written{};    // --check, put: slots awaiting verification
    std::vector<std::uint64_t> last_seq = std::vector<std::uint64_t>(slots);
    std::uint64_t next = 0;

    rma_client_state(const settings& st, control& c, ucx::endpoint& e, const ucx::remote_key& k)
        : s(st), ctl(c), ep(e), key(k) {
        if (!s.check)
            fill(bufs[0], 0);
        for (std::size_t j = slots; j > 0; --j)
            free_slots.push_back(j - 1);
        written.reserve(slots);
    }
    std::uint64_t address(std::size_t slot) const { return key.address() + slot * s.size; }
    // Before an operation on `slot` for message `seq`.
    void prepare(std::size_t slot, std::uint64_t seq) {
        if (!s.check)
            return;
        if (put) {
            fill(bufs[slot], seq);
            last_seq[slot] = seq;
        } else {
            std::fill(bufs[slot].begin(), bufs[slot].end(), std::byte{0});
        }
    }
    // After it completed (a get's slot is free again; the caller returns it).
    void completed(std::size_t slot) {
        if (!s.check)
            return;
        if (put)
            written.push_back(slot);
        else
            check(bufs[slot], slot, "get");
    }
    // After a flush: the server checks the slots written since the last one.
    void verify_written() {
        if (written.empty())
            return;
        rma_verify_remote(ctl, written, last_seq);
        free_slots.insert(free_slots.end(), written.begin(), written.end());
        written.clear();
    }
};

struct rma_client_cb {
    session<peer>& ss;
    result& r;
    rma_client_state& st;
    std::size_t remaining = 0, inflight = 0;
    int round = 0;
    clock_type::time_point t0{};

    void start() { start_round(ss.warmup); }
    void start_round(std::size_t n) {
        remaining = n;
        if (round == 1) {
            st.ctl.send("measure");
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        issue();
    }
    bool can_start() const {
        return remaining > 0 && (ss.s.check ? !st.free_slots.empty() : inflight < ss.s.window);
    }
    void issue() {
        while (can_start())
            start_one();
        if (inflight == 0)
            flush();
    }
    void start_one() {
        std::size_t slot = 0;
        if (ss.s.check) {
            slot = st.free_slots.back();
            st.free_slots.pop_back();
        }
        const std::uint64_t seq = st.next++;
        --remaining;
        ++inflight;
        st.prepare(slot, seq);
        auto done = [this, slot](ucx::error_code ec, std::size_t n) {
            throw_if(ec, st.put ? "put" : "get");
            if (n != ss.s.size)
                throw failure("RMA operation of the wrong size");
            --inflight;
            st.completed(slot);
            if (ss.s.check && !st.put)
                st.free_slots.push_back(slot);
            issue();
        };
        if (st.put)
            ucx::async_put(st.ep, asio::buffer(st.bufs[slot]), st.address(slot), st.key, done);
        else
            ucx::async_get(st.ep, asio::buffer(st.bufs[slot]), st.address(slot), st.key, done);
    }
    void flush() {
        ucx::async_flush(st.ep, [this](ucx::error_code ec) {
            throw_if(ec, "flush");
            st.verify_written();
            if (remaining > 0)
                return issue();
            if (round == 1)
                r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
            if (round++ == 0)
                return start_round(ss.s.measured_iters());
            ss.finish();
        });
    }
};

// Coroutines: `workers` loops of one operation after the other, each on its
// own slot with --check; the round (or, for put with --check, each wave of
// one operation per slot) ends when all have finished, then the flush.
struct rma_wave {
    std::size_t left = 0;   // operations of the wave not yet started
    std::size_t active = 0; // loops still running
    asio::steady_timer* all_done = nullptr;
};

awaitable<void> rma_loop_co(session<peer>& ss, rma_client_state& st, rma_wave& wave,
                            std::size_t slot) {
    while (wave.left > 0) {
        --wave.left;
        const std::uint64_t seq = st.next++;
        st.prepare(slot, seq);
        std::size_t n = 0;
        if (st.put)
            n = co_await ucx::async_put(ss.ops.ep, asio::buffer(st.bufs[slot]), st.address(slot),
                                        st.key, use_awaitable);
        else
            n = co_await ucx::async_get(ss.ops.ep, asio::buffer(st.bufs[slot]), st.address(slot),
                                        st.key, use_awaitable);
        if (n != ss.s.size)
            throw failure("RMA operation of the wrong size");
        st.completed(slot);
        if (st.put && ss.s.check)
            break; // one put per slot and wave: each is verified
    }
}

awaitable<void> rma_client_co(session<peer>& ss, rma_client_state& st, result& r) {
    const settings& s = ss.s;
    asio::steady_timer all_done(ss.io);
    rma_wave wave;
    wave.all_done = &all_done;
    for (int k = 0; k < 2; ++k) {
        clock_type::time_point t0{};
        if (k == 1) {
            st.ctl.send("measure");
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        std::size_t remaining = k == 0 ? ss.warmup : s.measured_iters();
        while (remaining > 0) {
            const std::size_t loops = s.check ? st.free_slots.size() : s.window;
            wave.left = st.put && s.check ? std::min(remaining, loops) : remaining;
            remaining -= wave.left;
            const std::size_t started = std::min(loops, wave.left);
            for (std::size_t j = 0; j < started; ++j) {
                std::size_t slot = 0;
                if (s.check) {
                    slot = st.free_slots.back();
                    st.free_slots.pop_back();
                }
                ++wave.active;
                asio::co_spawn(
                    ss.io, rma_loop_co(ss, st, wave, slot),
                    [&wave, &st, slot, put = st.put, check = s.check](std::exception_ptr e) {
                        if (check && !put)
                            st.free_slots.push_back(slot);
                        if (--wave.active == 0)
                            wave.all_done->cancel();
                        if (e)
                            std::rethrow_exception(e);
                    });
            }
            all_done.expires_at(clock_type::time_point::max());
            if (wave.active > 0) {
                auto [ec] = co_await all_done.async_wait(asio::as_tuple(use_awaitable));
                (void)ec; // cancelled by the last loop
            }
            if (st.put && s.check) {
                co_await ucx::async_flush(ss.ops.ep, use_awaitable);
                st.verify_written();
            }
        }
        co_await ucx::async_flush(ss.ops.ep, use_awaitable);
        if (k == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    ss.end_measuring();
}

result stream_client(const settings& s, control& ctl) {
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    ucx::stream st(w);
    ucx::error_code connect_ec = asio::error::would_block;
    const auto on_connect = [&](ucx::error_code ec) { connect_ec = ec; };
    if (s.sockaddr_connect) {
        const auto port = static_cast<unsigned short>(std::stoul(ctl.expect("port")));
        st.async_connect(asio::ip::tcp::endpoint(ctl.remote_address(), port), on_connect);
    } else {
        st.async_connect(ucx::worker_address::deserialize(from_hex(ctl.expect("address"))),
                         on_connect);
    }
    while (connect_ec == asio::error::would_block && io.run_one() != 0) {
    }
    throw_if(connect_ec, "stream connect");
    ctl.expect("ready");
    result r = bytes::run_client(io, s, st);
    finish_client(ctl, r);
    return r;
}

void stream_server(const settings& s, control& ctl) {
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    // By worker address (as ucx_perftest's peers exchange theirs), or by
    // host:port: UCX 1.13 then also progresses its TCP transport, an
    // epoll_wait per progress call (see docs/benchmarks.md).
    ucx::acceptor acceptor = s.sockaddr_connect
                                 ? ucx::acceptor(w, asio::ip::tcp::endpoint(ctl.local_address(), 0))
                                 : ucx::acceptor(w);
    if (s.sockaddr_connect)
        ctl.send("port " + std::to_string(acceptor.local_endpoint().port()));
    else
        ctl.send("address " + to_hex(acceptor.local_address().serialize()));
    ucx::stream st(w);
    ucx::error_code accept_ec = asio::error::would_block;
    acceptor.async_accept(st, [&](ucx::error_code ec) { accept_ec = ec; });
    while (accept_ec == asio::error::would_block && io.run_one() != 0) {
    }
    throw_if(accept_ec, "stream accept");
    auto [allocs, ops] = bytes::run_server(io, s, st, [&] { ctl.send("ready go"); });
    finish_server(ctl, allocs, ops);
}

result rma_client(const settings& s, control& ctl) {
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    const auto wire = ucx::worker_address::deserialize(from_hex(ctl.expect("address")));
    ucx::endpoint ep(w, wire);
    ctl.send("address " + to_hex(w.address().serialize()));
    const ucx::remote_key key(ep, from_hex(ctl.expect("key")));
    ctl.expect("ready");

    result r;
    session<peer> ss{s, io, {w, ep}};
    rma_client_state st(s, ctl, ep, key);
    if (s.style == style::callback)
        run_callbacks<rma_client_cb>(ss, r, st);
    else
        spawn_and_run(ss, rma_client_co(ss, st, r));
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = ss.m.counted();
    r.operations = s.measured_iters() + 1; // the puts or gets, and the flush
    finish_client(ctl, r);
    return r;
}

// Registers the region, sends its key and serves control lines while the
// worker progresses (peers may need it: software RMA over TCP).
void rma_server(const settings& s, control& ctl) {
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    ctl.send("address " + to_hex(w.address().serialize()));
    const auto wire = ucx::worker_address::deserialize(from_hex(ctl.expect("address")));
    ucx::endpoint ep(w, wire);
    auto region = ucx::memory_region::allocate(ctx, rma_slots(s) * s.size);
    std::span<std::byte> mem(static_cast<std::byte*>(region.data()), region.size());
    for (std::size_t k = 0; k < rma_slots(s); ++k)
        fill(mem.subspan(k * s.size, s.size), k);
    ctl.send("key " + to_hex(region.pack_key()));
    ctl.send("ready go");

    rma_server_control served(s, ctl, mem);
    asio::posix::stream_descriptor lines(io, ::dup(ctl.native_handle()));
    std::function<void()> wait_line = [&] {
        lines.async_wait(asio::posix::descriptor_base::wait_read, [&](ucx::error_code ec) {
            throw_if(ec, "control connection");
            if (served.serve())
                wait_line();
            else
                io.stop();
        });
    };
    wait_line();
    io.run();
}

} // namespace

result library_client(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a == api::rma)
        return rma_client(s, ctl);
    if (a == api::stream)
        return stream_client(s, ctl);
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    const auto wire = ucx::worker_address::deserialize(from_hex(ctl.expect("address")));
    ucx::endpoint ep(w, wire);
    ctl.send("address " + to_hex(w.address().serialize()));
    ctl.expect("ready");

    result r;
    r.one_way_us.reserve(s.measured_iters());
    std::size_t allocs = 0;
    if (a == api::am) {
        session<am_ops> ss{s, io, {{w, ep}}};
        run_client(ss, r);
        allocs = ss.m.counted();
    } else {
        session<tag_ops> ss{s, io, {{w, ep}}};
        run_client(ss, r);
        allocs = ss.m.counted();
    }
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = allocs;
    r.operations = ops_per_measured_run(s);
    finish_client(ctl, r);
    return r;
}

void library_server(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a == api::rma)
        return rma_server(s, ctl);
    if (a == api::stream)
        return stream_server(s, ctl);
    asio::io_context io(1);
    ucx::context ctx = make_context(s);
    ucx::worker w(ctx, io, worker_options_for(s));
    ctl.send("address " + to_hex(w.address().serialize()));
    const auto wire = ucx::worker_address::deserialize(from_hex(ctl.expect("address")));
    ucx::endpoint ep(w, wire);
    // Messages that arrive before a receive is posted wait in UCX (tags) or
    // in the library's queue (active messages), so "ready" may go first.
    ctl.send("ready go");

    std::size_t allocs = 0;
    if (a == api::am) {
        session<am_ops> ss{s, io, {{w, ep}}};
        run_server(ss);
        allocs = ss.m.counted();
    } else {
        session<tag_ops> ss{s, io, {{w, ep}}};
        run_server(ss);
        allocs = ss.m.counted();
    }
    finish_server(ctl, allocs, ops_per_measured_run(s));
}

} // namespace perf
