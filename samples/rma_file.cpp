// rma_file: moves a file with one-sided operations. The server exposes a file
// as registered memory and sends its key; the client pulls it with ucx::ucxio
// and asio::async_read_at in parallel chunks, with a progress bar on stderr.
// A push goes the other way round: the client exposes its file and the
// server pulls it (see serve_client: a server is never the target of a
// client's puts). Both sides print the file's sha256 at the end. A bandwidth
// mode measures put and get.
//
//   rma_file serve --port P [--address A] [--file F] [--out O] [--read]
//                  [--clients N] [--chunk BYTES] [--parallel N] [--transport any|tcp|shm]
//   rma_file pull  --port P [--host H] --out O  [--chunk BYTES] [--parallel N] [--quiet]
//   rma_file push  --port P [--host H] --file F
//   rma_file bench --port P [--host H] --size BYTES [--iters N] [--window N]
//
// serve: F is served to pulls (memory-mapped and registered, or with --read
// read into memory UCX allocates); pushes are pulled into O (memory-mapped),
// in chunks of --chunk, --parallel at a time. It prints "listening on
// HOST:PORT", "receiving N bytes" when a push starts, and exits after N
// clients (default: never). A client that fails or dies costs its own
// transfer only: the server says so on stderr and serves the next.
// Every process running this sets UCX_NET_DEVICES itself (see docs/guide/rma.md).
#include "sample_args.hpp"

#include <ucx/asio.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_at.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#ifdef RMA_FILE_OPENSSL
#include <openssl/evp.h>
#endif

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

namespace {

// ---- SHA-256 (FIPS 180-4); OpenSSL's is used instead when the build has it ----

class sha256 {
public:
    void update(const unsigned char* p, std::size_t n) {
        total_ += n;
        while (n > 0) {
            const std::size_t take = std::min(n, std::size_t{64} - fill_);
            std::memcpy(block_.data() + fill_, p, take);
            fill_ += take;
            p += take;
            n -= take;
            if (fill_ == 64) {
                compress(block_.data());
                fill_ = 0;
            }
        }
    }
    std::string hex() {
        const std::uint64_t bits = total_ * 8;
        const unsigned char pad = 0x80;
        update(&pad, 1);
        const unsigned char zero = 0;
        while (fill_ != 56)
            update(&zero, 1);
        unsigned char len[8];
        for (int i = 0; i < 8; ++i)
            len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
        update(len, 8);
        std::string out;
        char buf[9];
        for (std::uint32_t v : h_) {
            std::snprintf(buf, sizeof buf, "%08x", v);
            out += buf;
        }
        return out;
    }

private:
    static std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
    void compress(const unsigned char* b) {
        static constexpr std::uint32_t k[64] = {
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
            0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
            0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
            0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
            0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
            0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
            0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
            0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
            0xc67178f2};
        std::uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = std::uint32_t{b[4 * i]} << 24 | std::uint32_t{b[4 * i + 1]} << 16 |
                   std::uint32_t{b[4 * i + 2]} << 8 | std::uint32_t{b[4 * i + 3]};
        for (int i = 16; i < 64; ++i) {
            const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        std::uint32_t a = h_[0], b2 = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
                      h = h_[7];
        for (int i = 0; i < 64; ++i) {
            const std::uint32_t t1 =
                h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const std::uint32_t t2 =
                (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b2) ^ (a & c) ^ (b2 & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b2;
            b2 = a;
            a = t1 + t2;
        }
        h_[0] += a;
        h_[1] += b2;
        h_[2] += c;
        h_[3] += d;
        h_[4] += e;
        h_[5] += f;
        h_[6] += g;
        h_[7] += h;
    }

    std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::array<unsigned char, 64> block_{};
    std::size_t fill_ = 0;
    std::uint64_t total_ = 0;
};

#ifdef RMA_FILE_OPENSSL
// OpenSSL's, when available: several times faster (SHA extensions).
std::string sha256_hex(const void* data, std::size_t n) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr) != 1)
        throw std::runtime_error("sha256 failed");
    std::string out;
    char buf[3];
    for (unsigned int i = 0; i < len; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", md[i]);
        out += buf;
    }
    return out;
}
#else
std::string sha256_hex(const void* data, std::size_t n) {
    sha256 s;
    s.update(static_cast<const unsigned char*>(data), n);
    return s.hex();
}
#endif

// Work that takes seconds (hashing or copying hundreds of MiB) runs on a
// thread of its own, and the coroutine waits for it: the io_context goes on
// answering the peer meanwhile. A loop blocked that long would not answer the
// peer's heartbeats, and a peer silent for the worker's `peer_timeout` is
// dropped as unresponsive.
asio::thread_pool& background() {
    static asio::thread_pool pool(1);
    return pool;
}

template <class F>
asio::awaitable<std::invoke_result_t<F&>> off_the_loop(F f) {
    co_return co_await asio::co_spawn(
        background(), [&f]() -> asio::awaitable<std::invoke_result_t<F&>> { co_return f(); },
        asio::use_awaitable);
}

// ---- files ----

// A file mapped into memory (read-only, or read-write with a given size).
class mapped_file {
public:
    static mapped_file open_read(const std::string& path) {
        mapped_file m;
        m.fd_ = ::open(path.c_str(), O_RDONLY);
        if (m.fd_ < 0)
            throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
        struct stat st {};
        ::fstat(m.fd_, &st);
        m.size_ = static_cast<std::size_t>(st.st_size);
        m.map(PROT_READ, MAP_PRIVATE);
        return m;
    }
    static mapped_file create(const std::string& path, std::size_t size) {
        mapped_file m;
        m.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (m.fd_ < 0)
            throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
        if (::ftruncate(m.fd_, static_cast<off_t>(size)) != 0)
            throw std::runtime_error("cannot size " + path + ": " + std::strerror(errno));
        m.size_ = size;
        m.map(PROT_READ | PROT_WRITE, MAP_SHARED);
        return m;
    }
    mapped_file() = default;
    mapped_file(mapped_file&& o) noexcept
        : fd_(std::exchange(o.fd_, -1)), data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0)) {}
    mapped_file& operator=(mapped_file&& o) noexcept {
        std::swap(fd_, o.fd_);
        std::swap(data_, o.data_);
        std::swap(size_, o.size_);
        return *this;
    }
    ~mapped_file() {
        if (data_)
            ::munmap(data_, size_);
        if (fd_ >= 0)
            ::close(fd_);
    }
    char* data() const { return static_cast<char*>(data_); }
    std::size_t size() const { return size_; }

private:
    void map(int prot, int flags) {
        if (size_ == 0)
            return;
        data_ = ::mmap(nullptr, size_, prot, flags, fd_, 0);
        if (data_ == MAP_FAILED) {
            data_ = nullptr;
            throw std::runtime_error(std::string("mmap failed: ") + std::strerror(errno));
        }
    }
    int fd_ = -1;
    void* data_ = nullptr;
    std::size_t size_ = 0;
};

// An output file that appears under its name only when complete: the data
// goes to a temporary file beside it, `<name>.part-<pid>`, renamed over the
// name by commit(); without commit (a failure, a lost peer, a digest
// mismatch) the temporary is removed, so no partial file can be mistaken for
// the real one. A run killed outright leaves its temporary: the next run to
// the same name removes the temporaries whose process is gone.
class output_file {
public:
    output_file(const std::string& path, std::size_t size)
        : path_(path), temp_(path + ".part-" + std::to_string(::getpid())),
          file_((remove_dead_temporaries(path), mapped_file::create(temp_, size))) {}
    output_file(const output_file&) = delete;
    output_file& operator=(const output_file&) = delete;
    ~output_file() {
        if (!committed_)
            ::unlink(temp_.c_str());
    }
    char* data() const { return file_.data(); }
    std::size_t size() const { return file_.size(); }
    /// Makes the complete file appear under its name.
    void commit() {
        file_ = mapped_file();
        if (::rename(temp_.c_str(), path_.c_str()) != 0)
            throw std::runtime_error("cannot rename " + temp_ + " to " + path_ + ": " +
                                     std::strerror(errno));
        committed_ = true;
    }

private:
    /// Removes `<path>.part-<pid>` where no process has the pid (a run that
    /// was killed), saying so on stderr. (A pid taken again by another
    /// process keeps its temporary until that process is gone too.)
    static void remove_dead_temporaries(const std::string& path) {
        namespace fs = std::filesystem;
        const fs::path p(path);
        const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
        const std::string prefix = p.filename().string() + ".part-";
        std::error_code ec;
        for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 ||
                name.compare(0, prefix.size(), prefix) != 0 ||
                name.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
                continue;
            const auto pid = static_cast<pid_t>(std::stol(name.substr(prefix.size())));
            if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH)
                continue;
            std::error_code rm;
            if (fs::remove(it->path(), rm))
                std::fprintf(stderr, "rma_file: removed %s, left by a run that ended (pid %d)\n",
                             it->path().c_str(), static_cast<int>(pid));
        }
    }

    std::string path_, temp_;
    mapped_file file_;
    bool committed_ = false;
};

// ---- progress bar on stderr: bytes, rate, ETA ----

class progress_bar {
public:
    progress_bar(std::uint64_t total, bool quiet) : total_(total), quiet_(quiet) {}
    void update(std::uint64_t done, bool final = false) {
        const auto now = clock_type::now();
        if (quiet_ || (!final && now - last_ < std::chrono::milliseconds(200)))
            return;
        last_ = now;
        const double secs = std::chrono::duration<double>(now - start_).count();
        const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
        const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
        const int width = 30;
        const int filled = total_ ? static_cast<int>(width * done / total_) : width;
        std::fprintf(stderr, "\r[%.*s%*s] %8.1f / %.1f MiB  %8.1f MiB/s  ETA %4.0f s", filled,
                     "##############################", width - filled, "",
                     static_cast<double>(done) / (1 << 20), static_cast<double>(total_) / (1 << 20),
                     rate / (1 << 20), eta);
        if (final)
            std::fprintf(stderr, "\n");
    }
    double seconds() const {
        return std::chrono::duration<double>(clock_type::now() - start_).count();
    }

private:
    std::uint64_t total_;
    bool quiet_;
    clock_type::time_point start_ = clock_type::now();
    clock_type::time_point last_{};
};

// ---- the protocol: endpoint messages ----

enum tags : std::uint32_t { request_tag = 1, reply_tag = 2, done_tag = 3, digest_tag = 4 };

// A request: "PULL", "PUSH" (size) or "BENCH" (size).
struct request {
    char op[8] = {};
    std::uint64_t size = 0;
};

struct settings {
    std::string mode;
    std::string host = "127.0.0.1";
    std::string address = "127.0.0.1";
    std::string port;
    std::string file, out;
    bool read_into_memory = false;
    std::size_t clients = 0;
    std::size_t chunk = 4 << 20;
    std::size_t parallel = 4;
    std::size_t size = 1 << 20;
    std::size_t iters = 200;
    std::size_t window = 16;
    bool quiet = false;
    std::string transport = "any";
};

// Sends a region's size and key (size 0: no key).
asio::awaitable<void> send_key(ucx::endpoint& ep, std::uint64_t size,
                               const ucx::memory_region* region) {
    std::vector<std::byte> msg(8);
    std::memcpy(msg.data(), &size, 8);
    if (region) {
        auto blob = region->pack_key();
        msg.insert(msg.end(), blob.begin(), blob.end());
    }
    co_await ep.async_send(asio::buffer(msg), reply_tag, asio::use_awaitable);
}

// Receives what send_key sent; returns the size (and the key if any).
asio::awaitable<std::uint64_t> recv_key(ucx::endpoint& ep, ucx::remote_key& key) {
    std::vector<std::byte> msg(64 * 1024);
    auto [n, tag] = co_await ep.async_recv(asio::buffer(msg), reply_tag, ~0u, asio::use_awaitable);
    (void)tag;
    if (n < 8)
        throw std::runtime_error("malformed reply");
    std::uint64_t size;
    std::memcpy(&size, msg.data(), 8);
    if (n > 8)
        key = ucx::remote_key(ep, std::span(msg.data() + 8, n - 8));
    co_return size;
}

asio::awaitable<void> send_text(ucx::endpoint& ep, const std::string& s, std::uint32_t tag) {
    co_await ep.async_send(asio::buffer(s), tag, asio::use_awaitable);
}

asio::awaitable<std::string> recv_text(ucx::endpoint& ep, std::uint32_t tag) {
    std::string s(256, '\0');
    auto [n, t] = co_await ep.async_recv(asio::buffer(s), tag, ~0u, asio::use_awaitable);
    (void)t;
    s.resize(n);
    co_return s;
}

// Moves [0, size) in chunks with `parallel` concurrent workers;
// `move(offset, length)` is one asio::async_read_at.
// `report`: a progress bar (unless --quiet) and a line with the rate at the end.
template <class Move>
asio::awaitable<void> in_parallel_chunks(std::uint64_t size, const settings& s, bool report,
                                         Move move) {
    progress_bar bar(size, s.quiet || !report);
    std::uint64_t next = 0, done = 0;
    std::size_t running = 0;
    std::exception_ptr failure;
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer all_done(ex, asio::steady_timer::time_point::max());
    const std::size_t workers = std::max<std::size_t>(1, s.parallel);
    const std::size_t chunk = std::max<std::size_t>(1, s.chunk);
    for (std::size_t i = 0; i < workers; ++i) {
        ++running;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                while (next < size && !failure) {
                    const std::uint64_t off = next;
                    const std::size_t n =
                        static_cast<std::size_t>(std::min<std::uint64_t>(chunk, size - off));
                    next += n;
                    co_await move(off, n);
                    done += n;
                    bar.update(done);
                }
            },
            [&](std::exception_ptr e) {
                if (e && !failure)
                    failure = e;
                if (--running == 0)
                    all_done.cancel();
            });
    }
    ucx::error_code ignored;
    co_await all_done.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    if (failure)
        std::rethrow_exception(failure);
    bar.update(done, true);
    if (report)
        std::printf("%s %llu bytes in %.3f s: %.1f MiB/s\n", s.mode.c_str(),
                    static_cast<unsigned long long>(size), bar.seconds(),
                    static_cast<double>(size) / (1 << 20) / std::max(bar.seconds(), 1e-9));
}

// ---- server ----

asio::awaitable<void> serve_client(ucx::context& ctx, ucx::endpoint ep, const settings& s) {
    request req;
    co_await ep.async_recv(asio::buffer(&req, sizeof req), request_tag, ~0u, asio::use_awaitable);
    const std::string op(req.op, strnlen(req.op, sizeof req.op));
    if (op == "PULL") {
        // Expose the file: mapped and registered, or read into UCX memory.
        mapped_file file = mapped_file::open_read(s.file);
        ucx::memory_region region;
        if (file.size() > 0) {
            if (s.read_into_memory) {
                region = ucx::memory_region::allocate(ctx, file.size());
                std::memcpy(region.data(), file.data(), file.size());
            } else {
                region = ucx::memory_region(ctx, file.data(), file.size());
            }
        }
        co_await send_key(ep, file.size(), file.size() ? &region : nullptr);
        co_await recv_text(ep, done_tag);
        const std::string digest =
            co_await off_the_loop([&] { return sha256_hex(file.data(), file.size()); });
        std::printf("served %s: %zu bytes, sha256 %s\n", s.file.c_str(), file.size(),
                    digest.c_str());
        co_await send_text(ep, digest, digest_tag);
    } else if (op == "PUSH") {
        // The server reads the pushed file out of the client's memory (gets)
        // rather than letting the client write into its own (puts). Over TCP,
        // UCX 1.13 carries a put as messages that the target's UCX answers,
        // and it aborts the target's process when the writer has died by then
        // (ucp_put_handler: "Endpoint timeout"); a get from a peer that died
        // fails as an error. So a client's death never takes the server down.
        ucx::remote_key key;
        const std::uint64_t size = co_await recv_key(ep, key);
        if (size != req.size)
            throw std::runtime_error("the client offered a region of another size");
        output_file file(s.out, size);
        std::printf("receiving %llu bytes\n", static_cast<unsigned long long>(size));
        std::fflush(stdout);
        if (size > 0) {
            ucx::ucxio dev(key);
            co_await in_parallel_chunks(size, s, false, [&](std::uint64_t off, std::size_t n) {
                return asio::async_read_at(dev, off, asio::buffer(file.data() + off, n),
                                           asio::use_awaitable);
            });
        }
        key.reset();
        const std::string digest =
            co_await off_the_loop([&] { return sha256_hex(file.data(), file.size()); });
        const std::size_t received = file.size();
        file.commit();
        std::printf("received %s: %zu bytes, sha256 %s\n", s.out.c_str(), received, digest.c_str());
        co_await send_text(ep, digest, digest_tag);
    } else if (op == "BENCH") {
        auto region = ucx::memory_region::allocate(ctx, std::max<std::uint64_t>(req.size, 8));
        co_await send_key(ep, region.size(), &region);
        co_await recv_text(ep, done_tag);
        co_await send_text(ep, "ok", digest_tag);
    } else {
        std::fprintf(stderr, "rma_file: unknown request\n");
    }
    std::fflush(stdout);
    co_await ep.async_close(asio::use_awaitable);
}

asio::awaitable<int> serve(ucx::context& ctx, ucx::worker& w, const settings& s) {
    ucx::listener listener(
        w, asio::ip::tcp::endpoint(asio::ip::make_address(s.address),
                                   static_cast<unsigned short>(sample::number(s.port))));
    const auto local = listener.local_endpoint();
    std::printf("listening on %s:%u\n", local.address().to_string().c_str(), local.port());
    std::fflush(stdout);
    for (std::size_t n = 0; s.clients == 0 || n < s.clients; ++n) {
        auto ep = co_await listener.async_accept(asio::use_awaitable);
        try {
            co_await serve_client(ctx, std::move(ep), s);
        } catch (const boost::system::system_error& e) {
            // Says what happened to the client, then UCX's words for it.
            const char* what = e.code() == ucx::condition::peer_lost   ? "client lost (it died or "
                                                                         "stopped answering)"
                               : e.code() == ucx::condition::timed_out ? "client timed out"
                                                                       : "client failed";
            std::fprintf(stderr, "rma_file: %s, its transfer dropped: %s\n", what, e.what());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "rma_file: client failed, its transfer dropped: %s\n", e.what());
        }
    }
    co_return 0;
}

// ---- client ----

asio::awaitable<ucx::endpoint> connect(ucx::worker& w, const settings& s, const char* op,
                                       std::uint64_t size) {
    auto ep = co_await ucx::async_connect(w, s.host, s.port, asio::use_awaitable);
    request req;
    std::strncpy(req.op, op, sizeof req.op - 1);
    req.size = size;
    co_await ep.async_send(asio::buffer(&req, sizeof req), request_tag, asio::use_awaitable);
    co_return ep;
}

asio::awaitable<int> pull(ucx::worker& w, const settings& s) {
    auto ep = co_await connect(w, s, "PULL", 0);
    ucx::remote_key key;
    const std::uint64_t size = co_await recv_key(ep, key);
    output_file out(s.out, size);
    if (size > 0) {
        ucx::ucxio dev(key);
        co_await in_parallel_chunks(size, s, true, [&](std::uint64_t off, std::size_t n) {
            return asio::async_read_at(dev, off, asio::buffer(out.data() + off, n),
                                       asio::use_awaitable);
        });
    }
    co_await send_text(ep, "done", done_tag);
    const std::string remote = co_await recv_text(ep, digest_tag);
    const std::string local =
        co_await off_the_loop([&] { return sha256_hex(out.data(), out.size()); });
    std::printf("sha256 local %s\nsha256 remote %s\n%s\n", local.c_str(), remote.c_str(),
                local == remote ? "match" : "MISMATCH");
    // Only a verified copy takes the name; otherwise nothing is left behind.
    if (local == remote)
        out.commit();
    else
        std::fprintf(stderr, "rma_file: digest mismatch, %s not written\n", s.out.c_str());
    key.reset();
    co_await ep.async_close(asio::use_awaitable);
    co_return local == remote ? 0 : 1;
}

asio::awaitable<int> push(ucx::context& ctx, ucx::worker& w, const settings& s) {
    mapped_file in = mapped_file::open_read(s.file);
    auto ep = co_await connect(w, s, "PUSH", in.size());
    // The server pulls the file out of this memory (see serve_client), then
    // answers with its digest.
    ucx::memory_region region;
    if (in.size() > 0)
        region = ucx::memory_region(ctx, in.data(), in.size());
    const auto t0 = clock_type::now();
    co_await send_key(ep, in.size(), in.size() ? &region : nullptr);
    const std::string remote = co_await recv_text(ep, digest_tag);
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    region.reset();
    std::printf("push %zu bytes in %.3f s: %.1f MiB/s\n", in.size(), secs,
                static_cast<double>(in.size()) / (1 << 20) / std::max(secs, 1e-9));
    const std::string local =
        co_await off_the_loop([&] { return sha256_hex(in.data(), in.size()); });
    std::printf("sha256 local %s\nsha256 remote %s\n%s\n", local.c_str(), remote.c_str(),
                local == remote ? "match" : "MISMATCH");
    co_await ep.async_close(asio::use_awaitable);
    co_return local == remote ? 0 : 1;
}

// Bandwidth of `iters` operations of `size` bytes with `window` in flight.
template <class Start>
asio::awaitable<double> measure(ucx::endpoint& ep, const settings& s, Start start) {
    auto ex = co_await asio::this_coro::executor;
    std::size_t issued = 0, completed = 0, in_flight = 0;
    bool failed = false;
    asio::steady_timer wake(ex, asio::steady_timer::time_point::max());
    const auto t0 = clock_type::now();
    std::function<void()> fill = [&] {
        while (in_flight < s.window && issued < s.iters) {
            ++issued;
            ++in_flight;
            start([&](ucx::error_code ec, std::size_t) {
                --in_flight;
                ++completed;
                failed |= static_cast<bool>(ec);
                if (completed == s.iters || failed)
                    wake.cancel();
                else
                    fill();
            });
        }
    };
    fill();
    ucx::error_code ignored;
    co_await wake.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
    co_await ucx::async_flush(ep, asio::use_awaitable);
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (failed)
        throw std::runtime_error("an operation failed");
    co_return static_cast<double>(s.size) * static_cast<double>(s.iters) / secs / (1 << 20);
}

asio::awaitable<int> bench(ucx::worker& w, const settings& s) {
    auto ep = co_await connect(w, s, "BENCH", s.size);
    ucx::remote_key key;
    co_await recv_key(ep, key);
    std::vector<char> local(s.size, 'x');
    auto put = [&](auto handler) {
        ucx::async_put(ep, asio::buffer(local), key.address(), key, std::move(handler));
    };
    auto get = [&](auto handler) {
        ucx::async_get(ep, asio::buffer(local), key.address(), key, std::move(handler));
    };
    co_await measure(ep, s, put); // warm-up
    const double put_bw = co_await measure(ep, s, put);
    co_await measure(ep, s, get);
    const double get_bw = co_await measure(ep, s, get);
    std::printf("size %zu iters %zu window %zu: put %.1f MB/s, get %.1f MB/s (MB = 2^20 B)\n",
                s.size, s.iters, s.window, put_bw, get_bw);
    co_await send_text(ep, "done", done_tag);
    co_await recv_text(ep, digest_tag);
    key.reset();
    co_await ep.async_close(asio::use_awaitable);
    co_return 0;
}

int usage(const char* argv0) {
    std::fprintf(stderr,
                 "usage: %s serve --port P [--address A] [--file F] [--out O] [--read] "
                 "[--clients N] [--chunk BYTES] [--parallel N] [--transport any|tcp|shm]\n"
                 "       %s pull --port P [--host H] --out O [--chunk BYTES] [--parallel N] "
                 "[--quiet]\n"
                 "       %s push --port P [--host H] --file F\n"
                 "       %s bench --port P [--host H] --size BYTES [--iters N] [--window N]\n",
                 argv0, argv0, argv0, argv0);
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2)
        return usage(argv[0]);
    settings s;
    s.mode = argv[1];
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::string value = i + 1 < argc ? argv[i + 1] : "";
        if (arg == "--read") {
            s.read_into_memory = true;
            continue;
        }
        if (arg == "--quiet") {
            s.quiet = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage(argv[0]);
        if (arg == "--port")
            s.port = value;
        else if (arg == "--host")
            s.host = value;
        else if (arg == "--address")
            s.address = value;
        else if (arg == "--file")
            s.file = value;
        else if (arg == "--out")
            s.out = value;
        else if (arg == "--clients")
            s.clients = sample::number(value);
        else if (arg == "--chunk")
            s.chunk = sample::number(value);
        else if (arg == "--parallel")
            s.parallel = sample::number(value);
        else if (arg == "--size")
            s.size = sample::number(value);
        else if (arg == "--iters")
            s.iters = sample::number(value);
        else if (arg == "--window")
            s.window = sample::number(value);
        else if (arg == "--transport")
            s.transport = value;
        else
            return usage(argv[0]);
        ++i;
    }
    const bool serving = s.mode == "serve";
    if (s.port.empty() || (s.mode == "pull" && s.out.empty()) ||
        (s.mode == "push" && s.file.empty()) || (serving && s.file.empty() && s.out.empty()) ||
        (!serving && s.mode != "pull" && s.mode != "push" && s.mode != "bench") || s.chunk == 0 ||
        s.parallel == 0 || s.size == 0 || s.iters == 0 || s.window == 0)
        return usage(argv[0]);

    int rc = 1;
    try {
        asio::io_context io;
        ucx::context_options options;
        if (s.transport == "tcp") {
            options.transports.shared_memory = false;
            options.transports.cma = false;
        } else if (s.transport != "any" && s.transport != "shm") {
            return usage(argv[0]);
        }
        ucx::context ctx(options);
        ucx::worker worker(ctx, io);
        auto body = [&]() -> asio::awaitable<int> {
            if (serving)
                co_return co_await serve(ctx, worker, s);
            if (s.mode == "pull")
                co_return co_await pull(worker, s);
            if (s.mode == "push")
                co_return co_await push(ctx, worker, s);
            co_return co_await bench(worker, s);
        };
        asio::co_spawn(io, body(), [&](std::exception_ptr e, int result) {
            rc = result;
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& ex) {
                    std::fprintf(stderr, "rma_file: %s\n", ex.what());
                }
                rc = 1;
            }
            worker.close();
        });
        io.run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rma_file: %s\n", e.what());
        return 1;
    }
    return rc;
}
