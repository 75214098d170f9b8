// Lanes: the lane records, the lane directory (group -> lane), the lane
// word's service decision and ringing, and the reclaim of idle lanes.
//
// A lane record is in one of three states (LaneWord::state, LaneState):
// free, creating (taken by a creator that has not yet won the directory),
// live. A group finds its lane through the directory (two-choice buckets of
// 128-bit entries: the group's key, the lane, the lane's incarnation),
// checked against the record (its key and incarnation) before use, so a
// stale entry (its lane reclaimed and reused) is never followed.
//
// Creation is exactly-once per group without a lock: a creator takes a free
// record (CAS free -> creating), then a directory entry (CAS free ->
// tentative), then looks at every entry of the group's two buckets. A live
// entry of the group wins; among tentative ones the lowest lane index wins;
// anyone may commit the winner (CAS tentative -> live) and kill a loser (CAS
// tentative -> free); a creator that loses frees its record. A committed
// entry's record is made live by whoever sees it still creating.
//
// Reclaim: a live lane is idle when its lane word holds nothing: run and
// strays empty, no active count (leases, jobs popped and not yet leased,
// jobs returning to it), no step pending, and its settings are the defaults.
// Scheduled and dead jobs hold no lane (their slot keeps their group, and a
// promotion or requeue looks the lane up again), so an idle lane is exactly
// one no job needs. A husk taken out of the run and not yet released holds
// none either (its take counts nothing active): its release counts it out
// of the lane's husks only if the record is still that lane (HuskCount).
// An idle lane is given back by a CAS of its lane word to free, which fails
// any operation computed from an older reading of that word
// (docs/design.md, "Tenants come and go"); its directory entry is cleared by
// the reclaimer or by the next lookup that finds it stale.
#pragma once

#include <cstdint>
#include <optional>

#include "atomic128.hpp"
#include "fairlane/detail/layout.hpp"
#include "hash.hpp"
#include "ring.hpp"
#include "segment.hpp"
#include "slots.hpp"

namespace fairlane::detail {


[[gnu::always_inline]] inline Word128 lane_load(const Segment& s, std::uint32_t lane) noexcept { return load128(s.lanes[lane].word); }
inline std::uint64_t lane_settings(const Segment& s, std::uint32_t lane) noexcept {
  // Acquire: a CAS of the lane word that follows a settings change (set_limit
  // and friends bump the lane word after writing here) carries it to every
  // reader of the lane word ([R4]); this load then sees at least that value.
  return s.lanes[lane].settings.load(std::memory_order_acquire);
}

// Everything that decides whether a claim may serve the lane now.
inline bool lane_serviceable(const Word128& w, std::uint64_t st) noexcept {
  if (LaneWord::state(w) != LaneState::live) return false;
  if (LaneWord::head(w) == 0 && !LaneWord::strays(w)) return false;
  if (Settings::paused(st)) return false;
  const std::uint64_t limit = Settings::limit(st);
  // Without a limit the field's width is the limit (131,071 held at once).
  return LaneWord::active(w) < (limit ? limit : LaneWord::kActiveMax);
}

// Is `st` a state the step `op` moves a slot out of (so that the step may
// still need applying)? A slot past it had the step applied already.
inline bool step_pre_state(RelOp op, SlotState st) noexcept {
  return op == RelOp::linked ? st == SlotState::returning
         : op == RelOp::drop ? st == SlotState::pending
         : op == RelOp::back ? st == SlotState::leased || st == SlotState::pending
                             : st == SlotState::leased;
}

// `w` as every CAS of the lane word must start from it: the step it names
// (LaneWord::rel, RelOp) applied to its slot, and the field cleared (with
// the count of a `linked` step given back). Applying a step is idempotent:
// a slot whose word already moved on is left alone. Every CAS of a lane word
// starts from here, so a step is applied before anything else happens in
// the lane (docs/design.md, "Lane steps"). The common cases are tested
// inline; applying a step is lane_base_step.
Word128 lane_base_step(Segment& s, std::uint32_t lane, const Word128& w) noexcept;
inline Word128 lane_base(Segment& s, std::uint32_t lane, const Word128& w) noexcept {
  const std::uint32_t rel1 = LaneWord::rel(w);
  if (rel1 == 0) return w;
  // The common case: the step's author applied it right after its CAS and
  // the word just still names it (the slot's state, in the low half of its
  // word, has moved past the step's pre-state). The rest is lane_base_step.
  const RelOp op = LaneWord::relop(w);
  if (op != RelOp::take && rel1 <= s.jobs &&
      !step_pre_state(op, SlotState(__atomic_load_n(&s.words[rel1 - 1].lo, __ATOMIC_ACQUIRE) & 15)))
    return LaneWord::with_rel(w, 0, RelOp::complete);
  return lane_base_step(s, lane, w);
}

// Is the lane idle (holds nothing, no settings)? `w` must come from lane_base.
inline bool lane_idle(const Segment& s, std::uint32_t lane, const Word128& w) noexcept {
  return lane != kDefaultLane && LaneWord::state(w) == LaneState::live && LaneWord::head(w) == 0 &&
         LaneWord::tail(w) == 0 && !LaneWord::strays(w) && LaneWord::active(w) == 0 && LaneWord::rel(w) == 0 &&
         Settings::defaults(lane_settings(s, lane));
}

// Might lane `lane`, read as `w` (not from lane_base), be idle? lane_idle
// of the word with its pending step taken as applied: a step only clears
// `rel` (its effect on the rest is part of the CAS that named it), so this
// is what lane_idle says once lane_base has run. lane_try_reclaim applies
// the step and judges again.
inline bool may_be_idle(const Segment& s, std::uint32_t lane, const Word128& w) noexcept {
  return lane_idle(s, lane, LaneWord::with_rel(w, 0, RelOp::complete));
}

// Does strays head `head` (LaneRecord::strays[0]) name no node? An idle lane
// whose head names one (a mover between its link and the CAS that flags the
// strays, a husk's taker between its take and its unlink) cannot be given
// back until that step is done (lane_try_reclaim), so it is no lane for a
// producer parked for one either: nobody wakes one for it (wake_lanes, the
// sweep). Whatever finishes the step leaves the lane with work (a mover) or
// the head clear (an unlink), and a later complete or sweep pass wakes then.
inline bool strays_head_clear(std::uint64_t head) noexcept { return UpLink::succ(head) == 0; }
inline bool strays_head_clear(const Segment& s, std::uint32_t lane) noexcept {
  return strays_head_clear(s.lanes[lane].strays[0].load(std::memory_order_acquire));
}

// The incarnation of lane record `lane`, as its key keeps it. Read after a
// live reading `w` of its word, it is the incarnation of `w`'s lane if a
// CAS from `w` succeeds after it (a reclaim and a re-creation both move the
// word on, and a record's key is written before it is made live).
inline std::uint64_t lane_incarnation(const Segment& s, std::uint32_t lane) noexcept {
  return s.lanes[lane].key_kind.load(std::memory_order_acquire) >> 16;
}

// One husk fewer in the run of lane `lane`, incarnation `inc` (its `husks`
// count, for depth: never below 0). Nothing if the record has been given
// back since and taken for another lane: the count is that lane's then. A
// husk's take can empty its lane (it counts nothing active), and the lane
// can be given back before the husk is released (HuskCount). Relaxed: the
// count is approximate.
inline void husk_uncount(Segment& s, std::uint32_t lane, std::uint64_t inc) noexcept {
  std::atomic<std::uint64_t>& h = s.lanes[lane].husks;
  std::uint64_t v = h.load(std::memory_order_relaxed);
  while (HuskCount::count(v) && HuskCount::inc(v) == (inc & HuskCount::kIncMask) &&
         !h.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
  }
}

// One husk more in the run of lane `lane`, incarnation `inc` (nothing if
// the record is another lane's now, as husk_uncount). A husk is counted
// before the CAS that makes it one, while its node is linked in that run
// (so the lane cannot have been given back), and the count is undone if the
// CAS fails: a popper, which can pop it only after that CAS, always finds
// it counted, and a count that landed after the pop (and after the record
// was given back and taken by another group) is not possible.
inline void husk_count(Segment& s, std::uint32_t lane, std::uint64_t inc) noexcept {
  std::atomic<std::uint64_t>& h = s.lanes[lane].husks;
  std::uint64_t v = h.load(std::memory_order_relaxed);
  while (HuskCount::inc(v) == (inc & HuskCount::kIncMask) && !h.compare_exchange_weak(v, v + 1, std::memory_order_relaxed)) {
  }
}

// Wakes one parked consumer if there is one. seq_cst: pairs with the
// seq_cst increment of `waiters` before a consumer's last look ([S5]):
// either it sees the lane we just made serviceable or we see it waiting.
void notify(Segment& s, int count = 1) noexcept;

// Whether a thread parked on a spot whose end is `until` (Header::park_until
// for claim_wait, room_park_until and lane_park_until for enqueue_wait) may still be
// asleep: the clock has not passed it. Past it, a count left in the spot's
// waiters is of threads killed while parked (design.md, "Blocking claims").
bool sleep_may_be_under_way(const std::atomic<std::uint64_t>& until) noexcept;
inline bool sleep_may_be_under_way(const Segment& s) noexcept { return sleep_may_be_under_way(s.h->park_until); }

// Wakes one producer parked in enqueue_wait for a lane (lanes_full), if one
// may be asleep (Header::lane_waiters, lane_park_until), when a lane record
// or directory room may have come free: lane `lane` may now be given back
// (empty, nothing held, default settings: a look reclaims it), or with
// kNoLane, a record was given back. Made after the write that did it (a
// free, a park step, a reclaim): seq_cst, it pairs with the parking
// producer's count before its last look ([S5]). A hint, not a promise:
// the woken producer looks, and parks again if another took the lane.
[[gnu::cold]] void wake_lanes(Segment& s, std::uint32_t lane) noexcept;

// CAS of lane `lane`'s word from `w` (a reading) to `nw` with the version
// moved on; if `nw` is serviceable and not ringed, rings it: pushes a cell
// first (docs/design.md, "The ring"), and wakes a waiter after. `w` holds
// the word after the call: the one written on success (what a step's author
// applies its step from), the current one on failure. Returns false on
// failure. A ring with no room (a scribbled head or tail: the ring is sized
// so that it cannot fill) is reported as corruption and the change is made
// without ringing, so that no caller's loop waits on it; a later write of
// the lane word, or the next sweep (sweep_lanes), rings the lane.
inline bool lane_cas(Segment& s, std::uint32_t lane, Word128& w, Word128 nw) noexcept {
  bool ring = !LaneWord::ringed(nw) && lane_serviceable(nw, lane_settings(s, lane));
  if (ring) {
    const std::uint64_t t = ring_push(s, lane);
    if (t == ~0ULL) {
      report_corrupt(s, CorruptWhat::ring_cell);
      ring = false;
    } else {
      nw = LaneWord::with_tgen(LaneWord::with_ringed(nw, true), std::uint32_t(t & LaneWord::kTgenMask));
    }
  }
  // [S3] seq_cst (cas128): the lane word orders every change of a lane's
  // state; a ringing CAS follows its cell's push [S1] and precedes the
  // notify that loads `waiters` ([S5]).
  const Word128 written = LaneWord::bumped(nw, w);
  if (!cas128(s.lanes[lane].word, w, written)) return false;
  w = written;
  if (ring) notify(s);
  return true;
}

// Applies `change` (Word128 -> std::optional<Word128>; nullopt = give up)
// to the lane word until the CAS holds. Returns the word written, or the
// last reading when change gave up.
// `change` is given lane_base(w).
template <class F>
inline std::optional<Word128> lane_update(Segment& s, std::uint32_t lane, F change) noexcept {
  Word128 w = lane_load(s, lane);
  for (;;) {
    const Word128 base = lane_base(s, lane, w);
    std::optional<Word128> nw = change(base);
    if (!nw) return std::nullopt;
    if (lane_cas(s, lane, w, *nw)) return w;
  }
}

// The strays head of a lane: its incarnation's tag as owner tag; sealed by
// a reclaim, with the version of the lane word the reclaim is for as target
// tag (lane_try_reclaim).
inline std::uint64_t strays_head(std::uint64_t inc, bool sealed, std::uint64_t version) noexcept {
  return UpLink::make(0, sealed ? Link::kSealed : 0, inc & UpLink::kTagMask, version & UpLink::kTagMask);
}

// ---- the directory ---------------------------------------------------------------

struct GroupKey {
  std::uint32_t kind = 0;   // namespace code
  std::uint64_t sf = 0;     // snowflake
};
inline GroupKey group_key(const BrandedId& g) noexcept { return GroupKey{kind_code(g.kind()), g.snowflake()}; }

// The group of a job, as its slot keeps it (kNoGroup: the default lane).
inline bool slot_group(const Segment& s, std::uint32_t slot, GroupKey& g) noexcept {
  const SlotRecord& r = s.slot(slot);
  const std::uint64_t kind = r.group_kind.load(std::memory_order_relaxed);
  g.sf = r.group_sf.load(std::memory_order_relaxed);
  g.kind = std::uint32_t(kind & 0x7FFF);
  return kind != kNoGroup;
}

// Is lane `lane`, whose word `w` was read just before, group g's live lane?
// A reclaim and a re-creation both move the word on, so if a CAS from `w`
// succeeds after this returned true, the lane was g's all along.
inline bool lane_is(const Segment& s, std::uint32_t lane, const Word128& w, GroupKey g) noexcept {
  if (LaneWord::state(w) != LaneState::live) return false;
  if (lane == kDefaultLane) return true;
  const LaneRecord& r = s.lanes[lane];
  return (r.key_kind.load(std::memory_order_acquire) & 0x7FFF) == g.kind &&
         r.key_sf.load(std::memory_order_acquire) == g.sf;
}

// For a retry loop on a lane: only rounds that start from the same lane at
// the very word the last round read are counted. Bytes nobody writes repeat
// such a round for ever (a directory entry naming another group's lane, a
// front nobody takes); every step of another thread moves the word on (a
// reclaim, a re-creation, a take), and a round after it is that thread's
// progress, not counted (docs/design.md, "Every walk is bounded").
struct SameLaneRounds {
  std::uint32_t lane = ~0U;
  Word128 word{};
  int same = 0;
  // Whether this round is the ninth in a row to find lane `l` at word `w`.
  bool stuck(std::uint32_t l, const Word128& w) noexcept {
    if (l == lane && w == word) return ++same > 8;
    lane = l;
    word = w;
    same = 0;
    return false;
  }
};

enum class LaneFind { found, absent, lanes_full, buckets_full, corrupt };

// The lane of `g`, creating it if asked. Lock-free. `lane_out` is set when
// found. buckets_full: both directory buckets of the group hold only
// entries of other groups' lanes in use, none of them idle (idle ones are
// reclaimed to make room; entries go to the emptier bucket). Rare, but not
// vanishing: first-fit placement met it once in about 10^7 new groups with
// every lane live. Reported (enqueue answers lanes_full), never silent.
LaneFind lane_find(Segment& s, GroupKey g, bool create, std::uint32_t& lane_out) noexcept;

// lane_find(create), with the lanes this thread found lately tried first.
// The lane it answers was g's when it looked. Callers check it again before
// a CAS that uses it (lane_is), as they do for lane_find's answer, except
// where `checked` says this look was that check.
// `checked`: true when the answer came from this thread's cache; then `w` is
// the lane word it read before it found the record's key to be g's (of the
// incarnation it cached) and the word live, which is lane_is(w) with its
// reads after the word: a CAS from w needs no lane_is of its own (run_append,
// w_checked). False: w is not read.
LaneFind lane_find_cached(Segment& s, GroupKey g, std::uint32_t& lane_out, Word128& w, bool& checked) noexcept;

// The two words (id_words) of the group id a lane record's key names: kind
// code `code`, snowflake `sf`. False, and both words 0 (the empty id), for
// a key no id has (a scribble). Made in registers (base62_words), never as
// text put together on the stack.
inline bool group_words_of(std::uint32_t code, std::uint64_t sf, std::uint64_t& w0, std::uint64_t& w1) noexcept {
  w0 = w1 = 0;
  if (code >= kKindCodes || sf > kMaxSnowflake) return false;
  std::uint64_t a = 0;
  std::uint32_t b = 0;
  base62_words(sf, a, b);
  id_words_of(kind_word_of(code), a, b, w0, w1);
  return true;
}

// The group of a live lane (the default lane's is DEF00000000000).
BrandedId lane_group(const Segment& s, std::uint32_t lane) noexcept;

// A lane record's previous life's waits (its wait histogram) go to the
// queue-wide count, and the record's start from zero: when the record is
// taken for a group (relaxed: statistics; a reader in between sees them
// twice for a moment).
void retire_waits(Segment& s, std::uint32_t lane) noexcept;

// A creator looks at this many lane records for a free one before it gives
// back an idle lane it met on the way (take_record, lanes.cpp).
inline constexpr std::uint32_t kFreeLook = 256;

// Gives lane `lane` back if it is idle now (sealing its strays first, so
// that no insert lands in a lane being given back). Returns whether it did.
bool lane_try_reclaim(Segment& s, std::uint32_t lane) noexcept;

}  // namespace fairlane::detail
