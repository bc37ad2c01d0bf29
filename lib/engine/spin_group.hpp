// Internal: the polling workers of one io_context spin in turn.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>
#include <vector>

namespace ucx::detail {

class worker_impl;

/// The workers in poll or hybrid mode whose executor is one io_context's
/// (a plain io_context executor, run by one thread) form that io_context's
/// spin group. Alone, a worker spins inside its own handler for its spin
/// slice. With two or more, each would spin its whole slice while the peer
/// it waits for (often another worker of the same thread) gets no turn:
/// two workers pinging each other on one thread measured 100 µs a round
/// trip in poll mode. In a group a quiet step *parks* the pass instead
/// (`progress_step::park`), and one handler, the group's turn, runs every
/// parked worker's pass once, round robin, until none is parked or the
/// slice (the smallest `shared_spin_slice` of its members) is spent; then
/// it yields in two hops, so the io_context's timers, sockets and other
/// handlers run between slices.
///
/// Everything runs on the io_context's thread, or while no thread runs it
/// (the thread model of a worker: constructed, closed and destroyed there).
class spin_group {
public:
    using clock = std::chrono::steady_clock;

    /// The spin group of `ctx` (kept by an io_context service).
    static spin_group& of(boost::asio::io_context& ctx);

    explicit spin_group(boost::asio::io_context& ctx) : ctx_(ctx) {}
    spin_group(const spin_group&) = delete;
    spin_group& operator=(const spin_group&) = delete;

    /// `w` (poll or hybrid mode) joins; once two are members, each spins in
    /// turns (`progress_fsm::set_shared_spin`).
    void join(worker_impl& w);
    /// `w` leaves (it shuts down); idempotent.
    void leave(worker_impl& w) noexcept;
    /// `w`'s pass parked: it continues in the group's next turn.
    void park(worker_impl& w);

    std::size_t members() const noexcept { return members_.size(); }

private:
    void run_turns();
    void update_sharing() noexcept;

    boost::asio::io_context& ctx_;
    std::vector<worker_impl*> members_;
    /// Parked for the next turn, and the turn running now.
    std::vector<worker_impl*> parked_;
    std::vector<worker_impl*> turn_;
    /// A turn is posted or running (parking needs no new post).
    bool scheduled_ = false;
    std::chrono::nanoseconds slice_{std::chrono::microseconds(50)};
};

} // namespace ucx::detail
