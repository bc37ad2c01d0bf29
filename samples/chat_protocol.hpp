// The chat samples' active-message ids, shared by server and client.
#pragma once

#include <cstddef>

namespace chat {

// Client to server.
inline constexpr unsigned join_id = 1; // data: the nickname
inline constexpr unsigned say_id = 2;  // data: one line of text

// Server to clients.
inline constexpr unsigned line_id = 3;   // header: the speaker's nickname; data: the line
inline constexpr unsigned notice_id = 4; // data: a server notice (joins, leaves)

// The longest nickname and line the server accepts.
inline constexpr std::size_t max_nick = 32;
inline constexpr std::size_t max_line = 4096;

} // namespace chat
