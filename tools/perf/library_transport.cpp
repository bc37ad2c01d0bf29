// ucx-asio-perf over the library: ucx::worker, ucx::endpoint (from a worker
// address) and the tag, active-message, stream and RMA operations, with
// callback or coroutine completions. Each pattern (latency, bandwidth) is
// written once for both completion styles; `tag_ops` and `am_ops` say how a
// message of each role (ping, reply, data, acknowledgement) travels.
#include "byte_stream.hpp"
#include "patterns.hpp"

#include <ucx/acceptor.hpp>
#include <ucx/am.hpp>
#include <ucx/asio.hpp>
#include <ucx/stream.hpp>
#include <ucx/tag_receiver.hpp>

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
    o.latency_histograms = s.latency_histograms;
    if (s.latency_sampling != 0)
        o.latency_sampling = s.latency_sampling;
    return o;
}

// One process's worker. The client and the server exchange worker
// addresses (the server's first) and connect an endpoint to the other's.
struct library_side {
    asio::io_context io{1};
    ucx::context ctx;
    ucx::worker w;
    ucx::endpoint ep{};

    explicit library_side(const settings& s)
        : ctx(make_context(s)), w(ctx, io, worker_options_for(s)) {}
    void connect(control& ctl, bool server) {
        if (server)
            ctl.send("address " + to_hex(w.address().serialize()));
        ep = ucx::endpoint(w, ucx::worker_address::deserialize(from_hex(ctl.expect("address"))));
        if (!server)
            ctl.send("address " + to_hex(w.address().serialize()));
    }
};

// The connected pair every test but the streams runs on; a worker runs
// its io_context itself in every progress mode.
struct peer {
    ucx::worker& w;
    ucx::endpoint& ep;
    static void run(asio::io_context& io, const settings&, const bool&) { io.run(); }
};

// ---- message kinds (see patterns.hpp) ----

// Tags: pings `data_bit | seq`, replies `reply_bit | seq`, bandwidth data
// `data_bit` received with the full mask (see common.hpp).
struct tag_ops : peer {
    using message = received_bytes;
    static constexpr const char* send_what = "tag send";
    static constexpr const char* recv_what = "tag receive";
    static constexpr bool own_buffers = true, numbered = true, numbered_data = false;
    static constexpr bool one_at_a_time = false, reply_posted_first = false;
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
    /// --style batch: a bandwidth message with ucx::try_tag_send; false
    /// (nothing sent) where UCX does not take it at once.
    bool send_at_once(const settings& s, asio::const_buffer b) {
        if (s.style != style::batch)
            return false;
        error_code ec;
        if (ucx::try_tag_send(ep, b, data_bit, ec) != 0)
            return true;
        if (ec != asio::error::would_block)
            throw_if(ec, "tag send");
        return false;
    }
    template <class T>
    auto send_ack(std::uint64_t& ack, T&& token) {
        return ucx::async_tag_send(ep, asio::buffer(&ack, sizeof ack), ack_tag,
                                   std::forward<T>(token));
    }
    template <class T>
    auto recv_ping(std::uint64_t seq, asio::mutable_buffer b, T&& token) {
        return ucx::async_tag_recv(w, b, data_bit | seq, tag_mask_full, std::forward<T>(token));
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
        return {asio::buffer(b, n), tag};
    }
    static message received(asio::mutable_buffer b, std::tuple<std::size_t, ucx::tag_t> r) {
        return received(b, std::get<0>(r), std::get<1>(r));
    }
    static std::uint64_t seq(const message& m) { return m.tag & seq_mask; }
    static asio::const_buffer payload(const message& m) { return m.bytes; }
};

// Active messages: ids 1 data (pings too), 2 replies, 3 acknowledgements;
// the header carries the message number.
struct am_ops : peer {
    using message = ucx::am_message;
    static constexpr const char* send_what = "active message send";
    static constexpr const char* recv_what = "active message receive";
    static constexpr bool own_buffers = false, numbered = true, numbered_data = true;
    static constexpr bool one_at_a_time = false, reply_posted_first = false;
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
    auto recv_ping(std::uint64_t, asio::mutable_buffer, T&& token) {
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

// ---- RMA: put_bw, get_bw (see common.hpp for the layout and --check) ----

// The client's state, shared by both completion styles.
struct rma_client_state {
    const settings& s;
    control& ctl;
    ucx::endpoint& ep;
    const ucx::remote_key& key;
    bool put = find_test(s.test)->name == std::string("put_bw");
    std::size_t slots = rma_slots(s);
    // With --memory cuda the local buffers are device memory; the server's
    // region stays host memory (registering device memory needs a UCX with
    // CUDA transports).
    std::vector<buffer> bufs = std::vector<buffer>(slots, buffer(s.size, s.memory));
    std::vector<std::size_t> free_slots{}; // --check: slots that may be used
    std::vector<std::size_t> written{};    // --check, put: slots awaiting verification
    std::vector<std::uint64_t> last_seq = std::vector<std::uint64_t>(slots);
    std::uint64_t next = 0;

    rma_client_state(const settings& st, control& c, ucx::endpoint& e, const ucx::remote_key& k)
        : s(st), ctl(c), ep(e), key(k) {
        if (!s.check)
            bufs[0].fill(0);
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
            bufs[slot].fill(seq);
            last_seq[slot] = seq;
        } else {
            bufs[slot].clear();
        }
    }
    // After it completed (a get's slot is free again; the caller returns it).
    void completed(std::size_t slot) {
        if (!s.check)
            return;
        if (put)
            written.push_back(slot);
        else
            check_any(bufs[slot].view(), slot, "get");
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
            ucx::async_put(st.ep, st.bufs[slot].view(), st.address(slot), st.key, done);
        else
            ucx::async_get(st.ep, st.bufs[slot].view(), st.address(slot), st.key, done);
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
            n = co_await ucx::async_put(ss.ops.ep, st.bufs[slot].view(), st.address(slot), st.key,
                                        use_awaitable);
        else
            n = co_await ucx::async_get(ss.ops.ep, st.bufs[slot].view(), st.address(slot), st.key,
                                        use_awaitable);
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
    library_side l(s);
    ucx::stream st(l.w);
    ucx::error_code connect_ec = asio::error::would_block;
    const auto on_connect = [&](ucx::error_code ec) { connect_ec = ec; };
    if (s.sockaddr_connect) {
        const auto port = static_cast<unsigned short>(std::stoul(ctl.expect("port")));
        st.async_connect(asio::ip::tcp::endpoint(ctl.remote_address(), port), on_connect);
    } else {
        st.async_connect(ucx::worker_address::deserialize(from_hex(ctl.expect("address"))),
                         on_connect);
    }
    while (connect_ec == asio::error::would_block && l.io.run_one() != 0) {
    }
    throw_if(connect_ec, "stream connect");
    ctl.expect("ready");
    result r = run_client(l.io, s, byte_ops<ucx::stream>{st});
    finish_client(ctl, r);
    return r;
}

void stream_server(const settings& s, control& ctl) {
    library_side l(s);
    // By worker address (as ucx_perftest's peers exchange theirs), or by
    // host:port: UCX 1.13 then also progresses its TCP transport, an
    // epoll_wait per progress call (see docs/development/measurements.md).
    ucx::acceptor acceptor =
        s.sockaddr_connect ? ucx::acceptor(l.w, asio::ip::tcp::endpoint(ctl.local_address(), 0))
                           : ucx::acceptor(l.w);
    if (s.sockaddr_connect)
        ctl.send("port " + std::to_string(acceptor.local_endpoint().port()));
    else
        ctl.send("address " + to_hex(acceptor.local_address().serialize()));
    ucx::stream st(l.w);
    ucx::error_code accept_ec = asio::error::would_block;
    acceptor.async_accept(st, [&](ucx::error_code ec) { accept_ec = ec; });
    while (accept_ec == asio::error::would_block && l.io.run_one() != 0) {
    }
    throw_if(accept_ec, "stream accept");
    auto [allocs, ops] =
        run_server(l.io, s, byte_ops<ucx::stream>{st}, [&] { ctl.send("ready go"); });
    finish_server(ctl, allocs, ops);
}

result rma_client(const settings& s, control& ctl) {
    library_side l(s);
    l.connect(ctl, false);
    const ucx::remote_key key(l.ep, from_hex(ctl.expect("key")));
    ctl.expect("ready");

    result r;
    session<peer> ss{s, l.io, {l.w, l.ep}};
    rma_client_state st(s, ctl, l.ep, key);
    if (s.style == style::callback)
        run_callbacks<rma_client_cb>(
            ss, [] {}, r, st);
    else
        spawn_and_run(ss, rma_client_co(ss, st, r));
    count_measured(s, ss.m.counted(), r);
    finish_client(ctl, r);
    return r;
}

// Registers the region, sends its key and serves control lines while the
// worker progresses (peers may need it: software RMA over TCP).
void rma_server(const settings& s, control& ctl) {
    library_side l(s);
    l.connect(ctl, true);
    auto region = ucx::memory_region::allocate(l.ctx, rma_slots(s) * s.size);
    std::span<std::byte> mem(static_cast<std::byte*>(region.data()), region.size());
    for (std::size_t k = 0; k < rma_slots(s); ++k)
        fill(mem.subspan(k * s.size, s.size), k);
    ctl.send("key " + to_hex(region.pack_key()));
    ctl.send("ready go");

    rma_server_control served(s, ctl, mem);
    asio::posix::stream_descriptor lines(l.io, ::dup(ctl.native_handle()));
    std::function<void()> wait_line = [&] {
        lines.async_wait(asio::posix::descriptor_base::wait_read, [&](ucx::error_code ec) {
            throw_if(ec, "control connection");
            if (served.serve())
                wait_line();
            else
                l.io.stop();
        });
    };
    wait_line();
    l.io.run();
}

// tag_bw's receiving side with --style batch: a ucx::tag_receiver with a
// slot per send the sender keeps in flight takes the messages, all that
// arrived per handler; the acknowledgements go as bw_server_cb sends them.
struct bw_batch_server {
    session<tag_ops>& ss;
    ucx::tag_receiver rx{ss.ops.w, data_bit, tag_mask_full,
                         ucx::tag_receiver_options{ss.s.window, ss.s.size}};
    std::size_t received = 0;
    std::uint64_t ack = 0;

    void start() { receive(); }
    void receive() {
        rx.async_receive([this](error_code ec, ucx::tag_batch batch) {
            throw_if(ec, "tag receiver");
            for (const ucx::tag_message& m : batch) {
                throw_if(m.error, "tag receive");
                expect<tag_ops>(ss.s, received_bytes{m.data, m.tag}, received, "data");
                ++received;
            }
            batch.release();
            if (received < ss.total)
                receive();
            // The sender waits for the acknowledgement at the end of a round:
            // no batch goes past one.
            if (ack_due(ss, received))
                send_round_ack(ss, ack, received, [] {});
        });
    }
};

// Calls `f` with the message kind of the test in `s` (tags or active
// messages) on a worker connected to the other side.
template <class F>
auto with_kind(const settings& s, control& ctl, bool server, F f) {
    library_side l(s);
    l.connect(ctl, server);
    const peer p{l.w, l.ep};
    if (find_test(s.test)->api != api::am)
        return f(l.io, tag_ops{p});
    // Device memory: the data of rendezvous messages lands in device memory
    // (eager ones stay in host memory, where UCX delivers them).
    if (s.memory == memory::cuda)
        ucx::set_am_memory_type(l.w, am_ops::data_id, ucx::memory_type::cuda);
    return f(l.io, am_ops{p});
}

} // namespace

result library_client(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a == api::rma)
        return rma_client(s, ctl);
    if (a == api::stream)
        return stream_client(s, ctl);
    // The worker and endpoint live until the end of the run's handshake.
    return with_kind(s, ctl, false, [&](asio::io_context& io, auto kind) {
        ctl.expect("ready");
        result r = run_client(io, s, kind);
        finish_client(ctl, r);
        return r;
    });
}

void library_server(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a == api::rma)
        return rma_server(s, ctl);
    if (a == api::stream)
        return stream_server(s, ctl);
    with_kind(s, ctl, true, [&](asio::io_context& io, auto kind) {
        // Messages that arrive before a receive is posted wait in UCX (tags)
        // or in the library's queue (active messages), so "ready" may go first.
        ctl.send("ready go");
        if constexpr (std::is_same_v<decltype(kind), tag_ops>) {
            if (s.style == style::batch) {
                session<tag_ops> ss{s, io, kind};
                run_callbacks<bw_batch_server>(ss, [] {});
                finish_server(ctl, ss.m.counted(), measured_operations(s));
                return;
            }
        }
        auto [allocs, ops] = run_server(io, s, kind, [] {});
        finish_server(ctl, allocs, ops);
    });
}

} // namespace perf
