// fairlane::Queue: a fair multi-tenant job queue in a named shared-memory
// segment.
//
// Jobs are enqueued under a group (a tenant). Each group owns a lane of
// pending jobs, served oldest (lowest id) first. A ring holds the lanes that
// can be served now (nonempty, unpaused, below their concurrency ceiling);
// every claim rotates it one step and serves the lane it lands on. A tenant
// with 10,000 jobs waiting gets one turn per cycle, like a tenant with one.
//
// Thread and process safety: every member of Queue may be called from any
// number of threads of any number of processes attached to the same
// segment. enqueue, claim, claim_batch, complete, fail and extend take no
// lock, make no system call and do not allocate (claim copies the payload
// into the Lease's string, which allocates only when its capacity is too
// small). A futex is touched only when a consumer is parked. One exception:
// the claim that runs a sweep (at most four times a second for this) checks
// that the holders of leases are alive, a kill(0) and a /proc/PID/stat read
// per attached process that holds one.
//
// Delivery is at-least-once: a lease that is not completed before its
// deadline, or whose holder process dies, returns the job to its lane (its
// mint position) and the next claim hands it out again with attempt + 1.
// Every lease carries a fencing Token that is never reused for a job id
// within the segment's life (across every admission of that id): complete,
// fail, extend and release with any other token change nothing (stale).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/ids.hpp"
#include "fairlane/result.hpp"
#include "fairlane/retry.hpp"

namespace fairlane {

// The lane of jobs enqueued without a group.
inline constexpr std::string_view kDefaultGroup = "DEF00000000000";

// Mirroring a segment to Valkey (docs/mirror.md).
enum class Durability {
  async,  // enqueue returns at once; Valkey lags by what `inspect` shows
  sync,   // enqueue returns once Valkey has acknowledged the admission
};
enum class MirrorFull {
  refuse,  // a full transition log refuses new jobs (EnqueueStatus::mirror_behind)
  drop,    // a full log stops mirroring, loudly, until the mirror resynchronises
};
std::string_view to_string(Durability d) noexcept;
std::string_view to_string(MirrorFull f) noexcept;

// Fixed at creation; a segment cannot be resized.
struct QueueOptions {
  std::uint32_t jobs = 65536;          // job slots: pending + leased + scheduled + dead
  // Groups live at once: a group holds a lane while it has a job pending or
  // leased (or coming back to it) or a setting (a limit, a weight other
  // than 1, a pause); an idle group gives its lane back by itself, so any
  // number of groups pass through a segment over its life. Scheduled and
  // dead jobs hold no lane: a job that falls due (or is requeued) while
  // every lane is live with other groups waits, due now, and the sweeps try
  // again every recovery_ms / 2.
  std::uint32_t lanes = 4096;
  std::uint32_t payload_bytes = 256;   // largest payload of one job
  std::uint32_t processes = 256;       // Queue handles attached at once (1..kMaxProcesses)
  std::string job_kind = "JOB";        // namespace every job id must carry
  std::uint32_t mode = 0600;           // file mode of the segment
  std::uint16_t node = 0;              // snowflake node bits (0..1023) for mint()
  // The retry policy of jobs that carry none (retry.hpp): max_attempts 1 and
  // no backoff unless set here. Kept in the segment header.
  RetryPolicy default_retry = {};
  // A mirror: valkey://HOST:PORT/QUEUE, or empty for none. A mirrored
  // segment logs every transition for `fairlane mirror` to ship.
  std::string mirror = {};
  Durability durability = Durability::async;
  MirrorFull on_full = MirrorFull::refuse;
  std::uint32_t mirror_log = 65536;       // log records (power of two)
  std::uint32_t sync_timeout_ms = 5000;   // sync: how long enqueue waits for Valkey
  // The recovery bound: how soon live claimers and waiters notice a dead
  // process (a lease holder, or one that died inside an operation) and
  // recover after it, in ms (kMinRecoveryMs..kMaxRecoveryMs). They look every
  // half of it; parked consumers wake at least this often to look.
  std::uint32_t recovery_ms = 500;
};

inline constexpr std::uint32_t kMinRecoveryMs = 20;
inline constexpr std::uint32_t kMaxRecoveryMs = 60000;
inline constexpr std::uint32_t kMaxProcesses = 4095;

// What a segment was created with, read back from its header.
struct QueueConfig {
  std::uint32_t jobs = 0;
  std::uint32_t lanes = 0;
  std::uint32_t payload_bytes = 0;
  std::string job_kind;
  std::uint16_t node = 0;
  std::uint32_t layout_version = 0;
  std::uint64_t segment_bytes = 0;
  std::string mirror;                     // empty: not mirrored
  Durability durability = Durability::async;
  MirrorFull on_full = MirrorFull::refuse;
  std::uint32_t mirror_log = 0;
  std::uint32_t sync_timeout_ms = 0;
  std::uint32_t recovery_ms = 0;
  std::uint32_t processes = 0;
  RetryPolicy default_retry;
};

// The mirror of a segment, as the segment sees it.
struct MirrorStatus {
  bool configured = false;
  std::string url;
  Durability durability = Durability::async;
  MirrorFull on_full = MirrorFull::refuse;
  bool running = false;            // a live `fairlane mirror` (or thread) is attached
  int pid = 0;                     // its pid, 0 if none ever attached
  std::string state;               // "ok", "dropped" or "resync"
  std::uint64_t logged = 0;        // transitions logged, ever
  std::uint64_t acked = 0;         // of which Valkey has acknowledged
  std::uint64_t lag = 0;           // logged - acked
  std::uint64_t lag_ms = 0;        // age of the oldest unacknowledged transition
  std::uint64_t acked_unix_ms = 0; // when Valkey last acknowledged something
  std::uint64_t lost = 0;          // transitions not logged (full log or a dead writer): each forces a resync
  std::uint64_t resyncs = 0;
  std::uint64_t dropped_unix_ms = 0;
  std::uint32_t log_cells = 0;
  // Threads parked for the mirror: sync enqueuers waiting for their
  // acknowledgement and producers in enqueue_wait waiting for room in the
  // log (MirrorShared::ack_waiters), read as 0 once every sleep begun there
  // has ended, as Snapshot::producers_parked is.
  std::uint64_t waiters = 0;
};

// What recovery (returning the leases of dead or late holders, and finishing
// what processes that died inside an operation left half done) has done.
// There is no stop-the-world repair: each of these is done by a survivor's
// claim, one step at a time, beside everyone else's operations.
struct RecoveryInfo {
  std::uint64_t runs = 0;          // sweeps that returned at least one lease, ever
  std::uint64_t jobs = 0;          // leases they returned, ever
  std::uint64_t last_unix_ms = 0;
  std::uint64_t last_jobs = 0;
  int last_pid = 0;                // the one dead holder of them all, else 0
  std::uint64_t last_us = 0;       // how long the last one took
  // Steps of dead processes finished or undone (a job taken out of its lane
  // and not yet leased put back, an admission decided, a move linked), ever.
  std::uint64_t finished = 0;
  std::uint64_t finished_unix_ms = 0;  // when the last one was
  int finished_pid = 0;                // the dead process it was for (0: unknown)
};

enum class EnqueueStatus {
  enqueued,           // admitted: it will be delivered
  duplicate,          // a job with this id exists, pending, leased, scheduled or dead (job(id) finds it);
                      // nothing changed. A live one will be delivered; a dead one only after requeue_dead
  kind_mismatch,      // the job id is not of the queue's job namespace
  invalid_id,         // the job id is not a valid branded id
  invalid_group,      // the group is not a valid branded id
  invalid_argument,   // the retry policy is out of range (retry.hpp)
  payload_too_large,  // larger than the segment's payload_bytes
  full,               // every job slot is in use
  lanes_full,         // a new group, and `lanes` groups are live at once (none idle)
  mirror_behind,      // mirrored, refuse policy: the transition log is full (Valkey away or slow)
  mirror_unavailable, // sync durability, and no mirror process is running: nothing written
  not_durable,        // sync durability: admitted here, but Valkey did not acknowledge it in
                      // time. The job is in the segment; enqueueing it again returns duplicate.
  read_only,          // this handle makes no writes: a mirror's keyspace seen through valkey://, an
                      // observer, or a copy in a forked child that found no process record (Queue::open)
  corrupt,            // the segment holds an impossible value where this call looked (counted; see corruption())
};
std::string_view to_string(EnqueueStatus s) noexcept;

// The longest delay a job can be given, about 34.8 years: an enqueue with a
// longer one is invalid_argument (nothing written); a fail() asking for a
// longer backoff waits this long. (A due time is kept in 44 bits of ms; a
// delay near 2^64 once wrapped round and made the job due at once.)
inline constexpr std::uint64_t kMaxDelayMs = 1ULL << 40;

struct EnqueueOptions {
  std::uint64_t delay_ms = 0;  // not claimable before now + delay_ms; at most kMaxDelayMs
  RetryPolicy retry = {};      // kept with the job; fail() without options applies it
};

// One job of enqueue_batch. The views must stay valid for the call.
struct EnqueueItem {
  BrandedId group;             // empty: the default lane
  BrandedId job;
  std::string_view payload;
  EnqueueOptions options = {};
};

// The fencing token of one lease: a 64-bit number that is never reused for a
// job id within a segment's life (on Valkey: within the queue's keyspace).
// It is opaque: compare it, print it, hand it back; do not compute with it.
// Explicit, so that complete(id, 1) does not compile by accident.
struct Token {
  std::uint64_t value = 0;
  constexpr Token() noexcept = default;
  constexpr explicit Token(std::uint64_t v) noexcept : value(v) {}
  friend constexpr bool operator==(Token, Token) noexcept = default;
};
std::string to_string(Token t);                       // decimal
std::optional<Token> parse_token(std::string_view text) noexcept;  // decimal, 1..2^64-1

// A claimed job. Reuse one Lease across claims: its payload string keeps its
// capacity, so a steady consumer does not allocate.
struct Lease {
  BrandedId id;
  BrandedId group;
  std::uint32_t attempt = 0;       // delivery count: 1 on the first delivery, +1 after each failed or expired one
  Token token;                     // the fencing token of this lease
  std::uint64_t deadline_ms = 0;   // on the segment clock (Queue::now_ms)
  std::uint64_t waited_us = 0;     // from becoming pending to this claim
  RetryPolicy retry;               // the job's own retry policy (unset fields: none given at enqueue)
  std::string payload;
};

enum class ClaimStatus {
  claimed,  // `out` holds a lease
  empty,    // nothing serviceable
  paused,   // the whole queue is paused
  corrupt,  // the segment holds an impossible value where this claim looked (counted; see corruption())
  read_only,  // this handle makes no claims: an observer, or a copy in a forked child that found no
              // process record free (Queue::open)
};
std::string_view to_string(ClaimStatus s) noexcept;

enum class AckStatus {
  ok,
  stale,    // the job exists but is not leased under this token
  gone,     // no job with this id
  corrupt,  // the segment holds an impossible value where this call looked
  read_only,  // this handle makes no writes: an observer (every ack), a mirror's keyspace seen
              // through valkey://, or, for release and requeue_dead, a copy in a forked child that
              // found no process record free (Queue::open)
};
std::string_view to_string(AckStatus s) noexcept;

enum class FailStatus {
  retrying,  // scheduled for another attempt after the delay
  dead,      // that was the last attempt: dead-lettered
  stale,     // the job exists but is not leased under this token
  gone,      // no job with this id
  corrupt,   // the segment holds an impossible value where this call looked
  read_only, // an observer's, or a mirror's keyspace seen through valkey://: it makes no writes
};
std::string_view to_string(FailStatus s) noexcept;

// Every field may be left unset: the job's own policy applies, then the
// queue's default (retry.hpp).
struct FailOptions {
  std::optional<std::uint64_t> delay_ms = {};      // backoff before the retry (over kMaxDelayMs: kMaxDelayMs)
  std::optional<std::uint32_t> max_attempts = {};  // dead-letter once attempt >= this
  std::string_view error = {};                     // kept as the job's last error (truncated to 48 bytes)
};

enum class LaneStatus {
  ok,
  invalid_group,     // not a valid branded id
  invalid_argument,  // limit or weight out of range
  lanes_full,        // a new group, and `lanes` groups are live at once (none idle)
  read_only,         // this handle makes no writes (a mirror's keyspace, an observer, an unattached copy)
  corrupt,           // the segment holds an impossible value where this call looked
};
std::string_view to_string(LaneStatus s) noexcept;

inline constexpr std::uint32_t kMaxLimit = (1U << 17) - 1;  // largest concurrency limit
inline constexpr std::uint32_t kMaxWeight = 1000;

// Enqueue-to-claim waiting time of one lane, kept in the segment: bucket i
// counts claims that waited [2^i, 2^(i+1)) microseconds (bucket 0: < 2 us).
struct WaitHistogram {
  static constexpr std::size_t kBuckets = 32;
  std::uint64_t buckets[kBuckets] = {};
  std::uint64_t count() const noexcept;
  // Upper bound of the bucket holding quantile q (0..1), in microseconds.
  std::uint64_t quantile_us(double q) const noexcept;
};

struct LaneInfo {
  BrandedId group;
  std::uint64_t depth = 0;     // pending jobs
  std::uint64_t active = 0;    // leased jobs
  std::uint32_t limit = 0;     // 0: no limit
  std::uint32_t weight = 1;
  bool paused = false;
  bool ringed = false;         // in the rota: serviceable and holding its ring token
  std::uint64_t served = 0;    // claims served from this lane, ever
  WaitHistogram wait;          // enqueue-to-claim waits of this lane, ever
};

enum class JobState { pending, leased, scheduled, dead };

// What became of reassign().
enum class MoveStatus {
  moved,          // the pending job is now in the new group's lane, at its mint position
  gone,           // no job with this id
  not_pending,    // the job exists but is leased, scheduled or dead: only pending jobs move
  invalid_group,  // not a valid branded id
  lanes_full,     // the new group needs a lane, and none is free or idle
  full,           // every job slot is in use: a move needs one for the job's copy
  busy,           // the job is on its way into a lane, in the hands of a live process (stopped,
                  // perhaps): pending, but not movable until that process goes on; try again
  read_only,      // this handle makes no writes (a mirror's keyspace, an observer, an unattached copy)
  corrupt,
};
std::string_view to_string(MoveStatus s) noexcept;
std::string_view to_string(JobState s) noexcept;

// One job, as read by job()/jobs() (a moment's view, not a lease).
struct JobInfo {
  BrandedId id;
  BrandedId group;
  JobState state = JobState::pending;
  std::uint32_t attempt = 0;       // deliveries counted so far: a released one is not (release gives its
                                   // attempt back), so a job claimed once and released reads 0
  Token token;                     // leased: the current lease's token; otherwise 0
  std::uint64_t when_ms = 0;       // leased: deadline; scheduled: due time; dead: when it died (segment clock)
  std::uint64_t minted_unix_ms = 0;  // from the id's snowflake
  std::uint64_t ready_ms = 0;      // when it last became pending (segment clock; 0 unknown)
  std::uint32_t payload_bytes = 0;
  int holder_pid = 0;              // leased: the process holding the lease (0 unknown)
  RetryPolicy retry;               // the policy it was enqueued with (unset fields: the queue's)
  std::string last_error;          // as given to fail(), truncated to 48 bytes
  std::string payload;             // filled by job() only when asked (job(id, true))
};

struct JobFilter {
  std::optional<BrandedId> group;  // only this lane (the empty id: the default lane); unset: every lane
  std::optional<JobState> state;   // only this state
  std::size_t limit = 1000;        // at most this many, lowest ids first
};

// A process attached to the segment.
enum class ProcessState { alive, stopped, dead };
std::string_view to_string(ProcessState s) noexcept;
struct ProcessInfo {
  int pid = 0;
  bool alive = false;              // state != dead
  ProcessState state = ProcessState::dead;  // stopped: SIGSTOP, a debugger (it holds what it holds)
  std::string name;                // its command name (/proc/PID/comm), empty if unknown
  std::uint64_t attached_unix_ms = 0;
  std::uint64_t leases = 0;        // jobs it holds leased right now
};

struct Counters {
  std::uint64_t enqueued = 0, duplicates = 0, claimed = 0, completed = 0;
  std::uint64_t retried = 0, dead = 0, expired = 0, promoted = 0, drained = 0;
};

// Detected corruption: impossible values the library met in the segment
// (docs/design.md, "Hostile bytes"). Each meeting is counted once.
struct CorruptionInfo {
  std::uint64_t count = 0;         // ever
  std::uint64_t last_unix_ms = 0;  // when it was last met (0: never)
  std::string last_structure;      // e.g. "lane-order", "ring-cell", "slot-word"
};

struct Snapshot {
  bool paused = false;                 // the whole queue
  std::vector<BrandedId> ring;         // serviceable lanes, in rota order
  std::vector<LaneInfo> lanes;         // every live lane, in table order
  WaitHistogram wait;                  // every claim's enqueue-to-claim wait, ever (lanes given back included)
  Counters counters;                   // sums over every process, ever
  std::uint64_t jobs_capacity = 0, pending = 0, leased = 0, scheduled = 0, dead = 0;
  std::uint64_t lanes_live = 0, lanes_capacity = 0;   // groups live at once / --lanes
  std::uint64_t lanes_reclaimed = 0;   // lanes given back by idle groups, ever
  std::uint64_t processes_attached = 0, processes_capacity = 0;
  // Consumer threads parked in claim_wait now, or making the last look
  // before they sleep (a segment's; 0 over Valkey), read as 0 once every
  // sleep begun has ended (Header::park_until): a consumer stopped while
  // parked is counted until its sleep would have ended. One killed while
  // parked is counted until then, or while another consumer has parked
  // since, and until a sweep finds it dead (design.md, "Blocking claims").
  std::uint64_t consumers_parked = 0;
  // Producer threads parked in enqueue_wait for a free slot or a lane,
  // counted the same way (Header::room_park_until, lane_park_until;
  // design.md, "Blocking enqueues").
  std::uint64_t producers_parked = 0;
  std::uint64_t corruptions = 0;       // see CorruptionInfo
  std::uint64_t now_ms = 0;
};

// One broken invariant found by fsck(), named as in docs/design.md.
struct FsckIssue {
  std::string invariant;  // e.g. "lane-active-count", "ring-membership"
  std::string detail;     // which job, lane or process, and what was found
};

struct FsckReport {
  std::vector<FsckIssue> issues;     // the first 1,000 found
  std::uint64_t unlisted = 0;        // found past those (not in issues)
  std::uint64_t slots = 0, lanes = 0, tokens = 0;
  std::vector<std::string> repairs;  // repair(): what it changed, one line each (empty for fsck()),
                                     // the first 1,000, then one saying how many more
  bool clean() const noexcept { return issues.empty() && unlisted == 0; }
  std::uint64_t violations() const noexcept { return issues.size() + unlisted; }
};

namespace detail { struct Segment; struct QueueAccess; }

// Progress: every operation below is lock-free unless it says otherwise: a
// process stopped or killed at any instruction of any operation does not
// stop another's operation (docs/design.md section 5 has the argument per
// structure and the exact list of what a stopped process holds). Calls that
// scan a whole table say O(jobs); setup calls make system calls.
class Queue {
 public:
  // Setup. These allocate and make system calls; they never throw.
  static Result<Queue> create(std::string_view name, const QueueOptions& options = {});
  // An observer (inspect, stats, watch) reads and may run fsck, but is not a
  // process of the queue: processes() does not list it, it takes no process
  // record, and every call that would change the segment refuses
  // (read_only statuses, or does nothing: advance_clock, tick, drain, ...).
  // One exception: mint() mints as a member's does, moving the segment's
  // shared mint word (which keeps ids unique and rising, and changes no job,
  // lane, lease or clock), so that an id an observer mints is no other's.
  //
  // A Queue in a child forked without exec is a copy of its parent's: the
  // child's first call through it that writes takes a process record of the
  // child's own. If none is free, the copy is unattached: it completes,
  // extends and fails the leases its parent handed it (a job it fails for
  // a retry is parked, due after its delay or at once, and moved back by
  // the next sweep pass), and refuses the rest as an observer does (release
  // included, read_only; claims with ClaimStatus::read_only), until a call
  // that writes, at most once a second and without waiting on a busy
  // liveness lock, finds a record free. Open the segment in the child, or
  // create it with more processes, not to depend on that.
  enum class Attach { member, observer };
  static Result<Queue> open(std::string_view name, Attach attach = Attach::member);
  // create(), or, when a segment of that name exists, open() it as a
  // member: but only if it was created with these options. Every option is
  // compared with the segment's (config()) except the file mode: jobs,
  // lanes, payload_bytes, processes, job_kind, node, recovery_ms,
  // default_retry (as stored: its jitter and factor to 1/1000) and the
  // mirror (its URL without a password; durability, on_full, mirror_log and
  // sync_timeout_ms when a mirror is asked for; none asked for and one
  // configured also differ). A field left at its default counts as asking
  // for that default: QueueOptions cannot tell the two apart. Any that
  // differs is Errc::already_exists, naming each such setting with the
  // segment's value and the one asked for, and nothing is changed (open()
  // takes a segment as it is). Options out of range are invalid_argument,
  // whether or not the segment exists.
  static Result<Queue> open_or_create(std::string_view name, const QueueOptions& options = {});
  static Status remove(std::string_view name);

  // A moved-from Queue holds no segment, as a moved-from unique_ptr holds
  // nothing: destroying it, assigning to it and attached() are all that is
  // defined on it (any other call is undefined and, unchecked on the hot
  // path, faults). Move assignment detaches the handle assigned to first.
  Queue(Queue&&) noexcept;
  Queue& operator=(Queue&&) noexcept;
  // Does this handle hold a segment? True for every Queue that create(),
  // open() and open_or_create() hand out; false once it has been moved from.
  bool attached() const noexcept { return seg_ != nullptr; }
  // Detaches. Leases this handle holds stay leased until their deadline
  // (so `fairlane claim` and `fairlane complete` can run as separate
  // processes); call release_all() first to hand them back at once. A
  // process that ends without detaching (killed, or exit()/_exit() while a
  // handle is still open, whatever its exit status) is a dead holder: its
  // leases come back within the recovery bound.
  ~Queue();

  const std::string& name() const noexcept;
  // Is this handle's mapping still the segment at its name? False once the
  // name has been removed (remove(), `fairlane destroy`) or names another
  // segment (removed and created again): the mapping stays as readable as
  // before, but no process that opens the name meets it any more, and what
  // it shows (an observer's snapshot, its counters) is of a queue nobody
  // uses. For a handle kept open for long to look at: the tools that watch a
  // segment (`stats --listen`, `watch`) ask it before every look and open
  // the name again when it says false. One stat(2) of the name (under
  // /dev/shm, where shm_open keeps it), whose device and inode are compared
  // with those of the file mapped at open: no other file can have them
  // while the mapping holds that one. When the name cannot be looked at for
  // another reason (its directory unreadable) or the mapped file's identity
  // could not be read at open, it says true: nothing shows that it changed.
  bool still_named() const noexcept;
  QueueConfig config() const;
  // Whether this handle claims and writes as a process of the queue: false
  // for an observer, and for a copy in a forked child that found no process
  // record free (which still ends the leases its parent handed it: see
  // open). Asking is a copy's first write: it attaches here if it can, and
  // may wait up to a second for a record's lock, as that write would. Such
  // a copy looks again at a write or here, at most once a second and
  // without waiting on busy locks, and is the child's own once a record is
  // free.
  bool writable() noexcept;

  // The segment clock: CLOCK_MONOTONIC in ms plus the segment's test offset.
  // Read through the calling thread's last reading while the time-stamp
  // counter says under 4,096 ticks have passed (a few us; docs/design.md,
  // "The segment clock"): never going back on one thread, never ahead of
  // CLOCK_MONOTONIC, and up to that much behind it.
  std::uint64_t now_ms() const noexcept;

  // Mint a fresh id, strictly greater than any minted before in this
  // segment by any process, carrying the segment's node bits. Lock-free; at
  // most 4,096 ids a millisecond, and when callers mint faster the logical
  // clock runs ahead of the wall clock, by at most a second: past that
  // mint() waits for the clock (on time, never on another process). A
  // logical clock more than two seconds ahead was not put there by mints
  // (an id imported from a host whose clock ran ahead, this host's clock
  // set back): mint() goes on from it without waiting. It returns the empty
  // id once ids are spent (the largest snowflake minted or imported).
  // mint() uses the job namespace; mint(kind) returns the empty id when kind
  // is not three letters A-Z.
  BrandedId mint() noexcept;
  BrandedId mint(std::string_view kind) noexcept;

  // Admit a job. An empty group means the default lane. Idempotent by id:
  // a second enqueue of an id the queue holds (pending, leased, scheduled,
  // or dead: a dead job keeps its id until requeue_dead or purge_dead, as in
  // EchoMQ) returns duplicate and leaves that job as it was. On any refusal nothing is written (no slot, no lane, no index
  // entry), except not_durable, which is an admission, and one case: the
  // first enqueue by a thread of an id it minted lately skips the look-up
  // for a live duplicate (a duplicate then only if the id was handed to
  // another thread that enqueued it first, or minted by another queue), so
  // such a duplicate is refused after its slot was written and linked: it
  // leaves a husk in its lane for a claim to pop, and in a full queue it may
  // be answered full or lanes_full rather than duplicate. Lock-free.
  // Without options: no delay, no retry policy of its own (the same as
  // EnqueueOptions{}, without building and passing one).
  EnqueueStatus enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload) noexcept {
    return enqueue_with(group, job, payload, nullptr);
  }
  EnqueueStatus enqueue(const BrandedId& group, const BrandedId& job, std::string_view payload,
                        const EnqueueOptions& options) noexcept {
    return enqueue_with(group, job, payload, &options);
  }
  // enqueue, but a full queue (every job slot in use), lanes_full (a
  // new group, and every lane record held by a group with work) and
  // mirror_behind (a mirrored segment's transition log full, refuse policy)
  // are waited out. At `full` the calling thread looks again for up to
  // 10 us, then parks on a futex in the segment until a slot is freed (a
  // complete, a purge of dead jobs, a drain, a repair); at lanes_full it
  // parks at once until a lane may be given back (its group's last job
  // completed or sent to the dead letters or a delay, the last setting of
  // a group with no job cleared, or found idle by a sweep pass); at mirror_behind until the mirror's reader gives log
  // cells back; each until `timeout` has passed, and tries again. Returns what enqueue returns;
  // `full`, `lanes_full` or `mirror_behind` only once the timeout has
  // passed (a timeout of 0 is one try, and never parks). Every other answer comes
  // back at once, `full` from the id index among them (the id's two index
  // buckets full: a free does not change it). Producers parked for slots
  // are woken a batch at a time once a batch of slots has been freed (a
  // 32nd of the table, 1 to 32), and in a table of 64 slots or more look
  // within 20 ms of a free that fell short of a batch; those parked for a
  // lane one at a time, each wake a look at the lane records, at most one
  // a millisecond a producer. A producer killed
  // while parked is taken out of the count by the recovery of its process
  // (the sweep, or the next attach of its record), as claim_wait's
  // consumers are. Blocking (not lock-free): it waits for a consumer to
  // free a slot, as a blocking queue's producer does.
  EnqueueStatus enqueue_wait(const BrandedId& group, const BrandedId& job, std::string_view payload,
                             std::chrono::milliseconds timeout) noexcept {
    return enqueue_wait_with(group, job, payload, nullptr, timeout);
  }
  EnqueueStatus enqueue_wait(const BrandedId& group, const BrandedId& job, std::string_view payload,
                             const EnqueueOptions& options, std::chrono::milliseconds timeout) noexcept {
    return enqueue_wait_with(group, job, payload, &options, timeout);
  }
  // One status per item, in order (a batch is not all-or-nothing). Returns
  // how many were enqueued. statuses.size() must be >= items.size(); extra
  // statuses are left alone. Lock-free.
  std::size_t enqueue_batch(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses) noexcept;
  // enqueue_batch with each item's `full`, `lanes_full` and
  // `mirror_behind` waited out as enqueue_wait does, in order, all within
  // the one `timeout`: an item
  // waits for what is left of it, and once it has passed each item left
  // gets one try. One status per item, as enqueue_batch's. Blocking.
  std::size_t enqueue_batch_wait(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses,
                                 std::chrono::milliseconds timeout) noexcept;

  // Rotate the ring one step and lease the oldest job of the lane it lands
  // on for lease_ms. try_claim says why nothing was claimed; claim is
  // try_claim() == claimed. Lock-free.
  ClaimStatus try_claim(Lease& out, std::uint32_t lease_ms) noexcept;
  bool claim(Lease& out, std::uint32_t lease_ms) noexcept;

  // As claim, but parks on the segment's futex until a job is serviceable or
  // the timeout passes. No busy polling. Blocking by design (only when
  // nothing is serviceable); lock-free otherwise. A handle that makes no
  // claims (try_claim says read_only) waits out the timeout and says false;
  // an unattached copy that is attached meanwhile (by another thread's call,
  // or its own later look) claims from then on, within 50 ms.
  bool claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) noexcept;

  // Up to out.size() jobs in one call: each ring step takes
  // min(weight, depth, limit headroom, room left) jobs from its lane.
  // Returns how many leases were filled. Lock-free.
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept;
  // EchoMQ's group-affinity claim: one ring step, then up to out.size() jobs
  // of the one lane it lands on (capped by its limit headroom), all with one
  // deadline. Lock-free.
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept;

  // Acknowledgements, fenced by the lease's token: any other token changes
  // nothing (stale). Lock-free. Past the lease's deadline, extend is stale;
  // complete, fail and release still take effect until a sweep (or the
  // next claim's share of one) has taken the lease back: nobody else can
  // hold the job before that.
  AckStatus complete(const BrandedId& job, Token token) noexcept;
  FailStatus fail(const BrandedId& job, Token token, const FailOptions& options = {}) noexcept;
  AckStatus extend(const BrandedId& job, Token token, std::uint32_t lease_ms) noexcept;
  // Gives the lease back: the job returns to its lane at its mint position at
  // once, its attempt count unchanged (a release is not a failed delivery)
  // and its last error kept. The token is dead afterwards.
  AckStatus release(const BrandedId& job, Token token) noexcept;
  // One status per lease (id and token), in order. statuses.size() must be
  // >= leases.size(). Returns how many completed.
  std::size_t complete_batch(std::span<const Lease> leases, std::span<AckStatus> statuses) noexcept;
  // Releases every lease this handle holds. For a process that exits
  // without the worker runtime. O(jobs). Returns how many it released.
  std::size_t release_all() noexcept;

  // Lane controls. A group named here for the first time gets its lane (and
  // keeps it while the setting is in force). Lock-free.
  LaneStatus pause(const BrandedId& group) noexcept;
  LaneStatus resume(const BrandedId& group) noexcept;
  // The whole queue: ok, or read_only through a handle that makes no writes.
  LaneStatus pause_all() noexcept;
  LaneStatus resume_all() noexcept;
  // limit 1..kMaxLimit (0 is invalid_argument, as in EchoMQ: clearing is
  // clear_limit). Setting it at or below the active count de-rings the lane.
  LaneStatus set_limit(const BrandedId& group, std::uint32_t limit) noexcept;
  LaneStatus clear_limit(const BrandedId& group) noexcept;
  // weight 1 is the default (and clears the setting).
  LaneStatus set_weight(const BrandedId& group, std::uint32_t weight) noexcept;
  // Pending jobs of the lane (0 for a group with no lane). Approximate while
  // others change it.
  std::uint64_t depth(const BrandedId& group) const noexcept;
  // Remove every pending job of the lane. Leased, scheduled and dead jobs are
  // untouched. Lock-free; O(depth).
  std::uint64_t drain(const BrandedId& group) noexcept;
  // Moves a pending job to another group's lane, at its mint position
  // (EchoMQ's reassign). Lock-free.
  MoveStatus reassign(const BrandedId& job, const BrandedId& group) noexcept;

  // Promote due delayed jobs and return expired leases, and the leases of
  // dead holders, to their lanes now. claim and claim_wait do this by
  // themselves, a little at a time; this is for tools and tests: it goes
  // over the whole table (O(jobs)). Returns how many jobs moved.
  std::uint64_t tick() noexcept;

  // Approximate, read-only view (not an atomic picture of the whole queue).
  Snapshot snapshot() const;

  // Jobs by id or by filter: O(jobs) scans of the slot table; for tools.
  // with_payload: also copy the payload into JobInfo::payload.
  std::optional<JobInfo> job(const BrandedId& id, bool with_payload = false) const;
  std::vector<JobInfo> jobs(const JobFilter& filter = {}) const;

  // Dead letters. requeue_dead puts a dead job back in its lane at its mint
  // position, starting again at attempt 1 with a fresh token (a dead job
  // holds no lane: if every lane is live with other groups, it waits as a
  // job due now and enters its lane when a sweep finds one free); purge_dead
  // removes every dead job. Return how many jobs they moved.
  AckStatus requeue_dead(const BrandedId& id) noexcept;
  std::uint64_t requeue_all_dead() noexcept;
  std::uint64_t purge_dead() noexcept;

  // Checks every invariant of the segment against the job slots (the truth):
  // states, the id index, lane words and orders, ring membership, lane
  // directory, limits. Exact only while no process is mid-operation (run it
  // on a quiet segment); while one is stopped inside an operation it names
  // that operation's step and nothing else. It never writes and never
  // crashes on any bytes. O(jobs + lanes).
  FsckReport fsck() const;

  // Rebuilds every derived structure from the job slots and returns what
  // fsck() found before it did (repairs says what changed). A segment fsck()
  // finds clean is left as it is (repairs empty), so a second repair changes
  // nothing. An offline, manual tool: the queue never needs it to keep
  // working (docs/design.md section 9). It refuses (Errc::busy, nothing
  // changed) while any other live process is attached, unless forced by
  // someone who knows those processes are idle; other threads of this
  // process must not use the segment meanwhile, nor a copy of its handle in
  // a child forked without exec that found no process record free (such a
  // copy acts as this process, and repair cannot tell it from this one).
  // A process that attaches while it runs is not refused (nothing stops an
  // attach): repairs names it, and fsck() afterwards says what it met.
  // Groups keep their settings and statistics (served, wait histogram)
  // across it. O(jobs + lanes).
  Result<FsckReport> repair(bool force = false);

  // The mirror's state and lag (configured == false without a mirror).
  MirrorStatus mirror_status() const;
  RecoveryInfo recovery() const;
  // Every meeting with an impossible value, by any call of any process. The
  // calls that answer with a status say `corrupt`; those that return a count
  // (claim_batch, claim_lane_batch, release_all, purge_dead,
  // requeue_all_dead, tick) say it only here: compare the count before and
  // after the call.
  CorruptionInfo corruption() const;

  // Puts a job back as it was, for restore: pending (a leased job comes back
  // pending: its holder is gone), scheduled with its due time, or dead; with
  // its attempt count, retry policy and last error. Same checks and statuses
  // as enqueue, except that a mirrored segment neither refuses nor waits for
  // Valkey (the mirror resynchronises when it starts). Later mints stay
  // above its id.
  EnqueueStatus import_job(const JobInfo& job, std::string_view payload) noexcept;

  // The processes attached to the segment (pid plus start time: a reused
  // pid is not mistaken for the old process). Tools that attach only to look
  // (inspect, stats, watch) are not listed (see open_observer).
  std::vector<ProcessInfo> processes() const;

  // Moves this segment's clock forward by ms, for every attached process.
  // For tests and drills: leases expire and delayed jobs fall due sooner.
  // Does nothing through a handle that makes no writes (writable() false:
  // an observer, an unattached copy).
  void advance_clock(std::uint64_t ms) noexcept;

 private:
  friend struct detail::QueueAccess;  // the mirror reads the segment's tables
  explicit Queue(std::unique_ptr<detail::Segment> seg) noexcept;
  BrandedId mint_checked(const char* kind) noexcept;  // kind: three letters, checked
  EnqueueStatus enqueue_with(const BrandedId& group, const BrandedId& job, std::string_view payload,
                             const EnqueueOptions* options) noexcept;  // null: no options
  EnqueueStatus enqueue_wait_with(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                  const EnqueueOptions* options, std::chrono::milliseconds timeout) noexcept;
  std::unique_ptr<detail::Segment> seg_;
};

}  // namespace fairlane
