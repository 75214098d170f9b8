// The id index and the exactly-once admission decision (id_index.hpp).
#include "id_index.hpp"

#include "failpoint.hpp"

namespace fairlane::detail {

namespace {

// Is entry e current (its slot's latest admission), and for which slot?
bool entry_current(const Segment& s, std::uint64_t e, std::uint32_t& slot) noexcept {
  const std::uint32_t s1 = IndexEntry::slot1(e);
  if (e == 0 || s1 == 0 || s1 > s.jobs) return false;
  slot = s1 - 1;
  return admit_tag(s, slot) == IndexEntry::tag(e);
}

// The committed word an admitting slot becomes (its fail_to is the target's
// low half: state, attempt, when).
Word128 commit_word(const Segment& s, std::uint32_t slot, const Word128& admitting) noexcept {
  Word128 to{s.slot(slot).fail_to.load(std::memory_order_acquire), SlotWord::ctr(admitting)};
  const SlotState st = SlotWord::state(to);
  if (st != SlotState::pending && st != SlotState::scheduled && st != SlotState::dead)
    to.lo = SlotWord::make(SlotState::pending, 0, 0, 0, 0).lo;  // scribbled target: keep the job, pending
  return to;
}

// Commits an admitting slot (to its target). True if it is committed after.
bool commit(Segment& s, std::uint32_t slot) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::admitting) {
    // [R5] release (cas128): the job's fields are visible to whoever sees it committed.
    if (slot_cas(s, slot, w, commit_word(s, slot, w))) return true;
  }
  return committed_state(SlotWord::state(w));
}

// Aborts an admitting slot. True if it is aborted (or was) after; false if
// it got committed first.
bool kill(Segment& s, std::uint32_t slot) noexcept {
  Word128 w = slot_load(s, slot);
  while (SlotWord::state(w) == SlotState::admitting) {
    const Word128 aborted = SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), SlotWord::holder(w));
    if (slot_cas(s, slot, w, aborted)) return true;
  }
  return !committed_state(SlotWord::state(w));
}

bool has_entry(const Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept {
  for (unsigned k = 0; k < 2 * kIndexWays; ++k) {
    const std::uint64_t e = index_way(s, p, k).load(std::memory_order_seq_cst);
    std::uint32_t at = 0;
    if (entry_current(s, e, at) && at == slot && IndexEntry::fp(e) == (p.fp & 0x3FFFFFFF)) return true;
  }
  return false;
}

// Writes an entry for `slot`: in an empty way, else a stale one.
bool put_entry(Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept {
  const std::uint64_t mine = IndexEntry::make(p.fp, slot + 1, admit_tag(s, slot));
  for (int pass = 0; pass < 2; ++pass) {
    for (unsigned k = 0; k < 2 * kIndexWays; ++k) {
      std::atomic<std::uint64_t>& way = index_way(s, p, k);
      std::uint64_t e = way.load(std::memory_order_relaxed);
      std::uint32_t other = 0;
      const bool usable = pass == 0 ? e == 0 : !entry_current(s, e, other);
      // [S4] seq_cst: our entry is visible before we look for rivals (a
      // store-load pair with every rival's entry and scan).
      if (usable && way.compare_exchange_strong(e, mine, std::memory_order_seq_cst)) return true;
    }
  }
  return false;
}

// The decision for `slot`, whose entry is written (id_index.hpp). Returns
// won when slot is committed, duplicate (winner set) when another is.
Admit decide(Segment& s, const IndexProbe& p, std::uint32_t slot, std::uint64_t sf, std::uint32_t& winner) noexcept {
  for (int round = 0; round < 256; ++round) {
    bool restart = false;
    for (unsigned k = 0; k < 2 * kIndexWays && !restart; ++k) {
      const std::uint64_t e = index_way(s, p, k).load(std::memory_order_seq_cst);
      std::uint32_t rival = 0;
      if (!entry_current(s, e, rival) || rival == slot || IndexEntry::fp(e) != (p.fp & 0x3FFFFFFF)) continue;
      if (s.slot(rival).sf.load(std::memory_order_acquire) != sf) continue;
      const SlotState st = SlotWord::state(slot_load(s, rival));
      if (committed_state(st)) {
        // A live job with this id: we lose (unless we are committed already,
        // by a helper: then this is a stale reading of a rival that lost).
        if (committed_state(SlotWord::state(slot_load(s, slot)))) return Admit::won;
        if (!kill(s, slot)) return Admit::won;
        winner = rival;
        return Admit::duplicate;
      }
      if (st != SlotState::admitting) continue;  // aborted or free: not a rival
      if (rival < slot) {
        // It outranks us: it must be committed before we may say duplicate
        // (its admitter may be stopped).
        if (!kill(s, slot)) return Admit::won;  // we were committed first after all
        if (commit(s, rival)) {
          winner = rival;
          return Admit::duplicate;
        }
        restart = true;  // it was aborted meanwhile: look again
        continue;
      }
      if (!kill(s, rival)) restart = true;  // it was committed first: look again (it wins)
    }
    if (restart) continue;
    if (commit(s, slot)) return Admit::won;
    // Killed by a rival that outranks us: make sure it (or whoever wins) is
    // committed, then it is a duplicate.
    const std::uint32_t w = index_find(s, sf);
    if (w != kNoSlot) {
      winner = w;
      return Admit::duplicate;
    }
    // Nobody committed yet: help the lowest admitting rival.
    std::uint32_t low = kNoSlot;
    for (unsigned k = 0; k < 2 * kIndexWays; ++k) {
      const std::uint64_t e = index_way(s, p, k).load(std::memory_order_seq_cst);
      std::uint32_t rival = 0;
      if (entry_current(s, e, rival) && rival != slot && s.slot(rival).sf.load(std::memory_order_acquire) == sf &&
          SlotWord::state(slot_load(s, rival)) == SlotState::admitting && rival < low)
        low = rival;
    }
    if (low != kNoSlot && commit(s, low)) {
      winner = low;
      return Admit::duplicate;
    }
  }
  report_corrupt(s, CorruptWhat::id_index);
  return Admit::corrupt;
}

}  // namespace

std::uint32_t index_find(const Segment& s, std::uint64_t sf, std::uint32_t* admitting) noexcept {
  const IndexProbe p = index_probe(s, sf);
  for (unsigned k = 0; k < 2 * kIndexWays; ++k) {
    const std::uint64_t e = index_way(s, p, k).load(std::memory_order_seq_cst);
    std::uint32_t slot = 0;
    if (!entry_current(s, e, slot) || IndexEntry::fp(e) != (p.fp & 0x3FFFFFFF)) continue;
    if (s.slot(slot).sf.load(std::memory_order_acquire) != sf) continue;
    const SlotState st = SlotWord::state(slot_load(s, slot));
    if (committed_state(st)) return slot;
    if (st == SlotState::admitting && admitting) *admitting = slot;
  }
  return kNoSlot;
}

Admit index_admit(Segment& s, std::uint32_t slot, std::uint64_t sf, std::uint32_t& winner) noexcept {
  const IndexProbe p = index_probe(s, sf);
  if (!put_entry(s, p, slot)) return Admit::full;
  FAIRLANE_FAILPOINT("enqueue.indexed");
  const Admit a = decide(s, p, slot, sf, winner);
  if (a == Admit::duplicate) {
    // A refused enqueue leaves no entry behind.
    const std::uint64_t mine = IndexEntry::make(p.fp, slot + 1, admit_tag(s, slot));
    for (unsigned k = 0; k < 2 * kIndexWays; ++k) {
      std::uint64_t e = mine;
      if (index_way(s, p, k).compare_exchange_strong(e, 0, std::memory_order_seq_cst)) break;
    }
  }
  return a;
}

bool index_resolve(Segment& s, std::uint32_t slot) noexcept {
  const Word128 w = slot_load(s, slot);
  if (SlotWord::state(w) != SlotState::admitting) return committed_state(SlotWord::state(w));
  const std::uint64_t sf = s.slot(slot).sf.load(std::memory_order_acquire);
  const IndexProbe p = index_probe(s, sf);
  // Its admitter may not have written its entry yet: write one for it (a
  // second entry for the same slot is harmless: both go stale together).
  if (!has_entry(s, p, slot) && !put_entry(s, p, slot)) {
    kill(s, slot);  // no room to admit it: it was never admitted (its admitter sees full)
    return committed_state(SlotWord::state(slot_load(s, slot)));
  }
  std::uint32_t winner = 0;
  return decide(s, p, slot, sf, winner) == Admit::won;
}

}  // namespace fairlane::detail
