// The terminal for `watch` (see terminal.hpp).
#include "terminal.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "cli_error.hpp"

namespace fairlane::cli {

TermSize terminal_size(int fd) noexcept {
  winsize ws{};
  TermSize t;
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    t.rows = ws.ws_row;
    t.cols = ws.ws_col;
  }
  return t;
}

bool write_all(int fd, std::string_view s) noexcept {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

namespace {

constexpr int kSignals[4] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
// Relaxed is enough: the fd is stored before sigaction() installs the
// handler, and the handler only hands it to write(2).
std::atomic<int> g_watch_fd{-1};
std::atomic<bool> g_watch_taken{false};

extern "C" void fairlane_watch_on_signal(int sig) {
  const int saved = errno;
  const int fd = g_watch_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const auto c = static_cast<unsigned char>(sig);
    (void)!::write(fd, &c, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  bool expected = false;
  if (!g_watch_taken.compare_exchange_strong(expected, true)) fail("internal: two signal pipes at once");
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_watch_taken.store(false);
    fail(fmt::format("cannot make a pipe: {}", std::strerror(errno)));
  }
  read_fd_ = p[0];
  g_watch_fd.store(p[1], std::memory_order_relaxed);
  struct sigaction sa {};
  sa.sa_handler = fairlane_watch_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 4; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
}

SignalPipe::~SignalPipe() {
  for (int i = 0; i < 4; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  const int w = g_watch_fd.exchange(-1, std::memory_order_relaxed);
  if (w >= 0) ::close(w);
  if (read_fd_ >= 0) ::close(read_fd_);
  g_watch_taken.store(false);
}

int SignalPipe::drain(bool& resized) noexcept {
  int quit = 0;
  unsigned char buf[64];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == SIGWINCH) resized = true;
      else quit = buf[i];
    }
  }
  return quit;
}

TerminalSession::TerminalSession(int in, int out) : in_(in), out_(out) {
  if (::isatty(in_) && ::tcgetattr(in_, &saved_) == 0) {
    termios raw = saved_;
    // Input: no line editing, no echo, no signal keys (Ctrl-C is read as
    // byte 3 and handled like 'q'), no flow control, no CR translation.
    // Output: no processing; frames end their lines with "\r\n" themselves.
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ISIG | IEXTEN);
    raw.c_iflag &= ~static_cast<tcflag_t>(IXON | ICRNL | BRKINT | INPCK | ISTRIP);
    raw.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (::tcsetattr(in_, TCSAFLUSH, &raw) == 0) raw_ = true;
  }
  active_ = true;
  std::string enter;
  enter += kAltScreenOn;
  enter += kCursorHide;
  write_all(out_, enter);
}

void TerminalSession::restore() noexcept {
  if (!active_) return;
  active_ = false;
  std::string leave;
  leave += kCursorShow;
  leave += kAltScreenOff;
  write_all(out_, leave);
  if (raw_) ::tcsetattr(in_, TCSAFLUSH, &saved_);
  raw_ = false;
}

}  // namespace fairlane::cli
