#include "core/ucx_settings.hpp"
#include "util/printed.hpp"

#include <ucp/api/ucp.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/list.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>

namespace ucx::detail {

namespace {

/// Every name UCX reads: UCP's settings in full, and for the other tables
/// their fields' names and the prefixes they may stand under.
struct setting_names {
    std::set<std::string, std::less<>> ucp;
    std::set<std::string, std::less<>> fields;
    std::set<std::string, std::less<>> prefixes{""};
};

// A table's fields, and the fields of its sub-tables (a field parsed as a
// table names the sub-table's prefix: posix's "MM_", the verbs transports'
// "IB_").
void add_table(const ucs_config_field_t* field, setting_names& out) {
    for (; field != nullptr && field->name != nullptr; ++field) {
        if (field->parser.read == ucs_config_sscanf_table) {
            if (field->name[0] != '\0')
                out.prefixes.emplace(field->name);
            add_table(static_cast<const ucs_config_field_t*>(field->parser.arg), out);
        } else {
            out.fields.emplace(field->name);
        }
    }
}

setting_names read_setting_names() {
    setting_names out;
    // The transports' tables register themselves when UCX loads their
    // modules, which listing the components does.
    uct_component_h* components = nullptr;
    unsigned count = 0;
    if (uct_query_components(&components, &count) == UCS_OK)
        uct_release_component_list(components);
    // The list links the entries' `list` members (UCX's own iteration macro
    // computes offsets from a null pointer, which UBSan reports).
    for (const ucs_list_link_t* link = ucs_config_global_list.next;
         link != nullptr && link != &ucs_config_global_list; link = link->next) {
        const auto* entry = reinterpret_cast<const ucs_config_global_list_entry_t*>(
            reinterpret_cast<const char*>(link) - offsetof(ucs_config_global_list_entry_t, list));
        if (entry->table == nullptr)
            continue;
        if (entry->prefix != nullptr && entry->prefix[0] != '\0')
            out.prefixes.emplace(entry->prefix);
        add_table(entry->table, out);
    }
    // UCP's own table is not in that list: UCP prints it, hidden settings
    // included, one `UCX_NAME=value` per line.
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK)
        return out;
    const std::string text =
        printed([&](FILE* stream) {
            ucp_config_print(config, stream, nullptr,
                             static_cast<ucs_config_print_flags_t>(UCS_CONFIG_PRINT_CONFIG |
                                                                   UCS_CONFIG_PRINT_HIDDEN));
        }).value_or(std::string());
    ucp_config_release(config);
    std::string_view rest(text);
    while (!rest.empty()) {
        const auto end = rest.find('\n');
        const std::string_view line = rest.substr(0, end);
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
        const auto eq = line.find('=');
        if (line.rfind("UCX_", 0) == 0 && eq != std::string_view::npos)
            out.ucp.emplace(line.substr(4, eq - 4));
    }
    return out;
}

const setting_names& names() {
    static const setting_names n = read_setting_names();
    return n;
}

} // namespace

std::string ucx_setting_name(std::string_view name) {
    std::string out(name);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
        return c == '-' ? '_' : static_cast<char>(std::toupper(c));
    });
    if (out.rfind("UCX_", 0) == 0)
        out.erase(0, 4);
    return out;
}

bool is_ucx_setting(std::string_view name) {
    const std::string n = ucx_setting_name(name);
    if (n.empty())
        return false;
    const setting_names& known = names();
    if (known.ucp.contains(n))
        return true;
    for (const std::string& prefix : known.prefixes)
        if (n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
            known.fields.contains(std::string_view(n).substr(prefix.size())))
            return true;
    return false;
}

} // namespace ucx::detail
