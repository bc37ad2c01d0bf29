// chat_server: a chat room over UCX active messages. Clients connect, join
// with a nickname, and every line one of them says reaches all the others.
// Joins and leaves (a clean quit or a client that died) are announced to
// everyone; the server keeps running whatever its clients do.
//
//   chat_server [--address 127.0.0.1] [--port 0] [--progress event|poll|hybrid]
//
// Prints "listening on ADDRESS:PORT" once ready; SIGINT/SIGTERM stop it.
#include "chat_protocol.hpp"
#include "sample_args.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <cstdio>
#include <list>
#include <memory>
#include <string>

namespace asio = boost::asio;

namespace {

class room {
public:
    explicit room(ucx::worker& w) {
        ucx::set_am_handler(w, chat::join_id, [this](ucx::error_code ec, ucx::am_message m) {
            if (!ec)
                on_join(std::move(m));
        });
        ucx::set_am_handler(w, chat::say_id, [this](ucx::error_code ec, ucx::am_message m) {
            if (!ec)
                on_say(std::move(m));
        });
    }

    // A new connection: it becomes a member once it says its nickname.
    void add(ucx::endpoint ep) {
        members_.push_back(member{std::move(ep), {}});
        auto it = std::prev(members_.end());
        it->ep.async_wait_error([this, it](ucx::error_code ec) { on_gone(it, ec); });
    }

private:
    struct member {
        ucx::endpoint ep;
        std::string nick; // empty until joined
    };
    using iterator = std::list<member>::iterator;

    iterator find(const ucx::am_message& m) {
        ucx::error_code ec;
        const ucx::endpoint from = m.reply_endpoint(ec);
        for (auto it = members_.begin(); it != members_.end(); ++it)
            if (!ec && it->ep.native_handle() == from.native_handle())
                return it;
        return members_.end();
    }

    static std::string text(const ucx::am_message& m, std::size_t limit) {
        const auto* p = static_cast<const char*>(m.data().data());
        std::string s(p, std::min(m.size(), limit));
        for (char& c : s)
            if (c == '\n' || c == '\r')
                c = ' ';
        return s;
    }

    void on_join(ucx::am_message m) {
        auto it = find(m);
        if (it == members_.end() || !it->nick.empty())
            return; // unknown sender, or joined already
        it->nick = text(m, chat::max_nick);
        if (it->nick.empty())
            it->nick = "anonymous";
        std::size_t online = 0;
        for (const auto& x : members_)
            online += !x.nick.empty();
        announce(chat::notice_id, {},
                 "* " + it->nick + " joined (" + std::to_string(online) + " online)",
                 members_.end());
    }

    void on_say(ucx::am_message m) {
        auto it = find(m);
        if (it == members_.end() || it->nick.empty())
            return;
        announce(chat::line_id, it->nick, text(m, chat::max_line), it);
    }

    void on_gone(iterator it, const ucx::error_code& ec) {
        const std::string nick = it->nick;
        members_.erase(it);
        if (nick.empty())
            return;
        const std::string why =
            ec == asio::error::eof ? "quit" : "connection lost: " + ec.message();
        announce(chat::notice_id, {}, "* " + nick + " left (" + why + ")", members_.end());
    }

    // Sends to every member but `except`; the texts live until the last send.
    void announce(unsigned id, const std::string& header, const std::string& body,
                  iterator except) {
        std::printf("%s%s%s\n", header.c_str(), header.empty() ? "" : ": ", body.c_str());
        std::fflush(stdout);
        auto h = std::make_shared<const std::string>(header);
        auto b = std::make_shared<const std::string>(body);
        for (auto it = members_.begin(); it != members_.end(); ++it) {
            if (it == except || it->nick.empty() || !it->ep.is_open())
                continue;
            // A failed send shows up as that member's leave; nothing to do here.
            ucx::async_am_send(it->ep, id, asio::buffer(*h), asio::buffer(*b),
                               [h, b](ucx::error_code, std::size_t) {});
        }
    }

    std::list<member> members_;
};

} // namespace

int main(int argc, char** argv) {
    std::string address = "127.0.0.1";
    unsigned short port = 0;
    ucx::worker_options options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        ++i;
        if (arg == "--address")
            address = value;
        else if (arg == "--port")
            port = static_cast<unsigned short>(sample::number(value));
        else if (arg == "--progress" && ucx::parse_progress_mode(value))
            options.mode = *ucx::parse_progress_mode(value);
        else {
            std::fprintf(stderr, "usage: %s [--address A] [--port P] [--progress MODE]\n", argv[0]);
            return 2;
        }
    }
    try {
        asio::io_context io;
        ucx::context ctx;
        ucx::worker worker(ctx, io, options);
        room r(worker);
        ucx::listener listener(worker,
                               asio::ip::tcp::endpoint(asio::ip::make_address(address), port));
        std::function<void()> accept = [&] {
            listener.async_accept([&](ucx::error_code ec, ucx::endpoint ep) {
                if (ec == asio::error::operation_aborted)
                    return;
                if (!ec)
                    r.add(std::move(ep));
                accept();
            });
        };
        accept();
        asio::signal_set signals(io, SIGINT, SIGTERM);
        signals.async_wait([&](ucx::error_code, int) {
            listener.close();
            worker.close();
        });
        const auto local = listener.local_endpoint();
        std::printf("listening on %s:%u\n", local.address().to_string().c_str(), local.port());
        std::fflush(stdout);
        io.run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "chat_server: %s\n", e.what());
        return 1;
    }
    return 0;
}
