// Internal: how an operation's fields become its handler's arguments.
#pragma once

#include <ucx/detail/operation.hpp>
#include <ucx/tag_type.hpp>

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace ucx::detail {

struct bytes_result {
    static auto extract(const error_code& ec, const operation& op) {
        return std::tuple<error_code, std::size_t>(ec, ec ? 0 : op.bytes);
    }
};

struct tag_recv_result {
    static auto extract(const error_code& ec, const operation& op) {
        return std::tuple<error_code, std::size_t, tag_t>(ec, ec ? 0 : op.bytes,
                                                          ec ? 0 : op.sender_tag);
    }
};

struct endpoint_recv_result {
    static auto extract(const error_code& ec, const operation& op) {
        return std::tuple<error_code, std::size_t, std::uint32_t>(
            ec, ec ? 0 : op.bytes, ec ? 0 : static_cast<std::uint32_t>(op.sender_tag));
    }
};

struct error_result {
    static auto extract(const error_code& ec, const operation&) {
        return std::tuple<error_code>(ec);
    }
};

} // namespace ucx::detail
