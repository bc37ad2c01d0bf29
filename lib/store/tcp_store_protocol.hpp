// Internal: the wire protocol of torch.distributed's TCPStore (as PyTorch
// 1.13 speaks it), which tcp_store and tcp_store_server speak.
//
// A request is a query type (one byte) followed by its fields; a number is a
// uint64 or int64 in little-endian order, a string or a value is its size
// (uint64) followed by its bytes, and a key list is its count (uint64)
// followed by the keys:
//
//   SET          0  key value                   no reply
//   COMPARE_SET  1  key expected desired        reply: value
//   GET          2  key                         reply: value
//   ADD          3  key int64                   reply: int64 (the new value)
//   CHECK        4  keys                        reply: byte (READY 0, NOT_READY 1)
//   WAIT         5  keys                        reply: byte STOP_WAITING (0), once
//                                               every key is set
//   GETNUMKEYS   6                              reply: int64
//   WATCH_KEY    7  key                         (not supported)
//   DELETE_KEY   8  key                         reply: int64 (keys deleted)
//
// The server answers the queries of one connection in order, except WAIT,
// whose reply comes when its keys are set, after the replies of the queries
// that followed it.
//
// Sans-io: the encoders append requests and replies to a buffer; the two
// parsers take bytes in pieces of any size and say when a whole request or
// reply has arrived, checking every size against their limits first;
// `answer` applies a parsed request to the server's keys (the rules of
// store_rules.hpp) and appends its reply.
#pragma once

#include "store/store_rules.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ucx::detail::tcp_store_protocol {

using buffer = std::vector<std::byte>;
using bytes_view = std::span<const std::byte>;

enum class query_type : std::uint8_t {
    set = 0,
    compare_set = 1,
    get = 2,
    add = 3,
    check = 4,
    wait = 5,
    get_num_keys = 6,
    watch_key = 7,
    delete_key = 8,
};

inline constexpr std::uint8_t check_ready = 0;
inline constexpr std::uint8_t check_not_ready = 1;
inline constexpr std::uint8_t wait_stop_waiting = 0;

/// The largest sizes a parser accepts; a larger one is a protocol error.
struct limits {
    /// Bytes of one key.
    std::uint64_t max_key_size = 64 * 1024;
    /// Bytes of one value (and of all the keys of one key list together).
    std::uint64_t max_value_size = 64 * 1024 * 1024;
    /// Keys of one CHECK or WAIT.
    std::uint64_t max_keys = 64 * 1024;
    /// Bytes of one request, all its fields together (request parser only).
    std::uint64_t max_request_size = 65 * 1024 * 1024;
};

// Requests (client to server).
void encode_set(buffer& out, std::string_view key, bytes_view value);
void encode_compare_set(buffer& out, std::string_view key, bytes_view expected, bytes_view desired);
void encode_get(buffer& out, std::string_view key);
void encode_add(buffer& out, std::string_view key, std::int64_t delta);
void encode_check(buffer& out, std::span<const std::string> keys);
void encode_wait(buffer& out, std::span<const std::string> keys);
void encode_get_num_keys(buffer& out);
void encode_delete_key(buffer& out, std::string_view key);

// Replies (server to client).
void encode_value_reply(buffer& out, bytes_view value);
void encode_int64_reply(buffer& out, std::int64_t v);
void encode_byte_reply(buffer& out, std::uint8_t b);

enum class parse_status { need_more, done, error };

/// A request as the server parsed it.
struct request {
    query_type type = query_type::set;
    /// The key of the single-key queries, or the keys of CHECK and WAIT.
    std::vector<std::string> keys;
    /// The value of SET; expected and desired of COMPARE_SET.
    std::vector<buffer> values;
    /// The delta of ADD.
    std::int64_t number = 0;
};

/// Parses the requests of one connection, one after the other.
class request_parser {
public:
    explicit request_parser(limits l = {}) : limits_(l) {}

    /// Consumes bytes of `data` up to the end of the current request; returns
    /// how many. Takes nothing once `status()` is done or error.
    std::size_t feed(bytes_view data);
    parse_status status() const noexcept { return status_; }
    /// The parsed request, once done.
    request& get() noexcept { return req_; }
    /// Starts the next request (after done).
    void reset();
    /// The bytes of the current request taken so far: 0 between requests.
    std::uint64_t size() const noexcept { return size_; }

private:
    enum class field : std::uint8_t { key, value, number, keys };
    enum class phase : std::uint8_t { type, u64, bytes };

    void start_fields();
    void next_field();
    void begin_u64();
    void begin_bytes(std::uint64_t n);
    void on_u64(std::uint64_t v);
    void on_bytes_done();
    void fail() { status_ = parse_status::error; }

    limits limits_;
    parse_status status_ = parse_status::need_more;
    request req_;
    std::vector<field> plan_;
    std::size_t field_ = 0;
    phase phase_ = phase::type;
    std::uint8_t num_[8] = {};
    std::size_t num_have_ = 0;
    std::uint64_t bytes_left_ = 0;
    bool in_list_ = false;
    std::uint64_t keys_left_ = 0;
    std::uint64_t list_bytes_ = 0;
    std::uint64_t size_ = 0;
    bool target_is_key_ = true;
};

/// What the server does with a request.
enum class answer_status : std::uint8_t {
    /// The request is applied and its reply (if it has one) appended.
    replied,
    /// A WAIT some of whose keys are missing: its reply is due when they are
    /// set (nothing appended).
    wait,
    /// A GET of a missing key (torch's server disconnects the client).
    missing_key,
    /// An ADD to a value that is not a counter (disconnect).
    not_a_counter,
    /// An ADD whose sum is outside int64 (disconnect).
    overflow,
    /// A WATCH_KEY, which this server does not support (disconnect).
    unsupported,
};

struct answer_result {
    answer_status status = answer_status::replied;
    /// Whether the request set its key (`q.keys[0]`): its waiters are due.
    bool key_set = false;
};

/// Applies the request `q` (whose strings it may move from) to `keys` and
/// appends its reply to `out`, as torch's TCPStore server does.
answer_result answer(store_rules::key_map& keys, request& q, buffer& out);

/// Why the server drops a connection after `answer`: a short text for its
/// log, or null for replied and wait.
const char* refusal_reason(answer_status s) noexcept;

/// What a reply is: one for each query that has one.
enum class reply_kind : std::uint8_t { none, value, int64, check, wait };

/// The reply a query gets.
reply_kind reply_of(query_type q) noexcept;

/// Parses the replies of one connection, one after the other, each of the
/// kind `expect()` announced.
class reply_parser {
public:
    explicit reply_parser(limits l = {}) : limits_(l) {}

    /// Starts a reply of kind `k` (not none).
    void expect(reply_kind k);
    /// Consumes bytes of `data` up to the end of the current reply; returns
    /// how many.
    std::size_t feed(bytes_view data);
    parse_status status() const noexcept { return status_; }
    reply_kind kind() const noexcept { return kind_; }

    /// The value of a value reply.
    buffer& value() noexcept { return value_; }
    /// The number of an int64 reply.
    std::int64_t number() const noexcept { return number_; }
    /// Whether a check reply said READY.
    bool ready() const noexcept { return ready_; }

private:
    limits limits_;
    reply_kind kind_ = reply_kind::none;
    parse_status status_ = parse_status::done;
    std::uint8_t num_[8] = {};
    std::size_t num_have_ = 0;
    bool have_size_ = false;
    std::uint64_t bytes_left_ = 0;
    buffer value_;
    std::int64_t number_ = 0;
    bool ready_ = false;
};

} // namespace ucx::detail::tcp_store_protocol
