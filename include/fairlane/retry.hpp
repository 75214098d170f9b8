// Retry policies: how long to wait before a failed job runs again, and how
// many deliveries it gets before it is dead-lettered.
//
// A policy can be given in three places; the first that says something wins:
//   1. the fail() call itself (FailOptions),
//   2. the job, at enqueue (EnqueueOptions::retry, kept with the job),
//   3. the queue (QueueOptions::default_retry, fixed at creation).
// The worker runtime (worker.hpp) uses the job's policy when the job has one
// and its own WorkerOptions otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace fairlane {

// How long to wait before retrying a job whose attempt `n` failed.
//
//   fixed        base
//   exponential  min(cap, base * factor^(n-1))
//
// then jitter j in [0, 1] takes off a uniform random share of up to j of it:
// the delay is drawn uniformly from [d * (1 - j), d]. j = 1 is "full jitter",
// j = 0.5 "equal jitter". An exponential delay never exceeds the cap; a
// fixed one is its base, whatever the cap (Backoff::fixed sets cap = base,
// and a stored fixed policy keeps cap = base: its cap is not used).
struct Backoff {
  enum class Kind { fixed, exponential };
  Kind kind = Kind::exponential;
  std::chrono::milliseconds base{1000};
  std::chrono::milliseconds cap{300000};
  double factor = 2.0;
  double jitter = 0.0;

  static Backoff fixed(std::chrono::milliseconds delay, double jitter = 0.0) noexcept;
  static Backoff exponential(std::chrono::milliseconds base, std::chrono::milliseconds cap,
                             double factor = 2.0, double jitter = 0.0) noexcept;

  // Pure: `u` in [0, 1) is the uniform draw for the jitter (ignored when
  // jitter is 0). attempt 0 is treated as 1. Thread-safe.
  std::chrono::milliseconds delay(std::uint32_t attempt, double u = 0.0) const noexcept;

  // Ranges a stored policy must respect: base and cap up to ~49.7 days
  // (32-bit ms), factor 1..1000, jitter 0..1, and for exponential
  // base <= cap (a fixed backoff's cap is not used, so not checked).
  bool valid() const noexcept;

  friend bool operator==(const Backoff&, const Backoff&) = default;
};

// What a job (or a queue) says about its retries. Each field may be unset.
struct RetryPolicy {
  // Deliveries before dead-lettering: fail() of delivery number
  // >= max_attempts dead-letters. 0: unset (1..65535 when set).
  std::uint32_t max_attempts = 0;
  std::optional<Backoff> backoff;  // unset: no opinion (the queue's default: retry at once)

  bool empty() const noexcept { return max_attempts == 0 && !backoff; }
  friend bool operator==(const RetryPolicy&, const RetryPolicy&) = default;
};

}  // namespace fairlane
