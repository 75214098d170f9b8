// `fairlane stats SEG --listen HOST:PORT`: /metrics over HTTP, as a
// Prometheus server scrapes it. The server runs as a child process; the
// tests talk HTTP to it over loopback, and one test has Debian's real
// `prometheus` scrape it and reads the value back through its query API.
#include "line_child.hpp"
#include "tool_runner.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

namespace fairlane {
namespace {

using test::group;
using test::SegmentGuard;
using test::unique_segment_name;


using Child = test::LineChild;

int connect_to(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{60, 0};  // a hang becomes a failed read, not a stuck test
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

bool send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

struct Response {
  int status = 0;
  std::string head, body;
  std::string header(std::string_view name) const {
    std::istringstream in(head);
    std::string l;
    while (std::getline(in, l)) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      if (l.size() > name.size() && strncasecmp(l.c_str(), std::string(name).c_str(), name.size()) == 0 &&
          l[name.size()] == ':')
        return l.substr(name.size() + 2);
    }
    return {};
  }
};

// Reads one response (by its Content-Length) from fd.
std::optional<Response> read_response(int fd, bool head_request = false) {
  std::string in;
  char b[8192];
  std::size_t end = std::string::npos;
  while ((end = in.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) return std::nullopt;
    in.append(b, static_cast<std::size_t>(n));
  }
  Response r;
  r.head = in.substr(0, end + 2);
  r.status = std::atoi(r.head.c_str() + 9);
  const std::size_t want = head_request ? 0 : std::stoul("0" + r.header("Content-Length"));
  r.body = in.substr(end + 4);
  while (r.body.size() < want) {
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n <= 0) return std::nullopt;
    r.body.append(b, static_cast<std::size_t>(n));
  }
  return r;
}

std::optional<Response> http_get(std::uint16_t port, const std::string& path, const std::string& method = "GET") {
  const int fd = connect_to(port);
  if (fd < 0) return std::nullopt;
  std::optional<Response> r;
  if (send_all(fd, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
    r = read_response(fd, method == "HEAD");
  ::close(fd);
  return r;
}

// The sample `name{...}` line's value in an exposition, or NAN.
double sample_value(const std::string& text, const std::string& prefix) {
  const std::size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return NAN;
  const std::size_t sp = text.find(' ', at + 1 + prefix.size());
  return std::strtod(text.c_str() + sp + 1, nullptr);
}

class MetricsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    QueueOptions o;
    o.jobs = 64;
    o.lanes = 8;
    o.payload_bytes = 16;
    auto r = Queue::create(seg(), o);
    ASSERT_TRUE(r.ok()) << test::describe(r.error());
    q_.emplace(std::move(r.value()));
    for (int i = 0; i < 10; ++i) ASSERT_EQ(q_->enqueue(group("TEN", 1 + i % 2), q_->mint(), "x"), EnqueueStatus::enqueued);
  }
  void TearDown() override {
    server_.reset();
    q_.reset();
    guard_.reset();
  }
  const std::string& seg() const { return guard_->name(); }

  // Starts `fairlane stats SEG --listen 127.0.0.1:0 --log-requests ...` and
  // reads the port from its first line.
  void serve(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"stats", seg(), "--listen", "127.0.0.1:0", "--log-requests"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<Child>(FAIRLANE_CLI_PATH, args, dir_.path() / "server.err");
    const auto first = server_->line();
    ASSERT_TRUE(first.has_value()) << "the server said nothing: " << test::slurp_file(dir_.path() / "server.err");
    const std::string want = "serving http://127.0.0.1:";
    ASSERT_EQ(first->rfind(want, 0), 0U) << *first;
    port_ = static_cast<std::uint16_t>(std::stoi(first->substr(want.size())));
    ASSERT_NE(port_, 0);
  }

  test::TempDir dir_;
  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
  std::unique_ptr<Child> server_;
  std::uint16_t port_ = 0;
};

TEST_F(MetricsHttp, ServesTheExpositionWithItsContentType) {
  serve();
  const auto r = http_get(port_, "/metrics");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200) << r->head;
  EXPECT_EQ(r->header("Content-Type").rfind("text/plain; version=0.0.4", 0), 0U) << r->head;
  EXPECT_EQ(sample_value(r->body, "fairlane_enqueued_total{segment=\"" + seg() + "\"}"), 10) << r->body;
  EXPECT_NE(r->body.find("# TYPE fairlane_wait_seconds histogram"), std::string::npos);

  // Each scrape reads the queue afresh.
  ASSERT_EQ(q_->enqueue(group("TEN", 3), q_->mint(), "x"), EnqueueStatus::enqueued);
  const auto again = http_get(port_, "/metrics?x=1");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(sample_value(again->body, "fairlane_enqueued_total{segment=\"" + seg() + "\"}"), 11);
}

// The exporter keeps the segment it opened mapped. Destroyed, that mapping
// is no longer the queue of that name: a scrape says 503 with one line
// (Prometheus marks the target down and its series stale) rather than the
// old numbers, and once a segment of that name exists again the scrapes
// read it, whether or not one came in between.
TEST_F(MetricsHttp, FollowsTheSegmentDestroyedAndCreatedAgainUnderItsName) {
  serve();
  const std::string capacity = "fairlane_jobs_capacity{segment=\"" + seg() + "\"}";
  const std::string enqueued = "fairlane_enqueued_total{segment=\"" + seg() + "\"}";
  auto r = http_get(port_, "/metrics");
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->status, 200) << r->head;
  EXPECT_EQ(sample_value(r->body, capacity), 64) << r->body;

  q_.reset();
  ASSERT_TRUE(Queue::remove(seg()).ok());
  r = http_get(port_, "/metrics");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 503) << r->head << r->body;
  EXPECT_EQ(r->body.find("fairlane_"), std::string::npos) << "series of a removed segment: " << r->body;
  EXPECT_NE(r->body.find("'" + seg() + "' is gone"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find('\n'), r->body.size() - 1) << "one line: " << r->body;

  QueueOptions o;
  o.jobs = 77;
  o.lanes = 8;
  o.payload_bytes = 16;
  {
    auto again = Queue::create(seg(), o);
    ASSERT_TRUE(again.ok()) << test::describe(again.error());
    ASSERT_EQ(again->enqueue(group("TEN", 1), again->mint(), "x"), EnqueueStatus::enqueued);
  }
  r = http_get(port_, "/metrics");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200) << r->head << r->body;
  EXPECT_EQ(sample_value(r->body, capacity), 77) << r->body;
  EXPECT_EQ(sample_value(r->body, enqueued), 1) << r->body;

  // Replaced between two scrapes (no scrape saw it missing): the next one
  // reads the new segment all the same.
  ASSERT_TRUE(Queue::remove(seg()).ok());
  o.jobs = 99;
  ASSERT_TRUE(Queue::create(seg(), o).ok());
  r = http_get(port_, "/metrics");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200) << r->head << r->body;
  EXPECT_EQ(sample_value(r->body, capacity), 99) << r->body;
  EXPECT_EQ(sample_value(r->body, enqueued), 0) << r->body;
}

TEST_F(MetricsHttp, AnswersNotFoundElsewhereAndRefusesOtherMethods) {
  serve();
  for (const char* path : {"/", "/metricsx", "/favicon.ico", "/metrics/"}) {
    SCOPED_TRACE(path);
    const auto r = http_get(port_, path);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 404);
  }
  auto r = http_get(port_, "/metrics", "POST");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 405);
  r = http_get(port_, "/metrics", "HEAD");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->body.empty());
  // A request that is not HTTP: 400, and the server goes on.
  const int fd = connect_to(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "hello\r\n\r\n"));
  const auto bad = read_response(fd);
  ::close(fd);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(http_get(port_, "/metrics")->status, 200);
}

TEST_F(MetricsHttp, ServesConcurrentScrapesAndKeepsConnectionsAlive) {
  serve();
  // A client that sends half a request and waits holds nobody up.
  const int slow = connect_to(port_);
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(send_all(slow, "GET /met"));
  // Eight scrapers send before any of them reads.
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(connect_to(port_));
    ASSERT_GE(fds.back(), 0);
    ASSERT_TRUE(send_all(fds.back(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  }
  for (int fd : fds) {
    const auto r = read_response(fd);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("Connection"), "keep-alive");
    // The same connection serves the next scrape.
    ASSERT_TRUE(send_all(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    const auto second = read_response(fd);
    ASSERT_TRUE(second.has_value());
    EXPECT_EQ(second->status, 200);
    EXPECT_EQ(second->body.size(), r->body.size());
    ::close(fd);
  }
  ASSERT_TRUE(send_all(slow, "rics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  const auto late = read_response(slow);
  ::close(slow);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->status, 200);
}

TEST_F(MetricsHttp, StopsOnSigtermAndSigint) {
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig);
    serve();
    ASSERT_EQ(http_get(port_, "/metrics")->status, 200);
    ::kill(server_->pid(), sig);
    const int st = server_->wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
    server_.reset();
  }
}

TEST_F(MetricsHttp, RefusesBadListenAddresses) {
  for (const char* bad : {"9464", "localhost:", ":9464", "127.0.0.1:65536", "127.0.0.1:http", "::1:9464"}) {
    SCOPED_TRACE(bad);
    const auto r = test::run_tool({"stats", seg(), "--listen", bad});
    EXPECT_EQ(r.exit_code, 2) << test::show(r);
    EXPECT_NE(r.err.find("--listen"), std::string::npos) << test::show(r);
  }
  auto r = test::run_tool({"stats", seg(), "--listen", "127.0.0.1:0", "--json"});
  EXPECT_EQ(r.exit_code, 2) << test::show(r);
  r = test::run_tool({"stats", seg(), "--log-requests"});
  EXPECT_EQ(r.exit_code, 2) << test::show(r);
}

// A free loopback port: bound, read back, closed (the server we start next
// takes it; nothing else on this machine is racing for it in a test run).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string url_encode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') out.push_back(static_cast<char>(c));
    else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

TEST_F(MetricsHttp, ARealPrometheusScrapesItAndAnswersQueries) {
  const std::string prometheus = "/usr/bin/prometheus";
  if (!std::filesystem::exists(prometheus))
    FAIRLANE_SKIP_OR_FAIL("no " + prometheus + " (Debian package prometheus; CI installs it)");
  serve();
  const std::uint16_t web = free_port();
  const auto config = dir_.path() / "prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        << "scrape_configs:\n  - job_name: fairlane\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << port_ << "']\n";
  Child prom(prometheus,
             {"--config.file=" + config.string(), "--storage.tsdb.path=" + (dir_.path() / "tsdb").string(),
              "--web.listen-address=127.0.0.1:" + std::to_string(web), "--log.level=warn"},
             dir_.path() / "prometheus.log");

  // Each scrape is a line of our server's request log; after each, ask
  // Prometheus for the value until it has ingested one.
  const std::string query =
      "/api/v1/query?query=" + url_encode("fairlane_enqueued_total{segment=\"" + seg() + "\",job=\"fairlane\"}");
  std::string last;
  bool found = false;
  for (int scrapes = 0; scrapes < 30 && !found; ++scrapes) {
    const auto logged = server_->line();
    ASSERT_TRUE(logged.has_value()) << "Prometheus never scraped: " << test::slurp_file(dir_.path() / "prometheus.log");
    if (logged->rfind("GET /metrics 200", 0) != 0) continue;
    const auto r = http_get(web, query);
    if (!r || r->status != 200) continue;  // its web side may still be starting
    last = r->body;
    const auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty()) continue;
    EXPECT_EQ(j["data"]["result"][0]["value"][1], "10") << r->body;
    EXPECT_EQ(j["data"]["result"][0]["metric"]["segment"], seg());
    found = true;
  }
  EXPECT_TRUE(found) << "no sample came back; last answer: " << last;
  ::kill(prom.pid(), SIGTERM);  // our own child, by its pid
  prom.wait();
}

}  // namespace
}  // namespace fairlane
