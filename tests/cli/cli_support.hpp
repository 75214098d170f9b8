// Running the `fairlane` tool from the CLI tests and judging its answers.
#pragma once

#include "test_support.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#ifndef FAIRLANE_CLI_PATH
#error "FAIRLANE_CLI_PATH must name the fairlane tool"
#endif

namespace fairlane::test {

using CliRun = ProgramRun;

inline CliRun run_cli(const std::vector<std::string>& args, const std::string& stdin_path = "/dev/null") {
  return run_program(FAIRLANE_CLI_PATH, args, stdin_path);
}

inline std::string show(const CliRun& r) {
  return "exit " + std::to_string(r.exit_code) + (r.signal ? " signal " + std::to_string(r.signal) : std::string()) +
         "\nstdout: " + r.out + "\nstderr: " + r.err;
}

inline bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

inline std::string first_line(std::string s) {
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

// An error: exit 2 and exactly one non-empty line on stderr, prefixed "fairlane: ".
inline void expect_error(const CliRun& r, std::string_view must_mention = {}) {
  EXPECT_EQ(r.exit_code, 2) << show(r);
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  EXPECT_FALSE(err.empty()) << show(r);
  EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line on stderr: " << show(r);
  EXPECT_EQ(r.err.rfind("fairlane: ", 0), 0U) << show(r);
  if (!must_mention.empty()) {
    EXPECT_TRUE(contains(r.err, must_mention)) << "want '" << must_mention << "': " << show(r);
  }
}

// Runs it, expects exit 0 and JSON on stdout.
inline nlohmann::json cli_json(const std::vector<std::string>& args) {
  const CliRun r = run_cli(args);
  EXPECT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << show(r);
  return j;
}

}  // namespace fairlane::test
