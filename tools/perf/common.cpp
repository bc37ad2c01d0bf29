#include "common.hpp"

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <istream>
#include <new>

namespace {
std::atomic<bool> counting_on{false};
std::atomic<std::size_t> allocation_count{0};
} // namespace

// The tool counts its own heap allocations (the library's and Asio's
// included; UCX allocates with malloc and is not counted).
void* operator new(std::size_t n) {
    if (counting_on.load(std::memory_order_relaxed))
        allocation_count.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1))
        return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    return operator new(n);
}
// Every other form too, so that each allocation and its release use the same
// allocator (AddressSanitizer checks that they match).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    if (counting_on.load(std::memory_order_relaxed))
        allocation_count.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
    return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t a) {
    if (counting_on.load(std::memory_order_relaxed))
        allocation_count.fetch_add(1, std::memory_order_relaxed);
    const std::size_t align = static_cast<std::size_t>(a);
    if (void* p =
            std::aligned_alloc(align, (std::max<std::size_t>(n, 1) + align - 1) / align * align))
        return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return operator new(n, a);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try {
        return operator new(n, a);
    } catch (...) {
        return nullptr;
    }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
    return operator new(n, a, t);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    std::free(p);
}

namespace perf {

void control::send(const std::string& line) {
    asio::write(socket_, asio::buffer(line + "\n"));
}

std::string control::receive() {
    asio::read_until(socket_, in_, '\n');
    std::istream is(&in_);
    std::string line;
    std::getline(is, line);
    return line;
}

std::string control::expect(const std::string& word) {
    std::string line = receive();
    if (line.rfind(word + " ", 0) != 0)
        throw failure("control connection: expected '" + word + "', got '" + line + "'");
    return line.substr(word.size() + 1);
}

namespace {
inline std::byte content(std::uint64_t seq, std::size_t i) noexcept {
    return static_cast<std::byte>((seq * 131 + i * 7 + (i >> 8)) & 0xff);
}
} // namespace

void fill(std::span<std::byte> b, std::uint64_t seq) noexcept {
    for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = content(seq, i);
}

bool verify(std::span<const std::byte> b, std::uint64_t seq) noexcept {
    for (std::size_t i = 0; i < b.size(); ++i)
        if (b[i] != content(seq, i))
            return false;
    return true;
}

void check(std::span<const std::byte> b, std::uint64_t seq, const char* what) {
    if (!verify(b, seq))
        throw failure(std::string(what) + ": message " + std::to_string(seq) + " (" +
                      std::to_string(b.size()) + " bytes) has the wrong content");
}

std::size_t allocations() noexcept {
    return allocation_count.load(std::memory_order_relaxed);
}

void counting(bool on) noexcept {
    counting_on.store(on, std::memory_order_relaxed);
}

std::size_t buffer_slots(const settings& s) noexcept {
    const std::size_t cap = std::max<std::size_t>(1, (std::size_t{64} << 20) / s.size);
    return std::min(s.window, cap);
}

std::string to_hex(std::span<const std::byte> b) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(b.size() * 2);
    for (std::byte x : b) {
        out += digits[static_cast<unsigned>(x) >> 4];
        out += digits[static_cast<unsigned>(x) & 15];
    }
    return out;
}

std::vector<std::byte> from_hex(const std::string& s) {
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        return -1;
    };
    if (s.size() % 2 != 0)
        throw failure("control connection: odd-length hex text");
    std::vector<std::byte> out(s.size() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) {
        int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            throw failure("control connection: bad hex text");
        out[i] = static_cast<std::byte>(hi * 16 + lo);
    }
    return out;
}

void finish_client(control& ctl, result& r) {
    ctl.send("done");
    std::string counts = ctl.expect("counts");
    std::size_t a = 0, o = 0;
    if (std::sscanf(counts.c_str(), "%zu %zu", &a, &o) != 2)
        throw failure("control connection: bad counts '" + counts + "'");
    r.allocations += a;
    r.operations += o;
}

void finish_server(control& ctl, std::size_t allocations, std::size_t operations) {
    if (ctl.receive() != "done")
        throw failure("control connection: expected 'done'");
    ctl.send("counts " + std::to_string(allocations) + " " + std::to_string(operations));
}

} // namespace perf
