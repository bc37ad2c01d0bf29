// The client side of PMI-1's wire protocol (the "simple" PMI that MPICH's
// mpiexec.hydra serves to each process on the socket PMI_FD), as a sans-io
// state machine: it says which command to send next and consumes the reply,
// one line at a time. pmi_store's I/O only executes it.
//
// The protocol: lines of space-separated `name=value` fields ending in '\n',
// the first field `cmd=...`. What this client sends and what it expects back
// (measured with MPICH 4.0's mpiexec.hydra):
//
//   cmd=init pmi_version=1 pmi_subversion=1   cmd=response_to_init ... rc=0
//   cmd=get_maxes                             cmd=maxes kvsname_max=256 keylen_max=64
//   vallen_max=1024 cmd=get_my_kvsname                        cmd=my_kvsname kvsname=kvs_8306_0_...
//   cmd=put kvsname=K key=k value=v           cmd=put_result rc=0 msg=success
//   cmd=barrier_in                            cmd=barrier_out        (when every process sent it)
//   cmd=get kvsname=K key=k                   cmd=get_result rc=0 msg=success value=v
//                                             (rc=-1 msg=key_..._not_found for a missing key)
//   cmd=finalize                              cmd=finalize_ack
//
// Keys are global to the job's key-value space (its kvsname), values fewer
// than vallen_max characters (Hydra counts a terminating NUL), with no space,
// '=' or newline. A round's value (round_store.hpp) is written in
// hexadecimal, in chunks that fit: key "ucxasio-N-R" holds the count of
// chunks of round N of rank R, keys "ucxasio-N-R-I" the chunks. After the barrier every process
// reads the others' chunks.
#pragma once

#include "store/round_codec.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ucx::detail {

/// A PMI-1 line's fields, in order (`cmd` first).
struct pmi_line {
    std::vector<std::pair<std::string, std::string>> fields;
    /// The value of field `name`, or null.
    const std::string* find(std::string_view name) const;
};

/// Parses one line (without its '\n'); nullopt unless it is a sequence of
/// `name=value` fields separated by spaces, the first named `cmd`.
std::optional<pmi_line> parse_pmi_line(std::string_view line);

/// Lowercase hexadecimal, and back (false on an odd length or a character
/// that is not a hexadecimal digit).
std::string to_hex(const std::byte* data, std::size_t size);
bool from_hex(std::string_view text, std::vector<std::byte>& out);

/// The longest line a reply may be: vallen_max is 1024 in every PMI-1
/// server known; a line longer than this is not PMI-1.
inline constexpr std::size_t pmi_max_line = 4096;

/// One process's conversation with its PMI-1 server.
class pmi_client {
public:
    pmi_client(std::uint32_t rank, std::uint32_t size);

    /// Queues the start: init, the server's limits, the job's kvsname.
    void start();
    /// Queues round `n`: this process's value `mine` (round_store.hpp's
    /// encoding), the barrier, and the reads of every other process's value;
    /// `keys()` holds what they decode to when the queue is done.
    void start_round(std::uint64_t n, const std::vector<std::byte>& mine);
    /// Queues the goodbye.
    void start_finalize();

    /// The command to send now (with its '\n'); empty when nothing is queued
    /// (then the last queued work is done, or failed).
    const std::string& command() const noexcept { return command_; }
    /// Consumes the reply to `command()` (one line, without its '\n').
    /// False when the reply is not the one expected, or refuses the command:
    /// `why()` says what, and the queue is emptied.
    bool on_reply(std::string_view line);

    const std::string& kvsname() const noexcept { return kvsname_; }
    std::size_t value_max() const noexcept { return value_max_; }
    const std::string& why() const noexcept { return why_; }
    round_keys& keys() noexcept { return keys_; }

private:
    // In the order of the replies they expect (pmi_protocol.cpp, reply_to).
    enum class step { init, maxes, kvsname, put, barrier, get_count, get_chunk, finalize };
    struct item {
        item(step w, std::uint32_t r = 0, std::uint64_t c = 0, std::string k = {},
             std::string v = {})
            : what(w), rank(r), chunk(c), key(std::move(k)), value(std::move(v)) {}
        step what;
        std::uint32_t rank;     // get_count, get_chunk
        std::uint64_t chunk;    // get_chunk
        std::string key, value; // put
    };
    void next();
    bool fail(std::string why);
    std::string key_of(std::uint32_t rank) const;
    std::string key_of(std::uint32_t rank, std::uint64_t chunk) const;

    std::uint32_t rank_, size_;
    std::deque<item> queue_;
    std::string command_;
    std::string kvsname_;
    std::size_t value_max_ = 1024;
    std::uint64_t round_ = 0;
    std::uint64_t chunks_ = 0;     // of the rank being read
    std::vector<std::byte> value_; // of the rank being read
    round_keys keys_;
    std::string why_;
};

} // namespace ucx::detail
