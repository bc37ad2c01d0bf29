// ucx-asio-perf over raw UCP calls: the floor for the library's own overhead.
// Same UCX configuration as the library (its context settings), same endpoint
// error mode; progress by busy polling, or by sleeping on the worker's event fd
// (event), or spinning a while before sleeping (hybrid).
#include "common.hpp"

#include <ucx/context.hpp>

#include <ucp/api/ucp.h>

#include <poll.h>

#include <cstdlib>
#include <functional>
#include <memory>

namespace perf {

namespace {

void throw_status(ucs_status_t st, const char* what) {
    if (st != UCS_OK)
        throw failure(std::string(what) + ": " + ucs_status_string(st));
}

// One request's outcome. Completion callbacks only record.
struct slot {
    std::size_t index = 0;
    std::vector<std::size_t>* completed = nullptr; ///< where to report completion (may be null)
    bool done = false;
    ucs_status_t status = UCS_OK;
    std::size_t length = 0;
    ucp_tag_t tag = 0;
    void complete(ucs_status_t st) {
        done = true;
        status = st;
        if (completed)
            completed->push_back(index);
    }
};

void send_cb(void* request, ucs_status_t status, void* user) {
    static_cast<slot*>(user)->complete(status);
    ucp_request_free(request);
}

void recv_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
    auto* s = static_cast<slot*>(user);
    if (status == UCS_OK) {
        s->length = info->length;
        s->tag = info->sender_tag;
    }
    s->complete(status);
    ucp_request_free(request);
}

// Parameters of a send, put, get or flush reporting to `sl`.
ucp_request_param_t send_param(slot& sl) {
    sl.done = false;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_cb;
    p.user_data = &sl;
    return p;
}

// After a send-like call: `sl` is complete at once when UCX returned no request.
void started(ucs_status_ptr_t r, slot& sl, const char* what) {
    if (UCS_PTR_IS_ERR(r))
        throw_status(UCS_PTR_STATUS(r), what);
    if (r == nullptr)
        sl.complete(UCS_OK);
}

// Requests whose completion callbacks report to one list (not movable:
// each request points at the list).
struct slot_pool {
    std::vector<slot> slots;
    std::vector<std::size_t> completed;
    explicit slot_pool(std::size_t n) : slots(n) {
        completed.reserve(n);
        for (std::size_t k = 0; k < n; ++k) {
            slots[k].index = k;
            slots[k].completed = &completed;
        }
    }
    slot_pool(const slot_pool&) = delete;
    slot_pool& operator=(const slot_pool&) = delete;
    slot& operator[](std::size_t k) { return slots[k]; }
};

void ep_error_cb(void*, ucp_ep_h, ucs_status_t status) {
    // Only during teardown (the peer left first) is this expected.
    (void)status;
}

struct ucp_side {
    const settings& s;
    ucp_context_h ctx = nullptr;
    ucp_worker_h worker = nullptr;
    ucp_ep_h ep = nullptr;
    int efd = -1;

    explicit ucp_side(const settings& st) : s(st) {
        ucp_config_t* config = nullptr;
        throw_status(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
        ucx::context_options o;
        o.shared_memory_error_handling = s.error_handling && !s.ucx_defaults;
        if (s.ucx_defaults)
            o.shared_memory_segment_size = 0;
        for (const auto& [name, value] : ucx::make_config_settings(
                 o, [](const char* n) { return static_cast<const char*>(std::getenv(n)); })) {
            ucs_status_t st2 = ucp_config_modify(config, name.c_str(), value.c_str());
            if (st2 != UCS_OK) {
                ucp_config_release(config);
                throw_status(st2, "ucp_config_modify");
            }
        }
        ucp_params_t params{};
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
        if (find_test(s.test)->api == api::rma)
            params.features |= UCP_FEATURE_RMA;
        ucs_status_t init_status = ucp_init(&params, config, &ctx);
        ucp_config_release(config);
        throw_status(init_status, "ucp_init");
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        throw_status(ucp_worker_create(ctx, &wp, &worker), "ucp_worker_create");
        throw_status(ucp_worker_get_efd(worker, &efd), "ucp_worker_get_efd");
    }

    ~ucp_side() {
        if (ep) {
            ucp_request_param_t p{};
            p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            p.flags = UCP_EP_CLOSE_FLAG_FORCE;
            void* req = ucp_ep_close_nbx(ep, &p);
            if (UCS_PTR_IS_PTR(req)) {
                while (ucp_request_check_status(req) == UCS_INPROGRESS)
                    ucp_worker_progress(worker);
                ucp_request_free(req);
            }
        }
        if (worker)
            ucp_worker_destroy(worker);
        if (ctx)
            ucp_cleanup(ctx);
    }

    std::string address() {
        ucp_address_t* a = nullptr;
        std::size_t len = 0;
        throw_status(ucp_worker_get_address(worker, &a, &len), "ucp_worker_get_address");
        std::string hex = to_hex({reinterpret_cast<const std::byte*>(a), len});
        ucp_worker_release_address(worker, a);
        return hex;
    }

    void connect(const std::string& hex) {
        const auto bytes = from_hex(hex);
        ucp_ep_params_t p{};
        p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
        p.address = reinterpret_cast<const ucp_address_t*>(bytes.data());
        if (s.error_handling) {
            p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
            p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
            p.err_handler.cb = ep_error_cb;
            p.err_handler.arg = nullptr;
        }
        throw_status(ucp_ep_create(worker, &p, &ep), "ucp_ep_create");
    }

    // Progresses until `done()`: busy (poll), sleeping on the event fd
    // (event), or spinning `spin_us` after the last activity first (hybrid).
    template <class Pred>
    void wait(Pred done) {
        if (s.progress == progress::poll) {
            while (!done())
                ucp_worker_progress(worker);
            return;
        }
        auto last = clock_type::now();
        const auto spin = std::chrono::microseconds(s.spin_us);
        while (!done()) {
            if (ucp_worker_progress(worker) != 0) {
                if (s.progress == progress::hybrid)
                    last = clock_type::now();
                continue;
            }
            if (done())
                return;
            if (s.progress == progress::hybrid && clock_type::now() - last < spin)
                continue;
            ucs_status_t st = ucp_worker_arm(worker);
            if (st == UCS_ERR_BUSY)
                continue;
            throw_status(st, "ucp_worker_arm");
            pollfd pfd{efd, POLLIN, 0};
            ::poll(&pfd, 1, -1);
            last = clock_type::now();
        }
    }

    void send(const void* buf, std::size_t n, ucp_tag_t tag, slot& sl) {
        const ucp_request_param_t p = send_param(sl);
        started(ucp_tag_send_nbx(ep, buf, n, tag, &p), sl, "ucp_tag_send_nbx");
    }

    // A put (or get) of `n` bytes at `buf` to (from) `remote` in `rkey`'s region.
    void rma(bool put, void* buf, std::size_t n, std::uint64_t remote, ucp_rkey_h rkey, slot& sl) {
        const ucp_request_param_t p = send_param(sl);
        started(put ? ucp_put_nbx(ep, buf, n, remote, rkey, &p)
                    : ucp_get_nbx(ep, buf, n, remote, rkey, &p),
                sl, put ? "ucp_put_nbx" : "ucp_get_nbx");
    }

    // Flushes the endpoint: every put is then visible at the peer.
    void flush() {
        slot sl;
        const ucp_request_param_t p = send_param(sl);
        started(ucp_ep_flush_nbx(ep, &p), sl, "ucp_ep_flush_nbx");
        wait([&] { return sl.done; });
        throw_status(sl.status, "flush");
    }

    // The passive side of an RMA test: progresses until `fd` is readable.
    // It has no operation in flight, so it sleeps on the event fd when idle
    // in poll mode too, as a library worker in poll mode does (a spinning
    // peer would take a core from the one that copies the data); hybrid
    // spins `spin_us` first.
    void progress_until_readable(int fd) {
        auto last = clock_type::now();
        const auto spin = std::chrono::microseconds(s.spin_us);
        unsigned n = 0;
        for (;;) {
            if (ucp_worker_progress(worker) != 0) {
                if (s.progress == progress::hybrid)
                    last = clock_type::now();
                continue;
            }
            pollfd c{fd, POLLIN, 0};
            if (s.progress == progress::hybrid && clock_type::now() - last < spin) {
                if ((++n & 63) == 0 && ::poll(&c, 1, 0) > 0)
                    return;
                continue;
            }
            ucs_status_t st = ucp_worker_arm(worker);
            if (st == UCS_ERR_BUSY)
                continue;
            throw_status(st, "ucp_worker_arm");
            pollfd p[2] = {{efd, POLLIN, 0}, {fd, POLLIN, 0}};
            ::poll(p, 2, -1);
            if (p[1].revents != 0)
                return;
            last = clock_type::now();
        }
    }

    void recv(void* buf, std::size_t n, ucp_tag_t tag, ucp_tag_t mask, slot& sl) {
        sl.done = false;
        ucp_tag_recv_info_t info{};
        ucp_request_param_t p{};
        p.op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO;
        p.cb.recv = recv_cb;
        p.user_data = &sl;
        p.recv_info.tag_info = &info;
        ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, buf, n, tag, mask, &p);
        if (UCS_PTR_IS_ERR(r))
            throw_status(UCS_PTR_STATUS(r), "ucp_tag_recv_nbx");
        if (r == nullptr) {
            sl.length = info.length;
            sl.tag = info.sender_tag;
            sl.complete(UCS_OK);
        }
    }
};

void ok(const slot& sl, const char* what) {
    throw_status(sl.status, what);
}

// ---- RMA: put_bw, get_bw (the loop of the library's callback client) ----

// Runs the put or get test; `c` counts its measured phase.
void rma_client(const settings& s, control& ctl, ucp_side& u, result& r, measurement& c) {
    const std::string key = ctl.expect("key");
    const auto space = key.find(' ');
    if (space == std::string::npos)
        throw failure("control connection: bad key line");
    const std::uint64_t base = std::stoull(key.substr(0, space));
    const auto packed = from_hex(key.substr(space + 1));
    ucp_rkey_h rkey = nullptr;
    throw_status(ucp_ep_rkey_unpack(u.ep, packed.data(), &rkey), "ucp_ep_rkey_unpack");
    std::unique_ptr<ucp_rkey, void (*)(ucp_rkey_h)> rkey_guard(rkey, ucp_rkey_destroy);
    ctl.expect("ready");

    const bool put = s.test == "put_bw";
    const std::size_t slots = rma_slots(s);
    std::vector<std::vector<std::byte>> bufs(slots, std::vector<std::byte>(s.size));
    if (!s.check)
        fill(bufs[0], 0);
    // Requests in flight: with --check one per slot, else `--window` on slot 0.
    const std::size_t nreq = s.check ? slots : s.window;
    slot_pool reqs(nreq);
    std::vector<std::size_t> free_reqs, written;
    written.reserve(nreq);
    for (std::size_t k = nreq; k > 0; --k)
        free_reqs.push_back(k - 1);
    std::vector<std::uint64_t> last_seq(slots);
    std::uint64_t next = 0;

    for (int round = 0; round < 2; ++round) {
        std::size_t remaining = round == 0 ? s.warmup_iters() : s.measured_iters();
        clock_type::time_point t0{};
        if (round == 1) {
            ctl.send("measure");
            c.begin();
            t0 = clock_type::now();
        }
        std::size_t inflight = 0;
        for (;;) {
            while (remaining > 0 && !free_reqs.empty()) {
                const std::size_t k = free_reqs.back();
                free_reqs.pop_back();
                const std::size_t sl = s.check ? k : 0;
                const std::uint64_t seq = next++;
                if (s.check && put) {
                    fill(bufs[sl], seq);
                    last_seq[sl] = seq;
                } else if (s.check) {
                    std::fill(bufs[sl].begin(), bufs[sl].end(), std::byte{0});
                }
                --remaining;
                ++inflight;
                u.rma(put, bufs[sl].data(), s.size, base + sl * s.size, rkey, reqs[k]);
            }
            if (inflight == 0) {
                // The end of the round, or (put with --check) every slot written.
                u.flush();
                if (!written.empty()) {
                    rma_verify_remote(ctl, written, last_seq);
                    free_reqs.insert(free_reqs.end(), written.begin(), written.end());
                    written.clear();
                }
                if (remaining == 0)
                    break;
                continue;
            }
            u.wait([&] { return !reqs.completed.empty(); });
            for (std::size_t k : reqs.completed) {
                ok(reqs[k], put ? "put" : "get");
                --inflight;
                if (s.check && put) {
                    written.push_back(k);
                    continue;
                }
                if (s.check)
                    check(bufs[k], k, "get");
                free_reqs.push_back(k);
            }
            reqs.completed.clear();
        }
        if (round == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    c.end();
}

void rma_server(const settings& s, control& ctl, ucp_side& u) {
    const std::size_t length = rma_slots(s) * s.size;
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.length = length;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    ucp_mem_h memh = nullptr;
    throw_status(ucp_mem_map(u.ctx, &mp, &memh), "ucp_mem_map");
    std::unique_ptr<ucp_mem, std::function<void(ucp_mem_h)>> memh_guard(
        memh, [&u](ucp_mem_h m) { ucp_mem_unmap(u.ctx, m); });
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    throw_status(ucp_mem_query(memh, &attr), "ucp_mem_query");
    std::span<std::byte> mem(static_cast<std::byte*>(attr.address), length);
    for (std::size_t k = 0; k < rma_slots(s); ++k)
        fill(mem.subspan(k * s.size, s.size), k);
    void* packed = nullptr;
    std::size_t packed_size = 0;
    throw_status(ucp_rkey_pack(u.ctx, memh, &packed, &packed_size), "ucp_rkey_pack");
    const std::string hex = to_hex({static_cast<const std::byte*>(packed), packed_size});
    ucp_rkey_buffer_release(packed);
    ctl.send("key " + std::to_string(reinterpret_cast<std::uintptr_t>(attr.address)) + " " + hex);
    ctl.send("ready go");

    rma_server_control served(s, ctl, mem);
    do
        u.progress_until_readable(ctl.native_handle());
    while (served.serve());
}

// tag_lat: the ping-pong of the library's latency loops.
void tag_lat_client(const settings& s, ucp_side& u, result& r, measurement& c) {
    const std::size_t warmup = s.warmup_iters(), total = warmup + s.measured_iters();
    r.one_way_us.reserve(s.measured_iters());
    std::vector<std::byte> out(s.size), in(s.size);
    slot ss, rs;
    for (std::size_t i = 0; i < total; ++i) {
        if (i == warmup)
            c.begin();
        if (s.check)
            fill(out, i);
        const auto t0 = sample_clock::now();
        // Send, then post the receive, as ucx_perftest and the library's
        // loops do (no progress runs in between).
        u.send(out.data(), out.size(), data_bit | i, ss);
        u.recv(in.data(), in.size(), reply_bit | i, ~ucp_tag_t{0}, rs);
        u.wait([&] { return rs.done; });
        const auto t1 = sample_clock::now();
        u.wait([&] { return ss.done; });
        ok(rs, "tag receive");
        ok(ss, "tag send");
        if (rs.length != s.size)
            throw failure("reply of the wrong size");
        if (s.check)
            check(in, i, "reply");
        if (i >= warmup)
            r.one_way_us.push_back(one_way_us(t0, t1));
    }
    c.end();
}

// tag_bw: --window sends in flight, then the acknowledgement.
void tag_bw_client(const settings& s, ucp_side& u, result& r, measurement& c) {
    const std::size_t warmup = s.warmup_iters();
    const std::size_t nslots = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs(s.check ? nslots : 1, std::vector<std::byte>(s.size));
    if (!s.check)
        fill(bufs[0], 0);
    slot_pool slots(nslots);
    std::vector<std::size_t> free_slots;
    for (std::size_t k = 0; k < nslots; ++k)
        free_slots.push_back(k);
    std::uint64_t next = 0, ack = 0;
    slot ack_slot;
    for (int round = 0; round < 2; ++round) {
        std::size_t remaining = round == 0 ? warmup : s.measured_iters();
        clock_type::time_point t0{};
        if (round == 1) {
            c.begin();
            t0 = clock_type::now();
        }
        u.recv(&ack, sizeof ack, ack_tag, ~ucp_tag_t{0}, ack_slot);
        std::size_t inflight = 0;
        while (remaining > 0 || inflight > 0) {
            while (remaining > 0 && !free_slots.empty()) {
                const std::size_t k = free_slots.back();
                free_slots.pop_back();
                const std::uint64_t seq = next++;
                auto& b = bufs[s.check ? k : 0];
                if (s.check)
                    fill(b, seq);
                --remaining;
                ++inflight;
                u.send(b.data(), b.size(), data_bit, slots[k]);
            }
            u.wait([&] { return !slots.completed.empty(); });
            for (std::size_t k : slots.completed) {
                ok(slots[k], "tag send");
                --inflight;
                free_slots.push_back(k);
            }
            slots.completed.clear();
        }
        u.wait([&] { return ack_slot.done; });
        ok(ack_slot, "acknowledgement receive");
        if (round == 1)
            r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    c.end();
}

// tag_lat: each ping answered from its own buffer, the next receive (by the
// exact tag of the ping it expects) posted once the reply before it left.
void tag_lat_server(const settings& s, control& ctl, ucp_side& u, measurement& c) {
    const std::size_t warmup = s.warmup_iters(), total = warmup + s.measured_iters();
    std::vector<std::byte> buf[2] = {std::vector<std::byte>(s.size),
                                     std::vector<std::byte>(s.size)};
    slot rs[2], ss[2];
    ss[0].done = ss[1].done = true;
    u.recv(buf[0].data(), s.size, data_bit, ~ucp_tag_t{0}, rs[0]);
    ctl.send("ready go");
    for (std::size_t k = 0; k < total; ++k) {
        const std::size_t cur = k % 2, nxt = (k + 1) % 2;
        u.wait([&] { return rs[cur].done; });
        ok(rs[cur], "tag receive");
        if (rs[cur].length != s.size)
            throw failure("message of the wrong size");
        const std::uint64_t seq = rs[cur].tag & seq_mask;
        if (s.check)
            check(buf[cur], seq, "ping");
        if (k + 1 == warmup)
            c.begin();
        u.send(buf[cur].data(), s.size, reply_bit | seq, ss[cur]);
        if (k + 1 < total) {
            u.wait([&] { return ss[nxt].done; });
            ok(ss[nxt], "tag send");
            u.recv(buf[nxt].data(), s.size, data_bit | (k + 1), ~ucp_tag_t{0}, rs[nxt]);
        }
    }
    u.wait([&] { return ss[0].done && ss[1].done; });
    c.end();
}

// tag_bw: --window receives, the acknowledgements after the warm-up and the end.
void tag_bw_server(const settings& s, control& ctl, ucp_side& u, measurement& c) {
    const std::size_t warmup = s.warmup_iters(), total = warmup + s.measured_iters();
    // --window receives into one buffer without --check, as in
    // ucx_perftest; with --check fewer, one buffer each, within 64 MiB.
    const std::size_t nslots = s.check ? buffer_slots(s) : s.window;
    std::vector<std::vector<std::byte>> bufs(s.check ? nslots : 1, std::vector<std::byte>(s.size));
    const auto buf_of = [&](std::size_t k) { return bufs[s.check ? k : 0].data(); };
    slot_pool slots(nslots);
    std::vector<std::uint64_t> seqs(nslots); // the message each slot's receive gets
    std::size_t posted = 0, received = 0;
    for (std::size_t k = 0; k < nslots && posted < total; ++k) {
        seqs[k] = posted++;
        u.recv(buf_of(k), s.size, data_bit, ~ucp_tag_t{0}, slots[k]);
    }
    ctl.send("ready go");
    std::uint64_t ack = 0;
    slot ack_slot;
    std::vector<std::size_t> batch;
    batch.reserve(nslots);
    while (received < total) {
        u.wait([&] { return !slots.completed.empty(); });
        batch.swap(slots.completed);
        for (std::size_t k : batch) {
            ok(slots[k], "tag receive");
            if (slots[k].length != s.size)
                throw failure("message of the wrong size");
            if (s.check)
                check(bufs[k], seqs[k], "data");
            ++received;
            if (posted < total) {
                seqs[k] = posted++;
                u.recv(buf_of(k), s.size, data_bit, ~ucp_tag_t{0}, slots[k]);
            }
            if (received == warmup || received == total) {
                if (received == warmup)
                    c.begin();
                u.send(&ack, sizeof ack, ack_tag, ack_slot);
                u.wait([&] { return ack_slot.done; });
                ok(ack_slot, "acknowledgement send");
            }
        }
        batch.clear();
    }
    c.end();
}

} // namespace

result ucp_client(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a != api::tag && a != api::rma)
        throw failure("--transport ucp runs the tag and RMA tests only");
    ucp_side u(s);
    u.connect(ctl.expect("address"));
    ctl.send("address " + u.address());
    result r;
    measurement c;
    if (a == api::rma) {
        rma_client(s, ctl, u, r, c);
    } else {
        ctl.expect("ready");
        if (find_test(s.test)->kind == kind::latency)
            tag_lat_client(s, u, r, c);
        else
            tag_bw_client(s, u, r, c);
    }
    count_measured(s, c.counted(), r);
    finish_client(ctl, r);
    return r;
}

void ucp_server(const settings& s, control& ctl) {
    const api a = find_test(s.test)->api;
    if (a != api::tag && a != api::rma)
        throw failure("--transport ucp runs the tag and RMA tests only");
    ucp_side u(s);
    ctl.send("address " + u.address());
    u.connect(ctl.expect("address"));
    if (a == api::rma)
        return rma_server(s, ctl, u);

    measurement c;
    if (find_test(s.test)->kind == kind::latency)
        tag_lat_server(s, ctl, u, c);
    else
        tag_bw_server(s, ctl, u, c);
    finish_server(ctl, c.counted(), measured_operations(s));
}

} // namespace perf
