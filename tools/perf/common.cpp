#include "common.hpp"

#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <istream>
#include <new>
#include <sstream>
#include <thread>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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

bool control::line_buffered() const {
    const char* p = static_cast<const char*>(in_.data().data());
    return std::memchr(p, '\n', in_.size()) != nullptr;
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

void throw_error(const boost::system::error_code& ec, const char* what) {
    throw failure(std::string(what) + ": " + ec.message());
}

void sample_clock::init() {
#if defined(__x86_64__)
    // An invariant counter (CPUID 0x80000007, EDX bit 8) ticks at one rate
    // in every power state and on every core.
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8)))
        return;
    const auto t0 = clock_type::now();
    const std::uint64_t c0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto t1 = clock_type::now();
    const std::uint64_t c1 = __rdtsc();
    if (c1 <= c0)
        return;
    us_per_tick_ =
        std::chrono::duration<double, std::micro>(t1 - t0).count() / static_cast<double>(c1 - c0);
    use_tsc_ = true;
#endif
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

std::size_t rma_slots(const settings& s) noexcept {
    return s.check ? buffer_slots(s) : 1;
}

bool rma_server_control::serve() {
    do {
        const std::string line = ctl_.receive();
        if (line == "measure") {
            alloc_start_ = allocations();
            measuring_ = true;
            counting(true);
        } else if (line == "done") {
            counting(false);
            const std::size_t allocs = measuring_ ? allocations() - alloc_start_ : 0;
            // The server starts no operations: the client counts them all.
            ctl_.send("counts " + std::to_string(allocs) + " 0");
            return false;
        } else if (line.rfind("verify", 0) == 0) {
            std::istringstream in(line.substr(6));
            std::string bad;
            std::size_t k = 0;
            std::uint64_t seq = 0;
            char colon = 0;
            const std::size_t slots = region_.size() / s_.size;
            while (bad.empty() && in >> k >> colon >> seq) {
                if (colon != ':' || k >= slots)
                    bad = "bad verify request";
                else if (!verify(region_.subspan(k * s_.size, s_.size), seq))
                    bad = "slot " + std::to_string(k) + " does not hold message " +
                          std::to_string(seq) + " after the flush";
            }
            ctl_.send(bad.empty() ? std::string("verified") : "error " + bad);
        } else {
            throw failure("control connection: unexpected '" + line + "'");
        }
    } while (ctl_.line_buffered());
    return true;
}

void rma_verify_remote(control& ctl, const std::vector<std::size_t>& written,
                       const std::vector<std::uint64_t>& seqs) {
    std::ostringstream line;
    line << "verify";
    for (std::size_t k : written)
        line << ' ' << k << ':' << seqs[k];
    ctl.send(line.str());
    const std::string answer = ctl.receive();
    if (answer != "verified")
        throw failure("put: the server found " + answer);
}

std::size_t measured_operations(const settings& s) {
    if (find_test(s.test)->kind == kind::latency)
        return 2 * s.measured_iters();
    return s.measured_iters() + 1;
}

void count_measured(const settings& s, std::size_t allocations, result& r) {
    r.messages = s.measured_iters();
    r.bytes = r.messages * s.size;
    r.allocations = allocations;
    r.operations = measured_operations(s);
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
