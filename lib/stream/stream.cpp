#include <ucx/endpoint.hpp>
#include <ucx/error.hpp>
#include <ucx/stream.hpp>

#include "connection/control_channel.hpp"
#include "engine/request_param.hpp"
#include "gpu/device_staging.hpp"
#include "stream/stream_impl.hpp"

#include <boost/asio/error.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace ucx::detail {

error_code socket_error(const error_code& ec) noexcept {
    // A peer that vanished: UCX says reset, or endpoint timeout when a
    // killed process's connection is torn down.
    if (ec && ec.category() == error_category() &&
        (ec.value() == static_cast<int>(errc::connection_reset) ||
         ec.value() == static_cast<int>(errc::endpoint_timeout)))
        return boost::asio::error::connection_reset;
    return ec;
}

stream_impl::stream_impl(std::shared_ptr<worker_impl> w)
    : worker_(std::move(w)), timer_(worker_->get_executor()) {}

stream_impl::~stream_impl() {
    close();
    worker_->forget(*this);
}

void stream_impl::assign(std::shared_ptr<endpoint_impl> ep, error_code& ec) noexcept {
    if (!ep) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    if (ep_) {
        ec = boost::asio::error::already_open;
        return;
    }
    const bool plain = ep->kind() == endpoint_impl::role::plain_client ||
                       ep->kind() == endpoint_impl::role::plain_server;
    if (ep->kind() != endpoint_impl::role::client && ep->kind() != endpoint_impl::role::server &&
        !plain) {
        // No goodbye on such endpoints, so no honest end of stream.
        ec = make_error_code(error::not_connected);
        return;
    }
    if (ep->worker() != worker_) {
        ec = make_error_code(error::wrong_worker);
        return;
    }
    try {
        // Room for the chunks of a full flow-control window in shared
        // memory's 32 KiB segments (256 of them, 4 KiB), so that a reader
        // catching up after falling a window behind allocates nothing; and
        // for a few writes waiting for the window.
        held_.reserve(window / (std::uint64_t{32} << 10));
        blocked_.reserve(8);
    } catch (...) {
        ec = make_error_code(error::allocation_failed);
        return;
    }
    ep_ = std::move(ep);
    ep_->set_watcher(this);
    ucx_empty_at_ = never;
    closed_ = false;
    recv_error_ = {};
    // A plain peer (any UCX program) sends no acknowledgements: no flow
    // control, as with UCX's stream API itself.
    constexpr auto unlimited = std::numeric_limits<std::uint64_t>::max();
    fsm_ = stream_fsm(plain ? stream_config{unlimited, unlimited} : stream_config{});
    // The peer may have ended its stream before this stream started.
    if (auto total = ep_->peer_stream_end())
        fsm_.on_peer_end(*total, ep_->peer_said_goodbye());
    // Data may have arrived already: take it out of UCX's queue.
    update_watch();
    while (pull()) {
    }
    ec = {};
}

bool stream_impl::is_open() const noexcept {
    return ep_ && !closed_;
}

void stream_impl::release_first() noexcept {
    if (ep_ && ep_->native())
        ucp_stream_data_release(ep_->native(), held_[held_first_].data);
    held_off_ = 0;
    if (++held_first_ == held_.size()) {
        held_.clear();
        held_first_ = 0;
    }
}

void stream_impl::release_held() noexcept {
    while (held_first_ < held_.size())
        release_first();
}

void stream_impl::update_watch() noexcept {
    const bool idle = ep_ && ep_->native() && reads_.empty();
    if (idle != watched_) {
        watched_ = idle;
        worker_->watch_streams(idle, &take_stream_data);
    }
}

void stream_impl::detach_endpoint() noexcept {
    if (watched_) {
        watched_ = false;
        worker_->watch_streams(false, &take_stream_data);
    }
    release_held();
    drained_.clear();
    drained_off_ = 0;
    if (ep_)
        ep_->set_watcher(nullptr);
}

std::shared_ptr<endpoint_impl> stream_impl::shut_local() noexcept {
    closed_ = true;
    expires_never();
    fail_reads(boost::asio::error::operation_aborted);
    detach_endpoint();
    return std::exchange(ep_, nullptr);
}

void stream_impl::close() noexcept {
    if (!ep_)
        return;
    // Written data is still delivered: the waiting writes go now.
    resume_writes(true);
    // The close runs in the background; its operation keeps the endpoint alive.
    shut_local()->close_in_background(fsm_.bytes_written());
}

void stream_impl::close(endpoint_op* op) noexcept {
    worker_impl& w = *worker_;
    if (!ep_) {
        w.start(op);
        return w.complete(op, error_code());
    }
    resume_writes(true);
    auto ep = shut_local();
    ep->close_gracefully(op, fsm_.bytes_written());
}

void stream_impl::abort() noexcept {
    if (!ep_)
        return;
    fail_blocked(boost::asio::error::operation_aborted);
    auto ep = shut_local();
    ep->force_close(boost::asio::error::operation_aborted);
}

void stream_impl::cancel() noexcept {
    // Reads, and the writes that wait (for the reader's room or behind a
    // staged write): nothing of those was sent. UCX's writes go on.
    fail_reads(boost::asio::error::operation_aborted);
    fail_blocked(boost::asio::error::operation_aborted);
}

void stream_impl::shutdown_send(error_code& ec) noexcept {
    if (!ep_) {
        ec = closed_ ? error_code(boost::asio::error::bad_descriptor)
                     : error_code(boost::asio::error::not_connected);
        return;
    }
    ec = {};
    if (fsm_.send_shut())
        return;
    // The end marker counts every byte written, the waiting ones too.
    resume_writes(true);
    fsm_.shutdown_send();
    // The count makes ordering irrelevant: the peer reads eof once it has
    // read that many bytes, however the marker and the data travel.
    if (ep_)
        ep_->send_stream_end(fsm_.bytes_written());
}

boost::asio::ip::tcp::endpoint stream_impl::address(bool remote, error_code& ec) const {
    sockaddr_storage ss{};
    if (!ep_ || closed_ || !ep_->native()) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    if (!ep_->query_sockaddr(remote, ss)) {
        ec = make_error_code(error::no_socket_address); // made from a worker address
        return {};
    }
    ec = {};
    return to_tcp_endpoint(ss);
}

// ---- timeouts ----

bool stream_impl::deadline_passed() const noexcept {
    return deadline_ != clock_type::time_point::max() && deadline_ <= clock_type::now();
}

void stream_impl::expires_at(clock_type::time_point t) {
    deadline_ = t;
    timer_.start_at(t, weak_from_this(), [](stream_impl& self, const error_code& ec) {
        if (!ec)
            self.on_timeout();
    });
}

void stream_impl::expires_never() noexcept {
    deadline_ = clock_type::time_point::max();
    timer_.cancel();
}

void stream_impl::on_timeout() noexcept {
    // Reads end with timed_out and the stream stays usable; writes cannot be
    // taken back from UCX, so, as Beast does, the stream is closed under them.
    fail_reads(boost::asio::error::timed_out);
    fail_blocked(boost::asio::error::timed_out);
    if (ep_ && ep_->native() && ep_->sends_in_flight() > 0) {
        closed_ = true;
        detach_endpoint();
        auto ep = std::move(ep_);
        ep_.reset();
        ep->force_close(boost::asio::error::timed_out);
    }
}

// ---- writes ----

namespace {
std::size_t total_of(const stream_write_op& op) noexcept {
    std::size_t total = 0;
    for (std::size_t i = 0; i < op.count; ++i)
        total += op.iov[i].length;
    return total;
}
} // namespace

void stream_impl::write(stream_write_op* op) noexcept {
    if (device_staging* s = staging_of(*worker_)) [[unlikely]] {
        if (staged_writes_ > 0) {
            // Behind a staged write, in order.
            try {
                behind_staged_.push_back(op);
            } catch (...) {
                worker_->start(op);
                worker_->complete(op, make_error_code(error::allocation_failed));
            }
            return;
        }
        if (staged_stream_write(*s, *this, op))
            return;
    }
    write_direct(op);
}

void stream_impl::staged_write_ended() noexcept {
    --staged_writes_;
    // In order; one that is staged again makes the rest wait again.
    auto waiting = std::move(behind_staged_);
    behind_staged_.clear();
    for (stream_write_op* op : waiting)
        write(op);
}

void stream_impl::write_direct(stream_write_op* op) noexcept {
    worker_impl& w = *worker_;
    const std::size_t total = total_of(*op);
    const write_decision decision = fsm_.start_write(total, !blocked_.empty());
    if (!ep_ || deadline_passed() || decision == write_decision::broken_pipe) {
        w.start(op);
        if (!ep_)
            return w.complete(op, closed_ ? error_code(boost::asio::error::bad_descriptor)
                                          : error_code(boost::asio::error::not_connected));
        if (deadline_passed())
            return w.complete(op, boost::asio::error::timed_out);
        // Shut down here, or the peer closed: nobody reads any more.
        return w.complete(op, boost::asio::error::broken_pipe);
    }
    if (decision == write_decision::wait) {
        // Flow control: wait (in order) until the reader makes room. Until
        // then the library holds it, and any cancellation ends it.
        w.start(op);
        if (op->cancel_requested) // while it waited behind a staged write
            return w.complete(op, boost::asio::error::operation_aborted);
        try {
            blocked_.push_back(op);
        } catch (...) {
            w.complete(op, make_error_code(error::allocation_failed));
            return;
        }
        op->library_owned = true;
        op->cancel_hook = &stream_impl::cancel_blocked_write;
        op->cancel_context = this;
        return;
    }
    submit(op, total);
}

void stream_impl::cancel_blocked_write(operation* op, boost::asio::cancellation_type) noexcept {
    auto* self = static_cast<stream_impl*>(op->cancel_context);
    auto it = std::find(self->blocked_.begin(), self->blocked_.end(), op);
    if (it == self->blocked_.end())
        return;
    self->blocked_.erase(it);
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void stream_impl::submit(stream_write_op* op, std::size_t total) noexcept {
    // Out of the flow-control wait (if it was there): UCX's from now on.
    op->library_owned = false;
    op->cancel_hook = nullptr;
    op->cancel_context = nullptr;
    if (!ep_->begin(op, total > 0))
        return;
    if (total == 0)
        return worker_->complete(op, error_code());
    ucp_request_param_t param = send_param(&worker_impl::send_callback, op);
    op->bytes = total;
    ucs_status_ptr_t r;
    if (op->count == 1) {
        r = ucp_stream_send_nbx(ep_->native(), op->iov[0].buffer, total, &param);
    } else {
        // UCX reads the IOV array, which lives in the operation, until the
        // send completes.
        add_datatype(param, ucp_dt_make_iov());
        r = ucp_stream_send_nbx(ep_->native(), op->iov, op->count, &param);
    }
    if (!UCS_PTR_IS_ERR(r))
        fsm_.on_sent(total);
    ep_->submitted(op, r);
}

// ---- flow control ----

void stream_impl::resume_writes(bool force) noexcept {
    if (blocked_.empty())
        return;
    if (!ep_ || !ep_->is_open()) {
        error_code ec = boost::asio::error::broken_pipe;
        if (ep_ && ep_->error() && ep_->error() != boost::asio::error::eof)
            ec = socket_error(ep_->error());
        return fail_blocked(ec);
    }
    std::size_t i = 0;
    for (; i < blocked_.size() && ep_ && (force || !fsm_.window_full()); ++i)
        submit(blocked_[i], total_of(*blocked_[i]));
    blocked_.erase(blocked_.begin(), blocked_.begin() + static_cast<std::ptrdiff_t>(i));
}

void stream_impl::fail_blocked(const error_code& ec) noexcept {
    worker_impl& w = *worker_;
    for (stream_write_op* op : blocked_) {
        w.start(op);
        w.complete(op, ec);
    }
    blocked_.clear();
    for (stream_write_op* op : std::exchange(behind_staged_, {})) {
        w.start(op);
        w.complete(op, ec);
    }
}

void stream_impl::peer_stream_acked(std::uint64_t bytes) noexcept {
    // The peer read this many stream bytes: waiting writes may go on.
    if (fsm_.on_peer_acked(bytes))
        resume_writes(false);
}

void stream_impl::peer_stream_end(std::uint64_t total, bool goodbye) noexcept {
    fsm_.on_peer_end(total, goodbye);
}

void stream_impl::maybe_ack() noexcept {
    if (!fsm_.ack_due() || !ep_ || !ep_->is_open() || !ep_->has_handshake())
        return;
    // The worker's control channel sends it (a failed send is tried again
    // after the next read).
    if (control_channel::of(*worker_).send(
            ep_->native(), control_message{control_type::stream_ack, fsm_.bytes_read()}))
        fsm_.on_ack_sent();
}

// ---- reads ----

void stream_impl::read(transfer_op* op, const boost::asio::mutable_buffer* bufs,
                       std::size_t n) noexcept {
    if (device_staging* s = staging_of(*worker_); s && staged_stream_read(*s, *this, op, bufs, n))
        [[unlikely]]
        return;
    read_direct(op, bufs, n);
}

void stream_impl::read_direct(transfer_op* op, const boost::asio::mutable_buffer* bufs,
                              std::size_t n) noexcept {
    worker_impl& w = *worker_;
    if (ep_)
        ep_->count(op);
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &stream_impl::cancel_read;
    op->cancel_context = this;
    if (!w.is_open())
        return w.complete(op, boost::asio::error::operation_aborted);
    if (op->cancel_requested)
        return w.complete(op, boost::asio::error::operation_aborted);
    if (!ep_)
        return w.complete(op, closed_ ? error_code(boost::asio::error::bad_descriptor)
                                      : error_code(boost::asio::error::not_connected));
    if (deadline_passed())
        return w.complete(op, boost::asio::error::timed_out);
    try {
        reads_.emplace_back(op);
    } catch (...) {
        return w.complete(op, make_error_code(error::allocation_failed));
    }
    pending_read& r = reads_.back();
    for (std::size_t i = 0; i < n && r.count < max_read_buffers; ++i)
        if (bufs[i].size() != 0)
            r.bufs[r.count++] = {static_cast<std::byte*>(bufs[i].data()), bufs[i].size()};
    if (r.count == 0) {
        // Asio: a read into no space completes at once with 0 bytes.
        reads_.pop_back();
        return w.complete(op, error_code());
    }
    // Data may be there already; the completion still goes through the queue.
    serve();
    w.request_progress();
}

void stream_impl::cancel_read(operation* op, boost::asio::cancellation_type) noexcept {
    auto* self = static_cast<stream_impl*>(op->cancel_context);
    if (!self)
        return;
    auto it = std::find_if(self->reads_.begin(), self->reads_.end(),
                           [op](const pending_read& r) { return r.op == op; });
    if (it == self->reads_.end())
        return;
    self->reads_.erase(it);
    self->update_watch();
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void stream_impl::fail_reads(const error_code& ec) noexcept {
    auto reads = std::move(reads_);
    reads_.clear();
    update_watch();
    for (const pending_read& r : reads)
        worker_->complete(r.op, ec);
}

std::size_t stream_impl::run_deferred(deferred_stage) noexcept {
    return serve();
}

bool stream_impl::pull() noexcept {
    if (!ep_ || !ep_->native() || recv_error_)
        return false;
    const std::uint64_t calls = worker_->ucp_progress_calls();
    if (ucx_empty_at_ == calls)
        return false;
    std::size_t len = 0;
    ucs_status_ptr_t p = ucp_stream_recv_data_nb(ep_->native(), &len);
    if (UCS_PTR_IS_ERR(p)) {
        recv_error_ = make_error_code(UCS_PTR_STATUS(p));
        return false;
    }
    if (p == nullptr) {
        ucx_empty_at_ = calls;
        return false;
    }
    if (len == 0) {
        ucp_stream_data_release(ep_->native(), p);
        return false;
    }
    try {
        // The chunks read to their end stay at the front until the next one
        // would make the vector grow; then they go, so that its capacity
        // follows the most chunks held at once (which the peer's window
        // bounds), not the chunks taken since the reader last caught up.
        if (held_.size() == held_.capacity() && held_first_ != 0) {
            held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(held_first_));
            held_first_ = 0;
        }
        held_.push_back(held_chunk{p, len});
    } catch (...) {
        ucp_stream_data_release(ep_->native(), p);
        recv_error_ = make_error_code(error::allocation_failed);
        return false;
    }
    return true;
}

bool stream_impl::fetch() noexcept {
    // A held chunk is given back as soon as it is read to its end: the first
    // one, if any, has bytes left.
    return held_first_ < held_.size() || drained_off_ < drained_.size() || pull();
}

std::size_t stream_impl::copy_out(pending_read& r) noexcept {
    std::size_t copied = 0;
    for (std::size_t i = 0; i < r.count; ++i) {
        std::byte* dst = r.bufs[i].data;
        std::size_t room = r.bufs[i].size;
        while (room > 0) {
            if (held_first_ < held_.size()) {
                const held_chunk& c = held_[held_first_];
                const std::size_t k = std::min(room, c.size - held_off_);
                std::memcpy(dst, static_cast<const std::byte*>(c.data) + held_off_, k);
                dst += k;
                room -= k;
                copied += k;
                held_off_ += k;
                if (held_off_ == c.size)
                    release_first();
            } else if (drained_off_ < drained_.size()) {
                const std::size_t k = std::min(room, drained_.size() - drained_off_);
                std::memcpy(dst, drained_.data() + drained_off_, k);
                dst += k;
                room -= k;
                copied += k;
                drained_off_ += k;
            } else if (!pull()) {
                break;
            }
        }
        if (room > 0)
            break;
    }
    if (!drained_.empty() && drained_off_ == drained_.size()) {
        drained_.clear();
        drained_.shrink_to_fit();
        drained_off_ = 0;
    }
    return copied;
}

bool stream_impl::end_state(error_code& ec) const noexcept {
    if (!ep_) {
        ec = closed_ ? error_code(boost::asio::error::bad_descriptor)
                     : error_code(boost::asio::error::not_connected);
        return true;
    }
    if (recv_error_) {
        ec = recv_error_;
        return true;
    }
    switch (fsm_.read_end(ep_->native() != nullptr)) {
    case stream_read_end::none:
        return false;
    case stream_read_end::eof:
        ec = boost::asio::error::eof;
        return true;
    case stream_read_end::reset:
        ec = boost::asio::error::connection_reset;
        return true;
    case stream_read_end::failed:
        ec = ep_->error() ? ep_->error() : error_code(boost::asio::error::bad_descriptor);
        if (ec == boost::asio::error::eof)
            ec = boost::asio::error::connection_reset;
        return true;
    }
    return false;
}

std::size_t stream_impl::serve() noexcept {
    std::size_t done = 0;
    worker_impl& w = *worker_;
    while (!reads_.empty()) {
        if (fetch()) {
            pending_read& r = reads_.front();
            const std::size_t n = copy_out(r);
            fsm_.on_read(n);
            transfer_op* op = r.op;
            reads_.erase(reads_.begin());
            op->bytes = n;
            w.complete(op, error_code());
            ++done;
            continue;
        }
        error_code ec;
        if (!end_state(ec))
            break;
        for (const pending_read& r : reads_)
            w.complete(r.op, ec);
        done += reads_.size();
        reads_.clear();
    }
    maybe_ack();
    update_watch();
    if (reads_.empty()) {
        // Nobody reads now: take what UCX queued out of its queue (see the
        // header), so a failure of the endpoint cannot discard it.
        while (pull()) {
        }
    } else {
        // Look again after the next progress call while reads wait.
        w.defer(*this, deferred_stage::stream_data);
    }
    return done;
}

void stream_impl::stream_data_ready() noexcept {
    worker_->defer(*this, deferred_stage::stream_data);
}

void take_stream_data(worker_impl& w) noexcept {
    ucp_stream_poll_ep_t ready[16];
    for (;;) {
        const ssize_t n = ucp_stream_worker_poll(w.native(), ready, std::size(ready), 0);
        for (ssize_t i = 0; i < n; ++i)
            if (endpoint_impl* ep = find_endpoint(w, ready[i].ep))
                if (endpoint_watcher* s = ep->watcher())
                    s->stream_data_ready();
        if (n < static_cast<ssize_t>(std::size(ready)))
            return;
    }
}

void stream_impl::take_received(ucp_ep_h ep) noexcept {
    // The peer closed or failed: waiting writes cannot go any more.
    if (!blocked_.empty() || !behind_staged_.empty()) {
        error_code ec = boost::asio::error::broken_pipe;
        if (!worker_->is_open())
            ec = boost::asio::error::operation_aborted;
        else if (ep_ && !fsm_.peer_said_goodbye() && ep_->error() &&
                 ep_->error() != boost::asio::error::eof)
            ec = socket_error(ep_->error());
        fail_blocked(ec);
    }
    // UCX drops received stream data with its endpoint: keep what was not
    // read, in order (the held chunks, then what UCX still has).
    for (; held_first_ < held_.size(); ++held_first_, held_off_ = 0) {
        const held_chunk& c = held_[held_first_];
        try {
            const auto* p = static_cast<const std::byte*>(c.data);
            drained_.insert(drained_.end(), p + held_off_, p + c.size);
        } catch (...) {
            recv_error_ = make_error_code(error::allocation_failed);
        }
        ucp_stream_data_release(ep, c.data);
    }
    held_.clear();
    held_first_ = held_off_ = 0;
    worker_impl& w = *worker_;
    if (w.native()) {
        for (;;) {
            std::size_t len = 0;
            ucs_status_ptr_t p = ucp_stream_recv_data_nb(ep, &len);
            if (p == nullptr || UCS_PTR_IS_ERR(p))
                break;
            try {
                const auto* b = static_cast<const std::byte*>(p);
                drained_.insert(drained_.end(), b, b + len);
            } catch (...) {
                recv_error_ = make_error_code(error::allocation_failed);
            }
            ucp_stream_data_release(ep, p);
        }
    }
    if (!w.is_open()) {
        // The worker shuts down: nothing will serve the reads any more.
        fail_reads(boost::asio::error::operation_aborted);
        return;
    }
    // The reads learn about the close (and get the data kept) in a pass.
    w.request_progress();
}

} // namespace ucx::detail

// The non-template functions the public headers' templates call (<ucx/stream.hpp>): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

worker_core& core_of(const stream_impl& s) noexcept {
    return *s.worker();
}
std::shared_ptr<stream_impl> make_stream(const std::shared_ptr<worker_impl>& w) {
    return std::make_shared<stream_impl>(w);
}
const std::shared_ptr<worker_impl>& stream_worker(const stream_impl& s) noexcept {
    return s.worker();
}
bool stream_has_endpoint(const stream_impl& s) noexcept {
    return s.endpoint() != nullptr;
}
void stream_assign(stream_impl& s, const std::shared_ptr<endpoint_impl>& ep,
                   error_code& ec) noexcept {
    s.assign(ep, ec);
}
bool stream_is_open(const stream_impl& s) noexcept {
    return s.is_open();
}
void stream_close(stream_impl& s) noexcept {
    s.close();
}
void stream_close(stream_impl& s, endpoint_op* op) noexcept {
    op->kind = operation_kind::close;
    s.close(op);
}
void stream_abort(stream_impl& s) noexcept {
    s.abort();
}
void stream_cancel(stream_impl& s) noexcept {
    s.cancel();
}
void stream_shutdown_send(stream_impl& s, error_code& ec) noexcept {
    s.shutdown_send(ec);
}
boost::asio::ip::tcp::endpoint stream_address(const stream_impl& s, bool remote, error_code& ec) {
    return s.address(remote, ec);
}
void stream_expires_at(stream_impl& s, std::chrono::steady_clock::time_point t) {
    s.expires_at(t);
}
void stream_expires_never(stream_impl& s) noexcept {
    s.expires_never();
}
std::uint64_t stream_bytes_written(const stream_impl& s) noexcept {
    return s.bytes_written();
}
std::uint64_t stream_bytes_read(const stream_impl& s) noexcept {
    return s.bytes_read();
}
void stream_read(stream_impl& s, transfer_op* op, const boost::asio::mutable_buffer* bufs,
                 std::size_t n) noexcept {
    op->kind = operation_kind::stream_read;
    s.read(op, bufs, n);
}
void stream_write(stream_impl& s, stream_write_op* op) noexcept {
    op->kind = operation_kind::stream_write;
    s.write(op);
}

} // namespace ucx::detail
