// Hostile bytes (issue 16): 2 producer and 2 consumer processes work a
// segment (512 jobs, 16 lanes) while a scribbler process writes random 8- or
// 16-byte values at random offsets of its body (past the first 4096 bytes,
// which hold the header) every ~100 us for 2 s.
//
// What must hold: no worker dies (by a signal, or a sanitizer's report), none
// hangs (each finishes its loop within 60 s of the scribbler's end; a worker
// that meets `corrupt` statuses counts them and goes on), and the damage is
// seen (a corrupt status, or corruption().count > 0). Afterwards
// Queue::repair(true) leaves fsck clean and a fresh enqueue / claim /
// complete round trip works. Three seeds.
//
// Every process is forked (no exec) from the single-threaded test process;
// each opens its own Queue handle; they report through an anonymous shared
// block. Label `multiproc`.
#include "forked_child.hpp"
#include "test_support.hpp"

#include <fairlane/detail/layout.hpp>
#include <fairlane/queue.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::ForkedChild;
using test::SharedBlock;
using Clock = std::chrono::steady_clock;

constexpr unsigned kProducers = 2, kConsumers = 2, kWorkers = kProducers + kConsumers;
constexpr auto kScribbleFor = std::chrono::seconds(2);
constexpr auto kHangGuard = std::chrono::seconds(60);
constexpr std::size_t kSkip = 4096;  // the header is not scribbled
static_assert(sizeof(detail::Header) <= kSkip, "the header outgrew the bytes the scribbler skips");

BrandedId scribble_group(std::uint64_t n) { return BrandedId::make("SCR", n + 1); }

struct WorkerReport {
  std::atomic<std::uint64_t> ops;
  std::atomic<std::uint64_t> corrupt;          // statuses `corrupt`, every kind
  std::atomic<std::uint64_t> corrupt_enqueue, corrupt_claim, corrupt_ack, corrupt_fail, corrupt_lane;
  std::atomic<std::uint64_t> corruption_count;  // its corruption().count at the end
  std::atomic<std::uint32_t> attached, finished;
};

struct Shared {
  std::atomic<std::uint32_t> stop;
  std::atomic<std::uint64_t> writes;  // by the scribbler
  WorkerReport w[kWorkers];
  // The check after the run.
  std::atomic<std::uint64_t> corruption_before_repair;
  std::atomic<std::uint32_t> repaired, clean_after, round_trip;
  std::atomic<std::uint64_t> issues_before, issues_after;
  char message[512];
};

void say(Shared& sh, const std::string& m) { std::snprintf(sh.message, sizeof sh.message, "%s", m.c_str()); }

int producer(const std::string& seg, Shared& sh, WorkerReport& me, std::uint64_t seed) {
  auto r = Queue::open(seg);
  if (!r) return 4;
  Queue q = std::move(r.value());
  me.attached.store(1);
  std::mt19937_64 rng(seed);
  std::vector<BrandedId> recent;
  while (!sh.stop.load(std::memory_order_relaxed)) {
    me.ops.fetch_add(1, std::memory_order_relaxed);
    const BrandedId g = scribble_group(rng() % 8);
    const BrandedId id = q.mint();
    const EnqueueStatus st = q.enqueue(g, id, "scribble payload " + std::to_string(rng() % 1000));
    if (st == EnqueueStatus::corrupt) {
      me.corrupt.fetch_add(1);
      me.corrupt_enqueue.fetch_add(1);
    } else if (st == EnqueueStatus::enqueued && recent.size() < 64) {
      recent.push_back(id);
    } else if (st == EnqueueStatus::full) {
      ::usleep(50);
    }
    // Now and then the lane controls and the readers.
    const std::uint64_t n = me.ops.load(std::memory_order_relaxed);
    if (n % 64 == 0) {
      LaneStatus ls = LaneStatus::ok;
      switch (rng() % 4) {
        case 0: ls = q.set_limit(g, 1 + std::uint32_t(rng() % 4)); break;
        case 1: ls = q.clear_limit(g); break;
        case 2: ls = q.set_weight(g, 1 + std::uint32_t(rng() % 3)); break;
        case 3: ls = (rng() % 2) ? q.pause(g) : q.resume(g); break;
      }
      if (ls == LaneStatus::corrupt) {
        me.corrupt.fetch_add(1);
        me.corrupt_lane.fetch_add(1);
      }
      (void)q.resume(g);
    }
    if (n % 256 == 0) {
      (void)q.snapshot();
      (void)q.depth(g);
      if (!recent.empty()) (void)q.job(recent[rng() % recent.size()], true);
    }
    if (n % 2048 == 0) {
      (void)q.jobs();
      (void)q.fsck();
    }
  }
  me.corruption_count.store(q.corruption().count);
  me.finished.store(1);
  return 0;
}

void count_ack(WorkerReport& me, AckStatus st) {
  if (st != AckStatus::corrupt) return;
  me.corrupt.fetch_add(1);
  me.corrupt_ack.fetch_add(1);
}

int consumer(const std::string& seg, Shared& sh, WorkerReport& me, std::uint64_t seed) {
  auto r = Queue::open(seg);
  if (!r) return 4;
  Queue q = std::move(r.value());
  me.attached.store(1);
  std::mt19937_64 rng(seed);
  Lease l;
  std::vector<Lease> batch(4);
  while (!sh.stop.load(std::memory_order_relaxed)) {
    me.ops.fetch_add(1, std::memory_order_relaxed);
    if (me.ops.load(std::memory_order_relaxed) % 16 == 0) {
      const std::size_t n = q.claim_batch(batch, 5000);
      std::vector<AckStatus> st(n);
      q.complete_batch(std::span<const Lease>(batch.data(), n), st);
      for (const AckStatus s : st) count_ack(me, s);
      continue;
    }
    const ClaimStatus cs = q.try_claim(l, 5000);
    if (cs == ClaimStatus::corrupt) {
      me.corrupt.fetch_add(1);
      me.corrupt_claim.fetch_add(1);
      continue;
    }
    if (cs != ClaimStatus::claimed) {
      if (q.claim_wait(l, 5000, std::chrono::milliseconds(2))) count_ack(me, q.complete(l.id, l.token));
      continue;
    }
    switch (rng() % 20) {
      case 0: {
        const FailStatus fs = q.fail(l.id, l.token, FailOptions{0, 3, "scribbled"});
        if (fs == FailStatus::corrupt) {
          me.corrupt.fetch_add(1);
          me.corrupt_fail.fetch_add(1);
        }
        break;
      }
      case 1: count_ack(me, q.release(l.id, l.token)); break;
      case 2:
        count_ack(me, q.extend(l.id, l.token, 5000));
        count_ack(me, q.complete(l.id, l.token));
        break;
      default: count_ack(me, q.complete(l.id, l.token)); break;
    }
    if (me.ops.load(std::memory_order_relaxed) % 512 == 0) (void)q.tick();
  }
  me.corruption_count.store(q.corruption().count);
  me.finished.store(1);
  return 0;
}

int scribbler(const std::string& seg, Shared& sh, std::uint64_t seed) {
  const int fd = ::shm_open(("/" + seg).c_str(), O_RDWR, 0);
  if (fd < 0) return 4;
  struct stat stt {};
  if (::fstat(fd, &stt) != 0 || std::size_t(stt.st_size) <= kSkip + 16) return 4;
  const std::size_t size = std::size_t(stt.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 4;
  auto* base = static_cast<unsigned char*>(p);
  std::mt19937_64 rng(seed);
  const auto until = Clock::now() + kScribbleFor;
  const timespec gap{0, 100'000};
  while (Clock::now() < until) {
    const std::size_t len = (rng() % 2) ? 8 : 16;
    const std::size_t at = kSkip + std::size_t(rng() % (size - kSkip - len));
    const std::uint64_t v[2] = {rng(), rng()};
    std::memcpy(base + at, v, len);
    sh.writes.fetch_add(1, std::memory_order_relaxed);
    ::nanosleep(&gap, nullptr);
  }
  ::munmap(p, size);
  ::close(fd);
  return 0;
}

// After the run: what the damage looked like, the forced repair, fsck and a
// round trip on a fresh lane.
int check_after(const std::string& seg, Shared& sh) {
  auto r = Queue::open(seg);
  if (!r) {
    say(sh, "open after the scribbling: " + r.error().message);
    return 4;
  }
  Queue q = std::move(r.value());
  sh.corruption_before_repair.store(q.corruption().count);
  auto rep = q.repair(true);
  if (!rep) {
    say(sh, "repair(true): " + rep.error().message);
    return 3;
  }
  sh.repaired.store(1);
  sh.issues_before.store(rep->issues.size());
  const FsckReport after = q.fsck();
  sh.issues_after.store(after.issues.size());
  if (!after.clean()) {
    say(sh, "fsck after repair: " + after.issues[0].invariant + ": " + after.issues[0].detail);
    return 3;
  }
  sh.clean_after.store(1);
  const BrandedId g = BrandedId::make("RTP", 1);
  const BrandedId id = q.mint();
  q.resume_all();
  // Jobs that survived the repair may fill the slots or the lanes, or come
  // first: serve them, and let the leases the workers left behind expire
  // (the segment clock moves past their 5 s), until ours goes through.
  Lease l;
  auto make_room = [&] {
    if (q.try_claim(l, 60000) == ClaimStatus::claimed) {
      (void)q.complete(l.id, l.token);
    } else {
      q.advance_clock(6000);
      (void)q.tick();
    }
  };
  EnqueueStatus st = q.enqueue(g, id, "round trip");
  for (int i = 0; i < 2000 && (st == EnqueueStatus::full || st == EnqueueStatus::lanes_full); ++i) {
    make_room();
    st = q.enqueue(g, id, "round trip");
  }
  if (st != EnqueueStatus::enqueued) {
    say(sh, "enqueue after repair -> " + std::string(to_string(st)));
    return 3;
  }
  for (int i = 0; i < 2000; ++i) {
    const ClaimStatus cs = q.try_claim(l, 60000);
    if (cs == ClaimStatus::empty) {  // only leased or scheduled jobs ahead of it, or none
      q.advance_clock(6000);
      (void)q.tick();
      continue;
    }
    if (cs != ClaimStatus::claimed) {
      say(sh, "claim after repair -> " + std::string(to_string(cs)) + " before the round-trip job came");
      return 3;
    }
    if (l.id != id) {
      (void)q.complete(l.id, l.token);
      continue;
    }
    if (l.group != g || l.payload != "round trip") {
      say(sh, "the round-trip job came back from " + l.group.string() + " with '" + l.payload + "'");
      return 3;
    }
    const AckStatus a = q.complete(id, l.token);
    if (a != AckStatus::ok) {
      say(sh, "complete after repair -> " + std::string(to_string(a)));
      return 3;
    }
    sh.round_trip.store(1);
    return 0;
  }
  say(sh, "the round-trip job did not come back in 2000 claims");
  return 3;
}

class Scribble : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(Scribble, WorkersSurviveRandomBytesAndRepairRestores) {
  const std::uint64_t seed = GetParam();
  test::SegmentGuard guard(test::unique_segment_name());
  {
    QueueOptions o;
    o.jobs = 512;
    o.lanes = 16;
    o.payload_bytes = 64;
    auto created = Queue::create(guard.name(), o);
    ASSERT_TRUE(created.ok()) << test::describe(created.error());
    Queue& q = created.value();
    for (int i = 0; i < 200; ++i) ASSERT_EQ(q.enqueue(scribble_group(i % 8), q.mint(), "seed"), EnqueueStatus::enqueued);
  }  // the test process holds no handle during the run
  SharedBlock<Shared> sh;

  std::vector<ForkedChild> workers;
  for (unsigned i = 0; i < kWorkers; ++i) {
    const std::uint64_t s = seed * 1000 + i;
    if (i < kProducers)
      workers.emplace_back([&, i, s] { return producer(guard.name(), *sh, sh->w[i], s); });
    else
      workers.emplace_back([&, i, s] { return consumer(guard.name(), *sh, sh->w[i], s); });
  }
  // Every worker attached before the first scribble.
  const auto attach_by = Clock::now() + std::chrono::seconds(30);
  for (unsigned i = 0; i < kWorkers; ++i)
    while (!sh->w[i].attached.load() && !workers[i].poll() && Clock::now() < attach_by)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (unsigned i = 0; i < kWorkers; ++i) ASSERT_TRUE(sh->w[i].attached.load()) << "worker " << i << " did not attach: " << workers[i].describe();

  ForkedChild scribe([&] { return scribbler(guard.name(), *sh, seed); });
  const bool scribe_done = scribe.wait_for(std::chrono::seconds(60));
  EXPECT_TRUE(scribe_done && scribe.exited_zero()) << "scribbler " << scribe.describe();
  sh->stop.store(1);
  const auto stopped = Clock::now();

  std::uint64_t corrupt = 0, noticed = 0, ops = 0;
  for (unsigned i = 0; i < kWorkers; ++i) {
    const auto left = kHangGuard - (Clock::now() - stopped);
    const bool done = workers[i].wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max<Clock::duration>(left, Clock::duration::zero())));
    const char* role = i < kProducers ? "producer" : "consumer";
    if (!done) {
      ADD_FAILURE() << role << " " << i << " (pid " << workers[i].pid() << ") hung: still running "
                    << std::chrono::duration_cast<std::chrono::seconds>(kHangGuard).count()
                    << " s after the scribbler stopped, " << sh->w[i].ops.load() << " loop turns";
      workers[i].kill_now();
      workers[i].wait();
      continue;
    }
    EXPECT_FALSE(workers[i].signaled()) << role << " " << i << " " << workers[i].describe();
    EXPECT_TRUE(workers[i].exited_zero()) << role << " " << i << " " << workers[i].describe();
    corrupt += sh->w[i].corrupt.load();
    noticed += sh->w[i].corruption_count.load();
    ops += sh->w[i].ops.load();
  }
  std::printf("scribble seed %llu: %llu writes, %llu worker loop turns, corrupt statuses %llu "
              "(enqueue %llu, claim %llu, ack %llu, fail %llu, lane %llu), corruption().count seen %llu\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(sh->writes.load()),
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(corrupt),
              static_cast<unsigned long long>(sh->w[0].corrupt_enqueue + sh->w[1].corrupt_enqueue),
              static_cast<unsigned long long>(sh->w[2].corrupt_claim + sh->w[3].corrupt_claim),
              static_cast<unsigned long long>(sh->w[2].corrupt_ack + sh->w[3].corrupt_ack),
              static_cast<unsigned long long>(sh->w[2].corrupt_fail + sh->w[3].corrupt_fail),
              static_cast<unsigned long long>(sh->w[0].corrupt_lane + sh->w[1].corrupt_lane),
              static_cast<unsigned long long>(noticed));
  EXPECT_GT(sh->writes.load(), 1000U) << "the scribbler hardly wrote";

  ForkedChild check([&] { return check_after(guard.name(), *sh); });
  const bool checked = check.wait_for(kHangGuard);
  if (!checked) {
    check.kill_now();
    check.wait();
  }
  EXPECT_TRUE(checked) << "open / repair / fsck / round trip after the scribbling hung";
  EXPECT_FALSE(check.signaled()) << "the check after the run " << check.describe();
  const std::string msg(sh->message);
  std::printf("scribble seed %llu: corruption().count before repair %llu, fsck issues before repair %llu, after %llu\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(sh->corruption_before_repair.load()),
              static_cast<unsigned long long>(sh->issues_before.load()),
              static_cast<unsigned long long>(sh->issues_after.load()));
  EXPECT_TRUE(corrupt > 0 || noticed > 0 || sh->corruption_before_repair.load() > 0)
      << "random bytes all over the segment, and no process saw a corrupt status or counted a corruption";
  EXPECT_EQ(sh->repaired.load(), 1U) << msg;
  EXPECT_EQ(sh->clean_after.load(), 1U) << msg;
  EXPECT_EQ(sh->round_trip.load(), 1U) << msg;
  EXPECT_TRUE(check.exited_zero()) << check.describe() << ": " << msg;
}

INSTANTIATE_TEST_SUITE_P(Seeds, Scribble, ::testing::Values(1U, 2U, 3U));

}  // namespace
}  // namespace fairlane
