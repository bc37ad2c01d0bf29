// Dask's configuration of UCX, as distributed-ucxx reads it, turned into a
// context's options. The tree of keys is built from YAML files and `DASK_*`
// variables (dask_configuration.cpp); `translate_dask` is the translation
// itself, which reads no file and no environment.
#pragma once

#include <ucx/context.hpp>
#include <ucx/error.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ucx::detail {

/// A value of Dask's configuration, as Python sees it after YAML or
/// `ast.literal_eval`.
struct dask_value {
    enum class kind { null, boolean, integer, real, string, sequence, map };
    kind type = kind::null;
    bool boolean = false;
    long long integer = 0;
    double real = 0;
    /// The text: a string's, a scalar's as written.
    std::string text;
    /// A map's entries, by canonical key (`_` written as `-`).
    std::map<std::string, dask_value> entries;
    /// Where it was set: `PATH:LINE` or `DASK_NAME=value`.
    std::string origin;

    /// Python's truth of the value.
    bool truthy() const noexcept;
};

/// Dask's key with `_` and `-` the same: `-` throughout.
std::string dask_canonical_key(std::string_view key);

/// Dask's `parse_bytes`: a number with an optional decimal (`kB`, `MB`,
/// `GB`, `TB`, `PB`, or their first letter) or binary (`KiB` ... `PiB`, or
/// `Ki` ...) unit, any case, spaces ignored: "1GB" is 10^9, "1GiB" 2^30.
/// Fails (false) on another unit, a negative number or an overflow.
bool parse_dask_bytes(std::string_view text, std::size_t& out);

/// Dask's `interpret_value`: an environment variable's value as
/// `ast.literal_eval` reads it (`True`, `None`, `8192`, `1e9`, `'text'`,
/// `{"rndv-thresh": "8k"}`), else `true`, `false`, `none`, `null` in any
/// case, else the text.
dask_value interpret_dask_value(std::string_view text, const std::string& origin);

/// Merges `source` into `tree` (maps key by key, anything else replaces).
void merge_dask_tree(dask_value& tree, dask_value source);

/// Sets `path` (keys, from the root) to `value` in `tree`.
void set_dask_key(dask_value& tree, const std::vector<std::string>& path, dask_value value);

/// Translates the UCX part of a Dask configuration tree into `options`, as
/// distributed-ucxx does (see dask_configuration.cpp). `getenv` answers
/// whether a `UCX_*` variable is set, which takes precedence. On an error,
/// `failed` names the key and `options` is unchanged; `notes` gains one line
/// for each key that had no effect, and why.
error_code translate_dask(const dask_value& tree, context_options& options,
                          const std::function<const char*(const char*)>& getenv,
                          std::string& failed, std::vector<std::string>& notes);

} // namespace ucx::detail
