// Fuzz target: the group's connection layer (fabric_fsm) driven by any
// sequence of events, with any rank, size, laziness and timeout. Checked
// after every event, against a model of what the fabric executes:
// - an action on a peer's connection (introduce, answer, watch, the closes,
//   the abort notice) only once it was adopted, and not after it was closed;
//   an adoption only with the event's own endpoint, once per peer;
// - the operations waiting for a peer run exactly once (the machine's count
//   matches the model's), and a ready peer has none waiting;
// - a handshake timer is armed at most once per peer and only cancelled
//   while armed; the groups fail at most once, and only when the fabric has
//   failed; once failed, nothing is connected, accepted or watched any more;
// - need answers ready exactly for a ready peer, gone for a done one.
#include "fuzz.hpp"

#include "group/fabric_fsm.hpp"

#include <boost/asio/error.hpp>

#include <vector>

namespace ucx::fuzz {

void fabric_fsm(input data) {
    using detail::fabric_action_type;
    using detail::fabric_peer_state;
    namespace aerr = boost::asio::error;
    using ec_t = boost::system::error_code;
    reader r(data);
    const int size = 1 + r.byte() % 8;
    const int rank = r.byte() % size;
    const bool lazy = r.flag();
    const std::uint64_t timeout = r.byte() % 3 * 500;
    detail::fabric_fsm f({.rank = rank,
                          .size = size,
                          .lazy = lazy,
                          .handshake_timeout_ms = timeout,
                          .failure = aerr::connection_aborted});
    struct model {
        bool adopted = false;
        bool closed = false;
        bool timer = false;
        bool timer_used = false;
        std::size_t waiting = 0;
    };
    std::vector<model> m(static_cast<std::size_t>(size));
    bool groups_failed = false;
    const ec_t errors[] = {aerr::eof, aerr::connection_reset, aerr::operation_aborted,
                           aerr::bad_descriptor};

    auto peer = [&] { return static_cast<int>(r.byte() % size); };
    auto apply = [&](const detail::fabric_actions& actions, bool fresh) {
        for (const auto& a : actions) {
            const bool on_peer = a.peer >= 0 && a.peer < size;
            switch (a.type) {
            case fabric_action_type::adopt:
                UCX_ASIO_FUZZ_CHECK(fresh && on_peer && a.peer != rank);
                UCX_ASIO_FUZZ_CHECK(!m[a.peer].adopted);
                m[a.peer].adopted = true;
                break;
            case fabric_action_type::introduce:
            case fabric_action_type::answer:
            case fabric_action_type::watch:
                UCX_ASIO_FUZZ_CHECK(on_peer && m[a.peer].adopted && !m[a.peer].closed);
                UCX_ASIO_FUZZ_CHECK(!f.failed());
                break;
            case fabric_action_type::send_abort:
            case fabric_action_type::close_force:
            case fabric_action_type::close_graceful:
                UCX_ASIO_FUZZ_CHECK(on_peer && m[a.peer].adopted && !m[a.peer].closed);
                m[a.peer].closed = true;
                break;
            case fabric_action_type::identify:
            case fabric_action_type::close_new:
            case fabric_action_type::introduce_and_abort:
                UCX_ASIO_FUZZ_CHECK(fresh);
                break;
            case fabric_action_type::connect:
                UCX_ASIO_FUZZ_CHECK(on_peer && a.peer > rank && !f.failed() && !f.leaving());
                UCX_ASIO_FUZZ_CHECK(f.state(a.peer) == fabric_peer_state::connecting);
                break;
            case fabric_action_type::accept:
                UCX_ASIO_FUZZ_CHECK(!f.failed() && !f.leaving());
                break;
            case fabric_action_type::arm_timer:
                UCX_ASIO_FUZZ_CHECK(on_peer && a.peer < rank && !m[a.peer].timer_used);
                UCX_ASIO_FUZZ_CHECK(a.ms == timeout && !lazy);
                m[a.peer].timer = m[a.peer].timer_used = true;
                break;
            case fabric_action_type::cancel_timer:
                UCX_ASIO_FUZZ_CHECK(on_peer && m[a.peer].timer);
                m[a.peer].timer = false;
                break;
            case fabric_action_type::run_waiting:
                UCX_ASIO_FUZZ_CHECK(on_peer && m[a.peer].waiting > 0);
                m[a.peer].waiting = 0;
                break;
            case fabric_action_type::fail_groups:
                UCX_ASIO_FUZZ_CHECK(!groups_failed && f.failed() && a.ec == f.failed());
                groups_failed = true;
                break;
            case fabric_action_type::close_acceptor:
            case fabric_action_type::inboxes_changed:
            case fabric_action_type::peer_left:
            case fabric_action_type::report:
                break;
            }
        }
        for (int j = 0; j < size; ++j) {
            UCX_ASIO_FUZZ_CHECK(f.waiting(j) == m[j].waiting);
            if (f.ready(j)) {
                UCX_ASIO_FUZZ_CHECK(m[j].adopted && !m[j].closed && m[j].waiting == 0);
                UCX_ASIO_FUZZ_CHECK(!f.failed() && !f.leaving());
            }
            UCX_ASIO_FUZZ_CHECK(f.timer_armed(j) == m[j].timer);
        }
        UCX_ASIO_FUZZ_CHECK(groups_failed == static_cast<bool>(f.failed()));
        UCX_ASIO_FUZZ_CHECK(f.connections() <= size - 1);
        UCX_ASIO_FUZZ_CHECK(f.identifying() >= 0);
    };

    while (!r.empty()) {
        const auto event =
            static_cast<fabric_event>(r.byte() % static_cast<std::uint8_t>(fabric_event::count));
        switch (event) {
        case fabric_event::start:
            apply(f.start(), false);
            break;
        case fabric_event::need: {
            const int p = peer();
            if (p == rank || f.failed())
                break; // the fabric answers those itself
            const auto before = f.state(p);
            auto res = f.need(p);
            using a = detail::fabric_fsm::need_answer;
            UCX_ASIO_FUZZ_CHECK((res.answer == a::ready) == (before == fabric_peer_state::ready));
            UCX_ASIO_FUZZ_CHECK((res.answer == a::gone) == (before == fabric_peer_state::done));
            if (res.answer == a::wait)
                ++m[p].waiting;
            apply(res.actions, false);
            break;
        }
        case fabric_event::want:
            apply(f.want(peer()), false);
            break;
        case fabric_event::connected: {
            const int p = peer();
            apply(f.connected(p, r.flag() ? ec_t() : ec_t(aerr::connection_refused)), true);
            break;
        }
        case fabric_event::answered: {
            const int p = peer();
            const bool valid = r.flag();
            apply(f.answered(p, valid, static_cast<std::uint32_t>(r.uint(1))), false);
            break;
        }
        case fabric_event::accepted: {
            const auto b = r.byte();
            const ec_t ec = b % 3 == 0   ? ec_t()
                            : b % 3 == 1 ? ec_t(aerr::operation_aborted)
                                         : ec_t(aerr::no_buffer_space);
            apply(f.accepted(ec), true);
            break;
        }
        case fabric_event::introduced: {
            const bool ok = r.flag();
            const bool valid = r.flag();
            const int who = static_cast<int>(r.byte()) - 8;
            const auto inbox = static_cast<std::uint32_t>(r.uint(1));
            apply(f.introduced(ok ? ec_t() : ec_t(aerr::connection_reset), valid, who, inbox),
                  true);
            break;
        }
        case fabric_event::endpoint_failed: {
            const int p = peer();
            apply(f.endpoint_failed(p, errors[r.byte() % 4]), false);
            break;
        }
        case fabric_event::abort_received:
            apply(f.abort_received(peer()), false);
            break;
        case fabric_event::timer_expired: {
            const int p = peer();
            m[p].timer = false; // an armed timer that expires is not armed any more
            apply(f.timer_expired(p), false);
            break;
        }
        case fabric_event::fail:
            apply(f.fail(r.flag() ? ec_t() : ec_t(aerr::timed_out)), false);
            break;
        case fabric_event::leave:
            apply(f.leave(), false);
            break;
        case fabric_event::count:
            break;
        }
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(fabric_fsm)
