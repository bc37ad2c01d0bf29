// ucx::file_store: a store on a directory that the processes of a job share
// (a local directory, or a network file system such as NFS).
#pragma once

#include <ucx/store.hpp>

#include <chrono>
#include <filesystem>
#include <memory>

namespace ucx {

/// Options of a `file_store`.
struct file_store_options {
    /// The first interval at which `async_get` and `async_wait` look for
    /// their keys; it grows by half at each look, up to `max_poll_interval`.
    std::chrono::milliseconds poll_interval{1};
    /// The longest interval between two looks.
    std::chrono::milliseconds max_poll_interval{50};
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
/// File system calls run in the initiating call, on the calling thread;
/// errors of the file system are reported as `error_code`s of the system
/// category. A counter file that is not a decimal integer fails `async_add`
/// with `ucx::error::store_protocol_error`.
///
/// Several `file_store`s (in one process or several) may share a directory.
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

    executor_type ex_;
    std::filesystem::path dir_;
    file_store_options options_;
    std::vector<std::weak_ptr<poll>> polls_;
};

} // namespace ucx
