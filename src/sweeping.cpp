// The sweep: expiry of leases, promotion of due jobs, the leases of dead
// holders, and what processes that died inside an operation left half done;
// a chunk of the slot table at a time, by whichever claim or waiter finds
// one due. No daemon, no lock, and no claim does more than one chunk.
//
// Passes: a pass over the slot table starts when a deadline or due time
// may have passed (now >= next_due) or recovery_ms / 2 after the last one
// started (for holders that die, idle lanes, and leftovers). While a pass
// is under way every claim takes one chunk of it (kChunk slots: the
// cursor's CAS hands out chunks, so claims sweep different parts). next_due
// is reset when a pass starts and lowered by every chunk's earliest time and
// by every new deadline, so it is exact again when the pass ends.
//
// Finishing after the dead (docs/design.md, "Recovery"): a survivor only
// ever finishes or undoes a dead process's step through the same CASes the
// step's author would have used, so nothing it does can be undone by the
// dead (they take no more steps) and a process only judged dead is never
// acted for: liveness is pid plus start time, and every doubt counts alive.
// A process that is stopped, not dead, keeps what it holds (the list is in
// docs/design.md); nobody waits for it.
#include <algorithm>
#include <climits>
#include <vector>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "ring.hpp"

namespace fairlane {
using namespace detail;

namespace detail {

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
  int finished_pid = 0;
  bool saw_free = false;  // a free slot in the chunk
};

// A lease whose deadline passed or whose holder is dead goes back to its
// lane. `due_by`: the now it was judged due by (kNever: its holder is dead):
// one extended since is left alone (take_lease).
bool expire(Segment& s, std::uint32_t slot, const Word128& w, std::uint64_t due_by) noexcept {
  const std::uint64_t sf = s.slot(slot).sf.load(std::memory_order_acquire);
  std::uint32_t got = 0, lane = 0;
  if (release_lease(s, sf, make_token(s, slot, SlotWord::ctr(w)), RelOp::back, got, lane, due_by) != Take::ok)
    return false;
  FAIRLANE_FAILPOINT("sweep.expired");
  link_returning(s, slot);
  count(s, &CounterBlock::expired);
  return true;
}

bool ctr_matches(const Word128& w, std::uint64_t ctr34) noexcept {
  return (SlotWord::ctr(w) & ((1ULL << 34) - 1)) == ctr34;
}

// Was `slot`, which a dead thread was taking from lane `lane` (run or
// strays), taken out? Its lane's pending step applied first.
bool taken_out(Segment& s, std::uint32_t lane, std::uint32_t slot, bool from_run) noexcept {
  lane_update(s, lane, [](Word128 b) -> std::optional<Word128> { return b; });
  if (from_run) {
    // A lane that is not live has no run: its head field is no slot (a
    // creating word keeps an incarnation there). A run job taken from a lane
    // that was reclaimed since was taken (a lane with a count is never idle).
    const Word128 w = lane_load(s, lane);
    return LaneWord::state(w) != LaneState::live || LaneWord::head(w) != slot + 1;
  }
  // A take is decided by its step, and its step marks the node.
  return UpLink::mark(s.slot(slot).next.load(std::memory_order_acquire)) == Link::kDeleted;
}

// Was `slot`, which a dead enqueuer was appending to lane `lane`'s run
// after `pred` (slot+1 | tag << 26, 0: as the first node), linked? Once
// linked it stays the head or its predecessor's successor until it is
// popped, and an admitting node is never popped.
bool appended(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t pred) noexcept {
  FAIRLANE_FAILPOINT("settle.appended");
  // pred's link first, then the head. If the link (read first) no longer
  // leads to the node, pred left the run before that read (its link
  // changes only when its slot is reused), so the node, linked after it,
  // has been the head since (an admitting node is never popped): the head,
  // read second, shows it. The other order is wrong: a head read before
  // pred's pop and a link read after its reuse both miss a linked node.
  const std::uint32_t p1 = std::uint32_t(pred & ((1U << 26) - 1));
  if (p1 != 0 && p1 <= s.jobs) {
    const std::uint64_t pl = s.slot(p1 - 1).next.load(std::memory_order_acquire);
    if (Link::succ(pl) == slot + 1 && Link::tag(pl) == (pred >> 26)) return true;
  }
  const Word128 w = lane_load(s, lane);
  // Only a live word's head is a slot (a creating word keeps an incarnation
  // there). A lane that is not live holds no admitting node either: a linked
  // one keeps its lane from being idle.
  return LaneWord::state(w) == LaneState::live && LaneWord::head(w) == slot + 1;
}

}  // namespace

// The `back` step for a revoked take (pending, out of its lane, counted
// active, its ctr moved on and this settler's holder in its word): gives the
// count back and makes the job returning, for anyone to link. False if
// someone else finished it first.
bool finish_return(Segment& s, std::uint32_t lane, std::uint32_t slot, const Word128& revoked) noexcept {
  Word128 lw = lane_load(s, lane);
  for (;;) {
    const Word128 base = lane_base(s, lane, lw);
    std::uint64_t rs = s.slot(slot).run_seq.load(std::memory_order_acquire);
    if (!(slot_load(s, slot) == revoked) || s.slot(slot).lane.load(std::memory_order_relaxed) != lane) return false;
    if (LaneWord::state(base) != LaneState::live) {
      report_corrupt(s, CorruptWhat::lane_word);  // a lane with a count is never reclaimed
      return false;
    }
    if (!s.slot(slot).run_seq.compare_exchange_strong(rs, exit_mark(SlotWord::ctr(revoked)), std::memory_order_acq_rel)) {
      lw = lane_load(s, lane);
      continue;
    }
    const std::uint64_t a = LaneWord::active(base);
    const Word128 nw = LaneWord::with_active(LaneWord::with_rel(base, slot + 1, RelOp::back), a ? a - 1 : 0);
    if (lane_cas(s, lane, lw, nw)) {
      (void)lane_base(s, lane, lw);  // apply it
      return true;
    }
  }
}

namespace {

// Puts back a job (w: pending at its taker's ctr) that a claimer took out
// of lane `lane` with a count and never leased: first revoked in its own
// word (ctr + 1, this process as holder), so that the taker's lease CAS,
// which expects the ctr it took, fails from here if the taker is alive;
// then the `back` step. False if it moved on (the taker leased it, or
// another settler revoked it first: then it is theirs to finish, and if that
// one dies the sweep finishes it, sweep_slot).
bool return_taken(Segment& s, std::uint32_t lane, std::uint32_t slot, const Word128& w) noexcept {
  Word128 cur = slot_load(s, slot);
  for (;;) {
    if (SlotWord::state(cur) != SlotState::pending || SlotWord::ctr(cur) != SlotWord::ctr(w) ||
        SlotWord::holder(cur) != 0 || s.slot(slot).lane.load(std::memory_order_relaxed) != lane)
      return false;
    // Its `when` may name a reassign's copy (a move that the take made fail):
    // it goes with the revoke.
    const Word128 revoked = SlotWord::make(SlotState::pending, SlotWord::attempt(cur), 0, SlotWord::ctr(cur) + 1, my_holder(s));
    if (slot_cas(s, slot, cur, revoked)) return finish_return(s, lane, slot, revoked);
  }
}

}  // namespace

bool take_overdue(std::uint64_t in, std::uint64_t pred, std::uint64_t now_ms) noexcept {
  const Intent k = IntentWord::kind(in);
  return (k == Intent::pop_run || k == Intent::pop_strays) && pred != 0 && pred < now_ms;
}

bool live_intent_names(Segment& s, std::uint32_t slot, std::uint64_t ctr, std::uint64_t now_ms) noexcept {
  const std::uint64_t c34 = ctr & ((1ULL << 34) - 1);
  auto names = [&](std::uint64_t in, const std::atomic<std::uint64_t>& pred) {
    // A take's intent only: an admitter's `link` intent names its slot at
    // the same ctr until it has decided, and owns no take (counted, a dead
    // claimer's take of a killed admission's husk, or of the admission a
    // claim committed for it, was left unsettled while its admitter was
    // still deciding: a slot leaked, or a job never delivered).
    const Intent k = IntentWord::kind(in);
    if ((k != Intent::pop_run && k != Intent::pop_strays) || IntentWord::slot1(in) != slot + 1 ||
        IntentWord::ctr34(in) != c34)
      return false;
    // A take past its lease's deadline protects nothing: it is undone.
    return !take_overdue(in, pred.load(std::memory_order_relaxed), now_ms);
  };
  for (std::uint32_t i = 0, n = s.threads_used(); i < n; ++i) {
    const ThreadRecord& t = s.threads[i];
    if (!names(t.intent.load(std::memory_order_acquire), t.intent_pred)) continue;
    if (!thread_owner_dead(s, t.owner.load(std::memory_order_acquire), now_ms)) return true;
  }
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    if (!names(s.procs[i].intent.load(std::memory_order_acquire), s.procs[i].intent_pred)) continue;
    if (!holder_dead(s, Holder::make(i, s.procs[i].incarnation.load(std::memory_order_relaxed)), now_ms)) return true;
  }
  return false;
}

bool settle_intent(Segment& s, std::atomic<std::uint64_t>& intent, std::atomic<std::uint64_t>& intent_lane,
                   std::atomic<std::uint64_t>& intent_pred, std::uint64_t now, bool live_owner) noexcept {
  const std::uint64_t in = intent.load(std::memory_order_acquire);
  const Intent kind = IntentWord::kind(in);
  if (kind == Intent::none) return false;
  const std::uint32_t slot1 = IntentWord::slot1(in);
  const std::uint64_t lane64 = intent_lane.load(std::memory_order_relaxed);
  const std::uint64_t pred = intent_pred.load(std::memory_order_relaxed);
  // A live owner may have moved on to another take since the caller looked:
  // judged again on these loads. (The pred loaded may be of the next intent:
  // then the intent word differs below, or the take is not overdue.)
  if (live_owner && !take_overdue(in, pred, now)) return false;
  auto done = [&](bool acted) {
    // Only if nobody settled it meanwhile (a record is settled once), and
    // never a live owner's: it clears its own (it may have written the same
    // intent again, for a take that is not overdue).
    if (live_owner) return acted;
    std::uint64_t cur = in;
    intent.compare_exchange_strong(cur, 0, std::memory_order_acq_rel);
    return acted;
  };
  // Bits above the lane are a husk take's incarnation, with its flag; in
  // any other intent they are a scribble (IntentLane).
  if (slot1 == 0 || slot1 > s.jobs || IntentLane::lane(lane64) >= s.lane_count ||
      (!IntentLane::is_husk(lane64) && (lane64 >> 32) != 0)) {
    report_corrupt(s, CorruptWhat::process);
    return done(false);
  }
  const std::uint32_t slot = slot1 - 1;
  const std::uint32_t lane = std::uint32_t(IntentLane::lane(lane64));
  const Word128 w = slot_load(s, slot);
  if (!ctr_matches(w, IntentWord::ctr34(in))) return done(false);  // moved on since: nothing of it is left
  switch (kind) {
    case Intent::pop_run:
    case Intent::pop_strays: {
      const bool from_run = kind == Intent::pop_run;
      const SlotState st = SlotWord::state(w);
      if (st != SlotState::pending && st != SlotState::aborted) return done(false);
      if (!taken_out(s, lane, slot, from_run)) return done(false);  // the take never happened
      // Taken out, by this thread or by another: if a live one names it, it
      // may be that one's to lease. Or that one's take is about to fail
      // (several claimers name a front before one takes it): the intent is
      // left, and a later pass looks again (once the live one has leased it,
      // its ctr has moved on; once it has failed, its intent is gone).
      // Cleared here, a dead claimer's real take was never settled: the job
      // stayed out of its lane for good.
      if (live_intent_names(s, slot, SlotWord::ctr(w), now)) return false;
      if (!from_run && strays_unlink(s, lane, slot) != OrderResult::ok) return done(false);
      if (st == SlotState::aborted) {  // a husk: taken without a count (taken_out cleared its step)
        // Out of the lane's husk count as its taker would have (drop_husk),
        // by whichever of them, or of two sweeps, releases it; and out of
        // the lane the take emptied only, if its record is that lane still.
        // A job's take names no incarnation: one that finds a husk (its job
        // made one since by a reassign's drop, which refuses while an intent
        // names the job) counts it out of the lane as the record is now, as
        // every take did before the incarnation was named.
        const std::uint64_t inc = IntentLane::is_husk(lane64) ? IntentLane::inc(lane64) : lane_incarnation(s, lane);
        const bool released = release_husk(s, slot, SlotWord::ctr(w));
        if (released && from_run) husk_uncount(s, lane, inc);
        // A dead owner's intent is cleared here, so this is counted once
        // whoever released the husk. A live owner's stays (it clears its
        // own): a husk whose admitter is still deciding is only marked
        // popped, and every later pass until the admitter frees it comes
        // here again and finds it marked, having done nothing.
        return done(released || !live_owner);
      }
      // A job taken with a count and never leased: a `back` step gives the
      // count back and makes it returning, for anyone to link.
      if (!return_taken(s, lane, slot, w)) return done(false);
      FAIRLANE_FAILPOINT("recover.popped");
      link_returning(s, slot);
      return done(true);
    }
    case Intent::link: {
      const SlotState st = SlotWord::state(w);
      if (st != SlotState::admitting && st != SlotState::aborted) return done(false);
      const bool linked = appended(s, lane, slot, pred);
      if (st == SlotState::admitting) {
        if (linked) {
          index_resolve(s, slot, w);  // committed (it will be delivered) or a husk
          // The dead appender's husk only: a settler slower than the slot's
          // reuse found a later admission's husk here, its admitter alive
          // and deciding, and cleared its holder; popped and freed, its slot
          // taken again, that admitter read the ctr moved on as its commit
          // (`AStaleLinkSettlerLeavesALaterAdmissionsHuskAlone`, found in
          // review of 7692bd3).
          Word128 cur = slot_load(s, slot);
          if (SlotWord::state(cur) == SlotState::aborted && SlotWord::holder(cur) != 0 &&
              SlotWord::ctr(cur) == SlotWord::ctr(w)) {
            if (husk_popped(cur))
              free_aborted(s, slot, SlotWord::ctr(cur));  // popped meanwhile: nothing leads to it
            else
              slot_cas(s, slot, cur, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(cur), 0));
          }
          return done(true);
        }
        // Never linked, so no index entry either (it is written after the
        // link): nobody knows it. Unless it is the reassign target or a
        // delayed job: those are decided without a link.
        Word128 cur = w;
        if (!slot_cas(s, slot, cur, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), SlotWord::holder(w))))
          return done(false);
        free_aborted(s, slot, SlotWord::ctr(w));
        return done(true);
      }
      // Aborted: linked, it is a husk for a claim to pop (holder 0 says so);
      // not linked, nothing leads to it.
      Word128 cur = w;
      if (linked && !husk_popped(w)) {
        if (SlotWord::holder(w) != 0) slot_cas(s, slot, cur, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), 0));
        return done(true);
      }
      free_aborted(s, slot, SlotWord::ctr(w));  // never linked, or popped since: nothing leads to it
      return done(true);
    }
    default:
      return done(false);
  }
}

namespace {

// Every scan of the thread records reads those below threads_used, which a
// record's taker raises first. Scribbled low, records in use above it would
// never be looked at: each pass looks at kHealWindow records above it, the
// next ones at the next pass (threads_heal, a hint: a race between two
// passes costs a window looked at twice), from the mark up and back to it,
// all of them within (records - mark) / kHealWindow + 2 passes; a record
// with an owner or an intent there raises the mark and is reported. The
// mark read again after the record: a taker raises it before its owner CAS,
// so a record caught being taken is not mistaken for a scribble.
constexpr std::uint32_t kHealWindow = 64;
void heal_threads_used(Segment& s) noexcept {
  const std::uint32_t used = s.threads_used();
  if (used >= s.thread_count) return;
  const std::uint32_t above = s.thread_count - used;
  const std::uint64_t at = s.h->threads_heal.load(std::memory_order_relaxed) % above;  // any value is in range
  s.h->threads_heal.store(at + kHealWindow < above ? at + kHealWindow : 0, std::memory_order_relaxed);
  const std::uint32_t from = used + std::uint32_t(at);
  const std::uint32_t to = std::min(s.thread_count, from + kHealWindow);
  std::uint32_t last = 0;  // the highest record in use + 1
  for (std::uint32_t i = from; i < to; ++i) {
    const ThreadRecord& t = s.threads[i];
    if (t.owner.load(std::memory_order_acquire) != 0 || t.intent.load(std::memory_order_acquire) != 0) last = i + 1;
  }
  if (last == 0 || s.h->threads_used.load(std::memory_order_seq_cst) >= last) return;
  report_corrupt(s, CorruptWhat::header);
  raise_threads_used(*s.h, last);
}

// The intents of the threads of dead processes, and the takes of live ones
// that have outlived their leases' deadlines (a taker stopped or
// descheduled between its take and its lease: the job goes back to its
// lane as its lease would have expired; the taker's lease CAS then fails).
std::uint64_t settle_dead_threads(Segment& s, std::uint64_t now, int& pid) noexcept {
  thread_local std::vector<char> dead;  // kept: a claim's sweep allocates once per thread
  dead.assign(s.proc_count, 0);
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if (!(owner & kOwnerAttached)) continue;
    const std::uint64_t inc = s.procs[i].incarnation.load(std::memory_order_relaxed);
    if (const int p = holder_dead(s, Holder::make(i, inc), now)) {
      dead[i] = 1;
      pid = p;
      drop_parked(s, s.procs[i], inc);
    }
  }
  std::uint64_t n = 0;
  heal_threads_used(s);
  // Every thread record with something in flight whose process is gone
  // (dead, or an older incarnation of its process record).
  for (std::uint32_t i = 0, used = s.threads_used(); i < used; ++i) {
    ThreadRecord& t = s.threads[i];
    if (t.intent.load(std::memory_order_acquire) == 0) continue;
    const std::uint64_t owner = t.owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    if (const int p = thread_owner_dead(s, owner, now)) {
      n += settle_intent(s, t.intent, t.intent_lane, t.intent_pred, now);
      pid = p;
    } else if (take_overdue(t.intent.load(std::memory_order_acquire), t.intent_pred.load(std::memory_order_relaxed), now)) {
      n += settle_intent(s, t.intent, t.intent_lane, t.intent_pred, now, true);
    }
  }
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    ProcRecord& p = s.procs[i];
    if (dead[i])
      n += settle_intent(s, p.intent, p.intent_lane, p.intent_pred, now);
    else if (take_overdue(p.intent.load(std::memory_order_acquire), p.intent_pred.load(std::memory_order_relaxed), now))
      n += settle_intent(s, p.intent, p.intent_lane, p.intent_pred, now, true);
  }
  return n;
}

// An admitting or aborted slot whose holder is dead and that no intent of
// that holder names (settle_dead_threads ran first in this pass; a holder
// that died since has its intents looked at here).
bool settle_orphan(Segment& s, std::uint32_t slot, const Word128& w, std::uint64_t now) noexcept {
  const std::uint32_t h1 = Holder::index1(SlotWord::holder(w));
  if (h1 == 0 || h1 > s.proc_count) return false;
  // The whole table, not the records below threads_used: finding no intent
  // here is acted on (the slot is taken for never linked and freed), and a
  // mark scribbled low would hide a linked admission's intent (found in
  // review: the job behind it was lost). A rare path: an orphan a pass.
  for (std::uint32_t i = 0; i < s.thread_count; ++i) {
    ThreadRecord& t = s.threads[i];
    if (ThreadOwner::proc1(t.owner.load(std::memory_order_acquire)) != h1) continue;
    if (IntentWord::slot1(t.intent.load(std::memory_order_acquire)) == slot + 1)
      return settle_intent(s, t.intent, t.intent_lane, t.intent_pred, now);
  }
  ProcRecord& p = s.procs[h1 - 1];
  if (IntentWord::slot1(p.intent.load(std::memory_order_acquire)) == slot + 1)
    return settle_intent(s, p.intent, p.intent_lane, p.intent_pred, now);
  // No intent: it was never linked (an append's intent comes before it).
  Word128 cur = w;
  if (SlotWord::state(w) == SlotState::admitting) {
    // Not published: its admitter died writing it, before any entry or link.
    const bool published = admission_published(s, slot, w);
    const std::uint16_t flags = published ? s.slot(slot).flags.load(std::memory_order_relaxed) : 0;
    const SlotState target =
        published ? SlotWord::state(Word128{s.slot(slot).fail_to.load(std::memory_order_acquire), 0}) : SlotState::free;
    if ((flags & kSlotMoved) || target == SlotState::scheduled || target == SlotState::dead) {
      // Decided without a link: a rival may know it from its index entry.
      if (index_resolve(s, slot, w, true)) return true;
    } else if (!slot_cas(s, slot, cur, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), SlotWord::holder(w)))) {
      return false;
    }
  }
  free_aborted(s, slot, SlotWord::ctr(w));
  return true;
}

// One slot, as a sweep sees it.
}  // namespace

bool finish_returning(Segment& s, std::uint32_t i, const Word128& w, std::uint64_t now) noexcept {
  const std::uint32_t holder = SlotWord::holder(w);
  if (holder == 0) return link_returning(s, i) == Moved::ok;  // its releaser moved on without linking it
  if (!holder_gone(s, holder, now)) return false;  // its mover is at it (or stopped: it holds this one job)
  // Its mover died: linked already (then only the `linked` step is left: a
  // linked node keeps its group's lane live, so it is there), or not (then
  // we take the move over).
  GroupKey g;
  std::uint32_t lane = kDefaultLane;
  if (slot_group(s, i, g) && (g.kind >= kKindCodes || lane_find(s, g, false, lane) != LaneFind::found)) lane = kNoLane;
  if (lane != kNoLane && strays_holds(s, lane, i, SlotWord::ctr(w))) {
    FAIRLANE_FAILPOINT("sweep.link_found");
    finish_linking(s, lane, i, SlotWord::ctr(w));
    return true;
  }
  Word128 cur = w;
  const Word128 mine = SlotWord::make(SlotState::returning, SlotWord::attempt(w), 0, SlotWord::ctr(w), my_holder(s));
  if (!slot_cas(s, i, cur, mine)) return false;
  link_returning(s, i, true);
  return true;
}

namespace {

void sweep_slot(Segment& s, std::uint32_t i, std::uint64_t now, SweepStats& st) noexcept {
  Word128 w = slot_load(s, i);
  // Free hints (slots.hpp): "look" again over a block or group whose look's
  // owner stopped or died mid-look, and over one that says none is free
  // where one is (its freer stopped or died before its stores, or a
  // scribble): the freer's own step, note_freed.
  if (i % kHintBlock == 0) [[unlikely]] {
    drop_token(s.hints[i / kHintBlock]);
    if (i % kHintGroupSlots == 0) drop_token(s.group_hints[i / kHintGroupSlots]);
  }
  switch (SlotWord::state(w)) {
    case SlotState::free:
      // A hint that said otherwise was a freer's left undone. The freer's
      // wake may be undone too (stopped or killed between its CAS and its
      // look at room_waiters): sweep_chunk makes one for the chunk, not one
      // per free slot (a parked producer would be woken thousands of times
      // a chunk, each a system call).
      hints_look_again(s, i);
      st.saw_free = true;
      return;
    case SlotState::pending: {
      // A holder in a pending word: a take revoked by a settler
      // (return_taken) whose `back` step is not made yet. Its settler is at
      // it (or stopped: it holds this one job); gone, we finish it.
      const std::uint32_t holder = SlotWord::holder(w);
      if (holder == 0 || !holder_gone(s, holder, now)) return;
      const std::uint32_t lane = s.slot(i).lane.load(std::memory_order_relaxed);
      if (lane >= s.lane_count) {
        report_corrupt(s, CorruptWhat::slot_record);
        return;
      }
      if (finish_return(s, lane, i, w)) {
        link_returning(s, i);
        ++st.finished;
      }
      return;
    }
    case SlotState::leased: {
      // Holders are judged at most once per recovery_ms / 2 for all
      // sweepers (ProcRecord::seen caches the verdicts: a verdict costs
      // system calls).
      const bool due = SlotWord::when(w) <= now;
      const int dead = holder_dead(s, SlotWord::holder(w), now);
      if (!due && !dead) {
        st.earliest = std::min(st.earliest, SlotWord::when(w));
        return;
      }
      if (expire(s, i, w, dead ? kNever : now)) {
        ++st.moved;
        ++st.leases;
        st.whose = (st.whose == -1 || st.whose == dead) ? dead : 0;
      } else if (const Word128 again = slot_load(s, i);
                 SlotWord::state(again) == SlotState::leased && SlotWord::when(again) > now) {
        // Let be (extended since it was judged): its new deadline is this
        // pass's to remember, in case its extender has not lowered next_due
        // yet (stopped after its CAS). (Only a deadline ahead: a due lease
        // whose expiry failed, its record scribbled, would keep next_due in
        // the past and make every claim start a pass: found in review.)
        st.earliest = std::min(st.earliest, SlotWord::when(again));
      }
      return;
    }
    case SlotState::scheduled: {
      if (SlotWord::when(w) > now) {
        st.earliest = std::min(st.earliest, SlotWord::when(w));
        return;
      }
      const Adopted a = adopt_job(s, i, w, SlotWord::attempt(w));
      if (a == Adopted::ok) {
        FAIRLANE_FAILPOINT("sweep.promoted");
        ++st.moved;
        ++st.promoted;
        count(s, &CounterBlock::promoted);
      } else if (a == Adopted::lanes_full) {
        st.earliest = std::min(st.earliest, now + s.recovery_ms / 2);  // try again next pass
      }
      return;
    }
    case SlotState::returning:
      if (finish_returning(s, i, w, now)) ++st.finished;
      return;
    case SlotState::admitting:
    case SlotState::aborted: {
      const std::uint32_t holder = SlotWord::holder(w);
      if (holder == 0) return;  // a husk in its lane (a claim frees it), or unowned
      if (const int pid = holder_gone(s, holder, now); pid && settle_orphan(s, i, w, now)) {
        ++st.finished;
        st.finished_pid = pid;
      }
      return;
    }
    default:
      return;
  }
}

void record_recovery(Segment& s, const SweepStats& st, std::uint64_t took_us) noexcept {
  RecoveryStats& r = s.h->recovery;
  if (st.finished) {
    r.finished.fetch_add(st.finished, std::memory_order_relaxed);
    r.finished_unix_ms.store(unix_ms(), std::memory_order_relaxed);
    if (st.finished_pid) r.finished_pid.store(std::uint64_t(st.finished_pid), std::memory_order_relaxed);
  }
  if (!st.leases) return;
  r.runs.fetch_add(1, std::memory_order_relaxed);
  r.jobs.fetch_add(st.leases, std::memory_order_relaxed);
  r.last_jobs.store(st.leases, std::memory_order_relaxed);
  r.last_pid.store(std::uint64_t(std::max(st.whose, 0)), std::memory_order_relaxed);
  r.last_us.store(took_us, std::memory_order_relaxed);
  r.last_unix_ms.store(unix_ms(), std::memory_order_relaxed);
}

// Lanes of [from, to) whose words say ringed while no ring cell is their
// token (design.md, "The ring", tokens lost): no transition leaves one, but
// a scribbled cell or word, or a defect, would keep the lane out of the
// rota for ever (no claim serves it, and no enqueue rings a lane that says
// ringed). Each is de-rung and, if serviceable, rung again by one lane CAS
// from the word read, and reported.
//
// Why a lane the walk finds no token for has none: its word w1 is read
// first, then the head h0, then the cells from h0 up to the first one not
// yet written. A token named by w1 was pushed before the CAS that wrote w1,
// so before w1 was read and before every cell read; it was ahead of the
// head then (a ringed lane's token is never behind the head), and it stays
// unpassed and unrewritten until some CAS moves the word on (the head
// passes a token only after its lane's CAS). Cells are written with no
// hole (a pusher takes the first unwritten position from a hint at or
// before it), so a written token lies below the first unwritten position
// the walk meets. Hence: if the word read again after the walk is the
// same, the token named by w1 was among the cells walked, or there is
// none. The whole 16-byte word is compared: its 9-bit version and tgen
// alone came back after 256 jobs of a busy lane while the sweeper was
// stopped twice (found in review; the lane lost its place in the rota and a
// corruption was reported falsely); head, tail and counts must come back
// too. Conservative the other way: a stale cell with the token's tgen
// (5 bits) counts as the token. A tail hint scribbled ahead leaves gaps; a
// walk that stops at one (the hint past an unwritten cell) heals nothing.
// The walk is bounded by kTokenWalk cells: with more cells in the ring than
// that, no lane of the share is judged.
constexpr std::uint64_t kTokenWalk = 65536;
void heal_tokenless(Segment& s, std::uint32_t from, std::uint32_t to) noexcept {
  to = std::min(to, s.lane_count);
  if (from >= to) return;
  struct Candidate {
    Word128 w;  // its word before the walk
    std::uint32_t lane;
    bool found;
  };
  thread_local std::vector<Candidate> cands;    // the ringed, live lanes of the share
  thread_local std::vector<std::uint32_t> index;  // per lane of the share: 1 + its place in cands, or 0
  cands.clear();
  index.assign(to - from, 0);
  for (std::uint32_t lane = from; lane < to; ++lane) {
    const Word128 w = lane_load(s, lane);
    if (LaneWord::state(w) != LaneState::live || !LaneWord::ringed(w)) continue;
    cands.push_back({w, lane, false});
    index[lane - from] = std::uint32_t(cands.size());
  }
  if (cands.empty()) return;
  const std::uint64_t h0 = s.h->ring_head.load(std::memory_order_acquire);
  const std::uint64_t end = h0 + std::min<std::uint64_t>(s.ring_mask + 1, kTokenWalk);
  std::uint64_t p = h0;
  for (; p < end; ++p) {
    const std::uint64_t c = s.ring[p & s.ring_mask].load(std::memory_order_acquire);
    const std::int32_t d = std::int32_t(RingCell::pos(c) - std::uint32_t(p));
    if (d > 0) continue;  // rewritten for a later lap: the head has passed p
    if (d < 0) {
      // Not written: the end of the ring, unless a push wrote p meanwhile (then
      // the tail hint is past it, and the cell reads written on a second look)
      // or the hint was scribbled ahead of a gap.
      if (s.h->ring_tail.load(std::memory_order_acquire) <= p) break;
      const std::uint64_t again = s.ring[p & s.ring_mask].load(std::memory_order_acquire);
      if (std::int32_t(RingCell::pos(again) - std::uint32_t(p)) < 0) return;  // a gap: judge nothing
      --p;  // read it again as written
      continue;
    }
    const std::uint32_t l1 = RingCell::lane1(c);
    if (l1 == 0 || l1 - 1 < from || l1 - 1 >= to) continue;
    if (const std::uint32_t k = index[l1 - 1 - from]; k != 0 && LaneWord::tgen(cands[k - 1].w) == (p & LaneWord::kTgenMask))
      cands[k - 1].found = true;
  }
  if (p == end) return;  // never reached the end: judge nothing
  for (const Candidate& cand : cands) {
    if (cand.found) continue;
    Word128 w = lane_load(s, cand.lane);
    if (!(w == cand.w)) continue;  // moved on: whatever moved it had the token, or rang it
    report_corrupt(s, CorruptWhat::ring_cell);
    const Word128 base = lane_base(s, cand.lane, w);
    (void)lane_cas(s, cand.lane, w, LaneWord::with_ringed(base, false));  // lost: another write moved it on
  }
}

// Lane records: free those whose creator died mid-creation; reclaim lanes
// found idle on two visits at least recovery_ms / 2 apart with nothing
// changed between (so a busy tenant keeps its lane between its jobs).
void sweep_lanes(Segment& s, std::uint32_t from, std::uint32_t to, std::uint64_t now) noexcept {
  heal_tokenless(s, from, to);
  // One lane wake for the lanes of this chunk: a woken producer that takes
  // a lane passes a wake on (enqueue_wait), so the others follow one by
  // one. One a lane woke a producer 4,096 times in one pass over 4,096
  // free records (a locked increment and a system call each: found in
  // review).
  bool lane_woken = false;
  const auto wake_once = [&] {
    if (lane_woken || s.h->lane_waiters.load(std::memory_order_seq_cst) == 0) [[likely]]
      return;
    lane_woken = true;
    wake_lanes(s, kNoLane);
  };
  for (std::uint32_t lane = from; lane < to && lane < s.lane_count; ++lane) {
    LaneRecord& l = s.lanes[lane];
    Word128 w = lane_load(s, lane);
    // Serviceable and in no ring cell: a settings change whose author stopped
    // (or died) between its settings CAS and its lane CAS, or a ring push
    // refused as corrupt. Any write of the word rings it; this is one.
    if (LaneWord::state(w) == LaneState::live && !LaneWord::ringed(w) && lane_serviceable(w, lane_settings(s, lane))) {
      const Word128 base = lane_base(s, lane, w);
      Word128 cur = w;
      (void)lane_cas(s, lane, cur, base);  // lost to another write: that one rang it
      w = lane_load(s, lane);
    }
    // The default lane is never created, freed or given back (lane_idle
    // says no to it), but its step is applied below as every lane's is:
    // skipped here, a completer stopped after its lane CAS held its slot
    // until the lane's next enqueue, claim or ack, or its lease's deadline
    // (`StoppedCompleter.ASweepPass*`).
    if (lane == kDefaultLane && LaneWord::state(w) != LaneState::live) continue;
    if (LaneWord::state(w) == LaneState::creating) {
      if (holder_gone(s, LaneWord::tail(w), now)) {  // the creator, as the creating CAS named it
        Word128 cur = w;
        if (cas128(l.word, cur, LaneWord::bumped(Word128{}, w))) wake_once();  // a record free again
      }
      continue;
    }
    // A free record, or an idle lane, is one a producer parked for a lane
    // can have (its look takes or reclaims it): whatever left it so may
    // have woken nobody (a claim that cleared an empty strays flag,
    // settings put back, a waker killed before its wake), and this pass is
    // the bound on that (design.md, "Blocking enqueues").
    if (LaneWord::state(w) == LaneState::free) {
      wake_once();
      continue;
    }
    if (LaneWord::state(w) != LaneState::live) continue;
    const Word128 base = lane_base(s, lane, w);
    if (!lane_idle(s, lane, base)) continue;
    // Idle, but with its strays head naming a node, it cannot be given
    // back yet (strays_head_clear): no lane for a producer, whose look
    // would give nothing back. The first pass that finds the head clear
    // wakes one. (Woken at every pass before 2026-12-07.)
    if (strays_head_clear(s, lane)) wake_once();
    const std::uint64_t seen = l.idle_seen.load(std::memory_order_relaxed);
    const std::uint64_t ver = (LaneWord::version(w) & LaneWord::kVersionMask) | 512;
    if ((seen & 1023) == ver && (seen >> 10) + s.recovery_ms / 2 <= now) {
      if (lane_try_reclaim(s, lane)) continue;
    }
    // Relaxed: a hint for the next visit; a lost race costs one more pass.
    if ((seen & 1023) != ver) l.idle_seen.store((now << 10) | ver, std::memory_order_relaxed);
  }
}

// Does the chunk [from, to) of the slot table, and its share of the lanes.
void sweep_chunk(Segment& s, std::uint32_t from, std::uint32_t to, std::uint64_t now, SweepStats& st) noexcept {
  for (std::uint32_t i = from; i < to; ++i) sweep_slot(s, i, now, st);
  // One wake for parked producers if the chunk saw a free slot, made as a
  // freer makes it (after the hints' stores: the fence), and at once, not
  // counted toward a batch (it stands for a freer's wake that was lost: in
  // a large table, counted, it was no wake, found in review).
  if (st.saw_free) wake_room_after_free(s, true, true);
  const std::uint64_t lanes = s.lane_count;
  const std::uint64_t jobs = std::max<std::uint32_t>(s.jobs, 1);
  const std::uint32_t lf = std::uint32_t(lanes * from / jobs);
  const std::uint32_t lt = to >= s.jobs ? s.lane_count : std::uint32_t(lanes * to / jobs);
  sweep_lanes(s, lf, lt, now);
}

// A pass's positions: [0, proc_count) the process records, whose liveness
// it judges first, then [proc_count, sweep_end) the slots. Judging a record
// is a kill and a /proc read (about 10 us); a claim judges at most kJudge of
// them (a chunk ends after the kJudge-th record that needs it), and its slot
// chunk at most kSlotJudge more (verdicts gone stale since; past that a
// process with no fresh verdict counts alive until judged). Until
// 2026-12-04 the first chunk judged every attached process: the slowest
// claim took 7.0-9.2 ms with 255 other handles attached and 44-60 ms with
// 1,000 (docs/perf/sweep-2026-12-04.txt, page faults included).
constexpr int kJudge = 32;
constexpr int kSlotJudge = 8;

// Where a chunk that starts at record `from` ends: after the kJudge-th
// record from there that needs judging, or at the first slot chunk's end
// when every record left fits (so a pass over a queue with few processes is
// one chunk, as before).
std::uint32_t chunk_end(const Segment& s, std::uint32_t from, std::uint64_t now) noexcept {
  if (from >= s.proc_count)
    return std::uint32_t(std::min<std::uint64_t>(std::uint64_t(from) + kChunk, s.sweep_end));
  int n = 0;
  for (std::uint32_t i = from; i < s.proc_count; ++i)
    if (verdict_stale(s, i, now) && ++n > kJudge) return i;
  return s.proc_count + std::min(kChunk, s.jobs);
}

// Does the positions [from, to) of a pass.
void run_chunk(Segment& s, std::uint32_t from, std::uint32_t to, std::uint64_t now) noexcept {
  const std::uint32_t procs = s.proc_count;
  if (from < procs) {
    JudgeBudget budget(kJudge);
    for (std::uint32_t i = from; i < std::min(to, procs); ++i)
      if (verdict_stale(s, i, now))
        (void)holder_dead(s, Holder::make(i, s.procs[i].incarnation.load(std::memory_order_relaxed)), now);
  }
  if (to <= procs) return;
  JudgeBudget budget(kSlotJudge);
  const std::uint32_t first = std::max(from, procs) - procs;
  SweepStats st;
  const std::uint64_t t0 = monotonic_us();
  if (first == 0) st.finished += settle_dead_threads(s, now, st.finished_pid);
  sweep_chunk(s, first, to - procs, now, st);
  lower_next_due(s, st.earliest);
  record_recovery(s, st, monotonic_us() - t0);
}

}  // namespace

void lower_next_due(Segment& s, std::uint64_t when) noexcept { atomic_min(s.h->sweep.next_due, when); }

namespace {

// Start a pass (cursor c read with no pass under way): the cursor's CAS
// elects one starter. Out of line, as take_chunk: the check in maybe_sweep
// is on every claim's path, a pass's work on few of them.
[[gnu::noinline]] void start_pass(Segment& s, std::uint64_t c, std::uint64_t now) noexcept {
  SweepShared& sw = s.h->sweep;
  const std::uint32_t to = chunk_end(s, 0, now);
  if (!sw.cursor.compare_exchange_strong(c, Cursor::make(Cursor::pass(c) + 1, to), std::memory_order_acq_rel)) return;
  sw.pass_started_ms.store(now, std::memory_order_relaxed);
  // From here new deadlines lower next_due again; this pass's chunks lower
  // it by what they see.
  sw.next_due.store(kNever, std::memory_order_release);
  run_chunk(s, 0, to, now);
}

// A pass under way (cursor c at pos): take the next chunk.
[[gnu::noinline]] void take_chunk(Segment& s, std::uint64_t c, std::uint32_t pos, std::uint64_t now) noexcept {
  SweepShared& sw = s.h->sweep;
  const std::uint32_t to = chunk_end(s, pos, now);
  if (!sw.cursor.compare_exchange_strong(c, Cursor::make(Cursor::pass(c), to), std::memory_order_acq_rel)) return;
  run_chunk(s, pos, to, now);
}

// A cursor at 0 is a pass not yet started; at sweep_end or past it (a
// scribble), one finished.
bool under_way(const Segment& s, std::uint32_t pos) noexcept { return pos != 0 && pos < s.sweep_end; }

}  // namespace

bool sweep_under_way(const Segment& s) noexcept {
  return under_way(s, Cursor::pos(s.h->sweep.cursor.load(std::memory_order_relaxed)));
}

void maybe_sweep(Segment& s, std::uint64_t now) noexcept {
  SweepShared& sw = s.h->sweep;
  const std::uint64_t c = sw.cursor.load(std::memory_order_acquire);
  const std::uint32_t pos = Cursor::pos(c);
  if (under_way(s, pos)) return take_chunk(s, c, pos, now);
  const std::uint64_t started = sw.pass_started_ms.load(std::memory_order_relaxed);
  const bool due = now >= sw.next_due.load(std::memory_order_relaxed) || now >= started + s.recovery_ms / 2 ||
                   started > now + kMaxRecoveryMs;  // a scribbled start time must not stop passes
  if (due) start_pass(s, c, now);
}

std::uint64_t sweep_all(Segment& s, std::uint64_t now) noexcept {
  SweepStats st;
  const std::uint64_t t0 = monotonic_us();
  st.finished += settle_dead_threads(s, now, st.finished_pid);
  s.h->sweep.next_due.store(kNever, std::memory_order_release);
  sweep_chunk(s, 0, s.jobs, now, st);
  lower_next_due(s, st.earliest);
  record_recovery(s, st, monotonic_us() - t0);
  return st.moved;
}

}  // namespace detail

std::uint64_t Queue::tick() noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return 0;
  return sweep_all(s, segment_now_ms(s));
}

}  // namespace fairlane
