// ucx::group: joining through a store, split, and the functions of
// <ucx/group.hpp>. The connections are the fabric's (group/fabric.hpp), a
// group's collectives and receives from any rank are group_impl's
// (group/group_impl.hpp).
#include "group/group_impl.hpp"

namespace ucx::detail {

namespace {

using namespace group_wire;

} // namespace

using step_handler = fabric::step_handler;

// --- split ---

void group_impl::split(int color, int key, group_new_handler h) {
    if (error_)
        return post(std::move(h), error_, group());
    // Every rank's (color, key, next free id), gathered everywhere.
    const int n = size();
    auto mine = std::make_shared<std::array<std::int32_t, 3>>(
        std::array<std::int32_t, 3>{color, key, static_cast<std::int32_t>(fabric_->next_id())});
    auto all = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(3 * n));
    collective_args a;
    a.kind = collective_kind::allgather;
    a.in = mine->data();
    a.in_bytes = sizeof(*mine);
    a.out = all->data();
    a.out_bytes = all->size() * sizeof(std::int32_t);
    auto self = shared_from_this();
    auto hp = std::make_shared<group_new_handler>(std::move(h));
    collective(std::move(a), [self, mine, all, hp, color](error_code ec) {
        auto h = std::move(*hp);
        if (ec)
            return boost::asio::dispatch(boost::asio::append(std::move(h), ec, group()));
        const int n = self->size();
        std::uint32_t id = 0;
        std::vector<std::pair<std::pair<int, int>, int>> members; // (key, rank) -> fabric rank
        for (int i = 0; i < n; ++i) {
            const auto* e = all->data() + 3 * i;
            id = std::max(id, static_cast<std::uint32_t>(e[2]));
            if (color >= 0 && e[0] == color)
                members.push_back({{e[1], i}, self->member(i)});
        }
        self->fabric_->use_id(id);
        if (color < 0)
            return boost::asio::dispatch(boost::asio::append(std::move(h), error_code(), group()));
        if (id > max_group_id)
            return boost::asio::dispatch(
                boost::asio::append(std::move(h), make_error_code(errc::exceeds_limit), group()));
        std::sort(members.begin(), members.end());
        std::vector<int> ranks;
        int my_rank = 0;
        for (const auto& m : members) {
            if (m.first.second == self->rank_)
                my_rank = static_cast<int>(ranks.size());
            ranks.push_back(m.second);
        }
        group_settings settings = self->settings();
        settings.name += "/split" + std::to_string(id);
        auto child = std::make_shared<group_impl>(self->fabric_, id, my_rank, std::move(ranks),
                                                  self->timeout(), std::move(settings));
        self->fabric_->add_group(child);
        boost::asio::dispatch(
            boost::asio::append(std::move(h), error_code(), access::construct<group>(child)));
    });
}

// --- the functions of <ucx/group.hpp> ---

namespace {

/// The state of one join: the store reads in flight.
struct joining {
    std::shared_ptr<worker_impl> w;
    std::unique_ptr<prefix_store> keys;
    group_options options;
    group_new_handler handler;
    std::vector<worker_address> addresses;
    std::shared_ptr<fabric> fab;
    int pending = 0;
    error_code ec;
    std::shared_ptr<boost::asio::steady_timer> timer;
    bool done = false;

    void finish(error_code e) {
        if (done)
            return;
        done = true;
        if (timer)
            timer->cancel();
        if (e) {
            if (fab)
                fab->fail(e);
            return boost::asio::dispatch(boost::asio::append(std::move(handler), e, group()));
        }
        auto g = std::make_shared<group_impl>(
            fab, 0, options.rank,
            [&] {
                std::vector<int> m(static_cast<std::size_t>(options.size));
                std::iota(m.begin(), m.end(), 0);
                return m;
            }(),
            options.timeout,
            group_settings{options.name, options.flight_recorder_entries,
                           options.flight_recorder_dump, options.verify_collectives});
        fab->add_group(g);
        fab->start();
        boost::asio::dispatch(
            boost::asio::append(std::move(handler), error_code(), access::construct<group>(g)));
    }
};

} // namespace

void group_join(const std::shared_ptr<worker_impl>& w, store& s, group_options options,
                group_new_handler h) {
    const auto& ex = core_of(*w).get_executor();
    if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
        return boost::asio::post(
            ex, boost::asio::append(std::move(h), make_error_code(error::invalid_rank), group()));
    auto j = std::make_shared<joining>();
    j->w = w;
    j->keys = std::make_unique<prefix_store>(s, options.name);
    j->options = std::move(options);
    j->handler.swap(h);
    j->addresses.resize(static_cast<std::size_t>(j->options.size));
    j->fab = std::make_shared<fabric>(
        w, j->options.rank, std::vector<worker_address>(static_cast<std::size_t>(j->options.size)),
        j->options.lazy_connections);
    error_code ec;
    j->fab->open(ec);
    if (ec) {
        j->fab.reset();
        return boost::asio::post(ex, [j, ec] { j->finish(ec); });
    }
    if (j->options.timeout.count() > 0) {
        j->timer = std::make_shared<boost::asio::steady_timer>(ex, j->options.timeout);
        j->timer->async_wait([j](error_code e) {
            if (!e)
                j->finish(make_error_code(error::group_timeout));
        });
    }
    // Publish, then read every rank's address.
    j->keys->async_set(
        "addr/" + std::to_string(j->options.rank), w->address().serialize(),
        boost::asio::bind_executor(ex, [j](error_code ec) {
            if (ec || j->done)
                return j->finish(ec);
            j->pending = j->options.size;
            for (int r = 0; r < j->options.size; ++r)
                j->keys->async_get(
                    "addr/" + std::to_string(r),
                    boost::asio::bind_executor(core_of(*j->w).get_executor(),
                                               [j, r](error_code ec, store::value_type v) {
                                                   if (!ec)
                                                       j->addresses[static_cast<std::size_t>(r)] =
                                                           worker_address::deserialize(v, ec);
                                                   if (ec && !j->ec)
                                                       j->ec = ec;
                                                   if (--j->pending > 0)
                                                       return;
                                                   if (j->ec)
                                                       return j->finish(j->ec);
                                                   j->fab->set_addresses(std::move(j->addresses));
                                                   j->finish({});
                                               }));
        }));
}

namespace {

/// Why a message to or from rank `peer` with `tag` cannot start, if it cannot.
error_code check_message(const group_impl& g, int peer, tag_t tag) {
    if (g.error())
        return g.error();
    if (peer < 0 || peer >= g.size())
        return make_error_code(error::invalid_rank);
    if (tag > group_max_tag)
        return make_error_code(boost::asio::error::invalid_argument);
    return {};
}

/// A message by rank: the user's handler until it completes.
struct message_state {
    explicit message_state(group_bytes_handler handler) : h(std::move(handler)) {}
    group_bytes_handler h;
    bool done = false;
    /// Its event in the group's flight recorder.
    std::uint64_t record = flight_recorder::none;
};

/// In the handler's cancellation slot while the message waits for its
/// connection (not yet at its endpoint): any cancellation type completes it
/// with `operation_aborted`, and the message is never started. Once at its
/// endpoint, the endpoint operation's own canceller takes the slot.
struct message_waiting_canceller {
    std::weak_ptr<message_state> s;
    std::weak_ptr<group_impl> g;
    boost::asio::any_io_executor ex;
    void operator()(boost::asio::cancellation_type type) const {
        using ct = boost::asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) == ct::none)
            return;
        const auto st = s.lock();
        if (!st || std::exchange(st->done, true))
            return;
        if (const auto group = g.lock())
            group->message_ended(st->record, boost::asio::error::operation_aborted, 0);
        // Not from inside the slot's handler: the handler's slot is its own.
        boost::asio::post(ex, boost::asio::append(std::move(st->h),
                                                  error_code(boost::asio::error::operation_aborted),
                                                  std::size_t{0}));
    }
};

/// A fabric step completing a message's handler; it holds the group (and so
/// its fabric), and gives the endpoint operation the handler's cancellation
/// slot.
struct message_step {
    std::shared_ptr<message_state> s;
    std::shared_ptr<group_impl> g;
    int peer; // fabric rank

    using cancellation_slot_type = boost::asio::cancellation_slot;
    cancellation_slot_type get_cancellation_slot() const noexcept {
        return s->done ? cancellation_slot_type() : s->h.get_cancellation_slot();
    }
    /// Cancelled while it waited for its connection: not to be started.
    bool cancelled() const noexcept { return s->done; }

    void operator()(error_code ec, std::size_t n) {
        if (std::exchange(s->done, true))
            return; // completed by its cancellation
        g->message_ended(s->record, ec, n);
        if (auto slot = s->h.get_cancellation_slot(); slot.is_connected())
            slot.clear();
        if (ec == boost::asio::error::operation_aborted)
            g->fab()->message_aborted(peer);
        boost::asio::dispatch(boost::asio::append(std::move(s->h), ec, n));
    }
};

message_step completing(const std::shared_ptr<group_impl>& g, int peer, group_bytes_handler h,
                        std::uint64_t record) {
    auto s = std::make_shared<message_state>(std::move(h));
    s->record = record;
    if (auto slot = s->h.get_cancellation_slot(); slot.is_connected())
        slot.template emplace<message_waiting_canceller>(
            std::weak_ptr<message_state>(s), std::weak_ptr<group_impl>(g), g->executor());
    return message_step{std::move(s), g, peer};
}

} // namespace

void group_send(const std::shared_ptr<group_impl>& g, int to, const void* data, std::size_t size,
                tag_t tag, group_bytes_handler h) {
    if (auto ec = check_message(*g, to, tag))
        return g->post(std::move(h), ec, std::size_t{0});
    const int peer = g->member(to);
    const auto record = g->message_started(true, to, size, tag);
    g->fab()->send(peer, data, size, user_tag(g->id(), static_cast<std::uint32_t>(tag)),
                   completing(g, peer, std::move(h), record));
}

void group_recv(const std::shared_ptr<group_impl>& g, int from, void* data, std::size_t size,
                tag_t tag, group_bytes_handler h) {
    if (auto ec = check_message(*g, from, tag))
        return g->post(std::move(h), ec, std::size_t{0});
    const int peer = g->member(from);
    const auto record = g->message_started(false, from, size, tag);
    g->fab()->recv(peer, data, size, user_tag(g->id(), static_cast<std::uint32_t>(tag)),
                   completing(g, peer, std::move(h), record));
}

void group_recv_any(const std::shared_ptr<group_impl>& g, void* data, std::size_t size, tag_t tag,
                    group_from_handler h) {
    g->recv_any(data, size, tag, std::move(h));
}

void group_collective(const std::shared_ptr<group_impl>& g, collective_args&& args,
                      group_done_handler h) {
    g->collective(std::move(args), std::move(h));
}

void group_split(const std::shared_ptr<group_impl>& g, int color, int key, group_new_handler h) {
    g->split(color, key, std::move(h));
}

void group_wait_failure(const std::shared_ptr<group_impl>& g, group_done_handler h) {
    g->wait_failure(std::move(h));
}

void group_close(const std::shared_ptr<group_impl>& g, group_done_handler h) {
    if (g->released())
        return g->post(std::move(h), error_code(boost::asio::error::bad_descriptor));
    g->release();
    auto hp = std::make_shared<group_done_handler>(std::move(h));
    g->fab()->group_gone([hp] { std::move (*hp)(error_code()); });
}

void group_release(group_impl& g) noexcept {
    if (g.released())
        return;
    g.release();
    g.fab()->group_gone({});
}

void group_abort(group_impl& g) noexcept {
    g.failed(boost::asio::error::operation_aborted);
    g.fab()->fail(make_error_code(error::group_failed));
}

int group_rank(const group_impl& g) noexcept {
    return g.rank();
}
int group_connections(const group_impl& g) noexcept {
    return g.fab()->connections();
}
int group_size(const group_impl& g) noexcept {
    return g.size();
}
error_code group_error(const group_impl& g) noexcept {
    return g.error();
}
void group_metrics_of(const group_impl& g, group_metrics& m) noexcept {
    g.metrics(m);
}
worker_core& group_core(const group_impl& g) noexcept {
    return core_of(*g.fab()->worker());
}

boost::asio::any_io_executor group_executor(const group_impl& g) noexcept {
    return g.executor();
}
void group_flight_record(const group_impl& g, flight_record& r) {
    g.flight_record(r, "request");
}
void group_set_timeout(group_impl& g, std::chrono::milliseconds t) noexcept {
    g.set_timeout(t);
}
std::chrono::milliseconds group_timeout(const group_impl& g) noexcept {
    return g.timeout();
}

} // namespace ucx::detail
