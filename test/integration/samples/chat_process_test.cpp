// The chat samples across processes: three clients, one of them killed; every
// surviving client sees every line and every join and leave, and the server
// keeps serving.
#include "child_process.hpp"
#include "test_support.hpp"

#include <csignal>
#include <thread>

using namespace ucx_test;

namespace {

std::string read_port(child_process& server) {
    for (std::string line = server.read_line(); !line.empty(); line = server.read_line()) {
        auto at = line.find("listening on ");
        if (at != std::string::npos)
            return line.substr(line.find(':', at) + 1);
    }
    return {};
}

// Waits (without blocking on the pipe) until `c` has printed `text`.
bool saw(child_process& c, const std::string& text,
         std::chrono::seconds limit = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!c.output_contains(text)) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

child_process client(const std::string& port, const std::string& nick) {
    return child_process({UCX_ASIO_CHAT_CLIENT, "--nick", nick, "--port", port});
}

TEST(chat_process, three_clients_one_killed) {
    child_process server({UCX_ASIO_CHAT_SERVER, "--port", "0"});
    const std::string port = read_port(server);
    ASSERT_FALSE(port.empty());

    child_process alice = client(port, "alice");
    ASSERT_TRUE(saw(alice, "* alice joined (1 online)"));
    child_process bob = client(port, "bob");
    ASSERT_TRUE(saw(alice, "* bob joined (2 online)"));
    ASSERT_TRUE(saw(bob, "* bob joined (2 online)"));
    child_process carol = client(port, "carol");
    ASSERT_TRUE(saw(alice, "* carol joined (3 online)"));
    ASSERT_TRUE(saw(bob, "* carol joined (3 online)"));
    ASSERT_TRUE(saw(carol, "* carol joined (3 online)"));

    alice.write_line("hello from alice");
    ASSERT_TRUE(saw(bob, "alice: hello from alice"));
    ASSERT_TRUE(saw(carol, "alice: hello from alice"));
    bob.write_line("hi, I am bob");
    carol.write_line("carol here");
    for (auto* c : {&alice, &carol})
        ASSERT_TRUE(saw(*c, "bob: hi, I am bob"));
    for (auto* c : {&alice, &bob})
        ASSERT_TRUE(saw(*c, "carol: carol here"));
    // Nobody hears themselves.
    EXPECT_FALSE(alice.output_contains("alice: hello"));

    // Carol dies: the others hear that she left.
    carol.kill_now();
    EXPECT_EQ(carol.wait(), 128 + SIGKILL);
    ASSERT_TRUE(saw(alice, "* carol left (connection lost"));
    ASSERT_TRUE(saw(bob, "* carol left (connection lost"));

    // Lines still flow between the survivors, many of them, all in order.
    for (int i = 0; i < 50; ++i)
        alice.write_line("line " + std::to_string(i));
    ASSERT_TRUE(saw(bob, "alice: line 49"));
    for (int i = 0; i < 50; ++i)
        EXPECT_TRUE(bob.output_contains("alice: line " + std::to_string(i) + "\n")) << i;

    // Bob leaves cleanly at end of input.
    bob.close_stdin();
    EXPECT_EQ(bob.wait(), 0);
    ASSERT_TRUE(saw(alice, "* bob left (quit)"));

    // The server keeps serving newcomers.
    child_process dave = client(port, "dave");
    ASSERT_TRUE(saw(alice, "* dave joined (2 online)"));
    dave.write_line("late but here");
    ASSERT_TRUE(saw(alice, "dave: late but here"));
    alice.close_stdin();
    dave.close_stdin();
    EXPECT_EQ(alice.wait(), 0);
    EXPECT_EQ(dave.wait(), 0);
}

TEST(chat_process, client_reports_unreachable_server) {
    // A port nobody listens on: a clear message and exit code 1, no hang.
    child_process c = client("1", "nobody");
    EXPECT_EQ(c.wait(), 1);
}

} // namespace
