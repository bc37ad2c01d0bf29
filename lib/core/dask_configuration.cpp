#include <ucx/configuration.hpp>
#include <ucx/log.hpp>

#include "core/dask_configuration.hpp"
#include "core/ucx_settings.hpp"
#include "util/text.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

extern char** environ;

// Dask's configuration of UCX, with the meaning distributed-ucxx gives it.
//
// Where it comes from. Dask merges YAML files, then the environment: a
// variable `DASK_A__B_C=value` sets the key `a.b_c` (lower case, `__` nests)
// to the value as Python's `ast.literal_eval` reads it (else `true`, `false`,
// `none`, `null` in any case, else the text). Dask treats `_` and `-` in a
// key as the same.
//
// The keys distributed-ucxx reads, each under `distributed-ucxx.` first and,
// where that is absent or null, under the former `distributed.comm.ucx.`
// (here also under the oldest `ucx.`, of Distributed's first UCX releases):
// `tcp`, `nvlink`, `infiniband`, `rdmacm`, `cuda-copy`, `create-cuda-context`,
// `multi-buffer`, `environment`; and `distributed-ucxx.rmm.pool-size`, else
// `distributed.rmm.pool-size`.
//
// What they mean (distributed-ucxx's `_prepare_ucx_config` and `init_once`):
// - when `tcp`, `nvlink` or `infiniband` is true, `UCX_TLS` becomes the list
//   of exactly the transports asked for, `[rc,]tcp[,cuda_copy][,cuda_ipc]`:
//   `tcp` always, `rc` for `infiniband`, `cuda_copy` for `nvlink` or
//   `cuda-copy`, `cuda_ipc` for `nvlink`; and `UCX_SOCKADDR_TLS_PRIORITY`
//   becomes `rdmacm` when `rdmacm` is true, else `tcp`. Otherwise neither is
//   set and UCX chooses;
// - each `environment` entry `some-name: value` is the UCX setting
//   `UCX_SOME_NAME=value`, except `TLS` and `SOCKADDR_TLS_PRIORITY` where
//   the switches above set them;
// - a `UCX_*` variable of the process's environment wins over both;
// - a CUDA context is made before UCX starts when `create-cuda-context` is
//   true (the boolean), or when the resulting `UCX_TLS` names a CUDA
//   transport (`cuda` in it, not `^cuda`);
// - `rmm.pool-size` (bytes, sizes as Dask's `parse_bytes`: 1GB is 10^9) is
//   the device memory pool.

namespace ucx::detail {

namespace {

bool parse_integer(std::string_view s, long long& out) {
    if (!s.empty() && s.front() == '+')
        s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

bool parse_real(std::string_view s, double& out) {
    if (!s.empty() && s.front() == '+')
        s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(out);
}

dask_value scalar(dask_value::kind type, std::string text, const std::string& origin) {
    dask_value v;
    v.type = type;
    v.text = std::move(text);
    v.origin = origin;
    return v;
}

// A plain YAML scalar as PyYAML (YAML 1.1, which Dask uses) resolves it.
dask_value resolve_plain(const std::string& text, const std::string& origin) {
    using kind = dask_value::kind;
    if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL")
        return scalar(kind::null, text, origin);
    static constexpr std::string_view yes[] = {"true", "True", "TRUE", "yes", "Yes",
                                               "YES",  "on",   "On",   "ON"};
    static constexpr std::string_view no[] = {"false", "False", "FALSE", "no", "No",
                                              "NO",    "off",   "Off",   "OFF"};
    for (std::string_view y : yes)
        if (text == y) {
            dask_value v = scalar(kind::boolean, text, origin);
            v.boolean = true;
            return v;
        }
    for (std::string_view n : no)
        if (text == n)
            return scalar(kind::boolean, text, origin);
    dask_value v = scalar(kind::integer, text, origin);
    if (parse_integer(text, v.integer))
        return v;
    // YAML 1.1's floats have a dot ("1e9" is a string to PyYAML).
    v.type = kind::real;
    if (text.find('.') != std::string::npos && parse_real(text, v.real))
        return v;
    return scalar(kind::string, text, origin);
}

dask_value from_yaml(const YAML::Node& node, const std::string& path) {
    const std::string origin = path + ":" + std::to_string(node.Mark().line + 1);
    switch (node.Type()) {
    case YAML::NodeType::Map: {
        dask_value v = scalar(dask_value::kind::map, {}, origin);
        for (const auto& entry : node) {
            const std::string key =
                entry.first.IsScalar() ? entry.first.Scalar() : std::string("?");
            v.entries[dask_canonical_key(key)] = from_yaml(entry.second, path);
        }
        return v;
    }
    case YAML::NodeType::Sequence:
        return scalar(dask_value::kind::sequence, "[...]", origin);
    case YAML::NodeType::Scalar:
        // A quoted scalar (tag "!") is a string; a plain one ("?") resolves.
        if (node.Tag() == "?")
            return resolve_plain(node.Scalar(), origin);
        return scalar(dask_value::kind::string, node.Scalar(), origin);
    default:
        return scalar(dask_value::kind::null, {}, origin);
    }
}

const dask_value* find(const dask_value& tree, std::initializer_list<std::string_view> path) {
    const dask_value* at = &tree;
    for (std::string_view key : path) {
        if (at->type != dask_value::kind::map)
            return nullptr;
        const auto it = at->entries.find(std::string(key));
        if (it == at->entries.end())
            return nullptr;
        at = &it->second;
    }
    return at;
}

bool is_null(const dask_value* v) noexcept {
    return v == nullptr || v->type == dask_value::kind::null;
}

// The dotted name of a key of a section, for messages.
std::string dotted(std::string_view section, std::string_view key) {
    return std::string(section) + "." + std::string(key);
}

/// The sections distributed-ucxx reads, newest first.
struct section {
    std::string_view path[3];
    std::size_t depth;
    std::string_view name;
};
constexpr section ucx_sections[] = {
    {{"distributed-ucxx"}, 1, "distributed-ucxx"},
    {{"distributed", "comm", "ucx"}, 3, "distributed.comm.ucx"},
    {{"ucx"}, 1, "ucx"},
};

// The section's map in `tree`, or null.
const dask_value* section_of(const dask_value& tree, const section& s) {
    const dask_value* at = &tree;
    for (std::size_t i = 0; i < s.depth && at != nullptr; ++i)
        at = find(*at, {s.path[i]});
    return at;
}

// The keys each section may hold; any other is a misspelling.
bool known_ucx_key(std::string_view key) {
    static constexpr std::string_view keys[] = {
        "tcp",
        "nvlink",
        "infiniband",
        "rdmacm",
        "cuda-copy",
        "create-cuda-context",
        "multi-buffer",
        "environment",
        "rmm",
        "version",
        "connect-timeout",
        "net-devices",
        "reuse-endpoints",
    };
    return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
}

/// Where a key was found, and its value.
struct found {
    const dask_value* value = nullptr;
    std::string name; // the dotted key
};

// distributed-ucxx's `get_ucx_config`: the newest section's value unless it is
// absent or null, then the older ones'.
found ucx_key(const dask_value& tree, std::string_view key) {
    for (const section& s : ucx_sections) {
        const dask_value* sec = section_of(tree, s);
        if (sec == nullptr)
            continue;
        if (const dask_value* v = find(*sec, {key}); !is_null(v))
            return {v, dotted(s.name, key)};
    }
    return {};
}

// A switch: null (absent), a boolean, or a number as Python's truth.
error_code switch_value(const found& f, std::optional<bool>& out, std::string& failed) {
    out.reset();
    if (f.value == nullptr)
        return {};
    switch (f.value->type) {
    case dask_value::kind::boolean:
        out = f.value->boolean;
        return {};
    case dask_value::kind::integer:
    case dask_value::kind::real:
        out = f.value->truthy();
        return {};
    default:
        failed = f.value->origin + ": " + f.name + ": " + f.value->text + " (not a boolean)";
        return error::invalid_option;
    }
}

// A scalar's text as a UCX setting's value.
std::optional<std::string> setting_text(const dask_value& v) {
    switch (v.type) {
    case dask_value::kind::boolean:
        return std::string(v.boolean ? "y" : "n");
    case dask_value::kind::integer:
    case dask_value::kind::real:
    case dask_value::kind::string:
        return v.text;
    default:
        return std::nullopt;
    }
}

} // namespace

bool dask_value::truthy() const noexcept {
    switch (type) {
    case kind::null:
        return false;
    case kind::boolean:
        return boolean;
    case kind::integer:
        return integer != 0;
    case kind::real:
        return real != 0;
    case kind::string:
        return !text.empty();
    case kind::sequence:
        return true;
    case kind::map:
        return !entries.empty();
    }
    return false;
}

std::string dask_canonical_key(std::string_view key) {
    std::string out(key);
    std::replace(out.begin(), out.end(), '_', '-');
    return out;
}

bool parse_dask_bytes(std::string_view text, std::size_t& out) {
    std::string s;
    for (char c : text)
        if (c != ' ')
            s += c;
    // Without a digit, one of the unit ("MB" is one MB).
    if (std::none_of(s.begin(), s.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
        s.insert(0, "1");
    std::size_t unit_at = s.size();
    while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(s[unit_at - 1])))
        --unit_at;
    double n = 0;
    if (!parse_real(std::string_view(s).substr(0, unit_at), n) || n < 0)
        return false;
    const std::string unit = lower(std::string_view(s).substr(unit_at));
    static constexpr std::pair<std::string_view, double> units[] = {
        {"", 1},
        {"b", 1},
        {"kb", 1e3},
        {"mb", 1e6},
        {"gb", 1e9},
        {"tb", 1e12},
        {"pb", 1e15},
        {"k", 1e3},
        {"m", 1e6},
        {"g", 1e9},
        {"t", 1e12},
        {"p", 1e15},
        {"kib", 1024},
        {"mib", 1048576.0},
        {"gib", 1073741824.0},
        {"tib", 1099511627776.0},
        {"pib", 1125899906842624.0},
        {"ki", 1024},
        {"mi", 1048576.0},
        {"gi", 1073741824.0},
        {"ti", 1099511627776.0},
        {"pi", 1125899906842624.0},
    };
    for (const auto& [name, multiplier] : units)
        if (unit == name) {
            const double bytes = std::floor(n * multiplier);
            if (!(bytes < static_cast<double>(std::numeric_limits<std::size_t>::max())))
                return false;
            out = static_cast<std::size_t>(bytes);
            return true;
        }
    return false;
}

dask_value interpret_dask_value(std::string_view raw, const std::string& origin) {
    using kind = dask_value::kind;
    const std::string text(raw);
    const std::string_view t = trim(raw);
    // Python's literals.
    if (t == "True" || t == "False") {
        dask_value v = scalar(kind::boolean, text, origin);
        v.boolean = t == "True";
        return v;
    }
    if (t == "None")
        return scalar(kind::null, text, origin);
    if (dask_value v = scalar(kind::integer, text, origin); parse_integer(t, v.integer))
        return v;
    if (dask_value v = scalar(kind::real, text, origin); parse_real(t, v.real))
        return v;
    if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front())
        return scalar(kind::string, std::string(t.substr(1, t.size() - 2)), origin);
    if (!t.empty() && t.front() == '{' && t.back() == '}') {
        // A dict literal is also a YAML flow mapping ('{"rndv-thresh": "8k"}').
        try {
            const YAML::Node node = YAML::Load(std::string(t));
            if (node.IsMap()) {
                dask_value v = from_yaml(node, origin);
                v.origin = origin;
                for (auto& [k, e] : v.entries) {
                    (void)k;
                    e.origin = origin;
                }
                return v;
            }
        } catch (const YAML::Exception&) {
        }
    }
    // Dask's own words, in any case.
    const std::string l = lower(t);
    if (l == "none" || l == "null")
        return scalar(kind::null, text, origin);
    if (l == "true" || l == "false") {
        dask_value v = scalar(kind::boolean, text, origin);
        v.boolean = l == "true";
        return v;
    }
    return scalar(kind::string, text, origin);
}

void merge_dask_tree(dask_value& tree, dask_value source) {
    if (tree.type != dask_value::kind::map || source.type != dask_value::kind::map) {
        tree = std::move(source);
        return;
    }
    for (auto& [key, value] : source.entries) {
        auto it = tree.entries.find(key);
        if (it == tree.entries.end())
            tree.entries.emplace(key, std::move(value));
        else
            merge_dask_tree(it->second, std::move(value));
    }
}

void set_dask_key(dask_value& tree, const std::vector<std::string>& path, dask_value value) {
    dask_value* at = &tree;
    for (std::size_t i = 0; i < path.size(); ++i) {
        if (at->type != dask_value::kind::map) {
            *at = dask_value{};
            at->type = dask_value::kind::map;
            at->origin = value.origin;
        }
        dask_value& next = at->entries[dask_canonical_key(path[i])];
        if (i + 1 == path.size()) {
            merge_dask_tree(next, std::move(value));
            return;
        }
        at = &next;
    }
}

error_code translate_dask(const dask_value& tree, context_options& options,
                          const std::function<const char*(const char*)>& getenv,
                          std::string& failed, std::vector<std::string>& notes) {
    context_options out = options;
    std::vector<std::string> said;
    auto note = [&](const found& f, std::string why) {
        said.push_back(f.value->origin + ": " + f.name + ": " + std::move(why));
    };

    // Every key of the sections is one distributed-ucxx knows.
    for (const section& s : ucx_sections) {
        const dask_value* sec = section_of(tree, s);
        if (sec == nullptr || sec->type == dask_value::kind::null)
            continue;
        if (sec->type != dask_value::kind::map) {
            failed = sec->origin + ": " + std::string(s.name) + ": " + sec->text + " (not a map)";
            return error::invalid_option;
        }
        for (const auto& [key, value] : sec->entries)
            if (!known_ucx_key(key)) {
                failed = value.origin + ": " + dotted(s.name, key);
                return error::unknown_option;
            }
    }
    // The pool size's sections hold it alone.
    for (const auto& [top, name] : {std::pair{"distributed", "distributed.rmm"},
                                    std::pair{"distributed-ucxx", "distributed-ucxx.rmm"}}) {
        const dask_value* rmm = find(tree, {top, "rmm"});
        if (rmm == nullptr || rmm->type != dask_value::kind::map)
            continue;
        for (const auto& [key, value] : rmm->entries)
            if (key != "pool-size") {
                failed = value.origin + ": " + dotted(name, key);
                return error::unknown_option;
            }
    }

    // The transport switches.
    std::optional<bool> tcp, nvlink, infiniband, rdmacm, cuda_copy, create_context;
    const found f_tcp = ucx_key(tree, "tcp"), f_nvlink = ucx_key(tree, "nvlink"),
                f_ib = ucx_key(tree, "infiniband"), f_rdmacm = ucx_key(tree, "rdmacm"),
                f_cuda_copy = ucx_key(tree, "cuda-copy"),
                f_create = ucx_key(tree, "create-cuda-context");
    for (auto [f, v] : {std::pair{&f_tcp, &tcp}, std::pair{&f_nvlink, &nvlink},
                        std::pair{&f_ib, &infiniband}, std::pair{&f_rdmacm, &rdmacm},
                        std::pair{&f_cuda_copy, &cuda_copy}, std::pair{&f_create, &create_context}})
        if (error_code ec = switch_value(*f, *v, failed); ec)
            return ec;

    std::map<std::string, std::string> high_level;
    if (tcp.value_or(false) || nvlink.value_or(false) || infiniband.value_or(false)) {
        std::string tls = "tcp";
        if (nvlink.value_or(false) || cuda_copy.value_or(false))
            tls += ",cuda_copy";
        if (infiniband.value_or(false))
            tls = "rc," + tls;
        if (nvlink.value_or(false))
            tls += ",cuda_ipc";
        high_level["TLS"] = tls;
        high_level["SOCKADDR_TLS_PRIORITY"] = rdmacm.value_or(false) ? "rdmacm" : "tcp";
    } else if (rdmacm.value_or(false) || cuda_copy.value_or(false)) {
        const found& f = rdmacm.value_or(false) ? f_rdmacm : f_cuda_copy;
        note(f, "no effect without tcp, nvlink or infiniband (as in distributed-ucxx): UCX "
                "chooses the transports");
    }
    const found source_of_tls = f_tcp.value ? f_tcp : f_nvlink.value ? f_nvlink : f_ib;
    std::map<std::string, std::string> settings;
    for (const auto& [key, value] : high_level) {
        const std::string env = "UCX_" + key;
        if (getenv(env.c_str()) != nullptr)
            note(source_of_tls, "UCX_" + key + "=" + value + " not set: the environment's " + env +
                                    " takes precedence");
        else
            settings[key] = value;
    }

    // The UCX settings by name.
    if (const found env = ucx_key(tree, "environment"); env.value != nullptr) {
        if (env.value->type != dask_value::kind::map) {
            failed = env.value->origin + ": " + env.name + ": " + env.value->text + " (not a map)";
            return error::invalid_option;
        }
        for (const auto& [key, value] : env.value->entries) {
            const std::string setting = ucx_setting_name(key);
            const found entry{&value, env.name + "." + key};
            const auto text = setting_text(value);
            if (!text) {
                failed = value.origin + ": " + entry.name + " (not a single value)";
                return error::invalid_option;
            }
            if (!is_ucx_setting(setting)) {
                failed = value.origin + ": " + entry.name + ": UCX_" + setting +
                         " is not a setting of the UCX library loaded (" +
                         ucx_runtime_version().to_string() + ")";
                return error::unknown_option;
            }
            const std::string variable = "UCX_" + setting;
            if (high_level.contains(setting))
                note(entry, "not set: " + setting + "=" + high_level[setting] +
                                " from the transport switches takes precedence");
            else if (getenv(variable.c_str()) != nullptr)
                note(entry, "not set: the environment's " + variable + " takes precedence");
            else
                settings[setting] = *text;
        }
    }

    // A CUDA context before UCX starts.
    std::string tls;
    if (const char* e = getenv("UCX_TLS"))
        tls = e;
    else if (settings.contains("TLS"))
        tls = settings["TLS"];
    if (create_context.value_or(false) && f_create.value->type == dask_value::kind::boolean)
        out.cuda.create_context = true;
    else if (create_context.value_or(false))
        note(f_create, "not the boolean True: no CUDA context is made (as in distributed-ucxx)");
    if (tls.find("cuda") != std::string::npos && tls.find("^cuda") == std::string::npos)
        out.cuda.create_context = true;

    // The device memory pool.
    found pool{find(tree, {"distributed-ucxx", "rmm", "pool-size"}),
               "distributed-ucxx.rmm.pool-size"};
    if (is_null(pool.value))
        pool = {find(tree, {"distributed", "rmm", "pool-size"}), "distributed.rmm.pool-size"};
    if (!is_null(pool.value)) {
        std::size_t bytes = 0;
        bool ok = false;
        if (pool.value->type == dask_value::kind::integer && pool.value->integer >= 0) {
            bytes = static_cast<std::size_t>(pool.value->integer);
            ok = true;
        } else if (pool.value->type == dask_value::kind::real && pool.value->real >= 0) {
            ok = parse_dask_bytes(pool.value->text, bytes);
        } else if (pool.value->type == dask_value::kind::string) {
            ok = parse_dask_bytes(pool.value->text, bytes);
        }
        if (!ok) {
            failed =
                pool.value->origin + ": " + pool.name + ": " + pool.value->text + " (not a size)";
            return error::invalid_option;
        }
        out.cuda.pool_size = bytes;
    }
    if (const dask_value* r = find(tree, {"distributed", "comm", "ucx", "rmm"}); !is_null(r))
        note({r, "distributed.comm.ucx.rmm"}, "not read (nor by distributed-ucxx): the former "
                                              "key is distributed.rmm.pool-size");

    // The network devices of the oldest section.
    if (const found devices = ucx_key(tree, "net-devices"); devices.value != nullptr) {
        if (devices.value->type != dask_value::kind::string) {
            failed = devices.value->origin + ": " + devices.name + ": " + devices.value->text +
                     " (not a device list)";
            return error::invalid_option;
        }
        std::vector<std::string> list;
        std::string_view rest = devices.value->text;
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            if (const std::string_view d = trim(rest.substr(0, comma)); !d.empty())
                list.emplace_back(d);
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
        out.net_devices = std::move(list);
    }

    // What has no effect here.
    if (const found f = ucx_key(tree, "multi-buffer"); f.value != nullptr && f.value->truthy())
        note(f, "no effect: each buffer is one message of this library (a transfer "
                "strategy between Dask peers)");
    if (const found f = ucx_key(tree, "connect-timeout"); f.value != nullptr)
        note(f, "no effect (nor in distributed-ucxx): bound a connection with the deadline of "
                "ucx::async_connect");
    if (const found f = ucx_key(tree, "reuse-endpoints"); f.value != nullptr)
        note(f, "no effect: endpoints are never reused across connections");

    for (auto& [key, value] : settings)
        out.config[key] = std::move(value);
    options = std::move(out);
    notes.insert(notes.end(), said.begin(), said.end());
    return {};
}

} // namespace ucx::detail

namespace ucx {

namespace {

// The prefixes of the Dask variables that hold UCX keys (a variable under
// `DASK_` sets a key of Dask's tree; only these sections are read here).
constexpr std::string_view dask_prefix = "DASK_";

bool read_dask_file(detail::dask_value& tree, const std::string& path, error_code& ec,
                    std::string& failed) {
    std::ifstream in(path);
    if (!in) {
        ec = error_code(errno != 0 ? errno : ENOENT, boost::system::system_category());
        failed = path;
        return false;
    }
    try {
        const YAML::Node root = YAML::LoadFile(path);
        if (root.IsNull())
            return true; // an empty file
        if (!root.IsMap()) {
            ec = error::invalid_option;
            failed = path + ":1: not a YAML map of Dask's configuration";
            return false;
        }
        detail::merge_dask_tree(tree, detail::from_yaml(root, path));
        return true;
    } catch (const YAML::Exception& e) {
        ec = error::invalid_option;
        failed = path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg;
        return false;
    }
}

} // namespace

bool is_yaml_configuration_file(const std::string& path) {
    const auto dot = path.rfind('.');
    if (dot != std::string::npos) {
        const std::string ext = detail::lower(path.substr(dot));
        if (ext == ".yaml" || ext == ".yml")
            return true;
    }
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        const std::string_view l = detail::trim(line);
        if (l.empty() || l.front() == '#')
            continue;
        return l.find('=') == std::string_view::npos;
    }
    return false;
}

void apply_dask_configuration(context_options& options, std::span<const std::string> files,
                              error_code& ec, std::string* failed,
                              std::vector<std::string>* notes) {
    ec = {};
    std::string what;
    detail::dask_value tree;
    tree.type = detail::dask_value::kind::map;
    for (const std::string& path : files)
        if (!read_dask_file(tree, path, ec, what)) {
            if (failed)
                *failed = what;
            return;
        }
    // The environment over the files, as Dask merges them.
    for (char** e = environ; e && *e; ++e) {
        const std::string_view var(*e);
        const auto eq = var.find('=');
        if (eq == std::string_view::npos || var.substr(0, eq).rfind(dask_prefix, 0) != 0)
            continue;
        std::vector<std::string> path;
        std::string_view rest = var.substr(dask_prefix.size(), eq - dask_prefix.size());
        while (true) {
            const auto sep = rest.find("__");
            path.push_back(detail::dask_canonical_key(detail::lower(rest.substr(0, sep))));
            if (sep == std::string_view::npos)
                break;
            rest.remove_prefix(sep + 2);
        }
        detail::set_dask_key(tree, path,
                             detail::interpret_dask_value(var.substr(eq + 1), std::string(var)));
    }
    std::vector<std::string> said;
    if (ec = detail::translate_dask(
            tree, options, [](const char* n) { return static_cast<const char*>(std::getenv(n)); },
            what, said);
        ec) {
        if (failed)
            *failed = what;
        return;
    }
    for (const std::string& n : said)
        log::write(log::severity::warning, "Dask configuration: " + n);
    if (notes)
        notes->insert(notes->end(), said.begin(), said.end());
}

} // namespace ucx
