// The encoding of a round's value (round_codec.hpp).
#include "store/round_codec.hpp"

namespace ucx::detail {

namespace {

void put_u32(std::vector<std::byte>& out, std::size_t n) {
    for (int i = 0; i < 4; ++i)
        out.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
}

} // namespace

std::vector<std::byte> encode_round(const round_keys& keys) {
    std::vector<std::byte> out;
    for (const auto& [k, v] : keys) {
        put_u32(out, k.size());
        const auto* p = reinterpret_cast<const std::byte*>(k.data());
        out.insert(out.end(), p, p + k.size());
        put_u32(out, v.size());
        out.insert(out.end(), v.begin(), v.end());
    }
    return out;
}

bool decode_round(const char* data, std::size_t size, round_keys& keys) {
    std::size_t at = 0;
    auto u32 = [&](std::size_t& n) {
        if (size - at < 4)
            return false;
        n = 0;
        for (int i = 0; i < 4; ++i)
            n |= static_cast<std::size_t>(static_cast<unsigned char>(data[at + i])) << (8 * i);
        at += 4;
        return n <= size - at;
    };
    while (at < size) {
        std::size_t n = 0;
        if (!u32(n))
            return false;
        std::string k(data + at, n);
        at += n;
        if (!u32(n))
            return false;
        const auto* p = reinterpret_cast<const std::byte*>(data + at);
        keys[std::move(k)] = std::vector<std::byte>(p, p + n);
        at += n;
    }
    return true;
}

} // namespace ucx::detail
