// The value that one process publishes in a round of a store over a
// launcher's key-value space (round_store.hpp): every key it set since the
// last round, with its value. Sans-io.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace ucx::detail {

/// The keys and values of one round's value.
using round_keys = std::map<std::string, std::vector<std::byte>>;

/// One round's value: for each key, its size, its bytes, its value's size
/// and bytes (sizes as 32-bit little-endian).
std::vector<std::byte> encode_round(const round_keys& keys);

/// Decodes one round's value into `keys` (adding to what it holds); false
/// when malformed.
bool decode_round(const char* data, std::size_t size, round_keys& keys);

} // namespace ucx::detail
