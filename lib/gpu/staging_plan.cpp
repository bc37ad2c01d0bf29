#include "gpu/staging_plan.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>

namespace ucx::detail {

namespace {

/// ceil(a / b) without overflow, for b > 0.
std::size_t ceil_div(std::size_t a, std::size_t b) noexcept {
    return a / b + (a % b != 0 ? 1 : 0);
}

staging_config normalize(staging_config c) noexcept {
    if (c.chunk == 0)
        c.chunk = std::max<std::size_t>(c.total, 1);
    const std::size_t chunks = ceil_div(c.total, c.chunk);
    // More slots than chunks would stay unused: the executor acquires one
    // buffer per slot.
    c.slots = static_cast<unsigned>(
        std::clamp<std::size_t>(c.slots, 1, std::max<std::size_t>(chunks, 1)));
    return c;
}

} // namespace

staging_plan::staging_plan(const staging_config& config)
    : config_(normalize(config)), chunks_(ceil_div(config_.total, config_.chunk)),
      slots_(config_.slots) {}

std::size_t staging_plan::chunk_length(std::size_t k) const noexcept {
    const std::size_t offset = k * config_.chunk;
    return offset >= config_.total ? 0 : std::min(config_.chunk, config_.total - offset);
}

bool staging_plan::start() noexcept {
    if (started_ || completed_)
        return false;
    started_ = true;
    return true;
}

unsigned staging_plan::find(std::size_t k, slot_state st) const noexcept {
    for (unsigned s = 0; s < slots_.size(); ++s)
        if (slots_[s].state == st && slots_[s].chunk == k)
            return s;
    return static_cast<unsigned>(slots_.size());
}

unsigned staging_plan::find_free() const noexcept {
    for (unsigned s = 0; s < slots_.size(); ++s)
        if (slots_[s].state == slot_state::free)
            return s;
    return static_cast<unsigned>(slots_.size());
}

void staging_plan::fail(std::size_t k, const error_code& ec) noexcept {
    if (!error_)
        error_ = ec;
    if (k != whole)
        first_failed_ = std::min(first_failed_, k);
}

bool staging_plan::copy_done(std::size_t k, const error_code& ec) noexcept {
    if (completed_)
        return false;
    const unsigned s = find(k, slot_state::copying);
    if (s == slots_.size())
        return false;
    --in_flight_;
    if (ec) {
        slots_[s].state = slot_state::free;
        fail(k, ec);
        return true;
    }
    if (config_.mode == staging_mode::chunked && config_.direction == staging_direction::outgoing) {
        // Its transfer waits for the transfers of the chunks before it.
        slots_[s].state = slot_state::copied;
    } else {
        // The chunk's last step (or, outgoing whole, one of the copies the
        // message's transfer waits for).
        slots_[s].state = slot_state::free;
        ++finished_;
    }
    return true;
}

bool staging_plan::transfer_done(std::size_t k, const error_code& ec) noexcept {
    return transfer_done(k, ec, config_.total);
}

bool staging_plan::transfer_done(std::size_t k, const error_code& ec, std::size_t bytes) noexcept {
    if (completed_)
        return false;
    if (config_.mode == staging_mode::whole) {
        if (k != whole || !whole_issued_ || whole_done_ || whole_failed_)
            return false;
        // Copies are issued only before (outgoing) or after (incoming) the
        // message's transfer: it is the only thing in flight.
        --in_flight_;
        if (ec) {
            whole_failed_ = true;
            fail(whole, ec);
            return true;
        }
        whole_done_ = true;
        if (config_.direction == staging_direction::incoming) {
            received_ = std::min(bytes, config_.total);
            received_chunks_ = ceil_div(received_, config_.chunk);
        }
        return true;
    }
    const unsigned s = find(k, slot_state::transferring);
    if (s == slots_.size())
        return false;
    --in_flight_;
    if (ec) {
        slots_[s].state = slot_state::free;
        fail(k, ec);
        return true;
    }
    if (config_.direction == staging_direction::outgoing) {
        slots_[s].state = slot_state::free;
        ++finished_;
    } else {
        slots_[s].state = slot_state::received;
    }
    return true;
}

void staging_plan::cancel() noexcept {
    if (completed_ || error_)
        return;
    // Everything finished: the success only waits to be reported.
    if (started_ && in_flight_ == 0) {
        const bool all_done =
            config_.mode == staging_mode::chunked
                ? finished_ == chunks_
                : whole_done_ && (config_.direction == staging_direction::outgoing ||
                                  finished_ == received_chunks_);
        if (all_done)
            return;
    }
    error_ = boost::asio::error::operation_aborted;
}

staging_action staging_plan::issue_copy(unsigned s, std::size_t k, copy_direction d) noexcept {
    slots_[s].state = slot_state::copying;
    slots_[s].chunk = k;
    ++in_flight_;
    staging_action a;
    a.kind = staging_action_kind::copy;
    a.direction = d;
    a.chunk = k;
    a.slot = s;
    a.offset = k * config_.chunk;
    if (config_.mode == staging_mode::whole) {
        // The contiguous buffer holds the message at its own offsets; an
        // incoming message may be shorter than planned.
        const std::size_t limit =
            config_.direction == staging_direction::incoming ? received_ : config_.total;
        a.length = std::min(config_.chunk, limit - a.offset);
        a.staging_offset = a.offset;
    } else {
        a.length = chunk_length(k);
    }
    return a;
}

staging_action staging_plan::issue_transfer(unsigned s, std::size_t k) noexcept {
    slots_[s].state = slot_state::transferring;
    slots_[s].chunk = k;
    ++in_flight_;
    staging_action a;
    a.kind = staging_action_kind::transfer;
    a.chunk = k;
    a.slot = s;
    a.offset = k * config_.chunk;
    a.length = chunk_length(k);
    return a;
}

std::size_t staging_plan::finished_prefix() const noexcept {
    if (!error_) {
        return config_.mode == staging_mode::whole &&
                       config_.direction == staging_direction::incoming
                   ? received_
                   : config_.total;
    }
    if (config_.mode == staging_mode::whole) {
        if (!whole_done_)
            return 0;
        if (config_.direction == staging_direction::outgoing)
            return config_.total;
    }
    // The lowest chunk that did not finish: a failed one, one still held by
    // a slot, or the first never started.
    std::size_t lowest = config_.mode == staging_mode::whole ? next_second_ : next_first_;
    lowest = std::min(lowest, first_failed_);
    for (const slot& s : slots_)
        if (s.state != slot_state::free)
            lowest = std::min(lowest, s.chunk);
    const std::size_t limit = config_.mode == staging_mode::whole ? received_ : config_.total;
    return lowest >= ceil_div(limit, config_.chunk) ? limit
                                                    : std::min(lowest * config_.chunk, limit);
}

staging_action staging_plan::finish() noexcept {
    completed_ = true;
    staging_action a;
    a.kind = staging_action_kind::complete;
    a.ec = error_;
    a.bytes = finished_prefix();
    return a;
}

staging_action staging_plan::next_chunked_outgoing() noexcept {
    // Transfers first, in chunk order: the next one goes as soon as its copy
    // is done.
    if (next_second_ < next_first_) {
        const unsigned s = find(next_second_, slot_state::copied);
        if (s != slots_.size())
            return issue_transfer(s, next_second_++);
    }
    if (next_first_ < chunks_) {
        const unsigned s = find_free();
        if (s != slots_.size())
            return issue_copy(s, next_first_++, copy_direction::device_to_host);
    }
    if (finished_ == chunks_)
        return finish();
    return {};
}

staging_action staging_plan::next_chunked_incoming() noexcept {
    // Received chunks go to the device at once (lowest chunk first).
    unsigned best = static_cast<unsigned>(slots_.size());
    for (unsigned s = 0; s < slots_.size(); ++s)
        if (slots_[s].state == slot_state::received &&
            (best == slots_.size() || slots_[s].chunk < slots_[best].chunk))
            best = s;
    if (best != slots_.size())
        return issue_copy(best, slots_[best].chunk, copy_direction::host_to_device);
    if (next_first_ < chunks_) {
        const unsigned s = find_free();
        if (s != slots_.size())
            return issue_transfer(s, next_first_++);
    }
    if (finished_ == chunks_)
        return finish();
    return {};
}

staging_action staging_plan::next_whole_outgoing() noexcept {
    if (next_first_ < chunks_) {
        const unsigned s = find_free();
        if (s != slots_.size())
            return issue_copy(s, next_first_++, copy_direction::device_to_host);
        return {};
    }
    if (finished_ == chunks_ && !whole_issued_) {
        whole_issued_ = true;
        ++in_flight_;
        staging_action a;
        a.kind = staging_action_kind::transfer;
        a.chunk = whole;
        a.length = config_.total;
        return a;
    }
    if (whole_done_)
        return finish();
    return {};
}

staging_action staging_plan::next_whole_incoming() noexcept {
    if (!whole_issued_) {
        whole_issued_ = true;
        ++in_flight_;
        staging_action a;
        a.kind = staging_action_kind::transfer;
        a.chunk = whole;
        a.length = config_.total;
        return a;
    }
    if (!whole_done_)
        return {};
    if (next_second_ < received_chunks_) {
        const unsigned s = find_free();
        if (s != slots_.size())
            return issue_copy(s, next_second_++, copy_direction::host_to_device);
        return {};
    }
    if (finished_ == received_chunks_)
        return finish();
    return {};
}

staging_action staging_plan::next() noexcept {
    if (completed_)
        return {};
    if (error_) {
        // Nothing new starts; the staging memory stays in use until the
        // last copy or transfer in flight has reported.
        return in_flight_ == 0 ? finish() : staging_action{};
    }
    if (!started_)
        return {};
    if (config_.mode == staging_mode::chunked)
        return config_.direction == staging_direction::outgoing ? next_chunked_outgoing()
                                                                : next_chunked_incoming();
    return config_.direction == staging_direction::outgoing ? next_whole_outgoing()
                                                            : next_whole_incoming();
}

} // namespace ucx::detail
