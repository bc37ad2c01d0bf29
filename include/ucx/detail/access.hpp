// Internal: how the library reaches the state behind its public objects.
//
// Public classes keep their implementation private and befriend `access`, so
// the library's internals (and the templates of the public headers) get at it
// without a public `impl()` member or a public constructor from an
// implementation pointer.
#pragma once

#include <utility>

namespace ucx::detail {

struct access {
    /// The implementation pointer of `obj`.
    template <class T>
    static const auto& get_impl(const T& obj) noexcept {
        return obj.impl_;
    }
    template <class T>
    static auto& get_impl(T& obj) noexcept {
        return obj.impl_;
    }
    /// Builds a `T` with one of its private constructors (from its
    /// implementation).
    template <class T, class... Args>
    static T construct(Args&&... args) {
        return T(std::forward<Args>(args)...);
    }
};

} // namespace ucx::detail
