// The `fairlane` tool over valkey://HOST:PORT/QUEUE: the same commands, exit
// codes and messages as over a segment, run as a child process against the
// conformance server (FAIRLANE_VALKEY_URL, or a private redis-server).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <fairlane/valkey.hpp>

#include "line_child.hpp"
#include "redis_server.hpp"
#include "test_support.hpp"

extern char** environ;

namespace fairlane {
namespace {

using CliRun = test::ProgramRun;

CliRun run_cli(const std::vector<std::string>& args) { return test::run_program(FAIRLANE_CLI_PATH, args); }

std::string show(const CliRun& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(first_line(s));
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

class ValkeyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& t = test::valkey_target();
    if (!t.available) FAIRLANE_SKIP_OR_FAIL("no Valkey server for these cases: " + t.skip_reason);
    url_ = t.url(test::unique_segment_name());
    auto b = ValkeyBackend::open(url_);
    ASSERT_TRUE(b.ok()) << b.error().message;
    (*b)->remove_queue();
  }
  void TearDown() override {
    if (url_.empty()) return;
    auto b = ValkeyBackend::open(url_);
    if (b.ok()) (*b)->remove_queue();
  }
  std::string url_;
};

TEST_F(ValkeyCli, EveryQueueCommandTakesAValkeyUrl) {
  CliRun r = run_cli({"enqueue", url_, "TEN00000000001", "--mint", "--payload", "hello"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto w = words(r.out);
  ASSERT_EQ(w.size(), 2U) << show(r);
  EXPECT_EQ(w[0], "enqueued");
  const std::string job = w[1];
  EXPECT_EQ(job.substr(0, 3), "JOB");

  r = run_cli({"enqueue", url_, "TEN00000000001", job, "--payload", "again"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out), "duplicate " + job);

  r = run_cli({"depth", url_, "TEN00000000001"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out), "1");

  r = run_cli({"claim", url_, "--lease", "30000"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  ASSERT_EQ(words(r.out).size(), 4U) << show(r);
  const std::string token = words(r.out)[2];  // ID GROUP TOKEN PAYLOAD: the token is opaque
  EXPECT_EQ(first_line(r.out), job + " TEN00000000001 " + token + " hello");

  r = run_cli({"extend", url_, job, token, "60000"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"complete", url_, job, "7"});
  EXPECT_EQ(r.exit_code, 1) << show(r);  // stale token: nothing
  EXPECT_NE(r.err.find("stale"), std::string::npos) << show(r);
  r = run_cli({"complete", url_, job, token});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out), "completed " + job);
  r = run_cli({"complete", url_, job, token});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_NE(r.err.find("gone"), std::string::npos) << show(r);

  r = run_cli({"claim", url_});
  EXPECT_EQ(r.exit_code, 1) << show(r);  // empty
  r = run_cli({"claim", url_, "--wait", "20"});
  EXPECT_EQ(r.exit_code, 1) << show(r);  // parked on BLPOP, timed out

  // fail: retry with backoff, then dead.
  r = run_cli({"enqueue", url_, "default", "--mint", "--payload", "flaky"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const std::string flaky = words(r.out)[1];
  r = run_cli({"claim", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto lease = nlohmann::json::parse(r.out);
  EXPECT_EQ(lease["id"], flaky);
  EXPECT_EQ(lease["group"], "default");
  const std::string t1 = lease["token"].is_string() ? lease["token"].get<std::string>() : lease["token"].dump();
  r = run_cli({"fail", url_, flaky, t1, "--delay", "0", "--max-attempts", "2", "--error", "boom"});
  EXPECT_EQ(first_line(r.out), "retrying " + flaky) << show(r);
  r = run_cli({"claim", url_});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  ASSERT_GE(words(r.out).size(), 3U) << show(r);
  r = run_cli({"fail", url_, flaky, words(r.out)[2], "--max-attempts", "2"});
  EXPECT_EQ(first_line(r.out), "dead " + flaky) << show(r);

  // Lane controls.
  EXPECT_EQ(run_cli({"pause", url_, "TEN00000000002"}).exit_code, 0);
  EXPECT_EQ(run_cli({"limit", url_, "TEN00000000002", "3"}).exit_code, 0);
  EXPECT_EQ(run_cli({"weight", url_, "TEN00000000002", "2"}).exit_code, 0);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(run_cli({"enqueue", url_, "TEN00000000002", "--mint"}).exit_code, 0);
  r = run_cli({"claim", url_});
  EXPECT_EQ(r.exit_code, 1) << "paused lane served: " << show(r);
  EXPECT_EQ(run_cli({"pause", url_}).exit_code, 0);  // the whole queue
  EXPECT_EQ(run_cli({"resume", url_, "TEN00000000002"}).exit_code, 0);
  EXPECT_EQ(run_cli({"claim", url_}).exit_code, 1);
  EXPECT_EQ(run_cli({"resume", url_}).exit_code, 0);

  r = run_cli({"inspect", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["backend"], "valkey");
  EXPECT_EQ(j["paused"], false);
  EXPECT_EQ(j["config"]["job_kind"], "JOB");
  EXPECT_EQ(j["jobs"]["pending"], 3);
  EXPECT_EQ(j["jobs"]["dead"], 1);
  bool found = false;
  for (const auto& l : j["lanes"]) {
    if (l["group"] != "TEN00000000002") continue;
    found = true;
    EXPECT_EQ(l["limit"], 3);
    EXPECT_EQ(l["weight"], 2);
    EXPECT_EQ(l["depth"], 3);
    EXPECT_EQ(l["ringed"], true);
  }
  EXPECT_TRUE(found) << r.out;

  r = run_cli({"inspect", url_});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out.rfind("valkey " + url_, 0), 0U) << r.out;
  EXPECT_NE(r.out.find("TEN00000000002"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("free"), std::string::npos) << r.out;

  r = run_cli({"drain", url_, "TEN00000000002"});
  EXPECT_EQ(first_line(r.out), "3") << show(r);
  r = run_cli({"tick", url_});
  EXPECT_EQ(first_line(r.out), "0") << show(r);
  r = run_cli({"mint", url_, "USR"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out).substr(0, 3), "USR");
  EXPECT_TRUE(BrandedId::parse(first_line(r.out)).has_value()) << r.out;
}

TEST_F(ValkeyCli, RefusalsAreTheSegmentsMessages) {
  CliRun r = run_cli({"enqueue", url_, "TEN00000000001", "USR0KHTOWnGLuC"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("USR"), std::string::npos) << show(r);
  r = run_cli({"enqueue", url_, "TEN00000000001", "--mint", "--payload", std::string(257, 'x')});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("larger than the 256 bytes"), std::string::npos) << show(r);
}

// stats, inspect and watch on a Valkey queue: the fields Valkey has, and
// what only a segment keeps (process records, wait histograms, a fixed
// capacity) marked absent rather than shown as zero.
TEST_F(ValkeyCli, TheViewsShowWhatValkeyHasAndMarkTheRestAbsent) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run_cli({"enqueue", url_, "TEN00000000001", "--mint"}).exit_code, 0);
  ASSERT_EQ(run_cli({"limit", url_, "TEN00000000001", "5"}).exit_code, 0);
  CliRun r = run_cli({"claim", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);

  r = run_cli({"stats", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["counters"]["enqueued"], 3);
  EXPECT_EQ(j["counters"]["claimed"], 1);
  EXPECT_EQ(j["jobs"]["pending"], 2);
  EXPECT_EQ(j["jobs"]["leased"], 1);
  EXPECT_TRUE(j["jobs"]["capacity"].is_null()) << "no fixed capacity: " << r.out;
  EXPECT_TRUE(j["processes"].is_null()) << "no process records: " << r.out;
  ASSERT_FALSE(j["lanes"].empty()) << r.out;
  for (const auto& l : j["lanes"]) {
    EXPECT_TRUE(l["wait"].is_null()) << "no wait histograms: " << l.dump();
    if (l["group"] == "TEN00000000001") {
      EXPECT_EQ(l["limit"], 5);
      EXPECT_EQ(l["active"], 1);
      EXPECT_EQ(l["depth"], 2);
    }
  }

  r = run_cli({"stats", url_, "--prometheus"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("fairlane_enqueued_total{segment=\"" + url_ + "\"} 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fairlane_lane_limit{segment=\"" + url_ + "\",group=\"TEN00000000001\"} 5"), std::string::npos)
      << r.out;
  for (const char* absent : {"fairlane_jobs_capacity", "fairlane_processes", "_wait_seconds", "fairlane_corruptions"})
    EXPECT_EQ(r.out.find(absent), std::string::npos) << absent << " on Valkey: " << r.out;

  r = run_cli({"stats", url_});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("no wait histograms"), std::string::npos) << r.out;

  r = run_cli({"inspect", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["processes"].is_null()) << r.out;
  EXPECT_TRUE(j["recovery"].is_null()) << r.out;
  r = run_cli({"inspect", url_});
  EXPECT_NE(r.out.find("keeps no process records"), std::string::npos) << r.out;

  r = run_cli({"watch", url_, "--once"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("TEN00000000001"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 pending"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("PROCESSES"), std::string::npos) << "Valkey has no process records: " << r.out;
}

TEST_F(ValkeyCli, DestroyRemovesEveryKeyOfTheQueueAndOnlyThose) {
  const std::string other = url_ + "_other";
  ASSERT_EQ(run_cli({"enqueue", other, "TEN00000000001", "--mint"}).exit_code, 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(run_cli({"enqueue", url_, "TEN0000000000" + std::to_string(i + 1), "--mint"}).exit_code, 0);
  CliRun r = run_cli({"destroy", url_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["status"], "destroyed");
  EXPECT_GT(j["keys"].get<std::uint64_t>(), 3u) << r.out;
  EXPECT_EQ(r.err, "") << show(r);
  EXPECT_EQ(first_line(run_cli({"depth", other, "TEN00000000001"}).out), "1") << "another queue's keys stay";
  r = run_cli({"stats", url_, "--json"});
  EXPECT_EQ(r.exit_code, 2) << "nothing of the queue is left: " << show(r);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << show(r);
  // Destroying it again finds nothing to destroy, as for a segment.
  r = run_cli({"destroy", url_});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << show(r);
  auto b = ValkeyBackend::open(other);
  if (b.ok()) (*b)->remove_queue();
}

// A mistyped queue name: every command but enqueue says the queue does not
// exist, as for a segment, and none of them writes a key; enqueue makes the
// queue, as EchoMQ clients do.
TEST_F(ValkeyCli, OnlyEnqueueMakesAQueueThatDoesNotExist) {
  const std::string typo = url_ + "_typo";
  const auto no_keys = [&] {
    ValkeyOptions look;
    look.create = false;
    auto b = ValkeyBackend::open(typo, look);
    return !b.ok() && b.error().code == Errc::not_found;
  };
  ASSERT_TRUE(no_keys()) << "a queue of that name exists already";
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"stats", typo},
           {"inspect", typo},
           {"depth", typo, "TEN00000000001"},
           {"jobs", typo},
           {"dead", typo, "list"},
           {"mint", typo},
           {"claim", typo},
           {"pause", typo, "TEN00000000001"},
           {"limit", typo, "TEN00000000001", "3"},
           {"tick", typo},
           {"destroy", typo}}) {
    CliRun r = run_cli(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd[0] << ": " << show(r);
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << cmd[0] << ": " << show(r);
    EXPECT_TRUE(no_keys()) << cmd[0] << " wrote a key of a queue that does not exist";
  }
  CliRun r = run_cli({"enqueue", typo, "TEN00000000001", "--mint"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_FALSE(no_keys());
  EXPECT_EQ(first_line(run_cli({"depth", typo, "TEN00000000001"}).out), "1");
  auto b = ValkeyBackend::open(typo);
  if (b.ok()) (*b)->remove_queue();
}

// needs the Valkey backend: job listings and dead letters (job, jobs, requeue_dead, purge_dead)
TEST_F(ValkeyCli, DeadLettersAndJobListingsOnValkey) {
  CliRun r = run_cli({"enqueue", url_, "TEN00000000001", "--mint", "--payload", "x", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const std::string id = nlohmann::json::parse(r.out)["id"];
  r = run_cli({"claim", url_, "--json"});
  const auto lease = nlohmann::json::parse(r.out);
  r = run_cli({"fail", url_, id, std::to_string(lease["token"].get<std::uint64_t>()), "--max-attempts", "1",
               "--error", "boom"});
  ASSERT_EQ(first_line(r.out), "dead " + id) << show(r);
  r = run_cli({"dead", url_, "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["jobs"].size(), 1u) << r.out;
  EXPECT_EQ(j["jobs"][0]["id"], id);
  EXPECT_EQ(j["jobs"][0]["last_error"], "boom");
  r = run_cli({"jobs", url_, "--state", "dead", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)["jobs"].size(), 1u) << r.out;
  r = run_cli({"job", url_, id, "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)["state"], "dead") << r.out;
  EXPECT_EQ(run_cli({"dead", url_, "requeue", id}).exit_code, 0);
  EXPECT_EQ(first_line(run_cli({"depth", url_, "TEN00000000001"}).out), "1");
  r = run_cli({"claim", url_, "--json"});
  r = run_cli({"fail", url_, id, std::to_string(nlohmann::json::parse(r.out)["token"].get<std::uint64_t>()),
               "--max-attempts", "1"});
  r = run_cli({"dead", url_, "purge", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)["purged"], 1) << r.out;
  // dead list in id order, as EchoMQ's dead set.
}

// ------------------------------------------------ a password in the URL

// The password of valkey://USER:PASSWORD@HOST:PORT/QUEUE is a secret: the
// tool shows the queue as valkey://USER@HOST:PORT/QUEUE (without "USER@"
// for the default user given as ":PASSWORD@"), as describe() does, in every
// output (text, JSON, Prometheus labels, watch, --output files, the
// --listen exporter) and every message. The server here wants the password
// (--requirepass), so each command really authenticates with it.
constexpr const char* kSecret = "s3cret";

// `fairlane stats URL --listen 127.0.0.1:0`: its first line and one scrape.
struct Exported {
  std::string first_line, scrape, err;
};

Exported export_once(const std::string& url) {
  Exported e;
  test::TempDir dir;
  const auto err_file = dir.path() / "err";
  {
    std::optional<test::LineChild> server;
    try {
      server.emplace(FAIRLANE_CLI_PATH, std::vector<std::string>{"stats", url, "--listen", "127.0.0.1:0"}, err_file);
    } catch (const std::runtime_error& x) {
      e.err = x.what();
      return e;
    }
    // The first line: "serving http://127.0.0.1:PORT/metrics for NAME".
    e.first_line = server->line(std::chrono::seconds(30)).value_or("");
    const std::string want = "serving http://127.0.0.1:";
    if (e.first_line.rfind(want, 0) == 0) {
      const int port = std::atoi(e.first_line.c_str() + want.size());
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      timeval tv{30, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
          char b[8192];
          for (ssize_t n; (n = ::recv(fd, b, sizeof b, 0)) > 0;) e.scrape.append(b, static_cast<std::size_t>(n));
        }
      }
      ::close(fd);
    }
    ::kill(server->pid(), SIGTERM);  // our own child, by its pid
    server->wait();
  }
  e.err = test::slurp_file(err_file);
  return e;
}

class ValkeyCliPassword : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = test::RedisServer::start(FAIRLANE_REDIS_SERVER, error, 0, {"--requirepass", kSecret});
    if (!server_) FAIRLANE_SKIP_OR_FAIL(error);
    hostport_ = "127.0.0.1:" + std::to_string(server_->port());
    queue_ = test::unique_segment_name();
  }
  void TearDown() override {
    if (!server_) return;
    ValkeyOptions o;
    o.force = true;
    auto b = ValkeyBackend::open("valkey://:" + std::string(kSecret) + "@" + hostport_ + "/" + queue_, o);
    if (b.ok()) (*b)->remove_queue();
  }

  // Runs the tool and checks that the password is nowhere in what it said.
  CliRun run(const std::vector<std::string>& args) {
    CliRun r = run_cli(args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(r.out.find(kSecret), std::string::npos) << "the password on stdout of: " << cmd << "\n" << show(r);
    EXPECT_EQ(r.err.find(kSecret), std::string::npos) << "the password on stderr of: " << cmd << "\n" << show(r);
    return r;
  }

  std::unique_ptr<test::RedisServer> server_;
  std::string hostport_, queue_;
};

TEST_F(ValkeyCliPassword, NoCommandShowsThePassword) {
  const std::string url = "valkey://default:" + std::string(kSecret) + "@" + hostport_ + "/" + queue_;
  const std::string shown = "valkey://default@" + hostport_ + "/" + queue_;
  const std::string nouser_url = "valkey://:" + std::string(kSecret) + "@" + hostport_ + "/" + queue_;
  const std::string nouser_shown = "valkey://" + hostport_ + "/" + queue_;
  test::TempDir dir;
  const std::string seg = test::unique_segment_name("restored");
  test::SegmentGuard guard(seg);

  // Jobs in every state the views show: one dead (with an error), one pending.
  CliRun r = run({"enqueue", url, "TEN00000000001", "--mint", "--payload", "x", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const std::string id = nlohmann::json::parse(r.out)["id"];
  r = run({"claim", url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  r = run({"fail", url, id, std::to_string(nlohmann::json::parse(r.out)["token"].get<std::uint64_t>()),
           "--max-attempts", "1", "--error", "boom"});
  ASSERT_EQ(first_line(r.out), "dead " + id) << show(r);
  ASSERT_EQ(run({"enqueue", url, "TEN00000000002", "--mint"}).exit_code, 0);

  // The views: the queue's name without the password, in each form.
  r = run({"inspect", url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out.rfind("valkey " + shown + "  ", 0), 0U) << r.out;
  r = run({"inspect", url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], shown) << r.out;
  r = run({"stats", url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(first_line(r.out).find(shown), std::string::npos) << r.out;
  r = run({"stats", url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], shown) << r.out;
  r = run({"stats", url, "--prometheus"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("fairlane_enqueued_total{segment=\"" + shown + "\"} 2"), std::string::npos) << r.out;
  for (const char* format : {"--prometheus", "--json"}) {
    const auto file = dir.path() / (std::string("out") + format);
    r = run({"stats", url, format, "--output", file.string()});
    EXPECT_EQ(r.exit_code, 0) << show(r);
    const std::string written = test::slurp_file(file);
    EXPECT_NE(written.find(shown), std::string::npos) << written;
    EXPECT_EQ(written.find(kSecret), std::string::npos) << "the password in the --output file: " << written;
  }
  r = run({"watch", url, "--once"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  std::string unwrapped = r.out;  // a URL wider than the frame is read across its lines
  std::erase(unwrapped, '\n');
  EXPECT_NE(unwrapped.find(shown), std::string::npos) << r.out;
  r = run({"jobs", url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run({"jobs", url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], shown) << r.out;
  EXPECT_EQ(run({"job", url, id}).exit_code, 0);
  EXPECT_EQ(run({"job", url, id, "--json"}).exit_code, 0);
  r = run({"dead", url, "list"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run({"dead", url, "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], shown) << r.out;
  EXPECT_EQ(run({"depth", url, "TEN00000000002"}).exit_code, 0);

  // The messages that name the queue.
  r = run({"job", url, "JOB0000000000Z"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_NE(r.err.find("'" + shown + "'"), std::string::npos) << show(r);
  r = run({"dead", url, "requeue", "JOB0000000000Z"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  r = run({"enqueue", url, "TEN00000000001", "--mint", "--payload", std::string(300, 'x')});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("'" + shown + "'"), std::string::npos) << show(r);
  r = run({"enqueue", url, "TEN00000000001", "USR0KHTOWnGLuC"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  r = run({"pause", url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out), "paused queue " + shown) << show(r);
  r = run({"resume", url, "--json"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], shown) << r.out;
  EXPECT_EQ(run({"mint", url}).exit_code, 0);
  EXPECT_EQ(run({"tick", url}).exit_code, 0);
  // Commands for a segment only, and the demo's --segment, refuse a URL.
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"create", url}, {"fsck", url}, {"mirror", url}, {"restore", url, "--from", url},
           {"demo", "--segment", url}, {"demo-producer", url, "TEN00000000001", "1", "1", "--results", "x"}}) {
    r = run(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd[0] << ": " << show(r);
  }
  r = run({"inspect", "valkey://bob:" + std::string(kSecret) + "@127.0.0.1:0/q"});
  EXPECT_EQ(r.exit_code, 2) << show(r);

  // The exporter: its first line and the labels it serves.
  Exported e = export_once(url);
  EXPECT_EQ(e.first_line.find(kSecret), std::string::npos) << e.first_line;
  EXPECT_NE(e.first_line.find(" for " + shown), std::string::npos) << e.first_line << "\n" << e.err;
  EXPECT_NE(e.scrape.find("fairlane_enqueued_total{segment=\"" + shown + "\"} 2"), std::string::npos) << e.scrape;
  EXPECT_EQ(e.scrape.find(kSecret), std::string::npos) << e.scrape;
  EXPECT_EQ(e.err.find(kSecret), std::string::npos) << e.err;

  // The default user as ":PASSWORD@": no user to show.
  r = run({"inspect", nouser_url, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["segment"], nouser_shown) << r.out;
  r = run({"stats", nouser_url, "--prometheus"});
  EXPECT_NE(r.out.find("fairlane_enqueued_total{segment=\"" + nouser_shown + "\"} 2"), std::string::npos) << r.out;

  // restore, and the keyspace it then owns: read-only through the URL.
  r = run({"restore", seg, "--from", nouser_url, "--mirror", nouser_url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find(" from " + nouser_shown + ":"), std::string::npos) << show(r);
  r = run({"enqueue", nouser_url, "TEN00000000001", "--mint"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("'" + nouser_shown + "' is read-only"), std::string::npos) << show(r);
  r = run({"pause", url});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  r = run({"destroy", url});
  EXPECT_NE(r.exit_code, 0) << show(r);
  r = run({"destroy", url, "--force", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["queue"], shown) << r.out;
  r = run({"stats", url});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  r = run({"enqueue", url, "TEN00000000001", "--mint"});
  r = run({"destroy", url});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(first_line(r.out).rfind("destroyed " + shown + ":", 0), 0U) << show(r);
}

TEST(ValkeyCliErrors, UnreachableServerAndBadUrlAreExitTwo) {
  CliRun r = run_cli({"depth", "valkey://127.0.0.1:1/q", "default"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_EQ(r.err, "fairlane: valkey 127.0.0.1:1 unreachable: Connection refused\n") << show(r);
  r = run_cli({"inspect", "valkey://127.0.0.1:99999/q"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_EQ(r.err.rfind("fairlane: invalid Valkey URL", 0), 0U) << show(r);
}

}  // namespace
}  // namespace fairlane
