// fairlane-bench: the multi-process harness.
//
//   fairlane-bench [options]          run every peer and report (--help)
//   fairlane-bench --worker ...       hidden: one producer/consumer process
//
// Exit status: 0 when every requested peer ran, 1 when one failed or the
// --json-file could not be written, 2 on a usage error, 77 when every requested peer was skipped (unavailable here:
// ctest's SKIP_RETURN_CODE).
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "options.hpp"
#include "require_servers.hpp"  // tests/common
#include "report.hpp"
#include "runner.hpp"

using namespace fairlane::bench;

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--worker") == 0) return worker_main(argc, argv);

  // A broken pipe to a server must not kill the harness (and leave a server).
  signal(SIGPIPE, SIG_IGN);
  install_interrupt_handler();

  std::string error;
  auto opts = parse_options(argc, argv, error);
  if (!opts) {
    std::fprintf(stderr, "fairlane-bench: %s (try --help)\n", error.c_str());
    return 2;
  }
  Options& o = *opts;

  if (o.list) {
    PeerEnv env{o.redis_server, o.valkey_consumers};
    for (auto& n : peer_names()) {
      auto p = make_peer(n, env);
      std::string why = p->unavailable();
      std::printf("%-12s %-10s %s%s\n", n.c_str(), to_string(p->natural_topology()), std::string(p->what()).c_str(),
                  why.empty() ? "" : ("  [unavailable: " + why + "]").c_str());
    }
    return 0;
  }

  PeerEnv env{o.redis_server, o.valkey_consumers};
  std::vector<RunResult> results;
  for (auto& spec : o.peers) {
    if (interrupted()) break;
    if (o.progress) std::fprintf(stderr, "fairlane-bench: %s ...\n", spec.c_str());
    results.push_back(run_peer(o, spec, env));
    const auto& r = results.back();
    if (r.skipped && o.progress) std::fprintf(stderr, "  [%s] skipped: %s\n", r.label.c_str(), r.error.c_str());
  }
  // The bare flow's further rounds, each bare peer in turn: the host's pace
  // drifts between runs (2.4 M and 4.9 M jobs/s a minute apart here), and
  // peers run side by side in each round meet the same pace.
  // A round that fails (or is interrupted) ends the rounds of that peer:
  // the ones run are kept, and the target pairs only rounds both peers ran.
  for (std::uint32_t round = 1; round < o.bare_rounds && !interrupted(); ++round) {
    for (std::size_t i = 0; i < o.peers.size() && i < results.size() && !interrupted(); ++i) {
      RunResult& first = results[i];
      if (first.mode != Mode::bare || !first.ok || !first.bare.rounds_note.empty()) continue;
      if (o.progress) std::fprintf(stderr, "fairlane-bench: %s, round %u ...\n", o.peers[i].c_str(), round + 1);
      const RunResult again = run_peer(o, o.peers[i], env);
      if (!again.ok) {
        first.bare.rounds_note = "round " + std::to_string(round + 1) + " did not finish: " + again.error;
        continue;
      }
      first.bare.rounds.push_back(again.bare.per_s);
      first.bare.handoffs.push_back(again.bare.handoff_ns);
    }
  }

  // The flow's further rounds, for the peers of the flow target (fairlane
  // and mutex-shm, processes, the run's producers and consumers), in turn
  // as above: the flow alone (no drain, no wake-ups), and the line handoff
  // before each, so that a pace that changes between the two peers' runs
  // shows in the rounds rather than deciding the target.
  Options flow_only = o;
  flow_only.params.drain_jobs = 0;
  flow_only.params.drain_rounds = 0;
  flow_only.params.fair_round = 0;
  flow_only.params.wake_rounds = 0;
  const auto rounded = [](const RunResult& r) {
    return r.ok && r.mode == Mode::flow && r.topology == Topology::processes && !r.pxc &&
           (r.peer == "fairlane" || r.peer == "mutex-shm");
  };
  for (auto& r : results)
    if (rounded(r)) {
      r.flow_rounds = {r.cycles_per_s};
      r.flow_handoffs = {r.flow_handoff_ns};
    }
  for (std::uint32_t round = 1; round < o.flow_rounds && !interrupted(); ++round) {
    for (std::size_t i = 0; i < o.peers.size() && i < results.size() && !interrupted(); ++i) {
      RunResult& first = results[i];
      if (!rounded(first) || !first.flow_rounds_note.empty()) continue;
      if (o.progress) std::fprintf(stderr, "fairlane-bench: %s, flow round %u ...\n", o.peers[i].c_str(), round + 1);
      const RunResult again = run_peer(flow_only, o.peers[i], env);
      if (!again.ok) {
        first.flow_rounds_note = "flow round " + std::to_string(round + 1) + " did not finish: " + again.error;
        continue;
      }
      first.flow_rounds.push_back(again.cycles_per_s);
      first.flow_handoffs.push_back(again.flow_handoff_ns);
    }
  }

  const auto targets = check_targets(results, o.cycle_json, o.cycle_peer_json);
  const auto json = to_json(o, results, targets);
  if (o.json) std::printf("%s\n", json.dump(2).c_str());
  else print_table(o, results, targets);
  bool json_file_failed = false;
  if (!o.json_file.empty()) {
    FILE* f = std::fopen(o.json_file.c_str(), "w");
    bool written = f != nullptr && std::fprintf(f, "%s\n", json.dump(2).c_str()) >= 0;
    if (f != nullptr) written = std::fclose(f) == 0 && written;
    if (!written) {
      std::fprintf(stderr, "fairlane-bench: cannot write %s: %s\n", o.json_file.c_str(), std::strerror(errno));
      json_file_failed = true;
    }
  }

  if (!o.chart_dir.empty()) {
    std::string e;
    if (write_charts(o.chart_dir, results, e))
      std::fprintf(stderr, "fairlane-bench: charts in %s\n", o.chart_dir.c_str());
    else
      std::fprintf(stderr, "fairlane-bench: charts: %s\n", e.c_str());
  }

  bool any_failed = false, all_skipped = true;
  for (auto& r : results) {
    any_failed |= !r.ok && !r.skipped;
    all_skipped &= r.skipped;
  }
  if (any_failed || json_file_failed) return 1;
  if (all_skipped) return fairlane::test::skip_exit_code();  // 77, or 1 where servers are required
  return 0;
}
