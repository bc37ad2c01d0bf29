// How the stores of this folder complete an operation.
#pragma once

#include <ucx/store.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/post.hpp>

#include <utility>

namespace ucx::detail {

/// Completes a store operation: `h(args...)` runs through the store's
/// executor, then the handler's associated executor; posted, never from
/// inside the call that started the operation.
template <class Handler, class... Args>
void post_result(const store::executor_type& ex, Handler h, Args&&... args) {
    boost::asio::post(ex, boost::asio::append(std::move(h), std::forward<Args>(args)...));
}

} // namespace ucx::detail
