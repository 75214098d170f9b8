// The shared-memory layout of a fairlane segment. Not for direct inclusion
// by users: queue.hpp is the public interface; this file is installed so that
// tools can read a segment, and it is the contract between processes.
//
// Rules for every struct here: fixed-width fields only, no pointers (indexes
// and offsets instead), trivially copyable, cache-line padding between words
// that different processes write. A change to anything here bumps
// kLayoutVersion.
//
//   [Header][slot words: u64 x jobs][slots: SlotRecord+payload x jobs]
//   [lanes: LaneRecord x lane_buckets][ring: u64 x ring_cells]
//   [index: IndexBucket x index_buckets][procs: ProcRecord x kMaxProcs]
//   [waits: WaitBuckets x lane_buckets][log: LogCell x log_cells (mirrored only)]
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace fairlane::detail {

inline constexpr std::uint64_t kMagic = 0x314E4C5249414646ULL;  // "FFAIRLN1" little-endian
inline constexpr std::uint32_t kLayoutVersion = 3;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint32_t kMaxProcs = 256;
inline constexpr std::uint32_t kMaxJobs = (1U << 26) - 1;     // fits the lane word's pending field
inline constexpr std::uint32_t kMaxLanes = (1U << 22);         // ring cells hold lane+1 in 24 bits
inline constexpr std::uint32_t kMaxPayload = 1U << 20;
inline constexpr std::uint32_t kErrorBytes = 56;
inline constexpr std::uint32_t kIndexWays = 8;                 // entries per index bucket
inline constexpr std::uint32_t kMirrorUrlBytes = 160;

template <class T>
constexpr void check_shared() {
  static_assert(std::is_trivially_copyable_v<T> || std::is_standard_layout_v<T>);
  static_assert(alignof(T) <= kCacheLine);
}
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// ---------------------------------------------------------------------------
// Slot word: the truth about one job slot, changed only by CAS.
//
//   bits  0..2   state      (SlotState)
//   bits  3..7   gen        reuse count mod 32: a slot freed and re-admitted
//                           differs from its old self even at equal attempt
//   bits  8..23  attempt    fencing token: 0 until first claimed
//   bits 24..63  when_ms    lease deadline (leased) or due time (scheduled),
//                           segment clock in ms; 0 otherwise
enum class SlotState : std::uint8_t {
  free = 0,       // on the free list (or about to be pushed there)
  admitting = 1,  // popped by an enqueuer, not yet visible
  pending = 2,    // in its lane
  leased = 3,     // claimed; when_ms is the deadline
  scheduled = 4,  // delayed or backing off; when_ms is the due time
  dead = 5,       // dead-lettered
  freeing = 6,    // owned by a complete, drain or purge (when_ms 0), or a fail (kFailing)
};
struct SlotWord {
  static constexpr std::uint64_t kStateBits = 3, kGenBits = 5, kAttemptBits = 16, kWhenBits = 40;
  // when_ms of a freeing slot owned by fail(): the job goes on (retry or
  // dead letter), so a repair after its death puts it back to pending
  // rather than freeing it as it does a completion's.
  static constexpr std::uint64_t kFailing = 1;
  static_assert(kStateBits + kGenBits + kAttemptBits + kWhenBits == 64);
  static constexpr std::uint32_t kMaxAttempt = (1U << kAttemptBits) - 1;

  static constexpr std::uint64_t pack(SlotState s, std::uint32_t gen, std::uint32_t attempt, std::uint64_t when) noexcept {
    return std::uint64_t(s) | (std::uint64_t(gen & 31) << 3) | (std::uint64_t(attempt & kMaxAttempt) << 8) |
           ((when & ((1ULL << kWhenBits) - 1)) << 24);
  }
  static constexpr SlotState state(std::uint64_t w) noexcept { return SlotState(w & 7); }
  static constexpr std::uint32_t gen(std::uint64_t w) noexcept { return std::uint32_t((w >> 3) & 31); }
  static constexpr std::uint32_t attempt(std::uint64_t w) noexcept { return std::uint32_t((w >> 8) & kMaxAttempt); }
  static constexpr std::uint64_t when(std::uint64_t w) noexcept { return w >> 24; }
};
static_assert(SlotWord::state(SlotWord::pack(SlotState::leased, 7, 65535, (1ULL << 40) - 1)) == SlotState::leased);
static_assert(SlotWord::attempt(SlotWord::pack(SlotState::dead, 31, 65535, 5)) == 65535);
static_assert(SlotWord::when(SlotWord::pack(SlotState::dead, 31, 65535, 12345)) == 12345);

// One job slot; the payload follows it (slot_bytes apart). Fields other than
// `next` and `snowflake` are written by the one process that owns the slot in
// its current state (the enqueuer while admitting, the lane's server while
// it sits in the lane structure, the lease holder) and published by the
// release of the slot word or the lane word.
struct alignas(kCacheLine) SlotRecord {
  std::atomic<std::uint64_t> snowflake;  // job id without its namespace; read by index probes
  std::atomic<std::uint32_t> next;       // free-list / intake / run link: slot+1, 0 = none
  std::uint32_t lane;                    // lane index
  std::uint32_t payload_len;
  std::uint32_t left, right, rank;       // lane heap links (slot+1), owned by the lane's server
  std::uint64_t ready_us;                // segment clock (us) when it last became pending
  std::uint32_t error_len;
  std::uint32_t holder;                  // process record index + 1 of the lease holder, 0 = none
  char error[kErrorBytes];               // last error given to fail()
};
static_assert(sizeof(SlotRecord) == 128);

// ---------------------------------------------------------------------------
// Lane word: everything that decides ring membership, in one CAS.
//
//   bits  0..25  pending   jobs in the lane structure (intake + run + heap)
//   bits 26..42  active    leased jobs of this lane
//   bits 43..59  limit     concurrency ceiling, 0 = none
//   bit  60      paused
//   bit  61      ringed    a ring token for this lane exists: in the ring, in
//                          the hold slot, or held by the claimer serving it
//   bit  62      busy      the lane structure is owned (claimer or drain)
//   bit  63      spare
struct LaneWord {
  static constexpr std::uint64_t kPendingBits = 26, kActiveBits = 17, kLimitBits = 17;
  static constexpr std::uint64_t kPendingMask = (1ULL << kPendingBits) - 1;
  static constexpr std::uint64_t kActiveMask = (1ULL << kActiveBits) - 1;
  static constexpr std::uint64_t kLimitMask = (1ULL << kLimitBits) - 1;
  static constexpr std::uint64_t kPaused = 1ULL << 60, kRinged = 1ULL << 61, kBusy = 1ULL << 62;
  static constexpr int kActiveShift = 26, kLimitShift = 43;

  static constexpr std::uint64_t pending(std::uint64_t w) noexcept { return w & kPendingMask; }
  static constexpr std::uint64_t active(std::uint64_t w) noexcept { return (w >> kActiveShift) & kActiveMask; }
  static constexpr std::uint64_t limit(std::uint64_t w) noexcept { return (w >> kLimitShift) & kLimitMask; }
  static constexpr std::uint64_t with_pending(std::uint64_t w, std::uint64_t v) noexcept { return (w & ~kPendingMask) | (v & kPendingMask); }
  static constexpr std::uint64_t with_active(std::uint64_t w, std::uint64_t v) noexcept {
    return (w & ~(kActiveMask << kActiveShift)) | ((v & kActiveMask) << kActiveShift);
  }
  static constexpr std::uint64_t with_limit(std::uint64_t w, std::uint64_t v) noexcept {
    return (w & ~(kLimitMask << kLimitShift)) | ((v & kLimitMask) << kLimitShift);
  }
  // Free headroom under the ceiling; no limit means the field's maximum.
  static constexpr std::uint64_t headroom(std::uint64_t w) noexcept {
    std::uint64_t cap = limit(w) ? limit(w) : kActiveMask;
    return active(w) >= cap ? 0 : cap - active(w);
  }
  static constexpr bool serviceable(std::uint64_t w) noexcept {
    return pending(w) > 0 && !(w & kPaused) && headroom(w) > 0;
  }
};
static_assert(LaneWord::kLimitShift + LaneWord::kLimitBits == 60);
static_assert(LaneWord::pending(LaneWord::with_pending(~0ULL, 5)) == 5);
static_assert(LaneWord::active(LaneWord::with_active(0, 131071)) == 131071);
static_assert(LaneWord::limit(LaneWord::with_limit(LaneWord::kPaused, 3)) == 3);

// A lane, at its bucket of the lane hash table (lane index == bucket).
// key_a and key_b are each set once by CAS from 0 and never cleared, so a
// probe never waits for a half-written key: a bucket whose key_b is still 0
// is completed by the next creator with the same key_a (see lane_table.hpp).
struct alignas(kCacheLine) LaneRecord {
  std::atomic<std::uint64_t> key_a;   // 1<<63 | namespace code; 0 = free bucket
  std::atomic<std::uint64_t> key_b;   // 1<<63 | snowflake; 0 = not yet set
  std::atomic<std::uint64_t> word;    // LaneWord
  std::atomic<std::uint64_t> served;  // claims served, ever
  std::atomic<std::uint32_t> intake;  // push-only stack of newly pending slots (slot+1)
  std::atomic<std::uint32_t> weight;  // 0 means 1
  // Owned by the holder of the busy bit:
  std::uint32_t run_head, run_tail;   // ascending run of slots (slot+1)
  std::uint32_t heap_root;            // leftist heap of out-of-order slots (slot+1)
  std::atomic<std::uint32_t> owed;    // turns lost to a busy structure, repaid at its next ring draw
  std::uint32_t reserved[2];
};
static_assert(sizeof(LaneRecord) == 64);

// ---------------------------------------------------------------------------
// Ring cell: a bounded MPMC ring of lane tokens where each step is one CAS on
// a cell or an index, so a process that dies between steps leaves nothing a
// survivor waits on (indexes are advanced by whoever sees them lag).
//
//   bits  0..23  lane+1 (0 = empty)
//   bits 24..63  position mod 2^40 at which this cell is next usable
struct RingCell {
  static constexpr std::uint64_t kPosBits = 40, kValueBits = 24;
  static constexpr std::uint64_t kPosMask = (1ULL << kPosBits) - 1;
  static constexpr std::uint64_t kValueMask = (1ULL << kValueBits) - 1;
  static constexpr std::uint64_t pack(std::uint64_t pos, std::uint64_t value) noexcept {
    return ((pos & kPosMask) << kValueBits) | (value & kValueMask);
  }
  static constexpr std::uint64_t pos(std::uint64_t c) noexcept { return c >> kValueBits; }
  static constexpr std::uint64_t value(std::uint64_t c) noexcept { return c & kValueMask; }
};

// Id index entry: a job id -> its slot, two-choice hashing, 8 ways a bucket.
//
//   bits  0..31  slot+1 (0 = empty entry)
//   bit  32      committed (a tentative entry is still deciding a race)
//   bits 33..63  fingerprint of the id
struct IndexEntry {
  static constexpr std::uint64_t kCommitted = 1ULL << 32;
  static constexpr std::uint64_t pack(std::uint32_t fp, std::uint32_t slot, bool committed) noexcept {
    return (std::uint64_t(fp & 0x7FFFFFFF) << 33) | (committed ? kCommitted : 0) | (std::uint64_t(slot) + 1);
  }
  static constexpr std::uint32_t slot(std::uint64_t e) noexcept { return std::uint32_t(e & 0xFFFFFFFF) - 1; }
  static constexpr std::uint32_t fp(std::uint64_t e) noexcept { return std::uint32_t(e >> 33); }
  static constexpr bool committed(std::uint64_t e) noexcept { return e & kCommitted; }
};
struct alignas(kCacheLine) IndexBucket {
  std::atomic<std::uint64_t> e[kIndexWays];
};
static_assert(sizeof(IndexBucket) == 64);

// ---------------------------------------------------------------------------
// Counters: each attached process counts in its own record (no shared cache
// line on the hot path); a detaching process folds its counts into the
// header's `retired` block.
struct alignas(kCacheLine) CounterBlock {
  std::atomic<std::uint64_t> enqueued, duplicates, claimed, completed, retried, dead, expired, promoted, drained;
};

// One attached process (one Queue handle).
//
//   owner: pid (bits 0..31) | 1<<32 while attached | 1<<33 once start_time
//          is written (never judged dead before that); 0 = free record
//
//   in_op: how many of its threads are inside an operation that changes the
//          segment (see "The gate" in docs/design.md section 7). A dead
//          process whose in_op is not 0 died mid-operation: the structures
//          it was changing are repaired from the slots before anyone goes on.
struct alignas(kCacheLine) ProcRecord {
  std::atomic<std::uint64_t> owner;
  std::uint64_t start_time;       // /proc/<pid>/stat starttime: pid + start time, never a bare pid
  std::uint64_t attached_unix_ms;
  std::atomic<std::uint64_t> in_op;
  std::uint64_t reserved[4];
  CounterBlock counters;
};

// Enqueue-to-claim wait histogram of one lane: bucket i counts claims that
// waited [2^i, 2^(i+1)) us. Written by the lane's server (relaxed: statistics).
inline constexpr std::uint32_t kWaitBuckets = 32;
struct alignas(kCacheLine) WaitBuckets {
  std::atomic<std::uint64_t> b[kWaitBuckets];
};
static_assert(sizeof(WaitBuckets) == 256);

// Hold slot: a lane token owed more claims this turn (weights > 1).
//   bits 0..31 lane+1 (0 = empty), bits 32..63 claims left in the turn

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
enum class LogKind : std::uint8_t { job = 1, lane = 2, queue = 3 };
struct LogCell {
  std::atomic<std::uint64_t> stamp;
  std::atomic<std::uint64_t> body;
  std::atomic<std::uint64_t> ms;
  std::uint64_t reserved;
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

struct alignas(kCacheLine) MirrorShared {
  alignas(kCacheLine) std::atomic<std::uint64_t> head;   // next sequence number to reserve
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;   // next sequence the mirror reads
  std::atomic<std::uint32_t> bell;                       // futex: the mirror parks here
  std::atomic<std::uint32_t> parked;                     // 1 while the mirror is parked
  std::atomic<std::uint32_t> proc;                       // process record + 1 of the running mirror
  std::atomic<std::uint32_t> state;                      // MirrorState
  alignas(kCacheLine) std::atomic<std::uint64_t> acked;  // records below this are in Valkey
  std::atomic<std::uint32_t> ack_bell;                   // futex: sync enqueuers park here
  std::atomic<std::uint32_t> ack_waiters;
  std::atomic<std::uint64_t> acked_unix_ms;              // when `acked` last moved
  std::atomic<std::uint64_t> inflight_ms;                // segment ms of the oldest record read but not acked (0: none)
  std::atomic<std::uint64_t> dropped_unix_ms;            // when the log last overflowed
  std::atomic<std::uint64_t> lost;                       // records not logged (full log, holes), ever
  std::atomic<std::uint64_t> resyncs;                    // full resynchronisations, ever
};

// What recovery (the sweep returning leases of dead or late holders) last did.
struct alignas(kCacheLine) RecoveryStats {
  std::atomic<std::uint64_t> runs;          // sweeps that returned at least one lease, ever
  std::atomic<std::uint64_t> jobs;          // leases returned by sweeps, ever
  std::atomic<std::uint64_t> last_unix_ms;  // when the last such sweep ran
  std::atomic<std::uint64_t> last_jobs;     // leases it returned
  std::atomic<std::uint64_t> last_pid;      // its holder, if one dead process held them all (else 0)
  std::atomic<std::uint64_t> last_us;       // how long that sweep took
  std::atomic<std::uint64_t> checked_ms;    // segment ms when a sweep last judged the holders' liveness
  std::atomic<std::uint64_t> ops_checked_ms;  // segment ms when someone last looked for processes dead mid-operation
  // Online repairs after a process died inside an operation (the gate).
  std::atomic<std::uint64_t> repairs;            // completed, ever
  std::atomic<std::uint64_t> repairs_abandoned;  // gave up waiting for a live process to leave its operation
  std::atomic<std::uint64_t> repair_unix_ms;     // when the last one finished
  std::atomic<std::uint64_t> repair_pid;         // the (first) dead process it repaired after
  std::atomic<std::uint64_t> repair_us;          // how long the gate was closed for it
  std::atomic<std::uint64_t> repair_worst_us;    // the longest the gate was ever closed
  std::atomic<std::uint64_t> repair_violations;  // what fsck found before the last one
  std::atomic<std::uint64_t> repair_blocker_pid; // the live process that made the last abandoned one give up
};

struct alignas(kCacheLine) Header {
  // Written once by the creator before `magic` is published; read-only after.
  std::atomic<std::uint64_t> magic;  // kMagic once the segment is ready; written last
  std::uint32_t layout_version;
  std::uint32_t header_bytes;
  std::uint64_t segment_bytes;
  std::uint32_t job_capacity;
  std::uint32_t lane_capacity;       // groups admitted at most
  std::uint32_t lane_buckets;        // power of two
  std::uint32_t payload_bytes;
  std::uint32_t slot_bytes;          // sizeof(SlotRecord) + payload, rounded
  std::uint32_t ring_cells;          // power of two > lane_capacity
  std::uint32_t index_buckets;       // power of two
  std::uint32_t default_lane;
  std::uint64_t words_off, slots_off, lanes_off, ring_off, index_off, procs_off, waits_off;
  std::uint64_t hash_seed;
  std::uint64_t created_unix_ms;
  char job_kind[4];
  std::uint16_t node;
  std::uint16_t reserved0;
  std::uint32_t creator_pid;
  // Mirror, fixed at creation: durability 0 none, 1 async, 2 sync; on_full
  // 0 refuse new work, 1 drop the mirror (until a resync).
  char mirror_url[kMirrorUrlBytes];  // NUL-terminated valkey://HOST:PORT/QUEUE
  std::uint32_t durability;
  std::uint32_t on_full;
  std::uint32_t log_cells;           // power of two, 0 without a mirror
  std::uint32_t sync_timeout_ms;
  std::uint64_t log_off;
  std::uint32_t recovery_ms;         // the recovery bound (QueueOptions::recovery_ms)
  std::uint32_t reserved1;

  // Shared words, each on its own line: different processes write them.
  alignas(kCacheLine) std::atomic<std::uint64_t> mint_last;    // last snowflake minted
  alignas(kCacheLine) std::atomic<std::uint64_t> free_head;    // tag (32) | slot+1 (32)
  alignas(kCacheLine) std::atomic<std::uint64_t> ring_head;    // next position to pop
  alignas(kCacheLine) std::atomic<std::uint64_t> ring_tail;    // next position to push
  alignas(kCacheLine) std::atomic<std::uint64_t> hold;         // see "Hold slot"
  alignas(kCacheLine) std::atomic<std::uint32_t> wake_seq;     // futex word
  std::atomic<std::uint32_t> waiters;                          // consumers parked or about to park
  alignas(kCacheLine) std::atomic<std::uint64_t> next_due;     // earliest lease deadline / due time
  std::atomic<std::uint64_t> last_sweep_ms;
  alignas(kCacheLine) std::atomic<std::uint32_t> queue_paused;
  std::atomic<std::uint32_t> lanes_used;
  std::atomic<std::int64_t> clock_offset_ms;                   // advance_clock()
  CounterBlock retired;
  RecoveryStats recovery;
  MirrorShared mirror;
  // The gate (futex word): generation (bits 9..31) | holder (bits 0..8).
  // Holder 0: open. Otherwise the process record index + 1 of the process
  // repairing the segment, which waits until no live process is inside an
  // operation; operations do not start while it is closed. Every close
  // takes a new generation, so a stale takeover CAS cannot succeed.
  alignas(kCacheLine) std::atomic<std::uint32_t> gate;
  std::atomic<std::uint32_t> gate_backoff;  // repairs abandoned in a row (they back off)
};

}  // namespace fairlane::detail
