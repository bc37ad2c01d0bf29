// Internal: JSON, written and read (the flight records, the endpoint
// reports): a string's escaping, and a small reader bounded in depth.
#pragma once

#include "util/text.hpp"

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

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

/// The value whose name in `names` is `s` (its index), if any.
template <class E, std::size_t N>
bool value_of(const std::array<std::string_view, N>& names, std::string_view s, E& v) noexcept {
    for (std::size_t i = 0; i < N; ++i)
        if (names[i] == s) {
            v = static_cast<E>(i);
            return true;
        }
    return false;
}

/// A JSON value as the reader gives it (numbers as doubles).
struct json;
using json_object = std::map<std::string, json, std::less<>>;
using json_array = std::vector<json>;
struct json {
    std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object> v;
};

/// Reads one JSON document: `document(out)` is false for anything else, or
/// for nesting deeper than 16.
class json_reader {
public:
    explicit json_reader(std::string_view s) : s_(s) {}

    bool document(json& out) {
        if (!value(out, 0))
            return false;
        skip_space();
        return i_ == s_.size();
    }

private:
    static constexpr int max_depth = 16;

    void skip_space() noexcept {
        while (i_ < s_.size() &&
               (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
            ++i_;
    }
    bool literal(std::string_view word) noexcept {
        if (s_.substr(i_, word.size()) != word)
            return false;
        i_ += word.size();
        return true;
    }
    bool value(json& out, int depth) {
        if (depth > max_depth)
            return false;
        skip_space();
        if (i_ == s_.size())
            return false;
        switch (s_[i_]) {
        case '{':
            return object(out, depth);
        case '[':
            return array(out, depth);
        case '"': {
            std::string s;
            if (!string(s))
                return false;
            out.v = std::move(s);
            return true;
        }
        case 't':
            out.v = true;
            return literal("true");
        case 'f':
            out.v = false;
            return literal("false");
        case 'n':
            out.v = nullptr;
            return literal("null");
        default:
            return number(out);
        }
    }
    bool object(json& out, int depth) {
        ++i_; // '{'
        json_object o;
        skip_space();
        if (i_ < s_.size() && s_[i_] == '}') {
            ++i_;
            out.v = std::move(o);
            return true;
        }
        for (;;) {
            skip_space();
            std::string name;
            if (i_ == s_.size() || s_[i_] != '"' || !string(name))
                return false;
            skip_space();
            if (i_ == s_.size() || s_[i_] != ':')
                return false;
            ++i_;
            json v;
            if (!value(v, depth + 1))
                return false;
            o.insert_or_assign(std::move(name), std::move(v));
            skip_space();
            if (i_ == s_.size())
                return false;
            if (s_[i_] == '}') {
                ++i_;
                out.v = std::move(o);
                return true;
            }
            if (s_[i_] != ',')
                return false;
            ++i_;
        }
    }
    bool array(json& out, int depth) {
        ++i_; // '['
        json_array a;
        skip_space();
        if (i_ < s_.size() && s_[i_] == ']') {
            ++i_;
            out.v = std::move(a);
            return true;
        }
        for (;;) {
            json v;
            if (!value(v, depth + 1))
                return false;
            a.push_back(std::move(v));
            skip_space();
            if (i_ == s_.size())
                return false;
            if (s_[i_] == ']') {
                ++i_;
                out.v = std::move(a);
                return true;
            }
            if (s_[i_] != ',')
                return false;
            ++i_;
        }
    }
    /// A string (at its opening quote); \u escapes become UTF-8 (a lone
    /// surrogate as it is).
    bool string(std::string& out) {
        ++i_;
        while (i_ < s_.size()) {
            const char c = s_[i_++];
            if (c == '"')
                return true;
            if (static_cast<unsigned char>(c) < 0x20)
                return false;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i_ == s_.size())
                return false;
            const char e = s_[i_++];
            switch (e) {
            case '"':
            case '\\':
            case '/':
                out += e;
                break;
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                if (s_.size() - i_ < 4)
                    return false;
                unsigned code = 0;
                for (int k = 0; k < 4; ++k) {
                    const int h = hex_digit(s_[i_++]);
                    if (h < 0)
                        return false;
                    code = code * 16 + static_cast<unsigned>(h);
                }
                if (code < 0x80) {
                    out += static_cast<char>(code);
                } else if (code < 0x800) {
                    out += static_cast<char>(0xC0 | (code >> 6));
                    out += static_cast<char>(0x80 | (code & 0x3F));
                } else {
                    out += static_cast<char>(0xE0 | (code >> 12));
                    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
                    out += static_cast<char>(0x80 | (code & 0x3F));
                }
                break;
            }
            default:
                return false;
            }
        }
        return false;
    }
    bool number(json& out) {
        const std::size_t start = i_;
        if (i_ < s_.size() && s_[i_] == '-')
            ++i_;
        const std::size_t digits = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9')
            ++i_;
        if (i_ == digits)
            return false;
        if (i_ < s_.size() && s_[i_] == '.') {
            ++i_;
            const std::size_t frac = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9')
                ++i_;
            if (i_ == frac)
                return false;
        }
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-'))
                ++i_;
            const std::size_t exp = i_;
            while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9')
                ++i_;
            if (i_ == exp)
                return false;
        }
        double d = 0;
        const auto r = std::from_chars(s_.data() + start, s_.data() + i_, d);
        if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range)
            return false;
        out.v = d;
        return true;
    }

    std::string_view s_;
    std::size_t i_ = 0;
};

/// The fields of one object, read with their types checked.
class json_fields {
public:
    explicit json_fields(const json_object& o) : o_(o) {}
    bool ok() const noexcept { return ok_; }

    const json* find(std::string_view name) const {
        const auto it = o_.find(name);
        return it == o_.end() ? nullptr : &it->second;
    }
    template <class T>
    void integer(std::string_view name, T& out, bool required = true) {
        const json* j = find(name);
        if (!j) {
            ok_ = ok_ && !required;
            return;
        }
        const auto* d = std::get_if<double>(&j->v);
        // Integers up to 2^53 are exact in a double (every count and time
        // of a record is far below).
        constexpr double limit = 9007199254740992.0;
        if (!d || !(*d <= limit && *d >= -limit) ||
            *d != static_cast<double>(static_cast<std::int64_t>(*d)) ||
            (std::is_unsigned_v<T> && *d < 0) ||
            *d > static_cast<double>(std::numeric_limits<T>::max()) ||
            *d < static_cast<double>(std::numeric_limits<T>::lowest())) {
            ok_ = false;
            return;
        }
        out = static_cast<T>(*d);
    }
    void text(std::string_view name, std::string& out, bool required = true) {
        const json* j = find(name);
        if (!j) {
            ok_ = ok_ && !required;
            return;
        }
        const auto* s = std::get_if<std::string>(&j->v);
        if (!s) {
            ok_ = false;
            return;
        }
        out = *s;
    }
    template <class E, std::size_t N>
    bool named(std::string_view name, const std::array<std::string_view, N>& names, E& out,
               bool required = true) {
        std::string s;
        const bool present = find(name) != nullptr;
        text(name, s, required);
        if (!present || !ok_)
            return false;
        if (!value_of(names, s, out))
            ok_ = false;
        return ok_;
    }

private:
    const json_object& o_;
    bool ok_ = true;
};

} // namespace ucx::detail
