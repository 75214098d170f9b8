// fairlane::Queue: setup, the segment clock, claims and waits, the mirror's
// side of admissions, recovery and corruption reports. The transitions live
// in their own files: admission.cpp, claiming.cpp, acks.cpp, sweeping.cpp,
// lane_controls.cpp, inspection.cpp (core.hpp has what they share). See
// docs/design.md for the protocol and its synchronisation edges ([R*]/[A*]/
// [S*] labels).
#include "fairlane/queue.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "clock.hpp"
#include "core.hpp"
#include "fairlane/valkey.hpp"
#include "failpoint.hpp"
#include "futex.hpp"
#include "retry_codec.hpp"

namespace fairlane {
using namespace detail;

// ---- setup --------------------------------------------------------------------------------

Queue::Queue(std::unique_ptr<detail::Segment> seg) noexcept : seg_(std::move(seg)) {}
Queue::Queue(Queue&&) noexcept = default;
Queue& Queue::operator=(Queue&&) noexcept = default;
Queue::~Queue() = default;

Result<Queue> Queue::create(std::string_view name, const QueueOptions& options) {
  auto s = create_segment(name, options);
  if (!s) return s.error();
  return Queue(std::move(s).value());
}

Result<Queue> Queue::open(std::string_view name, Attach attach) {
  auto s = open_segment(name, attach == Attach::observer);
  if (!s) return s.error();
  return Queue(std::move(s).value());
}

namespace {

std::string describe_retry(const RetryPolicy& p) {
  std::string out = p.max_attempts ? "max_attempts " + std::to_string(p.max_attempts) : "no max_attempts";
  if (!p.backoff) return out + ", no backoff";
  const Backoff& b = *p.backoff;
  if (b.kind == Backoff::Kind::fixed) {
    out += ", fixed " + std::to_string(b.base.count()) + " ms";
  } else {
    char f[32];
    std::snprintf(f, sizeof f, "%g", b.factor);
    out += ", exponential " + std::to_string(b.base.count()) + ".." + std::to_string(b.cap.count()) + " ms x" + f;
  }
  if (b.jitter > 0) {
    char j[32];
    std::snprintf(j, sizeof j, "%g", b.jitter);
    out += ", jitter " + std::string(j);
  }
  return out;
}

// The settings of `options` that the segment `c` was not created with, as
// "name X (asked Y)" items; empty when it was created with them all. Every
// setting counts but the file mode, default or not (QueueOptions cannot
// tell a field left at its default from one set to it); each is compared
// as create() would have stored it (the mirror URL without its password,
// the retry policy in its stored precision). The mirror's own settings
// count only when a mirror is asked for.
std::string settings_differ(const QueueConfig& c, const QueueOptions& o) {
  std::string out;
  const auto add = [&](std::string_view setting, const std::string& has, const std::string& asked) {
    if (!out.empty()) out += ", ";
    out.append(setting).append(" ").append(has).append(" (asked ").append(asked).append(")");
  };
  const auto num = [&](std::string_view setting, std::uint64_t has, std::uint64_t asked) {
    if (has != asked) add(setting, std::to_string(has), std::to_string(asked));
  };
  num("jobs", c.jobs, o.jobs);
  num("lanes", c.lanes, o.lanes);
  num("payload_bytes", c.payload_bytes, o.payload_bytes);
  num("processes", c.processes, o.processes);
  if (c.job_kind != o.job_kind) add("job_kind", c.job_kind, o.job_kind);
  num("node", c.node, o.node);
  num("recovery_ms", c.recovery_ms, o.recovery_ms);
  std::uint64_t a = 0, b = 0;
  retry_encode(o.default_retry, a, b);
  if (const RetryPolicy asked = retry_decode(a, b); !(asked == c.default_retry))
    add("default_retry", describe_retry(c.default_retry), describe_retry(asked));
  if (o.mirror.empty()) {
    if (!c.mirror.empty()) add("mirror", c.mirror, "none");
    return out;
  }
  // create() checked the URL before it found the name taken.
  const auto url = ValkeyUrl::parse(o.mirror);
  const std::string asked_url = url ? url->str() : redact_url(o.mirror);
  if (c.mirror != asked_url) add("mirror", c.mirror.empty() ? std::string("none") : c.mirror, asked_url);
  if (c.mirror.empty()) return out;
  if (c.durability != o.durability)
    add("durability", std::string(to_string(c.durability)), std::string(to_string(o.durability)));
  if (c.on_full != o.on_full) add("on_full", std::string(to_string(c.on_full)), std::string(to_string(o.on_full)));
  num("mirror_log", c.mirror_log, o.mirror_log);
  num("sync_timeout_ms", c.sync_timeout_ms, o.sync_timeout_ms);
  return out;
}

}  // namespace

Result<Queue> Queue::open_or_create(std::string_view name, const QueueOptions& options) {
  // A creator publishes its header last; give one that is mid-creation up to
  // a second before reporting it.
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto c = create(name, options);
    if (c || c.error().code != Errc::already_exists) return c;
    auto o = open(name);
    if (o) {
      // Not the queue asked for: say so rather than hand back one whose
      // enqueues answer payload_too_large or kind_mismatch later.
      if (std::string differ = settings_differ(o->config(), options); !differ.empty())
        return Error{Errc::already_exists, 0,
                     "segment '" + std::string(name) + "' exists with other settings than asked: " + differ +
                         "; nothing changed (Queue::open takes it as it is)"};
      return o;
    }
    if (o.error().code != Errc::not_initialized && o.error().code != Errc::not_found) return o;
    if (attempt == 99) return o;
    if (o.error().code == Errc::not_initialized) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Error{Errc::system, 0, "segment '" + std::string(name) + "' could be neither created nor opened"};
}

Status Queue::remove(std::string_view name) { return remove_segment(name); }

const std::string& Queue::name() const noexcept { return seg_->name; }

bool Queue::still_named() const noexcept { return detail::still_named(*seg_); }

QueueConfig Queue::config() const {
  const Header& h = *seg_->h;
  QueueConfig c;
  c.jobs = h.job_capacity;
  c.lanes = h.lane_capacity - 1;
  c.payload_bytes = h.payload_bytes;
  c.job_kind = std::string(h.job_kind, 3);
  c.node = h.node;
  c.layout_version = h.layout_version;
  c.segment_bytes = h.segment_bytes;
  if (h.log_cells) {
    c.mirror = std::string(h.mirror_url, strnlen(h.mirror_url, kMirrorUrlBytes));
    c.durability = h.durability == 2 ? Durability::sync : Durability::async;
    c.on_full = h.on_full == 1 ? MirrorFull::drop : MirrorFull::refuse;
    c.mirror_log = h.log_cells;
    c.sync_timeout_ms = h.sync_timeout_ms;
  }
  c.recovery_ms = h.recovery_ms;
  c.processes = h.proc_capacity;
  c.default_retry = retry_decode(h.default_retry_a, h.default_retry_b);
  return c;
}

std::uint64_t Queue::now_ms() const noexcept { return segment_now_ms(*seg_); }

void Queue::advance_clock(std::uint64_t ms) noexcept {
  // The clock is every process's: a handle that makes no writes (an
  // observer, an unattached copy) leaves it alone, as it leaves the rest.
  if (!writer_cold(*seg_)) return;
  // Bounded: the offset is signed and a clock pushed past its range would
  // wrap every deadline.
  seg_->h->clock_offset_ms.fetch_add(std::int64_t(std::min<std::uint64_t>(ms, 1ULL << 40)), std::memory_order_relaxed);
  notify(*seg_, INT_MAX);  // parked consumers re-check what fell due
}

// ---- parking --------------------------------------------------------------------------------

namespace {
// The margin of Header::park_until over the end of a parked consumer's sleep
// (a futex timeout ends a little late: timer slack).
constexpr std::uint64_t kParkSlackMs = 5;

// Raises a spot's end (Header::park_until, room_park_until, lane_park_until,
// MirrorShared::ack_park_until) to `end` ([S5] seq_cst: before the last
// look). Never lowers it: a consumer that lowered a value it took for a
// scribble (further ahead than its own sleep could end) lowered another
// live consumer's end whenever its clock reading was stale (stopped before
// its raise) or its recovery bound differed, and that one slept through
// the notifies (found in review). A scribbled far future costs what a
// leaked count cost before park_until: a wake per notify while the spot's
// waiters is not 0.
void raise_park_until(std::atomic<std::uint64_t>& until, std::uint64_t end) noexcept {
  std::uint64_t u = until.load(std::memory_order_seq_cst);
  while (u < end && !until.compare_exchange_weak(u, end, std::memory_order_seq_cst)) {
  }
}

// A thread parked on one of the segment's spots (claim_wait's: waiters,
// park_until; enqueue_wait's: room_waiters, room_park_until, and for a lane
// lane_waiters, lane_park_until; a sync enqueue's, and enqueue_wait's for room
// in the log: the mirror's ack_waiters, ack_park_until), from before its last
// look to after its sleep. Counted in the spot's waiters ([S5] seq_cst: before
// the last look; pairs with the waker's load), then in its process record
// (ProcRecord::parked, room_parked, lane_parked or ack_parked), after the
// spot's count and taken out before it, so that a sweep that finds the process
// dead takes out no more than it put in (drop_parked). Then the spot's end is
// raised past the sleep's (`sleep_end`): wakers skip the wake once it has
// passed. Neither count is taken below 0, nor does the record's borrow from its
// incarnation half: one taken out under us (a misjudged death, a scribble) is
// then counted again at our next park, not owed for good.
class Parked {
 public:
  Parked(std::atomic<std::uint32_t>& waiters, std::atomic<std::uint64_t>& record, std::atomic<std::uint64_t>& until,
         std::uint64_t sleep_end) noexcept
      : waiters_(waiters), record_(record) {
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    record_.fetch_add(1, std::memory_order_relaxed);
    raise_park_until(until, sleep_end + kParkSlackMs);
  }
  ~Parked() {
    std::uint64_t v = record_.load(std::memory_order_relaxed);
    while ((v & 0xFFFFFFFF) != 0 && !record_.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
    }
    uncount_parked(waiters_, 1);
  }
  Parked(const Parked&) = delete;
  Parked& operator=(const Parked&) = delete;

 private:
  std::atomic<std::uint32_t>& waiters_;
  std::atomic<std::uint64_t>& record_;
};
}  // namespace

// ---- the mirror's side of admissions --------------------------------------------------------

namespace detail {

bool mirror_role_owner(std::uint64_t owner, std::uint32_t role) noexcept {
  return (owner & kOwnerAttached) && (owner & kOwnerStamped) &&
         ((owner >> kOwnerIncShift) & 0xFFFF) == MirrorRole::incarnation(role);
}

const ProcRecord* mirror_proc(const Segment& s) noexcept {
  const std::uint32_t role = s.h->mirror.proc.load(std::memory_order_acquire);
  const std::uint32_t p = MirrorRole::index1(role);
  if (p == 0 || p > s.proc_count) return nullptr;
  const ProcRecord& r = s.procs[p - 1];
  return mirror_role_owner(r.owner.load(std::memory_order_acquire), role) ? &r : nullptr;
}

bool mirror_alive(const Segment& s) noexcept {
  const ProcRecord* r = mirror_proc(s);
  return r && owner_alive(s, std::uint32_t(r - s.procs), r->owner.load(std::memory_order_relaxed),
                          r->start_time.load(std::memory_order_relaxed));
}

std::optional<EnqueueStatus> mirror_admission_check(const Segment& s) noexcept {
  if (s.h->durability == 2 && !mirror_proc(s)) return EnqueueStatus::mirror_unavailable;
  if (s.h->on_full == 0 && !log_room_for_admission(s)) return EnqueueStatus::mirror_behind;
  return std::nullopt;
}

EnqueueStatus mirror_admitted(Segment& s, std::uint32_t slot, std::uint64_t& wait_seq) noexcept {
  const std::uint64_t seq = log_append(s, LogKind::job, slot);
  if (s.h->durability != 2) return EnqueueStatus::enqueued;
  if (seq == kNotLogged) return EnqueueStatus::not_durable;  // it reaches Valkey with the resync
  wait_seq = seq;
  return EnqueueStatus::enqueued;
}

EnqueueStatus mirror_wait_acked(Segment& s, std::uint64_t seq) noexcept {
  MirrorShared& m = s.h->mirror;
  // Ring the mirror even if it is only between two short looks: we wait.
  m.bell.fetch_add(1, std::memory_order_release);
  futex_wake(&m.bell, 1);
  const std::uint64_t start = monotonic_us() / 1000, give_up = start + s.h->sync_timeout_ms;
  std::uint64_t next_liveness = start + 100;
  for (;;) {
    if (m.acked.load(std::memory_order_acquire) > seq) return EnqueueStatus::enqueued;
    const std::uint64_t now = monotonic_us() / 1000;
    if (now >= give_up) return EnqueueStatus::not_durable;
    if (now >= next_liveness) {
      // A mirror that died will not acknowledge: do not wait out the timeout.
      if (!mirror_alive(s)) return EnqueueStatus::not_durable;
      next_liveness = now + 100;
    }
    const std::uint32_t bell = m.ack_bell.load(std::memory_order_acquire);
    // [S10] seq_cst: announce, then look again; pairs with the mirror's
    // seq_cst store of `acked` and its load of ack_waiters. Counted in its
    // process record too (ProcRecord::ack_parked), so that a sync enqueuer
    // killed here is taken out of ack_waiters by the recovery of its
    // process, and under ack_park_until, so that a count nobody can find
    // makes the mirror no wake once every such sleep has ended (a count
    // left here made a futex wake for nobody at every acknowledgement,
    // for good, before 2026-12-06).
    const std::uint64_t sleep_end = now + std::min<std::uint64_t>(give_up - now, 50);
    std::atomic<std::uint64_t> no_record{0};  // (a sync enqueue comes from an attached handle)
    const Parked parked(m.ack_waiters, s.me ? s.me->ack_parked : no_record, m.ack_park_until, sleep_end);
    if (m.acked.load(std::memory_order_seq_cst) <= seq) futex_wait_until(&m.ack_bell, bell, sleep_end);
  }
}

}  // namespace detail

std::string_view to_string(Durability d) noexcept { return d == Durability::sync ? "sync" : "async"; }
std::string_view to_string(MirrorFull f) noexcept { return f == MirrorFull::drop ? "drop" : "refuse"; }

MirrorStatus Queue::mirror_status() const {
  const Segment& s = *seg_;
  MirrorStatus st;
  if (!s.log) return st;
  const Header& h = *s.h;
  const MirrorShared& m = h.mirror;
  st.configured = true;
  st.url = std::string(h.mirror_url, strnlen(h.mirror_url, kMirrorUrlBytes));
  st.durability = h.durability == 2 ? Durability::sync : Durability::async;
  st.on_full = h.on_full == 1 ? MirrorFull::drop : MirrorFull::refuse;
  st.log_cells = h.log_cells;
  if (const ProcRecord* r = mirror_proc(s)) {
    st.pid = int(r->owner.load(std::memory_order_relaxed) & 0xFFFFFFFF);
    st.running = mirror_alive(s);
  }
  switch (MirrorState(m.state.load(std::memory_order_acquire))) {
    case MirrorState::ok: st.state = "ok"; break;
    case MirrorState::dropped: st.state = "dropped"; break;
    case MirrorState::resync: st.state = "resync"; break;
    default: st.state = "unknown"; break;
  }
  st.acked = m.acked.load(std::memory_order_acquire);
  st.logged = std::max(st.acked, m.head.load(std::memory_order_acquire));
  st.lag = st.logged - st.acked;
  st.acked_unix_ms = m.acked_unix_ms.load(std::memory_order_relaxed);
  st.lost = m.lost.load(std::memory_order_relaxed);
  st.resyncs = m.resyncs.load(std::memory_order_relaxed);
  st.dropped_unix_ms = m.dropped_unix_ms.load(std::memory_order_relaxed);
  st.waiters = sleep_may_be_under_way(m.ack_park_until) ? m.ack_waiters.load(std::memory_order_relaxed) : 0;
  if (st.lag > 0) {
    // The oldest unacknowledged record: in flight at the mirror, or still in
    // the log at `acked` (read before it is given back, so re-check its stamp).
    std::uint64_t oldest = m.inflight_ms.load(std::memory_order_acquire);
    if (oldest == 0) {
      const LogCell& c = s.log[st.acked & s.log_mask];
      const std::uint64_t ms = c.ms.load(std::memory_order_relaxed);
      if (c.stamp.load(std::memory_order_acquire) == st.acked + 1) oldest = ms;
    }
    const std::uint64_t now = segment_now_ms(s);
    st.lag_ms = oldest && now > oldest ? now - oldest : 0;
  }
  return st;
}

RecoveryInfo Queue::recovery() const {
  const RecoveryStats& r = seg_->h->recovery;
  RecoveryInfo out;
  out.runs = r.runs.load(std::memory_order_relaxed);
  out.jobs = r.jobs.load(std::memory_order_relaxed);
  out.last_unix_ms = r.last_unix_ms.load(std::memory_order_relaxed);
  out.last_jobs = r.last_jobs.load(std::memory_order_relaxed);
  out.last_pid = int(r.last_pid.load(std::memory_order_relaxed) & 0x7FFFFFFF);
  out.last_us = r.last_us.load(std::memory_order_relaxed);
  out.finished = r.finished.load(std::memory_order_relaxed);
  out.finished_unix_ms = r.finished_unix_ms.load(std::memory_order_relaxed);
  out.finished_pid = int(r.finished_pid.load(std::memory_order_relaxed) & 0x7FFFFFFF);
  return out;
}

CorruptionInfo Queue::corruption() const {
  const CorruptionStats& c = seg_->h->corruption;
  CorruptionInfo out;
  out.count = c.count.load(std::memory_order_relaxed);
  out.last_unix_ms = c.last_unix_ms.load(std::memory_order_relaxed);
  const std::uint64_t what = c.what.load(std::memory_order_relaxed);
  if (out.count) out.last_structure = std::string(corruption_name(CorruptWhat(std::min<std::uint64_t>(what, 64))));
  return out;
}

// ---- claims -------------------------------------------------------------------------------

namespace {
// How long enqueue_wait looks again at a full queue before it parks, and
// the pauses between two looks (each look reads the free hints, lines the
// freers write: looks back to back take them from the consumers). Parking
// costs the next freer a futex wake (a system call) and the producer a
// wake-up of tens of microseconds; a producer at a queue kept full by a
// consumer that spends 1 us a job parked at almost every job and cost
// that consumer 15-17% of its rate, and looking again for up to 10 us
// before parking gained 10-12% over retrying `full` back to back
// (docs/perf/full-queue-2026-12-06.txt). A consumer slower than that
// is waited for asleep.
constexpr std::uint64_t kRoomSpinUs = 10;
constexpr int kRoomSpinPauses = 16;
// The step of a producer's sleep when wakes come in batches (room_batch >
// 1, slots.hpp: a table of 64 slots or more): it is woken after room_batch
// frees, and if the frees stop short of that, the slots they freed wait at
// most this long for it (it looks after a step in which a free was
// counted). (A smaller table wakes at every free, and sleeps in one step.)
constexpr std::uint64_t kRoomSleepMs = 20;
// The least time between two looks of a producer parked for a lane that
// found none (see enqueue_wait), and the step of one whose group's
// directory buckets are full (kRoomSleepMs).
constexpr std::uint64_t kLaneLookGapMs = 1;

// When a wait of `timeout` from now gives up (CLOCK_MONOTONIC us). Kept in
// microseconds: in milliseconds, rounded down, a 100 ms wait gave up after
// 99.9 ms; rounded up, a wait of 0 (one try) parked and slept up to 1 ms
// (found in review).
// Saturated: milliseconds::max() (wait for ever) wrapped around to before
// now, and the wait made one try and answered at once (found in review).
std::uint64_t give_up_of(std::chrono::milliseconds timeout) noexcept {
  const std::uint64_t now = monotonic_us();
  const std::uint64_t ms = std::uint64_t(std::max<std::int64_t>(0, timeout.count()));
  return ms >= (UINT64_MAX - now) / 1000 ? UINT64_MAX : now + ms * 1000;
}

// The end of a sleep that begins at `now_us` (CLOCK_MONOTONIC ms, rounded
// up): by the caller's `give_up_us`, and at most half the recovery bound
// (so a parked thread notices the dead in time, and a wake lost to a waker
// killed between its free and its wake costs at most that).
std::uint64_t sleep_end_of(const Segment& s, std::uint64_t now_us, std::uint64_t give_up_us) noexcept {
  const std::uint64_t cap_us = std::uint64_t(std::max<std::uint32_t>(s.recovery_ms / 2, 1)) * 1000;
  return (now_us + std::min<std::uint64_t>(give_up_us - now_us, cap_us) + 999) / 1000;
}

// How often a claim_wait through a handle that makes no claims looks again
// whether it does now (an unattached copy attached since).
constexpr std::uint64_t kReadOnlyLookMs = 50;
}  // namespace

bool Queue::writable() noexcept { return writer_cold(*seg_); }

bool Queue::claim(Lease& out, std::uint32_t lease_ms) noexcept { return try_claim(out, lease_ms) == ClaimStatus::claimed; }

std::size_t Queue::claim_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept {
  std::size_t got = 0;
  claim_some(*seg_, out.data(), out.size(), got, lease_ms, segment_now_us(*seg_), false);
  return got;
}

std::size_t Queue::claim_lane_batch(std::span<Lease> out, std::uint32_t lease_ms) noexcept {
  std::size_t got = 0;
  claim_some(*seg_, out.data(), out.size(), got, lease_ms, segment_now_us(*seg_), true);
  return got;
}

bool Queue::claim_wait(Lease& out, std::uint32_t lease_ms, std::chrono::milliseconds timeout) noexcept {
  Segment& s = *seg_;
  const std::uint64_t give_up = give_up_of(timeout);
  // No claim is serviceable to a handle that makes none (an observer, an
  // unattached copy: try_claim says read_only): it waits as for an empty
  // queue, so that a loop over claim_wait does not spin. It looks again
  // every kReadOnlyLookMs: a copy that another thread of its process
  // attaches meanwhile, or that attaches itself on a later look
  // (Segment::kCopyRetryMs), claims from then on rather than after its
  // whole timeout.
  while (!writer_cold(s)) {
    const std::uint64_t now_us = monotonic_us();
    if (now_us >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<std::uint64_t>(give_up - now_us, kReadOnlyLookMs * 1000)));
  }
  // Its looks look hard (claim_some): an empty answer puts it to sleep, so
  // it must not be one a gap in the ring gave.
  // A consumer that slept passes the wake on when it leaves work in the
  // ring: a lane is rung (and a sleeper woken) once, however many jobs it
  // gets meanwhile, and resume or a raised limit ring a lane with a backlog
  // as one wake too; a second parked consumer slept out its slice (up to
  // recovery_ms / 2) beside the jobs the first left behind (found by test).
  // The cell at the head says a lane may be serviceable (a stale one costs
  // another consumer a look).
  bool slept = false;
  const auto look = [&] {
    std::size_t got = 0;
    if (claim_some(s, &out, 1, got, lease_ms, segment_now_us(s), false, true) != ClaimStatus::claimed) return false;
    if (slept) {
      const std::uint64_t h = s.h->ring_head.load(std::memory_order_acquire);
      if (cell_written_for(s.ring[h & s.ring_mask].load(std::memory_order_acquire), h)) notify(s);
    }
    return true;
  };
  for (;;) {
    if (look()) return true;
    const std::uint64_t real_now = monotonic_us();
    if (real_now >= give_up) return false;
    // A pass under way (its chunks are taken one a claim): take the next
    // one now rather than after a sleep, so that a queue whose only
    // consumers are parked finishes its passes (the records' liveness, then
    // the slots) within the recovery bound.
    if (sweep_under_way(s)) continue;
    const std::uint32_t seq = s.h->wake_seq.load(std::memory_order_acquire);
    // The latest this sleep may end (it is cut to it below): notifiers
    // wake until then, and no longer for this count.
    const std::uint64_t sleep_end = sleep_end_of(s, real_now, give_up);
    const Parked parked(s.h->waiters, s.me->parked, s.h->park_until, sleep_end);
    if (look()) return true;
    // Sleep until woken, the timeout, or the next due time (so parked
    // consumers drive lease expiry and promotion: no daemon needed), and at
    // most half the recovery bound (so they notice the dead in time).
    // It ends by sleep_end (park_until says so to notifiers), an absolute
    // time: a stall before the futex call (a SIGSTOP, a preemption) does not
    // carry the sleep past it. (With a relative timeout worked out before
    // such a stall, the sleep outlasted park_until, and a notify made after
    // park_until had passed woke nobody: found in review.)
    std::uint64_t until = sleep_end;
    // seq_cst: pairs with a delayed enqueue's lower_next_due + notify ([S5]).
    const std::uint64_t due = s.h->sweep.next_due.load(std::memory_order_seq_cst);
    if (due != kNever) {
      const std::uint64_t seg_now = segment_now_ms(s);
      until = std::min(until, monotonic_us() / 1000 + (due > seg_now ? due - seg_now : 1));
    }
    FAIRLANE_FAILPOINT("park.sleep");
    futex_wait_until(&s.h->wake_seq, seq, until);
    slept = true;
  }
}

namespace {

// enqueue_wait until `give_up` (CLOCK_MONOTONIC us): the batch's items
// share one give-up time. (Handed the time left in milliseconds, rounded
// down, a batch gave up to a millisecond early: found by its test.)
EnqueueStatus enqueue_wait_until(Segment& s, const BrandedId& group, const BrandedId& job, std::string_view payload,
                                 const EnqueueOptions* options, std::uint64_t give_up) noexcept {
  AdmitOut said;
  const auto look = [&] { return enqueue_one(s, group, job, payload, options, said); };
  // The time the look after the last sleep took (a look at lanes_full walks
  // the lane records: about 1 ms at 100,000 lanes, found in review). Only
  // that look is timed: the look-again at `full` needs no timing, and two
  // clock reads a look would slow it.
  std::uint64_t look_us = 0;
  // What an answer waits for. `full` is waited out only when it means every
  // slot is in use: the id index's two buckets full of this id's neighbours
  // (a refusal that gives its slot back, or leaves a husk) do not empty
  // because a slot is freed, and a producer that waited on them took and
  // gave back a slot (waking itself, delayed jobs) every round until its
  // timeout (found in review). `lanes_full` is waited out until a lane may
  // be given back; the group's directory buckets full of groups with work
  // (`buckets`: about one new group in 10^7) until one of those goes idle,
  // which nothing announces to it: it looks every kRoomSleepMs.
  // `mirror_behind` (the transition log full, refuse policy) until the
  // mirror reads records off the log (`log`).
  enum class Wait { none, room, lane, buckets, log };
  const auto wait_of = [&](EnqueueStatus st) {
    if (st == EnqueueStatus::full && !said.index_full) return Wait::room;
    if (st == EnqueueStatus::lanes_full) return said.buckets_full ? Wait::buckets : Wait::lane;
    if (st == EnqueueStatus::mirror_behind) return Wait::log;
    return Wait::none;
  };
  // A producer that slept may have been woken for a freed slot (a wake is
  // of as many producers as slots were freed) or for a lane (one a wake).
  // One whose answer no longer waits for that (it leaves, or waits for the
  // other) and did not take it passes the wake on, at once: or another
  // producer would sleep out its slice with the slot or the lane free
  // (found in review). A slot is taken by an admission, or found taken by
  // the last look of a `full`; a lane cannot be told taken (an admission
  // may have found its group's lane made meanwhile), so its wake is always
  // passed on. Made out of the counts: a wake passed on must not be for us.
  bool slept_room = false, slept_lane = false;
  const auto pass_on = [&](EnqueueStatus st, Wait w) {
    if (slept_room && w != Wait::room) {
      // (No fence: this thread stored no hint. A producer counted after the
      // load of room_waiters makes its last look after it, and finds the slot.)
      if (st != EnqueueStatus::enqueued && st != EnqueueStatus::not_durable) wake_room_after_free(s, false, true);
      slept_room = false;
    }
    if (slept_lane && w != Wait::lane) {
      wake_lanes(s, kNoLane);
      slept_lane = false;
    }
  };
  // Each round looks before it heeds the timeout: a producer woken by a
  // free that gave up without looking would leave that slot to producers
  // still asleep.
  EnqueueStatus st = look();
  for (;;) {
    Wait w = wait_of(st);
    if (w == Wait::room) {
      // Looks again for a while before it parks (kRoomSpinUs): a consumer
      // that frees a slot every few microseconds then pays no futex wake a
      // job, and this thread no sleep and wake-up.
      for (const std::uint64_t until = std::min(monotonic_us() + kRoomSpinUs, give_up);
           wait_of(st) == Wait::room && monotonic_us() < until;) {
        for (int k = 0; k < kRoomSpinPauses; ++k) cpu_pause();
        st = look();
      }
      w = wait_of(st);
    }
    pass_on(st, w);
    if (w == Wait::none) return st;
    const std::uint64_t now = monotonic_us();
    if (now >= give_up || !s.me) return st;  // (a `full` or `lanes_full` answer comes from an attached handle)
    const std::uint64_t sleep_end = sleep_end_of(s, now, give_up);
    bool slept = false;
    if (w == Wait::room) {
      // Read before the count: a free counted after it moves the word, and
      // the futex wait below then returns at once.
      const std::uint32_t seq = s.h->room_seq.load(std::memory_order_acquire);
      const std::uint32_t batch = room_batch(s);
      // The sleep ends by sleep_end (room_park_until covers it all); with
      // wakes in batches it is taken in steps of kRoomSleepMs, and after a
      // step in which a free was counted (the word moved) this producer
      // looks: frees that stop short of a batch leave slots free. A step in
      // which none was is slept on without a look (a producer at a queue
      // whose consumers stopped looked 50 times a second: found in review).
      const Parked parked(s.h->room_waiters, s.me->room_parked, s.h->room_park_until, sleep_end);
      // Woken `batch` frees from the word read, unless a wake is asked for
      // already within that (an earlier producer's: kept, or producers
      // parking less than a batch apart would put the wake off for good).
      if (std::uint32_t(s.h->room_want.load(std::memory_order_relaxed) - seq) - 1 >= batch)
        s.h->room_want.store(seq + batch, std::memory_order_relaxed);
      // The last look: a slot freed before a freer could see us counted is
      // found by it (note_freed).
      st = look();
      if (wait_of(st) == Wait::room) {
        FAIRLANE_FAILPOINT("room.sleep");
        for (std::uint64_t step_end = batch > 1 ? (now + 999) / 1000 + kRoomSleepMs : sleep_end;;) {
          step_end = std::min(step_end, sleep_end);
          futex_wait_until(&s.h->room_seq, seq, step_end);
          if (step_end >= sleep_end || s.h->room_seq.load(std::memory_order_acquire) != seq ||
              monotonic_us() / 1000 < step_end)
            break;  // the whole sleep, a counted free, or woken (a wake moves the word too): look
          step_end += kRoomSleepMs;
        }
        slept = slept_room = true;
      }
    } else if (w == Wait::log) {
      // Parked where sync enqueuers wait for their acknowledgement: the
      // mirror's reader rings ack_bell when it gives cells back from a log
      // full to the refusal line (mirror.cpp, [S11]). Read before the
      // count: a ring after it moves the word, and the futex wait returns
      // at once. Every producer parked there is woken (room for many may
      // have come), and none passes a wake on. With no mirror running,
      // nothing rings: the sleep runs to its end, and the look after it
      // decides (a mirror restarted meanwhile reads the log and rings).
      MirrorShared& m = s.h->mirror;
      const std::uint32_t bell = m.ack_bell.load(std::memory_order_acquire);
      const Parked parked(m.ack_waiters, s.me->ack_parked, m.ack_park_until, sleep_end);
      // [S11]: the count, then the look's loads of `head` and `tail`
      // (relaxed in the admission's check): either the reader's load of
      // ack_waiters sees us counted, or this look sees its cells.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      st = look();
      if (wait_of(st) == Wait::log) {
        futex_wait_until(&m.ack_bell, bell, sleep_end);
        slept = true;
      }
    } else if (w == Wait::buckets) {
      // Not counted for lane wakes: a lane given back elsewhere is no room
      // in this group's buckets, and a producer woken for it would keep the
      // wake from one that can use it (it passed the wake on above).
      std::this_thread::sleep_for(std::chrono::microseconds(std::min<std::uint64_t>(give_up - now, kRoomSleepMs * 1000)));
      st = look();
      continue;
    } else {
      // A lane: a look walks the lane records for an idle one to give back,
      // so a producer that a wake sent to look in vain (another took the
      // lane) waits before it parks again: kLaneLookGapMs, or ten times
      // what its look took if more, up to kRoomSleepMs (a look preempted
      // for long is no measure of a walk: found in review). A wake costs it
      // two walks (the look after the wake, the last look once counted
      // again): at most about two thousand walks a second, and about a
      // sixth of a CPU, however fast lanes come and go.
      if (slept_lane) {
        const std::uint64_t gap_us =
            std::clamp<std::uint64_t>(10 * look_us, kLaneLookGapMs * 1000, kRoomSleepMs * 1000);
        std::this_thread::sleep_for(std::chrono::microseconds(std::min<std::uint64_t>(give_up - now, gap_us)));
        if (monotonic_us() >= give_up) {
          st = look();
          continue;  // the timeout passed in the gap: one last look, and the answer
        }
      }
      const std::uint32_t seq = s.h->lane_seq.load(std::memory_order_acquire);
      // Counted in room_waiters too (the one word every free loads), under
      // lane_park_until only: a free then counts no slot and wakes no
      // producer parked for one while only producers parked for a lane
      // are asleep.
      const Parked counted(s.h->room_waiters, s.me->room_parked, s.h->lane_park_until, sleep_end);
      const Parked parked(s.h->lane_waiters, s.me->lane_parked, s.h->lane_park_until, sleep_end);
      // The last look: a lane left idle before its waker could see us
      // counted is found by it (wake_lanes).
      st = look();
      if (wait_of(st) == Wait::lane) {
        FAIRLANE_FAILPOINT("lane.sleep");
        futex_wait_until(&s.h->lane_seq, seq, sleep_end);
        slept = slept_lane = true;
      }
    }
    if (slept) {  // out of the counts
      const std::uint64_t t0 = monotonic_us();
      st = look();
      look_us = monotonic_us() - t0;
    }
  }
}

}  // namespace

EnqueueStatus Queue::enqueue_wait_with(const BrandedId& group, const BrandedId& job, std::string_view payload,
                                       const EnqueueOptions* options, std::chrono::milliseconds timeout) noexcept {
  return enqueue_wait_until(*seg_, group, job, payload, options, give_up_of(timeout));
}

std::size_t Queue::enqueue_batch_wait(std::span<const EnqueueItem> items, std::span<EnqueueStatus> statuses,
                                     std::chrono::milliseconds timeout) noexcept {
  const std::uint64_t give_up = give_up_of(timeout);
  std::size_t n = 0;
  for (std::size_t i = 0; i < items.size() && i < statuses.size(); ++i) {
    statuses[i] = enqueue_wait_until(*seg_, items[i].group, items[i].job, items[i].payload, &items[i].options, give_up);
    n += statuses[i] == EnqueueStatus::enqueued || statuses[i] == EnqueueStatus::not_durable;
  }
  return n;
}

}  // namespace fairlane
