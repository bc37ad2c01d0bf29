// The CUDA copy engine: cudaMemcpyAsync on a stream of its own, one pooled
// event recorded after each copy, completion by cudaEventQuery. Built only
// with CUDA support (UCX_ASIO_HAS_CUDA).
//
// The stream is a blocking one (created without cudaStreamNonBlocking): CUDA
// orders it after the work queued before on the legacy default stream, and
// that work after its copies. A program that fills a device buffer with
// cudaMemcpy from pageable memory, cudaMemset or a kernel launched without a
// stream, and then sends it, has not waited for the bytes to land: for small
// copies from pageable memory cudaMemcpy returns once it holds the bytes, not
// once they reach the device. A non-blocking stream would read the buffer
// before they land; this one waits for them.
#include "gpu/copy_engine.hpp"

#include <ucx/memory_type.hpp>

#include <cuda_runtime_api.h>

#include <new>

namespace ucx::detail {

namespace {

/// The library's code for a CUDA error (clearing the runtime's last error).
error_code cuda_failure(cudaError_t e) noexcept {
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
        return make_error_code(error::allocation_failed);
    return make_error_code(error::cuda_error);
}

class cuda_copy_engine final : public copy_engine {
public:
    /// Takes ownership of `stream`.
    explicit cuda_copy_engine(cudaStream_t stream) noexcept : stream_(stream) {}

    /// Waits for the copies still queued (teardown), then destroys the
    /// events and the stream.
    ~cuda_copy_engine() override {
        (void)cudaStreamSynchronize(stream_);
        for (const record& r : records_)
            (void)cudaEventDestroy(r.event);
        (void)cudaStreamDestroy(stream_);
        (void)cudaGetLastError();
    }

    cuda_copy_engine(const cuda_copy_engine&) = delete;
    cuda_copy_engine& operator=(const cuda_copy_engine&) = delete;

    /// Queues the copy and an event after it; takes a pooled event, creating
    /// one only when all are in use.
    error_code start(void* dst, const void* src, std::size_t bytes, copy_direction direction,
                     copy_handle& out) noexcept override {
        std::uint32_t i = 0;
        if (free_.empty()) {
            cudaEvent_t ev{};
            if (cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
                e != cudaSuccess)
                return cuda_failure(e);
            try {
                records_.push_back({ev, 0, false});
                free_.reserve(records_.size());
            } catch (...) {
                (void)cudaEventDestroy(ev);
                return make_error_code(error::allocation_failed);
            }
            i = static_cast<std::uint32_t>(records_.size() - 1);
        } else {
            i = free_.back();
            free_.pop_back();
        }
        record& r = records_[i];
        const cudaMemcpyKind kind = direction == copy_direction::device_to_host
                                        ? cudaMemcpyDeviceToHost
                                        : cudaMemcpyHostToDevice;
        cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, stream_);
        if (e == cudaSuccess)
            e = cudaEventRecord(r.event, stream_);
        if (e != cudaSuccess) {
            free_.push_back(i);
            return cuda_failure(e);
        }
        r.busy = true;
        ++r.generation;
        out = {i, r.generation};
        return {};
    }

    /// cudaEventQuery: not ready while the stream has not reached the event.
    bool poll(copy_handle h, error_code& ec) noexcept override {
        record* r = find(h);
        if (!r) {
            ec = make_error_code(errc::invalid_param);
            return true;
        }
        const cudaError_t e = cudaEventQuery(r->event);
        if (e == cudaErrorNotReady)
            return false;
        ec = e == cudaSuccess ? error_code{} : cuda_failure(e);
        release(h.index);
        return true;
    }

    /// Blocks on the copy's event (teardown only), then recycles it.
    void abandon(copy_handle h) noexcept override {
        record* r = find(h);
        if (!r)
            return;
        if (cudaEventSynchronize(r->event) != cudaSuccess)
            (void)cudaGetLastError();
        release(h.index);
    }

private:
    struct record {
        cudaEvent_t event;
        std::uint32_t generation;
        bool busy;
    };

    record* find(copy_handle h) noexcept {
        if (h.index >= records_.size())
            return nullptr;
        record& r = records_[h.index];
        return r.busy && r.generation == h.generation ? &r : nullptr;
    }

    void release(std::uint32_t i) noexcept {
        records_[i].busy = false;
        free_.push_back(i); // reserved when the record was made
    }

    cudaStream_t stream_;
    std::vector<record> records_;
    std::vector<std::uint32_t> free_;
};

} // namespace

std::unique_ptr<copy_engine> make_cuda_copy_engine(error_code& ec) {
    ec = {};
    if (cuda_device_count() == 0) {
        ec = make_error_code(error::cuda_unavailable);
        return nullptr;
    }
    cudaStream_t stream{};
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamDefault); e != cudaSuccess) {
        ec = cuda_failure(e);
        return nullptr;
    }
    try {
        return std::make_unique<cuda_copy_engine>(stream);
    } catch (...) {
        (void)cudaStreamDestroy(stream);
        ec = make_error_code(error::allocation_failed);
        return nullptr;
    }
}

} // namespace ucx::detail
