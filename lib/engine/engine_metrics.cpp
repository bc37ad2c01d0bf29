#include "engine/engine_metrics.hpp"

#include <string_view>

namespace ucx::detail {

void operation_counters::took(operation_kind k, std::chrono::nanoseconds d) noexcept {
    histogram& h = histograms_[static_cast<std::size_t>(k)];
    ++h.buckets[latency_bucket(d)];
    ++h.count;
    h.sum_ns += static_cast<std::uint64_t>(d.count() > 0 ? d.count() : 0);
}

void operation_counters::count_error(const boost::system::error_code& ec) noexcept {
    const boost::system::error_category* cat = &ec.category();
    const std::size_t used = error_slots_used_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < used; ++i) {
        error_slot& s = errors_[i];
        if (s.category.load(std::memory_order_relaxed) == cat &&
            s.value.load(std::memory_order_relaxed) == ec.value()) {
            ++s.count;
            return;
        }
    }
    if (used == error_slots) {
        ++other_errors_;
        return;
    }
    error_slot& s = errors_[used];
    s.category.store(cat, std::memory_order_relaxed);
    s.value.store(ec.value(), std::memory_order_relaxed);
    ++s.count;
    error_slots_used_.store(used + 1, std::memory_order_release);
}

void operation_counters::snapshot(worker_metrics& m) const {
    for (std::size_t k = 0; k < operation_kind_count; ++k) {
        const kind_counters& c = kinds_[k];
        // Ends first: a reader never sees more ended than started.
        operation_counts& o = m.operations[k];
        o.completed = c.completed.load();
        o.failed = c.failed.load();
        o.bytes = c.bytes.load();
        o.started = c.started.load();
        if (o.started < o.completed)
            o.started = o.completed;
    }
    const std::size_t used = error_slots_used_.load(std::memory_order_acquire);
    m.errors.clear();
    m.errors.reserve(used);
    for (std::size_t i = 0; i < used; ++i) {
        const error_slot& s = errors_[i];
        m.errors.push_back({boost::system::error_code(s.value.load(std::memory_order_relaxed),
                                                      *s.category.load(std::memory_order_relaxed)),
                            s.count.load()});
    }
    m.other_errors = other_errors_.load();
    m.has_latency = latency_;
    if (!latency_)
        return;
    for (std::size_t k = 0; k < operation_kind_count; ++k) {
        const histogram& h = histograms_[k];
        latency_histogram& out = m.latency[k];
        out.sum = std::chrono::nanoseconds(static_cast<std::int64_t>(h.sum_ns.load()));
        std::uint64_t total = 0;
        for (std::size_t b = 0; b < latency_histogram::bucket_count; ++b) {
            out.buckets[b] = h.buckets[b].load();
            total += out.buckets[b];
        }
        // The count agrees with the buckets read (a Prometheus histogram's
        // +Inf bucket equals its count).
        out.count = total;
    }
}

} // namespace ucx::detail
