// The cache line handoff probe (handoff.hpp): what it refuses, that it
// measures something between two CPUs, and that it gives the caller its
// CPUs back.
#include <sched.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "handoff.hpp"
#include "proc.hpp"

using fairlane::bench::allowed_cpus;
using fairlane::bench::check_failures;
using fairlane::bench::line_handoff_ns;

int main() {
  std::string why;
  CHECK(line_handoff_ns(0, 0, 1000, 1, why) == 0 && why.find("one CPU") != std::string::npos);
  why.clear();
  CHECK(line_handoff_ns(-1, 0, 1000, 1, why) == 0 && why == "not pinned");
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2) {
    std::printf("handoff: one CPU allowed here; the measurement itself is not tried\n");
  } else {
    cpu_set_t before, after;
    CHECK(sched_getaffinity(0, sizeof before, &before) == 0);
    why.clear();
    const double ns = line_handoff_ns(cpus[0], cpus[1], 20000, 3, why);
    CHECK(sched_getaffinity(0, sizeof after, &after) == 0);
    // A move of a line between two CPUs: more than a nanosecond, less than
    // a millisecond on any machine this runs on (a probe that timed nothing
    // reads 0; one that hung would not return).
    CHECK(why.empty());
    CHECK(std::isfinite(ns) && ns > 1 && ns < 1e6);
    CHECK(CPU_EQUAL(&before, &after));  // the caller's CPUs given back
    std::printf("handoff: %.0f ns between CPUs %d and %d\n", ns, cpus[0], cpus[1]);
  }
  if (check_failures) std::fprintf(stderr, "%d check(s) failed\n", check_failures);
  return check_failures ? 1 : 0;
}
