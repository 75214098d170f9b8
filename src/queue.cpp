// The queue's transitions over the segment's tables.
//
// The job slot table is the truth; lanes, the ring and the id index are
// derived. Each transition below says its steps in order. See
// docs/design.md for the synchronisation edges ([R*]/[A*]/[S*] labels).
#include "fairlane/queue.hpp"

#include <sched.h>

#include <algorithm>
#include <cassert>
#include <climits>
#include <optional>
#include <cstring>
#include <thread>

#include "clock.hpp"
#include "failpoint.hpp"
#include "futex.hpp"
#include "gate.hpp"
#include "id_index.hpp"
#include "lane_order.hpp"
#include "lane_table.hpp"
#include "mirror_log.hpp"
#include "ring.hpp"
#include "segment.hpp"

namespace fairlane {
using namespace detail;

namespace {

constexpr std::uint64_t kNever = ~0ULL;
// A sweep for due work runs at least every recovery_ms (the segment's
// recovery bound) while anyone claims or waits, whatever next_due says
// (parked consumers wake this often to run it); sweeps judge the holders of
// unexpired leases every half of it. Together they bound how long the
// leases of a dead consumer stay out.
// A claim that draws a lane whose structure is busy spins this many times
// before it gives the turn back; this many such turns in a row and the
// claim returns what it has.
constexpr int kBusySpins = 256;
constexpr int kBusyYields = 16;
constexpr int kMaxBusySkips = 8;
// Jobs one ring step takes at most (a batch claim takes more steps).
constexpr std::uint64_t kMaxStepJobs = 256;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::uint64_t relaxed_inc(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  return c.fetch_add(n, std::memory_order_relaxed);  // statistics only
}

// Lowers `word` to v if v is smaller. Release: a sweeper that later reads
// the lowered value also sees the slot word that made it due.
void atomic_min(std::atomic<std::uint64_t>& word, std::uint64_t v) noexcept {
  std::uint64_t cur = word.load(std::memory_order_relaxed);
  while (v < cur && !word.compare_exchange_weak(cur, v, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

// ---- free list: a Treiber stack of slots, head tagged against ABA --------
//   free_head: tag (bits 32..63) | slot+1 (bits 0..31)

std::uint32_t free_pop(Segment& s) noexcept {
  std::uint64_t h = s.h->free_head.load(std::memory_order_acquire);
  for (;;) {
    std::uint32_t top = std::uint32_t(h);
    if (!top) return kNoSlot;
    // May read a link that a racing pop/push is rewriting; the tag makes our
    // CAS fail in that case.
    std::uint32_t next = s.slot(top - 1).next.load(std::memory_order_relaxed);
    std::uint64_t nh = (((h >> 32) + 1) << 32) | next;
    // [A3] acquire: pairs with [R3]; the slot's last owner is done with it.
    if (s.h->free_head.compare_exchange_weak(h, nh, std::memory_order_acquire, std::memory_order_acquire)) return top - 1;
  }
}

void free_push(Segment& s, std::uint32_t slot) noexcept {
  std::uint64_t h = s.h->free_head.load(std::memory_order_relaxed);
  std::uint64_t nh;
  do {
    s.slot(slot).next.store(std::uint32_t(h), std::memory_order_relaxed);
    nh = (((h >> 32) + 1) << 32) | (slot + 1);
    // [R3] release: pairs with [A3].
  } while (!s.h->free_head.compare_exchange_weak(h, nh, std::memory_order_release, std::memory_order_relaxed));
}

// ---- wake-ups --------------------------------------------------------------

// After a token became available: wake one parked consumer, if any. The
// seq_cst load pairs with the seq_cst increment of `waiters` by a consumer
// about to park ([S1]/[S2] and [S5]): either it sees our token or we see it.
void notify(Segment& s, int count = 1) noexcept {
  if (s.h->waiters.load(std::memory_order_seq_cst) == 0) return;
  s.h->wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&s.h->wake_seq, count);
}

// ---- ring tokens -------------------------------------------------------------
//   hold: claims left in the turn (bits 32..63) | lane+1 (bits 0..31)

struct RingToken {
  std::uint32_t lane = kNoLane;
  std::uint32_t turn = 0;  // claims this lane may still take in its turn
};

std::uint32_t weight_of(const LaneRecord& l) noexcept {
  std::uint32_t w = l.weight.load(std::memory_order_relaxed);
  return w ? w : 1;
}

// Turns a lane gets back at most per ring draw (see claim_some).
constexpr std::uint32_t kMaxRepaidTurns = 8;

RingToken take_token(Segment& s) noexcept {
  // seq_cst: a store-load pair with put_token's CAS and notify()'s load of
  // `waiters` (no lost wake-up; see [S5]).
  std::uint64_t hw = s.h->hold.load(std::memory_order_seq_cst);
  if (hw && s.h->hold.compare_exchange_strong(hw, 0, std::memory_order_seq_cst))
    return RingToken{std::uint32_t(hw) - 1, std::uint32_t(hw >> 32)};
  std::uint32_t lane = ring_pop(s);
  if (lane == kNoLane) return {};
  // A fresh turn from the rotation: the lane's weight, plus turns it lost
  // earlier to a busy structure (taken off `owed` here, once).
  LaneRecord& l = s.lanes[lane];
  std::uint32_t repaid = 0;
  std::uint32_t owed = l.owed.load(std::memory_order_relaxed);
  while (owed != 0) {
    repaid = std::min(owed, kMaxRepaidTurns);
    if (l.owed.compare_exchange_weak(owed, owed - repaid, std::memory_order_relaxed)) break;
    repaid = 0;
  }
  return RingToken{lane, weight_of(l) + repaid};
}

// Gives a token back: to the hold slot if its lane is owed more claims this
// turn (so the ring stays on it), else to the ring's tail.
// Wakes a parked consumer unless `wake` is false (the caller notifies later).
// Turns left that cannot wait in the hold slot (another lane's are there)
// are owed to the lane and come back at its next draw from the ring.
void put_token(Segment& s, std::uint32_t lane, std::uint32_t turn_left, bool wake = true) noexcept {
  bool held = false;
  if (turn_left > 0) {
    std::uint64_t empty = 0;
    held = s.h->hold.compare_exchange_strong(empty, (std::uint64_t(turn_left) << 32) | (lane + 1), std::memory_order_seq_cst);
    if (!held) s.lanes[lane].owed.fetch_add(turn_left, std::memory_order_relaxed);
  }
  if (!held) {
    [[maybe_unused]] const bool pushed = ring_push(s, lane);
    assert(pushed && "one token per lane and more cells than lanes: the ring cannot be full");
  }
  if (wake) notify(s);
}

// Applies `change` to a lane word by CAS; if the result is serviceable and
// the lane has no token, mints one in the same step and rings it.
template <class F>
std::uint64_t update_lane(Segment& s, std::uint32_t lane, F change) noexcept {
  LaneRecord& l = s.lanes[lane];
  std::uint64_t w = l.word.load(std::memory_order_acquire);
  std::uint64_t nw;
  bool ring;
  do {
    nw = change(w);
    ring = !(nw & LaneWord::kRinged) && LaneWord::serviceable(nw);
    if (ring) nw |= LaneWord::kRinged;
    // [R4] acq_rel: the lane word orders every change of lane state.
  } while (!l.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_acquire));
  if (ring) {
    FAIRLANE_FAILPOINT("lane.ringed");
    ring_push(s, lane);
    notify(s);
  }
  return nw;
}

// Makes a slot that is now in state pending visible in its lane; if it was
// leased, releases the lane's active count in the same step.
void enter_lane(Segment& s, std::uint32_t slot, bool was_active) noexcept {
  const std::uint32_t lane = s.slot(slot).lane;
  intake_push(s, s.lanes[lane], slot);
  FAIRLANE_FAILPOINT("lane.intake_pushed");
  update_lane(s, lane, [was_active](std::uint64_t w) {
    w = LaneWord::with_pending(w, LaneWord::pending(w) + 1);
    if (was_active) w = LaneWord::with_active(w, LaneWord::active(w) - 1);
    return w;
  });
}

void release_active(Segment& s, std::uint32_t lane) noexcept {
  update_lane(s, lane, [](std::uint64_t w) { return LaneWord::with_active(w, LaneWord::active(w) - 1); });
}

// ---- sweeping: promote due jobs, return expired leases and those of dead holders ----
//
// A sweep scans the slot words. A due `scheduled` slot is promoted; a
// `leased` slot goes back to its lane when its deadline has passed or when
// its holder (the process record in SlotRecord::holder) is dead, judged by
// pid + start time. Both take the job with the same CAS on the slot word
// ([R5]), so a holder that was only slow finds its attempt fenced off when
// it completes late. Liveness costs system calls (kill, /proc/PID/stat), so
// a sweep judges each process record at most once, and sweeps judge
// unexpired leases at most every recovery_ms / 2 (the header's
// recovery.checked_ms elects the sweep that does).


// The liveness of lease holders, judged at most once per process record in
// one sweep. Only a record whose owner has stamped its start time is judged
// (never one being attached), and only if it did not change hands while we
// read it. A free record (its owner detached cleanly, as `fairlane claim`
// does) is not judged dead: its pid may still complete the job through
// another handle.
class HolderLiveness {
 public:
  explicit HolderLiveness(const Segment& s) noexcept : s_(s) {}

  // The pid of the lease holder `holder` (record index + 1) if it is dead, else 0.
  int dead_pid(std::uint32_t holder) noexcept {
    if (holder == 0 || holder > kMaxProcs || holder - 1 == s_.me_index) return 0;
    const std::uint32_t i = holder - 1;
    if (!judged_[i]) {
      judged_[i] = true;
      dead_[i] = dead_owner_pid(s_.procs[i]);
    }
    return dead_[i];
  }

 private:
  const Segment& s_;
  bool judged_[kMaxProcs] = {};
  int dead_[kMaxProcs] = {};
};

// Returns a leased (expired, or of a dead holder) or scheduled (due) job to
// its lane. False if the slot word changed under us.
bool return_to_lane(Segment& s, std::uint32_t slot, std::uint64_t w) noexcept {
  const SlotState st = SlotWord::state(w);
  const std::uint64_t pending = SlotWord::pack(SlotState::pending, SlotWord::gen(w), SlotWord::attempt(w), 0);
  // [R5] acq_rel: takes the job from its holder (fences out a late complete).
  if (!s.words[slot].compare_exchange_strong(w, pending, std::memory_order_acq_rel)) return false;
  FAIRLANE_FAILPOINT("sweep.returned");
  s.slot(slot).ready_us = segment_now_us(s);
  enter_lane(s, slot, st == SlotState::leased);
  log_job(s, slot);
  relaxed_inc(st == SlotState::leased ? s.counters().expired : s.counters().promoted);
  return true;
}

// Whether this sweep judges the holders of unexpired leases: always when
// asked (tick), else when recovery_ms / 2 have passed since a sweep last did
// (one sweep wins the CAS).
bool holders_due(Segment& s, std::uint64_t now, bool force) noexcept {
  std::atomic<std::uint64_t>& checked = s.h->recovery.checked_ms;
  std::uint64_t last = checked.load(std::memory_order_relaxed);
  for (;;) {
    if (!force && last <= now && now < last + s.recovery_ms / 2) return false;
    // Relaxed: a throttle; a lost race only means one check more or less.
    if (checked.compare_exchange_weak(last, now, std::memory_order_relaxed)) return true;
  }
}

// Records a sweep that returned leases (Header::recovery). Relaxed: read
// for display only.
void record_recovery(Segment& s, std::uint64_t leases, int pid, std::uint64_t took_us) noexcept {
  RecoveryStats& r = s.h->recovery;
  r.runs.fetch_add(1, std::memory_order_relaxed);
  r.jobs.fetch_add(leases, std::memory_order_relaxed);
  r.last_jobs.store(leases, std::memory_order_relaxed);
  r.last_pid.store(std::uint64_t(std::max(pid, 0)), std::memory_order_relaxed);
  r.last_us.store(took_us, std::memory_order_relaxed);
  r.last_unix_ms.store(unix_ms(), std::memory_order_relaxed);
}

std::uint64_t sweep(Segment& s, std::uint64_t now, bool judge_all = false) noexcept {
  const std::uint64_t started_us = monotonic_us();
  s.h->last_sweep_ms.store(now, std::memory_order_relaxed);
  // Anyone who makes a deadline from here on lowers next_due again.
  s.h->next_due.exchange(kNever, std::memory_order_acq_rel);
  const bool judge_unexpired = holders_due(s, now, judge_all);
  HolderLiveness holders(s);
  std::uint64_t moved = 0, next = kNever, leases = 0;
  int whose = -1;  // the one dead pid every returned lease belonged to; 0: none or several
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    std::uint64_t w = s.words[i].load(std::memory_order_acquire);
    for (;;) {
      const SlotState st = SlotWord::state(w);
      if (st != SlotState::leased && st != SlotState::scheduled) break;
      const bool due = SlotWord::when(w) <= now;
      int dead = 0;
      if (st == SlotState::leased && judge_unexpired) {
        // Also for an expired lease, to say whose it was. Read after the
        // acquire of w: the claimer wrote it before [R6]. If the slot moved
        // on meanwhile, the CAS below fails and we look again.
        dead = holders.dead_pid(__atomic_load_n(&s.slot(i).holder, __ATOMIC_RELAXED));
      }
      if (!due && dead == 0) {
        next = std::min(next, SlotWord::when(w));
        break;
      }
      if (return_to_lane(s, i, w)) {
        ++moved;
        if (st == SlotState::leased) {
          ++leases;
          whose = (whose == -1 || whose == dead) ? dead : 0;
        }
        break;
      }
      w = s.words[i].load(std::memory_order_acquire);
    }
  }
  atomic_min(s.h->next_due, next);
  if (leases) record_recovery(s, leases, whose, monotonic_us() - started_us);
  return moved;
}

void maybe_sweep(Segment& s, std::uint64_t now) noexcept {
  std::uint64_t last = s.h->last_sweep_ms.load(std::memory_order_relaxed);
  if (now < s.h->next_due.load(std::memory_order_relaxed) && now < last + s.recovery_ms) return;
  // At most one sweep per millisecond: the CAS elects the sweeper.
  if (last >= now || !s.h->last_sweep_ms.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  sweep(s, now);
}

// ---- claiming ----------------------------------------------------------------

void fill_lease(Segment& s, std::uint32_t slot, const BrandedId& group, std::uint32_t attempt,
                std::uint64_t deadline, std::uint64_t now_us, Lease& out) {
  const SlotRecord& r = s.slot(slot);
  out.id = BrandedId::make(std::string_view(s.h->job_kind, 3), r.snowflake.load(std::memory_order_relaxed));
  out.group = group;
  out.attempt = attempt;
  out.token = Token(attempt);
  out.deadline_ms = deadline;
  out.waited_us = now_us > r.ready_us ? now_us - r.ready_us : 0;
  out.payload.assign(reinterpret_cast<const char*>(s.payload(slot)), r.payload_len);
}

std::uint32_t wait_bucket(std::uint64_t us) noexcept {
  if (us < 2) return 0;
  return std::min<std::uint32_t>(kWaitBuckets - 1, std::uint32_t(63 - __builtin_clzll(us)));
}

void record_wait(Segment& s, std::uint32_t lane, std::uint64_t waited_us) noexcept {
  // Relaxed: statistics; only the lane's server writes here.
  s.waits[lane].b[wait_bucket(waited_us)].fetch_add(1, std::memory_order_relaxed);
}

// The claim loop shared by claim and claim_batch. Each ring step:
//
//  1. take a token (the hold slot first, then the ring's head);
//  2. CAS the lane word: drop the token if the lane is not serviceable;
//     otherwise reserve n = min(turn, depth, headroom, room) jobs and the
//     lane structure (busy), and decide in the same CAS whether the lane
//     stays serviceable after this reservation;
//  3. if it does, give the token back at once (hold slot or ring tail), so
//     the lane keeps its place in the rotation while it is being served, as
//     LMOVE ring ring LEFT RIGHT keeps it on Valkey; if not, it has left the
//     ring in the same CAS that emptied it or brought it to its ceiling;
//  4. pop the n oldest jobs, lease them, release the structure.
//
// A claimer that draws a lane whose structure another claimer is still
// popping waits a moment; if it is still busy (that claimer was
// descheduled), it puts the token back at the ring's tail, the lane is owed
// that turn, and draws again. Owed turns are repaid at the lane's next draw
// from the ring (at most kMaxRepaidTurns a draw), never at once: an
// immediate repayment through the hold slot drew both consumers of a
// two-consumer run onto the same busy lane and fed back into runs of
// thousands of claims of one lane.
// now_us: the segment clock, read once by the caller.
std::size_t claim_some(Segment& s, Lease* out, std::size_t room, std::uint32_t lease_ms, std::uint64_t now_us) noexcept {
  const std::uint64_t now = now_us / 1000;
  maybe_sweep(s, now);
  // seq_cst: pairs with resume_all's seq_cst store and notify ([S5]).
  if (s.h->queue_paused.load(std::memory_order_seq_cst)) return 0;
  const std::uint64_t deadline = now + lease_ms;
  std::size_t got = 0;
  int busy_skips = 0;
  while (got < room) {
    RingToken tok = take_token(s);
    if (tok.lane == kNoLane) break;
    FAIRLANE_FAILPOINT("claim.token_taken");
    LaneRecord& l = s.lanes[tok.lane];
    std::uint64_t w = l.word.load(std::memory_order_acquire);
    std::uint64_t n = 0;
    bool keep = false, busy = false;
    int spins = 0;
    for (;;) {
      if (!LaneWord::serviceable(w)) {
        // Paused, empty or at its ceiling since it was ringed: the token
        // leaves the ring here (pause and limit remove it lazily).
        if (l.word.compare_exchange_weak(w, w & ~LaneWord::kRinged, std::memory_order_acq_rel, std::memory_order_acquire)) break;
        continue;
      }
      if (w & LaneWord::kBusy) {
        // Its server is popping (a few hundred ns) or was descheduled while
        // popping: spin a little, then yield the CPU a few times so that a
        // descheduled server on an oversubscribed machine can finish, then
        // give up the turn (a stopped server must not stop this claimer).
        if (++spins <= kBusySpins + kBusyYields) {
          if (spins <= kBusySpins) cpu_relax();
          else sched_yield();
          w = l.word.load(std::memory_order_acquire);
          continue;
        }
        busy = true;
        break;
      }
      n = std::min<std::uint64_t>({tok.turn, LaneWord::pending(w), LaneWord::headroom(w), room - got, kMaxStepJobs});
      std::uint64_t nw = LaneWord::with_pending(w, LaneWord::pending(w) - n);
      nw = LaneWord::with_active(nw, LaneWord::active(w) + n) | LaneWord::kBusy;
      keep = LaneWord::serviceable(nw & ~LaneWord::kBusy);
      if (!keep) nw &= ~LaneWord::kRinged;
      // [A4] acq_rel: reserves n jobs and the lane structure; pairs with the
      // release of the enqueuers' [R4] (their intake pushes are visible) and
      // with the previous server's [R7].
      if (l.word.compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_acquire)) break;
      n = 0;
    }
    if (busy) {
      // One turn is owed and comes back at the lane's next draw from the
      // ring, a full rotation later (repaying at once, through the hold
      // slot, drew every consumer onto the same busy lane again; owing the
      // whole remaining turn let skips compound). The token goes to the
      // ring's tail, without a wake: a parked consumer would only draw this
      // busy lane again and spin.
      l.owed.fetch_add(1, std::memory_order_relaxed);
      put_token(s, tok.lane, 0, false);
      if (++busy_skips >= kMaxBusySkips) break;
      continue;
    }
    if (n == 0) continue;  // token dropped
    FAIRLANE_FAILPOINT("claim.reserved");
    // The token goes back before we pop, so the lane keeps its place; the
    // wake-up waits until the structure is free again.
    if (keep) {
      put_token(s, tok.lane, tok.turn - std::uint32_t(n), false);
      FAIRLANE_FAILPOINT("claim.token_returned");
    }

    const BrandedId group = lane_group(s, tok.lane);
    LaneOrder order(s, l);
    std::uint32_t slots[kMaxStepJobs];
    std::uint64_t taken = 0;
    for (; taken < n; ++taken) slots[taken] = order.pop();
    FAIRLANE_FAILPOINT("claim.popped");
    // [R7] release: our pops of the lane structure happen-before the next
    // server's [A4].
    l.word.fetch_and(~LaneWord::kBusy, std::memory_order_acq_rel);
    FAIRLANE_FAILPOINT("claim.released");
    if (keep) notify(s);
    std::uint64_t leased = 0;
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint32_t slot = slots[k];
      const std::uint64_t sw = s.words[slot].load(std::memory_order_relaxed);
      if (SlotWord::attempt(sw) >= SlotWord::kMaxAttempt) {
        // Its attempts (fencing tokens) are used up: a new lease would share
        // a token with an old one. Dead-letter it instead.
        s.words[slot].store(SlotWord::pack(SlotState::dead, SlotWord::gen(sw), SlotWord::attempt(sw), now),
                            std::memory_order_release);
        release_active(s, tok.lane);
        log_job(s, slot);
        relaxed_inc(s.counters().dead);
        continue;
      }
      const std::uint32_t attempt = SlotWord::attempt(sw) + 1;
      Lease& lease = out[got + leased];
      fill_lease(s, slot, group, attempt, deadline, now_us, lease);
      // Atomic (relaxed) store: a sweep may still be reading this slot's
      // holder from an earlier lease ([R6]'s acquire of the word it saw). That
      // stale read is harmless (its CAS on the old word fails) but must not be
      // a data race. Publication of the new value is still by [R6].
      __atomic_store_n(&s.slot(slot).holder, s.me_index + 1, __ATOMIC_RELAXED);
      record_wait(s, tok.lane, lease.waited_us);
      // [R6] release: the lease is published; pairs with the acquire loads
      // of complete/fail/extend and the sweeper.
      s.words[slot].store(SlotWord::pack(SlotState::leased, SlotWord::gen(sw), attempt, deadline), std::memory_order_release);
      FAIRLANE_FAILPOINT("claim.leased");
      log_job(s, slot);
      ++leased;
    }
    l.served.fetch_add(leased, std::memory_order_relaxed);
    got += leased;
  }
  if (got) {
    atomic_min(s.h->next_due, deadline);
    relaxed_inc(s.counters().claimed, got);
  }
  return got;
}

// Finds the live job `id` and, if it is leased under `attempt`, takes it
// into state `freeing` (owned by us). Returns the slot and its old word.
struct Owned {
  std::uint32_t slot = kNoSlot;
  std::uint64_t word = 0;
  AckStatus status = AckStatus::gone;
};

// `when`: the new deadline (extend), or 0 or SlotWord::kFailing (freeing).
Owned take_lease(Segment& s, const BrandedId& id, std::uint32_t attempt, bool to_freeing, std::uint64_t when) noexcept {
  Owned o;
  if (!id.well_formed() || id.kind() != std::string_view(s.h->job_kind, 3)) return o;
  const std::uint64_t sf = id.snowflake();
  const std::uint32_t slot = index_find(s, sf);
  if (slot == kNoSlot) return o;
  std::uint64_t w = s.words[slot].load(std::memory_order_acquire);
  for (;;) {
    if (s.slot(slot).snowflake.load(std::memory_order_acquire) != sf) return o;  // reused meanwhile
    if (SlotWord::state(w) != SlotState::leased || SlotWord::attempt(w) != attempt) {
      o.status = AckStatus::stale;
      return o;
    }
    const SlotState to = to_freeing ? SlotState::freeing : SlotState::leased;
    const std::uint64_t nw = SlotWord::pack(to, SlotWord::gen(w), attempt, when);
    // [A5] acq_rel: fences out the sweeper's [R5] and a rival ack.
    if (s.words[slot].compare_exchange_weak(w, nw, std::memory_order_acq_rel, std::memory_order_acquire)) {
      o.slot = slot;
      o.word = w;
      o.status = AckStatus::ok;
      return o;
    }
  }
}

void free_job(Segment& s, std::uint32_t slot, std::uint64_t w) noexcept {
  index_remove(s, s.slot(slot).snowflake.load(std::memory_order_relaxed), slot);
  FAIRLANE_FAILPOINT("free.unindexed");
  s.words[slot].store(SlotWord::pack(SlotState::free, SlotWord::gen(w), 0, 0), std::memory_order_release);
  FAIRLANE_FAILPOINT("free.freed");
  free_push(s, slot);
}

}  // namespace

// ---- setup -------------------------------------------------------------------

Queue::Queue(std::unique_ptr<detail::Segment> seg) noexcept : seg_(std::move(seg)) {}
Queue::Queue(Queue&&) noexcept = default;
Queue& Queue::operator=(Queue&&) noexcept = default;
Queue::~Queue() = default;

Result<Queue> Queue::create(std::string_view name, const QueueOptions& options) {
  auto s = create_segment(name, options);
  if (!s) return s.error();
  return Queue(std::move(s).value());
}

Result<Queue> Queue::open(std::string_view name, Attach attach) {
  auto s = open_segment(name, attach == Attach::observer);
  if (!s) return s.error();
  return Queue(std::move(s).value());
}

Result<Queue> Queue::open_or_create(std::string_view name, const QueueOptions& options) {
  // A creator publishes its header last; give one that is mid-creation up to
  // a second before reporting it.
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto c = create(name, options);
    if (c || c.error().code != Errc::already_exists) return c;
    auto o = open(name);
    if (o || (o.error().code != Errc::not_initialized && o.error().code != Errc::not_found)) return o;
    if (attempt == 99) return o;
    if (o.error().code == Errc::not_initialized) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Error{Errc::system, 0, "segment '" + std::string(name) + "' could be neither created nor opened"};
}

Status Queue::remove(std::string_view name) { return remove_segment(name); }

const std::string& Queue::name() const noexcept { return seg_->name; }

QueueConfig Queue::config() const {
  const Header& h = *seg_->h;
  QueueConfig c;
  c.jobs = h.job_capacity;
  c.lanes = h.lane_capacity - 1;
  c.payload_bytes = h.payload_bytes;
  c.job_kind = std::string(h.job_kind, 3);
  c.node = h.node;
  c.layout_version = h.layout_version;
  c.segment_bytes = h.segment_bytes;
  if (h.log_cells) {
    c.mirror = std::string(h.mirror_url, strnlen(h.mirror_url, kMirrorUrlBytes));
    c.durability = h.durability == 2 ? Durability::sync : Durability::async;
    c.on_full = h.on_full == 1 ? MirrorFull::drop : MirrorFull::refuse;
    c.mirror_log = h.log_cells;
    c.sync_timeout_ms = h.sync_timeout_ms;
  }
  c.recovery_ms = h.recovery_ms;
  return c;
}

std::uint64_t Queue::now_ms() const noexcept { return segment_now_ms(*seg_); }

void Queue::advance_clock(std::uint64_t ms) noexcept {
  seg_->h->clock_offset_ms.fetch_add(std::int64_t(ms), std::memory_order_relaxed);
  notify(*seg_, INT_MAX);  // parked consumers re-check what fell due
}

// ---- ids -----------------------------------------------------------------------

BrandedId Queue::mint() noexcept { return mint(std::string_view(seg_->h->job_kind, 3)); }

BrandedId Queue::mint(std::string_view kind) noexcept {
  if (!valid_kind(kind)) return {};
  const std::uint64_t wall = unix_ms();
  const std::uint64_t ms = wall > kEpochMs ? wall - kEpochMs : 0;
  const std::uint64_t floor = snowflake_of(ms, seg_->h->node, 0);
  std::uint64_t last = seg_->h->mint_last.load(std::memory_order_relaxed);
  std::uint64_t next;
  do {
    // A clock that steps back keeps minting from the logical clock.
    next = std::max(floor, last + 1);
    // Relaxed is enough: the CAS on this one word is the whole protocol.
  } while (!seg_->h->mint_last.compare_exchange_weak(last, next, std::memory_order_relaxed));
  return BrandedId::make(kind, next);
}

// ---- mirror ----------------------------------------------------------------------

namespace {

// The running mirror's process record, if its owner is attached.
const ProcRecord* mirror_proc(const Segment& s) noexcept {
  const std::uint32_t p = s.h->mirror.proc.load(std::memory_order_acquire);
  if (p == 0 || p > kMaxProcs) return nullptr;
  const ProcRecord& r = s.procs[p - 1];
  return (r.owner.load(std::memory_order_acquire) & (1ULL << 32)) ? &r : nullptr;
}

bool mirror_alive(const Segment& s) noexcept {
  const ProcRecord* r = mirror_proc(s);
  return r && process_alive(int(r->owner.load(std::memory_order_relaxed) & 0xFFFFFFFF), r->start_time);
}

// Before an admission writes anything: is there a mirror to take it?
std::optional<EnqueueStatus> mirror_admission_check(const Segment& s) noexcept {
  if (s.h->durability == 2 && !mirror_proc(s)) return EnqueueStatus::mirror_unavailable;
  if (s.h->on_full == 0 && !log_room_for_admission(s)) return EnqueueStatus::mirror_behind;
  return std::nullopt;
}

// After an admission: log it. Under sync durability, `wait_seq` is set to
// the record the enqueuer must see acknowledged (mirror_wait_acked, called
// once the operation is over: the wait must not hold the gate up).
EnqueueStatus mirror_admitted(Segment& s, std::uint32_t slot, std::uint64_t& wait_seq) noexcept {
  const std::uint64_t seq = log_append(s, LogKind::job, slot);
  if (s.h->durability != 2) return EnqueueStatus::enqueued;
  if (seq == kNotLogged) return EnqueueStatus::not_durable;  // it reaches Valkey with the resync
  wait_seq = seq;
  return EnqueueStatus::enqueued;
}

// Waits until Valkey has acknowledged record `seq` (the mirror moves
// `acked` past it), the sync timeout, or the mirror's death.
EnqueueStatus mirror_wait_acked(Segment& s, std::uint64_t seq) noexcept {
  MirrorShared& m = s.h->mirror;
  // Ring the mirror even if it is only between two short looks: we wait.
  m.bell.fetch_add(1, std::memory_order_release);
  futex_wake(&m.bell, 1);
  const std::uint64_t start = monotonic_us() / 1000, give_up = start + s.h->sync_timeout_ms;
  std::uint64_t next_liveness = start + 100;
  for (;;) {
    if (m.acked.load(std::memory_order_acquire) > seq) return EnqueueStatus::enqueued;
    const std::uint64_t now = monotonic_us() / 1000;
    if (now >= give_up) return EnqueueStatus::not_durable;
    if (now >= next_liveness) {
      // A mirror that died will not acknowledge: do not wait out the timeout.
      if (!mirror_alive(s)) return EnqueueStatus::not_durable;
      next_liveness = now + 100;
    }
    const std::uint32_t bell = m.ack_bell.load(std::memory_order_acquire);
    // [S10] seq_cst: announce, then look again; pairs with the mirror's
    // seq_cst store of `acked` and its load of ack_waiters.
    m.ack_waiters.fetch_add(1, std::memory_order_seq_cst);
    if (m.acked.load(std::memory_order_seq_cst) <= seq)
      futex_wait(&m.ack_bell, bell, std::min<std::uint64_t>(give_up - now, 50));
    m.ack_waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace

std::string_view to_string(Durability d) noexcept { return d == Durability::sync ? "sync" : "async"; }
std::string_view to_string(MirrorFull f) noexcept { return f == MirrorFull::drop ? "drop" : "refuse"; }

MirrorStatus Queue::mirror_status() const {
  const Segment& s = *seg_;
  MirrorStatus st;
  if (!s.log) return st;
  const Header& h = *s.h;
  const MirrorShared& m = h.mirror;
  st.configured = true;
  st.url = std::string(h.mirror_url, strnlen(h.mirror_url, kMirrorUrlBytes));
  st.durability = h.durability == 2 ? Durability::sync : Durability::async;
  st.on_full = h.on_full == 1 ? MirrorFull::drop : MirrorFull::refuse;
  st.log_cells = h.log_cells;
  if (const ProcRecord* r = mirror_proc(s)) {
    st.pid = int(r->owner.load(std::memory_order_relaxed) & 0xFFFFFFFF);
    st.running = mirror_alive(s);
  }
  switch (MirrorState(m.state.load(std::memory_order_acquire))) {
    case MirrorState::ok: st.state = "ok"; break;
    case MirrorState::dropped: st.state = "dropped"; break;
    case MirrorState::resync: st.state = "resync"; break;
    default: st.state = "unknown"; break;
  }
  st.acked = m.acked.load(std::memory_order_acquire);
  st.logged = std::max(st.acked, m.head.load(std::memory_order_acquire));
  st.lag = st.logged - st.acked;
  st.acked_unix_ms = m.acked_unix_ms.load(std::memory_order_relaxed);
  st.lost = m.lost.load(std::memory_order_relaxed);
  st.resyncs = m.resyncs.load(std::memory_order_relaxed);
  st.dropped_unix_ms = m.dropped_unix_ms.load(std::memory_order_relaxed);
  if (st.lag > 0) {
    // The oldest unacknowledged record: in flight at the mirror, or still in
    // the log at `acked` (read before it is given back, so re-check its stamp).
    std::uint64_t oldest = m.inflight_ms.load(std::memory_order_acquire);
    if (oldest == 0) {
      const LogCell& c = s.log[st.acked & s.log_mask];
      const std::uint64_t ms = c.ms.load(std::memory_order_relaxed);
      if (c.stamp.load(std::memory_order_acquire) == st.acked + 1) oldest = ms;
    }
    const std::uint64_t now = segment_now_ms(s);
    st.lag_ms = oldest && now > oldest ? now - oldest : 0;
  }
  return st;
}

RecoveryInfo Queue::recovery() const {
  const RecoveryStats& r = seg_->h->recovery;
  RecoveryInfo out;
  out.runs = r.runs.load(std::memory_order_relaxed);
  out.jobs = r.jobs.load(std::memory_order_relaxed);
  out.last_unix_ms = r.last_unix_ms.load(std::memory_order_relaxed);
  out.last_jobs = r.last_jobs.load(std::memory_order_relaxed);
  out.last_pid = int(r.last_pid.load(std::memory_order_relaxed));
  out.last_us = r.last_us.load(std::memory_order_relaxed);
  out.repairs = r.repairs.load(std::memory_order_relaxed);
  out.repairs_abandoned = r.repairs_abandoned.load(std::memory_order_relaxed);
  out.repair_unix_ms = r.repair_unix_ms.load(std::memory_order_relaxed);
  out.repair_pid = int(r.repair_pid.load(std::memory_order_relaxed));
  out.repair_us = r.repair_us.load(std::memory_order_relaxed);
  out.repair_worst_us = r.repair_worst_us.load(std::memory_order_relaxed);
  out.repair_violations = r.repair_violations.load(std::memory_order_relaxed);
  out.repair_blocker_pid = int(r.repair_blocker_pid.load(std::memory_order_relaxed));
  return out;
}

// ---- enqueue ---------------------------------------------------------------------
//
// 1. pop a free slot; mark it admitting; write id, lane, payload
// 2. commit the id in the index (or find it a duplicate and give the slot back)
// 3. mark it pending (or scheduled) and push it on its lane's intake
// 4. count it in the lane word, ringing the lane if that made it serviceable

namespace {

// How a job is admitted: enqueue admits it pending (or scheduled, delayed)
// at attempt 0; import_job puts back a job restored from elsewhere.
struct Admission {
  SlotState state = SlotState::pending;
  std::uint32_t attempt = 0;
  std::uint64_t when_ms = 0;     // scheduled: due time; dead: when it died
  std::string_view error = {};
  bool restoring = false;        // import_job: no mirror checks, no waiting on Valkey
};

// No wait for Valkey's acknowledgement (see mirror_admitted).
constexpr std::uint64_t kNoWait = ~0ULL;

EnqueueStatus admit(Segment& s, const BrandedId& group, const BrandedId& job, std::string_view payload,
                    const Admission& a, std::uint64_t& wait_seq) noexcept {
  if (!job.well_formed()) return EnqueueStatus::invalid_id;
  if (group.valid() && !group.well_formed()) return EnqueueStatus::invalid_group;
  if (job.kind() != std::string_view(s.h->job_kind, 3)) return EnqueueStatus::kind_mismatch;
  if (payload.size() > s.payload_bytes) return EnqueueStatus::payload_too_large;
  const std::uint64_t sf = job.snowflake();
  if (index_find(s, sf) != kNoSlot) {
    relaxed_inc(s.counters().duplicates);
    return EnqueueStatus::duplicate;
  }
  if (s.log && !a.restoring) {
    if (auto refused = mirror_admission_check(s)) return *refused;
  }
  std::uint32_t lane = s.h->default_lane;
  if (group.valid()) {
    lane = lane_lookup(s, group, true);
    if (lane == kLanesFull) return EnqueueStatus::lanes_full;
  }
  const std::uint32_t slot = free_pop(s);
  if (slot == kNoSlot) return EnqueueStatus::full;
  FAIRLANE_FAILPOINT("enqueue.slot_taken");

  SlotRecord& r = s.slot(slot);
  const std::uint32_t gen = SlotWord::gen(s.words[slot].load(std::memory_order_relaxed)) + 1;
  s.words[slot].store(SlotWord::pack(SlotState::admitting, gen, 0, 0), std::memory_order_relaxed);
  r.lane = lane;
  r.payload_len = std::uint32_t(payload.size());
  r.error_len = std::uint32_t(std::min<std::size_t>(a.error.size(), kErrorBytes));
  if (r.error_len) std::memcpy(r.error, a.error.data(), r.error_len);
  // Atomic (relaxed): a sweep may still read the previous lease's holder of
  // this slot (see claim_some); its CAS on the old slot word then fails.
  __atomic_store_n(&r.holder, 0U, __ATOMIC_RELAXED);
  if (!payload.empty()) std::memcpy(s.payload(slot), payload.data(), payload.size());
  r.snowflake.store(sf, std::memory_order_release);
  FAIRLANE_FAILPOINT("enqueue.admitting");

  const IndexInsert ins = index_insert(s, sf, slot);
  if (ins != IndexInsert::inserted) {
    s.words[slot].store(SlotWord::pack(SlotState::free, gen, 0, 0), std::memory_order_relaxed);
    free_push(s, slot);
    if (ins == IndexInsert::full) return EnqueueStatus::full;
    relaxed_inc(s.counters().duplicates);
    return EnqueueStatus::duplicate;
  }
  FAIRLANE_FAILPOINT("enqueue.indexed");

  const std::uint64_t now_us = segment_now_us(s);
  if (a.state == SlotState::scheduled || a.state == SlotState::dead) {
    // [R8] release: the job is complete before a sweeper (or a requeue) sees it.
    s.words[slot].store(SlotWord::pack(a.state, gen, a.attempt, a.when_ms), std::memory_order_release);
    if (a.state == SlotState::scheduled) {
      atomic_min(s.h->next_due, a.when_ms);
      notify(s, INT_MAX);  // parked consumers shorten their sleep to the new due time
    }
  } else {
    r.ready_us = now_us;
    s.words[slot].store(SlotWord::pack(SlotState::pending, gen, a.attempt, 0), std::memory_order_release);
    FAIRLANE_FAILPOINT("enqueue.pending");
    enter_lane(s, slot, false);
  }
  relaxed_inc(s.counters().enqueued);
  if (a.restoring) {
    // Later mints stay above every restored id.
    std::uint64_t last = s.h->mint_last.load(std::memory_order_relaxed);
    while (last < sf && !s.h->mint_last.compare_exchange_weak(last, sf, std::memory_order_relaxed)) {
    }
    log_job(s, slot);
    return EnqueueStatus::enqueued;
  }
  if (s.log) return mirror_admitted(s, slot, wait_seq);
  return EnqueueStatus::enqueued;
}

}  // namespace

EnqueueStatus Queue::enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                             EnqueueOptions options) noexcept {
  Admission a;
  if (options.delay_ms > 0) {
    a.state = SlotState::scheduled;
    a.when_ms = segment_now_ms(*seg_) + options.delay_ms;
  }
  std::uint64_t wait_seq = kNoWait;
  EnqueueStatus st;
  {
    OpGuard op(*seg_);
    st = admit(*seg_, group, job, payload, a, wait_seq);
  }
  return wait_seq == kNoWait ? st : mirror_wait_acked(*seg_, wait_seq);
}

EnqueueStatus Queue::import_job(const JobInfo& job, std::string_view payload) noexcept {
  Admission a;
  a.restoring = true;
  a.attempt = std::min<std::uint32_t>(job.attempt, SlotWord::kMaxAttempt);
  a.error = job.last_error;
  switch (job.state) {
    case JobState::pending:
    case JobState::leased: a.state = SlotState::pending; break;  // its holder is gone
    case JobState::scheduled: a.state = SlotState::scheduled; a.when_ms = job.when_ms; break;
    case JobState::dead: a.state = SlotState::dead; a.when_ms = job.when_ms; break;
  }
  std::uint64_t no_wait = kNoWait;  // restoring: never waits
  OpGuard op(*seg_);
  return admit(*seg_, job.group, job.id, payload, a, no_wait);
}

// ---- claim ---------------------------------------------------------------------------

// Claims and waiters are the ones who look for processes that died inside
// an operation (gate.hpp), before they start their own.
ClaimStatus Queue::try_claim(Lease& out, std::uint32_t lease_ms) noexcept {
  const std::uint64_t now_us = segment_now_us(*seg_);
  recover_dead_operations(*seg_, now_us / 1000);
  OpGuard op(*seg_);
  if (claim_some(*seg_, &out, 1, lease_ms, now_us) == 1) return ClaimStatus::claimed;
  return seg_->h->queue_paused.load(std::memory_order_acquire) ? ClaimStatus::paused : ClaimStatus::empty;
}

bool Queue::claim(Lease& out, std::uint32_t lease_ms) noexcept { return try_claim(out, lease_ms) == ClaimStatus::claimed; }

std::size_t Queue::claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept {
  return claim_batch(out, lease_ms);  // interim: the new core serves one lane
}

std::size_t Queue::enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < items.size() && i < statuses.size(); ++i) {
    statuses[i] = enqueue(items[i].group, items[i].job, items[i].payload, items[i].options);
    n += statuses[i] == EnqueueStatus::enqueued;
  }
  return n;
}

std::size_t Queue::complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < leases.size() && i < statuses.size(); ++i) {
    statuses[i] = complete(leases[i].id, leases[i].token);
    n += statuses[i] == AckStatus::ok;
  }
  return n;
}

AckStatus Queue::release(const BrandedId& job, Token token) noexcept {
  // Interim: the new core returns the job without spending an attempt.
  FailOptions o;
  o.delay_ms = 0;
  o.max_attempts = SlotWord::kMaxAttempt;
  switch (fail(job, token, o)) {
    case FailStatus::retrying: case FailStatus::dead: return AckStatus::ok;
    case FailStatus::stale: return AckStatus::stale;
    case FailStatus::gone: return AckStatus::gone;
    case FailStatus::corrupt: return AckStatus::corrupt;
  }
  return AckStatus::gone;
}

std::size_t Queue::release_all() noexcept {
  Segment& s = *seg_;
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const std::uint64_t w = s.words[i].load(std::memory_order_acquire);
    if (SlotWord::state(w) != SlotState::leased) continue;
    if (__atomic_load_n(&s.slot(i).holder, __ATOMIC_RELAXED) != s.me_index + 1) continue;
    const BrandedId id = BrandedId::make(std::string_view(s.h->job_kind, 3), s.slot(i).snowflake.load(std::memory_order_relaxed));
    n += release(id, Token(SlotWord::attempt(w))) == AckStatus::ok;
  }
  return n;
}

MoveStatus Queue::reassign(const BrandedId&, const BrandedId&) noexcept { return MoveStatus::gone; }

CorruptionInfo Queue::corruption() const { return {}; }

std::size_t Queue::claim_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept {
  if (out.empty()) return 0;
  const std::uint64_t now_us = segment_now_us(*seg_);
  recover_dead_operations(*seg_, now_us / 1000);
  OpGuard op(*seg_);
  return claim_some(*seg_, out.data(), out.size(), lease_ms, now_us);
}

bool Queue::claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) noexcept {
  Segment& s = *seg_;
  const std::uint64_t give_up = monotonic_us() / 1000 + std::uint64_t(std::max<std::int64_t>(0, timeout.count()));
  for (;;) {
    if (claim(out, lease_ms)) return true;
    const std::uint64_t real_now = monotonic_us() / 1000;
    if (real_now >= give_up) return false;
    const std::uint32_t seq = s.h->wake_seq.load(std::memory_order_acquire);
    // [S5] seq_cst: announce before the last look; pairs with notify().
    s.h->waiters.fetch_add(1, std::memory_order_seq_cst);
    if (claim(out, lease_ms)) {
      s.h->waiters.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
    // Sleep until woken, the timeout, or the next due time (so parked
    // consumers drive lease expiry and promotion: no daemon needed).
    std::uint64_t sleep_ms = std::min<std::uint64_t>(give_up - real_now, s.recovery_ms);
    // seq_cst: pairs with a delayed enqueue's atomic_min + notify ([S5]).
    const std::uint64_t due = s.h->next_due.load(std::memory_order_seq_cst);
    if (due != kNever) {
      const std::uint64_t seg_now = segment_now_ms(s);
      sleep_ms = std::min(sleep_ms, due > seg_now ? due - seg_now : 1);
    }
    futex_wait(&s.h->wake_seq, seq, std::max<std::uint64_t>(sleep_ms, 1));
    s.h->waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

// ---- acknowledgements ------------------------------------------------------------------

AckStatus Queue::complete(const BrandedId& job, Token token) noexcept {
  Segment& s = *seg_;
  if (token.value == 0 || token.value > SlotWord::kMaxAttempt) return AckStatus::stale;
  const std::uint32_t attempt = std::uint32_t(token.value);
  OpGuard op(s);
  Owned o = take_lease(s, job, attempt, true, 0);
  if (o.status != AckStatus::ok) return o.status;
  FAIRLANE_FAILPOINT("complete.freeing");
  const std::uint32_t lane = s.slot(o.slot).lane;
  free_job(s, o.slot, o.word);
  FAIRLANE_FAILPOINT("complete.freed");
  release_active(s, lane);
  log_job(s, o.slot);
  relaxed_inc(s.counters().completed);
  return AckStatus::ok;
}

FailStatus Queue::fail(const BrandedId& job, Token token, const FailOptions& options) noexcept {
  Segment& s = *seg_;
  if (token.value == 0 || token.value > SlotWord::kMaxAttempt) return FailStatus::stale;
  const std::uint32_t attempt = std::uint32_t(token.value);
  OpGuard op(s);
  Owned o = take_lease(s, job, attempt, true, SlotWord::kFailing);
  if (o.status == AckStatus::gone) return FailStatus::gone;
  if (o.status == AckStatus::stale) return FailStatus::stale;
  FAIRLANE_FAILPOINT("fail.taken");
  SlotRecord& r = s.slot(o.slot);
  // Read before the slot is handed on: once its new state is published it may
  // be promoted, claimed, completed and reused by another job.
  const std::uint32_t lane = r.lane;
  const std::size_t n = std::min<std::size_t>(options.error.size(), kErrorBytes);
  if (n) std::memcpy(r.error, options.error.data(), n);
  r.error_len = std::uint32_t(n);
  const std::uint32_t gen = SlotWord::gen(o.word);
  const std::uint64_t now_us = segment_now_us(s);
  const std::uint32_t max_attempts = std::clamp<std::uint32_t>(options.max_attempts.value_or(1), 1, SlotWord::kMaxAttempt);
  if (attempt >= max_attempts) {
    // Dead-lettered: it keeps its slot and its id (a duplicate is still refused).
    s.words[o.slot].store(SlotWord::pack(SlotState::dead, gen, attempt, now_us / 1000), std::memory_order_release);
    FAIRLANE_FAILPOINT("fail.dead");
    release_active(s, lane);
    log_job(s, o.slot);
    relaxed_inc(s.counters().dead);
    return FailStatus::dead;
  }
  const std::uint64_t delay_ms = options.delay_ms.value_or(0);
  if (delay_ms == 0) {
    r.ready_us = now_us;
    s.words[o.slot].store(SlotWord::pack(SlotState::pending, gen, attempt, 0), std::memory_order_release);
    FAIRLANE_FAILPOINT("fail.pending");
    enter_lane(s, o.slot, true);
  } else {
    const std::uint64_t due = now_us / 1000 + delay_ms;
    s.words[o.slot].store(SlotWord::pack(SlotState::scheduled, gen, attempt, due), std::memory_order_release);
    FAIRLANE_FAILPOINT("fail.scheduled");
    release_active(s, lane);
    atomic_min(s.h->next_due, due);
    notify(s, INT_MAX);
  }
  log_job(s, o.slot);
  relaxed_inc(s.counters().retried);
  return FailStatus::retrying;
}

AckStatus Queue::extend(const BrandedId& job, Token token, std::uint32_t lease_ms) noexcept {
  Segment& s = *seg_;
  if (token.value == 0 || token.value > SlotWord::kMaxAttempt) return AckStatus::stale;
  const std::uint32_t attempt = std::uint32_t(token.value);
  OpGuard op(s);
  const std::uint64_t deadline = segment_now_ms(s) + lease_ms;
  Owned o = take_lease(s, job, attempt, false, deadline);
  if (o.status == AckStatus::ok) {
    atomic_min(s.h->next_due, deadline);
    log_job(s, o.slot);
  }
  return o.status;
}

// ---- lane controls -------------------------------------------------------------------------

namespace {
constexpr std::uint32_t kBadGroup = ~0U - 2;
std::uint32_t lane_for(Segment& s, const BrandedId& group, bool create) noexcept {
  if (!group.valid()) return s.h->default_lane;
  if (!group.well_formed()) return kBadGroup;
  return lane_lookup(s, group, create);
}
// The status of a lane lookup that did not find a lane.
std::optional<LaneStatus> lane_error(std::uint32_t lane) noexcept {
  if (lane == kBadGroup) return LaneStatus::invalid_group;
  if (lane == kLanesFull) return LaneStatus::lanes_full;
  return std::nullopt;
}
}  // namespace

LaneStatus Queue::pause(const BrandedId& group) noexcept {
  OpGuard op(*seg_);
  const std::uint32_t lane = lane_for(*seg_, group, true);
  if (auto e = lane_error(lane)) return *e;
  // The token, if any, leaves the ring at the next claim that draws it.
  seg_->lanes[lane].word.fetch_or(LaneWord::kPaused, std::memory_order_acq_rel);
  log_lane(*seg_, lane);
  return LaneStatus::ok;
}

LaneStatus Queue::resume(const BrandedId& group) noexcept {
  OpGuard op(*seg_);
  const std::uint32_t lane = lane_for(*seg_, group, true);
  if (auto e = lane_error(lane)) return *e;
  update_lane(*seg_, lane, [](std::uint64_t w) { return w & ~LaneWord::kPaused; });
  log_lane(*seg_, lane);
  return LaneStatus::ok;
}

void Queue::pause_all() noexcept {
  seg_->h->queue_paused.store(1, std::memory_order_release);
  if (seg_->log) log_append(*seg_, LogKind::queue, 0);
}

void Queue::resume_all() noexcept {
  seg_->h->queue_paused.store(0, std::memory_order_seq_cst);
  notify(*seg_, INT_MAX);
  if (seg_->log) log_append(*seg_, LogKind::queue, 0);
}

LaneStatus Queue::clear_limit(const BrandedId& group) noexcept {
  OpGuard op(*seg_);
  const std::uint32_t lane = lane_for(*seg_, group, true);
  if (auto e = lane_error(lane)) return *e;
  update_lane(*seg_, lane, [](std::uint64_t w) { return LaneWord::with_limit(w, 0); });
  log_lane(*seg_, lane);
  return LaneStatus::ok;
}

LaneStatus Queue::set_limit(const BrandedId& group, std::uint32_t limit) noexcept {
  if (limit == 0 || limit > kMaxLimit) return LaneStatus::invalid_argument;
  OpGuard op(*seg_);
  const std::uint32_t lane = lane_for(*seg_, group, true);
  if (auto e = lane_error(lane)) return *e;
  // At or below the active count the lane stops being serviceable: its
  // token leaves the ring at the next claim that draws it, and no claim can
  // take it past the ceiling meanwhile (the ceiling is in the same word).
  update_lane(*seg_, lane, [limit](std::uint64_t w) { return LaneWord::with_limit(w, limit); });
  log_lane(*seg_, lane);
  return LaneStatus::ok;
}

LaneStatus Queue::set_weight(const BrandedId& group, std::uint32_t weight) noexcept {
  if (weight < 1 || weight > kMaxWeight) return LaneStatus::invalid_argument;
  OpGuard op(*seg_);
  const std::uint32_t lane = lane_for(*seg_, group, true);
  if (auto e = lane_error(lane)) return *e;
  seg_->lanes[lane].weight.store(weight, std::memory_order_relaxed);
  log_lane(*seg_, lane);
  return LaneStatus::ok;
}

std::uint64_t Queue::depth(const BrandedId& group) const noexcept {
  const std::uint32_t lane = lane_for(*seg_, group, false);
  if (lane == kLaneAbsent || lane == kBadGroup) return 0;
  return LaneWord::pending(seg_->lanes[lane].word.load(std::memory_order_acquire));
}

namespace {

// Takes the lane structure (the busy bit) for a drain, or returns false if
// a claimer holds it.
bool own_lane(LaneRecord& l) noexcept {
  std::uint64_t w = l.word.load(std::memory_order_acquire);
  while (!(w & LaneWord::kBusy)) {
    if (l.word.compare_exchange_weak(w, w | LaneWord::kBusy, std::memory_order_acq_rel, std::memory_order_acquire))
      return true;
  }
  return false;
}

// Removes every pending job of a lane whose structure the caller owns, then
// lets the structure go.
std::uint64_t drain_owned(Segment& s, LaneRecord& l) noexcept {
  FAIRLANE_FAILPOINT("drain.owned");
  LaneOrder order(s, l);
  std::uint64_t removed = 0;
  for (;;) {
    std::uint64_t w = l.word.load(std::memory_order_acquire);
    if (LaneWord::pending(w) == 0) break;
    if (!l.word.compare_exchange_weak(w, LaneWord::with_pending(w, LaneWord::pending(w) - 1), std::memory_order_acq_rel))
      continue;
    FAIRLANE_FAILPOINT("drain.counted");
    const std::uint32_t slot = order.pop();
    const std::uint64_t sw = s.words[slot].load(std::memory_order_relaxed);
    s.words[slot].store(SlotWord::pack(SlotState::freeing, SlotWord::gen(sw), 0, 0), std::memory_order_relaxed);
    free_job(s, slot, sw);
    log_job(s, slot);
    ++removed;
  }
  // Let go; the token (if any) is still where it was and is dropped lazily.
  l.word.fetch_and(~LaneWord::kBusy, std::memory_order_acq_rel);
  relaxed_inc(s.counters().drained, removed);
  return removed;
}

}  // namespace

std::uint64_t Queue::drain(const BrandedId& group) noexcept {
  Segment& s = *seg_;
  const std::uint32_t lane = lane_for(s, group, false);
  if (lane == kLaneAbsent || lane == kBadGroup) return 0;
  LaneRecord& l = s.lanes[lane];
  // Own the lane structure. A claimer holds it for a few hundred ns; one
  // that died holding it leaves it busy until the gate's repair. So the
  // waiting is done outside the operation (a repair must not wait for us)
  // and drives that recovery meanwhile.
  for (;;) {
    {
      OpGuard op(s);
      if (own_lane(l)) return drain_owned(s, l);
    }
    sched_yield();
    recover_dead_operations(s, segment_now_ms(s));
  }
}

std::uint64_t Queue::tick() noexcept {
  Segment& s = *seg_;
  recover_dead_operations(s, segment_now_ms(s));
  OpGuard op(s);
  return sweep(s, segment_now_ms(s), true);
}

// ---- snapshot ----------------------------------------------------------------------------

Snapshot Queue::snapshot() const {
  Segment& s = *seg_;
  Snapshot snap;
  snap.paused = s.h->queue_paused.load(std::memory_order_acquire) != 0;
  snap.now_ms = segment_now_ms(s);
  snap.jobs_capacity = s.jobs;

  auto serviceable = [&](std::uint32_t lane) {
    return LaneWord::serviceable(s.lanes[lane].word.load(std::memory_order_acquire));
  };
  std::uint64_t hw = s.h->hold.load(std::memory_order_acquire);
  if (hw && serviceable(std::uint32_t(hw) - 1)) snap.ring.push_back(lane_group(s, std::uint32_t(hw) - 1));
  for (std::uint32_t lane : ring_contents(s))
    if (serviceable(lane)) snap.ring.push_back(lane_group(s, lane));

  for (std::uint32_t i = 0; i <= s.lane_mask; ++i) {
    if (!lane_in_use(s, i)) continue;
    const LaneRecord& l = s.lanes[i];
    const std::uint64_t w = l.word.load(std::memory_order_acquire);
    LaneInfo li;
    li.group = lane_group(s, i);
    li.depth = LaneWord::pending(w);
    li.active = LaneWord::active(w);
    li.limit = std::uint32_t(LaneWord::limit(w));
    li.weight = weight_of(l);
    li.paused = (w & LaneWord::kPaused) != 0;
    li.ringed = (w & LaneWord::kRinged) != 0 && LaneWord::serviceable(w);
    li.served = l.served.load(std::memory_order_relaxed);
    for (std::uint32_t b = 0; b < kWaitBuckets; ++b) li.wait.buckets[b] = s.waits[i].b[b].load(std::memory_order_relaxed);
    snap.lanes.push_back(li);
  }

  auto add = [](Counters& c, const CounterBlock& b) {
    c.enqueued += b.enqueued.load(std::memory_order_relaxed);
    c.duplicates += b.duplicates.load(std::memory_order_relaxed);
    c.claimed += b.claimed.load(std::memory_order_relaxed);
    c.completed += b.completed.load(std::memory_order_relaxed);
    c.retried += b.retried.load(std::memory_order_relaxed);
    c.dead += b.dead.load(std::memory_order_relaxed);
    c.expired += b.expired.load(std::memory_order_relaxed);
    c.promoted += b.promoted.load(std::memory_order_relaxed);
    c.drained += b.drained.load(std::memory_order_relaxed);
  };
  add(snap.counters, s.h->retired);
  for (std::uint32_t i = 0; i < kMaxProcs; ++i) add(snap.counters, s.procs[i].counters);

  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    switch (SlotWord::state(s.words[i].load(std::memory_order_relaxed))) {
      case SlotState::pending: ++snap.pending; break;
      case SlotState::leased: ++snap.leased; break;
      case SlotState::scheduled: ++snap.scheduled; break;
      case SlotState::dead: ++snap.dead; break;
      default: break;
    }
  }
  return snap;
}

// ---- histograms ---------------------------------------------------------------------------

static_assert(WaitHistogram::kBuckets == kWaitBuckets);

std::uint64_t WaitHistogram::count() const noexcept {
  std::uint64_t n = 0;
  for (std::uint64_t b : buckets) n += b;
  return n;
}

std::uint64_t WaitHistogram::quantile_us(double q) const noexcept {
  const std::uint64_t n = count();
  if (n == 0) return 0;
  const double target = std::clamp(q, 0.0, 1.0) * double(n);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += buckets[i];
    if (double(seen) >= target && buckets[i]) return 2ULL << i;  // the bucket's upper bound
  }
  return 2ULL << (kBuckets - 1);
}

// ---- jobs and dead letters ---------------------------------------------------------------

std::string_view to_string(JobState s) noexcept {
  switch (s) {
    case JobState::pending: return "pending";
    case JobState::leased: return "leased";
    case JobState::scheduled: return "scheduled";
    case JobState::dead: return "dead";
  }
  return "unknown";
}

namespace {

std::optional<JobState> visible_state(SlotState st) noexcept {
  switch (st) {
    case SlotState::pending: return JobState::pending;
    case SlotState::leased: return JobState::leased;
    case SlotState::scheduled: return JobState::scheduled;
    case SlotState::dead: return JobState::dead;
    default: return std::nullopt;  // free, or mid-transition
  }
}

// Reads one slot into a JobInfo. The fields are read without owning the
// slot, then the word is read again: a slot that changed meanwhile is
// reported as not found rather than torn.
std::optional<JobInfo> read_job(const Segment& s, std::uint32_t slot) {
  const std::uint64_t w = s.words[slot].load(std::memory_order_acquire);
  const auto st = visible_state(SlotWord::state(w));
  if (!st) return std::nullopt;
  const SlotRecord& r = s.slot(slot);
  JobInfo j;
  const std::uint64_t sf = r.snowflake.load(std::memory_order_acquire);
  j.id = BrandedId::make(std::string_view(s.h->job_kind, 3), sf);
  const std::uint32_t lane = r.lane;
  j.group = lane <= s.lane_mask ? lane_group(s, lane) : BrandedId{};
  j.state = *st;
  j.attempt = SlotWord::attempt(w);
  if (*st == JobState::leased) j.token = Token(j.attempt);
  j.when_ms = SlotWord::when(w);
  j.minted_unix_ms = snowflake_ms(sf) + kEpochMs;
  j.payload_bytes = std::min(r.payload_len, s.payload_bytes);
  j.last_error.assign(r.error, std::min<std::uint32_t>(r.error_len, kErrorBytes));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.words[slot].load(std::memory_order_relaxed) != w) return std::nullopt;
  return j;
}

}  // namespace

std::optional<JobInfo> Queue::job(const BrandedId& id, bool with_payload) const {
  const Segment& s = *seg_;
  if (!id.well_formed() || id.kind() != std::string_view(s.h->job_kind, 3)) return std::nullopt;
  const std::uint32_t slot = index_find(s, id.snowflake());
  if (slot == kNoSlot) return std::nullopt;
  auto j = read_job(s, slot);
  if (j && j->id != id) return std::nullopt;
  if (j && with_payload) {
    j->payload.assign(reinterpret_cast<const char*>(s.payload(slot)), std::min(s.slot(slot).payload_len, s.payload_bytes));
  }
  return j;
}

std::vector<JobInfo> Queue::jobs(const JobFilter& filter) const {
  Segment& s = *seg_;
  std::vector<JobInfo> out;
  std::uint32_t lane = kLaneAbsent;
  if (filter.group) {
    lane = lane_for(s, *filter.group, false);
    if (lane == kLaneAbsent || lane == kBadGroup) return out;
  }
  for (std::uint32_t i = 0; i < s.jobs && out.size() < filter.limit; ++i) {
    const auto st = visible_state(SlotWord::state(s.words[i].load(std::memory_order_relaxed)));
    if (!st || (filter.state && *filter.state != *st)) continue;
    if (filter.group && s.slot(i).lane != lane) continue;
    if (auto j = read_job(s, i); j && (!filter.state || j->state == *filter.state)) out.push_back(std::move(*j));
  }
  return out;
}

namespace {

// dead -> pending, back in its lane at its mint position.
bool revive(Segment& s, std::uint32_t slot, std::uint64_t w) noexcept {
  if (SlotWord::state(w) != SlotState::dead) return false;
  const std::uint64_t pending = SlotWord::pack(SlotState::pending, SlotWord::gen(w), SlotWord::attempt(w), 0);
  if (!s.words[slot].compare_exchange_strong(w, pending, std::memory_order_acq_rel)) return false;
  s.slot(slot).ready_us = segment_now_us(s);
  enter_lane(s, slot, false);
  log_job(s, slot);
  return true;
}

}  // namespace

AckStatus Queue::requeue_dead(const BrandedId& id) noexcept {
  Segment& s = *seg_;
  OpGuard op(s);
  if (!id.well_formed() || id.kind() != std::string_view(s.h->job_kind, 3)) return AckStatus::gone;
  const std::uint32_t slot = index_find(s, id.snowflake());
  if (slot == kNoSlot) return AckStatus::gone;
  return revive(s, slot, s.words[slot].load(std::memory_order_acquire)) ? AckStatus::ok : AckStatus::stale;
}

std::uint64_t Queue::requeue_all_dead() noexcept {
  Segment& s = *seg_;
  OpGuard op(s);
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) n += revive(s, i, s.words[i].load(std::memory_order_acquire));
  return n;
}

std::uint64_t Queue::purge_dead() noexcept {
  Segment& s = *seg_;
  OpGuard op(s);
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    std::uint64_t w = s.words[i].load(std::memory_order_acquire);
    if (SlotWord::state(w) != SlotState::dead) continue;
    const std::uint64_t owned = SlotWord::pack(SlotState::freeing, SlotWord::gen(w), SlotWord::attempt(w), 0);
    if (!s.words[i].compare_exchange_strong(w, owned, std::memory_order_acq_rel)) continue;
    free_job(s, i, w);
    log_job(s, i);
    ++n;
  }
  return n;
}

std::vector<ProcessInfo> Queue::processes() const {
  const Segment& s = *seg_;
  std::vector<ProcessInfo> out;
  std::vector<std::uint64_t> leases(kMaxProcs, 0);
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    if (SlotWord::state(s.words[i].load(std::memory_order_relaxed)) != SlotState::leased) continue;
    const std::uint32_t h = __atomic_load_n(&s.slot(i).holder, __ATOMIC_RELAXED);  // claims write it meanwhile
    if (h >= 1 && h <= kMaxProcs) ++leases[h - 1];
  }
  for (std::uint32_t i = 0; i < kMaxProcs; ++i) {
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if (owner == 0 || (owner & (1ULL << 34))) continue;  // free, or an observer (a tool that only looks)
    ProcessInfo p;
    p.pid = int(owner & 0xFFFFFFFF);
    p.state = process_state(p.pid, s.procs[i].start_time);
    p.alive = p.state != ProcessState::dead;
    p.name = process_name(p.pid);
    p.attached_unix_ms = s.procs[i].attached_unix_ms;
    p.leases = leases[i];
    out.push_back(p);
  }
  return out;
}

}  // namespace fairlane
