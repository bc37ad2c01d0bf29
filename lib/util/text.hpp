// Small text helpers of the configuration readers: ASCII lower case and
// trimming of white space.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

namespace ucx::detail {

/// `s` in ASCII lower case.
inline std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

/// `s` without the white space at its ends.
inline std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
        s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.remove_suffix(1);
    return s;
}

} // namespace ucx::detail
