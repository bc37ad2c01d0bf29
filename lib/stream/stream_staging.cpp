// Stream writes from and reads into device memory, through the worker's
// staging (lib/gpu/device_staging.hpp; see lib/stream/stream_impl.hpp).
//
// Streams stage device buffers even where UCX moves device memory itself:
// the stream's reads take the data UCX received in its own host buffers
// (ucp_stream_recv_data_nb) and copy it out with memcpy, which cannot write
// device memory; writes are staged too, so both ends of a stream take the
// same path whatever UCX can do.
#include <ucx/detail/results.hpp>

#include "gpu/device_staging.hpp"
#include "stream/stream_impl.hpp"

#include <algorithm>
#include <utility>

namespace ucx::detail {

bool staged_stream_write(device_staging& s, stream_impl& st, stream_write_op* op) noexcept {
    if (op->count == 0)
        return false;
    if (!s.is_device(op->iov[0].buffer)) {
        // A write may write less than asked: the host buffers up to the
        // first device buffer.
        for (std::size_t i = 1; i < op->count; ++i) {
            if (s.is_device(op->iov[i].buffer)) {
                op->count = i;
                break;
            }
        }
        return false;
    }
    // The first buffer alone, in chunks, each an ordinary write of the stream.
    op->count = 1;
    op->partial_on_error = true;
    const std::shared_ptr<stream_impl> keep = st.shared_from_this();
    keep->staged_write_began();
    device_staging::stage_options options;
    options.mode = staging_mode::chunked;
    options.cancel = device_staging::cancel_policy::none;
    options.on_end = [keep] { keep->staged_write_ended(); };
    s.stage(
        op, staging_direction::outgoing, op->iov[0].buffer, op->iov[0].length,
        [keep](device_staging::entry&, void* host, std::size_t n, device_staging::completion done) {
            auto* t = staging_internal_op<bytes_result<stream_write_op>>(
                *keep->worker(),
                [done = std::move(done)](const error_code& ec, std::size_t bytes) mutable {
                    done(ec, bytes);
                });
            t->iov[0].buffer = host;
            t->iov[0].length = n;
            t->count = 1;
            keep->write_direct(t);
        },
        std::move(options));
    return true;
}

bool staged_stream_read(device_staging& s, stream_impl& st, transfer_op* op,
                        const boost::asio::mutable_buffer* bufs, std::size_t& n) noexcept {
    std::size_t first = 0;
    while (first < n && bufs[first].size() == 0)
        ++first;
    if (first == n)
        return false;
    if (!s.is_device(bufs[first].data())) {
        // Read into the host buffers up to the first device buffer.
        for (std::size_t i = first + 1; i < n; ++i) {
            if (bufs[i].size() > 0 && s.is_device(bufs[i].data())) {
                n = i;
                break;
            }
        }
        return false;
    }
    // At most one chunk, read as one (shorter) transfer into a pinned buffer.
    op->partial_on_error = true;
    const std::size_t size = std::min(bufs[first].size(), s.chunk());
    device_staging::stage_options options;
    options.cancel = device_staging::cancel_policy::transfer;
    s.stage(
        op, staging_direction::incoming, bufs[first].data(), size,
        [keep = st.shared_from_this()](device_staging::entry& e, void* host, std::size_t len,
                                       device_staging::completion done) {
            const boost::asio::mutable_buffer b(host, len);
            keep->read_direct(staging_bytes_op(*keep->worker(), e, std::move(done)), &b, 1);
        },
        std::move(options));
    return true;
}

} // namespace ucx::detail
