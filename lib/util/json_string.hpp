// Internal: a string as a JSON string literal.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace ucx::detail {

/// Appends `s` to `out` as a JSON string, quotes included: `"` and `\`
/// escaped with a backslash, control characters as `\u00XX`; other bytes
/// (UTF-8 included) as they are.
inline void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            out += buf;
        } else {
            out += c;
        }
    }
    out += '"';
}

} // namespace ucx::detail
