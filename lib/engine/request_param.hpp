// Internal: builds the `ucp_request_param_t` every UCX submission takes.
//
// One place names which fields a request carries (callback, user data,
// flags, datatype, memory type, reply buffer), so the submit paths read as
// what they ask of UCX. Everything is inline and fills a stack structure:
// the same stores the hand-written form made, nothing more per call.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <type_traits>

namespace ucx::detail {

/// A request completed through `cb`, which UCX runs with `user_data`: the
/// callback's type names the member of `cb` it fills (a send-style, tag
/// receive or active message data callback). The builders below name it.
template <class Callback>
inline ucp_request_param_t callback_param(Callback cb, void* user_data) noexcept {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.user_data = user_data;
    if constexpr (std::is_same_v<Callback, ucp_send_nbx_callback_t>)
        p.cb.send = cb;
    else if constexpr (std::is_same_v<Callback, ucp_tag_recv_nbx_callback_t>)
        p.cb.recv = cb;
    else
        p.cb.recv_am = cb;
    return p;
}

/// A send-style request (sends, RMA, flushes, endpoint close): `cb` runs with
/// `user_data` when UCX completes it.
inline ucp_request_param_t send_param(ucp_send_nbx_callback_t cb, void* user_data) noexcept {
    return callback_param(cb, user_data);
}

/// As above, with operation flags (`UCP_AM_SEND_FLAG_*`, `UCP_EP_CLOSE_FLAG_*`).
inline ucp_request_param_t send_param(ucp_send_nbx_callback_t cb, void* user_data,
                                      std::uint32_t flags) noexcept {
    ucp_request_param_t p = callback_param(cb, user_data);
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = flags;
    return p;
}

/// A tag receive: `cb` runs with `user_data` and the receive information.
inline ucp_request_param_t recv_param(ucp_tag_recv_nbx_callback_t cb, void* user_data) noexcept {
    return callback_param(cb, user_data);
}

/// The fetch of an active message's data (`ucp_am_recv_data_nbx`).
inline ucp_request_param_t am_recv_param(ucp_am_recv_data_nbx_callback_t cb,
                                         void* user_data) noexcept {
    return callback_param(cb, user_data);
}

/// The buffer is described by `datatype` (an IOV list, a contiguous element).
inline void add_datatype(ucp_request_param_t& p, ucp_datatype_t datatype) noexcept {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = datatype;
}

/// The buffer's memory type, so UCX need not detect it.
inline void add_memory_type(ucp_request_param_t& p, ucs_memory_type_t type) noexcept {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = type;
}

/// Where a fetching atomic writes the old value.
inline void add_reply_buffer(ucp_request_param_t& p, void* reply) noexcept {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    p.reply_buffer = reply;
}

/// UCX keeps the request in `request`, which has UCX's request size
/// (`ucp_context_attr_t::request_size`) free before it, instead of taking
/// one from its own pool; the request is never given to ucp_request_free.
inline void add_request(ucp_request_param_t& p, void* request) noexcept {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_REQUEST;
    p.request = request;
}

/// Completion always goes through the callback, never inline at submission.
inline void add_no_immediate_completion(ucp_request_param_t& p) noexcept {
    p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
}

} // namespace ucx::detail
