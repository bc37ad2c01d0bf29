// The client side of PMI-1 (pmi_protocol.hpp).
#include "store/pmi_protocol.hpp"

#include "util/text.hpp"

#include <charconv>

namespace ucx::detail {

const std::string* pmi_line::find(std::string_view name) const {
    for (const auto& [n, v] : fields)
        if (n == name)
            return &v;
    return nullptr;
}

std::optional<pmi_line> parse_pmi_line(std::string_view line) {
    if (line.size() > pmi_max_line)
        return std::nullopt;
    pmi_line out;
    std::size_t at = 0;
    while (at < line.size()) {
        if (line[at] == ' ') {
            ++at;
            continue;
        }
        std::size_t end = line.find(' ', at);
        if (end == std::string_view::npos)
            end = line.size();
        const std::string_view field = line.substr(at, end - at);
        const std::size_t eq = field.find('=');
        if (eq == 0 || eq == std::string_view::npos)
            return std::nullopt;
        out.fields.emplace_back(std::string(field.substr(0, eq)),
                                std::string(field.substr(eq + 1)));
        at = end;
    }
    if (out.fields.empty() || out.fields.front().first != "cmd")
        return std::nullopt;
    return out;
}

std::string to_hex(const std::byte* data, std::size_t size) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * size);
    for (std::size_t i = 0; i < size; ++i) {
        const auto b = static_cast<unsigned>(data[i]);
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 0xf]);
    }
    return out;
}

bool from_hex(std::string_view text, std::vector<std::byte>& out) {
    if (text.size() % 2 != 0)
        return false;
    for (std::size_t i = 0; i < text.size(); i += 2) {
        const int hi = hex_digit(text[i]), lo = hex_digit(text[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out.push_back(static_cast<std::byte>(hi * 16 + lo));
    }
    return true;
}

namespace {

/// A decimal field of at most `max`, or nullopt.
std::optional<std::uint64_t> number(const std::string* v, std::uint64_t max) {
    if (!v || v->empty())
        return std::nullopt;
    std::uint64_t n = 0;
    const auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
    if (ec != std::errc() || p != v->data() + v->size() || n > max)
        return std::nullopt;
    return n;
}

/// The `cmd` of the reply to each step's command.
const char* reply_to(int step) {
    static constexpr const char* names[] = {"response_to_init", "maxes",       "my_kvsname",
                                            "put_result",       "barrier_out", "get_result",
                                            "get_result",       "finalize_ack"};
    return names[step];
}

/// The most chunks a process's value may have: a round's value of 64 MiB.
constexpr std::uint64_t max_chunks = std::uint64_t{64} << 20;

} // namespace

pmi_client::pmi_client(std::uint32_t rank, std::uint32_t size) : rank_(rank), size_(size) {}

void pmi_client::start() {
    queue_.push_back({step::init});
    queue_.push_back({step::maxes});
    queue_.push_back({step::kvsname});
    if (command_.empty())
        next();
}

std::string pmi_client::key_of(std::uint32_t rank) const {
    return "ucxasio-" + std::to_string(round_) + "-" + std::to_string(rank);
}

std::string pmi_client::key_of(std::uint32_t rank, std::uint64_t chunk) const {
    return key_of(rank) + "-" + std::to_string(chunk);
}

void pmi_client::start_round(std::uint64_t n, const std::vector<std::byte>& mine) {
    round_ = n;
    keys_.clear();
    // Two characters a byte, within the longest value, whose size counts the
    // string's terminating NUL in Hydra (a value of vallen_max characters is
    // refused).
    const std::size_t per_chunk = (value_max_ - 1) / 2;
    const std::uint64_t chunks = (mine.size() + per_chunk - 1) / per_chunk;
    for (std::uint64_t i = 0; i < chunks; ++i) {
        const std::size_t from = static_cast<std::size_t>(i) * per_chunk;
        const std::size_t size = std::min(per_chunk, mine.size() - from);
        queue_.push_back({step::put, 0, 0, key_of(rank_, i), to_hex(mine.data() + from, size)});
    }
    // The count last: whoever reads it finds every chunk.
    queue_.push_back({step::put, 0, 0, key_of(rank_), std::to_string(chunks)});
    queue_.push_back({step::barrier});
    for (std::uint32_t r = 0; r < size_; ++r)
        if (r != rank_)
            queue_.push_back({step::get_count, r});
    if (command_.empty())
        next();
}

void pmi_client::start_finalize() {
    queue_.push_back({step::finalize});
    if (command_.empty())
        next();
}

void pmi_client::next() {
    command_.clear();
    if (queue_.empty())
        return;
    const item& i = queue_.front();
    switch (i.what) {
    case step::init:
        command_ = "cmd=init pmi_version=1 pmi_subversion=1";
        break;
    case step::maxes:
        command_ = "cmd=get_maxes";
        break;
    case step::kvsname:
        command_ = "cmd=get_my_kvsname";
        break;
    case step::put:
        command_ = "cmd=put kvsname=" + kvsname_ + " key=" + i.key + " value=" + i.value;
        break;
    case step::barrier:
        command_ = "cmd=barrier_in";
        break;
    case step::get_count:
        command_ = "cmd=get kvsname=" + kvsname_ + " key=" + key_of(i.rank);
        break;
    case step::get_chunk:
        command_ = "cmd=get kvsname=" + kvsname_ + " key=" + key_of(i.rank, i.chunk);
        break;
    case step::finalize:
        command_ = "cmd=finalize";
        break;
    }
    command_ += '\n';
}

bool pmi_client::fail(std::string why) {
    why_ = std::move(why);
    queue_.clear();
    command_.clear();
    return false;
}

bool pmi_client::on_reply(std::string_view text) {
    if (queue_.empty())
        return fail("a line from the PMI server when no command was sent");
    const auto line = parse_pmi_line(text);
    if (!line)
        return fail("the PMI server's reply is not PMI-1: \"" + std::string(text.substr(0, 200)) +
                    "\"");
    const std::string& cmd = *line->find("cmd");
    const item i = queue_.front();
    queue_.pop_front();
    const std::string sent = command_.substr(0, command_.size() - 1);
    auto expect = [&](std::string_view name) {
        if (cmd != name) {
            fail("the PMI server answered \"" + sent + "\" with cmd=" + cmd);
            return false;
        }
        if (const std::string* rc = line->find("rc"); rc && *rc != "0") {
            const std::string* msg = line->find("msg");
            fail("the PMI server refused \"" + sent.substr(0, 200) + "\": rc=" + *rc +
                 (msg ? " msg=" + *msg : std::string()));
            return false;
        }
        return true;
    };
    if (!expect(reply_to(static_cast<int>(i.what))))
        return false;
    switch (i.what) {
    case step::maxes: {
        const auto keylen = number(line->find("keylen_max"), 1 << 20);
        const auto vallen = number(line->find("vallen_max"), 1 << 20);
        // Room for the longest key this client makes, and a byte of value.
        if (!keylen || !vallen || *keylen < 64 || *vallen < 3)
            return fail("the PMI server's limits are too small or unreadable: " +
                        std::string(text.substr(0, 200)));
        value_max_ = *vallen;
        break;
    }
    case step::kvsname: {
        const std::string* k = line->find("kvsname");
        if (!k || k->empty())
            return fail("the PMI server named no kvsname");
        kvsname_ = *k;
        break;
    }
    case step::get_count: {
        const auto n = number(line->find("value"), max_chunks);
        if (!n)
            return fail("rank " + std::to_string(i.rank) + "'s count of chunks is unreadable");
        chunks_ = *n;
        value_.clear();
        // Its chunks, before the next rank's count.
        for (std::uint64_t c = *n; c > 0; --c)
            queue_.push_front({step::get_chunk, i.rank, c - 1});
        break;
    }
    case step::get_chunk: {
        const std::string* v = line->find("value");
        if (!v || !from_hex(*v, value_))
            return fail("rank " + std::to_string(i.rank) + "'s chunk " + std::to_string(i.chunk) +
                        " is not hexadecimal");
        if (i.chunk + 1 == chunks_ &&
            !decode_round(reinterpret_cast<const char*>(value_.data()), value_.size(), keys_))
            return fail("rank " + std::to_string(i.rank) + "'s value of round " +
                        std::to_string(round_) + " is malformed");
        break;
    }
    case step::init:
    case step::put:
    case step::barrier:
    case step::finalize:
        break; // nothing but the answer
    }
    next();
    return true;
}

} // namespace ucx::detail
