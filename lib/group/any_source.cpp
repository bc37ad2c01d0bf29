// Receives from any rank. Underneath, a connection's message is a UCX tag
// message with the receiving endpoint's random id in the high 32 bits of the
// UCX tag and the 32-bit tag above in the low half; the ids of the fabric's
// connections, and only theirs, have bit 63 set (fabric_tag, lib/connection/endpoint_impl.hpp).
// An any-source receive is one UCX receive on the worker whose mask covers
// the low half and that bit: UCX
// matches each arriving message against the posted receives in the order they
// were posted (this one beside the per-rank receives), or keeps it for the
// first receive posted later, so each message is taken by exactly one receive,
// in the order its sender sent it, as for any receive. No message is received
// to be given back: the rejected alternative, a receive on every peer's
// connection with the others cancelled once one completed, loses the message
// that a cancelled receive had already matched (UCX cannot cancel those), and
// duplicates its buffer. The sender is the connection whose id is in the high
// half of the received UCX tag: each side learns the id of its endpoint to
// each peer from the first message the peer sends on it (the identification
// and its answer), which precedes every other message of that peer. The low
// half holds the group's id, so the group's own members are the only senders
// that can match (a rank has one group per id, and its peers send with that
// id only to members of it), and no connection outside the fabric can match
// whatever its tag.
#include "group/group_impl.hpp"

namespace ucx::detail {

namespace {

using namespace group_wire;

} // namespace

// --- receives from any rank ---

void group_impl::recv_any(void* data, std::size_t size, tag_t tag, group_from_handler h) {
    if (error_)
        return post(std::move(h), error_, std::size_t{0}, any_rank);
    if (tag > group_max_tag)
        return post(std::move(h), make_error_code(boost::asio::error::invalid_argument),
                    std::size_t{0}, any_rank);
    auto r = std::make_shared<any_recv>(std::move(h));
    r->data = data;
    r->size = size;
    r->tag = user_tag(id_, static_cast<std::uint32_t>(tag));
    auto slot = boost::asio::get_associated_cancellation_slot(r->handler);
    if (slot.is_connected())
        slot.assign([weak = std::weak_ptr<any_recv>(r)](boost::asio::cancellation_type type) {
            using ct = boost::asio::cancellation_type;
            auto r = weak.lock();
            if (!r || r->done || (type & (ct::terminal | ct::partial | ct::total)) == ct::none)
                return;
            r->cancelled = true;
            if (r->posted)
                r->signal.emit(ct::terminal);
        });
    any_.push_back(r);
    // Every other member may send: the higher ones wait for this rank's
    // connection (made on first use).
    for (int m : members_)
        fabric_->want(m);
    post_any(r);
    // No other member can send any more: messages they sent before are
    // taken by the receive just posted, else it ends (after the submission,
    // which may have been dispatched).
    if (others_left())
        boost::asio::post(executor(), [self = shared_from_this(), r] {
            if (self->others_left())
                self->stop_any(r, boost::asio::error::eof);
        });
}

void group_impl::post_any(const std::shared_ptr<any_recv>& r) {
    r->posted = true;
    initiate<void(error_code, std::size_t, tag_t), tag_recv_result>(
        fabric_->worker(),
        boost::asio::bind_cancellation_slot(
            r->signal.slot(),
            [self = shared_from_this(), r](error_code ec, std::size_t n, tag_t t) {
                self->any_done(r, ec, n, t);
            }),
        [data = r->data, size = r->size, tag = r->tag](worker_impl& w, tag_recv_op* op) {
            // The group's tag in the low half, from any of the fabric's
            // connections (the fabric bit in the high half).
            // Through the submit function: a device buffer is staged.
            detail::tag_recv(w, op, data, size, fabric_tag_bit | tag,
                             fabric_tag_bit | tag_t{0xFFFFFFFFu});
        });
}

void group_impl::any_done(const std::shared_ptr<any_recv>& r, error_code ec, std::size_t n,
                          tag_t t) {
    r->posted = false;
    if (!ec) {
        r->parked = true;
        r->parked_bytes = n;
        r->parked_tag = t;
        return resolve_any(r);
    }
    // The group's end wins over what its cancellation caused; after eof, a
    // message that was consumed (too large) is still reported.
    if (r->stop &&
        (r->stop != boost::asio::error::eof || ec == boost::asio::error::operation_aborted))
        ec = r->stop;
    finish_any(r, ec, any_rank, 0);
}

void group_impl::resolve_any(const std::shared_ptr<any_recv>& r) {
    const bool ended = r->stop && r->stop != boost::asio::error::eof;
    const int from = rank_of_inbox(inbox_of(r->parked_tag));
    if (from >= 0) {
        // A member's message: delivered, even when cancelled meanwhile (it
        // matched first), or after every other rank left (sent before).
        r->parked = false;
        if (ended)
            return finish_any(r, r->stop, any_rank, 0);
        return finish_any(r, {}, from, r->parked_bytes);
    }
    // A connection whose id is still to come (its first message, which
    // tells it, precedes this one) waits for it, unless the receive ends.
    if (!fabric_->knows_every_inbox() && !r->stop)
        return;
    r->parked = false;
    if (!r->stop)
        group_log(log::severity::warning,
                  "group: a receive from any rank took a message of a connection of no member; "
                  "dropped");
    if (r->stop)
        return finish_any(r, r->stop, any_rank, 0);
    if (r->cancelled)
        return finish_any(r, make_error_code(boost::asio::error::operation_aborted), any_rank, 0);
    post_any(r);
}

void group_impl::stop_any(const std::shared_ptr<any_recv>& r, error_code why) {
    if (r->done || r->stop)
        return;
    r->stop = why;
    if (r->posted)
        r->signal.emit(boost::asio::cancellation_type::terminal);
    else if (r->parked)
        resolve_any(r);
}

void group_impl::finish_any(const std::shared_ptr<any_recv>& r, error_code ec, int from,
                            std::size_t n) {
    r->done = true;
    std::erase(any_, r);
    auto slot = boost::asio::get_associated_cancellation_slot(r->handler);
    if (slot.is_connected())
        slot.clear();
    // Posted: this may run inside failed(), called from an initiating
    // function (abort) or from the fabric's failure.
    auto h = std::move(r->handler);
    post(std::move(h), ec, n, from);
}

} // namespace ucx::detail
