// Claiming: a ring step, the choice of a lane's oldest job, the lease.
//
// One ring step (ring_step):
//   1. read the head position h and its cell; it names lane L;
//   2. read L's lane word: if the cell is not L's token, pass it (if L is
//      not ringed: first ringing L with a cell pushed at the tail if it is
//      serviceable, else poking L's word: ring.hpp); if L is not
//      serviceable, de-ring it and pass the cell;
//   3. take L's oldest job in one CAS of L's lane word that also counts it
//      active and, when L's turn is over, moves L's token to a cell pushed
//      at the tail: the run's head (the CAS pops it; the last node's link is
//      sealed first), or the strays' minimum (the CAS names it in a `take`
//      step, then it is marked ours and unlinked);
//   4. pass the old cell if the token moved or the lane left the ring;
//   5. lease the job: CAS its slot word to leased with the next ctr (the
//      token), the deadline and this process as holder.
// Between 3 and 5 the job is this thread's alone: its intent (thread record)
// names it, so that if the process dies there the sweep puts it back
// (sweeping.cpp); if the process is only stopped, that job is its
// reservation and nothing else waits for it.
//
// What a claim meets at the front and is not a pending job it settles for
// whoever left it: an admitting job (its admission is decided, index_resolve),
// a returning one (the `linked` step), an aborted one (popped without a
// count and freed).
#include <algorithm>
#include <array>
#include <cstring>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"
#include "util.hpp"

namespace fairlane::detail {

// ---- intents -----------------------------------------------------------------------------

void IntentGuard::take_fallback(Segment& s) noexcept {
  if (!s.me) return;
  const std::uint64_t me = std::uint64_t(gettid_cached());
  std::uint64_t free = 0;
  // Threads of one process (those beyond the thread records) take turns
  // here: waiting here waits on no other process. (A copy of the handle in
  // a forked child never gets here: it has a record of its own, or it
  // makes no claims and no admissions, writer(). Copies that went on as
  // their parents' did, before 2026-12-05: one killed holding this left it
  // held for good.)
  while (!s.me->intent_tid.compare_exchange_weak(free, me, std::memory_order_acquire, std::memory_order_relaxed)) {
    free = 0;
    cpu_pause();
  }
  slot_ = {&s.me->intent, &s.me->intent_lane, &s.me->intent_pred, &s.me->intent_tid};
}

namespace {

// A lane's group id as its two words, bytes 0-7 and 8-15 (id_words).
struct GroupEntry {
  std::uint64_t handle = 0, lane = 0, inc = 0;
  std::uint64_t w0 = 0, w1 = 0;  // both 0: the empty id (a scribbled key)
};
// A miss: out of line, so that the encoding it inlines stays out of the
// claim's code. (Not marked cold: with more than 256 lanes in turn most
// claims miss.) The id is made in registers (base62_words). Made as
// lane_group makes it, a BrandedId built a few bytes at a time and copied
// whole (each copy a read of stores not yet done), a miss cost about
// 50 ns, and a claim over 100,000 lanes in turn twice a claim over one
// (BM_claim_lanes_st, 2026-12-07).
[[gnu::noinline]] void fill_group_entry(const Segment& s, std::uint32_t lane, std::uint64_t inc, GroupEntry& e) noexcept {
  e.handle = s.handle_id;
  e.lane = lane;
  e.inc = inc;
  // As lane_group: both words 0 (the empty id) for a scribbled key.
  (void)group_words_of(std::uint32_t(inc & 0x7FFF), s.lanes[lane].key_sf.load(std::memory_order_acquire), e.w0, e.w1);
}
// The group of a lane as a BrandedId, cached per thread (encoding its
// eleven digits is work a claim should not pay for). Keyed by the
// lane's incarnation, so a reclaimed lane is never answered with its old
// group. Written into `out` word by word (a BrandedId returned by value
// comes back through a pair of registers, shifted and masked: more work
// than the look-up).
void cached_group(const Segment& s, std::uint32_t lane, BrandedId& out) noexcept {
  thread_local std::array<GroupEntry, 256> cache{};
  const std::uint64_t inc = s.lanes[lane].key_kind.load(std::memory_order_acquire);
  GroupEntry& e = cache[lane & 255];
  if (e.handle != s.handle_id || e.lane != lane || e.inc != inc) [[unlikely]]
    fill_group_entry(s, lane, inc, e);
  IdAccess::assign_words(out, e.w0, e.w1);
}

// A job's own retry policy (out of line: most jobs have none).
[[gnu::noinline]] void decode_retry_of(const SlotRecord& r, RetryPolicy& out) noexcept {
  out = retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed));
}

std::uint32_t wait_bucket(std::uint64_t us) noexcept {
  if (us < 2) return 0;
  return std::min<std::uint32_t>(kWaitBuckets - 1, std::uint32_t(63 - __builtin_clzll(us)));
}

// Statistics of one lane: one writer at a time in the common case (the
// lane's claimer); a racing claim may be lost (documented as approximate).
void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

enum class Step { served, again, empty, corrupt };

// The lease of a job this thread took out of its lane (counted active,
// with ctr taken_ctr). The job stays pending until this CAS: nothing else
// moves a pending job that is out of its lane (a drop needs it linked),
// except recovery, once this thread is dead or its take has outlived the
// lease's deadline (then `lost`: the job is back in its lane).
enum class Leased { ok, lost, corrupt };

Leased lease_job(Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint64_t deadline, std::uint64_t now_us,
                 std::uint64_t taken_ctr, Lease& out) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::pending && SlotWord::ctr(w) == taken_ctr) {
    const std::uint32_t attempt = std::min<std::uint32_t>(SlotWord::attempt(w) + 1, SlotWord::kMaxAttempt);
    const std::uint64_t ctr = SlotWord::ctr(w) + 1;
    // [R6] release (cas128): the lease is published; pairs with the
    // acquire loads of complete/fail/extend/release and the sweep.
    if (!slot_cas(s, slot, w, SlotWord::make(SlotState::leased, attempt, deadline, ctr, my_holder(s)))) continue;
    FAIRLANE_FAILPOINT("claim.leased");
    fill_lease(s, slot, lane, attempt, make_token(s, slot, ctr), deadline, now_us, out);
    return Leased::ok;
  }
  // Put back by a sweep (our take outlived its lease's deadline: its `back`
  // step moved the ctr on and gave the count back), and maybe taken since.
  if (SlotWord::ctr(w) != taken_ctr) return Leased::lost;
  report_corrupt(s, CorruptWhat::slot_word);  // a job out of its lane that moved under its taker
  return Leased::corrupt;
}

// Gives back one active count taken for a job that turned out not to be one.
void unreserve(Segment& s, std::uint32_t lane) noexcept {
  lane_update(s, lane, [](Word128 b) -> std::optional<Word128> {
    const std::uint64_t a = LaneWord::active(b);
    return LaneWord::with_active(b, a ? a - 1 : 0);
  });
}

// Claims left in the turn of the token at the head (tgen): weight 1 always
// one; otherwise the lane's Turn word counts them (exact with one consumer,
// approximate when several claim one turn at once).
std::uint32_t turn_left(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint64_t h) noexcept {
  const std::uint32_t weight = Settings::weight(st);
  if (weight <= 1) return 1;
  const std::uint64_t t = s.lanes[lane].turn.load(std::memory_order_relaxed);
  return Turn::pos1(t) == std::uint32_t(h + 1) ? std::max<std::uint32_t>(Turn::left(t), 1) : weight;
}
void spend_turn(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint64_t h, std::uint32_t left) noexcept {
  if (Settings::weight(st) <= 1) return;
  std::atomic<std::uint64_t>& turn = s.lanes[lane].turn;
  std::uint64_t t = turn.load(std::memory_order_relaxed);
  // Relaxed: a count read and written by claimers only; a lost race only
  // makes a turn one claim longer or shorter.
  turn.compare_exchange_strong(t, Turn::make(h, left - 1, t), std::memory_order_relaxed);
}

std::uint64_t key1(const Segment& s, std::uint32_t slot1) noexcept {
  return s.slot(slot1 - 1).sf.load(std::memory_order_acquire);
}

// The token decision of a CAS that takes one job: move it (the turn is
// over: a cell is pushed now, before the CAS, as ring.hpp requires), drop it
// (the lane stops being serviceable), or leave it at the head. Returns false
// if the ring is full (corrupt).
bool decide_token(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint64_t h, Word128& nw, bool& pass_now) noexcept {
  pass_now = false;
  if (!lane_serviceable(nw, st)) {
    nw = LaneWord::with_ringed(nw, false);
    pass_now = true;
    return true;
  }
  if (turn_left(s, lane, st, h) > 1) return true;
  const std::uint64_t t = ring_push(s, lane);
  if (t == ~0ULL) {
    report_corrupt(s, CorruptWhat::ring_cell);
    return false;
  }
  nw = LaneWord::with_tgen(nw, std::uint32_t(t & LaneWord::kTgenMask));
  pass_now = true;
  return true;
}

// A husk's take intent (IntentGuard::set_take) carries two things a job's
// does not.
//
// Its deadline: recovery_ms after the claim began, whatever the lease it asks for (a
// husk is no job: a long lease must not let a stopped claimer hold its
// slot that long). Until 2026-12-04 it carried none (0: never overdue): a
// claimer stopped with its intent naming a husk counted as a live take of
// it for as long as it stayed stopped, so the sweep left another claimer's
// dead take of the same husk alone, and a claimer stopped after taking a
// husk held its slot; either way the slot stayed out of use until the
// stopped one resumed or died (`StoppedHuskClaimer.*`).
//
// A running claimer can be settled under it too: "now" is read when the
// claim begins (a batch runs many steps on it), and a thread may be
// descheduled past recovery_ms. That is harmless. Settled past its
// deadline while its claimer lives (settle_intent, as for a job's take,
// with live_owner: the intent is the claimer's to clear), the husk is
// released once, by whoever's release_husk moves it out of "aborted, not
// popped" at its ctr (freed, or marked popped for an admitter still
// deciding), and only that call uncounts it from the lane's husks. A
// claimer that goes on after that:
//   - before its take's CAS: the CAS fails (whoever took the husk moved the
//     lane word's version on), and it reads the word again;
//   - after it, strays: finish_take marks only while the lane word is still
//     the one its take wrote, and the settler applied that take's step (a CAS
//     of the word) before it judged the take; strays_unlink only unlinks
//     marked nodes, searching by the slot's key of now, so it leaves a reuse
//     of the slot alone;
//   - drop_husk: release_husk(slot, its ctr) finds the slot free at that
//     ctr, marked popped, or reused (an allocation moves the ctr on): it
//     does nothing and returns false, so nothing is freed or uncounted again
//     (`AResumedHuskTakerCountsItsHuskOutOfTheLaneOnce`); a husk's take
//     counts nothing active and moves no token, so there is no count to
//     give back twice; nothing is reported corrupt.
//
// Its lane's incarnation, with the lane (IntentLane), read after the lane
// word the take's CAS is from. The take can empty the lane (it counts
// nothing active), and the lane be given back and its record taken for
// another group before the husk is released: whoever releases it counts it
// out of that incarnation's husks only (husk_uncount), not the next lane's
// (`ReusedHuskLane.*`: its depth read one high, or its husks were uncounted
// while still in its run).
//
// Returns the lane word of the intent, for drop_husk. Out of line and cold:
// a job's take (nearly every take) pays a branch for it and nothing more
// (the deadline alone inlined: 883 instructions a claim in the cycle count,
// against 880 out of line; with the incarnation, two out-of-line calls
// chosen apart were 832, this one 828).
[[gnu::cold, gnu::noinline]] std::uint64_t intend_husk_take(Segment& s, IntentGuard& guard, Intent kind,
                                                            std::uint32_t x, std::uint64_t ctr,
                                                            std::uint32_t lane, std::uint64_t now_us) noexcept {
  const std::uint64_t take_lane = IntentLane::husk(lane, lane_incarnation(s, lane));
  guard.set_take(kind, x, ctr, take_lane, now_us / 1000 + s.recovery_ms);
  return take_lane;
}

// The intent of a take of the front x1 - 1 of lane `lane` (from its run or
// its strays): a job's with its lease's deadline, a husk's as above.
// Returns the lane word the intent names.
inline std::uint64_t intend_take(Segment& s, IntentGuard& guard, bool is_job, bool from_run, std::uint32_t x,
                                 std::uint64_t ctr, std::uint32_t lane, std::uint64_t deadline,
                                 std::uint64_t now_us) noexcept {
  const Intent kind = from_run ? Intent::pop_run : Intent::pop_strays;
  if (!is_job) return intend_husk_take(s, guard, kind, x, ctr, lane, now_us);
  guard.set_take(kind, x, ctr, lane, deadline);
  return lane;
}

// What the front of a lane holds, as one CAS of its lane word can take it.
enum class Front { job, husk, settle, none, corrupt };

// Reads the front of lane `lane` from `base` (lane_base of the word `w`):
// the run's head or the strays' minimum, whichever is older. A front that
// needs settling first (admitting, returning) is settled here and `settle`
// returned: read the lane word again. A job or husk comes with `x_ctr`, its
// slot word's ctr, read while `w` was still the lane's word: the take's
// intent names that (slot, ctr), and a sweep that judges the intent reads
// "not the run's head any more" as "taken", which is true only of a slot
// that was the head at that ctr. `w` may be old (a lane batch's later round
// starts from the word its take wrote): its head may have been popped since
// and its slot reused, even in this lane's run, further back.
Front read_front(Segment& s, std::uint32_t lane, const Word128& w, const Word128& base, std::uint32_t& x1,
                 bool& from_run, std::uint64_t& x_ctr) noexcept {
  const std::uint32_t h1 = LaneWord::head(base);
  std::uint32_t f1 = 0;
  std::uint64_t f1head = 0;  // the head link that led to f1
  OrderResult fr = OrderResult::empty;
  if (LaneWord::strays(base)) {
    f1 = strays_first(s, lane, fr, &f1head);
    FAIRLANE_FAILPOINT("claim.front_read");
  }
  if (fr == OrderResult::corrupt) return Front::corrupt;
  if (h1 && !valid_slot1(s, h1)) {
    report_corrupt(s, CorruptWhat::lane_word);
    return Front::corrupt;
  }
  if (!h1 && !f1) return Front::none;
  from_run = h1 && (!f1 || key1(s, h1) <= key1(s, f1));
  x1 = from_run ? h1 : f1;
  const std::uint32_t x = x1 - 1;
  const Word128 xw = slot_load(s, x);
  switch (SlotWord::state(xw)) {
    case SlotState::pending:
    case SlotState::aborted:
      if (!(lane_load(s, lane) == w)) return Front::settle;
      x_ctr = SlotWord::ctr(xw);
      return SlotWord::state(xw) == SlotState::pending ? Front::job : Front::husk;
    case SlotState::admitting:
      if (!from_run) break;  // admissions link only into runs
      // Only an admission linked here now is ours to settle: `w` may be an
      // old reading (a lane batch's later round starts from the word its
      // take wrote), and the slot that was its head since popped, freed and
      // admitted again for another lane. Committed by us before its
      // admitter found it cannot link it there, that job would be pending
      // in no lane. The word unchanged since the slot's reading says x is
      // this run's head (every pop moves the word's version on).
      if (!(lane_load(s, lane) == w)) return Front::settle;
      // An admission is published before it is linked: one that is not, at
      // a run's front, is a scribble (nothing would ever decide it).
      if (!admission_published(s, x, xw) && lane_load(s, lane) == w) {
        report_corrupt(s, CorruptWhat::slot_record);
        return Front::corrupt;
      }
      index_resolve(s, x, xw);  // committed or aborted after this (unless it moved on: read again)
      return Front::settle;
    case SlotState::returning:
      if (from_run) break;  // returning jobs link only into strays
      // The move that linked the node we found, not a later move of the
      // same job (taken, leased and back since, its node unlinked, and not
      // linked again yet): that one is its mover's to link. The node's tag
      // is 18 bits of its move's ctr, which come round in 2^18 moves; a
      // head that still leads to it, read after the slot word, says the
      // node is linked now, and so is the current move's (a job's node is
      // unlinked before it can be leased again).
      if ((SlotWord::ctr(xw) & UpLink::kTagMask) == UpLink::target_tag(f1head) &&
          s.lanes[lane].strays[0].load(std::memory_order_acquire) == f1head)
        finish_linking(s, lane, x, SlotWord::ctr(xw));
      return Front::settle;
    default:
      break;
  }
  // Taken (and maybe leased, completed, reused) by another claimer since we
  // read the lane word: read it again. Unchanged, the front is really this.
  if (!(lane_load(s, lane) == w)) return Front::settle;
  report_corrupt(s, CorruptWhat::lane_order);  // a linked node that is no job
  return Front::corrupt;
}

// One CAS of lane `lane`'s word that takes its front `x1` for this thread:
// pops it (run) or names it in a `take` step (strays), counting it active
// if it is a job, moving or dropping the token when `token`. On success `w`
// is the word written and `pass_now` says whether the cell at the head must
// be passed. On failure `w` holds the current word.
bool take_cas(Segment& s, std::uint32_t lane, Word128& w, const Word128& base, std::uint32_t x1, bool from_run,
              bool is_job, bool token, std::uint64_t st, std::uint64_t h, bool& pass_now, bool& corrupt) noexcept {
  pass_now = false;
  corrupt = false;
  SlotRecord& xr = s.slot(x1 - 1);
  Word128 nw = base;
  if (from_run) {
    std::uint64_t xl = xr.next.load(std::memory_order_acquire);
    if ((Link::tag(xl) & 0xFFF) != LaneWord::htag(base)) {
      // The head moved on under us (the lane word changed: read again), or,
      // if the word is still the one we read and the head's link still
      // disagrees with it, one of the two was scribbled: retrying would read
      // the same pair for ever.
      const Word128 now = lane_load(s, lane);
      if (now == w && (Link::tag(xr.next.load(std::memory_order_acquire)) & 0xFFF) != LaneWord::htag(base)) {
        report_corrupt(s, CorruptWhat::lane_order);
        corrupt = true;
        return false;
      }
      w = now;
      return false;
    }
    // The checks below judge x's link against `base`. The tag's 12 bits
    // come round: x may have left this run since, and been reused as another
    // run's last node, under a tag that agrees. So before a disagreement is
    // called corruption, the word is read again: moved on, it is only stale
    // (`AClaimWhoseHeadCameBackUnderAnAliasedTagIsNoCorruption`).
    const auto stale = [&] {
      const Word128 now = lane_load(s, lane);
      if (now == w) return false;
      w = now;
      return true;
    };
    std::uint32_t y1 = Link::succ(xl);
    if (y1 == 0) {
      if (LaneWord::tail(base) != x1) {
        if (stale()) return false;
        report_corrupt(s, CorruptWhat::lane_word);
        corrupt = true;
        return false;
      }
      // The last node: seal its link so that no append lands after a node
      // that is leaving (an appender that finds it sealed goes elsewhere).
      if (Link::mark(xl) != Link::kSealed) {
        if (!xr.next.compare_exchange_strong(xl, Link::make(0, Link::kSealed, Link::tag(xl)), std::memory_order_seq_cst)) {
          w = lane_load(s, lane);  // something was linked after it: read again
          return false;
        }
        FAIRLANE_FAILPOINT("claim.sealed");
      }
    }
    std::uint64_t ytag = 0, yl = 0;
    if (y1) {
      if (!valid_slot1(s, y1)) {
        if (stale()) return false;
        report_corrupt(s, CorruptWhat::lane_order);
        corrupt = true;
        return false;
      }
      yl = s.slot(y1 - 1).next.load(std::memory_order_acquire);
      ytag = Link::tag(yl);
    }
    nw = LaneWord::with_head(nw, y1, ytag & 0xFFF);
    // The tail is a node at or after x (lane_order.hpp). x was the tail: y
    // is the tail now, or the run is empty. Then the tail moves up by up to
    // two links, in this CAS: appends do not move it, and claims keep it
    // near the run's end for them (each claim takes one node from the run
    // and each append adds one, so two links a claim catch up). The links
    // are read while the word is `w`: if it moves, the CAS fails and they
    // are read again.
    const std::uint32_t tail0 = LaneWord::tail(base);
    std::uint32_t t1 = tail0;
    if (t1 == x1) t1 = y1;
    // (t1 is checked once: each hop moves it only to a successor that was
    // checked before the move.)
    if (valid_slot1(s, t1)) {
#pragma GCC unroll 2
      for (int hop = 0; hop < 2; ++hop) {
        const std::uint32_t m1 = Link::succ(s.slot(t1 - 1).next.load(std::memory_order_acquire));
        if (!valid_slot1(s, m1)) break;
        t1 = m1;
      }
    }
    nw = LaneWord::with_tail(nw, t1);
    // y is this lane's next job, claimed a turn of the ring from now: its
    // claim reads y's slot word and payload (y's first line is in cache
    // from the read above) and the link of y's successor z. Fetched now,
    // while the ring turns, they are no misses then: a drain is a chain of
    // such misses otherwise. Hints only (read intent; nothing read later
    // depends on them), and only of lines no producer is about to write:
    // y's payload was written before y was linked; y's word is committed by
    // its admitter before it links z after y (with one producer); z's first
    // line holds the link an append CASes while z is the last node, and z
    // is not while the tail (at or after x) is past it. In a shallow lane,
    // in a flow, the last two are left alone.
    if (y1) {
      __builtin_prefetch(s.payload(y1 - 1));
      if (const std::uint32_t z1 = Link::succ(yl); valid_slot1(s, z1)) {
        __builtin_prefetch(&s.words[y1 - 1]);
        if (tail0 != x1 && tail0 != y1 && tail0 != z1) __builtin_prefetch(&s.slot(z1 - 1));
      }
    }
  } else {
    nw = LaneWord::with_rel(nw, x1, RelOp::take);
    // The last node of the strays: the flag goes with it (an insert after
    // it makes its `linked` step after its link, a CAS of this word that
    // sets the flag again), so that a lane emptied here leaves the ring now.
    if (UpLink::succ(xr.next.load(std::memory_order_acquire)) == 0) nw = LaneWord::with_strays(nw, false);
  }
  if (is_job) nw = LaneWord::with_active(nw, LaneWord::active(base) + 1);
  if (token && is_job && !decide_token(s, lane, st, h, nw, pass_now)) {
    corrupt = true;
    return false;
  }
  FAIRLANE_FAILPOINT("claim.chosen");
  // [S3] seq_cst: takes x (its intent is visible first: [S8]), counts it
  // active, moves or drops the token, all in one step.
  // The word written, computed once: `w` is in memory for the asm, so the
  // compiler would compute it again after the CAS rather than keep it.
  const Word128 written = LaneWord::bumped(nw, w);
  if (!cas128(s.lanes[lane].word, w, written)) return false;
  w = written;
  return true;
}

// A husk this thread took out of lane `lane` at ctr `ctr`: released
// (release_husk: freed, or left to its admitter), and no longer counted in
// the lane's depth if it was in the run, by whoever released it (a sweep
// may settle our take too). Only that incarnation of the slot: a settler
// may have freed it meanwhile, and the slot been reused; and only that
// incarnation of the lane (`take_lane`, as its intent names it:
// intend_husk_take): the lane, emptied by our take, may have been given back
// and its record reused.
void drop_husk(Segment& s, std::uint64_t take_lane, std::uint32_t slot, bool from_run, std::uint64_t ctr) noexcept {
  const std::uint32_t lane = std::uint32_t(IntentLane::lane(take_lane));
  if (!from_run) {
    // The lane word still names it in the `take` step of our CAS. A job's
    // step is cleared by its lease's next step (a CAS of this word) before
    // its slot can be reused; a husk is freed now, so the step goes first:
    // applied to a reuse of the slot, it would mark a job that is not taken.
    lane_update(s, lane, [](Word128 b) -> std::optional<Word128> { return b; });
  }
  if (release_husk(s, slot, ctr) && from_run) husk_uncount(s, lane, IntentLane::inc(take_lane));
}

// After a take_cas of a strays front (`taken`: the word it wrote): mark it
// ours (the `take` step, which anyone may have applied already) and unlink
// it. The marking is made only while the lane word is still the one the take
// wrote: once it moved, whoever moved it applied the step (lane_base), and a
// taker that resumes after a sweep put its job back and relinked it must not
// mark the job's new links.
bool finish_take(Segment& s, std::uint32_t lane, std::uint32_t slot, const Word128& taken) noexcept {
  strays_mark(s, slot, lane, &taken);
  return strays_unlink(s, lane, slot) == OrderResult::ok;
}

// A lane met corrupt in serve() (which took `took` jobs of it, and has
// `passed` its token cell at h or not) gives its turn up so that the rest of
// the ring is served: the token cell is passed and the lane unringed, so a
// sweep rings it again (sweep_lanes) and a later claim tries it again. Only
// if the token is still ours: a word that moved on is somebody's progress.
// (Out of line and called directly: as a lambda in serve(), its captures
// cost every claim about 30 instructions.)
[[gnu::noinline, gnu::cold]] Step corrupt_turn(Segment& s, std::uint32_t lane, std::uint64_t h, bool passed,
                                               std::size_t took) noexcept {
  if (took) return Step::served;
  if (!passed) {
    const std::uint32_t tgen = std::uint32_t(h & LaneWord::kTgenMask);
    Word128 cur = lane_load(s, lane);
    const Word128 b = lane_base(s, lane, cur);
    if (LaneWord::state(b) == LaneState::live && LaneWord::holds_token(b, tgen) &&
        cas128(s.lanes[lane].word, cur, LaneWord::bumped(LaneWord::with_ringed(b, false), cur)))
      ring_pass(s, h);
  }
  return Step::corrupt;
}

// Serves lane `lane`, whose valid token is the cell at head position h: up
// to `want` jobs (one lane's turn, or a lane batch). Returns served (got
// grew), again (nothing taken: the caller reads the head again), or corrupt.
// `w_base` is lane_base of `w`, as the caller worked it out; `st` the
// lane's settings, read after `w`. The caller (ring_step) has found that
// `w_base` holds the token of h and is serviceable under `st`.
// `rec`: the calling thread's record if claim_some knew it (else it is
// looked up here, and a claim that serves nothing takes none).
Step serve(Segment& s, ThreadRecord* rec, std::uint32_t lane, std::uint64_t h, Word128 w, const Word128& w_base,
           std::uint64_t st, Lease* out, std::size_t want, std::size_t& got, std::uint64_t deadline,
           std::uint64_t now_us) noexcept {
  LaneRecord& l = s.lanes[lane];
  IntentGuard guard(s, rec ? rec : s.thread());
  const std::uint32_t tgen = std::uint32_t(h & LaneWord::kTgenMask);
  bool passed = false;  // the cell at h is no longer the token (we moved or dropped it)
  std::size_t took = 0;
  // Rounds that start from the very word the last one did. Every step of
  // the protocol that a round helps with (an admission decided, a return
  // linked, a link sealed) lets the next round take or write the word, so a
  // word that stays put round after round is one that no step moves:
  // scribbled bytes, answered corrupt rather than read 256 times.
  Word128 last = w;
  Word128 wrote = w;  // the word our last take wrote (the caller's reading at first)
  // Round 0 reads w == last == wrote by construction, and counts one look
  // at its word: it skips both compares (most turns are one round) and
  // starts the count at 1, as that round would have left it. Its base is
  // the caller's, which the caller checked as the checks below would (live,
  // ours, not paused, under the limit): round 0 skips those too.
  int same = 1;
  Word128 base = w_base;
  for (int rounds = 0; took < want && rounds < 256; ++rounds) {
    if (rounds != 0) {
      if (!(w == last)) {
        last = w;
        same = 0;
      } else if (++same > 8) {
        report_corrupt(s, CorruptWhat::lane_word);
        return corrupt_turn(s, lane, h, passed, took);
      }
      // A word read again (not the one our take wrote) comes with the
      // settings of now: a settings change is carried by a CAS of the
      // word, so settings read before that word may be older than it. A
      // take computed with them could de-ring a lane the change just made
      // serviceable (its author's CAS found it ringed and pushed nothing),
      // or serve a lane just paused.
      if (!(w == wrote)) st = lane_settings(s, lane);
      base = lane_base(s, lane, w);
      if (LaneWord::state(base) != LaneState::live) break;
      const bool ours = LaneWord::holds_token(base, tgen);
      if (!passed && !ours) break;  // another claimer moved the token: its turn now
      const std::uint64_t limit = Settings::limit(st);
      if (Settings::paused(st) || LaneWord::active(base) >= (limit ? limit : LaneWord::kActiveMax)) break;
    }

    std::uint32_t x1 = 0;
    bool from_run = false;
    std::uint64_t taken_ctr = 0;
    const Front f = read_front(s, lane, w, base, x1, from_run, taken_ctr);
    if (f == Front::corrupt) return corrupt_turn(s, lane, h, passed, took);
    if (f == Front::settle) {
      w = lane_load(s, lane);
      continue;
    }
    if (f == Front::none) {
      // Nothing left. The strays flag goes (a `linked` step always follows
      // an insert, so this CAS fails if one just landed: [S7]), and so does
      // the token if it is still ours.
      Word128 nw = LaneWord::with_strays(base, false);
      if (!passed) nw = LaneWord::with_ringed(nw, false);
      if (cas128(l.word, w, LaneWord::bumped(nw, w))) {
        if (!passed) ring_pass(s, h);
        passed = true;
        break;
      }
      continue;
    }
    const bool is_job = f == Front::job;
    const std::uint32_t x = x1 - 1;
    const std::uint64_t take_lane = intend_take(s, guard, is_job, from_run, x, taken_ctr, lane, deadline, now_us);
    FAIRLANE_FAILPOINT("claim.intent_set");
    bool pass_now = false, corrupt = false;
    if (!take_cas(s, lane, w, base, x1, from_run, is_job, !passed, st, h, pass_now, corrupt)) {
      guard.clear();
      if (corrupt) return corrupt_turn(s, lane, h, passed, took);
      continue;  // w holds the current word; a cell we pushed is stale now
    }
    const Word128 taken_word = w;  // the word our take wrote
    wrote = w;
    FAIRLANE_FAILPOINT("claim.taken");
    if (pass_now) {
      ring_pass(s, h);
      passed = true;
      FAIRLANE_FAILPOINT("claim.token_moved");
    } else if (is_job && !passed) {
      spend_turn(s, lane, st, h, turn_left(s, lane, st, h));
    }
    if (!from_run && !finish_take(s, lane, x, taken_word)) return corrupt_turn(s, lane, h, passed, took);
    if (!is_job) {
      drop_husk(s, take_lane, x, from_run, taken_ctr);
      guard.clear();
      continue;
    }
    const Leased le = lease_job(s, x, lane, deadline, now_us, taken_ctr, out[got]);
    if (le == Leased::lost) {
      guard.clear();
      w = lane_load(s, lane);
      continue;
    }
    if (le == Leased::corrupt) {
      unreserve(s, lane);
      guard.clear();
      return corrupt_turn(s, lane, h, passed, took);
    }
    guard.clear();
    bump(s.waits[lane].b[wait_bucket(out[got].waited_us)]);
    bump(l.served);
    log_job(s, x);
    ++got;
    ++took;
  }
  return took ? Step::served : Step::again;
}

// The head cell `c`, at position h, is written for an earlier lap, not for
// h, though the tail hint is past h + 1: a gap (the hint was scribbled
// ahead of the last push). It is filled with a cell written for h that
// names no lane (RingCell::kSkip), which the next step passes: the CAS
// makes a pusher that is still about to write h fail and take the next
// position, so nothing it pushes is ever behind the head. Lost to such a
// pusher, it is no gap: the next step serves what it pushed. `c` must be
// of an earlier lap: a cell of a later one is a live cell (maybe a token)
// that a step which read the head a lap ago would destroy.
[[gnu::noinline, gnu::cold]] Step fill_gap(Segment& s, std::uint64_t h, std::uint64_t c) noexcept {
  if (s.ring[h & s.ring_mask].compare_exchange_strong(c, RingCell::make(h, RingCell::kSkip), std::memory_order_seq_cst))
    report_corrupt(s, CorruptWhat::ring_cell);
  return Step::again;
}

// How often an empty look of a claim that does not look hard reads the
// ring's tail hint to tell a gap (below) from an empty ring: one empty look
// in this many of a thread at one handle, and the first. Counted per thread
// and handle: with one count per thread, a thread polling two queues in
// turn put all of one queue's looks between the asking ones, and that
// queue's gap was never filled; a fresh process's single try_claim (the
// CLI's `claim`) never asked (found in review:
// `FsckTest.TwoQueuesPolledInTurnEachFindTheirGap`,
// `FsckCli.AClaimWithoutWaitFindsAGap`). A thread that turns from one
// handle to another asks at its first empty look at each.
constexpr std::uint32_t kTailLookEvery = 64;
struct EmptyLooks {
  std::uint64_t handle = 0;  // Segment::handle_id (never 0)
  std::uint32_t count = 0;
};
thread_local EmptyLooks t_empty_looks;

// Does this empty look read the tail hint?
bool ask_tail(const Segment& s) noexcept {
  EmptyLooks& e = t_empty_looks;
  if (e.handle != s.handle_id) {
    e.handle = s.handle_id;
    e.count = 0;
    return true;
  }
  return ++e.count % kTailLookEvery == 0;
}

// The head cell `c`, at position h, is not written for h: a later lap's,
// an empty ring, or a gap. Out of line: inline, its counting of empty looks
// tipped GCC into calling take_cas rather than inlining it (the claim's
// count 799 -> 867).
[[gnu::noinline]] Step unwritten_head(Segment& s, std::uint64_t h, std::uint64_t c, bool look_hard) noexcept {
  // Written for a later lap: the head moved on (a lap of it) since we
  // read it. Read it again; that cell may be a lane's token.
  if (std::int32_t(RingCell::pos(c) - std::uint32_t(h)) > 0) return Step::again;
  // Empty, unless a push went past h: a pusher writes the first position
  // not yet written from the hint on, and moves the hint past it only
  // after, so positions below a hint are written (or were, and passed).
  // A hint scribbled ahead leaves a gap nobody writes.
  //
  // Only a scribble makes a gap, so most empty looks do not ask: the
  // hint's line is written by every push, and a consumer polling an empty
  // queue that read it at every look took it from the producer each time
  // (with cheap line moves the bare flow ran 15-38% slower:
  // docs/perf/bare-flow-2026-12-06c.txt). One look in
  // kTailLookEvery of a thread at a handle asks (and its first), and every
  // look of claim_wait (look_hard), whose empty answer puts it to sleep.
  if (!look_hard && !ask_tail(s)) return Step::empty;
  if (s.h->ring_tail.load(std::memory_order_acquire) <= h + 1) return Step::empty;
  // A gap is as many cells as the hint was moved ahead: the next empty
  // look of this thread at this handle (this claim's next step) asks again.
  t_empty_looks = EmptyLooks{s.handle_id, kTailLookEvery - 1};
  return fill_gap(s, h, c);
}

// One ring step: serves the lane at the head, or passes a stale cell.
// `look_hard`: an empty ring is told from a gap at every empty look
// (unwritten_head), not at one in kTailLookEvery.
Step ring_step(Segment& s, ThreadRecord* rec, Lease* out, std::size_t want_max, std::size_t& got, std::uint64_t deadline,
               std::uint64_t now_us, bool one_lane, bool look_hard) noexcept {
  const std::uint64_t h = s.h->ring_head.load(std::memory_order_acquire);
  FAIRLANE_FAILPOINT("ring.head_read");
  // [S2] seq_cst: pairs with the push [S1] and a waiter's registration [S5].
  const std::uint64_t c = s.ring[h & s.ring_mask].load(std::memory_order_seq_cst);
  if (!cell_written_for(c, h)) return unwritten_head(s, h, c, look_hard);
  const std::uint32_t lane1 = RingCell::lane1(c);
  if (lane1 == 0 || lane1 > s.lane_count) {
    if (lane1 != RingCell::kSkip) report_corrupt(s, CorruptWhat::ring_cell);  // a filled gap was reported when filled
    ring_pass(s, h);
    return Step::again;
  }
  const std::uint32_t lane = lane1 - 1;
  // The lane after this one is the next claim's: its record's first line
  // (word, settings) is fetched while this one is served. Over many lanes
  // those lines are out of cache, and that miss is most of a claim's time.
  // A hint only: the cell may be unwritten or stale, and is checked again
  // when it is the head.
  if (const std::uint32_t next1 = RingCell::lane1(s.ring[(h + 1) & s.ring_mask].load(std::memory_order_relaxed));
      next1 != 0 && next1 <= s.lane_count)
    __builtin_prefetch(&s.lanes[next1 - 1], 1);
  LaneRecord& l = s.lanes[lane];
  FAIRLANE_FAILPOINT("ring.cell_read");
  Word128 w = lane_load(s, lane);
  if (LaneWord::state(w) != LaneState::live) {
    ring_pass(s, h);  // a lane reclaimed since: its cells are all stale
    return Step::again;
  }
  const std::uint64_t st = lane_settings(s, lane);
  const Word128 base = lane_base(s, lane, w);
  const std::uint32_t tgen = std::uint32_t(h & LaneWord::kTgenMask);
  if (!LaneWord::holds_token(base, tgen)) {
    if (!LaneWord::ringed(base)) {
      if (lane_serviceable(base, st)) {
        // Not ringed but serviceable: a ringer is between its push and its
        // CAS, or a settings change between its settings CAS and its lane
        // CAS (or a turn cut short by a corrupt front left it so). Ring it
        // as any ringer does: a cell pushed at the tail, then the CAS (the
        // ringer's own CAS then fails and finds it ringed). Not with this
        // cell: h was read before the word, and the head may have passed it
        // since (a claimer that read this cell and an older word passes it
        // without a CAS), which would leave the lane ringed with no token,
        // never served again. Once the CAS holds this cell is stale, and is
        // passed: with no room in the ring (corrupt) the CAS is made
        // without ringing, and passing is what gives the room back.
        if (lane_cas(s, lane, w, base)) ring_pass(s, h);
        return Step::again;
      }
      // Not serviceable: a ringer's CAS computed before this cell was pushed
      // must fail (it would make a passed cell its token).
      if (!cas128(l.word, w, LaneWord::bumped(base, w))) return Step::again;
    }
    ring_pass(s, h);
    return Step::again;
  }
  if (!lane_serviceable(base, st)) {
    if (cas128(l.word, w, LaneWord::bumped(LaneWord::with_ringed(base, false), w))) ring_pass(s, h);
    return Step::again;
  }
  std::size_t want = one_lane ? want_max : std::min<std::size_t>(want_max, Settings::weight(st));
  if (const std::uint64_t limit = Settings::limit(st))
    want = std::min<std::size_t>(want, limit > LaneWord::active(base) ? limit - LaneWord::active(base) : 0);
  if (want == 0) want = 1;
  return serve(s, rec, lane, h, w, base, st, out, want, got, deadline, now_us);
}

}  // namespace

void fill_lease(const Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint32_t attempt, Token token,
                std::uint64_t deadline, std::uint64_t now_us, Lease& out) {
  const SlotRecord& r = s.slot(slot);
  const std::uint64_t a = r.digits.load(std::memory_order_relaxed);
  const std::uint32_t b = r.digits_tail.load(std::memory_order_relaxed);
  // The digits were written by the admitter from a checked id; a scribbled
  // one is rebuilt from the snowflake rather than handed out.
  if (digit_words_valid(a, b)) {
    std::uint64_t w0, w1;
    id_words(s, a, b, w0, w1);
    IdAccess::assign_words(out.id, w0, w1);
  } else {
    out.id = BrandedId::make(std::string_view(s.kind, 3), r.sf.load(std::memory_order_relaxed) & ((1ULL << 63) - 1));
  }
  if (lane == kDefaultLane)
    IdAccess::assign_words(out.group, kDefaultGroupW0, kDefaultGroupW1);
  else
    cached_group(s, lane, out.group);
  out.attempt = attempt;
  out.token = token;
  out.deadline_ms = deadline;
  const std::uint64_t ready = r.ready_us.load(std::memory_order_relaxed);
  out.waited_us = now_us > ready ? now_us - ready : 0;
  const std::uint32_t len = std::min(r.payload_len.load(std::memory_order_relaxed), s.payload_bytes);
  // resize and copy rather than assign: a Lease reused from claim to claim
  // keeps its size, and assign's general path (overlap checks, a call
  // through _M_replace) costs more than the copy.
  out.payload.resize(len);
  std::memcpy(out.payload.data(), Segment::payload_of(r), len);
  if (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
    decode_retry_of(r, out.retry);
  else
    out.retry = RetryPolicy{};
}

namespace {

// claim_some's body: inlined into Queue::try_claim (below), the claim of one
// job, so that it pays no call and no frame of its own (the claim counted
// 816 instructions with them, 802 without), and into claim_some for the
// batches.
[[gnu::always_inline]] inline ClaimStatus claim_in(Segment& s, Lease* out, std::size_t room, std::size_t& got,
                                                   std::uint32_t lease_ms, std::uint64_t now_us, bool one_lane,
                                                   bool look_hard) noexcept {
  got = 0;
  if (!writer(s)) return ClaimStatus::read_only;
  if (room == 0) return ClaimStatus::empty;
  const std::uint64_t now = now_us / 1000;
  maybe_sweep(s, now);
  // seq_cst: pairs with resume_all's seq_cst store and notify ([S5]).
  if (s.h->queue_paused.load(std::memory_order_seq_cst)) return ClaimStatus::paused;
  const std::uint64_t deadline = now + lease_ms;
  // The calling thread's record for the intent guards and the counter,
  // looked up once: from the thread's cache only, so that a claim that
  // finds nothing takes no record (serve() takes one the first time).
  ThreadRecord* const rec = s.thread_if_known();
  bool corrupt = false;
  // Each step serves a lane or passes a cell; the ring holds at most
  // ring_cells cells, so a pass over it ends.
  const std::uint64_t budget = 2 * (s.ring_mask + 1) + 64;
  // Counted in a local, not through `got`: a count the steps take by
  // reference is one the compiler keeps in memory otherwise.
  std::size_t n = 0;
  for (std::uint64_t steps = 0; n < room && steps < budget; ++steps) {
    const Step r = ring_step(s, rec, out, room - n, n, deadline, now_us, one_lane, look_hard);
    if (r == Step::empty) break;
    if (r == Step::corrupt) corrupt = true;
    if (r == Step::served && one_lane) break;
  }
  got = n;
  if (n) {
    lower_next_due(s, deadline);
    // A record serve() took is in the thread's cache now; with none free,
    // the process's counters (thread() would scan every record again).
    count(s, rec ? rec : s.thread_if_known(), &CounterBlock::claimed, n);
    return ClaimStatus::claimed;
  }
  return corrupt ? ClaimStatus::corrupt : ClaimStatus::empty;
}

}  // namespace

ClaimStatus claim_some(Segment& s, Lease* out, std::size_t room, std::size_t& got, std::uint32_t lease_ms,
                       std::uint64_t now_us, bool one_lane, bool look_hard) noexcept {
  return claim_in(s, out, room, got, lease_ms, now_us, one_lane, look_hard);
}

void pop_front_husks(Segment& s, std::uint32_t lane) noexcept {
  if (!writer(s) || lane >= s.lane_count) return;
  IntentGuard guard(s);
  Word128 w = lane_load(s, lane);
  for (std::uint32_t rounds = 0; rounds < 1024; ++rounds) {
    const Word128 base = lane_base(s, lane, w);
    if (LaneWord::state(base) != LaneState::live) return;
    std::uint32_t x1 = 0;
    bool from_run = false;
    std::uint64_t taken_ctr = 0;
    const Front f = read_front(s, lane, w, base, x1, from_run, taken_ctr);
    if (f == Front::settle) {
      w = lane_load(s, lane);
      continue;
    }
    if (f == Front::none && LaneWord::strays(base)) {
      // Emptied: the strays flag goes, as a claim's would ([S7]).
      if (cas128(s.lanes[lane].word, w, LaneWord::bumped(LaneWord::with_strays(base, false), w))) return;
      continue;
    }
    if (f != Front::husk) return;
    const std::uint32_t x = x1 - 1;
    const std::uint64_t take_lane =
        intend_husk_take(s, guard, from_run ? Intent::pop_run : Intent::pop_strays, x, taken_ctr, lane, segment_now_us(s));
    bool pass_now = false, corrupt = false;
    if (!take_cas(s, lane, w, base, x1, from_run, false, false, 0, 0, pass_now, corrupt)) {
      guard.clear();
      if (corrupt) return;
      continue;
    }
    const Word128 taken_word = w;
    if (!from_run && !finish_take(s, lane, x, taken_word)) return;
    drop_husk(s, take_lane, x, from_run, taken_ctr);
    guard.clear();
  }
}

ClaimStatus take_front(Segment& s, std::uint32_t lane, Lease& out, std::uint32_t lease_ms, std::uint64_t now_us) noexcept {
  if (!writer(s)) return ClaimStatus::read_only;
  IntentGuard guard(s);
  const std::uint64_t deadline = now_us / 1000 + lease_ms;
  Word128 w = lane_load(s, lane);
  // As in serve(): only rounds that start from the word the last one did
  // count (another thread's step moves it; bytes nobody writes do not),
  // and the husks we pop (a run that loops would have us pop for ever).
  SameLaneRounds rounds;
  std::uint64_t husks = 0;
  for (;;) {
    if (rounds.stuck(lane, w)) break;
    const Word128 base = lane_base(s, lane, w);
    if (LaneWord::state(base) != LaneState::live) return ClaimStatus::empty;
    std::uint32_t x1 = 0;
    bool from_run = false;
    std::uint64_t taken_ctr = 0;
    const Front f = read_front(s, lane, w, base, x1, from_run, taken_ctr);
    if (f == Front::corrupt) return ClaimStatus::corrupt;
    if (f == Front::none) return ClaimStatus::empty;
    if (f == Front::settle) {
      w = lane_load(s, lane);
      continue;
    }
    // A drain takes past any limit: it is not a claim a limit is for, but
    // the count field has a width.
    if (f == Front::job && LaneWord::active(base) >= LaneWord::kActiveMax) return ClaimStatus::empty;
    const bool is_job = f == Front::job;
    const std::uint32_t x = x1 - 1;
    const std::uint64_t take_lane = intend_take(s, guard, is_job, from_run, x, taken_ctr, lane, deadline, now_us);
    FAIRLANE_FAILPOINT("claim.intent_set");
    bool pass_now = false, corrupt = false;
    // No token: the turn stays where it is (a lane that runs empty leaves
    // the ring at its next turn).
    if (!take_cas(s, lane, w, base, x1, from_run, is_job, false, 0, 0, pass_now, corrupt)) {
      guard.clear();
      if (corrupt) return ClaimStatus::corrupt;
      continue;
    }
    const Word128 taken_word = w;
    if (!from_run && !finish_take(s, lane, x, taken_word)) return ClaimStatus::corrupt;
    if (!is_job) {
      drop_husk(s, take_lane, x, from_run, taken_ctr);
      guard.clear();
      if (++husks > 4 * std::uint64_t(s.jobs) + 64) break;
      continue;
    }
    const Leased le = lease_job(s, x, lane, deadline, now_us, taken_ctr, out);
    if (le == Leased::lost) {
      guard.clear();
      w = lane_load(s, lane);
      continue;
    }
    if (le == Leased::corrupt) {
      unreserve(s, lane);
      return ClaimStatus::corrupt;
    }
    guard.clear();
    return ClaimStatus::claimed;
  }
  report_corrupt(s, CorruptWhat::lane_order);
  return ClaimStatus::corrupt;
}

}  // namespace fairlane::detail

namespace fairlane {

// Here rather than in queue.cpp, with the claims: claim_in inlines into it.
ClaimStatus Queue::try_claim(Lease& out, std::uint32_t lease_ms) noexcept {
  std::size_t got = 0;
  return detail::claim_in(*seg_, &out, 1, got, lease_ms, detail::segment_now_us(*seg_), false, false);
}

}  // namespace fairlane
