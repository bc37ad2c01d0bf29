#include <ucx/log.hpp>

#include "connection/control_channel.hpp"
#include "connection/door.hpp"
#include "connection/endpoint_impl.hpp"
#include "engine/worker_impl.hpp"
#include "util/random.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace ucx::detail {

door_nonce make_door_nonce() {
    door_nonce n{};
    random_bytes(n.data(), n.size());
    return n;
}

// ---- door_io ----

door_io::door_io(boost::asio::ip::tcp::socket socket, std::chrono::milliseconds deadline)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), deadline_(deadline) {}

void door_io::begin(door_step first) {
    if (deadline_.count() > 0) {
        timer_.expires_after(deadline_);
        timer_.async_wait([self = shared_from_this()](const error_code& ec) {
            if (ec || self->finished_)
                return;
            self->timed_out_ = true;
            error_code ignored;
            self->socket_.close(ignored);
        });
    }
    run(std::move(first));
}

void door_io::stop() noexcept {
    error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
}

error_code door_io::broken(const error_code& ec) const noexcept {
    if (timed_out_)
        return make_error_code(error::handshake_timeout);
    // The peer closed in the middle of the handshake: it does not speak it.
    if (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset)
        return make_error_code(error::handshake_failed);
    return ec;
}

void door_io::run(door_step step) {
    switch (step.what) {
    case door_step::action::write_then_read:
        out_ = std::move(step.out);
        boost::asio::async_write(socket_, boost::asio::buffer(out_),
                                 [self = shared_from_this()](const error_code& ec, std::size_t) {
                                     if (ec)
                                         return self->failed(ec);
                                     self->transfer(
                                         boost::asio::buffer(self->header_),
                                         [](door_io& io) { return io.on_header(io.header_); });
                                 });
        return;
    case door_step::action::read_body:
        body_.resize(step.body_size);
        return transfer(boost::asio::buffer(body_),
                        [](door_io& io) { return io.on_body(io.body_); });
    case door_step::action::finish:
        return finish(std::move(step));
    }
}

template <class Next>
void door_io::transfer(boost::asio::mutable_buffer into, Next next) {
    boost::asio::async_read(socket_, into,
                            [self = shared_from_this(), next](const error_code& ec, std::size_t) {
                                if (ec)
                                    return self->failed(ec);
                                self->run(next(*self));
                            });
}

void door_io::failed(const error_code& ec) {
    door_step s;
    s.ec = broken(ec);
    finish(std::move(s));
}

void door_io::finish(door_step step) {
    if (finished_)
        return;
    finished_ = true;
    timer_.cancel();
    if (!step.out.empty() && socket_.is_open()) {
        // The last word (an answer), at once: it fits the socket's buffer (a
        // client that never reads cannot hold the listener). Nothing runs
        // before on_finish, so the client's next step cannot overtake it.
        error_code ec;
        socket_.non_blocking(true, ec);
        boost::asio::write(socket_, boost::asio::buffer(step.out), ec);
        socket_.non_blocking(false, ec);
        if (ec && !step.ec) {
            step.ec = make_error_code(error::handshake_failed);
            step.peer = worker_address();
        }
    }
    // The machine's owner may keep the connection (the lifeline).
    on_finish(step);
    error_code ignored;
    socket_.close(ignored);
}

// ---- door_connect ----

door_connect::door_connect(std::shared_ptr<worker_impl> w, endpoint_op* op)
    : door_io(boost::asio::ip::tcp::socket(w->get_executor()), w->options().handshake_timeout),
      worker_component(component_kind::service), worker_(std::move(w)), op_(op),
      fsm_(worker_->options().secret, worker_->address(), make_door_nonce()) {}

door_connect::~door_connect() {
    if (registered_)
        worker_->remove_component(*this);
}

void door_connect::start(const std::shared_ptr<worker_impl>& w, endpoint_op* op,
                         const boost::asio::ip::tcp::endpoint& to) noexcept {
    w->start(op);
    if (op->cancel_requested)
        return w->complete(op, boost::asio::error::operation_aborted);
    if (error_code ec = accept_support(*w); ec)
        return w->complete(op, ec);
    try {
        auto d = std::make_shared<door_connect>(w, op);
        op->library_owned = true;
        op->cancel_hook = &door_connect::cancel;
        op->cancel_context = d.get();
        w->add_component(*d);
        d->registered_ = true;
        d->connect(to);
    } catch (const boost::system::system_error& e) {
        w->complete(op, e.code());
    } catch (...) {
        w->complete(op, make_error_code(error::allocation_failed));
    }
}

void door_connect::connect(const boost::asio::ip::tcp::endpoint& to) {
    auto self = std::static_pointer_cast<door_connect>(shared_from_this());
    socket().async_connect(to, [self](const error_code& ec) {
        if (!self->op_)
            return;
        if (ec)
            return self->fail(ec);
        // The server speaks first: read its greeting, under the deadline.
        door_step first;
        first.what = door_step::action::write_then_read;
        self->begin(std::move(first));
    });
}

void door_connect::cancel(operation* op, boost::asio::cancellation_type) noexcept {
    static_cast<door_connect*>(op->cancel_context)->stop();
}

void door_connect::shutdown() noexcept {
    // The worker completes the operation itself (aborted).
    op_ = nullptr;
    stop();
    worker_->remove_component(*this);
    registered_ = false;
}

door_step door_connect::on_header(std::span<const std::byte> header) {
    return fsm_.on_header(header);
}

door_step door_connect::on_body(std::span<const std::byte> body) {
    return fsm_.on_body(body);
}

void door_connect::fail(const error_code& ec) noexcept {
    if (endpoint_op* op = std::exchange(op_, nullptr))
        worker_->complete(op, ec);
}

void door_connect::on_finish(door_step& step) {
    endpoint_op* op = op_;
    if (!op)
        return;
    if (step.ec)
        return fail(op->cancel_requested || step.ec == boost::asio::error::operation_aborted
                        ? error_code(boost::asio::error::operation_aborted)
                        : step.ec);
    op_ = nullptr;
    try {
        auto ep = std::make_shared<endpoint_impl>(worker_);
        op->subject = ep;
        ep->adopt_lifeline(std::move(socket()));
        // The UCX connection to the worker the server named; its hello
        // carries this worker's address, which the server now expects.
        ep->connect_address(step.peer, op, fsm_.ticket());
    } catch (...) {
        worker_->complete(op, make_error_code(error::allocation_failed));
    }
}

// ---- door_session ----

door_session::door_session(boost::asio::ip::tcp::socket socket, std::chrono::milliseconds deadline,
                           std::string secret, worker_address own, admit_type admit, done_type done)
    : door_io(std::move(socket), deadline),
      fsm_(std::move(secret), std::move(own), make_door_nonce()), admit_(std::move(admit)),
      done_(std::move(done)) {
    error_code ec;
    remote_ = this->socket().remote_endpoint(ec);
}

void door_session::start() {
    begin(fsm_.start());
}

door_step door_session::on_header(std::span<const std::byte> header) {
    return fsm_.on_header(header);
}

door_step door_session::on_body(std::span<const std::byte> body) {
    return fsm_.on_body(body, admit_ && admit_());
}

void door_session::on_finish(door_step& step) {
    if (auto done = std::exchange(done_, nullptr))
        done(*this, step.ec, step.peer);
}

void refuse_door_client(boost::asio::ip::tcp::socket socket, door_status status) {
    const std::vector<std::byte> out = door_server::refusal(status);
    error_code ec;
    socket.non_blocking(true, ec);
    boost::asio::write(socket, boost::asio::buffer(out), ec);
    socket.close(ec);
}

} // namespace ucx::detail
