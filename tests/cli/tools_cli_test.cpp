// The tool as a user drives it, second round: fencing tokens through the
// shell, release, destroy's refusals, create --processes, a job's retry
// policy and payload file, `fairlane job`, one name for the default lane,
// the lanes_full message, segment-only commands on a URL, and what the
// tools show of the processes attached.
#include "cli_support.hpp"
#include "raw_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

namespace fairlane {
namespace {

using test::cli_json;
using test::CliRun;
using test::contains;
using test::expect_error;
using test::run_cli;
using test::SegmentGuard;
using test::shm_path;
using test::show;
using test::TempDir;
using test::unique_segment_name;

class ToolsCli : public ::testing::Test {
 protected:
  void SetUp() override { guard_ = std::make_unique<SegmentGuard>(unique_segment_name()); }
  void TearDown() override { guard_.reset(); }
  const std::string& seg() const { return guard_->name(); }
  void create(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"create", seg(), "--jobs", "64", "--lanes", "8", "--payload-bytes", "512"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << show(r);
  }
  std::string enqueue(const std::string& group, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"enqueue", seg(), group, "--mint", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto j = cli_json(args);
    EXPECT_EQ(j.value("status", ""), "enqueued") << j.dump();
    return j.value("id", "");
  }
  nlohmann::json claim() { return cli_json({"claim", seg(), "--json", "--lease", "60000"}); }
  std::uint64_t pending() {
    auto q = Queue::open(seg(), Queue::Attach::observer);
    EXPECT_TRUE(q.ok());
    return q ? q->snapshot().pending : 0;
  }
  std::unique_ptr<SegmentGuard> guard_;
};

// ---------------------------------------------------------------- tokens

TEST_F(ToolsCli, TokenRoundTripsThroughTheShell) {
  create();
  const std::string id = enqueue("TEN00000000001", {"--payload", "work"});

  // Plain claim: "ID GROUP TOKEN PAYLOAD".
  CliRun r = run_cli({"claim", seg(), "--lease", "60000"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  std::istringstream fields(r.out);
  std::string got_id, got_group, token, payload;
  fields >> got_id >> got_group >> token >> payload;
  EXPECT_EQ(got_id, id);
  EXPECT_EQ(got_group, "TEN00000000001");
  EXPECT_EQ(payload, "work");
  ASSERT_TRUE(parse_token(token).has_value()) << "not a token: " << token;
  const std::string stale = std::to_string(parse_token(token)->value + 1000);

  // extend with the printed token: ok; with another: stale, exit 1, nothing changed.
  r = run_cli({"extend", seg(), id, token, "90000", "--json"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"extend", seg(), id, stale, "90000", "--json"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("status"), "stale");
  EXPECT_TRUE(contains(r.err, "stale token")) << show(r);
  for (const char* op : {"complete", "release", "fail"}) {
    SCOPED_TRACE(op);
    r = run_cli({op, seg(), id, stale});
    EXPECT_EQ(r.exit_code, 1) << show(r);
  }

  // fail with the token: back for another attempt; the old token is dead.
  r = run_cli({"fail", seg(), id, token, "--delay", "0", "--max-attempts", "5", "--error", "try again", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("status"), "retrying");
  EXPECT_EQ(run_cli({"complete", seg(), id, token}).exit_code, 1) << "a token outlives its lease";

  ASSERT_EQ(run_cli({"tick", seg()}).exit_code, 0);
  nlohmann::json j = claim();
  EXPECT_EQ(j.at("id"), id);
  EXPECT_EQ(j.at("attempt"), 2) << j.dump();
  ASSERT_TRUE(j.at("token").is_number_unsigned()) << j.dump();
  const std::string second = std::to_string(j.at("token").get<std::uint64_t>());
  EXPECT_NE(second, token);

  // release with it: the job is claimable at once, the token is dead.
  r = run_cli({"release", seg(), id, second, "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const auto rel = nlohmann::json::parse(r.out);
  EXPECT_EQ(rel.at("status"), "released");
  EXPECT_EQ(rel.at("id"), id);
  EXPECT_EQ(rel.at("token"), j.at("token"));
  EXPECT_EQ(run_cli({"complete", seg(), id, second}).exit_code, 1) << "a released token is stale";

  j = claim();
  EXPECT_EQ(j.at("id"), id);
  const std::string third = std::to_string(j.at("token").get<std::uint64_t>());
  r = run_cli({"complete", seg(), id, third, "--json"});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"complete", seg(), id, third, "--json"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("status"), "gone");
}

TEST_F(ToolsCli, ReleaseKeepsTheAttempt) {
  create();
  const std::string id = enqueue("TEN00000000001");
  nlohmann::json j = claim();
  ASSERT_EQ(run_cli({"release", seg(), id, std::to_string(j.at("token").get<std::uint64_t>())}).exit_code, 0);
  j = claim();
  EXPECT_EQ(j.at("id"), id);
  EXPECT_EQ(j.at("attempt"), 1) << "a release is not a failed delivery";
}

TEST_F(ToolsCli, ReleaseIsDocumentedAndChecksItsArguments) {
  const CliRun help = run_cli({"release", "--help"});
  EXPECT_EQ(help.exit_code, 0) << show(help);
  EXPECT_TRUE(contains(help.out, "TOKEN")) << help.out;
  EXPECT_TRUE(contains(help.out, "attempt count unchanged")) << help.out;
  create();
  expect_error(run_cli({"release", seg(), "JOB00000000001"}), "TOKEN");
  expect_error(run_cli({"release", seg(), "JOB00000000001", "0"}), "TOKEN");
  expect_error(run_cli({"release", seg(), "JOB00000000001", "-3"}), "TOKEN");
  expect_error(run_cli({"release", seg(), "nope", "1"}), "nope");
  EXPECT_EQ(run_cli({"release", seg(), "JOB00000000001", "1"}).exit_code, 1) << "no such job: nothing";
}

// ---------------------------------------------------------------- destroy

// Nor one that begins with zeros, as another program's segment may (its
// counters at 0): a fairlane creator marks its file before it sizes it
// (kMagicMaking), so a sized file of zeros is none of its. Before
// 2026-12-08 such a file was taken for an unfinished segment and removed.
TEST_F(ToolsCli, DestroyRefusesAFileThatIsNotASegment) {
  std::string zeros_then_data(8192, '\0');
  zeros_then_data.replace(64, 5, "data!");
  for (const std::string& bytes : {std::string("hello, I am somebody's file\n"), std::string(8192, 'Z'),
                                   std::string(8192, '\0'), zeros_then_data}) {
    {
      std::ofstream f(shm_path(seg()), std::ios::binary);
      f << bytes;
    }
    expect_error(run_cli({"destroy", seg()}), "not a fairlane segment");
    expect_error(run_cli({"destroy", seg(), "--force"}), "not a fairlane segment");
    EXPECT_TRUE(std::filesystem::exists(shm_path(seg()))) << "nothing removed";
    EXPECT_EQ(std::filesystem::file_size(shm_path(seg())), bytes.size());
    std::filesystem::remove(shm_path(seg()));
  }
  expect_error(run_cli({"destroy", seg()}), "does not exist");
}

TEST_F(ToolsCli, DestroyRefusesASegmentInUseAndNamesWhoUnlessForced) {
  create();
  auto q = Queue::open(seg());  // this test process: attached and alive
  ASSERT_TRUE(q.ok());
  const CliRun r = run_cli({"destroy", seg()});
  expect_error(r, "pid " + std::to_string(::getpid()));
  EXPECT_TRUE(contains(r.err, "--force")) << show(r);
  EXPECT_TRUE(contains(r.err, "alive")) << show(r);
  EXPECT_TRUE(std::filesystem::exists(shm_path(seg()))) << "nothing removed";
  EXPECT_EQ(q->snapshot().jobs_capacity, 64U) << "the attached process goes on as before";

  const CliRun forced = run_cli({"destroy", seg(), "--force", "--json"});
  ASSERT_EQ(forced.exit_code, 0) << show(forced);
  EXPECT_EQ(nlohmann::json::parse(forced.out).at("status"), "destroyed");
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
}

TEST_F(ToolsCli, DestroyDoesNotCountItselfNorADetachedProcess) {
  create();
  {
    auto q = Queue::open(seg());
    ASSERT_TRUE(q.ok());
  }  // detached again
  const CliRun r = run_cli({"destroy", seg()});
  EXPECT_EQ(r.exit_code, 0) << show(r);
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
}

TEST_F(ToolsCli, DestroyStillRemovesOurOwnBrokenSegments) {
  struct Case {
    const char* what;
    std::function<void()> damage;
  };
  const Case cases[] = {
      {"empty: the creator died before sizing it", [&] { std::ofstream(shm_path(seg()), std::ios::binary); }},
      {"never finished: the creator's mark, not yet the magic",
       [&] {
         std::string bytes(8192, '\0');
         std::memcpy(bytes.data(), &detail::kMagicMaking, sizeof detail::kMagicMaking);
         std::ofstream(shm_path(seg()), std::ios::binary) << bytes;
       }},
      {"marked, not yet sized",
       [&] {
         std::ofstream(shm_path(seg()), std::ios::binary)
             << std::string(reinterpret_cast<const char*>(&detail::kMagicMaking), sizeof detail::kMagicMaking);
       }},
      {"another layout version",
       [&] {
         create();
         test::RawSegment raw(seg());
         raw.header().layout_version += 7;
       }},
      {"truncated",
       [&] {
         create();
         std::filesystem::resize_file(shm_path(seg()), std::filesystem::file_size(shm_path(seg())) / 2);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    c.damage();
    ASSERT_TRUE(std::filesystem::exists(shm_path(seg())));
    EXPECT_EQ(run_cli({"inspect", seg()}).exit_code, 2) << "broken indeed";
    const CliRun r = run_cli({"destroy", seg()});
    EXPECT_EQ(r.exit_code, 0) << show(r);
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
  }
}

// ---------------------------------------------------------------- create's and restore's mirror options

// The mirror's settings are checked with or without --mirror, and refused
// without it: asking for sync durability must not silently give no mirror.
TEST_F(ToolsCli, CreateRefusesMirrorOptionsWithoutMirrorAndBadValuesEitherWay) {
  struct Case {
    std::vector<std::string> option;
    std::string bad_value_says;  // empty: a good value, refused only for want of --mirror
  };
  const std::vector<Case> cases = {
      {{"--durability", "foo"}, "--durability must be async or sync, got 'foo'"},
      {{"--on-full", "foo"}, "--on-full must be refuse or drop, got 'foo'"},
      {{"--mirror-log", "3"}, "invalid --mirror-log '3'"},
      {{"--sync-timeout", "-1"}, "invalid --sync-timeout '-1'"},
      {{"--durability", "sync"}, ""},
      {{"--durability", "async"}, ""},  // the default, but given
      {{"--on-full", "drop"}, ""},
      {{"--mirror-log", "1024"}, ""},
      {{"--sync-timeout", "100"}, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.option[0] + " " + c.option[1]);
    std::vector<std::string> args{"create", seg(), "--jobs", "10"};
    args.insert(args.end(), c.option.begin(), c.option.end());
    expect_error(run_cli(args), c.bad_value_says.empty() ? c.option[0] + " needs --mirror" : c.bad_value_says);
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg()))) << "created anyway";
    if (c.bad_value_says.empty()) continue;
    args.insert(args.end(), {"--mirror", "valkey://127.0.0.1:1/q"});
    expect_error(run_cli(args), c.bad_value_says);
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg()))) << "created anyway";
  }
  // Several: the first named.
  expect_error(run_cli({"create", seg(), "--jobs", "10", "--on-full", "drop", "--durability", "sync"}), "needs --mirror");
  // With --mirror the settings are the segment's.
  create({"--mirror", "valkey://127.0.0.1:1/q", "--durability", "sync", "--on-full", "drop"});
  const auto j = cli_json({"inspect", seg(), "--json"});
  EXPECT_TRUE(contains(j.dump(), "\"sync\"")) << j.dump();
  EXPECT_TRUE(contains(j.dump(), "\"drop\"")) << j.dump();
}

// Without --mirror, restore takes the mirror Valkey kept with its settings:
// --durability and --on-full then would set nothing, and are refused; a bad
// value is refused either way. All before Valkey is asked (nothing listens
// on port 1).
TEST_F(ToolsCli, RestoreRefusesMirrorOptionsWithoutMirrorAndBadValuesEitherWay) {
  const std::string from = "valkey://127.0.0.1:1/q";
  for (const std::vector<std::string>& mirror : {std::vector<std::string>{}, {"--mirror", from}}) {
    SCOPED_TRACE(mirror.empty() ? "without --mirror" : "with --mirror");
    std::vector<std::string> base{"restore", seg(), "--from", from};
    base.insert(base.end(), mirror.begin(), mirror.end());
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> args = base;
      args.insert(args.end(), extra.begin(), extra.end());
      return run_cli(args);
    };
    expect_error(with({"--durability", "foo"}), "--durability must be async or sync, got 'foo'");
    expect_error(with({"--on-full", "foo"}), "--on-full must be refuse or drop, got 'foo'");
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
  }
  expect_error(run_cli({"restore", seg(), "--from", from, "--durability", "sync"}), "--durability needs --mirror");
  expect_error(run_cli({"restore", seg(), "--from", from, "--on-full", "drop"}), "--on-full needs --mirror");
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
}

// An argument given as '' (a variable left unset in a script) is refused
// by name, not taken for one left out: many are empty when not given,
// where empty means the default or all. Before, `pause SEG ''` paused the
// whole queue, `create --mirror ''` made a segment with no mirror, restore's
// `--mirror ''` restored with none and its `--durability ''` gave async.
// A payload may be empty.
TEST_F(ToolsCli, AnArgumentGivenEmptyIsRefusedByName) {
  const std::string from = "valkey://127.0.0.1:1/q";
  for (const char* option :
       {"--jobs", "--lanes", "--payload-bytes", "--job-kind", "--mode", "--mirror", "--durability", "--on-full"}) {
    SCOPED_TRACE(option);
    std::vector<std::string> args{"restore", seg(), "--from", from, option, ""};
    if (std::string_view(option) != "--mirror") args.insert(args.end(), {"--mirror", from});
    expect_error(run_cli(args), std::string("restore: ") + option + " given empty; nothing done");
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
  }
  expect_error(run_cli({"create", seg(), "--mirror", ""}), "create: --mirror given empty");
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
  create();
  for (const char* verb : {"pause", "resume"}) {
    SCOPED_TRACE(verb);
    expect_error(run_cli({verb, seg(), ""}), std::string(verb) + ": GROUP given empty");
  }
  EXPECT_EQ(cli_json({"inspect", seg(), "--json"})["paused"], false) << "the queue was paused";
  const CliRun e = run_cli({"enqueue", seg(), "ABC00000000001", "--mint", "--payload", ""});
  EXPECT_EQ(e.exit_code, 0) << show(e);
}

// ---------------------------------------------------------------- processes

TEST_F(ToolsCli, CreateProcessesIsCheckedAndShown) {
  for (const char* bad : {"0", "4097", "many", "-1"}) {
    SCOPED_TRACE(bad);
    expect_error(run_cli({"create", seg(), "--processes", bad}), "--processes");
    EXPECT_FALSE(std::filesystem::exists(shm_path(seg())));
  }
  create();
  const CliRun t = run_cli({"inspect", seg()});
  ASSERT_EQ(t.exit_code, 0) << show(t);
  EXPECT_TRUE(contains(t.out, "256 processes")) << t.out;
  EXPECT_TRUE(contains(t.out, "0 of 256 records")) << t.out;
  const auto j = cli_json({"inspect", seg(), "--json"});
  EXPECT_EQ(j.at("process_records").at("capacity"), 256) << j.dump();
}

TEST_F(ToolsCli, CreateProcessesSizesTheTable) {
  create({"--processes", "8"});
  const auto j = cli_json({"inspect", seg(), "--json"});
  EXPECT_EQ(j.at("process_records").at("capacity"), 8) << j.dump();
  EXPECT_EQ(j.at("config").at("processes"), 8) << j.dump();
}

TEST_F(ToolsCli, AFullProcessTableNamesTheFlag) {
  create();
  std::vector<Queue> handles;
  for (;;) {
    auto q = Queue::open(seg());
    if (!q) break;
    handles.push_back(std::move(q).value());
    ASSERT_LE(handles.size(), kMaxProcesses) << "the table never filled";
  }
  ASSERT_FALSE(handles.empty());
  const CliRun r = run_cli({"claim", seg()});
  expect_error(r, "--processes");
}

TEST_F(ToolsCli, ToolsThatOnlyLookNeedNoProcessRecord) {
  create();
  std::vector<Queue> handles;
  for (auto q = Queue::open(seg()); q; q = Queue::open(seg())) handles.push_back(std::move(q).value());
  for (const char* cmd : {"inspect", "stats", "jobs"}) {
    SCOPED_TRACE(cmd);
    const CliRun t = run_cli({cmd, seg()});
    EXPECT_EQ(t.exit_code, 0) << show(t);
  }
}

TEST_F(ToolsCli, ViewsAgreeOnTheProcessesAndLeaveThemselvesOut) {
  create();
  // Nobody attached: no view counts itself.
  auto s = cli_json({"stats", seg(), "--json"});
  EXPECT_TRUE(s.at("processes").empty()) << s.dump();
  auto i = cli_json({"inspect", seg(), "--json"});
  EXPECT_TRUE(i.at("processes").empty()) << i.dump();
  const CliRun w = run_cli({"watch", seg(), "--once"});
  EXPECT_TRUE(contains(w.out, "PROCESSES  (0 attached")) << w.out;

  auto q = Queue::open(seg());
  ASSERT_TRUE(q.ok());
  s = cli_json({"stats", seg(), "--json"});
  i = cli_json({"inspect", seg(), "--json"});
  ASSERT_EQ(s.at("processes").size(), 1U) << s.dump();
  ASSERT_EQ(i.at("processes").size(), 1U) << i.dump();
  EXPECT_EQ(s["processes"][0].at("pid"), ::getpid());
  EXPECT_EQ(i["processes"][0].at("pid"), ::getpid());
  EXPECT_EQ(i["processes"][0].at("state"), "alive");
  EXPECT_EQ(i["processes"][0].at("name"), s["processes"][0].at("name"));
}

TEST_F(ToolsCli, AStoppedProcessShowsAsStopped) {
  create();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto q = Queue::open(seg());
    if (!q) ::_exit(3);
    ::raise(SIGSTOP);  // stopped while attached, as under a debugger
    ::_exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(st)) << "status " << st;
  const auto j = cli_json({"inspect", seg(), "--json"});
  const CliRun t = run_cli({"inspect", seg()});
  const CliRun w = run_cli({"watch", seg(), "--once"});
  ::kill(child, SIGKILL);  // our own child, by its pid
  ::waitpid(child, &st, 0);
  ASSERT_EQ(j.at("processes").size(), 1U) << j.dump();
  EXPECT_EQ(j["processes"][0].at("pid"), child);
  EXPECT_EQ(j["processes"][0].at("state"), "stopped");
  EXPECT_EQ(j["processes"][0].at("alive"), true) << "a stopped process is alive: it holds what it holds";
  EXPECT_TRUE(contains(t.out, "stopped")) << t.out;
  EXPECT_TRUE(contains(w.out, "stopped")) << w.out;
}

// A lease past its deadline cannot be extended, but until a sweep takes it
// back its token still completes it (README, Guarantees). The refusal used
// to say the job "is not leased under token T", which the very next
// `complete` with T contradicted.
TEST_F(ToolsCli, AnExtendPastTheDeadlineSaysTheLeaseRanOutNotThatTheTokenIsWrong) {
  create();
  const std::string id = enqueue("TEN00000000001");
  const CliRun c = run_cli({"claim", seg(), "--lease", "1000", "--json"});
  ASSERT_EQ(c.exit_code, 0) << show(c);
  const std::string token = std::to_string(nlohmann::json::parse(c.out).at("token").get<std::uint64_t>());
  {
    // Past the deadline on the segment's clock, with no claim to sweep it.
    auto q = Queue::open(seg());
    ASSERT_TRUE(q.ok());
    q->advance_clock(5000);
  }
  CliRun r = run_cli({"extend", seg(), id, token, "30000"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_FALSE(contains(r.err, "not leased under")) << show(r);
  EXPECT_TRUE(contains(r.err, "deadline")) << show(r);
  EXPECT_TRUE(contains(r.err, "token " + token)) << show(r);
  r = run_cli({"extend", seg(), id, token, "30000", "--json"});
  EXPECT_EQ(r.exit_code, 1) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out).at("status"), "stale") << show(r);
  // What the message says is still possible is.
  r = run_cli({"complete", seg(), id, token});
  EXPECT_EQ(r.exit_code, 0) << show(r);
}

// `job` on a lease whose holder is stopped, then killed. A dead holder's
// lease comes back at the next sweep whatever its deadline, so "held by pid
// N, expires in 60 s" alone told a user the job was safe in hands that were
// gone. Then a claim through the tool gets it back (attempt 2), and the dead
// holder's token is stale.
TEST_F(ToolsCli, JobSaysWhetherTheHolderOfItsLeaseIsStoppedOrDead) {
  create({"--recovery-ms", "100"});
  const std::string id = enqueue("TEN00000000001");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(p[0]);
    auto q = Queue::open(seg());
    Lease l;
    if (!q || !q->claim(l, 60000)) ::_exit(3);
    const std::uint64_t token = l.token.value;
    if (::write(p[1], &token, sizeof token) != ssize_t(sizeof token)) ::_exit(4);
    ::raise(SIGSTOP);  // holding its lease
    ::_exit(0);
  }
  ::close(p[1]);
  std::uint64_t token = 0;
  const bool got = ::read(p[0], &token, sizeof token) == ssize_t(sizeof token);
  ::close(p[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, WUNTRACED), child);
  const bool stopped = WIFSTOPPED(st);
  const auto while_stopped = cli_json({"job", seg(), id, "--json"});
  const CliRun text_stopped = run_cli({"job", seg(), id});
  ::kill(child, SIGKILL);  // our own child, by its pid
  ::waitpid(child, &st, 0);
  ASSERT_TRUE(got && stopped) << "the child did not claim and stop";

  EXPECT_EQ(while_stopped.at("holder_pid"), child) << while_stopped.dump();
  EXPECT_EQ(while_stopped.value("holder_state", nlohmann::json()), "stopped") << while_stopped.dump();
  EXPECT_TRUE(contains(text_stopped.out, "stopped")) << show(text_stopped);

  const auto after_kill = cli_json({"job", seg(), id, "--json"});
  const CliRun text_dead = run_cli({"job", seg(), id});
  EXPECT_EQ(after_kill.at("state"), "leased") << "nothing has swept yet: " << after_kill.dump();
  EXPECT_EQ(after_kill.value("holder_state", nlohmann::json()), "dead") << after_kill.dump();
  EXPECT_TRUE(contains(text_dead.out, "dead")) << show(text_dead);

  const auto again = cli_json({"claim", seg(), "--json", "--lease", "60000", "--wait", "20000"});
  EXPECT_EQ(again.value("id", ""), id) << again.dump();
  EXPECT_EQ(again.value("attempt", 0), 2) << again.dump();
  EXPECT_EQ(run_cli({"complete", seg(), id, std::to_string(token)}).exit_code, 1) << "the dead holder's token is stale";
}

// A segment that cannot be sized says why once. A file-size limit fails the
// sizing (EFBIG) as a full /dev/shm does (ENOSPC), through the same message;
// SIGXFSZ is ignored so the tool lives to say it.
TEST_F(ToolsCli, ASegmentThatCannotBeSizedSaysWhyOnce) {
  const CliRun r = test::run_program("/bin/sh", {"-c", "trap '' XFSZ; ulimit -f 64; exec \"$0\" \"$@\"",
                                                 FAIRLANE_CLI_PATH, "create", seg(), "--jobs", "100000"});
  expect_error(r, "cannot size segment '" + seg() + "'");
  const std::string why = std::strerror(EFBIG);
  std::size_t times = 0;
  for (auto at = r.err.find(why); at != std::string::npos; at = r.err.find(why, at + 1)) ++times;
  EXPECT_EQ(times, 1U) << show(r);
  EXPECT_FALSE(std::filesystem::exists(shm_path(seg()))) << "a segment that could not be sized is left behind";
}

// ---------------------------------------------------------------- retry policy

TEST_F(ToolsCli, EnqueueRefusesABadRetryPolicyAndAdmitsNothing) {
  create();
  for (const char* bad : {"0", "65536", "x", "-2"}) {
    SCOPED_TRACE(bad);
    expect_error(run_cli({"enqueue", seg(), "default", "--mint", "--max-attempts", bad}), "--max-attempts");
  }
  for (const char* bad : {"fixed", "fixed:", "fixed:abc", "fixed:1:2", "linear:5", "exponential", "exponential:",
                          "exponential:10:5", "exponential:10:100:0.5", "exponential:10:100:2:1.5",
                          "exponential:10:100:2:0.1:9", "exponential:99999999999:1", "exponential:10:100:nan",
                          "exponential:-1"}) {
    SCOPED_TRACE(bad);
    expect_error(run_cli({"enqueue", seg(), "default", "--mint", "--backoff", bad}), "--backoff");
  }
  EXPECT_EQ(pending(), 0U) << "a refused enqueue admits nothing";
  for (const char* good : {"fixed:500", "exponential:100", "exponential:100:5000", "exponential:100:5000:3:0.25"}) {
    SCOPED_TRACE(good);
    const CliRun r = run_cli({"enqueue", seg(), "default", "--mint", "--backoff", good, "--max-attempts", "4"});
    EXPECT_EQ(r.exit_code, 0) << show(r);
  }
  EXPECT_EQ(pending(), 4U);
}

TEST_F(ToolsCli, JobAndJobsShowTheJobsPolicy) {
  create();
  const std::string id = enqueue("TEN00000000001", {"--max-attempts", "3", "--backoff", "exponential:100:5000:3:0.25"});
  const auto j = cli_json({"job", seg(), id, "--json"});
  EXPECT_EQ(j.at("retry").at("max_attempts"), 3) << j.dump();
  EXPECT_EQ(j.at("retry").at("backoff").at("spec"), "exponential:100:5000:3:0.25") << j.dump();
  const CliRun t = run_cli({"job", seg(), id});
  EXPECT_TRUE(contains(t.out, "3 attempts, exponential 100 ms..5.0 s x3 jitter 0.25")) << t.out;
  const auto list = cli_json({"jobs", seg(), "--json"});
  EXPECT_EQ(list.at("jobs").at(0).at("retry").at("max_attempts"), 3) << list.dump();
  const CliRun text = run_cli({"jobs", seg()});
  EXPECT_TRUE(contains(text.out, "0/3")) << text.out;
}

TEST_F(ToolsCli, FailWithoutOptionsAppliesTheJobsPolicy) {
  create();
  const std::string id = enqueue("TEN00000000001", {"--max-attempts", "2", "--backoff", "fixed:0"});
  auto j = claim();
  CliRun r = run_cli({"fail", seg(), id, std::to_string(j.at("token").get<std::uint64_t>())});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out, "retrying " + id + "\n") << "2 attempts: the first failure retries";
  ASSERT_EQ(run_cli({"tick", seg()}).exit_code, 0);
  j = claim();
  r = run_cli({"fail", seg(), id, std::to_string(j.at("token").get<std::uint64_t>())});
  EXPECT_EQ(r.out, "dead " + id + "\n") << show(r);
}

// A job with no policy of its own has the queue's default, 1 attempt: its
// first fail dead-letters it and --delay is unused, as fail --help says.
TEST_F(ToolsCli, FailHelpSaysADefaultJobIsDeadLetteredAndDelayUnused) {
  const CliRun h = run_cli({"fail", "--help"});
  ASSERT_EQ(h.exit_code, 0) << show(h);
  EXPECT_TRUE(contains(h.out, "dead-lettered by its first fail")) << h.out;
  EXPECT_TRUE(contains(h.out, "--delay unused")) << h.out;
  create();
  const std::string id = enqueue("TEN00000000001");
  const auto j = claim();
  const CliRun r = run_cli({"fail", seg(), id, std::to_string(j.at("token").get<std::uint64_t>()), "--delay", "60000"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out, "dead " + id + "\n") << show(r);
}

// ---------------------------------------------------------------- payloads and `job`

TEST_F(ToolsCli, PayloadFileIsBinarySafe) {
  create();
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  bytes += "\n\r\"' ";
  const auto path = dir.path() / "payload.bin";
  std::ofstream(path, std::ios::binary) << bytes;

  const std::string id = enqueue("TEN00000000001", {"--payload-file", path.string()});
  CliRun r = run_cli({"job", seg(), id, "--payload-only"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out, bytes) << "the bytes come back as they went in";
  // Not valid UTF-8: the JSON carries them exactly in base64.
  const auto j = cli_json({"job", seg(), id, "--json"});
  EXPECT_TRUE(j.at("payload").is_null()) << j.dump();
  EXPECT_EQ(j.at("payload_bytes"), bytes.size());
  EXPECT_FALSE(j.at("payload_base64").get<std::string>().empty());

  // "-": stdin.
  const std::string text = "{\"sku\": 42, \"note\": \"two words\"}\n";
  const auto text_path = dir.path() / "payload.json";
  std::ofstream(text_path, std::ios::binary) << text;
  r = run_cli({"enqueue", seg(), "default", "--mint", "--payload-file", "-", "--json"}, text_path.string());
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const std::string id2 = nlohmann::json::parse(r.out).at("id");
  EXPECT_EQ(run_cli({"job", seg(), id2, "--payload-only"}).out, text);
  EXPECT_EQ(cli_json({"job", seg(), id2, "--json"}).at("payload"), text) << "UTF-8 text stays a JSON string";

  expect_error(run_cli({"enqueue", seg(), "default", "--mint", "--payload", "x", "--payload-file", path.string()}),
               "--payload-file");
  expect_error(run_cli({"enqueue", seg(), "default", "--mint", "--payload-file", (dir.path() / "missing").string()}),
               "missing");
  const auto big = dir.path() / "big.bin";
  std::ofstream(big, std::ios::binary) << std::string(513, 'x');
  expect_error(run_cli({"enqueue", seg(), "default", "--mint", "--payload-file", big.string()}), "513 bytes");
  EXPECT_EQ(pending(), 2U);
}

TEST_F(ToolsCli, JobShowsOneJobWhole) {
  create();
  const std::string id = enqueue("TEN00000000001", {"--payload", "two words"});
  auto j = cli_json({"job", seg(), id, "--json"});
  EXPECT_EQ(j.at("id"), id);
  EXPECT_EQ(j.at("group"), "TEN00000000001");
  EXPECT_EQ(j.at("state"), "pending");
  EXPECT_EQ(j.at("attempt"), 0);
  EXPECT_TRUE(j.at("token").is_null()) << "only a lease has a token";
  EXPECT_EQ(j.at("payload"), "two words");
  EXPECT_TRUE(j.contains("retry") && j.contains("last_error") && j.contains("age_ms")) << j.dump();

  const auto lease = claim();
  j = cli_json({"job", seg(), id, "--json"});
  EXPECT_EQ(j.at("state"), "leased");
  EXPECT_EQ(j.at("token"), lease.at("token"));
  EXPECT_EQ(j.at("attempt"), 1);
  EXPECT_TRUE(j.contains("deadline_unix_ms")) << j.dump();

  const CliRun t = run_cli({"job", seg(), id});
  ASSERT_EQ(t.exit_code, 0) << show(t);
  EXPECT_TRUE(contains(t.out, "state    leased (expires in")) << t.out;
  EXPECT_TRUE(contains(t.out, "token " + std::to_string(lease.at("token").get<std::uint64_t>()))) << t.out;
  EXPECT_TRUE(contains(t.out, "two words")) << t.out;

  CliRun r = run_cli({"job", seg(), "JOB00000000001"});
  EXPECT_EQ(r.exit_code, 1) << "no such job: nothing\n" << show(r);
  expect_error(run_cli({"job", seg(), "JOB1"}), "JOB1");
  expect_error(run_cli({"job", seg(), id, "--json", "--payload-only"}), "--payload-only");
}

// jobs and dead list --json say whether --limit cut the list, as the text
// form's "raise --limit for more" does (and that only when it did).
TEST_F(ToolsCli, JobsAndDeadJsonSayWhetherTheLimitCutTheList) {
  create();
  for (int i = 0; i < 2; ++i) {  // two dead (the default policy: 1 attempt), one pending
    const std::string id = enqueue("TEN00000000001");
    const auto j = claim();
    ASSERT_EQ(run_cli({"fail", seg(), id, std::to_string(j.at("token").get<std::uint64_t>())}).out, "dead " + id + "\n");
  }
  enqueue("TEN00000000001");
  auto jobs = [&](const char* limit) { return cli_json({"jobs", seg(), "--json", "--limit", limit}); };
  auto dead = [&](const char* limit) { return cli_json({"dead", seg(), "list", "--json", "--limit", limit}); };
  for (const auto& [j, shown, cut] : {std::tuple{jobs("2"), 2U, true}, std::tuple{jobs("3"), 3U, false},
                                      std::tuple{jobs("100"), 3U, false}, std::tuple{dead("1"), 1U, true},
                                      std::tuple{dead("2"), 2U, false}}) {
    EXPECT_EQ(j.at("jobs").size(), shown) << j.dump();
    EXPECT_EQ(j.at("truncated"), cut) << j.dump();
  }
  EXPECT_TRUE(contains(run_cli({"jobs", seg(), "--limit", "2"}).out, "raise --limit"));
  EXPECT_FALSE(contains(run_cli({"jobs", seg(), "--limit", "3"}).out, "raise --limit"));
  EXPECT_TRUE(contains(run_cli({"dead", seg(), "list", "--limit", "1"}).out, "raise --limit"));
  EXPECT_FALSE(contains(run_cli({"dead", seg(), "list", "--limit", "2"}).out, "raise --limit"));
}

// ---------------------------------------------------------------- the default lane

TEST_F(ToolsCli, TheDefaultLaneIsNamedDefaultInEveryOutput) {
  create();
  auto j = cli_json({"enqueue", seg(), "default", "--mint", "--payload", "a", "--json"});
  EXPECT_EQ(j.at("group"), "default");
  j = cli_json({"enqueue", seg(), std::string(kDefaultGroup), "--mint", "--payload", "b", "--json"});
  EXPECT_EQ(j.at("group"), "default") << "the old spelling is still taken as input";
  j = cli_json({"depth", seg(), "default", "--json"});
  EXPECT_EQ(j.at("group"), "default");
  EXPECT_EQ(j.at("depth"), 2);
  EXPECT_EQ(cli_json({"depth", seg(), std::string(kDefaultGroup), "--json"}).at("group"), "default");
  const auto lease = claim();
  EXPECT_EQ(lease.at("group"), "default");
  CliRun r = run_cli({"fail", seg(), lease.at("id"), std::to_string(lease.at("token").get<std::uint64_t>()),
                      "--max-attempts", "1", "--error", "boom"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  r = run_cli({"claim", seg()});
  EXPECT_TRUE(contains(r.out, " default ")) << r.out;

  std::vector<CliRun> outputs;
  for (std::vector<std::string> args :
       {std::vector<std::string>{"jobs", seg()}, {"jobs", seg(), "--json"}, {"dead", seg(), "list"},
        {"dead", seg(), "list", "--json"}, {"inspect", seg()}, {"inspect", seg(), "--json"},
        {"stats", seg()}, {"stats", seg(), "--json"}, {"stats", seg(), "--prometheus", "--histograms", "all"},
        {"watch", seg(), "--once"}, {"job", seg(), lease.at("id")}, {"job", seg(), lease.at("id"), "--json"}}) {
    SCOPED_TRACE(args[0] + " " + (args.size() > 2 ? args.back() : ""));
    const CliRun out = run_cli(args);
    EXPECT_EQ(out.exit_code, 0) << show(out);
    EXPECT_TRUE(contains(out.out, "default")) << out.out;
    EXPECT_FALSE(contains(out.out, kDefaultGroup)) << out.out;
  }
}

// ---------------------------------------------------------------- lanes

TEST_F(ToolsCli, LanesFullSaysHowManyGroupsAreLiveAndHowToSizeLanes) {
  ASSERT_EQ(run_cli({"create", seg(), "--jobs", "16", "--lanes", "2"}).exit_code, 0);
  enqueue("TEN00000000001");
  enqueue("TEN00000000002");
  for (std::vector<std::string> args : {std::vector<std::string>{"enqueue", seg(), "TEN00000000003", "--mint"},
                                        {"pause", seg(), "TEN00000000003"},
                                        {"limit", seg(), "TEN00000000003", "4"}}) {
    SCOPED_TRACE(args[0]);
    const CliRun r = run_cli(args);
    expect_error(r, "2 groups are live at once");
    EXPECT_TRUE(contains(r.err, "--lanes")) << show(r);
  }
  const auto j = cli_json({"inspect", seg(), "--json"});
  EXPECT_EQ(j.at("lanes_live"), 2) << j.dump();
  EXPECT_EQ(j.at("lanes_capacity"), 2) << j.dump();
  EXPECT_EQ(j.at("lanes_reclaimed"), 0) << j.dump();
  EXPECT_TRUE(contains(run_cli({"inspect", seg()}).out, "lanes    2 live of 2, 0 reclaimed"));
  EXPECT_TRUE(contains(run_cli({"stats", seg()}).out, "lanes 2 live of 2, 0 reclaimed"));
  EXPECT_TRUE(contains(run_cli({"watch", seg(), "--once"}).out, "2 live of 2"));
}

TEST_F(ToolsCli, AReclaimedGroupIsCountedAndItsSeriesGoAway) {
  ASSERT_EQ(run_cli({"create", seg(), "--jobs", "16", "--lanes", "2"}).exit_code, 0);
  for (int g = 1; g <= 5; ++g) {
    const std::string group = "TEN0000000000" + std::to_string(g);
    const std::string id = enqueue(group);
    const auto l = claim();
    ASSERT_EQ(run_cli({"complete", seg(), id, std::to_string(l.at("token").get<std::uint64_t>())}).exit_code, 0);
  }
  const auto j = cli_json({"inspect", seg(), "--json"});
  EXPECT_GE(j.at("lanes_reclaimed").get<std::uint64_t>(), 3U) << j.dump();
  const CliRun p = run_cli({"stats", seg(), "--prometheus", "--histograms", "all"});
  EXPECT_FALSE(contains(p.out, "group=\"TEN00000000001\"")) << p.out;
  // The queue-wide totals keep counting every claim, the reclaimed groups' too.
  EXPECT_TRUE(contains(p.out, "fairlane_wait_seconds_count{segment=\"" + seg() + "\"} 5\n")) << p.out;
  EXPECT_TRUE(contains(p.out, "fairlane_claimed_total{segment=\"" + seg() + "\"} 5\n")) << p.out;
}

// A limit is cleared with 'none', as limit --help and the README say; 0 is
// not a limit (the library refuses it too) and says what to give instead.
TEST_F(ToolsCli, LimitHelpAndBehaviourAgreeOnClearing) {
  const CliRun h = run_cli({"limit", "--help"});
  ASSERT_EQ(h.exit_code, 0) << show(h);
  EXPECT_TRUE(contains(h.out, "1..131071, or 'none' to clear")) << h.out;
  EXPECT_FALSE(contains(h.out, "(0)")) << h.out;
  create();
  expect_error(run_cli({"limit", seg(), "TEN00000000001", "0"}), "'none'");
  EXPECT_EQ(cli_json({"limit", seg(), "TEN00000000001", "3", "--json"}).at("limit"), 3);
  EXPECT_TRUE(cli_json({"limit", seg(), "TEN00000000001", "none", "--json"}).at("limit").is_null());
}

// ---------------------------------------------------------------- segment-only commands on a URL

TEST_F(ToolsCli, SegmentOnlyCommandsSayTheyDoNotApplyToAValkeyQueue) {
  const std::string url = "valkey://127.0.0.1:1/q";
  for (std::vector<std::string> args : {std::vector<std::string>{"create", url}, {"fsck", url}, {"fsck", url, "--repair"},
                                        {"mirror", url}, {"restore", url, "--from", url}}) {
    SCOPED_TRACE(args[0]);
    const CliRun r = run_cli(args);
    expect_error(r, "does not apply to a Valkey queue");
    EXPECT_FALSE(contains(r.err, "must not contain '/'")) << show(r);
  }
  const CliRun d = run_cli({"destroy", url});  // nothing listens on port 1
  expect_error(d, "127.0.0.1:1");
  EXPECT_FALSE(contains(d.err, "must not contain '/'")) << show(d);
}

// SEG's help says what the command takes: a segment only, or a Valkey URL too.
TEST_F(ToolsCli, SegHelpSaysWhetherTheCommandTakesAValkeyUrl) {
  const auto seg_help = [](const std::string& cmd) {
    const CliRun r = run_cli({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << show(r);
    const std::size_t at = r.out.find("\n  SEG ");  // the line under Positionals
    return at == std::string::npos ? std::string() : r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  for (const char* cmd : {"create", "fsck", "mirror", "restore"}) {
    SCOPED_TRACE(cmd);
    const std::string h = seg_help(cmd);
    EXPECT_TRUE(contains(h, "segment name")) << h;
    EXPECT_FALSE(contains(h, "valkey://")) << h;
  }
  for (const char* cmd : {"destroy", "inspect", "tick", "mint", "enqueue", "claim", "complete", "release", "fail",
                          "extend", "pause", "resume", "limit", "weight", "depth", "drain", "stats", "watch", "jobs",
                          "job", "dead"}) {
    SCOPED_TRACE(cmd);
    EXPECT_TRUE(contains(seg_help(cmd), "segment name or valkey:// URL")) << seg_help(cmd);
  }
}

TEST_F(ToolsCli, OneOfSomethingIsSingular) {
  const CliRun c = run_cli({"create", seg(), "--jobs", "1", "--lanes", "1", "--processes", "1"});
  ASSERT_EQ(c.exit_code, 0) << show(c);
  EXPECT_TRUE(contains(c.out, ": 1 job, 1 lane, ")) << c.out;
  EXPECT_TRUE(contains(c.out, ", 1 process, ")) << c.out;
  const CliRun i = run_cli({"inspect", seg()});
  EXPECT_TRUE(contains(i.out, "capacity 1 job, 1 lane, ")) << i.out;
  EXPECT_TRUE(contains(i.out, "-byte payloads, 1 process")) << i.out;
  const CliRun f = run_cli({"fsck", seg()});
  EXPECT_EQ(f.exit_code, 0) << show(f);
  EXPECT_TRUE(contains(f.out, ": 1 slot, 2 lanes, ")) << f.out;  // the default lane and one group lane
}

// The demo's children are the fairlane binary run again: they show under its
// name, not as "exe" (the name of the /proc link they used to be run by).
TEST_F(ToolsCli, TheDemosChildrenShowUnderTheToolsName) {
  const pid_t demo = ::fork();
  ASSERT_GE(demo, 0);
  if (demo == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(FAIRLANE_CLI_PATH, "fairlane", "demo", "--seconds", "2", "--segment", seg().c_str(), "--consumers", "2",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The tenants' producers and the consumers attach (at least three).
  std::vector<ProcessInfo> seen;
  test::eventually([&] {
    if (auto q = Queue::open(seg(), Queue::Attach::observer)) seen = q->processes();
    return seen.size() >= 3;
  }, std::chrono::seconds(4));
  int status = 0;
  ASSERT_EQ(::waitpid(demo, &status, 0), demo);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_GE(seen.size(), 3U) << "the demo's children never attached";
  const std::string tool = std::filesystem::path(FAIRLANE_CLI_PATH).filename().string().substr(0, 15);
  for (const ProcessInfo& p : seen) EXPECT_EQ(p.name, tool) << "pid " << p.pid;
}

}  // namespace
}  // namespace fairlane
