// Inspection and dead letters: snapshot, wait histograms, job/jobs,
// requeue_dead, purge_dead, processes. Views are moments, not atomic
// pictures; every index read from the segment is checked before use.
#include <algorithm>
#include <cstring>

#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "retry_codec.hpp"

namespace fairlane {
using namespace detail;

namespace {

void add_counters(Counters& c, const CounterBlock& b) noexcept {
  c.enqueued += b.enqueued.load(std::memory_order_relaxed);
  c.duplicates += b.duplicates.load(std::memory_order_relaxed);
  c.claimed += b.claimed.load(std::memory_order_relaxed);
  c.completed += b.completed.load(std::memory_order_relaxed);
  c.retried += b.retried.load(std::memory_order_relaxed);
  c.dead += b.dead.load(std::memory_order_relaxed);
  c.expired += b.expired.load(std::memory_order_relaxed);
  c.promoted += b.promoted.load(std::memory_order_relaxed);
  c.drained += b.drained.load(std::memory_order_relaxed);
}

// What a slot shows as a job (returning is pending on its way; admitting
// and aborted are not jobs yet / any more).
std::optional<JobState> visible_state(SlotState st) noexcept {
  switch (st) {
    case SlotState::pending:
    case SlotState::returning: return JobState::pending;
    case SlotState::leased: return JobState::leased;
    case SlotState::scheduled: return JobState::scheduled;
    case SlotState::dead: return JobState::dead;
    default: return std::nullopt;
  }
}

BrandedId group_id(const Segment& s, std::uint32_t slot) noexcept {
  GroupKey g;
  if (!slot_group(s, slot, g)) return default_group_id();
  if (g.kind >= kKindCodes) return {};
  char k[3];
  kind_letters(g.kind, k);
  return BrandedId::make(std::string_view(k, 3), g.sf & kMaxSnowflake);
}

int holder_pid(const Segment& s, std::uint32_t holder) noexcept {
  const std::uint32_t i1 = Holder::index1(holder);
  if (i1 == 0 || i1 > s.proc_count) return 0;
  const ProcRecord& p = s.procs[i1 - 1];
  if ((p.incarnation.load(std::memory_order_relaxed) & 0xFF) != Holder::inc(holder)) return 0;
  return int(p.owner.load(std::memory_order_relaxed) & 0x7FFFFFFF);
}

// The word a slot shows as a job: its own, or, for a reassign's copy that
// its origin names (the job by the rule, its mover yet to commit it), the
// word its commit writes. Without it the job vanished from view for as long
// as its mover was stopped there (the origin is a husk by then).
Word128 shown_word(const Segment& s, std::uint32_t slot, const Word128& w) noexcept {
  if (!named_copy(s, slot, w)) return w;
  const SlotRecord& r = s.slot(slot);
  return committed_word(r.fail_to.load(std::memory_order_acquire), r.flags.load(std::memory_order_relaxed), w);
}

// Reads one slot into a JobInfo. The fields are read without owning the
// slot, then the word is read again: a slot that changed meanwhile is
// reported as not found rather than torn.
std::optional<JobInfo> read_job(const Segment& s, std::uint32_t slot, bool with_payload) {
  const Word128 seen = slot_load(s, slot);
  const Word128 w = shown_word(s, slot, seen);
  const auto st = visible_state(SlotWord::state(w));
  if (!st) return std::nullopt;
  const SlotRecord& r = s.slot(slot);
  JobInfo j;
  const std::uint64_t sf = r.sf.load(std::memory_order_acquire) & kMaxSnowflake;
  j.id = BrandedId::make(std::string_view(s.kind, 3), sf);
  j.group = group_id(s, slot);
  j.state = *st;
  j.attempt = SlotWord::attempt(w);
  if (*st == JobState::leased) {
    j.token = make_token(s, slot, SlotWord::ctr(w));
    j.holder_pid = holder_pid(s, SlotWord::holder(w));
  }
  j.when_ms = *st == JobState::pending ? 0 : SlotWord::when(w);
  j.minted_unix_ms = snowflake_ms(sf) + kEpochMs;
  j.ready_ms = r.ready_us.load(std::memory_order_relaxed) / 1000;
  j.payload_bytes = std::min(r.payload_len.load(std::memory_order_relaxed), s.payload_bytes);
  if (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
    j.retry = retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed));
  j.last_error.assign(r.error, std::min<std::size_t>(r.error_len.load(std::memory_order_relaxed), kErrorBytes));
  if (with_payload) j.payload.assign(reinterpret_cast<const char*>(s.payload(slot)), j.payload_bytes);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (!(slot_load(s, slot) == seen)) return std::nullopt;
  return j;
}

}  // namespace

Snapshot Queue::snapshot() const {
  Segment& s = *seg_;
  Snapshot snap;
  snap.paused = s.h->queue_paused.load(std::memory_order_acquire) != 0;
  snap.now_ms = segment_now_ms(s);
  snap.jobs_capacity = s.jobs;
  snap.lanes_capacity = s.lane_count - 1;
  snap.lanes_reclaimed = s.h->lanes_reclaimed.load(std::memory_order_relaxed);
  snap.processes_capacity = s.proc_count;
  snap.consumers_parked = sleep_may_be_under_way(s) ? s.h->waiters.load(std::memory_order_relaxed) : 0;
  // room_waiters counts every parked producer, for a slot (room_park_until)
  // or a lane (lane_park_until).
  snap.producers_parked =
      sleep_may_be_under_way(s.h->room_park_until) || sleep_may_be_under_way(s.h->lane_park_until)
          ? s.h->room_waiters.load(std::memory_order_relaxed)
          : 0;
  snap.corruptions = s.h->corruption.count.load(std::memory_order_relaxed);

  // The rota: the valid tokens from the head to the tail, in order.
  const std::uint64_t head = s.h->ring_head.load(std::memory_order_acquire);
  for (std::uint64_t p = head; p < head + s.ring_mask + 1; ++p) {
    const std::uint64_t c = s.ring[p & s.ring_mask].load(std::memory_order_acquire);
    if (!cell_written_for(c, p)) break;
    const std::uint32_t lane1 = RingCell::lane1(c);
    if (lane1 == 0 || lane1 > s.lane_count) continue;
    const Word128 w = lane_load(s, lane1 - 1);
    if (LaneWord::state(w) == LaneState::live && LaneWord::ringed(w) && LaneWord::tgen(w) == (p & LaneWord::kTgenMask) &&
        lane_serviceable(w, lane_settings(s, lane1 - 1)))
      snap.ring.push_back(lane1 - 1 == kDefaultLane ? default_group_id() : lane_group(s, lane1 - 1));
  }

  std::uint64_t live = 0;
  for (std::uint32_t b = 0; b < kWaitBuckets; ++b) snap.wait.buckets[b] = s.h->retired_waits.b[b].load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < s.lane_count; ++i) {
    for (std::uint32_t b = 0; b < kWaitBuckets; ++b) snap.wait.buckets[b] += s.waits[i].b[b].load(std::memory_order_relaxed);
    const Word128 w = lane_load(s, i);
    if (LaneWord::state(w) != LaneState::live) continue;
    if (i != kDefaultLane) ++live;  // groups live at once (the default lane is not one)
    const LaneRecord& l = s.lanes[i];
    const std::uint64_t st = lane_settings(s, i);
    LaneInfo li;
    li.group = i == kDefaultLane ? default_group_id() : lane_group(s, i);
    li.depth = lane_depth(s, i);
    li.active = LaneWord::active(w);
    li.limit = std::uint32_t(Settings::limit(st));
    li.weight = Settings::weight(st);
    li.paused = Settings::paused(st);
    li.ringed = LaneWord::ringed(w) && lane_serviceable(w, st);
    li.served = l.served.load(std::memory_order_relaxed);
    for (std::uint32_t b = 0; b < kWaitBuckets; ++b) li.wait.buckets[b] = s.waits[i].b[b].load(std::memory_order_relaxed);
    snap.lanes.push_back(li);
  }
  snap.lanes_live = live;

  add_counters(snap.counters, s.h->retired);
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    add_counters(snap.counters, s.procs[i].retired);
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if ((owner & kOwnerAttached) && !(owner & kOwnerObserver)) ++snap.processes_attached;
  }
  for (std::uint32_t i = 0; i < s.thread_count; ++i) add_counters(snap.counters, s.threads[i].counters);

  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    switch (SlotWord::state(slot_load(s, i))) {
      case SlotState::pending:
      case SlotState::returning: ++snap.pending; break;
      case SlotState::leased: ++snap.leased; break;
      case SlotState::scheduled: ++snap.scheduled; break;
      case SlotState::dead: ++snap.dead; break;
      default: break;
    }
  }
  return snap;
}

// ---- histograms ---------------------------------------------------------------------------

static_assert(WaitHistogram::kBuckets == kWaitBuckets);

std::uint64_t WaitHistogram::count() const noexcept {
  std::uint64_t n = 0;
  for (std::uint64_t b : buckets) n += b;
  return n;
}

std::uint64_t WaitHistogram::quantile_us(double q) const noexcept {
  const std::uint64_t n = count();
  if (n == 0) return 0;
  const double target = std::clamp(q, 0.0, 1.0) * double(n);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += buckets[i];
    if (double(seen) >= target && buckets[i]) return 2ULL << i;  // the bucket's upper bound
  }
  return 2ULL << (kBuckets - 1);
}

// ---- jobs and dead letters ----------------------------------------------------------------

std::string_view to_string(JobState s) noexcept {
  switch (s) {
    case JobState::pending: return "pending";
    case JobState::leased: return "leased";
    case JobState::scheduled: return "scheduled";
    case JobState::dead: return "dead";
  }
  return "unknown";
}

std::optional<JobInfo> Queue::job(const BrandedId& id, bool with_payload) const {
  const Segment& s = *seg_;
  std::uint64_t sf = 0;
  if (job_snowflake(s, id, sf) != IdCheck::ok) return std::nullopt;
  const std::uint32_t slot = index_find(s, sf);
  if (slot == kNoSlot) return std::nullopt;
  auto j = read_job(s, slot, with_payload);
  if (j && j->id != id) return std::nullopt;
  return j;
}

std::vector<JobInfo> Queue::jobs(const JobFilter& filter) const {
  const Segment& s = *seg_;
  std::vector<JobInfo> out;
  GroupKey want{};
  bool want_default = false;
  if (filter.group) {
    // The empty id is the default lane, as in enqueue and depth (it listed
    // nothing here, and the default lane's jobs on Valkey).
    want_default = is_default_group(*filter.group);
    if (!want_default && !group_of(*filter.group, want)) return out;
  }
  // Lowest ids first: the candidates' keys, sorted, then read.
  std::vector<std::pair<std::uint64_t, std::uint32_t>> keys;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const auto st = visible_state(SlotWord::state(shown_word(s, i, slot_load(s, i))));
    if (!st || (filter.state && *filter.state != *st)) continue;
    if (filter.group) {
      GroupKey g;
      const bool grouped = slot_group(s, i, g);
      if (want_default ? grouped : (!grouped || g.kind != want.kind || g.sf != want.sf)) continue;
    }
    keys.emplace_back(s.slot(i).sf.load(std::memory_order_relaxed), i);
  }
  std::sort(keys.begin(), keys.end());
  for (const auto& [sf, i] : keys) {
    if (out.size() >= filter.limit) break;
    if (auto j = read_job(s, i, false); j && (!filter.state || j->state == *filter.state)) out.push_back(std::move(*j));
  }
  return out;
}

AckStatus Queue::requeue_dead(const BrandedId& id) noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return AckStatus::read_only;
  std::uint64_t sf = 0;
  if (job_snowflake(s, id, sf) != IdCheck::ok) return AckStatus::gone;
  const std::uint32_t slot = index_find(s, sf);
  if (slot == kNoSlot) return AckStatus::gone;
  Word128 w;  // with its id: the slot may hold another job since the look-up
  if (!word_of_job(s, slot, sf, w) || SlotWord::state(w) == SlotState::free) return AckStatus::gone;
  if (SlotWord::state(w) != SlotState::dead) return AckStatus::stale;
  switch (adopt_job(s, slot, w, 0, true)) {
    case Adopted::ok: return AckStatus::ok;
    case Adopted::changed: return AckStatus::stale;
    case Adopted::lanes_full: return AckStatus::ok;  // requeued: it waits, due now, for a lane of its group
    case Adopted::corrupt: return AckStatus::corrupt;
  }
  return AckStatus::stale;
}

std::uint64_t Queue::requeue_all_dead() noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return 0;
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const Word128 w = slot_load(s, i);
    if (SlotWord::state(w) != SlotState::dead) continue;
    const Adopted a = adopt_job(s, i, w, 0, true);
    n += a == Adopted::ok || a == Adopted::lanes_full;
  }
  return n;
}

std::uint64_t Queue::purge_dead() noexcept {
  Segment& s = *seg_;
  if (!writer_cold(s)) return 0;
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    Word128 w = slot_load(s, i);
    if (SlotWord::state(w) != SlotState::dead) continue;
    // A dead job is linked nowhere: freeing it is one CAS (its index entry
    // goes stale with the slot's next admission).
    if (!slot_cas(s, i, w, SlotWord::make(SlotState::free, 0, 0, SlotWord::ctr(w), 0))) continue;
    note_freed(s, i);
    FAIRLANE_FAILPOINT("dead.purged");
    log_job(s, i);
    ++n;
  }
  return n;
}

std::vector<ProcessInfo> Queue::processes() const {
  const Segment& s = *seg_;
  std::vector<ProcessInfo> out;
  std::vector<std::uint64_t> leases(s.proc_count, 0);
  for (std::uint32_t i = 0; i < s.jobs; ++i) {
    const Word128 w = slot_load(s, i);
    if (SlotWord::state(w) != SlotState::leased) continue;
    const std::uint32_t h = SlotWord::holder(w);
    const std::uint32_t i1 = Holder::index1(h);
    if (i1 >= 1 && i1 <= s.proc_count &&
        (s.procs[i1 - 1].incarnation.load(std::memory_order_relaxed) & 0xFF) == Holder::inc(h))
      ++leases[i1 - 1];
  }
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    const ProcRecord& r = s.procs[i];
    const std::uint64_t owner = r.owner.load(std::memory_order_acquire);
    if (!(owner & kOwnerAttached) || (owner & kOwnerObserver)) continue;  // free, or a tool that only looks
    ProcessInfo p;
    p.pid = int(owner & 0x7FFFFFFF);
    p.state = owner_state(s, i, owner, r.start_time.load(std::memory_order_relaxed));
    p.alive = p.state != ProcessState::dead;
    // Named only if this pid is that process here (same start time): a
    // process in another PID namespace records a pid that names another.
    const std::uint64_t start = r.start_time.load(std::memory_order_relaxed);
    if (start != 0 && process_start_time(p.pid) == start) p.name = process_name(p.pid);
    p.attached_unix_ms = r.attached_unix_ms.load(std::memory_order_relaxed);
    p.leases = leases[i];
    out.push_back(p);
  }
  return out;
}

}  // namespace fairlane

namespace fairlane::detail {

std::string_view corruption_name(CorruptWhat w) noexcept {
  switch (w) {
    case CorruptWhat::none: return "none";
    case CorruptWhat::slot_word: return "slot-word";
    case CorruptWhat::slot_record: return "slot-record";
    case CorruptWhat::lane_word: return "lane-word";
    case CorruptWhat::lane_order: return "lane-order";
    case CorruptWhat::ring_cell: return "ring-cell";
    case CorruptWhat::id_index: return "id-index";
    case CorruptWhat::directory: return "lane-directory";
    case CorruptWhat::process: return "process-record";
    case CorruptWhat::header: return "header";
  }
  return "unknown";
}

}  // namespace fairlane::detail
