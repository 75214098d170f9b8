// The tools never crash on any bytes (issue 16): a segment with a valid
// header and a body of random bytes, or one scribbled over in places, is
// read by inspect, jobs, job, dead, stats, watch and fsck, which print what
// they can and exit 2 at worst; none dies by a signal, none hangs.
#include "cli_support.hpp"
#include "raw_segment.hpp"

#include <filesystem>
#include <random>

namespace fairlane {
namespace {

using test::CliRun;
using test::run_program;
using test::SegmentGuard;
using test::show;
using test::unique_segment_name;

// A hang is a failure too: each tool gets this long, then `timeout` kills it
// (exit 124, or 128 + the signal that killed the tool).
constexpr const char* kToolSeconds = "30";

CliRun run_bounded(std::vector<std::string> args) {
  args.insert(args.begin(), {"--kill-after=5", kToolSeconds, FAIRLANE_CLI_PATH});
  return run_program("/usr/bin/timeout", args);
}

class HostileBytes : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name(std::to_string(GetParam())));
    QueueOptions o;
    o.jobs = 256;
    o.lanes = 16;
    o.payload_bytes = 64;
    auto r = Queue::create(seg(), o);
    ASSERT_TRUE(r.ok()) << test::describe(r.error());
    Queue& q = r.value();
    // Something in every state, in several lanes.
    for (int i = 0; i < 120; ++i) ASSERT_EQ(q.enqueue(test::group("TEN", 1 + i % 7), q.mint(), "payload"), EnqueueStatus::enqueued);
    for (int i = 0; i < 30; ++i) {
      Lease l;
      ASSERT_TRUE(q.claim(l, 600000));
      if (i % 3 == 0) q.fail(l.id, l.token, {.delay_ms = 0, .max_attempts = 1, .error = "dead"});
      else if (i % 3 == 1) q.fail(l.id, l.token, {.delay_ms = 600000, .max_attempts = 5, .error = "later"});
      if (i == 0) some_id_ = l.id.string();
    }
  }
  void TearDown() override { guard_.reset(); }
  const std::string& seg() const { return guard_->name(); }

  // Random bytes over the body from `rng`, except the process table: on a
  // core whose observers take a process record, a random table refuses
  // every tool at open, and the reading code would go untested.
  template <class Write>
  void scribble(Write&& write) {
    test::RawSegment raw(seg());
    const std::size_t from = raw.header().header_bytes;
    const std::size_t size = std::filesystem::file_size(test::shm_path(seg()));
    const std::size_t procs = raw.header().procs_off;
    const std::size_t procs_end = procs + sizeof(detail::ProcRecord) * detail::kMaxProcs;
    auto* base = reinterpret_cast<unsigned char*>(&raw.header());
    write(base, from, size, [&](std::size_t at) { return at < procs || at >= procs_end; });
  }

  void expect_tools_survive() {
    const std::vector<std::vector<std::string>> runs = {
        {"inspect", seg()},           {"inspect", seg(), "--json"},      {"jobs", seg()},
        {"jobs", seg(), "--json"},    {"jobs", seg(), "--state", "dead"}, {"job", seg(), some_id_},
        {"job", seg(), some_id_, "--json"},  {"dead", seg(), "list"},   {"dead", seg(), "list", "--json"},
        {"stats", seg()},             {"stats", seg(), "--json"},        {"stats", seg(), "--prometheus", "--histograms", "all"},
        {"watch", seg(), "--once"},   {"fsck", seg()},                   {"fsck", seg(), "--json"},
        {"depth", seg(), "TEN00000000001"}};
    for (const auto& args : runs) {
      std::string what;
      for (const auto& a : args) what += (what.empty() ? "" : " ") + (a == seg() ? std::string("SEG") : a);
      SCOPED_TRACE(what);
      const CliRun r = run_bounded(args);
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2)
          << "died or hung (124: hung; 128+N: signal N): " << show(r);
      if (r.exit_code == 2) {
        EXPECT_EQ(r.err.rfind("fairlane: ", 0), 0U) << show(r);
      }
    }
  }

  std::unique_ptr<SegmentGuard> guard_;
  std::string some_id_;
};

TEST_P(HostileBytes, ARandomBodyAfterAValidHeader) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()));
  scribble([&](unsigned char* base, std::size_t from, std::size_t size, auto may) {
    for (std::size_t i = from; i < size; ++i)
      if (may(i)) base[i] = static_cast<unsigned char>(rng());
  });
  expect_tools_survive();
}

TEST_P(HostileBytes, ScribblesInPlaces) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()) * 7919);
  scribble([&](unsigned char* base, std::size_t from, std::size_t size, auto may) {
    for (int w = 0; w < 64; ++w) {
      const std::size_t at = from + rng() % (size - from - 16);
      for (std::size_t k = 0; k < 16; ++k)
        if (may(at + k)) base[at + k] = static_cast<unsigned char>(rng());
    }
  });
  expect_tools_survive();
}

// The process table too: the whole body. (On the interim core every open
// is refused then, as the table's records look taken.)
TEST_P(HostileBytes, TheWholeBodyProcessTableIncluded) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(GetParam()) * 104729);
  scribble([&](unsigned char* base, std::size_t from, std::size_t size, auto) {
    for (std::size_t i = from; i < size; ++i) base[i] = static_cast<unsigned char>(rng());
  });
  expect_tools_survive();
}

TEST_P(HostileBytes, AnUntouchedSegmentReadsCleanly) {
  // The control: the same runs, every one a success.
  for (const char* cmd : {"inspect", "jobs", "stats"}) {
    const CliRun r = run_bounded({cmd, seg()});
    EXPECT_EQ(r.exit_code, 0) << show(r);
  }
  expect_tools_survive();
}

INSTANTIATE_TEST_SUITE_P(Seeds, HostileBytes, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace fairlane
