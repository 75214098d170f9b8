// Several threads of one process on ONE Queue handle: producers, consumers
// (claim, claim_batch, claim_wait), completes, fails with retry and
// dead-letter, extends, tick, lane controls and observers (snapshot, tick,
// fsck), all at once. The point is
// the in-process synchronisation of the lock-free paths, so that
// ThreadSanitizer (`./run.sh sanitize tsan`) sees it; the assertions are on
// outcomes only (exactly-once completion, dead letters, a quiet and clean
// segment at the end), never on timing.
#include "test_support.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

// Sanitized builds run slower by an order of magnitude: fewer jobs there.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define FAIRLANE_THREADS_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define FAIRLANE_THREADS_TEST_SANITIZED 1
#endif
#endif

namespace fairlane {
namespace {

using test::SegmentFixture;

#ifdef FAIRLANE_THREADS_TEST_SANITIZED
constexpr std::uint32_t kPerProducer = 8'000;
#else
constexpr std::uint32_t kPerProducer = 20'000;
#endif
constexpr std::uint32_t kProducers = 2;
constexpr std::uint32_t kConsumers = 3;
constexpr std::uint32_t kGroups = 8;
constexpr std::uint32_t kTotal = kProducers * kPerProducer;
constexpr std::uint32_t kMaxAttempts = 3;
constexpr std::uint32_t kLeaseMs = 600'000;  // never expires during the test: every lease is ours to settle

// What a consumer does with job `idx`, deterministically, so the outcome is known:
//   idx % 50 == 0   fails on every attempt: retried twice, then dead-lettered
//   idx % 10 == 1   fails on its first attempt, completed on its second
//   idx % 7  == 0   extended before it is settled
//   otherwise       completed on its first attempt
bool always_fails(std::uint32_t idx) { return idx % 50 == 0; }
bool fails_once(std::uint32_t idx) { return idx % 10 == 1; }
bool extended(std::uint32_t idx) { return idx % 7 == 0; }

BrandedId group_of(std::uint32_t g) { return BrandedId::make("GRP", g + 1); }

class ThreadsTest : public SegmentFixture {};

TEST_F(ThreadsTest, ProducersConsumersOneHandle) {
  QueueOptions o;
  o.jobs = 2048;  // well below kTotal: producers hit `full` and retry
  o.lanes = 64;
  o.payload_bytes = 32;
  create(o);
  if (HasFailure()) return;
  Queue& q = this->q();

  // Filled by producers before their enqueue, read only after every join.
  std::vector<BrandedId> ids(kTotal);
  // completes that returned ok, per job index.
  auto completes = std::make_unique<std::atomic<std::uint32_t>[]>(kTotal);
  for (std::uint32_t i = 0; i < kTotal; ++i) completes[i].store(0, std::memory_order_relaxed);

  std::atomic<std::uint32_t> settled{0};  // completed + dead-lettered
  std::atomic<std::uint32_t> dead_count{0};
  std::atomic<std::uint32_t> produced{0};
  std::atomic<std::uint64_t> full_retries{0};
  std::atomic<std::uint64_t> bad_outcomes{0};  // statuses that must not happen; details in `first_bad`
  std::atomic<bool> stop{false};               // hang guard only (see below)
  std::atomic<bool> controls_done{false};
  // Only the first unexpected outcome is described (written once, read after joins).
  std::atomic<bool> bad_claimed{false};
  std::string first_bad;
  auto report_bad = [&](std::string what) {
    bad_outcomes.fetch_add(1, std::memory_order_relaxed);
    if (!bad_claimed.exchange(true, std::memory_order_acq_rel)) first_bad = std::move(what);
  };

  // A generous bound so a bug shows up as a failed test with counts instead
  // of a ctest timeout. Not a timing assertion: nothing checks how long it took.
  const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  auto all_settled = [&] { return settled.load(std::memory_order_acquire) >= kTotal; };

  std::vector<std::thread> threads;

  // ---- producers: kPerProducer jobs each, round-robin over the groups
  for (std::uint32_t p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (std::uint32_t i = 0; i < kPerProducer; ++i) {
        const std::uint32_t idx = p * kPerProducer + i;
        const BrandedId id = q.mint();
        ids[idx] = id;
        const std::string payload = std::to_string(idx);
        for (;;) {
          const EnqueueStatus st = q.enqueue(group_of(idx % kGroups), id, payload);
          if (st == EnqueueStatus::enqueued) break;
          if (st != EnqueueStatus::full) {
            report_bad("enqueue of job " + std::to_string(idx) + ": " + std::string(to_string(st)));
            return;
          }
          full_retries.fetch_add(1, std::memory_order_relaxed);
          if (stop.load(std::memory_order_relaxed)) return;
          std::this_thread::yield();
        }
        produced.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  // ---- consumers
  auto settle = [&](const Lease& l) {
    std::uint32_t idx = 0;
    const auto* b = l.payload.data();
    const auto [ptr, ec] = std::from_chars(b, b + l.payload.size(), idx);
    if (ec != std::errc() || ptr != b + l.payload.size() || idx >= kTotal) {
      report_bad("payload " + l.payload + " of " + std::string(l.id.str()));
      return;
    }
    if (l.group != group_of(idx % kGroups))
      report_bad("job " + std::to_string(idx) + " served from the wrong lane " + std::string(l.group.str()));
    if (extended(idx)) {
      const AckStatus st = q.extend(l.id, l.token, kLeaseMs);
      if (st != AckStatus::ok)
        report_bad("extend of job " + std::to_string(idx) + ": " + std::string(to_string(st)));
    }
    const bool fail = always_fails(idx) || (fails_once(idx) && l.attempt == 1);
    if (fail) {
      const FailStatus st = q.fail(l.id, l.token, {.delay_ms = 0, .max_attempts = kMaxAttempts, .error = "boom"});
      const FailStatus want = l.attempt >= kMaxAttempts ? FailStatus::dead : FailStatus::retrying;
      if (st != want) {
        report_bad("fail of job " + std::to_string(idx) + " attempt " + std::to_string(l.attempt) + ": " +
                   std::string(to_string(st)));
      } else if (st == FailStatus::dead) {
        dead_count.fetch_add(1, std::memory_order_relaxed);
        settled.fetch_add(1, std::memory_order_release);
      }
      return;
    }
    const AckStatus st = q.complete(l.id, l.token);
    if (st == AckStatus::ok) {
      completes[idx].fetch_add(1, std::memory_order_relaxed);
      settled.fetch_add(1, std::memory_order_release);
    } else {
      report_bad("complete of job " + std::to_string(idx) + " attempt " + std::to_string(l.attempt) + ": " +
                 std::string(to_string(st)));
    }
  };

  for (std::uint32_t c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      Lease one;
      std::array<Lease, 4> batch;
      for (std::uint64_t round = c;; ++round) {
        if (all_settled()) return;
        if (stop.load(std::memory_order_relaxed)) return;
        if ((round & 1023) == 0 && std::chrono::steady_clock::now() > give_up_at) {
          stop.store(true, std::memory_order_relaxed);
          return;
        }
        if (c == 0 && (round & 63) == 0) q.tick();  // promotes retries, judges holders
        switch (round % 3) {
          case 0:
            if (q.claim(one, kLeaseMs)) settle(one);
            break;
          case 1: {
            const std::size_t n = q.claim_batch(std::span<Lease>(batch), kLeaseMs);
            for (std::size_t k = 0; k < n; ++k) settle(batch[k]);
            break;
          }
          default:
            if (q.claim_wait(one, kLeaseMs, std::chrono::milliseconds(2))) settle(one);
            break;
        }
      }
    });
  }

  // ---- lane controls on one group while all that runs; each cycle ends
  // with the lane resumed and unlimited.
  threads.emplace_back([&] {
    const BrandedId g = group_of(3);
    while (!all_settled() && !stop.load(std::memory_order_relaxed)) {
      if (q.pause(g) != LaneStatus::ok) report_bad("pause");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (q.set_limit(g, 1) != LaneStatus::ok) report_bad("set_limit 1");
      if (q.resume(g) != LaneStatus::ok) report_bad("resume");
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      if (q.clear_limit(g) != LaneStatus::ok) report_bad("clear_limit");
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    controls_done.store(true, std::memory_order_release);
  });

  // ---- observers while all that runs: snapshots, full sweeps (tick) and
  // fsck passes beside the operations. fsck is exact only on a quiet segment,
  // so its answer is not judged here; it must not crash, hang or write.
  std::atomic<std::uint32_t> looks{0};
  threads.emplace_back([&] {
    while (!all_settled() && !stop.load(std::memory_order_relaxed)) {
      (void)q.snapshot();
      (void)q.tick();
      (void)q.fsck();
      looks.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });

  for (auto& t : threads) t.join();

  ASSERT_FALSE(stop.load()) << "gave up: settled " << settled.load() << " of " << kTotal << ", produced "
                            << produced.load() << ", bad outcomes " << bad_outcomes.load() << ", first: " << first_bad;
  EXPECT_EQ(bad_outcomes.load(), 0U) << "first: " << first_bad;
  ASSERT_EQ(produced.load(), kTotal);
  ASSERT_TRUE(controls_done.load());

  // Every job: completed exactly once, or dead-lettered (and then never completed).
  std::uint32_t expected_dead = 0, wrong = 0;
  for (std::uint32_t idx = 0; idx < kTotal; ++idx) {
    const std::uint32_t n = completes[idx].load(std::memory_order_relaxed);
    const auto info = q.job(ids[idx]);
    if (always_fails(idx)) {
      ++expected_dead;
      const bool ok = n == 0 && info && info->state == JobState::dead && info->attempt == kMaxAttempts &&
                      info->last_error == "boom";
      if (!ok && ++wrong <= 10)
        ADD_FAILURE() << "job " << idx << " (" << ids[idx].str() << ") should be dead after " << kMaxAttempts
                      << " attempts: completes " << n << ", "
                      << (info ? std::string(to_string(info->state)) + " attempt " + std::to_string(info->attempt)
                               : std::string("gone"));
    } else {
      // A completed job's slot is freed: job(id) finds nothing.
      if ((n != 1 || info.has_value()) && ++wrong <= 10)
        ADD_FAILURE() << "job " << idx << " (" << ids[idx].str() << ") completed " << n << " times, "
                      << (info ? std::string(to_string(info->state)) : std::string("gone"));
    }
  }
  EXPECT_EQ(wrong, 0U);
  EXPECT_EQ(dead_count.load(), expected_dead);

  const Snapshot s = q.snapshot();
  EXPECT_EQ(s.pending, 0U);
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.scheduled, 0U);
  EXPECT_EQ(s.dead, expected_dead);
  EXPECT_EQ(s.counters.enqueued, kTotal);
  EXPECT_EQ(s.counters.completed, kTotal - expected_dead);
  EXPECT_EQ(s.counters.dead, expected_dead);
  EXPECT_EQ(s.counters.expired, 0U);  // no lease outlived kLeaseMs
  for (const auto& li : s.lanes) {
    EXPECT_FALSE(li.paused) << li.group.str();
    EXPECT_EQ(li.limit, 0U) << li.group.str();
    EXPECT_EQ(li.depth, 0U) << li.group.str();
    EXPECT_EQ(li.active, 0U) << li.group.str();
  }
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << r.issues.size() << " issues, first: "
                         << (r.issues.empty() ? std::string() : r.issues[0].invariant + ": " + r.issues[0].detail);
  EXPECT_GT(looks.load(), 0U);
  // Nothing here scribbles: a count would be a sweep that judged a live
  // structure damaged (a ringed lane's token taken for lost, say).
  EXPECT_EQ(q.corruption().count, 0U) << "last: " << q.corruption().last_structure;
  RecordProperty("full_retries", std::to_string(full_retries.load()));
  RecordProperty("looks", std::to_string(looks.load()));
}

}  // namespace
}  // namespace fairlane
