#include "gpu/copy_engine.hpp"

#include <algorithm>
#include <cstring>

namespace ucx::detail {

error_code fake_copy_engine::scripted_error(const std::vector<scripted>& s,
                                            std::size_t n) noexcept {
    for (const scripted& e : s)
        if (e.n == n)
            return e.ec;
    return {};
}

void fake_copy_engine::fail_start(std::size_t n, error_code ec) {
    fail_start_.push_back({n, ec});
}

void fake_copy_engine::fail_completion(std::size_t n, error_code ec) {
    fail_completion_.push_back({n, ec});
}

fake_copy_engine::record* fake_copy_engine::find(copy_handle h) noexcept {
    if (h.index >= records_.size())
        return nullptr;
    record& r = records_[h.index];
    return r.busy && r.generation == h.generation ? &r : nullptr;
}

error_code fake_copy_engine::start(void* dst, const void* src, std::size_t bytes,
                                   copy_direction direction, copy_handle& out) noexcept {
    const std::size_t n = started_++;
    if (error_code ec = scripted_error(fail_start_, n))
        return ec;
    try {
        if (free_.empty()) {
            records_.emplace_back();
            free_.push_back(static_cast<std::uint32_t>(records_.size() - 1));
        }
        // poll, abandon and release never allocate: every record fits.
        free_.reserve(records_.size());
        held_.reserve(records_.size());
    } catch (...) {
        return make_error_code(error::allocation_failed);
    }
    const std::uint32_t i = free_.back();
    free_.pop_back();
    record& r = records_[i];
    r.dst = dst;
    r.src = src;
    r.bytes = bytes;
    r.result = scripted_error(fail_completion_, n);
    r.busy = true;
    r.done = false;
    ++r.generation;
    out = {i, r.generation};
    (direction == copy_direction::device_to_host ? to_host_ : to_device_) += 1;
    max_outstanding_ = std::max(max_outstanding_, ++outstanding_);
    if (mode_ == mode::immediate)
        finish(r);
    else
        held_.push_back(i); // reserved above
    return {};
}

void fake_copy_engine::finish(record& r) noexcept {
    if (!r.result && r.bytes != 0) {
        std::memmove(r.dst, r.src, r.bytes);
        bytes_copied_ += r.bytes;
    }
    r.done = true;
}

std::size_t fake_copy_engine::release(std::size_t n) noexcept {
    const std::size_t count = std::min(n, held_.size());
    for (std::size_t k = 0; k < count; ++k)
        finish(records_[held_[k]]);
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(count));
    return count;
}

bool fake_copy_engine::poll(copy_handle h, error_code& ec) noexcept {
    ++polls_;
    record* r = find(h);
    if (!r) {
        ec = make_error_code(errc::invalid_param);
        return true;
    }
    if (!r->done)
        return false;
    ec = r->result;
    r->busy = false;
    free_.push_back(h.index); // reserved in start
    --outstanding_;
    ++finished_;
    return true;
}

void fake_copy_engine::abandon(copy_handle h) noexcept {
    record* r = find(h);
    if (!r)
        return;
    held_.erase(std::remove(held_.begin(), held_.end(), h.index), held_.end());
    r->busy = false;
    free_.push_back(h.index);
    --outstanding_;
}

#ifndef UCX_ASIO_HAS_CUDA

std::unique_ptr<copy_engine> make_cuda_copy_engine(error_code& ec) {
    ec = make_error_code(error::memory_type_not_supported);
    return nullptr;
}

#endif

} // namespace ucx::detail
