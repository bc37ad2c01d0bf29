// Linked into every program of a UCX_ASIO_STATIC_RUNTIME build (CMakeLists.txt).
//
// GCC 12's static C++ standard library refers to arc4random, which glibc has
// only since 2.36, from the object that holds std::random_device; any program
// that throws a standard exception pulls that object in, so without this
// definition each program would need glibc 2.36 on the host just to start.
// The programs (and the library) take their random bytes from getrandom(2)
// (util/random.hpp); this definition serves the standard library's object
// with the same source.
#include "util/random.hpp"

#include <cstdint>

extern "C" std::uint32_t arc4random() noexcept {
    std::uint32_t v = 0;
    ucx::detail::random_bytes(&v, sizeof v);
    return v;
}
