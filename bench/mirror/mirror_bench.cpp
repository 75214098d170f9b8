// fairlane_mirror_bench: what mirroring a segment to Valkey costs.
//
//   fairlane_mirror_bench [--jobs N] [--server HOST:PORT] [--json]
//
// Starts a private redis-server on a free loopback port (no persistence)
// unless --server is given, then measures, each on a fresh segment:
//   resync     a mirror started on a segment holding N pending jobs: the
//              time until Valkey has acknowledged all of them
//   async      N claim+complete cycles on one thread with the mirror
//              running: the segment's rate, and the rate at which Valkey
//              acknowledged the 2N transitions (until the lag is 0)
//   async enq  N enqueues on one thread with the mirror running
//   sync       N enqueues on one thread with sync durability: the rate and
//              the latency of enqueue (each waits for Valkey's ack)
//   unmirrored the same N enqueues on a segment without a mirror
#include <fairlane/mirror.hpp>
#include <fairlane/queue.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.hpp"

using namespace fairlane;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

BrandedId group_of(std::uint64_t i) {
  std::string g = "TEN00000000000";
  g[13] = char('0' + i % 8);
  return *BrandedId::parse(g);
}

Queue make(const std::string& name, const std::string& url, Durability d, std::uint32_t jobs) {
  (void)Queue::remove(name);
  QueueOptions o;
  o.jobs = jobs;
  o.lanes = 16;
  o.mirror = url;
  o.durability = d;
  o.mirror_log = 1U << 20;
  auto q = Queue::create(name, o);
  if (!q) {
    fmt::print(stderr, "fairlane_mirror_bench: {}\n", q.error().message);
    std::exit(2);
  }
  return std::move(*q);
}

std::unique_ptr<Mirror> start(const std::string& name) {
  auto m = Mirror::start(name);
  if (!m) {
    fmt::print(stderr, "fairlane_mirror_bench: {}\n", m.error().message);
    std::exit(2);
  }
  return std::move(*m);
}

void wait_caught_up(Queue& q) {
  while (q.mirror_status().lag > 0 || q.mirror_status().acked == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t n = 50000;
  std::string server;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--jobs" && i + 1 < argc) n = std::uint32_t(std::stoul(argv[++i]));
    else if (a == "--server" && i + 1 < argc) server = argv[++i];
    else if (a == "--json") as_json = true;
    else {
      fmt::print(stderr, "usage: fairlane_mirror_bench [--jobs N] [--server HOST:PORT] [--json]\n");
      return 2;
    }
  }
  std::unique_ptr<test::RedisServer> own;
  if (server.empty()) {
    std::string error;
    own = test::RedisServer::start(FAIRLANE_BENCH_REDIS_SERVER, error);
    if (!own) {
      fmt::print(stderr, "fairlane_mirror_bench: {}\n", error);
      return 2;
    }
    server = "127.0.0.1:" + std::to_string(own->port());
  }
  const std::string name = "fairlane-mirror-bench-" + std::to_string(::getpid());
  nlohmann::json out = {{"jobs", n}, {"server", server}};

  {  // resync
    Queue q = make(name, "valkey://" + server + "/resync", Durability::async, n + 16);
    for (std::uint32_t i = 0; i < n; ++i) q.enqueue(group_of(i), q.mint(), "payload of a typical small job");
    const auto t0 = Clock::now();
    auto m = start(name);
    wait_caught_up(q);
    out["resync_jobs_per_s"] = n / secs(t0, Clock::now());
    m->stop();
  }
  {  // async: claim+complete with the mirror running
    Queue q = make(name, "valkey://" + server + "/async", Durability::async, n + 16);
    for (std::uint32_t i = 0; i < n; ++i) q.enqueue(group_of(i), q.mint(), "payload of a typical small job");
    auto m = start(name);
    wait_caught_up(q);
    const auto t0 = Clock::now();
    Lease l;
    for (std::uint32_t i = 0; i < n; ++i) {
      q.claim(l, 60000);
      q.complete(l.id, l.token);
    }
    const auto t1 = Clock::now();
    wait_caught_up(q);
    const auto t2 = Clock::now();
    out["async_segment_cycles_per_s"] = n / secs(t0, t1);
    out["async_valkey_transitions_per_s"] = 2.0 * n / secs(t0, t2);
    m->stop();
  }
  {  // async enqueue with the mirror running
    Queue q = make(name, "valkey://" + server + "/async-enqueue", Durability::async, n + 16);
    auto m = start(name);
    const auto t0 = Clock::now();
    for (std::uint32_t i = 0; i < n; ++i) q.enqueue(group_of(i), q.mint(), "payload of a typical small job");
    out["async_enqueues_per_s"] = n / secs(t0, Clock::now());
    wait_caught_up(q);
    m->stop();
  }
  {  // sync enqueue
    Queue q = make(name, "valkey://" + server + "/sync", Durability::sync, n + 16);
    auto m = start(name);
    std::vector<double> us;
    us.reserve(n);
    const auto t0 = Clock::now();
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto a = Clock::now();
      const EnqueueStatus st = q.enqueue(group_of(i), q.mint(), "payload of a typical small job");
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - a).count());
      if (st != EnqueueStatus::enqueued) {
        fmt::print(stderr, "fairlane_mirror_bench: sync enqueue: {}\n", to_string(st));
        return 3;
      }
    }
    out["sync_enqueues_per_s"] = n / secs(t0, Clock::now());
    std::sort(us.begin(), us.end());
    out["sync_enqueue_p50_us"] = us[us.size() / 2];
    out["sync_enqueue_p99_us"] = us[us.size() * 99 / 100];
    m->stop();
  }
  {  // the same enqueues, unmirrored
    (void)Queue::remove(name);
    QueueOptions o;
    o.jobs = n + 16;
    o.lanes = 16;
    auto q = Queue::create(name, o);
    const auto t0 = Clock::now();
    for (std::uint32_t i = 0; i < n; ++i) q->enqueue(group_of(i), q->mint(), "payload of a typical small job");
    out["unmirrored_enqueues_per_s"] = n / secs(t0, Clock::now());
  }
  (void)Queue::remove(name);

  if (as_json) {
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("fairlane_mirror_bench: {} jobs, valkey {}\n", n, server);
    fmt::print("  resync (mirror start)        {:>12.0f} jobs/s\n", out["resync_jobs_per_s"].get<double>());
    fmt::print("  async claim+complete         {:>12.0f} cycles/s in the segment\n", out["async_segment_cycles_per_s"].get<double>());
    fmt::print("                               {:>12.0f} transitions/s acknowledged by Valkey\n", out["async_valkey_transitions_per_s"].get<double>());
    fmt::print("  async enqueue                {:>12.0f} enqueues/s\n", out["async_enqueues_per_s"].get<double>());
    fmt::print("  sync enqueue                 {:>12.0f} enqueues/s, p50 {:.0f} us, p99 {:.0f} us\n",
               out["sync_enqueues_per_s"].get<double>(), out["sync_enqueue_p50_us"].get<double>(), out["sync_enqueue_p99_us"].get<double>());
    fmt::print("  unmirrored enqueue           {:>12.0f} enqueues/s\n", out["unmirrored_enqueues_per_s"].get<double>());
  }
  return 0;
}
