// Live inspection and metrics: `watch`, `stats`, `dead` and `jobs`.
//
// These read what only a segment has (job listing, wait histograms, the
// process table), so they take a segment name and open it with Queue.
// Each command validates all its arguments before touching the segment and
// returns the exit code; failures are thrown as cli::Failure.
#pragma once

#include <functional>
#include <string>

namespace CLI { class App; }

namespace fairlane::cli {

struct WatchArgs {
  std::string segment, interval_ms = "1000";
  bool once = false;
};
struct StatsArgs {
  std::string segment, output;
  bool prometheus = false, json = false;
};
struct DeadArgs {
  std::string segment, action, id, limit = "1000";
  bool all = false, json = false;
};
struct JobsArgs {
  std::string segment, group, state, limit = "100";
  bool json = false;
};

int run_watch(const WatchArgs& a);
int run_stats(const StatsArgs& a);
int run_dead(const DeadArgs& a);
int run_jobs(const JobsArgs& a);

// How the parser adds a subcommand and what to run when it is chosen.
using AddCommand = std::function<CLI::App*(const char* name, const char* help, std::function<int()> run)>;

// Owns the arguments of the inspection commands and registers them.
class InspectionCommands {
 public:
  void add(const AddCommand& sub);

 private:
  WatchArgs watch_;
  StatsArgs stats_;
  DeadArgs dead_;
  JobsArgs jobs_;
};

}  // namespace fairlane::cli
