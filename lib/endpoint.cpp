#include <ucx/detail/endpoint_impl.hpp>
#include <ucx/detail/worker_impl.hpp>
#include <ucx/endpoint.hpp>
#include <ucx/log.hpp>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>

#include <string>

namespace ucx {
namespace detail {

endpoint_impl::endpoint_impl(std::shared_ptr<worker_impl> worker) : worker_(std::move(worker)) {}

endpoint_impl::~endpoint_impl() {
    force_close(UCS_OK);
    if (registered_)
        worker_->remove_endpoint(this);
}

void endpoint_impl::connect(const worker_address& address, error_code& ec) {
    if (!worker_->is_open()) {
        ec = boost::asio::error::bad_descriptor;
        return;
    }
    if (address.empty()) {
        ec = make_error_code(errc::invalid_addr);
        return;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(address.ucx_bytes().data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &endpoint_impl::error_callback;
    params.err_handler.arg = this;
    if (ucs_status_t st = ucp_ep_create(worker_->native(), &params, &ep_); st != UCS_OK) {
        ep_ = nullptr;
        ec = make_error_code(st);
        return;
    }
    worker_->add_endpoint(this);
    registered_ = true;
    status_ = UCS_OK;
    ec = {};
}

void endpoint_impl::error_callback(void* arg, ucp_ep_h, ucs_status_t status) noexcept {
    // Inside ucp_worker_progress: record only; the worker acts once UCX returns.
    auto* self = static_cast<endpoint_impl*>(arg);
    if (self->status_ == UCS_OK)
        self->status_ = status;
    self->worker_->endpoint_failed(self);
}

void endpoint_impl::handle_failure() noexcept {
    log::write(log::severity::info, std::string("endpoint failed: ") + ucs_status_string(status_));
    force_close(status_);
}

void endpoint_impl::force_close(ucs_status_t status) noexcept {
    if (status_ == UCS_OK)
        status_ = status;
    if (!ep_)
        return;
    ucp_ep_h ep = ep_;
    ep_ = nullptr;
    if (!worker_->native())
        return; // the worker is gone, and the endpoint with it
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    param.cb.send = &worker_impl::close_callback;
    param.user_data = worker_.get();
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(r))
        worker_->adopt_close_request(r);
}

void endpoint_impl::detach() noexcept {
    force_close(UCS_OK);
    if (registered_) {
        worker_->remove_endpoint(this);
        registered_ = false;
    }
}

void endpoint_impl::tag_send(operation* op, const void* data, std::size_t size,
                             ucp_tag_t tag) noexcept {
    worker_impl& w = *worker_;
    w.start(op);
    if (!w.is_open())
        return w.fail(op, boost::asio::error::operation_aborted);
    if (!ep_) {
        return w.fail(op, status_ == UCS_OK ? error_code(boost::asio::error::bad_descriptor)
                                            : make_error_code(status_));
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &worker_impl::send_callback;
    param.user_data = op;
    op->bytes = size;
    w.submitted(op, ucp_tag_send_nbx(ep_, data, size, tag, &param));
}

} // namespace detail

endpoint::endpoint(worker& w, const worker_address& remote) {
    error_code ec;
    impl_ = std::make_shared<detail::endpoint_impl>(w.impl());
    impl_->connect(remote, ec);
    if (ec)
        throw boost::system::system_error(ec, "ucx::endpoint");
}

endpoint::endpoint(worker& w, const worker_address& remote, error_code& ec)
    : impl_(std::make_shared<detail::endpoint_impl>(w.impl())) {
    impl_->connect(remote, ec);
}

endpoint& endpoint::operator=(endpoint&& other) noexcept {
    impl_ = std::move(other.impl_);
    return *this;
}

endpoint::~endpoint() = default;

endpoint::executor_type endpoint::get_executor() const noexcept {
    return impl_->worker()->get_executor();
}

bool endpoint::is_open() const noexcept {
    return impl_ && impl_->is_open();
}

error_code endpoint::error() const noexcept {
    if (!impl_)
        return boost::asio::error::bad_descriptor;
    if (impl_->is_open())
        return {};
    if (impl_->status() == UCS_OK)
        return boost::asio::error::bad_descriptor;
    return make_error_code(impl_->status());
}

void endpoint::close() noexcept {
    if (impl_)
        impl_->force_close(UCS_OK);
}

ucp_ep_h endpoint::native_handle() const noexcept {
    return impl_ ? impl_->native() : nullptr;
}

} // namespace ucx
