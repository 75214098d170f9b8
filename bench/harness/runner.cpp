#include "runner.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "control.hpp"
#include "handoff.hpp"
#include "proc.hpp"

namespace fairlane::bench {

// ---------------------------------------------------------------------------
// Worker side

namespace {

void wait_for_start(const ControlHeader& h) {
  // acquire: pairs with the orchestrator's release store of kWarmup, after
  // which nothing else it wrote before is read; cheap insurance.
  while (h.phase.load(std::memory_order_acquire) < kWarmup && !h.abort.load(std::memory_order_relaxed))
    sleep_ns(20'000);
}

void run_role(Peer& peer, Control& ctl, Role role, std::uint32_t index) {
  WorkerCtx ctx(ctl, role, index);
  if (role == Role::producer) peer.producer_loop(ctx);
  else peer.consumer_loop(ctx);
}

void finish_slot(const Control& ctl, WorkerSlot& s, bool ok) {
  s.pid = getpid();
  s.harness_kb = ctl.resident_bytes() / 1024;
  const std::uint64_t hwm = self_vmhwm_kb();
  s.vmhwm_kb = hwm > s.harness_kb ? hwm - s.harness_kb : hwm;
  // release: the slot's fields above are visible to whoever sees the state.
  s.state.store(std::int32_t(ok ? SlotState::done : SlotState::failed), std::memory_order_release);
}

void fail_slot(const Control& ctl, ControlHeader& h, WorkerSlot& s, const std::string& why) {
  std::snprintf(s.error, sizeof s.error, "%s", why.c_str());
  h.abort.store(1, std::memory_order_relaxed);
  finish_slot(ctl, s, false);
}

}  // namespace

int worker_main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "fairlane-bench: worker mode needs <control> <role> <index>\n");
    return 2;
  }
  std::string error;
  Control ctl;
  if (!Control::open(ctl, argv[2], error)) {
    std::fprintf(stderr, "fairlane-bench worker: %s\n", error.c_str());
    return 2;
  }
  ControlHeader& h = ctl.header();
  const Params& p = ctl.params();
  const std::string_view role = argv[3];
  const auto index = std::uint32_t(std::strtoul(argv[4], nullptr, 10));

  std::vector<std::pair<Role, std::uint32_t>> mine;
  if (role == "all") {
    for (std::uint32_t i = 0; i < p.producers; ++i) mine.emplace_back(Role::producer, i);
    for (std::uint32_t i = 0; i < p.consumers; ++i) mine.emplace_back(Role::consumer, i);
  } else if (role == "producer") {
    mine.emplace_back(Role::producer, index);
  } else {
    mine.emplace_back(Role::consumer, index);
  }

  auto peer = make_peer(h.peer, PeerEnv{});
  if (!peer) error = std::string("unknown peer ") + h.peer;
  else if (!peer->attach(p, h.info, error) && error.empty()) error = "attach failed";
  if (!error.empty()) {
    for (auto& [r, i] : mine) fail_slot(ctl, h, ctl.slot(ctl.slot_index(r, i)), error);
    h.ready.fetch_add(std::uint32_t(mine.size()), std::memory_order_release);
    return 1;
  }

  // Each worker pins itself (process or thread) before it says it is ready,
  // so nothing is timed unpinned.
  const std::vector<int> cpus = allowed_cpus();
  auto pin = [&](Role r, std::uint32_t i) {
    const int cpu = placement_cpu(p, r, i, cpus);
    std::string why;
    if (cpu < 0 || pin_thread(cpu, why)) return true;
    fail_slot(ctl, h, ctl.slot(ctl.slot_index(r, i)), why);
    return false;
  };
  if (mine.size() == 1) {
    if (pin(mine[0].first, mine[0].second)) {
      h.ready.fetch_add(1, std::memory_order_release);
      wait_for_start(h);
      run_role(*peer, ctl, mine[0].first, mine[0].second);
    } else {
      h.ready.fetch_add(1, std::memory_order_release);
    }
  } else {
    std::vector<std::thread> threads;
    threads.reserve(mine.size());
    for (auto& [r, i] : mine) {
      threads.emplace_back([&, r = r, i = i] {
        const bool pinned = pin(r, i);
        h.ready.fetch_add(1, std::memory_order_release);
        if (!pinned) return;
        wait_for_start(h);
        run_role(*peer, ctl, r, i);
      });
    }
    for (auto& t : threads) t.join();
  }
  peer->detach();
  bool ok = true;
  for (auto& [r, i] : mine) {
    WorkerSlot& s = ctl.slot(ctl.slot_index(r, i));
    const bool mine_ok = s.error[0] == '\0';
    ok = ok && mine_ok;
    finish_slot(ctl, s, mine_ok);
  }
  return ok ? 0 : 1;
}

// ---------------------------------------------------------------------------
// Orchestrator side

namespace {

std::atomic<int> g_run_counter{0};

struct Children {
  std::vector<pid_t> pids;
  ~Children() { kill_all(); }
  void kill_all() {
    for (pid_t p : pids)
      if (p > 0) stop_process(p, 200'000'000);
    pids.clear();
  }
  // The first child that already exited badly, as text; empty if none.
  std::string early_death() {
    for (auto& p : pids) {
      int st;
      if (p > 0 && waitpid(p, &st, WNOHANG) == p) {
        const pid_t dead = p;
        p = -1;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
          return "worker " + std::to_string(dead) + " " + describe_status(st);
      }
    }
    return {};
  }
};

struct PeerGuard {
  Peer& peer;
  ~PeerGuard() { peer.teardown(); }
};

std::uint64_t consumers_count(const Control& ctl) {
  std::uint64_t n = 0;
  const Params& p = ctl.params();
  for (std::uint32_t i = 0; i < p.consumers; ++i) n += ctl.slot(p.producers + i).count.load(std::memory_order_relaxed);
  return n;
}

// The served sequence (sorted by claim time) as CSV, for scripts.
void dump_trace(const std::string& path, const std::vector<TraceRec>& t) {
  mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "claim_ns,lane,producer,seq,enq_ns\n");
  for (const auto& r : t)
    std::fprintf(f, "%llu,%u,%u,%u,%llu\n", static_cast<unsigned long long>(r.claim_ns), r.lane, r.tag >> kSeqBits,
                 r.tag & kSeqMask, static_cast<unsigned long long>(r.enq_ns));
  std::fclose(f);
}

std::uint64_t backlog_of(const Control& ctl) {
  std::uint64_t in = 0;
  const Params& p = ctl.params();
  for (std::uint32_t i = 0; i < p.producers; ++i) in += ctl.slot(i).count.load(std::memory_order_relaxed);
  const std::uint64_t out = consumers_count(ctl);
  return in > out ? in - out : 0;
}

std::string first_error(const Control& ctl) {
  for (std::uint32_t i = 0; i < ctl.header().workers; ++i)
    if (ctl.slot(i).error[0]) return ctl.slot(i).error;
  return {};
}

// Sleeps `seconds` in the given phase, watching the workers; prints progress.
bool pace(const Options& o, Control& ctl, Children& kids, const std::string& label, const char* what,
          double seconds, std::string& error) {
  const std::uint64_t start = now_ns();
  const std::uint64_t end = start + std::uint64_t(seconds * 1e9);
  const bool talk = o.progress && !o.quick && seconds >= 2.0;
  std::uint64_t next_report = start + 1'000'000'000ULL;
  std::uint64_t last_count = consumers_count(ctl), last_t = start;
  for (;;) {
    const std::uint64_t now = now_ns();
    if (now >= end) return true;
    if (interrupted()) { error = "interrupted"; return false; }
    if (ctl.header().abort.load(std::memory_order_relaxed)) {
      error = first_error(ctl);
      if (error.empty()) error = "a worker failed";
      return false;
    }
    if (auto d = kids.early_death(); !d.empty()) { error = d; return false; }
    if (talk && now >= next_report) {
      const std::uint64_t c = consumers_count(ctl);
      std::fprintf(stderr, "  [%s] %s %4.1f/%.1f s  %10.0f cycles/s\n", label.c_str(), what,
                   double(now - start) / 1e9, seconds, double(c - last_count) / (double(now - last_t) / 1e9));
      last_count = c;
      last_t = now;
      next_report += 1'000'000'000ULL;
    }
    sleep_ns(std::min<std::uint64_t>(end - now, 20'000'000));
  }
}

// Waits until every worker process has exited (the bare flow and batch modes
// end when their loops do), watching for failures; progress once a second.
bool reap_all(const Options& o, Control& ctl, Children& kids, const std::string& label, const char* what,
              double limit_s, RunResult& r) {
  ControlHeader& h = ctl.header();
  const std::uint64_t start = now_ns(), deadline = start + std::uint64_t(limit_s * 1e9);
  std::uint64_t next_report = start + 1'000'000'000ULL, last = 0;
  for (;;) {
    bool left = false;
    for (auto& pid : kids.pids) {
      if (pid <= 0) continue;
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        const pid_t was = pid;
        pid = -1;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && r.error.empty()) {
          r.error = first_error(ctl);
          if (r.error.empty()) r.error = "worker " + std::to_string(was) + " " + describe_status(st);
        }
      } else {
        left = true;
      }
    }
    if (!left) return r.error.empty();
    if (interrupted()) { r.error = "interrupted"; h.abort.store(1); return false; }
    if (h.abort.load(std::memory_order_relaxed) && r.error.empty()) {
      r.error = first_error(ctl);
      if (r.error.empty()) r.error = "a worker failed";
    }
    const std::uint64_t now = now_ns();
    if (now > deadline) {
      r.error = std::string(what) + " did not finish within " + std::to_string(int(limit_s)) + " s";
      h.abort.store(1);
      return false;
    }
    if (o.progress && !o.quick && now >= next_report) {
      const std::uint64_t c = consumers_count(ctl);
      std::fprintf(stderr, "  [%s] %s %5.1f s  %10.0f jobs/s\n", label.c_str(), what, double(now - start) / 1e9,
                   double(c - last));
      last = c;
      next_report += 1'000'000'000ULL;
    }
    sleep_ns(5'000'000);
  }
}

// Mode::bare: go, wait for everyone, then the figures from the slots.
void run_bare(const Options& o, Control& ctl, Children& kids, const std::string& label, RunResult& r) {
  const Params& p = r.params;
  ControlHeader& h = ctl.header();
  h.phase.store(kWarmup, std::memory_order_release);  // pairs with the workers' acquire in wait_for_start
  if (!reap_all(o, ctl, kids, label, "bare flow", 600.0, r)) return;
  std::uint64_t t0 = ~std::uint64_t(0), t1 = 0, pt1 = 0, sent = 0, got = 0, pcpu = 0, ccpu = 0;
  for (std::uint32_t i = 0; i < p.producers + p.consumers; ++i) {
    const WorkerSlot& s = ctl.slot(i);
    t0 = std::min(t0, s.bare_t0);
    if (i < p.producers) {
      sent += s.bare_n;
      pcpu += s.bare_cpu;
      pt1 = std::max(pt1, s.bare_t1);
      r.full_retries += s.full_retries;
    } else {
      got += s.bare_n;
      ccpu += s.bare_cpu;
      t1 = std::max(t1, s.bare_t1);
      r.empty_polls += s.empty_polls;
    }
  }
  if (sent != p.bare_jobs * p.producers || got != sent) {
    r.error = "bare flow: " + std::to_string(sent) + " sent, " + std::to_string(got) + " claimed, of " +
              std::to_string(p.bare_jobs * p.producers);
    return;
  }
  auto& b = r.bare;
  b.jobs = got;
  b.capacity = p.capacity;
  b.seconds = t1 > t0 ? double(t1 - t0) / 1e9 : 0;
  b.per_s = b.seconds > 0 ? double(got) / b.seconds : 0;
  b.producer_per_s = pt1 > t0 ? double(sent) / (double(pt1 - t0) / 1e9) : 0;
  b.consumer_cpu_ns = got ? double(ccpu) / double(got) : 0;
  b.producer_cpu_ns = sent ? double(pcpu) / double(sent) : 0;
  b.rounds = {b.per_s};
  b.handoffs = {b.handoff_ns};
  r.ok = true;
}

// Mode::batch: kBatchRounds fills (producers alone) and drains (consumers
// alone), paced through round_state.
void run_batch(const Options& o, Control& ctl, Children& kids, const std::string& label, RunResult& r) {
  const Params& p = r.params;
  ControlHeader& h = ctl.header();
  h.phase.store(kWarmup, std::memory_order_release);
  auto wait = [&](const std::atomic<std::uint32_t>& counter, std::uint32_t target, const char* what) {
    const std::uint64_t deadline = now_ns() + 300'000'000'000ULL;
    while (counter.load(std::memory_order_acquire) < target) {
      if (interrupted()) { r.error = "interrupted"; return false; }
      if (h.abort.load()) { r.error = first_error(ctl); if (r.error.empty()) r.error = "a worker failed"; return false; }
      if (auto d = kids.early_death(); !d.empty()) { r.error = d; return false; }
      if (now_ns() > deadline) { r.error = std::string(what) + " did not finish within 300 s"; return false; }
      sleep_ns(1'000'000);
    }
    return true;
  };
  for (std::uint32_t round = 0; round < kBatchRounds; ++round) {
    h.round_state.store(2 * round + 1, std::memory_order_release);
    if (!wait(h.fill_done, p.producers * (round + 1), "a batch fill")) { h.abort.store(1); return; }
    h.round_state.store(2 * round + 2, std::memory_order_release);
    if (!wait(h.drain_done, p.consumers * (round + 1), "a batch drain")) { h.abort.store(1); return; }
  }
  if (!reap_all(o, ctl, kids, label, "batch", 60.0, r)) return;
  auto& b = r.batch;
  b.size = p.batch;
  auto figures = [&](std::uint32_t k, double& enq, double& drain, double* claim, double* complete) {
    std::uint64_t f0 = ~std::uint64_t(0), f1 = 0, filled = 0, d0 = ~std::uint64_t(0), d1 = 0, drained = 0, cn = 0, kn = 0;
    for (std::uint32_t i = 0; i < p.producers + p.consumers; ++i) {
      const WorkerSlot& s = ctl.slot(i);
      if (i < p.producers) {
        f0 = std::min(f0, s.fill_t0[k]);
        f1 = std::max(f1, s.fill_t1[k]);
        filled += s.fill_n[k];
      } else {
        d0 = std::min(d0, s.drain_t0[k]);
        d1 = std::max(d1, s.drain_t1[k]);
        drained += s.drained[k];
        cn += s.claim_call_ns[k];
        kn += s.complete_call_ns[k];
      }
    }
    if (drained != filled) {
      r.error = "batch round " + std::to_string(k) + ": " + std::to_string(filled) + " enqueued, " +
                std::to_string(drained) + " drained";
      return false;
    }
    b.jobs = filled;
    enq = f1 > f0 ? double(filled) / (double(f1 - f0) / 1e9) : 0;
    drain = d1 > d0 ? double(drained) / (double(d1 - d0) / 1e9) : 0;
    // Time inside the calls, summed over the consumers: per consumer, as if
    // its calls ran back to back; times the consumers.
    if (claim) *claim = cn ? double(drained) * 1e9 / (double(cn) / p.consumers) : 0;
    if (complete) *complete = kn ? double(drained) * 1e9 / (double(kn) / p.consumers) : 0;
    return true;
  };
  if (!figures(1, b.enqueue_per_s, b.drain_per_s, nullptr, nullptr)) return;
  if (!figures(2, b.enqueue_batch_per_s, b.drain_batch_per_s, &b.claim_batch_per_s, &b.complete_batch_per_s)) return;
  r.ok = true;
}

RunResult run_once(const Options& o, Peer& peer, const Params& params, std::uint32_t consumers,
                   const std::string& label) {
  RunResult r;
  r.peer = std::string(peer.name());
  r.topology = params.topology;
  r.mode = params.mode;
  r.label = label;
  r.what = std::string(peer.what());
  r.params = params;
  r.params.consumers = consumers;
  const Topology topo = params.topology;
  r.warmup_s = o.warmup_s;
  const Params& p = r.params;

  Control ctl;
  const std::string ctl_name =
      "/fairlane-bench-ctl-" + std::to_string(getpid()) + "-" + std::to_string(g_run_counter++);
  if (!Control::create(ctl, ctl_name, p, r.peer, r.error)) return r;
  ControlHeader& h = ctl.header();

  std::string info;
  if (!peer.setup(p, info, r.error)) {
    if (r.error.empty()) r.error = "setup failed";
    peer.teardown();
    return r;
  }
  PeerGuard guard{peer};
  r.shared_bytes = peer.shared_bytes();
  if (info.size() >= sizeof h.info) { r.error = "peer info too long"; return r; }
  std::memcpy(h.info, info.c_str(), info.size() + 1);

  if (p.mode == Mode::bare || (p.mode == Mode::flow && r.topology == Topology::processes)) {
    // The host's pace for this run, between the CPUs the flow will use
    // (before the workers exist: nothing else runs on them meanwhile).
    const std::vector<int> cpus = allowed_cpus();
    const int a = placement_cpu(p, Role::producer, 0, cpus), b = placement_cpu(p, Role::consumer, 0, cpus);
    std::string why;
    double& handoff = p.mode == Mode::bare ? r.bare.handoff_ns : r.flow_handoff_ns;
    handoff = line_handoff_ns(a, b, 20000, 5, why);
    // The workers inherit this thread's CPUs and place themselves by them:
    // a probe that left it pinned would put the whole flow on one CPU.
    if (allowed_cpus() != cpus) {
      r.error = "the line handoff probe left the harness on other CPUs than it had: " + why;
      return r;
    }
    if (handoff == 0 && handoff_applies(a, b))
      std::fprintf(stderr, "fairlane-bench: [%s] line handoff not measured: %s\n", label.c_str(), why.c_str());
  }

  Children kids;
  const std::string exe = self_exe();
  auto launch = [&](const char* role, std::uint32_t i) {
    std::string e;
    pid_t pid = spawn({exe, "--worker", ctl_name, role, std::to_string(i)}, false, e);
    if (pid < 0) r.error = e;
    kids.pids.push_back(pid);
    return pid > 0;
  };
  if (topo == Topology::threads) {
    if (!launch("all", 0)) return r;
  } else {
    for (std::uint32_t i = 0; i < p.producers; ++i)
      if (!launch("producer", i)) return r;
    for (std::uint32_t i = 0; i < p.consumers; ++i)
      if (!launch("consumer", i)) return r;
  }
  r.processes = std::uint32_t(kids.pids.size());

  // Start barrier: every worker attached.
  const std::uint32_t workers = p.producers + p.consumers;
  const std::uint64_t ready_deadline = now_ns() + 30'000'000'000ULL;
  while (h.ready.load(std::memory_order_acquire) < workers) {
    if (interrupted()) { r.error = "interrupted"; return r; }
    if (auto d = kids.early_death(); !d.empty()) { r.error = d; return r; }
    if (now_ns() > ready_deadline) { r.error = "workers did not attach within 30 s"; return r; }
    sleep_ns(1'000'000);
  }
  if (h.abort.load()) {
    r.error = first_error(ctl);
    return r;
  }
  if (p.mode == Mode::bare) {
    run_bare(o, ctl, kids, label, r);
    return r;
  }
  if (p.mode == Mode::batch) {
    run_batch(o, ctl, kids, label, r);
    return r;
  }

  // release: pairs with the workers' acquire in wait_for_start.
  h.phase.store(kWarmup, std::memory_order_release);
  if (!pace(o, ctl, kids, label, "warm-up", o.warmup_s, r.error)) return r;
  h.phase.store(kMeasure, std::memory_order_release);
  const std::uint64_t t0 = now_ns();
  if (!pace(o, ctl, kids, label, "measure", o.duration_s, r.error)) return r;
  h.phase.store(kRounds, std::memory_order_release);
  const std::uint64_t t1 = now_ns();
  r.measured_s = double(t1 - t0) / 1e9;

  // Drain rounds: fill (consumers idle) up to drain_jobs or for fill_s at
  // most (a slow peer drains what it took in), then drain (consumers alone).
  std::uint64_t server_cpu[kMaxRounds] = {};
  auto watch = [&]() -> bool {
    if (interrupted()) { r.error = "interrupted"; return false; }
    if (h.abort.load()) { r.error = first_error(ctl); if (r.error.empty()) r.error = "a worker failed"; return false; }
    if (auto d = kids.early_death(); !d.empty()) { r.error = d; return false; }
    return true;
  };
  for (std::uint32_t round = 0; round < p.drain_rounds + p.fair_round; ++round) {
    h.round_state.store(2 * round, std::memory_order_release);
    const std::uint64_t f0 = now_ns(), fill_end = f0 + std::uint64_t(o.fill_s * 1e9);
    while (now_ns() < fill_end) {
      if (!watch()) return r;
      if (backlog_of(ctl) + 16 * p.producers >= p.drain_jobs) break;
      sleep_ns(2'000'000);
    }
    if (round == 0) r.fill_s = double(now_ns() - f0) / 1e9;
    std::uint64_t server_cpu0 = 0;
    for (pid_t sp : peer.server_pids()) server_cpu0 += process_cpu_ns(sp);
    h.round_state.store(2 * round + 1, std::memory_order_release);
    const std::uint64_t deadline = now_ns() + 300'000'000'000ULL;
    std::uint64_t next_report = now_ns() + 2'000'000'000ULL;
    while (h.fill_done.load(std::memory_order_acquire) < p.producers * (round + 1) ||
           h.drain_done.load(std::memory_order_acquire) < p.consumers * (round + 1)) {
      if (!watch()) return r;
      if (now_ns() > deadline) { r.error = "a drain did not finish within 300 s"; return r; }
      if (o.progress && !o.quick && now_ns() > next_report) {
        std::fprintf(stderr, "  [%s] drain %u: %llu jobs left\n", label.c_str(), round + 1,
                     static_cast<unsigned long long>(backlog_of(ctl)));
        next_report += 2'000'000'000ULL;
      }
      sleep_ns(1'000'000);
    }
    std::uint64_t server_cpu1 = 0;
    for (pid_t sp : peer.server_pids()) server_cpu1 += process_cpu_ns(sp);
    server_cpu[round] = server_cpu1 - server_cpu0;
  }
  const std::uint64_t stop_deadline = now_ns() + 20'000'000'000ULL;
  while (h.producers_stopped.load(std::memory_order_acquire) < p.producers) {
    if (!watch()) return r;
    if (now_ns() > stop_deadline) { r.error = "producers did not stop within 20 s"; return r; }
    sleep_ns(1'000'000);
  }
  h.phase.store(kWake, std::memory_order_release);

  const std::uint64_t end_deadline = now_ns() + 20'000'000'000ULL + std::uint64_t(p.wake_rounds) * 20'000'000ULL;
  bool done_sent = false;
  for (auto& pid : kids.pids) {
    if (pid <= 0) continue;  // already reaped (it left early, cleanly)
    int st = 0;
    for (;;) {
      if (wait_for(pid, 50'000'000, st)) break;
      if ((h.abort.load() || interrupted()) && !done_sent) {
        h.phase.store(kDone, std::memory_order_release);
        done_sent = true;
      }
      if (now_ns() > end_deadline) {
        if (!done_sent) {
          h.phase.store(kDone, std::memory_order_release);
          done_sent = true;
          continue;
        }
        stop_process(pid, 500'000'000);
        st = -1;
        break;
      }
    }
    const pid_t was = pid;
    pid = -1;
    if (st == -1) { r.error = "worker " + std::to_string(was) + " hung at the end and was killed"; }
    else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && r.error.empty())
      r.error = "worker " + std::to_string(was) + " " + describe_status(st);
  }

  for (pid_t s : peer.server_pids()) r.server_rss_kb += vmhwm_kb(s);

  // Collect.
  std::map<std::int32_t, std::uint64_t> rss;
  std::vector<TraceRec> trace, dtrace;
  std::uint64_t drained[kMaxRounds] = {}, d_first[kMaxRounds], d_last[kMaxRounds] = {}, drain_cpu[kMaxRounds] = {},
                drain_faults[kMaxRounds] = {};
  std::fill(std::begin(d_first), std::end(d_first), ~std::uint64_t(0));
  for (std::uint32_t i = 0; i < workers; ++i) {
    WorkerSlot& s = ctl.slot(i);
    if (s.state.load(std::memory_order_acquire) == std::int32_t(SlotState::running) && r.error.empty())
      r.error = "worker slot " + std::to_string(i) + " never finished";
    if (s.error[0] && r.error.empty()) r.error = s.error;
    rss[s.pid] = std::max(rss[s.pid], s.vmhwm_kb);
    if (i < p.producers) {
      r.enqueued += s.measured;
      r.full_retries += s.full_retries;
    } else {
      r.cycles += s.measured;
      r.empty_polls += s.empty_polls;
      r.wake_timeouts += s.wake_timeouts;
      for (std::uint32_t k = 0; k < p.drain_rounds + p.fair_round; ++k) {
        drained[k] += s.drained[k];
        drain_cpu[k] += s.drain_cpu[k];
        drain_faults[k] += s.drain_faults[k];
        if (s.drained[k] > 0) {
          d_first[k] = std::min(d_first[k], s.drain_t0[k]);
          d_last[k] = std::max(d_last[k], s.drain_t1[k]);
        }
      }
      r.claim.merge(s.claim_ns);
      r.e2c.merge(s.e2c_ns);
      r.wake.merge(s.wake_ns);
      const TraceRec* t = ctl.trace(i - p.producers);
      trace.insert(trace.end(), t, t + std::min<std::uint64_t>(s.trace_len, p.trace_cap));
      const TraceRec* dt = ctl.drain_trace(i - p.producers);
      dtrace.insert(dtrace.end(), dt, dt + std::min<std::uint64_t>(s.drain_trace_len, p.trace_cap));
    }
  }
  for (auto& [pid, kb] : rss) {
    r.rss_max_kb = std::max(r.rss_max_kb, kb);
    r.rss_sum_kb += kb;
  }
  r.cycles_per_s = r.measured_s > 0 ? double(r.cycles) / r.measured_s : 0;
  r.enqueued_per_s = r.measured_s > 0 ? double(r.enqueued) / r.measured_s : 0;
  for (std::uint32_t k = 0; k < p.drain_rounds; ++k) {
    const double secs = d_last[k] > d_first[k] ? double(d_last[k] - d_first[k]) / 1e9 : 0;
    const double rate = secs > 0 ? double(drained[k]) / secs : 0;
    if (k == 0) r.cold_drain_per_s = rate;
    r.drained = drained[k];  // the last round is the steady state
    r.drain_s = secs;
    r.drained_per_s = rate;
    r.drain_consumer_cpu_ns = drained[k] ? double(drain_cpu[k]) / double(drained[k]) : 0;
    r.drain_server_cpu_ns = drained[k] ? double(server_cpu[k]) / double(drained[k]) : 0;
    r.drain_faults_per_job = drained[k] ? double(drain_faults[k]) / double(drained[k]) : 0;
    if (k == 0) r.cold_faults_per_job = r.drain_faults_per_job;
  }

  // With every trace full, the sequence is only complete up to the earliest
  // point where one consumer stopped recording.
  std::uint64_t cut = ~std::uint64_t(0);
  for (std::uint32_t c = 0; c < p.consumers; ++c) {
    const WorkerSlot& s = ctl.slot(p.producers + c);
    if (s.trace_len >= p.trace_cap && s.trace_len > 0) cut = std::min(cut, ctl.trace(c)[s.trace_len - 1].claim_ns);
  }
  if (cut != ~std::uint64_t(0))
    trace.erase(std::remove_if(trace.begin(), trace.end(), [&](const TraceRec& t) { return t.claim_ns > cut; }),
                trace.end());
  const std::uint64_t window = o.window ? o.window : std::max<std::uint64_t>(1000, 4ULL * p.lanes);
  // A job's admitted time, from its producer's record (see control.hpp).
  auto admitted_at = [&](std::uint32_t tag) -> std::uint64_t {
    const std::uint32_t prod = tag >> kSeqBits;
    if (prod >= p.producers) return 0;
    const WorkerSlot& s = ctl.slot(prod);
    if (s.admit_first == ~std::uint64_t(0)) return 0;
    const std::uint64_t idx = ((tag & kSeqMask) - (s.admit_first & kSeqMask)) & kSeqMask;
    return idx < s.admit_len ? ctl.admitted(prod)[idx] : 0;
  };
  r.fair = analyze_fairness(trace, p.lanes, window, admitted_at, &r.series);
  if (!o.trace_dir.empty()) dump_trace(o.trace_dir + "/flow_" + r.peer + "_" + to_string(topo) + ".csv", trace);

  // The recorded drain: every job was in the queue when it started, so a
  // lane is backlogged from then until its last claim.
  if (p.fair_round) {
    const std::uint32_t k = p.drain_rounds;
    const std::uint64_t start = d_first[k];
    std::uint64_t dcut = ~std::uint64_t(0);
    for (std::uint32_t c = 0; c < p.consumers; ++c) {
      const WorkerSlot& s = ctl.slot(p.producers + c);
      if (s.drain_trace_len >= p.trace_cap && s.drain_trace_len > 0)
        dcut = std::min(dcut, ctl.drain_trace(c)[s.drain_trace_len - 1].claim_ns);
    }
    if (dcut != ~std::uint64_t(0))
      dtrace.erase(std::remove_if(dtrace.begin(), dtrace.end(), [&](const TraceRec& t) { return t.claim_ns > dcut; }),
                   dtrace.end());
    r.drain_fair = analyze_fairness(dtrace, p.lanes, window, [start](std::uint32_t) { return start; }, &r.drain_series);
    if (!o.trace_dir.empty()) dump_trace(o.trace_dir + "/drain_" + r.peer + "_" + to_string(topo) + ".csv", dtrace);
  }
  r.ok = r.error.empty();
  return r;
}

}  // namespace

RunResult run_peer(const Options& o, const std::string& spec, const PeerEnv& env) {
  RunResult r;
  r.label = spec;
  r.params = o.params;
  PeerSpec ps;
  if (!parse_spec(spec, ps, r.error)) return r;
  auto peer = make_peer(ps.name, env);
  r.peer = ps.name;
  r.mode = ps.mode;
  if (!peer) {
    r.error = "unknown peer '" + ps.name + "'";
    return r;
  }
  r.what = std::string(peer->what());
  Topology topo = peer->natural_topology();
  if (ps.topology == "threads") topo = Topology::threads;
  else if (ps.topology == "processes") topo = Topology::processes;
  r.topology = topo;
  Params params = o.params;
  params.topology = topo;
  params.mode = ps.mode;
  if (ps.producers) {
    params.producers = ps.producers;
    params.consumers = ps.consumers;
    r.pxc = true;
  }
  if (ps.mode == Mode::bare) {
    // The same queue capacity for every peer of the bare flow: the backlog
    // bound, rounded up to a power of two (fairlane's segment likes those).
    if (params.capacity == 0) {
      std::uint64_t c = 1024;
      while (c < params.backlog) c <<= 1;
      params.capacity = c;
    }
    params.drain_rounds = 0;
    params.fair_round = 0;
    params.wake_rounds = 0;
    params.trace_cap = 1;
  } else if (ps.mode == Mode::batch) {
    if (params.drain_jobs == 0) params.drain_jobs = 100000;
    params.drain_rounds = 0;
    params.fair_round = 0;
    params.wake_rounds = 0;
    params.trace_cap = 1;
  }
  r.params = params;
  r.label = std::string(ps.mode == Mode::flow ? "" : std::string(to_string(ps.mode)) + ":") + ps.name + "/" +
            to_string(topo) +
            (r.pxc ? "@" + std::to_string(params.producers) + "x" + std::to_string(params.consumers) : "");
  if (!peer->supports(topo)) {
    r.error = ps.name + " does not run as " + to_string(topo);
    return r;
  }
  if (ps.mode == Mode::batch && !peer->supports_batch()) {
    r.error = ps.name + " has no batch calls (batch mode runs fairlane)";
    return r;
  }
  if (auto why = peer->unavailable(); !why.empty()) {
    r.skipped = true;
    r.error = why;
    return r;
  }
  std::vector<std::uint32_t> sweep = ps.mode == Mode::flow && !r.pxc ? peer->consumer_sweep()
                                                                      : std::vector<std::uint32_t>{};
  if (sweep.empty()) sweep.push_back(params.consumers);

  // The best of the sweep by claim+complete capacity (the drain rate), or by
  // the flow rate when there was no drain.
  auto score = [](const RunResult& x) { return x.drained_per_s > 0 ? x.drained_per_s : x.cycles_per_s; };
  RunResult best;
  bool have = false;
  std::vector<RunResult::SweepPoint> points;
  for (std::uint32_t c : sweep) {
    const std::string lab = sweep.size() > 1 ? r.label + " c=" + std::to_string(c) : r.label;
    RunResult one = run_once(o, *peer, params, c, lab);
    one.label = r.label;
    one.pxc = r.pxc;
    if (o.progress) {
      if (one.ok && one.mode == Mode::bare)
        std::fprintf(stderr, "  [%s] %u producer(s), %u consumer(s): bare flow %.0f jobs/s (%llu jobs)\n", lab.c_str(),
                     one.params.producers, c, one.bare.per_s, static_cast<unsigned long long>(one.bare.jobs));
      else if (one.ok && one.mode == Mode::batch)
        std::fprintf(stderr, "  [%s] batch %u: enqueue %.0f -> %.0f jobs/s, claim+complete %.0f -> %.0f jobs/s\n",
                     lab.c_str(), one.batch.size, one.batch.enqueue_per_s, one.batch.enqueue_batch_per_s,
                     one.batch.drain_per_s, one.batch.drain_batch_per_s);
      else if (one.ok)
        std::fprintf(stderr, "  [%s] %u producer(s), %u consumer(s): flow %.0f cycles/s, drain %.0f/s (%llu jobs)\n",
                     lab.c_str(), one.params.producers, c, one.cycles_per_s, one.drained_per_s,
                     static_cast<unsigned long long>(one.drained));
      else
        std::fprintf(stderr, "  [%s] failed: %s\n", lab.c_str(), one.error.c_str());
    }
    if (!one.ok) return one;
    points.push_back({c, one.cycles_per_s, one.drained_per_s});
    if (!have || score(one) > score(best)) {
      best = std::move(one);
      have = true;
    }
  }
  if (points.size() > 1) best.sweep = std::move(points);
  return best;
}

}  // namespace fairlane::bench
