// The shared-memory layout of a fairlane segment. Not for direct inclusion
// by users: queue.hpp is the public interface; this file is installed so that
// tools can read a segment, and it is the contract between processes.
//
// Rules for every struct here: fixed-width fields only, no pointers (indexes
// and offsets instead), trivially copyable, cache-line padding between words
// that different processes write. A change to anything here bumps
// kLayoutVersion.
//
//   [Header][slot words: Word128 x jobs][admission tags: u8 x jobs]
//   [free hints: u32 x ceil(jobs / kHintBlock), then u32 x ceil(that / kHintGroup)]
//   [slots: SlotRecord+payload x jobs][lanes: LaneRecord x lanes]
//   [directory: DirBucket x dir_buckets][ring: u64 x ring_cells]
//   [index: IndexBucket x index_buckets][procs: ProcRecord x procs]
//   [threads: ThreadRecord x threads][waits: WaitBuckets x lanes]
//   [log: LogCell x log_cells (mirrored segments only)]
//
// Several words are 128 bits wide and changed with a double-width CAS
// (src/atomic128.hpp): the slot word, the lane word, the directory entries.
// Their two halves may be read one at a time (a torn read only makes the
// CAS that follows fail), and every reader of a segment checks what it reads
// against the geometry before using it (docs/design.md, "Hostile bytes").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace fairlane::detail {

inline constexpr std::uint64_t kMagic = 0x314E4C5249414646ULL;  // "FFAIRLN1" little-endian
// "FFAIRLN_": the first bytes of a segment being created. Its creator
// writes them before it sizes the file and kMagic over them last, so a file
// that holds them is one a fairlane creator made and did not finish (or is
// finishing now); a sized file whose first bytes are zero is no creator's.
inline constexpr std::uint64_t kMagicMaking = 0x5F4E4C5249414646ULL;
inline constexpr std::uint32_t kLayoutVersion = 17;  // 10: liveness locks and real start times in ProcRecord; 11: MirrorRole; 12: free hints (bytes); 13: free hints (words, owner tokens); 14: group hints; 15: ProcRecord::parked; 16: producers parked for room (Header::room_*, ProcRecord::room_parked); 17: producers parked for a lane (Header::lane_*, ProcRecord::lane_parked), sync enqueuers parked for the mirror counted in their records (ProcRecord::ack_parked, MirrorShared::ack_park_until)
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint32_t kMaxJobs = (1U << 26) - 2;      // slot+1 fits a 26-bit field
inline constexpr std::uint32_t kMaxLanes = (1U << 21) - 2;     // lane+1 fits 22 bits, with the default lane
inline constexpr std::uint32_t kMaxProcs = 4095;               // QueueOptions::processes, at most (index+1 fits 12 bits)
inline constexpr std::uint32_t kMaxPayload = 1U << 20;
inline constexpr std::uint32_t kErrorBytes = 48;
inline constexpr std::uint32_t kIndexWays = 7;                 // id index entries per bucket
// Free hints: one 32-bit word per block of kHintBlock slot words, that lets
// an allocator pass over a block with no free slot without reading its words
// (src/slots.hpp, alloc_slot). 0 (a fresh segment's): a free slot may be
// there, look; kHintNone: none was there when it last looked, and no slot
// was freed in it since; kHintOwned and up: an allocator is looking over the
// block, the value its own (its thread record and a count: no two looks
// write the same value on one hint while one of them can still act on
// it). Any other
// value reads as 0.
// After the block hints, one group hint per kHintGroup blocks, with the same
// values one level up: kHintNone says every block of the group said none
// when its owner looked, and no slot of the group was freed since; so a full
// table of a million slots is told in 256 group hints, not 16,384 block
// hints.
inline constexpr std::uint32_t kHintBlock = 64;
inline constexpr std::uint32_t kHintGroup = 64;
inline constexpr std::uint32_t kHintGroupSlots = kHintBlock * kHintGroup;
inline constexpr std::uint32_t kHintNone = 1;
inline constexpr std::uint32_t kHintOwned = 1U << 16;
// Block hints and group hints of a table of `jobs` slots.
constexpr std::uint32_t hint_blocks(std::uint32_t jobs) noexcept { return (jobs + kHintBlock - 1) / kHintBlock; }
constexpr std::uint32_t hint_groups(std::uint32_t jobs) noexcept {
  return (hint_blocks(jobs) + kHintGroup - 1) / kHintGroup;
}
inline constexpr std::uint32_t kIndexEntriesPerSlot = 8;       // id index size: entries per job slot
inline constexpr std::uint32_t kDirWays = 4;                   // lane directory entries per bucket
inline constexpr std::uint32_t kStrayLevels = 6;               // strays skip-list levels
inline constexpr std::uint32_t kMirrorUrlBytes = 160;
inline constexpr std::uint32_t kWaitBuckets = 32;
inline constexpr std::uint32_t kDefaultLane = 0;               // lane record 0: jobs without a group

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// A 128-bit word changed only by double-width CAS (atomic128.hpp).
struct alignas(16) Word128 {
  std::uint64_t lo = 0, hi = 0;
  friend constexpr bool operator==(const Word128&, const Word128&) = default;
};
static_assert(sizeof(Word128) == 16 && std::is_trivially_copyable_v<Word128>);

constexpr std::uint64_t bits(std::uint64_t w, unsigned at, unsigned width) noexcept {
  return (w >> at) & ((width == 64 ? 0 : (1ULL << width)) - 1);
}
constexpr std::uint64_t with_bits(std::uint64_t w, unsigned at, unsigned width, std::uint64_t v) noexcept {
  const std::uint64_t mask = ((width == 64 ? 0 : (1ULL << width)) - 1) << at;
  return (w & ~mask) | ((v << at) & mask);
}

// ---------------------------------------------------------------------------
// Slot word: the truth about one job slot (Word128, CAS only).
//
//   lo  bits  0..3   state      SlotState
//       bits  4..19  attempt    deliveries so far (1 on the first lease)
//       bits 20..63  when_ms    lease deadline (leased), due time (scheduled),
//                               when it died (dead); segment clock, ms
//   hi  bits  0..43  ctr        bumped at every admission and every lease:
//                               the low bits of a lease's Token; never goes back
//       bits 44..63  holder     Holder: the lease holder (leased), or the
//                               process moving the slot (admitting,
//                               returning, aborted); 0 none
//
// A Token is (ctr mod 2^(64 - slot_bits)) << slot_bits | slot, slot_bits
// being the bits a slot index of this segment needs: a token names its slot
// and one lease of it, and no two leases of a slot ever share a ctr.
enum class SlotState : std::uint8_t {
  free = 0,       // holds no job; taken by a CAS free -> admitting
  admitting = 1,  // its enqueuer (holder) is writing it; may already be linked in its lane's run
  pending = 2,    // in its lane (the lane's run or strays), committed
  leased = 3,     // claimed: when_ms is the deadline, holder the process
  scheduled = 4,  // delayed or backing off: when_ms is the due time; not linked
  dead = 5,       // dead-lettered: when_ms is when; not linked
  returning = 6,  // on its way into its group's lane's strays (it holds nothing of
                  // any lane meanwhile): holder the process linking it, 0 for anyone
  aborted = 7,    // holds no job (lost its admission, or moved by reassign: then
                  // when_ms names the slot it moved to, Successor) but may still be
                  // linked in a lane: whoever pops it frees it
};
inline constexpr std::uint32_t kSlotStates = 8;

// A process as the slot word names it: its record index + 1 (bits 0..11)
// and the record's incarnation mod 256 (bits 12..19), so that a lease of a
// process whose record was since taken by another is not taken for the
// newcomer's.
struct Holder {
  static constexpr std::uint32_t make(std::uint32_t index, std::uint64_t incarnation) noexcept {
    return ((index + 1) & 0xFFF) | std::uint32_t((incarnation & 0xFF) << 12);
  }
  static constexpr std::uint32_t index1(std::uint32_t h) noexcept { return h & 0xFFF; }
  static constexpr std::uint32_t inc(std::uint32_t h) noexcept { return h >> 12; }
};
// Every record's holder is nonzero (0 is "no holder").
static_assert(Holder::index1(Holder::make(kMaxProcs - 1, 0xFF)) == kMaxProcs);

struct SlotWord {
  static constexpr std::uint32_t kMaxAttempt = 0xFFFF;
  static constexpr std::uint64_t kCtrBits = 44, kWhenBits = 44;
  static constexpr std::uint64_t kCtrMask = (1ULL << kCtrBits) - 1;
  static constexpr std::uint64_t kWhenMask = (1ULL << kWhenBits) - 1;

  static constexpr SlotState state(const Word128& w) noexcept { return SlotState(w.lo & 15); }
  static constexpr std::uint32_t attempt(const Word128& w) noexcept { return std::uint32_t(bits(w.lo, 4, 16)); }
  static constexpr std::uint64_t when(const Word128& w) noexcept { return w.lo >> 20; }
  static constexpr std::uint64_t ctr(const Word128& w) noexcept { return w.hi & kCtrMask; }
  static constexpr std::uint32_t holder(const Word128& w) noexcept { return std::uint32_t(w.hi >> 44); }
  static constexpr Word128 make(SlotState s, std::uint32_t attempt, std::uint64_t when, std::uint64_t ctr,
                                std::uint32_t holder) noexcept {
    return Word128{std::uint64_t(s) | (std::uint64_t(attempt & kMaxAttempt) << 4) | ((when & kWhenMask) << 20),
                   (ctr & kCtrMask) | (std::uint64_t(holder & 0xFFFFF) << 44)};
  }
};
static_assert(SlotWord::state(SlotWord::make(SlotState::aborted, 7, 1, 2, 3)) == SlotState::aborted);
static_assert(SlotWord::attempt(SlotWord::make(SlotState::leased, 65535, 1, 2, 3)) == 65535);
static_assert(SlotWord::when(SlotWord::make(SlotState::dead, 1, (1ULL << 44) - 1, 2, 3)) == (1ULL << 44) - 1);
static_assert(SlotWord::ctr(SlotWord::make(SlotState::dead, 1, 2, (1ULL << 44) - 1, 3)) == (1ULL << 44) - 1);
static_assert(SlotWord::holder(SlotWord::make(SlotState::dead, 1, 2, 3, 0xFFFFF)) == 0xFFFFF);

// A slot named in a when_ms field (a reassign's origin and target): slot+1
// (bits 0..25) and the low 18 bits of its ctr when named (bits 26..43).
struct Successor {
  static constexpr std::uint64_t make(std::uint32_t slot, std::uint64_t ctr) noexcept {
    return std::uint64_t(slot + 1) | ((ctr & 0x3FFFF) << 26);
  }
  static constexpr std::uint32_t slot1(std::uint64_t v) noexcept { return std::uint32_t(v & ((1U << 26) - 1)); }
  static constexpr std::uint64_t ctr18(std::uint64_t v) noexcept { return (v >> 26) & 0x3FFFF; }
};
static_assert(Successor::slot1(Successor::make((1U << 26) - 2, ~0ULL)) == (1U << 26) - 1);

// A link of a lane's order (a node's `next` or upper level, a strays head):
//
//   bits  0..25  succ      slot+1 of the next node, 0 = none
//   bits 26..27  mark      0 none, 1 sealed (run: nothing may be appended
//                          after this node), 2 deleted (strays: this node is
//                          logically out at this level)
//   bits 28..63  tag       the owner's insertion tag (ctr of the node when it
//                          was linked, low 36 bits; for a strays head, the
//                          lane's incarnation): a stale CAS on a node that has
//                          since been relinked or reused finds another tag
struct Link {
  static constexpr std::uint64_t kSealed = 1, kDeleted = 2;
  static constexpr std::uint64_t kTagMask = (1ULL << 36) - 1;
  static constexpr std::uint32_t succ(std::uint64_t l) noexcept { return std::uint32_t(l & ((1U << 26) - 1)); }
  static constexpr std::uint64_t mark(std::uint64_t l) noexcept { return bits(l, 26, 2); }
  static constexpr std::uint64_t tag(std::uint64_t l) noexcept { return l >> 28; }
  static constexpr std::uint64_t make(std::uint32_t succ1, std::uint64_t mark, std::uint64_t tag) noexcept {
    return std::uint64_t(succ1 & ((1U << 26) - 1)) | ((mark & 3) << 26) | ((tag & kTagMask) << 28);
  }
};
// An upper-level strays link (levels 1..): as Link, with the tag split in
// two: the owner's insertion tag (bits 28..45, 18 bits) for CAS safety and
// the target's (bits 46..63) so that a link to a node reused since is seen
// stale when followed (upper levels are shortcuts: a stale one is ignored,
// so a node may be reused while an upper link still names it; level 0 is
// exact and a node leaves it before reuse).
struct UpLink {
  static constexpr std::uint64_t kTagMask = (1ULL << 18) - 1;
  static constexpr std::uint32_t succ(std::uint64_t l) noexcept { return Link::succ(l); }
  static constexpr std::uint64_t mark(std::uint64_t l) noexcept { return Link::mark(l); }
  static constexpr std::uint64_t owner_tag(std::uint64_t l) noexcept { return bits(l, 28, 18); }
  static constexpr std::uint64_t target_tag(std::uint64_t l) noexcept { return l >> 46; }
  static constexpr std::uint64_t make(std::uint32_t succ1, std::uint64_t mark, std::uint64_t owner,
                                      std::uint64_t target) noexcept {
    return std::uint64_t(succ1 & ((1U << 26) - 1)) | ((mark & 3) << 26) | ((owner & kTagMask) << 28) |
           ((target & kTagMask) << 46);
  }
};
static_assert(Link::succ(Link::make((1U << 26) - 1, 2, 5)) == (1U << 26) - 1);
static_assert(UpLink::target_tag(UpLink::make(1, 2, 3, UpLink::kTagMask)) == UpLink::kTagMask);
static_assert(UpLink::owner_tag(UpLink::make(1, 2, UpLink::kTagMask, 0)) == UpLink::kTagMask);
static_assert(Link::mark(Link::make(1, 2, 5)) == 2 && Link::tag(Link::make(1, 2, Link::kTagMask)) == Link::kTagMask);

// A job's retry policy as kept in its slot (RetryPolicy, retry.hpp).
//   a: bits 0..15 max_attempts (0 unset) | 16 has_backoff | 17 exponential |
//      18..27 jitter in 1/1000 | 28..47 factor in 1/1000 (1000..1000000)
//   b: bits 0..31 base_ms | 32..63 cap_ms
struct RetryRecord {
  std::atomic<std::uint64_t> a;
  std::atomic<std::uint64_t> b;
};

// One job slot; the payload follows it (slot_bytes apart). Fields are
// written by the one process that owns the slot in its current state (the
// enqueuer while admitting, the lease holder, the mover while returning)
// and published by the release of the slot word (or, for `next`, by the CAS
// that links it). They are atomics because readers that do not own the slot
// (index probes, inspection) read them and then re-check the slot word.
struct alignas(kCacheLine) SlotRecord {
  // line 0: what a claim and an index probe read
  std::atomic<std::uint64_t> sf;           // the job id's snowflake: the lane order's key
  std::atomic<std::uint64_t> next;         // Link: run or strays level 0
  std::atomic<std::uint64_t> digits;       // base62 digits 0..7 of the id (the text the lease returns)
  std::atomic<std::uint32_t> digits_tail;  // base62 digits 8..10 (low 3 bytes)
  std::atomic<std::uint32_t> lane;         // lane record index
  std::atomic<std::uint32_t> payload_len;
  std::atomic<std::uint8_t> level;         // strays tower height (1..kStrayLevels), 0 when in the run
  std::atomic<std::uint8_t> error_len;
  std::atomic<std::uint16_t> flags;        // kSlotHasRetry
  std::atomic<std::uint64_t> run_seq;      // position in its lane's run (for depth); while leased,
                                           // where its park step goes (park_plan, core.hpp)
  std::atomic<std::uint64_t> ready_us;     // segment clock (us) when it last became pending
  std::atomic<std::uint64_t> fail_to;      // an admission's target, as a slot word's low half
                                           // (state | attempt | when); a reassign copy's origin
  // line 1: the strays tower and the retry policy
  std::atomic<std::uint64_t> up[kStrayLevels - 1];  // UpLink: strays levels 1..
  RetryRecord retry;
  std::atomic<std::uint64_t> group_kind;   // the job's group: namespace code (the default lane: kNoGroup)
  // line 2: the last error given to fail(), the admission the record's
  // fields are of, and the group's snowflake
  char error[kErrorBytes];
  // The ctr of the admission whose fields (id, group, fail_to, flags) are
  // written: stored (release) by its admitter once they are, before it is
  // linked or indexed. A helper acts on an admitting slot only for the
  // admission it has read this from, so a helper that read the slot long
  // ago (stopped, or slow) cannot decide a later admission of it.
  std::atomic<std::uint64_t> pub;
  std::atomic<std::uint64_t> group_sf;
};
static_assert(sizeof(SlotRecord) == 192);
inline constexpr std::uint16_t kSlotHasRetry = 1;  // the job carries a retry policy (line 1)
// An admitting slot made by reassign: fail_to's when_ms names the slot it
// moves the job from (Successor), and the move decides its admission.
inline constexpr std::uint16_t kSlotMoved = 2;
inline constexpr std::uint64_t kNoGroup = ~0ULL;      // SlotRecord::group_kind of a job without a group

// ---------------------------------------------------------------------------
// Lane word: what decides a lane's service, in one Word128 (CAS only).
//
//   lo  bits  0..25  head      slot+1 of the first node of the run (ascending,
//                              appended at the tail), 0 = empty run
//       bits 26..37  htag      the head node's insertion tag (low 12 bits):
//                              a node relinked since cannot pass for the head
//       bits 38..54  active    jobs of this lane leased, or taken out of its
//                              order and not yet leased
//       bit  55      ringed    the lane is in the rota: a valid ring cell names it
//       bit  56      strays    its strays list may hold a job
//       bits 57..58  state     LaneState
//       bits 59..63  tgen      low 5 bits of the ring position of its token
//   hi  bits  0..25  tail      slot+1 of the run's last node (exact: appends
//                              link after it, then move it by CAS)
//       bits 26..51  rel       slot+1 of a job step decided by the CAS that
//                              wrote this word and not yet applied to the
//                              slot (RelOp says which); whoever writes the
//                              lane word next applies it first (lane_base)
//       bits 52..54  relop     RelOp
//       bits 55..63  version   +1 at every CAS
//
// A CAS computed from an old reading fails unless all 128 bits came back:
// the version, the head's tag, the counts and the pending step together make
// that a practical impossibility, and every CAS that acts on something read
// beside the word (a node's next link) checks it again after (docs/design.md,
// "ABA").
enum class LaneState : std::uint8_t { free = 0, live = 1, creating = 2 };
// The step a lane word CAS decided for slot `rel` (docs/design.md, "Lane
// steps"). Applying it is idempotent; its effect on the lane word (a count
// given back or taken, the strays flag) is part of the CAS that named it.
//   complete  leased -> free
//   park      leased -> what its fail_to says (scheduled or dead)
//   back      leased -> returning, attempt kept (expiry, retry now); or a
//             job taken out of its lane by a claimer that died before
//             leasing it (pending) -> returning (recovery)
//   release   leased -> returning, the delivery given back
//   linked    returning, linked in this lane's strays -> pending
//   take      the strays' minimum is taken (marked) for the CAS's writer, a
//             claim (which counted it active if it is a job)
//   drop      pending, linked and not taken -> aborted, naming the slot the
//             job moved to (reassign: fail_to holds that Successor); the slot
//             stays linked for a claim to pop and free
enum class RelOp : std::uint8_t { complete = 0, park = 1, back = 2, release = 3, linked = 4, take = 5, drop = 6 };

struct LaneWord {
  static constexpr std::uint64_t kActiveMask = (1ULL << 17) - 1;
  static constexpr std::uint64_t kActiveMax = kActiveMask;  // at most this many held at once
  static constexpr std::uint64_t kTgenMask = 31;
  static constexpr std::uint64_t kVersionMask = 511;

  static constexpr std::uint32_t head(const Word128& w) noexcept { return std::uint32_t(bits(w.lo, 0, 26)); }
  static constexpr std::uint64_t htag(const Word128& w) noexcept { return bits(w.lo, 26, 12); }
  static constexpr std::uint64_t active(const Word128& w) noexcept { return bits(w.lo, 38, 17); }
  static constexpr bool ringed(const Word128& w) noexcept { return bits(w.lo, 55, 1); }
  static constexpr bool strays(const Word128& w) noexcept { return bits(w.lo, 56, 1); }
  static constexpr LaneState state(const Word128& w) noexcept { return LaneState(bits(w.lo, 57, 2)); }
  static constexpr std::uint32_t tgen(const Word128& w) noexcept { return std::uint32_t(bits(w.lo, 59, 5)); }
  static constexpr std::uint32_t tail(const Word128& w) noexcept { return std::uint32_t(bits(w.hi, 0, 26)); }
  static constexpr std::uint32_t rel(const Word128& w) noexcept { return std::uint32_t(bits(w.hi, 26, 26)); }
  static constexpr RelOp relop(const Word128& w) noexcept { return RelOp(bits(w.hi, 52, 3)); }
  static constexpr std::uint64_t version(const Word128& w) noexcept { return bits(w.hi, 55, 9); }

  // Does the word hold the token of the ring cell whose position's low 5
  // bits are `tgen`: ringed, and its tgen that? One masked compare of the
  // two fields (bit 55 and bits 59..63) rather than two extractions.
  // `tgen` is taken mod 32 (every caller passes h & kTgenMask; comparing
  // tgen(w) == tgen unmasked would say no to a larger value).
  static constexpr bool holds_token(const Word128& w, std::uint32_t tgen) noexcept {
    constexpr std::uint64_t kMask = (1ULL << 55) | (kTgenMask << 59);
    return (w.lo & kMask) == ((1ULL << 55) | (std::uint64_t(tgen & kTgenMask) << 59));
  }

  // head and htag are adjacent (bits 0..37): both written under one mask,
  // each value cut to its width as with_bits would.
  static constexpr Word128 with_head(Word128 w, std::uint32_t slot1, std::uint64_t tag) noexcept {
    constexpr std::uint64_t kMask = (1ULL << 38) - 1;
    w.lo = (w.lo & ~kMask) | (std::uint64_t(slot1) & ((1ULL << 26) - 1)) | ((tag & 0xFFF) << 26);
    return w;
  }
  static constexpr Word128 with_active(Word128 w, std::uint64_t v) noexcept { w.lo = with_bits(w.lo, 38, 17, v); return w; }
  static constexpr Word128 with_ringed(Word128 w, bool v) noexcept { w.lo = with_bits(w.lo, 55, 1, v); return w; }
  static constexpr Word128 with_strays(Word128 w, bool v) noexcept { w.lo = with_bits(w.lo, 56, 1, v); return w; }
  static constexpr Word128 with_state(Word128 w, LaneState s) noexcept { w.lo = with_bits(w.lo, 57, 2, std::uint64_t(s)); return w; }
  static constexpr Word128 with_tgen(Word128 w, std::uint32_t v) noexcept { w.lo = with_bits(w.lo, 59, 5, v); return w; }
  static constexpr Word128 with_tail(Word128 w, std::uint32_t slot1) noexcept { w.hi = with_bits(w.hi, 0, 26, slot1); return w; }
  static constexpr Word128 with_rel(Word128 w, std::uint32_t slot1, RelOp op) noexcept {
    w.hi = with_bits(with_bits(w.hi, 26, 26, slot1), 52, 3, std::uint64_t(op));
    return w;
  }
  // The next version: what every CAS of the lane word writes. The version
  // is hi's top 9 bits, so from.hi + 2^55 has version(from) + 1 mod 512
  // there (the carry out of bit 63 is dropped, and the bits below 55 are
  // not touched): an add and a mask rather than extract, add, insert.
  static constexpr Word128 bumped(Word128 w, const Word128& from) noexcept {
    constexpr std::uint64_t kMask = kVersionMask << 55;
    w.hi = (w.hi & ~kMask) | ((from.hi + (1ULL << 55)) & kMask);
    return w;
  }
};
static_assert(LaneWord::version(LaneWord::bumped(Word128{~0ULL, ~0ULL}, Word128{~0ULL, ~0ULL})) == 0);
static_assert(LaneWord::version(LaneWord::bumped(Word128{}, Word128{})) == 1);
static_assert(LaneWord::tgen(LaneWord::with_tgen(Word128{}, 31)) == 31);
static_assert(LaneWord::rel(LaneWord::with_rel(Word128{}, (1U << 26) - 1, RelOp::park)) == (1U << 26) - 1);
static_assert(LaneWord::relop(LaneWord::with_rel(Word128{}, 1, RelOp::take)) == RelOp::take);
static_assert(LaneWord::version(LaneWord::with_rel(Word128{}, 1, RelOp::take)) == 0);
static_assert(LaneWord::active(LaneWord::with_active(Word128{~0ULL, 0}, 5)) == 5);
static_assert(LaneWord::htag(LaneWord::with_head(Word128{}, 7, 4095)) == 4095);
static_assert(LaneWord::version(LaneWord::bumped(Word128{0, ~0ULL >> 9}, Word128{0, 510ULL << 55})) == 511);
static_assert(LaneWord::bumped(Word128{1, 5}, Word128{~0ULL, (3ULL << 55) | 77}) == Word128{1, (4ULL << 55) | 5});
static_assert(LaneWord::with_head(Word128{~0ULL, 0}, ~0U, ~0ULL) == Word128{~0ULL, 0});
static_assert(LaneWord::with_head(Word128{~0ULL, 0}, 0, 0) == Word128{~((1ULL << 38) - 1), 0});
static_assert(LaneWord::head(LaneWord::with_head(Word128{}, (1U << 26) | 9, 1U << 12)) == 9);
static_assert(LaneWord::htag(LaneWord::with_head(Word128{}, (1U << 26) | 9, (1U << 12) | 3)) == 3);
static_assert(LaneWord::with_rel(Word128{0, ~0ULL}, 0, RelOp::complete) == Word128{0, ~(((1ULL << 29) - 1) << 26)});
static_assert(LaneWord::rel(LaneWord::with_rel(Word128{0, ~0ULL}, (1U << 26) | 5, RelOp::drop)) == 5);
static_assert(LaneWord::relop(LaneWord::with_rel(Word128{0, ~0ULL}, 5, RelOp::drop)) == RelOp::drop);
static_assert(LaneWord::version(LaneWord::with_rel(Word128{0, ~0ULL}, 5, RelOp::drop)) == 511);
static_assert(LaneWord::tail(LaneWord::with_rel(Word128{0, ~0ULL}, 5, RelOp::drop)) == (1U << 26) - 1);
static_assert(LaneWord::holds_token(LaneWord::with_tgen(LaneWord::with_ringed(Word128{}, true), 17), 17 + 64));
static_assert(!LaneWord::holds_token(LaneWord::with_tgen(Word128{}, 17), 17));
static_assert(!LaneWord::holds_token(LaneWord::with_tgen(LaneWord::with_ringed(Word128{}, true), 17), 16));

// The weighted turn of a lane (one word, CAS, only for weights > 1):
//   bits 0..31 the ring position + 1 of the token whose turn it counts
//   (0: none) | bits 32..41 claims left in that turn | bits 42..63 version
struct Turn {
  static constexpr std::uint32_t pos1(std::uint64_t t) noexcept { return std::uint32_t(t); }
  static constexpr std::uint32_t left(std::uint64_t t) noexcept { return std::uint32_t(bits(t, 32, 10)); }
  static constexpr std::uint64_t make(std::uint64_t pos, std::uint32_t left, std::uint64_t from) noexcept {
    return std::uint64_t(std::uint32_t(pos + 1)) | (std::uint64_t(left & 1023) << 32) | (((from >> 42) + 1) << 42);
  }
};

// A lane's settings (one word, CAS): they stay while the group is idle.
//   bits 0..16 limit (0 none) | bit 17 paused | bits 18..27 weight (0 means 1)
//   | bits 28..63 version
struct Settings {
  static constexpr std::uint64_t limit(std::uint64_t s) noexcept { return bits(s, 0, 17); }
  static constexpr bool paused(std::uint64_t s) noexcept { return bits(s, 17, 1); }
  static constexpr std::uint32_t weight(std::uint64_t s) noexcept {
    const auto w = std::uint32_t(bits(s, 18, 10));
    return w ? w : 1;
  }
  static constexpr bool defaults(std::uint64_t s) noexcept { return limit(s) == 0 && !paused(s) && weight(s) == 1; }
  static constexpr std::uint64_t make(std::uint64_t limit, bool paused, std::uint32_t weight, std::uint64_t from) noexcept {
    return (limit & ((1ULL << 17) - 1)) | (std::uint64_t(paused) << 17) | (std::uint64_t(weight & 1023) << 18) |
           (((from >> 28) + 1) << 28);
  }
};

// One lane (a group's, while the group is live). Line 0 is what a claim
// reads; line 1 the strays heads, read when the lane word says strays.
struct alignas(kCacheLine) LaneRecord {
  Word128 word;                            // LaneWord
  std::atomic<std::uint64_t> settings;     // Settings
  std::atomic<std::uint64_t> husks;        // HuskCount: aborted slots still linked in its run (for depth; approximate)
  std::atomic<std::uint64_t> key_sf;       // the group id's snowflake
  std::atomic<std::uint64_t> key_kind;     // bits 0..14 namespace code | bits 16..63 incarnation
  std::atomic<std::uint64_t> turn;         // Turn (weights > 1)
  std::atomic<std::uint64_t> served;       // claims served (statistics; approximate under contention)
  // line 1
  std::atomic<std::uint64_t> strays[kStrayLevels];  // heads of the strays levels: [0] a Link, [1..] UpLinks
  std::atomic<std::uint64_t> creator;      // Holder of its last creator (for display: a creating word names its creator itself)
  std::atomic<std::uint64_t> idle_seen;    // the sweep: when it first found the lane idle: lane word
                                           // version (bits 0..8) | 1 << 9 | segment ms (bits 10..63)
};
static_assert(sizeof(LaneRecord) == 128);

// LaneRecord::husks: the husks counted in the lane's run (bits 0..31), and
// the incarnation of the lane they are counted for (bits 32..62: the low 31
// bits of the record's, key_kind >> 16; written when the record is taken).
// A husk's take can empty its lane, which may then be given back and its
// record taken for another group before the husk is released: the release
// counts the husk out only of the incarnation its take named (IntentLane),
// so that it leaves the count of the record's next lane alone.
struct HuskCount {
  static constexpr std::uint64_t kIncMask = (1ULL << 31) - 1;
  static constexpr std::uint64_t make(std::uint64_t inc) noexcept { return (inc & kIncMask) << 32; }
  static constexpr std::uint64_t count(std::uint64_t v) noexcept { return v & 0xFFFFFFFFULL; }
  static constexpr std::uint64_t inc(std::uint64_t v) noexcept { return (v >> 32) & kIncMask; }
};

// Lane directory: group -> lane record, two-choice hashing over buckets of
// kDirWays 128-bit entries, sized 8 entries per lane so that a full bucket
// pair does not happen in practice (and is reported, never ignored).
//
//   lo  bits 0..62   the group id's snowflake
//   hi  bits 0..14   namespace code | 15..16 DirState | 17..38 lane+1
//       | 39..63 the lane's incarnation, low 25 bits
enum class DirState : std::uint8_t { free = 0, tentative = 1, live = 2 };
struct DirEntry {
  static constexpr std::uint64_t sf(const Word128& e) noexcept { return e.lo & ((1ULL << 63) - 1); }
  static constexpr std::uint32_t kind(const Word128& e) noexcept { return std::uint32_t(bits(e.hi, 0, 15)); }
  static constexpr DirState state(const Word128& e) noexcept { return DirState(bits(e.hi, 15, 2)); }
  static constexpr std::uint32_t lane1(const Word128& e) noexcept { return std::uint32_t(bits(e.hi, 17, 22)); }
  static constexpr std::uint64_t inc(const Word128& e) noexcept { return e.hi >> 39; }
  static constexpr Word128 make(std::uint64_t sf, std::uint32_t kind, DirState st, std::uint32_t lane1,
                                std::uint64_t inc) noexcept {
    return Word128{sf & ((1ULL << 63) - 1), std::uint64_t(kind & 0x7FFF) | (std::uint64_t(st) << 15) |
                                                 (std::uint64_t(lane1 & ((1U << 22) - 1)) << 17) | (inc << 39)};
  }
};
struct alignas(kCacheLine) DirBucket {
  Word128 e[kDirWays];
};
static_assert(sizeof(DirBucket) == 64);

// ---------------------------------------------------------------------------
// Ring cell: the rota is a FIFO of cells naming lanes. The cell at ring
// position p names lane L and is L's token iff L's lane word says ringed and
// its tgen equals p's low 5 bits; every other cell is stale and skipped.
// Cells are never taken out: a claim that rotates a lane writes its new
// cell at the tail first, then moves the lane word's tgen to it, then moves
// the head past the old one (docs/design.md section 5, "The ring").
//
//   bits  0..21  lane+1
//   bits 32..63  pos        the ring position this cell was written for (mod 2^32)
struct RingCell {
  // lane1 of a cell written for its position that names no lane: a gap
  // filled by a ring step (ring_step), passed by whoever reaches it. Past
  // every lane (kMaxLanes + 1 < kSkip).
  static constexpr std::uint32_t kSkip = (1U << 22) - 1;
  static constexpr std::uint32_t lane1(std::uint64_t c) noexcept { return std::uint32_t(bits(c, 0, 22)); }
  static constexpr std::uint32_t pos(std::uint64_t c) noexcept { return std::uint32_t(c >> 32); }
  static constexpr std::uint64_t make(std::uint64_t pos, std::uint32_t lane1) noexcept {
    return (pos << 32) | (lane1 & ((1U << 22) - 1));
  }
};

// Id index entry: a job id -> the slot that admitted it. Two-choice hashing
// over buckets of kIndexWays entries, eight entries per job slot. An entry
// is current while its slot's admission tag still equals its tag. Entries
// are never taken out: a new admission of a slot moves its tag on, which
// makes the entries of the previous one stale, and an insert reuses a stale
// way (or one whose slot is free) when it needs the room; so the current
// entries are those of the live jobs and of the slots freed and not yet reused.
//
//   bits 0..7 tag (the slot's admission tag) | 8..33 slot+1 | 34..63 fingerprint
//
// An insert goes to the id's first bucket, or (that one full) to its second,
// after setting the first's overflow flag: a reader looks at the second
// bucket only when the first says it overflowed (the flag is sticky).
struct IndexEntry {
  static constexpr std::uint32_t tag(std::uint64_t e) noexcept { return std::uint32_t(e & 0xFF); }
  static constexpr std::uint32_t slot1(std::uint64_t e) noexcept { return std::uint32_t(bits(e, 8, 26)); }
  static constexpr std::uint32_t fp(std::uint64_t e) noexcept { return std::uint32_t(e >> 34); }
  static constexpr std::uint64_t make(std::uint32_t fp, std::uint32_t slot1, std::uint32_t tag) noexcept {
    return (std::uint64_t(fp & 0x3FFFFFFF) << 34) | (std::uint64_t(slot1 & ((1U << 26) - 1)) << 8) | (tag & 0xFF);
  }
};
struct alignas(kCacheLine) IndexBucket {
  std::atomic<std::uint64_t> e[kIndexWays];
  std::atomic<std::uint64_t> overflow;  // 1 once an entry of an id hashed here went to its second bucket
};
static_assert(sizeof(IndexBucket) == 64);

// ---------------------------------------------------------------------------
// Counters: each thread counts in its own thread record (plain loads and
// stores by its one writer: no shared line and no locked instruction on the
// hot path); a released thread record folds them into its process record's
// `retired`, a detaching process into the header's.
struct CounterBlock {
  std::atomic<std::uint64_t> enqueued, duplicates, claimed, completed, retried, dead, expired, promoted, drained,
      released;
};

// One attached process (one Queue handle).
//
//   owner: pid (bits 0..31) | 1<<32 attached | 1<<33 start time written
//          (never judged dead before) | 1<<34 observer (a tool that only
//          looks) | 1<<35 liveness lock held (kOwnerLocked) | incarnation's
//          low 28 bits << 36 (kOwnerIncShift); 0 = free record
//   seen:  the last liveness verdict: segment ms (bits 22..63) | the low 20
//          bits of the incarnation it was about (bits 2..21) | verdict (bits 0..1:
//          0 unknown, 1 alive, 2 dead), shared so that one judgement per
//          recovery_ms / 2 serves every sweeper (Verdict, segment.hpp)
//   intent: the fallback intent of threads that found no thread record free
//           (ThreadRecord::intent), taken by CAS per use: tid (bits 0..31)
//           in intent_tid, the intent itself here
struct alignas(kCacheLine) ProcRecord {
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> start_time;     // /proc/<pid>/stat starttime: pid + start time, never a bare pid
  std::atomic<std::uint64_t> attached_unix_ms;
  std::atomic<std::uint64_t> seen;
  std::atomic<std::uint64_t> incarnation;    // +1 at every attach (Holder)
  std::atomic<std::uint64_t> intent_tid;
  std::atomic<std::uint64_t> intent;
  std::atomic<std::uint64_t> intent_lane;
  CounterBlock retired;                      // counts of its released thread records
  std::atomic<std::uint64_t> intent_pred;
  // Its threads parked in claim_wait (low 32 bits), under the low 32 bits
  // of the owner's incarnation (high 32, written at attach). Each is
  // counted in Header::waiters too, raised there first and lowered here
  // first, so this never counts one that waiters does not. The sweep that
  // finds the owner dead, and an attach that takes the record over, take
  // the count out of waiters (drop_parked, segment.cpp), once: the sweep by
  // a CAS under the incarnation it judged, the attach by an exchange. A
  // consumer killed while parked was counted for good before 2026-12-06,
  // and every notify then made a futex wake system call for nobody.
  std::atomic<std::uint64_t> parked;
  // Its threads parked in enqueue_wait for a free slot, the same way, under
  // the same incarnation half, counted in Header::room_waiters.
  std::atomic<std::uint64_t> room_parked;
  // Its threads parked in enqueue_wait for a lane (lanes_full), the same
  // way, counted in Header::lane_waiters (and in room_parked, as in
  // room_waiters: every parked producer is counted there).
  std::atomic<std::uint64_t> lane_parked;
  // Its threads parked for the mirror: for the acknowledgement of a sync
  // enqueue (mirror_wait_acked), or in enqueue_wait for room in the log
  // (mirror_behind), the same way, counted in MirrorShared::ack_waiters.
  std::atomic<std::uint64_t> ack_parked;
  std::uint64_t reserved[3];
};
static_assert(sizeof(ProcRecord) == 256);

// owner word bits of a ProcRecord.
inline constexpr std::uint64_t kOwnerAttached = 1ULL << 32;
inline constexpr std::uint64_t kOwnerStamped = 1ULL << 33;
inline constexpr std::uint64_t kOwnerObserver = 1ULL << 34;
// The owner holds the liveness lock of its record: an OFD write lock on
// byte kLivenessLockBase + index of the segment's file, taken before the
// owner word says stamped and given up after it is cleared.
inline constexpr std::uint64_t kOwnerLocked = 1ULL << 35;
// The low 28 bits of the owner's incarnation (bits 36..63): no two owners of
// a record write the same word.
inline constexpr unsigned kOwnerIncShift = 36;
inline constexpr std::uint64_t kOwnerIncMask = (1ULL << 28) - 1;
inline constexpr std::uint64_t kLivenessLockBase = 1ULL << 40;

// One thread of one attached process: what it is in the middle of (so that
// a survivor can finish or undo it if the process dies), and its counters.
//
//   owner:  proc record index + 1 (bits 0..15) | 1<<16 in use; 0 free
//   intent: what the thread is between two shared steps of, bits 0..3
//           Intent, bits 4..29 slot+1, bits 30..63 the slot's ctr (low 34
//           bits), with intent_lane the lane (IntentLane): written by the
//           thread alone before the first of the two steps, cleared after
//           the second
//     pop_run, pop_strays      a claim: the job is being taken out of its
//                              lane's run (one CAS) or strays (a take step),
//                              counted active, then leased
//     drain_run, drain_strays  a drain: the same, then freed
//     link                     an enqueue: the job is being appended to its
//                              lane's run (after intent_pred, slot+1 | tag
//                              << 26 of the tail it links after, 0 when it
//                              starts the run), not yet committed
// intent_lane: the lane (bits 0..31); for a husk's take also the lane's
// incarnation as HuskCount keeps it (bits 32..62), read between the lane
// word its take's CAS is from and that CAS, and bit 63 saying so. A job's
// take names no incarnation (it would cost every claim a load).
struct IntentLane {
  static constexpr std::uint64_t kHusk = 1ULL << 63;
  static constexpr std::uint64_t husk(std::uint32_t lane, std::uint64_t inc) noexcept {
    return lane | ((inc & HuskCount::kIncMask) << 32) | kHusk;
  }
  static constexpr std::uint64_t lane(std::uint64_t v) noexcept { return v & 0xFFFFFFFFULL; }
  static constexpr bool is_husk(std::uint64_t v) noexcept { return (v & kHusk) != 0; }
  static constexpr std::uint64_t inc(std::uint64_t v) noexcept { return (v >> 32) & HuskCount::kIncMask; }
};
enum class Intent : std::uint8_t { none = 0, pop_run = 1, pop_strays = 2, drain_run = 3, drain_strays = 4, link = 5 };
struct IntentWord {
  static constexpr std::uint64_t make(Intent i, std::uint32_t slot, std::uint64_t ctr) noexcept {
    return std::uint64_t(i) | (std::uint64_t(slot + 1) << 4) | ((ctr & ((1ULL << 34) - 1)) << 30);
  }
  static constexpr Intent kind(std::uint64_t v) noexcept { return Intent(v & 15); }
  static constexpr std::uint32_t slot1(std::uint64_t v) noexcept { return std::uint32_t(bits(v, 4, 26)); }
  static constexpr std::uint64_t ctr34(std::uint64_t v) noexcept { return v >> 30; }
};
struct alignas(kCacheLine) ThreadRecord {
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> intent;
  std::atomic<std::uint64_t> intent_lane;
  std::atomic<std::uint64_t> intent_pred;
  std::atomic<std::uint64_t> alloc_hint;    // where this thread's next slot allocation looks first
  std::uint64_t reserved[3];
  CounterBlock counters;
};
static_assert(sizeof(ThreadRecord) == 192);

// Enqueue-to-claim wait histogram of one lane: bucket i counts claims that
// waited [2^i, 2^(i+1)) us. Statistics: approximate under contention.
struct alignas(kCacheLine) WaitBuckets {
  std::atomic<std::uint64_t> b[kWaitBuckets];
};
static_assert(sizeof(WaitBuckets) == 256);

// ---------------------------------------------------------------------------
// Transition log of a mirrored segment (docs/mirror.md): a bounded ring of
// "this changed" records that any process appends after a transition and
// one mirror process reads. A record names a job slot, a lane or the whole
// queue; the mirror reads the current state of what it names, so records
// need no payload and a late or repeated record does no harm.
//
// Cell protocol (Vyukov's bounded queue, one reader): a cell whose stamp is
// seq is free for the writer of seq; the writer who wins head seq -> seq+1
// writes the body and CASes the stamp seq -> seq+1 (published); the reader
// takes it and stores seq + log_cells (free for the next lap). A writer that
// died between its head CAS and its stamp CAS leaves a hole; the reader
// abandons it after a timeout by CASing the stamp seq -> seq + log_cells and
// resynchronises everything. A writer that was only stalled then fails its
// stamp CAS and asks for a resync itself; if its late body store lands in
// the next lap's cell, the sequence bits in the body no longer match and the
// reader resynchronises rather than trust it.
//
//   body: bits 0..3 kind (LogKind), bits 4..31 slot or lane index,
//         bits 32..63 the record's sequence number mod 2^32
//   ms:   segment clock when it was logged (for the lag in ms)
//   group: for a lane record, the lane's group at the time (snowflake), so
//          that a lane reclaimed before the mirror reads it is still known
enum class LogKind : std::uint8_t { job = 1, lane = 2, queue = 3 };
struct LogCell {
  std::atomic<std::uint64_t> stamp;
  std::atomic<std::uint64_t> body;
  std::atomic<std::uint64_t> ms;
  std::atomic<std::uint64_t> group;
};
static_assert(sizeof(LogCell) == 32);
struct LogBody {
  static constexpr std::uint64_t pack(LogKind k, std::uint32_t index, std::uint64_t seq) noexcept {
    return std::uint64_t(k) | (std::uint64_t(index & 0x0FFFFFFF) << 4) | (seq << 32);
  }
  static constexpr LogKind kind(std::uint64_t b) noexcept { return LogKind(b & 15); }
  static constexpr std::uint32_t index(std::uint64_t b) noexcept { return std::uint32_t(b >> 4) & 0x0FFFFFFF; }
  static constexpr std::uint32_t seq_low(std::uint64_t b) noexcept { return std::uint32_t(b >> 32); }
};

enum class MirrorState : std::uint32_t {
  ok = 0,
  dropped = 1,    // the log filled under the `drop` policy: nothing is logged until a resync
  resync = 2,     // a record was lost (a hole or a failed publish): resynchronise everything
};

// MirrorShared::proc: the mirror's process record + 1 (bits 0..15) and that
// record's incarnation mod 2^16 (bits 16..31). A dead mirror's record taken
// by a process that is no mirror has moved its incarnation on: the role is
// free, where by the index alone that process held it until it detached.
struct MirrorRole {
  static constexpr std::uint32_t make(std::uint32_t index, std::uint64_t incarnation) noexcept {
    return ((index + 1) & 0xFFFF) | (std::uint32_t(incarnation & 0xFFFF) << 16);
  }
  static constexpr std::uint32_t index1(std::uint32_t role) noexcept { return role & 0xFFFF; }
  static constexpr std::uint32_t incarnation(std::uint32_t role) noexcept { return role >> 16; }
};
static_assert(kMaxProcs < 0xFFFF, "a mirror role's record index fits 16 bits");

struct alignas(kCacheLine) MirrorShared {
  alignas(kCacheLine) std::atomic<std::uint64_t> head;   // next sequence number to reserve
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;   // next sequence the mirror reads
  std::atomic<std::uint32_t> bell;                       // futex: the mirror parks here
  std::atomic<std::uint32_t> parked;                     // 1 while the mirror is parked
  std::atomic<std::uint32_t> proc;                       // the running mirror's record (MirrorRole), 0 if none
  std::atomic<std::uint32_t> state;                      // MirrorState
  alignas(kCacheLine) std::atomic<std::uint64_t> acked;  // records below this are in Valkey
  std::atomic<std::uint32_t> ack_bell;                   // futex: sync enqueuers and producers waiting for log room park here
  std::atomic<std::uint32_t> ack_waiters;
  std::atomic<std::uint64_t> acked_unix_ms;              // when `acked` last moved
  std::atomic<std::uint64_t> inflight_ms;                // segment ms of the oldest record read but not acked (0: none)
  std::atomic<std::uint64_t> dropped_unix_ms;            // when the log last overflowed
  std::atomic<std::uint64_t> lost;                       // records not logged (full log, holes), ever
  std::atomic<std::uint64_t> resyncs;                    // full resynchronisations, ever
  // CLOCK_MONOTONIC ms: no thread parked on ack_bell sleeps past it
  // (as Header::park_until is to claim_wait's consumers).
  std::atomic<std::uint64_t> ack_park_until;
};

// What recovery (the sweep returning leases of dead or late holders, and
// finishing what dead processes left half done) last did.
struct alignas(kCacheLine) RecoveryStats {
  std::atomic<std::uint64_t> runs;          // sweeps that returned at least one lease, ever
  std::atomic<std::uint64_t> jobs;          // leases returned by sweeps, ever
  std::atomic<std::uint64_t> last_unix_ms;  // when the last such sweep ran
  std::atomic<std::uint64_t> last_jobs;     // leases it returned
  std::atomic<std::uint64_t> last_pid;      // its holder, if one dead process held them all (else 0)
  std::atomic<std::uint64_t> last_us;       // how long that sweep took
  std::atomic<std::uint64_t> finished;      // half-done steps of dead processes finished or undone, ever
  std::atomic<std::uint64_t> finished_unix_ms;
  std::atomic<std::uint64_t> finished_pid;  // the dead process of the last one
};

// Detected corruption (docs/design.md, "Hostile bytes").
struct alignas(kCacheLine) CorruptionStats {
  std::atomic<std::uint64_t> count;
  std::atomic<std::uint64_t> last_unix_ms;
  std::atomic<std::uint64_t> what;          // the last structure met: CorruptWhat
};

// The sweep: promotion of due jobs, expiry of leases, liveness of holders,
// and the leftovers of dead processes, done a chunk of the slot table at a
// time by whichever claim or waiter finds one due (no daemon).
//   cursor: pass (bits 32..63) | next position of the pass (bits 0..31):
//           first the process records (0..processes - 1), whose liveness it
//           judges, then the slots (processes + slot)
struct alignas(kCacheLine) SweepShared {
  std::atomic<std::uint64_t> cursor;
  std::atomic<std::uint64_t> next_due;      // earliest deadline or due time known (segment ms)
  std::atomic<std::uint64_t> pass_started_ms;
  std::atomic<std::uint64_t> last_chunk_ms; // segment ms when a chunk was last taken
  std::atomic<std::uint64_t> pass_min;      // the earliest time seen by the chunks of this pass
};

struct alignas(kCacheLine) Header {
  // Written once by the creator before `magic` is published; read-only after.
  std::atomic<std::uint64_t> magic;  // kMagic once the segment is ready; written last
  std::uint32_t layout_version;
  std::uint32_t header_bytes;
  std::uint64_t segment_bytes;
  std::uint32_t job_capacity;
  std::uint32_t lane_capacity;       // lane records: groups live at once + the default lane
  std::uint32_t dir_buckets;         // power of two
  std::uint32_t payload_bytes;
  std::uint32_t slot_bytes;          // sizeof(SlotRecord) + payload, rounded
  std::uint32_t ring_cells;          // power of two
  std::uint32_t index_buckets;       // jobs x kIndexEntriesPerSlot / kIndexWays, rounded up (at least 2)
  std::uint32_t proc_capacity;
  std::uint32_t thread_capacity;
  std::uint32_t slot_bits;           // bits of a slot index in a Token
  std::uint64_t words_off, tags_off, slots_off, lanes_off, dir_off, ring_off, index_off, procs_off, threads_off,
      waits_off, hints_off;
  std::uint64_t hash_seed;
  std::uint64_t created_unix_ms;
  char job_kind[4];
  std::uint16_t node;
  std::uint16_t reserved0;
  std::uint32_t creator_pid;
  // The queue's default retry policy (RetryRecord layout).
  std::uint64_t default_retry_a, default_retry_b;
  // Mirror, fixed at creation: durability 0 none, 1 async, 2 sync; on_full
  // 0 refuse new work, 1 drop the mirror (until a resync).
  char mirror_url[kMirrorUrlBytes];  // NUL-terminated valkey://HOST:PORT/QUEUE (no password)
  std::uint32_t durability;
  std::uint32_t on_full;
  std::uint32_t log_cells;           // power of two, 0 without a mirror
  std::uint32_t sync_timeout_ms;
  std::uint64_t log_off;
  std::uint32_t recovery_ms;         // the recovery bound (QueueOptions::recovery_ms)
  std::uint32_t reserved1;

  // Shared words, each on its own line: different processes write them.
  alignas(kCacheLine) std::atomic<std::uint64_t> mint_last;    // last snowflake minted
  alignas(kCacheLine) std::atomic<std::uint64_t> ring_head;    // next ring position to serve (only moves forward)
  alignas(kCacheLine) std::atomic<std::uint64_t> ring_tail;    // hint: at or before the first unwritten position
  alignas(kCacheLine) std::atomic<std::uint32_t> wake_seq;     // futex word
  std::atomic<std::uint32_t> waiters;                          // consumers parked or about to park
  // CLOCK_MONOTONIC ms: no consumer parked in claim_wait sleeps past it (each
  // raises it before its last look, to past the end of the sleep it is
  // about to take). Once it has passed, a count left in waiters is of
  // consumers killed while parked, and notify wakes nobody (design.md,
  // "Blocking claims").
  std::atomic<std::uint64_t> park_until;
  // The same three words for producers parked in enqueue_wait until a slot
  // is freed (design.md, "Blocking enqueues"). On a line of their own: every
  // free reads room_waiters, and only a producer that parks writes it.
  alignas(kCacheLine) std::atomic<std::uint32_t> room_seq;     // futex word: +1 a free while room_waiters is not 0
  std::atomic<std::uint32_t> room_waiters;                     // producers parked or about to park
  std::atomic<std::uint64_t> room_park_until;                  // no producer sleeps past it (CLOCK_MONOTONIC ms)
  std::atomic<std::uint32_t> room_want;                        // the room_seq at which the next wake is made
  // Producers parked for a lane (lanes_full), counted in room_waiters too
  // (so that a free's one load of room_waiters stays the only cost to the
  // frees while nobody is parked), and here. Woken one at a time when a
  // lane may have become idle (a free or a park step that left it empty)
  // or a lane record was given back (design.md, "Blocking enqueues").
  std::atomic<std::uint32_t> lane_seq;                         // futex word: +1 a wake
  std::atomic<std::uint32_t> lane_waiters;                     // producers parked for a lane or about to park
  std::atomic<std::uint64_t> lane_park_until;                  // no producer parked for a lane sleeps past it
  alignas(kCacheLine) std::atomic<std::uint32_t> queue_paused;
  // Thread records in use are all below this (it only rises): what a scan
  // of the records reads. Raised before a record is taken; the sweep heals
  // a scribbled value (design.md, "Thread records").
  std::atomic<std::uint32_t> threads_used;
  std::atomic<std::int64_t> clock_offset_ms;                   // advance_clock()
  alignas(kCacheLine) std::atomic<std::uint64_t> threads_heal; // where the sweep next looks above threads_used
  std::atomic<std::uint64_t> lanes_reclaimed;                  // lanes given back by idle groups, ever
  std::atomic<std::uint64_t> lane_cursor;                      // where the next lane allocation looks first
  SweepShared sweep;
  CorruptionStats corruption;
  CounterBlock retired;
  RecoveryStats recovery;
  MirrorShared mirror;
  // The waits of the claims of lanes given back and taken again since: the
  // queue-wide histogram is these plus every lane record's own.
  WaitBuckets retired_waits;
};

}  // namespace fairlane::detail
