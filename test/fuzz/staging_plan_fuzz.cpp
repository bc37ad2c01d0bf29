// Fuzz target: the staging plan of device memory (staging_plan) under any
// parameters and any order of completions, failures and cancellation. The
// target keeps its own record of what is in flight and checks every action:
// - a copy or transfer covers exactly its chunk (offset, length, staging
//   offset), goes the plan's direction, and never starts twice at once; a
//   chunk keeps one staging slot from its first step to its last, and no two
//   chunks (or, in `whole` mode, no two copies) share a slot;
// - an outgoing chunk is transferred only once copied; an incoming one is
//   copied only once received; `chunked` transfers start in chunk order; an
//   incoming `whole` message is copied only as far as it was received;
// - after the first error (or a cancel) nothing new starts, and the plan
//   completes once, with that error, only when nothing is in flight;
//   success reports every byte (the bytes received, for an incoming `whole`
//   message), failure a prefix of chunks;
// - completions of copies or transfers that are not in flight are refused
//   and change nothing; after completion every input is refused;
// - once the input ends, completing everything in flight with success ends
//   the plan (it never stalls).
#include "fuzz.hpp"

#include "gpu/staging_plan.hpp"

#include <boost/asio/error.hpp>
#include <boost/system/errc.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace ucx::fuzz {

namespace {

using detail::copy_direction;
using detail::staging_action;
using detail::staging_action_kind;
using detail::staging_config;
using detail::staging_direction;
using detail::staging_mode;
using detail::staging_plan;
using error_code = boost::system::error_code;

struct in_flight {
    std::size_t chunk;
    unsigned slot;
};

/// The target's record of the plan, checked against every action.
class model {
public:
    explicit model(const staging_plan& p)
        : plan_(p), c_(p.config()), copied_(p.chunks(), false), received_(p.chunks(), false),
          holder_(c_.slots) {}

    bool chunked() const { return c_.mode == staging_mode::chunked; }
    bool outgoing() const { return c_.direction == staging_direction::outgoing; }

    /// Drains the plan's actions, checking each.
    void drain(staging_plan& p) {
        for (;;) {
            const staging_action a = p.next();
            switch (a.kind) {
            case staging_action_kind::none:
                UCX_ASIO_FUZZ_CHECK(p.in_flight() == copies_.size() + transfers_.size());
                return;
            case staging_action_kind::copy:
                on_copy(a);
                break;
            case staging_action_kind::transfer:
                on_transfer(a);
                break;
            case staging_action_kind::complete:
                on_complete(a);
                break;
            }
        }
    }

    std::vector<in_flight> copies_, transfers_;
    std::optional<error_code> first_error;
    std::size_t received_bytes = 0;
    bool completed = false;

    void copy_reported(const in_flight& f, bool ok) {
        erase(copies_, f.chunk);
        if (!ok)
            return failed(f);
        if (outgoing()) {
            copied_[f.chunk] = true;
            if (!chunked())
                lanes_.erase(f.slot);
        } else {
            done_chunks_.push_back(f.chunk);
            chunked() ? release(f) : void(lanes_.erase(f.slot));
        }
    }
    void transfer_reported(const in_flight& f, bool ok, std::size_t bytes) {
        erase(transfers_, f.chunk);
        if (!ok)
            return failed(f);
        if (outgoing()) {
            if (chunked())
                release(f);
        } else if (chunked()) {
            received_[f.chunk] = true;
        } else {
            whole_received_ = true;
            received_bytes = std::min(bytes, c_.total);
        }
    }
    void cancelled() {
        if (!first_error)
            first_error = boost::asio::error::operation_aborted;
    }

private:
    static void erase(std::vector<in_flight>& v, std::size_t chunk) {
        std::erase_if(v, [chunk](const in_flight& f) { return f.chunk == chunk; });
    }
    static bool has(const std::vector<in_flight>& v, std::size_t chunk) {
        return std::any_of(v.begin(), v.end(),
                           [chunk](const in_flight& f) { return f.chunk == chunk; });
    }
    void failed(const in_flight& f) {
        if (chunked())
            release(f);
        else if (f.chunk != staging_plan::whole)
            lanes_.erase(f.slot);
    }
    void release(const in_flight& f) {
        if (f.chunk != staging_plan::whole && f.slot < holder_.size() && holder_[f.slot] &&
            *holder_[f.slot] == f.chunk)
            holder_[f.slot].reset();
    }
    /// Chunk `k` takes slot `s` (its first step) or must hold it (its second).
    void hold(std::size_t k, unsigned s, bool first_step) {
        UCX_ASIO_FUZZ_CHECK(s < holder_.size());
        if (first_step) {
            UCX_ASIO_FUZZ_CHECK(!holder_[s]);
            holder_[s] = k;
        } else {
            UCX_ASIO_FUZZ_CHECK(holder_[s] && *holder_[s] == k);
        }
    }

    void on_copy(const staging_action& a) {
        UCX_ASIO_FUZZ_CHECK(!completed && !first_error);
        UCX_ASIO_FUZZ_CHECK(a.chunk < plan_.chunks());
        UCX_ASIO_FUZZ_CHECK(!has(copies_, a.chunk));
        UCX_ASIO_FUZZ_CHECK(a.direction == (outgoing() ? copy_direction::device_to_host
                                                       : copy_direction::host_to_device));
        UCX_ASIO_FUZZ_CHECK(a.offset == a.chunk * c_.chunk);
        UCX_ASIO_FUZZ_CHECK(a.staging_offset == (chunked() ? 0 : a.offset));
        if (chunked() || outgoing()) {
            UCX_ASIO_FUZZ_CHECK(a.length == plan_.chunk_length(a.chunk));
        } else {
            // Only the bytes received go to the device.
            UCX_ASIO_FUZZ_CHECK(whole_received_);
            UCX_ASIO_FUZZ_CHECK(a.length > 0 && a.offset + a.length <= received_bytes);
            UCX_ASIO_FUZZ_CHECK(a.length == std::min(c_.chunk, received_bytes - a.offset));
        }
        if (chunked()) {
            if (!outgoing())
                UCX_ASIO_FUZZ_CHECK(received_[a.chunk]);
            hold(a.chunk, a.slot, outgoing());
        } else {
            UCX_ASIO_FUZZ_CHECK(a.slot < c_.slots && !lanes_.contains(a.slot));
            lanes_[a.slot] = a.chunk;
        }
        copies_.push_back({a.chunk, a.slot});
    }

    void on_transfer(const staging_action& a) {
        UCX_ASIO_FUZZ_CHECK(!completed && !first_error);
        if (!chunked()) {
            UCX_ASIO_FUZZ_CHECK(a.chunk == staging_plan::whole && !whole_issued_);
            UCX_ASIO_FUZZ_CHECK(a.offset == 0 && a.length == c_.total && a.staging_offset == 0);
            if (outgoing())
                UCX_ASIO_FUZZ_CHECK(
                    std::all_of(copied_.begin(), copied_.end(), [](bool b) { return b; }));
            whole_issued_ = true;
            transfers_.push_back({a.chunk, 0});
            return;
        }
        UCX_ASIO_FUZZ_CHECK(a.chunk < plan_.chunks() && !has(transfers_, a.chunk));
        // In chunk order, each chunk once.
        UCX_ASIO_FUZZ_CHECK(a.chunk == next_transfer_);
        ++next_transfer_;
        UCX_ASIO_FUZZ_CHECK(a.offset == a.chunk * c_.chunk);
        UCX_ASIO_FUZZ_CHECK(a.length == plan_.chunk_length(a.chunk) && a.staging_offset == 0);
        if (outgoing())
            UCX_ASIO_FUZZ_CHECK(copied_[a.chunk]);
        hold(a.chunk, a.slot, !outgoing());
        transfers_.push_back({a.chunk, a.slot});
    }

    void on_complete(const staging_action& a) {
        UCX_ASIO_FUZZ_CHECK(!completed);
        UCX_ASIO_FUZZ_CHECK(copies_.empty() && transfers_.empty() && plan_.in_flight() == 0);
        completed = true;
        UCX_ASIO_FUZZ_CHECK(a.ec == first_error.value_or(error_code()));
        if (!a.ec) {
            const std::size_t expected = chunked() || outgoing() ? c_.total : received_bytes;
            UCX_ASIO_FUZZ_CHECK(a.bytes == expected);
            if (chunked() || c_.total > 0)
                UCX_ASIO_FUZZ_CHECK(chunked() || whole_issued_);
            if (!chunked() && !outgoing())
                // Every received chunk reached the device.
                UCX_ASIO_FUZZ_CHECK(done_chunks_.size() ==
                                    (received_bytes + c_.chunk - 1) / c_.chunk);
        } else {
            // A prefix of whole chunks, or all there was.
            const std::size_t limit =
                !chunked() && !outgoing() && whole_received_ ? received_bytes : c_.total;
            UCX_ASIO_FUZZ_CHECK(a.bytes <= limit);
            UCX_ASIO_FUZZ_CHECK(a.bytes == limit || a.bytes % c_.chunk == 0);
        }
    }

    const staging_plan& plan_;
    const staging_config& c_;
    std::vector<bool> copied_, received_;
    std::vector<std::optional<std::size_t>> holder_; ///< chunked: the chunk each slot holds
    std::map<unsigned, std::size_t> lanes_;          ///< whole: copies in flight by lane
    std::vector<std::size_t> done_chunks_;           ///< incoming: chunks on the device
    std::size_t next_transfer_ = 0;
    bool whole_issued_ = false, whole_received_ = false;
};

error_code some_error(std::uint8_t b) {
    switch (b % 3) {
    case 0:
        return boost::system::errc::make_error_code(boost::system::errc::io_error);
    case 1:
        return boost::asio::error::connection_reset;
    default:
        return boost::asio::error::operation_aborted;
    }
}

} // namespace

void staging_plan(input data) {
    reader r(data);
    staging_config c;
    c.total = r.uint(2) % 16384;
    c.chunk = r.uint(2) % 4096; // 0: one chunk of the whole message
    c.slots = r.byte() % 6;
    c.direction = r.flag() ? staging_direction::incoming : staging_direction::outgoing;
    c.mode = r.flag() ? staging_mode::whole : staging_mode::chunked;
    detail::staging_plan p(c);
    UCX_ASIO_FUZZ_CHECK(p.config().chunk > 0 && p.config().slots > 0);
    if (p.chunks() > 1024)
        return; // keeps each input fast; the shapes are the same
    model m(p);

    auto pick = [&](std::vector<in_flight>& v) -> std::optional<in_flight> {
        const std::uint8_t i = r.byte();
        if (v.empty())
            return std::nullopt;
        return v[i % v.size()];
    };
    while (!r.empty()) {
        const auto event =
            static_cast<staging_event>(r.byte() % static_cast<std::uint8_t>(staging_event::count));
        switch (event) {
        case staging_event::start: {
            const bool fresh = !p.started() && !p.completed();
            UCX_ASIO_FUZZ_CHECK(p.start() == fresh);
            break;
        }
        case staging_event::copy_ok:
        case staging_event::copy_failed: {
            const bool ok = event == staging_event::copy_ok;
            const error_code ec = ok ? error_code() : some_error(r.byte());
            if (const auto f = pick(m.copies_)) {
                UCX_ASIO_FUZZ_CHECK(p.copy_done(f->chunk, ec));
                if (ec && !m.first_error)
                    m.first_error = ec;
                m.copy_reported(*f, ok);
            }
            break;
        }
        case staging_event::transfer_ok:
        case staging_event::transfer_failed: {
            const bool ok = event == staging_event::transfer_ok;
            const error_code ec = ok ? error_code() : some_error(r.byte());
            const std::size_t bytes = r.uint(2) % (p.config().total + 1);
            if (const auto f = pick(m.transfers_)) {
                UCX_ASIO_FUZZ_CHECK(p.transfer_done(f->chunk, ec, bytes));
                if (ec && !m.first_error)
                    m.first_error = ec;
                m.transfer_reported(*f, ok, bytes);
            }
            break;
        }
        case staging_event::cancel:
            p.cancel();
            if (!m.completed)
                m.cancelled();
            break;
        case staging_event::stray_completion: {
            // A chunk with nothing in flight: refused, nothing changes.
            const std::size_t k = r.uint(2);
            const unsigned before = p.in_flight();
            if (std::none_of(m.copies_.begin(), m.copies_.end(),
                             [k](const in_flight& f) { return f.chunk == k; }))
                UCX_ASIO_FUZZ_CHECK(!p.copy_done(k, {}));
            if (std::none_of(m.transfers_.begin(), m.transfers_.end(),
                             [k](const in_flight& f) { return f.chunk == k; }))
                UCX_ASIO_FUZZ_CHECK(!p.transfer_done(k, {}, 0));
            UCX_ASIO_FUZZ_CHECK(p.in_flight() == before);
            break;
        }
        case staging_event::count:
            break;
        }
        m.drain(p);
        UCX_ASIO_FUZZ_CHECK(p.completed() == m.completed);
        if (m.completed) {
            UCX_ASIO_FUZZ_CHECK(!p.copy_done(0, {}) && !p.transfer_done(staging_plan::whole, {}));
            UCX_ASIO_FUZZ_CHECK(p.next().kind == staging_action_kind::none);
        }
    }
    // The end: everything in flight succeeds, whole messages arrive whole.
    if (!p.started() && !p.completed()) {
        UCX_ASIO_FUZZ_CHECK(p.start());
        m.drain(p);
    }
    for (std::size_t rounds = 0; !m.completed; ++rounds) {
        UCX_ASIO_FUZZ_CHECK(rounds < 4 * p.chunks() + 8);
        UCX_ASIO_FUZZ_CHECK(!m.copies_.empty() || !m.transfers_.empty());
        if (!m.transfers_.empty()) {
            const in_flight f = m.transfers_.front();
            UCX_ASIO_FUZZ_CHECK(p.transfer_done(f.chunk, {}, p.config().total));
            m.transfer_reported(f, true, p.config().total);
        } else {
            const in_flight f = m.copies_.front();
            UCX_ASIO_FUZZ_CHECK(p.copy_done(f.chunk, {}));
            m.copy_reported(f, true);
        }
        m.drain(p);
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(staging_plan)
