// chat_client: joins a chat_server room. Lines typed on stdin go to everyone
// else; what the others say, and who joins and leaves, is printed. Standard
// input is read with Asio on the same io_context as UCX. End of input (^D)
// leaves the room cleanly.
//
//   chat_client --nick NAME [--host 127.0.0.1] --port PORT
//
// Exits 0 after a clean leave, 1 when the server goes away or cannot be reached.
#include "chat_protocol.hpp"
#include "sample_args.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>

#include <unistd.h>

#include <cstdio>
#include <istream>
#include <memory>
#include <string>

namespace asio = boost::asio;

namespace {

class client {
public:
    client(asio::io_context& io, ucx::worker& w, std::string nick)
        : worker_(w), nick_(std::move(nick)), input_(io, ::dup(STDIN_FILENO)) {}

    void start(const std::string& host, const std::string& port) {
        ucx::set_am_handler(worker_, chat::line_id, [](ucx::error_code ec, ucx::am_message m) {
            if (ec)
                return;
            const auto h = m.header();
            std::printf("%.*s: %.*s\n", static_cast<int>(h.size()),
                        reinterpret_cast<const char*>(h.data()), static_cast<int>(m.size()),
                        static_cast<const char*>(m.data().data()));
            std::fflush(stdout);
        });
        ucx::set_am_handler(worker_, chat::notice_id, [](ucx::error_code ec, ucx::am_message m) {
            if (ec)
                return;
            std::printf("%.*s\n", static_cast<int>(m.size()),
                        static_cast<const char*>(m.data().data()));
            std::fflush(stdout);
        });
        ucx::async_connect(worker_, host, port, [this](ucx::error_code ec, ucx::endpoint ep) {
            if (ec)
                return fail("cannot connect", ec);
            ep_ = std::move(ep);
            ep_.async_wait_error([this](ucx::error_code ec) {
                if (!leaving_)
                    fail("the server went away", ec);
            });
            send(chat::join_id, nick_);
            read_line();
        });
    }

    int exit_code() const { return exit_code_; }

private:
    void send(unsigned id, std::string text) {
        auto data = std::make_shared<const std::string>(std::move(text));
        ucx::async_am_send(ep_, id, asio::const_buffer(), asio::buffer(*data),
                           [data](ucx::error_code, std::size_t) {});
    }

    void read_line() {
        asio::async_read_until(input_, line_, '\n', [this](ucx::error_code ec, std::size_t) {
            if (ec)
                return leave(); // end of input
            std::istream in(&line_);
            std::string text;
            std::getline(in, text);
            if (!text.empty())
                send(chat::say_id, text);
            read_line();
        });
    }

    void leave() {
        leaving_ = true;
        ep_.async_close([this](ucx::error_code) { worker_.close(); });
    }

    void fail(const char* what, const ucx::error_code& ec) {
        std::fprintf(stderr, "chat_client: %s: %s\n", what, ec.message().c_str());
        exit_code_ = 1;
        input_.close();
        worker_.close();
    }

    ucx::worker& worker_;
    std::string nick_;
    asio::posix::stream_descriptor input_;
    asio::streambuf line_;
    ucx::endpoint ep_;
    bool leaving_ = false;
    int exit_code_ = 0;
};

} // namespace

int main(int argc, char** argv) {
    std::string host = "127.0.0.1", port, nick;
    bool usage = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        ++i;
        if (arg == "--host")
            host = value;
        else if (arg == "--port")
            port = value;
        else if (arg == "--nick")
            nick = value;
        else
            usage = true;
    }
    if (usage || port.empty() || nick.empty()) {
        std::fprintf(stderr, "usage: %s --nick NAME [--host H] --port P\n", argv[0]);
        return 2;
    }
    try {
        asio::io_context io;
        ucx::context ctx;
        ucx::worker worker(ctx, io);
        client c(io, worker, nick);
        c.start(host, port);
        io.run();
        return c.exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chat_client: %s\n", e.what());
        return 1;
    }
}
