// A small HTTP server for `stats --listen` (see http_server.hpp).
#include "http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "cli_error.hpp"
#include "terminal.hpp"

namespace fairlane::cli {

namespace {

std::uint64_t mono_ms() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000u + static_cast<std::uint64_t>(ts.tv_nsec) / 1'000'000u;
}

struct Connection {
  int fd = -1;
  std::string in, out;      // kept between requests: their capacity is reused
  std::size_t sent = 0;     // of out
  bool close_after = false; // the client asked for it, or the request was bad
  std::uint64_t last_ms = 0;
};

// Case-insensitive search for a header's value in a request head.
std::string_view header(std::string_view head, std::string_view name) {
  std::size_t at = head.find("\r\n");
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const std::size_t start = at + 2;
    const std::size_t end = head.find("\r\n", start);
    const std::string_view line = head.substr(start, end == std::string_view::npos ? head.size() - start : end - start);
    if (line.size() > name.size() && line[name.size()] == ':') {
      bool same = true;
      for (std::size_t i = 0; i < name.size() && same; ++i)
        same = std::tolower(static_cast<unsigned char>(line[i])) == std::tolower(static_cast<unsigned char>(name[i]));
      if (same) {
        std::string_view v = line.substr(name.size() + 1);
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        return v;
      }
    }
    at = end;
  }
  return {};
}

bool contains_token(std::string_view value, std::string_view token) {
  for (std::size_t i = 0; i + token.size() <= value.size(); ++i) {
    bool same = true;
    for (std::size_t k = 0; k < token.size() && same; ++k)
      same = std::tolower(static_cast<unsigned char>(value[i + k])) == token[k];
    if (same) return true;
  }
  return false;
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
  }
  return "Error";
}

}  // namespace

ListenAddress parse_listen(std::string_view text) {
  auto bad = [&](std::string_view why) {
    fail(fmt::format("invalid --listen '{}': {} (expected HOST:PORT, e.g. 127.0.0.1:9464)", text, why));
  };
  ListenAddress a;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') bad("bad [IPv6]:PORT");
    a.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) bad("no port");
    a.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (a.host.find(':') != std::string::npos) bad("an IPv6 address goes in [brackets]");
  }
  if (a.host.empty()) bad("no host");
  for (char c : a.host)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) bad("bad character in the host");
  unsigned v = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::from_chars(port.data(), port.data() + port.size(), v).ec != std::errc() || v > 65535)
    bad("the port must be 0..65535");
  a.port = static_cast<std::uint16_t>(v);
  return a;
}

MetricsServer::MetricsServer(const ListenAddress& at, Render render) : render_(std::move(render)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(at.port);
  if (const int rc = ::getaddrinfo(at.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    fail(fmt::format("--listen {}:{}: cannot resolve the host: {}", at.host, at.port, ::gai_strerror(rc)));
  int err = 0;
  for (addrinfo* ai = res; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    fd_ = fd;
  }
  ::freeaddrinfo(res);
  if (fd_ < 0) fail(fmt::format("--listen {}:{}: cannot listen: {}", at.host, at.port, std::strerror(err)));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned real_port = at.port;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    real_port = ntohs(in->sin_port);
    bound_ = fmt::format("{}:{}", host, real_port);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    real_port = ntohs(in6->sin6_port);
    bound_ = fmt::format("[{}]:{}", host, real_port);
  }
}

MetricsServer::~MetricsServer() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsServer::run(SignalPipe& signals, bool log_requests) {
  std::array<Connection, kMaxConnections> conns;
  std::vector<pollfd> fds;
  fds.reserve(kMaxConnections + 2);
  std::vector<std::size_t> which;  // fds[i + 2] belongs to conns[which[i]]
  which.reserve(kMaxConnections);
  std::string body;

  // Parses one request from c.in (a whole head is there) and queues its answer.
  auto answer = [&](Connection& c, std::size_t head_end) {
    const std::string_view head(c.in.data(), head_end);
    const std::size_t eol = head.find("\r\n");
    const std::string_view request = head.substr(0, eol);
    const std::size_t sp1 = request.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : request.find(' ', sp1 + 1);
    int status = 400;
    bool head_only = false;
    std::string_view method, path, version;
    if (sp1 != std::string_view::npos && sp2 != std::string_view::npos) {
      method = request.substr(0, sp1);
      path = request.substr(sp1 + 1, sp2 - sp1 - 1);
      version = request.substr(sp2 + 1);
      if (const std::size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
      head_only = method == "HEAD";
      if (version.substr(0, 5) != "HTTP/") status = 400;
      else if (method != "GET" && method != "HEAD") status = 405;
      else if (path != "/metrics") status = 404;
      else status = 200;
    }
    const std::string_view connection = header(head, "Connection");
    c.close_after = status == 400 || contains_token(connection, "close") ||
                    (version == "HTTP/1.0" && !contains_token(connection, "keep-alive"));
    body.clear();
    const char* type = "text/plain; charset=utf-8";
    if (status == 200) {
      status = render_(body);
      if (status == 200) type = "text/plain; version=0.0.4; charset=utf-8";
    } else {
      body = status == 404 ? "not found: the metrics are at /metrics\n" : fmt::format("{}\n", reason(status));
    }
    c.out.clear();
    c.sent = 0;
    fmt::format_to(std::back_inserter(c.out),
                   "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n", status,
                   reason(status), type, body.size(), c.close_after ? "close" : "keep-alive");
    if (!head_only) c.out += body;
    if (log_requests) {
      fmt::print("{} {} {} {}\n", method.empty() ? std::string_view("-") : method,
                 path.empty() ? std::string_view("-") : path, status, body.size());
      std::fflush(stdout);
    }
    c.in.erase(0, head_end + 4);  // a pipelined next request stays
  };

  auto drop = [](Connection& c) {
    ::close(c.fd);
    c.fd = -1;
    c.in.clear();
    c.out.clear();
    c.sent = 0;
  };

  for (;;) {
    fds.clear();
    which.clear();
    std::size_t open = 0;
    for (const Connection& c : conns) open += c.fd >= 0 ? 1 : 0;
    fds.push_back({signals.fd(), POLLIN, 0});
    // Stop accepting at the bound: the rest wait in the kernel's backlog.
    fds.push_back({open < kMaxConnections ? fd_ : -1, POLLIN, 0});
    const std::uint64_t now = mono_ms();
    int timeout = kIdleMs;
    for (std::size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      if (c.fd < 0) continue;
      const std::uint64_t idle = now - c.last_ms;
      if (idle >= static_cast<std::uint64_t>(kIdleMs)) {
        drop(c);
        continue;
      }
      timeout = std::min<int>(timeout, static_cast<int>(kIdleMs - idle));
      fds.push_back({c.fd, static_cast<short>(c.sent < c.out.size() ? POLLOUT : POLLIN), 0});
      which.push_back(i);
    }
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) fail(fmt::format("--listen: poll failed: {}", std::strerror(errno)));
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      bool resized = false;
      if (signals.drain(resized) != 0) return;  // SIGINT, SIGTERM or SIGHUP
    }
    if (fds[1].revents & POLLIN) {
      for (Connection& c : conns) {
        if (c.fd >= 0) continue;
        const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;  // EAGAIN, or a client that gave up: nothing to do
        c.fd = fd;
        c.last_ms = mono_ms();
        c.close_after = false;
        break;
      }
    }
    for (std::size_t k = 0; k < which.size(); ++k) {
      const short ev = fds[k + 2].revents;
      Connection& c = conns[which[k]];
      if (ev == 0 || c.fd < 0) continue;
      c.last_ms = mono_ms();
      if (c.sent < c.out.size()) {
        const ssize_t w = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (w <= 0) {
          drop(c);
          continue;
        }
        c.sent += static_cast<std::size_t>(w);
        if (c.sent < c.out.size()) continue;
        if (c.close_after) {
          drop(c);
          continue;
        }
        // Fall through: a pipelined request may already be in c.in.
      } else {
        char buf[4096];
        const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          drop(c);
          continue;
        }
        c.in.append(buf, static_cast<std::size_t>(r));
      }
      const std::size_t end = c.in.find("\r\n\r\n");
      if (end != std::string::npos) {
        answer(c, end);
      } else if (c.in.size() > kMaxRequest) {
        c.out = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        c.sent = 0;
        c.close_after = true;
        c.in.clear();
      }
    }
  }
}

}  // namespace fairlane::cli
