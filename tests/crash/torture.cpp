// fairlane_torture: producers and consumers SIGKILLed at random moments, and
// SIGSTOPped at random moments for random lengths, and a check afterwards
// that the queue kept every promise it made to them (the crash-safety issue's
// "random kills" run, docs/design.md section 5, "Recovery"; the stops are issue 13).
//
// With --churn the producers also enqueue on 24 groups that own no lane
// records of their own: 28 groups share 12 records, so lanes go idle, are
// given back and taken by other groups, producers are told `lanes_full` and
// wait for a lane, and retries come due for groups whose lane is gone, all
// under the same kills and stops (design.md section 4, "Tenants come and
// go"). With --controls a controller process, killed and stopped like the
// others, changes the plain lanes' and churn groups' settings (pause,
// resume, weight, limit) and now and then pauses the whole queue; the
// supervisor puts back what a killed one left before the consumers' last
// phase; each change that answers ok is read back from a snapshot. With
// --mix producers also enqueue in batches, and consumers claim in batches
// and lane batches, complete in batches, release or extend some leases (a
// release's R line, written before the call, allows one more delivery
// under its attempt unless the call answers stale or gone), and now and
// then hold a brief lease past its end. Every job released or failed for a
// retry must be delivered again. The run fails unless it saw lanes given
// back and `lanes_full` answered (--churn), changes made (--controls), and
// batch calls and releases made (--mix). In every mode the pinned lanes
// must keep their settings, nobody may meet corruption, and no lane record
// may leak.
//
// A single-threaded supervisor forks P producers and C consumers (fork, no
// exec: single-threaded, so fork is safe also under TSan). Each child opens
// its own Queue handle and never touches the supervisor's; it ends only by a
// signal (our SIGKILL, its watchdog alarm, or the supervisor's death through
// PR_SET_PDEATHSIG) or by _exit, never through the supervisor's destructors.
// The supervisor then repeats: sleep 2-25 ms (sampling the lanes' active
// counts against their limits meanwhile), SIGKILL a random child, reap it,
// fork a replacement of the same role.
//
// Alongside the kills (unless --no-stops), every 5-40 ms it SIGSTOPs a random
// running child, at most two at a time, and SIGCONTs it after a random hold:
// 1-50 ms mostly, 500-1200 ms (beyond the 500 ms recovery bound) or
// 2000-3000 ms (beyond the 2 s lease) now and then. A stopped child may also
// be the next one killed. A stopped process is alive: the others must go on
// without it (docs/design.md section 6). How well they did is measured, not
// asserted (speed is never asserted): each child publishes in a shared block
// when its current queue call started; the longest call of a process that
// was not itself stopped meanwhile (from the child's own timing, and from the
// supervisor's samples of calls still in progress) is printed with the stop
// and kill counts. claim_wait parks up to 100 ms by design: its figure is the
// time beyond that.
//
// Every child records what the queue told it in its own log, opened
// O_APPEND and written one line per write(2), so a kill loses at most the
// line being written (a truncated last line is ignored when read):
//
//   producer   A <id>            enqueue returned `enqueued` (acknowledged)
//   consumer   T <id> <attempt> <token>
//                                claimed, written before complete or fail
//              R <id> <attempt>  about to release the lease (--mix)
//              r <id> <attempt>  release returned ok (the job is owed a delivery)
//              C <id> <attempt>  complete returned ok
//              F <id> <attempt>  fail returned retrying
//              S <id> <attempt>  complete/fail/release returned stale (the lease was taken back)
//              G <id> <attempt>  complete/fail/release returned gone (a redelivery completed it)
//   any        X <what>          the queue broke a promise (a violation)
//
// After the kills: producers are killed, consumers run until every
// acknowledged id has a T line, are killed, and the supervisor drains what
// is left itself (its claims run the sweeps that return dead holders'
// leases). Then a fairness run on fresh lanes of the same segment, and the
// checks: every acknowledged job was delivered (or dead-lettered), none was
// completed twice under a valid token nor handed out twice under one token,
// active never above a limit at a sampled instant, the queue empty, fsck
// clean, round robin intact. Each failure counts one violation and says
// which job or lane; the run exits 0 only with none.
//
// A kill inside an operation is recovered by the survivors' own claims, step
// by step, beside everyone else's work (docs/design.md, "Recovery"); the
// summary line counts the steps finished for the dead. Without that recovery
// a kill there strands a job, a ring token or an active count, and the run
// fails within its deadlines, saying what it was still waiting for.
#include <fairlane/detail/layout.hpp>
#include <fairlane/ids.hpp>
#include <fairlane/queue.hpp>
#include <fairlane/result.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using fairlane::AckStatus;
using fairlane::BrandedId;
using fairlane::EnqueueItem;
using fairlane::EnqueueStatus;
using fairlane::FailOptions;
using fairlane::FailStatus;
using fairlane::JobFilter;
using fairlane::JobState;
using fairlane::LaneStatus;
using fairlane::Lease;
using fairlane::Queue;
using fairlane::QueueOptions;
using fairlane::Snapshot;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- the segment and its lanes ------------------------------------------------

constexpr std::uint32_t kJobs = 4096;
// 8 torture lanes + 4 fairness lanes, and (--churn) 24 groups that come and
// go through the records the torture lanes leave over.
constexpr std::uint32_t kLaneCapacity = 16;
constexpr std::uint32_t kPayloadBytes = 32;
constexpr std::string_view kJobKind = "JOB";

// The torture lanes: three with a concurrency limit (the property sampled
// during the kills), one of weight 2 (its token sits in the hold slot, a
// structure a killed claimer can also take with it), four plain ones.
struct LaneSpec {
  std::uint32_t limit;  // 0: none
  std::uint32_t weight;
};
constexpr std::array<LaneSpec, 8> kLanes = {{{1, 1}, {2, 1}, {3, 1}, {0, 2}, {0, 1}, {0, 1}, {0, 1}, {0, 1}}};
constexpr std::uint32_t kTortureLanes = kLanes.size();
// The first four carry settings from the start (so they keep their lanes);
// the other four are plain, and only those are --controls' to change.
constexpr std::uint32_t kPinnedLanes = 4;
static_assert(kLanes[kPinnedLanes].limit == 0 && kLanes[kPinnedLanes].weight == 1 && kLanes[kTortureLanes - 1].weight == 1);
constexpr std::uint32_t kFairLanes = 4;
// --churn: groups "CHN00000000001".. that take lanes only while they have
// work. With the four limited or weighted torture lanes pinned (a lane
// with settings other than the defaults is never idle) and the four plain
// ones competing too, 28 groups share 12 lane records: producers meet
// `lanes_full` and wait for a lane, idle lanes are given back and taken for
// other groups, and retries (fail with a delay) come due for groups whose
// lane is gone, all while children are killed and stopped.
constexpr std::uint32_t kChurnGroups = 24;
constexpr std::uint32_t kAllLanes = kTortureLanes + kFairLanes + kChurnGroups;

// Lane index i: 0..7 are the torture lanes "LNE00000000001".. (the
// multi-process tests' naming), 8..11 the fairness lanes "FAR00000000001"..,
// never used before the fairness run, 12..35 the churn groups.
constexpr std::uint32_t kChurnFirst = kTortureLanes + kFairLanes;
BrandedId lane_group(std::uint32_t i) {
  if (i < kTortureLanes) return BrandedId::make("LNE", i + 1);
  if (i < kChurnFirst) return BrandedId::make("FAR", i - kTortureLanes + 1);
  return BrandedId::make("CHN", i - kChurnFirst + 1);
}
std::optional<std::uint32_t> lane_index(const BrandedId& g) {
  const std::uint64_t n = g.snowflake();
  if (g.kind() == "LNE" && n >= 1 && n <= kTortureLanes) return std::uint32_t(n - 1);
  if (g.kind() == "FAR" && n >= 1 && n <= kFairLanes) return std::uint32_t(kTortureLanes + n - 1);
  if (g.kind() == "CHN" && n >= 1 && n <= kChurnGroups) return std::uint32_t(kChurnFirst + n - 1);
  return std::nullopt;
}
bool is_fair_lane(std::uint32_t i) { return i >= kTortureLanes && i < kChurnFirst; }

constexpr std::uint32_t kLeaseMs = 2000;
constexpr milliseconds kClaimTimeout{100};
constexpr int kFailPercent = 10;
constexpr std::uint32_t kMaxAttempts = 1000;  // never reached: no job may be dead-lettered

// A payload names its job and lane and is padded with a byte derived from
// the id, so a torn, mixed-up or misrouted payload is caught on claim.
std::string make_payload(const BrandedId& id, std::uint32_t lane) {
  char head[48];
  const int n = std::snprintf(head, sizeof head, "%s L%02u ", id.string().c_str(), lane);
  std::string p(head, static_cast<std::size_t>(n));
  p.append(kPayloadBytes - p.size(), static_cast<char>('a' + id.snowflake() % 26));
  return p;
}

// Empty when the lease's payload is the one its producer wrote for its lane.
std::string check_payload(const Lease& l) {
  unsigned lane = 0;
  if (l.payload.size() < fairlane::kIdLength + 3 ||
      std::sscanf(l.payload.c_str() + fairlane::kIdLength, " L%u", &lane) != 1 ||
      lane >= kAllLanes)
    return "unreadable payload '" + l.payload + "'";
  if (l.payload != make_payload(l.id, lane)) return "payload '" + l.payload + "' is not the one enqueued";
  if (l.group != lane_group(lane))
    return "delivered from lane " + l.group.string() + ", enqueued on " + lane_group(lane).string();
  return {};
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- progress: how long each child's queue calls take ---------------------------

std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ULL + std::uint64_t(ts.tv_nsec);
}

// One per child ever spawned, in a MAP_SHARED | MAP_ANONYMOUS block made
// before the first fork. Written by its child, read by the supervisor.
enum class CallKind : std::uint32_t { op = 1, wait = 2 };
struct alignas(64) ProgressSlot {
  std::atomic<std::uint64_t> call_start_ns;  // 0: not inside a queue call
  std::atomic<std::uint32_t> call_kind;      // CallKind of the call in progress
  std::atomic<std::uint64_t> longest_op_ns;   // longest enqueue/mint/complete/fail not spanning its own stop
  std::atomic<std::uint64_t> longest_wait_ns; // longest claim_wait beyond its timeout, likewise
  std::atomic<std::uint64_t> calls;
  std::atomic<std::uint64_t> lanes_full;      // a producer's enqueue answers `lanes_full` (--churn)
  std::atomic<std::uint64_t> controls;        // a controller's changes made (--controls)
  std::atomic<std::uint64_t> batches;         // batch calls made (--mix)
};

// Set by the SIGCONT handler: a call during which it changed spanned a stop
// of this very process, and its length says nothing about the others.
volatile std::sig_atomic_t g_continued = 0;
extern "C" void on_sigcont(int) { g_continued = g_continued + 1; }

// Times one queue call of a child into its slot (none: not timed).
class CallTimer {
 public:
  explicit CallTimer(ProgressSlot* slot) : slot_(slot) {}
  template <class F>
  auto operator()(CallKind kind, F&& call) {
    if (slot_ == nullptr) return call();
    const std::sig_atomic_t conts = g_continued;
    const std::uint64_t t0 = mono_ns();
    slot_->call_kind.store(std::uint32_t(kind), std::memory_order_relaxed);
    slot_->call_start_ns.store(t0, std::memory_order_release);
    auto r = call();
    const std::uint64_t took = mono_ns() - t0;
    slot_->call_start_ns.store(0, std::memory_order_release);
    slot_->calls.fetch_add(1, std::memory_order_relaxed);
    if (g_continued == conts) {
      std::atomic<std::uint64_t>& longest = kind == CallKind::op ? slot_->longest_op_ns : slot_->longest_wait_ns;
      const std::uint64_t v = kind == CallKind::op ? took : (took > kWaitNs ? took - kWaitNs : 0);
      if (v > longest.load(std::memory_order_relaxed)) longest.store(v, std::memory_order_relaxed);
    }
    return r;
  }
  static constexpr std::uint64_t kWaitNs = std::chrono::nanoseconds(kClaimTimeout).count();

 private:
  ProgressSlot* slot_;
};

// ---- children -------------------------------------------------------------------

enum class Role { producer, consumer, controller };
const char* role_name(Role r) {
  return r == Role::producer ? "producer" : r == Role::consumer ? "consumer" : "controller";
}

struct ChildSpec {
  Role role;
  std::string segment;
  std::string log_path;
  std::uint64_t seed;
  unsigned watchdog_s;
  ProgressSlot* progress;  // null: not timed
  bool churn;              // producers enqueue on the churn groups too
  bool mix;                // batches, releases and extends too
};

// One log line, one write(2): with O_APPEND a kill leaves either the whole
// line or (rarely) a truncated last line, never a line torn in the middle of
// the file.
__attribute__((format(printf, 2, 3))) void put_line(int fd, const char* fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n <= 0) return;
  if (n > static_cast<int>(sizeof buf) - 2) n = sizeof buf - 2;
  if (buf[n - 1] != '\n') buf[n++] = '\n';
  for (ssize_t w; (w = ::write(fd, buf, static_cast<std::size_t>(n))) < 0 && errno == EINTR;) {
  }
}

class ChildLog {
 public:
  explicit ChildLog(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) {
    if (fd_ < 0) {
      std::fprintf(stderr, "fairlane_torture[%d]: cannot open %s: %s\n", int(::getpid()), path.c_str(),
                   std::strerror(errno));
      ::_exit(4);
    }
  }
  int fd() const { return fd_; }

  // A broken promise: logged for the supervisor to count, the first few
  // also on stderr. The pause keeps a persistent failure from flooding the log.
  void violation(const std::string& what) {
    put_line(fd_, "X %s", what.c_str());
    if (++reported_ <= 5) std::fprintf(stderr, "fairlane_torture[%d]: %s\n", int(::getpid()), what.c_str());
    std::this_thread::sleep_for(milliseconds(1));
  }

 private:
  int fd_;
  int reported_ = 0;
};

// The parked threads the process records still count (ProcRecord::parked:
// claim_wait; room_parked and lane_parked: enqueue_wait, for a slot or a
// lane; one parked for a lane is in both), read through a read-only mapping
// of the segment of its own. The snapshot's counts read 0 once every
// sleep's end has passed, whatever the records hold; these do not.
struct RecordCounts {
  std::uint64_t consumers = 0, producers = 0;
  bool read = false;
};
RecordCounts record_counts(const std::string& name) {
  RecordCounts c;
  const int fd = ::shm_open(("/" + name).c_str(), O_RDONLY, 0);
  if (fd < 0) return c;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  void* p = size > 0 ? ::mmap(nullptr, std::size_t(size), PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return c;
  const auto* h = static_cast<const fairlane::detail::Header*>(p);
  const std::uint64_t end = h->procs_off + std::uint64_t(h->proc_capacity) * sizeof(fairlane::detail::ProcRecord);
  if (std::uint64_t(size) >= sizeof(fairlane::detail::Header) && end <= std::uint64_t(size)) {
    const auto* procs =
        reinterpret_cast<const fairlane::detail::ProcRecord*>(static_cast<const char*>(p) + h->procs_off);
    for (std::uint32_t i = 0; i < h->proc_capacity; ++i) {
      c.consumers += procs[i].parked.load(std::memory_order_relaxed) & 0xFFFFFFFF;
      c.producers += procs[i].room_parked.load(std::memory_order_relaxed) & 0xFFFFFFFF;
      c.producers += procs[i].lane_parked.load(std::memory_order_relaxed) & 0xFFFFFFFF;
    }
    c.read = true;
  }
  ::munmap(p, std::size_t(size));
  return c;
}

Queue attach_or_exit(const std::string& name) {
  auto r = Queue::open(name);
  if (!r.ok()) {
    std::fprintf(stderr, "fairlane_torture[%d]: open %s: %s\n", int(::getpid()), name.c_str(),
                 r.error().message.c_str());
    ::_exit(4);
  }
  return std::move(r.value());
}

// The log line of an acknowledgement's answer (C, S, G), or a violation.
void log_ack(ChildLog& log, const char* call, const Lease& l, AckStatus st) {
  const std::string id = l.id.string();
  switch (st) {
    case AckStatus::ok: put_line(log.fd(), "C %s %u", id.c_str(), l.attempt); break;
    case AckStatus::stale: put_line(log.fd(), "S %s %u", id.c_str(), l.attempt); break;
    case AckStatus::gone: put_line(log.fd(), "G %s %u", id.c_str(), l.attempt); break;
    case AckStatus::read_only: log.violation(std::string(call) + " " + id + " -> read_only"); break;  // (only requeue_dead says it)
    case AckStatus::corrupt:
      log.violation(std::string(call) + " " + id + " attempt " + std::to_string(l.attempt) + " -> corrupt");
      break;
  }
}

[[noreturn]] void producer_main(const ChildSpec& spec) {
  Queue q = attach_or_exit(spec.segment);
  ChildLog log(spec.log_path);
  std::mt19937_64 rng(spec.seed);
  CallTimer timed(spec.progress);
  // Producers of odd seed wait out a full queue parked in enqueue_wait
  // (so that kills land on parked producers too); the others back off.
  const bool parks = (spec.seed & 1) != 0;
  // With churn, the torture lanes and the churn groups alike.
  const auto pick_lane = [&] {
    std::uint32_t lane = static_cast<std::uint32_t>(rng() % (spec.churn ? kTortureLanes + kChurnGroups : kTortureLanes));
    return lane >= kTortureLanes ? lane + kFairLanes : lane;
  };
  // One job, whose first answer was `st`, offered again until it is taken
  // (or abandoned on an answer that is a broken promise).
  const auto settle = [&](std::uint32_t lane, const BrandedId& id, const std::string& payload, EnqueueStatus st) {
    for (;;) {
      if (st == EnqueueStatus::enqueued) {
        put_line(log.fd(), "A %s", id.string().c_str());
        return;
      }
      // Without churn, 8 groups never fill the lane records: `lanes_full`
      // is a broken promise then. Nor with it for a pinned lane: a group
      // that holds its lane for good is never a new group.
      if (st != EnqueueStatus::full && !(spec.churn && lane >= kPinnedLanes && st == EnqueueStatus::lanes_full)) {
        // Nothing was written (enqueue's contract); the id is abandoned.
        log.violation("enqueue " + id.string() + " on " + lane_group(lane).string() + " -> " +
                      std::string(fairlane::to_string(st)));
        return;
      }
      // The consumers will make room (a slot; a lane, once some group's
      // work is done); a short back-off keeps a full queue from being a
      // busy loop on two cores.
      if (st == EnqueueStatus::lanes_full && spec.progress != nullptr)
        spec.progress->lanes_full.fetch_add(1, std::memory_order_relaxed);
      if (!parks) std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 200));
      st = parks ? timed(CallKind::wait, [&] { return q.enqueue_wait(lane_group(lane), id, payload, kClaimTimeout); })
                 : timed(CallKind::op, [&] { return q.enqueue(lane_group(lane), id, payload); });
    }
  };
  std::vector<std::uint32_t> lanes;
  std::vector<BrandedId> ids;
  std::vector<std::string> payloads;
  std::vector<EnqueueItem> items;
  std::vector<EnqueueStatus> statuses;
  for (;;) {
    // --mix: one offer in four is a batch of 2-8 jobs (1 is a single
    // enqueue), each on a lane drawn on its own, each with its own answer.
    // The A lines of what it took are written first (a kill while a later
    // item waits for room must not cost an earlier one its line); what it
    // did not take is then offered again one by one.
    const std::size_t n = spec.mix && rng() % 4 == 0 ? 1 + rng() % 8 : 1;
    lanes.clear();
    ids.clear();
    payloads.clear();
    for (std::size_t i = 0; i < n; ++i) {
      lanes.push_back(pick_lane());
      ids.push_back(timed(CallKind::op, [&] { return q.mint(); }));
      payloads.push_back(make_payload(ids.back(), lanes.back()));
    }
    if (n == 1) {
      settle(lanes[0], ids[0], payloads[0],
             timed(CallKind::op, [&] { return q.enqueue(lane_group(lanes[0]), ids[0], payloads[0]); }));
      continue;
    }
    items.clear();
    for (std::size_t i = 0; i < n; ++i) items.push_back(EnqueueItem{lane_group(lanes[i]), ids[i], payloads[i], {}});
    statuses.assign(n, EnqueueStatus::corrupt);
    const std::size_t took = timed(CallKind::op, [&] { return q.enqueue_batch(items, statuses); });
    std::size_t counted = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (statuses[i] == EnqueueStatus::enqueued) {
        put_line(log.fd(), "A %s", ids[i].string().c_str());
        ++counted;
      }
    if (took != counted)
      log.violation("enqueue_batch of " + std::to_string(n) + " said " + std::to_string(took) + " enqueued, its statuses " +
                    std::to_string(counted));
    for (std::size_t i = 0; i < n; ++i)
      if (statuses[i] != EnqueueStatus::enqueued) settle(lanes[i], ids[i], payloads[i], statuses[i]);
    if (spec.progress != nullptr) spec.progress->batches.fetch_add(1, std::memory_order_relaxed);
  }
}

// A consumer's way out of one lease: fail (kFailPercent), or with --mix a
// release (the job back at once, its attempt given back) or an extend
// before the complete; else complete. Completes may be left to a batch
// (`batched`: the caller completes it with complete_batch and logs it).
void settle_lease(Queue& q, ChildLog& log, std::mt19937_64& rng, CallTimer& timed, const Lease& l, bool mix,
                  bool& batched) {
  const std::string id = l.id.string();
  batched = false;
  const int roll = static_cast<int>(rng() % 100);
  if (roll < kFailPercent) {
    FailOptions fo;
    fo.delay_ms = rng() % 4;  // 0: straight back to the lane; else via scheduled and a sweep's promotion
    fo.max_attempts = kMaxAttempts;
    fo.error = "torture";
    switch (timed(CallKind::op, [&] { return q.fail(l.id, l.token, fo); })) {
      case FailStatus::retrying: put_line(log.fd(), "F %s %u", id.c_str(), l.attempt); break;
      case FailStatus::stale: put_line(log.fd(), "S %s %u", id.c_str(), l.attempt); break;
      case FailStatus::gone: put_line(log.fd(), "G %s %u", id.c_str(), l.attempt); break;
      case FailStatus::dead:
        log.violation("fail " + id + " attempt " + std::to_string(l.attempt) + " dead-lettered below max_attempts " +
                      std::to_string(kMaxAttempts));
        break;
      case FailStatus::read_only: log.violation("fail " + id + " -> read_only"); break;  // (a member's)
      case FailStatus::corrupt:  // nobody scribbles here: the queue broke its own structures
        log.violation("fail " + id + " attempt " + std::to_string(l.attempt) + " -> corrupt");
        break;
    }
    return;
  }
  if (mix && roll < kFailPercent + 5) {
    // R before the call: the next delivery of this attempt is the release's
    // (a kill after the call and before its line would leave it unexplained);
    // r after it returned ok (the job is owed a delivery again), S or G if
    // it did not happen (the R allows nothing then).
    put_line(log.fd(), "R %s %u", id.c_str(), l.attempt);
    const AckStatus st = timed(CallKind::op, [&] { return q.release(l.id, l.token); });
    if (st == AckStatus::ok)
      put_line(log.fd(), "r %s %u", id.c_str(), l.attempt);
    else if (st == AckStatus::stale || st == AckStatus::gone)
      put_line(log.fd(), "%c %s %u", st == AckStatus::stale ? 'S' : 'G', id.c_str(), l.attempt);
    else
      log.violation("release " + id + " attempt " + std::to_string(l.attempt) + " -> " + std::string(fairlane::to_string(st)));
    return;
  }
  if (mix && roll < kFailPercent + 10) {
    // An extend that says ok moved the deadline to at least lease_ms past
    // the time before the call (the segment's clock), unless the lease has
    // ended since (another answer then, or the job moved on).
    const std::uint64_t before = q.now_ms();
    const AckStatus st = timed(CallKind::op, [&] { return q.extend(l.id, l.token, kLeaseMs); });
    if (st == AckStatus::ok) {
      const auto j = q.job(l.id);
      if (j && j->state == JobState::leased && j->token == l.token && j->when_ms < before + kLeaseMs)
        log.violation("extend " + id + " said ok, its deadline is " + std::to_string(j->when_ms) + ", not " +
                      std::to_string(before + kLeaseMs) + " or later");
    } else if (st != AckStatus::stale && st != AckStatus::gone) {
      log.violation("extend " + id + " attempt " + std::to_string(l.attempt) + " -> " + std::string(fairlane::to_string(st)));
    }
  }
  if (mix && rng() % 2 == 0) {
    batched = true;
    return;
  }
  log_ack(log, "complete", l, timed(CallKind::op, [&] { return q.complete(l.id, l.token); }));
}

[[noreturn]] void consumer_main(const ChildSpec& spec) {
  Queue q = attach_or_exit(spec.segment);
  ChildLog log(spec.log_path);
  std::mt19937_64 rng(spec.seed);
  CallTimer timed(spec.progress);
  std::vector<Lease> leases(8);
  std::vector<Lease> to_complete;
  std::vector<AckStatus> statuses;
  enum class Claim { single, batch, lane_batch };
  for (;;) {
    // --mix: a claim in five is a batch, a claim in five a lane batch
    // (neither waits: an empty answer falls back to claim_wait); and one
    // single claim in 200 takes a lease of 5-50 ms and holds it 0-60 ms
    // before its acknowledgement, so that acknowledgements and extends race
    // the lease's expiry.
    std::size_t got = 0;
    const unsigned roll = spec.mix ? static_cast<unsigned>(rng() % 5) : 0;
    const Claim kind = roll == 3 ? Claim::batch : roll == 4 ? Claim::lane_batch : Claim::single;
    if (kind != Claim::single) {
      const std::size_t want = 1 + rng() % leases.size();
      const std::span<Lease> out(leases.data(), want);
      got = timed(CallKind::op,
                  [&] { return kind == Claim::batch ? q.claim_batch(out, kLeaseMs) : q.claim_lane_batch(out, kLeaseMs); });
      if (got > want) {
        log.violation("a claim batch of " + std::to_string(want) + " said it took " + std::to_string(got));
        got = want;
      }
      if (spec.progress != nullptr) spec.progress->batches.fetch_add(1, std::memory_order_relaxed);
    }
    std::uint64_t hold_ms = 0;
    if (got == 0) {
      const bool brief = spec.mix && rng() % 200 == 0;
      const std::uint32_t lease_ms = brief ? static_cast<std::uint32_t>(5 + rng() % 46) : kLeaseMs;
      if (brief) hold_ms = rng() % 61;
      if (!timed(CallKind::wait, [&] { return q.claim_wait(leases[0], lease_ms, kClaimTimeout); })) continue;
      got = 1;
    }
    // T before the ack: a kill after the ack but before its own line still
    // leaves this job accounted for.
    for (std::size_t i = 0; i < got; ++i) {
      const Lease& l = leases[i];
      if (const std::string bad = check_payload(l); !bad.empty()) log.violation("claim of " + l.id.string() + ": " + bad);
      if (kind == Claim::lane_batch && l.group != leases[0].group)
        log.violation("a lane batch mixed lanes: " + leases[0].group.string() + " and " + l.group.string());
      put_line(log.fd(), "T %s %u %llu", l.id.string().c_str(), l.attempt,
               static_cast<unsigned long long>(l.token.value));
    }
    if (hold_ms != 0) std::this_thread::sleep_for(milliseconds(hold_ms));
    to_complete.clear();
    for (std::size_t i = 0; i < got; ++i) {
      bool batched = false;
      settle_lease(q, log, rng, timed, leases[i], spec.mix, batched);
      if (batched) to_complete.push_back(leases[i]);
    }
    if (to_complete.empty()) continue;
    statuses.assign(to_complete.size(), AckStatus::corrupt);
    const std::size_t done = timed(CallKind::op, [&] { return q.complete_batch(to_complete, statuses); });
    std::size_t ok = 0;
    for (std::size_t i = 0; i < to_complete.size(); ++i) {
      ok += statuses[i] == AckStatus::ok;
      log_ack(log, "complete_batch", to_complete[i], statuses[i]);
    }
    if (done != ok)
      log.violation("complete_batch said " + std::to_string(done) + " completed, its statuses " + std::to_string(ok));
  }
}

// The lanes a controller may change (--controls): the plain torture lanes,
// and the churn groups with --churn. Never the pinned ones (their limits are
// sampled) nor the fairness lanes.
std::uint32_t controlled_lanes(bool churn) { return kTortureLanes - kPinnedLanes + (churn ? kChurnGroups : 0); }
std::uint32_t controlled_lane(std::uint32_t k) {
  return k < kTortureLanes - kPinnedLanes ? kPinnedLanes + k : kChurnFirst + (k - (kTortureLanes - kPinnedLanes));
}

// --controls: pauses, resumes, weights and limits of random lanes, and now
// and then a pause of the whole queue, a few milliseconds apart. Each call
// must answer ok (or, with churn, lanes_full: naming a group that has no
// lane takes one). Killed like the others, it leaves its settings behind;
// the supervisor puts them back to the defaults before the consumers'
// last phase.
[[noreturn]] void controller_main(const ChildSpec& spec) {
  Queue q = attach_or_exit(spec.segment);
  ChildLog log(spec.log_path);
  std::mt19937_64 rng(spec.seed);
  CallTimer timed(spec.progress);
  // An answer must be ok; with churn, a call that makes a lane for a group
  // that has none (`creates`) may also find every record in use.
  const auto check = [&](const char* what, const BrandedId& g, LaneStatus st, bool creates) {
    if (st == LaneStatus::ok || (spec.churn && creates && st == LaneStatus::lanes_full)) return st == LaneStatus::ok;
    log.violation(std::string(what) + " " + g.string() + " -> " + std::string(fairlane::to_string(st)));
    return false;
  };
  // What an ok answer did, read back: only one controller runs at a time,
  // and a lane with settings is never given back, so the lane is as the
  // call left it (or, back to the defaults, gone).
  const auto lane_now = [&](const BrandedId& g) -> std::optional<fairlane::LaneInfo> {
    for (const auto& li : q.snapshot().lanes)
      if (li.group == g) return li;
    return std::nullopt;
  };
  const auto expect = [&](const char* what, const BrandedId& g, bool holds, const std::optional<fairlane::LaneInfo>& li) {
    if (holds) return;
    log.violation(std::string(what) + " " + g.string() + " said ok, and its lane is " +
                  (li ? "paused " + std::to_string(li->paused) + ", weight " + std::to_string(li->weight) + ", limit " +
                            std::to_string(li->limit)
                      : std::string("gone")));
  };
  for (;;) {
    const BrandedId g = lane_group(controlled_lane(static_cast<std::uint32_t>(rng() % controlled_lanes(spec.churn))));
    const unsigned what = static_cast<unsigned>(rng() % 20);
    if (what < 8) {  // back to the defaults (none of these makes a lane)
      if (check("resume", g, timed(CallKind::op, [&] { return q.resume(g); }), false) &
          check("set_weight 1", g, timed(CallKind::op, [&] { return q.set_weight(g, 1); }), false) &
          check("clear_limit", g, timed(CallKind::op, [&] { return q.clear_limit(g); }), false)) {
        const auto li = lane_now(g);
        expect("back to the defaults", g, !li || (!li->paused && li->weight == 1 && li->limit == 0), li);
      }
    } else if (what < 12) {
      if (check("pause", g, timed(CallKind::op, [&] { return q.pause(g); }), true)) {
        const auto li = lane_now(g);
        expect("pause", g, li && li->paused, li);
      }
    } else if (what < 15) {
      const auto w = static_cast<std::uint32_t>(2 + rng() % 3);
      if (check("set_weight", g, timed(CallKind::op, [&] { return q.set_weight(g, w); }), true)) {
        const auto li = lane_now(g);
        expect("set_weight", g, li && li->weight == w, li);
      }
    } else if (what < 19) {
      const auto n = static_cast<std::uint32_t>(1 + rng() % 3);
      if (check("set_limit", g, timed(CallKind::op, [&] { return q.set_limit(g, n); }), true)) {
        const auto li = lane_now(g);
        expect("set_limit", g, li && li->limit == n, li);
      }
    } else {
      check("pause_all", g, timed(CallKind::op, [&] { return q.pause_all(); }), false);
      if (!q.snapshot().paused) log.violation("pause_all said ok, and the queue is not paused");
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      check("resume_all", g, timed(CallKind::op, [&] { return q.resume_all(); }), false);
      if (q.snapshot().paused) log.violation("resume_all said ok, and the queue is paused");
    }
    if (spec.progress != nullptr) spec.progress->controls.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 3000));
  }
}

[[noreturn]] void run_child(const ChildSpec& spec, pid_t supervisor) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the supervisor
  if (::getppid() != supervisor) ::_exit(126);
  ::alarm(spec.watchdog_s);  // nor hang past the run's last deadline
  struct sigaction sa {};
  sa.sa_handler = on_sigcont;
  sa.sa_flags = SA_RESTART;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCONT, &sa, nullptr);
  try {
    if (spec.role == Role::producer) producer_main(spec);
    if (spec.role == Role::controller) controller_main(spec);
    consumer_main(spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fairlane_torture[%d]: %s: %s\n", int(::getpid()), role_name(spec.role), e.what());
  } catch (...) {
  }
  ::_exit(5);
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    const int sig = WTERMSIG(st);
    std::string s = "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    if (sig == SIGALRM) s += ": its watchdog";
    return s;
  }
  return "status " + std::to_string(st);
}

// ---- the ledger: what the children's logs say, read incrementally -------------

// Compact on purpose: a --long run records millions of jobs.
struct JobRecord {
  std::uint64_t low_takes = 0;       // bit a-1: attempt a (1..64) was delivered
  std::uint32_t takes = 0;           // deliveries (T lines and the supervisor's claims)
  std::uint32_t first_complete = 0;  // the attempt of the first completion
  std::uint16_t completes = 0;       // C lines and the supervisor's ok completes
  std::uint32_t max_take = 0;        // the highest attempt delivered
  std::uint32_t fail_owed = 0;       // the highest attempt an F line failed for a retry (owed a later delivery)
  std::uint64_t first_token = 0;     // the token of the first delivery (later ones: Ledger::later_tokens_)
  bool acked = false;                // an A line
  bool drained = false;              // completed by the supervisor
};

class Ledger {
 public:
  Ledger(std::filesystem::path dir, std::string prefix) : dir_(std::move(dir)), prefix_(std::move(prefix)) {}

  // Reads what the logs gained since the last call. Only whole lines: a line
  // being written now is read next time; the last partial line of a dead
  // child's log stays partial and is tolerated by finish().
  void poll() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix_, 0) != 0 || !name.ends_with(".log")) continue;
      File& f = files_[name];
      const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char buf[1 << 16];
      for (;;) {
        const ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(f.offset));
        if (n <= 0) break;
        f.offset += static_cast<std::uint64_t>(n);
        f.partial.append(buf, static_cast<std::size_t>(n));
      }
      ::close(fd);
      std::size_t start = 0;
      for (std::size_t nl; (nl = f.partial.find('\n', start)) != std::string::npos; start = nl + 1)
        line(name, f, std::string_view(f.partial).substr(start, nl - start));
      f.partial.erase(0, start);
    }
  }

  // Every child is gone: what is left unterminated was cut by a kill.
  // Then the deliveries under one attempt are judged: a release gives its
  // attempt back (the job's next delivery is under the same attempt, with a
  // new token), so each R line of (job, attempt) allows one more; any
  // delivery beyond that is a second holder. Judged here, not as lines come:
  // a release's R line and the next holder's T line are in two logs, read
  // in either order. (The R line is written before the release is made, so
  // a release that did not happen lets one such delivery through unflagged.)
  void finish() {
    poll();
    for (auto& [name, f] : files_)
      if (!f.partial.empty()) {
        ++truncated_;
        f.partial.clear();
      }
    for (const auto& [ka, n] : again_) {
      const auto r = releases_.find(ka);
      const std::uint32_t allowed = r == releases_.end() ? 0 : r->second;
      if (n > allowed)
        problems_.push_back(again_who_[ka] + ": " + id_of(ka.first) + " delivered " + std::to_string(n + 1) +
                            " times under attempt " + std::to_string(ka.second) +
                            (allowed ? " (released " + std::to_string(allowed) + " times)" : ""));
    }
  }

  // The supervisor's own claims and completes.
  void took(const BrandedId& id, std::uint32_t attempt, fairlane::Token token) {
    take(key(id), attempt, "supervisor");
    token_taken(key(id), attempt, token.value, "supervisor");
  }
  void drained(const BrandedId& id, std::uint32_t attempt) {
    JobRecord& r = jobs_[key(id)];
    r.drained = true;
    complete(key(id), attempt, "supervisor");
    ++drained_;
  }

  // Jobs the queue owes a delivery it never made: failed for a retry (an F
  // line of attempt a, and nothing delivered above a), or released (an r
  // line of attempt a, and neither a second delivery under a nor one above
  // it). Every job is drained by the end, so each was owed by then. (A job
  // dead-lettered is the caller's to leave out.)
  std::vector<std::pair<std::uint64_t, std::string>> owed() const {
    std::vector<std::pair<std::uint64_t, std::string>> out;
    for (const auto& [k, r] : jobs_)
      if (r.fail_owed != 0 && r.max_take <= r.fail_owed)
        out.emplace_back(k, "failed for a retry under attempt " + std::to_string(r.fail_owed) +
                                " and never delivered again");
    for (const auto& [k, a] : released_ok_) {
      const auto j = jobs_.find(k);
      const bool later = j != jobs_.end() && j->second.max_take > a;
      if (!later && !again_.count({k, a}))
        out.emplace_back(k, "released under attempt " + std::to_string(a) + " and never delivered again");
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Acknowledged jobs not yet delivered to anyone.
  std::vector<std::uint64_t> undelivered() const {
    std::vector<std::uint64_t> out;
    for (const auto& [k, r] : jobs_)
      if (r.acked && r.takes == 0) out.push_back(k);
    std::sort(out.begin(), out.end());
    return out;
  }

  const std::unordered_map<std::uint64_t, JobRecord>& jobs() const { return jobs_; }
  std::uint64_t lines() const { return lines_; }
  std::uint64_t acked() const { return acked_; }
  std::uint64_t completed() const { return completed_lines_; }
  std::uint64_t drained_count() const { return drained_; }
  std::uint64_t retried() const { return retried_; }
  std::uint64_t stale() const { return stale_; }
  std::uint64_t released() const { return released_; }
  std::uint64_t truncated() const { return truncated_; }
  // Broken promises found in the logs: X lines, double completions, one
  // token handed out twice, lines that are not ours.
  const std::vector<std::string>& problems() const { return problems_; }

  static std::uint64_t key(const BrandedId& id) { return id.snowflake(); }
  static std::string id_of(std::uint64_t k) { return BrandedId::make(kJobKind, k).string(); }

 private:
  using JobAttempt = std::pair<std::uint64_t, std::uint32_t>;
  static constexpr JobAttempt kNoRelease{~0ULL, 0};
  struct File {
    std::uint64_t offset = 0;
    std::string partial;
    JobAttempt open_release = kNoRelease;  // the R line just read, if the last line was one
  };

  void line(const std::string& file, File& f, std::string_view s) {
    ++lines_;
    const JobAttempt open_release = f.open_release;
    f.open_release = kNoRelease;
    if (s.size() >= 2 && s[0] == 'X' && s[1] == ' ') {
      problems_.push_back(file + ": " + std::string(s.substr(2)));
      return;
    }
    // "A <id>", "T <id> <attempt> <token>", "<K> <id> <attempt>"
    std::optional<BrandedId> id;
    unsigned long attempt = 0;
    unsigned long long token = 0;
    bool ok = s.size() >= 2 + fairlane::kIdLength && s[1] == ' ';
    if (ok) id = BrandedId::parse(s.substr(2, fairlane::kIdLength));
    ok = ok && id && id->kind() == kJobKind;
    const std::string_view rest = ok ? s.substr(2 + fairlane::kIdLength) : std::string_view();
    if (ok && s[0] != 'A') {
      const std::string numbers(rest.size() > 1 && rest[0] == ' ' ? rest.substr(1) : std::string_view());
      char* end = nullptr;
      attempt = std::strtoul(numbers.c_str(), &end, 10);
      ok = !numbers.empty() && end != nullptr && end != numbers.c_str() && attempt > 0;
      if (ok && s[0] == 'T') {
        const char* t = end;
        ok = *t == ' ' && t[1] >= '0' && t[1] <= '9';
        if (ok) token = std::strtoull(t + 1, &end, 10);
        ok = ok && token != 0;
      }
      ok = ok && *end == '\0';
    } else if (ok) {
      ok = rest.empty();
    }
    if (!ok) {
      problems_.push_back(file + ": unreadable log line '" + std::string(s) + "'");
      return;
    }
    const std::uint64_t k = key(*id);
    const auto a = static_cast<std::uint32_t>(attempt);
    switch (s[0]) {
      case 'A':
        if (jobs_[k].acked) problems_.push_back(file + ": " + id->string() + " acknowledged twice by enqueue");
        jobs_[k].acked = true;
        ++acked_;
        break;
      case 'T':
        take(k, a, file);
        token_taken(k, a, token, file);
        break;
      case 'C':
        ++completed_lines_;
        complete(k, a, file);
        break;
      case 'F':
        ++retried_;
        jobs_[k].fail_owed = std::max(jobs_[k].fail_owed, a);
        break;
      case 'R':
        ++released_;
        ++releases_[{k, a}];
        f.open_release = {k, a};
        break;
      case 'r': released_ok_.insert({k, a}); break;
      case 'S':
      case 'G':
        ++stale_;
        // The answer of a release whose R line came just before it in this
        // log: it did not happen, and allows no second delivery.
        if (open_release == JobAttempt{k, a}) --releases_[{k, a}];
        break;
      default: problems_.push_back(file + ": unknown log line '" + std::string(s) + "'");
    }
  }

  void take(std::uint64_t k, std::uint32_t attempt, const std::string& who) {
    JobRecord& r = jobs_[k];
    ++r.takes;
    r.max_take = std::max(r.max_take, attempt);
    // Two deliveries under one attempt are two holders, unless a release
    // gave the attempt back in between (judged in finish()). The tokens are
    // checked apart (token_taken): that check needs no release accounting.
    bool twice = false;
    if (attempt <= 64) {
      const std::uint64_t bit = 1ULL << (attempt - 1);
      twice = (r.low_takes & bit) != 0;
      r.low_takes |= bit;
    } else {
      twice = !high_takes_.emplace(k, attempt).second;
    }
    if (twice) {
      std::uint32_t& n = again_[{k, attempt}];
      if (n++ == 0) again_who_[{k, attempt}] = who;
    }
  }

  // A token names one lease: the same token delivered twice is two holders
  // of one lease, whatever releases came between (a release gives the
  // attempt back, not the token: a job released and delivered again under
  // its old token, which its old holder could still acknowledge, passes
  // the attempt count). Judged as lines come: nothing excuses it.
  void token_taken(std::uint64_t k, std::uint32_t attempt, std::uint64_t token, const std::string& who) {
    JobRecord& r = jobs_[k];
    if (r.first_token == 0) {
      r.first_token = token;
      return;
    }
    if (token != r.first_token && later_tokens_.insert({k, token}).second) return;
    problems_.push_back(who + ": " + id_of(k) + " delivered twice under one token " + std::to_string(token) +
                        " (attempt " + std::to_string(attempt) + ")");
  }

  void complete(std::uint64_t k, std::uint32_t attempt, const std::string& who) {
    JobRecord& r = jobs_[k];
    if (r.completes++ == 0) {
      r.first_complete = attempt;
      return;
    }
    problems_.push_back(who + ": " + id_of(k) + " completed twice under a valid token (attempts " +
                        std::to_string(r.first_complete) + " and " + std::to_string(attempt) + ")");
  }

  std::filesystem::path dir_;
  std::string prefix_;
  std::map<std::string, File> files_;
  std::unordered_map<std::uint64_t, JobRecord> jobs_;
  std::set<std::pair<std::uint64_t, std::uint32_t>> high_takes_;  // deliveries with attempt > 64 (rare)
  std::set<std::pair<std::uint64_t, std::uint64_t>> later_tokens_;  // tokens of each job's deliveries after its first
  // Deliveries of a (job, attempt) after its first, the log of the first of
  // them, and the R lines of each (job, attempt).
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::uint32_t> again_, releases_;
  std::set<std::pair<std::uint64_t, std::uint32_t>> released_ok_;  // r lines: releases that returned ok
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::string> again_who_;
  std::vector<std::string> problems_;
  std::uint64_t lines_ = 0, acked_ = 0, completed_lines_ = 0, drained_ = 0, retried_ = 0, stale_ = 0, truncated_ = 0;
  std::uint64_t released_ = 0;
};

// ---- options --------------------------------------------------------------------

struct Options {
  std::uint64_t kills = 300;
  unsigned producers = 2, consumers = 3;
  std::uint64_t seed = 0;
  bool seeded = false;
  std::string segment;
  std::string dir;
  bool keep = false;
  bool stops = true;
  bool churn = false;
  bool controls = false;
  bool mix = false;
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: fairlane_torture [--kills N | --long] [--producers P] [--consumers C] [--seed S]\n"
               "                        [--segment NAME] [--dir DIR] [--keep] [--no-stops] [--churn]\n"
               "                        [--controls] [--mix]\n"
               "  --kills N      SIGKILLs of random children before the checks (default 300)\n"
               "  --long         3000 kills\n"
               "  --producers P  producer processes (default 2)\n"
               "  --consumers C  consumer processes (default 3)\n"
               "  --seed S       seed of every random choice (default: from the clock; printed)\n"
               "  --segment NAME segment to create (default fairlane_torture_<pid>); removed at the end\n"
               "  --dir DIR      directory for the children's logs (default a fresh one under /tmp,\n"
               "                 removed when the run passes)\n"
               "  --keep         keep the segment at the end (for `fairlane inspect` / `fsck`)\n"
               "  --no-stops     no SIGSTOP/SIGCONT of random children alongside the kills\n"
               "  --churn        producers enqueue on 24 more groups too, more groups than lane\n"
               "                 records: lanes are given back and taken again under the kills\n"
               "  --controls     a controller process (killed and stopped too) pauses, resumes,\n"
               "                 weighs and limits the plain lanes (and the churn groups)\n"
               "  --mix          batches too (enqueue_batch, claim_batch, claim_lane_batch,\n"
               "                 complete_batch), releases and extends\n"
               "exit status: 0 no violations, 1 violations, 2 setup error\n");
}

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  auto number = [](const char* s, std::uint64_t& out) {
    char* end = nullptr;
    errno = 0;
    out = std::strtoull(s, &end, 10);
    return errno == 0 && end != s && *end == '\0';
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    std::uint64_t v = 0;
    if (a == "--long") {
      o.kills = 3000;
    } else if (a == "--keep") {
      o.keep = true;
    } else if (a == "--no-stops") {
      o.stops = false;
    } else if (a == "--churn") {
      o.churn = true;
    } else if (a == "--controls") {
      o.controls = true;
    } else if (a == "--mix") {
      o.mix = true;
    } else if (a == "--help" || a == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--kills" && has_value && number(argv[i + 1], v)) {
      o.kills = v;
      ++i;
    } else if (a == "--producers" && has_value && number(argv[i + 1], v) && v >= 1 && v <= 64) {
      o.producers = static_cast<unsigned>(v);
      ++i;
    } else if (a == "--consumers" && has_value && number(argv[i + 1], v) && v >= 1 && v <= 64) {
      o.consumers = static_cast<unsigned>(v);
      ++i;
    } else if (a == "--seed" && has_value && number(argv[i + 1], v)) {
      o.seed = v;
      o.seeded = true;
      ++i;
    } else if (a == "--segment" && has_value && argv[i + 1][0] != '\0') {
      o.segment = argv[++i];
    } else if (a == "--dir" && has_value && argv[i + 1][0] != '\0') {
      o.dir = argv[++i];
    } else {
      std::fprintf(stderr, "fairlane_torture: bad argument '%s'\n", argv[i]);
      usage(stderr);
      return std::nullopt;
    }
  }
  if (!o.seeded) o.seed = static_cast<std::uint64_t>(Clock::now().time_since_epoch().count()) ^ std::uint64_t(::getpid());
  return o;
}

// ---- the supervisor -------------------------------------------------------------

// How long each phase may take before the run gives up and says what it was
// waiting for. A stall is no progress for kStall: far more than a lease
// (2 s) plus the half second within which a sweep returns a dead holder's
// leases, so only a job that recovery will never return trips it.
constexpr auto kStall = std::chrono::seconds(5);
constexpr auto kConsumerPhase = std::chrono::seconds(30);
constexpr auto kDrainPhase = std::chrono::seconds(20);
constexpr auto kFairPhase = std::chrono::seconds(15);
constexpr std::size_t kShowAtMost = 10;  // ids printed per kind of violation

class Supervisor {
 public:
  Supervisor(const Options& o, Queue& q, std::filesystem::path dir)
      : o_(o),
        q_(q),
        dir_(std::move(dir)),
        prefix_("run" + std::to_string(::getpid()) + "-"),
        ledger_(dir_, prefix_),
        rng_(o.seed),
        self_(::getpid()) {
    // The kill phase cannot really hang (sleep, kill, waitpid), but it gets a
    // deadline like every phase; children's watchdogs outlast all of them.
    kill_budget_ = std::chrono::seconds(60) + milliseconds(60 * o.kills);
    const auto total = kill_budget_ + kConsumerPhase + kDrainPhase + kFairPhase;
    watchdog_s_ = static_cast<unsigned>(std::chrono::duration_cast<std::chrono::seconds>(total).count()) + 30;
    // One progress slot per child ever spawned: the first ones, one
    // replacement per kill, and room for replacements of children that end
    // by themselves (a child past the end is simply not timed).
    progress_slots_ = o.producers + o.consumers + o.kills + 64;
    void* p = ::mmap(nullptr, progress_slots_ * sizeof(ProgressSlot), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "torture: mmap: %s\n", std::strerror(errno));
      std::exit(2);
    }
    progress_ = static_cast<ProgressSlot*>(p);  // zero-filled: every slot idle
  }
  ~Supervisor() { ::munmap(progress_, progress_slots_ * sizeof(ProgressSlot)); }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run() {
    const auto started = Clock::now();
    for (unsigned i = 0; i < o_.producers; ++i) children_.push_back(spawn(Role::producer));
    for (unsigned i = 0; i < o_.consumers; ++i) children_.push_back(spawn(Role::consumer));
    if (o_.controls) children_.push_back(spawn(Role::controller));
    kill_phase();
    shutdown();
    check_empty_after_drain();
    fairness();
    ledger_.finish();
    check_accounting();
    check_samples();
    check_fsck();
    check_nobody_parked();
    check_counts();
    check_exercised();
    summary(seconds_since(started));
    return violations_ == 0 ? 0 : 1;
  }

 private:
  struct Child {
    pid_t pid;
    Role role;
    ProgressSlot* progress = nullptr;  // null: not timed
    bool stopped = false;              // by our SIGSTOP, until resume_at
    Clock::time_point resume_at{};
    std::uint64_t continued_ns = 0;    // when we last sent it SIGCONT (mono_ns)
  };

  void violation(const std::string& what) {
    ++violations_;
    std::printf("torture: VIOLATION: %s\n", what.c_str());
    std::fflush(stdout);
  }
  // For a kind of violation that can come by the thousand (a stuck lane's
  // jobs): each is counted, the first few printed.
  void violation_quiet(std::size_t nth, const std::string& what) {
    ++violations_;
    if (nth < kShowAtMost) std::printf("torture: VIOLATION: %s\n", what.c_str());
  }
  void note(const std::string& what) {
    std::printf("torture: %s\n", what.c_str());
    std::fflush(stdout);
  }

  Child spawn(Role role) {
    ProgressSlot* progress = spawned_ < progress_slots_ ? &progress_[spawned_] : nullptr;
    ChildSpec spec{role, q_.name(),
                   (dir_ / (prefix_ + (role == Role::producer ? "p" : role == Role::consumer ? "c" : "k") + std::to_string(spawned_) + ".log")).string(),
                   o_.seed * 0x9E3779B97F4A7C15ULL + spawned_ + 1, watchdog_s_, progress, o_.churn, o_.mix};
    ++spawned_;
    std::fflush(nullptr);  // nothing buffered is copied into the child
    const pid_t pid = ::fork();
    if (pid < 0) {
      // Out of processes: the run cannot go on as specified.
      std::fprintf(stderr, "torture: fork: %s\n", std::strerror(errno));
      std::exit(2);
    }
    if (pid == 0) run_child(spec, self_);
    return Child{pid, role, progress};
  }

  // SIGKILL one child and reap it. A child that had already ended by itself
  // is a violation (its status says how: an alarm is its watchdog).
  void kill_and_reap(const Child& c) {
    if (c.stopped) ++stopped_kills_;
    ::kill(c.pid, SIGKILL);  // our own child, by pid (a stopped one dies too)
    int st = 0;
    while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
      violation(std::string(role_name(c.role)) + " " + std::to_string(c.pid) + " ended by itself: " +
                describe_status(st));
  }

  // Children that ended on their own between kills: a violation each, and a
  // replacement so the run keeps its shape (unless they keep dying).
  void reap_unexpected() {
    int st = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &st, WNOHANG)) > 0;) {
      auto it = std::find_if(children_.begin(), children_.end(), [&](const Child& c) { return c.pid == pid; });
      if (it == children_.end()) continue;
      violation(std::string(role_name(it->role)) + " " + std::to_string(pid) + " ended by itself: " +
                describe_status(st));
      if (++unexpected_exits_ > 20) {
        children_.erase(it);
        continue;
      }
      *it = spawn(it->role);
    }
  }

  // Reads the limited lanes' active counts (each from one lane word, so an
  // exact value at some instant) and checks them against their limits.
  void sample() {
    const Snapshot s = q_.snapshot();
    ++samples_;
    // The pinned lanes keep their lanes and their settings, whoever else
    // comes and goes: a reclaim that gave one back lost its weight or limit.
    std::uint32_t pinned_seen = 0;
    for (const auto& li : s.lanes) {
      const auto idx = lane_index(li.group);
      if (!idx || *idx >= kPinnedLanes) continue;
      ++pinned_seen;
      if (li.weight != kLanes[*idx].weight || li.paused)
        violation_quiet(limit_violations_++, "sample " + std::to_string(samples_) + ": lane " + li.group.string() +
                                                 " has weight " + std::to_string(li.weight) +
                                                 (li.paused ? ", paused" : "") + ", set to weight " +
                                                 std::to_string(kLanes[*idx].weight));
    }
    if (pinned_seen != kPinnedLanes)
      violation_quiet(limit_violations_++, "sample " + std::to_string(samples_) + ": " + std::to_string(pinned_seen) +
                                               " of the " + std::to_string(kPinnedLanes) + " pinned lanes are live");
    for (const auto& li : s.lanes) {
      const auto idx = lane_index(li.group);
      // (The plain lanes: limit 0, unless a controller changes them.)
      if (!idx || *idx >= (o_.controls ? kPinnedLanes : kTortureLanes)) continue;
      const LaneSpec& spec = kLanes[*idx];
      if (li.limit != spec.limit)
        violation_quiet(limit_violations_++, "sample " + std::to_string(samples_) + ": lane " + li.group.string() +
                                                 " has limit " + std::to_string(li.limit) + ", set to " +
                                                 std::to_string(spec.limit));
      else if (spec.limit != 0 && li.active > spec.limit)
        violation_quiet(limit_violations_++, "sample " + std::to_string(samples_) + ": lane " + li.group.string() +
                                                 " active " + std::to_string(li.active) + " above its limit " +
                                                 std::to_string(spec.limit));
    }
  }

  // Sleeps until `until`, sampling about every millisecond and reaping
  // children that ended by themselves.
  void watch_until(Clock::time_point until) {
    for (auto now = Clock::now(); now < until; now = Clock::now()) {
      reap_unexpected();
      stops_tick();
      observe_progress();
      sample();
      std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(1), until - now));
    }
  }

  // SIGCONT for a child we stopped.
  void resume(Child& c) {
    ::kill(c.pid, SIGCONT);  // our own child, by pid
    c.stopped = false;
    c.continued_ns = mono_ns();
  }
  void resume_all() {
    for (Child& c : children_)
      if (c.stopped) resume(c);
  }

  // During the kill phase: resumes the children whose hold is over and, every
  // 5-40 ms, stops a random running one (at most two stopped at once).
  void stops_tick() {
    const auto now = Clock::now();
    for (Child& c : children_)
      if (c.stopped && now >= c.resume_at) resume(c);
    if (!stopping_ || now < next_stop_) return;
    next_stop_ = now + milliseconds(std::uniform_int_distribution<int>(5, 40)(rng_));
    std::vector<std::size_t> running;
    std::size_t stopped = 0;
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].stopped) ++stopped;
      else running.push_back(i);
    }
    if (stopped >= 2 || running.size() < 2) return;
    Child& c = children_[running[rng_() % running.size()]];
    const unsigned kind = unsigned(rng_() % 10);
    const int hold_ms = kind < 6   ? std::uniform_int_distribution<int>(1, 50)(rng_)
                        : kind < 9 ? std::uniform_int_distribution<int>(500, 1200)(rng_)
                                   : std::uniform_int_distribution<int>(2000, 3000)(rng_);
    ::kill(c.pid, SIGSTOP);  // our own child, by pid
    c.stopped = true;
    c.resume_at = now + milliseconds(hold_ms);
    ++stops_;
    if (hold_ms > 500) ++stops_past_recovery_;
    if (hold_ms > int(kLeaseMs)) ++stops_past_lease_;
    longest_hold_ms_ = std::max<std::uint64_t>(longest_hold_ms_, std::uint64_t(hold_ms));
  }

  // The calls in progress of running children: how long each has gone
  // without returning, counted from its start or from our last SIGCONT to
  // that child, whichever is later (claim_wait: beyond its timeout).
  void observe_progress() {
    const std::uint64_t now = mono_ns();
    for (const Child& c : children_) {
      if (c.stopped || c.progress == nullptr) continue;
      const std::uint64_t start = c.progress->call_start_ns.load(std::memory_order_acquire);
      if (start == 0) continue;
      const std::uint64_t from = std::max(start, c.continued_ns);
      if (now <= from) continue;
      const std::uint64_t in_call = now - from;
      if (c.progress->call_kind.load(std::memory_order_relaxed) == std::uint32_t(CallKind::wait))
        seen_wait_ns_ = std::max(seen_wait_ns_, in_call > CallTimer::kWaitNs ? in_call - CallTimer::kWaitNs : 0);
      else
        seen_op_ns_ = std::max(seen_op_ns_, in_call);
    }
  }

  void kill_phase() {
    stopping_ = o_.stops;
    struct StopsOff {
      Supervisor& s;
      ~StopsOff() {
        s.stopping_ = false;
        s.resume_all();
      }
    } stops_off{*this};
    const auto deadline = Clock::now() + kill_budget_;
    std::uniform_int_distribution<int> pause_ms(2, 25);
    while (kills_ < o_.kills) {
      if (Clock::now() > deadline) {
        violation("deadline of the kill phase passed after " + std::to_string(kills_) + " of " +
                  std::to_string(o_.kills) + " kills");
        return;
      }
      watch_until(Clock::now() + milliseconds(pause_ms(rng_)));
      if (children_.empty()) {
        violation("every child kept ending by itself; kill phase abandoned after " + std::to_string(kills_) + " kills");
        return;
      }
      Child& victim = children_[rng_() % children_.size()];
      kill_and_reap(victim);
      ++kills_;
      ++(victim.role == Role::producer ? producer_kills_ : victim.role == Role::consumer ? consumer_kills_ : controller_kills_);
      victim = spawn(victim.role);
    }
  }

  void shutdown() {
    resume_all();
    // Producers first: from here on the set of acknowledged jobs only grows
    // by what their logs already hold. The controller too.
    for (auto it = children_.begin(); it != children_.end();) {
      if (it->role == Role::consumer) {
        ++it;
        continue;
      }
      kill_and_reap(*it);
      it = children_.erase(it);
    }
    if (o_.controls) controls_to_defaults();
    consumer_phase();
    for (const Child& c : children_) kill_and_reap(c);
    children_.clear();
    drain();
  }

  // What the controllers left (a lane paused for good by a killed one holds
  // its jobs) goes back to the defaults: every lane a controller may change
  // that has a lane now, and the queue's pause. Each call must answer ok.
  void controls_to_defaults() {
    if (q_.resume_all() != LaneStatus::ok) violation("controls: resume_all failed");
    for (const auto& li : q_.snapshot().lanes) {
      const auto idx = lane_index(li.group);
      if (!idx || *idx < kPinnedLanes || is_fair_lane(*idx)) continue;
      if (!li.paused && li.weight == 1 && li.limit == 0) continue;
      ++controls_reset_;
      for (const LaneStatus st : {q_.resume(li.group), q_.set_weight(li.group, 1), q_.clear_limit(li.group)})
        if (st != LaneStatus::ok)
          violation("controls: lane " + li.group.string() + " back to the defaults -> " + std::string(fairlane::to_string(st)));
    }
  }

  // The consumers run until every acknowledged job has been delivered to
  // someone (a T line), or they stop making progress, or the phase's deadline.
  void consumer_phase() {
    const auto started = Clock::now(), deadline = started + kConsumerPhase;
    auto last_progress = started;
    std::uint64_t last_lines = ~0ULL;
    for (;;) {
      ledger_.poll();
      const auto missing = ledger_.undelivered();
      if (missing.empty()) return;
      if (ledger_.lines() != last_lines) {
        last_lines = ledger_.lines();
        last_progress = Clock::now();
      }
      const bool stalled = Clock::now() - last_progress > kStall, late = Clock::now() > deadline;
      if (stalled || late) {
        note(std::string(stalled ? "consumers stalled (no log line for 5 s)" : "consumer phase deadline passed") +
             " with " + std::to_string(missing.size()) + " acknowledged jobs never delivered, e.g. " +
             describe_job(missing.front()) + "; the supervisor drains the rest");
        return;
      }
      watch_until(Clock::now() + milliseconds(50));
    }
  }

  std::uint64_t outstanding(const Snapshot& s) const { return s.pending + s.leased + s.scheduled; }

  // The supervisor claims (which runs the sweeps that return the killed
  // consumers' leases and promote retries) and completes whatever is left.
  void drain() {
    const auto started = Clock::now(), deadline = started + kDrainPhase;
    auto last_claim = started;
    Lease l;
    for (;;) {
      if (q_.claim_wait(l, kLeaseMs, kClaimTimeout)) {
        last_claim = Clock::now();
        take_and_complete(l, "drain");
        continue;
      }
      const Snapshot s = q_.snapshot();
      if (outstanding(s) == 0) return;
      const bool stalled = Clock::now() - last_claim > kStall, late = Clock::now() > deadline;
      if (stalled || late) {
        note(std::string(stalled ? "drain stalled: nothing claimable for 5 s" : "drain deadline passed") +
             " with pending " + std::to_string(s.pending) + ", leased " + std::to_string(s.leased) + ", scheduled " +
             std::to_string(s.scheduled) + " jobs in the segment");
        return;
      }
    }
  }

  // Claims by the supervisor: the payload is checked and the delivery and
  // the completion recorded like a consumer's.
  void take_and_complete(const Lease& l, const char* phase) {
    if (const std::string bad = check_payload(l); !bad.empty())
      violation(std::string(phase) + ": claim of " + l.id.string() + ": " + bad);
    ledger_.took(l.id, l.attempt, l.token);
    const AckStatus st = q_.complete(l.id, l.token);
    if (st == AckStatus::ok)
      ledger_.drained(l.id, l.attempt);
    else  // nobody else holds leases now: the only holder of this one is us
      violation(std::string(phase) + ": complete " + l.id.string() + " attempt " + std::to_string(l.attempt) +
                " by its only holder -> " + std::string(fairlane::to_string(st)));
  }

  // What the segment says of one job, for a violation message.
  std::string describe_job(std::uint64_t k) const {
    const std::string id = Ledger::id_of(k);
    const auto parsed = BrandedId::parse(id);
    const auto info = parsed ? q_.job(*parsed) : std::nullopt;
    if (!info) return id + " (not in the segment)";
    return id + " (" + std::string(fairlane::to_string(info->state)) + " in lane " + info->group.string() +
           ", attempt " + std::to_string(info->attempt) + ")";
  }

  // Lanes with work or leases, the ring and the slot states: what a stuck
  // run was waiting for.
  void describe_lanes(const Snapshot& s) {
    std::string ring;
    for (const auto& g : s.ring) {
      ring += ' ';
      ring += g.str();
    }
    note("  segment: pending " + std::to_string(s.pending) + ", leased " + std::to_string(s.leased) + ", scheduled " +
         std::to_string(s.scheduled) + ", dead " + std::to_string(s.dead) + "; ring:" + (ring.empty() ? " (empty)" : ring));
    for (const auto& li : s.lanes) {
      if (li.depth == 0 && li.active == 0) continue;
      const bool in_ring = std::find(s.ring.begin(), s.ring.end(), li.group) != s.ring.end();
      note("  lane " + li.group.string() + ": depth " + std::to_string(li.depth) + ", active " +
           std::to_string(li.active) + ", limit " + std::to_string(li.limit) + ", weight " +
           std::to_string(li.weight) + (li.paused ? ", paused" : "") + (li.ringed ? ", ringed" : ", not ringed") +
           (in_ring ? ", in the ring" : ", not in the ring"));
    }
  }

  void check_empty_after_drain() {
    const Snapshot s = q_.snapshot();
    bool words_clean = true;
    for (const auto& li : s.lanes) words_clean = words_clean && li.depth == 0 && li.active == 0;
    if (outstanding(s) == 0 && words_clean) return;
    violation("after the drain the segment still holds pending " + std::to_string(s.pending) + ", leased " +
              std::to_string(s.leased) + ", scheduled " + std::to_string(s.scheduled) +
              " jobs (slot states), or a lane still counts work:");
    describe_lanes(s);
  }

  // Fairness after recovery, on four fresh lanes of weight 1 without a
  // limit, served by one consumer (the supervisor).
  //
  // Bound checked: strict round robin. In every window of four consecutive
  // claims that starts while all four lanes still hold jobs, each lane
  // appears exactly once (this implies that every prefix's served counts
  // differ by at most one). Why it must hold (docs/design.md sections 3-4):
  // each claim takes the token at the ring's head and, for weight 1, puts it
  // back at the tail, so one claimer sees A B C D A B C D; turns are only
  // owed (and repaid out of order) when a claimer finds a lane's structure
  // busy, which a lone claimer of lanes nobody else touches never does.
  // Fresh lanes keep this independent of the torture lanes' owed turns
  // (which the deficit round robin repays legitimately); what the check
  // does see is damage to the shared ring and hold slot, the structures a
  // killed claimer can leave behind. Leftover jobs of stuck torture lanes
  // may interleave; they are drained and left out of the sequence.
  void fairness() {
    constexpr std::uint32_t kPerLane = 200;
    for (std::uint32_t f = 0; f < kFairLanes; ++f) {
      const BrandedId g = lane_group(kTortureLanes + f);
      if (q_.set_weight(g, 1) != LaneStatus::ok || q_.clear_limit(g) != LaneStatus::ok) {
        violation("fairness: cannot set up lane " + g.string());
        return;
      }
    }
    for (std::uint32_t i = 0; i < kPerLane; ++i)
      for (std::uint32_t f = 0; f < kFairLanes; ++f) {
        const BrandedId id = q_.mint();
        const EnqueueStatus st = q_.enqueue(lane_group(kTortureLanes + f), id, make_payload(id, kTortureLanes + f));
        if (st != EnqueueStatus::enqueued) {
          violation("fairness: enqueue " + id.string() + " -> " + std::string(fairlane::to_string(st)) + " after " +
                    std::to_string(i * kFairLanes + f) + " of " + std::to_string(kPerLane * kFairLanes) +
                    " jobs (the queue should be empty now); fairness not checked");
          return;
        }
      }

    std::vector<std::uint32_t> order;  // fairness lane (0..3) of each claim
    std::array<std::uint32_t, kFairLanes> left;
    left.fill(kPerLane);
    const auto deadline = Clock::now() + kFairPhase;
    auto last_claim = Clock::now();
    Lease l;
    while (order.size() < std::size_t{kPerLane} * kFairLanes) {
      if (!q_.claim_wait(l, kLeaseMs, kClaimTimeout)) {
        if (Clock::now() - last_claim > kStall || Clock::now() > deadline) {
          std::string counts;
          for (std::uint32_t f = 0; f < kFairLanes; ++f)
            counts += " " + lane_group(kTortureLanes + f).string() + "=" + std::to_string(left[f]);
          violation("fairness: claims stopped with jobs left on fresh lanes:" + counts);
          describe_lanes(q_.snapshot());
          return;
        }
        continue;
      }
      last_claim = Clock::now();
      const auto idx = lane_index(l.group);
      if (!idx || !is_fair_lane(*idx)) {
        take_and_complete(l, "fairness (a leftover torture job)");
        ++late_drained_;
        continue;
      }
      if (const std::string bad = check_payload(l); !bad.empty()) violation("fairness: claim of " + l.id.string() + ": " + bad);
      const std::uint32_t f = *idx - kTortureLanes;
      if (left[f] == 0) violation("fairness: lane " + l.group.string() + " served more jobs than it was given");
      else --left[f];
      order.push_back(f);
      if (const AckStatus st = q_.complete(l.id, l.token); st != AckStatus::ok)
        violation("fairness: complete " + l.id.string() + " -> " + std::string(fairlane::to_string(st)));
    }

    std::array<std::uint32_t, kFairLanes> remaining;
    remaining.fill(kPerLane);
    std::size_t bad_windows = 0;
    for (std::size_t i = 0; i + kFairLanes <= order.size(); ++i) {
      const bool all_nonempty = std::all_of(remaining.begin(), remaining.end(), [](std::uint32_t r) { return r > 0; });
      if (all_nonempty) {
        std::array<int, kFairLanes> seen{};
        for (std::size_t j = i; j < i + kFairLanes; ++j) ++seen[order[j]];
        if (std::any_of(seen.begin(), seen.end(), [](int n) { return n != 1; })) {
          std::string window;
          for (std::size_t j = i; j < i + kFairLanes; ++j) window += " " + lane_group(kTortureLanes + order[j]).string();
          violation_quiet(bad_windows++, "fairness: claims " + std::to_string(i) + ".." + std::to_string(i + 3) +
                                             " are not one of each lane:" + window);
        }
      }
      if (remaining[order[i]] > 0) --remaining[order[i]];
    }
    fair_claims_ = order.size();
  }

  // Every acknowledged job was delivered (or dead-lettered); the ledger's
  // own findings (double completions, tokens handed out twice, X lines).
  void check_accounting() {
    std::vector<fairlane::JobInfo> dead;
    JobFilter filter;
    filter.state = JobState::dead;
    filter.limit = kJobs;
    dead = q_.jobs(filter);
    std::unordered_map<std::uint64_t, bool> dead_ids;
    for (const auto& j : dead) dead_ids[Ledger::key(j.id)] = true;
    if (!dead.empty())
      note("note: " + std::to_string(dead.size()) + " dead-lettered jobs (max_attempts " +
           std::to_string(kMaxAttempts) + " should make this impossible), e.g. " + dead.front().id.string());

    std::size_t lost = 0;
    for (const std::uint64_t k : ledger_.undelivered())
      if (!dead_ids.count(k))
        violation_quiet(lost++, "acknowledged job " + describe_job(k) + " was never delivered nor drained");
    if (lost > kShowAtMost) note("... " + std::to_string(lost - kShowAtMost) + " more lost jobs");

    std::size_t unowed = 0;
    for (const auto& [k, what] : ledger_.owed())
      if (!dead_ids.count(k)) violation_quiet(unowed++, "job " + describe_job(k) + " was " + what);
    if (unowed > kShowAtMost) note("... " + std::to_string(unowed - kShowAtMost) + " more jobs owed a delivery");

    std::size_t n = 0;
    for (const std::string& p : ledger_.problems()) violation_quiet(n++, p);
    if (n > kShowAtMost) note("... " + std::to_string(n - kShowAtMost) + " more violations found in the logs");
  }

  void check_samples() {
    if (limit_violations_ > kShowAtMost)
      note("... " + std::to_string(limit_violations_ - kShowAtMost) + " more samples above a limit");
  }

  // Every child is gone and nothing of ours waits: no process record may
  // still count a thread parked in claim_wait (ProcRecord::parked) or in
  // enqueue_wait (room_parked, and lane_parked for one parked for a lane,
  // counted in both: the "producers" below count it twice). The sweep that judges a dead child, or the
  // attach that takes its record, takes its parked threads out of the
  // record and of the header's count (drop_parked, take_parked; design.md,
  // "Blocking claims and enqueues"). Before 2026-12-06 a consumer killed
  // while parked stayed counted for good (a run of 300 kills left 90), and
  // every notify then made a futex wake for nobody.
  //
  // The records are read through a raw mapping: the snapshot's counts read
  // 0 once every sleep's end has passed (park_until, room_park_until),
  // whatever is left, and a check of them alone showed nothing with the
  // producers' drop disabled. Sweeps are driven on the segment's clock
  // (advance_clock, then tick: each pass judges every record whose verdict
  // is older than recovery_ms / 2), not by waiting. (The header's counts
  // may still hold a kill in the one-instruction window between the two
  // increments or the two decrements, which no record sees: not checked.)
  void check_nobody_parked() {
    RecordCounts r = record_counts(q_.name());
    for (int pass = 0; pass < 64 && r.read && (r.consumers != 0 || r.producers != 0); ++pass) {
      q_.advance_clock(q_.config().recovery_ms);
      (void)q_.tick();
      r = record_counts(q_.name());
    }
    if (!r.read) violation("the process records could not be read through a raw mapping of " + q_.name());
    if (r.consumers != 0 || r.producers != 0)
      violation("process records still count " + std::to_string(r.consumers) + " consumers and " +
                std::to_string(r.producers) + " producers parked with every child gone (drop_parked, take_parked)");
  }

  // fsck is exact on a quiet segment, and one whose last children were
  // killed moments ago is not quiet until recovery has judged them: a
  // producer killed at shutdown (its step left in flight: an admission, a
  // link) is judged dead by a sweep pass at most recovery_ms / 2 after its
  // record's last verdict, and the phases after the kills can take less
  // than that. So a first report that is not clean is followed by sweeps
  // driven on the segment's clock (as check_nobody_parked does), and only
  // what is left after them is a violation. What the first one held is
  // printed.
  void check_fsck() {
    fairlane::FsckReport r = q_.fsck();
    if (r.clean()) return;
    // Only steps in flight are forgiven (a dead process's, not judged yet):
    // anything else is a violation now, before a sweep could mend it (a
    // sweep re-rings an unringed lane, heals a ringed lane with no token).
    std::size_t n = 0;
    for (const auto& i : r.issues)
      if (i.invariant != "in-flight") violation_quiet(n++, "fsck: " + i.invariant + ": " + i.detail);
    if (n != 0) {
      if (n > kShowAtMost) note("... " + std::to_string(n - kShowAtMost) + " more fsck issues");
      return;
    }
    note("fsck before the children killed last were judged: " + std::to_string(r.issues.size()) +
         " step(s) in flight, e.g. " + r.issues.front().detail);
    int passes = 0;
    for (; passes < 8 && !r.clean(); ++passes) {
      q_.advance_clock(q_.config().recovery_ms);
      (void)q_.tick();
      r = q_.fsck();
    }
    if (r.clean()) {
      note("fsck clean after " + std::to_string(passes) + " sweep(s) on the segment's clock");
      return;
    }
    for (const auto& i : r.issues) violation_quiet(n++, "fsck: " + i.invariant + ": " + i.detail);
    if (n > kShowAtMost) note("... " + std::to_string(n - kShowAtMost) + " more fsck issues");
  }

  // No corruption met by anyone (batch claims report it only here), and no
  // lane record leaked: once sweeps have run over idle lanes (two
  // sightings apart), only the pinned lanes are live.
  void check_counts() {
    const fairlane::CorruptionInfo c = q_.corruption();
    if (c.count != 0)
      violation("the queue met " + std::to_string(c.count) + " impossible value(s), the last in " + c.last_structure);
    std::uint64_t live = 0;
    for (int pass = 0; pass < 4; ++pass) {
      q_.advance_clock(q_.config().recovery_ms);
      (void)q_.tick();
      live = q_.snapshot().lanes_live;
      if (live == kPinnedLanes) return;
    }
    violation(std::to_string(live) + " lanes live once every group but the " + std::to_string(kPinnedLanes) +
              " pinned ones went idle and sweeps ran: lane records leaked");
    describe_lanes(q_.snapshot());
  }

  // The run exercised what its options are for: the controller made
  // changes; lanes were given back and taken again, and producers told
  // `lanes_full` (which they wait out). A run that met none of it tested
  // nothing of it, and says so.
  void check_exercised() {
    for (std::size_t i = 0; i < std::min<std::size_t>(progress_slots_, spawned_); ++i) {
      controls_ += progress_[i].controls.load(std::memory_order_relaxed);
      batches_ += progress_[i].batches.load(std::memory_order_relaxed);
    }
    if (o_.controls && controls_ == 0) violation("controls: the controller made no change");
    if (o_.mix && (batches_ == 0 || ledger_.released() == 0)) violation("mix: no batch call or no release was made");
    if (!o_.churn) return;
    lanes_reclaimed_ = q_.snapshot().lanes_reclaimed;
    for (std::size_t i = 0; i < std::min<std::size_t>(progress_slots_, spawned_); ++i)
      lanes_full_ += progress_[i].lanes_full.load(std::memory_order_relaxed);
    if (lanes_reclaimed_ == 0) violation("churn: no lane was ever given back (lanes_reclaimed 0)");
    if (lanes_full_ == 0) violation("churn: no producer was ever told lanes_full");
  }

  void summary(double took) {
    const fairlane::RecoveryInfo rec = q_.recovery();
    std::string s = "torture: kills " + std::to_string(kills_) + " (producers " + std::to_string(producer_kills_) +
                    ", consumers " + std::to_string(consumer_kills_) + "), jobs acknowledged " +
                    std::to_string(ledger_.acked()) + ", completed " + std::to_string(ledger_.completed()) +
                    ", drained " + std::to_string(ledger_.drained_count()) + ", retried " +
                    std::to_string(ledger_.retried()) + ", stale " + std::to_string(ledger_.stale());
    s += ", recoveries: sweeps " + std::to_string(rec.runs);
    s += " leases " + std::to_string(rec.jobs);
    s += ", steps finished for the dead " + std::to_string(rec.finished);
    s += ", stops " + std::to_string(stops_) + " (" + std::to_string(stops_past_recovery_) + " past the recovery bound, " +
         std::to_string(stops_past_lease_) + " past the lease, held at most " + std::to_string(longest_hold_ms_) +
         " ms; " + std::to_string(stopped_kills_) + " stopped children killed)";
    if (o_.churn)
      s += ", churn: lanes given back " + std::to_string(lanes_reclaimed_) + ", lanes_full answers " +
           std::to_string(lanes_full_);
    if (o_.mix) s += ", mix: batch calls " + std::to_string(batches_) + ", releases " + std::to_string(ledger_.released());
    if (o_.controls)
      s += ", controls: " + std::to_string(controls_) + " made, controller killed " + std::to_string(controller_kills_) +
           " times, " + std::to_string(controls_reset_) + " lanes put back to the defaults";
    s += ", samples " + std::to_string(samples_) + ", fairness claims " + std::to_string(fair_claims_);
    if (late_drained_ != 0) s += " (+" + std::to_string(late_drained_) + " leftover)";
    if (ledger_.truncated() != 0) s += ", cut log lines " + std::to_string(ledger_.truncated());
    char tail[64];
    std::snprintf(tail, sizeof tail, ", violations %llu, took %.1f s", static_cast<unsigned long long>(violations_), took);
    s += tail;
    std::printf("%s\n", s.c_str());
    // Progress of the running while others were stopped or killed: measured,
    // never asserted.
    std::uint64_t op_ns = 0, wait_ns = 0, calls = 0;
    for (std::size_t i = 0; i < std::min<std::size_t>(progress_slots_, spawned_); ++i) {
      op_ns = std::max(op_ns, progress_[i].longest_op_ns.load());
      wait_ns = std::max(wait_ns, progress_[i].longest_wait_ns.load());
      calls += progress_[i].calls.load();
    }
    std::printf("torture: longest time a running process went without progress: %.1f ms in one call "
                "(enqueue, mint, complete, fail), %.1f ms in claim_wait beyond its %lld ms timeout, "
                "over %llu timed calls; calls still in progress as sampled: %.1f ms, claim_wait %.1f ms beyond "
                "its timeout\n",
                double(op_ns) / 1e6, double(wait_ns) / 1e6, static_cast<long long>(kClaimTimeout.count()),
                static_cast<unsigned long long>(calls), double(seen_op_ns_) / 1e6, double(seen_wait_ns_) / 1e6);
    std::fflush(stdout);
  }

  const Options& o_;
  Queue& q_;
  std::filesystem::path dir_;
  std::string prefix_;  // of this run's log files in dir_
  Ledger ledger_;
  std::mt19937_64 rng_;
  pid_t self_;
  std::chrono::milliseconds kill_budget_{};
  unsigned watchdog_s_ = 0;
  std::vector<Child> children_;
  std::uint64_t spawned_ = 0, kills_ = 0, producer_kills_ = 0, consumer_kills_ = 0;
  std::uint64_t samples_ = 0, violations_ = 0, unexpected_exits_ = 0, late_drained_ = 0, fair_claims_ = 0;
  std::size_t limit_violations_ = 0;
  // Stops and progress.
  ProgressSlot* progress_ = nullptr;
  std::size_t progress_slots_ = 0;
  bool stopping_ = false;
  Clock::time_point next_stop_{};
  std::uint64_t stops_ = 0, stops_past_recovery_ = 0, stops_past_lease_ = 0, longest_hold_ms_ = 0, stopped_kills_ = 0;
  std::uint64_t seen_op_ns_ = 0, seen_wait_ns_ = 0;
  std::uint64_t lanes_reclaimed_ = 0, lanes_full_ = 0;  // --churn
  std::uint64_t controller_kills_ = 0, controls_ = 0, controls_reset_ = 0;  // --controls
  std::uint64_t batches_ = 0;                                               // --mix
};

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv);
  if (!parsed) return 2;
  const Options& o = *parsed;
  const bool default_segment = o.segment.empty();
  const std::string segment = default_segment ? "fairlane_torture_" + std::to_string(::getpid()) : o.segment;

  std::filesystem::path dir;
  const bool own_dir = o.dir.empty();
  if (own_dir) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fairlane_torture_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "torture: mkdtemp: %s\n", std::strerror(errno));
      return 2;
    }
    dir = tmpl;
  } else {
    dir = o.dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "torture: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
      return 2;
    }
  }

  if (default_segment) (void)Queue::remove(segment);  // a leftover of an earlier run with our pid
  QueueOptions qo;
  qo.jobs = kJobs;
  qo.lanes = kLaneCapacity;
  qo.payload_bytes = kPayloadBytes;
  qo.job_kind = std::string(kJobKind);
  auto created = Queue::create(segment, qo);
  if (!created.ok()) {
    std::fprintf(stderr, "torture: create %s: %s\n", segment.c_str(), created.error().message.c_str());
    return 2;
  }
  std::optional<Queue> q(std::move(created.value()));
  for (std::uint32_t i = 0; i < kTortureLanes; ++i) {
    const BrandedId g = lane_group(i);
    if (q->set_weight(g, kLanes[i].weight) != LaneStatus::ok ||
        (kLanes[i].limit != 0 && q->set_limit(g, kLanes[i].limit) != LaneStatus::ok)) {
      std::fprintf(stderr, "torture: cannot configure lane %s\n", g.string().c_str());
      q.reset();
      (void)Queue::remove(segment);
      return 2;
    }
  }

  const std::string extras = std::string(o.churn ? ", churn over " + std::to_string(kChurnGroups) + " more groups" : "") +
                             (o.controls ? ", a controller" : "") + (o.mix ? ", batches, releases and extends" : "");
  std::printf("torture: seed %llu, segment %s, logs %s, kills %llu, producers %u, consumers %u%s\n",
              static_cast<unsigned long long>(o.seed), segment.c_str(), dir.c_str(),
              static_cast<unsigned long long>(o.kills), o.producers, o.consumers, extras.c_str());
  std::fflush(stdout);

  int rc = 0;
  {
    Supervisor sup(o, *q, dir);
    rc = sup.run();
  }
  q.reset();  // unmap before the name goes
  if (o.keep)
    std::printf("torture: segment %s kept\n", segment.c_str());
  else
    (void)Queue::remove(segment);
  if (rc == 0 && own_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  } else if (rc != 0) {
    std::printf("torture: logs kept in %s (replay with --seed %llu)\n", dir.c_str(),
                static_cast<unsigned long long>(o.seed));
  }
  return rc;
}
