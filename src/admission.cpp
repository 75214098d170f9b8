// Admission: mint, enqueue, enqueue_batch, import_job.
//
// An enqueue of a pending job (docs/design.md, "Admission"):
//   1. checks that write nothing: the ids, the payload, the policy, a live
//      duplicate (an admitting one met here is decided first), the mirror;
//   2. takes a free slot (CAS free -> admitting, the slot's ctr moves on)
//      and writes the job into it;
//   3. finds or makes its group's lane, and appends it to the lane's run
//      (its intent names it first, so that survivors can tell whether it
//      got linked if this process dies);
//   4. writes its index entry and decides the admission against any rival
//      enqueue of the same id (id_index.hpp): committed, it is pending in its
//      lane; lost, its slot is a husk for the next claim to pop and free.
// A job whose id is older than its lane's tail (or that meets a tail being
// popped) is admitted scheduled, due now, and promoted into the lane's
// strays at once: the slow path, for ids minted elsewhere.
#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"
#include "util.hpp"

namespace fairlane {
using namespace detail;

namespace detail {

namespace {
// A value for this thread's next look: its thread record's index + 1 over
// a 16-bit count of its looks; 0 (no look of its own) for a thread without
// a thread record. Tokens go to one hint at a time: a walk begins at most
// one look at each hint, so a count that wraps within one walk (a table of
// over 4,194,304 slots) never puts one token on one hint twice while its
// look is on. (Threads without a record used to share one owner number,
// and two of them could in principle write one token: they look without
// owning now.)
std::uint32_t look_token(Segment& s) noexcept {
  thread_local std::uint32_t looks = 0;
  const ThreadRecord* t = s.thread();
  if (!t) return 0;
  // Thread records number at most 16 a process record, 65,520: who fits
  // 16 bits, and a token is kHintOwned or more.
  const std::uint32_t who = std::min<std::uint32_t>(std::uint32_t(t - s.threads) + 1, 0xFFFF);
  return (who << 16) | (++looks & 0xFFFF);
}

// One look over a hint (a block's or a group's): passed if it says none;
// else owned by a CAS to a token of this thread's, or made without owning
// (slots.hpp).
struct HintLook {
  std::atomic<std::uint32_t>* h = nullptr;
  std::uint32_t token = 0;
  bool owner = false;
  bool none = false;  // the hint said kHintNone: pass

  void begin(Segment& s, std::atomic<std::uint32_t>& hint, bool may_own) noexcept {
    h = &hint;
    std::uint32_t seen = hint.load(std::memory_order_seq_cst);
    none = seen == kHintNone;
    token = !none && seen < kHintOwned && may_own ? look_token(s) : 0;
    owner = token != 0 && hint.compare_exchange_strong(seen, token);
  }
  // Ends an owned look: kHintNone if it found none free, else 0 ("look
  // again next time"). The CAS fails if a slot was freed meanwhile (then 0
  // is there). True if this look put kHintNone there.
  bool end(bool found_none) noexcept {
    if (!owner) return false;
    owner = false;
    std::uint32_t mine = token;
    return h->compare_exchange_strong(mine, found_none ? kHintNone : 0) && found_none;
  }
};

// Looks over block b for a free slot. `said_none`: the block's hint said
// none, or this look owned it and turned it to none.
std::uint32_t look_block(Segment& s, std::uint32_t b, bool may_own, std::uint32_t holder, std::uint64_t& ctr_out,
                         bool& said_none) noexcept {
  HintLook look;
  look.begin(s, s.hints[b], may_own);
  said_none = look.none;
  if (look.none) return kNoSlot;
  const std::uint32_t lo = b * kHintBlock, hi = std::min(s.jobs, lo + kHintBlock);
  for (std::uint32_t i = lo; i < hi; ++i) {
    if (take_free_slot(s, i, holder, ctr_out)) {
      look.end(false);  // more may be free: look again next time
      return i;
    }
  }
  FAIRLANE_FAILPOINT("alloc.block_looked");
  said_none = look.end(true);
  return kNoSlot;
}

// After a walk over group g in which every block said none: owns the
// group's look and reads its block hints again, all after its CAS; if all
// still say none, the group says none (slots.hpp). A walk that finds a
// slot writes nothing over its group: the group's look is owned only when
// there is a none to write, so an allocation through the hints in a table
// kept full makes the two locked instructions of its block's look, not
// four.
void conclude_group(Segment& s, std::uint32_t g, bool may_own) noexcept {
  HintLook look;
  look.begin(s, s.group_hints[g], may_own);
  if (!look.owner) return;
  const std::uint32_t lo = g * kHintGroup, hi = std::min(hint_blocks(s.jobs), lo + kHintGroup);
  bool none = true;
  for (std::uint32_t b = lo; b < hi && none; ++b) none = s.hints[b].load(std::memory_order_seq_cst) == kHintNone;
  if (none) FAIRLANE_FAILPOINT("alloc.group_looked");
  look.end(none);
}

}  // namespace

[[gnu::noinline, gnu::cold]] std::uint32_t alloc_slot_by_hints(Segment& s, std::uint32_t block, std::uint32_t holder,
                                                              std::uint64_t& ctr_out) noexcept {
  const std::uint32_t blocks = hint_blocks(s.jobs), groups = hint_groups(s.jobs);
  const std::uint32_t b0 = block < blocks ? block : 0, g0 = b0 / kHintGroup;
  // A copy of a handle in a child forked without exec looks without owning
  // while it is one (found in review: its tokens were its parent's). Today
  // no copy gets here: a copy becomes its child's own attachment before its
  // first enqueue, or refuses it (writer()). Told by the handle's copy
  // state, as writer() tells it, not by getpid(): that is a system call,
  // and it was made for every block looked at, so a producer that keeps a
  // table near full paid one at almost every enqueue (2.1-2.8% of the bare
  // flow's samples, docs/perf/bare-rounds-2026-12-06b.txt).
  const bool may_own = s.copy_state.load(std::memory_order_relaxed) == Segment::kCopyOwn;
  auto look_blocks = [&](std::uint32_t lo, std::uint32_t hi, bool& all_none) -> std::uint32_t {
    for (std::uint32_t b = lo; b < hi; ++b) {
      bool said_none = false;
      if (const std::uint32_t got = look_block(s, b, may_own, holder, ctr_out, said_none); got != kNoSlot) return got;
      all_none = all_none && said_none;
    }
    return kNoSlot;
  };
  auto group_none = [&](std::uint32_t g) {
    return s.group_hints[g].load(std::memory_order_seq_cst) == kHintNone;
  };
  // b0's group in two pieces: its blocks from b0 on first, those before b0
  // last (the cursor's own block among them, or in the group before b0's,
  // the last of the others).
  const std::uint32_t g0_lo = g0 * kHintGroup, g0_hi = std::min(blocks, g0_lo + kHintGroup);
  const bool g0_open = !group_none(g0);
  bool g0_none = true;
  if (g0_open)
    if (const std::uint32_t got = look_blocks(b0, g0_hi, g0_none); got != kNoSlot) return got;
  for (std::uint32_t k = 1; k < groups; ++k) {
    const std::uint32_t g = (g0 + k) % groups;
    if (group_none(g)) continue;
    bool all_none = true;
    const std::uint32_t lo = g * kHintGroup;
    if (const std::uint32_t got = look_blocks(lo, std::min(blocks, lo + kHintGroup), all_none); got != kNoSlot) return got;
    if (all_none) conclude_group(s, g, may_own);
  }
  if (!g0_open) return kNoSlot;
  if (const std::uint32_t got = look_blocks(g0_lo, b0, g0_none); got != kNoSlot) return got;
  if (g0_none) conclude_group(s, g0, may_own);
  return kNoSlot;
}

IdCheck job_snowflake_decoded(const Segment& s, const BrandedId& id, std::uint64_t& sf) noexcept {
  if (!id.valid()) return IdCheck::invalid;
  const char* b = IdAccess::bytes(id);
  IdError why = IdError::ok;
  if (!decode_digits(b + kKindLength, sf, why)) return IdCheck::invalid;
  if (std::memcmp(b, s.kind, kKindLength) != 0)
    return valid_kind(std::string_view(b, kKindLength)) ? IdCheck::kind_mismatch : IdCheck::invalid;
  return IdCheck::ok;
}

// A group id's key, or false if it is not well formed.
bool group_of(const BrandedId& group, GroupKey& g) noexcept {
  if (!group.valid()) return false;
  const char* b = IdAccess::bytes(group);
  // Groups this thread named lately, first (direct-mapped on the id's low
  // digits): a producer names the same tenants over and over.
  struct Entry {
    char id[sizeof(BrandedId)];  // as an id's 16 bytes (same_id_bytes)
    GroupKey key;
  };
  thread_local Entry cache[256] = {};
  // Keyed on bytes 6-13 (digits 3-10), put together from the id's two
  // words: loaded whole, as they were stored.
  std::uint64_t w0 = 0, w1 = 0;
  id_words_at(b, w0, w1);
  const std::uint64_t tail8 = (w0 >> 48) | (w1 << 16);
  Entry& e = cache[(tail8 * 0x9E3779B97F4A7C15ULL) >> 56];
  if (same_id_words(w0, w1, e.id)) {
    g = e.key;
    return true;
  }
  if (!valid_kind(std::string_view(b, kKindLength))) return false;
  IdError why = IdError::ok;
  if (!decode_digits(b + kKindLength, g.sf, why)) return false;
  g.kind = kind_code(std::string_view(b, kKindLength));
  std::memcpy(e.id, b, sizeof e.id);
  e.key = g;
  return true;
}

bool is_default_group(const BrandedId& group) noexcept {
  return !group.valid() || same_id_words(kDefaultGroupW0, kDefaultGroupW1, IdAccess::bytes(group));
}

std::uint32_t group_lane(Segment& s, const BrandedId& group, bool create, LaneFind& find) noexcept {
  if (is_default_group(group)) {
    find = LaneFind::found;
    return kDefaultLane;
  }
  GroupKey g;
  if (!group_of(group, g)) {
    find = LaneFind::corrupt;  // the callers check well-formedness first; never reached with their ids
    return kNoLane;
  }
  std::uint32_t lane = kNoLane;
  find = lane_find(s, g, create, lane);
  return find == LaneFind::found ? lane : kNoLane;
}

namespace {

// How a job is admitted: enqueue admits it pending (or scheduled, delayed)
// at attempt 0; import_job puts back a job restored from elsewhere.
struct Admission {
  SlotState state = SlotState::pending;
  std::uint32_t attempt = 0;
  std::uint64_t when_ms = 0;  // scheduled: due time; dead: when it died
  std::string_view error = {};
  const RetryPolicy* retry = nullptr;
  bool restoring = false;  // import_job: no mirror checks, no waiting on Valkey
};


// Where this thread's allocations look first (its thread record's hint).
std::uint32_t& alloc_cursor(Segment& s) noexcept {
  thread_local std::uint32_t fallback = 0;
  thread_local std::uint64_t fallback_handle = 0;
  if (fallback_handle != s.handle_id) {
    fallback_handle = s.handle_id;
    fallback = std::uint32_t((gettid_cached() * 2654435761U) % std::max<std::uint32_t>(s.jobs, 1));
  }
  return fallback;
}

// Gives a slot back that this admission took and nobody else can know of:
// not linked, no index entry.
// Only the admission of `ctr`, admitting or killed (a word at another ctr,
// or aborted naming a successor, is a job that went on: not ours).
void give_back(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::ctr(w) == ctr &&
         (SlotWord::state(w) == SlotState::admitting ||
          (SlotWord::state(w) == SlotState::aborted && SlotWord::when(w) == 0))) {
    if (slot_cas(s, slot, w, SlotWord::make(SlotState::free, 0, 0, ctr, 0))) {
      note_freed(s, slot);
      return;
    }
  }
}

// After a lost admission: a linked slot becomes a husk for a claim to pop
// (holder 0 says it is linked); an unlinked one is freed now.
void drop_lost(Segment& s, std::uint32_t slot, std::uint64_t ctr, bool linked) noexcept {
  Word128 w = slot_load(s, slot);
  if (!linked) {
    free_aborted(s, slot, ctr);
    return;
  }
  // Done with it: a husk in its run for a claim to pop and free (holder 0
  // says so), or, if a claim popped it already, freed now (release_husk).
  // Only our admission's husk (its ctr): nothing else is ours to touch.
  while (SlotWord::state(w) == SlotState::aborted && SlotWord::holder(w) != 0 && SlotWord::ctr(w) == ctr) {
    if (husk_popped(w)) {
      free_aborted(s, slot, SlotWord::ctr(w));
      return;
    }
    if (slot_cas(s, slot, w, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), 0))) return;
  }
}

void write_job(Segment& s, std::uint32_t slot, std::uint64_t sf, const BrandedId& job, const GroupKey* g,
               std::string_view payload, const Admission& a, std::uint64_t ctr) noexcept {
  SlotRecord& r = s.slot(slot);
  // The previous job's index entries are not taken out: they go stale when
  // the admission tag moves on below, and inserts reuse their ways.
  // Ours alone until linked or indexed; those CASes publish every field.
  r.sf.store(sf, std::memory_order_relaxed);
  store_digits(r, IdAccess::bytes(job));
  r.payload_len.store(std::uint32_t(payload.size()), std::memory_order_relaxed);
  if (!payload.empty()) std::memcpy(Segment::payload_of(r), payload.data(), payload.size());
  const std::size_t n = std::min<std::size_t>(a.error.size(), kErrorBytes);
  if (n) std::memcpy(r.error, a.error.data(), n);
  r.error_len.store(std::uint8_t(n), std::memory_order_relaxed);
  std::uint16_t flags = 0;
  if (a.retry && (a.retry->max_attempts || a.retry->backoff)) {
    std::uint64_t ra = 0, rb = 0;
    retry_encode(*a.retry, ra, rb);
    r.retry.a.store(ra, std::memory_order_relaxed);
    r.retry.b.store(rb, std::memory_order_relaxed);
    flags |= kSlotHasRetry;
  }
  r.flags.store(flags, std::memory_order_relaxed);
  r.group_kind.store(g ? g->kind : kNoGroup, std::memory_order_relaxed);
  r.group_sf.store(g ? g->sf : 0, std::memory_order_relaxed);
  r.fail_to.store(target_lo(a.state, a.attempt, a.when_ms), std::memory_order_relaxed);
  r.ready_us.store(segment_now_us(s), std::memory_order_relaxed);
  r.level.store(0, std::memory_order_relaxed);
  // The admission tag moves on: index entries of earlier admissions of this
  // slot are stale from here ([R9] release: before any entry with the new tag).
  s.tags[slot].store(std::uint8_t(s.tags[slot].load(std::memory_order_relaxed) + 1), std::memory_order_release);
  // [R14] release: helpers may decide this admission from here.
  r.pub.store(ctr, std::memory_order_release);
}

// What became of an admission's link: in its lane's run; for the strays
// (out of the run's order: it is admitted scheduled, due now, and promoted);
// or refused (no lane for its group, or corruption: the status says which).
enum class Linked { run, strays, refused };

// Appends the admitting slot to its group's lane.
Linked link_admission(Segment& s, std::uint32_t slot, std::uint64_t ctr, const GroupKey* g, IntentGuard& guard,
                      EnqueueStatus& refusal, AdmitOut& out) noexcept {
  const GroupKey key = g ? *g : GroupKey{};
  SameLaneRounds rounds;  // a lane that is not g's, met again and again
  for (;;) {
    std::uint32_t lane = kDefaultLane;
    Word128 w;
    bool checked = false;  // w read, and the lane found g's after it (lane_find_cached)
    if (g) {
      const LaneFind f = lane_find_cached(s, key, lane, w, checked);
      if (f != LaneFind::found) {
        refusal = f == LaneFind::corrupt ? EnqueueStatus::corrupt : EnqueueStatus::lanes_full;
        out.buckets_full = f == LaneFind::buckets_full;
        return Linked::refused;
      }
    }
    FAIRLANE_FAILPOINT("enqueue.lane_found");
    s.slot(slot).lane.store(lane, std::memory_order_relaxed);
    // pred first: a survivor that reads the intent reads this pred or a later one.
    if (guard.pred()) guard.pred()->store(0, std::memory_order_relaxed);
    guard.set(Intent::link, slot, ctr, lane);
    // A word read before the intent is set is as good as one read after: no
    // one else reads our reading, and every CAS from it comes after the intent.
    if (!checked) w = lane_load(s, lane);
    switch (run_append(s, lane, key, slot, node_tag(ctr), w, guard.pred(), checked)) {
      case OrderResult::ok:
        return Linked::run;
      case OrderResult::lane_changed:
        guard.clear();
        if (rounds.stuck(lane, w)) {
          report_corrupt(s, CorruptWhat::directory);
          refusal = EnqueueStatus::corrupt;
          return Linked::refused;
        }
        continue;  // reclaimed under us: find it again
      case OrderResult::out_of_order:
      case OrderResult::sealed:
        guard.clear();
        return Linked::strays;
      default:
        guard.clear();
        refusal = EnqueueStatus::corrupt;
        return Linked::refused;
    }
  }
}

EnqueueStatus admit(Segment& s, const BrandedId& group, const BrandedId& job, std::string_view payload,
                    const Admission& in, AdmitOut& out) noexcept {
  if (!writer(s)) return EnqueueStatus::read_only;
  std::uint64_t sf = 0;
  switch (job_snowflake(s, job, sf)) {
    case IdCheck::ok: break;
    case IdCheck::invalid: return EnqueueStatus::invalid_id;
    case IdCheck::kind_mismatch: return EnqueueStatus::kind_mismatch;
  }
  GroupKey gk;
  const bool grouped = !is_default_group(group);
  if (grouped && !group_of(group, gk)) return EnqueueStatus::invalid_group;
  const GroupKey* g = grouped ? &gk : nullptr;
  if (payload.size() > s.payload_bytes) return EnqueueStatus::payload_too_large;
  if (in.retry && !retry_valid(*in.retry)) return EnqueueStatus::invalid_argument;
  // An id this thread minted lately, on its first enqueue here: it has a
  // live duplicate only if another thread was handed it and enqueued it
  // first, or another segment minted the same number and it was enqueued
  // here. The look-up before the work is skipped for it; the decision after
  // the link (index_admit) settles every duplicate anyway, at the price of a
  // husk. (A number equal to a minted one is that id, or one of another
  // kind whose only cost is the skipped look-up.) Lately, not only last:
  // a batch mints its ids first and enqueues them after.
  bool fresh = t_mint_memo.take_fresh(sf);
  // The id's first index bucket is written after the slot is taken, filled
  // and linked; a fresh id skips the look-up that would read it first, so
  // it is fetched now (for write) and arrives while that work is done. In
  // a large queue the buckets are far out of cache: this was a miss that
  // stalled every enqueue. A hint only.
  const IndexProbe probe = index_probe(s, sf);
  if (fresh) __builtin_prefetch(&s.index[probe.b1], 1);

  // A round ends early only when another thread undid the id's holder and
  // ours with it (Admit::lost): its progress, so the loop is not bounded.
  for (;; fresh = false) {
    // A live duplicate costs nothing. An admitting rival is decided first,
    // so that a duplicate is found here rather than after our own link.
    std::uint32_t admitting = kNoSlot;
    Word128 admitting_word;
    if (const std::uint32_t found = fresh ? kNoSlot : index_find(s, probe, sf, &admitting, &admitting_word);
        found != kNoSlot) {
      settle_found(s, found, sf);
      count(s, &CounterBlock::duplicates);
      return EnqueueStatus::duplicate;
    }
    if (admitting != kNoSlot && index_resolve(s, admitting, admitting_word, false, sf)) {
      count(s, &CounterBlock::duplicates);
      return EnqueueStatus::duplicate;
    }
    if (s.log && !in.restoring) {
      if (auto refused = mirror_admission_check(s)) return *refused;
    }
    ThreadRecord* const rec = s.thread();  // for the guard and the counter: looked up once
    IntentGuard guard(s, rec);
    std::uint64_t ctr = 0;
    std::uint32_t& cursor = alloc_cursor(s);
    const std::uint32_t holder = my_holder(s);
    const std::uint32_t slot = alloc_slot(s, cursor, holder, ctr);
    if (slot == kNoSlot) return EnqueueStatus::full;
    FAIRLANE_FAILPOINT("enqueue.slot_taken");
    Admission a = in;
    write_job(s, slot, sf, job, g, payload, a, ctr);

    bool linked = false, to_strays = false;
    std::uint32_t lane = kDefaultLane;
    if (a.state == SlotState::pending) {
      EnqueueStatus refusal = EnqueueStatus::corrupt;
      switch (link_admission(s, slot, ctr, g, guard, refusal, out)) {
        case Linked::run:
          linked = true;
          break;
        case Linked::refused:
          give_back(s, slot, ctr);
          return refusal;
        case Linked::strays:
          // Out of the run's order: admitted scheduled, due now, then promoted.
          to_strays = true;
          a.state = SlotState::scheduled;
          a.when_ms = 0;
          s.slot(slot).fail_to.store(target_lo(SlotState::scheduled, a.attempt, 0), std::memory_order_relaxed);
          break;
      }
      lane = s.slot(slot).lane.load(std::memory_order_relaxed);
    } else {
      // Admitted scheduled or dead: not pending yet, so no time it became
      // so (job() says 0, unknown); its move into a lane sets one. Here
      // rather than in write_job: a choice there cost the enqueue 5
      // instructions, and this branch is off its path.
      s.slot(slot).ready_us.store(0, std::memory_order_relaxed);
    }
    std::uint32_t winner = 0;
    // Our own: alloc_slot's word, and the commit of the target we wrote in
    // fail_to (write_job's, or the strays' above: `a` says which), with
    // flags that hold no kSlotMoved.
    const Word128 written = SlotWord::make(SlotState::admitting, 0, 0, ctr, holder);
    const OwnAdmission own{written, committed_word(target_lo(a.state, a.attempt, a.when_ms), 0, written)};
    Admit ad = index_admit(s, slot, probe, sf, ctr, winner, &own);
    // A helper committed it first (a claim that met it linked, with an index
    // entry of its own, or a rival enqueue's decision; it may be leased, or
    // moved, by now): it is admitted, and the answer says so. Our own
    // admission cannot be aborted at another ctr, so a kill that fails
    // means it was committed.
    if ((ad == Admit::full || ad == Admit::corrupt) && !index_kill(s, slot, ctr)) ad = Admit::won;
    if (ad != Admit::won) {
      if (ad == Admit::full || ad == Admit::corrupt) {
        if (linked) {
          drop_lost(s, slot, ctr, true);  // killed above: a husk in its run, for a claim to pop
        } else {
          give_back(s, slot, ctr);
        }
        guard.clear();
        if (ad == Admit::full) {
          out.index_full = true;
          return EnqueueStatus::full;
        }
        return EnqueueStatus::corrupt;
      }
      drop_lost(s, slot, ctr, linked);
      guard.clear();
      // A group lane made for this job alone goes back if nothing else needs it.
      if (grouped && lane != kDefaultLane) lane_try_reclaim(s, lane);
      if (ad == Admit::lost) continue;  // the id is free again: admit it afresh
      count(s, &CounterBlock::duplicates);
      return EnqueueStatus::duplicate;
    }
    FAIRLANE_FAILPOINT("enqueue.committed");
    guard.clear();
    count(s, rec, &CounterBlock::enqueued);
    if (to_strays) {
      // Ours only if still at our ctr: won may mean committed by a helper
      // and gone on since, and the slot another enqueue's delayed job.
      const Word128 sw = slot_load(s, slot);
      if (SlotWord::state(sw) == SlotState::scheduled && SlotWord::ctr(sw) == ctr)
        adopt_job(s, slot, sw, SlotWord::attempt(sw));
      lower_next_due(s, 0);  // if the promotion did not happen, the next sweep does it
    } else if (a.state == SlotState::scheduled) {
      lower_next_due(s, a.when_ms);
      notify(s, INT_MAX);  // parked consumers shorten their sleep to the new due time
    }
    if (in.restoring) {
      // Later mints stay above every restored id.
      std::uint64_t last = s.h->mint_last.load(std::memory_order_relaxed);
      while (last < sf && !s.h->mint_last.compare_exchange_weak(last, sf, std::memory_order_relaxed)) {
      }
      log_job(s, slot);
      return EnqueueStatus::enqueued;
    }
    if (s.log) return mirror_admitted(s, slot, out.wait_seq);
    return EnqueueStatus::enqueued;
  }
}

}  // namespace

}  // namespace detail

// ---- ids ----------------------------------------------------------------------------------

namespace {

// The id of kind `kind` and snowflake `sf` as its two words, bytes 0-7 and
// 8-15 (id_words), from this thread's last mint where it can: ids
// minted within about 3.5 ms of each other (62^4 snowflake units) share
// their first seven digits, so only the last four are worked out (two pair
// look-ups instead of eleven digits). Made in registers: text assembled on
// the stack a few bytes at a time and read back whole waits for the stores.
void mint_words(const char* kind, std::uint64_t sf, std::uint64_t& w0, std::uint64_t& w1) noexcept {
  constexpr std::uint64_t kLow = 62ULL * 62 * 62 * 62;
  const MintMemo& m = t_mint_memo;
  std::uint64_t k = 0;
  std::memcpy(&k, kind, kKindLength);
  const std::uint64_t high = sf / kLow;
  if (m.sf != 0 && high == m.sf / kLow) {
    w0 = k | (m.w0 & ~0xFFFFFFULL);  // digits 0-4 are the memo's
    // Digits 5 and 6 are the memo's (bytes 8-9), the last four (bytes 10-13)
    // this id's, and bytes 14-15 zero.
    w1 = (m.w1 & 0xFFFFULL) | (std::uint64_t(base62_low4_word(std::uint32_t(sf - high * kLow))) << 16);
    return;
  }
  std::uint64_t a = 0;
  std::uint32_t b = 0;
  detail::base62_words(sf, a, b);
  detail::id_words_of(k, a, b, w0, w1);
}

}  // namespace

BrandedId Queue::mint() noexcept { return mint_checked(seg_->kind); }

BrandedId Queue::mint(std::string_view kind) noexcept {
  if (!valid_kind(kind)) return {};
  return mint_checked(kind.data());
}

BrandedId Queue::mint_checked(const char* kind) noexcept {
  Segment& s = *seg_;
  const std::uint32_t node = s.h->node & 0x3FF;
  std::atomic<std::uint64_t>& last_word = s.h->mint_last;
  std::uint64_t last = last_word.load(std::memory_order_relaxed);
  for (;;) {
    // The coarse clock (a few ms behind at worst) is enough: the logical
    // clock below keeps ids strictly rising whatever the wall clock does.
    const std::uint64_t wall = unix_ms_coarse();
    const std::uint64_t ms = wall > kEpochMs ? wall - kEpochMs : 0;
    std::uint64_t next = last + 1;
    // 4,096 ids in one ms (or a foreign node's id from a restore): the next
    // ms, with our node.
    if ((next & 0xFFF) == 0 || ((next >> 12) & 0x3FF) != node) next = snowflake_of(snowflake_ms(last) + 1, node, 0);
    next = std::max(next, snowflake_of(ms, node, 0));
    // Minting faster than 4,096 ids a ms for a second: wait for the clock
    // (on time, never on another process). Mints alone take the logical
    // clock at most a ms past that second; further ahead, something else
    // put it there (an id imported from a host whose clock ran ahead, this
    // host's wall clock stepped back), and waiting would be waiting on that
    // for as long as it is ahead: every producer froze for the skew, and
    // for good after an id near the largest (found by a tester,
    // 2026-12-07). Then ids go on from it, rising as ever.
    if (const std::uint64_t at = snowflake_ms(next); at > ms + 1000 && at <= ms + 2000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      last = last_word.load(std::memory_order_relaxed);
      continue;
    }
    if (next > kMaxSnowflake) return {};
    // Relaxed is enough: the CAS on this one word is the whole protocol.
    if (last_word.compare_exchange_weak(last, next, std::memory_order_relaxed)) {
      std::uint64_t w0, w1;
      mint_words(kind, next, w0, w1);
      MintMemo& m = t_mint_memo;
      m.w0 = w0;
      m.w1 = w1;
      m.sf = next;
      m.fresh[next % MintMemo::kFreshIds] = next;
      return IdAccess::from_words(w0, w1);
    }
  }
}

// ---- enqueue ------------------------------------------------------------------------------

// Options by pointer: a call without any builds none (an EnqueueOptions is
// 64 bytes, zeroed and copied at every call that passes one by value: about
// 50 instructions of a cycle of 2,000 went to a default argument).
namespace detail {

// Inlined into Queue::enqueue_with (where `out` is a local nobody reads
// but for the mirror's wait); enqueue_wait calls it out of line. `out` as
// the caller made it: a fresh AdmitOut.
[[gnu::always_inline]] inline EnqueueStatus enqueue_in(Segment& s, const BrandedId& group, const BrandedId& job,
                                                       std::string_view payload, const EnqueueOptions* options,
                                                       AdmitOut& out) noexcept {
  Admission a;
  if (options) {
    if (options->delay_ms > 0) {
      // A due time is kept in the slot word's 44 bits: a longer delay
      // wrapped round there and made the job due at once. Refused before
      // anything is looked at (a bad id with it says invalid_argument too).
      if (options->delay_ms > kMaxDelayMs) [[unlikely]] return EnqueueStatus::invalid_argument;
      a.state = SlotState::scheduled;
      a.when_ms = segment_now_ms(s) + options->delay_ms;
    }
    a.retry = &options->retry;
  }
  const EnqueueStatus st = admit(s, group, job, payload, a, out);
  return out.wait_seq == kNoWait ? st : mirror_wait_acked(s, out.wait_seq);
}

EnqueueStatus enqueue_one(Segment& s, const BrandedId& group, const BrandedId& job, std::string_view payload,
                          const EnqueueOptions* options, AdmitOut& said) noexcept {
  said = AdmitOut{};
  return enqueue_in(s, group, job, payload, options, said);
}

}  // namespace detail

EnqueueStatus Queue::enqueue_with(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                  const EnqueueOptions* options) noexcept {
  AdmitOut said;
  return enqueue_in(*seg_, group, job, payload, options, said);
}

std::size_t Queue::enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < items.size() && i < statuses.size(); ++i) {
    statuses[i] = enqueue(items[i].group, items[i].job, items[i].payload, items[i].options);
    n += statuses[i] == EnqueueStatus::enqueued || statuses[i] == EnqueueStatus::not_durable;
  }
  return n;
}

EnqueueStatus Queue::import_job(const JobInfo& job, std::string_view payload) noexcept {
  // A due time past the slot word's 44 bits would be kept wrapped round.
  if (job.when_ms > SlotWord::kWhenMask) return EnqueueStatus::invalid_argument;
  Admission a;
  a.restoring = true;
  a.attempt = std::min<std::uint32_t>(job.attempt, SlotWord::kMaxAttempt);
  a.error = job.last_error;
  a.retry = &job.retry;
  switch (job.state) {
    case JobState::pending:
    case JobState::leased: a.state = SlotState::pending; break;  // its holder is gone
    case JobState::scheduled: a.state = SlotState::scheduled; a.when_ms = job.when_ms; break;
    case JobState::dead: a.state = SlotState::dead; a.when_ms = job.when_ms; break;
  }
  AdmitOut out;  // restoring: never waits
  return admit(*seg_, job.group, job.id, payload, a, out);
}

}  // namespace fairlane
