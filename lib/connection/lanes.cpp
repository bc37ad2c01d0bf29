#include "connection/lanes.hpp"

#include <charconv>
#include <cstddef>
#include <optional>

namespace ucx::detail {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

std::vector<std::string_view> split(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i]))
            ++i;
        const std::size_t start = i;
        while (i < s.size() && !is_space(s[i]))
            ++i;
        if (i > start)
            out.push_back(s.substr(start, i - start));
    }
    return out;
}

std::optional<int> number(std::string_view s) {
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < 0)
        return std::nullopt;
    return v;
}

/// `lane[N]` (with `suffix` after the bracket) -> N.
std::optional<int> lane_number(std::string_view token, std::string_view suffix) {
    constexpr std::string_view head = "lane[";
    if (token.substr(0, head.size()) != head || token.size() < head.size() + 1 + suffix.size() ||
        token.substr(token.size() - suffix.size()) != suffix)
        return std::nullopt;
    token.remove_prefix(head.size());
    token.remove_suffix(suffix.size());
    if (token.empty() || token.back() != ']')
        return std::nullopt;
    token.remove_suffix(1);
    return number(token);
}

/// "R:tl/dev[.P]": the transport and the device, without the path index.
bool resource(std::string_view token, endpoint_lane& lane) {
    const auto colon = token.find(':');
    if (colon == std::string_view::npos || !number(token.substr(0, colon)))
        return false;
    token.remove_prefix(colon + 1);
    const auto slash = token.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == token.size())
        return false;
    std::string_view dev = token.substr(slash + 1);
    // UCX 1.11 and later add ".<path index>".
    if (const auto dot = dev.rfind('.');
        dot != std::string_view::npos && dot > 0 && number(dev.substr(dot + 1)))
        dev = dev.substr(0, dot);
    lane.transport = std::string(token.substr(0, slash));
    lane.device = std::string(dev);
    return true;
}

/// The uses after "->": the first token is the remote memory domain
/// ("[addr[K].]md[M]/name[/sysdev[S]]"), then UCX 1.15 and later print
/// "seg <size>".
void uses(const std::vector<std::string_view>& tokens, std::size_t from, endpoint_lane& lane) {
    std::size_t i = from;
    if (i < tokens.size() && tokens[i].find("md[") != std::string_view::npos)
        ++i;
    if (i + 1 < tokens.size() && tokens[i] == "seg" && number(tokens[i + 1]))
        i += 2;
    for (; i < tokens.size(); ++i) {
        std::string_view u = tokens[i];
        if (const auto brace = u.find('{'); brace != std::string_view::npos)
            u = u.substr(0, brace); // wireup{tl/dev}: the auxiliary transport
        if (!u.empty())
            lane.uses.emplace_back(u);
    }
}

} // namespace

std::vector<endpoint_lane> parse_lanes(std::string_view text) {
    std::vector<endpoint_lane> lanes;
    std::vector<std::pair<std::size_t, int>> proxies; // (position in lanes, lane proxied)
    while (!text.empty()) {
        const auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (!line.empty() && line.front() == '#')
            line.remove_prefix(1);
        const auto tokens = split(line);
        if (tokens.size() < 2)
            continue;
        const auto index = lane_number(tokens[0], ":");
        if (!index)
            continue;
        endpoint_lane lane;
        lane.index = *index;
        if (tokens[1] == "cm") {
            if (tokens.size() < 3)
                continue;
            lane.transport = std::string(tokens[2]);
            lane.uses.emplace_back("cm");
            lanes.push_back(std::move(lane));
            continue;
        }
        std::size_t arrow = 0;
        while (arrow < tokens.size() && tokens[arrow] != "->")
            ++arrow;
        if (arrow == tokens.size())
            continue;
        if (tokens[1] == "proxy") {
            const auto target =
                tokens.size() > 3 && tokens[2] == "to" ? lane_number(tokens[3], "") : std::nullopt;
            if (!target)
                continue;
            proxies.emplace_back(lanes.size(), *target);
        } else if (!resource(tokens[1], lane)) {
            continue;
        }
        uses(tokens, arrow + 1, lane);
        lanes.push_back(std::move(lane));
    }
    for (const auto& [position, target] : proxies) {
        for (const auto& other : lanes) {
            if (other.index == target && !other.transport.empty()) {
                lanes[position].transport = other.transport;
                lanes[position].device = other.device;
                break;
            }
        }
    }
    return lanes;
}

} // namespace ucx::detail
