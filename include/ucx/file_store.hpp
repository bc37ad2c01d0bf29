// ucx::file_store: a store on a directory that the processes of a job share
// (a local directory, or a network file system such as NFS).
#pragma once

#include <ucx/store.hpp>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>

namespace ucx {

/// Options of a `file_store`.
struct file_store_options {
    /// The first interval at which `async_get` and `async_wait` look for
    /// their keys; it grows by half at each look, up to `max_poll_interval`.
    std::chrono::milliseconds poll_interval{1};
    /// The longest interval between two looks (also of `async_add` and
    /// `async_compare_set` waiting for the directory's lock).
    std::chrono::milliseconds max_poll_interval{50};
    /// The largest value, in bytes (64 MiB by default). A key file that is
    /// larger is not read: the operation fails with
    /// `ucx::error::store_value_too_large`, as does an `async_set` (or the
    /// desired value of an `async_compare_set`) of a larger value.
    std::size_t max_value_size = 64 * 1024 * 1024;
};

/// A store whose keys are files in a directory: one file per key, named
/// `k_` and the key with every byte other than a letter, a digit, `-` or `_`
/// written as `%XX` (so a key may be any bytes, up to the file system's
/// limit on a name: a longer name fails with `std::errc::filename_too_long`).
///
/// `async_set` writes the value to a temporary file and renames it over the
/// key's file, so readers see the old or the new value, never a part.
/// `async_add` and `async_compare_set` read and write under an exclusive
/// lock (`flock`) of the file `.lock` of the directory, so that processes
/// sharing the directory do not lose each other's updates (on NFS, this
/// needs a server and client with working locks). `async_erase` unlinks the
/// key's file; `async_num_keys` counts the key files. `async_get` and
/// `async_wait` look for their keys at growing intervals (see
/// `file_store_options`) until they are there or the timeout passes.
///
/// File system calls run in the initiating call, on the calling thread, and
/// none of them waits on another process: a key file is read only if it is a
/// regular file (checked before it is opened, without following a symbolic
/// link, and again on the open descriptor) of at most
/// `file_store_options::max_value_size` bytes, so a FIFO, a device or a link
/// (to `/dev/zero`, say) in place of a key's file is an error code, not a
/// read that blocks or never ends; and the directory's lock is tried without
/// waiting, then again at the poll intervals until the operation's timeout.
///
/// Errors, besides those of every store (`ucx::error::store_timeout`,
/// `asio::error::operation_aborted`):
/// - every operation: the file system's, as `error_code`s of the system
///   category (`std::errc::filename_too_long` for a key whose file name is
///   longer than 255 bytes, `std::errc::permission_denied`, ...);
/// - `async_get`, `async_add`, `async_compare_set`:
///   `ucx::error::store_not_regular_file` (the key's file is not a regular
///   file) and `ucx::error::store_value_too_large` (it is larger than
///   `max_value_size`);
/// - `async_set`, `async_compare_set`: `ucx::error::store_value_too_large`
///   (a value larger than `max_value_size`, nothing written);
/// - `async_add`: `ucx::error::store_protocol_error` (the key's value is not
///   a counter, the decimal text of an int64, or the sum would overflow);
/// - `async_add`, `async_compare_set`: `ucx::error::store_timeout` also when
///   the directory's lock stays held by another store until the timeout;
///   `ucx::error::store_not_regular_file` when the lock file `.lock` is not
///   a regular file.
/// `async_check`, `async_wait` and `async_num_keys` count a key whose file is
/// there, of whatever kind.
///
class file_store final : public store {
public:
    /// A store on `directory`, which is created (with its parents) if it
    /// does not exist. Throws `std::filesystem::filesystem_error` if it
    /// cannot be.
    file_store(executor_type ex, std::filesystem::path directory, file_store_options options = {});
    /// Completes the pending `async_get`s and `async_wait`s with
    /// `asio::error::operation_aborted`.
    ~file_store() override;
    file_store(const file_store&) = delete;
    file_store& operator=(const file_store&) = delete;

    /// The executor of the store's I/O and, by default, of its handlers.
    executor_type get_executor() const noexcept override { return ex_; }
    /// The store's directory.
    const std::filesystem::path& directory() const noexcept { return dir_; }

    /// The name of the file of `key` in the directory.
    static std::string file_name(std::string_view key);

private:
    struct poll;

    void do_set(std::string key, value_type value, done_handler h) override;
    void do_get(std::string key, value_handler h) override;
    void do_add(std::string key, std::int64_t delta, count_handler h) override;
    void do_compare_set(std::string key, value_type expected, value_type desired,
                        value_handler h) override;
    void do_check(std::vector<std::string> keys, bool_handler h) override;
    void do_wait(std::vector<std::string> keys, done_handler h) override;
    void do_erase(std::string key, bool_handler h) override;
    void do_num_keys(count_handler h) override;

    void start_poll(std::vector<std::string> keys, bool want_value, value_handler vh,
                    done_handler dh);

    struct lock_wait;
    /// Runs `body` with the directory's lock held (an empty code), now or
    /// once the lock is free, or with the error that prevents it.
    void with_lock(std::function<void(error_code)> body);

    executor_type ex_;
    std::filesystem::path dir_;
    file_store_options options_;
    std::vector<std::weak_ptr<poll>> polls_;
    std::vector<std::weak_ptr<lock_wait>> lock_waits_;
};

} // namespace ucx
