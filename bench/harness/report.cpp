#include "report.hpp"

#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <fmt/core.h>

#include "bare_ratio.hpp"
#include "proc.hpp"

#ifndef FAIRLANE_BENCH_GNUPLOT
#define FAIRLANE_BENCH_GNUPLOT "/usr/bin/gnuplot"
#endif

namespace fairlane::bench {

namespace {

// How the workers were placed, in words, for the table's head.
std::string placement_text(const Params& p) {
  const std::vector<int> cpus = allowed_cpus();
  std::string list;
  for (int c : cpus) {
    if (!list.empty()) list += ',';
    list += std::to_string(c);
  }
  if (p.placement != Placement::os && cpus.empty())
    return fmt::format("placement {} asked, but the allowed CPUs are unreadable: not pinned", to_string(p.placement));
  switch (p.placement) {
    case Placement::split:
      return fmt::format("placement split: producer i on CPU i mod {n}, consumer j on CPU (producers + j) mod {n} of "
                         "the allowed CPUs {{{l}}} ({w} workers: {each}); servers not pinned",
                         fmt::arg("n", cpus.size()), fmt::arg("l", list), fmt::arg("w", p.producers + p.consumers),
                         fmt::arg("each", p.producers + p.consumers <= cpus.size() ? "a CPU each" : "some share a CPU"));
    case Placement::shared:
      return fmt::format("placement shared: every worker on CPU {} (of the allowed {{{}}}); servers not pinned",
                         cpus.empty() ? -1 : cpus[0], list);
    case Placement::os: break;
  }
  return "placement os: workers not pinned (the scheduler's choice; results vary from run to run)";
}


std::string si(double v) {
  if (v >= 1e9) return fmt::format("{:.2f} G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f} M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f} k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

std::string dur(std::uint64_t ns) {
  if (ns < 1'000) return fmt::format("{}ns", ns);
  if (ns < 10'000) return fmt::format("{:.2f}us", double(ns) / 1e3);
  if (ns < 1'000'000) return fmt::format("{:.0f}us", double(ns) / 1e3);
  if (ns < 10'000'000) return fmt::format("{:.2f}ms", double(ns) / 1e6);
  if (ns < 1'000'000'000) return fmt::format("{:.0f}ms", double(ns) / 1e6);
  return fmt::format("{:.2f}s", double(ns) / 1e9);
}

std::string mib(std::uint64_t kb) { return kb ? fmt::format("{:.1f}M", double(kb) / 1024.0) : "-"; }

std::string pct3(const Histogram& h) {
  if (h.count() == 0) return "-";
  return fmt::format("{} / {} / {}", dur(h.percentile(0.5)), dur(h.percentile(0.99)), dur(h.percentile(0.999)));
}

// Claim+complete capacity: the drain rate (consumers alone on a full queue),
// or the flow rate when the run had no drain.
double capacity(const RunResult& r) { return r.drained_per_s > 0 ? r.drained_per_s : r.cycles_per_s; }
// CPU ns per drained job, consumers plus server: the load-independent cost.
double cpu_per_job(const RunResult& r) { return r.drain_consumer_cpu_ns + r.drain_server_cpu_ns; }
std::string cpu_ratio(const RunResult& a, const RunResult& b) {
  if (cpu_per_job(a) <= 0 || cpu_per_job(b) <= 0) return "";
  return fmt::format("; CPU per claim+complete {:.0f} ns vs {:.0f} ns: {:.2f}x", cpu_per_job(a), cpu_per_job(b),
                     cpu_per_job(b) / cpu_per_job(a));
}

// The run of `peer` in `mode` with the command line's producers and
// consumers (pxc false) or its own @PxC (pxc true, then p x c).
const RunResult* find(const std::vector<RunResult>& rs, const std::string& peer, Topology t, Mode mode = Mode::flow,
                      bool pxc = false, std::uint32_t p = 0, std::uint32_t c = 0) {
  for (auto& r : rs)
    if (r.ok && r.peer == peer && r.topology == t && r.mode == mode && r.pxc == pxc &&
        (!pxc || (r.params.producers == p && r.params.consumers == c)))
      return &r;
  return nullptr;
}

std::string rates(const std::vector<double>& v) {
  std::string out;
  for (double x : v) {
    if (!out.empty()) out += ' ';
    out += si(x);
  }
  return out;
}

// Handoff figures by round ("-" where one was not measured), and the range
// of those measured ("70-210 ns"; empty when none was).
std::string handoffs(const std::vector<double>& v) {
  std::string out;
  for (double x : v) fmt::format_to(std::back_inserter(out), "{}{}", out.empty() ? "" : " ",
                                    x > 0 ? fmt::format("{:.0f}", x) : "-");
  return out;
}
std::string handoff_range(const std::vector<double>& v) {
  double lo = 0, hi = 0;
  for (double x : v) {
    if (x <= 0) continue;
    lo = lo == 0 ? x : std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (hi == 0) return {};
  return fmt::format("{:.0f}-{:.0f} ns", lo, hi);
}

nlohmann::json hist_json(const Histogram& h) {
  return {{"count", h.count()},          {"min_ns", h.min()},
          {"p50_ns", h.percentile(0.5)}, {"p99_ns", h.percentile(0.99)},
          {"p999_ns", h.percentile(0.999)}, {"max_ns", h.max()},
          {"mean_ns", h.mean()}};
}

nlohmann::json fair_json(const FairnessResult& f, const ServedSeries& s) {
  nlohmann::json served = nlohmann::json::object();
  for (std::size_t i = 0; i < s.lanes.size(); ++i) served[std::to_string(s.lanes[i])] = s.served_total[i];
  return {{"claims", f.claims},
          {"period_s", f.period_s},
          {"window", f.window},
          {"windows", f.windows},
          {"jain_mean", f.jain_mean},
          {"jain_min", f.jain_min},
          {"spread_max", f.spread_max},
          {"spread_p99", f.spread_p99},
          {"spread_mean", f.spread_mean},
          {"backlogged_mean", f.backlogged_mean},
          {"lanes_served", f.lanes_served},
          {"served_by_tenant", served}};
}

std::string file_label(std::string s) {
  std::replace(s.begin(), s.end(), '/', '_');
  return s;
}

}  // namespace

std::vector<TargetCheck> check_targets(const std::vector<RunResult>& rs, const std::string& cycle_json,
                                       const std::string& cycle_peer_json) {
  std::vector<TargetCheck> out;
  const RunResult* fl = find(rs, "fairlane", Topology::processes);
  const RunResult* vk = find(rs, "valkey", Topology::processes);
  const RunResult* mx = find(rs, "mutex-shm", Topology::processes);
  const RunResult* bfl = find(rs, "fairlane", Topology::processes, Mode::bare);
  const RunResult* bmq = find(rs, "boost-mq", Topology::processes, Mode::bare);
  const RunResult* fl22 = find(rs, "fairlane", Topology::processes, Mode::flow, true, 2, 2);
  const RunResult* mx22 = find(rs, "mutex-shm", Topology::processes, Mode::flow, true, 2, 2);

  {
    TargetCheck t;
    t.name = "cycle budget: <= 1,000 instructions and <= 12 locked RMWs per mint + enqueue + claim + complete "
                  "(public API, callgrind)";
    t.missing = "no cycle count: --cycle-json FILE from bench/cycle/count.sh --json FILE (./run.sh bench does both)";
    if (!cycle_json.empty()) {
      std::ifstream in(cycle_json);
      nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
      if (in && !j.is_discarded() && j.contains("cycle")) {
        const double ins = j["cycle"].value("instructions_per_cycle", 0.0);
        const double rmw = j["cycle"].value("locked_rmw_per_cycle", 0.0);
        t.known = ins > 0;
        t.ratio = std::min(1000.0 / std::max(ins, 1.0), 12.0 / std::max(rmw, 0.01));
        t.met = ins <= 1000.0 && rmw <= 12.0;
        t.detail = fmt::format("{:.0f} instructions and {:.2f} locked RMWs per cycle ({} cycles, from {})", ins, rmw,
                               j["cycle"].value("cycles", 0), cycle_json);
        // The same loop on the mutex peer, for reference: what fairlane's
        // work costs written plainly behind one lock.
        std::ifstream pin(cycle_peer_json);
        const nlohmann::json pj =
            cycle_peer_json.empty() ? nlohmann::json() : nlohmann::json::parse(pin, nullptr, false);
        if (pin && !pj.is_discarded() && pj.contains("cycle"))
          t.detail += fmt::format("; the mutex peer's same loop: {:.0f} instructions and {:.2f} locked RMWs ({} cycles, "
                                  "from {})",
                                  pj["cycle"].value("instructions_per_cycle", 0.0),
                                  pj["cycle"].value("locked_rmw_per_cycle", 0.0), pj["cycle"].value("cycles", 0),
                                  cycle_peer_json);
      } else {
        t.missing = "cannot read the cycle counter's report " + cycle_json;
      }
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "drain >= 300x the best Valkey rota (1-8 connections), across processes";
    t.missing = "needs fairlane and valkey (processes) in this run";
    if (fl && vk && capacity(*vk) > 0 && vk->cycles_per_s > 0) {
      const double x = capacity(*fl) / capacity(*vk);
      t.known = true;
      t.ratio = x / 300.0;
      t.met = x >= 300.0;
      t.detail = fmt::format("drain {}/s vs {}/s (valkey, best with {} consumer connections): {:.0f}x; "
                             "flow {}/s vs {}/s: {:.0f}x",
                             si(capacity(*fl)), si(capacity(*vk)), vk->params.consumers, x, si(fl->cycles_per_s),
                             si(vk->cycles_per_s), fl->cycles_per_s / vk->cycles_per_s) +
                 cpu_ratio(*fl, *vk);
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "bare flow >= Boost message_queue's (1 producer + 1 consumer process, no per-operation timing)";
    t.missing = "needs bare:fairlane and bare:boost-mq in this run";
    if (bfl && bmq && bmq->bare.per_s > 0) {
      const BareRatio br = bare_ratio(bfl->bare.rounds, bmq->bare.rounds);
      const double x = br.median;
      t.known = !br.each.empty();
      t.ratio = x;
      t.met = x >= 1.0;
      t.detail = br.each.size() > 1
                     ? fmt::format("median of {} rounds taken in turn {:.2f}x (rounds {:.2f}x to {:.2f}x); ",
                                   br.each.size(), x, br.lo, br.hi)
                     : fmt::format("{:.2f}x; ", x);
      t.detail += fmt::format("first round {} jobs/s vs {} messages/s, CPU per job {:.0f} + {:.0f} ns vs {:.0f} + "
                              "{:.0f} ns (producer + consumer)",
                              si(bfl->bare.per_s), si(bmq->bare.per_s), bfl->bare.producer_cpu_ns,
                              bfl->bare.consumer_cpu_ns, bmq->bare.producer_cpu_ns, bmq->bare.consumer_cpu_ns);
      std::vector<double> all = bfl->bare.handoffs;
      all.insert(all.end(), bmq->bare.handoffs.begin(), bmq->bare.handoffs.end());
      if (const std::string range = handoff_range(all); !range.empty())
        t.detail += "; a cache line's move between the two CPUs " + range + " over the rounds";
      if (bfl->params.bare_work_ns != 0) {
        // Not the flow the target is about: the consumers' work keeps the queue full.
        t.info = true;
        t.detail += fmt::format("; consumers spending {} ns a job (--bare-work-ns)", bfl->params.bare_work_ns);
      }
      if (bfl->params.bare_blocking != 0) {
        // Not the flow the target is about either: both sides block rather than retry.
        t.info = true;
        t.detail += "; full and empty waited out in blocking calls (--bare-blocking)";
      }
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "drain >= 1.5x the same work behind one robust process-shared mutex (mutex-shm)";
    t.missing = "needs fairlane and mutex-shm (processes) in this run";
    if (fl && mx && capacity(*mx) > 0) {
      const double x = capacity(*fl) / capacity(*mx);
      t.known = true;
      t.ratio = x / 1.5;
      t.met = x >= 1.5;
      t.detail = fmt::format("drain {}/s vs {}/s: {:.2f}x", si(capacity(*fl)), si(capacity(*mx)), x) + cpu_ratio(*fl, *mx);
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "flow >= 1.5x the same work behind one robust process-shared mutex (mutex-shm)";
    t.missing = "needs fairlane and mutex-shm (processes) in this run";
    if (fl && mx && mx->cycles_per_s > 0) {
      // The median of the rounds' ratios (--flow-rounds), as for the bare
      // flow; the first round's alone when there is one.
      const BareRatio fr = bare_ratio(fl->flow_rounds, mx->flow_rounds);
      const double first = fl->cycles_per_s / mx->cycles_per_s;
      const double x = fr.each.size() > 1 ? fr.median : first;
      t.known = true;
      t.ratio = x / 1.5;
      t.met = x >= 1.5;
      t.detail = fr.each.size() > 1 ? fmt::format("median of {} rounds taken in turn {:.2f}x (rounds {:.2f}x to {:.2f}x); "
                                                  "first round ",
                                                  fr.each.size(), x, fr.lo, fr.hi)
                                    : std::string();
      t.detail += fmt::format("flow {}/s vs {}/s: {:.2f}x; claim p99 {} vs {}", si(fl->cycles_per_s),
                              si(mx->cycles_per_s), first, dur(fl->claim.percentile(0.99)), dur(mx->claim.percentile(0.99)));
      std::vector<double> all = fl->flow_handoffs;
      all.insert(all.end(), mx->flow_handoffs.begin(), mx->flow_handoffs.end());
      if (const std::string range = handoff_range(all); !range.empty())
        t.detail += "; a cache line's move between the two CPUs " + range + " over the rounds";
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "2 producers + 2 consumers on this machine's cores (a lock holder can be preempted holding it): "
                  "fairlane vs mutex-shm";
    t.info = true;
    t.missing = "needs fairlane@2x2 and mutex-shm@2x2 in this run";
    if (fl22 && mx22 && capacity(*mx22) > 0 && mx22->cycles_per_s > 0) {
      t.known = true;
      t.ratio = capacity(*fl22) / capacity(*mx22);
      t.detail = fmt::format("drain {}/s vs {}/s: {:.2f}x; flow {}/s vs {}/s: {:.2f}x; claim p99.9 {} vs {}, "
                             "max {} vs {}",
                             si(capacity(*fl22)), si(capacity(*mx22)), capacity(*fl22) / capacity(*mx22),
                             si(fl22->cycles_per_s), si(mx22->cycles_per_s), fl22->cycles_per_s / mx22->cycles_per_s,
                             dur(fl22->claim.percentile(0.999)), dur(mx22->claim.percentile(0.999)),
                             dur(fl22->claim.max()), dur(mx22->claim.max()));
    }
    out.push_back(t);
  }
  {
    TargetCheck t;
    t.name = "parked-consumer wake-up p50 in tens of us (< 100 us)";
    t.missing = "needs fairlane (processes) with wake-up rounds";
    if (fl && fl->wake.count() > 0) {
      const double p50 = double(fl->wake.percentile(0.5));
      t.known = true;
      t.ratio = 100'000.0 / std::max(p50, 1.0);
      t.met = p50 < 100'000.0;
      t.detail = fmt::format("p50 {}, p99 {} over {} wake-ups", dur(fl->wake.percentile(0.5)),
                             dur(fl->wake.percentile(0.99)), fl->wake.count());
    }
    out.push_back(t);
  }
  return out;
}

void print_table(const Options& o, const std::vector<RunResult>& rs, const std::vector<TargetCheck>& targets) {
  const Params& p = o.params;
  std::vector<const RunResult*> flow, bare, batch;
  for (auto& r : rs) {
    if (r.mode == Mode::bare) bare.push_back(&r);
    else if (r.mode == Mode::batch) batch.push_back(&r);
    else flow.push_back(&r);
  }
  // The line says what the rows were run with: the Zipf draw, the backlog and
  // the timed window are the flow's and drain's only (the bare flow and the
  // batch rounds count jobs and take lanes in turn), and a peer named @PxC
  // runs its own producers and consumers.
  bool any_pxc = false;
  for (auto& r : rs) any_pxc = any_pxc || r.pxc;
  const std::string workers = fmt::format("{} producer(s), {} consumer(s){}", p.producers, p.consumers,
                                          any_pxc ? " (a peer named @PxC: as named)" : "");
  if (!flow.empty())
    fmt::print("fairlane-bench: {}, {} lanes (Zipf {:.2f}), {} B payload, backlog {}, "
               "{:.1f} s measured after {:.1f} s warm-up\n{}\n\n",
               workers, p.lanes, p.skew, p.payload, p.backlog, o.duration_s, o.warmup_s, placement_text(p));
  else
    fmt::print("fairlane-bench: {}, {} lanes, {} B payload\n{}\n\n", workers, p.lanes, p.payload,
               placement_text(p));
  if (!flow.empty()) {
    fmt::print("{:<24} {:>5} {:>4} {:>9} {:>9} {:>9} {:>7} {:>8} {:>27} {:>27} {:>18}\n", "peer", "procs", "cons",
               "flow/s", "drain/s", "cold", "drained", "CPU/job", "claim p50 / p99 / p99.9",
               "enq->claim p50/p99/p99.9", "wake-up p50 / p99");
    for (auto* r : flow) {
      if (!r->ok) {
        fmt::print("{:<24} {}: {}\n", r->label, r->skipped ? "skipped" : "FAILED", r->error);
        continue;
      }
      std::string wake = r->wake.count()
                             ? fmt::format("{} / {}", dur(r->wake.percentile(0.5)), dur(r->wake.percentile(0.99)))
                             : "-";
      fmt::print("{:<24} {:>5} {:>4} {:>9} {:>9} {:>9} {:>7} {:>8} {:>27} {:>27} {:>18}\n", r->label, r->processes,
                 r->params.consumers, si(r->cycles_per_s), r->drained ? si(r->drained_per_s) : "-",
                 r->params.drain_rounds > 1 ? si(r->cold_drain_per_s) : "-", si(double(r->drained)),
                 cpu_per_job(*r) > 0 ? dur(std::uint64_t(cpu_per_job(*r) + 0.5)) : "-", pct3(r->claim), pct3(r->e2c),
                 wake);
    }
    for (auto* r : flow) {
      if (r->ok && r->flow_rounds.size() > 1)
        fmt::print("{:<24} flow/s by round: {}\n", r->label, rates(r->flow_rounds));
      if (r->ok && r->flow_rounds.size() > 1 && !handoff_range(r->flow_handoffs).empty())
        fmt::print("{:<24} a cache line's move between its two CPUs, by round (ns): {}\n", r->label,
                   handoffs(r->flow_handoffs));
      if (r->ok && !r->flow_rounds_note.empty()) fmt::print("{:<24} {}\n", r->label, r->flow_rounds_note);
    }
    auto jain = [](const FairnessResult& f) {
      return f.windows ? fmt::format("{:.3f} / {:.3f}", f.jain_mean, f.jain_min) : std::string("-");
    };
    auto spread = [](const FairnessResult& f) {
      return f.windows ? fmt::format("{} / {} / {}", f.spread_p99, f.spread_max, f.window) : std::string("-");
    };
    fmt::print("\n{:<24} {:>15} {:>17} {:>6} {:>15} {:>17} {:>6} {:>9} {:>8} {:>8} {:>8}\n", "", "drain: Jain",
               "spread", "lanes", "flow: Jain", "spread", "lanes", "RSS max", "RSS sum", "server", "shm");
    fmt::print("{:<24} {:>15} {:>17} {:>6} {:>15} {:>17} {:>6} {:>9} {:>8} {:>8} {:>8}\n", "peer", "mean / min",
               "p99 / max / W", "backl.", "mean / min", "p99 / max / W", "backl.", "/process", "", "", "");
    for (auto* r : flow) {
      if (!r->ok) continue;
      fmt::print("{:<24} {:>15} {:>17} {:>6.1f} {:>15} {:>17} {:>6.1f} {:>9} {:>8} {:>8} {:>8}\n", r->label,
                 jain(r->drain_fair), spread(r->drain_fair), r->drain_fair.backlogged_mean, jain(r->fair),
                 spread(r->fair), r->fair.backlogged_mean, mib(r->rss_max_kb), mib(r->rss_sum_kb),
                 mib(r->server_rss_kb), mib(r->shared_bytes / 1024));
    }
  }
  if (!bare.empty()) {
    fmt::print("\nbare flow: each producer sends {} jobs of {} B, lanes in turn over {} tenants; the consumers claim and "
               "complete every one. No per-operation timing, no stamps; full and empty are retried with the same "
               "backoff for every peer; the queue holds the same number of jobs for every peer.{}\n",
               p.bare_jobs, p.payload, p.lanes,
               (p.bare_work_ns ? fmt::format(" Each consumer spends {} ns on each job between its claim and its "
                                             "complete (--bare-work-ns): the target is not judged.",
                                             p.bare_work_ns)
                               : std::string()) +
                   (p.bare_blocking ? std::string(" Full and empty are waited out in each peer's blocking calls "
                                                  "(--bare-blocking), not retried: the target is not judged.")
                                    : std::string()));
    fmt::print("{:<24} {:>5} {:>9} {:>8} {:>10} {:>12} {:>13} {:>13} {:>10} {:>10}\n", "peer", "procs", "jobs",
               "capacity", "jobs/s", "producer/s", "CPU/job prod", "CPU/job cons", "full", "empty");
    for (auto* r : bare) {
      if (!r->ok) {
        fmt::print("{:<24} {}: {}\n", r->label, r->skipped ? "skipped" : "FAILED", r->error);
        continue;
      }
      fmt::print("{:<24} {:>5} {:>9} {:>8} {:>10} {:>12} {:>13} {:>13} {:>10} {:>10}\n", r->label, r->processes,
                 si(double(r->bare.jobs)), r->bare.capacity, si(r->bare.per_s), si(r->bare.producer_per_s),
                 dur(std::uint64_t(r->bare.producer_cpu_ns + 0.5)), dur(std::uint64_t(r->bare.consumer_cpu_ns + 0.5)),
                 r->full_retries, r->empty_polls);
    }
    for (auto* r : bare) {
      if (r->ok && r->bare.rounds.size() > 1) fmt::print("{:<24} jobs/s by round: {}\n", r->label, rates(r->bare.rounds));
      if (r->ok && !handoff_range(r->bare.handoffs).empty())
        fmt::print("{:<24} a cache line's move between its two CPUs, by round (ns): {}\n", r->label,
                   handoffs(r->bare.handoffs));
      if (r->ok && !r->bare.rounds_note.empty()) fmt::print("{:<24} {}\n", r->label, r->bare.rounds_note);
    }
    const RunResult* a = find(rs, "fairlane", Topology::processes, Mode::bare);
    const RunResult* b = find(rs, "boost-mq", Topology::processes, Mode::bare);
    if (a && b && b->bare.per_s > 0) {
      const BareRatio br = bare_ratio(a->bare.rounds, b->bare.rounds);
      std::string each;
      for (double x : br.each) each += fmt::format("{}{:.2f}", each.empty() ? "" : " ", x);
      if (br.each.size() > 1)
        fmt::print("fairlane / boost-mq, bare flow: median {:.2f}x of {} rounds ({})\n", br.median, br.each.size(), each);
      else
        fmt::print("fairlane / boost-mq, bare flow: {:.2f}x\n", br.median);
    }
  }
  for (auto* r : batch) {
    if (!r->ok) {
      fmt::print("\n{:<24} {}: {}\n", r->label, r->skipped ? "skipped" : "FAILED", r->error);
      continue;
    }
    const auto& b = r->batch;
    auto x = [](double a, double c) { return c > 0 ? fmt::format("{:.2f}x", a / c) : std::string("-"); };
    fmt::print("\n{}: per-job rates, batch {}; {} jobs a round, lanes in turn; producers alone, then consumers alone; "
               "single calls, then batch calls (a warm-up round first)\n",
               r->label, b.size, b.jobs);
    fmt::print("  {:<34} {:>12} {:>12} {:>8}\n", "", "single", "batch", "ratio");
    fmt::print("  {:<34} {:>12} {:>12} {:>8}\n", "mint + enqueue / enqueue_batch", si(b.enqueue_per_s) + "/s",
               si(b.enqueue_batch_per_s) + "/s", x(b.enqueue_batch_per_s, b.enqueue_per_s));
    fmt::print("  {:<34} {:>12} {:>12} {:>8}\n", "claim + complete / _batch", si(b.drain_per_s) + "/s",
               si(b.drain_batch_per_s) + "/s", x(b.drain_batch_per_s, b.drain_per_s));
    fmt::print("  {:<34} {:>12} {:>12}   (jobs per second of time inside the call)\n", "  claim_batch", "",
               si(b.claim_batch_per_s) + "/s");
    fmt::print("  {:<34} {:>12} {:>12}\n", "  complete_batch", "", si(b.complete_batch_per_s) + "/s");
  }
  fmt::print("\nwhat a cycle is:\n");
  for (auto& r : rs) {
    if (r.what.empty() || r.mode != Mode::flow) continue;
    std::string extra;
    if (!r.sweep.empty()) {
      extra = " [consumers tried:";
      for (auto& pt : r.sweep)
        extra += fmt::format(" {}: flow {}/s drain {}/s;", pt.consumers, si(pt.flow_per_s), si(pt.drain_per_s));
      extra += fmt::format(" best {}]", r.params.consumers);
    }
    fmt::print("  {:<24} {}{}\n", r.label, r.what, extra);
  }
  if (!flow.empty())
    fmt::print("\nflow: producers and consumers together, backlog <= {}. drain: consumers alone on a queue "
               "pre-filled with up to {} jobs ({:.1f} s fill at most), round {} of {}; cold: round 1, on a fresh "
               "segment. CPU/job: CPU time of the consumers (and of the server, for valkey) per drained job, which "
               "does not depend on what else the machine runs. Latencies are from the flow; wake-ups from {} rounds "
               "with consumer 0 parked. @PxC: P producer and C consumer processes.\n"
               "RSS: each worker process's VmHWM less the harness's own resident pages (its records); server: the "
               "Valkey server's VmHWM; shm: the size of the peer's segment.\n"
               "Fairness: Jain's index and max - min served among the lanes backlogged throughout each window of W "
               "claims (backl. = how many, on average), over the recorded drain and over the flow (in the flow, "
               "lanes are backlogged only where consumers are the bottleneck).\n",
               p.backlog, p.drain_jobs, o.fill_s, p.drain_rounds, p.drain_rounds, p.wake_rounds);
  const bool judge = !o.quick;
  fmt::print("\ntargets (the design's performance targets, issue 12; ratios within this run; claim+complete = the "
             "drain rate){}:\n",
             judge ? "" : " -- not judged in a --quick run, the figures only");
  for (auto& t : targets) {
    if (!t.known) fmt::print("  [ n/a  ] {}: {}\n", t.name, t.missing);
    else if (t.info || !judge) fmt::print("  [ info ] {}: {}\n", t.name, t.detail);
    else fmt::print("  [{}] {}: {}\n", t.met ? "  met " : "MISSED", t.name, t.detail);
  }
}

nlohmann::json to_json(const Options& o, const std::vector<RunResult>& rs, const std::vector<TargetCheck>& targets) {
  using nlohmann::json;
  const Params& p = o.params;
  json j;
  j["config"] = {{"producers", p.producers}, {"consumers", p.consumers}, {"lanes", p.lanes},
                 {"skew", p.skew},           {"payload", p.payload},     {"backlog", p.backlog},
                 {"duration_s", o.duration_s}, {"warmup_s", o.warmup_s}, {"wake_rounds", p.wake_rounds},
                 {"sample", p.sample},       {"quick", o.quick},         {"drain_jobs", p.drain_jobs},
                 {"drain_rounds", p.drain_rounds},
                 {"fill_s", o.fill_s},
                 {"bare_jobs", p.bare_jobs},
                 {"bare_rounds", o.bare_rounds},
                 {"flow_rounds", o.flow_rounds},
                 {"bare_work_ns", p.bare_work_ns},
                 {"bare_blocking", p.bare_blocking != 0},
                 {"batch", p.batch},
                 {"placement", to_string(p.placement)},
                 {"cpus", allowed_cpus()}};
  json peers = json::array();
  for (auto& r : rs) {
    json e;
    e["label"] = r.label;
    e["peer"] = r.peer;
    e["topology"] = to_string(r.topology);
    e["mode"] = to_string(r.mode);
    e["ok"] = r.ok;
    e["skipped"] = r.skipped;
    if (!r.error.empty()) e["error"] = r.error;
    if (r.ok && r.mode == Mode::bare) {
      e["producers"] = r.params.producers;
      e["consumers"] = r.params.consumers;
      e["bare"] = {{"jobs", r.bare.jobs},
                   {"seconds", r.bare.seconds},
                   {"per_s", r.bare.per_s},
                   {"producer_per_s", r.bare.producer_per_s},
                   {"producer_cpu_ns_per_job", r.bare.producer_cpu_ns},
                   {"consumer_cpu_ns_per_job", r.bare.consumer_cpu_ns},
                   {"capacity", r.bare.capacity},
                   {"per_s_by_round", r.bare.rounds},
                   {"line_handoff_ns_by_round", r.bare.handoffs},
                   {"rounds_note", r.bare.rounds_note},
                   {"full_retries", r.full_retries},
                   {"empty_polls", r.empty_polls}};
    } else if (r.ok && r.mode == Mode::batch) {
      e["producers"] = r.params.producers;
      e["consumers"] = r.params.consumers;
      e["batch"] = {{"size", r.batch.size},
                    {"jobs_per_round", r.batch.jobs},
                    {"enqueue_per_s", r.batch.enqueue_per_s},
                    {"enqueue_batch_per_s", r.batch.enqueue_batch_per_s},
                    {"claim_complete_per_s", r.batch.drain_per_s},
                    {"claim_complete_batch_per_s", r.batch.drain_batch_per_s},
                    {"claim_batch_per_s_in_call", r.batch.claim_batch_per_s},
                    {"complete_batch_per_s_in_call", r.batch.complete_batch_per_s}};
    } else if (r.ok) {
      e["what"] = r.what;
      e["processes"] = r.processes;
      e["producers"] = r.params.producers;
      e["consumers"] = r.params.consumers;
      e["measured_s"] = r.measured_s;
      e["cycles"] = r.cycles;
      e["cycles_per_s"] = r.cycles_per_s;
      if (!r.flow_rounds.empty()) {
        e["flow_per_s_by_round"] = r.flow_rounds;
        e["flow_line_handoff_ns_by_round"] = r.flow_handoffs;
        if (!r.flow_rounds_note.empty()) e["flow_rounds_note"] = r.flow_rounds_note;
      }
      e["enqueued_per_s"] = r.enqueued_per_s;
      e["drain"] = {{"rounds", r.params.drain_rounds}, {"fill_s", r.fill_s},   {"jobs", r.drained},
                    {"seconds", r.drain_s},             {"per_s", r.drained_per_s}, {"cold_per_s", r.cold_drain_per_s},
                    {"consumer_cpu_ns_per_job", r.drain_consumer_cpu_ns},
                    {"server_cpu_ns_per_job", r.drain_server_cpu_ns},
                    {"consumer_minor_faults_per_job", r.drain_faults_per_job},
                    {"cold_consumer_minor_faults_per_job", r.cold_faults_per_job}};
      e["full_retries"] = r.full_retries;
      e["empty_polls"] = r.empty_polls;
      e["claim"] = hist_json(r.claim);
      e["enqueue_to_claim"] = hist_json(r.e2c);
      e["wake"] = hist_json(r.wake);
      e["wake_timeouts"] = r.wake_timeouts;
      e["fairness_drain"] = fair_json(r.drain_fair, r.drain_series);
      e["fairness_flow"] = fair_json(r.fair, r.series);
      e["memory_kb"] = {{"vmhwm_max_per_process", r.rss_max_kb},
                        {"vmhwm_sum", r.rss_sum_kb},
                        {"server_vmhwm", r.server_rss_kb},
                        {"shared_segment", r.shared_bytes / 1024}};
      if (!r.sweep.empty()) {
        json sw = json::array();
        for (auto& pt : r.sweep)
          sw.push_back({{"consumers", pt.consumers}, {"cycles_per_s", pt.flow_per_s}, {"drain_per_s", pt.drain_per_s}});
        e["consumer_sweep"] = sw;
      }
    }
    peers.push_back(std::move(e));
  }
  j["peers"] = std::move(peers);
  json tj = json::array();
  for (auto& t : targets) {
    json e{{"target", t.name}, {"evaluated", t.known}, {"judged", t.known && !t.info && !o.quick}};
    if (!t.known) e["missing"] = t.missing;
    if (t.known) {
      if (!t.info && !o.quick) e["met"] = t.met;
      e["ratio_to_target"] = t.ratio;
      e["detail"] = t.detail;
    }
    tj.push_back(std::move(e));
  }
  j["targets"] = std::move(tj);
  return j;
}

bool write_charts(const std::string& dir, const std::vector<RunResult>& rs, std::string& error) {
  mkdir(dir.c_str(), 0755);
  std::vector<const RunResult*> ok;
  for (auto& r : rs)
    if (r.ok && r.mode == Mode::flow) ok.push_back(&r);
  if (ok.empty()) { error = "no successful run to chart"; return false; }

  {
    std::ofstream d(dir + "/throughput.dat");
    d << "# peer flow_cycles_per_s claim_p99_us e2c_p99_us drain_per_s\n";
    for (auto* r : ok)
      d << '"' << r->label << "\" " << r->cycles_per_s << ' ' << double(r->claim.percentile(0.99)) / 1e3 << ' '
        << double(r->e2c.percentile(0.99)) / 1e3 << ' ' << r->drained_per_s << '\n';
  }
  // One served-per-tenant chart per peer and sequence (drain, flow).
  struct Served {
    const RunResult* r;
    const ServedSeries* s;
    std::string file;
    std::string title;
  };
  std::vector<Served> served;
  for (auto* r : ok) {
    if (!r->drain_series.lanes.empty())
      served.push_back({r, &r->drain_series, "served_drain_" + file_label(r->label),
                        "drain of a Zipf " + fmt::format("{:.2g}", r->params.skew) + " backlog"});
    if (!r->series.lanes.empty() && r->fair.windows > 0)
      served.push_back({r, &r->series, "served_flow_" + file_label(r->label),
                        "flow, Zipf " + fmt::format("{:.2g}", r->params.skew) + " arrivals"});
  }
  for (auto& sv : served) {
    std::ofstream d(dir + "/" + sv.file + ".dat");
    d << "t_s";  // a plain header line: the plot titles come from it (columnhead)
    for (auto l : sv.s->lanes) d << " tenant" << l;
    d << '\n';
    for (std::size_t b = 0; b < sv.s->t_s.size(); ++b) {
      d << sv.s->t_s[b];
      for (std::size_t i = 0; i < sv.s->lanes.size(); ++i) d << ' ' << sv.s->served[i][b];
      d << '\n';
    }
  }

  std::ofstream gp(dir + "/charts.gp");
  gp << "set terminal pngcairo size 1100,600 noenhanced font 'sans,10'\n"
        "set style data histograms\nset style fill solid 0.8 border -1\nset boxwidth 0.8\n"
        "set grid ytics\nset logscale y\nset xtics rotate by -25\nset key off\n";
  gp << "set output '" << dir << "/throughput.png'\nset key top right\n"
        "set title 'claim+complete per second (log scale)'\nset ylabel 'jobs/s'\n"
        "plot '"
     << dir << "/throughput.dat' using 2:xtic(1) title 'flow (producers + consumers)' lc rgb '#3070b0', "
               "'' using 5 title 'drain (consumers alone)' lc rgb '#50a050'\n";
  gp << "set output '" << dir << "/latency_p99.png'\nset key top left\n"
        "set title 'p99 latency (log scale)'\nset ylabel 'microseconds'\n"
        "plot '"
     << dir << "/throughput.dat' using 3:xtic(1) title 'claim call' lc rgb '#3070b0', '' using 4 title "
               "'enqueue to claim' lc rgb '#d08030'\n";
  gp << "unset logscale y\nset style data lines\nset xtics norotate\nset key outside right\n"
        "colors = '#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf'\n";
  for (auto& sv : served) {
    gp << "set output '" << dir << "/" << sv.file << ".png'\n"
       << "set title 'served per tenant over time: " << sv.r->label << ", " << sv.title
       << " (tenant 0 is the most loaded)'\nset xlabel 'seconds into the recorded sequence'\n"
       << "set ylabel 'served so far (claims)'\nplot for [i=2:" << (sv.s->lanes.size() + 1) << "] '" << dir << "/" << sv.file
       << ".dat' using 1:i title columnhead(i) lc rgb word(colors, i - 1) lw 2\n";
  }
  gp.close();
  std::string e;
  pid_t pid = spawn({FAIRLANE_BENCH_GNUPLOT, dir + "/charts.gp"}, false, e);
  if (pid < 0) { error = "gnuplot: " + e; return false; }
  int st = 0;
  if (!wait_for(pid, 60'000'000'000ULL, st)) {
    stop_process(pid, 100'000'000);
    error = "gnuplot hung";
    return false;
  }
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    error = "gnuplot " + describe_status(st);
    return false;
  }
  return true;
}

}  // namespace fairlane::bench
