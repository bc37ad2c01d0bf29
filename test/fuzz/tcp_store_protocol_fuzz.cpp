// Fuzz target: the TCPStore wire protocol's two parsers (tcp_store_protocol)
// as either side meets a peer that sends anything: the server's request
// parser reading a client, the client's reply parser reading a server. The
// peer's bytes go in twice, whole and split in two at a point of the input,
// and both runs must parse the same messages and end the same way. Checked:
// - feed never takes more than it was given, takes something whenever the
//   parser needs more and has bytes, and takes all it was given when it still
//   needs more;
// - done and error are sticky: feed takes nothing until reset or expect;
// - a parsed request has the fields of its query type, every size within the
//   limits, and the client's encoder gives back exactly the bytes it was
//   parsed from, which parse again to the same request;
// - a parsed reply is of the kind expected and the server's encoder gives
//   back exactly its bytes; a reply fails only on a value size over the
//   limit, or a CHECK or WAIT byte the protocol does not have;
// - a request takes at most max_request_size bytes, and the parser counts
//   them;
// - the server's handling (tcp_store_protocol::answer over the stores' rules)
//   of the requests parsed, applied in order until one is refused (as the
//   server drops the connection there), agrees with a plain model of
//   torch's TCPStore: each reply parses as the client expects, SET and a
//   refusal append nothing, a refusal changes no key, ADD and COMPARE_SET
//   leave the key as they answered, a WAIT is answered only when its keys
//   are all set.
//
// Input: one byte (bit 0: play the client, else the server; bit 1: small
// limits, else the defaults), for small limits a key size (1 byte), a value
// size (2 bytes) and a key count (1 byte) (the request size bound is then the
// key size, the value size and 32 together), the split point (2 bytes, modulo
// the peer's size plus one), for the client the queries it sent (a count
// byte, 1 to 8, then a query type byte each, modulo 9; they repeat), then
// the peer's bytes.
#include "fuzz.hpp"

#include "store/store_rules.hpp"
#include "store/tcp_store_protocol.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ucx::fuzz {

namespace {

namespace proto = detail::tcp_store_protocol;
using proto::parse_status;
using proto::query_type;
using proto::reply_kind;

/// A request as parsed, and where its bytes were.
struct parsed_request {
    query_type type;
    std::vector<std::string> keys;
    std::vector<proto::buffer> values;
    std::int64_t number;
    std::size_t begin, end;

    bool operator==(const parsed_request&) const = default;
};

/// A reply as parsed, and where its bytes were.
struct parsed_reply {
    reply_kind kind;
    proto::buffer value;
    std::int64_t number;
    bool ready;
    std::size_t begin, end;

    bool operator==(const parsed_reply&) const = default;
};

/// What one run made of the peer's bytes: the messages, then how it stopped
/// (need_more or error) and how many bytes it took.
template <class Message>
struct outcome {
    std::vector<Message> messages;
    parse_status last = parse_status::need_more;
    std::size_t used = 0;

    bool operator==(const outcome&) const = default;
};

const std::array<std::byte, 1> one_more{std::byte{0}};

bool same(input a, const proto::buffer& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

/// The field checks of one parsed request, `wire` the bytes it came from.
void check_request(const proto::request& q, input wire, const proto::limits& l) {
    const auto t = static_cast<std::uint8_t>(q.type);
    UCX_ASIO_FUZZ_CHECK(t <= static_cast<std::uint8_t>(query_type::delete_key));
    for (const std::string& k : q.keys)
        UCX_ASIO_FUZZ_CHECK(k.size() <= l.max_key_size);
    for (const proto::buffer& v : q.values)
        UCX_ASIO_FUZZ_CHECK(v.size() <= l.max_value_size);
    if (q.type != query_type::add)
        UCX_ASIO_FUZZ_CHECK(q.number == 0);
    UCX_ASIO_FUZZ_CHECK(wire.size() <= l.max_request_size);

    proto::buffer again;
    switch (q.type) {
    case query_type::set:
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.size() == 1);
        proto::encode_set(again, q.keys[0], q.values[0]);
        break;
    case query_type::compare_set:
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.size() == 2);
        proto::encode_compare_set(again, q.keys[0], q.values[0], q.values[1]);
        break;
    case query_type::get:
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.empty());
        proto::encode_get(again, q.keys[0]);
        break;
    case query_type::add:
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.empty());
        proto::encode_add(again, q.keys[0], q.number);
        break;
    case query_type::check:
    case query_type::wait: {
        UCX_ASIO_FUZZ_CHECK(q.keys.size() <= l.max_keys && q.values.empty());
        std::uint64_t total = 0;
        for (const std::string& k : q.keys)
            total += k.size();
        UCX_ASIO_FUZZ_CHECK(total <= l.max_value_size);
        if (q.type == query_type::check)
            proto::encode_check(again, q.keys);
        else
            proto::encode_wait(again, q.keys);
        break;
    }
    case query_type::get_num_keys:
        UCX_ASIO_FUZZ_CHECK(q.keys.empty() && q.values.empty());
        proto::encode_get_num_keys(again);
        break;
    case query_type::watch_key:
        // No encoder: the fields of GET under WATCH_KEY's type byte.
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.empty());
        proto::encode_get(again, q.keys[0]);
        again[0] = static_cast<std::byte>(query_type::watch_key);
        break;
    case query_type::delete_key:
        UCX_ASIO_FUZZ_CHECK(q.keys.size() == 1 && q.values.empty());
        proto::encode_delete_key(again, q.keys[0]);
        break;
    }
    UCX_ASIO_FUZZ_CHECK(same(wire, again));

    // The encoding parses again, in one piece, to the same request.
    proto::request_parser p(l);
    UCX_ASIO_FUZZ_CHECK(p.feed(again) == again.size());
    UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::done);
    const proto::request& back = p.get();
    UCX_ASIO_FUZZ_CHECK(back.type == q.type && back.keys == q.keys && back.values == q.values &&
                        back.number == q.number);
}

/// The server's side: requests parsed from `peer` delivered in two pieces,
/// up to `split` and the rest.
outcome<parsed_request> read_requests(input peer, std::size_t split, const proto::limits& l) {
    proto::request_parser p(l);
    outcome<parsed_request> out;
    std::size_t pos = 0;
    std::size_t begin = 0;
    for (const std::size_t end : {split, peer.size()}) {
        while (pos < end) {
            const input piece = peer.subspan(pos, end - pos);
            const std::size_t used = p.feed(piece);
            UCX_ASIO_FUZZ_CHECK(used <= piece.size());
            UCX_ASIO_FUZZ_CHECK(used > 0);
            pos += used;
            if (p.status() == parse_status::need_more) {
                UCX_ASIO_FUZZ_CHECK(pos == end);
                continue;
            }
            // Done or error: feed takes nothing more.
            const parse_status st = p.status();
            UCX_ASIO_FUZZ_CHECK(p.feed(peer.subspan(pos)) == 0);
            UCX_ASIO_FUZZ_CHECK(p.feed(one_more) == 0);
            UCX_ASIO_FUZZ_CHECK(p.status() == st);
            if (st == parse_status::error) {
                out.last = st;
                out.used = pos;
                return out;
            }
            const proto::request& q = p.get();
            UCX_ASIO_FUZZ_CHECK(p.size() == pos - begin);
            check_request(q, peer.subspan(begin, pos - begin), l);
            out.messages.push_back({q.type, q.keys, q.values, q.number, begin, pos});
            p.reset();
            UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::need_more);
            begin = pos;
        }
    }
    out.used = pos;
    return out;
}

/// The checks of one reply that ended (done or error), `wire` its bytes.
void check_reply(proto::reply_parser& p, input wire, const proto::limits& l) {
    proto::buffer again;
    if (p.status() == parse_status::error) {
        // Any eight bytes are a number, and no reply at all cannot fail.
        UCX_ASIO_FUZZ_CHECK(p.kind() != reply_kind::none && p.kind() != reply_kind::int64);
        switch (p.kind()) {
        case reply_kind::value: {
            // Only a size over the limit.
            UCX_ASIO_FUZZ_CHECK(wire.size() == 8);
            std::uint64_t size = 0;
            for (std::size_t i = 0; i < 8; ++i)
                size |= std::uint64_t{std::to_integer<std::uint8_t>(wire[i])} << (8 * i);
            UCX_ASIO_FUZZ_CHECK(size > l.max_value_size);
            break;
        }
        case reply_kind::check:
            UCX_ASIO_FUZZ_CHECK(wire.size() == 1);
            UCX_ASIO_FUZZ_CHECK(std::to_integer<std::uint8_t>(wire[0]) != proto::check_ready &&
                                std::to_integer<std::uint8_t>(wire[0]) != proto::check_not_ready);
            break;
        case reply_kind::wait:
            UCX_ASIO_FUZZ_CHECK(wire.size() == 1);
            UCX_ASIO_FUZZ_CHECK(std::to_integer<std::uint8_t>(wire[0]) != proto::wait_stop_waiting);
            break;
        case reply_kind::none:
        case reply_kind::int64:
            break;
        }
        return;
    }
    switch (p.kind()) {
    case reply_kind::none:
        UCX_ASIO_FUZZ_CHECK(false);
        break;
    case reply_kind::value:
        UCX_ASIO_FUZZ_CHECK(p.value().size() <= l.max_value_size);
        proto::encode_value_reply(again, p.value());
        break;
    case reply_kind::int64:
        proto::encode_int64_reply(again, p.number());
        break;
    case reply_kind::check:
        proto::encode_byte_reply(again, p.ready() ? proto::check_ready : proto::check_not_ready);
        break;
    case reply_kind::wait:
        proto::encode_byte_reply(again, proto::wait_stop_waiting);
        break;
    }
    UCX_ASIO_FUZZ_CHECK(same(wire, again));
}

/// The client's side: the replies to `queries` (over and over) parsed from
/// `peer` delivered in two pieces, up to `split` and the rest.
outcome<parsed_reply> read_replies(input peer, std::size_t split,
                                   const std::vector<query_type>& queries, const proto::limits& l) {
    proto::reply_parser p(l);
    outcome<parsed_reply> out;
    // Before the first expect: no reply is due, and feed takes nothing.
    UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::done && p.kind() == reply_kind::none);
    UCX_ASIO_FUZZ_CHECK(p.feed(peer) == 0);
    UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::done);

    std::size_t pos = 0;
    std::size_t begin = 0;
    std::size_t next = 0;
    // Expects the reply to the next query that has one, recording those that
    // have none; false when no query of the list has one.
    auto expect_next = [&]() {
        for (std::size_t i = 0; i < queries.size(); ++i) {
            const reply_kind k = proto::reply_of(queries[next++ % queries.size()]);
            p.expect(k);
            UCX_ASIO_FUZZ_CHECK(p.kind() == k);
            if (k != reply_kind::none) {
                UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::need_more);
                return true;
            }
            UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::done);
            UCX_ASIO_FUZZ_CHECK(p.feed(peer.subspan(pos)) == 0);
            UCX_ASIO_FUZZ_CHECK(p.feed(one_more) == 0);
            out.messages.push_back({k, {}, 0, false, pos, pos});
        }
        return false;
    };
    if (!expect_next())
        return out;
    for (const std::size_t end : {split, peer.size()}) {
        while (pos < end) {
            const input piece = peer.subspan(pos, end - pos);
            const std::size_t used = p.feed(piece);
            UCX_ASIO_FUZZ_CHECK(used <= piece.size());
            UCX_ASIO_FUZZ_CHECK(used > 0);
            pos += used;
            if (p.status() == parse_status::need_more) {
                UCX_ASIO_FUZZ_CHECK(pos == end);
                continue;
            }
            // Done or error: feed takes nothing more.
            const parse_status st = p.status();
            UCX_ASIO_FUZZ_CHECK(p.feed(peer.subspan(pos)) == 0);
            UCX_ASIO_FUZZ_CHECK(p.feed(one_more) == 0);
            UCX_ASIO_FUZZ_CHECK(p.status() == st);
            check_reply(p, peer.subspan(begin, pos - begin), l);
            if (st == parse_status::error) {
                out.last = st;
                out.used = pos;
                return out;
            }
            out.messages.push_back({p.kind(),
                                    p.kind() == reply_kind::value ? p.value() : proto::buffer{},
                                    p.kind() == reply_kind::int64 ? p.number() : 0,
                                    p.kind() == reply_kind::check && p.ready(), begin, pos});
            begin = pos;
            expect_next();
        }
    }
    out.used = pos;
    return out;
}

/// torch's TCPStore server, plainly: the model the server's handling is
/// checked against.
struct model {
    std::map<std::string, proto::buffer> keys;

    static std::optional<std::int64_t> counter(const proto::buffer& v) {
        const auto* b = reinterpret_cast<const char*>(v.data());
        std::int64_t n = 0;
        const auto [p, ec] = std::from_chars(b, b + v.size(), n);
        if (v.empty() || ec != std::errc() || p != b + v.size())
            return std::nullopt;
        return n;
    }

    bool has_all(const std::vector<std::string>& ks) const {
        return std::all_of(ks.begin(), ks.end(), [&](const auto& k) { return keys.contains(k); });
    }
};

/// Serves the requests parsed, in order, as the server does, and checks each
/// answer against the model.
void serve(const std::vector<parsed_request>& requests) {
    using proto::answer_status;
    detail::store_rules::key_map keys;
    model m;
    for (const parsed_request& pr : requests) {
        proto::request q{pr.type, pr.keys, pr.values, pr.number};
        proto::buffer out;
        const std::size_t size_before = keys.size();
        const auto r = proto::answer(keys, q, out);
        const std::string key = pr.keys.empty() ? std::string() : pr.keys[0];
        // The reply, parsed as the client does.
        auto reply = [&] {
            proto::reply_parser p;
            p.expect(proto::reply_of(pr.type));
            UCX_ASIO_FUZZ_CHECK(p.feed(out) == out.size());
            UCX_ASIO_FUZZ_CHECK(p.status() == parse_status::done);
            return p;
        };
        if (r.status != answer_status::replied && r.status != answer_status::wait) {
            // A refusal: nothing appended, nothing changed, and the server
            // drops the client.
            UCX_ASIO_FUZZ_CHECK(out.empty() && !r.key_set);
            UCX_ASIO_FUZZ_CHECK(proto::refusal_reason(r.status) != nullptr);
            UCX_ASIO_FUZZ_CHECK(keys.size() == size_before);
            switch (r.status) {
            case answer_status::missing_key:
                UCX_ASIO_FUZZ_CHECK(pr.type == query_type::get && !m.keys.contains(key));
                break;
            case answer_status::not_a_counter:
                UCX_ASIO_FUZZ_CHECK(pr.type == query_type::add && m.keys.contains(key) &&
                                    !model::counter(m.keys[key]));
                break;
            case answer_status::overflow: {
                UCX_ASIO_FUZZ_CHECK(pr.type == query_type::add);
                const auto it = m.keys.find(key);
                const std::int64_t old = it == m.keys.end() ? 0 : *model::counter(it->second);
                std::int64_t sum;
                UCX_ASIO_FUZZ_CHECK(__builtin_add_overflow(old, pr.number, &sum));
                break;
            }
            default:
                UCX_ASIO_FUZZ_CHECK(pr.type == query_type::watch_key);
                break;
            }
            return;
        }
        UCX_ASIO_FUZZ_CHECK(proto::refusal_reason(r.status) == nullptr);
        switch (pr.type) {
        case query_type::set:
            UCX_ASIO_FUZZ_CHECK(out.empty() && r.key_set);
            m.keys[key] = pr.values[0];
            break;
        case query_type::compare_set: {
            const auto it = m.keys.find(key);
            proto::buffer want;
            bool set = false;
            if (it == m.keys.end()) {
                set = pr.values[0].empty();
                want = set ? pr.values[1] : pr.values[0];
            } else {
                set = it->second == pr.values[0];
                want = set ? pr.values[1] : it->second;
            }
            if (set)
                m.keys[key] = pr.values[1];
            UCX_ASIO_FUZZ_CHECK(r.key_set == set);
            UCX_ASIO_FUZZ_CHECK(reply().value() == want);
            break;
        }
        case query_type::get:
            UCX_ASIO_FUZZ_CHECK(reply().value() == m.keys.at(key));
            break;
        case query_type::add: {
            const auto it = m.keys.find(key);
            const std::int64_t old = it == m.keys.end() ? 0 : model::counter(it->second).value();
            const std::int64_t sum = old + pr.number; // no overflow: refused above
            UCX_ASIO_FUZZ_CHECK(r.key_set && reply().number() == sum);
            const auto text = std::to_string(sum);
            const auto* b = reinterpret_cast<const std::byte*>(text.data());
            m.keys[key] = proto::buffer(b, b + text.size());
            break;
        }
        case query_type::check:
            UCX_ASIO_FUZZ_CHECK(reply().ready() == m.has_all(pr.keys));
            break;
        case query_type::wait:
            UCX_ASIO_FUZZ_CHECK((r.status == answer_status::wait) == !m.has_all(pr.keys));
            if (r.status == answer_status::wait)
                UCX_ASIO_FUZZ_CHECK(out.empty());
            else
                reply();
            break;
        case query_type::get_num_keys:
            UCX_ASIO_FUZZ_CHECK(reply().number() == static_cast<std::int64_t>(m.keys.size()));
            break;
        case query_type::delete_key:
            UCX_ASIO_FUZZ_CHECK(reply().number() == (m.keys.erase(key) ? 1 : 0));
            break;
        case query_type::watch_key:
            UCX_ASIO_FUZZ_CHECK(false);
            break;
        }
        if (r.status != answer_status::wait)
            UCX_ASIO_FUZZ_CHECK(r.status == answer_status::replied);
        // The keys and the model agree.
        UCX_ASIO_FUZZ_CHECK(keys.size() == m.keys.size());
        for (const auto& [k, v] : m.keys)
            UCX_ASIO_FUZZ_CHECK(keys.find(k) && *keys.find(k) == v);
    }
}

} // namespace

void tcp_store_protocol(input data) {
    reader r(data);
    const std::uint8_t mode = r.byte();
    const bool client_side = mode & 1u;
    proto::limits l;
    if (mode & 2u) {
        l.max_key_size = r.byte();
        l.max_value_size = r.uint(2);
        l.max_keys = r.byte();
        l.max_request_size = l.max_key_size + l.max_value_size + 32;
    }
    const std::uint64_t split_at = r.uint(2);
    std::vector<query_type> queries;
    if (client_side) {
        const std::size_t count = (r.byte() & 7u) + 1;
        for (std::size_t i = 0; i < count; ++i)
            queries.push_back(static_cast<query_type>(r.byte() % 9));
    }
    const input peer = r.rest();
    const std::size_t split = split_at % (peer.size() + 1);

    if (client_side) {
        const auto whole = read_replies(peer, peer.size(), queries, l);
        UCX_ASIO_FUZZ_CHECK(read_replies(peer, split, queries, l) == whole);
    } else {
        const auto whole = read_requests(peer, peer.size(), l);
        UCX_ASIO_FUZZ_CHECK(read_requests(peer, split, l) == whole);
        serve(whole.messages);
    }
}

} // namespace ucx::fuzz

UCX_ASIO_FUZZ_ENTRY(tcp_store_protocol)
