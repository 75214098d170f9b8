// Shared plumbing of the micro-benchmarks.
//
// Google Benchmark calls a benchmark function several times (it grows the
// iteration count until the run is long enough), so building a segment with
// a million pending jobs inside the function would be paid again and again.
// The Pool keeps one prepared segment per (configuration, contents) and
// hands it back while the same benchmark family runs; each benchmark leaves
// the contents as it found them. A benchmark of another configuration
// replaces it, and the last one is removed at exit, so no segment outlives
// the run (unless the process is killed).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "fairlane/queue.hpp"

namespace fairlane::micro {

struct SegmentSpec {
  std::uint32_t jobs = 1u << 16;
  std::uint32_t lanes = 64;
  std::uint32_t payload = 64;
  std::string contents;  // what the benchmark keeps in it, e.g. "lanes=100,depth=3"
  std::uint32_t processes = 0;  // QueueOptions::processes; 0: its default
  std::uint32_t recovery_ms = 0;  // QueueOptions::recovery_ms; 0: its default
  bool operator==(const SegmentSpec&) const = default;
};

inline std::uint32_t pow2_at_least(std::uint64_t v) {
  std::uint64_t p = 1024;
  while (p < v) p <<= 1;
  return std::uint32_t(p);
}

class Pool {
 public:
  // The segment for spec; `fresh` says the caller must fill it. Thread-safe:
  // the threads of a multi-threaded benchmark all get the same segment, and
  // exactly one of them sees fresh == true (the first; the others wait for
  // it to call ready()).
  static fairlane::Queue& acquire(const SegmentSpec& spec, bool& fresh) {
    Pool& p = instance();
    std::unique_lock lock(p.mu_);
    if (p.q_ && p.spec_ == spec) {
      p.cv_.wait(lock, [&] { return p.filled_; });
      fresh = false;
      return *p.q_;
    }
    p.drop_locked();
    fairlane::QueueOptions o;
    o.jobs = spec.jobs;
    o.lanes = spec.lanes;
    o.payload_bytes = spec.payload;
    if (spec.processes) o.processes = spec.processes;
    if (spec.recovery_ms) o.recovery_ms = spec.recovery_ms;
    p.name_ = "fairlane-micro-" + std::to_string(getpid()) + "-" + std::to_string(p.serial_++);
    (void)fairlane::Queue::remove(p.name_);
    auto q = fairlane::Queue::create(p.name_, o);
    if (!q) {
      std::fprintf(stderr, "fairlane_micro: Queue::create(%s, jobs=%u lanes=%u payload=%u): %s\n", p.name_.c_str(),
                   spec.jobs, spec.lanes, spec.payload, q.error().message.c_str());
      std::exit(1);
    }
    p.q_ = std::make_unique<fairlane::Queue>(std::move(q).value());
    p.spec_ = spec;
    p.filled_ = false;
    fresh = true;
    return *p.q_;
  }

  // The filler is done; other threads may use the segment.
  static void ready() {
    Pool& p = instance();
    {
      std::lock_guard lock(p.mu_);
      p.filled_ = true;
    }
    p.cv_.notify_all();
  }

  // Forget the segment (a benchmark could not restore its contents).
  static void drop() {
    Pool& p = instance();
    std::lock_guard lock(p.mu_);
    p.drop_locked();
  }

  ~Pool() { drop_locked(); }

 private:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }
  void drop_locked() {
    if (!q_) return;
    q_.reset();
    (void)fairlane::Queue::remove(name_);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<fairlane::Queue> q_;
  SegmentSpec spec_;
  std::string name_;
  bool filled_ = false;
  int serial_ = 0;
};

inline std::vector<fairlane::BrandedId> make_groups(std::uint32_t n) {
  std::vector<fairlane::BrandedId> g(n);
  for (std::uint32_t i = 0; i < n; ++i) g[i] = fairlane::BrandedId::make("TEN", i + 1);
  return g;
}

// Enqueue `per_lane` jobs into each group, round-robin across the groups.
inline void fill(fairlane::Queue& q, const std::vector<fairlane::BrandedId>& groups, std::uint64_t per_lane,
                 std::string_view payload, benchmark::State& state) {
  for (std::uint64_t d = 0; d < per_lane; ++d)
    for (const auto& g : groups) {
      const auto st = q.enqueue(g, q.mint(), payload);
      if (st != fairlane::EnqueueStatus::enqueued) {
        state.SkipWithError(("fill: enqueue " + std::string(fairlane::to_string(st))).c_str());
        return;
      }
    }
}

// Enqueue into the group `group_of(k)` for k = 0, 1, ... until the queue
// answers `full`: every slot holds a job. False (and the benchmark skipped)
// on any other refusal.
template <class GroupOf>
bool fill_to_full(fairlane::Queue& q, GroupOf&& group_of, std::string_view payload, benchmark::State& state) {
  for (std::uint64_t k = 0;; ++k) {
    const auto st = q.enqueue(group_of(k), q.mint(), payload);
    if (st == fairlane::EnqueueStatus::full) return true;
    if (st != fairlane::EnqueueStatus::enqueued) {
      state.SkipWithError(("fill: enqueue " + std::string(fairlane::to_string(st))).c_str());
      return false;
    }
  }
}

// A claimed job, kept for its completion.
struct Held {
  fairlane::BrandedId id;
  fairlane::BrandedId group;
  fairlane::Token token;
};

// Complete every held job and enqueue one new job into its group: the
// contents are back to what they were before the claims.
inline bool complete_and_refill(fairlane::Queue& q, std::vector<Held>& held, std::size_t n,
                                std::string_view payload, benchmark::State& state) {
  for (std::size_t i = 0; i < n; ++i) {
    if (q.complete(held[i].id, held[i].token) != fairlane::AckStatus::ok) {
      state.SkipWithError("complete refused a fresh lease");
      return false;
    }
    if (q.enqueue(held[i].group, q.mint(), payload) != fairlane::EnqueueStatus::enqueued) {
      state.SkipWithError("refill: enqueue refused");
      return false;
    }
  }
  return true;
}

inline constexpr std::uint32_t kLeaseMs = 600'000;  // never expires during a benchmark

}  // namespace fairlane::micro
