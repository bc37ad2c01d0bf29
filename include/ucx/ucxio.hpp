// ucx::ucxio: a peer's registered region as a random-access device and a
// stream with a position.
#pragma once

#include <ucx/detail/access.hpp>
#include <ucx/detail/initiate.hpp>
#include <ucx/detail/operation.hpp>
#include <ucx/detail/results.hpp>
#include <ucx/remote_key.hpp>
#include <ucx/rma.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace ucx {

namespace detail {

// lib/rma/ucxio.cpp: one RMA operation at `offset` of the key's region, with the
// device rules (short at the end; eof for reads at or past the end; for
// writes past the end `error::out_of_bounds`; zero bytes complete with 0).
void ucxio_read(endpoint_impl& ep, rma_op* op, const key_ptr& key, std::uint64_t offset, void* data,
                std::size_t size) noexcept;
void ucxio_write(endpoint_impl& ep, rma_op* op, const key_ptr& key, std::uint64_t offset,
                 const void* data, std::size_t size) noexcept;
/// The endpoint a key was unpacked on; throws `bad_descriptor` for an empty key.
const std::shared_ptr<endpoint_impl>& checked(const remote_key& key);

/// The first non-empty buffer of a sequence (RMA needs contiguous memory).
template <class Buffer, class BufferSequence>
Buffer first_buffer(const BufferSequence& buffers) {
    auto end = boost::asio::buffer_sequence_end(buffers);
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != end; ++it) {
        Buffer b(*it);
        if (b.size() > 0)
            return b;
    }
    return Buffer();
}

} // namespace detail

/// A peer's registered region (a `remote_key`) seen as a device and as a
/// stream, over one-sided operations: nothing runs on the peer's side.
///
/// - Random access: models Asio's AsyncRandomAccessReadDevice and
///   AsyncRandomAccessWriteDevice (`async_read_some_at`,
///   `async_write_some_at`), so `asio::async_read_at` and
///   `asio::async_write_at` work, including several at once at different
///   offsets.
/// - Stream: models AsyncReadStream and AsyncWriteStream with a position
///   (`seek`, `tell`), so `asio::async_read` and `asio::async_write` work.
///
/// Size rules (like a file of fixed size): an operation that reaches past
/// the end is shortened to the end; a read starting at or past the end fails
/// with `asio::error::eof`; a write starting at or past the end fails with
/// `ucx::error::out_of_bounds` (the region cannot grow); an empty buffer completes
/// with 0 bytes. Never a silent clamp: the byte count says what was moved.
///
/// Visibility: a completed write is complete locally; `async_flush` makes
/// every write before it visible at the peer. Reads see the peer's memory as
/// it is when UCX reads it.
///
/// Each operation moves the first non-empty buffer of its sequence (RMA needs
/// contiguous memory), as a `read_some`/`write_some` may; Asio's composed
/// algorithms continue with the rest. Cancellation as for RMA: UCX cannot
/// cancel RMA, so `terminal` closes the endpoint, `partial` and `total` act
/// only before UCX holds the operation.
///
/// Cheap to copy: copies share the key but each has its own position. Use
/// from the worker's executor.
class ucxio {
public:
    using executor_type = boost::asio::any_io_executor;

    /// Where `seek` counts from.
    enum class seek_basis { begin, current, end };

    /// A device over the whole region of `key` (unpacked on the endpoint
    /// that operations use). Throws `boost::system::system_error`
    /// (`key_errc::no_key`) for an empty key.
    explicit ucxio(remote_key key) : key_(std::move(key)), ep_(detail::checked(key_)) {}

    /// The executor of the key's endpoint's worker.
    executor_type get_executor() const noexcept { return detail::core_of(*ep_).get_executor(); }
    /// The region's size in bytes.
    std::uint64_t size() const noexcept { return key_.length(); }
    /// The key this device works on.
    const remote_key& key() const noexcept { return key_; }
    /// Whether the endpoint is usable.
    bool is_open() const noexcept { return detail::endpoint_is_open(*ep_); }

    // --- random access ---

    /// Reads from the region at `offset` into the first non-empty buffer of
    /// `buffers` (see the size rules above).
    /// Completion signature: `void(error_code ec, std::size_t bytes_read)`.
    template <class MutableBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_read_some_at(
        std::uint64_t offset, const MutableBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return transfer_at<&detail::ucxio_read>(
            offset, detail::first_buffer<boost::asio::mutable_buffer>(buffers),
            std::forward<CompletionToken>(token));
    }

    /// Writes the first non-empty buffer of `buffers` to the region at
    /// `offset` (see the size rules above). Visible at the peer after
    /// `async_flush`.
    /// Completion signature: `void(error_code ec, std::size_t bytes_written)`.
    template <class ConstBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_write_some_at(
        std::uint64_t offset, const ConstBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return transfer_at<&detail::ucxio_write>(
            offset, detail::first_buffer<boost::asio::const_buffer>(buffers),
            std::forward<CompletionToken>(token));
    }

    /// Makes every write started before it visible at the peer
    /// (an endpoint flush). Completion signature: `void(error_code ec)`.
    template <class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_flush(
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        return detail::initiate<void(error_code), detail::error_result<>>(
            ep_, std::forward<CompletionToken>(token),
            [](detail::endpoint_impl& e, detail::operation* op) { detail::rma_flush(e, op); });
    }

    // --- stream ---

    /// The stream position.
    std::uint64_t tell() const noexcept { return position_; }

    /// Moves the stream position to `offset` counted from `basis`, and
    /// returns it. A position past the end is allowed (reads there give eof,
    /// writes `ucx::error::out_of_bounds`); a negative or overflowing result fails
    /// with `asio::error::invalid_argument` and leaves the position alone.
    /// Takes effect for operations started afterwards.
    std::uint64_t seek(std::int64_t offset, seek_basis basis, error_code& ec) noexcept;
    /// As above; throws `boost::system::system_error`.
    std::uint64_t seek(std::int64_t offset, seek_basis basis);

    /// Reads at the stream position, which advances by the bytes read when
    /// the operation completes. Completion signature:
    /// `void(error_code ec, std::size_t bytes_read)`; `asio::error::eof` at
    /// the end. Start one stream read or write at a time (as with sockets).
    template <class MutableBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_read_some(
        const MutableBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto b = detail::first_buffer<boost::asio::mutable_buffer>(buffers);
        return boost::asio::async_compose<CompletionToken, void(error_code, std::size_t)>(
            stream_op<boost::asio::mutable_buffer, false>{this, b}, token, get_executor());
    }

    /// Writes at the stream position, which advances by the bytes written
    /// when the operation completes. Completion signature:
    /// `void(error_code ec, std::size_t bytes_written)`.
    template <class ConstBufferSequence,
              class CompletionToken = boost::asio::default_completion_token_t<executor_type>>
    auto async_write_some(
        const ConstBufferSequence& buffers,
        CompletionToken&& token = boost::asio::default_completion_token_t<executor_type>()) {
        auto b = detail::first_buffer<boost::asio::const_buffer>(buffers);
        return boost::asio::async_compose<CompletionToken, void(error_code, std::size_t)>(
            stream_op<boost::asio::const_buffer, true>{this, b}, token, get_executor());
    }

private:
    /// One read or write of the contiguous buffer `b` at `offset`: `Submit`
    /// is `ucxio_read` or `ucxio_write`.
    template <auto Submit, class Buffer, class CompletionToken>
    auto transfer_at(std::uint64_t offset, Buffer b, CompletionToken&& token) {
        return detail::initiate<void(error_code, std::size_t),
                                detail::bytes_result<detail::rma_op>>(
            ep_, std::forward<CompletionToken>(token),
            [k = detail::access::get_impl(key_), offset, b](detail::endpoint_impl& e,
                                                            detail::rma_op* op) {
                Submit(e, op, k, offset, b.data(), b.size());
            });
    }

    template <class Buffer, bool Write>
    struct stream_op {
        ucxio* self_io;
        Buffer buffer;
        bool started = false;

        template <class Self>
        void operator()(Self& self, error_code ec = {}, std::size_t n = 0) {
            if (!started) {
                started = true;
                if constexpr (Write)
                    self_io->async_write_some_at(self_io->position_, buffer, std::move(self));
                else
                    self_io->async_read_some_at(self_io->position_, buffer, std::move(self));
                return;
            }
            self_io->position_ += n;
            self.complete(ec, n);
        }
    };

    remote_key key_;
    std::shared_ptr<detail::endpoint_impl> ep_;
    std::uint64_t position_ = 0;
};

} // namespace ucx
