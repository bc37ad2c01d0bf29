// ucxcat between two processes: a random file through `ucxcat -l PORT > out`
// and `ucxcat HOST PORT < in` arrives with the same SHA-256, over UCX (TCP
// and shared memory) and over plain TCP; a connection error is a clear
// message and a non-zero exit.
#include "child_process.hpp"
#include "sanitizers.hpp"
#include "test_support.hpp"

#include <openssl/evp.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace ucx_test;

namespace {

namespace fs = std::filesystem;

#if defined(UCX_ASIO_TEST_ASAN) || defined(UCX_ASIO_TEST_TSAN)
constexpr std::size_t file_size = 32u << 20;
#else
constexpr std::size_t file_size = 256u << 20;
#endif

std::string sha256_of(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    std::vector<char> buf(1u << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        EVP_DigestUpdate(ctx, buf.data(), static_cast<std::size_t>(in.gcount()));
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    std::string hex;
    static const char* digits = "0123456789abcdef";
    for (unsigned i = 0; i < len; ++i) {
        hex += digits[md[i] >> 4];
        hex += digits[md[i] & 15];
    }
    return hex;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// A scratch directory (in /dev/shm when there is one), removed at the end.
class scratch {
public:
    scratch() {
        const fs::path base =
            fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        std::string tmpl = (base / "ucxcat-test-XXXXXX").string();
        if (!mkdtemp(tmpl.data()))
            throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
    }
    ~scratch() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    fs::path operator/(const std::string& name) const { return dir_ / name; }

private:
    fs::path dir_;
};

/// Runs `command` with /bin/sh (for the redirections).
child_process shell(const std::string& command) {
    return child_process({"/bin/sh", "-c", command});
}

/// Waits until the listener's stderr says which port it got.
std::string wait_for_port(const fs::path& err) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
        const std::string text = read_file(err);
        if (auto p = text.find("listening on "); p != std::string::npos) {
            const auto colon = text.find(':', p);
            const auto space = text.find(' ', colon);
            if (colon != std::string::npos && space != std::string::npos)
                return text.substr(colon + 1, space - colon - 1);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
}

struct ucxcat_case {
    std::string name;
    std::string args;
};

class ucxcat_process : public testing::TestWithParam<ucxcat_case> {};

TEST_P(ucxcat_process, moves_a_random_file_with_identical_sha256) {
    scratch dir;
    {
        std::ofstream out(dir / "in.bin", std::ios::binary);
        std::mt19937_64 gen(12345);
        std::vector<std::uint64_t> block(1u << 17);
        for (std::size_t done = 0; done < file_size; done += block.size() * 8) {
            for (auto& x : block)
                x = gen();
            out.write(reinterpret_cast<const char*>(block.data()),
                      static_cast<std::streamsize>(block.size() * 8));
        }
    }
    const std::string bin = UCX_ASIO_UCXCAT;
    const std::string args = GetParam().args;
    auto listener = shell(bin + " " + args + " -l --bind 127.0.0.1 0 < /dev/null > " +
                          (dir / "out.bin").string() + " 2> " + (dir / "listener.err").string());
    const std::string port = wait_for_port(dir / "listener.err");
    ASSERT_FALSE(port.empty()) << read_file(dir / "listener.err");
    auto sender = shell(bin + " " + args + " --progress 127.0.0.1 " + port + " < " +
                        (dir / "in.bin").string() + " > " + (dir / "back.bin").string() + " 2> " +
                        (dir / "sender.err").string());
    EXPECT_EQ(sender.wait(), 0) << read_file(dir / "sender.err");
    EXPECT_EQ(listener.wait(), 0) << read_file(dir / "listener.err");
    EXPECT_EQ(fs::file_size(dir / "out.bin"), file_size);
    EXPECT_EQ(sha256_of(dir / "out.bin"), sha256_of(dir / "in.bin"));
    EXPECT_EQ(fs::file_size(dir / "back.bin"), 0u);
    // The progress display ends with a summary of what moved.
    EXPECT_NE(
        read_file(dir / "sender.err").find("sent " + std::to_string(file_size >> 20) + ".0 MiB"),
        std::string::npos)
        << read_file(dir / "sender.err");
}

TEST_P(ucxcat_process, both_directions_at_once) {
    scratch dir;
    std::ofstream(dir / "a.txt") << std::string(300000, 'a');
    std::ofstream(dir / "b.txt") << std::string(200000, 'b');
    const std::string bin = UCX_ASIO_UCXCAT;
    const std::string args = GetParam().args;
    auto listener =
        shell(bin + " " + args + " -q -l --bind 127.0.0.1 0 < " + (dir / "a.txt").string() + " > " +
              (dir / "from_b.txt").string() + " 2> " + (dir / "listener.err").string());
    const std::string port = wait_for_port(dir / "listener.err");
    ASSERT_FALSE(port.empty()) << read_file(dir / "listener.err");
    auto sender =
        shell(bin + " " + args + " -q 127.0.0.1 " + port + " < " + (dir / "b.txt").string() +
              " > " + (dir / "from_a.txt").string() + " 2> " + (dir / "sender.err").string());
    EXPECT_EQ(sender.wait(), 0) << read_file(dir / "sender.err");
    EXPECT_EQ(listener.wait(), 0) << read_file(dir / "listener.err");
    EXPECT_EQ(read_file(dir / "from_a.txt"), std::string(300000, 'a'));
    EXPECT_EQ(read_file(dir / "from_b.txt"), std::string(200000, 'b'));
}

TEST_P(ucxcat_process, connection_errors_exit_non_zero_with_a_message) {
    scratch dir;
    const std::string bin = UCX_ASIO_UCXCAT;
    // Nobody listens on port 1.
    auto c = shell(bin + " " + GetParam().args + " 127.0.0.1 1 < /dev/null 2> " +
                   (dir / "err").string());
    EXPECT_EQ(c.wait(), 1);
    EXPECT_NE(read_file(dir / "err").find("cannot connect to 127.0.0.1:1"), std::string::npos)
        << read_file(dir / "err");
    // Bad arguments.
    auto u = shell(bin + " -l 99999 2> " + (dir / "err2").string());
    EXPECT_EQ(u.wait(), 2);
    EXPECT_NE(read_file(dir / "err2").find("bad port"), std::string::npos);
}

// An idle session (both stdins open, no data) whose peer is killed ends with
// the receive's error, not with the cancellation of the stdin read it
// causes. Over UCX only: a killed TCP peer's socket closes with an end of
// file, which a one-way end leaves for stdin to finish.
TEST(ucxcat_peer_loss, an_idle_session_says_what_happened_to_the_peer) {
    for (const std::string args : {"--ucx-transports tcp", "--ucx-transports shm"}) {
        SCOPED_TRACE(args);
        scratch dir;
        const std::string bin = UCX_ASIO_UCXCAT;
        // A FIFO opened for reading and writing never ends: an idle stdin.
        for (const char* f : {"lin", "cin"})
            ASSERT_EQ(::mkfifo((dir / f).c_str(), 0600), 0);
        auto listener = shell("exec " + bin + " " + args + " -q -l --bind 127.0.0.1 0 <> " +
                              (dir / "lin").string() + " > " + (dir / "lout").string() + " 2> " +
                              (dir / "lerr").string());
        const std::string port = wait_for_port(dir / "lerr");
        ASSERT_FALSE(port.empty()) << read_file(dir / "lerr");
        auto client = shell("exec " + bin + " " + args + " -q 127.0.0.1 " + port + " <> " +
                            (dir / "cin").string() + " > /dev/null 2> " + (dir / "cerr").string());
        // A line through the session: it is up.
        { std::ofstream(dir / "cin") << "hello\n"; }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (read_file(dir / "lout").find("hello") == std::string::npos &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ASSERT_NE(read_file(dir / "lout").find("hello"), std::string::npos)
            << read_file(dir / "cerr");
        listener.kill_now();
        listener.wait();
        // Within the peer timeout, whatever the transport says.
        EXPECT_EQ(client.wait(), 1);
        const std::string err = read_file(dir / "cerr");
        EXPECT_NE(err.find("ucxcat: receiving: "), std::string::npos) << err;
        EXPECT_EQ(err.find("stdin"), std::string::npos) << err;
        EXPECT_EQ(err.find("canceled"), std::string::npos) << err;
    }
}

INSTANTIATE_TEST_SUITE_P(transports, ucxcat_process,
                         testing::Values(ucxcat_case{"ucx_tcp", "--ucx-transports tcp"},
                                         ucxcat_case{"ucx_shm", "--ucx-transports shm"},
                                         ucxcat_case{"asio_tcp", "--transport tcp"}),
                         [](const auto& info) { return info.param.name; });

} // namespace
