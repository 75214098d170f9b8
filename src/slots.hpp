// Job slots: the slot word (the truth about a job), tokens, the slot
// allocator, the per-thread counters and the report of detected corruption.
//
// Allocation takes a slot by a CAS of its word from free to admitting (never
// by a plain store on whatever a list hands out), looking from a rotating
// per-thread cursor: there is no free list to scribble or to lose a slot in.
// A free slot is found in O(1 / (1 - occupancy)) expected probes of
// contiguous slot words; a full table is told without a full scan by the
// free hints, one a block of slots and one a group of blocks (see
// alloc_slot).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "atomic128.hpp"
#include "clock.hpp"
#include "segment.hpp"
#include "util.hpp"

namespace fairlane::detail {

// ---- corruption ---------------------------------------------------------------

// What was found impossible (CorruptionStats::what; names in corruption_name).
enum class CorruptWhat : std::uint32_t {
  none = 0,
  slot_word,      // a state or a field no transition writes
  slot_record,    // a lane index, length or link of a slot out of range
  lane_word,      // a lane word naming a slot that is not its job, or an impossible count
  lane_order,     // a run or strays link that leaves the table, loops, or breaks the order
  ring_cell,      // a ring cell naming a lane that does not exist
  id_index,       // an index entry pointing past the slot table
  directory,      // a directory entry naming a lane out of range
  process,        // a process or thread record out of range
  header,         // a header word (cursor, position) out of range
};
std::string_view corruption_name(CorruptWhat w) noexcept;

// Counts one meeting with corruption. The call that met it changes nothing
// further and reports `corrupt`; the sweep and fsck --repair deal with the
// damage. Relaxed: statistics.
inline void report_corrupt(Segment& s, CorruptWhat what) noexcept {
  CorruptionStats& c = s.h->corruption;
  c.count.fetch_add(1, std::memory_order_relaxed);
  c.what.store(std::uint64_t(what), std::memory_order_relaxed);
  c.last_unix_ms.store(unix_ms(), std::memory_order_relaxed);
}

// ---- counters -------------------------------------------------------------------

// One writer per thread record: a plain load and store, no locked
// instruction. (The fallback process record, used by threads that found no
// thread record free, is shared by them: fetch_add there.)
// (Forced inline: out of line, the member pointer is not folded away.)
// `t` is the calling thread's record, s.thread(), looked up already.
[[gnu::always_inline]] inline void count(Segment& s, ThreadRecord* t, std::atomic<std::uint64_t> CounterBlock::*field,
                                         std::uint64_t n = 1) noexcept {
  if (t) {
    std::atomic<std::uint64_t>& c = t->counters.*field;
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  } else if (ProcRecord* me = s.me_now()) {
    (me->retired.*field).fetch_add(n, std::memory_order_relaxed);
  }
}
[[gnu::always_inline]] inline void count(Segment& s, std::atomic<std::uint64_t> CounterBlock::*field,
                                         std::uint64_t n = 1) noexcept {
  count(s, s.thread(), field, n);
}

// ---- slot words -----------------------------------------------------------------

inline Word128 slot_load(const Segment& s, std::uint32_t slot) noexcept { return load128(s.words[slot]); }
inline bool slot_cas(Segment& s, std::uint32_t slot, Word128& expected, const Word128& desired) noexcept {
  return cas128(s.words[slot], expected, desired);
}

// This handle as a slot word's holder.
inline std::uint32_t my_holder(const Segment& s) noexcept {
  return s.me ? Holder::make(s.me_index, s.me->incarnation.load(std::memory_order_relaxed)) : 0;
}

// ---- tokens -----------------------------------------------------------------------

// A token: the slot in the low slot_bits bits, the low 64 - slot_bits bits
// of the lease's ctr above them. (The mask is worked out here rather than
// read from token_ctr_mask: with the load, GCC 12 compiles claim_some, where
// this is inlined, to about 90 instructions more a claim.)
inline Token make_token(const Segment& s, std::uint32_t slot, std::uint64_t ctr) noexcept {
  const std::uint32_t b = s.slot_bits;
  const std::uint64_t c = b >= 64 ? 0 : (ctr & ((~0ULL) >> b));
  return Token((c << b) | slot);
}
inline std::uint32_t token_slot(const Segment& s, Token t) noexcept { return std::uint32_t(t.value & s.slot_mask); }
// Does ctr `c` (a slot word's) match the counter part of token t?
inline bool token_matches(const Segment& s, Token t, std::uint64_t c) noexcept {
  return (c & s.token_ctr_mask) == t.value >> s.slot_bits;
}

// ---- the id text of a slot (the 11 base62 digits, so claims never encode) ----------

// From the 16 bytes of an id (`id`: kind, then the digits, then two zero
// bytes), read as its two words (bytes 0-7 and 8-15, as it is written:
// IdAccess::assign_words): digits 0-7 are bytes 3-10, digits 8-10 bytes
// 11-13 (x86: little-endian, byte i of a word is its bits 8i up). Read
// straight from the id as the words it was stored as, not through a copy
// on the stack nor across its two words: a load of bytes just stored by
// two different stores waits for both to reach the cache.
inline void store_digits(SlotRecord& r, const char* id) noexcept {
  static_assert(kKindLength == 3);
  std::uint64_t w0 = 0, w1 = 0;
  id_words_at(id, w0, w1);
  r.digits.store((w0 >> 24) | (w1 << 40), std::memory_order_relaxed);
  r.digits_tail.store(std::uint32_t(w1 >> 24) & 0xFFFFFF, std::memory_order_relaxed);
}
// A slot's id text (its kind, then the digits stored above as the words `a`
// and `b`) as the id's two words, bytes 0-7 and 8-15 (the last two bytes
// zero), as same_id_words and IdAccess::assign_words take an id. Made in
// registers, never as bytes stored one piece at a time and read back whole.
// `kind_word` is the kind's three bytes in the low bytes of a word.
inline void id_words_of(std::uint64_t kind_word, std::uint64_t a, std::uint32_t b, std::uint64_t& w0,
                        std::uint64_t& w1) noexcept {
  static_assert(std::endian::native == std::endian::little);
  w0 = kind_word | (a << 24);                            // kind, digits 0-4
  w1 = (a >> 40) | (std::uint64_t(b & 0xFFFFFF) << 24);  // digits 5-7, 8-10, two zero bytes
}
inline void id_words(const Segment& s, std::uint64_t a, std::uint32_t b, std::uint64_t& w0, std::uint64_t& w1) noexcept {
  id_words_of(s.kind_word, a, b, w0, w1);
}

// ---- admission tags ---------------------------------------------------------------
// One byte per slot, the low byte of its ctr at admission: an index entry
// with another tag is stale. Written by the admitter alone (the slot is
// admitting), read by index probes.

inline std::uint8_t admit_tag(const Segment& s, std::uint32_t slot) noexcept {
  return s.tags[slot].load(std::memory_order_acquire);
}

// Is `w` (admitting) an admission whose fields are written ([R14] acquire:
// pairs with its admitter's release store of `pub`; the fields read after
// this are that admission's)?
inline bool admission_published(const SlotRecord& r, const Word128& w) noexcept {
  return r.pub.load(std::memory_order_acquire) == SlotWord::ctr(w);
}
inline bool admission_published(const Segment& s, std::uint32_t slot, const Word128& w) noexcept {
  return admission_published(s.slot(slot), w);
}

// ---- allocation ---------------------------------------------------------------------
//
// A slot is taken by a CAS of its word from free to admitting, looking at
// the words from the caller's rotating cursor to the end of its cache line
// (at most kCursorLook); then group by group and block by
// block by their free hints (layout.hpp), from the next block round to the
// cursor's own, so that a table with no free slot is told in one hint read
// a group of kHintGroupSlots slots, not one word a slot
// (BM_enqueue_full_st: docs/perf/group-hints-2026-12-06.txt).
//
// The block hint's protocol, and why a `full` answer means it:
// - a freer: its CAS of the slot word to free, then a load of the block's
//   hint, and a store of 0 unless it read 0. No locked instruction.
// - an allocator going by the hints (every block, its cursor's too, once
//   the words at its cursor held no free one): passes a block whose hint is
//   kHintNone. Otherwise it looks at every word of it. One that finds the
//   hint neither kHintNone nor owned turns it to a value of its own (its
//   token, kHintOwned and up) by a CAS, and owns the look: finding no free
//   word, it CASes its token to kHintNone; taking one, back to 0. Others
//   look without owning and write nothing, and so do a thread without a
//   thread record and a copy of a handle in a child forked without exec
//   (it has its parent's thread record and count, so its tokens would be
//   its parent's).
// A slot free throughout an allocation is found by it. Its block's hint
// read kHintNone only if an owner CASed it there from its token after a
// look that found no free word. That owner's CAS to its token came after
// the freer's load of the hint: had it come before, the freer read a token
// (that one, or a later owner's) or 0 written after it, and either stored
// 0 or found 0 stored; the hint was not the owner's token after that, and a
// token is never written twice on one hint while its owner can act (one
// owner's tokens differ from every other's, and a walk begins at most one
// look at each hint, so its 16-bit count wraps only after 65,536 looks at
// other hints: look_token in admission.cpp), so the CAS to kHintNone
// failed. (Found in review: with one shared "checking"
// value, an owner's CAS to none landed on a later owner's "checking".) So
// the look came after the freeing CAS and saw the slot free. (On x86-64,
// which fairlane requires (cmpxchg16b), a locked instruction orders every
// load after it.)
//
// The group hint, the same protocol one level up:
// - a freer that stored 0 over its block's hint then stores 0 over its
//   group's hint, whatever it holds; one that read its block's hint 0
//   loads the group's hint and stores 0 unless it read 0.
// - an allocator passes a group whose hint is kHintNone. Otherwise it
//   looks over the group's blocks as above, writing nothing over the group
//   (the group of the block it starts at in two pieces, first and last).
//   If every block said none, or was turned to none by its own look, it
//   then owns the group's look (a token by a CAS, as for a block), reads
//   every block hint of the group again, and CASes its token to kHintNone
//   if all read kHintNone, else to 0 (conclude_group in admission.cpp).
//   (Owning the group for the whole walk instead costs an allocation that
//   finds a slot two more locked instructions; in a table kept full that
//   is every enqueue.)
// A group hint read kHintNone only if an owner O CASed it there after
// reading every block hint of the group kHintNone after its CAS to its
// token. Take a slot free throughout an allocation, and its freer F (done
// before the allocation began):
// - F read its block hint 0: O's read of that hint as kHintNone came before
//   F's load (a hint read 0 turns to kHintNone later only through a look
//   begun after it, which would find the slot), so O's CAS to its token did
//   too, and F's load of the group hint, after its load of the block hint,
//   read O's token or a later value, and F stored 0 unless it read 0;
// - F read the block hint non-zero and stored 0 over it, then 0 over the
//   group hint: O's read of the block hint as kHintNone did not see F's
//   first store, so O's CAS to its token, before that read, came before
//   F's second store too, which lands after it. This is an argument of
//   x86-64's TSO, like the loads after a locked instruction above: a
//   thread's stores reach memory in program order (the second is a release
//   store, so the compiler keeps them so), a locked CAS is one point in the
//   global order, and the loads after it read memory. (In C++'s model alone
//   it does not hold: a plain store by a third thread between F's and O's
//   CAS ends the release sequence, and proving it there would take seq_cst
//   stores, an xchg each.)
// Either way O's CAS to kHintNone fails, or lands before F's store of 0 and
// is overwritten by it. ("Done before the allocation began" means F's
// stores are visible, not only that F returned: a store can wait in F's
// store buffer past its return, as a freer stopped there.)
// F must look at the group hint when its block's hint read 0: another
// freer of that block may have turned it to 0 and stopped before its store
// to the group hint. And it must store 0 over the group hint whatever it
// holds when it stored 0 over the block's: a load of the group hint there
// could be answered before its store to the block's hint is seen, and read
// a 0 that O then overwrites. An exchange on the block's hint closed that
// instead until 2026-12-06, a locked instruction at every free in a table
// kept full.
// Stopped or killed:
// - a freer between its CAS and its stores leaves kHintNone (block or
//   group) over a free slot; an allocator then passes the block or group,
//   and may answer `full` while that slot is free, until the sweep, which
//   makes both hints of every slot it sees free say "look" again (within
//   recovery_ms; a pass whose own store of 0 over a block's token is still
//   in its store buffer when it reaches such a slot may leave the group
//   saying none, and the next pass mends it: found in review);
// - an owner mid-look leaves its token: every allocator looks over the
//   block or group, and none may write kHintNone there until the sweep
//   stores 0 over it (also over a live owner's: 0 is always safe, the
//   owner's CAS fails);
// - a scribbled hint: any value below kHintOwned but kHintNone reads as 0; a
//   scribbled kHintNone over a free slot is the first case; a scribbled
//   token is a look whose owner never finishes.

// The sweep's mend of a block or group hint left with a token (its look's
// owner stopped or died mid-look, or a scribble): "look" again. 0 is always
// safe over a live owner's token too: that owner's CAS from it fails.
inline void drop_token(std::atomic<std::uint32_t>& hint) noexcept {
  if (hint.load(std::memory_order_relaxed) >= kHintOwned) hint.store(0, std::memory_order_release);
}

// After a CAS that freed `slot`: its block's hint and its group's hint say
// "look" again. A table that is not near full keeps its block hints at 0
// (allocations find slots at their cursors), and this is two loads. Returns
// whether it stored (the hints said otherwise).
inline bool hints_look_again(Segment& s, std::uint32_t slot) noexcept {
  std::atomic<std::uint32_t>& h = s.hints[slot / kHintBlock];
  std::atomic<std::uint32_t>& g = s.group_hints[slot / kHintGroupSlots];
  if (h.load(std::memory_order_seq_cst) != 0) {
    h.store(0, std::memory_order_release);
    g.store(0, std::memory_order_release);  // after h's store: a CAS on g after this one sees h's 0
    return true;
  }
  if (g.load(std::memory_order_seq_cst) != 0) {
    g.store(0, std::memory_order_release);
    return true;
  }
  return false;
}

// Counts a free for the producers parked in enqueue_wait (Header::room_seq)
// and wakes room_batch of them once room_batch frees have been counted
// since one parked (at once if `force`: a wake that must not wait for a
// batch), unless every producer's sleep has ended (Header::room_park_until).
// If the freed slot's job left lane `lane` (kNoLane: none, or not known)
// and that lane may now be given back, a producer parked for a lane is
// woken too (wake_lanes, lanes.hpp). Called by a freer that found
// room_waiters not 0 (lanes.cpp).
[[gnu::cold]] void wake_room(Segment& s, bool force, std::uint32_t lane) noexcept;

// Frees a parked producer waits for before it is woken: a 32nd of the
// table, 1 to 32. With one wake a free, a producer kept at a full queue by a
// consumer slower than its look-again parked at every job, and the
// consumer paid a futex wake a job (2.2-3.1 us more of its CPU a job at 20 us of
// work, on the development machine; docs/perf/full-queue-2026-12-06.txt).
inline std::uint32_t room_batch(const Segment& s) noexcept { return std::clamp<std::uint32_t>(s.jobs / 32, 1, 32); }

// After a CAS that freed `slot`: the hints say "look" again
// (hints_look_again), and a producer parked in enqueue_wait for a free slot
// is woken. A table that is not near full pays three loads.
//
// No lost wake-up (design.md, "Blocking enqueues"): a parking producer
// raises room_waiters (seq_cst) before its last look, and this load of it
// (seq_cst) comes after the freeing CAS and the hints' stores. Loads only:
// the freeing CAS and the hint loads (all seq_cst) come before it in the
// single order. With stores, a fence keeps them before it (a release store
// may pass a later load); only a table near full pays it.
//
// `lane`: the lane the freed job left by the CAS that freed it (a complete,
// a drop), or kNoLane. Producers parked for a lane are counted in
// room_waiters too, so this one load is all a free pays for them as well.
inline void wake_room_after_free(Segment& s, bool hints_stored, bool force = false,
                                 std::uint32_t lane = kNoLane) noexcept {
  if (hints_stored) std::atomic_thread_fence(std::memory_order_seq_cst);
  if (s.h->room_waiters.load(std::memory_order_seq_cst) != 0) [[unlikely]]
    wake_room(s, force, lane);
}
inline void note_freed(Segment& s, std::uint32_t slot, std::uint32_t lane = kNoLane) noexcept {
  wake_room_after_free(s, hints_look_again(s, slot), false, lane);
}

// Takes slot i if it is free: CAS free -> admitting(holder), with a new ctr.
[[gnu::always_inline]] inline bool take_free_slot(Segment& s, std::uint32_t i, std::uint32_t holder,
                                                  std::uint64_t& ctr_out) noexcept {
  Word128 w = slot_load(s, i);
  if (SlotWord::state(w) != SlotState::free) return false;
  const std::uint64_t ctr = SlotWord::ctr(w) + 1;
  // Acquire (cas128 is seq_cst): the slot's last owner is done with it
  // ([R3], the release of its freeing CAS).
  if (!slot_cas(s, i, w, SlotWord::make(SlotState::admitting, 0, 0, ctr, holder))) return false;
  ctr_out = ctr;
  return true;
}

// The blocks from `block` on, around the table, by their hints (above).
std::uint32_t alloc_slot_by_hints(Segment& s, std::uint32_t block, std::uint32_t holder, std::uint64_t& ctr_out) noexcept;

// Slot words an allocation reads from its cursor before it goes by the
// hints: the rest of the cursor's line (slot words are 16 bytes, their
// table line-aligned). A table kept full (a producer faster than its
// consumers) has its free slot wherever the last completion left it, not
// at the cursor; reading the rest of the cursor's block there, up to 63
// words, read 16 lines the consumers were writing, at every enqueue and
// every retry of a `full` one. A bare flow whose queue ran full ran at
// 1.2-1.5 M jobs/s against 1.9-2.4 M near empty, its producer 19% of the
// time in that search (docs/perf/bare-flow-2026-12-06c.txt). The rest of
// the block is still looked at, by its hint, last.
inline constexpr std::uint32_t kCursorLook = 4;
static_assert(kCursorLook * sizeof(Word128) == kCacheLine);

// Takes a free slot for the calling handle. Returns kNoSlot when every slot
// is in use. `hint` is the caller's rotating cursor (thread-local). O(1)
// expected while the table is not nearly full; a full table is told in
// jobs / kHintBlock hint reads.
inline std::uint32_t alloc_slot(Segment& s, std::uint32_t& hint, std::uint32_t holder, std::uint64_t& ctr_out) noexcept {
  const std::uint32_t n = s.jobs;
  std::uint32_t i = hint < n ? hint : 0;
  const std::uint32_t next_block = i / kHintBlock + 1;
  for (const std::uint32_t look_end = std::min(n, (i | (kCursorLook - 1)) + 1); i < look_end; ++i) {
    if (take_free_slot(s, i, holder, ctr_out)) {
      hint = i + 1 == n ? 0 : i + 1;
      return i;
    }
  }
  const std::uint32_t got = alloc_slot_by_hints(s, next_block * kHintBlock >= n ? 0 : next_block, holder, ctr_out);
  if (got != kNoSlot) hint = got + 1 == n ? 0 : got + 1;
  return got;
}

}  // namespace fairlane::detail
