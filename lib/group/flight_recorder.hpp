// Internal: a group's flight recorder, free of I/O: a ring of its last
// events on this rank (collectives and messages by rank), written on the
// group's executor, and turned into a ucx::flight_record on request.
//
// An event is recorded when it is called and updated in place as it runs and
// ends, by its number (`id`): an event the ring has overwritten since is no
// longer updated. Recording and updating write a few fields of a slot made
// when the group was: no allocation, and no clock read of its own (the times
// are the group's metrics' readings of the steady clock, shown as wall-clock
// times).
#pragma once

#include <ucx/flight_recorder.hpp>

#include <bit>
#include <chrono>
#include <cstdint>
#include <vector>

#include <time.h>

namespace ucx::detail {

class flight_recorder {
public:
    using clock = std::chrono::steady_clock;
    /// The id of no event (the recorder is off, or none was recorded).
    static constexpr std::uint64_t none = ~std::uint64_t{0};

    /// One event, as the ring keeps it.
    struct slot {
        std::uint64_t id = none;
        flight_event_kind kind = flight_event_kind::collective;
        flight_state state = flight_state::queued;
        collective_kind collective = collective_kind::barrier;
        bool has_reduction = false;
        datatype type = datatype::uint8;
        reduce_op op = reduce_op::sum;
        int root = -1;
        int peer = -1;
        std::uint64_t seq = 0;
        std::uint64_t tag = 0;
        std::size_t in_bytes = 0;
        std::size_t out_bytes = 0;
        clock::time_point start{};
        clock::time_point end{};
        boost::system::error_code ec;
    };

    /// Keeps the last `capacity` events, rounded up to a power of two (0:
    /// records nothing).
    explicit flight_recorder(std::size_t capacity)
        : ring_(capacity == 0 ? 0 : std::bit_ceil(capacity)), mask_(ring_.size() - 1),
          wall0_(std::chrono::system_clock::now()), steady0_(clock::now()) {}

    bool enabled() const noexcept { return !ring_.empty(); }

    /// The slot of a new event, as it was made (its `id` given, the rest to
    /// fill in), overwriting the oldest; null when off.
    slot* next() noexcept {
        if (ring_.empty())
            return nullptr;
        const std::uint64_t id = next_++;
        slot& to = ring_[id & mask_];
        if (to.id != none) // a slot used before: as made
            to = slot{};
        to.id = id;
        return &to;
    }
    /// The event `id`, or null once overwritten (or `none`).
    slot* find(std::uint64_t id) noexcept {
        if (id == none || ring_.empty())
            return nullptr;
        slot& s = ring_[id & mask_];
        return s.id == id ? &s : nullptr;
    }
    /// `id` ended with `ec` at `at`.
    void ended(std::uint64_t id, const boost::system::error_code& ec,
               clock::time_point at) noexcept {
        if (slot* s = find(id)) {
            s->state = ec ? flight_state::failed : flight_state::completed;
            s->end = at;
            s->ec = ec;
        }
    }
    /// `id` runs now.
    void running(std::uint64_t id) noexcept {
        if (slot* s = find(id))
            s->state = flight_state::running;
    }

    /// The steady clock to the scheduler's tick (a few milliseconds): the
    /// times of messages by rank, which the metrics do not read the clock
    /// for (CLOCK_MONOTONIC_COARSE, the steady clock's epoch, at a fraction
    /// of its cost).
    static clock::time_point coarse_now() noexcept {
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        return clock::time_point(std::chrono::duration_cast<clock::duration>(
            std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
    }

    /// Microseconds since the Unix epoch of the steady clock's `t`.
    std::int64_t wall_us(clock::time_point t) const noexcept {
        const auto wall =
            wall0_ + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - steady0_);
        return std::chrono::duration_cast<std::chrono::microseconds>(wall.time_since_epoch())
            .count();
    }

    /// Its events, oldest first, into `r.events` (and `r.dropped`).
    void snapshot(flight_record& r) const {
        r.events.clear();
        const std::uint64_t n = ring_.size();
        const std::uint64_t first = next_ > n ? next_ - n : 0;
        r.dropped = first;
        r.events.reserve(static_cast<std::size_t>(next_ - first));
        for (std::uint64_t id = first; id < next_; ++id) {
            const slot& s = ring_[id & mask_];
            flight_event e;
            e.id = s.id;
            e.kind = s.kind;
            e.state = s.state;
            e.collective = s.collective;
            e.seq = s.seq;
            e.root = s.root;
            e.has_reduction = s.has_reduction;
            e.type = s.type;
            e.op = s.op;
            e.in_bytes = s.in_bytes;
            e.out_bytes = s.out_bytes;
            e.peer = s.peer;
            e.tag = s.tag;
            e.start_us = wall_us(s.start);
            e.end_us = s.end == clock::time_point{} ? 0 : wall_us(s.end);
            if (s.ec)
                e.error = s.ec.message();
            r.events.push_back(std::move(e));
        }
    }

private:
    std::vector<slot> ring_;
    std::uint64_t mask_;
    std::uint64_t next_ = 0;
    std::chrono::system_clock::time_point wall0_;
    clock::time_point steady0_;
};

} // namespace ucx::detail
