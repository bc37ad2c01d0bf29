// Internal: how an operation's fields become its handler's arguments.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/tag_type.hpp>

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace ucx::detail {

/// `void(error_code, std::size_t)`: the bytes an operation of kind `Op` moved.
template <class Op = transfer_op>
struct bytes_result {
    using op_type = Op;
    static auto extract(const error_code& ec, const Op& op) {
        return std::tuple<error_code, std::size_t>(ec, ec ? 0 : op.bytes);
    }
};

/// `void(error_code, std::size_t, tag_t)`: a worker-wide tag receive.
struct tag_recv_result {
    using op_type = tag_recv_op;
    static auto extract(const error_code& ec, const tag_recv_op& op) {
        return std::tuple<error_code, std::size_t, tag_t>(ec, ec ? 0 : op.bytes,
                                                          ec ? 0 : op.sender_tag);
    }
};

/// `void(error_code, std::size_t, std::uint32_t)`: a per-endpoint receive.
struct endpoint_recv_result {
    using op_type = tag_recv_op;
    static auto extract(const error_code& ec, const tag_recv_op& op) {
        return std::tuple<error_code, std::size_t, tag_t>(
            ec, ec ? 0 : op.bytes, ec ? 0 : (op.sender_tag & endpoint_max_tag));
    }
};

/// `void(error_code)`, for an operation of kind `Op`.
template <class Op = operation>
struct error_result {
    using op_type = Op;
    static auto extract(const error_code& ec, const Op&) { return std::tuple<error_code>(ec); }
};

} // namespace ucx::detail
