// The id index: job id -> the slot that admitted it, so that enqueue can
// refuse a live id and job(id) can find a job. Two-choice hashing over
// buckets of kIndexWays entries, eight entries per job slot.
//
// Entries are removed lazily: an entry is current while its slot's
// admission tag (Segment::tags, bumped by every admission of the slot)
// still equals the entry's; a stale entry is reused by the next insert that
// needs the room. Completing a job never touches the index: the consumer
// never writes the producer's index lines.
//
// Exactly-once admission, decided on the slot words (docs/design.md section
// 5, "Admission"): an admitter prepares its slot (admitting, with what it
// will become in `fail_to`), links it into its lane if it is to be pending,
// writes its index entry, then looks at every entry of the id's two buckets
// for a rival slot with the same id:
//
//   a committed rival (pending, leased, scheduled, dead, returning)   it loses
//   an admitting rival in a lower slot     it commits that rival (CAS of the
//                                          rival's slot word to its target),
//                                          then loses
//   an admitting rival in a higher slot    it kills that rival (CAS to aborted)
//
// and then commits itself (CAS admitting -> its target). A failed kill or
// commit looks at the rival again. Of two rivals at most one commits: the
// one that writes its entry second sees the first. `duplicate` is answered
// only once a rival is committed, so the job exists, job(id) finds it, and
// (being linked before it was committed) it will be delivered whatever
// happens to its admitter. A claim that meets an admitting slot in its lane
// runs the same decision for it (index_resolve), so a stopped admitter
// holds up no one.
#pragma once

#include <cstdint>

#include "fairlane/detail/layout.hpp"
#include "hash.hpp"
#include "segment.hpp"
#include "slots.hpp"

namespace fairlane::detail {

// Where an id's entries go: its first bucket and fingerprint at once; its
// second bucket (a second mix of the hash) only when asked, since it is
// looked at only once the first has overflowed.
//
// The bucket count need not be a power of two (segment.cpp sizes the index
// to the job count): a hash maps to bucket (x * buckets) >> bits for x of
// `bits` uniform bits, a multiply and a shift instead of a mask. The first
// bucket takes the hash's low 34 bits (the fingerprint is its top 30, so
// the two stay independent; buckets < 2^30, checked below, so the product
// fits in 64 bits), the second the top 34 bits of a second mix.
struct IndexProbe {
  std::uint64_t h, b1;
  std::uint32_t fp;
  std::uint64_t b2(const Segment& s) const noexcept {
    const std::uint64_t b = ((mix64(h) >> 30) * s.index_buckets) >> 34;
    return b != b1 ? b : b1 + 1 < s.index_buckets ? b1 + 1 : 0;  // index_buckets >= 2
  }
};

// The largest bucket count times a 34-bit value fits in 64 bits.
static_assert((std::uint64_t(kMaxJobs) * kIndexEntriesPerSlot + kIndexWays - 1) / kIndexWays < (1ULL << 30));

inline IndexProbe index_probe(const Segment& s, std::uint64_t sf) noexcept {
  const std::uint64_t h = id_hash(sf, s.seed);
  return IndexProbe{h, ((h & ((1ULL << 34) - 1)) * s.index_buckets) >> 34, std::uint32_t(h >> 34)};
}

inline std::atomic<std::uint64_t>& index_way(const Segment& s, const IndexProbe& p, unsigned k) noexcept {
  return s.index[k < kIndexWays ? p.b1 : p.b2(s)].e[k % kIndexWays];
}

// Calls f(way, entry) for the ways an entry of this id can be in: its first
// bucket, and its second only if the first has overflowed. Stops when f
// returns false. [S4] seq_cst loads (plain loads on x86): a store-load pair
// with every admitter's entry and scan.
//
// The first bucket's loop is unrolled: every admission scans all its ways
// (nearly always to the end, finding no entry of the id), and a loop's
// counter, compare and branch were three of its eight instructions a way.
template <class F>
inline void index_scan(const Segment& s, const IndexProbe& p, F f) noexcept {
  const IndexBucket& a = s.index[p.b1];
#pragma GCC unroll 7
  for (unsigned k = 0; k < kIndexWays; ++k) {
    std::atomic<std::uint64_t>& way = const_cast<std::atomic<std::uint64_t>&>(a.e[k]);
    if (!f(way, way.load(std::memory_order_seq_cst))) return;
  }
  if (!a.overflow.load(std::memory_order_seq_cst)) return;
  const IndexBucket& b = s.index[p.b2(s)];
  for (unsigned k = 0; k < kIndexWays; ++k) {
    std::atomic<std::uint64_t>& way = const_cast<std::atomic<std::uint64_t>&>(b.e[k]);
    if (!f(way, way.load(std::memory_order_seq_cst))) return;
  }
}

inline bool committed_state(SlotState st) noexcept {
  return st == SlotState::pending || st == SlotState::leased || st == SlotState::scheduled || st == SlotState::dead ||
         st == SlotState::returning;
}

// A reassign's copy (its word `w`, admitting) whose origin names it: the job
// by the rule, not yet committed (its mover is between the drop of the
// origin and its commit, or stopped there). Look-ups take it for the job.
bool named_copy(const Segment& s, std::uint32_t slot, const Word128& w) noexcept;

// The slot of the job with this id (committed, or a named copy), or kNoSlot. `admitting` (if
// given) is set to an admitting slot of this id when one is seen, and
// `admitting_word` to the word it was seen with.
std::uint32_t index_find(const Segment& s, std::uint64_t sf, std::uint32_t* admitting = nullptr,
                         Word128* admitting_word = nullptr) noexcept;
// The same with the id's probe already computed (index_probe(s, sf)).
std::uint32_t index_find(const Segment& s, const IndexProbe& p, std::uint64_t sf, std::uint32_t* admitting = nullptr,
                         Word128* admitting_word = nullptr) noexcept;

// A job index_find found (`slot`, id `sf`) that is a named copy is committed
// here, by the move's rule: an answer that the id is a job (`duplicate`)
// then vouches for a job that is served, though its mover be stopped (a
// named copy is served only once committed). Nothing for any other slot.
void settle_found(Segment& s, std::uint32_t slot, std::uint64_t sf) noexcept;

// Is an entry of the id's probe current for `slot`? (fsck: a job must be
// found through an entry of its own, not only through a husk that names it.)
bool index_has_entry(const Segment& s, const IndexProbe& p, std::uint32_t slot) noexcept;

// The word of `slot` while it holds job id `sf` (a slot index_find found,
// which may have been freed and taken by another job since): the id read
// between two loads of the word that agree, so that it is that word's job.
// False if the slot holds another id now. Each round that fails is another
// thread's write, so the loop is not bounded.
inline bool word_of_job(const Segment& s, std::uint32_t slot, std::uint64_t sf, Word128& w) noexcept {
  for (;;) {
    w = slot_load(s, slot);
    if (s.slot(slot).sf.load(std::memory_order_acquire) != sf) return false;
    if (slot_load(s, slot) == w) return true;
  }
}

enum class Admit {
  won,        // this slot is the job now (committed)
  duplicate,  // another slot holds the job (committed): winner says which
  full,       // both buckets are full of current entries: nothing written
  lost,       // this slot lost to a rival that was then undone (its admitter
              // died unlinked): nobody holds the id; admit it again
  undecided,  // a reassign's target whose move is not yet decided; or, to a
              // helper, an admission whose slot moved on (decided, not known how)
  corrupt,
};

// The admission of `slot` (admitting, holder `holder`, ctr `ctr`, its
// record and fail_to written, linked in its lane if pending). Lock-free.
// `ctr` is the slot's ctr of this admission (its admitter's; a helper may
// have committed and a claim leased it since, which moves the ctr on).
Admit index_admit(Segment& s, std::uint32_t slot, std::uint64_t sf, std::uint64_t ctr, std::uint32_t& winner) noexcept;
// An admission's own words, known to its author (an enqueue): the admitting
// word it wrote (alloc_slot's) and the word it is committed to, as
// committed_word works it out from the record it wrote (without kSlotMoved:
// no move's copy). With them the commit reads nothing back.
struct OwnAdmission {
  Word128 admitting, committed;
};

// The committed word of an admitting slot whose record holds `fail_to` (the
// target's low half: state, attempt, when) and `flags`.
Word128 committed_word(std::uint64_t fail_to, std::uint16_t flags, const Word128& admitting) noexcept;

// The same, with the id's probe (index_probe of sf) worked out already.
// `own`: the caller's own admission (an enqueue's), with the words it
// wrote; the slot is its own while admitting, and no move's copy. Null: a
// move's copy, or anyone's (the record is read).
Admit index_admit(Segment& s, std::uint32_t slot, const IndexProbe& p, std::uint64_t sf, std::uint64_t ctr,
                  std::uint32_t& winner, const OwnAdmission* own = nullptr) noexcept;

// Decides the admission of an admitting slot met by someone else (a claim
// that finds it at the front of its lane, recovery): true when it is
// committed after this (by us or anyone), false when it is aborted (its job
// lives elsewhere or its admitter gave up). A reassign's target is decided
// by its move alone; with cancel_move (recovery for its dead author) an
// undone move is cancelled, else it is left undecided (false).
// Only the admission the caller read (`seen`, its ctr) is decided: a slot
// that has moved on since answers false and is left alone. With expect_sf,
// only an admission of that id.
bool index_resolve(Segment& s, std::uint32_t slot, const Word128& seen, bool cancel_move = false,
                   std::uint64_t expect_sf = 0) noexcept;

// The decision of a reassign's copy `slot` (admission ctr `ctr`), for its
// mover: true when it is the job (committed, by anyone).
bool move_decided(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept;

// Kills admission `ctr` of a slot (CAS to aborted, holder kept). True if
// it is killed (aborted at ctr, `when` 0) after; false if it got committed
// first (free at ctr or aborted naming a successor: committed and gone on
// since), or the slot has moved on to another admission.
bool index_kill(Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept;

}  // namespace fairlane::detail
