#include <ucx/am.hpp>
#include <ucx/detail/throw_on_error.hpp>
#include <ucx/log.hpp>

#include "connection/control_channel.hpp"
#include "connection/endpoint_impl.hpp"
#include "core/context_impl.hpp"
#include "engine/request_param.hpp"
#include "engine/worker_impl.hpp"
#include "messaging/am_registry.hpp"
#include "messaging/message_staging.hpp"
#include "util/intrusive_list.hpp"
#include "util/small_copy.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace ucx {
namespace detail {

namespace {

constexpr std::size_t max_pooled_states = 4096;

/// The registry's live messages.
using live_list =
    intrusive_list<am_message_state, &am_message_state::live_prev, &am_message_state::live_next>;

std::size_t type_index(ucx::memory_type t) noexcept {
    return static_cast<std::size_t>(t);
}

ucs_memory_type_t to_ucs(ucx::memory_type t) noexcept {
    switch (t) {
    case memory_type::cuda:
        return UCS_MEMORY_TYPE_CUDA;
    case memory_type::cuda_managed:
        return UCS_MEMORY_TYPE_CUDA_MANAGED;
    case memory_type::host:
        break;
    }
    return UCS_MEMORY_TYPE_HOST;
}

// UCX cancels the fetches from a sender whose endpoint failed; outside
// shutdown that means the sender went away.
error_code fetch_error(ucs_status_t status) noexcept {
    return make_error_code(status == UCS_ERR_CANCELED ? UCS_ERR_CONNECTION_RESET : status);
}

} // namespace

am_registry::am_registry(worker_impl& w)
    : worker_(&w), channel_(&control_channel::of(w)), executor_(w.get_executor()),
      bound_(w.options().am_queue_bytes) {
    allocators_[type_index(memory_type::host)] = std::make_shared<pooled_host_allocator>();
    if (const auto& pool = w.context().cuda_pool())
        allocators_[type_index(memory_type::cuda)] = pool;
    else if (built_with_cuda())
        allocators_[type_index(memory_type::cuda)] = std::make_shared<cuda_am_allocator>();
}

am_registry::~am_registry() {
    while (am_message_state* s = free_) {
        free_ = s->next;
        delete s;
    }
}

bool am_registry::open() {
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    if (ucp_worker_query(worker_->native(), &attr) == UCS_OK)
        max_header_ = attr.max_am_header;
    // Every user id is served from the start, so a message that arrives
    // before the application asks for its id is queued, not lost.
    slots_.reset(new slot[am_max_id + 1]);
    for (unsigned id = 0; id <= am_max_id; ++id) {
        slots_[id] = slot{this, id};
        ucp_am_handler_param_t p{};
        p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                       UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
        p.id = id;
        // Without UCP_AM_FLAG_PERSISTENT_DATA: UCX then still lets the
        // callback keep what arrives in a transport's descriptor
        // (UCP_AM_RECV_ATTR_FLAG_DATA), and hands the rest (the short
        // messages a transport delivers in place) without first copying it
        // into a descriptor of its own, which the callback copies anyway
        // (measured in UCX 1.13: about 70 instructions and a copy per message
        // in UCX's handler).
        p.flags = UCP_AM_FLAG_WHOLE_MSG;
        p.cb = &am_registry::on_message;
        p.arg = &slots_[id];
        if (ucp_worker_set_am_recv_handler(worker_->native(), &p) != UCS_OK)
            return false;
    }
    return true;
}

am_registry::id_state& am_registry::make_state_of(unsigned id) {
    if (id >= ids_.size())
        ids_.resize(std::size_t{id} + 1);
    ids_[id] = std::make_unique<id_state>();
    return *ids_[id];
}

void am_registry::mark(id_state& s, unsigned id) {
    if (!s.dirty) {
        s.dirty = true;
        dirty_.push_back(id);
        if (worker_)
            worker_->defer(*this, deferred_stage::messages);
    }
}

inline am_message_state* am_registry::make_state() {
    am_message_state* m = nullptr;
    if (free_) {
        m = free_;
        free_ = m->next;
        m->next = nullptr;
        --free_count_;
    } else {
        m = new (std::nothrow) am_message_state;
        if (!m)
            return nullptr;
    }
    m->registry = this;
    live_list::push_front(live_, m);
    return m;
}

namespace {
bool sent_by(const am_message_state* m, const endpoint_impl* ep) noexcept {
    // `ep` is alive (a receive bound to it): the same pointer with the same
    // serial is the same endpoint.
    return m->from_raw == ep && m->from_serial == ep->serial();
}
} // namespace

ucs_status_t am_registry::on_message(void* arg, const void* header, std::size_t header_length,
                                     void* data, std::size_t length,
                                     const ucp_am_recv_param_t* param) noexcept {
    // Inside ucp_worker_progress: record only.
    const auto* sl = static_cast<const slot*>(arg);
    am_registry* self = sl->registry;
    if (self->closed())
        return UCS_OK;
    id_state* sp = self->find_state(sl->id);
    if (!sp) [[unlikely]] {
        try {
            sp = &self->make_state_of(sl->id);
        } catch (...) {
            log::write(log::severity::error, "active message dropped: out of memory");
            return UCS_OK;
        }
    }
    id_state& s = *sp;
    am_message_state* m = self->make_state();
    std::byte* header_copy = m ? m->header_inline : nullptr;
    if (m && header_length > sizeof(m->header_inline)) {
        m->header_heap.reset(new (std::nothrow) std::byte[header_length]);
        header_copy = m->header_heap.get();
    }
    if (!m || !header_copy) {
        log::write(log::severity::error, "active message dropped: out of memory");
        if (m)
            self->release(m);
        return UCS_OK;
    }
    m->id = sl->id;
    m->header_size = header_length;
    copy_small(header_copy, header, header_length);
    m->length = length;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep) {
        m->reply_ep = param->reply_ep;
        if (endpoint_impl* ep = self->channel_->find(param->reply_ep)) {
            m->from_raw = ep;
            m->from_serial = ep->serial();
        }
    }
    ucs_status_t status = UCS_OK;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        m->rndv_desc = data;
        m->rendezvous = true;
        status = UCS_INPROGRESS;
    } else if (length == 0) {
        // Nothing to keep.
    } else if (length <= sizeof(m->data_inline)) {
        copy_small(m->data_inline, data, length);
        m->data = m->data_inline;
        m->kind = am_message_state::storage::inline_copy;
    } else if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        m->data = data; // UCX's buffer, kept without a copy
        m->kind = am_message_state::storage::ucx;
        status = UCS_INPROGRESS;
    } else {
        // Valid only inside this callback: copied into the registry's pool.
        m->data = self->copies_.allocate(length);
        if (!m->data) {
            m->error = make_error_code(error::allocation_failed);
            m->length = 0;
        } else {
            std::memcpy(m->data, data, length);
            m->kind = am_message_state::storage::pooled_copy;
        }
    }
    if (!m->rendezvous && !m->error && s.head == nullptr) {
        // The common case: nothing is queued ahead of this message and a
        // receive that takes it waits (one for any sender, or one bound to
        // this sender's endpoint): the first such receive gets it now, as
        // the matching pass would (the operation is only queued; its handler
        // runs after progress returns), without a trip through the queue.
        for (std::size_t i = 0; i < s.waiting.size(); ++i) {
            const endpoint_impl* from = s.waiting[i]->from;
            if (!from || sent_by(m, from)) {
                self->hand_over(s, i, m);
                return status;
            }
        }
    }
    if (m->data) {
        m->counted = length;
        s.bytes += length;
        self->peak_bytes_ = std::max(self->peak_bytes_, s.bytes);
    }
    if (s.tail)
        s.tail->next = m;
    else
        s.head = m;
    s.tail = m;
    ++s.messages;
    self->mark(s, m->id);
    return status;
}

void am_registry::on_fetched(void* request, ucs_status_t status, std::size_t,
                             void* user_data) noexcept {
    // Inside progress, or inside ucp_am_recv_data_nbx itself (UCX 1.13 may
    // complete a fetch there, and then returns either the request or no
    // request at all): record only; fetch() sorts out which.
    auto* m = static_cast<am_message_state*>(user_data);
    m->fetch_request = request;
    m->fetch_called = true;
    if (status != UCS_OK && !m->error)
        m->error = fetch_error(status);
    am_registry* self = m->registry;
    --self->fetches_in_flight_;
    self->fetched_.push_back(m);
    if (self->worker_) {
        self->worker_->internal_request_done();
        self->worker_->defer(*self, deferred_stage::messages);
    }
}

void am_registry::fetch(id_state& s, am_message_state* m) noexcept {
    void* desc = m->rndv_desc;
    m->rndv_desc = nullptr;
    const auto& alloc = allocators_[type_index(s.mem)];
    void* buffer = alloc ? alloc->allocate(m->length) : nullptr;
    if (!buffer) {
        m->error = make_error_code(alloc ? error::allocation_failed : error::no_am_allocator);
        m->length = 0;
        ucp_am_data_release(worker_->native(), desc); // drops the data at the sender
        return;
    }
    m->data = buffer;
    m->kind = am_message_state::storage::allocator;
    m->allocator = alloc;
    m->mem = alloc->memory_type();
    m->counted = m->length;
    s.bytes += m->length;
    peak_bytes_ = std::max(peak_bytes_, s.bytes);
    ucp_request_param_t param = am_recv_param(&am_registry::on_fetched, m);
    add_memory_type(param, to_ucs(m->mem));
    m->fetching = true;
    m->fetch_called = false;
    ++fetches_in_flight_;
    if (m->mem == memory_type::cuda) [[unlikely]] {
        if (device_staging* st = staging_of(*worker_); st && fetch_staged(*st, m, desc))
            return;
    }
    worker_->internal_request_started(); // shutdown waits for it
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_->native(), desc, buffer, m->length, &param);
    if (UCS_PTR_IS_PTR(r)) {
        m->fetch_request = r; // freed once the callback has run
        return;
    }
    // Done already: UCX keeps no request (even if the callback ran).
    m->fetch_request = nullptr;
    if (m->fetch_called)
        return;
    if (UCS_PTR_STATUS(r) != UCS_OK)
        m->error = fetch_error(UCS_PTR_STATUS(r));
    m->fetch_called = true;
    --fetches_in_flight_;
    fetched_.push_back(m);
    worker_->internal_request_done();
    worker_->defer(*this, deferred_stage::messages);
}

bool am_registry::fetch_staged(device_staging& staging, am_message_state* m, void* desc) noexcept {
    // Device memory UCX cannot write: fetched into pinned host memory, then
    // copied. No internal request is counted meanwhile: the fetch itself is
    // an operation of the worker (shutdown cancels it), and copies need no
    // progress (shutdown must not wait for them). The report holds this
    // registry until the device buffer is no longer written.
    device_staging::report_fn report;
    try {
        report = [keep = shared_from_this(), m](const error_code& ec, std::size_t) {
            keep->staged_fetched(m, ec);
        };
    } catch (...) {
        return false; // the direct fetch reports what UCX makes of it
    }
    return staged_am_fetch(staging, desc, m->data, m->length, std::move(report));
}

void am_registry::staged_fetched(am_message_state* m, const error_code& ec) noexcept {
    // Nothing writes the device buffer any more. After a shutdown the
    // message is an orphan: nobody else releases it.
    if (closed() || m->orphan) {
        release(m);
        return;
    }
    if (ec && !m->error)
        m->error = ec == make_error_code(UCS_ERR_CANCELED)
                       ? make_error_code(UCS_ERR_CONNECTION_RESET)
                       : ec;
    m->fetch_called = true;
    --fetches_in_flight_;
    fetched_.push_back(m);
    worker_->defer(*this, deferred_stage::messages);
    worker_->request_progress();
}

void am_registry::uncount(id_state& s, am_message_state* m) noexcept {
    s.bytes -= m->counted;
    m->counted = 0;
}

void am_registry::unlink(id_state& s, am_message_state* m, am_message_state* prev) noexcept {
    if (prev)
        prev->next = m->next;
    else
        s.head = m->next;
    if (s.tail == m)
        s.tail = prev;
    m->next = nullptr;
    --s.messages;
    uncount(s, m);
}

bool am_registry::deliver_one(id_state& s) {
    // Waiting receives first, in the order they were started.
    for (std::size_t i = 0; i < s.waiting.size(); ++i) {
        am_recv_op* op = s.waiting[i];
        const endpoint_impl* from = op->from;
        am_message_state *m = s.head, *prev = nullptr;
        while (m && from && !sent_by(m, from)) {
            prev = m;
            m = m->next;
        }
        if (!m) {
            if (from && from->error()) {
                // That peer is gone and nothing of it is left.
                s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(i));
                worker_->complete(op, from->error());
                return true;
            }
            continue;
        }
        if (!m->ready())
            continue; // its data is still on the way; order is kept
        unlink(s, m, prev);
        hand_over(s, i, m);
        return true;
    }
    if (s.handler && s.head && s.head->ready()) {
        am_message_state* m = s.head;
        unlink(s, m, nullptr);
        const error_code ec = m->error;
        boost::asio::post(executor_,
                          [h = s.handler, ec, msg = access::construct<am_message>(m)]() mutable {
                              (*h)(ec, std::move(msg));
                          });
        return true;
    }
    return false;
}

void am_registry::hand_over(id_state& s, std::size_t index, am_message_state* m) noexcept {
    am_recv_op* op = s.waiting[index];
    s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(index));
    op->message = m;
    if (m->error || !worker_->is_open()) [[unlikely]]
        return worker_->complete(op, m->error);
    // Success inside a progress call or the pass's messages stage: what
    // `complete` does, without its checks and the copy of an empty code.
    worker_->operation_metrics().add_bytes(operation_kind::am_recv, m->length);
    op->status = UCS_OK;
    worker_->finished(op);
    worker_->request_progress();
}

void am_registry::pump(id_state& s) {
    for (;;) {
        // Fetch rendezvous data in arrival order while the id stays within
        // its bound (at least one message when nothing is held, so a message
        // larger than the bound still gets through).
        for (am_message_state* m = s.head; m; m = m->next) {
            if (!m->rndv_desc)
                continue;
            if (s.bytes != 0 && s.bytes + m->length > bound_)
                break;
            fetch(s, m);
        }
        bool delivered = false;
        while (deliver_one(s))
            delivered = true;
        if (!delivered)
            return;
    }
}

std::size_t am_registry::run_deferred(deferred_stage) noexcept {
    std::size_t n = 0;
    // Fetches may complete while pumping: loop until both lists are empty.
    while ((!fetched_.empty() || !dirty_.empty()) && !closed())
        n += drain();
    return n;
}

std::size_t am_registry::drain() noexcept {
    std::size_t n = 0;
    if (!fetched_.empty()) {
        auto fetched = std::move(fetched_);
        fetched_.clear();
        for (am_message_state* m : fetched) {
            if (m->fetch_request) {
                ucp_request_free(m->fetch_request);
                m->fetch_request = nullptr;
            }
            m->fetching = false;
            if (m->error && m->kind == am_message_state::storage::allocator) {
                m->allocator->deallocate(m->data, m->length);
                m->data = nullptr;
                m->kind = am_message_state::storage::none;
                m->length = 0;
            }
            id_state& s = state_of(m->id);
            mark(s, m->id);
            ++n;
        }
        if (fetched_.empty()) {
            fetched.clear();
            fetched_ = std::move(fetched); // keep the capacity
        }
    }
    while (!dirty_.empty() && !closed()) {
        const unsigned id = dirty_.back();
        dirty_.pop_back();
        id_state& s = state_of(id);
        s.dirty = false;
        pump(s);
        ++n;
    }
    return n;
}

void open_am_registry(worker_impl& w) {
    auto am = std::make_shared<am_registry>(w);
    if (!am->open())
        return;
    add_service(w, am);
    // Released after every request called back: see detach().
    w.add_resource(am.get());
}

namespace {
void am_recv_on(worker_impl& w, am_recv_op* op, unsigned id, endpoint_impl* from) noexcept {
    am_registry* am = am_of(w);
    if (!am) {
        w.start(op);
        return w.complete(op, w.is_open() ? make_error_code(error::feature_not_enabled)
                                          : error_code(boost::asio::error::operation_aborted));
    }
    am->recv(op, id, from);
}
} // namespace

void am_registry::recv(am_recv_op* op, unsigned id, endpoint_impl* from) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    op->library_owned = true;
    op->cancel_hook = &am_registry::cancel_recv;
    op->cancel_context = this;
    op->id = id;
    op->from = from;
    if (!w.is_open() || op->cancel_requested)
        return w.complete(op, boost::asio::error::operation_aborted);
    if (id > am_max_id)
        return w.complete(op, make_error_code(error::invalid_am_id));
    try {
        id_state& s = state_of(id);
        s.waiting.push_back(op);
        // Something to match only if messages are queued, or for a receive
        // bound to an endpoint (which may have failed already).
        if (s.head || from)
            mark(s, id);
    } catch (...) {
        return w.complete(op, make_error_code(error::allocation_failed));
    }
    w.request_progress();
}

void am_registry::cancel_recv(operation* op, boost::asio::cancellation_type) noexcept {
    auto* self = static_cast<am_registry*>(op->cancel_context);
    auto* recv = static_cast<am_recv_op*>(op);
    id_state* s = self->find_state(recv->id);
    if (!s)
        return;
    auto& waiting = s->waiting;
    auto pos = std::find(waiting.begin(), waiting.end(), recv);
    if (pos == waiting.end())
        return;
    waiting.erase(pos);
    self->worker_->complete(op, boost::asio::error::operation_aborted);
}

void am_registry::endpoint_failed(endpoint_impl* ep, const error_code&) noexcept {
    // Receives bound to that peer take what it sent before; the rest fail in
    // the next pass.
    for (unsigned id = 0; id < ids_.size(); ++id) {
        if (!ids_[id])
            continue;
        id_state& s = *ids_[id];
        for (am_recv_op* op : s.waiting) {
            if (op->from == ep) {
                mark(s, id);
                break;
            }
        }
    }
    worker_->request_progress();
}

void am_registry::set_handler(unsigned id, am_handler handler) {
    id_state& s = state_of(id);
    if (!s.handler != !handler)
        handler ? ++handlers_ : --handlers_;
    s.handler = handler ? std::make_shared<am_handler>(std::move(handler)) : nullptr;
    mark(s, id);
    worker_->request_progress();
}

void am_registry::set_memory_type(unsigned id, ucx::memory_type type) {
    state_of(id).mem = type;
}

void am_registry::set_allocator(std::shared_ptr<am_allocator> allocator) {
    const auto t = allocator->memory_type();
    allocators_[type_index(t)] = std::move(allocator);
}

std::size_t am_registry::queued_messages(unsigned id) const noexcept {
    const id_state* s = find_state(id);
    return s ? s->messages : 0;
}

std::size_t am_registry::queued_bytes(unsigned id) const noexcept {
    const id_state* s = find_state(id);
    return s ? s->bytes : 0;
}

void am_registry::release(am_message_state* m) noexcept {
    ucp_worker_h w = closed() ? nullptr : worker_->native();
    switch (m->kind) {
    case am_message_state::storage::ucx:
        if (w)
            ucp_am_data_release(w, m->data);
        break;
    case am_message_state::storage::allocator:
        m->allocator->deallocate(m->data, m->length);
        break;
    case am_message_state::storage::heap:
        ::operator delete(m->data);
        break;
    case am_message_state::storage::pooled_copy:
        copies_.deallocate(m->data, m->length);
        break;
    case am_message_state::storage::inline_copy:
    case am_message_state::storage::none:
        break;
    }
    if (m->rndv_desc && w)
        ucp_am_data_release(w, m->rndv_desc);
    if (closed()) {
        // The registry no longer tracks it. `keep` may hold the last
        // reference to this registry: it goes after the registry's last use.
        const std::shared_ptr<am_registry> keep = std::move(m->keep_registry);
        delete m;
        return;
    }
    live_list::erase(live_, m);
    m->header_heap.reset();
    m->data = nullptr;
    m->kind = am_message_state::storage::none;
    m->rndv_desc = nullptr;
    m->rendezvous = false;
    m->fetching = false;
    m->fetch_called = false;
    m->orphan = false;
    m->fetch_request = nullptr;
    m->mem = memory_type::host;
    m->allocator.reset();
    m->from_raw = nullptr;
    m->from_serial = 0;
    m->reply_ep = nullptr;
    m->error = {};
    m->counted = 0;
    if (free_count_ < max_pooled_states) {
        m->next = free_;
        free_ = m;
        ++free_count_;
        return;
    }
    delete m;
}

void am_registry::shutdown() noexcept {
    // Waiting receives are library-owned operations: the worker ends them.
    for (const std::unique_ptr<id_state>& state : ids_) {
        if (!state)
            continue;
        id_state& s = *state;
        s.waiting.clear();
        s.handler.reset();
        handlers_ = 0;
        am_message_state* m = s.head;
        s.head = s.tail = nullptr;
        s.messages = 0;
        s.bytes = 0;
        while (m) {
            am_message_state* next = m->next;
            m->next = nullptr;
            if (m->fetching) {
                // Ends through on_fetched; released in detach().
                m->orphan = true;
                if (m->fetch_request)
                    ucp_request_cancel(worker_->native(), m->fetch_request);
            } else {
                release(m);
            }
            m = next;
        }
    }
    dirty_.clear();
    worker_->remove_component(*this);
}

void am_registry::detach() noexcept {
    ucp_worker_h w = worker_->native();
    for (am_message_state* m : fetched_) {
        if (m->fetch_request)
            ucp_request_free(m->fetch_request);
        m->fetch_request = nullptr;
        m->fetching = false;
        if (m->orphan)
            release(m);
    }
    fetched_.clear();
    // Messages the application still holds: copy what lives in UCX's memory
    // or in the pool of copies (whose release may then come from any thread),
    // and keep this registry alive for their release.
    for (am_message_state* m = live_; m; m = m->live_next) {
        m->keep_registry = shared_from_this();
        const auto kind = m->kind;
        if (kind == am_message_state::storage::ucx ||
            kind == am_message_state::storage::pooled_copy) {
            const std::size_t length = m->length;
            void* copy = ::operator new(length, std::nothrow);
            if (copy) {
                std::memcpy(copy, m->data, length);
                m->kind = am_message_state::storage::heap;
            } else {
                m->kind = am_message_state::storage::none;
                m->length = 0;
                m->error = make_error_code(error::allocation_failed);
            }
            if (kind == am_message_state::storage::ucx)
                ucp_am_data_release(w, m->data);
            else
                copies_.deallocate(m->data, length);
            m->data = copy;
        }
        if (m->rndv_desc) {
            ucp_am_data_release(w, m->rndv_desc);
            m->rndv_desc = nullptr;
            m->length = 0;
            m->error = boost::asio::error::operation_aborted;
        }
        m->fetching = false;
    }
    live_ = nullptr;
    worker_ = nullptr;
}

std::tuple<error_code, am_message> am_recv_result::extract(const error_code& ec, am_recv_op& op) {
    am_message_state* m = std::exchange(op.message, nullptr);
    if (!m)
        return {ec, am_message()};
    return {ec, access::construct<am_message>(m)};
}

bool am_send_valid(const endpoint_impl& ep, unsigned id, std::size_t header_length) noexcept {
    const am_registry* am = am_of(*ep.worker());
    return am && id <= am_max_id && header_length <= am->max_header();
}

namespace {

/// am_send_message's body, inline in am_send (the path of every send).
[[gnu::always_inline]] inline void send_message(endpoint_impl& ep, transfer_op* op, unsigned id,
                                                const void* header, std::size_t header_length,
                                                const ucp_dt_iov_t* iov, std::size_t count,
                                                unsigned flags) noexcept {
    worker_impl& w = *ep.worker();
    const am_registry* am = am_of(w);
    error_code refused;
    if (!am)
        refused = make_error_code(error::feature_not_enabled);
    else if (id > am_max_id)
        refused = make_error_code(error::invalid_am_id);
    else if (header_length > am->max_header())
        refused = make_error_code(error::header_too_large);
    if (refused) [[unlikely]] {
        // The endpoint's own state first (closed, failed), as for any send.
        if (ep.begin(op, true))
            w.complete(op, refused);
        return;
    }
    ucp_request_param_t param = send_param(&worker_impl::send_callback, op, flags);
    const void* data = nullptr;
    std::size_t length = 0;
    if (count == 1) {
        data = iov[0].buffer;
        length = iov[0].length;
        op->bytes = length;
    } else {
        std::size_t total = 0;
        for (std::size_t i = 0; i < count; ++i)
            total += iov[i].length;
        op->bytes = total;
        if (count > 1) {
            add_datatype(param, ucp_dt_make_iov());
            data = iov;
            length = count;
        }
    }
    const void* const h = header_length ? header : nullptr;
    if (ep.may_submit_first(op)) [[likely]]
        return ep.submitted_first(
            op, ucp_am_send_nbx(ep.native(), id, h, header_length, data, length, &param));
    if (!ep.begin(op, true))
        return;
    ep.submitted(op, ucp_am_send_nbx(ep.native(), id, h, header_length, data, length, &param));
}

} // namespace

void am_send_message(endpoint_impl& ep, transfer_op* op, unsigned id, const void* header,
                     std::size_t header_length, const ucp_dt_iov_t* iov, std::size_t count,
                     unsigned flags) noexcept {
    send_message(ep, op, id, header, header_length, iov, count, flags);
}

void am_send(endpoint_impl& ep, am_send_op* op, unsigned id, const void* header,
             std::size_t header_length, const ucp_dt_iov_t* buffers, std::size_t count,
             unsigned flags) noexcept {
    op->kind = operation_kind::am_send;
    // The header copy follows the IOV array in the operation's storage, and
    // stays there until the send completes.
    auto* header_copy = reinterpret_cast<std::byte*>(const_cast<ucp_dt_iov_t*>(buffers) + count);
    copy_small(header_copy, header, header_length);
    // A device buffer where UCX cannot move device memory goes through the
    // worker's staging (lib/messaging/message_staging.hpp); without a device
    // `staging_of` is null, and where UCX moves device memory it takes nothing.
    if (device_staging* s = staging_of(*ep.worker());
        s && staged_am_send(*s, ep, op, id, header_copy, header_length, buffers, count, flags))
        [[unlikely]]
        return;
    send_message(ep, op, id, header_copy, header_length, buffers, count, flags);
}

} // namespace detail

// ---- am_message ----

void am_message::give_back() noexcept {
    detail::am_message_state* s = std::exchange(state_, nullptr);
    detail::am_registry* registry = s->registry;
    // UCX's buffers go back on the worker's executor: at once when already
    // there (or when the worker is closed: the state is the message's own).
    if (registry->closed() || registry->worker()->running_in_owner()) {
        registry->release(s);
        return;
    }
    // The registry outlives the posted release: `s` stays on its list of live
    // messages until then, so a close in between gives `s` a reference.
    try {
        const auto ex = registry->executor();
        boost::asio::dispatch(ex, [registry, s] { registry->release(s); });
    } catch (...) {
    }
}

unsigned am_message::id() const noexcept {
    return state_ ? state_->id : 0;
}

std::span<const std::byte> am_message::header() const noexcept {
    if (!state_)
        return {};
    return {state_->header(), state_->header_size};
}

boost::asio::const_buffer am_message::data() const noexcept {
    if (!state_ || !state_->data)
        return {};
    return {state_->data, state_->length};
}

std::size_t am_message::size() const noexcept {
    return state_ && state_->data ? state_->length : 0;
}

ucx::memory_type am_message::memory_type() const noexcept {
    return state_ ? state_->mem : memory_type::host;
}

bool am_message::rendezvous() const noexcept {
    return state_ && state_->rendezvous;
}

bool am_message::can_reply() const noexcept {
    return state_ && state_->reply_ep;
}

endpoint am_message::reply_endpoint(error_code& ec) const {
    if (!state_ || state_->registry->closed()) {
        ec = boost::asio::error::bad_descriptor;
        return {};
    }
    if (!state_->reply_ep) {
        ec = make_error_code(error::no_reply_endpoint);
        return {};
    }
    if (state_->from_raw) {
        // The connected endpoint of that peer, while it lives: still on the
        // worker's list, with the serial it had (owner thread, as below).
        const auto same = [this](const detail::endpoint_impl* e) {
            return e == state_->from_raw && e->serial() == state_->from_serial;
        };
        detail::worker_impl* w = state_->registry->worker();
        std::shared_ptr<detail::endpoint_impl> ep;
        if (detail::endpoint_impl* e = detail::find_endpoint(*w, state_->reply_ep); e && same(e)) {
            ep = e->weak_from_this().lock();
        } else {
            // A failed endpoint is no longer mapped, but still listed.
            for (detail::worker_component* c = w->components(detail::component_kind::endpoint); c;
                 c = c->next_component()) {
                e = static_cast<detail::endpoint_impl*>(c);
                if (same(e)) {
                    ep = e->weak_from_this().lock();
                    break;
                }
            }
        }
        if (!ep) {
            ec = boost::asio::error::bad_descriptor;
            return {};
        }
        if (ep->error()) {
            ec = ep->error();
            return {};
        }
        ec = {};
        return detail::access::construct<endpoint>(std::move(ep));
    }
    detail::worker_impl* w = state_->registry->worker();
    auto impl = std::make_shared<detail::endpoint_impl>(w->shared_from_this());
    impl->adopt(state_->reply_ep);
    ec = {};
    return detail::access::construct<endpoint>(std::move(impl));
}

endpoint am_message::reply_endpoint() const {
    return detail::throw_on_error("ucx::am_message::reply_endpoint",
                                  [&](error_code& ec) { return reply_endpoint(ec); });
}

// ---- worker-level functions ----

namespace {
detail::am_registry& registry_of(const worker& w) {
    detail::am_registry* am = detail::am_of(*detail::checked(w));
    if (!am)
        throw boost::system::system_error(make_error_code(error::feature_not_enabled),
                                          "ucx: the worker has no active messages (the context "
                                          "lacks feature::am, or the worker is closed)");
    return *am;
}

void check_id(unsigned id, const char* what) {
    if (id > am_max_id)
        throw boost::system::system_error(make_error_code(error::invalid_am_id),
                                          std::string(what) + ": id " + std::to_string(id) +
                                              " is above am_max_id");
}
} // namespace

void set_am_handler(worker& w, unsigned id, std::function<void(error_code, am_message)> handler) {
    check_id(id, "ucx::set_am_handler");
    registry_of(w).set_handler(id, std::move(handler));
}

void set_am_memory_type(worker& w, unsigned id, memory_type type) {
    check_id(id, "ucx::set_am_memory_type");
    registry_of(w).set_memory_type(id, type);
}

void register_am_allocator(worker& w, std::shared_ptr<am_allocator> allocator) {
    if (!allocator)
        throw boost::system::system_error(make_error_code(error::null_allocator),
                                          "ucx::register_am_allocator: null allocator");
    registry_of(w).set_allocator(std::move(allocator));
}

std::size_t max_am_header(const worker& w) {
    return registry_of(w).max_header();
}

am_queue_stats am_queue(const worker& w, unsigned id) {
    const auto& r = registry_of(w);
    return {r.queued_messages(id), r.queued_bytes(id), r.peak_queued_bytes()};
}

} // namespace ucx

// The non-template functions the public headers' templates call (<ucx/am.hpp>): each
// forwards to the implementation object, so the public headers need only
// forward declarations of the implementation classes.
namespace ucx::detail {

void am_recv(worker_impl& w, am_recv_op* op, unsigned id) noexcept {
    op->kind = operation_kind::am_recv;
    am_recv_on(w, op, id, nullptr);
}
void am_recv(endpoint_impl& ep, am_recv_op* op, unsigned id) noexcept {
    op->kind = operation_kind::am_recv;
    am_recv_on(*ep.worker(), op, id, &ep);
}

} // namespace ucx::detail
