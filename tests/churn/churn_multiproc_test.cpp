// Tenants come and go (issue 11), across processes: 4 producer and 4
// consumer processes pass 1,000,000 distinct groups through a 64-lane
// segment. Each producer keeps fewer than 16 of its groups live at once (it
// enqueues group j only once its groups below j - 14 are completed), so
// fewer than 64 are live overall, and no enqueue may be refused. Every job
// must be delivered exactly once, from its own group.
//
// Children are forked (no exec) from the single-threaded test process; they
// share an anonymous block with it: a bit per group claimed and one per
// group completed, counters, and the first problem seen. Label `churn`.
//
// FAIRLANE_CHURN_GROUPS=<n> changes the number of groups (sanitizer builds
// default to 100,000: they run several times slower).
#include "forked_child.hpp"
#include "test_support.hpp"

#include <fairlane/queue.hpp>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FAIRLANE_CHURN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FAIRLANE_CHURN_SANITIZED 1
#endif
#endif

namespace fairlane {
namespace {

using test::ForkedChild;
using test::SharedBlock;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kMaxGroups = 1'000'000;
#ifdef FAIRLANE_CHURN_SANITIZED
constexpr std::uint64_t kDefaultGroups = 100'000;
#else
constexpr std::uint64_t kDefaultGroups = kMaxGroups;
#endif
constexpr unsigned kProducers = 4, kConsumers = 4;
constexpr std::uint64_t kWindow = 15;  // groups of one producer live at once, at most
constexpr std::uint32_t kLanes = 64;
// No progress for this long is a hang (a stuck lane, a lost wake-up).
constexpr auto kStall = std::chrono::seconds(30);
constexpr auto kRunGuard = std::chrono::seconds(240);  // inside the 300 s ctest timeout

BrandedId churn_group(std::uint64_t n) { return BrandedId::make("CHM", n + 1); }

struct Shared {
  std::atomic<std::uint64_t> claimed[kMaxGroups / 64 + 1];
  std::atomic<std::uint64_t> completed[kMaxGroups / 64 + 1];
  std::atomic<std::uint64_t> completed_total;
  std::atomic<std::uint64_t> enqueued_total;
  std::atomic<std::uint64_t> refusals, duplicates, wrong_group, bad_payload, ack_errors, stalls;
  std::atomic<std::uint32_t> stop;
  std::atomic<std::uint32_t> problem_taken;
  char problem[512];
};

bool test_bit(const std::atomic<std::uint64_t>* bits, std::uint64_t i) {
  return (bits[i / 64].load(std::memory_order_acquire) >> (i % 64)) & 1;
}
// True if the bit was set already.
bool set_bit(std::atomic<std::uint64_t>* bits, std::uint64_t i) {
  const std::uint64_t m = 1ULL << (i % 64);
  return bits[i / 64].fetch_or(m, std::memory_order_acq_rel) & m;
}

void report(Shared& sh, const std::string& what) {
  if (sh.problem_taken.exchange(1) == 0) std::snprintf(sh.problem, sizeof sh.problem, "%s", what.c_str());
}

std::uint64_t groups_from_env() {
  if (const char* e = std::getenv("FAIRLANE_CHURN_GROUPS")) {
    const std::uint64_t v = std::strtoull(e, nullptr, 10);
    if (v >= kProducers && v <= kMaxGroups) return v - v % kProducers;
  }
  return kDefaultGroups;
}

// A child's handle on the segment, or none (the problem reported).
std::optional<Queue> open_child(const std::string& seg, Shared& sh, const char* who) {
  auto r = Queue::open(seg);
  if (!r) {
    report(sh, std::string(who) + " open: " + r.error().message);
    return std::nullopt;
  }
  return std::move(r.value());
}

int producer(const std::string& seg, Shared& sh, unsigned p, std::uint64_t per) {
  std::optional<Queue> opened = open_child(seg, sh, "producer");
  if (!opened) return 4;
  Queue& q = *opened;
  const std::uint64_t base = std::uint64_t(p) * per;
  std::uint64_t low = 0;  // lowest of this producer's groups not yet completed
  auto last_progress = Clock::now();
  for (std::uint64_t j = 0; j < per; ++j) {
    // Fewer than 16 live: group j waits for every group below j - 14.
    while (low < j && test_bit(sh.completed, base + low)) ++low;
    while (j - low >= kWindow) {
      if (sh.stop.load(std::memory_order_relaxed)) return 0;
      if (test_bit(sh.completed, base + low)) {
        ++low;
        last_progress = Clock::now();
        continue;
      }
      if (Clock::now() - last_progress > kStall) {
        sh.stalls.fetch_add(1);
        report(sh, "producer " + std::to_string(p) + ": group " + std::to_string(base + low) +
                       " not completed for 30 s (window full)");
        sh.stop.store(1);
        return 3;
      }
      ::sched_yield();
    }
    if (sh.stop.load(std::memory_order_relaxed)) return 0;
    const std::uint64_t g = base + j;
    const EnqueueStatus st = q.enqueue(churn_group(g), q.mint(), std::to_string(g));
    if (st != EnqueueStatus::enqueued) {
      sh.refusals.fetch_add(1);
      report(sh, "producer " + std::to_string(p) + ": enqueue for group " + std::to_string(g) + " (" +
                     churn_group(g).string() + ", its " + std::to_string(j) + "th) -> " + std::string(to_string(st)) +
                     "; lanes_live " + std::to_string(q.snapshot().lanes_live));
      sh.stop.store(1);
      return 3;
    }
    sh.enqueued_total.fetch_add(1, std::memory_order_relaxed);
    last_progress = Clock::now();
  }
  return 0;
}

// A producer that keeps no window: every group of its share at once,
// through enqueue_wait, so that the groups live outnumber the lanes and
// lanes_full is waited out (issue 12's round: "tenants come and go").
// Counts the enqueues that found no lane at first (they waited).
int waiting_producer(const std::string& seg, Shared& sh, unsigned p, std::uint64_t per,
                     std::atomic<std::uint64_t>& lane_waits) {
  std::optional<Queue> opened = open_child(seg, sh, "producer");
  if (!opened) return 4;
  Queue& q = *opened;
  const std::uint64_t base = std::uint64_t(p) * per;
  for (std::uint64_t j = 0; j < per && !sh.stop.load(std::memory_order_relaxed); ++j) {
    const std::uint64_t g = base + j;
    const BrandedId id = q.mint();
    EnqueueStatus st = q.enqueue(churn_group(g), id, std::to_string(g));
    if (st == EnqueueStatus::lanes_full || st == EnqueueStatus::full) {
      if (st == EnqueueStatus::lanes_full) lane_waits.fetch_add(1, std::memory_order_relaxed);
      // The consumers drain all the while: a lane goes idle every few jobs.
      // 20 s without one is a lost wake (a producer's sleep slice is 30 s).
      st = q.enqueue_wait(churn_group(g), id, std::to_string(g), std::chrono::seconds(20));
    }
    if (st != EnqueueStatus::enqueued) {
      sh.refusals.fetch_add(1);
      report(sh, "waiting producer " + std::to_string(p) + ": group " + std::to_string(g) + " -> " +
                     std::string(to_string(st)) + " after 20 s; lanes_live " + std::to_string(q.snapshot().lanes_live));
      sh.stop.store(1);
      return 3;
    }
    sh.enqueued_total.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

int consumer(const std::string& seg, Shared& sh, std::uint64_t total) {
  std::optional<Queue> opened = open_child(seg, sh, "consumer");
  if (!opened) return 4;
  Queue& q = *opened;
  Lease l;
  auto last_progress = Clock::now();
  std::uint64_t last_total = 0;
  while (sh.completed_total.load(std::memory_order_acquire) < total && !sh.stop.load(std::memory_order_relaxed)) {
    if (!q.claim_wait(l, 60000, std::chrono::milliseconds(20))) {
      const std::uint64_t now_total = sh.completed_total.load(std::memory_order_relaxed);
      if (now_total != last_total) {
        last_total = now_total;
        last_progress = Clock::now();
      } else if (Clock::now() - last_progress > kStall) {
        sh.stalls.fetch_add(1);
        const Snapshot s = q.snapshot();
        report(sh, "consumer: nothing completed anywhere for 30 s at " + std::to_string(now_total) + " of " +
                       std::to_string(total) + "; pending " + std::to_string(s.pending) + ", leased " +
                       std::to_string(s.leased) + ", ring " + std::to_string(s.ring.size()));
        sh.stop.store(1);
        return 3;
      }
      continue;
    }
    char* end = nullptr;
    const std::uint64_t g = std::strtoull(l.payload.c_str(), &end, 10);
    if (end == l.payload.c_str() || *end != '\0' || g >= total) {
      sh.bad_payload.fetch_add(1);
      report(sh, "consumer: payload '" + l.payload + "' of " + l.id.string());
      (void)q.complete(l.id, l.token);
      continue;
    }
    if (l.group != churn_group(g)) {
      sh.wrong_group.fetch_add(1);
      report(sh, "consumer: the job of group " + std::to_string(g) + " served from " + l.group.string());
    }
    if (set_bit(sh.claimed, g)) {
      sh.duplicates.fetch_add(1);
      report(sh, "consumer: group " + std::to_string(g) + "'s job delivered twice (" + l.id.string() + " attempt " +
                     std::to_string(l.attempt) + ")");
    }
    const AckStatus st = q.complete(l.id, l.token);
    if (st != AckStatus::ok) {
      sh.ack_errors.fetch_add(1);
      report(sh, "consumer: complete " + l.id.string() + " -> " + std::string(to_string(st)));
    }
    if (!set_bit(sh.completed, g)) sh.completed_total.fetch_add(1, std::memory_order_acq_rel);
  }
  return 0;
}

// Polls the children every 10 ms until all have exited (calling `sample`
// between polls), and reaps them. Past kRunGuard it tells them to stop,
// kills those still running 10 s later, and says the run hung.
bool supervise(std::vector<ForkedChild>& children, Shared& sh, Clock::time_point started,
               const std::function<void()>& sample = {}) {
  bool hung = false;
  for (;;) {
    bool all = true;
    for (auto& c : children) all = c.poll() && all;
    if (all) break;
    if (Clock::now() - started > kRunGuard) {
      hung = true;
      sh.stop.store(1);
      for (auto& c : children)
        if (!c.wait_for(std::chrono::seconds(10))) c.kill_now();
      break;
    }
    if (sample) sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& c : children) c.wait();
  return hung;
}

TEST(ChurnMultiProc, AMillionGroupsThroughSixtyFourLanes) {
  const std::uint64_t total = groups_from_env(), per = total / kProducers;
  test::SegmentGuard guard(test::unique_segment_name());
  QueueOptions o;
  o.jobs = 1024;
  o.lanes = kLanes;
  o.payload_bytes = 16;
  auto created = Queue::create(guard.name(), o);
  ASSERT_TRUE(created.ok()) << test::describe(created.error());
  Queue& q = created.value();
  SharedBlock<Shared> sh;

  const auto started = Clock::now();
  std::vector<ForkedChild> children;
  for (unsigned p = 0; p < kProducers; ++p)
    children.emplace_back([&, p] { return producer(guard.name(), *sh, p, per); });
  for (unsigned c = 0; c < kConsumers; ++c) children.emplace_back([&] { return consumer(guard.name(), *sh, total); });

  // Meanwhile: the lanes live at once, sampled.
  std::uint64_t max_live = 0, samples = 0;
  const bool hung = supervise(children, *sh, started, [&] {
    max_live = std::max(max_live, q.snapshot().lanes_live);
    ++samples;
  });
  const double took = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("churn: %llu groups, %llu completed in %.1f s, lanes_live at most %llu (%llu samples)\n",
              static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(sh->completed_total.load()), took,
              static_cast<unsigned long long>(max_live), static_cast<unsigned long long>(samples));

  const std::string problem = sh->problem_taken.load() ? std::string(sh->problem) : std::string("none");
  EXPECT_FALSE(hung) << "the run did not finish within " << kRunGuard.count() << " s; first problem: " << problem;
  for (auto& c : children) EXPECT_TRUE(c.exited_zero()) << "child " << c.pid() << " " << c.describe() << "; " << problem;
  EXPECT_EQ(sh->refusals.load(), 0U) << problem;
  EXPECT_EQ(sh->duplicates.load(), 0U) << problem;
  EXPECT_EQ(sh->wrong_group.load(), 0U) << problem;
  EXPECT_EQ(sh->bad_payload.load(), 0U) << problem;
  EXPECT_EQ(sh->ack_errors.load(), 0U) << problem;
  EXPECT_EQ(sh->stalls.load(), 0U) << problem;
  EXPECT_EQ(sh->enqueued_total.load(), total) << problem;
  EXPECT_EQ(sh->completed_total.load(), total) << problem;
  std::uint64_t claimed = 0, completed = 0;
  for (std::uint64_t w = 0; w < kMaxGroups / 64 + 1; ++w) {
    claimed += std::uint64_t(std::popcount(sh->claimed[w].load()));
    completed += std::uint64_t(std::popcount(sh->completed[w].load()));
  }
  EXPECT_EQ(claimed, total) << "groups whose job was delivered";
  EXPECT_EQ(completed, total);
  EXPECT_LE(max_live, std::uint64_t(kLanes) + 1);

  const Snapshot s = q.snapshot();
  EXPECT_EQ(s.pending + s.leased + s.scheduled + s.dead, 0U);
  EXPECT_EQ(s.counters.enqueued, total);
  EXPECT_EQ(s.counters.completed, total);
  EXPECT_GE(s.lanes_reclaimed, total - kLanes);
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << r.issues.size() << " issues, first: "
                         << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
}

// More groups at once than lanes: 4 producer processes each enqueue their
// share of groups one after the other through enqueue_wait, on 8 lanes,
// while 4 consumers drain. Most enqueues find every lane held and wait for
// one (a lane goes idle when its group's one job is completed, and the
// complete wakes a waiting producer). Every job is delivered once, from
// its group; no wait runs out its 20 s; nothing is left counted parked.
TEST(ChurnMultiProc, ProducersOfMoreGroupsThanLanesWaitForThem) {
#ifdef FAIRLANE_CHURN_SANITIZED
  const std::uint64_t total = 20'000;
#else
  const std::uint64_t total = 200'000;
#endif
  const std::uint64_t per = total / kProducers;
  test::SegmentGuard guard(test::unique_segment_name());
  QueueOptions o;
  o.jobs = 1024;
  o.lanes = 8;
  o.payload_bytes = 16;
  o.recovery_ms = 60000;  // sleep slices of 30 s: a lost wake runs out a 20 s wait
  auto created = Queue::create(guard.name(), o);
  ASSERT_TRUE(created.ok()) << test::describe(created.error());
  Queue& q = created.value();
  SharedBlock<Shared> sh;
  SharedBlock<std::atomic<std::uint64_t>> lane_waits;

  const auto started = Clock::now();
  std::vector<ForkedChild> children;
  for (unsigned p = 0; p < kProducers; ++p)
    children.emplace_back([&, p] { return waiting_producer(guard.name(), *sh, p, per, *lane_waits); });
  for (unsigned c = 0; c < kConsumers; ++c) children.emplace_back([&] { return consumer(guard.name(), *sh, total); });
  const bool hung = supervise(children, *sh, started);
  const double took = std::chrono::duration<double>(Clock::now() - started).count();
  std::printf("lane waits: %llu groups through 8 lanes in %.1f s; %llu enqueues found no lane and waited\n",
              static_cast<unsigned long long>(total), took, static_cast<unsigned long long>(lane_waits->load()));

  const std::string problem = sh->problem_taken.load() ? std::string(sh->problem) : std::string("none");
  EXPECT_FALSE(hung) << "the run did not finish within " << kRunGuard.count() << " s; first problem: " << problem;
  for (auto& c : children) EXPECT_TRUE(c.exited_zero()) << "child " << c.pid() << " " << c.describe() << "; " << problem;
  EXPECT_GT(lane_waits->load(), 0U) << "no enqueue waited for a lane: the test tests nothing";
  EXPECT_EQ(sh->refusals.load(), 0U) << problem;
  EXPECT_EQ(sh->duplicates.load(), 0U) << problem;
  EXPECT_EQ(sh->wrong_group.load(), 0U) << problem;
  EXPECT_EQ(sh->ack_errors.load(), 0U) << problem;
  EXPECT_EQ(sh->stalls.load(), 0U) << problem;
  EXPECT_EQ(sh->enqueued_total.load(), total) << problem;
  EXPECT_EQ(sh->completed_total.load(), total) << problem;
  const Snapshot s = q.snapshot();
  EXPECT_EQ(s.pending + s.leased + s.scheduled + s.dead, 0U);
  EXPECT_EQ(s.producers_parked, 0U);
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << r.issues.size() << " issues, first: "
                         << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
}

}  // namespace
}  // namespace fairlane
