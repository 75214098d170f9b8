// Retry policies (retry.hpp): the backoff arithmetic, shared by the queue's
// fail(), the Valkey backend and the worker runtime.
#include "fairlane/retry.hpp"

#include <algorithm>
#include <cmath>

namespace fairlane {

Backoff Backoff::fixed(std::chrono::milliseconds delay, double jitter) noexcept {
  Backoff b;
  b.kind = Kind::fixed;
  b.base = delay;
  b.cap = delay;
  b.factor = 1.0;
  b.jitter = jitter;
  return b;
}

Backoff Backoff::exponential(std::chrono::milliseconds base, std::chrono::milliseconds cap, double factor,
                             double jitter) noexcept {
  Backoff b;
  b.kind = Kind::exponential;
  b.base = base;
  b.cap = cap;
  b.factor = factor;
  b.jitter = jitter;
  return b;
}

std::chrono::milliseconds Backoff::delay(std::uint32_t attempt, double u) const noexcept {
  const std::uint32_t n = std::max<std::uint32_t>(attempt, 1);
  double d = static_cast<double>(std::max<std::int64_t>(0, base.count()));
  if (kind == Kind::exponential) {
    // pow may overflow to +inf for a large n; min() with the cap absorbs it.
    d = std::min(d * std::pow(std::max(1.0, factor), static_cast<double>(n - 1)),
                 static_cast<double>(std::max<std::int64_t>(0, cap.count())));
  }
  const double j = std::clamp(jitter, 0.0, 1.0);
  if (j > 0) d -= d * j * std::clamp(u, 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(std::max(0.0, d))));
}

bool Backoff::valid() const noexcept {
  constexpr std::int64_t kMaxMs = 0xFFFFFFFFLL;
  if (base.count() < 0 || base.count() > kMaxMs || cap.count() < 0 || cap.count() > kMaxMs) return false;
  if (!(factor >= 1.0 && factor <= 1000.0) || !(jitter >= 0.0 && jitter <= 1.0)) return false;
  // A fixed delay is its base (delay() does not read the cap, and the
  // stored form keeps cap = base): only an exponential one is capped.
  return kind == Kind::fixed || base <= cap;
}

}  // namespace fairlane
