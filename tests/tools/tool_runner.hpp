// Running the `fairlane` tool from the tool tests: plainly (stdout and
// stderr to files) or on a pseudo-terminal (the test plays the terminal).
#pragma once

#include "test_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

#ifndef FAIRLANE_CLI_PATH
#error "FAIRLANE_CLI_PATH must name the fairlane tool"
#endif

namespace fairlane::test {

inline constexpr std::chrono::seconds kToolHang{30};

using ToolRun = ProgramRun;

inline std::string show(const ToolRun& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}


// Runs `fairlane args...` to completion (see run_program).
inline ToolRun run_tool(const std::vector<std::string>& args) { return run_program(FAIRLANE_CLI_PATH, args); }

// `fairlane args...` on a pseudo-terminal of rows x cols. The test keeps the
// terminal side (the slave) open too, so it can read its termios after the
// tool has exited, and reads the tool's output from the master.
class PtyTool {
 public:
  PtyTool(const std::vector<std::string>& args, unsigned short rows = 24, unsigned short cols = 80) {
    winsize ws{};
    ws.ws_row = rows;
    ws.ws_col = cols;
    if (::openpty(&master_, &slave_, nullptr, nullptr, &ws) != 0)
      throw std::runtime_error(std::string("openpty: ") + std::strerror(errno));
    ::fcntl(master_, F_SETFD, FD_CLOEXEC);
    ::fcntl(slave_, F_SETFD, FD_CLOEXEC);
    ::tcgetattr(slave_, &before_);
    const Argv argv(FAIRLANE_CLI_PATH, args);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {  // async-signal-safe calls only until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::setsid();
      ::ioctl(slave_, TIOCSCTTY, 0);
      ::dup2(slave_, 0);
      ::dup2(slave_, 1);
      ::dup2(slave_, 2);
      ::execv(argv.get()[0], argv.get());
      ::_exit(127);
    }
  }
  PtyTool(const PtyTool&) = delete;
  PtyTool& operator=(const PtyTool&) = delete;
  ~PtyTool() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);  // our own child, by its pid
      wait();
    }
    ::close(master_);
    ::close(slave_);
  }

  pid_t pid() const { return pid_; }
  const termios& termios_before() const { return before_; }
  termios termios_now() const {
    termios t{};
    ::tcgetattr(slave_, &t);
    return t;
  }
  // Everything the tool has written so far.
  const std::string& output() const { return out_; }

  // Reads until `done(output())` holds; false at EOF or after kToolHang.
  template <class Pred>
  bool read_until(Pred done) {
    const auto give_up = std::chrono::steady_clock::now() + kToolHang;
    while (!done(out_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{master_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(left.count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      char buf[4096];
      const ssize_t got = ::read(master_, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return done(out_);
      out_.append(buf, static_cast<std::size_t>(got));
    }
    return true;
  }
  // What a user types.
  void type(std::string_view keys) { (void)!::write(master_, keys.data(), keys.size()); }
  // Waits for the tool to exit; returns its wait status.
  int wait() {
    reap(pid_, status_, reaped_);
    return status_;
  }

 private:
  int master_ = -1, slave_ = -1;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
  termios before_{};
  std::string out_;
};

// How many times `needle` occurs in `hay`.
inline std::size_t occurrences(std::string_view hay, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t at = hay.find(needle); at != std::string_view::npos; at = hay.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace fairlane::test
