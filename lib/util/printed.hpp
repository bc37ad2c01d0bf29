// What a C library function that prints to a FILE* writes, as a string: UCX
// reports its configuration and endpoints only that way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

namespace ucx::detail {

/// The text `print(FILE*)` writes, or nothing when no memory stream could be
/// made (open_memstream failed: out of memory).
template <class Print>
std::optional<std::string> printed(Print&& print) {
    char* buf = nullptr;
    std::size_t len = 0;
    FILE* f = ::open_memstream(&buf, &len);
    if (f == nullptr)
        return std::nullopt;
    print(f);
    std::fclose(f);
    const std::unique_ptr<char, decltype(&std::free)> owned(buf, &std::free);
    return std::string(buf != nullptr ? buf : "", len);
}

} // namespace ucx::detail
