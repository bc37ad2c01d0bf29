// The flight recorder's ring (group/flight_recorder.hpp), flight records to
// JSON and back, and the diagnosis of several ranks' records.
#include "group/flight_recorder.hpp"

#include <ucx/flight_recorder.hpp>

#include <boost/asio/error.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using ucx::collective_kind;
using ucx::flight_event;
using ucx::flight_event_kind;
using ucx::flight_record;
using ucx::flight_state;
using ucx::detail::flight_recorder;

flight_recorder::slot collective(collective_kind k, std::uint64_t seq, std::size_t bytes) {
    flight_recorder::slot s;
    s.collective = k;
    s.seq = seq;
    s.in_bytes = s.out_bytes = bytes;
    s.start = flight_recorder::clock::now();
    return s;
}

/// Records `s` in `rec` as the library fills a new slot, and returns its id
/// (`none` when off).
std::uint64_t record(flight_recorder& rec, const flight_recorder::slot& s) {
    flight_recorder::slot* to = rec.next();
    if (!to)
        return flight_recorder::none;
    const std::uint64_t id = to->id;
    *to = s;
    to->id = id;
    return id;
}

TEST(flight_recorder, keeps_the_last_events_and_updates_them_by_id) {
    flight_recorder rec(3); // rounded up to 4
    ASSERT_TRUE(rec.enabled());
    std::vector<std::uint64_t> ids;
    for (std::uint64_t i = 0; i < 5; ++i)
        ids.push_back(record(rec, collective(collective_kind::allreduce, i, 8)));
    // In place, as made: nothing of the overwritten event is left.
    flight_recorder::slot* in_place = rec.next();
    ASSERT_NE(in_place, nullptr);
    EXPECT_EQ(in_place->id, 5u);
    EXPECT_EQ(in_place->seq, 0u);
    EXPECT_EQ(in_place->in_bytes, 0u);
    EXPECT_EQ(in_place->state, flight_state::queued);
    in_place->seq = 5;
    ids.push_back(in_place->id);
    EXPECT_EQ(ids, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
    // The first two were overwritten: no longer found, and not updated.
    EXPECT_EQ(rec.find(0), nullptr);
    EXPECT_EQ(rec.find(1), nullptr);
    rec.ended(1, {}, flight_recorder::clock::now());
    rec.running(3);
    rec.ended(4, make_error_code(boost::asio::error::operation_aborted),
              flight_recorder::clock::now());
    flight_record r;
    rec.snapshot(r);
    EXPECT_EQ(r.dropped, 2u);
    ASSERT_EQ(r.events.size(), 4u);
    EXPECT_EQ(r.events[0].seq, 2u);
    EXPECT_EQ(r.events[0].state, flight_state::queued);
    EXPECT_EQ(r.events[0].end_us, 0);
    EXPECT_EQ(r.events[1].state, flight_state::running);
    EXPECT_EQ(r.events[2].state, flight_state::failed);
    EXPECT_FALSE(r.events[2].error.empty());
    EXPECT_GE(r.events[2].end_us, r.events[2].start_us);
    EXPECT_EQ(r.events[3].seq, 5u);
    // The coarse clock runs with the steady clock, a tick behind at most.
    const auto fine = flight_recorder::clock::now();
    const auto coarse = flight_recorder::coarse_now();
    EXPECT_LE(coarse, fine + std::chrono::milliseconds(1));
    EXPECT_GE(coarse, fine - std::chrono::milliseconds(100));
    // Wall-clock times: after 2020.
    EXPECT_GT(r.events[0].start_us, 1577836800000000);
}

TEST(flight_recorder, off_records_nothing) {
    flight_recorder rec(0);
    EXPECT_FALSE(rec.enabled());
    EXPECT_EQ(record(rec, collective(collective_kind::barrier, 0, 0)), flight_recorder::none);
    EXPECT_EQ(rec.find(flight_recorder::none), nullptr);
    rec.ended(flight_recorder::none, {}, flight_recorder::clock::now());
    flight_record r;
    rec.snapshot(r);
    EXPECT_TRUE(r.events.empty());
}

flight_event event(flight_event_kind kind, collective_kind k, std::uint64_t seq, std::size_t bytes,
                   flight_state s) {
    flight_event e;
    e.id = seq;
    e.kind = kind;
    e.collective = k;
    e.seq = seq;
    e.in_bytes = e.out_bytes = bytes;
    e.state = s;
    e.start_us = 1700000000000000 + static_cast<std::int64_t>(seq);
    if (s == flight_state::completed || s == flight_state::failed)
        e.end_us = e.start_us + 10;
    return e;
}

flight_record record(int rank, int size, std::vector<flight_event> events) {
    flight_record r;
    r.group = "world";
    r.rank = rank;
    r.size = size;
    r.host = "host \"a\"\n";
    r.pid = 1234;
    r.time_us = 1700000000000999;
    r.reason = "timeout";
    r.events = std::move(events);
    for (const auto& e : r.events)
        if (e.kind == flight_event_kind::collective)
            r.collectives = std::max(r.collectives, e.seq + 1);
    return r;
}

TEST(flight_record, survives_json) {
    auto e0 = event(flight_event_kind::collective, collective_kind::allreduce, 0, 4096,
                    flight_state::completed);
    e0.has_reduction = true;
    e0.type = ucx::datatype::float32;
    e0.op = ucx::reduce_op::max;
    auto e1 = event(flight_event_kind::collective, collective_kind::broadcast, 1, 16,
                    flight_state::running);
    e1.root = 2;
    e1.round = 1;
    e1.rounds = 2;
    e1.waiting_for = {2, 3};
    flight_event e2;
    e2.id = 2;
    e2.kind = flight_event_kind::recv;
    e2.state = flight_state::failed;
    e2.peer = 3;
    e2.tag = 77;
    e2.out_bytes = 5;
    e2.error = "Operation canceled \\ \x01";
    auto r = record(1, 4, {e0, e1, e2});
    r.error = "the group's collective passed its deadline";
    r.dropped = 9;
    const std::string json = ucx::to_json(r);
    flight_record back;
    ASSERT_FALSE(ucx::from_json(json, back)) << json;
    EXPECT_EQ(back.group, r.group);
    EXPECT_EQ(back.rank, 1);
    EXPECT_EQ(back.size, 4);
    EXPECT_EQ(back.host, r.host);
    EXPECT_EQ(back.pid, 1234);
    EXPECT_EQ(back.time_us, r.time_us);
    EXPECT_EQ(back.reason, "timeout");
    EXPECT_EQ(back.error, r.error);
    EXPECT_EQ(back.collectives, 2u);
    EXPECT_EQ(back.dropped, 9u);
    ASSERT_EQ(back.events.size(), 3u);
    EXPECT_TRUE(back.events[0].has_reduction);
    EXPECT_EQ(back.events[0].type, ucx::datatype::float32);
    EXPECT_EQ(back.events[0].op, ucx::reduce_op::max);
    EXPECT_EQ(back.events[0].end_us, e0.end_us);
    EXPECT_EQ(back.events[1].collective, collective_kind::broadcast);
    EXPECT_EQ(back.events[1].root, 2);
    EXPECT_EQ(back.events[1].round, 1u);
    EXPECT_EQ(back.events[1].rounds, 2u);
    EXPECT_EQ(back.events[1].waiting_for, (std::vector<int>{2, 3}));
    EXPECT_FALSE(back.events[1].has_reduction);
    EXPECT_EQ(back.events[2].kind, flight_event_kind::recv);
    EXPECT_EQ(back.events[2].peer, 3);
    EXPECT_EQ(back.events[2].tag, 77u);
    EXPECT_EQ(back.events[2].out_bytes, 5u);
    EXPECT_EQ(back.events[2].error, e2.error);
}

TEST(flight_record, refuses_what_is_not_a_record) {
    const std::string good =
        ucx::to_json(record(0, 2,
                            {event(flight_event_kind::collective, collective_kind::barrier, 0, 0,
                                   flight_state::completed)}));
    flight_record r;
    ASSERT_FALSE(ucx::from_json(good, r));
    const auto invalid = make_error_code(boost::asio::error::invalid_argument);
    const auto replaced = [&](const std::string& what, const std::string& with) {
        std::string s = good;
        const auto at = s.find(what);
        EXPECT_NE(at, std::string::npos) << what;
        return s.replace(at, what.size(), with);
    };
    const std::vector<std::string> bad = {
        "",
        "[]",
        "{}",
        good.substr(0, good.size() / 2),
        good + "x",
        replaced("\"ucx-asio-flight-record\"", "\"something else\""),
        replaced("\"version\":1", "\"version\":2"),
        replaced("\"rank\":0", "\"rank\":2"),
        replaced("\"rank\":0", "\"rank\":-1"),
        replaced("\"rank\":0", "\"rank\":0.5"),
        replaced("\"rank\":0", "\"rank\":\"0\""),
        replaced("\"size\":2", "\"size\":0"),
        replaced("\"collective\":\"barrier\"", "\"collective\":\"allreduce2\""),
        replaced("\"state\":\"completed\"", "\"state\":\"done\""),
        replaced("\"kind\":\"collective\"", "\"kind\":7"),
        replaced("\"seq\":0", "\"seq\":-1"),
        replaced("\"seq\":0", "\"seq\":1e300"),
        replaced("\"events\":[", "\"events\":{"),
        replaced("\"collectives\":1", "\"collectives\":true"),
        std::string(64, '[') + std::string(64, ']'),
        "{\"format\":\"ucx-asio-flight-record\",\"a\":\"\\q\"}",
        "{\"format\":\"ucx-asio-flight-record\",\"a\":\"\\u12\"}",
        "{\"format\":\"ucx-asio-flight-record\",\"a\":01x}",
        "{\"format\":\"ucx-asio-flight-record\",\"a\":-}",
        "{\"format\":\"ucx-asio-flight-record\" \"a\":1}",
        "{\"format\":\"ucx-asio-flight-record\",\"a\":[1,]}",
        "{\"format\":\"ucx-asio-flight-record\",\"a\":\"\n\"}",
    };
    for (const auto& s : bad)
        EXPECT_EQ(ucx::from_json(s, r), invalid) << s;
    // Unknown fields are ignored; escapes and spaces are read.
    EXPECT_FALSE(ucx::from_json(replaced("{\"format\"", " { \"extra\" : [ null , false , 1.5e3 , "
                                                        "{ \"x\" : \"\\u00e9\\n\" } ] ,\"format\""),
                                r));
}

TEST(diagnose, names_a_rank_that_never_called_a_collective) {
    using k = collective_kind;
    using s = flight_state;
    const auto c = flight_event_kind::collective;
    std::vector<flight_record> rs;
    for (int r = 0; r < 3; ++r) {
        auto waiting = event(c, k::barrier, 1, 0, s::running);
        waiting.rounds = 2;
        waiting.waiting_for = {3};
        rs.push_back(record(r, 4, {event(c, k::allreduce, 0, 4000, s::completed), waiting}));
    }
    rs.push_back(record(3, 4, {event(c, k::allreduce, 0, 4000, s::completed)}));
    const auto d = ucx::diagnose(rs);
    EXPECT_EQ(d.culprits, (std::vector<int>{3}));
    EXPECT_TRUE(d.missing.empty());
    ASSERT_FALSE(d.findings.empty());
    EXPECT_EQ(d.findings[0], "rank 3 never called collective 1 (barrier), which ranks 0, 1, 2 "
                             "called (ranks 0, 1, 2 waited in it)");
    EXPECT_NE(d.findings[1].find("rank 0: collective 1 (barrier) in round 1 of 2, waiting for "
                                 "rank 3"),
              std::string::npos)
        << d.findings[1];
}

TEST(diagnose, names_the_rank_that_called_another_collective) {
    using k = collective_kind;
    using s = flight_state;
    const auto c = flight_event_kind::collective;
    std::vector<flight_record> rs;
    for (int r = 0; r < 4; ++r) {
        auto second = event(c, k::allreduce, 1, r == 2 ? 8192 : 4096, s::running);
        second.has_reduction = true;
        rs.push_back(record(r, 4, {event(c, k::barrier, 0, 0, s::completed), second}));
    }
    const auto d = ucx::diagnose(rs);
    EXPECT_EQ(d.culprits, (std::vector<int>{2}));
    ASSERT_FALSE(d.findings.empty());
    EXPECT_EQ(d.findings[0], "collective 1: ranks 0, 1, 3 called allreduce of 4096 bytes uint8 "
                             "sum; rank 2 called allreduce of 8192 bytes uint8 sum");
}

TEST(diagnose, sizes_that_may_differ_by_rank_are_no_divergence) {
    using k = collective_kind;
    using s = flight_state;
    const auto c = flight_event_kind::collective;
    std::vector<flight_record> rs;
    for (int r = 0; r < 2; ++r) {
        auto v = event(c, k::allgatherv, 0, 8 * static_cast<std::size_t>(r + 1), s::completed);
        auto g = event(c, k::broadcast, 1, r == 0 ? 8 : 0, s::completed);
        g.root = 0;
        g.out_bytes = 8;
        rs.push_back(record(r, 2, {v, g}));
    }
    const auto d = ucx::diagnose(rs);
    EXPECT_TRUE(d.culprits.empty());
    EXPECT_TRUE(d.findings.empty());
}

TEST(diagnose, a_missing_record_and_messages_in_flight) {
    using k = collective_kind;
    using s = flight_state;
    const auto c = flight_event_kind::collective;
    flight_event recv;
    recv.id = 1;
    recv.kind = flight_event_kind::recv;
    recv.state = s::running;
    recv.peer = 2;
    recv.tag = 7;
    recv.out_bytes = 64;
    std::vector<flight_record> rs = {
        record(1, 3, {event(c, k::barrier, 0, 0, s::completed), recv}),
        record(0, 3, {event(c, k::barrier, 0, 0, s::completed)}),
    };
    // A second record of a rank, and a record of another group, are ignored.
    rs.push_back(rs[1]);
    rs.back().events.clear();
    auto other = record(2, 3, {});
    other.group = "other";
    rs.push_back(other);
    const auto d = ucx::diagnose(rs);
    EXPECT_EQ(d.missing, (std::vector<int>{2}));
    EXPECT_EQ(d.culprits, (std::vector<int>{2}));
    ASSERT_EQ(d.findings.size(), 2u);
    EXPECT_EQ(d.findings[0], "rank 1: a recv from rank 2 (tag 7, 64 bytes) in flight");
    EXPECT_EQ(d.findings[1], "no record from rank 2");
    EXPECT_TRUE(ucx::diagnose({}).findings.empty());
}

} // namespace
