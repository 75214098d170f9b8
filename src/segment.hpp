// A mapped segment: where each table lives, plus this process's attachment.
// Creating, opening, sizing and removing use Boost.Interprocess; nothing of
// Boost is used after the mapping exists.
//
// Every index read from the segment is checked against the geometry cached
// here (taken from the header once, at open, after the header was checked)
// before it is used: a scribbled segment must never make this process read
// outside its tables (docs/design.md, "Hostile bytes").
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "fairlane/detail/layout.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/result.hpp"

namespace fairlane::detail {

struct Geometry {
  std::uint32_t jobs, lanes, dir_buckets, payload_bytes, slot_bytes, ring_cells, index_buckets, procs, threads,
      log_cells, slot_bits;
  std::uint64_t words_off, tags_off, hints_off, slots_off, lanes_off, dir_off, ring_off, index_off, procs_off,
      threads_off, waits_off, log_off, total;
};
// lanes: groups live at once (the default lane comes on top).
Geometry geometry_for(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes, std::uint32_t procs,
                      std::uint32_t log_cells = 0) noexcept;

inline constexpr std::uint32_t kNoSlot = ~0U;
inline constexpr std::uint32_t kNoLane = ~0U;

// The last handle the calling thread used, and its thread record there
// (Segment::thread's fast path, inline: every operation asks for it).
// Handle ids are never reused, so a closed handle's entry never matches.
struct ThreadCache {
  std::uint64_t handle = 0;
  ThreadRecord* rec = nullptr;
};
inline thread_local ThreadCache t_thread_cache;

// A file descriptor closed with its owner.
struct OwnedFd {
  int fd = -1;
  OwnedFd() = default;
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
};

struct Segment {
  std::string name;
  boost::interprocess::mapped_region region;
  // The segment's file, kept open for the liveness locks (kOwnerLocked):
  // an open of its own, apart from the one the mapping holds, so that a
  // child forked without exec can let go of it (segment.cpp:
  // open_lock_file). A member, so it closes after the destructor's body has
  // handed this handle's process record back.
  OwnedFd file;
  std::string shm_name;                        // "/" + name, for shm_open (kept for the fork handler)
  dev_t file_dev = 0;                          // the mapped file's device and inode, read at open
  ino_t file_ino = 0;
  bool file_known = false;
  // getpid() when this handle took its process record. A child forked
  // without exec has a copy of the handle, not the record (the fork
  // handler sets -1): its close leaves the record and its lock to the
  // parent.
  pid_t attach_pid = 0;
  // Set in a child forked without exec, on a copy of a member's handle:
  // kCopyPending until its first call that writes makes it the child's own
  // attachment (adopt_copy: back to kCopyOwn), or finds no process record
  // free (kCopyUnattached: me stays its parent's record, used only to end
  // the leases it was handed, see writer()). An unattached copy tries again
  // at a call that writes once copy_retry_ms (the segment clock) has passed:
  // at most once every kCopyRetryMs.
  // No thread record is taken while it is not kCopyOwn.
  static constexpr std::uint8_t kCopyOwn = 0, kCopyPending = 1, kCopyUnattached = 2;
  static constexpr std::uint64_t kCopyRetryMs = 1000;
  std::atomic<std::uint8_t> copy_state{kCopyOwn};
  std::atomic<std::uint64_t> copy_retry_ms{0};
  Header* h = nullptr;
  Word128* words = nullptr;                    // slot words
  std::atomic<std::uint8_t>* tags = nullptr;   // admission tags, one per slot
  std::atomic<std::uint32_t>* hints = nullptr;  // free hints, one per kHintBlock slots
  std::atomic<std::uint32_t>* group_hints = nullptr;  // one per kHintGroup blocks, after them
  unsigned char* slots = nullptr;
  LaneRecord* lanes = nullptr;
  DirBucket* dir = nullptr;
  std::atomic<std::uint64_t>* ring = nullptr;
  IndexBucket* index = nullptr;
  ProcRecord* procs = nullptr;
  ThreadRecord* threads = nullptr;
  WaitBuckets* waits = nullptr;                // per lane
  LogCell* log = nullptr;                      // transition log (mirrored segments only)
  std::uint64_t log_mask = 0;
  ProcRecord* me = nullptr;                    // this handle's attachment (null for an observer)
  std::uint32_t me_index = 0;                  // its index in procs
  bool observer = false;
  std::uint64_t handle_id = 0;                 // process-unique: keys this handle's thread records

  // Cached from the header at open (checked there): the bounds every read uses.
  std::uint32_t jobs = 0, lane_count = 0, slot_bytes = 0, payload_bytes = 0, slot_bits = 1;
  std::uint64_t slot_mask = 1, token_ctr_mask = ~0ULL >> 1;  // a token's slot part, and the ctr bits it keeps
  std::uint32_t proc_count = 0, thread_count = 0;
  std::uint32_t sweep_end = 0;                 // proc_count + jobs: the positions of a sweep pass
  std::uint64_t dir_mask = 0, ring_mask = 0, index_buckets = 0, seed = 0;
  std::uint32_t recovery_ms = 500;
  std::uint32_t kind_code = 0;                 // the job namespace as a number (lane keys)
  char kind[3] = {};
  std::uint64_t kind_word = 0;                 // the 3 letters as a word's low bytes, in memory order (id_words)

  SlotRecord& slot(std::uint32_t i) const noexcept {
    return *reinterpret_cast<SlotRecord*>(slots + std::uint64_t(i) * slot_bytes);
  }
  unsigned char* payload(std::uint32_t i) const noexcept { return slots + std::uint64_t(i) * slot_bytes + sizeof(SlotRecord); }
  // The same payload from its slot's record (payload(i) for r = slot(i)):
  // the caller has the record's address, which payload(i) would work out
  // again (after any acquire load, with the segment's fields loaded again).
  static unsigned char* payload_of(SlotRecord& r) noexcept { return reinterpret_cast<unsigned char*>(&r) + sizeof(SlotRecord); }
  static const unsigned char* payload_of(const SlotRecord& r) noexcept {
    return reinterpret_cast<const unsigned char*>(&r) + sizeof(SlotRecord);
  }

  // This calling thread's record (taken on its first call on this handle),
  // or null if every thread record is in use (the caller then counts in the
  // process record and protects its steps with the fallback intent).
  ThreadRecord* thread() noexcept {
    if (!me_now()) return nullptr;
    if (t_thread_cache.handle == handle_id) return t_thread_cache.rec;
    return thread_slow();
  }
  // The same if this thread has looked its record up already, else null
  // (without taking one).
  ThreadRecord* thread_if_known() const noexcept {
    return me_now() && t_thread_cache.handle == handle_id ? t_thread_cache.rec : nullptr;
  }
  // me, read where another thread of this process may be writing it: an
  // adoption (adopt_copy) sets it while a complete, which makes none, reads
  // it on the way to either record. (The builtin, a plain load on x86.)
  ProcRecord* me_now() const noexcept { return __atomic_load_n(&me, __ATOMIC_RELAXED); }
  ThreadRecord* thread_slow() noexcept;  // the first call of a thread on this handle, or after another handle
  // How many thread records a scan reads: every record a thread has taken
  // is below it (the header's high-water mark, bounded by the table).
  std::uint32_t threads_used() const noexcept {
    return std::min(h->threads_used.load(std::memory_order_acquire), thread_count);
  }
  CounterBlock& counters() noexcept;

  // The thread records this handle's threads have taken (each once), so
  // that closing it reads those and not the whole table: with room for
  // 4,095 processes (65,520 records) a close that read the table took 21 ms
  // (BM_open_use_close; 0.24-0.32 ms now). Written on a thread's first
  // call, under the process's handle-list mutex (segment.cpp), and read at
  // close. Each with the owner value it was taken with: a record is given
  // back only from that value.
  struct Taken {
    ThreadRecord* rec;
    std::uint64_t owner;
  };
  std::vector<Taken> taken;

  ~Segment();
};

// The mapped segment behind a Queue, for library code that reads its tables
// (the mirror, restore).
struct QueueAccess {
  static Segment& segment(Queue& q) noexcept { return *q.seg_; }
  static const Segment& segment(const Queue& q) noexcept { return *q.seg_; }
};

Result<std::unique_ptr<Segment>> create_segment(std::string_view name, const QueueOptions& o);
Result<std::unique_ptr<Segment>> open_segment(std::string_view name, bool observer = false);
Status remove_segment(std::string_view name);
// Queue::still_named: the name's file (a stat under /dev/shm) is the mapped
// one (file_dev, file_ino as read at open). True when either is unknown.
bool still_named(const Segment& s) noexcept;

// Liveness of an attached process: pid and its start time, never a bare pid.
std::uint64_t process_start_time(int pid) noexcept;
bool process_alive(int pid, std::uint64_t start_time) noexcept;

// Liveness of the owner of process record i (its owner word `owner` and
// start time as read). The record's liveness lock is looked at first: held,
// the owner is alive, whatever the word says (the kernel drops the lock when
// its holder dies, whatever PID namespace either process is in). A word that
// says locked (kOwnerLocked) is judged by the lock alone: free, the owner is
// dead. Others by pid and start time (process_alive), which a process in
// another PID namespace cannot be judged by. Every doubt counts as alive.
// The caller's own record is alive.
bool owner_alive(const Segment& s, std::uint32_t i, std::uint64_t owner, std::uint64_t start_time) noexcept;
// alive, stopped (SIGSTOP, traced: it holds what it holds) or dead, as
// owner_alive; stopped only when /proc shows it under the same pid and
// start time.
ProcessState owner_state(const Segment& s, std::uint32_t i, std::uint64_t owner, std::uint64_t start_time) noexcept;
// /proc/PID/comm, empty when it cannot be read.
std::string process_name(int pid);

// A thread record's owner word: its process record index + 1 (bits 0..15),
// in use (bit 16), being given back by its owner (bit 17: still the
// owner's), and that record's incarnation mod 256 (bits 24..31), so that
// the records of a process that died are known as such even once its
// process record has a new owner.
struct ThreadOwner {
  static constexpr std::uint64_t kInUse = 1ULL << 16;
  static constexpr std::uint64_t kReleasing = 1ULL << 17;
  static constexpr std::uint64_t kBits = 0xFF03FFFFULL;  // every bit a valid owner word may have
  static constexpr std::uint64_t make(std::uint32_t proc_index, std::uint64_t inc) noexcept {
    return std::uint64_t(proc_index + 1) | kInUse | ((inc & 0xFF) << 24);
  }
  static constexpr std::uint32_t proc1(std::uint64_t o) noexcept { return std::uint32_t(o & 0xFFFF); }
  static constexpr std::uint32_t inc(std::uint64_t o) noexcept { return std::uint32_t((o >> 24) & 0xFF); }
};

// A copy of a handle in a child forked without exec becomes an attachment
// of the child (a process record, liveness lock and thread records of its
// own) before the first call through it that writes: as the parent's, a
// child that died or stopped kept its parent's name on what it held and
// was in the middle of, and the parent's threads waited on it for the
// fallback intent. If no process record is free (none, or their locks busy
// for a second at the first look; busy at all at a later one) the copy
// stays unattached (kCopyUnattached) and makes no
// step of its own, until a call that writes, at least kCopyRetryMs after
// the last look, finds one free (without waiting on busy locks: a write
// call does not sleep for a record); then it is the child's own attachment
// from that call on. A step it made in its live parent's name would be one
// nobody takes over if the child died in its middle (before 2026-12-05
// such copies went on as their parents' and did: a claim killed in its take
// left the parent record's fallback intent held for good, and a release
// killed in its move lost the job while the parent lived).
//
// writer(): may this handle make steps (admissions, claims, moves, sweeps,
// lane changes)? Adopts a copy first. False for an observer and for an
// unattached copy: those calls refuse (read_only statuses, or do nothing).
// What an unattached copy still does is end the leases it was handed, as
// its parent's (a child forked to work one job its parent claimed), by
// exits that leave nothing in anyone's name: complete, extend, and fail,
// which parks the job even for a retry due now (the sweep's promotion, a
// member's, moves it back). release, whose move back into the lane would
// be in the copy's name, refuses (read_only).
// The inline one is in admit and the claims (a load and a branch when there
// is nothing to do), the call in the others. Not complete: it adopts
// nothing (a child forked to complete one job takes no process record and
// its lock for that).
[[gnu::cold]] bool adopt_copy(Segment& s) noexcept;
inline bool writer(Segment& s) noexcept {
  if (s.copy_state.load(std::memory_order_acquire) != Segment::kCopyOwn) [[unlikely]]
    return adopt_copy(s);
  return s.me != nullptr;
}
[[gnu::noinline]] bool writer_cold(Segment& s) noexcept;

// Raises the header's threads_used to at least `to` (never lowers it).
void raise_threads_used(Header& h, std::uint32_t to) noexcept;

// Is the holder of a step in flight (an admission, a move, a lane's
// creation: not a lease) gone? As holder_dead, and also when its process
// record is free or has another incarnation: a process detaches only between
// its operations, so one whose record moved on while it held a step died.
int holder_gone(Segment& s, std::uint32_t holder, std::uint64_t now_ms) noexcept;

// Is the process a thread record belongs to gone? Its pid (or 1 when it
// cannot be named) if it died, 0 if it is alive (or stopped): a record of
// another incarnation of its process record is gone (a process that detaches
// releases its thread records first).
int thread_owner_dead(Segment& s, std::uint64_t owner, std::uint64_t now_ms) noexcept;

// The pid of the owner of process record p if that owner is dead, else 0.
// Only a record whose owner has stamped its start time is judged (never
// one being attached), and only if it did not change hands while read; a
// free record is not judged.
int dead_owner_pid(const Segment& s, std::uint32_t i) noexcept;

// Is process record i held by another handle of this process (on the same
// segment file)? Not a pid compare: a process of another PID namespace can
// have our pid.
bool held_by_this_process(const Segment& s, std::uint32_t i) noexcept;

// Is process record `holder1` (index + 1) dead, judged at most once per
// recovery_ms / 2 for every process of the segment (ProcRecord::seen)?
// Returns its pid when dead, else 0. Never judges the caller's own record.
// Under a JudgeBudget that is spent, a process with no fresh verdict counts
// alive (no system call): its recovery waits for a judge, and no live
// process is ever taken for dead on an old verdict.
int holder_dead(Segment& s, std::uint32_t holder1, std::uint64_t now_ms) noexcept;

// The threads of process record p's owner parked in claim_wait
// (ProcRecord::parked) and in enqueue_wait (ProcRecord::room_parked, and
// lane_parked for those parked for a lane), and for the mirror (ack_parked:
// a sync enqueue's acknowledgement, or room in the log), taken out of
// Header::waiters, room_waiters, lane_waiters and mirror.ack_waiters, for
// an owner judged dead
// as incarnation `inc` (the record's incarnation read before the verdict).
// Nothing if the record has had another owner since: that owner's attach
// took them out (take_parked).
void drop_parked(Segment& s, ProcRecord& p, std::uint64_t inc) noexcept;

// At an attach that took record p as incarnation `inc`: whatever its last
// owner left parked is taken out of the header's counts, and the record's
// counts start again at 0 under `inc`.
void take_parked(Segment& s, ProcRecord& p, std::uint64_t inc) noexcept;

// Takes n parked threads out of a header count (Header::waiters,
// room_waiters, lane_waiters), never below 0 (a scribbled count takes no more
// than there is).
void uncount_parked(std::atomic<std::uint32_t>& count, std::uint64_t n) noexcept;

// ProcRecord::seen. A verdict names the incarnation it judged: a judge that
// read the record's owner, then found it dead while another process took
// the record (attach bumps the incarnation and zeroes `seen`), stores a
// verdict that the new owner's holders do not take for theirs. (Until
// 2026-12-04 it did not: the new, live owner was taken for dead for
// recovery_ms / 2, its leases expired and its intents settled.)
//
// The incarnation is named by its low 20 bits, the time by 42 (ms on the
// segment clock, CLOCK_MONOTONIC plus advance_clock's offset: 139 years of
// uptime; an offset past that, which only a test could give, makes every
// verdict stale, and each is judged again). Until 2026-12-06 it was 8 bits: a
// judge stopped between its look at a dead owner and the store of its
// verdict, while the record went through 256 attachments within
// recovery_ms / 2, stored "dead" for a live owner of the same 8 bits,
// whose leases a sweep then took back and whose parked consumers it took
// out of waiters (found in review: `AStaleVerdictOf256IncarnationsAgo*`).
// 2^20 attachments within recovery_ms / 2 (at most 30 s) would take
// 1,048,576 attaches, each a system call or more, in that time.
struct Verdict {
  static constexpr unsigned kIncBits = 20;
  static constexpr std::uint64_t kIncMask = (1ULL << kIncBits) - 1;
  static constexpr std::uint64_t make(std::uint64_t ms, std::uint64_t inc, bool dead) noexcept {
    return (ms << (kIncBits + 2)) | ((inc & kIncMask) << 2) | (dead ? 2U : 1U);
  }
  // Made for incarnation `inc` less than `half` ms before now.
  static constexpr bool fresh(std::uint64_t v, std::uint64_t inc, std::uint64_t now_ms, std::uint64_t half) noexcept {
    const std::uint64_t ms = v >> (kIncBits + 2);
    return (v & 3) != 0 && ((v >> 2) & kIncMask) == (inc & kIncMask) && ms <= now_ms && now_ms < ms + half;
  }
  static constexpr bool dead(std::uint64_t v) noexcept { return (v & 3) == 2; }
};

// Does process record i need judging (attached, not the caller's, no
// verdict about its incarnation less than recovery_ms / 2 old)?
bool verdict_stale(const Segment& s, std::uint32_t i, std::uint64_t now_ms) noexcept;

// How many judgements (each a kill and a /proc read, ~10 us) the calling
// thread may still make; -1: no limit (the default). A sweep chunk sets it
// for its span, so that no claim pays for the liveness of every process.
inline thread_local int t_judge_budget = -1;
struct JudgeBudget {
  explicit JudgeBudget(int n) noexcept : saved_(t_judge_budget) { t_judge_budget = n; }
  ~JudgeBudget() { t_judge_budget = saved_; }
  JudgeBudget(const JudgeBudget&) = delete;
  JudgeBudget& operator=(const JudgeBudget&) = delete;

 private:
  int saved_;
};

// fsck's checks (fsck.cpp) and repair's rebuild (repair.cpp).
FsckReport check_segment(const Segment& s);
void rebuild_segment(Segment& s, FsckReport& report);

}  // namespace fairlane::detail
