// A child process with pipes to its stdin and stdout, for two-process tests.
#pragma once

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace ucx_test {

class child_process {
public:
    /// Starts `argv[0]` (a path) with `argv`. The child's stdin and stdout
    /// are pipes to this process; it shares its stderr, and nothing else this
    /// process has open (its descriptors are its own: a test that limits them
    /// counts on it). It is killed when this process ends, however it ends,
    /// so a test that dies leaves no peer running.
    explicit child_process(const std::vector<std::string>& argv) {
        int in[2], out[2], failed[2];
        if (pipe2(in, O_CLOEXEC) != 0)
            throw std::runtime_error("pipe failed");
        if (pipe2(out, O_CLOEXEC) != 0) {
            close(in[0]);
            close(in[1]);
            throw std::runtime_error("pipe failed");
        }
        if (pipe2(failed, O_CLOEXEC) != 0) {
            for (int fd : {in[0], in[1], out[0], out[1]})
                close(fd);
            throw std::runtime_error("pipe failed");
        }
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        const pid_t parent = getpid();
        pid_ = fork();
        if (pid_ == 0)
            start_child(in[0], out[1], failed[1], parent, args.data()); // never returns
        const int fork_errno = errno;
        close(in[0]);
        close(out[1]);
        close(failed[1]);
        int child_errno = 0;
        ssize_t n = 0;
        while (pid_ > 0 && (n = read(failed[0], &child_errno, sizeof child_errno)) < 0 &&
               errno == EINTR) {
        }
        const bool exec_failed = n == static_cast<ssize_t>(sizeof child_errno);
        close(failed[0]);
        if (pid_ < 0 || exec_failed) {
            close(in[1]);
            close(out[0]);
            if (exec_failed)
                wait();
            throw std::runtime_error("could not start " + argv[0] + ": " +
                                     std::strerror(pid_ < 0 ? fork_errno : child_errno));
        }
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
    /// In the child after fork(): only async-signal-safe calls until exec.
    [[noreturn]] static void start_child(int in, int out, int failed, pid_t parent,
                                         char* const* args) {
        const auto attach = [](int fd, int to) {
            // dup2 to itself keeps close-on-exec: clear it by hand then.
            return fd == to ? fcntl(fd, F_SETFD, 0) == 0 : dup2(fd, to) == to;
        };
        // The parent may have died between fork() and prctl(): then the
        // death signal would never come.
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() == parent && attach(in, 0) &&
            attach(out, 1)) {
            // Everything but stdin, stdout, stderr and the pipe that reports
            // a failed exec (closed by the exec itself).
            if (failed > 3)
                close_range(3, static_cast<unsigned>(failed) - 1, 0);
            close_range(static_cast<unsigned>(failed) + 1, ~0u, 0);
            execve(args[0], args, environ);
        }
        const int e = errno;
        [[maybe_unused]] const auto n = write(failed, &e, sizeof e);
        _exit(127);
    }

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
