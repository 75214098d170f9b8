// Acknowledgements: complete, fail, extend, release, and their batches; the
// move of a job back into its lane (shared with the sweep).
//
// Every way out of a lease (complete, fail, release, the sweep's expiry or
// dead holder) goes through the lease's lane word, in one CAS that gives the
// lane's active count back and names the slot as the lane's pending release
// (LaneWord::rel, with what it does). The slot word is moved after; whoever
// writes the lane word next finishes it first if that did not happen
// (lane_base). So:
//   - exactly one of them wins a lease: each reads the lane word, checks the
//     slot is still leased under the token, and CASes the lane word; the
//     others fail that CAS, or find the release named in it;
//   - a process stopped between the two steps holds nothing: the lane's
//     count is already back, and the next writer of the lane word finishes
//     its slot (free, scheduled, dead, or returning for anyone to link).
#include <algorithm>
#include <cstring>
#include <random>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"

namespace fairlane {
using namespace detail;

namespace detail {

namespace {

enum class Take { ok, stale, gone, corrupt };

// stale when the id is a job of this queue (in another slot or lease), gone when not.
Take stale_or_gone(const Segment& s, std::uint64_t sf) noexcept {
  return index_find(s, sf) != kNoSlot ? Take::stale : Take::gone;
}

RetryPolicy queue_default_retry(const Segment& s) noexcept {
  return retry_decode(s.h->default_retry_a, s.h->default_retry_b);
}

}  // namespace

// Takes lease `token` of job `sf` out of leased through its lane word (see
// the file comment). `op` says what the slot becomes. For park, back and
// release the lane's refs are raised first (the job leaves both its lane and
// the active count, and the lane must not look idle meanwhile: [S6]).
Take release_lease(Segment& s, std::uint64_t sf, Token token, RelOp op, std::uint32_t& slot_out, Word128& sw_out,
                   std::uint32_t& lane_out) noexcept {
  const std::uint32_t slot = token_slot(s, token);
  if (slot >= s.jobs) return stale_or_gone(s, sf);
  SlotRecord& r = s.slot(slot);
  bool counted = false;
  auto give_back_ref = [&](std::uint32_t lane) {
    if (counted) s.lanes[lane].refs.fetch_sub(1, std::memory_order_seq_cst);
  };
  std::uint32_t lane = kNoLane;
  for (int round = 0; round < 1 << 16; ++round) {
    const Word128 sw = slot_load(s, slot);
    if (r.sf.load(std::memory_order_acquire) != sf || SlotWord::state(sw) != SlotState::leased ||
        !token_matches(s, token, SlotWord::ctr(sw))) {
      if (lane != kNoLane) give_back_ref(lane);
      return stale_or_gone(s, sf);
    }
    const std::uint32_t l = r.lane.load(std::memory_order_relaxed);
    if (l >= s.lane_count) {
      report_corrupt(s, CorruptWhat::slot_record);
      if (lane != kNoLane) give_back_ref(lane);
      return Take::corrupt;
    }
    if (lane != l) {
      if (lane != kNoLane) give_back_ref(lane);
      counted = false;
      lane = l;
    }
    if (op != RelOp::complete && !counted) {
      s.lanes[lane].refs.fetch_add(1, std::memory_order_seq_cst);
      counted = true;
    }
    Word128 w = lane_load(s, lane);
    const Word128 base = lane_base(s, lane, w);
    // Every release of this lease by someone else CASes this lane word before
    // it moves the slot: if the slot is unchanged now, this reading of the
    // lane word predates any such release, and our CAS fails if one lands.
    if (!(slot_load(s, slot) == sw)) continue;
    if (LaneWord::state(base) != LaneState::live) {
      report_corrupt(s, CorruptWhat::lane_word);  // a leased job's lane is never reclaimed
      give_back_ref(lane);
      return Take::corrupt;
    }
    const std::uint64_t a = LaneWord::active(base);
    const Word128 nw = LaneWord::with_rel(LaneWord::with_active(base, a ? a - 1 : 0), slot + 1, op);
    if (lane_cas(s, lane, w, nw)) {
      FAIRLANE_FAILPOINT("ack.released");
      slot_out = slot;
      sw_out = sw;
      lane_out = lane;
      return Take::ok;
    }
  }
  if (lane != kNoLane) give_back_ref(lane);
  report_corrupt(s, CorruptWhat::lane_word);
  return Take::corrupt;
}

// After release_lease: moves the slot on (the caller's own finishing of its
// release; a helper may have done it already, then this does nothing).
void finish_release(Segment& s, std::uint32_t slot, Word128 sw, std::uint32_t lane) noexcept {
  Word128 w = lane_load(s, lane);
  if (LaneWord::rel(w) == slot + 1) lane_base(s, lane, w);  // the same finishing as a helper's
  (void)sw;
}

Moved move_to_lane(Segment& s, std::uint32_t slot, Word128 from, MoveFrom what, std::uint32_t attempt) noexcept {
  SlotRecord& r = s.slot(slot);
  const std::uint32_t lane = r.lane.load(std::memory_order_relaxed);
  if (lane >= s.lane_count) {
    report_corrupt(s, CorruptWhat::slot_record);
    return Moved::corrupt;
  }
  // Take the move: a returning slot nobody has taken yet, a scheduled or a
  // dead one. Ours after this CAS; the refs of its lane count it meanwhile
  // (a scheduled or dead job already was; a returning one since its release).
  const std::uint64_t ctr = SlotWord::ctr(from);
  const Word128 mine = SlotWord::make(SlotState::returning, attempt, 0, ctr, my_holder(s));
  if (what == MoveFrom::lease) {
    if (SlotWord::state(from) != SlotState::returning || SlotWord::holder(from) != 0) return Moved::changed;
  }
  if (!slot_cas(s, slot, from, mine)) return Moved::changed;
  FAIRLANE_FAILPOINT("move.taken");
  r.ready_us.store(segment_now_us(s), std::memory_order_relaxed);
  const OrderResult o = strays_insert(s, lane, slot, node_tag(ctr), false);
  if (o != OrderResult::ok) return Moved::corrupt;
  FAIRLANE_FAILPOINT("move.linked");
  Word128 cur = mine;
  // [R8] release: the job is pending in its lane; a claimer that took it from
  // the strays meanwhile has already leased it (its CAS from returning), and
  // then this CAS fails, which is fine.
  slot_cas(s, slot, cur, SlotWord::make(SlotState::pending, attempt, 0, ctr, 0));
  s.lanes[lane].refs.fetch_sub(1, std::memory_order_seq_cst);
  log_job(s, slot);
  return Moved::ok;
}

// A returning slot that nobody links (its releaser moved on): link it now.
void link_returned(Segment& s, std::uint32_t slot) noexcept {
  const Word128 w = slot_load(s, slot);
  if (SlotWord::state(w) == SlotState::returning && SlotWord::holder(w) == 0)
    move_to_lane(s, slot, w, MoveFrom::lease, SlotWord::attempt(w));
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

}  // namespace

AckStatus Queue::complete(const BrandedId& job, Token token) noexcept {
  Segment& s = *seg_;
  std::uint64_t sf = 0;
  if (!s.me || job_snowflake(s, job, sf) != IdCheck::ok) return AckStatus::gone;
  std::uint32_t slot = 0, lane = 0;
  Word128 sw;
  const Take t = release_lease(s, sf, token, RelOp::complete, slot, sw, lane);
  if (t != Take::ok) return to_ack(t);
  finish_release(s, slot, sw, lane);
  FAIRLANE_FAILPOINT("complete.freed");
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
  std::uint64_t sf = 0;
  if (!s.me || job_snowflake(s, job, sf) != IdCheck::ok) return FailStatus::gone;
  const std::uint32_t slot = token_slot(s, token);
  if (slot >= s.jobs) return index_find(s, sf) != kNoSlot ? FailStatus::stale : FailStatus::gone;
  SlotRecord& r = s.slot(slot);
  const Word128 seen = slot_load(s, slot);
  if (SlotWord::state(seen) != SlotState::leased || r.sf.load(std::memory_order_acquire) != sf ||
      !token_matches(s, token, SlotWord::ctr(seen)))
    return index_find(s, sf) != kNoSlot ? FailStatus::stale : FailStatus::gone;
  const std::uint32_t attempt = SlotWord::attempt(seen);
  // What it does: the call's options, then the job's policy, then the queue's.
  const RetryPolicy job_policy = (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
                                     ? retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed))
                                     : RetryPolicy{};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const FailPlan plan = plan_fail(options, job_policy, queue_default_retry(s), attempt, u);
  const std::uint64_t now = segment_now_ms(s);
  const bool dead = attempt >= std::max<std::uint32_t>(plan.max_attempts, 1);
  RelOp op = RelOp::back;
  if (dead) {
    r.fail_to.store(target_lo(SlotState::dead, attempt, now), std::memory_order_relaxed);
    op = RelOp::park;
  } else if (plan.delay_ms > 0) {
    r.fail_to.store(target_lo(SlotState::scheduled, attempt, now + plan.delay_ms), std::memory_order_relaxed);
    op = RelOp::park;
  }
  // The error is the lease holder's to write; written before the release so
  // that it is with the job when the job moves on.
  const std::size_t n = std::min<std::size_t>(options.error.size(), kErrorBytes);
  if (n) std::memcpy(r.error, options.error.data(), n);
  r.error_len.store(std::uint8_t(n), std::memory_order_relaxed);
  std::uint32_t got = 0, lane = 0;
  Word128 sw;
  const Take t = release_lease(s, sf, token, op, got, sw, lane);
  switch (t) {
    case Take::ok: break;
    case Take::stale: return FailStatus::stale;
    case Take::gone: return FailStatus::gone;
    case Take::corrupt: return FailStatus::corrupt;
  }
  FAIRLANE_FAILPOINT("fail.released");
  finish_release(s, slot, sw, lane);
  if (op == RelOp::back) {
    link_returned(s, slot);
  } else if (!dead) {
    lower_next_due(s, now + plan.delay_ms);
    notify(s, INT_MAX);  // parked consumers shorten their sleep to the new due time
  }
  log_job(s, slot);
  count(s, dead ? &CounterBlock::dead : &CounterBlock::retried);
  return dead ? FailStatus::dead : FailStatus::retrying;
}

AckStatus Queue::release(const BrandedId& job, Token token) noexcept {
  Segment& s = *seg_;
  std::uint64_t sf = 0;
  if (!s.me || job_snowflake(s, job, sf) != IdCheck::ok) return AckStatus::gone;
  std::uint32_t slot = 0, lane = 0;
  Word128 sw;
  const Take t = release_lease(s, sf, token, RelOp::release, slot, sw, lane);
  if (t != Take::ok) return to_ack(t);
  finish_release(s, slot, sw, lane);
  link_returned(s, slot);
  count(s, &CounterBlock::released);
  return AckStatus::ok;
}

AckStatus Queue::extend(const BrandedId& job, Token token, std::uint32_t lease_ms) noexcept {
  Segment& s = *seg_;
  std::uint64_t sf = 0;
  if (!s.me || job_snowflake(s, job, sf) != IdCheck::ok) return AckStatus::gone;
  const std::uint32_t slot = token_slot(s, token);
  if (slot >= s.jobs) return to_ack(index_find(s, sf) != kNoSlot ? Take::stale : Take::gone);
  const SlotRecord& r = s.slot(slot);
  const std::uint64_t now = segment_now_ms(s);
  Word128 w = slot_load(s, slot);
  for (;;) {
    if (r.sf.load(std::memory_order_acquire) != sf || SlotWord::state(w) != SlotState::leased ||
        !token_matches(s, token, SlotWord::ctr(w)) || SlotWord::when(w) <= now)
      // Past its deadline a lease may be taken back at any moment: too late
      // to extend (the sweep and this call judge by the same deadline).
      return to_ack(index_find(s, sf) != kNoSlot ? Take::stale : Take::gone);
    const Word128 nw = SlotWord::make(SlotState::leased, SlotWord::attempt(w), now + lease_ms, SlotWord::ctr(w),
                                      SlotWord::holder(w));
    // [A5] (cas128): fenced by the token (ctr) and the deadline it saw.
    if (slot_cas(s, slot, w, nw)) break;
  }
  lower_next_due(s, now + lease_ms);
  log_job(s, slot);
  return AckStatus::ok;
}

std::size_t Queue::release_all() noexcept {
  Segment& s = *seg_;
  if (!s.me) return 0;
  const std::uint32_t me = my_holder(s);
  std::size_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const Word128 w = slot_load(s, i);
    if (SlotWord::state(w) != SlotState::leased || SlotWord::holder(w) != me) continue;
    char text[kIdLength];
    load_id_text(s, s.slot(i), text);
    const BrandedId id = BrandedId::make(std::string_view(s.kind, 3), s.slot(i).sf.load(std::memory_order_relaxed));
    n += release(id, make_token(s, i, SlotWord::ctr(w))) == AckStatus::ok;
  }
  return n;
}

}  // namespace fairlane
