// The TCPStore wire protocol: encoders and the two incremental parsers, fed
// whole, byte by byte and in odd pieces.
#include "store/tcp_store_protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace proto = ucx::detail::tcp_store_protocol;

namespace {

proto::buffer bytes(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return proto::buffer(p, p + s.size());
}

std::string text(const proto::buffer& b) {
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

proto::buffer u64(std::uint64_t v) {
    proto::buffer b;
    for (int i = 0; i < 8; ++i)
        b.push_back(static_cast<std::byte>(v >> (8 * i)));
    return b;
}

proto::buffer cat(std::initializer_list<proto::buffer> parts) {
    proto::buffer out;
    for (const auto& p : parts)
        out.insert(out.end(), p.begin(), p.end());
    return out;
}

/// Feeds `data` in pieces of `step` bytes (0: all at once); returns the
/// parser's status and how many bytes it took.
template <class Parser>
std::pair<proto::parse_status, std::size_t> feed(Parser& p, const proto::buffer& data,
                                                 std::size_t step) {
    std::size_t used = 0;
    while (used < data.size() && p.status() == proto::parse_status::need_more) {
        const std::size_t n = step == 0 ? data.size() - used : std::min(step, data.size() - used);
        used += p.feed(proto::bytes_view(data.data() + used, n));
    }
    return {p.status(), used};
}

} // namespace

TEST(TcpStoreProtocol, EncodesAsTorch) {
    // The bytes of torch's client for add("init/", 1) and set("/k", "v").
    proto::buffer out;
    proto::encode_add(out, "init/", 1);
    EXPECT_EQ(out, cat({{std::byte{3}}, u64(5), bytes("init/"), u64(1)}));
    out.clear();
    proto::encode_set(out, "/k", bytes("v"));
    EXPECT_EQ(out, cat({{std::byte{0}}, u64(2), bytes("/k"), u64(1), bytes("v")}));
    out.clear();
    const std::string keys[] = {"a", "bc"};
    proto::encode_wait(out, keys);
    EXPECT_EQ(out, cat({{std::byte{5}}, u64(2), u64(1), bytes("a"), u64(2), bytes("bc")}));
    out.clear();
    proto::encode_get_num_keys(out);
    EXPECT_EQ(out, proto::buffer{std::byte{6}});
    out.clear();
    proto::encode_delete_key(out, "x");
    EXPECT_EQ(out, cat({{std::byte{8}}, u64(1), bytes("x")}));
}

class RequestParse : public ::testing::TestWithParam<std::size_t> {};

TEST_P(RequestParse, EveryQuery) {
    const std::size_t step = GetParam();
    proto::buffer all;
    proto::encode_set(all, "key", bytes("value"));
    proto::encode_compare_set(all, "cas", bytes(""), bytes("new"));
    proto::encode_get(all, "");
    proto::encode_add(all, "n", -7);
    const std::string keys[] = {"a", "", "ccc"};
    proto::encode_check(all, keys);
    proto::encode_wait(all, std::span<const std::string>{});
    proto::encode_get_num_keys(all);
    proto::encode_delete_key(all, "gone");

    proto::request_parser p;
    std::vector<proto::request> got;
    std::size_t pos = 0;
    while (pos < all.size()) {
        proto::buffer rest(all.begin() + pos, all.end());
        auto [st, used] = feed(p, rest, step);
        ASSERT_EQ(st, proto::parse_status::done);
        got.push_back(p.get());
        p.reset();
        pos += used;
    }
    ASSERT_EQ(got.size(), 8u);
    EXPECT_EQ(got[0].type, proto::query_type::set);
    EXPECT_EQ(got[0].keys, std::vector<std::string>{"key"});
    EXPECT_EQ(text(got[0].values.at(0)), "value");
    EXPECT_EQ(got[1].type, proto::query_type::compare_set);
    ASSERT_EQ(got[1].values.size(), 2u);
    EXPECT_TRUE(got[1].values[0].empty());
    EXPECT_EQ(text(got[1].values[1]), "new");
    EXPECT_EQ(got[2].type, proto::query_type::get);
    EXPECT_EQ(got[2].keys, std::vector<std::string>{""});
    EXPECT_EQ(got[3].type, proto::query_type::add);
    EXPECT_EQ(got[3].number, -7);
    EXPECT_EQ(got[4].type, proto::query_type::check);
    EXPECT_EQ(got[4].keys, (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(got[5].type, proto::query_type::wait);
    EXPECT_TRUE(got[5].keys.empty());
    EXPECT_EQ(got[6].type, proto::query_type::get_num_keys);
    EXPECT_EQ(got[7].type, proto::query_type::delete_key);
    EXPECT_EQ(got[7].keys, std::vector<std::string>{"gone"});
}

INSTANTIATE_TEST_SUITE_P(Steps, RequestParse, ::testing::Values(0, 1, 2, 3, 7, 13));

TEST(TcpStoreProtocol, RequestErrors) {
    proto::limits l{.max_key_size = 8, .max_value_size = 16, .max_keys = 3};
    auto bad = [&](const proto::buffer& b) {
        proto::request_parser p(l);
        for (std::size_t step : {std::size_t{0}, std::size_t{1}}) {
            p.reset();
            if (feed(p, b, step).first != proto::parse_status::error)
                return false;
        }
        return true;
    };
    EXPECT_TRUE(bad({std::byte{9}}));                                     // an unknown query
    EXPECT_TRUE(bad({std::byte{0xff}}));                                  // an unknown query
    EXPECT_TRUE(bad(cat({{std::byte{2}}, u64(9)})));                      // key too long
    EXPECT_TRUE(bad(cat({{std::byte{2}}, u64(~std::uint64_t{0})})));      // a huge size
    EXPECT_TRUE(bad(cat({{std::byte{0}}, u64(1), bytes("k"), u64(17)}))); // value too long
    EXPECT_TRUE(bad(cat({{std::byte{4}}, u64(4)})));                      // too many keys
    // Keys of a list together over the value bound.
    EXPECT_TRUE(bad(cat(
        {{std::byte{5}}, u64(3), u64(8), bytes("12345678"), u64(8), bytes("12345678"), u64(8)})));
    // At the bounds: fine.
    proto::request_parser p(l);
    EXPECT_EQ(
        feed(p,
             cat({{std::byte{0}}, u64(8), bytes("12345678"), u64(16), bytes("0123456789abcdef")}),
             1)
            .first,
        proto::parse_status::done);
    // An incomplete request waits for more.
    p.reset();
    EXPECT_EQ(feed(p, cat({{std::byte{3}}, u64(1), bytes("k"), bytes("1234")}), 0).first,
              proto::parse_status::need_more);
}

class ReplyParse : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ReplyParse, EveryKind) {
    const std::size_t step = GetParam();
    proto::buffer all;
    proto::encode_value_reply(all, bytes("hello"));
    proto::encode_int64_reply(all, -42);
    proto::encode_byte_reply(all, proto::check_not_ready);
    proto::encode_byte_reply(all, proto::check_ready);
    proto::encode_byte_reply(all, proto::wait_stop_waiting);
    proto::encode_value_reply(all, bytes(""));

    proto::reply_parser p;
    std::size_t pos = 0;
    auto next = [&](proto::reply_kind k) {
        p.expect(k);
        proto::buffer rest(all.begin() + pos, all.end());
        auto [st, used] = feed(p, rest, step);
        pos += used;
        return st;
    };
    ASSERT_EQ(next(proto::reply_kind::value), proto::parse_status::done);
    EXPECT_EQ(text(p.value()), "hello");
    ASSERT_EQ(next(proto::reply_kind::int64), proto::parse_status::done);
    EXPECT_EQ(p.number(), -42);
    ASSERT_EQ(next(proto::reply_kind::check), proto::parse_status::done);
    EXPECT_FALSE(p.ready());
    ASSERT_EQ(next(proto::reply_kind::check), proto::parse_status::done);
    EXPECT_TRUE(p.ready());
    ASSERT_EQ(next(proto::reply_kind::wait), proto::parse_status::done);
    ASSERT_EQ(next(proto::reply_kind::value), proto::parse_status::done);
    EXPECT_TRUE(p.value().empty());
    EXPECT_EQ(pos, all.size());
}

INSTANTIATE_TEST_SUITE_P(Steps, ReplyParse, ::testing::Values(0, 1, 3, 5));

TEST(TcpStoreProtocol, ReplyErrors) {
    proto::reply_parser p(proto::limits{.max_key_size = 0, .max_value_size = 4, .max_keys = 0});
    p.expect(proto::reply_kind::check);
    p.feed(proto::buffer{std::byte{2}});
    EXPECT_EQ(p.status(), proto::parse_status::error);
    p.expect(proto::reply_kind::wait);
    p.feed(proto::buffer{std::byte{1}});
    EXPECT_EQ(p.status(), proto::parse_status::error);
    p.expect(proto::reply_kind::value);
    p.feed(u64(5));
    EXPECT_EQ(p.status(), proto::parse_status::error);
    p.expect(proto::reply_kind::value);
    p.feed(u64(4));
    EXPECT_EQ(p.status(), proto::parse_status::need_more);
    EXPECT_EQ(proto::reply_of(proto::query_type::set), proto::reply_kind::none);
    EXPECT_EQ(proto::reply_of(proto::query_type::delete_key), proto::reply_kind::int64);
}
