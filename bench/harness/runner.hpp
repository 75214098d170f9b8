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
  std::string label;          // "fairlane/processes", "bare:fairlane/processes", "mutex-shm/processes@2x2"
  std::string peer;
  Topology topology = Topology::processes;
  Mode mode = Mode::flow;
  bool pxc = false;           // the spec set its own producers x consumers (@PxC)
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

  // Flow rounds (--flow-rounds; fairlane and mutex-shm, processes, without
  // @PxC): cycles_per_s of this run and of each flow-only run after it, in
  // the order run, and the line handoff measured before each (ns; 0: not
  // measured). flow_handoff_ns: this run's.
  double flow_handoff_ns = 0;
  std::vector<double> flow_rounds;
  std::vector<double> flow_handoffs;
  std::string flow_rounds_note;         // why the rounds stopped short, or empty

  // Mode::bare: every job through, from the first worker's start to the last
  // consumer's end.
  struct Bare {
    std::uint64_t jobs = 0;          // claimed + completed (== sent)
    double seconds = 0;
    double per_s = 0;                // jobs / seconds: the bare flow rate
    double producer_per_s = 0;       // sent / the producers' own time
    double consumer_cpu_ns = 0;      // consumers' CPU per job
    double producer_cpu_ns = 0;      // producers' CPU per job
    std::uint64_t capacity = 0;      // jobs the queue held
    // per_s of every round (--bare-rounds), in the order run; the fields
    // above are the first round's.
    std::vector<double> rounds;
    std::string rounds_note;         // why the rounds stopped short, or empty
    // One cache line's move between the first producer's CPU and the first
    // consumer's, ns (handoff.hpp), measured just before this run's workers
    // start (0: not measured); and by round, as `rounds`.
    double handoff_ns = 0;
    std::vector<double> handoffs;
  } bare;
  // Mode::batch: per-job rates, single calls (round 1) and batch calls (round 2).
  struct Batch {
    std::uint32_t size = 0;
    std::uint64_t jobs = 0;               // per round
    double enqueue_per_s = 0;             // producers alone, enqueue
    double enqueue_batch_per_s = 0;       // producers alone, enqueue_batch
    double drain_per_s = 0;               // consumers alone, claim + complete
    double drain_batch_per_s = 0;         // consumers alone, claim_batch + complete_batch
    double claim_batch_per_s = 0;         // jobs per second of time inside claim_batch
    double complete_batch_per_s = 0;      // jobs per second of time inside complete_batch
  } batch;
};

// Runs the peer named by spec ("name" or "name/threads"); never throws.
RunResult run_peer(const Options& o, const std::string& spec, const PeerEnv& env);

// argv: <exe> --worker <control> producer|consumer|all <index>
int worker_main(int argc, char** argv);

}  // namespace fairlane::bench
