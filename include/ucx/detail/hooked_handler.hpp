// Internal: a completion handler called through a hook, keeping every
// association of the handler it wraps.
#pragma once

#include <boost/asio/associator.hpp>

#include <utility>

namespace ucx::detail {

/// `handler`, called through `hook`: calling it calls
/// `hook(std::move(handler), args...)`, which calls the handler (with the
/// arguments as they are, or changed). It has every association of
/// `handler`: executor, allocator, cancellation slot, immediate executor.
template <class Handler, class Hook>
struct hooked_handler {
    Handler handler;
    Hook hook;

    template <class... Args>
    void operator()(Args&&... args) {
        std::move(hook)(std::move(handler), std::forward<Args>(args)...);
    }
};

} // namespace ucx::detail

namespace boost::asio {
/// `hooked_handler` has the associations of the handler it wraps.
template <template <class, class> class Associator, class Handler, class Hook,
          class DefaultCandidate>
struct associator<Associator, ucx::detail::hooked_handler<Handler, Hook>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
    static typename Associator<Handler, DefaultCandidate>::type
    get(const ucx::detail::hooked_handler<Handler, Hook>& h) noexcept {
        return Associator<Handler, DefaultCandidate>::get(h.handler);
    }
    static auto get(const ucx::detail::hooked_handler<Handler, Hook>& h,
                    const DefaultCandidate& c) noexcept
        -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
        return Associator<Handler, DefaultCandidate>::get(h.handler, c);
    }
};
} // namespace boost::asio
