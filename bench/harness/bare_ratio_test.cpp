// The bare flow's judgement over rounds (bare_ratio.hpp): pairing, order
// and median.
#include <cmath>
#include <cstdio>

#include "bare_ratio.hpp"
#include "check.hpp"

using fairlane::bench::bare_ratio;
using fairlane::bench::check_failures;

namespace {

bool near(double x, double y) { return std::fabs(x - y) < 1e-12; }

}  // namespace

int main() {
  // Odd count: the middle ratio, not the mean (0.5, 0.4, 2.0: mean 0.967).
  auto r = bare_ratio({1.0, 2.0, 4.0}, {2.0, 5.0, 2.0});
  CHECK(r.each.size() == 3 && near(r.each[0], 0.5) && near(r.each[1], 0.4) && near(r.each[2], 2.0));
  CHECK(near(r.median, 0.5) && near(r.lo, 0.4) && near(r.hi, 2.0));
  // Even count: the mean of the middle two, whatever the order run.
  r = bare_ratio({3.0, 1.0, 2.0, 4.0}, {1.0, 1.0, 1.0, 1.0});
  CHECK(near(r.median, 2.5) && near(r.lo, 1.0) && near(r.hi, 4.0));
  CHECK(near(r.each[0], 3.0));  // kept in the order run
  // Only the rounds both peers ran are paired (one peer stopped short).
  r = bare_ratio({1.0, 1.0, 9.0}, {2.0, 4.0});
  CHECK(r.each.size() == 2 && near(r.median, 0.375));
  // A round with no rate on the divisor's side is left out; none: all 0.
  r = bare_ratio({1.0, 1.0}, {0.0, 2.0});
  CHECK(r.each.size() == 1 && near(r.median, 0.5));
  r = bare_ratio({1.0}, {});
  CHECK(r.each.empty() && r.median == 0);
  if (check_failures) std::fprintf(stderr, "%d check(s) failed\n", check_failures);
  return check_failures ? 1 : 0;
}
