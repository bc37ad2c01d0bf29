// ucx-asio-perf over the library: ucx::worker, ucx::endpoint (from a worker
// address) and ucx::async_tag_send / async_tag_recv, with callback or
// coroutine completions.
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

namespace perf {

namespace {

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

void throw_if(const ucx::error_code& ec, const char* what) {
    if (ec)
        throw failure(std::string(what) + ": " + ec.message());
}

// Everything one side of a run needs.
struct session {
    const settings& s;
    asio::io_context& io;
    ucx::worker& w;
    ucx::endpoint& ep;
    std::size_t warmup = s.warmup_iters();
    std::size_t total = s.warmup_iters() + s.measured_iters();
    std::size_t alloc_start = 0;
    std::size_t alloc_end = 0;
    std::exception_ptr error{};

    void begin_measuring() {
        alloc_start = allocations();
        counting(true);
    }
    void end_measuring() {
        counting(false);
        alloc_end = allocations();
    }
};

// ---- latency: callbacks ----

struct lat_client_cb : session {
    result& r;
    std::vector<std::byte> out = std::vector<std::byte>(s.size);
    std::vector<std::byte> in = std::vector<std::byte>(s.size);
    std::size_t i = 0;
    int pending = 0;
    clock_type::time_point t0{}, t_recv{};

    void start() {
        if (i == warmup)
            begin_measuring();
        if (s.check)
            fill(out, i);
        pending = 2;
        t0 = clock_type::now();
        // Send first, then post the receive, as ucx_perftest does: nothing
        // can arrive in between (no progress runs inside an initiation), and
        // the receive's set-up stays off the message's path.
        ucx::async_tag_send(ep, asio::buffer(out), data_bit | i,
                            [this](ucx::error_code ec, std::size_t) {
                                throw_if(ec, "tag send");
                                done_one();
                            });
        ucx::async_tag_recv(w, asio::buffer(in), reply_bit | i, tag_mask_full,
                            [this](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                t_recv = clock_type::now();
                                throw_if(ec, "tag receive");
                                if (n != s.size)
                                    throw failure("reply of the wrong size");
                                done_one();
                            });
    }
    void done_one() {
        if (--pending != 0)
            return;
        if (s.check)
            check(in, i, "reply");
        if (i >= warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t_recv - t0).count() /
                                   2);
        if (++i < total)
            return start();
        end_measuring();
        io.stop();
    }
};

struct lat_server_cb : session {
    std::vector<std::byte> buf[2] = {std::vector<std::byte>(s.size),
                                     std::vector<std::byte>(s.size)};
    std::size_t received = 0, sent = 0;

    void post_recv() {
        auto& b = buf[received % 2];
        ucx::async_tag_recv(w, asio::buffer(b), data_bit, data_bit,
                            [this, &b](ucx::error_code ec, std::size_t n, ucx::tag_t tag) {
                                throw_if(ec, "tag receive");
                                const std::uint64_t seq = tag & seq_mask;
                                if (n != s.size)
                                    throw failure("message of the wrong size");
                                if (s.check)
                                    check(b, seq, "ping");
                                if (++received == warmup)
                                    begin_measuring();
                                // The reply first, then the next receive (the
                                // other buffer), as in the client.
                                ucx::async_tag_send(ep, asio::buffer(b.data(), n), reply_bit | seq,
                                                    [this](ucx::error_code ec, std::size_t) {
                                                        throw_if(ec, "tag send");
                                                        if (++sent == total) {
                                                            end_measuring();
                                                            io.stop();
                                                        }
                                                    });
                                if (received < total)
                                    post_recv();
                            });
    }
    void start() { post_recv(); }
};

// ---- bandwidth: callbacks ----

struct bw_client_cb : session {
    result& r;
    std::size_t slots = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs{};
    std::vector<std::size_t> free_slots{};
    std::uint64_t next = 0;
    std::size_t remaining = 0, inflight = 0;
    std::uint64_t ack = 0;
    bool acked = false;
    int round = 0;
    clock_type::time_point t0{};

    void start() {
        bufs.resize(s.check ? slots : 1, std::vector<std::byte>(s.size));
        if (!s.check)
            fill(bufs[0], 0);
        for (std::size_t k = 0; k < slots; ++k)
            free_slots.push_back(k);
        start_round(warmup);
    }
    void start_round(std::size_t n) {
        remaining = n;
        acked = false;
        if (round == 1) {
            begin_measuring();
            t0 = clock_type::now();
        }
        ucx::async_tag_recv(
            w, asio::buffer(&ack, sizeof ack), ack_tag, tag_mask_full,
            [this](ucx::error_code ec, std::size_t, ucx::tag_t) {
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
        const std::uint64_t seq = next++;
        --remaining;
        ++inflight;
        auto& b = bufs[s.check ? slot : 0];
        if (s.check)
            fill(b, seq);
        ucx::async_tag_send(ep, asio::buffer(b), data_bit,
                            [this, slot](ucx::error_code ec, std::size_t) {
                                throw_if(ec, "tag send");
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
            return start_round(s.measured_iters());
        end_measuring();
        io.stop();
    }
};

struct bw_server_cb : session {
    // --window receives, as the sender keeps --window sends in flight (with
    // --check fewer, one buffer each, within 64 MiB).
    std::size_t slots = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs{};
    std::vector<std::uint64_t> seqs{}; // the message each slot's receive gets
    std::size_t posted = 0, received = 0;
    std::uint64_t ack = 0;

    void start() {
        // Without --check every receive lands in one buffer, as in
        // ucx_perftest (and as the sender sends from one buffer).
        bufs.resize(s.check ? slots : 1, std::vector<std::byte>(s.size));
        seqs.resize(slots);
        for (std::size_t k = 0; k < slots && posted < total; ++k)
            post_recv(k);
    }
    void post_recv(std::size_t slot) {
        seqs[slot] = posted++;
        ucx::async_tag_recv(w, asio::buffer(bufs[s.check ? slot : 0]), data_bit, tag_mask_full,
                            [this, slot](ucx::error_code ec, std::size_t n, ucx::tag_t) {
                                throw_if(ec, "tag receive");
                                if (n != s.size)
                                    throw failure("message of the wrong size");
                                if (s.check)
                                    check(bufs[slot], seqs[slot], "data");
                                ++received;
                                if (posted < total)
                                    post_recv(slot);
                                if (received == warmup || received == total)
                                    send_ack(received == total);
                            });
    }
    void send_ack(bool last) {
        if (!last)
            begin_measuring();
        ucx::async_tag_send(ep, asio::buffer(&ack, sizeof ack), ack_tag,
                            [this, last](ucx::error_code ec, std::size_t) {
                                throw_if(ec, "acknowledgement send");
                                if (last) {
                                    end_measuring();
                                    io.stop();
                                }
                            });
    }
};

// ---- coroutines ----

using asio::awaitable;
using asio::use_awaitable;

awaitable<void> lat_client_co(session& ss, result& r) {
    const settings& s = ss.s;
    std::vector<std::byte> out(s.size), in(s.size);
    for (std::size_t i = 0; i < ss.total; ++i) {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (s.check)
            fill(out, i);
        const auto t0 = clock_type::now();
        co_await ucx::async_tag_send(ss.ep, asio::buffer(out), data_bit | i, use_awaitable);
        auto [n, tag] = co_await ucx::async_tag_recv(ss.w, asio::buffer(in), reply_bit | i,
                                                     tag_mask_full, use_awaitable);
        const auto t1 = clock_type::now();
        if (n != s.size)
            throw failure("reply of the wrong size");
        if (s.check)
            check(in, i, "reply");
        if (i >= ss.warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    ss.end_measuring();
}

awaitable<void> lat_server_co(session& ss) {
    const settings& s = ss.s;
    std::vector<std::byte> buf(s.size);
    for (std::size_t i = 0; i < ss.total; ++i) {
        auto [n, tag] = co_await ucx::async_tag_recv(ss.w, asio::buffer(buf), data_bit, data_bit,
                                                     use_awaitable);
        if (n != s.size)
            throw failure("message of the wrong size");
        if (s.check)
            check(buf, tag & seq_mask, "ping");
        if (i + 1 == ss.warmup)
            ss.begin_measuring();
        co_await ucx::async_tag_send(ss.ep, asio::buffer(buf), reply_bit | (tag & seq_mask),
                                     use_awaitable);
    }
    ss.end_measuring();
}

// Shared by the sending coroutines of one round.
struct bw_round {
    std::uint64_t next = 0;
    std::size_t remaining = 0;
    std::size_t active = 0;
};

awaitable<void> bw_sender_co(session& ss, bw_round& round, std::vector<std::byte>& buf) {
    while (round.remaining > 0) {
        --round.remaining;
        const std::uint64_t seq = round.next++;
        if (ss.s.check)
            fill(buf, seq);
        co_await ucx::async_tag_send(ss.ep, asio::buffer(buf), data_bit, use_awaitable);
    }
}

awaitable<void> bw_client_co(session& ss, result& r) {
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
        co_await ucx::async_tag_recv(ss.w, asio::buffer(&ack, sizeof ack), ack_tag, tag_mask_full,
                                     use_awaitable);
        if (k == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        while (round.active > 0)
            co_await asio::post(ss.io, use_awaitable);
    }
    ss.end_measuring();
}

awaitable<void> bw_receiver_co(session& ss, std::size_t& posted, std::size_t& received,
                               std::vector<std::byte>& buf) {
    std::uint64_t ack = 0;
    while (posted < ss.total) {
        const std::uint64_t seq = posted++;
        auto [n, tag] = co_await ucx::async_tag_recv(ss.w, asio::buffer(buf), data_bit,
                                                     tag_mask_full, use_awaitable);
        if (n != ss.s.size)
            throw failure("message of the wrong size");
        if (ss.s.check)
            check(buf, seq, "data");
        ++received;
        if (received == ss.warmup || received == ss.total) {
            if (received == ss.warmup)
                ss.begin_measuring();
            co_await ucx::async_tag_send(ss.ep, asio::buffer(&ack, sizeof ack), ack_tag,
                                         use_awaitable);
        }
    }
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

struct rma_client_cb : session {
    result& r;
    rma_client_state& st;
    std::size_t remaining = 0, inflight = 0;
    int round = 0;
    clock_type::time_point t0{};

    void start() { start_round(warmup); }
    void start_round(std::size_t n) {
        remaining = n;
        if (round == 1) {
            st.ctl.send("measure");
            begin_measuring();
            t0 = clock_type::now();
        }
        issue();
    }
    bool can_start() const {
        return remaining > 0 && (s.check ? !st.free_slots.empty() : inflight < s.window);
    }
    void issue() {
        while (can_start())
            start_one();
        if (inflight == 0)
            flush();
    }
    void start_one() {
        std::size_t slot = 0;
        if (s.check) {
            slot = st.free_slots.back();
            st.free_slots.pop_back();
        }
        const std::uint64_t seq = st.next++;
        --remaining;
        ++inflight;
        st.prepare(slot, seq);
        auto done = [this, slot](ucx::error_code ec, std::size_t n) {
            throw_if(ec, st.put ? "put" : "get");
            if (n != s.size)
                throw failure("RMA operation of the wrong size");
            --inflight;
            st.completed(slot);
            if (s.check && !st.put)
                st.free_slots.push_back(slot);
            issue();
        };
        if (st.put)
            ucx::async_put(ep, asio::buffer(st.bufs[slot]), st.address(slot), st.key, done);
        else
            ucx::async_get(ep, asio::buffer(st.bufs[slot]), st.address(slot), st.key, done);
    }
    void flush() {
        ucx::async_flush(ep, [this](ucx::error_code ec) {
            throw_if(ec, "flush");
            st.verify_written();
            if (remaining > 0)
                return issue();
            if (round == 1)
                r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
            if (round++ == 0)
                return start_round(s.measured_iters());
            end_measuring();
            io.stop();
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

awaitable<void> rma_loop_co(session& ss, rma_client_state& st, rma_wave& wave, std::size_t slot) {
    while (wave.left > 0) {
        --wave.left;
        const std::uint64_t seq = st.next++;
        st.prepare(slot, seq);
        std::size_t n = 0;
        if (st.put)
            n = co_await ucx::async_put(ss.ep, asio::buffer(st.bufs[slot]), st.address(slot),
                                        st.key, use_awaitable);
        else
            n = co_await ucx::async_get(ss.ep, asio::buffer(st.bufs[slot]), st.address(slot),
                                        st.key, use_awaitable);
        if (n != ss.s.size)
            throw failure("RMA operation of the wrong size");
        st.completed(slot);
        if (st.put && ss.s.check)
            break; // one put per slot and wave: each is verified
    }
}

awaitable<void> rma_client_co(session& ss, rma_client_state& st, result& r) {
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
                co_await ucx::async_flush(ss.ep, use_awaitable);
                st.verify_written();
            }
        }
        co_await ucx::async_flush(ss.ep, use_awaitable);
        if (k == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    ss.end_measuring();
}

// ---- active messages (ids: 1 data, 2 replies, 3 acknowledgements; the
// header carries the message number) ----

constexpr unsigned am_data = 1, am_reply = 2, am_ack = 3;
const ucx::am_send_options am_options{ucx::am_protocol::automatic, false};

std::uint64_t am_seq(const ucx::am_message& m) {
    std::uint64_t seq = 0;
    if (m.header().size() != sizeof seq)
        throw failure("active message with a bad header");
    std::memcpy(&seq, m.header().data(), sizeof seq);
    return seq;
}

void check_am(const settings& s, const ucx::am_message& m, std::uint64_t seq, const char* what) {
    if (m.size() != s.size)
        throw failure(std::string(what) + " of the wrong size");
    if (s.check)
        check({static_cast<const std::byte*>(m.data().data()), m.size()}, seq, what);
}

struct am_lat_client_cb : session {
    result& r;
    std::vector<std::byte> out = std::vector<std::byte>(s.size);
    std::size_t i = 0;
    std::uint64_t header = 0;
    int pending = 0;
    clock_type::time_point t0{}, t_recv{};

    void start() {
        if (i == warmup)
            begin_measuring();
        if (s.check)
            fill(out, i);
        pending = 2;
        header = i;
        t0 = clock_type::now();
        ucx::async_am_send(ep, am_data, asio::buffer(&header, sizeof header), asio::buffer(out),
                           am_options, [this](ucx::error_code ec, std::size_t) {
                               throw_if(ec, "active message send");
                               done_one();
                           });
        ucx::async_am_recv(w, am_reply, [this](ucx::error_code ec, ucx::am_message m) {
            t_recv = clock_type::now();
            throw_if(ec, "active message receive");
            if (am_seq(m) != i)
                throw failure("reply out of order");
            check_am(s, m, i, "reply");
            done_one();
        });
    }
    void done_one() {
        if (--pending != 0)
            return;
        if (i >= warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t_recv - t0).count() /
                                   2);
        if (++i < total)
            return start();
        end_measuring();
        io.stop();
    }
};

struct am_lat_server_cb : session {
    ucx::am_message held[2]{};
    std::uint64_t header[2] = {0, 0};
    std::size_t received = 0, sent = 0;

    void start() { post_recv(); }
    void post_recv() {
        ucx::async_am_recv(w, am_data, [this](ucx::error_code ec, ucx::am_message m) {
            throw_if(ec, "active message receive");
            const std::uint64_t seq = am_seq(m);
            check_am(s, m, seq, "ping");
            const std::size_t k = received % 2;
            held[k] = std::move(m);
            header[k] = seq;
            if (++received == warmup)
                begin_measuring();
            ucx::async_am_send(ep, am_reply, asio::buffer(&header[k], sizeof header[k]),
                               held[k].data(), am_options,
                               [this, k](ucx::error_code ec, std::size_t) {
                                   throw_if(ec, "active message send");
                                   held[k] = ucx::am_message();
                                   if (++sent == total) {
                                       end_measuring();
                                       io.stop();
                                   }
                               });
            if (received < total)
                post_recv();
        });
    }
};

struct am_bw_client_cb : session {
    result& r;
    std::size_t slots = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs{};
    std::vector<std::uint64_t> headers{};
    std::vector<std::size_t> free_slots{};
    std::uint64_t next = 0;
    std::size_t remaining = 0, inflight = 0;
    bool acked = false;
    int round = 0;
    clock_type::time_point t0{};

    void start() {
        bufs.resize(s.check ? slots : 1, std::vector<std::byte>(s.size));
        headers.resize(slots);
        if (!s.check)
            fill(bufs[0], 0);
        for (std::size_t k = 0; k < slots; ++k)
            free_slots.push_back(k);
        start_round(warmup);
    }
    void start_round(std::size_t n) {
        remaining = n;
        acked = false;
        if (round == 1) {
            begin_measuring();
            t0 = clock_type::now();
        }
        ucx::async_am_recv(w, am_ack, [this](ucx::error_code ec, ucx::am_message) {
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
        const std::uint64_t seq = next++;
        --remaining;
        ++inflight;
        auto& b = bufs[s.check ? slot : 0];
        if (s.check)
            fill(b, seq);
        headers[slot] = seq;
        ucx::async_am_send(ep, am_data, asio::buffer(&headers[slot], sizeof(std::uint64_t)),
                           asio::buffer(b), am_options,
                           [this, slot](ucx::error_code ec, std::size_t) {
                               throw_if(ec, "active message send");
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
            return start_round(s.measured_iters());
        end_measuring();
        io.stop();
    }
};

struct am_bw_server_cb : session {
    std::size_t slots = buffer_slots(s);
    std::size_t posted = 0, received = 0;
    std::uint64_t ack = 0;

    void start() {
        for (std::size_t k = 0; k < slots && posted < total; ++k)
            post_recv();
    }
    void post_recv() {
        ++posted;
        ucx::async_am_recv(w, am_data, [this](ucx::error_code ec, ucx::am_message m) {
            throw_if(ec, "active message receive");
            check_am(s, m, am_seq(m), "data");
            m = ucx::am_message();
            ++received;
            if (posted < total)
                post_recv();
            if (received == warmup || received == total)
                send_ack(received == total);
        });
    }
    void send_ack(bool last) {
        if (!last)
            begin_measuring();
        ucx::async_am_send(ep, am_ack, asio::buffer(&ack, sizeof ack), asio::const_buffer(),
                           am_options, [this, last](ucx::error_code ec, std::size_t) {
                               throw_if(ec, "acknowledgement send");
                               if (last) {
                                   end_measuring();
                                   io.stop();
                               }
                           });
    }
};

awaitable<void> am_lat_client_co(session& ss, result& r) {
    const settings& s = ss.s;
    std::vector<std::byte> out(s.size);
    for (std::uint64_t i = 0; i < ss.total; ++i) {
        if (i == ss.warmup)
            ss.begin_measuring();
        if (s.check)
            fill(out, i);
        const auto t0 = clock_type::now();
        co_await ucx::async_am_send(ss.ep, am_data, asio::buffer(&i, sizeof i), asio::buffer(out),
                                    am_options, use_awaitable);
        ucx::am_message m = co_await ucx::async_am_recv(ss.w, am_reply, use_awaitable);
        const auto t1 = clock_type::now();
        if (am_seq(m) != i)
            throw failure("reply out of order");
        check_am(s, m, i, "reply");
        if (i >= ss.warmup)
            r.one_way_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    ss.end_measuring();
}

awaitable<void> am_lat_server_co(session& ss) {
    for (std::size_t i = 0; i < ss.total; ++i) {
        ucx::am_message m = co_await ucx::async_am_recv(ss.w, am_data, use_awaitable);
        std::uint64_t seq = am_seq(m);
        check_am(ss.s, m, seq, "ping");
        if (i + 1 == ss.warmup)
            ss.begin_measuring();
        co_await ucx::async_am_send(ss.ep, am_reply, asio::buffer(&seq, sizeof seq), m.data(),
                                    am_options, use_awaitable);
    }
    ss.end_measuring();
}

awaitable<void> am_bw_sender_co(session& ss, bw_round& round, std::vector<std::byte>& buf) {
    while (round.remaining > 0) {
        --round.remaining;
        std::uint64_t seq = round.next++;
        if (ss.s.check)
            fill(buf, seq);
        co_await ucx::async_am_send(ss.ep, am_data, asio::buffer(&seq, sizeof seq),
                                    asio::buffer(buf), am_options, use_awaitable);
    }
}

awaitable<void> am_bw_client_co(session& ss, result& r) {
    const settings& s = ss.s;
    const std::size_t senders = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs(s.check ? senders : 1, std::vector<std::byte>(s.size));
    if (!s.check)
        fill(bufs[0], 0);
    bw_round round;
    for (int k = 0; k < 2; ++k) {
        clock_type::time_point t0{};
        if (k == 1) {
            ss.begin_measuring();
            t0 = clock_type::now();
        }
        round.remaining = k == 0 ? ss.warmup : s.measured_iters();
        for (std::size_t j = 0; j < senders; ++j) {
            ++round.active;
            asio::co_spawn(ss.io, am_bw_sender_co(ss, round, bufs[s.check ? j : 0]),
                           [&round](std::exception_ptr e) {
                               --round.active;
                               if (e)
                                   std::rethrow_exception(e);
                           });
        }
        co_await ucx::async_am_recv(ss.w, am_ack, use_awaitable);
        if (k == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
        while (round.active > 0)
            co_await asio::post(ss.io, use_awaitable);
    }
    ss.end_measuring();
}

awaitable<void> am_bw_receiver_co(session& ss, std::size_t& posted, std::size_t& received) {
    std::uint64_t ack = 0;
    while (posted < ss.total) {
        ++posted;
        ucx::am_message m = co_await ucx::async_am_recv(ss.w, am_data, use_awaitable);
        check_am(ss.s, m, am_seq(m), "data");
        m = ucx::am_message();
        ++received;
        if (received == ss.warmup || received == ss.total) {
            if (received == ss.warmup)
                ss.begin_measuring();
            co_await ucx::async_am_send(ss.ep, am_ack, asio::buffer(&ack, sizeof ack),
                                        asio::const_buffer(), am_options, use_awaitable);
        }
    }
}

void spawn_and_run(session& ss, awaitable<void> a) {
    asio::co_spawn(ss.io, std::move(a), [&ss](std::exception_ptr e) {
        ss.error = e;
        ss.io.stop();
    });
    ss.io.run();
    ss.io.restart();
    if (ss.error)
        std::rethrow_exception(ss.error);
}

std::size_t ops_per_measured_run(const settings& s, bool client) {
    const test_info* t = find_test(s.test);
    if (t->kind == kind::latency)
        return 2 * s.measured_iters(); // a send and a receive per iteration
    (void)client;
    return s.measured_iters() + 1; // the messages, and the acknowledgement
}

// Runs a callback-style client or server `T` to completion.
template <class T, class... Extra>
void run_callbacks(session& ss, Extra&... extra) {
    T c{ss, extra...};
    c.start();
    ss.io.run();
    ss.io.restart();
    ss.alloc_start = c.alloc_start;
    ss.alloc_end = c.alloc_end;
}

// Runs the receiving coroutines of a bandwidth server to completion.
template <class Spawn>
void run_receivers(session& ss, std::size_t count, Spawn spawn) {
    std::size_t active = 0;
    for (std::size_t j = 0; j < count; ++j) {
        ++active;
        asio::co_spawn(ss.io, spawn(j), [&ss, &active](std::exception_ptr e) {
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

// ---- ucx::stream (connected through ucx::acceptor, by worker address or by
// host:port; the byte-stream tests shared with Asio TCP) ----

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
    session ss{s, io, w, ep};
    rma_client_state st(s, ctl, ep, key);
    if (s.style == style::callback)
        run_callbacks<rma_client_cb>(ss, r, st);
    else
        spawn_and_run(ss, rma_client_co(ss, st, r));
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = ss.alloc_end - ss.alloc_start;
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
    if (find_test(s.test)->api == api::rma)
        return rma_client(s, ctl);
    if (find_test(s.test)->api == api::stream)
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
    session ss{s, io, w, ep};
    const test_info* t = find_test(s.test);
    const bool lat = t->kind == kind::latency, am = t->api == api::am;
    if (s.style == style::callback) {
        if (am)
            lat ? run_callbacks<am_lat_client_cb>(ss, r) : run_callbacks<am_bw_client_cb>(ss, r);
        else
            lat ? run_callbacks<lat_client_cb>(ss, r) : run_callbacks<bw_client_cb>(ss, r);
    } else if (am) {
        spawn_and_run(ss, lat ? am_lat_client_co(ss, r) : am_bw_client_co(ss, r));
    } else {
        spawn_and_run(ss, lat ? lat_client_co(ss, r) : bw_client_co(ss, r));
    }
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = ss.alloc_end - ss.alloc_start;
    r.operations = ops_per_measured_run(s, true);
    finish_client(ctl, r);
    return r;
}

void library_server(const settings& s, control& ctl) {
    if (find_test(s.test)->api == api::rma)
        return rma_server(s, ctl);
    if (find_test(s.test)->api == api::stream)
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

    session ss{s, io, w, ep};
    const test_info* t = find_test(s.test);
    const bool lat = t->kind == kind::latency, am = t->api == api::am;
    if (s.style == style::callback) {
        if (am)
            lat ? run_callbacks<am_lat_server_cb>(ss) : run_callbacks<am_bw_server_cb>(ss);
        else
            lat ? run_callbacks<lat_server_cb>(ss) : run_callbacks<bw_server_cb>(ss);
    } else if (lat) {
        spawn_and_run(ss, am ? am_lat_server_co(ss) : lat_server_co(ss));
    } else if (am) {
        std::size_t posted = 0, received = 0;
        run_receivers(ss, buffer_slots(s),
                      [&](std::size_t) { return am_bw_receiver_co(ss, posted, received); });
    } else {
        // One buffer for every receive without --check, as in ucx_perftest.
        std::vector<std::vector<std::byte>> bufs(s.check ? buffer_slots(s) : 1,
                                                 std::vector<std::byte>(s.size));
        std::size_t posted = 0, received = 0;
        run_receivers(ss, s.check ? buffer_slots(s) : s.window, [&](std::size_t j) {
            return bw_receiver_co(ss, posted, received, bufs[s.check ? j : 0]);
        });
    }
    finish_server(ctl, ss.alloc_end - ss.alloc_start, ops_per_measured_run(s, false));
}

} // namespace perf
