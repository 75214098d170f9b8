// Lanes: directory lookups, creation and reclaim (lanes.hpp has the
// protocol), the settling of a lane word's pending release, wake-ups.
#include "lanes.hpp"

#include "lane_order.hpp"
#include "slots.hpp"

#include <climits>
#include <utility>

#include "failpoint.hpp"
#include "futex.hpp"

namespace fairlane::detail {

void retire_waits(Segment& s, std::uint32_t lane) noexcept {
  for (std::uint32_t i = 0; i < kWaitBuckets; ++i) {
    std::atomic<std::uint64_t>& b = s.waits[lane].b[i];
    if (const std::uint64_t v = b.load(std::memory_order_relaxed)) {
      s.h->retired_waits.b[i].fetch_add(v, std::memory_order_relaxed);
      b.store(0, std::memory_order_relaxed);
    }
  }
}

namespace {

constexpr std::uint64_t kIncMask = (1ULL << 25) - 1;  // the incarnation bits a directory entry keeps

struct DirProbe {
  std::uint64_t b1, b2;
};

DirProbe dir_probe(const Segment& s, GroupKey g) noexcept {
  const std::uint64_t h = group_hash(g.kind, g.sf, s.seed);
  DirProbe p{h & s.dir_mask, mix64(h) & s.dir_mask};
  if (p.b2 == p.b1) p.b2 = p.b1 ^ 1;  // dir_buckets >= 2
  return p;
}

Word128& dir_entry(const Segment& s, const DirProbe& p, unsigned k) noexcept {
  return s.dir[k < kDirWays ? p.b1 : p.b2].e[k % kDirWays];
}

bool entry_is(const Word128& e, GroupKey g) noexcept {
  return DirEntry::state(e) != DirState::free && DirEntry::sf(e) == (g.sf & ((1ULL << 63) - 1)) &&
         DirEntry::kind(e) == g.kind;
}

std::uint64_t record_inc(const LaneRecord& l) noexcept { return l.key_kind.load(std::memory_order_acquire) >> 16; }

// Does directory entry `e` describe lane record `lane` as it is now?
bool record_matches(const Segment& s, const Word128& e, std::uint32_t& lane) noexcept {
  const std::uint32_t l1 = DirEntry::lane1(e);
  if (l1 == 0 || l1 > s.lane_count || l1 - 1 == kDefaultLane) return false;
  lane = l1 - 1;
  const LaneRecord& r = s.lanes[lane];
  // A record being created carries its new incarnation in its word from the
  // CAS that took it: an entry of the record's previous life never matches
  // it, even before its creator has written the new key.
  const Word128 w = lane_load(s, lane);
  if (LaneWord::state(w) == LaneState::creating && LaneWord::head(w) != DirEntry::inc(e)) return false;
  const std::uint64_t kk = r.key_kind.load(std::memory_order_acquire);
  return r.key_sf.load(std::memory_order_acquire) == DirEntry::sf(e) && std::uint32_t(kk & 0x7FFF) == DirEntry::kind(e) &&
         ((kk >> 16) & kIncMask) == DirEntry::inc(e);
}

// Makes a lane record that is creating live (whoever sees it committed in
// the directory). Its run is empty: nothing to ring.
void make_live(Segment& s, std::uint32_t lane) noexcept {
  Word128 w = lane_load(s, lane);
  while (LaneWord::state(w) == LaneState::creating) {
    // A live word of its own: the creating word's fields (incarnation,
    // creator) mean nothing in a live one.
    if (cas128(s.lanes[lane].word, w, LaneWord::bumped(LaneWord::with_state(Word128{}, LaneState::live), w))) return;
  }
}

void release_record(Segment& s, std::uint32_t lane) noexcept {
  Word128 w = lane_load(s, lane);
  while (LaneWord::state(w) == LaneState::creating) {
    if (cas128(s.lanes[lane].word, w, LaneWord::bumped(Word128{}, w))) {
      // A record free again (a creator that lost to a rival, or found no
      // directory room): a producer parked for a lane can have it. It was
      // a free record nobody announced and no sweep looked at, and such a
      // producer slept its slice out (found in review).
      wake_lanes(s, kNoLane);
      return;
    }
  }
}

// Takes lane record `lane`, read free as `w`, for group g (state creating,
// its key and a new incarnation written). False: the word moved (another
// creator took the record, or it was given back and taken again).
bool take_free_record(Segment& s, GroupKey g, std::uint32_t lane, Word128 w) noexcept {
  LaneRecord& r = s.lanes[lane];
  // The creating word names the record's new incarnation (head) and its
  // creator (tail) from the CAS on: a stale directory entry cannot take
  // the record for its old group, and a sweep judges the real creator.
  const std::uint64_t inc = (record_inc(r) + 1) & ((1ULL << 48) - 1);
  Word128 nw = LaneWord::with_tail(LaneWord::with_head(LaneWord::with_state(Word128{}, LaneState::creating),
                                                       std::uint32_t(inc & kIncMask), 0),
                                   my_holder(s));
  if (!cas128(r.word, w, LaneWord::bumped(nw, w))) return false;
  FAIRLANE_FAILPOINT("lane.creating");
  // Ours alone until the directory names it: plain (relaxed) stores,
  // published by the CAS that commits the directory entry.
  r.key_sf.store(g.sf, std::memory_order_relaxed);
  r.key_kind.store(g.kind | (inc << 16), std::memory_order_release);
  r.settings.store(Settings::make(0, false, 1, r.settings.load(std::memory_order_relaxed)), std::memory_order_relaxed);
  r.turn.store(0, std::memory_order_relaxed);
  r.husks.store(HuskCount::make(inc), std::memory_order_relaxed);
  r.served.store(0, std::memory_order_relaxed);
  r.idle_seen.store(0, std::memory_order_relaxed);
  r.creator.store(my_holder(s), std::memory_order_relaxed);
  for (auto& head : r.strays) head.store(strays_head(inc, false, 0), std::memory_order_relaxed);
  // The previous life's waits go to the queue-wide count.
  retire_waits(s, lane);
  return true;
}

// A record for a new lane of group g, taken (state creating, its key and a
// new incarnation written), in one pass over the records from a rotating
// start: the first free record, or, once kFreeLook records have been looked
// at with none free, the first idle lane met, given back and taken. So a
// table of idle lanes costs a creation kFreeLook looks, not two passes over
// every record, and a free record near the start is still preferred to
// reclaiming a tenant's lane between its jobs.
// kNoLane: no record was free and no lane idle when looked at, or (`raced`)
// one was and another thread took it or put work in it first (then a
// second pass may find another).
std::uint32_t take_record(Segment& s, GroupKey g, bool& raced) noexcept {
  raced = false;
  const std::uint32_t n = s.lane_count;
  if (n < 2) return kNoLane;
  std::uint32_t idle = kNoLane;
  Word128 idle_w{};  // the idle lane's word as the pass read it
  const auto reclaim_idle = [&]() noexcept {
    const std::uint32_t lane = std::exchange(idle, kNoLane);
    if (lane_try_reclaim(s, lane)) {
      const Word128 w = lane_load(s, lane);
      if (LaneWord::state(w) == LaneState::free && take_free_record(s, g, lane, w)) return lane;
      raced = true;  // another creator took the record
      return kNoLane;
    }
    // Not given back. Raced only if its word moved (someone's step: work put
    // in, a reclaim, a pending step applied). A word that did not move is no
    // one's progress: a lane that looks idle but whose strays head names a
    // node (a mover stopped between its link and its flag, a husk's taker
    // between its take and its unlink) would otherwise make every pass
    // raced, and a creation cost lane_count passes (found in review).
    if (!(lane_load(s, lane) == idle_w)) raced = true;
    return kNoLane;
  };
  // The cursor only spreads the starting points (relaxed: a hint).
  const std::uint64_t start = s.h->lane_cursor.fetch_add(1, std::memory_order_relaxed);
  for (std::uint32_t k = 0; k < n - 1; ++k) {
    const std::uint32_t lane = 1 + std::uint32_t((start + k) % (n - 1));
    const Word128 w = lane_load(s, lane);
    if (LaneWord::state(w) == LaneState::free) {
      if (take_free_record(s, g, lane, w)) return lane;
      raced = true;
      continue;
    }
    if (idle == kNoLane && may_be_idle(s, lane, w)) {
      idle = lane;
      idle_w = w;
    }
    if (idle != kNoLane && k + 1 >= kFreeLook)
      if (const std::uint32_t got = reclaim_idle(); got != kNoLane) return got;
  }
  return idle != kNoLane ? reclaim_idle() : kNoLane;
}

// May directory entry `e` be overwritten by a new entry? Free, or stale:
// its record moved on (reclaimed, perhaps re-created) or is free.
bool entry_usable(const Segment& s, const Word128& e) noexcept {
  std::uint32_t other = kNoLane;
  return DirEntry::state(e) == DirState::free || !record_matches(s, e, other) ||
         LaneWord::state(lane_load(s, other)) == LaneState::free;
}

// Writes `mine` into a usable entry of the group's two buckets, the emptier
// bucket first (ties: the first bucket). Filling the first bucket before
// looking at the second (first fit) lets buckets reach four entries far
// more often than placing by load does, and a group whose two buckets are
// both full has nowhere to go: with every lane live (on-demand reclaim
// keeps them so) that refused about one new group in 10^7
// (ChurnMultiProc). Lookups and the creation protocol look at both
// buckets whichever holds the entry. Returns the entry written, or null.
Word128* place_entry(Segment& s, const DirProbe& p, const Word128& mine) noexcept {
  unsigned room[2] = {0, 0};
  for (unsigned k = 0; k < 2 * kDirWays; ++k) room[k / kDirWays] += entry_usable(s, load128(dir_entry(s, p, k)));
  if (room[0] + room[1] == 0) return nullptr;
  const unsigned first = room[1] > room[0] ? 1 : 0;
  for (unsigned i = 0; i < 2; ++i) {
    const unsigned b = first ^ i;
    for (unsigned way = 0; way < kDirWays; ++way) {
      Word128& slot = dir_entry(s, p, b * kDirWays + way);
      Word128 e = load128(slot);
      if (entry_usable(s, e) && cas128(slot, e, mine)) return &slot;
    }
  }
  return nullptr;
}

// Both buckets of group g hold entries of records in use: gives back one
// idle lane of another group among them (lane_try_reclaim, the same reclaim
// as for a creator that found no free record), which clears its entry.
// False if none is idle.
bool reclaim_idle_in_buckets(Segment& s, const DirProbe& p, GroupKey g) noexcept {
  for (unsigned k = 0; k < 2 * kDirWays; ++k) {
    const Word128 e = load128(dir_entry(s, p, k));
    std::uint32_t other = kNoLane;
    if (DirEntry::state(e) != DirState::live || entry_is(e, g) || !record_matches(s, e, other)) continue;
    if (lane_try_reclaim(s, other)) return true;
  }
  return false;
}

}  // namespace

bool sleep_may_be_under_way(const std::atomic<std::uint64_t>& until) noexcept {
  // [S5] seq_cst: pairs with a parking thread's raise before its last look.
  // The coarse clock (the last tick: up to a few ms behind, never ahead of
  // the precise one; 5 ns a read here against 23): it can only say "may be
  // under way" a few ms longer, never "over" too soon.
  return monotonic_ms_coarse() <= until.load(std::memory_order_seq_cst);
}

void wake_lanes(Segment& s, std::uint32_t lane) noexcept {
  if (s.h->lane_waiters.load(std::memory_order_seq_cst) == 0) return;
  // The lane first, the clock after: with a producer parked for a lane,
  // every free of a lane that keeps work comes here, and the lane word is
  // cheaper than a clock read.
  if (lane != kNoLane) {
    // What a reclaim will ask (lane_idle, strays_head_clear), of the word
    // as the freeing or parking CAS left it: its step (a complete, a park)
    // may not be applied yet, and that step adds no work. Anything else is
    // no lane to give.
    if (lane == kDefaultLane || lane >= s.lane_count) return;
    const Word128 w = lane_load(s, lane);
    const RelOp op = LaneWord::relop(w);
    const bool stepped = LaneWord::rel(w) == 0 || op == RelOp::complete || op == RelOp::park;
    if (!stepped || !may_be_idle(s, lane, w) || !strays_head_clear(s, lane)) return;
  }
  if (!sleep_may_be_under_way(s.h->lane_park_until)) return;
  s.h->lane_seq.fetch_add(1, std::memory_order_acq_rel);
  // One: a lane given back is room for one group. A woken producer that
  // leaves without having taken it (it found its group's lane made by
  // another, or no slot) passes the wake on (enqueue_wait).
  futex_wake(&s.h->lane_seq, 1);
}

void wake_room(Segment& s, bool force, std::uint32_t lane) noexcept {
  if (lane != kNoLane) wake_lanes(s, lane);
  // Past every producer's sleep a wake would be a system call for nobody.
  if (!sleep_may_be_under_way(s.h->room_park_until)) return;
  // Every free counts (a producer between its look and its sleep then
  // finds the word moved and looks again, and one asleep finds it moved at
  // the end of its step: enqueue_wait); a wake is made once the count
  // reaches room_want, which a parking producer sets room_batch frees past
  // the word it read. Each wake moves room_want on by as many: one system
  // call per room_batch frees, not one per free, while producers keep
  // parking (docs/design.md, "Blocking enqueues").
  const std::uint32_t batch = room_batch(s);
  const std::uint32_t seq = s.h->room_seq.fetch_add(1, std::memory_order_acq_rel) + 1;
  // Not yet only while the count is 1 to batch - 1 short of room_want (none
  // with batches of 1). Any other distance is reached, or a value no park
  // sets (a scribble, a store stale by 2^31 frees): that wakes, and sets
  // the word again. (A scribble held as "not yet" left a small table's
  // producers asleep for recovery_ms / 2 with slots free: found in review.)
  if (!force && std::uint32_t(s.h->room_want.load(std::memory_order_relaxed) - seq) - 1 < batch - 1) return;
  s.h->room_want.store(seq + batch, std::memory_order_relaxed);
  // As many producers as slots were freed since the last wake, not all: a
  // woken producer looks before it heeds its own timeout, and one that
  // leaves without a slot wakes another (enqueue_wait). Waking every
  // sleeper at every wake made 11 futex sleeps a job with 16 producers at
  // an 8-slot queue, against 1 (found in review).
  futex_wake(&s.h->room_seq, int(batch));
}

void notify(Segment& s, int count) noexcept {
  if (s.h->waiters.load(std::memory_order_seq_cst) == 0) return;
  // Past every sleep's end a wake would be a system call for nobody.
  if (!sleep_may_be_under_way(s)) return;
  s.h->wake_seq.fetch_add(1, std::memory_order_release);
  futex_wake(&s.h->wake_seq, count);
}

Word128 lane_base_step(Segment& s, std::uint32_t lane, const Word128& w) noexcept {
  const std::uint32_t rel1 = LaneWord::rel(w);
  if (rel1 == 0) return w;
  const RelOp op = LaneWord::relop(w);
  Word128 base = LaneWord::with_rel(w, 0, RelOp::complete);
  if (rel1 > s.jobs) {
    report_corrupt(s, CorruptWhat::lane_word);  // nothing to apply; fsck names it
    return base;
  }
  const std::uint32_t slot = rel1 - 1;
  SlotRecord& r = s.slot(slot);
  // Only while the word still names the step: `w` may be an old reading (or
  // a torn one) whose step was applied long ago, its slot since reused and
  // perhaps in the step's pre-state again. The slot is read first, then the
  // word: if the word still names the step, the slot's reading is of the
  // state the step is about (nothing moves the slot out of it but the step),
  // and the CAS from that reading fails if it moved on since.
  auto pending = [&] { return lane_load(s, lane) == w; };
  if (op == RelOp::take) {
    strays_mark(s, slot, lane, &w);
    return base;
  }
  // lane_base (inline) returned already if the slot has moved past the
  // step's pre-state (the common case: its author applied it right after
  // its CAS); the loop below reads the slot again and decides.
  Word128 sw = slot_load(s, slot);
  // Lock-free: a failed CAS means the slot moved (an extend, or another
  // applier); look at it again.
  for (;;) {
    const SlotState st = SlotWord::state(sw);
    const std::uint32_t a = SlotWord::attempt(sw);
    const std::uint64_t ctr = SlotWord::ctr(sw);
    Word128 to;
    switch (op) {
      case RelOp::complete:
      case RelOp::park:
      case RelOp::back:
      case RelOp::release: {
        // A lease of this lane: while the word names it nothing else can
        // move it (every way out of a lease is a step of this word). `back`
        // also returns a job a dead claimer took out of the lane and never
        // leased (pending, out of its order: recovery checked that first).
        const bool taken_back = op == RelOp::back && st == SlotState::pending;
        if ((st != SlotState::leased && !taken_back) || r.lane.load(std::memory_order_relaxed) != lane) return base;
        // The step's author marked the slot for this lease (or take) before
        // its CAS (exit_mark, park_plan: its ctr's low bits). A word that
        // came back bit for bit under an author stopped for hundreds of CASes
        // of this lane (the version has 9 bits) names a step of an older
        // lease: it is not applied to the slot's new lease.
        const Word128 t{r.run_seq.load(std::memory_order_acquire), 0};
        if (SlotWord::attempt(t) != (ctr & 0xFFFF)) return base;
        const SlotState ts = SlotWord::state(t);
        if (op == RelOp::complete) {
          to = SlotWord::make(SlotState::free, 0, 0, ctr, 0);
        } else if (op == RelOp::park) {
          if (ts == SlotState::scheduled || ts == SlotState::dead) {
            to = SlotWord::make(ts, a, SlotWord::when(t), ctr, 0);
          } else {
            // Another exit of the same lease marked the slot after the plan
            // (the holder's own, or the expiry of a holder judged dead; a
            // deadline's expiry keeps a plan it finds, take_lease): back to
            // its lane, for anyone to link, rather than a plan half
            // overwritten.
            if (ts != SlotState::free) report_corrupt(s, CorruptWhat::slot_record);
            to = SlotWord::make(SlotState::returning, a, 0, ctr + 1, 0);
          }
        } else {
          // Returning, for anyone to link (holder 0). `back` moves the ctr
          // on: recovery decides a dead claimer's take by the word it read
          // (return_taken), and a second settler of the same dead intent,
          // slower than the first, must find the job moved on once it has
          // been put back and relinked, not the same word again.
          const std::uint32_t keep = op == RelOp::release && a ? a - 1 : a;
          to = SlotWord::make(SlotState::returning, keep, 0, op == RelOp::back ? ctr + 1 : ctr, 0);
        }
        break;
      }
      case RelOp::linked:
        if (st != SlotState::returning) return base;
        to = SlotWord::make(SlotState::pending, a, 0, ctr, 0);
        break;
      case RelOp::drop: {
        if (st != SlotState::pending || r.lane.load(std::memory_order_relaxed) != lane) return base;
        // The successor the reassign wrote (in the pending word) before naming the slot.
        const std::uint64_t next = SlotWord::when(sw);
        to = SlotWord::make(SlotState::aborted, 0, next, ctr, 0);
        if (!pending()) return base;
        // A husk of the run from here: counted before the CAS, while it is
        // linked (husk_count), and given back if the CAS fails.
        const bool in_run = r.level.load(std::memory_order_relaxed) == 0;
        const std::uint64_t inc = lane_incarnation(s, lane);
        if (in_run) husk_count(s, lane, inc);
        if (slot_cas(s, slot, sw, to)) return base;
        if (in_run) husk_uncount(s, lane, inc);
        continue;
      }
      case RelOp::take:
        return base;
    }
    if (!pending()) return base;  // applied by someone else meanwhile
    // [R7] release (cas128): what the step's author wrote beside the slot
    // word (fail_to, the error) is visible with the slot's new state.
    if (slot_cas(s, slot, sw, to)) {
      if (SlotWord::state(to) == SlotState::free) {
        note_freed(s, slot, lane);
      } else if (op == RelOp::park && s.h->lane_waiters.load(std::memory_order_seq_cst) != 0) [[unlikely]] {
        wake_lanes(s, lane);  // the job left its lane for a delay or the dead letters: it may be empty now
      }
      FAIRLANE_FAILPOINT("lane.step_applied");
      return base;
    }
  }
}

BrandedId lane_group(const Segment& s, std::uint32_t lane) noexcept {
  if (lane >= s.lane_count) return {};
  const LaneRecord& r = s.lanes[lane];
  const std::uint32_t code = std::uint32_t(r.key_kind.load(std::memory_order_acquire) & 0x7FFF);
  std::uint64_t w0 = 0, w1 = 0;
  if (!group_words_of(code, r.key_sf.load(std::memory_order_acquire), w0, w1)) return {};
  return IdAccess::from_words(w0, w1);
}

LaneFind lane_find(Segment& s, GroupKey g, bool create, std::uint32_t& lane_out) noexcept {
  const DirProbe p = dir_probe(s, g);
  // Each round either finds the group, or moves some creation of it one
  // step on (commits the winner, kills a loser, frees a stale entry).
  for (int round = 0; round < 64; ++round) {
    std::uint32_t best_tentative = kNoLane;
    Word128 best_entry{};
    for (unsigned k = 0; k < 2 * kDirWays; ++k) {
      Word128& slot = dir_entry(s, p, k);
      Word128 e = load128(slot);
      if (!entry_is(e, g)) continue;
      std::uint32_t lane = kNoLane;
      const bool matches = record_matches(s, e, lane);
      if (!matches) {
        // Stale: its lane was reclaimed (and maybe reused), or its creator
        // gave the record up. Clear it.
        cas128(slot, e, Word128{});
        continue;
      }
      const LaneState st = LaneWord::state(lane_load(s, lane));
      if (DirEntry::state(e) == DirState::live) {
        if (st == LaneState::free) {
          cas128(slot, e, Word128{});  // reclaimed, entry not yet cleared: clear it for the reclaimer
          continue;
        }
        if (st == LaneState::creating) make_live(s, lane);
        lane_out = lane;
        return LaneFind::found;
      }
      if (st != LaneState::creating) {  // a tentative entry whose record moved on: dead
        cas128(slot, e, Word128{});
        continue;
      }
      if (lane < best_tentative) {
        best_tentative = lane;
        best_entry = e;
      }
    }
    if (best_tentative != kNoLane) {
      // A creation is in progress: commit its winner (the lowest lane), so
      // that nobody waits for its creator; the losers see it and withdraw.
      for (unsigned k = 0; k < 2 * kDirWays; ++k) {
        Word128& slot = dir_entry(s, p, k);
        Word128 e = load128(slot);
        if (e == best_entry) {
          Word128 live = DirEntry::make(DirEntry::sf(e), DirEntry::kind(e), DirState::live, DirEntry::lane1(e), DirEntry::inc(e));
          if (cas128(slot, e, live)) make_live(s, best_tentative);
        }
      }
      continue;
    }
    if (!create) return LaneFind::absent;

    // Nobody has the group: create it, in a free record or an idle lane's
    // (a pass that lost one to another thread's step looks again).
    bool raced = false;
    std::uint32_t lane = take_record(s, g, raced);
    for (std::uint32_t tries = 0; lane == kNoLane && raced && tries < s.lane_count; ++tries) lane = take_record(s, g, raced);
    if (lane == kNoLane) return LaneFind::lanes_full;
    FAIRLANE_FAILPOINT("lane.record_taken");
    const std::uint64_t inc = record_inc(s.lanes[lane]) & kIncMask;
    const Word128 mine = DirEntry::make(g.sf, g.kind, DirState::tentative, lane + 1, inc);
    // Both buckets full of entries of records in use: the idle lanes among
    // them are given back (each reclaim clears its entry; a CAS that fails
    // after one means another creator took the room, so the count bounds
    // the loop, not anyone's pace).
    Word128* where = place_entry(s, p, mine);
    for (unsigned k = 0; !where && k < 2 * kDirWays && reclaim_idle_in_buckets(s, p, g); ++k) where = place_entry(s, p, mine);
    if (!where) {
      release_record(s, lane);
      // A rival's creation of g took the last room: the next round finds it.
      bool rival = false;
      for (unsigned k = 0; k < 2 * kDirWays && !rival; ++k) rival = entry_is(load128(dir_entry(s, p, k)), g);
      if (rival) continue;
      return LaneFind::buckets_full;
    }
    FAIRLANE_FAILPOINT("lane.entry_tentative");
    // Rivals: a live entry of the group, or a tentative one of a lower lane, wins.
    bool lost = false;
    for (unsigned k = 0; k < 2 * kDirWays && !lost; ++k) {
      Word128& slot = dir_entry(s, p, k);
      if (&slot == where) continue;
      Word128 e = load128(slot);
      std::uint32_t other = kNoLane;
      // A tentative rival of a higher lane is killed (it withdraws when it
      // sees this); if the kill fails, the entry changed: look at it again
      // (it may have been committed, and then it wins).
      while (entry_is(e, g) && record_matches(s, e, other)) {
        if (DirEntry::state(e) == DirState::live || other < lane) {
          lost = true;
          break;
        }
        if (cas128(slot, e, Word128{})) break;
      }
    }
    Word128 expect = mine;
    const Word128 live = DirEntry::make(g.sf, g.kind, DirState::live, lane + 1, inc);
    if (lost || !cas128(*where, expect, live)) {
      // Lost, or killed by a rival. Unless someone committed us meanwhile.
      if (!lost && expect == live) {
        make_live(s, lane);
        lane_out = lane;
        return LaneFind::found;
      }
      Word128 e = mine;
      cas128(*where, e, Word128{});
      release_record(s, lane);
      continue;  // the next round finds the winner
    }
    FAIRLANE_FAILPOINT("lane.entry_live");
    make_live(s, lane);
    lane_out = lane;
    return LaneFind::found;
  }
  report_corrupt(s, CorruptWhat::directory);
  return LaneFind::corrupt;
}

LaneFind lane_find_cached(Segment& s, GroupKey g, std::uint32_t& lane_out, Word128& w, bool& checked) noexcept {
  // The lanes this thread found lately, first (direct-mapped on the group):
  // a hit is checked against the record (its key and incarnation, and that it
  // is live). The word first, the key after: so a hit is lane_is(w) as a
  // CAS from w needs it (lane_order.cpp, run_append), and such a CAS holds
  // only if the word has not moved since (the key changes only with it).
  struct Entry {
    std::uint64_t handle = 0, sf = 0, key_kind = 0;
    std::uint32_t lane = 0;
  };
  thread_local Entry cache[256];
  Entry& e = cache[((g.sf + g.kind) * 0x9E3779B97F4A7C15ULL) >> 56];
  checked = false;
  if (e.handle == s.handle_id && e.sf == g.sf && (e.key_kind & 0x7FFF) == g.kind && e.lane < s.lane_count) {
    const LaneRecord& r = s.lanes[e.lane];
    const Word128 seen = lane_load(s, e.lane);
    if (LaneWord::state(seen) == LaneState::live && r.key_kind.load(std::memory_order_acquire) == e.key_kind &&
        r.key_sf.load(std::memory_order_acquire) == g.sf) {
      lane_out = e.lane;
      w = seen;
      checked = true;
      return LaneFind::found;
    }
  }
  const LaneFind f = lane_find(s, g, true, lane_out);
  if (f == LaneFind::found) {
    e.handle = s.handle_id;
    e.sf = g.sf;
    e.lane = lane_out;
    e.key_kind = s.lanes[lane_out].key_kind.load(std::memory_order_acquire);
  }
  return f;
}

bool lane_try_reclaim(Segment& s, std::uint32_t lane) noexcept {
  if (lane == kDefaultLane || lane >= s.lane_count) return false;
  LaneRecord& r = s.lanes[lane];
  const GroupKey g{std::uint32_t(r.key_kind.load(std::memory_order_acquire) & 0x7FFF), r.key_sf.load(std::memory_order_acquire)};
  const std::uint64_t inc = record_inc(r) & kIncMask;
  Word128 w = lane_load(s, lane);
  for (int round = 0; round < 4; ++round) {
    const Word128 base = lane_base(s, lane, w);
    if (!lane_idle(s, lane, base)) return false;
    // Close the strays to inserters: a seal on the (empty) head naming this
    // very reading of the word. An insert into empty strays is a CAS of the
    // head, so from here none lands unless the seal is opened first, and it
    // is opened only once the word has moved past `w` (then this CAS fails).
    std::uint64_t h = r.strays[0].load(std::memory_order_acquire);
    if (!strays_head_clear(h)) return false;  // taken nodes not yet unlinked, or an insert
    const std::uint64_t seal = strays_head(UpLink::owner_tag(h), true, LaneWord::version(w));
    if (h != seal && !r.strays[0].compare_exchange_strong(h, seal, std::memory_order_seq_cst)) return false;
    FAIRLANE_FAILPOINT("lane.sealed");
    // The CAS that gives the lane back: any operation computed from an
    // earlier reading of this word now fails and looks the group up again.
    if (cas128(r.word, w, LaneWord::bumped(Word128{}, w))) {
      FAIRLANE_FAILPOINT("lane.reclaimed");
      s.h->lanes_reclaimed.fetch_add(1, std::memory_order_relaxed);
      const DirProbe p = dir_probe(s, g);
      for (unsigned k = 0; k < 2 * kDirWays; ++k) {
        Word128& slot = dir_entry(s, p, k);
        Word128 e = load128(slot);
        if (entry_is(e, g) && DirEntry::lane1(e) == lane + 1 && DirEntry::inc(e) == inc) cas128(slot, e, Word128{});
      }
      return true;
    }
    // The word moved: our seal is dead. Open it (unless the lane was given
    // back meanwhile, or a newer seal replaced it: then the CAS fails).
    if (LaneWord::state(w) == LaneState::live) {
      std::uint64_t cur = seal;
      r.strays[0].compare_exchange_strong(cur, strays_head(UpLink::owner_tag(seal), false, 0), std::memory_order_seq_cst);
    }
  }
  return false;
}

}  // namespace fairlane::detail
