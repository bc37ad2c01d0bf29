// The client side of PMI-1 (store/pmi_protocol.hpp): its lines, step by step,
// and several clients driven against a PMI-1 server played in memory as
// MPICH's mpiexec.hydra answers.
#include "store/pmi_protocol.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace {

using ucx::detail::pmi_client;
using ucx::detail::round_keys;

std::vector<std::byte> bytes(std::string_view s) {
    std::vector<std::byte> v;
    for (char c : s)
        v.push_back(static_cast<std::byte>(c));
    return v;
}

/// Takes the command to send, without its '\n'.
std::string sent(const pmi_client& c) {
    const std::string& s = c.command();
    EXPECT_FALSE(s.empty());
    EXPECT_EQ(s.back(), '\n');
    return s.substr(0, s.size() - 1);
}

void start(pmi_client& c, const std::string& vallen = "1024") {
    c.start();
    EXPECT_EQ(sent(c), "cmd=init pmi_version=1 pmi_subversion=1");
    ASSERT_TRUE(c.on_reply("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0"));
    EXPECT_EQ(sent(c), "cmd=get_maxes");
    ASSERT_TRUE(c.on_reply("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=" + vallen));
    EXPECT_EQ(sent(c), "cmd=get_my_kvsname");
    ASSERT_TRUE(c.on_reply("cmd=my_kvsname kvsname=kvs_1_0"));
    EXPECT_TRUE(c.command().empty());
    EXPECT_EQ(c.kvsname(), "kvs_1_0");
}

TEST(PmiLine, FieldsInOrderWithCmdFirst) {
    auto l = ucx::detail::parse_pmi_line("cmd=get_result rc=0 msg=success value=ab=c");
    ASSERT_TRUE(l);
    ASSERT_EQ(l->fields.size(), 4u);
    EXPECT_EQ(*l->find("cmd"), "get_result");
    EXPECT_EQ(*l->find("value"), "ab=c");
    EXPECT_EQ(l->find("nothing"), nullptr);
    EXPECT_TRUE(ucx::detail::parse_pmi_line("cmd=barrier_out "));
    EXPECT_TRUE(ucx::detail::parse_pmi_line("cmd=x value="));
    for (std::string_view bad : {"", " ", "rc=0 cmd=x", "cmd", "cmd=x rc", "=x", "cmd=x =y"})
        EXPECT_FALSE(ucx::detail::parse_pmi_line(bad)) << bad;
    EXPECT_FALSE(ucx::detail::parse_pmi_line("cmd=x v=" + std::string(5000, 'a')));
}

TEST(PmiLine, HexBothWays) {
    const auto b = bytes(std::string("\x00\x7f\x80\xff ab", 6));
    const std::string h = ucx::detail::to_hex(b.data(), b.size());
    EXPECT_EQ(h, "007f80ff2061");
    std::vector<std::byte> back;
    ASSERT_TRUE(ucx::detail::from_hex(h, back));
    EXPECT_EQ(back, b);
    back.clear();
    EXPECT_TRUE(ucx::detail::from_hex("ABcd", back));
    EXPECT_EQ(back.size(), 2u);
    for (std::string_view bad : {"a", "0g", "zz", "12 3"}) {
        std::vector<std::byte> v;
        EXPECT_FALSE(ucx::detail::from_hex(bad, v)) << bad;
    }
}

TEST(PmiClient, StartsWithInitMaxesAndKvsname) {
    pmi_client c(0, 2);
    start(c);
    EXPECT_EQ(c.value_max(), 1024u);
}

// A round, step by step, for rank 1 of 3 with a value of 5 chunks (a
// server whose longest value is 5 characters with its NUL: 2 bytes a chunk).
TEST(PmiClient, ARoundPutsChunksThenCountThenBarrierThenReadsEachOther) {
    pmi_client c(1, 3);
    start(c, "5");
    round_keys mine{{"k", bytes("v")}};
    const auto value = ucx::detail::encode_round(mine); // 4 + 1 + 4 + 1 bytes
    ASSERT_EQ(value.size(), 10u);
    c.start_round(7, value);
    for (int i = 0; i < 5; ++i) {
        const std::string hex = ucx::detail::to_hex(value.data() + 2 * i, 2);
        EXPECT_EQ(sent(c),
                  "cmd=put kvsname=kvs_1_0 key=ucxasio-7-1-" + std::to_string(i) + " value=" + hex);
        ASSERT_TRUE(c.on_reply("cmd=put_result rc=0 msg=success"));
    }
    EXPECT_EQ(sent(c), "cmd=put kvsname=kvs_1_0 key=ucxasio-7-1 value=5");
    ASSERT_TRUE(c.on_reply("cmd=put_result rc=0 msg=success"));
    EXPECT_EQ(sent(c), "cmd=barrier_in");
    ASSERT_TRUE(c.on_reply("cmd=barrier_out"));
    // Rank 0 set one key (9 bytes: 5 chunks), rank 2 nothing.
    round_keys theirs{{"a", {}}};
    const auto v0 = ucx::detail::encode_round(theirs); // 9 bytes
    EXPECT_EQ(sent(c), "cmd=get kvsname=kvs_1_0 key=ucxasio-7-0");
    ASSERT_TRUE(c.on_reply("cmd=get_result rc=0 msg=success value=5"));
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(sent(c), "cmd=get kvsname=kvs_1_0 key=ucxasio-7-0-" + std::to_string(i));
        const std::size_t n = std::min<std::size_t>(2, v0.size() - 2 * i);
        ASSERT_TRUE(c.on_reply("cmd=get_result rc=0 msg=success value=" +
                               ucx::detail::to_hex(v0.data() + 2 * i, n)));
    }
    EXPECT_EQ(sent(c), "cmd=get kvsname=kvs_1_0 key=ucxasio-7-2");
    ASSERT_TRUE(c.on_reply("cmd=get_result rc=0 msg=success value=0"));
    EXPECT_TRUE(c.command().empty());
    ASSERT_EQ(c.keys().size(), 1u);
    EXPECT_TRUE(c.keys().at("a").empty());

    c.start_finalize();
    EXPECT_EQ(sent(c), "cmd=finalize");
    ASSERT_TRUE(c.on_reply("cmd=finalize_ack"));
    EXPECT_TRUE(c.command().empty());
}

// Every wrong answer fails the conversation with a reason, and empties it.
TEST(PmiClient, WrongAnswersFailWithAReason) {
    struct bad_case {
        std::string reply;
        std::string reason_holds;
    };
    const std::vector<bad_case> at_init = {
        {"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1", "rc=-1"},
        {"cmd=barrier_out", "cmd=barrier_out"},
        {"hello", "not PMI-1"},
        {"", "not PMI-1"},
    };
    for (const auto& b : at_init) {
        pmi_client c(0, 2);
        c.start();
        EXPECT_FALSE(c.on_reply(b.reply)) << b.reply;
        EXPECT_NE(c.why().find(b.reason_holds), std::string::npos) << c.why();
        EXPECT_TRUE(c.command().empty());
        EXPECT_FALSE(c.on_reply("cmd=response_to_init rc=0")) << "nothing was sent";
    }
    for (std::string maxes :
         {"cmd=maxes keylen_max=8 vallen_max=1024", "cmd=maxes keylen_max=64 vallen_max=2",
          "cmd=maxes keylen_max=64", "cmd=maxes keylen_max=64 vallen_max=x"}) {
        pmi_client c(0, 2);
        c.start();
        ASSERT_TRUE(c.on_reply("cmd=response_to_init rc=0"));
        EXPECT_FALSE(c.on_reply(maxes)) << maxes;
        EXPECT_NE(c.why().find("limits"), std::string::npos) << c.why();
    }
    {
        pmi_client c(0, 2);
        c.start();
        ASSERT_TRUE(c.on_reply("cmd=response_to_init rc=0"));
        ASSERT_TRUE(c.on_reply("cmd=maxes keylen_max=64 vallen_max=1024"));
        EXPECT_FALSE(c.on_reply("cmd=my_kvsname"));
    }
    // In a round: a missing key, a count that is no number, a chunk that is
    // no hexadecimal, a value that does not decode.
    const std::vector<std::vector<std::string>> in_round = {
        {"cmd=get_result rc=-1 msg=key_ucxasio-1-1_not_found value=unknown"},
        {"cmd=get_result rc=0 value=x"},
        {"cmd=get_result rc=0 value=99999999999999999999"},
        {"cmd=get_result rc=0 value=1", "cmd=get_result rc=0 value=zz"},
        {"cmd=get_result rc=0 value=1", "cmd=get_result rc=0 value=ff"},
    };
    for (const auto& replies : in_round) {
        pmi_client c(0, 2);
        start(c);
        c.start_round(1, {});
        ASSERT_TRUE(c.on_reply("cmd=put_result rc=0")); // the count, 0
        ASSERT_TRUE(c.on_reply("cmd=barrier_out"));
        for (std::size_t i = 0; i + 1 < replies.size(); ++i)
            ASSERT_TRUE(c.on_reply(replies[i]));
        EXPECT_FALSE(c.on_reply(replies.back())) << replies.back();
        EXPECT_FALSE(c.why().empty());
        EXPECT_TRUE(c.command().empty());
    }
}

/// A PMI-1 server in memory, as mpiexec.hydra answers: a key-value space,
/// and a barrier that answers when every process has entered it.
struct memory_server {
    std::size_t size;
    std::map<std::string, std::string> kvs;
    std::vector<std::size_t> in_barrier;

    /// The reply to `line` from process `p`, or empty while it waits.
    std::string answer(std::size_t p, const std::string& line) {
        auto l = ucx::detail::parse_pmi_line(line);
        EXPECT_TRUE(l) << line;
        const std::string& cmd = *l->find("cmd");
        if (cmd == "init")
            return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0";
        if (cmd == "get_maxes")
            return "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=64";
        if (cmd == "get_my_kvsname")
            return "cmd=my_kvsname kvsname=kvs_memory";
        if (cmd == "put") {
            EXPECT_LT(l->find("value")->size(), 64u); // with its NUL
            EXPECT_LE(l->find("key")->size(), 64u);
            kvs[*l->find("key")] = *l->find("value");
            return "cmd=put_result rc=0 msg=success";
        }
        if (cmd == "get") {
            auto it = kvs.find(*l->find("key"));
            if (it == kvs.end())
                return "cmd=get_result rc=-1 msg=key_not_found value=unknown";
            return "cmd=get_result rc=0 msg=success value=" + it->second;
        }
        if (cmd == "barrier_in") {
            in_barrier.push_back(p);
            return {};
        }
        if (cmd == "finalize")
            return "cmd=finalize_ack";
        ADD_FAILURE() << line;
        return "cmd=unknown";
    }
};

// Four processes, two rounds each (the second with keys set after the
// first), driven against the server in an interleaved order: every process
// ends with every other's keys, values of several chunks included.
TEST(PmiClientPair, FourProcessesExchangeTheirKeysInRounds) {
    constexpr std::size_t n = 4;
    memory_server server{n, {}, {}};
    std::vector<pmi_client> clients;
    for (std::uint32_t r = 0; r < n; ++r)
        clients.emplace_back(r, n);
    std::vector<bool> waiting(n, false);
    // Runs every client until each one's queue is done.
    auto run = [&] {
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t p = 0; p < n; ++p) {
                if (waiting[p] || clients[p].command().empty())
                    continue;
                std::string line = clients[p].command();
                line.pop_back();
                const std::string reply = server.answer(p, line);
                progress = true;
                if (reply.empty()) {
                    waiting[p] = true;
                    if (server.in_barrier.size() == n) {
                        for (std::size_t q : server.in_barrier) {
                            waiting[q] = false;
                            ASSERT_TRUE(clients[q].on_reply("cmd=barrier_out"));
                        }
                        server.in_barrier.clear();
                    }
                    continue;
                }
                ASSERT_TRUE(clients[p].on_reply(reply)) << clients[p].why();
            }
        }
    };
    for (auto& c : clients)
        c.start();
    run();
    for (std::uint64_t round = 1; round <= 2; ++round) {
        for (std::uint32_t r = 0; r < n; ++r) {
            round_keys mine;
            if (r != 2 || round == 2) // rank 2 sets nothing in round 1
                mine["addr/" + std::to_string(r) + "/" + std::to_string(round)] =
                    bytes(std::string(100 * r + round, static_cast<char>('a' + r)));
            clients[r].start_round(round, ucx::detail::encode_round(mine));
        }
        run();
        for (std::uint32_t r = 0; r < n; ++r) {
            EXPECT_TRUE(clients[r].command().empty());
            const round_keys& got = clients[r].keys();
            for (std::uint32_t o = 0; o < n; ++o) {
                const std::string k = "addr/" + std::to_string(o) + "/" + std::to_string(round);
                if (o == r || (o == 2 && round == 1)) {
                    EXPECT_FALSE(got.contains(k)) << r << " " << k;
                    continue;
                }
                ASSERT_TRUE(got.contains(k)) << r << " " << k;
                EXPECT_EQ(got.at(k),
                          bytes(std::string(100 * o + round, static_cast<char>('a' + o))));
            }
        }
    }
}

} // namespace
