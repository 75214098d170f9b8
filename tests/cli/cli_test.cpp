// The `fairlane` tool, run as a child process (posix_spawn, no shell):
// exit status, stdout and stderr for bad input and a happy path.
//
// Exit status contract: 0 success, 1 nothing (empty claim, unknown job,
// stale token), 2 error with one line on stderr.
#include "test_support.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <atomic>

extern char** environ;

namespace fairlane {
namespace {

using test::describe;
using test::SegmentGuard;
using test::shm_path;
using test::TempDir;
using test::unique_segment_name;

#ifndef FAIRLANE_CLI_PATH
#error "FAIRLANE_CLI_PATH must name the fairlane tool"
#endif

using CliRun = test::ProgramRun;

CliRun run_cli(const std::vector<std::string>& args) { return test::run_program(FAIRLANE_CLI_PATH, args); }

std::string show(const CliRun& r) { return "exit " + std::to_string(r.exit_code) + "\nstdout: " + r.out + "\nstderr: " + r.err; }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// An error: exit 2 and exactly one non-empty line on stderr, prefixed "fairlane: ".
void expect_error(const CliRun& r, std::string_view must_mention = {}) {
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_FALSE(trim(r.err).empty()) << show(r);
  EXPECT_EQ(trim(r.err).find('\n'), std::string::npos) << "more than one line on stderr: " << show(r);
  EXPECT_EQ(r.err.rfind("fairlane: ", 0), 0U) << show(r);
  if (!must_mention.empty()) {
    EXPECT_NE(r.err.find(must_mention), std::string::npos) << show(r);
  }
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { guard_ = std::make_unique<SegmentGuard>(unique_segment_name()); }
  void TearDown() override { guard_.reset(); }
  const std::string& seg() const { return guard_->name(); }
  void create(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"create", seg(), "--jobs", "64", "--lanes", "8", "--payload-bytes", "32"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << show(r);
  }
  std::unique_ptr<SegmentGuard> guard_;
};

// ---------------------------------------------------------------- bad input

TEST_F(Cli, MalformedIdsAreErrors) {
  create();
  struct Case {
    const char* id;
    const char* mention;
  };
  for (const Case& c : {Case{"JOB123", "JOB123"}, Case{"job0000000000A", "job0000000000A"},
                        Case{"JOB0000000000-", "JOB0000000000-"}, Case{"JOBzzzzzzzzzzz", "JOBzzzzzzzzzzz"},
                        Case{"JOB0000000000AB", "JOB0000000000AB"}}) {
    SCOPED_TRACE(c.id);
    expect_error(run_cli({"complete", seg(), c.id, "1"}), c.mention);
    expect_error(run_cli({"enqueue", seg(), "TEN00000000001", c.id, "--payload", "x"}), c.mention);
    expect_error(run_cli({"enqueue", seg(), c.id, "--mint", "--payload", "x"}), c.mention);  // as a group
  }
  // Nothing was admitted by any of them.
  auto q = Queue::open(seg());
  ASSERT_TRUE(q.ok()) << describe(q.error());
  EXPECT_EQ(q->snapshot().pending, 0U);
}

TEST_F(Cli, BadNumbersAreErrors) {
  create();
  expect_error(run_cli({"claim", seg(), "--lease", "-5"}));
  expect_error(run_cli({"claim", seg(), "--lease", "abc"}));
  expect_error(run_cli({"complete", seg(), "JOB00000000001", "x1"}));
  expect_error(run_cli({"limit", seg(), "TEN00000000001", "99999999999"}));
}

TEST_F(Cli, KindMismatchIsAnError) {
  create();
  expect_error(run_cli({"enqueue", seg(), "TEN00000000001", "USR0KHTOWnGLuC", "--payload", "x"}), "USR");
}

TEST_F(Cli, OversizePayloadIsAnError) {
  create();  // 32-byte payloads
  expect_error(run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", std::string(33, 'x')}));
  const CliRun ok = run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", std::string(32, 'x')});
  EXPECT_EQ(ok.exit_code, 0) << show(ok);
  auto q = Queue::open(seg());
  ASSERT_TRUE(q.ok()) << describe(q.error());
  EXPECT_EQ(q->snapshot().pending, 1U);
}

// A full queue: `enqueue` says so at once; with --wait it says so after
// waiting (and names the wait), or, when a consumer frees a slot while it
// waits, admits the job.
TEST_F(Cli, EnqueueWaitsOutAFullQueueWithWait) {
  create();
  auto q = Queue::open(seg());
  ASSERT_TRUE(q.ok()) << describe(q.error());
  const BrandedId g = BrandedId::make("TEN", 1);
  std::uint32_t n = 0;
  while (n < 65 && q->enqueue(g, q->mint(), "x") == EnqueueStatus::enqueued) ++n;
  ASSERT_EQ(n, 64u);
  expect_error(run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", "y"}), "full");
  const CliRun late = run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", "y", "--wait", "50"});
  expect_error(late, "waited 50 ms");
  EXPECT_EQ(q->snapshot().pending, 64u);

  std::atomic<bool> freed{false};
  std::thread consumer([&] {
    if (!test::eventually([&] { return q->snapshot().producers_parked == 1; })) return;
    Lease l;
    if (q->claim(l, 60000) && q->complete(l.id, l.token) == AckStatus::ok) freed = true;
  });
  const CliRun ok = run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", "y", "--wait", "60000"});
  consumer.join();
  EXPECT_TRUE(freed.load()) << "the CLI's producer never parked";
  EXPECT_EQ(ok.exit_code, 0) << show(ok);
  EXPECT_EQ(ok.out.rfind("enqueued ", 0), 0u) << ok.out;
  EXPECT_EQ(q->snapshot().pending, 64u);
}

TEST_F(Cli, MissingSegmentIsAnError) {
  for (const char* cmd : {"inspect", "tick", "mint"}) {
    SCOPED_TRACE(cmd);
    expect_error(run_cli({cmd, seg()}), seg());
  }
  expect_error(run_cli({"claim", seg()}), seg());
  expect_error(run_cli({"enqueue", seg(), "default", "--mint"}), seg());
  expect_error(run_cli({"destroy", seg()}), seg());
}

TEST_F(Cli, WrongLayoutSegmentIsAnError) {
  {
    const int fd = ::open(shm_path(seg()).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    const std::string junk(8192, 'Z');
    ASSERT_EQ(::write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    ::close(fd);
  }
  expect_error(run_cli({"inspect", seg()}), seg());
  expect_error(run_cli({"claim", seg()}), seg());
  expect_error(run_cli({"enqueue", seg(), "default", "--mint"}), seg());
  // The tool refused it and did not replace it.
  EXPECT_EQ(std::filesystem::file_size(shm_path(seg())), 8192U);
}

TEST_F(Cli, CreateTwiceAndBadOptionsAreErrors) {
  create();
  expect_error(run_cli({"create", seg()}), seg());
  SegmentGuard other(unique_segment_name("other"));
  expect_error(run_cli({"create", other.name(), "--jobs", "0"}));
  expect_error(run_cli({"create", other.name(), "--job-kind", "jo"}));
  expect_error(run_cli({"create", other.name(), "--node", "1024"}));
  EXPECT_FALSE(std::filesystem::exists(shm_path(other.name())));
}

TEST_F(Cli, UnknownCommandIsAnError) {
  expect_error(run_cli({"frobnicate", seg()}), "frobnicate");
  EXPECT_EQ(run_cli({}).exit_code, 2);
}

// ---------------------------------------------------------------- happy path

TEST_F(Cli, CreateEnqueueClaimComplete) {
  create();
  CliRun r = run_cli({"enqueue", seg(), "TEN00000000001", "--mint", "--payload", "hello world"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  // "enqueued <ID>"
  const std::string line = trim(r.out);
  ASSERT_EQ(line.rfind("enqueued ", 0), 0U) << show(r);
  const std::string id = line.substr(9);
  ASSERT_TRUE(BrandedId::parse(id).has_value()) << "not an id: " << id;
  EXPECT_EQ(BrandedId::parse(id)->kind(), "JOB");

  // The same id again is a duplicate, not an error.
  r = run_cli({"enqueue", seg(), "TEN00000000001", id, "--payload", "other"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(trim(r.out), "duplicate " + id);

  r = run_cli({"claim", seg(), "--lease", "60000"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  // "ID GROUP TOKEN PAYLOAD": the token is opaque; read it back.
  const std::string claimed = trim(r.out);
  ASSERT_EQ(claimed.rfind(id + " TEN00000000001 ", 0), 0u) << claimed;
  const std::string rest = claimed.substr(id.size() + 16);
  const std::string token = rest.substr(0, rest.find(' '));
  EXPECT_EQ(rest.substr(token.size()), " hello world");
  ASSERT_TRUE(parse_token(token).has_value()) << token;
  const std::string other_token = std::to_string(parse_token(token)->value + 1);

  // A stale token is "nothing" (1), the right one completes (0), again is gone (1).
  r = run_cli({"complete", seg(), id, other_token});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  r = run_cli({"complete", seg(), id, token});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"complete", seg(), id, token});
  EXPECT_EQ(r.exit_code, 1) << show(r);

  // Empty queue: claim says nothing with exit 1.
  r = run_cli({"claim", seg()});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_TRUE(trim(r.out).empty()) << show(r);

  r = run_cli({"destroy", seg()});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
}

TEST_F(Cli, DefaultGroupAndClaimJson) {
  create();
  CliRun r = run_cli({"enqueue", seg(), "default", "--mint", "--payload", "d"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"claim", seg(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << show(r);
  EXPECT_EQ(j.at("group"), "default") << "one name for the default lane in every output";
  EXPECT_EQ(j.at("attempt"), 1);
  EXPECT_EQ(j.at("payload"), "d");
}

TEST_F(Cli, InspectJsonShowsRingAndLanes) {
  create();
  // Lanes join the ring in the order they became serviceable.
  for (const char* g : {"TEN00000000001", "TEN00000000002", "TEN00000000001"}) {
    const CliRun r = run_cli({"enqueue", seg(), g, "--mint", "--payload", "x"});
    ASSERT_EQ(r.exit_code, 0) << show(r);
  }
  ASSERT_EQ(run_cli({"limit", seg(), "TEN00000000002", "3"}).exit_code, 0);
  ASSERT_EQ(run_cli({"pause", seg(), "TEN00000000003"}).exit_code, 0);
  const CliRun r = run_cli({"inspect", seg(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "not JSON: " << show(r);
  ASSERT_TRUE(j.contains("ring")) << r.out;
  ASSERT_TRUE(j.contains("lanes")) << r.out;
  EXPECT_EQ(j["ring"], nlohmann::json::array({"TEN00000000001", "TEN00000000002"})) << r.out;
  std::map<std::string, nlohmann::json> lanes;
  for (const auto& l : j["lanes"]) lanes[l.at("group").get<std::string>()] = l;
  ASSERT_TRUE(lanes.count("TEN00000000001")) << r.out;
  ASSERT_TRUE(lanes.count("TEN00000000002")) << r.out;
  ASSERT_TRUE(lanes.count("TEN00000000003")) << r.out;
  EXPECT_EQ(lanes["TEN00000000001"].at("depth"), 2);
  EXPECT_EQ(lanes["TEN00000000002"].at("depth"), 1);
  EXPECT_EQ(lanes["TEN00000000002"].at("limit"), 3);
  EXPECT_EQ(lanes["TEN00000000003"].at("paused"), true);
  EXPECT_EQ(lanes["TEN00000000003"].at("ringed"), false);
  EXPECT_EQ(lanes["TEN00000000001"].at("ringed"), true);

  // The human form works too.
  const CliRun t = run_cli({"inspect", seg()});
  EXPECT_EQ(t.exit_code, 0) << show(t);
  EXPECT_NE(t.out.find("TEN00000000001"), std::string::npos) << show(t);
}

}  // namespace
}  // namespace fairlane
