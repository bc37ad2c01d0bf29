// Small text helpers: ASCII lower case and trimming of white space (the
// configuration readers), hexadecimal digits (PMI-1's values, JSON's
// escapes).
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

/// The value of the hexadecimal digit `c` (either case), or -1.
constexpr int hex_digit(char c) noexcept {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

} // namespace ucx::detail
