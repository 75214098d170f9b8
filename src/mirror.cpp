// The mirror: reads a segment's transition log and writes what changed into
// Valkey (include/fairlane/mirror.hpp, docs/mirror.md).
//
// Two threads and a moodycamel queue between them:
//
//   reader   log records -> dedupe -> read the slots and lanes they name ->
//            Batch (upserts, deletions, lane settings) -> queue
//   shipper  queue -> one pipeline per batch (EVALSHA of mirror_scripts.hpp)
//            -> on success, `acked` moves past the batch's records
//
// The reader gives log cells back as soon as it has read their state, so
// the log only fills when the batches in flight reach its size (the reader
// stops reading then): a slow or absent Valkey is felt as a full log, and
// the segment's policy (refuse new work, or drop the mirror) applies.
#include "fairlane/mirror.hpp"

#include <concurrentqueue/blockingconcurrentqueue.h>
#include <hiredis/hiredis.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <charconv>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "clock.hpp"
#include "futex.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "mirror_log.hpp"
#include "retry_codec.hpp"
#include "segment.hpp"
#include "valkey/connection.hpp"
#include "valkey/mirror_scripts.hpp"
#include "valkey/retry_text.hpp"
#include "valkey/scripts.hpp"

namespace fairlane {
using namespace detail;
using valkey::Args;
using valkey::Reply;

namespace {

Error mirror_error(Errc code, std::string message) { return Error{code, 0, std::move(message)}; }

std::string_view reply_text(const redisReply* r) noexcept { return {r->str, r->len}; }

// One job as the reader saw it.
struct JobOp {
  bool forget = false;          // gone from the segment: delete it from Valkey
  std::string id;
  std::string group;
  std::string_view state;       // EchoMQ's names: pending, active, scheduled, dead
  std::uint32_t attempts = 0;
  std::uint64_t when_ms = 0;    // segment clock
  std::uint64_t ready_ms = 0;   // segment clock
  std::string error;
  bool with_payload = false;    // first time this incarnation is written: with its payload and retry policy
  std::string payload;
  std::string retry;            // the job's own retry policy as fl_retry keeps it ('' none)
};

struct LaneOp {
  std::string group;
  std::uint64_t active = 0, limit = 0, weight = 1, served = 0;
  bool paused = false;
};

struct Batch {
  std::uint64_t end_seq = 0;   // `acked` once it lands
  std::uint64_t first_ms = 0;  // segment ms of its oldest record (0: none)
  bool resync = false;         // the whole picture: delete Valkey jobs it lacks
  bool queue_paused = false;
  std::vector<JobOp> jobs;
  std::vector<LaneOp> lanes;
};

enum class Script { jobs, lanes, meta, count_ };

// "host:segment": the owner a mirror writes into meta, which makes the
// keyspace read-only to the Valkey backend (docs/valkey.md).
std::string mirror_owner(const std::string& segment) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "localhost");
  return std::string(host) + ":" + segment;
}

// The segment's settings, kept in meta so a restore recreates it as it was.
// The mirror URL goes without its password (ValkeyUrl::str()).
std::vector<std::pair<std::string, std::string>> segment_settings(const QueueConfig& c) {
  std::vector<std::pair<std::string, std::string>> v;
  auto add = [&](const char* f, std::uint64_t n) { v.emplace_back(f, std::to_string(n)); };
  add("seg_jobs", c.jobs);
  add("seg_lanes", c.lanes);
  add("seg_payload_bytes", c.payload_bytes);
  add("seg_processes", c.processes);
  add("seg_node", c.node);
  add("seg_recovery_ms", c.recovery_ms);
  std::string url;
  if (auto u = ValkeyUrl::parse(c.mirror)) url = u->str();
  v.emplace_back("seg_mirror", url);
  v.emplace_back("seg_durability", std::string(to_string(c.durability)));
  v.emplace_back("seg_on_full", std::string(to_string(c.on_full)));
  add("seg_mirror_log", c.mirror_log);
  add("seg_sync_timeout_ms", c.sync_timeout_ms);
  const RetryPolicy& r = c.default_retry;
  add("seg_retry_max", r.max_attempts);
  if (r.backoff) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%c;%lld;%lld;%.17g;%.17g", r.backoff->kind == Backoff::Kind::fixed ? 'f' : 'e',
                  static_cast<long long>(r.backoff->base.count()), static_cast<long long>(r.backoff->cap.count()),
                  r.backoff->factor, r.backoff->jitter);
    v.emplace_back("seg_retry_backoff", buf);
  } else {
    v.emplace_back("seg_retry_backoff", "");
  }
  return v;
}
// Jobs or lanes per script call.
constexpr std::size_t kPerCall = 128;
// Empty looks, a millisecond apart, before the reader parks.
constexpr int kShortPolls = 20;

// Rings the threads parked on ack_bell (sync enqueuers waiting for their
// acknowledgement, producers waiting for room in the log), all of them, if
// any is counted and a sleep may still be under way. The caller's seq_cst
// store comes first ([S10], [S11]): it pairs with the waiter's count, fence
// and last look.
void ring_ack_bell(MirrorShared& m) noexcept {
  if (m.ack_waiters.load(std::memory_order_seq_cst) > 0 && sleep_may_be_under_way(m.ack_park_until)) {
    m.ack_bell.fetch_add(1, std::memory_order_release);
    futex_wake(&m.ack_bell, INT_MAX);
  }
}

}  // namespace

struct Mirror::Impl {
  MirrorOptions opt;
  Queue queue;
  Segment& s;
  ValkeyUrl url;
  std::string prefix;
  std::vector<std::string> fixed;
  std::string kind;
  std::uint32_t max_payload;
  // Valkey side: who owns the keyspace (meta `owner`, "host:segment") and
  // the segment's settings a restore recreates it with (meta seg_*).
  std::string owner;
  std::vector<std::pair<std::string, std::string>> settings;

  // Reader state.
  std::vector<std::uint64_t> shadow_sf;    // slot -> snowflake last written to Valkey (0: none)
  std::vector<std::uint32_t> shadow_lane;  // slot -> its lane then
  std::unordered_map<std::uint64_t, std::uint32_t> id_slot;  // snowflake -> slot
  std::vector<std::uint8_t> seen_slot, seen_lane;            // dedupe within a batch
  std::uint64_t seq = 0;                   // next record to read
  std::uint64_t skip_until = 0;            // records below this are covered by the last resync
  bool first_resync = true;

  // Shipper state.
  valkey::Client conn;
  std::string shas[std::size_t(Script::count_)];
  std::int64_t clock_offset = 0;           // Valkey ms - segment ms
  std::uint64_t offset_taken_ms = 0;

  moodycamel::BlockingConcurrentQueue<Batch> batches;
  std::mutex inflight_mu;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> inflight;  // (end_seq, first_ms)

  std::atomic<bool> stopping{false}, reader_done{false};
  std::thread reader, shipper;
  mutable std::mutex mu;  // guards ctr
  MirrorCounters ctr;

  Impl(MirrorOptions o, Queue q, ValkeyUrl u)
      : opt(std::move(o)),
        queue(std::move(q)),
        s(QueueAccess::segment(queue)),
        url(std::move(u)),
        prefix(url.prefix()),
        kind(s.h->job_kind, 3),
        max_payload(s.payload_bytes),
        conn(url, opt.valkey) {
    for (auto k : valkey::kFixedKeys) fixed.push_back(prefix + std::string(k));
    owner = mirror_owner(queue.name());
    settings = segment_settings(queue.config());
    shadow_sf.assign(s.jobs, 0);
    shadow_lane.assign(s.jobs, 0);
    seen_slot.assign(s.jobs, 0);
    seen_lane.assign(s.lane_count, 0);
  }

  void event(std::string_view what) {
    if (opt.on_event) opt.on_event(what);
  }
  // ---- reader ---------------------------------------------------------------

  // The state of one slot, read without owning it and checked by reading its
  // word again. False: it is changing right now (mid-transition or torn);
  // the change has a record of its own still to come.
  struct Seen {
    bool live = false;
    std::uint64_t sf = 0;
    std::uint32_t lane = 0;
    std::string group;
    SlotState state = SlotState::free;
    std::uint32_t attempt = 0;
    std::uint64_t when = 0, ready_ms = 0;
    std::string payload, error;
    RetryPolicy retry;
    std::uint32_t copy = kNoSlot;  // an aborted slot's successor: where a reassign moved its job
  };
  bool read_slot(std::uint32_t slot, Seen& out) {
    const Word128 w = slot_load(s, slot);
    SlotState st = SlotWord::state(w);
    if (st == SlotState::free || st == SlotState::aborted) {
      out.live = false;  // no job (an aborted slot is a husk on its way to free)
      if (st == SlotState::aborted) {
        const std::uint32_t c1 = Successor::slot1(SlotWord::when(w));
        if (c1 != 0 && c1 <= s.jobs && c1 - 1 != slot) out.copy = c1 - 1;
      }
      return true;
    }
    if (st == SlotState::admitting) return false;  // its admission has a record of its own still to come
    if (st == SlotState::returning) st = SlotState::pending;  // on its way into its lane
    const SlotRecord& r = s.slot(slot);
    out.live = true;
    out.state = st;
    out.sf = r.sf.load(std::memory_order_acquire) & kMaxSnowflake;
    out.lane = r.lane.load(std::memory_order_relaxed);
    GroupKey g;
    if (!slot_group(s, slot, g)) {
      out.group = std::string(kDefaultGroup);
    } else if (g.kind < kKindCodes) {
      char k[3];
      kind_letters(g.kind, k);
      out.group = BrandedId::make(std::string_view(k, 3), g.sf & kMaxSnowflake).string();
    } else {
      return false;  // a scribbled group: nothing trustworthy to write
    }
    out.attempt = SlotWord::attempt(w);
    out.when = st == SlotState::pending ? 0 : SlotWord::when(w);
    out.ready_ms = r.ready_us.load(std::memory_order_relaxed) / 1000;
    out.payload.assign(reinterpret_cast<const char*>(s.payload(slot)),
                       std::min(r.payload_len.load(std::memory_order_relaxed), s.payload_bytes));
    out.error.assign(r.error, std::min<std::size_t>(r.error_len.load(std::memory_order_relaxed), kErrorBytes));
    out.retry = (r.flags.load(std::memory_order_relaxed) & kSlotHasRetry)
                    ? retry_decode(r.retry.a.load(std::memory_order_relaxed), r.retry.b.load(std::memory_order_relaxed))
                    : RetryPolicy{};
    std::atomic_thread_fence(std::memory_order_acquire);
    return slot_load(s, slot) == w && out.lane < s.lane_count;
  }

  static std::string_view echomq_state(SlotState st) noexcept {
    switch (st) {
      case SlotState::pending: return "pending";
      case SlotState::leased: return "active";
      case SlotState::scheduled: return "scheduled";
      default: return "dead";
    }
  }

  void forget_shadow(std::uint32_t slot, Batch& b) {
    const std::uint64_t old = shadow_sf[slot];
    if (!old) return;
    auto it = id_slot.find(old);
    if (it != id_slot.end() && it->second == slot) {
      // Still this slot's: the job is gone (completed, drained or purged).
      JobOp op;
      op.forget = true;
      op.id = BrandedId::make(kind, old).string();
      b.jobs.push_back(std::move(op));
      id_slot.erase(it);
    }
    mark_lane(shadow_lane[slot], b);
    shadow_sf[slot] = 0;
  }

  void mark_lane(std::uint32_t lane, Batch& b) {
    if (lane >= s.lane_count || seen_lane[lane]) return;
    seen_lane[lane] = 1;
    const Word128 w = lane_load(s, lane);
    if (LaneWord::state(w) != LaneState::live) return;  // reclaimed: its group was idle, with default settings
    LaneOp op;
    op.group = lane == kDefaultLane ? std::string(kDefaultGroup) : lane_group(s, lane).string();
    if (op.group.empty()) return;
    const std::uint64_t st = lane_settings(s, lane);
    op.active = LaneWord::active(w);
    op.limit = Settings::limit(st);
    op.paused = Settings::paused(st);
    op.weight = Settings::weight(st);
    op.served = s.lanes[lane].served.load(std::memory_order_relaxed);
    b.lanes.push_back(std::move(op));
  }

  // A record named this slot: write what it holds now.
  //
  // A reassign's copy is written once its mover has committed it, and the
  // mover logs it only then. A mover stopped between dropping the origin and
  // that commit left the job in no Valkey key: the origin reads as a husk,
  // the copy as an admission still to come. A sync enqueue whose job was
  // moved at once returned durable so, and a mirror started meanwhile
  // skipped the copy in its resync. So a copy its origin names is committed
  // here first, by the move's rule, which any process may apply; and a husk
  // that names a copy has that copy written too. Writing what a slot holds
  // is always right, whatever its successor bits say.
  // A chain of moves (x to n, then n to m) is followed up to kFollow husks.
  static constexpr int kFollow = 8;
  void capture_slot(std::uint32_t slot, Batch& b, bool resync, int follow = kFollow) {
    if (const Word128 w = slot_load(s, slot); named_copy(s, slot, w))
      settle_found(s, slot, s.slot(slot).sf.load(std::memory_order_acquire));
    Seen seen;
    if (!read_slot(slot, seen)) return;
    if (!seen.live) {
      forget_shadow(slot, b);
      if (follow > 0 && seen.copy != kNoSlot) capture_slot(seen.copy, b, resync, follow - 1);
      return;
    }
    if (shadow_sf[slot] != seen.sf) forget_shadow(slot, b);
    auto [it, fresh] = id_slot.try_emplace(seen.sf, slot);
    if (!fresh && it->second != slot) {
      // The id moved (completed, then enqueued again into another slot).
      if (shadow_sf[it->second] == seen.sf) shadow_sf[it->second] = 0;
      it->second = slot;
    }
    JobOp op;
    op.id = BrandedId::make(kind, seen.sf).string();
    op.group = std::move(seen.group);
    op.state = echomq_state(seen.state);
    op.attempts = seen.attempt;
    op.when_ms = seen.when;
    op.ready_ms = seen.ready_ms;
    op.error = std::move(seen.error);
    op.with_payload = resync || shadow_sf[slot] != seen.sf;
    if (op.with_payload) {
      op.payload = std::move(seen.payload);
      op.retry = valkey::encode_policy(seen.retry);
    }
    b.jobs.push_back(std::move(op));
    shadow_sf[slot] = seen.sf;
    shadow_lane[slot] = seen.lane;
    mark_lane(seen.lane, b);
  }

  void finish_batch(Batch& b) {
    std::fill(seen_lane.begin(), seen_lane.end(), 0);
    b.queue_paused = s.h->queue_paused.load(std::memory_order_acquire) != 0;
    if (b.first_ms) {
      // Its records are out of the log but not yet in Valkey: the oldest
      // such record's time is what `inspect` reports the lag from.
      std::lock_guard lk(inflight_mu);
      inflight.emplace_back(b.end_seq, b.first_ms);
      if (inflight.size() == 1) s.h->mirror.inflight_ms.store(b.first_ms, std::memory_order_release);
    }
    batches.enqueue(std::move(b));
  }

  // Everything, from the slots: after a start, a lost record or a Valkey
  // that forgot what it acknowledged.
  void resync() {
    MirrorShared& m = s.h->mirror;
    // Clear the request first: a record lost from here on asks again, and
    // every change before this point is visible to the scan below.
    const std::uint32_t was = m.state.exchange(std::uint32_t(MirrorState::ok), std::memory_order_acq_rel);
    if (was == std::uint32_t(MirrorState::dropped))
      event("the mirror was dropped (its log filled while Valkey was behind); resynchronising everything");
    else if (!first_resync)
      event("a log record was lost; resynchronising everything");
    first_resync = false;
    m.resyncs.fetch_add(1, std::memory_order_relaxed);
    ++ctr_resyncs;
    // Records reserved before this load of head name changes made before
    // it, which the scan below sees: they need not be read again.
    skip_until = m.head.load(std::memory_order_acquire);
    Batch b;
    b.resync = true;
    b.end_seq = std::max(seq, skip_until);
    std::fill(shadow_sf.begin(), shadow_sf.end(), 0);
    id_slot.clear();
    for (std::uint32_t i = 0; i < s.jobs; ++i) {
      FAIRLANE_FAILPOINT("mirror.resync_slot");
      const SlotState st = SlotWord::state(slot_load(s, i));
      // A husk is looked at too: it may name a copy the scan passed while
      // the copy was undecided and not yet named (found in review).
      if (st == SlotState::free) continue;
      capture_slot(i, b, true);
    }
    for (std::uint32_t lane = 0; lane < s.lane_count; ++lane) mark_lane(lane, b);
    finish_batch(b);
  }
  std::atomic<std::uint64_t> ctr_resyncs{0}, ctr_records{0};

  void run_reader() {
    MirrorShared& m = s.h->mirror;
    const std::uint64_t cells = s.log_mask + 1;  // a mirrored segment's log, as bound at open
    seq = m.tail.load(std::memory_order_acquire);
    std::uint64_t hole_since = 0;
    int idle_rounds = 0;
    while (!stopping.load(std::memory_order_acquire)) {
      if (first_resync || m.state.load(std::memory_order_acquire) != std::uint32_t(MirrorState::ok)) {
        resync();
        continue;
      }
      // Back-pressure: at most one log's worth of records in flight (a
      // resync may have acknowledged records not read yet: acked > seq).
      const std::uint64_t acked = m.acked.load(std::memory_order_acquire);
      const std::uint64_t in_flight = acked > seq ? 0 : seq - acked;
      if (in_flight >= cells) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      Batch b;
      std::vector<std::uint32_t> slots;
      std::size_t n = 0;
      const std::size_t room = std::min<std::size_t>(opt.batch, cells - in_flight);
      while (n < room) {
        LogCell& c = s.log[seq & s.log_mask];
        const std::uint64_t st = c.stamp.load(std::memory_order_acquire);
        if (st == seq + 1) {
          const std::uint64_t body = c.body.load(std::memory_order_relaxed);
          const std::uint64_t ms = c.ms.load(std::memory_order_relaxed);
          // Give the cell back for the next lap ([R10] release: after our
          // reads of body and ms).
          c.stamp.store(seq + cells, std::memory_order_release);
          ++seq;
          ++n;
          hole_since = 0;
          if (seq - 1 < skip_until) continue;  // the last resync wrote its state
          if (!b.first_ms) b.first_ms = ms ? ms : 1;
          if (LogBody::seq_low(body) != std::uint32_t(seq - 1)) {
            // A stalled writer's late body landed here: this record is not
            // to be trusted, and the one it replaced is lost.
            log_lost(s, false);
            continue;
          }
          const std::uint32_t idx = LogBody::index(body);
          switch (LogBody::kind(body)) {
            case LogKind::job:
              if (idx < s.jobs && !seen_slot[idx]) {
                seen_slot[idx] = 1;
                slots.push_back(idx);
              }
              break;
            case LogKind::lane:
              mark_lane(idx, b);
              break;
            case LogKind::queue:
              break;  // every batch carries the queue's pause
          }
          continue;
        }
        if (st == seq && m.head.load(std::memory_order_acquire) > seq) {
          // Reserved but not yet written: a writer between two steps, or
          // one that died there.
          const std::uint64_t now = monotonic_us() / 1000;
          if (!hole_since) hole_since = now;
          if (now - hole_since >= std::uint64_t(opt.hole_timeout.count())) {
            std::uint64_t expect = seq;
            if (c.stamp.compare_exchange_strong(expect, seq + cells, std::memory_order_acq_rel)) {
              event("a writer died while logging (a hole in the log); resynchronising everything");
              log_lost(s, false);
              ++seq;
              hole_since = 0;
              continue;
            }
          }
        }
        break;
      }
      if (n) {
        idle_rounds = 0;
        const std::uint64_t was = m.tail.load(std::memory_order_relaxed);  // (ours alone to move)
        // [S11] seq_cst: the cells given back, then the load of ack_waiters;
        // pairs with enqueue_wait's count, fence and look at the log. A log
        // that was full to the refusal line (log_room_for_admission) may
        // have producers parked for room: they are rung now, not when this
        // batch is acknowledged (Valkey may be slow or away, this mirror
        // stopped or killed before it ships). Otherwise nobody waits for
        // these cells, and sync enqueuers parked on the same bell are left
        // to their acknowledgement. (`head` only grows: read late, it can
        // only make the log look fuller, and ring once more.)
        m.tail.store(seq, std::memory_order_seq_cst);
        if (m.head.load(std::memory_order_seq_cst) - was + (s.log_mask + 1) / 8 >= s.log_mask + 1) ring_ack_bell(m);
        ctr_records.fetch_add(n, std::memory_order_relaxed);
        FAIRLANE_FAILPOINT("mirror.records_read");
        for (std::uint32_t slot : slots) {
          seen_slot[slot] = 0;
          capture_slot(slot, b, false);
        }
        b.end_seq = seq;
        finish_batch(b);
        continue;
      }
      // Nothing to read. While records came in the last few milliseconds,
      // look again every millisecond without telling writers (an async
      // writer then never makes a system call); after that, park and let
      // the next writer ring ([S9]). Sync admissions ring either way.
      const std::uint32_t bell = m.bell.load(std::memory_order_acquire);
      const bool park = ++idle_rounds > kShortPolls && !hole_since;
      if (park) m.parked.store(1, std::memory_order_seq_cst);
      const bool ready = s.log[seq & s.log_mask].stamp.load(std::memory_order_seq_cst) == seq + 1 ||
                         m.state.load(std::memory_order_seq_cst) != std::uint32_t(MirrorState::ok);
      if (!ready) futex_wait(&m.bell, bell, park ? std::uint64_t(std::max<std::int64_t>(1, opt.idle_wait.count())) : 1);
      if (park) m.parked.store(0, std::memory_order_relaxed);
    }
    reader_done.store(true, std::memory_order_release);
  }

  // ---- shipper -------------------------------------------------------------

  void load_scripts() {
    static constexpr std::string_view bodies[] = {valkey::kMirrorJobs, valkey::kMirrorLanes, valkey::kMirrorMeta};
    for (std::size_t i = 0; i < std::size_t(Script::count_); ++i) {
      std::string source(valkey::kPrelude);
      source += valkey::kMirrorUnplace;
      source += bodies[i];
      Args a;
      a.add("SCRIPT").add("LOAD").add(source);
      Reply r = conn.command(a);
      if (r->type != REDIS_REPLY_STRING)
        throw BackendError("valkey " + conn.address() + ": cannot load the mirror's scripts: " +
                           std::string(r->type == REDIS_REPLY_ERROR ? reply_text(r.get()) : "unexpected reply"));
      shas[i] = std::string(reply_text(r.get()));
    }
  }

  void take_clock() {
    Args a;
    a.add("TIME");
    Reply r = conn.command(a);
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw BackendError("valkey " + conn.address() + ": bad TIME reply");
    const auto num = [](const redisReply* e) {
      std::int64_t v = 0;
      std::from_chars(e->str, e->str + e->len, v);
      return v;
    };
    const std::int64_t valkey_ms = num(r->element[0]) * 1000 + num(r->element[1]) / 1000;
    clock_offset = valkey_ms - std::int64_t(segment_now_ms(s));
    offset_taken_ms = monotonic_us() / 1000;
  }

  // After a (re)connect: scripts, clock, and whether Valkey still has what it
  // acknowledged (a restart without persistence forgets it).
  void on_connected() {
    load_scripts();
    take_clock();
    Args a;
    a.add("HGET").add(fixed[6]).add("mirror_seq");  // META
    Reply r = conn.command(a);
    std::uint64_t theirs = 0;
    if (r->type == REDIS_REPLY_STRING) std::from_chars(r->str, r->str + r->len, theirs);
    const std::uint64_t ours = s.h->mirror.acked.load(std::memory_order_acquire);
    if (theirs < ours) {
      event("valkey " + conn.address() + " has lost transitions it acknowledged (" + std::to_string(theirs) + " < " +
            std::to_string(ours) + "); resynchronising everything");
      log_lost(s, false);  // asks the reader for a resync
    }
  }

  std::string valkey_ms(std::uint64_t seg_ms) const {
    return std::to_string(std::max<std::int64_t>(0, std::int64_t(seg_ms) + clock_offset));
  }

  // Valkey's job ids that the resync batch does not hold.
  std::vector<std::string> stale_ids(const Batch& b) {
    std::unordered_set<std::string_view> live;
    for (const JobOp& j : b.jobs)
      if (!j.forget) live.insert(j.id);
    std::vector<std::string> out;
    const std::string pattern = prefix + "job:*";
    std::string cursor = "0";
    do {
      Args a;
      a.add("SCAN").add(cursor).add("MATCH").add(pattern).add("COUNT").add("1000");
      Reply r = conn.command(a);
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw BackendError("valkey " + conn.address() + ": bad SCAN reply");
      cursor.assign(reply_text(r->element[0]));
      const redisReply* keys = r->element[1];
      for (std::size_t i = 0; i < keys->elements; ++i) {
        std::string_view key = reply_text(keys->element[i]);
        std::string_view id = key.substr(prefix.size() + 4);
        if (!live.count(id)) out.emplace_back(id);
      }
    } while (cursor != "0");
    return out;
  }

  void add_eval(std::vector<Args>& cmds, Script sc) {
    Args a;
    a.add("EVALSHA").add(shas[std::size_t(sc)]).add_num(fixed.size());
    for (const auto& k : fixed) a.add(k);
    cmds.push_back(std::move(a));
  }

  // One batch, as one pipeline. Throws BackendError on an I/O error;
  // returns false when a script had been forgotten (NOSCRIPT).
  bool ship_once(const Batch& b) {
    if (monotonic_us() / 1000 - offset_taken_ms > 10000) take_clock();
    std::vector<std::string> forget_extra;
    if (b.resync) forget_extra = stale_ids(b);
    std::deque<std::string> keep;  // owned strings the Args view
    std::vector<Args> cmds;
    // Jobs: deletions of what Valkey has and the segment has not, then the
    // batch's jobs in the order they were read, kPerCall to a call.
    struct Entry {
      const JobOp* job;       // null: forget
      std::string_view id;
    };
    std::vector<Entry> entries;
    entries.reserve(forget_extra.size() + b.jobs.size());
    for (const std::string& id : forget_extra) entries.push_back({nullptr, id});
    // A forget that the batch follows with an upsert of the same id is a job
    // that moved (a reassign whose origin was read before its copy), not
    // one that left: it is left out, so the row is rewritten in place and
    // the job's EchoMQ log list, which a forget deletes, stays. A forget
    // after the upsert is a job that left, and is kept.
    std::unordered_set<std::string_view> written_later;
    const std::size_t extra = entries.size();
    for (auto j = b.jobs.rbegin(); j != b.jobs.rend(); ++j) {
      if (!j->forget) written_later.insert(j->id);
      else if (written_later.count(j->id)) continue;
      entries.push_back({j->forget ? nullptr : &*j, j->id});
    }
    std::reverse(entries.begin() + std::ptrdiff_t(extra), entries.end());
    for (std::size_t i = 0; i < entries.size(); i += kPerCall) {
      const std::size_t n = std::min(kPerCall, entries.size() - i);
      add_eval(cmds, Script::jobs);
      Args& a = cmds.back();
      a.add_num(n);
      for (std::size_t k = i; k < i + n; ++k) {
        const JobOp* j = entries[k].job;
        a.add(j ? "u" : "f").add(entries[k].id);
        if (!j) {
          for (int f = 0; f < 9; ++f) a.add("");
          continue;
        }
        keep.push_back(valkey_ms(j->when_ms));
        const std::string& when = keep.back();
        keep.push_back(valkey_ms(j->ready_ms));
        const std::string& ready = keep.back();
        a.add(j->group).add(j->state).add_num(j->attempts).add(when).add(ready).add(j->error)
            .add(j->with_payload ? "1" : "0").add(j->payload).add(j->retry);
      }
    }
    for (std::size_t i = 0; i < b.lanes.size(); i += kPerCall) {
      const std::size_t n = std::min(kPerCall, b.lanes.size() - i);
      add_eval(cmds, Script::lanes);
      cmds.back().add_num(n);
      for (std::size_t k = i; k < i + n; ++k) {
        const LaneOp& l = b.lanes[k];
        cmds.back().add(l.group).add_num(l.active).add_num(l.limit).add_num(l.weight).add(l.paused ? "1" : "0").add_num(l.served);
      }
    }
    add_eval(cmds, Script::meta);
    cmds.back().add_num(b.end_seq).add(b.queue_paused ? "1" : "0").add(kind).add_num(max_payload).add(owner);
    for (const auto& [field, value] : settings) cmds.back().add(field).add(value);

    std::vector<Reply> replies = conn.pipeline(cmds);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const Reply& r = replies[i];
      if (r->type != REDIS_REPLY_ERROR) continue;
      if (reply_text(r.get()).substr(0, 8) == "NOSCRIPT") return false;
      const auto& v = cmds[i].views();
      const std::string_view what = v[1] == shas[0] ? "jobs" : v[1] == shas[1] ? "lanes" : "meta";
      throw BackendError("valkey " + conn.address() + " refused a mirror write (" + std::string(what) +
                         "): " + std::string(reply_text(r.get())));
    }
    std::lock_guard lk(mu);
    ctr.batches++;
    ctr.lanes_written += b.lanes.size();
    for (const Entry& e : entries) (e.job ? ctr.jobs_written : ctr.jobs_deleted)++;
    return true;
  }

  // Ships a batch, riding out outages: reconnect with backoff, send again
  // (every script sets state, so a batch that half-landed is safe to resend).
  void ship(const Batch& b) {
    auto backoff = opt.reconnect_backoff;
    bool reported = false;
    for (;;) {
      try {
        if (ship_once(b)) break;
        // NOSCRIPT: the server restarted or was flushed, and may have lost
        // what it acknowledged, not only the scripts. The connection may
        // have reconnected on its own (Connection::command does, for any
        // command the mirror sends between two batches), so the check a
        // reconnect here makes is made now. Loading the scripts alone
        // shipped on into a server that had forgotten the queue, and the
        // resync never came (MirrorTest.ValkeyRestartWithoutItsDataIsResynchronised
        // failed so in a CI run).
        on_connected();
        continue;
      } catch (const BackendError& e) {
        if (!reported) event(std::string(e.what()) + "; reconnecting");
        reported = true;
      }
      if (stopping.load() && reader_done.load()) {
        // Stopping with Valkey away: what is not acknowledged stays unacked
        // (the next mirror resynchronises).
        return;
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, opt.reconnect_backoff_max);
      try {
        if (std::string why = conn.connect(); why.empty()) {
          on_connected();
          {
            std::lock_guard lk(mu);
            ctr.reconnects++;
          }
          event("reconnected to valkey " + conn.address());
          reported = false;
        }
      } catch (const BackendError&) {
      }
    }
    MirrorShared& m = s.h->mirror;
    // [S10] seq_cst: pairs with the sync enqueuer's announce-then-look.
    m.acked.store(std::max(b.end_seq, m.acked.load(std::memory_order_relaxed)), std::memory_order_seq_cst);
    m.acked_unix_ms.store(unix_ms(), std::memory_order_relaxed);
    // Rings sync enqueuers waiting for their acknowledgement (and any
    // producer parked for room in the log: the reader rang those when it
    // gave the batch's cells back, [S11]).
    ring_ack_bell(m);
    std::lock_guard lk(inflight_mu);
    while (!inflight.empty() && inflight.front().first <= b.end_seq) inflight.pop_front();
    m.inflight_ms.store(inflight.empty() ? 0 : inflight.front().second, std::memory_order_release);
  }

  // Takes every batch waiting (up to 64) and ships runs of them as one
  // pipeline: one round trip for all. A resync batch starts a run of its
  // own (what it lacks is deleted, so nothing older may join it).
  void run_shipper() {
    std::vector<Batch> got(64);
    for (;;) {
      const std::size_t n = batches.wait_dequeue_bulk_timed(got.begin(), got.size(), std::chrono::milliseconds(50));
      for (std::size_t i = 0; i < n;) {
        Batch run = std::move(got[i++]);
        for (; i < n && !got[i].resync; ++i) {
          Batch& next = got[i];
          std::move(next.jobs.begin(), next.jobs.end(), std::back_inserter(run.jobs));
          std::move(next.lanes.begin(), next.lanes.end(), std::back_inserter(run.lanes));
          run.end_seq = next.end_seq;
          run.queue_paused = next.queue_paused;
        }
        ship(run);
      }
      if (n == 0 && stopping.load() && reader_done.load() && batches.size_approx() == 0) break;
    }
  }
};

Mirror::Mirror(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Mirror::~Mirror() { stop(); }

Result<std::unique_ptr<Mirror>> Mirror::start(std::string_view segment, MirrorOptions options) {
  auto q = Queue::open(segment);
  if (!q) return q.error();
  Segment& s = QueueAccess::segment(*q);
  if (!s.log)
    return mirror_error(Errc::invalid_argument, "segment '" + std::string(segment) +
                                                    "' has no mirror: create it with --mirror valkey://HOST:PORT/QUEUE");
  std::string url_text = options.url.empty() ? std::string(s.h->mirror_url, strnlen(s.h->mirror_url, kMirrorUrlBytes))
                                             : options.url;
  auto url = ValkeyUrl::parse(url_text);
  if (!url) return url.error();

  // Take the role: free, or held by a process that is gone (its record
  // dead, or of another incarnation: that mirror died and its record went
  // to another process).
  MirrorShared& m = s.h->mirror;
  const std::uint32_t mine = MirrorRole::make(s.me_index, s.me->incarnation.load(std::memory_order_relaxed));
  std::uint32_t cur = m.proc.load(std::memory_order_acquire);
  for (;;) {
    const std::uint32_t p = MirrorRole::index1(cur);
    if (cur != 0 && cur != mine && p != 0 && p <= s.proc_count) {
      const ProcRecord& r = s.procs[p - 1];
      const std::uint64_t owner = r.owner.load(std::memory_order_acquire);
      if (mirror_role_owner(owner, cur) && owner_alive(s, p - 1, owner, r.start_time.load(std::memory_order_relaxed)))
        return mirror_error(Errc::busy, "segment '" + std::string(segment) + "' is already mirrored by pid " +
                                            std::to_string(owner & 0xFFFFFFFF));
    }
    if (m.proc.compare_exchange_weak(cur, mine, std::memory_order_acq_rel)) break;
  }

  auto impl = std::make_unique<Impl>(std::move(options), std::move(*q), *url);
  try {
    if (std::string why = impl->conn.connect(); !why.empty()) throw BackendError(why);
    impl->on_connected();
  } catch (const BackendError& e) {
    std::uint32_t held = mine;
    m.proc.compare_exchange_strong(held, 0, std::memory_order_acq_rel);
    return mirror_error(Errc::unavailable, e.what());
  }
  impl->event("mirroring segment '" + std::string(segment) + "' to " + url->str());
  Impl* p = impl.get();
  p->reader = std::thread([p] { p->run_reader(); });
  p->shipper = std::thread([p] { p->run_shipper(); });
  return std::unique_ptr<Mirror>(new Mirror(std::move(impl)));
}

void Mirror::stop() {
  if (!impl_) return;
  impl_->stopping.store(true);
  // Wake a parked reader.
  MirrorShared& m = impl_->s.h->mirror;
  m.bell.fetch_add(1, std::memory_order_release);
  futex_wake(&m.bell, INT_MAX);
  if (impl_->reader.joinable()) impl_->reader.join();
  if (impl_->shipper.joinable()) impl_->shipper.join();
  std::uint32_t mine = MirrorRole::make(impl_->s.me_index, impl_->s.me->incarnation.load(std::memory_order_relaxed));
  m.proc.compare_exchange_strong(mine, 0, std::memory_order_acq_rel);
}

MirrorCounters Mirror::counters() const {
  std::lock_guard lk(impl_->mu);
  MirrorCounters c = impl_->ctr;
  c.records = impl_->ctr_records.load();
  c.resyncs = impl_->ctr_resyncs.load();
  return c;
}

}  // namespace fairlane
