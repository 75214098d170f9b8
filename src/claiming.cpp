// Claiming: a ring step, the choice of a lane's oldest job, the lease.
//
// One ring step (ring_step):
//   1. read the head position h and its cell; it names lane L;
//   2. read L's lane word: if the cell is not L's token, pass it (ringing L
//      with it, or poking L's word first, if L is not ringed: ring.hpp);
//      if L is not serviceable, de-ring it and pass the cell;
//   3. take L's oldest job: the run's head (one CAS of the lane word pops it,
//      counts it active and, when the turn is over, moves L's token to a
//      cell pushed at the tail), or the strays' minimum (mark it ours, then
//      the same CAS without the pop);
//   4. pass the old cell if the token moved or the lane left the ring;
//   5. lease the job: CAS its slot word to leased with the next ctr (the
//      token), the deadline and this process as holder.
// Between 3 and 5 the job is held by this thread alone: its intent (thread
// record) names it, so that if the process dies there the sweep puts it back
// (core.hpp settle_intent); if the process is only stopped, that job is its
// reservation and nothing else waits for it.
#include <algorithm>
#include <array>
#include <cstring>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"
#include "util.hpp"

namespace fairlane::detail {

namespace {

// The group of a lane as a BrandedId, cached per thread (encoding an id
// costs eleven divisions; a claim should not pay that). Keyed by the lane's
// incarnation, so a reclaimed lane is never answered with its old group.
BrandedId cached_group(const Segment& s, std::uint32_t lane) noexcept {
  struct Entry {
    std::uint64_t handle = 0, lane = 0, inc = 0;
    BrandedId id;
  };
  thread_local std::array<Entry, 256> cache{};
  const std::uint64_t inc = s.lanes[lane].key_kind.load(std::memory_order_acquire);
  Entry& e = cache[lane & 255];
  if (e.handle == s.handle_id && e.lane == lane && e.inc == inc) return e.id;
  e.handle = s.handle_id;
  e.lane = lane;
  e.inc = inc;
  e.id = lane_group(s, lane);
  return e.id;
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

struct Intent2 {
  std::atomic<std::uint64_t>* intent = nullptr;
  std::atomic<std::uint64_t>* lane = nullptr;
  std::atomic<std::uint64_t>* tid = nullptr;  // the fallback record's owner word, when used
};

// Where this thread writes its intent: its thread record, or the process
// record's fallback (taken by CAS, shared by threads without a record).
Intent2 intent_slot(Segment& s) noexcept {
  if (ThreadRecord* t = s.thread()) return {&t->intent, &t->intent_lane, nullptr};
  if (!s.me) return {};
  const std::uint64_t me = std::uint64_t(gettid_cached());
  std::uint64_t free = 0;
  // Threads of one process only: waiting here never waits on another process.
  while (!s.me->intent_tid.compare_exchange_weak(free, me, std::memory_order_acquire, std::memory_order_relaxed)) {
    free = 0;
    cpu_pause();
  }
  return {&s.me->intent, &s.me->intent_lane, &s.me->intent_tid};
}

void intent_set(Intent2& in, std::uint32_t slot, std::uint64_t ctr, std::uint32_t lane) noexcept {
  if (!in.intent) return;
  in.lane->store(lane, std::memory_order_relaxed);
  // Release: a survivor that reads the intent (acquire) sees the lane too.
  // It is ordered before the CAS that takes the job out of its lane by that
  // CAS (seq_cst), so the intent is visible whenever the taking is ([S8]).
  in.intent->store(std::uint64_t(Intent::popping) | (std::uint64_t(slot + 1) << 4) | ((ctr & ((1ULL << 34) - 1)) << 30),
                   std::memory_order_release);
}
void intent_clear(Intent2& in) noexcept {
  if (!in.intent) return;
  in.intent->store(0, std::memory_order_release);
}
void intent_release(Intent2& in) noexcept {
  if (in.tid) in.tid->store(0, std::memory_order_release);
}

struct IntentGuard {
  Segment& s;
  Intent2 in;
  explicit IntentGuard(Segment& seg) noexcept : s(seg), in(intent_slot(seg)) {}
  ~IntentGuard() {
    intent_clear(in);
    intent_release(in);
  }
};

enum class Step { served, again, empty, corrupt };

// The lease of a job this thread holds (popped or taken, counted active).
// Returns false if the slot is not a job after all (aborted, or scribbled):
// then the active count it took must be given back by the caller.
bool lease_job(Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint64_t deadline, std::uint64_t now_us,
               Lease& out) noexcept {
  Word128 w = slot_load(s, slot);
  for (;;) {
    SlotState st = SlotWord::state(w);
    if (st == SlotState::admitting) {
      if (!index_resolve(s, slot)) return false;
      w = slot_load(s, slot);
      continue;
    }
    if (st != SlotState::pending && st != SlotState::returning) return false;
    const std::uint32_t attempt = std::min<std::uint32_t>(SlotWord::attempt(w) + 1, SlotWord::kMaxAttempt);
    const std::uint64_t ctr = SlotWord::ctr(w) + 1;
    // [R6] release (cas128): the lease is published; pairs with the
    // acquire loads of complete/fail/extend/release and the sweep.
    if (!slot_cas(s, slot, w, SlotWord::make(SlotState::leased, attempt, deadline, ctr, my_holder(s)))) continue;
    FAIRLANE_FAILPOINT("claim.leased");
    fill_lease(s, slot, lane, attempt, make_token(s, slot, ctr), deadline, now_us, out);
    return true;
  }
}

// Frees a slot that holds no job (aborted) which this thread took out of
// its lane.
void discard(Segment& s, std::uint32_t slot) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::aborted)
    if (slot_cas(s, slot, w, SlotWord::make(SlotState::free, 0, 0, SlotWord::ctr(w), 0))) return;
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
std::uint32_t turn_left(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint32_t tgen) noexcept {
  const std::uint32_t weight = Settings::weight(st);
  if (weight <= 1) return 1;
  const std::uint64_t t = s.lanes[lane].turn.load(std::memory_order_relaxed);
  return Turn::tgen(t) == tgen ? std::max<std::uint32_t>(Turn::left(t), 1) : weight;
}
void spend_turn(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint32_t tgen, std::uint32_t left) noexcept {
  if (Settings::weight(st) <= 1) return;
  std::atomic<std::uint64_t>& turn = s.lanes[lane].turn;
  std::uint64_t t = turn.load(std::memory_order_relaxed);
  // Relaxed: a count read and written by claimers only; a lost race only
  // makes a turn one claim longer or shorter.
  turn.compare_exchange_strong(t, Turn::make(tgen, left - 1, t), std::memory_order_relaxed);
}

std::uint64_t key1(const Segment& s, std::uint32_t slot1) noexcept {
  return s.slot(slot1 - 1).sf.load(std::memory_order_acquire);
}

// The token decision of a CAS that takes one job: move it (the turn is
// over: a cell is pushed now, before the CAS, as ring.hpp requires), drop it
// (the lane stops being serviceable), or leave it at the head. Returns false
// if the ring is full (corrupt).
bool decide_token(Segment& s, std::uint32_t lane, std::uint64_t st, std::uint32_t tgen, Word128& nw, bool& pass_now) noexcept {
  pass_now = false;
  if (!lane_serviceable(nw, st)) {
    nw = LaneWord::with_ringed(nw, false);
    pass_now = true;
    return true;
  }
  if (turn_left(s, lane, st, tgen) > 1) return true;
  const std::uint64_t t = ring_push(s, lane);
  if (t == ~0ULL) {
    report_corrupt(s, CorruptWhat::ring_cell);
    return false;
  }
  nw = LaneWord::with_tgen(nw, std::uint32_t(t & LaneWord::kTgenMask));
  pass_now = true;
  return true;
}

// Serves lane `lane`, whose valid token is the cell at head position h: up
// to `want` jobs (one lane's turn, or a lane batch). Returns served (got
// grew), again (nothing taken: the caller reads the head again), or corrupt.
Step serve(Segment& s, std::uint32_t lane, std::uint64_t h, Word128 w, std::uint64_t st, Lease* out,
           std::size_t want, std::size_t& got, std::uint64_t deadline, std::uint64_t now_us) noexcept {
  LaneRecord& l = s.lanes[lane];
  IntentGuard guard(s);
  const std::uint32_t tgen = std::uint32_t(h & LaneWord::kTgenMask);
  bool passed = false;  // the cell at h is no longer the token (we moved or dropped it)
  std::size_t took = 0;
  auto result = [&](Step fallback) { return took ? Step::served : fallback; };
  for (int rounds = 0; took < want && rounds < 256; ++rounds) {
    const Word128 base = lane_base(s, lane, w);
    if (LaneWord::state(base) != LaneState::live) break;
    const bool ours = LaneWord::ringed(base) && LaneWord::tgen(base) == tgen;
    if (!passed && !ours) break;  // another claimer moved the token: its turn now
    const std::uint64_t limit = Settings::limit(st);
    if (Settings::paused(st) || (limit && LaneWord::active(base) >= limit)) break;

    // The oldest job: the run's head or the strays' minimum.
    const std::uint32_t h1 = LaneWord::head(base);
    std::uint32_t f1 = 0;
    OrderResult fr = OrderResult::empty;
    if (LaneWord::strays(base)) f1 = strays_first(s, lane, fr);
    if (fr == OrderResult::corrupt) return result(Step::corrupt);
    if (h1 && !valid_slot1(s, h1)) {
      report_corrupt(s, CorruptWhat::lane_word);
      return result(Step::corrupt);
    }
    if (!h1 && !f1) {
      // Nothing left. The strays flag goes (an inserter always CASes the
      // lane word after linking, so this CAS fails if one just did: [S7]),
      // and so does the token if it is still ours.
      Word128 nw = LaneWord::with_strays(base, false);
      if (!passed) nw = LaneWord::with_ringed(nw, false);
      if (cas128(l.word, w, LaneWord::bumped(nw, w))) {
        if (!passed) ring_pass(s, h);
        passed = true;
        break;
      }
      continue;
    }
    const bool from_run = h1 && (!f1 || key1(s, h1) <= key1(s, f1));
    const std::uint32_t x1 = from_run ? h1 : f1;
    const std::uint32_t x = x1 - 1;
    const Word128 xw = slot_load(s, x);
    const SlotState xs = SlotWord::state(xw);
    if (xs == SlotState::admitting) {
      index_resolve(s, x);  // committed or aborted after this; look again
      w = lane_load(s, lane);
      continue;
    }
    const bool is_job = xs == SlotState::pending || xs == SlotState::returning;
    if (!is_job && xs != SlotState::aborted) {
      report_corrupt(s, CorruptWhat::lane_order);  // a linked node that is no job
      return result(Step::corrupt);
    }
    if (is_job) intent_set(guard.in, x, SlotWord::ctr(xw), lane);

    bool pass_now = false;
    if (from_run) {
      SlotRecord& xr = s.slot(x);
      const std::uint64_t xl = xr.next.load(std::memory_order_acquire);
      if ((Link::tag(xl) & 0xFFF) != LaneWord::htag(base)) {  // the head moved on under us
        w = lane_load(s, lane);
        continue;
      }
      const std::uint32_t y1 = Link::succ(xl);
      std::uint64_t ytag = 0;
      if (y1) {
        if (!valid_slot1(s, y1)) {
          report_corrupt(s, CorruptWhat::lane_order);
          return result(Step::corrupt);
        }
        ytag = Link::tag(s.slot(y1 - 1).next.load(std::memory_order_acquire));
      }
      Word128 nw = LaneWord::with_head(base, y1, ytag & 0xFFF);
      // x was last: y (linked after it, not yet confirmed) is last now, or
      // the run is empty (a link that races this CAS is found orphaned by
      // its appender and appended again: lane_order.hpp).
      if (LaneWord::tail(base) == x1) nw = LaneWord::with_tail(nw, y1);
      if (is_job) {
        nw = LaneWord::with_active(nw, LaneWord::active(base) + 1);
        if (!passed && !decide_token(s, lane, st, tgen, nw, pass_now)) return result(Step::corrupt);
      }
      FAIRLANE_FAILPOINT("claim.chosen");
      // [S3] seq_cst: pops x (its intent is visible first: [S8]), counts it
      // active, moves or drops the token, all in one step.
      if (!cas128(l.word, w, LaneWord::bumped(nw, w))) {
        intent_clear(guard.in);
        continue;  // w holds the current word; a cell we pushed is stale now
      }
      w = LaneWord::bumped(nw, w);
    } else {
      // Strays: mark it ours first (strays_take), then count it.
      if (strays_take(s, lane, f1) != OrderResult::ok) {
        intent_clear(guard.in);
        w = lane_load(s, lane);
        continue;
      }
      FAIRLANE_FAILPOINT("claim.strays_taken");
      for (int tries = 0;; ++tries) {
        const Word128 b2 = lane_base(s, lane, w);
        Word128 nw = b2;
        if (is_job) {
          nw = LaneWord::with_active(nw, LaneWord::active(b2) + 1);
          // Each attempt pushes its own cell: a cell pushed for an earlier
          // reading may have been passed since.
          const bool still_ours = LaneWord::ringed(b2) && LaneWord::tgen(b2) == tgen;
          if (!passed && still_ours && !decide_token(s, lane, st, tgen, nw, pass_now)) return result(Step::corrupt);
          if (!still_ours) {
            passed = true;
            pass_now = false;
          }
        }
        if (cas128(l.word, w, LaneWord::bumped(nw, w))) {
          w = LaneWord::bumped(nw, w);
          break;
        }
        if (tries > 1000000) return result(Step::corrupt);
      }
    }
    FAIRLANE_FAILPOINT("claim.popped");
    if (pass_now) {
      ring_pass(s, h);
      passed = true;
      FAIRLANE_FAILPOINT("claim.token_moved");
    } else if (is_job && !passed) {
      spend_turn(s, lane, st, tgen, turn_left(s, lane, st, tgen));
    }
    if (!is_job) {
      discard(s, x);
      continue;
    }
    if (!lease_job(s, x, lane, deadline, now_us, out[got])) {
      // Not a job after all (its admission was decided against it): give
      // back the count and free what is left of it.
      unreserve(s, lane);
      discard(s, x);
      w = lane_load(s, lane);
      continue;
    }
    intent_clear(guard.in);
    bump(s.waits[lane].b[wait_bucket(out[got].waited_us)]);
    bump(l.served);
    log_job(s, x);
    ++got;
    ++took;
  }
  return result(Step::again);
}

// One ring step: serves the lane at the head, or passes a stale cell.
Step ring_step(Segment& s, Lease* out, std::size_t want_max, std::size_t& got, std::uint64_t deadline,
               std::uint64_t now_us, bool one_lane) noexcept {
  const std::uint64_t h = s.h->ring_head.load(std::memory_order_acquire);
  // [S2] seq_cst: pairs with the push [S1] and a waiter's registration [S5].
  const std::uint64_t c = s.ring[h & s.ring_mask].load(std::memory_order_seq_cst);
  if (!cell_written_for(c, h)) return Step::empty;
  const std::uint32_t lane1 = RingCell::lane1(c);
  if (lane1 == 0 || lane1 > s.lane_count) {
    report_corrupt(s, CorruptWhat::ring_cell);
    ring_pass(s, h);
    return Step::again;
  }
  const std::uint32_t lane = lane1 - 1;
  LaneRecord& l = s.lanes[lane];
  Word128 w = lane_load(s, lane);
  if (LaneWord::state(w) != LaneState::live) {
    ring_pass(s, h);  // a lane reclaimed since: its cells are all stale
    return Step::again;
  }
  const std::uint64_t st = lane_settings(s, lane);
  const Word128 base = lane_base(s, lane, w);
  const std::uint32_t tgen = std::uint32_t(h & LaneWord::kTgenMask);
  if (!(LaneWord::ringed(base) && LaneWord::tgen(base) == tgen)) {
    if (!LaneWord::ringed(base)) {
      if (lane_serviceable(base, st)) {
        // Not ringed but serviceable: a ringer is between its push and its
        // CAS, or the token was lost to a scribble. This cell becomes its
        // token (the ringer's CAS then fails and finds it ringed).
        cas128(l.word, w, LaneWord::bumped(LaneWord::with_tgen(LaneWord::with_ringed(base, true), tgen), w));
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
  return serve(s, lane, h, w, st, out, want, got, deadline, now_us);
}

}  // namespace

void fill_lease(const Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint32_t attempt, Token token,
                std::uint64_t deadline, std::uint64_t now_us, Lease& out) {
  const SlotRecord& r = s.slot(slot);
  char text[kIdLength];
  load_id_text(s, r, text);
  // The digits were written by the admitter from a checked id; a scribbled
  // one is rebuilt from the snowflake rather than handed out.
  if (digits_valid(text + kKindLength)) out.id = IdAccess::from_checked(std::string_view(text, kIdLength));
  else out.id = BrandedId::make(std::string_view(s.kind, 3), r.sf.load(std::memory_order_relaxed));
  static const BrandedId kDefault = *BrandedId::parse(kDefaultGroup);
  out.group = lane == kDefaultLane ? kDefault : cached_group(s, lane);
  out.attempt = attempt;
  out.token = token;
  out.deadline_ms = deadline;
  const std::uint64_t ready = r.ready_us.load(std::memory_order_relaxed);
  out.waited_us = now_us > ready ? now_us - ready : 0;
  const std::uint32_t len = std::min(r.payload_len.load(std::memory_order_relaxed), s.payload_bytes);
  out.payload.assign(reinterpret_cast<const char*>(s.payload(slot)), len);
  if (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
    out.retry = retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed));
  else
    out.retry = RetryPolicy{};
}

ClaimStatus claim_some(Segment& s, Lease* out, std::size_t room, std::size_t& got, std::uint32_t lease_ms,
                       std::uint64_t now_us, bool one_lane) noexcept {
  got = 0;
  if (!s.me || room == 0) return ClaimStatus::empty;
  const std::uint64_t now = now_us / 1000;
  maybe_sweep(s, now);
  // seq_cst: pairs with resume_all's seq_cst store and notify ([S5]).
  if (s.h->queue_paused.load(std::memory_order_seq_cst)) return ClaimStatus::paused;
  const std::uint64_t deadline = now + lease_ms;
  bool corrupt = false;
  // Each step serves a lane or passes a cell; the ring holds at most
  // ring_cells cells, so a pass over it ends.
  const std::uint64_t budget = 2 * (s.ring_mask + 1) + 64;
  for (std::uint64_t steps = 0; got < room && steps < budget; ++steps) {
    const Step r = ring_step(s, out, room - got, got, deadline, now_us, one_lane);
    if (r == Step::empty) break;
    if (r == Step::corrupt) corrupt = true;
    if (r == Step::served && one_lane) break;
  }
  if (got) {
    lower_next_due(s, deadline);
    count(s, &CounterBlock::claimed, got);
    return ClaimStatus::claimed;
  }
  return corrupt ? ClaimStatus::corrupt : ClaimStatus::empty;
}

}  // namespace fairlane::detail
