// The orchestrator: one run of one peer (setup, spawn workers, pace the
// phases, collect and analyse), and the hidden worker mode it execs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fairness.hpp"
#include "histogram.hpp"
#include "options.hpp"
#include "peer.hpp"

namespace fairlane::bench {

struct RunResult {
  std::string label;          // "fairlane/processes"
  std::string peer;
  Topology topology = Topology::processes;
  std::string what;           // the peer's one-line description
  bool ok = false;
  bool skipped = false;
  std::string error;          // why it failed or was skipped

  Params params;              // as run (consumers: the best of the sweep)
  double warmup_s = 0, measured_s = 0;
  // Flow: producers and consumers at once, backlog capped.
  std::uint64_t cycles = 0;   // claim(+complete) cycles in the measured time
  double cycles_per_s = 0;
  std::uint64_t enqueued = 0;
  double enqueued_per_s = 0;
  // Drain: consumers alone on a pre-filled queue (claim+complete capacity).
  double fill_s = 0;
  std::uint64_t drained = 0;
  double drain_s = 0;
  double drained_per_s = 0;       // last round
  double cold_drain_per_s = 0;    // first round, on a fresh segment
  // CPU per drained job (last round): the consumers' own threads, and the
  // server's (Valkey) over the drain. Independent of what else the machine
  // runs, unlike the rates.
  double drain_consumer_cpu_ns = 0;
  double drain_server_cpu_ns = 0;
  double drain_faults_per_job = 0;  // consumers' minor page faults per drained job (last round)
  double cold_faults_per_job = 0;   // the same in the first round
  std::uint64_t full_retries = 0, empty_polls = 0, wake_timeouts = 0;
  Histogram claim, e2c, wake;
  FairnessResult fair;          // over the flow (needs lanes backlogged: consumers the bottleneck)
  ServedSeries series;
  FairnessResult drain_fair;    // over the recorded drain (every lane with jobs left is backlogged)
  ServedSeries drain_series;
  std::uint32_t processes = 0;     // worker processes
  std::uint64_t rss_max_kb = 0;    // largest VmHWM of one worker process
  std::uint64_t rss_sum_kb = 0;    // sum over worker processes
  std::uint64_t server_rss_kb = 0; // VmHWM of a server the peer started
  std::uint64_t shared_bytes = 0;  // the peer's shared segment, if any
  struct SweepPoint {
    std::uint32_t consumers;
    double flow_per_s;
    double drain_per_s;
  };
  std::vector<SweepPoint> sweep;
};

// Runs the peer named by spec ("name" or "name/threads"); never throws.
RunResult run_peer(const Options& o, const std::string& spec, const PeerEnv& env);

// argv: <exe> --worker <control> producer|consumer|all <index>
int worker_main(int argc, char** argv);

}  // namespace fairlane::bench
