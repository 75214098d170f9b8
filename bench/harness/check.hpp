// CHECK for the harness's own test programs (no gtest in the benchmark
// build): a failed condition is printed with its place and counted in
// check_failures; main returns nonzero when any failed.
#pragma once

#include <cstdio>

namespace fairlane::bench {
inline int check_failures = 0;
}  // namespace fairlane::bench

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++::fairlane::bench::check_failures;                                          \
    }                                                                               \
  } while (0)
