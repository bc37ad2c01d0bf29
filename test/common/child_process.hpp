// A child process with pipes to its stdin and stdout, for two-process tests.
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <fcntl.h>
#include <spawn.h>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace ucx_test {

class child_process {
public:
    explicit child_process(const std::vector<std::string>& argv) {
        int in[2], out[2];
        if (pipe(in) != 0 || pipe(out) != 0)
            throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addclose(&fa, in[1]);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        close(in[0]);
        close(out[1]);
        if (rc != 0)
            throw std::runtime_error("posix_spawn failed: " + argv[0]);
        to_child_ = fdopen(in[1], "w");
        from_child_ = fdopen(out[0], "r");
    }
    ~child_process() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            wait();
        }
        if (to_child_)
            fclose(to_child_);
        if (from_child_)
            fclose(from_child_);
    }
    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;

    /// Reads one line from the child's stdout (without the newline); empty at EOF.
    std::string read_line() {
        std::string line;
        for (int c; (c = fgetc(from_child_)) != EOF && c != '\n';)
            line += static_cast<char>(c);
        return line;
    }
    /// Reads the child's stdout to its end (the child closed it, usually by
    /// exiting).
    std::string read_all() {
        std::string s;
        for (int c; (c = fgetc(from_child_)) != EOF;)
            s += static_cast<char>(c);
        return s;
    }
    void write_line(const std::string& s) {
        fputs((s + "\n").c_str(), to_child_);
        fflush(to_child_);
    }
    /// Whether the child's output so far contains `text`; never blocks. Do not
    /// mix with read_line() on the same child.
    bool output_contains(const std::string& text) {
        const int fd = fileno(from_child_);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        char buf[4096];
        for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
            output_.append(buf, static_cast<std::size_t>(n));
        return output_.find(text) != std::string::npos;
    }
    /// The child's output read so far by `output_contains`.
    const std::string& output() const noexcept { return output_; }
    /// Closes the child's stdin (it reads end of input).
    void close_stdin() {
        if (to_child_)
            fclose(to_child_);
        to_child_ = nullptr;
    }
    void kill_now() { kill(pid_, SIGKILL); }
    pid_t pid() const noexcept { return pid_; }
    /// Whether the child has ended (then `wait()` returns at once), without
    /// blocking: for a test that must keep its own io_context running.
    bool exited() {
        if (pid_ <= 0)
            return true;
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) != pid_)
            return false;
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
    }
    /// Waits for the child; returns its exit status (128 + signal if killed).
    int wait() {
        if (pid_ <= 0)
            return status_;
        int st = 0;
        waitpid(pid_, &st, 0);
        pid_ = -1;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
    }

private:
    pid_t pid_ = -1;
    int status_ = -1;
    FILE* to_child_ = nullptr;
    FILE* from_child_ = nullptr;
    std::string output_;
};

/// Hex encoding of bytes, for passing addresses through pipes.
inline std::string to_hex(const std::vector<std::byte>& v) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (std::byte b : v) {
        s += digits[std::to_integer<unsigned>(b) >> 4];
        s += digits[std::to_integer<unsigned>(b) & 15];
    }
    return s;
}

inline std::vector<std::byte> from_hex(const std::string& s) {
    std::vector<std::byte> v;
    auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    for (std::size_t i = 0; i + 1 < s.size(); i += 2)
        v.push_back(static_cast<std::byte>(nib(s[i]) * 16 + nib(s[i + 1])));
    return v;
}

} // namespace ucx_test
