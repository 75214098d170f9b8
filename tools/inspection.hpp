// Live inspection and metrics: `watch`, `stats`, `dead`, `jobs` and `job`.
//
// Each takes a segment or a valkey:// queue (target.hpp) and reaches it
// through the Backend interface; what only a segment keeps (process records,
// wait histograms, a fixed capacity: Backend::capabilities) is marked absent
// on Valkey, never shown as zero. Those that only look attach as observers.
// Each command validates all its arguments before touching the queue and
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
  std::string listen;                 // HOST:PORT: serve /metrics over HTTP until SIGINT/SIGTERM
  std::string histograms = "top:16";  // none | top:N | all: which groups get a wait histogram
  bool prometheus = false, json = false;
  bool log_requests = false;          // --listen: one line per request on stdout
};
struct DeadArgs {
  std::string segment, action, id, limit = "1000";
  bool all = false, json = false;
};
struct JobsArgs {
  std::string segment, group, state, limit = "100";
  bool json = false;
};
struct JobArgs {
  std::string segment, id;
  bool json = false, payload_only = false;
};

int run_watch(const WatchArgs& a);
int run_stats(const StatsArgs& a);
int run_dead(const DeadArgs& a);
int run_jobs(const JobsArgs& a);
int run_job(const JobArgs& a);

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
  JobArgs job_;
};

}  // namespace fairlane::cli
