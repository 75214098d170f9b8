// The id index and the exactly-once admission decision (id_index.hpp).
#include "id_index.hpp"

#include <algorithm>

#include "failpoint.hpp"
#include "lanes.hpp"

namespace fairlane::detail {

namespace {

// Is entry e current (its slot's latest admission), and for which slot?
bool entry_current(const Segment& s, std::uint64_t e, std::uint32_t& slot) noexcept {
  const std::uint32_t s1 = IndexEntry::slot1(e);
  if (e == 0 || s1 == 0 || s1 > s.jobs) return false;
  slot = s1 - 1;
  return admit_tag(s, slot) == IndexEntry::tag(e);
}

// May entry e be overwritten? Not current, or current but for another id
// (an admission tag that came round again: the slot's job hashes elsewhere).
bool entry_reusable(const Segment& s, std::uint64_t e) noexcept {
  std::uint32_t slot = 0;
  if (!entry_current(s, e, slot)) return true;
  const std::uint64_t h = id_hash(s.slot(slot).sf.load(std::memory_order_acquire), s.seed);
  return IndexEntry::fp(e) != (std::uint32_t(h >> 34) & 0x3FFFFFFF) || SlotWord::state(slot_load(s, slot)) == SlotState::free;
}

// A reassign's target (kSlotMoved): its origin, as its fail_to names it.
bool moved_origin(const Segment& s, std::uint32_t slot, std::uint32_t& origin, std::uint64_t& ctr18) noexcept {
  const SlotRecord& r = s.slot(slot);
  if (!(r.flags.load(std::memory_order_relaxed) & kSlotMoved)) return false;
  const std::uint64_t v = SlotWord::when(Word128{r.fail_to.load(std::memory_order_acquire), 0});
  const std::uint32_t o1 = Successor::slot1(v);
  if (o1 == 0 || o1 > s.jobs) return false;
  origin = o1 - 1;
  ctr18 = Successor::ctr18(v);
  return true;
}

// Does the origin of a move name `slot` (the target, ctr its ctr) as where
// its job went? Then the move happened and the target is the job.
bool origin_names(const Segment& s, std::uint32_t origin, std::uint32_t slot, std::uint64_t ctr) noexcept {
  const Word128 ow = slot_load(s, origin);
  return SlotWord::state(ow) == SlotState::aborted && SlotWord::when(ow) == Successor::make(slot, ctr);
}

}  // namespace

bool named_copy(const Segment& s, std::uint32_t slot, const Word128& w) noexcept {
  std::uint32_t origin = 0;
  std::uint64_t c18 = 0;
  return SlotWord::state(w) == SlotState::admitting && admission_published(s, slot, w) &&
         moved_origin(s, slot, origin, c18) && origin_names(s, origin, slot, SlotWord::ctr(w));
}

Word128 committed_word(std::uint64_t fail_to, std::uint16_t flags, const Word128& admitting) noexcept {
  const Word128 t{fail_to, 0};
  SlotState st = SlotWord::state(t);
  std::uint64_t when = SlotWord::when(t);
  if (flags & kSlotMoved) when = 0;  // a moved job: due at once (fail_to named its origin)
  if (st != SlotState::pending && st != SlotState::scheduled && st != SlotState::dead) {
    st = SlotState::dead;  // scribbled target: keep the job where nothing serves it unasked
    when = 0;
  }
  if (st == SlotState::pending) when = 0;
  return SlotWord::make(st, SlotWord::attempt(t), when, SlotWord::ctr(admitting), 0);
}

namespace {

// The committed word an admitting slot becomes, from its record.
Word128 commit_word(const SlotRecord& r, const Word128& admitting) noexcept {
  return committed_word(r.fail_to.load(std::memory_order_acquire), r.flags.load(std::memory_order_relaxed), admitting);
}

// Commits admission `ctr` of a slot (to its target). True if it is
// committed after; false if it was aborted, or the slot has moved on to
// another admission (whose fate is not ours to decide: a caller that read
// the slot long ago looks again), or that admission is not yet published.
// Only the admission read is ever decided: every CAS expects its ctr.
bool commit(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  // The record's address, worked out once (the segment's fields would be
  // loaded again after each acquire load below, to work it out again).
  const SlotRecord& r = s.slot(slot);
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::admitting && SlotWord::ctr(w) == ctr) {
    if (!admission_published(r, w)) return false;
    // [R5] release (cas128): the job's fields are visible to whoever sees it committed.
    if (slot_cas(s, slot, w, commit_word(r, w))) return true;
  }
  return SlotWord::ctr(w) == ctr && committed_state(SlotWord::state(w));
}

// Aborts admission `ctr` of a slot. True if it is killed (aborted at ctr
// with `when` 0) after, by us or before; false if it got committed first
// (even if it has gone on since: free at ctr, or aborted naming a move's
// copy), or the slot has moved on to another admission, or that admission
// is not yet published (as commit).
bool kill(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  Word128 w = slot_load(s, slot);
  // A pending admission is linked in its run before anyone can kill it (its
  // index entry comes after the link): the kill makes it a husk there, which
  // is counted first (husk_count), in the lane's incarnation read while it
  // is linked, and given back if the kill fails. Counted after the CAS, a
  // killer stopped between the two counted it once the husk was popped (a
  // count one high for good), or in the record's next group
  // (`AKilledAdmissionsHuskIsCountedBeforeItCanBePopped`). The record's
  // fields are this admission's while its word is admitting at ctr.
  std::uint32_t lane = kNoLane;
  std::uint64_t inc = 0;
  bool looked = false, counted = false;
  while (SlotWord::state(w) == SlotState::admitting && SlotWord::ctr(w) == ctr) {
    if (!admission_published(s, slot, w)) break;
    if (!looked) {
      looked = true;
      const SlotRecord& r = s.slot(slot);
      const bool pending_target = SlotWord::state(Word128{r.fail_to.load(std::memory_order_relaxed), 0}) == SlotState::pending;
      const std::uint32_t l = r.lane.load(std::memory_order_relaxed);
      if (pending_target && !(r.flags.load(std::memory_order_relaxed) & kSlotMoved) && l < s.lane_count) {
        lane = l;
        inc = lane_incarnation(s, lane);
        husk_count(s, lane, inc);
        counted = true;
      }
    }
    const Word128 aborted = SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), SlotWord::holder(w));
    if (slot_cas(s, slot, w, aborted)) {
      FAIRLANE_FAILPOINT("index.killed");
      return true;
    }
  }
  if (counted) husk_uncount(s, lane, inc);
  // Killed is aborted at ctr with `when` 0 (admission_fate): not free at
  // ctr, nor aborted naming a successor (a committed job, moved since).
  return SlotWord::ctr(w) == ctr && SlotWord::state(w) == SlotState::aborted && SlotWord::when(w) == 0;
}

// The word of rival `r` if it is an admission (published) or a job of id
// `sf`: the id read between two loads of the word that agree, so that it
// is that incarnation's (the ctr moves at every admission).
// An admission not yet published has not written its entry either, so it
// is no rival yet: the rule "the later entry sees the earlier" holds
// without it. A word that moves under the two loads (a lease, an extend, a
// release) is read again, for as long as it moves: each move is another
// thread's step, and on bytes nobody writes the two loads agree. (It gave up
// after 8 readings, and a complete or fail of a job whose lease was being
// extended meanwhile answered `gone` instead of `stale`.)
bool rival_word(const Segment& s, std::uint32_t r, std::uint64_t sf, Word128& rw) noexcept {
  for (;;) {
    rw = slot_load(s, r);
    const SlotState st = SlotWord::state(rw);
    if (st == SlotState::admitting) {
      if (!admission_published(s, r, rw)) return false;
    } else if (!committed_state(st) && st != SlotState::aborted) {
      return false;
    }
    if (s.slot(r).sf.load(std::memory_order_acquire) != sf) return false;
    FAIRLANE_FAILPOINT("index.rival_read");
    if (slot_load(s, r) == rw) return true;
  }
}

bool has_entry(const Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept {
  bool found = false;
  index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
    std::uint32_t at = 0;
    found = IndexEntry::fp(e) == (p.fp & 0x3FFFFFFF) && entry_current(s, e, at) && at == slot;
    return !found;
  });
  return found;
}

// Writes an entry for `slot`: in a free way of the id's first bucket, else
// (the first bucket's overflow flag set first: readers then look at the
// second) of its second. A way is free when it is empty, or its entry is not
// current (its slot's admission tag has moved on: a job since replaced, or
// a scribble), or its slot is free (a job completed since). Entries are
// never taken out, so after a while most ways hold stale entries and an
// insert reuses the first stale one it meets (a tag read each way); one
// whose slot is free only if the bucket has no stale way. Only if neither bucket
// has one is an entry whose tag came round again looked for
// (entry_reusable). Eight entries per job slot keep a pair of buckets full
// of live jobs about a 1-in-10^9 event an insert (with four, a 114,688-job
// queue filled to the last slot said `full` early in 5 fills of 100: see
// docs/design.md, "The id index's size"). false: both full of current
// entries (reported as full, never ignored). Forced inline: out of line,
// its call costs every enqueue about nine instructions.
[[gnu::always_inline]] inline bool put_entry(Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept {
  const std::uint64_t mine = IndexEntry::make(p.fp, slot + 1, admit_tag(s, slot));
  IndexBucket& a = s.index[p.b1];
  // A way's CAS fails only when another insert wrote that way first: its
  // progress, so the loop is not bounded (with a bound, contention on one
  // bucket would answer `full` with free ways left).
  for (;;) {
    std::atomic<std::uint64_t>* way = nullptr;
    std::uint64_t e = 0;
    // Empty or stale is known from the tag alone: the first pass looks
    // for that. Only the second takes a way whose slot is free, which costs
    // a read of that slot's word, a line far from here: a miss per insert
    // in a large queue when such a way was taken wherever it came first.
    const auto free_way = [&](IndexBucket& b) {
      for (int pass = 0; pass < 2; ++pass) {
        for (unsigned k = 0; k < kIndexWays; ++k) {
          const std::uint64_t v = b.e[k].load(std::memory_order_relaxed);
          std::uint32_t at = 0;
          if (v == 0 || !entry_current(s, v, at) || (pass == 1 && SlotWord::state(slot_load(s, at)) == SlotState::free)) {
            way = &b.e[k];
            e = v;
            return;
          }
        }
      }
    };
    free_way(a);
    if (!way) {
      // [S4] seq_cst: the flag is set before any entry goes to the second
      // bucket; a reader that missed it saw the first bucket before, and then
      // our scan sees its entry.
      if (!a.overflow.load(std::memory_order_relaxed)) a.overflow.store(1, std::memory_order_seq_cst);
      free_way(s.index[p.b2(s)]);
    }
    if (!way) {
      for (unsigned k = 0; k < 2 * kIndexWays && !way; ++k) {
        std::atomic<std::uint64_t>& w = index_way(s, p, k);
        const std::uint64_t v = w.load(std::memory_order_relaxed);
        if (entry_reusable(s, v)) {
          way = &w;
          e = v;
        }
      }
      if (!way) return false;
    }
    // [S4] seq_cst: our entry is visible before we look for rivals (a
    // store-load pair with every rival's entry and scan). A CAS, not a
    // store: another insert may be reusing the same stale way.
    if (way->compare_exchange_strong(e, mine, std::memory_order_seq_cst)) return true;
  }
}

// A move's copy kills every admission of its id it meets, before its
// origin is dropped (a move outranks everyone; `slot` is the copy). A scan
// is no snapshot: an admitter may read a way before the copy's entry is
// written there, and the origin's way after the origin was dropped, popped,
// freed and the way reused; it saw no entry of the id, and committed a
// second job of it. Both wrote their entry before they scan [S4], so of
// the admitter and the copy one sees the other. If the admitter sees the
// copy, decide() meets it (or the origin, which the scan reads after it,
// still a job: an origin is freed only once its copy is decided). If the
// copy sees the admitter, it is still admitting: it could miss the origin
// only by reading the origin's way after the drop, which comes after this
// kill, and so its commit fails. Killing it loses nothing: its admitter
// answers duplicate if it then finds the id a job (the origin, or the copy),
// and otherwise admits the id afresh (Admit::lost): the origin may have
// ended meanwhile (claimed and completed: the move fails), and a mover
// stopped between its scan and a kill may kill a later admission of the id
// in the same slot, after the id ended. Another move's copy is left alone
// (only its mover decides it: decide_moved). The rivals are read after the
// scan, as decide() does.
void kill_admissions(Segment& s, const IndexProbe& p, std::uint32_t slot, std::uint64_t sf) noexcept {
  std::uint32_t found[2 * kIndexWays];
  unsigned n = 0;
  const std::uint32_t fp = p.fp & 0x3FFFFFFF;
  index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
    std::uint32_t r = 0;
    if (IndexEntry::fp(e) == fp && IndexEntry::slot1(e) != slot + 1 && entry_current(s, e, r)) found[n++] = r;
    return true;
  });
  for (unsigned k = 0; k < n; ++k) {
    Word128 rw;
    std::uint32_t origin = 0;
    std::uint64_t c18 = 0;
    if (rival_word(s, found[k], sf, rw) && SlotWord::state(rw) == SlotState::admitting &&
        !moved_origin(s, found[k], origin, c18))
      kill(s, found[k], SlotWord::ctr(rw));
  }
}

// What became of admission `ctr` of `slot`, no longer admitting (a kill or
// commit of it failed, or someone else's decision ended).
//
// At its ctr: a pending, leased, scheduled, dead or returning word is the
// job. A kill leaves the word aborted with `when` 0 (and, while its admitter
// decides, its holder: a claim that pops it only marks it, for the admitter
// to free). A committed job that a reassign dropped is aborted naming its
// copy (`when` != 0), and free once that husk is popped; a dead job purged is
// free as well: both were committed. (The admitter read aborted-or-free as
// killed, and admitted the id afresh: a delayed admission committed by a
// helper, made due, moved and served was admitted again and served twice:
// `AnAdmissionCommittedByAHelperAndMovedMeanwhileIsNotAdmittedAgain*`, found
// in review of 7692bd3.)
//
// `owner`: the admission's own admitter (or a move's, for its copy), which
// holds the slot until its decision returns; a killed admission of its is
// freed by it alone. To it, free at its ctr or a ctr moved on (leased since)
// is the job committed. A helper cannot tell those from a killed admission
// freed (and its slot taken again): unknown.
enum class Fate { committed, aborted, unknown };
Fate admission_fate(const Segment& s, std::uint32_t slot, std::uint64_t ctr, bool owner) noexcept {
  const Word128 w = slot_load(s, slot);
  if (SlotWord::ctr(w) != ctr) return owner ? Fate::committed : Fate::unknown;
  const SlotState st = SlotWord::state(w);
  if (committed_state(st)) return Fate::committed;
  if (st == SlotState::aborted) return SlotWord::when(w) != 0 ? Fate::committed : Fate::aborted;
  if (st == SlotState::free) return owner ? Fate::committed : Fate::unknown;
  return Fate::aborted;  // admitting: not published (nobody decides it)
}

bool admission_committed(const Segment& s, std::uint32_t slot, std::uint64_t ctr, bool owner) noexcept {
  return admission_fate(s, slot, ctr, owner) == Fate::committed;
}

// The decision of a reassign's target: it is the job iff its origin names
// it (the move's `drop` step happened). Nobody decides otherwise while its
// author may still take that step, except recovery for a dead author
// (cancel): the origin's lane's pending step applied first.
//
// A target no longer admitting at `ctr` was decided: at that ctr its word
// says how. Moved on to another ctr, only its mover (`mover`) can tell: a
// copy is killed only by its live mover (or, with cancel, for a dead one),
// so to the mover a ctr moved on is its copy committed and leased since. To
// anyone else it may as well be a copy its mover killed and freed, and a
// slot reused: not known to be the job (won is never said for it: an
// enqueue of the same id would answer duplicate with the id nowhere).
Admit decide_moved(Segment& s, std::uint32_t slot, std::uint64_t ctr, bool cancel, bool mover) noexcept {
  FAIRLANE_FAILPOINT("decide.moved");
  const auto decided = [&] {  // from one reading of the word (a second could see a reuse the first did not)
    return admission_fate(s, slot, ctr, mover) == Fate::committed ? Admit::won : Admit::duplicate;
  };
  std::uint32_t origin = 0;
  std::uint64_t c18 = 0;
  if (!moved_origin(s, slot, origin, c18)) {
    // Decided and its slot reused since the caller looked (the record is
    // the next admission's, not a move's): nothing here to decide. Only a
    // record that says so while the word is still this admission's is
    // scribbled.
    const Word128 now = slot_load(s, slot);
    if (SlotWord::state(now) != SlotState::admitting || SlotWord::ctr(now) != ctr) return decided();
    report_corrupt(s, CorruptWhat::slot_record);
    kill(s, slot, ctr);
    return Admit::duplicate;
  }
  const Word128 w = slot_load(s, slot);
  if (SlotWord::state(w) != SlotState::admitting || SlotWord::ctr(w) != ctr) return decided();
  if (!origin_names(s, origin, slot, SlotWord::ctr(w)) && cancel) {
    const std::uint32_t lane = s.slot(origin).lane.load(std::memory_order_relaxed);
    if (lane < s.lane_count) lane_update(s, lane, [](Word128 b) -> std::optional<Word128> { return b; });
  }
  if (origin_names(s, origin, slot, SlotWord::ctr(w))) {
    if (!commit(s, slot, ctr) && !admission_committed(s, slot, ctr, mover)) return Admit::duplicate;
    // Committed scheduled and due: the next claim's sweep adopts it into its
    // lane if its mover does not get there first.
    s.h->sweep.next_due.store(0, std::memory_order_release);
    return Admit::won;
  }
  if (cancel && kill(s, slot, ctr) && !admission_committed(s, slot, ctr, mover)) return Admit::duplicate;
  const Word128 now = slot_load(s, slot);
  if (SlotWord::state(now) == SlotState::admitting && SlotWord::ctr(now) == ctr) return Admit::undecided;
  return decided();
}

// Commits an admitting rival of ours (its word `rw`, of id `sf`) only by its
// own decision: a commit must follow a scan begun after an entry of the
// admission was written. Ours may have begun before the rival's entry; a
// move's copy indexed meanwhile (in a way we had read) killed every
// admission it met, not the rival yet unwritten, and the origin we would
// have met may have been freed since: the rival's own scan meets the copy,
// ours did not (`ARivalCommittedByAnotherAdmissionsScanThatMissedAMovesCopyIsADuplicate`,
// found in review of 8fefa35). True when the rival is committed after it.
// The recursion is shallow: each level is an admission of the id that
// another level found admitting, and it begins only after its caller's
// own admission is killed.
bool resolve_rival(Segment& s, std::uint32_t rival, const Word128& rw, std::uint64_t sf) noexcept {
  return index_resolve(s, rival, rw, false, sf);
}

// The decision for `slot`, whose entry is written (id_index.hpp). Returns
// won when slot is committed, duplicate (winner set) when another is.
//
// `owner`: the caller is the admission's own admitter. It holds the slot
// until this returns (a husk of its admission is freed by it alone), so to
// it a slot whose ctr has moved on was committed (and leased since). A
// helper (index_resolve) cannot tell: the admission may as well have been
// killed, freed and the slot taken again, and it answers `undecided` then,
// never `won` (a helper that said won for an admission killed and gone had
// an enqueue answer duplicate with no job of the id anywhere:
// `AHelpersDecisionOfARivalKilledAndReusedMeanwhileIsNotWon*`, found in
// review of 87de577).
Admit decide(Segment& s, const IndexProbe& p, std::uint32_t slot, std::uint64_t sf, std::uint64_t ctr,
             std::uint32_t& winner, bool owner) noexcept {
  // What became of the admission, no longer admitting at ctr (a kill or a
  // commit of ours failed).
  const auto fate = [&] { return admission_fate(s, slot, ctr, owner); };
  const auto known = [](Fate f) { return f == Fate::committed ? Admit::won : Admit::undecided; };
  // A rival that stopped being a job since the scan (freed, or dropped as a
  // reassign's origin) may live on as the move's copy, which a reassign
  // indexes before it drops the origin, and which looks for no rivals
  // itself: the scan is made again whenever such a rival (a slot at its
  // admission tag: a slot reused by a later copy is another) was not
  // already one in the last round, and the copy is met then. Without it, an
  // id reassigned between our scan and our reading of the origin was
  // admitted twice. Those rounds are not counted: each new one is another
  // thread's drop or free, and on bytes nobody writes the second round
  // finds the same set and goes on.
  std::uint64_t gone_last[2 * kIndexWays];
  unsigned ngone_last = 0;
  for (int round = 0; round < 256;) {
    std::uint64_t gone[2 * kIndexWays];
    unsigned ngone = 0;
    bool rescan = false;
    // Keyed by the admission tag of the entry the scan read, not the slot's
    // tag now: a slot read while a later admission into it is unpublished
    // (its tag already moved) would otherwise be filed under the job it is
    // about to become, and that job's own drop be taken for one seen before.
    const auto no_job_now = [&](std::uint32_t r, std::uint32_t entry_tag) {
      const std::uint64_t key = std::uint64_t(r) << 8 | entry_tag;
      if (ngone < 2 * kIndexWays) gone[ngone++] = key;
      if (std::find(gone_last, gone_last + ngone_last, key) == gone_last + ngone_last) rescan = true;
    };
    bool restart = false;
    // The other slots holding an entry of this id (nearly always none).
    std::uint32_t rivals[2 * kIndexWays];
    std::uint32_t rival_tags[2 * kIndexWays];  // each one's entry's admission tag
    unsigned n = 0;
    // An entry of our own slot (ours, or a helper's copy of it) is no
    // rival: passed before its admission tag is read.
    const std::uint32_t fp = p.fp & 0x3FFFFFFF;
    index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
      FAIRLANE_FAILPOINT("decide.way_read");
      std::uint32_t r = 0;
      if (IndexEntry::fp(e) == fp && IndexEntry::slot1(e) != slot + 1 && entry_current(s, e, r) &&
          s.slot(r).sf.load(std::memory_order_acquire) == sf) {
        rival_tags[n] = IndexEntry::tag(e);
        rivals[n++] = r;
      }
      return true;
    });
    for (unsigned k = 0; k < n && !restart; ++k) {
      FAIRLANE_FAILPOINT("decide.rival");
      const std::uint32_t rival = rivals[k];
      Word128 rw;
      const bool is_rival = rival_word(s, rival, sf, rw);
      if (is_rival) FAIRLANE_FAILPOINT("decide.rival_seen");
      if (!is_rival) {
        // Moved on since the scan (free, another id, or an admission not
        // yet published): not a rival. Still a job and still moving, or
        // perhaps moved by a reassign (above): look again.
        if (committed_state(SlotWord::state(slot_load(s, rival))))
          restart = true;
        else
          no_job_now(rival, rival_tags[k]);
        continue;
      }
      const SlotState st = SlotWord::state(rw);
      // A move in progress: its origin, or its target, outranks everyone.
      std::uint32_t origin = 0;
      std::uint64_t c18 = 0;
      const bool rival_moved = st == SlotState::admitting && moved_origin(s, rival, origin, c18);
      const std::uint32_t succ1 = st == SlotState::aborted ? Successor::slot1(SlotWord::when(rw)) : 0;
      if (succ1 != 0 && succ1 <= s.jobs && succ1 - 1 != slot) {
        // An origin whose move may be undecided: decide its target (which
        // the origin names, at its ctr: a target slot at another ctr was
        // decided and reused since, as free_aborted also checks), then
        // look again.
        // The target names this origin back (its own record, at the
        // origin's ctr): 18 bits of ctr alone can come round again on a
        // slot reused 2^18 times while the origin's husk stays linked.
        const Word128 tw = slot_load(s, succ1 - 1);
        std::uint32_t back = 0;
        std::uint64_t back18 = 0;
        if (SlotWord::state(tw) == SlotState::admitting &&
            (SlotWord::ctr(tw) & 0x3FFFF) == Successor::ctr18(SlotWord::when(rw)) &&
            moved_origin(s, succ1 - 1, back, back18) && back == rival && back18 == (SlotWord::ctr(rw) & 0x3FFFF)) {
          decide_moved(s, succ1 - 1, SlotWord::ctr(tw), false, false);
          restart = true;
        } else {
          no_job_now(rival, rival_tags[k]);  // the move is decided: its copy, if it is a job, is met by a scan
        }
        continue;
      }
      if (rival_moved) {
        if (origin_names(s, origin, rival, SlotWord::ctr(rw))) {
          decide_moved(s, rival, SlotWord::ctr(rw), false, false);
          restart = true;
        }
        continue;  // undecided: its origin (committed, a rival in its own right) decides for it
      }
      if (committed_state(st)) {
        // A live job with this id: we lose (unless we are committed already,
        // by a helper: then this is a stale reading of a rival that lost).
        if (!kill(s, slot, ctr)) {
          if (const Fate f = fate(); f != Fate::aborted) return known(f);
        }
        winner = rival;
        return Admit::duplicate;
      }
      if (st != SlotState::admitting) continue;  // aborted or free: not a rival
      if (rival < slot) {
        // It outranks us: it must be committed before we may say duplicate
        // (its admitter may be stopped).
        if (!kill(s, slot, ctr)) {  // committed first after all
          if (const Fate f = fate(); f != Fate::aborted) return known(f);
        }
        // By its own decision, not a bare commit: our scan began before its
        // entry may have been written, and may have missed a move's copy
        // whose kill came before that entry (resolve_rival).
        if (resolve_rival(s, rival, rw, sf)) {
          winner = rival;
          return Admit::duplicate;
        }
        restart = true;  // it was aborted meanwhile: look again
        continue;
      }
      if (!kill(s, rival, SlotWord::ctr(rw))) restart = true;  // it was committed first (or moved on): look again
    }
    std::copy(gone, gone + ngone, gone_last);
    ngone_last = ngone;
    if (restart) {
      ++round;
      continue;
    }
    if (rescan) continue;
    if (commit(s, slot, ctr)) return Admit::won;
    if (const Fate f = fate(); f != Fate::aborted) return known(f);
    // Killed by a rival that outranks us: make sure it (or whoever wins) is
    // committed, then it is a duplicate.
    const std::uint32_t w = index_find(s, sf);
    if (w != kNoSlot) {
      settle_found(s, w, sf);
      winner = w;
      return Admit::duplicate;
    }
    // Nobody committed yet: help the lowest admitting rival.
    std::uint32_t low = kNoSlot;
    Word128 low_word;
    index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
      std::uint32_t rival = 0;
      std::uint32_t o = 0;
      std::uint64_t c = 0;
      Word128 rw;
      if (IndexEntry::fp(e) == (p.fp & 0x3FFFFFFF) && entry_current(s, e, rival) && rival != slot && rival < low &&
          rival_word(s, rival, sf, rw) && SlotWord::state(rw) == SlotState::admitting && !moved_origin(s, rival, o, c)) {
        low = rival;
        low_word = rw;
      }
      return true;
    });
    if (low != kNoSlot && resolve_rival(s, low, low_word, sf)) {
      winner = low;
      return Admit::duplicate;
    }
    if (low == kNoSlot) return Admit::lost;  // nobody holds the id now (its holder was undone): start again
    ++round;
  }
  report_corrupt(s, CorruptWhat::id_index);
  return Admit::corrupt;
}

}  // namespace

std::uint32_t index_find(const Segment& s, std::uint64_t sf, std::uint32_t* admitting, Word128* admitting_word) noexcept {
  return index_find(s, index_probe(s, sf), sf, admitting, admitting_word);
}

std::uint32_t index_find(const Segment& s, const IndexProbe& p, std::uint64_t sf, std::uint32_t* admitting,
                         Word128* admitting_word) noexcept {
  std::uint32_t found = kNoSlot;
  index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
    std::uint32_t slot = 0;
    if (IndexEntry::fp(e) != (p.fp & 0x3FFFFFFF) || !entry_current(s, e, slot)) return true;
    Word128 w;
    if (!rival_word(s, slot, sf, w)) return true;
    const SlotState st = SlotWord::state(w);
    if (committed_state(st) || named_copy(s, slot, w)) {
      found = slot;
      return false;
    }
    if (st == SlotState::aborted) {
      // A reassign's origin, dropped: the job lives on in the copy it names,
      // whose way this scan may have read before the copy's entry was
      // written (the copy is indexed before the drop).
      const std::uint64_t succ = SlotWord::when(w);
      const std::uint32_t t1 = Successor::slot1(succ);
      Word128 tw;
      if (t1 != 0 && t1 <= s.jobs && t1 - 1 != slot && rival_word(s, t1 - 1, sf, tw) &&
          (SlotWord::ctr(tw) & 0x3FFFF) == Successor::ctr18(succ) &&
          (committed_state(SlotWord::state(tw)) || named_copy(s, t1 - 1, tw))) {
        found = t1 - 1;
        return false;
      }
    }
    if (st == SlotState::admitting && admitting) {
      *admitting = slot;
      if (admitting_word) *admitting_word = w;
    }
    return true;
  });
  return found;
}

Admit index_admit(Segment& s, std::uint32_t slot, std::uint64_t sf, std::uint64_t ctr, std::uint32_t& winner) noexcept {
  return index_admit(s, slot, index_probe(s, sf), sf, ctr, winner);
}

Admit index_admit(Segment& s, std::uint32_t slot, const IndexProbe& p, std::uint64_t sf, std::uint64_t ctr,
                  std::uint32_t& winner, const OwnAdmission* own) noexcept {
  if (!put_entry(s, p, slot)) return Admit::full;
  FAIRLANE_FAILPOINT("enqueue.indexed");
  std::uint32_t origin = 0;
  std::uint64_t c18 = 0;
  if (!own && moved_origin(s, slot, origin, c18)) {
    // A copy, indexed by its mover (before the origin is dropped).
    kill_admissions(s, p, slot, sf);
    return decide_moved(s, slot, ctr, false, true);
  }
  // Nearly always no other entry has the id's fingerprint: then decide's
  // first round would find no rival and commit, and so does this, without
  // its bookkeeping. The scan is decide's (the same seq_cst loads, after
  // our entry's store) with a looser test (the fingerprint alone: every
  // entry decide would take for a rival passes it), so finding none here
  // is decide finding none. Anything else, or a commit that fails, is
  // decide's to settle, from its first round.
  bool other = false;
  const std::uint32_t fp = p.fp & 0x3FFFFFFF;
  index_scan(s, p, [&](std::atomic<std::uint64_t>&, std::uint64_t e) {
    FAIRLANE_FAILPOINT("admit.way_read");
    other = IndexEntry::fp(e) == fp && IndexEntry::slot1(e) != slot + 1;
    return !other;
  });
  if (!other) {
    // Our own admission: the word we wrote is the word to replace, and the
    // commit is the one commit_word would work out from the record we
    // wrote; both known, so neither is read back. (We published it: the
    // [R14] check is ours to skip.) A CAS that fails (a helper decided it
    // meanwhile) is commit's to look at again.
    if (own) {
      Word128 w = own->admitting;
      if (slot_cas(s, slot, w, own->committed)) return Admit::won;
    }
    if (commit(s, slot, ctr) || admission_committed(s, slot, ctr, true)) return Admit::won;
  }
  return decide(s, p, slot, sf, ctr, winner, true);
}

bool index_kill(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept { return kill(s, slot, ctr); }

bool index_has_entry(const Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept { return has_entry(s, p, slot); }

void settle_found(Segment& s, std::uint32_t slot, std::uint64_t sf) noexcept {
  Word128 w;
  if (word_of_job(s, slot, sf, w) && SlotWord::state(w) == SlotState::admitting) index_resolve(s, slot, w, false, sf);
}

bool move_decided(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  return decide_moved(s, slot, ctr, false, true) == Admit::won;
}

bool index_resolve(Segment& s, std::uint32_t slot, const Word128& seen, bool cancel_move, std::uint64_t expect_sf) noexcept {
  const std::uint64_t ctr = SlotWord::ctr(seen);
  const Word128 w = slot_load(s, slot);
  if (SlotWord::ctr(w) != ctr) return false;  // moved on: not the admission the caller read
  // Decided already: committed if the word at its ctr says so (a committed
  // job a reassign dropped since is aborted naming its copy: committed; a
  // sweep that read the admission long ago took it for a kill and freed a
  // husk still linked in its lane: `AHelperWhoReadAnAdmissionBeforeItWasCommittedAndMovedIsToldCommitted`).
  if (SlotWord::state(w) != SlotState::admitting) return admission_committed(s, slot, ctr, false);
  if (!admission_published(s, slot, w)) return false;
  const std::uint64_t sf = s.slot(slot).sf.load(std::memory_order_acquire);
  if (expect_sf && sf != expect_sf) return false;
  std::uint32_t origin = 0;
  std::uint64_t c18 = 0;
  if (moved_origin(s, slot, origin, c18)) return decide_moved(s, slot, ctr, cancel_move, false) == Admit::won;
  const IndexProbe p = index_probe(s, sf);
  // Its admitter may not have written its entry yet: write one for it (a
  // second entry for the same slot is harmless: both go stale together).
  if (!has_entry(s, p, slot) && !put_entry(s, p, slot)) {
    kill(s, slot, ctr);  // no room to admit it: it was never admitted (its admitter sees full)
    return admission_committed(s, slot, ctr, false);
  }
  std::uint32_t winner = 0;
  return decide(s, p, slot, sf, ctr, winner, false) == Admit::won;
}

}  // namespace fairlane::detail
