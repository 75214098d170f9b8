// fairlane's bare flow over Boost's, round by round (--bare-rounds): the
// ratio of each round both peers ran, and their median, which judges the
// target (report.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace fairlane::bench {

struct BareRatio {
  std::vector<double> each;  // in the order run
  double median = 0, lo = 0, hi = 0;
};

// a[k] / b[k] for every round k both ran (b[k] > 0); their median (the mean
// of the middle two for an even count), least and greatest. All 0 when no
// round pairs.
inline BareRatio bare_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  BareRatio r;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t k = 0; k < n; ++k)
    if (b[k] > 0) r.each.push_back(a[k] / b[k]);
  if (r.each.empty()) return r;
  std::vector<double> s = r.each;
  std::sort(s.begin(), s.end());
  const std::size_t m = s.size() / 2;
  r.median = s.size() % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  r.lo = s.front();
  r.hi = s.back();
  return r;
}

}  // namespace fairlane::bench
