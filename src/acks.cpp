// Acknowledgements: complete, fail, extend, release, and their batches; the
// moves of a job back into its lane (shared with the sweep and the dead
// letter calls).
//
// Every way out of a lease (complete, fail, release, the sweep's expiry) is
// one step of the lease's lane word: one CAS that gives the lane's active
// count back (when the job leaves the lane for good: complete, a fail that
// parks it) and names the slot in the word's step (LaneWord::rel). The slot
// word is moved after, by the step's author or by whoever writes the lane
// word next (lane_base). So:
//   - exactly one of them wins a lease: each reads the lane word, checks the
//     slot is still leased under the token, and CASes the lane word; the
//     others fail that CAS, or find the step applied and the lease gone;
//   - a process stopped between the two holds nothing: the lane's count is
//     already right, and the next writer of the lane word moves its slot
//     (free, scheduled, dead, or returning for anyone to link).
#include <algorithm>
#include <climits>
#include <cstring>
#include <random>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"
#include "util.hpp"

namespace fairlane {
using namespace detail;

namespace detail {

namespace {

// stale when the id is a job of this queue (in another slot or lease), gone when not.
Take stale_or_gone(const Segment& s, std::uint64_t sf) noexcept {
  return index_find(s, sf) != kNoSlot ? Take::stale : Take::gone;
}

RetryPolicy queue_default_retry(const Segment& s) noexcept {
  return retry_decode(s.h->default_retry_a, s.h->default_retry_b);
}

// Applies the step of a lane word we just wrote (lane_base is idempotent:
// if someone applied it meanwhile, this changes nothing).
void apply_step(Segment& s, std::uint32_t lane, const Word128& written) noexcept { (void)lane_base(s, lane, written); }

}  // namespace

namespace {

// Does slot word `w` of record `r` hold the lease `token` of job `sf`?
inline bool holds_lease(const Segment& s, const SlotRecord& r, std::uint64_t sf, Token token, const Word128& w) noexcept {
  return r.sf.load(std::memory_order_acquire) == sf && SlotWord::state(w) == SlotState::leased &&
         token_matches(s, token, SlotWord::ctr(w));
}

// The `when` of this thread's next expiry mark (expiry_mark): its holder
// (19 bits) and its count of such writes (24 bits), so that no two writes
// of a mark of one lease are alike while an extend that saw one is delayed.
std::uint64_t next_expiry_nonce(const Segment& s) noexcept {
  thread_local std::uint32_t t_marks = 0;
  return (std::uint64_t(my_holder(s) & 0x7FFFF) << 24) | (++t_marks & 0xFFFFFF);
}

// Takes lease `token` of job `sf` out of leased by a step `op` of its lane
// word (see the file comment) and applies it. Inlined into complete, the
// hot ack (with the call, its frame and the out-parameters through memory,
// complete counted 272 instructions; inlined, 224); release_lease below is
// this for the rest.
//
// `due_by`: an expiry's (kNever for every other exit, and for the lease of a
// dead holder). The lease is taken back only while its deadline is at or
// before it: an extend that lands after the sweep judged the lease due
// keeps it, and its `ok` is true. The expiry marks the slot, then reads
// the slot word again before its lane CAS; an extend CASes the slot word,
// then looks for a mark ([A6]: one of the two sees the other). An extend
// that finds one moves the lane word on, so that an expiry past its second
// reading and before its CAS fails that CAS and reads the slot again.
[[gnu::always_inline]] inline Take take_lease(Segment& s, std::uint64_t sf, Token token, RelOp op,
                                              std::uint32_t& slot_out, std::uint32_t& lane_out,
                                              std::uint64_t due_by = kNever) noexcept {
  const std::uint32_t slot = token_slot(s, token);
  if (slot >= s.jobs) return stale_or_gone(s, sf);
  SlotRecord& r = s.slot(slot);
  for (;;) {
    const Word128 sw = slot_load(s, slot);
    // The mark goes in by a CAS from this reading: a later writer of the
    // field (a newer lease's exit, a run append after the slot's reuse)
    // changes it, so an exit that checked this lease long ago and resumes
    // now writes nothing.
    std::uint64_t rs = r.run_seq.load(std::memory_order_acquire);
    if (!holds_lease(s, r, sf, token, sw)) return stale_or_gone(s, sf);
    if (SlotWord::when(sw) > due_by) return Take::stale;  // extended since the expiry judged it
    const std::uint32_t lane = r.lane.load(std::memory_order_relaxed);
    if (lane >= s.lane_count) {
      report_corrupt(s, CorruptWhat::slot_record);
      return Take::corrupt;
    }
    Word128 w = lane_load(s, lane);
    const Word128 base = lane_base(s, lane, w);
    // Every other way out of this lease is a step of this lane word, applied
    // before anything else: if the slot is unchanged now, this reading of
    // the word predates any such step, and our CAS fails if one lands.
    if (!(slot_load(s, slot) == sw)) continue;
    if (LaneWord::state(base) != LaneState::live) {
      report_corrupt(s, CorruptWhat::lane_word);  // a leased job's lane is never reclaimed
      return Take::corrupt;
    }
    if (due_by != kNever) FAIRLANE_FAILPOINT("expire.checked");
    RelOp step = op;
    if (op == RelOp::back && SlotWord::attempt(sw) >= SlotWord::kMaxAttempt) {
      // Delivered as often as the count can say: dead-lettered rather than
      // handed out again under a count that no longer rises.
      if (!r.run_seq.compare_exchange_strong(rs, park_plan(SlotState::dead, SlotWord::ctr(sw), segment_now_ms(s)),
                                             std::memory_order_acq_rel))
        continue;
      step = RelOp::park;
    } else if (op != RelOp::park) {  // a park's plan is in already (fail())
      std::uint64_t mark = exit_mark(SlotWord::ctr(sw));
      if (due_by != kNever) {
        // An expiry's own mark; or, if a fail() of this lease has put its
        // plan in (scheduled or dead) and not yet made its step, the plan
        // written back as it is: an expiry that then lets the lease be (an
        // extend landed) must leave the fail's plan for its step, which
        // would apply an exit mark as `back` (the job straight back in its
        // lane, its delay or its dead-lettering lost: found in review). A
        // write all the same, for [A6]; a `back` step reads only the plan's
        // ctr bits.
        //
        // Each write of an expiry's mark is its own value
        // (next_expiry_nonce): an extend that saw an earlier expiry's mark,
        // and was delayed before voiding it, must not void the mark of a
        // later expiry of the same lease whose step has landed (its step
        // would be ignored and the lane's active count left one low: found
        // in the second review).
        const Word128 t{rs, 0};
        const SlotState ts = SlotWord::state(t);
        const bool fail_plan =
            SlotWord::attempt(t) == (SlotWord::ctr(sw) & 0xFFFF) && (ts == SlotState::scheduled || ts == SlotState::dead);
        mark = fail_plan ? rs : expiry_mark(SlotWord::ctr(sw), next_expiry_nonce(s));
      }
      if (!r.run_seq.compare_exchange_strong(rs, mark, std::memory_order_acq_rel)) continue;
    }
    if (due_by != kNever) {
      // [A6] seq_cst: the mark, then the slot word again (an extend CASes
      // the slot word, then loads the mark). Extended since: read again,
      // and the deadline check above lets the lease be.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!(slot_load(s, slot) == sw)) continue;
      FAIRLANE_FAILPOINT("expire.marked");
    }
    // Every way out of a lease gives its active count back in this CAS (a
    // job returning to its lane holds nothing of it meanwhile).
    const std::uint64_t a = LaneWord::active(base);
    const Word128 nw = LaneWord::with_active(LaneWord::with_rel(base, slot + 1, step), a ? a - 1 : 0);
    if (lane_cas(s, lane, w, nw)) {
      FAIRLANE_FAILPOINT("ack.stepped");
      // A completion's author applies its own step straight from the slot
      // word it checked: a CAS from that very reading (this lease's ctr, its
      // deadline) holds only while the lease is exactly as checked, so it is
      // the step applied once, as lane_base would apply it; if anything
      // moved the slot (an extend, or someone applied the step already),
      // lane_base looks at it afresh.
      Word128 from = sw;
      if (step == RelOp::complete && slot_cas(s, slot, from, SlotWord::make(SlotState::free, 0, 0, SlotWord::ctr(sw), 0))) {
        note_freed(s, slot, lane);
        FAIRLANE_FAILPOINT("lane.step_applied");
      } else {
        apply_step(s, lane, w);
      }
      slot_out = slot;
      lane_out = lane;
      return Take::ok;
    }
  }
}

}  // namespace

Take release_lease(Segment& s, std::uint64_t sf, Token token, RelOp op, std::uint32_t& slot_out,
                   std::uint32_t& lane_out, std::uint64_t due_by) noexcept {
  return take_lease(s, sf, token, op, slot_out, lane_out, due_by);
}

void finish_linking(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr) noexcept {
  if (lane >= s.lane_count || slot >= s.jobs) return;
  Word128 w = lane_load(s, lane);
  for (;;) {
    const Word128 base = lane_base(s, lane, w);
    // Applied already (by us or anyone): it is pending now. Or the move we
    // were to finish is over and the job is on another (a lease and a
    // revoke both move the ctr on): not ours to link. While the word is
    // still `w` (our CAS expects it), the move cannot end: only this step
    // of this word ends it once its node is linked.
    const Word128 sw = slot_load(s, slot);
    if (SlotWord::state(sw) != SlotState::returning || SlotWord::ctr(sw) != ctr ||
        s.slot(slot).lane.load(std::memory_order_relaxed) != lane)
      return;
    if (LaneWord::state(base) != LaneState::live) {
      report_corrupt(s, CorruptWhat::lane_word);  // a lane holding a linked node is never given back
      return;
    }
    const Word128 nw = LaneWord::with_rel(LaneWord::with_strays(base, true), slot + 1, RelOp::linked);
    // Rings the lane if this makes it serviceable (lane_cas).
    if (lane_cas(s, lane, w, nw)) {
      FAIRLANE_FAILPOINT("move.linked");
      apply_step(s, lane, w);
      return;
    }
  }
}

namespace {

// Takes the move of a job returning under holder 0 at ctr `ctr` (`w`: its
// slot word as read; on success, the word written): ours once the CAS
// holds (a stopped mover holds this one job). False if it is not such a
// job, or another mover (a sweep, a reassign, another link_returning) took
// it first.
bool take_move(Segment& s, std::uint32_t slot, Word128& w, std::uint64_t ctr) noexcept {
  if (SlotWord::state(w) != SlotState::returning || SlotWord::holder(w) != 0 || SlotWord::ctr(w) != ctr) return false;
  const Word128 taken = SlotWord::make(SlotState::returning, SlotWord::attempt(w), 0, ctr, my_holder(s));
  Word128 expect = w;
  if (!slot_cas(s, slot, expect, taken)) return false;
  w = taken;
  FAIRLANE_FAILPOINT("move.taken");
  return true;
}

}  // namespace

Moved link_returning(Segment& s, std::uint32_t slot, bool mine, const Word128* fallback) noexcept {
  SlotRecord& r = s.slot(slot);
  Word128 w = slot_load(s, slot);
  if (SlotWord::state(w) != SlotState::returning) return Moved::changed;
  if (!mine) {
    if (!take_move(s, slot, w, SlotWord::ctr(w))) return Moved::changed;
  }
  // Met corruption before the job was linked (strays_insert fails only
  // before its level-0 link): the move is given up, not kept, so that a
  // later sweep tries it again (a live mover's move is never taken over).
  auto give_up = [&] {
    Word128 cur = w;
    slot_cas(s, slot, cur, SlotWord::make(SlotState::returning, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0));
    return Moved::corrupt;
  };
  GroupKey g;
  const bool grouped = slot_group(s, slot, g);
  if (grouped && g.kind >= kKindCodes) {
    report_corrupt(s, CorruptWhat::slot_record);
    return give_up();
  }
  if (!grouped) g = GroupKey{};
  SameLaneRounds rounds;  // a lane that is not g's, met again and again
  for (;;) {
    std::uint32_t lane = kDefaultLane;
    if (grouped) {
      const LaneFind f = lane_find(s, g, true, lane);
      if (f == LaneFind::corrupt) return give_up();
      if (f != LaneFind::found) {
        // No lane for its group now (lane_find has already tried to reclaim
        // an idle one): it waits where it was (a job coming back from a
        // lease waits scheduled, due now) for a sweep to try again. Not the
        // next claim's sweep: lanes come free when sweeps reclaim idle ones,
        // so the next try is a sweep's interval away (a full table must not
        // turn every claim into a pass over the slots).
        Word128 cur = w;
        const std::uint64_t now = segment_now_ms(s);
        const Word128 wait =
            fallback ? *fallback : SlotWord::make(SlotState::scheduled, SlotWord::attempt(w), now, SlotWord::ctr(w), 0);
        slot_cas(s, slot, cur, wait);
        lower_next_due(s, now + s.recovery_ms / 2);
        return Moved::parked;
      }
    }
    // Ours alone until linked; the linking CAS publishes these.
    r.lane.store(lane, std::memory_order_relaxed);
    r.ready_us.store(segment_now_us(s), std::memory_order_relaxed);
    const std::uint64_t inc = s.lanes[lane].key_kind.load(std::memory_order_acquire) >> 16;
    switch (strays_insert(s, lane, slot, SlotWord::ctr(w), g, inc)) {
      case OrderResult::ok:
        finish_linking(s, lane, slot, SlotWord::ctr(w));
        log_job(s, slot);
        return Moved::ok;
      case OrderResult::lane_changed:
        if (rounds.stuck(lane, lane_load(s, lane))) {
          report_corrupt(s, CorruptWhat::directory);
          return give_up();
        }
        continue;  // given back under us: find it again
      default:
        return give_up();
    }
  }
}

Adopted adopt_job(Segment& s, std::uint32_t slot, Word128 from, std::uint32_t attempt, bool wait_on_full) noexcept {
  const Word128 mine = SlotWord::make(SlotState::returning, attempt, 0, SlotWord::ctr(from), my_holder(s));
  Word128 expect = from;
  if (!slot_cas(s, slot, expect, mine)) return Adopted::changed;
  FAIRLANE_FAILPOINT("move.claimed");
  switch (link_returning(s, slot, true, wait_on_full ? nullptr : &from)) {
    case Moved::ok: return Adopted::ok;
    case Moved::parked: return Adopted::lanes_full;
    case Moved::changed: return Adopted::changed;
    case Moved::corrupt: return Adopted::corrupt;
  }
  return Adopted::corrupt;
}

bool free_aborted(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::aborted && (ctr == kAnyCtr || SlotWord::ctr(w) == ctr)) {
    // A reassign's origin: the move is decided before the origin can be
    // reused (index_resolve of the target commits it: the origin names it).
    const std::uint32_t to1 = Successor::slot1(SlotWord::when(w));
    if (to1 != 0 && to1 <= s.jobs) {
      const Word128 tw = slot_load(s, to1 - 1);
      if ((SlotWord::ctr(tw) & 0x3FFFF) == Successor::ctr18(SlotWord::when(w))) index_resolve(s, to1 - 1, tw);
    }
    // The lane whose run held the husk (popped from it before this free):
    // read before the free, after which the slot may be another job's.
    const std::uint32_t lane = s.slot(slot).lane.load(std::memory_order_relaxed);
    // [R3] release: the next owner of the slot sees it done with.
    if (slot_cas(s, slot, w, SlotWord::make(SlotState::free, 0, 0, SlotWord::ctr(w), 0))) {
      note_freed(s, slot, lane);
      FAIRLANE_FAILPOINT("slot.freed");
      return true;
    }
  }
  return false;
}

bool release_husk(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::aborted && (ctr == kAnyCtr || SlotWord::ctr(w) == ctr)) {
    // Released already (a popper and a sweep settling a dead one's take,
    // or two sweeps, may both come here for one pop): nothing to do.
    if (husk_popped(w)) return false;
    if (SlotWord::holder(w) == 0) return free_aborted(s, slot, SlotWord::ctr(w));
    // Its admitter is deciding still: marked popped, for it to free.
    if (slot_cas(s, slot, w, SlotWord::make(SlotState::aborted, 1, SlotWord::when(w), SlotWord::ctr(w), SlotWord::holder(w))))
      return true;
  }
  return false;
}

}  // namespace detail

namespace {

AckStatus to_ack(Take t) noexcept {
  switch (t) {
    case Take::ok: return AckStatus::ok;
    case Take::stale: return AckStatus::stale;
    case Take::gone: return AckStatus::gone;
    case Take::corrupt: return AckStatus::corrupt;
  }
  return AckStatus::gone;
}

// The id of an acknowledgement as a snowflake. The fast way: the token's
// slot holds the id's text (written by its admitter from a checked id), so
// equal bytes give the slot's snowflake without decoding anything; else the
// id is decoded (and refused if it is not this queue's).
// False also for a handle with no process record at all (an observer's:
// its acks answer read_only).
bool ack_args(Segment& s, const BrandedId& job, Token token, std::uint64_t& sf) noexcept {
  if (!s.me_now()) return false;
  const std::uint32_t slot = token_slot(s, token);
  if (slot < s.jobs && job.valid()) {
    const SlotRecord& r = s.slot(slot);
    std::uint64_t w0, w1;
    id_words(s, r.digits.load(std::memory_order_relaxed), r.digits_tail.load(std::memory_order_relaxed), w0, w1);
    if (same_id_words(w0, w1, IdAccess::bytes(job))) {
      sf = r.sf.load(std::memory_order_acquire);
      return true;
    }
  }
  return job_snowflake(s, job, sf) == IdCheck::ok;
}

}  // namespace

AckStatus Queue::complete(const BrandedId& job, Token token) noexcept {
  Segment& s = *seg_;
  std::uint64_t sf = 0;
  if (!ack_args(s, job, token, sf)) return s.me_now() ? AckStatus::gone : AckStatus::read_only;
  std::uint32_t slot = 0, lane = 0;
  const Take t = take_lease(s, sf, token, RelOp::complete, slot, lane);
  if (t != Take::ok) return to_ack(t);
  FAIRLANE_FAILPOINT("complete.done");
  count(s, &CounterBlock::completed);
  log_job(s, slot);
  return AckStatus::ok;
}

std::size_t Queue::complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < leases.size() && i < statuses.size(); ++i) {
    statuses[i] = complete(leases[i].id, leases[i].token);
    n += statuses[i] == AckStatus::ok;
  }
  return n;
}

FailStatus Queue::fail(const BrandedId& job, Token token, const FailOptions& options) noexcept {
  Segment& s = *seg_;
  const bool own = writer_cold(s);
  // me_now: another thread's adoption of an unattached copy may store me now.
  if (!s.me_now()) return FailStatus::read_only;  // an observer
  std::uint64_t sf = 0;
  if (!ack_args(s, job, token, sf)) return FailStatus::gone;
  const std::uint32_t slot = token_slot(s, token);
  auto refused = [&] { return index_find(s, sf) != kNoSlot ? FailStatus::stale : FailStatus::gone; };
  if (slot >= s.jobs) return refused();
  SlotRecord& r = s.slot(slot);
  const Word128 seen = slot_load(s, slot);
  std::uint64_t rs = r.run_seq.load(std::memory_order_acquire);  // the plan goes in by a CAS from this
  if (!holds_lease(s, r, sf, token, seen)) return refused();
  const std::uint32_t attempt = SlotWord::attempt(seen);
  // What it does: the call's options, then the job's policy, then the queue's.
  const RetryPolicy job_policy =
      (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
          ? retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed))
          : RetryPolicy{};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const FailPlan plan = plan_fail(options, job_policy, queue_default_retry(s), attempt, u);
  const std::uint64_t now = segment_now_ms(s);
  // (At the count's ceiling, delivered as often as it can say, the job is
  // dead-lettered whatever the plan: as release_lease does for a `back`,
  // and here for the parks too, which it does not see, and so that the
  // answer says so.)
  const bool dead = attempt >= std::max<std::uint32_t>(plan.max_attempts, 1) || attempt >= SlotWord::kMaxAttempt;
  FAIRLANE_FAILPOINT("fail.planned");
  RelOp op = RelOp::back;
  // A fail() that checked its lease long ago finds the field moved on (a
  // newer lease's exit, a reuse of the slot): it writes nothing. A field
  // moved by another exit of this very lease (an expiry's mark: the expiry
  // may yet let the lease be, an extend having landed) is tried again while
  // the slot still holds the lease: answered stale on the first failure, a
  // fail said so of a lease still held (found in review). Lock-free: each
  // failure is another's write of the field.
  const auto put_plan = [&](std::uint64_t plan_word) {
    for (;;) {
      if (r.run_seq.compare_exchange_strong(rs, plan_word, std::memory_order_acq_rel)) {
        FAIRLANE_FAILPOINT("fail.plan_in");
        return true;
      }
      if (!holds_lease(s, r, sf, token, slot_load(s, slot))) return false;
    }
  };
  if (dead) {
    if (!put_plan(park_plan(SlotState::dead, SlotWord::ctr(seen), now))) return refused();
    op = RelOp::park;
  } else if (plan.delay_ms > 0 || !own) {
    // An unattached copy (see writer()) parks even a retry due now: sending
    // a job back is a step and then a move into its lane, the move in the
    // mover's name, and the copy's is its live parent's (a copy that died
    // between them left the job to a holder nobody takes over). A park is
    // the step alone, and the sweep's promotion, a member's, makes the move.
    if (!put_plan(park_plan(SlotState::scheduled, SlotWord::ctr(seen), now + plan.delay_ms))) return refused();
    op = RelOp::park;
  }
  // The error text is written while the job is this call's, so that it is
  // with the job when the job moves on and never lands in a later job of
  // the slot. A park's goes in before the step: the plan CAS above found
  // the lease still ours. A retry now (back) writes it after the step,
  // once the job's move back into its lane is ours (take_move below): no
  // one else moves a job whose live mover is us. Until 2026-12-07 it went
  // in before the step there too, checked only when fail() began: a fail
  // stopped past its lease's deadline wrote it into whatever job the slot
  // held by then (`AStaleRetryWritesNoErrorTextIntoTheSlotsNextJob`). (An
  // unattached copy never retries now: it parks, above.)
  const auto write_error = [&] {
    const std::size_t n = std::min<std::size_t>(options.error.size(), kErrorBytes);
    if (n) std::memcpy(r.error, options.error.data(), n);
    r.error_len.store(std::uint8_t(n), std::memory_order_relaxed);
  };
  const bool error_after = op == RelOp::back;
  if (!error_after) write_error();
  std::uint32_t got = 0, lane = 0;
  const Take t = release_lease(s, sf, token, op, got, lane);
  switch (t) {
    case Take::ok: break;
    case Take::stale: return FailStatus::stale;
    case Take::gone: return FailStatus::gone;
    case Take::corrupt: return FailStatus::corrupt;
  }
  FAIRLANE_FAILPOINT("fail.stepped");
  bool went_dead = dead;
  std::uint64_t due = kNever;  // a sweep pass's work for this job: then, parked consumers woken for it
  Word128 after = slot_load(s, slot);
  const SlotState now_state = SlotWord::state(after);
  if (op == RelOp::back || now_state == SlotState::returning) {
    // Back to its lane (a park whose plan was overwritten by a stale fail()
    // of an older lease falls back to this too). An unattached copy leaves
    // it returning under holder 0, anyone's to link, for the next pass.
    // Our `back` step left it returning under holder 0 at the lease's ctr
    // + 1; another mover (a sweep, a reassign) may take that move first,
    // and then the text is not written (the job is that mover's to link
    // and anyone's to claim; it keeps the text it had).
    if (error_after && take_move(s, slot, after, (SlotWord::ctr(seen) + 1) & SlotWord::kCtrMask)) {
      write_error();
      link_returning(s, slot, true);
    } else if (own) {
      link_returning(s, slot);
    } else {
      due = now;
    }
    went_dead = false;
  } else {
    // Two fails of one lease racing from two threads: the winner's step
    // reads the plan, which the loser may have written last. Say what
    // happened, not what was asked.
    if (now_state == SlotState::dead) went_dead = true;
    else if (now_state == SlotState::scheduled) went_dead = false;
    if (!went_dead) due = now + plan.delay_ms;  // its promotion
  }
  if (due != kNever) {
    lower_next_due(s, due);
    notify(s, INT_MAX);  // parked consumers shorten their sleep to the new due time
  }
  log_job(s, slot);
  count(s, went_dead ? &CounterBlock::dead : &CounterBlock::retried);
  return went_dead ? FailStatus::dead : FailStatus::retrying;
}

AckStatus Queue::release(const BrandedId& job, Token token) noexcept {
  Segment& s = *seg_;
  // A release hands the job back at once and uncounted: a step and a move
  // into its lane, which an unattached copy cannot make in its own name
  // (fail parks the job instead, see fail()).
  if (!writer_cold(s)) return AckStatus::read_only;
  std::uint64_t sf = 0;
  if (!ack_args(s, job, token, sf)) return AckStatus::gone;
  std::uint32_t slot = 0, lane = 0;
  const Take t = release_lease(s, sf, token, RelOp::release, slot, lane);
  if (t != Take::ok) return to_ack(t);
  FAIRLANE_FAILPOINT("release.stepped");
  link_returning(s, slot);
  count(s, &CounterBlock::released);
  return AckStatus::ok;
}

AckStatus Queue::extend(const BrandedId& job, Token token, std::uint32_t lease_ms) noexcept {
  Segment& s = *seg_;
  // (Adopts a copy: an unattached one extends as its parent's, one CAS.)
  if (!writer_cold(s) && !s.me_now()) return AckStatus::read_only;  // an observer
  std::uint64_t sf = 0;
  if (!ack_args(s, job, token, sf)) return AckStatus::gone;
  const std::uint32_t slot = token_slot(s, token);
  if (slot >= s.jobs) return to_ack(stale_or_gone(s, sf));
  SlotRecord& r = s.slot(slot);
  const std::uint64_t now = segment_now_ms(s);
  // An exit of this lease may have landed in its lane word and not yet be
  // applied to the slot (its author stopped in between): applied first, so
  // that the look below finds the lease over. (Every exit is a step of the
  // lane word; an extend is not: one that lands after this look is met
  // below.)
  const std::uint32_t lane = r.lane.load(std::memory_order_relaxed);
  if (lane < s.lane_count) (void)lane_base(s, lane, lane_load(s, lane));
  Word128 w = slot_load(s, slot);
  for (;;) {
    if (!holds_lease(s, r, sf, token, w) || SlotWord::when(w) <= now)
      // Past its deadline a lease may be taken back at any moment: too late
      // to extend (the sweep and this call judge by the same deadline).
      return to_ack(stale_or_gone(s, sf));
    FAIRLANE_FAILPOINT("extend.checked");
    const Word128 nw = SlotWord::make(SlotState::leased, SlotWord::attempt(w), now + lease_ms, SlotWord::ctr(w),
                                      SlotWord::holder(w));
    // [A5] (cas128): fenced by the token (ctr) and the deadline it saw.
    if (slot_cas(s, slot, w, nw)) {
      w = nw;
      break;
    }
  }
  // An exit of this lease under way (its mark or plan is in: an expiry
  // judged by a clock a moment ahead of ours, or another of the holder's
  // threads acknowledging) may be past its second look at the slot word
  // and before its lane CAS, and would take back the lease we just
  // extended. [A6] seq_cst: our CAS, then the mark (take_lease: its mark,
  // then the slot word). With none in, any exit that marks from here sees
  // the new deadline. With one, the lane word is moved on from a reading
  // in which the lease is still ours: an exit whose CAS landed first was
  // applied by lane_base (stale, or gone), and one that has not landed
  // fails its CAS and reads the slot word again.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::uint64_t seen_mark = r.run_seq.load(std::memory_order_relaxed);
  const Word128 mark{seen_mark, 0};
  if (SlotWord::attempt(mark) == (SlotWord::ctr(w) & 0xFFFF) && lane < s.lane_count) {
    for (Word128 lw = lane_load(s, lane);;) {
      const Word128 base = lane_base(s, lane, lw);
      if (!holds_lease(s, r, sf, token, slot_load(s, slot))) return to_ack(stale_or_gone(s, sf));
      if (LaneWord::state(base) != LaneState::live) {
        report_corrupt(s, CorruptWhat::lane_word);  // a leased job's lane is never reclaimed
        return AckStatus::corrupt;
      }
      if (lane_cas(s, lane, lw, base)) {
        FAIRLANE_FAILPOINT("extend.moved");
        // The expiry's mark we saw is voided now (any value not of this
        // lease's ctr): an expiry stopped before its lane CAS keeps its
        // mark otherwise, every later extend of the lease moved the lane
        // word on once more, and 512 of them on a quiet lane (the version
        // has 9 bits) brought back the very word that expiry's CAS
        // expects: its step then took back a lease extended 512 times
        // (found in review). Voided, it makes no extend move the word
        // again. The CAS is from the very value we saw: a later expiry's
        // mark is another value (expiry_mark's nonce), so a void delayed
        // past it fails. An expiry whose CAS lands on a word brought back
        // by 512 moves of others has its step ignored (lane_base finds no
        // mark of the lease), its CAS having given the active count back:
        // the lane counts one active too few (section 11, the version's
        // width). An exit of the holder's own is left alone (its failed
        // CAS marks again). A dead plan an expiry writes at the attempt
        // ceiling is not told from a fail's, and is left too.
        if (is_expiry_mark(seen_mark, SlotWord::ctr(w)))
          r.run_seq.compare_exchange_strong(seen_mark, exit_mark(SlotWord::ctr(w) ^ 1), std::memory_order_acq_rel);
        break;
      }
    }
  }
  lower_next_due(s, now + lease_ms);
  log_job(s, slot);
  return AckStatus::ok;
}

std::size_t Queue::release_all() noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return 0;
  const std::uint32_t me = my_holder(s);
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const Word128 w = slot_load(s, i);
    if (SlotWord::state(w) != SlotState::leased || SlotWord::holder(w) != me) continue;
    const std::uint64_t sf = s.slot(i).sf.load(std::memory_order_relaxed) & ((1ULL << 63) - 1);
    const BrandedId id = BrandedId::make(std::string_view(s.kind, 3), sf);
    n += release(id, make_token(s, i, SlotWord::ctr(w))) == AckStatus::ok;
  }
  return n;
}

}  // namespace fairlane
