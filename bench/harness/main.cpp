// fairlane-bench: the multi-process harness.
//
//   fairlane-bench [options]          run every peer and report (--help)
//   fairlane-bench --worker ...       hidden: one producer/consumer process
//
// Exit status: 0 when every requested peer ran, 1 when one failed, 2 on a
// usage error, 77 when every requested peer was skipped (unavailable here:
// ctest's SKIP_RETURN_CODE).
#include <signal.h>

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

  const auto targets = check_targets(results, o.cycle_json);
  const auto json = to_json(o, results, targets);
  if (o.json) std::printf("%s\n", json.dump(2).c_str());
  else print_table(o, results, targets);
  if (!o.json_file.empty()) {
    if (FILE* f = std::fopen(o.json_file.c_str(), "w")) {
      std::fprintf(f, "%s\n", json.dump(2).c_str());
      std::fclose(f);
    } else {
      std::fprintf(stderr, "fairlane-bench: cannot write %s\n", o.json_file.c_str());
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
  if (any_failed) return 1;
  if (all_skipped) return fairlane::test::skip_exit_code();  // 77, or 1 where servers are required
  return 0;
}
