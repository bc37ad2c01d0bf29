// The UCX message tag type.
#pragma once

#include <cstdint>

namespace ucx {

/// A UCX message tag.
using tag_t = std::uint64_t;

/// The mask that matches a tag exactly.
inline constexpr tag_t tag_mask_full = ~tag_t{0};

} // namespace ucx
