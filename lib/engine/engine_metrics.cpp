#include "engine/engine_metrics.hpp"

#include <algorithm>

namespace ucx::detail {

void operation_counters::took(operation_kind k, std::chrono::nanoseconds d) noexcept {
    histograms_[static_cast<std::size_t>(k)].add(d);
}

void histogram_counters::add(std::chrono::nanoseconds d) noexcept {
    ++buckets_[latency_bucket(d)];
    sum_ns_ += static_cast<std::uint64_t>(d.count() > 0 ? d.count() : 0);
}

// The count is the sum of the buckets read, so it agrees with them (a
// Prometheus histogram's +Inf bucket equals its count).
void histogram_counters::snapshot(latency_histogram& out) const noexcept {
    out.sum = std::chrono::nanoseconds(static_cast<std::int64_t>(sum_ns_.load()));
    std::uint64_t total = 0;
    for (std::size_t b = 0; b < latency_histogram::bucket_count; ++b) {
        out.buckets[b] = buckets_[b].load();
        total += out.buckets[b];
    }
    out.count = total;
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

void operation_counters::add_set(const kind_counter_set& set) {
    if constexpr (!counts_operations)
        return;
    const std::lock_guard lock(sets_mu_);
    sets_.push_back(&set);
}

void operation_counters::retire_set(const kind_counter_set& set) noexcept {
    if constexpr (!counts_operations)
        return;
    const std::lock_guard lock(sets_mu_);
    const auto it = std::find(sets_.begin(), sets_.end(), &set);
    if (it == sets_.end())
        return;
    *it = sets_.back();
    sets_.pop_back();
    for (std::size_t k = 0; k < operation_kind_count; ++k) {
        const kind_counters& from = set[k];
        kind_counters& to = retired_[k];
        to.started += from.started.load();
        to.completed += from.completed.load();
        to.failed += from.failed.load();
        to.bytes += from.bytes.load();
        to.at_once += from.at_once.load();
    }
}

void operation_counters::move_start(operation_kind k, kind_counters* from,
                                    kind_counters& to) noexcept {
    if constexpr (!counts_operations)
        return;
    // Under the lock `snapshot` reads under: both counts change at once.
    const std::lock_guard lock(sets_mu_);
    --of(k, from).started;
    ++to.started;
}

void operation_counters::snapshot(worker_metrics& m) const {
    {
        // The worker's own counts, those of the sets retired and of the
        // sets alive, each read as one (started never below completed).
        const std::lock_guard lock(sets_mu_);
        for (std::size_t k = 0; k < operation_kind_count; ++k) {
            operation_counts& total = m.operations[k];
            kinds_[k].snapshot(total);
            const auto add = [&](const kind_counters& c) {
                operation_counts o;
                c.snapshot(o);
                total.started += o.started;
                total.completed += o.completed;
                total.failed += o.failed;
                total.bytes += o.bytes;
            };
            add(retired_[k]);
            for (const kind_counter_set* s : sets_)
                add((*s)[k]);
        }
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
    m.counts_operations = counts_operations;
    m.has_latency = sampling_ != 0;
    m.latency_sampling = sampling_;
    if (sampling_ == 0)
        return;
    for (std::size_t k = 0; k < operation_kind_count; ++k)
        histograms_[k].snapshot(m.latency[k]);
}

} // namespace ucx::detail
