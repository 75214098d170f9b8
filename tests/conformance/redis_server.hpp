// A private redis-server (or valkey-server) for the conformance tests.
//
// Started on a free loopback port with no persistence, no daemonising, and
// PR_SET_PDEATHSIG so it dies with the test process even if that is killed.
// Readiness is its own log line "Ready to accept connections", read from a
// pipe: no polling, no sleeps.
//
// valkey_target() is what the tests use: FAIRLANE_VALKEY_URL (host:port, or
// valkey://host:port) if set, else one private server per test process,
// stopped at exit; or a reason to skip when neither is possible.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#ifndef FAIRLANE_REDIS_SERVER
#define FAIRLANE_REDIS_SERVER ""
#endif

namespace fairlane::test {

class RedisServer {
 public:
  // Starts a server on a free loopback port (or on `port` if nonzero).
  // Returns nullptr and says why in `error`.
  static std::unique_ptr<RedisServer> start(const std::string& binary, std::string& error, int port = 0) {
    if (binary.empty() || ::access(binary.c_str(), X_OK) != 0) {
      error = "redis-server not installed" + (binary.empty() ? std::string() : " (" + binary + ")");
      return nullptr;
    }
    for (int attempt = 0; attempt < 8; ++attempt) {
      const int p = port ? port : free_port();
      if (p <= 0) {
        error = "no free loopback port";
        return nullptr;
      }
      auto s = std::unique_ptr<RedisServer>(new RedisServer(binary, p));
      if (s->launch(error)) return s;
      if (port) return nullptr;  // the caller wanted exactly this port
    }
    return nullptr;
  }

  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return port_; }

  // SIGTERM and reap. Idempotent.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  // Starts it again on the same port (its data is gone: no persistence).
  bool restart(std::string& error) {
    stop();
    return launch(error);
  }

 private:
  RedisServer(std::string binary, int port) : binary_(std::move(binary)), port_(port) {}

  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }

  bool launch(std::string& error) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      error = "pipe failed";
      return false;
    }
    const std::string port = std::to_string(port_);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      error = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execl(binary_.c_str(), binary_.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--dir", "/tmp",
              "--loglevel", "notice", "--databases", "1", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    // Read its log until it says it is ready, or it exits (port taken).
    std::string log;
    bool ready = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;  // it exited
      log.append(buf, std::size_t(n));
      ready = log.find("Ready to accept connections") != std::string::npos;
    }
    // Closing our end is safe: redis ignores SIGPIPE; later log lines are dropped.
    ::close(fds[0]);
    if (!ready) {
      error = "redis-server on port " + port + " did not start: " + log.substr(log.size() > 300 ? log.size() - 300 : 0);
      stop();
      return false;
    }
    return true;
  }

  std::string binary_;
  int port_;
  pid_t pid_ = -1;
};

// Where the Valkey cases run.
struct ValkeyTarget {
  bool available = false;
  std::string skip_reason;
  std::string host = "127.0.0.1";
  int port = 0;
  std::unique_ptr<RedisServer> own;

  std::string url(const std::string& queue) const {
    return "valkey://" + host + ":" + std::to_string(port) + "/" + queue;
  }
};

inline ValkeyTarget& valkey_target() {
  static ValkeyTarget t = [] {
    ValkeyTarget v;
    if (const char* env = std::getenv("FAIRLANE_VALKEY_URL"); env && *env) {
      std::string s = env;
      for (const char* scheme : {"valkey://", "redis://"})
        if (s.rfind(scheme, 0) == 0) s = s.substr(std::string(scheme).size());
      if (auto slash = s.find('/'); slash != std::string::npos) s = s.substr(0, slash);
      const auto colon = s.rfind(':');
      v.host = colon == std::string::npos ? s : s.substr(0, colon);
      v.port = colon == std::string::npos ? 6379 : std::atoi(s.c_str() + colon + 1);
      v.available = !v.host.empty() && v.port > 0;
      if (!v.available) v.skip_reason = "FAIRLANE_VALKEY_URL='" + std::string(env) + "' is not host:port";
      return v;
    }
    std::string error;
    v.own = RedisServer::start(FAIRLANE_REDIS_SERVER, error);
    if (!v.own) {
      v.skip_reason = error + "; set FAIRLANE_VALKEY_URL=host:port to use a running server";
      return v;
    }
    v.port = v.own->port();
    v.available = true;
    return v;
  }();
  return t;
}

}  // namespace fairlane::test
