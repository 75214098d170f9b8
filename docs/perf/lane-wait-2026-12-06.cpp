// Ad-hoc: a new tenant's producer at a queue whose lanes are all held by
// tenants with work (lanes_full), parked in enqueue_wait against polling
// enqueue (every 1 ms, or back to back with a pause), and what a producer
// parked for a lane costs the consumers' frees meanwhile.
//
// Part 1, the newcomer: 4 group lanes, each held by a resident tenant with
// one job. A newcomer thread asks for a fifth group; once it is waiting,
// the main thread claims and completes one resident's job (that lane goes
// idle). Measured: from just before that complete to the newcomer's
// admission (wall clock), and the newcomer's CPU time over the round.
//
// Part 2, the frees: the same 4 lanes, each with a backlog of 2,000 jobs;
// the main thread claims and completes 6,000 of them (no lane goes idle),
// with no producer parked, then with one parked for a lane, interleaved.
//
// Build and run (from the repository root, after a release build):
//   g++ -O2 -std=c++20 -I include -I src docs/perf/lane-wait-2026-12-06.cpp \
//       build/release/libfairlane.a -lpthread -o /tmp/lanewait && /tmp/lanewait
#include <fairlane/queue.hpp>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "segment.hpp"  // the header's lane_waiters, to see the newcomer parked

using namespace fairlane;
using namespace std::chrono_literals;
namespace {

std::uint64_t now_ns() {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}
std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ULL + std::uint64_t(ts.tv_nsec);
}

const char* kName = "lane_wait_bench";
constexpr int kResidents = 4;
BrandedId resident(int i) { return BrandedId::make("RES", std::uint64_t(i + 1)); }

enum class Mode { wait, poll_1ms, spin };
const char* name_of(Mode m) { return m == Mode::wait ? "enqueue_wait" : m == Mode::poll_1ms ? "poll 1 ms" : "spin"; }

Queue make_queue() {
  QueueOptions o;
  o.jobs = 16384;
  o.lanes = kResidents;
  o.payload_bytes = 64;
  o.recovery_ms = 60000;
  (void)Queue::remove(kName);
  return std::move(Queue::create(kName, o).value());
}

void drain(Queue& q) {
  Lease l;
  while (q.claim(l, 60000)) (void)q.complete(l.id, l.token);
}

struct Round {
  std::uint64_t latency_ns = 0, cpu_ns = 0;
};

Round newcomer_round(Queue& q, Mode mode, std::uint64_t round) {
  for (int i = 0; i < kResidents; ++i)
    if (q.enqueue(resident(i), q.mint(), "r") != EnqueueStatus::enqueued) std::abort();
  const BrandedId group = BrandedId::make("NEW", round + 1);
  std::atomic<std::uint64_t> done_at{0}, cpu{0};
  std::atomic<bool> started{false};
  std::thread t([&] {
    const std::uint64_t c0 = thread_cpu_ns();
    const BrandedId id = q.mint();
    started = true;
    EnqueueStatus st;
    if (mode == Mode::wait) {
      st = q.enqueue_wait(group, id, "n", 10s);
    } else {
      while ((st = q.enqueue(group, id, "n")) == EnqueueStatus::lanes_full) {
        if (mode == Mode::poll_1ms)
          std::this_thread::sleep_for(1ms);
        else
          for (int k = 0; k < 64; ++k) __builtin_ia32_pause();
      }
    }
    done_at = now_ns();
    cpu = thread_cpu_ns() - c0;
    if (st != EnqueueStatus::enqueued) std::abort();
  });
  while (!started) std::this_thread::yield();
  // Waiting: parked (the header counts it), or polling for a while.
  if (mode == Mode::wait) {
    auto& s = detail::QueueAccess::segment(q);
    while (s.h->lane_waiters.load() == 0) std::this_thread::yield();
  }
  // 3 ms, and a part of a millisecond that moves round by round: a poller
  // sleeping 1 ms steps is caught at every phase of its step.
  std::this_thread::sleep_for(3ms + std::chrono::microseconds((round * 389) % 1000));
  Lease l;
  if (!q.claim(l, 60000)) std::abort();
  const std::uint64_t t0 = now_ns();
  (void)q.complete(l.id, l.token);
  t.join();
  Round r{done_at - t0, cpu};
  drain(q);
  return r;
}

// Claims and completes n jobs of lanes that keep work; ns a claim + complete.
double frees(Queue& q, bool parked_waiter, std::uint64_t round) {
  for (int i = 0; i < kResidents; ++i)
    for (int k = 0; k < 2000; ++k)
      if (q.enqueue(resident(i), q.mint(), "r") != EnqueueStatus::enqueued) std::abort();
  std::thread t;
  if (parked_waiter) {
    t = std::thread([&] { (void)q.enqueue_wait(BrandedId::make("WAI", round + 1), q.mint(), "w", 30s); });
    auto& s = detail::QueueAccess::segment(q);
    while (s.h->lane_waiters.load() == 0) std::this_thread::yield();
  }
  Lease l;
  const std::uint64_t t0 = now_ns();
  for (int k = 0; k < 6000; ++k) {
    if (!q.claim(l, 60000)) std::abort();
    (void)q.complete(l.id, l.token);
  }
  const double ns = double(now_ns() - t0) / 6000;
  drain(q);  // the lanes go idle: the waiter is admitted
  if (t.joinable()) t.join();
  drain(q);
  return ns;
}

template <class T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  Queue q = make_queue();
  std::printf("part 1: a new tenant's producer at lanes_full; 4 lanes held; one goes idle by a complete\n");
  std::printf("%-14s %8s %14s %14s %14s %16s\n", "mode", "rounds", "latency p50", "latency p90", "latency max",
              "CPU/round p50");
  std::uint64_t round = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (Mode m : {Mode::wait, Mode::poll_1ms, Mode::spin}) {
      std::vector<std::uint64_t> lat, cpu;
      for (int r = 0; r < 40; ++r) {
        const Round x = newcomer_round(q, m, round++);
        lat.push_back(x.latency_ns);
        cpu.push_back(x.cpu_ns);
      }
      std::sort(lat.begin(), lat.end());
      std::printf("%-14s %8zu %11.1f us %11.1f us %11.1f us %13.1f us\n", name_of(m), lat.size(),
                  double(lat[lat.size() / 2]) / 1e3, double(lat[lat.size() * 9 / 10]) / 1e3,
                  double(lat.back()) / 1e3, double(median(cpu)) / 1e3);
    }
  }
  std::printf("\npart 2: claim + complete of lanes that keep work (6,000 a run), ns each, median of 15 runs\n");
  std::vector<double> none, one;
  for (int r = 0; r < 15; ++r) {
    none.push_back(frees(q, false, round++));
    one.push_back(frees(q, true, round++));
  }
  std::printf("no producer parked: %.1f ns   one parked for a lane: %.1f ns   (ratio %.3f)\n", median(none),
              median(one), median(one) / median(none));
  (void)Queue::remove(kName);
  return 0;
}
