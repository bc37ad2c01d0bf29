// Internal: the rules of the rendezvous stores, written once. What set, get,
// add, compare_set, check and delete do to a store's keys, the counters that
// add keeps, and the bound on a value: the memory store and the TCPStore
// server keep their keys in a `key_map`, the file store (whose keys are
// files) applies `add` and `compare_set` to the value it read.
//
// Where torch.distributed's TCPStore server defines the behaviour, the rules
// are its rules:
//
//   set(k, v)                k = v (replacing any value; an empty value too)
//   get(k)                   the value of k, or missing
//   add(k, d)                k missing: k = d; k a counter n: k = n + d;
//                            else not_a_counter (k unchanged); n + d outside
//                            int64: overflow (k unchanged). The result is
//                            the new value, stored as decimal text.
//   compare_set(k, e, d)     k missing and e empty: k = d, gives d;
//                            k missing, e not empty: unchanged, gives e;
//                            k == e: k = d, gives d;
//                            else unchanged, gives the value of k.
//   check(ks)                whether every key of ks is set (true for none)
//   erase(k)                 removes k; whether it was set
//
// A counter is the decimal text of an int64: an optional '-' and one digit or
// more, nothing else (no sign '+', no space, not empty).
//
// Sans-io: no I/O and no Asio here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ucx::detail::store_rules {

using value = std::vector<std::byte>;
using bytes_view = std::span<const std::byte>;

/// The largest value the stores hold by default (64 MiB): the file store's
/// `max_value_size`, the TCPStore server's and client's.
inline constexpr std::size_t default_max_value_size = 64 * 1024 * 1024;

/// What a rule decided.
enum class status : std::uint8_t {
    ok,
    /// add: the key's value is not a counter.
    not_a_counter,
    /// add: the sum is outside int64.
    overflow,
};

/// The counter `v` holds, or nothing when it is not one.
std::optional<std::int64_t> parse_counter(bytes_view v) noexcept;

/// The value that holds the counter `n` (its decimal text).
value counter_value(std::int64_t n);

/// What add does: `current` is the key's value (null: missing).
struct add_result {
    status st = status::ok;
    /// The new value of the counter (when ok).
    std::int64_t value = 0;
};
add_result add(const value* current, std::int64_t delta) noexcept;

/// What compare_set does.
enum class cas_outcome : std::uint8_t {
    /// The key is set to desired, which is the answer.
    set_desired,
    /// The key is unchanged; the answer is its value.
    keep_current,
    /// The key is missing and stays so; the answer is expected.
    keep_missing,
};
/// `current` is the key's value (null: missing).
cas_outcome compare_set(const value* current, bytes_view expected) noexcept;

/// A store's keys, under the rules above.
class key_map {
public:
    /// Sets `key` to `v`.
    void set(const std::string& key, value v);
    /// The value of `key`, or null (valid until the next change).
    const value* find(const std::string& key) const;
    /// Adds `delta` to the counter `key`.
    add_result add(const std::string& key, std::int64_t delta);

    struct cas_result {
        /// The answer: the key's value afterwards, or expected for a key that
        /// stays missing.
        value answer;
        /// Whether the key was set (to desired).
        bool set = false;
    };
    cas_result compare_set(const std::string& key, const value& expected, value desired);
    /// Whether every key of `keys` is set.
    bool check(std::span<const std::string> keys) const;
    /// Removes `key`; whether it was set.
    bool erase(const std::string& key);
    /// The number of keys.
    std::size_t size() const noexcept { return keys_.size(); }

private:
    std::unordered_map<std::string, value> keys_;
};

} // namespace ucx::detail::store_rules
