// A job's retry policy as its Valkey row keeps it (field fl_retry):
// "max;kind;base;cap;factor;jitter", kind '-' (no backoff), 'f' fixed or 'e'
// exponential; empty for none. Written by the backend's enqueue and by the
// mirror, read by the backend's claim, job(), and restore.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "fairlane/retry.hpp"

namespace fairlane::valkey {

// Kept as the segment keeps a policy (retry_codec.hpp), so that job() and a
// lease read back the same policy on every backend: a fixed backoff's cap
// is its base, factor and jitter are in 1/1000s.
inline std::string encode_policy(const RetryPolicy& p) {
  if (p.empty()) return {};
  char buf[160];
  if (!p.backoff) {
    std::snprintf(buf, sizeof buf, "%u;-;0;0;1;0", p.max_attempts);
  } else {
    const Backoff& b = *p.backoff;
    const bool fixed = b.kind == Backoff::Kind::fixed;
    const auto thousandths = [](double v, double lo, double hi) {
      return double(std::llround(std::clamp(v, lo, hi) * 1000)) / 1000;
    };
    std::snprintf(buf, sizeof buf, "%u;%c;%lld;%lld;%.17g;%.17g", p.max_attempts, fixed ? 'f' : 'e',
                  static_cast<long long>(b.base.count()), static_cast<long long>((fixed ? b.base : b.cap).count()),
                  thousandths(b.factor, 1.0, 1000.0), thousandths(b.jitter, 0.0, 1.0));
  }
  return buf;
}

// A row someone else wrote that does not parse: no policy.
inline RetryPolicy decode_policy(std::string_view s) {
  RetryPolicy p;
  if (s.empty()) return p;
  std::string parts[6];
  std::size_t k = 0;
  for (char c : s) {
    if (c == ';') {
      if (++k >= 6) break;
    } else {
      parts[k] += c;
    }
  }
  try {
    p.max_attempts = std::uint32_t(std::stoul(parts[0]));
    if (parts[1] == "f" || parts[1] == "e") {
      Backoff b;
      b.kind = parts[1] == "f" ? Backoff::Kind::fixed : Backoff::Kind::exponential;
      b.base = std::chrono::milliseconds(std::stoll(parts[2]));
      b.cap = std::chrono::milliseconds(std::stoll(parts[3]));
      b.factor = std::stod(parts[4]);
      b.jitter = std::stod(parts[5]);
      p.backoff = b;
    }
  } catch (const std::exception&) {
    return RetryPolicy{};
  }
  return p;
}

}  // namespace fairlane::valkey
