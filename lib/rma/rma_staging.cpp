// Puts from and gets into device memory, through the worker's staging
// (lib/gpu/device_staging.hpp; see lib/rma/rma_impl.hpp).
#include <ucx/detail/results.hpp>

#include "connection/endpoint_impl.hpp"
#include "gpu/device_staging.hpp"
#include "rma/rma_impl.hpp"

#include <utility>

namespace ucx::detail {

bool staged_rma(device_staging& s, endpoint_impl& ep, rma_op* op, void* data, std::size_t size,
                std::uint64_t remote_address, const key_ptr& key, bool put) noexcept {
    if (size == 0 || !s.must_stage(data))
        return false;
    // Refused before anything is copied, as a direct put or get.
    if (!rma_begin_checked(ep, op, remote_address, size, key))
        return true;
    device_staging::stage_options options;
    options.mode = staging_mode::chunked;
    options.cancel = device_staging::cancel_policy::none;
    s.stage(
        op, put ? staging_direction::outgoing : staging_direction::incoming, data, size,
        [keep = ep.shared_from_this(), remote_address, key, put](
            device_staging::entry& e, void* host, std::size_t n, device_staging::completion done) {
            auto* t = staging_internal_op<bytes_result<rma_op>>(
                *keep->worker(),
                [done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
                    done(ec, bytes);
                });
            rma_direct(*keep, t, host, n, remote_address + e.offset, key, put);
        },
        std::move(options));
    return true;
}

} // namespace ucx::detail
