// Internal: the connection layer of a group (one join's connections to the
// other ranks), free of I/O.
//
// A join makes one fabric: the worker's address acceptor and one connection
// to each other rank, shared by the groups split from it. The lower rank of a
// pair connects (right after the join, or on first use with lazy
// connections) and says who it is in the connection's first message (the
// introduction); the higher rank accepts, reads it and answers with its own
// rank. Both then send and receive over that one connection. (UCX pairs the
// endpoints two workers create to each other in the order they create them,
// so both ranks of a pair connecting at once would cross their handshakes:
// one side connects.) Each side learns the id of its own endpoint to the peer
// (its "inbox": the high half of the UCX tag of what arrives on it) from the
// first message the peer sends on it, the introduction or the answer.
//
// A peer is `none` (no connection), `connecting` (this rank connects),
// `ready` (usable) or `done` (closed, failed, or refused once the fabric
// failed or left). Operations that need a peer that is not ready wait for
// it: the higher rank is connected on first use; a lower rank that does not
// connect within the handshake timeout (connections made at the join) fails
// the fabric. A failure (a connection that cannot be made or fails, an abort
// notice from a peer, a lower rank that never connects, or the groups'
// own) fails every group of the fabric and sends the abort notice on every
// ready connection, so the failure reaches the ranks each peer talks to in
// turn. A leave (the last group closed) closes every connection gracefully;
// the peers see this rank leave (eof), which is not a failure until an
// operation needs it.
//
// `fabric_fsm` takes the events (the join's start, an operation that needs a
// peer, a connection made or accepted, the introduction and the answer, an
// endpoint's failure, an abort notice, a handshake timer, the fabric's
// failure, the leave) and answers with the actions the fabric must execute,
// in order. The connection of an event (one just made or accepted) is "this
// event's endpoint" to the actions; a peer's connection, once adopted, is the
// peer's. Unit tests drive it step by step and several of them against each
// other in memory.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <vector>

namespace ucx::detail {

enum class fabric_peer_state : std::uint8_t { none, connecting, ready, done };

/// What the fabric logs (the I/O object words it): each once, when it happens.
enum class fabric_report : std::uint8_t {
    did_not_connect, ///< a lower rank did not connect within the handshake timeout
    connect_failed,  ///< connecting to `peer` failed with `ec`
    accept_failed,   ///< accepting a connection failed with `ec`
    stranger,        ///< an accepted connection is not a lower rank's (closed)
    peer_left,       ///< `peer` closed its side gracefully
    peer_failed,     ///< `peer`'s connection failed with `ec`
    peer_aborted,    ///< `peer` sent the abort notice
    failed,          ///< the fabric failed with `ec`
};

enum class fabric_action_type : std::uint8_t {
    accept,              ///< accept the next connection (then accepted)
    connect,             ///< connect to `peer` (then connected)
    identify,            ///< read this event's endpoint's first message (then introduced)
    adopt,               ///< this event's endpoint becomes `peer`'s connection
    introduce,           ///< on `peer`'s new connection: wait for the answer (then
                         ///< answered), send who this rank is
    answer,              ///< on `peer`'s connection: send who this rank is
    watch,               ///< watch `peer`'s connection for failure (then endpoint_failed)
                         ///< and for its abort notice (then abort_received)
    arm_timer,           ///< `peer`'s handshake timer for `ms` (then timer_expired)
    cancel_timer,        ///< cancel `peer`'s handshake timer
    run_waiting,         ///< run the operations waiting for `peer` with `ec` (empty: ready)
    introduce_and_abort, ///< on this event's endpoint (made after this rank failed): who
                         ///< this is, the abort notice, then a forced close
    close_new,           ///< force-close this event's endpoint
    send_abort,          ///< send the abort notice on `peer`'s connection, then force-close it
    close_force,         ///< force-close `peer`'s connection (it failed)
    close_graceful,      ///< close `peer`'s connection gracefully (the leave waits for it)
    close_acceptor,      ///< stop accepting
    fail_groups,         ///< every group of the fabric fails with `ec`
    inboxes_changed,     ///< to the groups: the id of `peer`'s connection is known
    peer_left,           ///< to the groups: `peer` closed its side gracefully
    report,              ///< log `report` (about `peer`, with `ec`)
};

struct fabric_action {
    fabric_action_type type{};
    int peer = -1;
    fabric_report report{};
    std::uint64_t ms = 0;
    boost::system::error_code ec{};

    friend bool operator==(const fabric_action&, const fabric_action&) = default;
};

/// The actions of one event, in order. (Events come once per connection or
/// failure, never per message.)
using fabric_actions = std::vector<fabric_action>;

class fabric_fsm {
public:
    using error_code = boost::system::error_code;

    struct params {
        int rank = 0;
        int size = 1;
        /// Connections to the higher ranks on first use.
        bool lazy = false;
        /// How long a lower rank may take to connect, in ms (0: no limit;
        /// not with lazy connections, where it connects when it needs this
        /// rank).
        std::uint64_t handshake_timeout_ms = 0;
        /// What the fabric fails with when the cause is its own (a connection
        /// that cannot be made or fails, a peer's abort notice, a lower rank
        /// that does not connect): the library's group_failed.
        error_code failure{};
    };

    explicit fabric_fsm(const params& p);

    /// The join is done: accept the lower ranks' connections and connect to
    /// the higher ranks (now, or on first use). Once.
    fabric_actions start();

    /// What an operation that needs `who`'s connection does.
    enum class need_answer : std::uint8_t {
        ready, ///< go on at once
        wait,  ///< wait (run_waiting of `who` runs it)
        gone,  ///< fail with `ec`: the connection is done
    };
    struct need_result {
        need_answer answer{};
        error_code ec{};
        fabric_actions actions;
    };
    /// An operation needs `who`'s connection (`who` is another rank; the
    /// fabric has not failed).
    need_result need(int who);
    /// `who` may send here: a higher rank waits for this one to connect, so
    /// connect now (lazy connections).
    fabric_actions want(int who);

    /// The connection to `to` was made (`ec` empty) or could not be.
    fabric_actions connected(int to, const error_code& ec);
    /// The accepting rank's answer on the connection made to `to`: `valid`
    /// when it came whole, well formed and from `to`; `inbox` is this side's
    /// endpoint id it arrived with.
    fabric_actions answered(int to, bool valid, std::uint32_t inbox);
    /// A connection was accepted (`ec` empty; operation_aborted once the
    /// acceptor is closed) or accepting failed.
    fabric_actions accepted(const error_code& ec);
    /// The first message of an accepted connection: `ec` from its receive;
    /// `valid` when it came whole and well formed, from rank `who`; `inbox`
    /// as for answered.
    fabric_actions introduced(const error_code& ec, bool valid, int who, std::uint32_t inbox);
    /// `who`'s connection reported `ec`: eof when the peer closed gracefully,
    /// operation_aborted or bad_descriptor when closed here.
    fabric_actions endpoint_failed(int who, const error_code& ec);
    /// `who` sent the abort notice.
    /// (`why`: the error the notice gives, if it gives one the fabric fails
    /// with rather than its failure: collective_mismatch.)
    fabric_actions abort_received(int who, const error_code& why = {});
    /// `who`'s handshake timer expired (not cancelled).
    fabric_actions timer_expired(int who);
    /// Fails the fabric with `ec` (once; later calls do nothing).
    fabric_actions fail(const error_code& ec);
    /// Leaves gracefully (no group uses the fabric any more), unless it
    /// failed or left already.
    fabric_actions leave();

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return static_cast<int>(peers_.size()); }
    const error_code& failed() const noexcept { return failed_; }
    bool leaving() const noexcept { return leaving_; }
    fabric_peer_state state(int who) const noexcept { return peers_[who].state; }
    bool ready(int who) const noexcept { return peers_[who].state == fabric_peer_state::ready; }
    /// Operations waiting for `who`.
    std::size_t waiting(int who) const noexcept { return peers_[who].waiting; }
    bool timer_armed(int who) const noexcept { return peers_[who].timer_armed; }
    /// Whether `who` closed its side gracefully.
    bool has_left(int who) const noexcept { return peers_[who].left; }
    /// The rank whose connection has the endpoint id `inbox` here, or -1.
    int peer_of_inbox(std::uint32_t inbox) const noexcept;
    /// Whether the endpoint id of every connection that may still bring a
    /// message is known.
    bool knows_every_inbox() const noexcept;
    /// Connections ready to other ranks.
    int connections() const noexcept;
    /// Accepted connections whose introduction is still to come.
    int identifying() const noexcept { return identifying_; }

private:
    struct peer {
        fabric_peer_state state = fabric_peer_state::none;
        std::size_t waiting = 0;
        bool timer_armed = false;
        /// The handshake timer was armed once (it is never armed again).
        bool timer_used = false;
        bool has_inbox = false;
        bool left = false;
        std::uint32_t inbox = 0;
    };

    void connect(fabric_actions& out, int to);
    /// `who`'s connection (adopted) is usable.
    void ready(fabric_actions& out, int who);
    void cancel_timer(fabric_actions& out, int who);
    void run_waiting(fabric_actions& out, int who, const error_code& ec);
    void fail(fabric_actions& out, const error_code& ec);

    int rank_;
    bool lazy_;
    std::uint64_t handshake_timeout_ms_;
    error_code failure_;
    std::vector<peer> peers_;
    error_code failed_{};
    bool started_ = false;
    bool leaving_ = false;
    int identifying_ = 0;
};

} // namespace ucx::detail
