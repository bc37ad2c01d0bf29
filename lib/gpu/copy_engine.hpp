// Internal: asynchronous copies between GPU device memory and host memory,
// as the staging of device buffers needs them (lib/gpu/staging.hpp).
//
// A copy engine starts a copy and hands back a handle; its owner polls the
// handle until the copy has finished, and never blocks on it: the poll runs
// on the io_context between other handlers. `cuda_copy_engine`
// (lib/gpu/cuda_copy_engine.cpp, built with CUDA) copies on a CUDA stream of its
// own; `fake_copy_engine` copies host memory with memcpy, at once or when a
// test lets it, and fails the copies a test scripts.
#pragma once

#include "gpu/staging_plan.hpp"

#include <ucx/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ucx::detail {

/// A copy in flight: an engine's slot and the generation of its use, so a
/// stale handle is recognized.
struct copy_handle {
    std::uint32_t index = 0;
    std::uint32_t generation = 0;
};

/// The interface of a copy engine. Not thread-safe: one executor uses it.
class copy_engine {
public:
    virtual ~copy_engine() = default;

    /// Starts copying `bytes` bytes from `src` to `dst` in `direction`. On
    /// success sets `out` and returns an empty code; the copy must then be
    /// polled until it has finished (or abandoned). On failure nothing was
    /// started and the error is returned.
    virtual error_code start(void* dst, const void* src, std::size_t bytes,
                             copy_direction direction, copy_handle& out) noexcept = 0;

    /// Whether the copy of `h` has finished; when it has, `ec` receives its
    /// result and the handle is released (polling it again is an error that
    /// reports `errc::invalid_param`). Never blocks.
    virtual bool poll(copy_handle h, error_code& ec) noexcept = 0;

    /// Forgets the copy of `h`: waits until it has ended (blocking), then
    /// releases the handle. Only for an owner destroyed with copies in flight
    /// (the io_context ended), never on the io_context's path: the memory the
    /// copy uses may be released right after.
    virtual void abandon(copy_handle h) noexcept = 0;
};

/// A copy engine over host memory for tests: a copy is a memcpy, done at
/// once (`immediate`) or only when the test releases it (`held`), which is
/// also when its bytes move. Copies can be scripted to fail when they start
/// or when they finish. Allocates only while its tables grow.
class fake_copy_engine final : public copy_engine {
public:
    enum class mode { immediate, held };

    /// An engine in `m`.
    explicit fake_copy_engine(mode m = mode::immediate) : mode_(m) {}

    /// See `copy_engine::start`. The `n`-th copy started (counting from 0,
    /// failed starts included) fails with a code given to `fail_start`.
    error_code start(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                     copy_handle& out) noexcept override;
    /// See `copy_engine::poll`. Immediate copies have finished at their first
    /// poll; held ones once released.
    bool poll(copy_handle h, error_code& ec) noexcept override;
    /// See `copy_engine::abandon`: the copy is dropped (its bytes never move).
    void abandon(copy_handle h) noexcept override;

    /// Switches between immediate and held copies (for copies started later).
    void set_mode(mode m) noexcept { mode_ = m; }
    /// The `n`-th copy started (counting from 0) fails to start with `ec`.
    void fail_start(std::size_t n, error_code ec);
    /// The `n`-th copy started (counting from 0) finishes with `ec` and
    /// copies nothing.
    void fail_completion(std::size_t n, error_code ec);
    /// Lets the `n` oldest held copies finish (their bytes move now).
    /// Returns how many were released.
    std::size_t release(std::size_t n = static_cast<std::size_t>(-1)) noexcept;

    /// Copies held, not yet released.
    std::size_t held() const noexcept { return held_.size(); }
    /// Copies started (failed starts included).
    std::size_t started() const noexcept { return started_; }
    /// Copies reported finished by `poll`.
    std::size_t finished() const noexcept { return finished_; }
    /// Bytes actually copied.
    std::size_t bytes_copied() const noexcept { return bytes_copied_; }
    /// Calls of `poll`.
    std::size_t polls() const noexcept { return polls_; }
    /// Copies started and not yet reported or abandoned.
    std::size_t outstanding() const noexcept { return outstanding_; }
    /// The most copies outstanding at once.
    std::size_t max_outstanding() const noexcept { return max_outstanding_; }
    /// Copies in each direction.
    std::size_t device_to_host() const noexcept { return to_host_; }
    std::size_t host_to_device() const noexcept { return to_device_; }

private:
    struct record {
        void* dst = nullptr;
        const void* src = nullptr;
        std::size_t bytes = 0;
        error_code result{};
        std::uint32_t generation = 0;
        bool busy = false;
        bool done = false;
    };
    struct scripted {
        std::size_t n;
        error_code ec;
    };

    record* find(copy_handle h) noexcept;
    /// Moves the bytes (unless it fails) and marks the copy done.
    void finish(record& r) noexcept;
    static error_code scripted_error(const std::vector<scripted>& s, std::size_t n) noexcept;

    mode mode_;
    std::vector<record> records_;
    std::vector<std::uint32_t> free_;
    std::vector<std::uint32_t> held_;
    std::vector<scripted> fail_start_;
    std::vector<scripted> fail_completion_;
    std::size_t started_ = 0;
    std::size_t finished_ = 0;
    std::size_t bytes_copied_ = 0;
    std::size_t polls_ = 0;
    std::size_t outstanding_ = 0;
    std::size_t max_outstanding_ = 0;
    std::size_t to_host_ = 0;
    std::size_t to_device_ = 0;
};

/// A copy engine on a CUDA stream of its own (a blocking one: ordered after
/// the work queued before on the legacy default stream), for the device
/// current on the calling thread. Null, with `ec` set, when the library is
/// built without CUDA (`error::memory_type_not_supported`), no device is
/// present (`error::cuda_unavailable`) or CUDA refuses (`error::cuda_error`).
std::unique_ptr<copy_engine> make_cuda_copy_engine(error_code& ec);

} // namespace ucx::detail
