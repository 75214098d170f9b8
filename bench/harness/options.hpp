// Run parameters of fairlane-bench and their command-line parsing.
//
// Params is the plain part every worker needs: the orchestrator copies it
// into the shared control block, so it holds fixed-width fields only.
// Options is the whole command line, seen by the orchestrator alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#ifndef FAIRLANE_BENCH_REDIS_SERVER
#define FAIRLANE_BENCH_REDIS_SERVER "/usr/bin/redis-server"
#endif

namespace fairlane::bench {

// What one run of a peer measures (the spec's prefix: "bare:fairlane").
enum class Mode : std::uint32_t {
  flow,   // flow, drain rounds, the recorded drain, wake-ups (no prefix)
  bare,   // bare flow: producers and consumers as fast as they can, no per-operation timing
  batch,  // fills and drains with single calls, then with batch calls (the peer's batch API)
};
const char* to_string(Mode m) noexcept;

enum class Topology : std::uint32_t {
  processes,  // every producer and consumer is its own process (fork + exec)
  threads,    // one worker process, one thread per producer and consumer
};
const char* to_string(Topology t) noexcept;

// Where the workers run. Where two processes that hand each other work run
// decides much of what a run measures: on one CPU a blocking queue fills
// while its reader sleeps and drains in a batch, and no cache line crosses
// between cores; on two, every hand-over moves lines from core to core. Left
// to the scheduler, the same peer lands either way from run to run (Boost's
// bare flow measured 3.5 M/s in one run and 16.8 M/s in another on the
// development machine), so a judged run pins.
enum class Placement : std::uint32_t {
  split,   // producer i on allowed CPU i mod n, consumer j on CPU (producers + j) mod n
  shared,  // every worker on the first allowed CPU
  os,      // no pinning: wherever the scheduler puts them
};
const char* to_string(Placement p) noexcept;

struct Params {
  std::uint32_t producers = 1;
  std::uint32_t consumers = 1;
  std::uint32_t lanes = 100;          // tenants; lane i is the i-th most popular
  std::uint32_t payload = 64;         // bytes per job, >= 16 (the stamp)
  double skew = 1.0;                  // Zipf exponent over lanes; 0 = uniform
  std::uint64_t backlog = 8192;       // flow: producers hold enqueued - claimed below this
  std::uint64_t drain_jobs = 100000;  // drain: fill up to this many jobs, then time the consumers alone
  std::uint32_t drain_rounds = 2;     // timed fill+drain rounds (the first on a fresh segment)
  std::uint32_t fair_round = 1;       // then one recorded round for fairness (0: none)
  std::uint32_t wake_rounds = 200;    // parked-consumer wake-ups to time
  std::uint32_t sample = 1;           // time one claim in `sample`
  std::uint64_t trace_cap = 1u << 20; // served-sequence records kept per consumer
  std::uint32_t lease_ms = 30000;
  Topology topology = Topology::processes;
  std::uint64_t seed = 0x5eed;
  Mode mode = Mode::flow;
  std::uint64_t bare_jobs = 2'000'000;  // bare: jobs each producer sends (lanes in turn)
  std::uint64_t bare_work_ns = 0;     // bare: time a consumer spends on each job between its claim and its complete
  std::uint32_t bare_blocking = 0;    // bare: 1 = the peers' blocking calls at full and empty (fairlane enqueue_wait,
                                      // claim_wait; Boost timed_send, timed_receive), not retries
  std::uint32_t batch = 32;           // batch: jobs per batch call
  std::uint64_t capacity = 0;         // jobs the queue holds; 0: the peer sizes it from backlog and drain_jobs
  Placement placement = Placement::split;
};
static_assert(std::is_trivially_copyable_v<Params>);

struct Options {
  std::vector<std::string> peers;     // "name" or "name/threads" / "name/processes"
  Params params;
  double warmup_s = 1.0;
  double duration_s = 5.0;
  double fill_s = 2.0;                // longest fill before the drain (a slow peer gets fewer jobs)
  std::vector<std::uint32_t> valkey_consumers{1, 2, 4, 8};
  std::uint64_t window = 0;           // fairness window in claims; 0: max(1000, 4 * lanes)
  std::uint32_t bare_rounds = 5;      // bare flow: runs of each bare peer, interleaved (--quick: 1)
  std::uint32_t flow_rounds = 5;      // flow: runs of fairlane and mutex-shm (processes), interleaved (--quick: 1)
  bool quick = false;
  bool json = false;
  bool progress = true;
  std::string chart_dir;
  std::string json_file;              // --json-file: JSON there as well as the table
  std::string trace_dir;              // --trace-dir: the served sequences as CSV
  std::string redis_server = FAIRLANE_BENCH_REDIS_SERVER;
  std::string cycle_json;             // --cycle-json: the cycle counter's report (bench/cycle/count.sh --json)
  std::string cycle_peer_json;        // --cycle-peer-json: the same count of the mutex peer (count.sh --peer mutex)
  bool list = false;
};

// One entry of --peers: [mode:]name[/threads|/processes][@PxC].
struct PeerSpec {
  Mode mode = Mode::flow;
  std::string name;
  std::string topology;               // "", "threads" or "processes"
  std::uint32_t producers = 0, consumers = 0;  // 0: the command line's -p / -c
};
// Parses one spec; false (with error) when it is malformed.
bool parse_spec(const std::string& text, PeerSpec& out, std::string& error);

// The peers a plain run measures, in table order.
std::vector<std::string> default_peers();

// Parses argv (without the hidden worker mode). On a bad argument returns
// nullopt and writes a message to `error`; on --help prints usage and exits.
std::optional<Options> parse_options(int argc, char** argv, std::string& error);

void print_usage(const char* argv0);

}  // namespace fairlane::bench
