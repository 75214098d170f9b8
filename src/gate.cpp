// The gate: repairing the segment after a process died inside an operation.
// See gate.hpp for the protocol and docs/design.md section 7 for why.
#include "gate.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "clock.hpp"
#include "failpoint.hpp"
#include "futex.hpp"

namespace fairlane::detail {

namespace {

// How often a process waiting at the closed gate judges whether the
// repairer is still alive.
constexpr std::uint64_t kJudgeRepairerMs = 20;

inline void pause_briefly(int& spins) noexcept {
  if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else if (spins < 128) {
    sched_yield();
  } else {
    ::usleep(50);
  }
}

void record_repair(Segment& s, int pid, std::uint64_t took_us, std::size_t violations) noexcept {
  // Relaxed: read for display only.
  RecoveryStats& r = s.h->recovery;
  r.repairs.fetch_add(1, std::memory_order_relaxed);
  r.repair_pid.store(std::uint64_t(std::max(pid, 0)), std::memory_order_relaxed);
  r.repair_us.store(took_us, std::memory_order_relaxed);
  r.repair_violations.store(violations, std::memory_order_relaxed);
  r.repair_unix_ms.store(unix_ms(), std::memory_order_relaxed);
  std::uint64_t worst = r.repair_worst_us.load(std::memory_order_relaxed);
  while (took_us > worst && !r.repair_worst_us.compare_exchange_weak(worst, took_us, std::memory_order_relaxed)) {
  }
}

// The gate word that closes gate word `g` for record `me` (a new generation).
std::uint32_t closed_by(std::uint32_t g, std::uint32_t me) noexcept {
  return (((g >> kGateHolderBits) + 1) << kGateHolderBits) | (me + 1);
}

void open_gate(Segment& s) noexcept {
  // [R12] release (seq_cst): the repair's writes happen-before every
  // operation that sees the gate open. Only the holder writes the gate
  // while it is closed, so a plain read-modify-write is enough here.
  const std::uint32_t g = s.h->gate.load(std::memory_order_relaxed);
  s.h->gate.store(g & ~kGateHolderMask, std::memory_order_seq_cst);
  futex_wake(&s.h->gate, INT_MAX);
}

// Tells the mirror that something changed outside its log: a process that
// died inside an operation may have changed a slot or a lane without
// logging it (the log record comes after the change).
void resync_mirror(Segment& s) noexcept {
  if (!s.log) return;
  std::uint32_t ok = std::uint32_t(MirrorState::ok);
  s.h->mirror.state.compare_exchange_strong(ok, std::uint32_t(MirrorState::resync), std::memory_order_acq_rel);
}

// Leases held by processes that died inside an operation go back to
// pending at once (their lane counts are then off, and the rebuild that
// follows recounts them). The sweep would return them too, a little later.
std::uint64_t return_leases_of(Segment& s, const std::vector<std::uint32_t>& dead) noexcept {
  if (dead.empty()) return 0;
  bool is_dead[kMaxProcs] = {};
  for (std::uint32_t i : dead) is_dead[i] = true;
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const std::uint64_t w = s.words[i].load(std::memory_order_relaxed);
    if (SlotWord::state(w) != SlotState::leased) continue;
    const std::uint32_t holder = __atomic_load_n(&s.slot(i).holder, __ATOMIC_RELAXED);
    if (holder == 0 || holder > kMaxProcs || !is_dead[holder - 1]) continue;
    s.words[i].store(SlotWord::pack(SlotState::pending, SlotWord::gen(w), SlotWord::attempt(w), 0), std::memory_order_relaxed);
    s.slot(i).ready_us = segment_now_us(s);
    ++n;
  }
  return n;
}

// The repair itself; the caller holds the gate.
GateRepair closed_repair(Segment& s, std::uint64_t wait_ms, FsckReport* report) noexcept {
  const std::uint64_t started_us = monotonic_us(), give_up_us = started_us + wait_ms * 1000;
  FAIRLANE_FAILPOINT("repair.closed");
  // Wait until every live process is out of its operations; note the dead
  // ones that are not.
  std::vector<std::uint32_t> dead;
  int first_pid = 0;
  for (std::uint32_t i = 0; i < kMaxProcs; ++i) {
    ProcRecord& p = s.procs[i];
    std::uint64_t next_judge_us = 0;
    int spins = 0;
    // [S11] seq_cst / [R11] acquire: see gate.hpp.
    while (p.in_op.load(std::memory_order_seq_cst) != 0) {
      const std::uint64_t now_us = monotonic_us();
      if (now_us >= next_judge_us) {
        if (p.owner.load(std::memory_order_acquire) == 0) {
          dead.push_back(i);  // a count left by a handle closed mid-operation: nobody is there
          break;
        }
        if (const int pid = dead_owner_pid(p)) {
          dead.push_back(i);
          if (!first_pid) first_pid = pid;
          break;
        }
        next_judge_us = now_us + 5000;
      }
      if (now_us >= give_up_us) {
        // A live process stays inside an operation (stopped, or starved of
        // CPU): give up rather than keep everyone waiting, say who, and let
        // the next attempts back off (recover_dead_operations).
        RecoveryStats& rs = s.h->recovery;
        rs.repairs_abandoned.fetch_add(1, std::memory_order_relaxed);
        rs.repair_blocker_pid.store(p.owner.load(std::memory_order_relaxed) & 0xFFFFFFFF, std::memory_order_relaxed);
        s.h->gate_backoff.fetch_add(1, std::memory_order_relaxed);
        open_gate(s);
        return GateRepair::abandoned;
      }
      pause_briefly(spins);
    }
  }
  // Nobody alive is changing anything now.
  const std::uint64_t returned = return_leases_of(s, dead);
  FsckReport local;
  FsckReport& r = report ? *report : local;
  r = check_segment(s);
  if (!r.clean()) rebuild_segment(s, r);
  FAIRLANE_FAILPOINT("repair.rebuilt");
  for (std::uint32_t i : dead) s.procs[i].in_op.store(0, std::memory_order_relaxed);
  if (!dead.empty()) resync_mirror(s);
  s.h->gate_backoff.store(0, std::memory_order_relaxed);
  if (returned) {
    RecoveryStats& rs = s.h->recovery;
    rs.jobs.fetch_add(returned, std::memory_order_relaxed);
    s.counters().expired.fetch_add(returned, std::memory_order_relaxed);
  }
  record_repair(s, first_pid, monotonic_us() - started_us, r.issues.size());
  open_gate(s);
  return GateRepair::repaired;
}

}  // namespace

void gate_wait(Segment& s) noexcept {
  std::uint64_t next_judge = 0;
  for (;;) {
    const std::uint32_t g = s.h->gate.load(std::memory_order_acquire);
    if (gate_open(g)) return;
    const std::uint64_t now = monotonic_us() / 1000;
    if (now >= next_judge && gate_holder(g) <= kMaxProcs) {
      next_judge = now + kJudgeRepairerMs;
      if (dead_owner_pid(s.procs[gate_holder(g) - 1]) != 0) {
        // The repairer died with the gate closed: take its repair over.
        // The generation in g makes this CAS fail if the gate was opened
        // and closed again since we looked (even by the same record).
        std::uint32_t expected = g;
        if (s.h->gate.compare_exchange_strong(expected, closed_by(g, s.me_index), std::memory_order_seq_cst))
          closed_repair(s, kGateWaitMs, nullptr);
        continue;
      }
    }
    futex_wait(&s.h->gate, g, kJudgeRepairerMs);
  }
}

GateRepair gated_repair(Segment& s, std::uint64_t wait_ms, FsckReport* report) noexcept {
  std::uint32_t g = s.h->gate.load(std::memory_order_relaxed);
  // [S11] seq_cst: close the gate before looking at anyone's in_op.
  if (!gate_open(g) ||
      !s.h->gate.compare_exchange_strong(g, closed_by(g, s.me_index), std::memory_order_seq_cst)) {
    gate_wait(s);
    return GateRepair::other;
  }
  return closed_repair(s, wait_ms, report);
}

void look_for_dead_operations(Segment& s, std::uint64_t now_ms) noexcept {
  // One caller per recovery_ms / 2 does the looking (relaxed: a throttle).
  // After repairs abandoned in a row (a live process stayed inside an
  // operation), the interval doubles each time, up to 64 times: each
  // attempt keeps everyone waiting for kGateWaitMs.
  std::atomic<std::uint64_t>& checked = s.h->recovery.ops_checked_ms;
  std::uint64_t last = checked.load(std::memory_order_relaxed);
  const std::uint32_t backoff = std::min<std::uint32_t>(s.h->gate_backoff.load(std::memory_order_relaxed), 6);
  if (last <= now_ms && now_ms < last + (std::uint64_t(s.recovery_ms / 2) << backoff)) return;
  if (!checked.compare_exchange_strong(last, now_ms, std::memory_order_relaxed)) return;
  for (std::uint32_t i = 0; i < kMaxProcs; ++i) {
    if (i == s.me_index || s.procs[i].in_op.load(std::memory_order_acquire) == 0) continue;
    if (dead_owner_pid(s.procs[i]) != 0) {
      gated_repair(s, kGateWaitMs, nullptr);
      return;
    }
  }
}

}  // namespace fairlane::detail
