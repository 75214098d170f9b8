// Output of fairlane-bench: a table for people, JSON for scripts, PNG charts
// through gnuplot, and the design's performance targets checked against the
// run.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "options.hpp"
#include "runner.hpp"

namespace fairlane::bench {

struct TargetCheck {
  std::string name;     // what the design asks
  std::string detail;   // the numbers behind the verdict
  double ratio = 0;     // measured / required (>= 1 is met)
  bool met = false;
  bool known = false;   // false when a peer it needs did not run
  bool info = false;    // shown with the targets, not judged
  std::string missing;  // when !known: what it needs
};

// The design's performance targets (docs/design.md; the project's design card
// ../shared/DESIGN.md, "Performance targets") against this run's results and,
// for the cycle budget, the cycle counter's JSON report (cycle_json; empty:
// not given), and the same count of the mutex peer (cycle_peer_json), shown
// in the budget's line for reference.
std::vector<TargetCheck> check_targets(const std::vector<RunResult>& results, const std::string& cycle_json,
                                       const std::string& cycle_peer_json = {});

void print_table(const Options& o, const std::vector<RunResult>& results, const std::vector<TargetCheck>& targets);
nlohmann::json to_json(const Options& o, const std::vector<RunResult>& results,
                       const std::vector<TargetCheck>& targets);
// Writes data files, charts.gp and the PNGs into dir. False (with error) when
// gnuplot is missing or fails; the data files are written regardless.
bool write_charts(const std::string& dir, const std::vector<RunResult>& results, std::string& error);

}  // namespace fairlane::bench
