// The sweep: expiry of leases, promotion of due jobs, the leases of dead
// holders, and the leftovers of processes that died inside an operation;
// a chunk of the slot table at a time, by whichever claim or waiter finds
// one due. No daemon, and no claim does more than one chunk.
//
// Passes: a pass over the slot table starts when a deadline or due time
// may have passed (now >= next_due) or recovery_ms / 2 after the last one
// started (for holders that die, and for leftovers). While a pass is under
// way every claim takes one chunk of it (kChunk slots: the cursor's CAS
// hands out chunks, so claims sweep different parts). next_due is reset
// when a pass starts and lowered by every chunk's earliest time and by
// every new deadline, so it is exact again when the pass ends.
#include <algorithm>
#include <climits>
#include <vector>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"

namespace fairlane {
using namespace detail;

namespace detail {

// acks.cpp
enum class Take { ok, stale, gone, corrupt };
Take release_lease(Segment& s, std::uint64_t sf, Token token, RelOp op, std::uint32_t& slot_out, Word128& sw_out,
                   std::uint32_t& lane_out) noexcept;
void finish_release(Segment& s, std::uint32_t slot, Word128 sw, std::uint32_t lane) noexcept;
void link_returned(Segment& s, std::uint32_t slot) noexcept;

namespace {

constexpr std::uint32_t kChunk = 65536;

struct Cursor {
  static std::uint32_t pass(std::uint64_t c) noexcept { return std::uint32_t(c >> 32); }
  static std::uint32_t pos(std::uint64_t c) noexcept { return std::uint32_t(c); }
  static std::uint64_t make(std::uint32_t pass, std::uint32_t pos) noexcept { return (std::uint64_t(pass) << 32) | pos; }
};

void atomic_min(std::atomic<std::uint64_t>& word, std::uint64_t v) noexcept {
  std::uint64_t cur = word.load(std::memory_order_relaxed);
  while (v < cur && !word.compare_exchange_weak(cur, v, std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

struct SweepStats {
  std::uint64_t moved = 0, leases = 0, promoted = 0, finished = 0;
  int whose = -1;  // the one dead pid every returned lease belonged to; 0: none or several
  std::uint64_t earliest = kNever;
};

// A lease whose deadline passed or whose holder is dead goes back to its lane.
bool expire(Segment& s, std::uint32_t slot, const Word128& w) noexcept {
  const std::uint64_t sf = s.slot(slot).sf.load(std::memory_order_acquire);
  std::uint32_t got = 0, lane = 0;
  Word128 sw;
  if (release_lease(s, sf, make_token(s, slot, SlotWord::ctr(w)), RelOp::back, got, sw, lane) != Take::ok) return false;
  FAIRLANE_FAILPOINT("sweep.expired");
  finish_release(s, slot, sw, lane);
  link_returned(s, slot);
  count(s, &CounterBlock::expired);
  return true;
}

// The thread intents of dead processes: a job popped but not yet leased goes
// back to its lane; a job being linked by an enqueuer that died is left to
// its lane if it made it there, freed if not.
std::uint64_t settle_dead_threads(Segment& s, std::uint64_t now) noexcept {
  std::uint64_t n = 0;
  bool any_dead = false;
  bool dead[kMaxProcs] = {};
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if (!(owner & kOwnerAttached)) continue;
    if (holder_dead(s, Holder::make(i, s.procs[i].incarnation.load(std::memory_order_relaxed)), now)) {
      dead[i] = true;
      any_dead = true;
    }
  }
  if (!any_dead) return 0;
  for (std::uint32_t i = 0; i < s.thread_count; ++i) {
    ThreadRecord& t = s.threads[i];
    const std::uint64_t owner = t.owner.load(std::memory_order_acquire);
    const std::uint32_t p1 = std::uint32_t(owner & 0xFFFF);
    if (owner == 0 || p1 == 0 || p1 > s.proc_count || !dead[p1 - 1]) continue;
    n += settle_intent(s, t.intent, t.intent_lane);
  }
  for (std::uint32_t i = 0; i < s.proc_count; ++i)
    if (dead[i]) n += settle_intent(s, s.procs[i].intent, s.procs[i].intent_lane);
  if (n) {
    RecoveryStats& r = s.h->recovery;
    r.finished.fetch_add(n, std::memory_order_relaxed);
    r.finished_unix_ms.store(unix_ms(), std::memory_order_relaxed);
  }
  return n;
}

// One slot, as a sweep sees it.
void sweep_slot(Segment& s, std::uint32_t i, std::uint64_t now, bool judge, SweepStats& st) noexcept {
  Word128 w = slot_load(s, i);
  switch (SlotWord::state(w)) {
    case SlotState::leased: {
      int dead = 0;
      const bool due = SlotWord::when(w) <= now;
      if (judge || due) dead = holder_dead(s, SlotWord::holder(w), now);
      if (!due && !dead) {
        st.earliest = std::min(st.earliest, SlotWord::when(w));
        return;
      }
      if (expire(s, i, w)) {
        ++st.moved;
        ++st.leases;
        st.whose = (st.whose == -1 || st.whose == dead) ? dead : 0;
      }
      return;
    }
    case SlotState::scheduled: {
      if (SlotWord::when(w) > now) {
        st.earliest = std::min(st.earliest, SlotWord::when(w));
        return;
      }
      if (move_to_lane(s, i, w, MoveFrom::scheduled, SlotWord::attempt(w)) == Moved::ok) {
        FAIRLANE_FAILPOINT("sweep.promoted");
        ++st.moved;
        ++st.promoted;
        count(s, &CounterBlock::promoted);
      }
      return;
    }
    case SlotState::returning: {
      if (SlotWord::holder(w) == 0) {
        link_returned(s, i);  // its releaser moved on without linking it (stopped or dead)
        ++st.finished;
      } else if (judge && holder_dead(s, SlotWord::holder(w), now)) {
        // The mover died: linked already (then it is pending in all but
        // name), or not (then anyone may link it).
        const std::uint32_t lane = s.slot(i).lane.load(std::memory_order_relaxed);
        if (lane < s.lane_count && strays_contains(s, lane, i)) {
          if (slot_cas(s, i, w, SlotWord::make(SlotState::pending, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0)))
            s.lanes[lane].refs.fetch_sub(1, std::memory_order_seq_cst);
        } else if (slot_cas(s, i, w, SlotWord::make(SlotState::returning, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0))) {
          link_returned(s, i);
        }
        ++st.finished;
      }
      return;
    }
    default:
      return;
  }
}

void record_recovery(Segment& s, const SweepStats& st, std::uint64_t took_us) noexcept {
  if (!st.leases) return;
  RecoveryStats& r = s.h->recovery;
  r.runs.fetch_add(1, std::memory_order_relaxed);
  r.jobs.fetch_add(st.leases, std::memory_order_relaxed);
  r.last_jobs.store(st.leases, std::memory_order_relaxed);
  r.last_pid.store(std::uint64_t(std::max(st.whose, 0)), std::memory_order_relaxed);
  r.last_us.store(took_us, std::memory_order_relaxed);
  r.last_unix_ms.store(unix_ms(), std::memory_order_relaxed);
}

// Lane records: free those whose creator died mid-creation; reclaim lanes
// found idle on two visits in a row with nothing changed between (so a busy
// tenant keeps its lane between its jobs).
void sweep_lanes(Segment& s, std::uint32_t from, std::uint32_t to, std::uint64_t now, bool judge) noexcept {
  for (std::uint32_t lane = std::max<std::uint32_t>(from, 1); lane < to && lane < s.lane_count; ++lane) {
    LaneRecord& l = s.lanes[lane];
    const Word128 w = lane_load(s, lane);
    if (LaneWord::state(w) == LaneState::creating) {
      if (judge && holder_dead(s, std::uint32_t(l.creator.load(std::memory_order_relaxed)), now)) {
        Word128 cur = w;
        if (cas128(l.word, cur, LaneWord::bumped(Word128{}, w))) s.h->lanes_live.fetch_sub(1, std::memory_order_relaxed);
      }
      continue;
    }
    if (LaneWord::state(w) != LaneState::live) continue;
    const Word128 base = lane_base(s, lane, w);
    if (!lane_idle(s, lane, base)) continue;
    const std::uint64_t seen = l.idle_seen.load(std::memory_order_relaxed);
    const std::uint64_t mark = (now << 11) | (LaneWord::version(w) & 1023) | 1024;
    if ((seen & 2047) == ((LaneWord::version(w) & 1023) | 1024) && (seen >> 11) + s.recovery_ms <= now) {
      if (lane_try_reclaim(s, lane)) continue;
    }
    if ((seen & 2047) != ((LaneWord::version(w) & 1023) | 1024)) l.idle_seen.store(mark, std::memory_order_relaxed);
  }
}

// Does the chunk [from, to) of pass `pass`.
void sweep_chunk(Segment& s, std::uint32_t from, std::uint32_t to, std::uint64_t now, SweepStats& st) noexcept {
  // Holders of unexpired leases are judged once per recovery_ms / 2
  // (ProcRecord::seen caches the verdicts): judging costs system calls.
  const bool judge = true;
  for (std::uint32_t i = from; i < to; ++i) sweep_slot(s, i, now, judge, st);
  // Lane records in proportion: the whole lane table once per pass.
  const std::uint64_t lanes = s.lane_count;
  const std::uint32_t lf = std::uint32_t(lanes * from / std::max<std::uint32_t>(s.jobs, 1));
  const std::uint32_t lt = to >= s.jobs ? s.lane_count : std::uint32_t(lanes * to / std::max<std::uint32_t>(s.jobs, 1));
  sweep_lanes(s, lf, lt, now, judge);
}

}  // namespace

void lower_next_due(Segment& s, std::uint64_t when) noexcept { atomic_min(s.h->sweep.next_due, when); }

bool settle_intent(Segment& s, std::atomic<std::uint64_t>& intent, std::atomic<std::uint64_t>& intent_lane) noexcept {
  const std::uint64_t in = intent.load(std::memory_order_acquire);
  if ((in & 15) != std::uint64_t(Intent::popping)) return false;
  const std::uint32_t slot1 = std::uint32_t(bits(in, 4, 26));
  const std::uint32_t lane = std::uint32_t(intent_lane.load(std::memory_order_relaxed));
  if (slot1 == 0 || slot1 > s.jobs || lane >= s.lane_count) {
    intent.store(0, std::memory_order_release);
    return false;
  }
  const std::uint32_t slot = slot1 - 1;
  const Word128 w = slot_load(s, slot);
  // Popped but never leased: pending still, with the ctr it had, yet out of
  // its lane. (If it is still in its lane, the pop never happened.)
  bool acted = false;
  if (SlotWord::state(w) == SlotState::pending && (SlotWord::ctr(w) & ((1ULL << 34) - 1)) == (in >> 30)) {
    const Word128 lw = lane_load(s, lane);
    const bool linked = LaneWord::head(lw) == slot1 || strays_contains(s, lane, slot) ||
                        Link::mark(s.slot(slot).next.load(std::memory_order_acquire)) == 0 &&
                            LaneWord::head(lw) != 0 && false;
    if (!linked) {
      // Ours now (its popper is dead): count it out of active as a lease
      // coming back, then link it.
      s.lanes[lane].refs.fetch_add(1, std::memory_order_seq_cst);
      Word128 cur = w;
      if (slot_cas(s, slot, cur, SlotWord::make(SlotState::returning, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0))) {
        lane_update(s, lane, [](Word128 b) -> std::optional<Word128> {
          const std::uint64_t a = LaneWord::active(b);
          return LaneWord::with_active(b, a ? a - 1 : 0);
        });
        link_returned(s, slot);
        acted = true;
      } else {
        s.lanes[lane].refs.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
  }
  intent.store(0, std::memory_order_release);
  return acted;
}

void maybe_sweep(Segment& s, std::uint64_t now) noexcept {
  SweepShared& sw = s.h->sweep;
  std::uint64_t c = sw.cursor.load(std::memory_order_acquire);
  const std::uint32_t jobs = s.jobs;
  const bool in_pass = Cursor::pos(c) < jobs && Cursor::pos(c) != 0;
  if (!in_pass) {
    const std::uint64_t started = sw.pass_started_ms.load(std::memory_order_relaxed);
    const bool due = now >= sw.next_due.load(std::memory_order_relaxed) || now >= started + s.recovery_ms / 2 ||
                     started > now + kMaxRecoveryMs;  // a scribbled start time must not stop passes
    if (!due) return;
    // Start a pass: elect one starter by the cursor's CAS.
    const std::uint64_t next = Cursor::make(Cursor::pass(c) + 1, std::min(kChunk, jobs));
    if (!sw.cursor.compare_exchange_strong(c, next, std::memory_order_acq_rel)) return;
    sw.pass_started_ms.store(now, std::memory_order_relaxed);
    // From here new deadlines lower next_due again; this pass's chunks lower
    // it by what they see.
    sw.next_due.store(kNever, std::memory_order_release);
    settle_dead_threads(s, now);
    SweepStats st;
    const std::uint64_t t0 = monotonic_us();
    sweep_chunk(s, 0, std::min(kChunk, jobs), now, st);
    lower_next_due(s, st.earliest);
    record_recovery(s, st, monotonic_us() - t0);
    if (kChunk >= jobs) {
      std::uint64_t done = next;
      sw.cursor.compare_exchange_strong(done, Cursor::make(Cursor::pass(next), jobs), std::memory_order_acq_rel);
    }
    return;
  }
  // A pass under way: take the next chunk.
  const std::uint32_t from = Cursor::pos(c);
  const std::uint32_t to = std::min<std::uint64_t>(std::uint64_t(from) + kChunk, jobs);
  if (!sw.cursor.compare_exchange_strong(c, Cursor::make(Cursor::pass(c), to), std::memory_order_acq_rel)) return;
  SweepStats st;
  const std::uint64_t t0 = monotonic_us();
  sweep_chunk(s, from, to, now, st);
  lower_next_due(s, st.earliest);
  record_recovery(s, st, monotonic_us() - t0);
}

std::uint64_t sweep_all(Segment& s, std::uint64_t now) noexcept {
  SweepStats st;
  const std::uint64_t t0 = monotonic_us();
  settle_dead_threads(s, now);
  s.h->sweep.next_due.store(kNever, std::memory_order_release);
  sweep_chunk(s, 0, s.jobs, now, st);
  lower_next_due(s, st.earliest);
  record_recovery(s, st, monotonic_us() - t0);
  return st.moved;
}

}  // namespace detail

std::uint64_t Queue::tick() noexcept {
  Segment& s = *seg_;
  if (!s.me) return 0;
  return sweep_all(s, segment_now_ms(s));
}

}  // namespace fairlane
