// The terminal for `watch`: raw mode, the alternate screen, and signals that
// must not leave a terminal in raw mode behind.
//
// Only ANSI escapes are used (no ncurses). The session saves the termios of
// its input on entry and puts it back on exit, on every path out of a scope
// (return, exception); a process killed by SIGKILL cannot restore anything.
#pragma once

#include <signal.h>
#include <termios.h>

#include <string_view>

namespace fairlane::cli {

// Escape sequences, named.
inline constexpr std::string_view kAltScreenOn = "\x1b[?1049h";
inline constexpr std::string_view kAltScreenOff = "\x1b[?1049l";
inline constexpr std::string_view kCursorHide = "\x1b[?25l";
inline constexpr std::string_view kCursorShow = "\x1b[?25h";
inline constexpr std::string_view kCursorHome = "\x1b[H";
inline constexpr std::string_view kClearLineRight = "\x1b[K";
inline constexpr std::string_view kClearBelow = "\x1b[J";

struct TermSize {
  int rows = 24, cols = 80;
};
// The window size of `fd`, or 24x80 when it is not a terminal.
TermSize terminal_size(int fd) noexcept;

// Writes all of `s` to `fd`, retrying partial writes and EINTR. False on error.
bool write_all(int fd, std::string_view s) noexcept;

// SIGINT, SIGTERM, SIGHUP and SIGWINCH turned into bytes on a nonblocking
// self-pipe (the handler only write()s), so a poll() loop sees them. The
// previous handlers come back in the destructor. One at a time per process.
class SignalPipe {
 public:
  SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;
  ~SignalPipe();

  int fd() const noexcept { return read_fd_; }
  // Drains the pipe. Returns the last quitting signal seen (SIGINT, SIGTERM,
  // SIGHUP) or 0, and sets `resized` when a SIGWINCH came.
  int drain(bool& resized) noexcept;

 private:
  int read_fd_ = -1;
  struct ::sigaction old_[4];
};

// Raw mode on `in` (when it is a terminal: no echo, no line buffering, no
// signal keys, so Ctrl-C arrives as byte 3) and the alternate screen with a
// hidden cursor on `out`. The destructor restores both.
class TerminalSession {
 public:
  TerminalSession(int in, int out);
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;
  ~TerminalSession() { restore(); }

  // Leaves the alternate screen, shows the cursor, puts termios back. Idempotent.
  void restore() noexcept;

 private:
  int in_, out_;
  bool raw_ = false, active_ = false;
  termios saved_{};
};

}  // namespace fairlane::cli
