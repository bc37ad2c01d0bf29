// Internal: an enum's names, one table for printing and parsing it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace ucx::detail {

/// The name of `e` in `names` (the enumerators' names, in order from 0);
/// "unknown" for a value outside them.
template <class E, std::size_t N>
constexpr std::string_view enum_name(E e, const std::string_view (&names)[N]) noexcept {
    const auto i = static_cast<std::size_t>(e);
    return i < N ? names[i] : "unknown";
}

/// The enumerator named `s` in `names`, if any.
template <class E, std::size_t N>
constexpr std::optional<E> enum_from_name(std::string_view s,
                                          const std::string_view (&names)[N]) noexcept {
    for (std::size_t i = 0; i < N; ++i)
        if (names[i] == s)
            return static_cast<E>(i);
    return std::nullopt;
}

} // namespace ucx::detail
