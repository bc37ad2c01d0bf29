#include "store/store_rules.hpp"

#include <algorithm>
#include <charconv>

namespace ucx::detail::store_rules {

std::optional<std::int64_t> parse_counter(bytes_view v) noexcept {
    if (v.empty())
        return std::nullopt;
    const auto* b = reinterpret_cast<const char*>(v.data());
    const auto* e = b + v.size();
    // from_chars takes an optional '-' and digits, nothing else.
    std::int64_t n = 0;
    const auto [p, ec] = std::from_chars(b, e, n);
    if (ec != std::errc() || p != e)
        return std::nullopt;
    return n;
}

value counter_value(std::int64_t n) {
    char text[24];
    const auto [p, ec] = std::to_chars(text, text + sizeof text, n);
    (void)ec; // 20 characters at most
    const auto* b = reinterpret_cast<const std::byte*>(text);
    return value(b, reinterpret_cast<const std::byte*>(p));
}

add_result add(const value* current, std::int64_t delta) noexcept {
    std::int64_t old = 0;
    if (current) {
        const auto n = parse_counter(*current);
        if (!n)
            return {status::not_a_counter, 0};
        old = *n;
    }
    std::int64_t sum = 0;
    if (__builtin_add_overflow(old, delta, &sum))
        return {status::overflow, 0};
    return {status::ok, sum};
}

cas_outcome compare_set(const value* current, bytes_view expected) noexcept {
    if (!current)
        return expected.empty() ? cas_outcome::set_desired : cas_outcome::keep_missing;
    if (std::ranges::equal(*current, expected))
        return cas_outcome::set_desired;
    return cas_outcome::keep_current;
}

void key_map::set(const std::string& key, value v) {
    keys_[key] = std::move(v);
}

const value* key_map::find(const std::string& key) const {
    const auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second;
}

add_result key_map::add(const std::string& key, std::int64_t delta) {
    const auto r = store_rules::add(find(key), delta);
    if (r.st == status::ok)
        keys_[key] = counter_value(r.value);
    return r;
}

key_map::cas_result key_map::compare_set(const std::string& key, const value& expected,
                                         value desired) {
    const value* current = find(key);
    switch (store_rules::compare_set(current, expected)) {
    case cas_outcome::set_desired: {
        auto& slot = keys_[key];
        slot = std::move(desired);
        return {slot, true};
    }
    case cas_outcome::keep_current:
        return {*current, false};
    case cas_outcome::keep_missing:
        break;
    }
    return {expected, false};
}

bool key_map::check(std::span<const std::string> keys) const {
    return std::ranges::all_of(keys, [this](const std::string& k) { return keys_.contains(k); });
}

bool key_map::erase(const std::string& key) {
    return keys_.erase(key) > 0;
}

} // namespace ucx::detail::store_rules
