#include <ucx/configuration.hpp>

#include "core/ucx_settings.hpp"
#include "util/text.hpp"

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

extern char** environ;

namespace ucx {

namespace {

using detail::lower;
using detail::trim;

std::optional<bool> parse_bool(std::string_view value) {
    const std::string v = lower(trim(value));
    if (v == "true" || v == "yes" || v == "on" || v == "1")
        return true;
    if (v == "false" || v == "no" || v == "off" || v == "0")
        return false;
    return std::nullopt;
}

std::optional<std::size_t> parse_size(std::string_view value) {
    value = trim(value);
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || value.empty())
        return std::nullopt;
    return n;
}

/// A byte count: a number with an optional binary unit, `k`, `m` or `g`
/// (any case, optionally followed by `b` or `ib`: "512M", "1GiB", "64kb").
std::optional<std::size_t> parse_bytes(std::string_view value) {
    value = trim(value);
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end == value.data())
        return std::nullopt;
    const std::string unit = lower(value.substr(static_cast<std::size_t>(end - value.data())));
    unsigned shift = 0;
    if (unit.empty() || unit == "b")
        shift = 0;
    else if (unit == "k" || unit == "kb" || unit == "kib")
        shift = 10;
    else if (unit == "m" || unit == "mb" || unit == "mib")
        shift = 20;
    else if (unit == "g" || unit == "gb" || unit == "gib")
        shift = 30;
    else
        return std::nullopt;
    if (shift != 0 && n > (std::numeric_limits<std::size_t>::max() >> shift))
        return std::nullopt;
    return n << shift;
}

constexpr std::string_view environment_prefix = "environment__";

} // namespace

error_code set_context_option(context_options& options, std::string_view name,
                              std::string_view value) {
    const std::string key = lower(trim(name));
    if (key.rfind(environment_prefix, 0) == 0) {
        // UCX's spelling: upper case, `_` for `-`. A name UCX does not know
        // would have no effect.
        const std::string setting =
            detail::ucx_setting_name(trim(name).substr(environment_prefix.size()));
        if (!detail::is_ucx_setting(setting))
            return error::unknown_option;
        options.config[setting] = std::string(trim(value));
        return {};
    }
    // The boolean options, by name.
    using flag_of = bool& (*)(context_options&);
    static constexpr std::pair<std::string_view, flag_of> flags[] = {
        {"tcp", [](context_options& o) -> bool& { return o.transports.tcp; }},
        {"shared_memory", [](context_options& o) -> bool& { return o.transports.shared_memory; }},
        {"cma", [](context_options& o) -> bool& { return o.transports.cma; }},
        {"infiniband", [](context_options& o) -> bool& { return o.transports.rdma; }},
        {"cuda_copy", [](context_options& o) -> bool& { return o.transports.cuda_copy; }},
        {"nvlink", [](context_options& o) -> bool& { return o.transports.nvlink; }},
        {"shared_memory_error_handling",
         [](context_options& o) -> bool& { return o.shared_memory_error_handling; }},
        {"ucx_keepalive", [](context_options& o) -> bool& { return o.ucx_keepalive; }},
        {"multi_threaded", [](context_options& o) -> bool& { return o.multi_threaded; }},
        {"create_cuda_context", [](context_options& o) -> bool& { return o.cuda.create_context; }},
    };
    bool* flag = nullptr;
    for (const auto& [n, of] : flags)
        if (key == n)
            flag = &of(options);
    if (flag) {
        const auto b = parse_bool(value);
        if (!b)
            return error::invalid_option;
        *flag = *b;
        return {};
    }
    if (key == "net_devices") {
        std::vector<std::string> devices;
        std::string_view rest = trim(value);
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            const std::string_view d = trim(rest.substr(0, comma));
            if (d.empty())
                return error::invalid_option;
            devices.emplace_back(d);
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            if (comma != std::string_view::npos && trim(rest).empty())
                return error::invalid_option; // a trailing comma
        }
        options.net_devices = std::move(devices);
        return {};
    }
    if (key == "shared_memory_segment_size") {
        const auto n = parse_size(value);
        if (!n || *n < min_shared_memory_segment_size || *n > max_shared_memory_segment_size)
            return error::invalid_option;
        options.shared_memory_segment_size = *n;
        return {};
    }
    if (key == "cuda_device") {
        const auto n = parse_size(value);
        if (!n || *n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
            return error::invalid_option;
        options.cuda.device = static_cast<int>(*n);
        return {};
    }
    if (key == "cuda_pool_size") {
        const auto n = parse_bytes(value);
        if (!n)
            return error::invalid_option;
        options.cuda.pool_size = *n;
        return {};
    }
    if (key == "estimated_endpoints") {
        const auto n = parse_size(value);
        if (!n)
            return error::invalid_option;
        options.estimated_endpoints = *n;
        return {};
    }
    return error::unknown_option;
}

const environment_variable* find_library_variable(std::string_view name) noexcept {
    for (const environment_variable& v : library_environment) {
        const std::string_view rest = v.name.substr(default_environment_prefix.size());
        if (rest.size() == name.size() &&
            std::equal(rest.begin(), rest.end(), name.begin(), [](char a, char b) {
                return std::toupper(static_cast<unsigned char>(a)) ==
                       std::toupper(static_cast<unsigned char>(b));
            }))
            return &v;
    }
    return nullptr;
}

void apply_environment(context_options& options, error_code& ec, std::string_view prefix,
                       std::string* failed) {
    ec = {};
    if (prefix.empty()) {
        ec = error::invalid_option; // every variable would be an option
        return;
    }
    // Applied to a copy: on failure `options` is left as it was.
    context_options out = options;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view var(*e);
        const auto eq = var.find('=');
        if (eq == std::string_view::npos || var.substr(0, eq).rfind(prefix, 0) != 0)
            continue;
        const std::string_view name = var.substr(prefix.size(), eq - prefix.size());
        if (find_library_variable(name))
            continue; // read by the library elsewhere (the registry says where)
        if (ec = set_context_option(out, name, var.substr(eq + 1)); ec) {
            if (failed)
                *failed = std::string(var);
            return;
        }
    }
    options = std::move(out);
}

void apply_configuration_file(context_options& options, const std::string& path, error_code& ec,
                              std::string* failed) {
    ec = {};
    std::ifstream in(path);
    if (!in) {
        ec = error_code(errno != 0 ? errno : ENOENT, boost::system::system_category());
        if (failed)
            *failed = path;
        return;
    }
    context_options out = options;
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); ++number) {
        const std::string_view l = trim(line);
        if (l.empty() || l.front() == '#')
            continue;
        const auto eq = l.find('=');
        ec = eq == std::string_view::npos
                 ? error_code(error::invalid_option)
                 : set_context_option(out, l.substr(0, eq), l.substr(eq + 1));
        if (ec) {
            if (failed)
                *failed = path + ":" + std::to_string(number) + ": " + std::string(l);
            return;
        }
    }
    options = std::move(out);
}

context_options configured_context_options(const std::string& path, std::string_view prefix,
                                           std::vector<std::string>* notes) {
    context_options options;
    error_code ec;
    std::string failed;
    const bool yaml = !path.empty() && is_yaml_configuration_file(path);
    if (!path.empty() && !yaml) {
        apply_configuration_file(options, path, ec, &failed);
        if (ec)
            throw boost::system::system_error(ec, "ucx configuration file " + failed);
    }
    // Dask's file and variables, merged as Dask merges them.
    const std::string files[] = {path};
    apply_dask_configuration(options, std::span<const std::string>(files, yaml ? 1 : 0), ec,
                             &failed, notes);
    if (ec)
        throw boost::system::system_error(ec, "ucx configuration from Dask's " + failed);
    apply_environment(options, ec, prefix, &failed);
    if (ec)
        throw boost::system::system_error(ec, "ucx configuration from the environment " + failed);
    return options;
}

} // namespace ucx
