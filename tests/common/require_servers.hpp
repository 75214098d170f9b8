// FAIRLANE_REQUIRE_SERVERS: set (to anything but "0") where every server and
// program the tests and benchmark smoke runs need is installed (.ci/run sets
// it). There, one that does not start is a broken helper or machine: the
// tests fail instead of skipping (FAIRLANE_SKIP_OR_FAIL, test_support.hpp)
// and the smoke runs exit 1 instead of 77 (ctest's skip code for them).
//
// No gtest here: the benchmark programs include it too.
#pragma once

#include <cstdlib>
#include <string_view>

namespace fairlane::test {

inline bool servers_required() {
  const char* e = std::getenv("FAIRLANE_REQUIRE_SERVERS");
  return e && *e && std::string_view(e) != "0";
}

// The exit status of a smoke run that could not run here.
inline int skip_exit_code() { return servers_required() ? 1 : 77; }

}  // namespace fairlane::test
