// The rules of the rendezvous stores (store_rules), step by step: the
// counters, add and its overflow, compare_set's three cases, and what each
// operation does to a key map; then the TCPStore server's answer to each
// query, which applies them.
#include "store/store_rules.hpp"
#include "store/tcp_store_protocol.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace rules = ucx::detail::store_rules;
namespace proto = ucx::detail::tcp_store_protocol;

namespace {

rules::value bytes(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return rules::value(p, p + s.size());
}

std::string text(const rules::value& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

constexpr auto int64_max = std::numeric_limits<std::int64_t>::max();
constexpr auto int64_min = std::numeric_limits<std::int64_t>::min();

} // namespace

TEST(StoreRules, CountersAreDecimalInt64Text) {
    EXPECT_EQ(rules::parse_counter(bytes("0")), 0);
    EXPECT_EQ(rules::parse_counter(bytes("42")), 42);
    EXPECT_EQ(rules::parse_counter(bytes("-7")), -7);
    EXPECT_EQ(rules::parse_counter(bytes("9223372036854775807")), int64_max);
    EXPECT_EQ(rules::parse_counter(bytes("-9223372036854775808")), int64_min);
    // Not counters: empty, a sign alone, '+', spaces, other bytes, out of range.
    for (const char* bad : {"", "-", "+1", " 1", "1 ", "1a", "abc", "0x10", "1.5",
                            "9223372036854775808", "-9223372036854775809"})
        EXPECT_FALSE(rules::parse_counter(bytes(bad))) << '"' << bad << '"';
    EXPECT_FALSE(rules::parse_counter(rules::value{std::byte{'1'}, std::byte{0}}));
    // counter_value gives them back.
    for (std::int64_t n :
         {std::int64_t{0}, std::int64_t{-1}, std::int64_t{123}, int64_max, int64_min}) {
        EXPECT_EQ(text(rules::counter_value(n)), std::to_string(n));
        EXPECT_EQ(rules::parse_counter(rules::counter_value(n)), n);
    }
}

TEST(StoreRules, AddStartsFromZeroAndChecksOverflow) {
    // Missing: from 0.
    auto r = rules::add(nullptr, 5);
    EXPECT_EQ(r.st, rules::status::ok);
    EXPECT_EQ(r.value, 5);
    const auto ten = bytes("10");
    r = rules::add(&ten, -15);
    EXPECT_EQ(r.st, rules::status::ok);
    EXPECT_EQ(r.value, -5);
    // Not a counter; the empty value is not one either (as torch's TCPStore).
    const auto abc = bytes("abc");
    EXPECT_EQ(rules::add(&abc, 1).st, rules::status::not_a_counter);
    const rules::value empty;
    EXPECT_EQ(rules::add(&empty, 1).st, rules::status::not_a_counter);
    // Overflow both ways; the edges themselves fit.
    const auto max = rules::counter_value(int64_max);
    const auto min = rules::counter_value(int64_min);
    EXPECT_EQ(rules::add(&max, 1).st, rules::status::overflow);
    EXPECT_EQ(rules::add(&min, -1).st, rules::status::overflow);
    EXPECT_EQ(rules::add(nullptr, int64_min).value, int64_min);
    EXPECT_EQ(rules::add(&max, 0).value, int64_max);
    EXPECT_EQ(rules::add(&max, int64_min).value, -1);
}

TEST(StoreRules, CompareSetDecides) {
    const auto cur = bytes("cur");
    const rules::value empty;
    EXPECT_EQ(rules::compare_set(nullptr, empty), rules::cas_outcome::set_desired);
    EXPECT_EQ(rules::compare_set(nullptr, bytes("e")), rules::cas_outcome::keep_missing);
    EXPECT_EQ(rules::compare_set(&cur, bytes("cur")), rules::cas_outcome::set_desired);
    EXPECT_EQ(rules::compare_set(&cur, bytes("other")), rules::cas_outcome::keep_current);
    EXPECT_EQ(rules::compare_set(&cur, empty), rules::cas_outcome::keep_current);
    // A key set to the empty value matches an empty expected.
    EXPECT_EQ(rules::compare_set(&empty, empty), rules::cas_outcome::set_desired);
}

TEST(StoreRules, KeyMapStepByStep) {
    rules::key_map m;
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.find("a"), nullptr);
    EXPECT_TRUE(m.check({}));

    // set, then replace; an empty value is a value.
    m.set("a", bytes("1"));
    ASSERT_NE(m.find("a"), nullptr);
    EXPECT_EQ(text(*m.find("a")), "1");
    m.set("a", bytes("one"));
    EXPECT_EQ(text(*m.find("a")), "one");
    m.set("empty", {});
    ASSERT_NE(m.find("empty"), nullptr);
    EXPECT_TRUE(m.find("empty")->empty());
    EXPECT_EQ(m.size(), 2u);

    // add: creates, adds, stores decimal text; a failed add changes nothing.
    auto r = m.add("n", 3);
    EXPECT_EQ(r.st, rules::status::ok);
    EXPECT_EQ(r.value, 3);
    EXPECT_EQ(m.add("n", 4).value, 7);
    EXPECT_EQ(text(*m.find("n")), "7");
    EXPECT_EQ(m.add("a", 1).st, rules::status::not_a_counter);
    EXPECT_EQ(text(*m.find("a")), "one");
    EXPECT_EQ(m.add("empty", 1).st, rules::status::not_a_counter);
    EXPECT_TRUE(m.find("empty")->empty());
    m.set("big", rules::counter_value(int64_max));
    EXPECT_EQ(m.add("big", 1).st, rules::status::overflow);
    EXPECT_EQ(text(*m.find("big")), std::to_string(int64_max));
    EXPECT_EQ(m.add("missing-overflow", int64_min).value, int64_min);

    // compare_set: the three cases, and the answer of each.
    auto c = m.compare_set("c", {}, bytes("first"));
    EXPECT_TRUE(c.set);
    EXPECT_EQ(text(c.answer), "first");
    c = m.compare_set("c", bytes("x"), bytes("y"));
    EXPECT_FALSE(c.set);
    EXPECT_EQ(text(c.answer), "first");
    c = m.compare_set("c", bytes("first"), bytes("second"));
    EXPECT_TRUE(c.set);
    EXPECT_EQ(text(c.answer), "second");
    EXPECT_EQ(text(*m.find("c")), "second");
    c = m.compare_set("m", bytes("e"), bytes("d"));
    EXPECT_FALSE(c.set);
    EXPECT_EQ(text(c.answer), "e");
    EXPECT_EQ(m.find("m"), nullptr);

    // check and erase.
    const std::vector<std::string> ac{"a", "c"}, am{"a", "m"};
    EXPECT_TRUE(m.check(ac));
    EXPECT_FALSE(m.check(am));
    const auto before = m.size();
    EXPECT_TRUE(m.erase("a"));
    EXPECT_FALSE(m.erase("a"));
    EXPECT_EQ(m.size(), before - 1);
    EXPECT_FALSE(m.check(ac));
    // add after erase starts from 0 again.
    m.set("n2", bytes("5"));
    m.erase("n2");
    EXPECT_EQ(m.add("n2", 1).value, 1);
}

// ---- The server's answer to each query ----

namespace {

proto::request query(proto::query_type t, std::vector<std::string> keys,
                     std::vector<proto::buffer> values = {}, std::int64_t number = 0) {
    proto::request q;
    q.type = t;
    q.keys = std::move(keys);
    q.values = std::move(values);
    q.number = number;
    return q;
}

/// The reply `out` holds, parsed as the client would.
proto::reply_parser parsed(proto::query_type t, const proto::buffer& out) {
    proto::reply_parser p;
    p.expect(proto::reply_of(t));
    EXPECT_EQ(p.feed(out), out.size());
    EXPECT_EQ(p.status(), proto::parse_status::done);
    return p;
}

} // namespace

TEST(StoreServerAnswer, EveryQuery) {
    using proto::answer_status;
    using proto::query_type;
    rules::key_map m;
    proto::buffer out;

    // SET: no reply; the key is set (its waiters are due).
    auto q = query(query_type::set, {"k"}, {bytes("v")});
    auto r = proto::answer(m, q, out);
    EXPECT_EQ(r.status, answer_status::replied);
    EXPECT_TRUE(r.key_set);
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(text(*m.find("k")), "v");

    // GET: the value; a missing key is a refusal.
    q = query(query_type::get, {"k"});
    r = proto::answer(m, q, out);
    EXPECT_EQ(r.status, answer_status::replied);
    EXPECT_FALSE(r.key_set);
    EXPECT_EQ(text(parsed(query_type::get, out).value()), "v");
    out.clear();
    q = query(query_type::get, {"nope"});
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::missing_key);
    EXPECT_TRUE(out.empty());
    EXPECT_NE(proto::refusal_reason(answer_status::missing_key), nullptr);

    // ADD: the new value; not a counter and overflow are refusals.
    q = query(query_type::add, {"n"}, {}, 5);
    r = proto::answer(m, q, out);
    EXPECT_TRUE(r.key_set);
    EXPECT_EQ(parsed(query_type::add, out).number(), 5);
    out.clear();
    q = query(query_type::add, {"k"}, {}, 1);
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::not_a_counter);
    m.set("big", rules::counter_value(int64_max));
    q = query(query_type::add, {"big"}, {}, 1);
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::overflow);
    EXPECT_TRUE(out.empty());

    // COMPARE_SET: the answer of the rules; key_set only when it set.
    q = query(query_type::compare_set, {"c"}, {{}, bytes("d")});
    r = proto::answer(m, q, out);
    EXPECT_TRUE(r.key_set);
    EXPECT_EQ(text(parsed(query_type::compare_set, out).value()), "d");
    out.clear();
    q = query(query_type::compare_set, {"c"}, {bytes("x"), bytes("y")});
    r = proto::answer(m, q, out);
    EXPECT_FALSE(r.key_set);
    EXPECT_EQ(text(parsed(query_type::compare_set, out).value()), "d");
    out.clear();

    // CHECK and WAIT.
    q = query(query_type::check, {"k", "c"});
    proto::answer(m, q, out);
    EXPECT_TRUE(parsed(query_type::check, out).ready());
    out.clear();
    q = query(query_type::check, {"k", "zz"});
    proto::answer(m, q, out);
    EXPECT_FALSE(parsed(query_type::check, out).ready());
    out.clear();
    q = query(query_type::wait, {"k"});
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::replied);
    parsed(query_type::wait, out);
    out.clear();
    q = query(query_type::wait, {"k", "zz"});
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::wait);
    EXPECT_TRUE(out.empty());

    // GETNUMKEYS, DELETE_KEY.
    q = query(query_type::get_num_keys, {});
    proto::answer(m, q, out);
    EXPECT_EQ(parsed(query_type::get_num_keys, out).number(), static_cast<std::int64_t>(m.size()));
    out.clear();
    q = query(query_type::delete_key, {"k"});
    proto::answer(m, q, out);
    EXPECT_EQ(parsed(query_type::delete_key, out).number(), 1);
    out.clear();
    q = query(query_type::delete_key, {"k"});
    proto::answer(m, q, out);
    EXPECT_EQ(parsed(query_type::delete_key, out).number(), 0);
    out.clear();

    // WATCH_KEY: not supported.
    q = query(query_type::watch_key, {"k"});
    EXPECT_EQ(proto::answer(m, q, out).status, answer_status::unsupported);
    EXPECT_TRUE(out.empty());
}

TEST(StoreServerAnswer, RequestSizeBound) {
    // The parser refuses a request whose fields together pass
    // max_request_size, before keeping the bytes of the field that does.
    proto::request_parser p(proto::limits{
        .max_key_size = 100, .max_value_size = 100, .max_keys = 4, .max_request_size = 40});
    proto::buffer ok;
    proto::encode_set(ok, "key", bytes("0123456789")); // 1 + 8 + 3 + 8 + 10 = 30
    EXPECT_EQ(p.feed(ok), ok.size());
    EXPECT_EQ(p.status(), proto::parse_status::done);
    EXPECT_EQ(p.size(), ok.size());
    p.reset();
    EXPECT_EQ(p.size(), 0u);
    proto::buffer big;
    proto::encode_set(big, "key", bytes("0123456789012345678901")); // 42
    p.feed(big);
    EXPECT_EQ(p.status(), proto::parse_status::error);
    // Each field within its own bound, two together over the request's.
    proto::request_parser p2(proto::limits{
        .max_key_size = 100, .max_value_size = 100, .max_keys = 4, .max_request_size = 40});
    proto::buffer cas;
    proto::encode_compare_set(cas, "k", bytes("0123456789"), bytes("0123456789"));
    p2.feed(cas); // 1 + 9 + 18 + 18 = 46
    EXPECT_EQ(p2.status(), proto::parse_status::error);
    // A partial request counts what it took.
    proto::request_parser p3;
    p3.feed(proto::bytes_view(ok.data(), 5));
    EXPECT_EQ(p3.status(), proto::parse_status::need_more);
    EXPECT_EQ(p3.size(), 5u);
}
