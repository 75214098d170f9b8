// A child process (a tool under test) whose stdout is a pipe the test reads
// line by line; stdin is /dev/null and stderr goes to a file. Killed and
// reaped when it goes out of scope, unless waited for.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.hpp"

extern char** environ;

namespace fairlane::test {

class LineChild {
 public:
  LineChild(const std::string& exe, const std::vector<std::string>& args, const std::filesystem::path& err_file) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    const Argv argv(exe, args);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int rc = ::posix_spawn(&pid_, argv.get()[0], &fa, nullptr, argv.get(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    out_ = p[0];
    if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  }
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;
  ~LineChild() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);  // our own child, by its pid
      wait();
    }
    ::close(out_);
  }
  pid_t pid() const { return pid_; }

  // The next line it prints (without the newline); nullopt at EOF or after
  // `patience` (which turns a hang into a failure).
  std::optional<std::string> line(std::chrono::milliseconds patience = std::chrono::seconds(60)) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd pf{out_, POLLIN, 0};
      const int n = ::poll(&pf, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      char b[4096];
      const ssize_t got = ::read(out_, b, sizeof b);
      if (got <= 0) return std::nullopt;
      buf_.append(b, static_cast<std::size_t>(got));
    }
  }
  int wait() {
    reap(pid_, status_, reaped_);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  std::string buf_;
};

}  // namespace fairlane::test
