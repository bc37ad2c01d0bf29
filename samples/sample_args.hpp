// Command-line helpers shared by the samples.
#pragma once

#include <cstddef>
#include <string>

namespace sample {

/// A non-negative decimal number, or 0 for anything that is not one.
inline std::size_t number(const std::string& s) {
    std::size_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return 0;
        v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    return v;
}

} // namespace sample
