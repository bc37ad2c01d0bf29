#pragma once
// Whether this file is compiled under a sanitizer, for tests that size their
// work to it: GCC says so with __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__,
// clang with __has_feature.

#if defined(__SANITIZE_ADDRESS__)
#define UCX_ASIO_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UCX_ASIO_TEST_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define UCX_ASIO_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UCX_ASIO_TEST_TSAN 1
#endif
#endif
