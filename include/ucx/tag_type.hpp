// The tag type of every tagged operation, and the range of each.
#pragma once

#include <cstdint>

namespace ucx {

/// The tag of every tagged operation of the library: `async_tag_send` and
/// `async_tag_recv`, an endpoint's `async_send` and `async_recv`, a group's
/// messages. Each takes a part of its range, named below; a tag above it
/// fails the operation with `asio::error::invalid_argument`.
using tag_t = std::uint64_t;

/// The mask that matches a tag exactly.
inline constexpr tag_t tag_mask_full = ~tag_t{0};

/// The largest tag of `async_tag_send` and `async_tag_recv`: every tag (the
/// whole UCX tag is the user's, matched on the worker).
inline constexpr tag_t worker_max_tag = ~tag_t{0};

/// The largest tag of `endpoint::async_send` and `endpoint::async_recv`
/// (32 bits; the rest of UCX's tag names the connection). A receive's mask
/// may have higher bits set (`tag_mask_full` matches exactly): they are
/// ignored.
inline constexpr tag_t endpoint_max_tag = 0xffff'ffffu;

/// The largest tag of `group::async_send`, `group::async_recv` and
/// `group::async_recv_from_any` (18 bits; the rest names the group and the
/// connection).
inline constexpr tag_t group_max_tag = (tag_t{1} << 18) - 1;

} // namespace ucx
