// A RetryPolicy as two 64-bit words (RetryRecord, layout.hpp), and the
// precedence that decides what a fail() does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "fairlane/queue.hpp"
#include "fairlane/retry.hpp"

namespace fairlane::detail {

inline bool retry_valid(const RetryPolicy& p) noexcept {
  if (p.max_attempts > 0xFFFF) return false;
  return !p.backoff || p.backoff->valid();
}

//   a: bits 0..15 max_attempts | 16 has_backoff | 17 exponential |
//      18..27 jitter (1/1000) | 28..47 factor (1/1000)
//   b: bits 0..31 base_ms | 32..63 cap_ms
inline void retry_encode(const RetryPolicy& p, std::uint64_t& a, std::uint64_t& b) noexcept {
  a = p.max_attempts & 0xFFFF;
  b = 0;
  if (!p.backoff) return;
  const Backoff& k = *p.backoff;
  const auto jitter = std::uint64_t(std::llround(std::clamp(k.jitter, 0.0, 1.0) * 1000));
  const auto factor = std::uint64_t(std::llround(std::clamp(k.factor, 1.0, 1000.0) * 1000));
  a |= (1ULL << 16) | (std::uint64_t(k.kind == Backoff::Kind::exponential) << 17) | (jitter << 18) | (factor << 28);
  b = (std::uint64_t(k.base.count()) & 0xFFFFFFFF) | ((std::uint64_t(k.cap.count()) & 0xFFFFFFFF) << 32);
}

// Never fails: any bit pattern decodes to some policy within range (a
// scribbled slot yields an odd policy, never undefined behaviour).
inline RetryPolicy retry_decode(std::uint64_t a, std::uint64_t b) noexcept {
  RetryPolicy p;
  p.max_attempts = std::uint32_t(a & 0xFFFF);
  if (!(a & (1ULL << 16))) return p;
  Backoff k;
  k.kind = (a & (1ULL << 17)) ? Backoff::Kind::exponential : Backoff::Kind::fixed;
  k.jitter = std::min<double>(1000, double((a >> 18) & 1023)) / 1000.0;
  k.factor = std::clamp<double>(double((a >> 28) & 0xFFFFF), 1000, 1000000) / 1000.0;
  k.base = std::chrono::milliseconds(std::int64_t(b & 0xFFFFFFFF));
  k.cap = std::chrono::milliseconds(std::int64_t(b >> 32));
  if (k.kind == Backoff::Kind::fixed) k.cap = k.base;
  p.backoff = k;
  return p;
}

// What a fail() does: the call's options, else the job's policy, else the
// queue's default. `u` is the jitter draw in [0, 1).
struct FailPlan {
  std::uint32_t max_attempts = 1;
  std::uint64_t delay_ms = 0;
};
inline FailPlan plan_fail(const FailOptions& call, const RetryPolicy& job, const RetryPolicy& queue,
                          std::uint32_t attempt, double u) noexcept {
  FailPlan f;
  f.max_attempts = call.max_attempts ? *call.max_attempts
                   : job.max_attempts ? job.max_attempts
                   : queue.max_attempts ? queue.max_attempts
                                        : 1;
  if (call.delay_ms) {
    f.delay_ms = std::min(*call.delay_ms, kMaxDelayMs);  // a longer one waits the longest
  } else if (job.backoff) {
    f.delay_ms = std::uint64_t(job.backoff->delay(attempt, u).count());
  } else if (queue.backoff) {
    f.delay_ms = std::uint64_t(queue.backoff->delay(attempt, u).count());
  }
  return f;
}

}  // namespace fairlane::detail
