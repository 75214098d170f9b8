// A small HTTP/1.1 server for `stats --listen`: GET (or HEAD) /metrics
// answers with what a callback renders, anything else with 404 (405 for a
// method other than GET and HEAD).
//
// One thread, nonblocking sockets and poll(): concurrent scrapes are served
// side by side, none waits for a slow one. At most kMaxConnections are open
// at once (more wait in the listen backlog); a connection that sends no full
// request within kIdleMs is closed. Connections keep their buffers between
// requests (keep-alive), so a steady scraper costs no allocation per scrape
// once the buffers have grown to the exposition's size. Nothing is trusted
// from a client: a request head is read up to kMaxRequest bytes, then
// refused (431).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fairlane::cli {

class SignalPipe;

struct ListenAddress {
  std::string host;        // a name, an IPv4 address, or an IPv6 address (given in [brackets])
  std::uint16_t port = 0;  // 0: any free port (the server says which)
};
// HOST:PORT or [IPv6]:PORT; throws cli::Failure naming --listen.
ListenAddress parse_listen(std::string_view text);

class MetricsServer {
 public:
  static constexpr std::size_t kMaxConnections = 32;
  static constexpr std::size_t kMaxRequest = 16 * 1024;
  static constexpr int kIdleMs = 30'000;

  // Fills `body` with the exposition; returns the HTTP status (200, or 503
  // with a one-line reason in `body` when the queue cannot be read).
  using Render = std::function<int(std::string& body)>;

  // Binds and listens, or throws cli::Failure.
  MetricsServer(const ListenAddress& at, Render render);
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer();

  // "HOST:PORT" as bound (the real port when 0 was asked for).
  const std::string& bound() const noexcept { return bound_; }

  // Serves until SIGINT or SIGTERM arrives on `signals`. With log_requests,
  // one line per answered request on stdout ("GET /metrics 200 1234").
  void run(SignalPipe& signals, bool log_requests);

 private:
  int fd_ = -1;
  std::string bound_;
  Render render_;
};

}  // namespace fairlane::cli
