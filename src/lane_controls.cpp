// Lane controls: pause, resume, limits, weights, depth, drain, reassign.
//
// A lane's settings are a word of their own (Settings), changed by CAS and
// then carried into the lane word by a CAS of it (which rings the lane if
// the change made it serviceable, and makes claims computed before it
// fail). A lane with a setting other than the defaults is never idle, so
// the group keeps its lane (and its settings) while it has no job.
#include <sched.h>

#include <algorithm>
#include <climits>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"

namespace fairlane {
using namespace detail;

namespace {

std::optional<LaneStatus> lane_error(LaneFind f) noexcept {
  switch (f) {
    case LaneFind::found: return std::nullopt;
    case LaneFind::absent:
    case LaneFind::lanes_full:
    case LaneFind::buckets_full: return LaneStatus::lanes_full;
    case LaneFind::corrupt: return LaneStatus::corrupt;
  }
  return LaneStatus::corrupt;
}

// Applies `change` (old settings -> new) to group's lane, making the lane if
// asked. The settings CAS and the lane word CAS that follows are both
// checked against the lane's identity (group and incarnation): a lane
// reclaimed (and perhaps re-created) between them is found and the change
// made again on the group's lane of now.
template <class F>
LaneStatus change_settings(Segment& s, const BrandedId& group, bool create, F change) noexcept {
  if (!writer_cold(s)) return LaneStatus::read_only;
  GroupKey g;
  if (!is_default_group(group) && !group_of(group, g)) return LaneStatus::invalid_group;
  SameLaneRounds rounds;  // a lane that is not g's, met again and again
  for (;;) {
    LaneFind f = LaneFind::found;
    const std::uint32_t lane = group_lane(s, group, create, f);
    if (f == LaneFind::absent) return LaneStatus::ok;  // nothing to clear on a group with no lane
    if (auto e = lane_error(f)) return *e;
    LaneRecord& l = s.lanes[lane];
    Word128 w = lane_load(s, lane);
    const std::uint64_t inc = l.key_kind.load(std::memory_order_acquire);
    if (!lane_is(s, lane, w, g)) {
      if (rounds.stuck(lane, w)) break;
      continue;
    }
    std::uint64_t st = l.settings.load(std::memory_order_acquire);
    const std::uint64_t nst = change(st);
    // A record re-taken since we read w had its settings reset (their
    // version moved on): this CAS fails then. It fails only when another
    // thread wrote them: not counted.
    if (!l.settings.compare_exchange_strong(st, nst, std::memory_order_seq_cst)) continue;
    FAIRLANE_FAILPOINT("lane.settings_written");
    bool done = false;
    for (;;) {
      const Word128 base = lane_base(s, lane, w);
      if (!lane_is(s, lane, w, g) || l.key_kind.load(std::memory_order_acquire) != inc) break;  // reclaimed under us
      // [S3]: carries the settings to every reader of the lane word, and
      // rings the lane if it is serviceable now (lane_cas).
      if (lane_cas(s, lane, w, base)) {
        done = true;
        break;
      }
    }
    if (!done) continue;
    log_lane(s, lane);
    // A change back to the defaults leaves a lane with no job idle: room
    // for a producer parked for a lane, which otherwise slept until a
    // sweep pass found it (up to recovery_ms / 2; found by test).
    wake_lanes(s, lane);
    return LaneStatus::ok;
  }
  report_corrupt(s, CorruptWhat::directory);
  return LaneStatus::corrupt;
}

// The lane of a group if it has one now (no creation), or kNoLane.
std::uint32_t existing_lane(Segment& s, const BrandedId& group) noexcept {
  GroupKey g;
  if (!is_default_group(group) && !group_of(group, g)) return kNoLane;
  LaneFind f = LaneFind::found;
  return group_lane(s, group, false, f);
}

}  // namespace

LaneStatus Queue::pause(const BrandedId& group) noexcept {
  return change_settings(*seg_, group, true, [](std::uint64_t st) {
    return Settings::make(Settings::limit(st), true, Settings::weight(st), st);
  });
}

LaneStatus Queue::resume(const BrandedId& group) noexcept {
  return change_settings(*seg_, group, false, [](std::uint64_t st) {
    return Settings::make(Settings::limit(st), false, Settings::weight(st), st);
  });
}

LaneStatus Queue::pause_all() noexcept {
  if (!writer_cold(*seg_)) return LaneStatus::read_only;
  seg_->h->queue_paused.store(1, std::memory_order_seq_cst);
  // A record of its own (docs/mirror.md): the pause travels with a batch,
  // and with no record after it none came. Dropped in the rewrite of the
  // core (95fe2b0), so Valkey showed the queue running until the next
  // transition; the test waited on the lag, which said 0 at once.
  log_queue(*seg_);
  return LaneStatus::ok;
}

LaneStatus Queue::resume_all() noexcept {
  if (!writer_cold(*seg_)) return LaneStatus::read_only;
  // [S5] seq_cst: pairs with the claim's seq_cst load; parked consumers look again.
  seg_->h->queue_paused.store(0, std::memory_order_seq_cst);
  notify(*seg_, INT_MAX);
  log_queue(*seg_);
  return LaneStatus::ok;
}

LaneStatus Queue::set_limit(const BrandedId& group, std::uint32_t limit) noexcept {
  if (limit == 0 || limit > kMaxLimit) return LaneStatus::invalid_argument;
  return change_settings(*seg_, group, true, [limit](std::uint64_t st) {
    return Settings::make(limit, Settings::paused(st), Settings::weight(st), st);
  });
}

LaneStatus Queue::clear_limit(const BrandedId& group) noexcept {
  return change_settings(*seg_, group, false, [](std::uint64_t st) {
    return Settings::make(0, Settings::paused(st), Settings::weight(st), st);
  });
}

LaneStatus Queue::set_weight(const BrandedId& group, std::uint32_t weight) noexcept {
  if (weight == 0 || weight > kMaxWeight) return LaneStatus::invalid_argument;
  return change_settings(*seg_, group, weight != 1, [weight](std::uint64_t st) {
    return Settings::make(Settings::limit(st), Settings::paused(st), weight, st);
  });
}

std::uint64_t Queue::depth(const BrandedId& group) const noexcept {
  const std::uint32_t lane = existing_lane(*seg_, group);
  return lane == kNoLane ? 0 : lane_depth(*seg_, lane);
}

std::uint64_t Queue::drain(const BrandedId& group) noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return 0;
  const std::uint32_t lane = existing_lane(s, group);
  if (lane == kNoLane) return 0;
  // Each job is taken like a claim (out of the lane, leased to us), then
  // completed: a drainer that dies half way leaves leases that expire, and
  // the jobs come back; one that is stopped holds one job.
  std::uint64_t n = 0;
  Lease l;
  for (std::uint64_t i = 0; i < s.jobs; ++i) {
    const ClaimStatus st = take_front(s, lane, l, 60000, segment_now_us(s));
    if (st != ClaimStatus::claimed) break;
    std::uint32_t slot = 0, ln = 0;
    std::uint64_t sf = 0;
    if (job_snowflake(s, l.id, sf) != IdCheck::ok) break;
    if (release_lease(s, sf, l.token, RelOp::complete, slot, ln) != Take::ok) continue;
    FAIRLANE_FAILPOINT("drain.removed");
    log_job(s, slot);
    ++n;
  }
  count(s, &CounterBlock::drained, n);
  return n;
}

// ---- reassign --------------------------------------------------------------------------------
//
// A pending job cannot leave the middle of its lane's run, so a move makes
// a copy: a new slot, admitting, whose admission is decided by the move
// alone (kSlotMoved: its fail_to names the origin). Then a `drop` step of
// the origin's lane word turns the origin into a husk that names the copy
// (possible only while the origin is linked and nobody is taking it: a drop
// and a take are both steps of that word). The copy is the job iff the
// origin names it; whoever meets the husk, or the undecided copy, decides it
// by that rule. Then the copy, committed scheduled and due, is adopted into
// its new lane at its mint position.

namespace {

// Any intent (of a live or a dead thread) naming slot with ctr: the slot is
// out of its lane, being taken.
bool any_intent_names(const Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  const std::uint64_t c34 = ctr & ((1ULL << 34) - 1);
  auto names = [&](std::uint64_t in) {
    return IntentWord::kind(in) != Intent::none && IntentWord::slot1(in) == slot + 1 && IntentWord::ctr34(in) == c34;
  };
  // The whole table, not the records below threads_used: finding none is
  // acted on (the origin is dropped), and a mark scribbled low would hide a
  // taker's intent (found in review: a taken job dropped, its slot leaked).
  for (std::uint32_t i = 0; i < s.thread_count; ++i)
    if (names(s.threads[i].intent.load(std::memory_order_acquire))) return true;
  for (std::uint32_t i = 0; i < s.proc_count; ++i)
    if (names(s.procs[i].intent.load(std::memory_order_acquire))) return true;
  return false;
}

// The `drop` step on the origin: false if it is no longer pending and linked
// untaken (a claim has it), or was moved by another call.
bool drop_origin(Segment& s, std::uint32_t x, std::uint64_t xctr, std::uint32_t n, std::uint64_t nctr) noexcept {
  SlotRecord& xr = s.slot(x);
  const std::uint32_t lane = xr.lane.load(std::memory_order_relaxed);
  if (lane >= s.lane_count) return false;
  // The successor the step writes (read when it is applied), in the origin's
  // own pending word: a CAS that expects the ctr read, so that a move whose
  // origin was taken, completed and reused meanwhile writes nothing into
  // the slot's next job.
  for (Word128 xw0 = slot_load(s, x);;) {
    if (SlotWord::state(xw0) != SlotState::pending || SlotWord::ctr(xw0) != xctr) return false;
    const Word128 named = SlotWord::make(SlotState::pending, SlotWord::attempt(xw0), Successor::make(n, nctr), xctr,
                                         SlotWord::holder(xw0));
    if (xw0 == named || slot_cas(s, x, xw0, named)) break;
  }
  Word128 w = lane_load(s, lane);
  for (;;) {
    const Word128 base = lane_base(s, lane, w);
    const Word128 xw = slot_load(s, x);
    if (SlotWord::state(xw) != SlotState::pending || SlotWord::ctr(xw) != xctr ||
        xr.lane.load(std::memory_order_relaxed) != lane)
      return false;
    // Pending and in its lane: not taken (a take's step marks a strays node;
    // a pop or a take is announced by an intent first, which a reading of
    // the lane word after the take shows).
    if (xr.level.load(std::memory_order_relaxed) != 0 &&
        UpLink::mark(xr.next.load(std::memory_order_acquire)) == Link::kDeleted)
      return false;
    if (any_intent_names(s, x, xctr)) return false;
    const Word128 nw = LaneWord::with_rel(base, x + 1, RelOp::drop);
    if (lane_cas(s, lane, w, nw)) {
      FAIRLANE_FAILPOINT("reassign.dropped");
      (void)lane_base(s, lane, w);  // apply it
      return true;
    }
  }
}

// What a reassign makes of a job that a look-up shows pending but that is
// not (yet) in a lane: the copy of an earlier move whose mover has not
// finished (stopped, or still going), undecided or committed and not yet
// linked; or a job on its way into its lane (`returning`: released, failed,
// or that copy, adopted). It finishes what is left, as the mover or the
// next sweep would, each step a CAS at the job's ctr (a mover that goes on
// finds it done and answers `moved`): commit the copy by the move's rule
// (its origin names it), link it, or link a returning job whose linker is
// gone or was never one. A live linker gets 64 rounds (a yield each) to
// finish; one that is stopped leaves the job `busy`. A copy whose group can
// have no lane stays scheduled for the sweep: `lanes_full`.
enum class Settled { pending, not_pending, busy, lanes_full };
Settled settle_for_move(Segment& s, std::uint32_t x, std::uint64_t sf, Word128& xw) noexcept {
  const bool moved_copy = s.slot(x).flags.load(std::memory_order_relaxed) & kSlotMoved;
  for (int round = 0; round < 64; ++round) {
    switch (SlotWord::state(xw)) {
      case SlotState::pending:
        return Settled::pending;
      case SlotState::admitting:
        if (!moved_copy) return Settled::not_pending;
        settle_found(s, x, sf);
        break;
      case SlotState::scheduled:
        // A committed copy is due at once (`when` 0); a job waiting out a
        // delay or a backoff is not pending.
        if (!moved_copy || SlotWord::when(xw) != 0) return Settled::not_pending;
        // No lane for the earlier move's group: it stays scheduled, for a
        // sweep to link when a lane frees.
        if (adopt_job(s, x, xw, SlotWord::attempt(xw)) == Adopted::lanes_full) return Settled::lanes_full;
        break;
      case SlotState::returning:
        if (!finish_returning(s, x, xw, segment_now_ms(s))) {
          if (round == 63) return Settled::busy;  // a live linker, stopped perhaps
          sched_yield();
        }
        break;
      default:
        return Settled::not_pending;
    }
    if (!word_of_job(s, x, sf, xw)) return Settled::not_pending;
  }
  return SlotWord::state(xw) == SlotState::pending ? Settled::pending : Settled::busy;
}

}  // namespace

MoveStatus Queue::reassign(const BrandedId& job, const BrandedId& group) noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return MoveStatus::read_only;
  std::uint64_t sf = 0;
  if (job_snowflake(s, job, sf) != IdCheck::ok) return MoveStatus::gone;
  GroupKey g;
  const bool grouped = !is_default_group(group);
  if (grouped && !group_of(group, g)) return MoveStatus::invalid_group;
  const std::uint32_t x = index_find(s, sf);
  if (x == kNoSlot) return MoveStatus::gone;
  FAIRLANE_FAILPOINT("reassign.found");
  SlotRecord& xr = s.slot(x);
  // The job's word, read with its id: the job may have ended since the
  // look-up and its slot been taken by another, which a move would have
  // copied under this id (`AReassignWhoseJobsSlotWasTakenByAnotherJobIsGone`).
  Word128 xw;
  if (!word_of_job(s, x, sf, xw) || SlotWord::state(xw) == SlotState::free) return MoveStatus::gone;
  if (SlotWord::state(xw) != SlotState::pending) {
    switch (settle_for_move(s, x, sf, xw)) {
      case Settled::pending: break;
      case Settled::not_pending: return MoveStatus::not_pending;
      case Settled::busy: return MoveStatus::busy;
      case Settled::lanes_full: return MoveStatus::lanes_full;
    }
  }
  // Already there?
  GroupKey now;
  const bool now_grouped = slot_group(s, x, now);
  if (now_grouped == grouped && (!grouped || (now.kind == g.kind && now.sf == g.sf))) return MoveStatus::moved;
  // The new lane first: a move that cannot have one changes nothing.
  if (grouped) {
    std::uint32_t lane = kNoLane;
    const LaneFind f = lane_find(s, g, true, lane);
    if (f == LaneFind::corrupt) return MoveStatus::corrupt;
    if (f != LaneFind::found) return MoveStatus::lanes_full;
  }
  // The copy needs a slot of its own (no intent: it is linked only once
  // decided, and a dead mover's undecided copy is cancelled by the sweep).
  std::uint64_t nctr = 0;
  thread_local std::uint32_t cursor = 0;
  const std::uint32_t n = alloc_slot(s, cursor, my_holder(s), nctr);
  if (n == kNoSlot) return MoveStatus::full;
  SlotRecord& nr = s.slot(n);
  // The copy: everything of the job, its new group, and the origin it moves from.
  nr.sf.store(sf, std::memory_order_relaxed);
  nr.digits.store(xr.digits.load(std::memory_order_relaxed), std::memory_order_relaxed);
  nr.digits_tail.store(xr.digits_tail.load(std::memory_order_relaxed), std::memory_order_relaxed);
  const std::uint32_t len = std::min(xr.payload_len.load(std::memory_order_relaxed), s.payload_bytes);
  std::memcpy(s.payload(n), s.payload(x), len);
  nr.payload_len.store(len, std::memory_order_relaxed);
  const std::uint8_t elen = std::min<std::uint8_t>(xr.error_len.load(std::memory_order_relaxed), kErrorBytes);
  std::memcpy(nr.error, xr.error, elen);
  nr.error_len.store(elen, std::memory_order_relaxed);
  nr.retry.a.store(xr.retry.a.load(std::memory_order_relaxed), std::memory_order_relaxed);
  nr.retry.b.store(xr.retry.b.load(std::memory_order_relaxed), std::memory_order_relaxed);
  nr.flags.store(std::uint16_t((xr.flags.load(std::memory_order_relaxed) & kSlotHasRetry) | kSlotMoved),
                 std::memory_order_relaxed);
  nr.group_kind.store(grouped ? g.kind : kNoGroup, std::memory_order_relaxed);
  nr.group_sf.store(grouped ? g.sf : 0, std::memory_order_relaxed);
  nr.ready_us.store(xr.ready_us.load(std::memory_order_relaxed), std::memory_order_relaxed);
  nr.level.store(0, std::memory_order_relaxed);
  nr.fail_to.store(target_lo(SlotState::scheduled, SlotWord::attempt(xw), Successor::make(x, SlotWord::ctr(xw))),
                   std::memory_order_relaxed);
  s.tags[n].store(std::uint8_t(s.tags[n].load(std::memory_order_relaxed) + 1), std::memory_order_release);
  FAIRLANE_FAILPOINT("reassign.tagged");
  nr.pub.store(nctr, std::memory_order_release);  // [R14]
  std::uint32_t winner = 0;
  const Admit first = index_admit(s, n, sf, nctr, winner);  // undecided: the origin is still pending
  if (first == Admit::full || first == Admit::corrupt) {
    Word128 nw = slot_load(s, n);
    if (slot_cas(s, n, nw, SlotWord::make(SlotState::free, 0, 0, nctr, 0))) note_freed(s, n);
    return MoveStatus::corrupt;
  }
  FAIRLANE_FAILPOINT("reassign.copied");
  drop_origin(s, x, SlotWord::ctr(xw), n, nctr);
  // Decided by the rule now: the origin names the copy, or it does not.
  if (!move_decided(s, n, nctr)) {
    // The origin was taken first (a claim has it), or moved by another call.
    if (index_kill(s, n, nctr)) free_aborted(s, n);
    return MoveStatus::not_pending;
  }
  FAIRLANE_FAILPOINT("reassign.committed");
  // The origin is a husk in its lane now: if it is at the front, it goes, so
  // that a lane the move emptied leaves the ring (as EchoMQ's does).
  const std::uint32_t from_lane = xr.lane.load(std::memory_order_relaxed);
  if (from_lane < s.lane_count) pop_front_husks(s, from_lane);
  // Ours to adopt only at the copy's ctr: adopted, leased and failed with a
  // delay since, or ended and its slot taken, it is not.
  const Word128 cw = slot_load(s, n);
  if (SlotWord::state(cw) == SlotState::scheduled && SlotWord::ctr(cw) == nctr) adopt_job(s, n, cw, SlotWord::attempt(cw));
  lower_next_due(s, 0);  // if the adoption did not happen, the next sweep does it
  log_job(s, x);
  log_job(s, n);
  return MoveStatus::moved;
}

}  // namespace fairlane
