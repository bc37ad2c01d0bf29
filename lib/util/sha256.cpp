#include "util/sha256.hpp"

#include <cstring>

namespace ucx::detail {

namespace {

constexpr std::array<std::uint32_t, 64> round_constants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, unsigned n) noexcept {
    return (x >> n) | (x << (32 - n));
}

std::uint32_t load_be32(const std::byte* p) noexcept {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
           std::uint32_t(p[3]);
}

} // namespace

sha256::sha256() noexcept
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void sha256::block(const std::byte* p) noexcept {
    std::array<std::uint32_t, 64> w{};
    for (std::size_t i = 0; i < 16; ++i)
        w[i] = load_be32(p + 4 * i);
    for (std::size_t i = 16; i < 64; ++i) {
        const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    auto [a, b, c, d, e, f, g, h] = h_;
    for (std::size_t i = 0; i < 64; ++i) {
        const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) +
                                 ((e & f) ^ (~e & g)) + round_constants[i] + w[i];
        const std::uint32_t t2 =
            (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    const std::array<std::uint32_t, 8> add{a, b, c, d, e, f, g, h};
    for (std::size_t i = 0; i < 8; ++i)
        h_[i] += add[i];
}

void sha256::update(std::span<const std::byte> data) noexcept {
    length_ += data.size();
    while (!data.empty()) {
        const std::size_t n = std::min(data.size(), buffer_.size() - buffered_);
        std::memcpy(buffer_.data() + buffered_, data.data(), n);
        buffered_ += n;
        data = data.subspan(n);
        if (buffered_ == buffer_.size()) {
            block(buffer_.data());
            buffered_ = 0;
        }
    }
}

sha256_digest sha256::finish() noexcept {
    const std::uint64_t bits = length_ * 8;
    const std::byte one{0x80};
    update(std::span<const std::byte>(&one, 1));
    const std::byte zero{0};
    while (buffered_ != 56)
        update(std::span<const std::byte>(&zero, 1));
    std::array<std::byte, 8> len{};
    for (std::size_t i = 0; i < 8; ++i)
        len[i] = static_cast<std::byte>(bits >> (56 - 8 * i));
    update(len);
    sha256_digest out{};
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t k = 0; k < 4; ++k)
            out[4 * i + k] = static_cast<std::byte>(h_[i] >> (24 - 8 * k));
    return out;
}

hmac_sha256::hmac_sha256(std::span<const std::byte> key) noexcept {
    std::array<std::byte, 64> k{};
    if (key.size() > k.size()) {
        sha256 hk;
        hk.update(key);
        const sha256_digest d = hk.finish();
        std::memcpy(k.data(), d.data(), d.size());
    } else if (!key.empty()) {
        std::memcpy(k.data(), key.data(), key.size());
    }
    std::array<std::byte, 64> inner_key{};
    for (std::size_t i = 0; i < k.size(); ++i) {
        inner_key[i] = k[i] ^ std::byte{0x36};
        outer_key_[i] = k[i] ^ std::byte{0x5c};
    }
    inner_.update(inner_key);
}

sha256_digest hmac_sha256::finish() noexcept {
    const sha256_digest inner = inner_.finish();
    sha256 outer;
    outer.update(outer_key_);
    outer.update(inner);
    return outer.finish();
}

bool digest_equal(std::span<const std::byte> a, std::span<const std::byte> b) noexcept {
    if (a.size() != b.size())
        return false;
    std::byte diff{0};
    for (std::size_t i = 0; i < a.size(); ++i)
        diff |= a[i] ^ b[i];
    return diff == std::byte{0};
}

} // namespace ucx::detail
