// Model-based randomized test of the segment's single-threaded semantics.
//
// Each seed drives one fresh segment (one Queue handle, this thread only) and
// a small in-memory model of the documented transitions with the same random
// sequence of operations: enqueue and enqueue_batch (delayed, duplicate,
// out-of-order and reused ids, payloads, bad input), claim, claim_batch,
// claim_lane_batch, complete, fail (retry now, retry later, dead-letter),
// extend, release (tokens: the current lease's, an earlier lease's, another
// job's, made up), pause/resume (lane and queue), set_limit/clear_limit,
// set_weight, drain, reassign, requeue_dead, requeue_all_dead, purge_dead,
// depth, job, advance_clock and tick. After every operation it compares:
//   - the return value (statuses, counts, bools),
//   - every lease handed out, in order: id, group, attempt, payload,
//     deadline; and its token: new (never handed out before in the segment)
//     and the one job() shows while it is leased,
//   - the snapshot: ring order, every live lane in table order (group,
//     depth, active, limit, weight, paused, ringed, served), lanes live and
//     reclaimed, the queue pause, totals pending/leased/scheduled/dead, the
//     counters,
//   - every job (jobs()): group, state, attempt, payload size, last error,
//     token, and its deadline / due time / time of death in model units,
// and every 16 operations that fsck() finds the segment clean. Each seed ends
// by serving everything, clearing every setting and letting two sweeps a
// recovery bound apart run: then every lane but the default one must have
// been reclaimed.
//
// Replay: a failure prints the seed and the op index. FAIRLANE_MODEL_SEED=<n>
// runs only that seed (add FAIRLANE_MODEL_TRACE=1 to print every op of it);
// FAIRLANE_MODEL_SEEDS=<count> runs seeds 1..count instead of the default;
// FAIRLANE_MODEL_FSCK=1 runs fsck after every op (to find the op that broke
// an invariant). A replay follows the failing run exactly up to the first op
// whose outcome depends on the slot layout (a sweep or requeue_all_dead
// that rings two lanes at once, promotions competing for the last lane
// record): slots are handed out from a per-thread cursor that starts from
// the thread id, so the layout differs from one process to the next. The
// report lists the failing run's own ops.
//
// Time. The segment clock is CLOCK_MONOTONIC plus a test offset, so it also
// moves by itself while the test runs. Every duration in this test (lease,
// delay, extend, advance_clock) is a whole number of kUnitMs (1,000 s), never
// zero, and the recovery bound is the largest there is (60 s, so a sweep
// pass is due half of it after the last one): the few milliseconds of real
// time a seed takes never move a deadline across a unit boundary nor make a
// pass due. So a claim runs a sweep pass exactly when the model clock moved
// since the last pass, or an operation asked for one (an out-of-order
// enqueue, a reassign); tick always sweeps.
//
// What the model mirrors beyond the documented rules, because it is visible
// (each is deterministic, and listed here so that a change shows):
//   - A lane's order is a run (ascending, appended at the tail: an id at or
//     below the tail's goes to the strays) and a strays list (jobs coming
//     back, and out-of-order ids). A lane's strays flag is set when a job is
//     linked into its strays and cleared only when a claim finds the lane
//     empty: until then the lane counts as serviceable (it keeps or gets a
//     ring token, and the snapshot shows it ringed). ModelContract below
//     asserts the documented view (an empty lane is not in the ring).
//   - reassign leaves a husk (an aborted slot) at the job's old place in its
//     old lane: it takes a slot, makes the lane look nonempty (depth counts
//     it, the lane keeps its token) until a claim or a drain pops it.
//     Round2Segment.ReassignPutsTheJobAtItsIdPositionWithItsAttemptAndPayload
//     asserts the documented view (depth and ringed after a move).
//   - Lane records: a new lane takes the first free record from a rotating
//     cursor; with none free within kFreeLook records of it, the first idle
//     lane met from there is reclaimed for it (lanes.cpp take_record).
//     Sweeps also reclaim idle lanes (two sightings a recovery bound apart);
//     the model does not predict when, it takes them from the snapshot (a
//     lane the model holds idle that the snapshot no longer lists was
//     reclaimed) and asserts only that a lane that is not idle is never
//     reclaimed, and that at the end all idle lanes are.
//   - The order in which a sweep or requeue_all_dead visits jobs is slot
//     order, an accident of the allocator: the model reads the jobs' slot
//     numbers from the segment (a raw mapping) to follow it.
//
// Not reached from one thread, so not modelled: claim_wait, 65,535 used-up
// attempts, an id index bucket pair that is full.
#include "../../src/lanes.hpp"  // kFreeLook
#include "raw_segment.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace fairlane {
namespace {

using test::SegmentGuard;

constexpr std::uint64_t kUnitMs = 1'000'000;  // every duration is a multiple of this
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kDefaultSeeds = 150;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr std::uint64_t kDefaultSeeds = 150;
#else
constexpr std::uint64_t kDefaultSeeds = 1500;
#endif
#else
constexpr std::uint64_t kDefaultSeeds = 1500;
#endif
constexpr std::size_t kErrorKept = 48;               // last_error is truncated to this (queue.hpp)
constexpr std::uint64_t kActiveMax = (1ULL << 17) - 1;  // a lane's active count field
// Job ids: fresh ones are kIdBase + 2k in mint order; odd offsets are ids that
// arrive out of mint order (older than jobs already queued).
constexpr std::uint64_t kIdBase = snowflake_of(100'000'000ULL, 0, 0);

const BrandedId kDefaultLaneGroup = *BrandedId::parse(kDefaultGroup);

BrandedId job_id(std::uint64_t sf) { return BrandedId::make("JOB", sf); }
std::string id_name(std::uint64_t sf) { return std::string("#").append(std::to_string(sf - kIdBase)); }
std::string gname(const BrandedId& g) { return g.valid() ? std::string(g.kind()) : std::string("<default>"); }
BrandedId norm(const BrandedId& g) { return g.valid() ? g : kDefaultLaneGroup; }

// ceil(a / b) for b > 0 and any sign of a.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// How often the runs reached the states worth reaching; printed at the end
// so a change of the op mix that stops exercising something shows.
struct Coverage {
  std::uint64_t leases = 0, turns_held = 0, lazy_drops = 0, limit_stops = 0, husks_popped = 0, stray_flags_cleared = 0;
  std::uint64_t expired = 0, promoted = 0, dead = 0, requeued = 0, drained = 0, duplicates = 0, reused_ids = 0;
  std::uint64_t full = 0, lanes_full = 0, stale = 0, gone = 0, old_tokens = 0, moved = 0, released = 0;
  std::uint64_t reclaimed_for_new = 0, reclaimed_by_sweep = 0, lane_batches = 0;
};
Coverage coverage;

// ============================================================== the model

enum class MState { pending, leased, scheduled, dead };

JobState visible(MState s) {
  switch (s) {
    case MState::pending: return JobState::pending;
    case MState::leased: return JobState::leased;
    case MState::scheduled: return JobState::scheduled;
    case MState::dead: return JobState::dead;
  }
  return JobState::pending;
}

struct MJob {
  BrandedId group;
  MState st = MState::pending;
  std::uint32_t attempt = 0;  // deliveries so far; a lease carries attempt + 1
  std::int64_t when = 0;      // leased: deadline; scheduled: due; dead: died at (model units)
  std::string payload;
  std::string error;
  Token token;                // leased: the current lease's
  std::vector<Token> tokens;  // every lease's, oldest first
};

struct Node {
  std::uint64_t sf;
  bool husk;
};

struct MLane {
  BrandedId group;
  std::vector<Node> run;     // ascending ids, appended at the tail; husks stay in place
  std::vector<Node> strays;  // sorted by id
  bool strays_flag = false;
  std::uint64_t active = 0;
  std::uint32_t limit = 0;   // 0: none
  std::uint32_t weight = 1;
  bool paused = false;
  bool ringed = false;       // it holds exactly one ring token
  std::uint64_t served = 0;

  bool defaults() const { return limit == 0 && weight == 1 && !paused; }
  std::uint64_t cap() const { return limit ? limit : kActiveMax; }
  // As the lane word says it: anything linked (or a strays flag), unpaused, below its limit.
  bool serviceable() const { return (!run.empty() || strays_flag) && !paused && active < cap(); }
  std::uint64_t pending() const {
    std::uint64_t n = 0;
    for (const Node& x : run) n += !x.husk;
    for (const Node& x : strays) n += !x.husk;
    return n;
  }
  std::uint64_t husks() const { return run.size() + strays.size() - pending(); }
};

struct MLease {
  std::uint64_t sf;
  int lane;
  std::uint32_t attempt;
};

class Model {
 public:
  static constexpr int kAbsent = -1;
  static constexpr int kLanesFull = -2;

  Model(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes)
      : jobs_cap(jobs), lane_cap(lanes), payload_cap(payload_bytes), records_(lanes + 1) {
    records_[0] = MLane{};
    records_[0]->group = kDefaultLaneGroup;
    lane_of_[kDefaultLaneGroup] = 0;
  }

  // ---- lanes
  int find(const BrandedId& g) const {
    auto it = lane_of_.find(norm(g));
    return it == lane_of_.end() ? kAbsent : it->second;
  }
  MLane& lane(int r) { return *records_[std::size_t(r)]; }
  const MLane& lane(int r) const { return *records_[std::size_t(r)]; }
  bool idle(int r) const {
    const MLane& l = lane(r);
    return r != 0 && l.run.empty() && l.strays.empty() && !l.strays_flag && l.active == 0 && l.defaults();
  }
  void reclaim(int r) {
    lane_of_.erase(lane(r).group);
    records_[std::size_t(r)].reset();
    ring_.erase(std::remove(ring_.begin(), ring_.end(), r), ring_.end());
    if (head_is_held_ && (ring_.empty() || ring_.front() != held_lane_)) head_is_held_ = false;
    ++reclaimed;
  }
  // A record for a new lane, as lanes.cpp take_record finds one: one pass
  // from the rotating cursor, taking the first free record, or, once
  // kFreeLook records were looked at with none free, the first idle lane
  // met (reclaimed for it). -1: none free and none idle.
  int take_record() {
    const std::uint64_t start = cursor_++;
    int idle_lane = -1;
    for (std::uint32_t k = 0; k < lane_cap; ++k) {
      const int r = 1 + int((start + k) % lane_cap);
      if (!records_[std::size_t(r)]) return r;
      if (idle_lane < 0 && idle(r)) idle_lane = r;
      if (idle_lane >= 0 && k + 1 >= detail::kFreeLook) break;
    }
    if (idle_lane >= 0) {
      reclaim(idle_lane);
      ++coverage.reclaimed_for_new;
    }
    return idle_lane;
  }
  // The group's lane, made if asked (take_record).
  int lane_for(const BrandedId& g, bool create) {
    const int found = find(g);
    if (found != kAbsent || !create) return found;
    const int r = take_record();
    if (r < 0) return kLanesFull;
    records_[std::size_t(r)] = MLane{};
    records_[std::size_t(r)]->group = norm(g);
    lane_of_[norm(g)] = r;
    return r;
  }

  // Every CAS of a lane word: a lane that is now serviceable and holds no
  // token gets one at the ring's tail.
  void touch(int r) {
    MLane& l = lane(r);
    if (!l.ringed && l.serviceable()) {
      l.ringed = true;
      ring_.push_back(r);
    }
  }
  static void strays_insert(MLane& l, std::uint64_t sf, bool husk = false) {
    auto at = std::lower_bound(l.strays.begin(), l.strays.end(), sf, [](const Node& n, std::uint64_t k) { return n.sf < k; });
    l.strays.insert(at, Node{sf, husk});
    l.strays_flag = true;
  }
  // A job linked back into its lane's strays, pending (the `linked` step).
  void link_back(int r, std::uint64_t sf) {
    strays_insert(lane(r), sf);
    touch(r);
  }
  std::uint64_t slots_used() const {
    std::uint64_t n = jobs_.size();
    for (const auto& rec : records_)
      if (rec) n += rec->husks();
    return n;
  }

  // ---- jobs
  EnqueueStatus enqueue(const BrandedId& g, std::optional<std::uint64_t> sf, bool kind_ok, const std::string& payload,
                        std::int64_t delay) {
    if (!sf) return EnqueueStatus::invalid_id;
    if (!kind_ok) return EnqueueStatus::kind_mismatch;
    if (payload.size() > payload_cap) return EnqueueStatus::payload_too_large;
    if (jobs_.count(*sf)) {
      ++counters.duplicates;
      return EnqueueStatus::duplicate;
    }
    if (slots_used() >= jobs_cap) return EnqueueStatus::full;
    MJob j;
    j.group = norm(g);
    j.payload = payload;
    if (delay > 0) {  // scheduled jobs hold no lane
      j.st = MState::scheduled;
      j.when = now + delay;
    } else {
      const int r = lane_for(g, true);
      if (r == kLanesFull) return EnqueueStatus::lanes_full;
      MLane& l = lane(r);
      if (l.run.empty() || l.run.back().sf < *sf) {
        l.run.push_back(Node{*sf, false});
      } else {
        strays_insert(l, *sf);  // admitted scheduled, due now, and promoted at once
        zero_due_ = true;
      }
      touch(r);
    }
    jobs_[*sf] = j;
    ++counters.enqueued;
    return EnqueueStatus::enqueued;
  }

  // One sweep pass: due leases go back to their lanes' strays, due jobs are
  // adopted by theirs, in slot order (`slot_of`).
  std::uint64_t sweep(const std::map<std::uint64_t, std::uint32_t>& slot_of) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> due;
    for (const auto& [sf, j] : jobs_)
      if ((j.st == MState::leased || j.st == MState::scheduled) && j.when <= now) {
        auto it = slot_of.find(sf);
        due.emplace_back(it == slot_of.end() ? ~0U : it->second, sf);
      }
    std::sort(due.begin(), due.end());
    std::uint64_t moved = 0;
    for (const auto& [slot, sf] : due) {
      MJob& j = jobs_.at(sf);
      if (j.st == MState::leased) {
        const int r = find(j.group);  // a lease holds its lane
        lane(r).active--;
        j.st = MState::pending;
        j.when = 0;
        link_back(r, sf);
        ++counters.expired;
      } else {
        const int r = lane_for(j.group, true);
        if (r == kLanesFull) continue;  // stays due; the next pass tries again
        j.st = MState::pending;
        j.when = 0;
        link_back(r, sf);
        ++counters.promoted;
      }
      ++moved;
    }
    return moved;
  }
  bool pass_due() const { return now > last_pass_ || zero_due_; }
  std::uint64_t tick(const std::map<std::uint64_t, std::uint32_t>& slot_of) {
    zero_due_ = false;
    return sweep(slot_of);
  }

  // claim / claim_batch / claim_lane_batch (claiming.cpp, ring_step + serve).
  std::vector<MLease> claim(std::size_t room, bool one_lane, std::int64_t lease,
                            const std::map<std::uint64_t, std::uint32_t>& slot_of) {
    std::vector<MLease> out;
    if (room == 0) return out;  // an empty span does nothing at all, not even a sweep
    if (pass_due()) {
      sweep(slot_of);
      last_pass_ = now;
      zero_due_ = false;
    }
    if (queue_paused) return out;
    while (out.size() < room && !ring_.empty()) {
      const int r = ring_.front();
      MLane& l = lane(r);
      if (!l.serviceable()) {  // lazy removal: the token leaves the ring when it is reached
        ++coverage.lazy_drops;
        l.ringed = false;
        pop_head();
        continue;
      }
      std::size_t want = one_lane ? room - out.size() : std::min<std::size_t>(room - out.size(), l.weight);
      if (l.limit) want = std::min<std::size_t>(want, l.limit > l.active ? l.limit - l.active : 0);
      if (want == 0) want = 1;
      bool passed = false;
      std::size_t took = 0;
      for (int rounds = 0; took < want && rounds < 256; ++rounds) {
        if (l.paused || l.active >= l.cap()) break;
        std::vector<Node>* from = nullptr;
        if (!l.run.empty()) from = &l.run;
        if (l.strays_flag && !l.strays.empty() && (!from || l.strays.front().sf < l.run.front().sf)) from = &l.strays;
        if (!from) {
          // Nothing left: the strays flag goes, and the token if still ours.
          if (l.strays_flag) ++coverage.stray_flags_cleared;
          l.strays_flag = false;
          if (!passed) {
            l.ringed = false;
            pop_head();
            passed = true;
          }
          break;
        }
        const Node x = from->front();
        from->erase(from->begin());
        // The take of the strays' last node clears the flag in its CAS.
        if (from == &l.strays && l.strays.empty()) l.strays_flag = false;
        if (x.husk) {  // popped and freed, no count
          ++coverage.husks_popped;
          continue;
        }
        ++l.active;
        if (!passed) {
          if (!l.serviceable()) {
            if (l.active >= l.cap() && l.pending() > 0) ++coverage.limit_stops;
            l.ringed = false;  // emptied or at its ceiling: leaves the ring in the same step
            pop_head();
            passed = true;
          } else {
            const std::uint32_t left = l.weight <= 1 ? 1 : (head_is_held_ ? std::max<std::uint32_t>(held_left_, 1) : l.weight);
            if (left > 1) {
              head_is_held_ = true;  // the token stays at the head: more claims owed this turn
              held_lane_ = r;
              held_left_ = left - 1;
              ++coverage.turns_held;
            } else {
              pop_head();
              ring_.push_back(r);
              passed = true;
            }
          }
        }
        MJob& j = jobs_.at(x.sf);
        j.st = MState::leased;
        ++j.attempt;
        j.when = now + lease;
        ++l.served;
        out.push_back(MLease{x.sf, r, j.attempt});
        ++took;
      }
      if (one_lane && took > 0) break;
    }
    counters.claimed += out.size();
    coverage.leases += out.size();
    return out;
  }
  void record_token(std::uint64_t sf, Token t) {
    MJob& j = jobs_.at(sf);
    j.token = t;
    j.tokens.push_back(t);
  }

  // Fenced lookup shared by complete, fail, extend and release: stale for any
  // token but the current lease's, gone for an id that is no job.
  std::optional<AckStatus> fence(std::uint64_t sf, bool kind_ok, Token token) const {
    if (!kind_ok) return AckStatus::gone;
    auto it = jobs_.find(sf);
    if (it == jobs_.end()) return AckStatus::gone;
    if (it->second.st != MState::leased || !(it->second.token == token)) return AckStatus::stale;
    return std::nullopt;
  }

  AckStatus complete(std::uint64_t sf, bool kind_ok, Token token) {
    if (auto st = fence(sf, kind_ok, token)) return *st;
    const int r = find(jobs_.at(sf).group);
    jobs_.erase(sf);
    lane(r).active--;
    touch(r);
    ++counters.completed;
    return AckStatus::ok;
  }

  FailStatus fail(std::uint64_t sf, bool kind_ok, Token token, std::int64_t delay, std::uint32_t max_attempts,
                  const std::string& error) {
    if (auto st = fence(sf, kind_ok, token)) return *st == AckStatus::gone ? FailStatus::gone : FailStatus::stale;
    MJob& j = jobs_.at(sf);
    const int r = find(j.group);
    j.error = error.substr(0, kErrorKept);
    lane(r).active--;
    if (j.attempt >= std::max<std::uint32_t>(max_attempts, 1)) {
      j.st = MState::dead;
      j.when = now;
      touch(r);
      ++counters.dead;
      return FailStatus::dead;
    }
    if (delay == 0) {
      j.st = MState::pending;
      j.when = 0;
      link_back(r, sf);
    } else {
      j.st = MState::scheduled;
      j.when = now + delay;
      touch(r);
    }
    ++counters.retried;
    return FailStatus::retrying;
  }

  AckStatus release(std::uint64_t sf, bool kind_ok, Token token) {
    if (auto st = fence(sf, kind_ok, token)) return *st;
    MJob& j = jobs_.at(sf);
    const int r = find(j.group);
    lane(r).active--;
    j.st = MState::pending;
    j.when = 0;
    if (j.attempt) --j.attempt;  // the delivery is given back: the next lease has the same attempt
    link_back(r, sf);
    return AckStatus::ok;
  }

  AckStatus extend(std::uint64_t sf, bool kind_ok, Token token, std::int64_t lease) {
    if (auto st = fence(sf, kind_ok, token)) return *st;
    MJob& j = jobs_.at(sf);
    if (j.when <= now) return AckStatus::stale;  // past its deadline: too late
    j.when = now + lease;
    return AckStatus::ok;
  }

  template <class F>
  LaneStatus change(const BrandedId& g, bool create, F f) {
    const int r = lane_for(g, create);
    if (r == kAbsent) return LaneStatus::ok;  // nothing to clear on a group with no lane
    if (r == kLanesFull) return LaneStatus::lanes_full;
    f(lane(r));
    touch(r);
    return LaneStatus::ok;
  }
  LaneStatus pause(const BrandedId& g) { return change(g, true, [](MLane& l) { l.paused = true; }); }
  LaneStatus resume(const BrandedId& g) { return change(g, false, [](MLane& l) { l.paused = false; }); }
  LaneStatus clear_limit(const BrandedId& g) { return change(g, false, [](MLane& l) { l.limit = 0; }); }
  LaneStatus set_limit(const BrandedId& g, std::uint32_t limit) {
    if (limit == 0 || limit > kMaxLimit) return LaneStatus::invalid_argument;
    return change(g, true, [limit](MLane& l) { l.limit = limit; });
  }
  LaneStatus set_weight(const BrandedId& g, std::uint32_t weight) {
    if (weight < 1 || weight > kMaxWeight) return LaneStatus::invalid_argument;
    return change(g, weight != 1, [weight](MLane& l) { l.weight = weight; });
  }
  std::uint64_t depth(const BrandedId& g) const {
    const int r = find(g);
    return r < 0 ? 0 : lane(r).pending();  // husks are not jobs
  }
  std::uint64_t drain(const BrandedId& g) {
    const int r = find(g);
    if (r < 0) return 0;
    MLane& l = lane(r);
    std::uint64_t n = 0;
    for (;;) {
      std::vector<Node>* from = nullptr;
      if (!l.run.empty()) from = &l.run;
      if (l.strays_flag && !l.strays.empty() && (!from || l.strays.front().sf < l.run.front().sf)) from = &l.strays;
      if (!from) break;
      const Node x = from->front();
      from->erase(from->begin());
      if (from == &l.strays && l.strays.empty()) l.strays_flag = false;  // as a claim's take
      if (x.husk) continue;
      jobs_.erase(x.sf);  // freed: the id may be enqueued again
      ++n;
      touch(r);
    }
    counters.drained += n;
    return n;
  }

  MoveStatus reassign(std::uint64_t sf, bool kind_ok, const BrandedId& g) {
    if (!kind_ok) return MoveStatus::gone;
    auto it = jobs_.find(sf);
    if (it == jobs_.end()) return MoveStatus::gone;
    MJob& j = it->second;
    if (j.st != MState::pending) return MoveStatus::not_pending;
    if (j.group == norm(g)) return MoveStatus::moved;
    int to = 0;
    if (norm(g) != kDefaultLaneGroup) {
      to = lane_for(g, true);
      if (to < 0) return MoveStatus::lanes_full;
    }
    if (slots_used() >= jobs_cap) return MoveStatus::full;  // the copy needs a slot
    const int from = find(j.group);
    MLane& o = lane(from);
    bool dropped = false;
    for (auto* list : {&o.run, &o.strays})
      for (Node& x : *list)
        if (x.sf == sf && !x.husk && !dropped) {
          x.husk = true;  // the `drop` step: a husk in place, for a claim to pop
          dropped = true;
        }
    // The move pops the husks at the old lane's front (so that a lane it
    // emptied leaves the ring), as a claim would.
    for (;;) {
      std::vector<Node>* front = nullptr;
      if (!o.run.empty()) front = &o.run;
      if (o.strays_flag && !o.strays.empty() && (!front || o.strays.front().sf < o.run.front().sf)) front = &o.strays;
      if (!front) {
        o.strays_flag = false;
        break;
      }
      if (!front->front().husk) break;
      front->erase(front->begin());
      if (front == &o.strays && o.strays.empty()) o.strays_flag = false;
      ++coverage.husks_popped;
    }
    touch(from);
    j.group = norm(g);
    link_back(to, sf);  // the copy, adopted into its new lane
    zero_due_ = true;
    ++coverage.moved;
    return MoveStatus::moved;
  }

  AckStatus requeue_dead(std::uint64_t sf, bool kind_ok) {
    if (!kind_ok) return AckStatus::gone;
    auto it = jobs_.find(sf);
    if (it == jobs_.end()) return AckStatus::gone;
    if (it->second.st != MState::dead) return AckStatus::stale;
    adopt_dead(sf);  // with no lane for its group now, it waits due: requeued all the same
    return AckStatus::ok;
  }
  std::uint64_t requeue_all_dead(const std::map<std::uint64_t, std::uint32_t>& slot_of) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> dead;
    for (const auto& [sf, j] : jobs_)
      if (j.st == MState::dead) dead.emplace_back(slot_of.count(sf) ? slot_of.at(sf) : ~0U, sf);
    std::sort(dead.begin(), dead.end());
    std::uint64_t n = 0;
    for (const auto& [slot, sf] : dead) {
      adopt_dead(sf);
      ++n;
    }
    return n;
  }
  std::uint64_t purge_dead() {
    std::uint64_t n = 0;
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.st == MState::dead) {
        it = jobs_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  // The snapshot's ring: the valid tokens from the head, serviceable lanes only.
  std::vector<BrandedId> visible_ring() const {
    std::vector<BrandedId> out;
    for (int r : ring_)
      if (lane(r).serviceable()) out.push_back(lane(r).group);
    return out;
  }
  // Live lanes in record (table) order.
  std::vector<int> live() const {
    std::vector<int> out;
    for (std::size_t i = 0; i < records_.size(); ++i)
      if (records_[i]) out.push_back(int(i));
    return out;
  }

  // Self-check of the model: one token per ringed lane, none for the others.
  std::string self_check() const {
    std::map<int, int> tokens;
    for (int r : ring_) ++tokens[r];
    for (std::size_t i = 0; i < records_.size(); ++i) {
      if (!records_[i]) {
        if (tokens.count(int(i))) return "model: a free record holds a token";
        continue;
      }
      const int t = tokens.count(int(i)) ? tokens.at(int(i)) : 0;
      if (t != (records_[i]->ringed ? 1 : 0))
        return "model: lane " + gname(records_[i]->group) + " has " + std::to_string(t) + " tokens";
    }
    if (head_is_held_ && (ring_.empty() || ring_.front() != held_lane_)) return "model: a held turn not at the head";
    return {};
  }

  const std::map<std::uint64_t, MJob>& jobs() const { return jobs_; }
  std::string hold_note() const {
    return head_is_held_ ? " (head " + gname(lane(held_lane_).group) + " owed " + std::to_string(held_left_) + ")" : "";
  }

  std::int64_t now = 0;  // model units
  bool queue_paused = false;
  Counters counters;
  std::uint64_t reclaimed = 0;
  const std::uint32_t jobs_cap, lane_cap, payload_cap;

 private:
  void pop_head() {
    ring_.pop_front();
    head_is_held_ = false;
  }
  // A dead job back at attempt 0, its last error kept: into its lane, or,
  // with no lane for its group now, due (scheduled) for a sweep to link.
  bool adopt_dead(std::uint64_t sf) {
    MJob& j = jobs_.at(sf);
    j.attempt = 0;
    j.when = 0;
    const int r = lane_for(j.group, true);
    if (r == kLanesFull) {
      j.st = MState::scheduled;
      j.when = now;
      return false;
    }
    j.st = MState::pending;
    link_back(r, sf);
    return true;
  }

  std::vector<std::optional<MLane>> records_;  // lane records; 0 is the default lane
  std::map<BrandedId, int> lane_of_;
  std::map<std::uint64_t, MJob> jobs_;
  std::deque<int> ring_;
  bool head_is_held_ = false;  // the head token's turn is under way (claims owed)
  int held_lane_ = 0;
  std::uint32_t held_left_ = 0;
  std::uint64_t cursor_ = 0;   // the segment's lane allocation cursor
  std::int64_t last_pass_ = std::numeric_limits<std::int64_t>::min();
  bool zero_due_ = false;      // an operation asked for a sweep pass at the next claim
};

// ============================================================== the runner

std::optional<std::uint64_t> env_u64(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') return std::nullopt;
  return n;
}

// One seed: a fresh segment, a fresh model, one random op sequence.
class SeedRun {
 public:
  SeedRun(std::uint64_t seed, Queue& q, const QueueOptions& o, int enqueue_weight, bool trace)
      : seed_(seed), rng_(seed ^ 0x9E3779B97F4A7C15ULL), q_(q), raw_(q.name()), m_(o.jobs, o.lanes, o.payload_bytes),
        enqueue_weight_(enqueue_weight), trace_(trace) {
    for (const char* k : {"AAA", "BBB", "CCC", "DDD", "EEE"}) groups_.push_back(BrandedId::make(k, 1));
  }

  // Runs `ops` operations, then the end of the seed; returns an empty string
  // or the first divergence.
  std::string run(int ops) {
    for (op_ = 0; op_ < ops; ++op_) {
      desc_.clear();
      step();
      if (!after_op()) return report();
    }
    finish();
    if (!failure_.empty()) return report();
    const Counters& c = m_.counters;
    coverage.expired += c.expired;
    coverage.promoted += c.promoted;
    coverage.dead += c.dead;
    coverage.drained += c.drained;
    coverage.duplicates += c.duplicates;
    return {};
  }

 private:
  bool after_op() {
    if (failure_.empty())
      if (std::string e = m_.self_check(); !e.empty()) fail_with(e);
    if (failure_.empty()) compare_state();
    if (failure_.empty() && (fsck_every_ || op_ % 16 == 15)) check_fsck();
    log_.push_back(desc_);
    if (trace_) {
      std::printf("  [%d] %s\n", op_, desc_.c_str());
      std::string ring = "      ring:";
      const Snapshot snap = q_.snapshot();
      for (const auto& g : snap.ring) ring += " " + gname(g);
      ring += " (lanes";
      for (const auto& li : snap.lanes) ring += " " + gname(li.group) + "/" + std::to_string(li.depth) + "/" + std::to_string(li.active);
      ring += "; scheduled " + std::to_string(snap.scheduled) + ")";
      ring += " | model:";
      for (const auto& g : m_.visible_ring()) ring += " " + gname(g);
      std::printf("%s\n", ring.c_str());
    }
    return failure_.empty();
  }

  // ---------------------------------------------------------- randomness
  std::uint64_t u(std::uint64_t n) { return n ? rng_() % n : 0; }
  bool chance(int percent) { return int(u(100)) < percent; }

  // A group argument: index 0 is the default lane, named either way.
  BrandedId pick_group() {
    const std::size_t i = u(groups_.size() + 1);
    if (i == 0) return chance(50) ? BrandedId{} : kDefaultLaneGroup;
    return groups_[i - 1];
  }
  std::string random_payload() {
    if (chance(40)) return {};
    const std::uint64_t len = chance(3) ? m_.payload_cap + 1 : 1 + u(m_.payload_cap);
    std::string p(len, 'x');
    for (char& c : p) c = char('a' + u(26));
    return p;
  }
  std::int64_t units(int lo, int hi) { return lo + std::int64_t(u(std::uint64_t(hi - lo + 1))); }

  // The slot of every job (a raw read: the order a sweep visits them in).
  std::map<std::uint64_t, std::uint32_t> slots() {
    std::map<std::uint64_t, std::uint32_t> out;
    for (std::uint32_t i = 0; i < raw_.header().job_capacity; ++i) {
      const auto st = detail::SlotWord::state(raw_.slot_word_value(i));
      if (st == detail::SlotState::pending || st == detail::SlotState::leased || st == detail::SlotState::scheduled ||
          st == detail::SlotState::dead || st == detail::SlotState::returning)
        out[raw_.slot(i).sf.load()] = i;
    }
    return out;
  }

  // A job and a token to acknowledge it with: usually a live lease's.
  struct Target {
    std::uint64_t sf = 0;
    bool kind_ok = true;
    Token token;
    std::string how;
  };
  Target pick_target() {
    std::vector<std::uint64_t> leased, live;
    for (const auto& [sf, j] : m_.jobs()) {
      live.push_back(sf);
      if (j.st == MState::leased) leased.push_back(sf);
    }
    Target t;
    const int r = int(u(100));
    auto made_up = [&] { return Token(rng_() | 1); };
    if (r < 55 && !leased.empty()) {
      t.sf = leased[u(leased.size())];
      t.token = m_.jobs().at(t.sf).token;
      t.how = "its token";
    } else if (r < 65 && !leased.empty()) {
      t.sf = leased[u(leased.size())];
      const auto& toks = m_.jobs().at(t.sf).tokens;
      if (toks.size() > 1) {
        t.token = toks[u(toks.size() - 1)];  // an earlier lease's
        t.how = "an earlier lease's token";
        ++coverage.old_tokens;
      } else {
        t.token = made_up();
        t.how = "a made-up token";
      }
    } else if (r < 72 && leased.size() > 1) {
      t.sf = leased[u(leased.size())];
      std::uint64_t other = leased[u(leased.size())];
      if (other == t.sf) other = leased[(std::find(leased.begin(), leased.end(), t.sf) - leased.begin() + 1) % leased.size()];
      t.token = m_.jobs().at(other).token;
      t.how = "another job's token";
    } else if (r < 84 && !live.empty()) {
      t.sf = live[u(live.size())];
      const auto& toks = m_.jobs().at(t.sf).tokens;
      t.token = toks.empty() ? made_up() : toks.back();
      t.how = "its last token";
    } else if (r < 95 && !known_.empty()) {
      t.sf = known_[u(known_.size())];  // perhaps completed, drained or purged: gone
      t.token = made_up();
      t.how = "an id seen before";
    } else {
      t.sf = kIdBase + 2 * (next_fresh_ + 1000);  // never enqueued
      t.kind_ok = chance(50);
      t.token = made_up();
      t.how = "never enqueued";
    }
    return t;
  }
  BrandedId target_id(const Target& t) const { return t.kind_ok ? job_id(t.sf) : BrandedId::make("XYZ", t.sf); }
  std::string target_name(const Target& t) const {
    return (t.kind_ok ? id_name(t.sf) : "XYZ" + id_name(t.sf)) + " (" + t.how + ")";
  }

  // ---------------------------------------------------------- one op
  void step() {
    struct Choice {
      int weight;
      void (SeedRun::*op)();
    };
    const Choice mix[] = {
        {enqueue_weight_, &SeedRun::op_enqueue}, {4, &SeedRun::op_enqueue_batch},
        {16, &SeedRun::op_claim},                {6, &SeedRun::op_claim_batch},
        {4, &SeedRun::op_claim_lane_batch},      {11, &SeedRun::op_complete},
        {8, &SeedRun::op_fail},                  {3, &SeedRun::op_extend},
        {4, &SeedRun::op_release},               {3, &SeedRun::op_reassign},
        {3, &SeedRun::op_pause},                 {4, &SeedRun::op_resume},
        {1, &SeedRun::op_pause_all},             {2, &SeedRun::op_resume_all},
        {3, &SeedRun::op_set_limit},             {3, &SeedRun::op_set_weight},
        {2, &SeedRun::op_drain},                 {3, &SeedRun::op_requeue_dead},
        {1, &SeedRun::op_requeue_all_dead},      {1, &SeedRun::op_purge_dead},
        {6, &SeedRun::op_advance},               {2, &SeedRun::op_tick},
        {1, &SeedRun::op_depth},                 {1, &SeedRun::op_job},
    };
    int total = 0;
    for (const auto& c : mix) total += c.weight;
    int r = int(u(std::uint64_t(total)));
    for (const auto& c : mix) {
      if (r < c.weight) {
        (this->*c.op)();
        break;
      }
      r -= c.weight;
    }
  }

  static AckStatus tally(AckStatus s) {
    if (s == AckStatus::stale) ++coverage.stale;
    if (s == AckStatus::gone) ++coverage.gone;
    return s;
  }

  template <class T>
  void expect_eq(const T& real, const T& model, const char* what) {
    if (real == model) return;
    std::ostringstream os;
    os << what << ": segment ";
    print(os, real);
    os << ", model ";
    print(os, model);
    fail_with(os.str());
  }
  template <class T>
  static void print(std::ostream& os, const T& v) {
    if constexpr (std::is_enum_v<T>) os << to_string(v);
    else if constexpr (std::is_same_v<T, BrandedId>) os << gname(v) << " (" << v.str() << ")";
    else os << v;
  }
  void fail_with(const std::string& s) {
    if (failure_.empty()) failure_ = s;
  }

  // An id for an enqueue: fresh, out of order, live, seen before, of another
  // namespace, or none.
  std::optional<std::uint64_t> pick_new_id(bool& kind_ok, std::string& how) {
    kind_ok = true;
    std::vector<std::uint64_t> live;
    for (const auto& [id, j] : m_.jobs()) live.push_back(id);
    const int r = int(u(100));
    if (r < 66) return kIdBase + 2 * ++next_fresh_;
    if (r < 78) {
      how = " (out of order)";
      return kIdBase + 2 * u(next_fresh_ + 1) + 1;  // older than what is queued
    }
    if (r < 88 && !live.empty()) {
      how = " (live id)";
      return live[u(live.size())];
    }
    if (r < 95 && !known_.empty()) {
      how = " (seen before)";
      return known_[u(known_.size())];
    }
    if (r < 98) {
      kind_ok = false;
      how = " (kind XYZ)";
      return kIdBase + 2 * ++next_fresh_;
    }
    how = " (empty id)";
    return std::nullopt;
  }
  void note_enqueue(EnqueueStatus model, std::optional<std::uint64_t> sf, const std::string& how) {
    if (model == EnqueueStatus::enqueued) known_.push_back(*sf);
    if (model == EnqueueStatus::enqueued && !how.empty()) ++coverage.reused_ids;
    if (model == EnqueueStatus::full) ++coverage.full;
    if (model == EnqueueStatus::lanes_full) ++coverage.lanes_full;
  }

  void op_enqueue() {
    const BrandedId g = pick_group();
    bool kind_ok = true;
    std::string how;
    const std::optional<std::uint64_t> sf = pick_new_id(kind_ok, how);
    const std::string payload = random_payload();
    const std::int64_t delay = chance(20) ? units(1, 3) : 0;
    desc_ = "enqueue " + gname(g) + " " + (sf ? id_name(*sf) : "-") + how + " payload=" + std::to_string(payload.size()) +
            "B delay=" + std::to_string(delay);
    const BrandedId id = !sf ? BrandedId{} : kind_ok ? job_id(*sf) : BrandedId::make("XYZ", *sf);
    const EnqueueStatus real = q_.enqueue(g, id, payload, EnqueueOptions{.delay_ms = std::uint64_t(delay) * kUnitMs});
    const EnqueueStatus model = m_.enqueue(g, sf, kind_ok, payload, delay);
    desc_ += " -> " + std::string(to_string(real));
    note_enqueue(model, sf, how);
    expect_eq(real, model, "enqueue status");
  }

  void op_enqueue_batch() {
    const std::size_t n = u(5);
    std::vector<EnqueueItem> items;
    std::vector<std::optional<std::uint64_t>> sfs;
    std::vector<bool> kinds;
    std::vector<std::string> hows, payloads;
    std::vector<BrandedId> ids, gs;
    std::vector<std::int64_t> delays;
    desc_ = "enqueue_batch";
    for (std::size_t i = 0; i < n; ++i) {
      bool kind_ok = true;
      std::string how;
      sfs.push_back(pick_new_id(kind_ok, how));
      kinds.push_back(kind_ok);
      hows.push_back(how);
      payloads.push_back(random_payload());
      gs.push_back(pick_group());
      delays.push_back(chance(15) ? units(1, 3) : 0);
      ids.push_back(!sfs.back() ? BrandedId{} : kind_ok ? job_id(*sfs.back()) : BrandedId::make("XYZ", *sfs.back()));
    }
    for (std::size_t i = 0; i < n; ++i) {
      items.push_back(EnqueueItem{gs[i], ids[i], payloads[i], EnqueueOptions{.delay_ms = std::uint64_t(delays[i]) * kUnitMs}});
      desc_ += " [" + gname(gs[i]) + " " + (sfs[i] ? id_name(*sfs[i]) : "-") + hows[i] + " delay=" + std::to_string(delays[i]) + "]";
    }
    std::vector<EnqueueStatus> statuses(n + 1, EnqueueStatus::corrupt);  // one extra: left alone
    const std::size_t real = q_.enqueue_batch(items, statuses);
    std::size_t model = 0;
    desc_ += " ->";
    for (std::size_t i = 0; i < n; ++i) {
      const EnqueueStatus st = m_.enqueue(gs[i], sfs[i], kinds[i], payloads[i], delays[i]);
      note_enqueue(st, sfs[i], hows[i]);
      model += st == EnqueueStatus::enqueued;
      desc_ += " " + std::string(to_string(statuses[i]));
      expect_eq(statuses[i], st, "enqueue_batch item status");
    }
    expect_eq(statuses[n], EnqueueStatus::corrupt, "enqueue_batch: the status past the items");
    expect_eq(real, model, "enqueue_batch count");
  }

  void do_claim(std::size_t room, int kind) {  // kind 0: claim, 1: claim_batch, 2: claim_lane_batch
    const std::int64_t lease = units(1, 4);
    const auto slot_of = slots();
    std::vector<Lease> real;
    const std::uint32_t lease_ms = std::uint32_t(lease * std::int64_t(kUnitMs));
    if (kind == 0) {
      if (q_.claim(lease_, lease_ms)) real.push_back(lease_);
    } else {
      std::vector<Lease> out(room);
      const std::size_t n = kind == 1 ? q_.claim_batch(out, lease_ms) : q_.claim_lane_batch(out, lease_ms);
      if (n > room) {
        fail_with("claim returned " + std::to_string(n) + " for room " + std::to_string(room));
        return;
      }
      out.resize(n);
      real = std::move(out);
    }
    const std::vector<MLease> model = m_.claim(kind == 0 ? 1 : room, kind == 2, lease, slot_of);
    if (kind == 2 && !model.empty()) ++coverage.lane_batches;
    desc_ = std::string(kind == 0 ? "claim" : kind == 1 ? "claim_batch" : "claim_lane_batch") +
            (kind ? " room=" + std::to_string(room) : std::string()) + " lease=" + std::to_string(lease) + " ->";
    for (const Lease& l : real) desc_ += " " + gname(l.group) + ":" + id_name(l.id.snowflake()) + "/a" + std::to_string(l.attempt);
    if (real.empty()) desc_ += " nothing";
    std::ostringstream diff;
    if (real.size() != model.size()) diff << "segment handed out " << real.size() << " leases, model " << model.size() << "; ";
    for (std::size_t i = 0; i < std::max(real.size(), model.size()); ++i) {
      std::ostringstream r, mm;
      if (i < real.size()) r << gname(real[i].group) << ":" << id_name(real[i].id.snowflake()) << "/a" << real[i].attempt;
      else r << "-";
      if (i < model.size()) {
        const MJob& j = m_.jobs().at(model[i].sf);
        mm << gname(j.group) << ":" << id_name(model[i].sf) << "/a" << model[i].attempt;
      } else {
        mm << "-";
      }
      if (i < real.size() && i < model.size()) {
        const MLease& e = model[i];
        const MJob& j = m_.jobs().at(e.sf);
        const bool same = real[i].id == job_id(e.sf) && real[i].group == j.group && real[i].attempt == e.attempt &&
                          real[i].payload == j.payload;
        if (same) continue;
      }
      diff << "lease " << i << ": segment " << r.str() << ", model " << mm.str() << "; ";
    }
    // One deadline for the whole call, and the job's slot says the same;
    // every token is new.
    for (const Lease& l : real) {
      if (l.deadline_ms != real.front().deadline_ms) diff << "leases of one call carry different deadlines; ";
      const auto j = q_.job(l.id);
      if (!j || j->when_ms != l.deadline_ms) diff << "job " << id_name(l.id.snowflake()) << " deadline differs from its lease; ";
      if (!tokens_.insert(l.token.value).second) diff << "token " << to_string(l.token) << " was handed out before; ";
    }
    if (!diff.str().empty()) {
      fail_with("claimed sequence: " + diff.str());
      return;
    }
    for (const Lease& l : real) m_.record_token(l.id.snowflake(), l.token);
  }
  void op_claim() { do_claim(1, 0); }
  void op_claim_batch() { do_claim(chance(5) ? 0 : 1 + u(6), 1); }
  void op_claim_lane_batch() { do_claim(chance(5) ? 0 : 1 + u(6), 2); }

  void op_complete() {
    const Target t = pick_target();
    desc_ = "complete " + target_name(t);
    const AckStatus real = q_.complete(target_id(t), t.token);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, tally(m_.complete(t.sf, t.kind_ok, t.token)), "complete status");
  }

  void op_fail() {
    const Target t = pick_target();
    const std::int64_t delay = chance(50) ? 0 : units(1, 3);
    const std::uint32_t max_attempts = std::uint32_t(u(5));  // 0 counts as 1
    std::string error = "err" + std::to_string(op_);
    if (chance(15)) error = std::string(70, char('A' + u(26)));  // longer than what is kept
    if (chance(10)) error.clear();
    desc_ = "fail " + target_name(t) + " delay=" + std::to_string(delay) + " max=" + std::to_string(max_attempts);
    const FailStatus real = q_.fail(target_id(t), t.token,
                                    FailOptions{.delay_ms = std::uint64_t(delay) * kUnitMs, .max_attempts = max_attempts, .error = error});
    desc_ += " -> " + std::string(to_string(real));
    const FailStatus model = m_.fail(t.sf, t.kind_ok, t.token, delay, max_attempts, error);
    if (model == FailStatus::stale) ++coverage.stale;
    if (model == FailStatus::gone) ++coverage.gone;
    expect_eq(real, model, "fail status");
  }

  void op_extend() {
    const Target t = pick_target();
    const std::int64_t lease = units(1, 4);
    desc_ = "extend " + target_name(t) + " lease=" + std::to_string(lease);
    const AckStatus real = q_.extend(target_id(t), t.token, std::uint32_t(lease * std::int64_t(kUnitMs)));
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, tally(m_.extend(t.sf, t.kind_ok, t.token, lease)), "extend status");
  }

  void op_release() {
    const Target t = pick_target();
    desc_ = "release " + target_name(t);
    const AckStatus real = q_.release(target_id(t), t.token);
    desc_ += " -> " + std::string(to_string(real));
    const AckStatus model = tally(m_.release(t.sf, t.kind_ok, t.token));
    if (model == AckStatus::ok) ++coverage.released;
    expect_eq(real, model, "release status");
  }

  void op_reassign() {
    std::vector<std::uint64_t> pending;
    for (const auto& [sf, j] : m_.jobs())
      if (j.st == MState::pending) pending.push_back(sf);
    Target t;
    if (!pending.empty() && chance(75)) {
      t.sf = pending[u(pending.size())];
      t.how = "pending";
    } else {
      t = pick_target();
    }
    const BrandedId g = pick_group();
    desc_ = "reassign " + target_name(t) + " to " + gname(g);
    const MoveStatus real = q_.reassign(target_id(t), g);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, m_.reassign(t.sf, t.kind_ok, g), "reassign status");
  }

  void op_pause() {
    const BrandedId g = pick_group();
    desc_ = "pause " + gname(g);
    const LaneStatus real = q_.pause(g);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, m_.pause(g), "pause status");
  }
  void op_resume() {
    const BrandedId g = pick_group();
    desc_ = "resume " + gname(g);
    const LaneStatus real = q_.resume(g);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, m_.resume(g), "resume status");
  }
  void op_pause_all() {
    desc_ = "pause_all";
    expect_eq(q_.pause_all(), LaneStatus::ok, "pause_all status");
    m_.queue_paused = true;
  }
  void op_resume_all() {
    desc_ = "resume_all";
    expect_eq(q_.resume_all(), LaneStatus::ok, "resume_all status");
    m_.queue_paused = false;
  }
  void op_set_limit() {
    const BrandedId g = pick_group();
    const std::uint32_t limit = chance(4) ? kMaxLimit + 1 : std::uint32_t(u(4));
    desc_ = "set_limit " + gname(g) + " " + std::to_string(limit);
    // limit 0 is refused (as in EchoMQ); clearing is its own call.
    const bool clear = limit == 0 && chance(50);
    const LaneStatus real = clear ? q_.clear_limit(g) : q_.set_limit(g, limit);
    if (clear) desc_ = "clear_limit " + gname(g);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, clear ? m_.clear_limit(g) : m_.set_limit(g, limit), "set_limit status");
  }
  void op_set_weight() {
    const BrandedId g = pick_group();
    const std::uint32_t weight = chance(4) ? (chance(50) ? 0 : kMaxWeight + 1) : std::uint32_t(1 + u(4));
    desc_ = "set_weight " + gname(g) + " " + std::to_string(weight);
    const LaneStatus real = q_.set_weight(g, weight);
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, m_.set_weight(g, weight), "set_weight status");
  }
  void op_drain() {
    const BrandedId g = pick_group();
    desc_ = "drain " + gname(g);
    const std::uint64_t real = q_.drain(g);
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.drain(g), "drain count");
  }
  void op_requeue_dead() {
    std::vector<std::uint64_t> dead;
    for (const auto& [sf, j] : m_.jobs())
      if (j.st == MState::dead) dead.push_back(sf);
    Target t;
    if (!dead.empty() && chance(75)) {
      t.sf = dead[u(dead.size())];
      t.how = "dead";
    } else {
      t = pick_target();
    }
    desc_ = "requeue_dead " + target_name(t);
    const AckStatus real = q_.requeue_dead(target_id(t));
    desc_ += " -> " + std::string(to_string(real));
    const AckStatus model = m_.requeue_dead(t.sf, t.kind_ok);
    if (model == AckStatus::ok) ++coverage.requeued;
    expect_eq(real, model, "requeue_dead status");
  }
  void op_requeue_all_dead() {
    desc_ = "requeue_all_dead";
    const auto slot_of = slots();
    const std::uint64_t real = q_.requeue_all_dead();
    desc_ += " -> " + std::to_string(real);
    const std::uint64_t model = m_.requeue_all_dead(slot_of);
    coverage.requeued += model;
    expect_eq(real, model, "requeue_all_dead count");
  }
  void op_purge_dead() {
    desc_ = "purge_dead";
    const std::uint64_t real = q_.purge_dead();
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.purge_dead(), "purge_dead count");
  }
  void advance(std::int64_t k) {
    q_.advance_clock(std::uint64_t(k) * kUnitMs);
    m_.now += k;
  }
  void do_tick() {
    const auto slot_of = slots();
    const std::uint64_t real = q_.tick();
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.tick(slot_of), "tick count");
  }
  void op_advance() {
    const std::int64_t k = units(1, 3);
    advance(k);
    desc_ = "advance_clock " + std::to_string(k);
    if (chance(40)) {
      desc_ += " + tick";
      do_tick();
    }
  }
  void op_tick() {
    desc_ = "tick";
    do_tick();
  }
  void op_depth() {
    const BrandedId g = pick_group();
    desc_ = "depth " + gname(g);
    const std::uint64_t real = q_.depth(g);
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.depth(g), "depth");
  }
  void op_job() {
    const Target t = pick_target();
    desc_ = "job " + target_name(t);
    const auto real = q_.job(target_id(t));
    const auto it = t.kind_ok ? m_.jobs().find(t.sf) : m_.jobs().end();
    desc_ += real ? " -> " + std::string(to_string(real->state)) : " -> none";
    expect_eq(real.has_value(), it != m_.jobs().end(), "job() found");
    if (real && it != m_.jobs().end()) {
      expect_eq(real->id, target_id(t), "job() id");
      expect_eq(real->state, visible(it->second.st), "job() state");
      expect_eq(real->attempt, it->second.attempt, "job() attempt");
      expect_eq(real->group, it->second.group, "job() group");
    }
  }

  // ---------------------------------------------------------- the end of a seed
  // Everything served, every setting cleared, two sweeps a recovery bound
  // apart: then only the default lane is live. Each step is an op compared
  // like the others.
  void finish() {
    auto op = [&](std::string d, auto&& f) {
      if (!failure_.empty()) return;
      desc_ = "end: " + std::move(d);
      f();
      ++op_;
      after_op();
    };
    op("resume_all", [&] {
      q_.resume_all();
      m_.queue_paused = false;
    });
    for (const BrandedId& g : std::vector<BrandedId>{kDefaultLaneGroup, groups_[0], groups_[1], groups_[2], groups_[3], groups_[4]}) {
      op("resume " + gname(g), [&] { expect_eq(q_.resume(g), m_.resume(g), "resume status"); });
      op("clear_limit " + gname(g), [&] { expect_eq(q_.clear_limit(g), m_.clear_limit(g), "clear_limit status"); });
      op("set_weight " + gname(g) + " 1", [&] { expect_eq(q_.set_weight(g, 1), m_.set_weight(g, 1), "set_weight status"); });
    }
    for (int round = 0; round < 8 && failure_.empty() && !m_.jobs().empty(); ++round) {
      op("purge_dead", [&] { expect_eq(q_.purge_dead(), m_.purge_dead(), "purge_dead count"); });
      op("advance_clock 5 + tick", [&] {
        advance(5);
        do_tick();
      });
      for (int k = 0; k < 64 && failure_.empty(); ++k) {
        bool any = false;
        op("claim_batch room=8 + complete", [&] {
          do_claim(8, 1);
          std::vector<std::uint64_t> leased;
          for (const auto& [sf, j] : m_.jobs())
            if (j.st == MState::leased) leased.push_back(sf);
          for (std::uint64_t sf : leased) {
            const Token t = m_.jobs().at(sf).token;
            expect_eq(q_.complete(job_id(sf), t), m_.complete(sf, true, t), "complete status");
            any = true;
          }
        });
        if (!any) break;
      }
    }
    if (!failure_.empty()) return;
    if (!m_.jobs().empty()) {
      fail_with("end: jobs left after serving everything");
      return;
    }
    for (int i = 0; i < 2; ++i)
      op("advance_clock 1 + tick", [&] {
        advance(1);
        do_tick();
      });
    if (!failure_.empty()) return;
    const Snapshot s = q_.snapshot();
    if (s.lanes_live != 0) fail_with("end: " + std::to_string(s.lanes_live) + " idle lanes not reclaimed after two sweeps");
    check_fsck();
  }

  // ---------------------------------------------------------- full comparison
  void compare_state() {
    const Snapshot s = q_.snapshot();
    std::ostringstream d;
    if (s.paused != m_.queue_paused) d << "queue paused: segment " << s.paused << ", model " << m_.queue_paused << "; ";
    // Lanes, in table order. An idle lane of the model that the segment no
    // longer lists was reclaimed by a sweep.
    {
      std::size_t k = 0;
      for (int r : m_.live()) {
        if (k < s.lanes.size() && s.lanes[k].group == m_.lane(r).group) {
          ++k;
          continue;
        }
        if (m_.idle(r)) {
          m_.reclaim(r);
          ++coverage.reclaimed_by_sweep;
          continue;
        }
        d << "lane " << gname(m_.lane(r).group) << " (record " << r << ", not idle) is not where the model has it; ";
        break;
      }
      if (d.str().empty() && k != s.lanes.size()) d << "the segment lists a lane the model does not have: " << gname(s.lanes[k].group) << "; ";
    }
    if (d.str().empty()) {
      const std::vector<int> live = m_.live();
      for (std::size_t k = 0; k < live.size() && k < s.lanes.size(); ++k) {
        const LaneInfo& li = s.lanes[k];
        const MLane& l = m_.lane(live[k]);
        const std::string g = gname(li.group);
        auto cmp = [&](const char* what, std::uint64_t real, std::uint64_t model) {
          if (real != model) d << g << " " << what << ": segment " << real << ", model " << model << "; ";
        };
        cmp("depth", li.depth, l.pending());  // husks are not jobs
        cmp("active", li.active, l.active);
        cmp("limit", li.limit, l.limit);
        cmp("weight", li.weight, l.weight);
        cmp("paused", li.paused, l.paused);
        cmp("ringed", li.ringed, l.ringed && l.serviceable());
        cmp("served", li.served, l.served);
      }
      // lanes_live counts groups: the default lane (record 0, always live) is not one.
      if (s.lanes_live != live.size() - 1) d << "lanes_live: segment " << s.lanes_live << ", model " << live.size() - 1 << "; ";
    }
    if (s.lanes_reclaimed != m_.reclaimed) d << "lanes_reclaimed: segment " << s.lanes_reclaimed << ", model " << m_.reclaimed << "; ";
    if (s.lanes_capacity != m_.lane_cap) d << "lanes_capacity: segment " << s.lanes_capacity << "; ";
    const std::vector<BrandedId> ring = m_.visible_ring();
    if (s.ring != ring) {
      d << "ring: segment [";
      for (const auto& g : s.ring) d << ' ' << gname(g);
      d << " ], model [";
      for (const auto& g : ring) d << ' ' << gname(g);
      d << " ]" << m_.hold_note() << "; ";
    }
    std::uint64_t pending = 0, leased = 0, scheduled = 0, dead = 0;
    for (const auto& [sf, j] : m_.jobs()) {
      switch (j.st) {
        case MState::pending: ++pending; break;
        case MState::leased: ++leased; break;
        case MState::scheduled: ++scheduled; break;
        case MState::dead: ++dead; break;
      }
    }
    auto total = [&](const char* what, std::uint64_t real, std::uint64_t model) {
      if (real != model) d << what << ": segment " << real << ", model " << model << "; ";
    };
    total("pending", s.pending, pending);
    total("leased", s.leased, leased);
    total("scheduled", s.scheduled, scheduled);
    total("dead", s.dead, dead);
    total("jobs_capacity", s.jobs_capacity, m_.jobs_cap);
    const Counters& c = m_.counters;
    total("counters.enqueued", s.counters.enqueued, c.enqueued);
    total("counters.duplicates", s.counters.duplicates, c.duplicates);
    total("counters.claimed", s.counters.claimed, c.claimed);
    total("counters.completed", s.counters.completed, c.completed);
    total("counters.retried", s.counters.retried, c.retried);
    total("counters.dead", s.counters.dead, c.dead);
    total("counters.expired", s.counters.expired, c.expired);
    total("counters.promoted", s.counters.promoted, c.promoted);
    total("counters.drained", s.counters.drained, c.drained);

    // Every job, by id. Times are compared in whole model units (see the top).
    JobFilter all;
    all.limit = std::size_t(m_.jobs_cap) + 1;
    const std::vector<JobInfo> jobs = q_.jobs(all);
    const std::int64_t now_ms = std::int64_t(q_.now_ms());
    std::map<std::uint64_t, const JobInfo*> by_id;
    for (const JobInfo& j : jobs) {
      if (!by_id.emplace(j.id.snowflake(), &j).second) d << "jobs() lists " << id_name(j.id.snowflake()) << " twice; ";
    }
    for (const auto& [sf, j] : m_.jobs()) {
      auto it = by_id.find(sf);
      if (it == by_id.end()) {
        d << "job " << id_name(sf) << " missing from jobs(); ";
        continue;
      }
      const JobInfo& r = *it->second;
      const std::string n = "job " + id_name(sf);
      if (r.id.kind() != "JOB") d << n << " id " << r.id.str() << "; ";
      if (r.group != j.group) d << n << " group " << gname(r.group) << ", model " << gname(j.group) << "; ";
      if (r.state != visible(j.st)) d << n << " state: segment " << to_string(r.state) << ", model " << to_string(visible(j.st)) << "; ";
      if (r.attempt != j.attempt) d << n << " attempt: segment " << r.attempt << ", model " << j.attempt << "; ";
      if (r.payload_bytes != j.payload.size()) d << n << " payload bytes: segment " << r.payload_bytes << ", model " << j.payload.size() << "; ";
      if (r.last_error != j.error) d << n << " last error: segment '" << r.last_error << "', model '" << j.error << "'; ";
      if (j.st == MState::leased && !(r.token == j.token)) d << n << " token: segment " << to_string(r.token) << ", the lease's " << to_string(j.token) << "; ";
      if (j.st != MState::leased && r.token.value != 0) d << n << " shows a token while not leased; ";
      if (j.st != MState::pending && r.state == visible(j.st)) {
        const std::int64_t in_units = ceil_div(std::int64_t(r.when_ms) - now_ms, std::int64_t(kUnitMs));
        if (in_units != j.when - m_.now)
          d << n << " when (units from now): segment " << in_units << ", model " << (j.when - m_.now) << "; ";
      }
    }
    if (by_id.size() != m_.jobs().size())
      d << "jobs(): segment lists " << by_id.size() << ", model has " << m_.jobs().size() << "; ";
    if (!d.str().empty()) fail_with("state after the op: " + d.str());
  }

  void check_fsck() {
    const FsckReport r = q_.fsck();
    if (r.clean()) return;
    std::string s = "fsck:";
    for (const auto& i : r.issues) s += " [" + i.invariant + ": " + i.detail + "]";
    fail_with(s);
  }

  std::string report() const {
    std::ostringstream os;
    os << "seed " << seed_ << ", op " << op_ << ": " << failure_ << "\n"
       << "replay: FAIRLANE_MODEL_SEED=" << seed_ << " FAIRLANE_MODEL_TRACE=1 <this test binary>\n"
       << "ops (time in units of " << kUnitMs << " ms; ids are #offsets, /aN = attempt):\n";
    for (std::size_t i = 0; i < log_.size(); ++i) os << "  [" << i << "] " << log_[i] << "\n";
    if (log_.size() <= std::size_t(op_)) os << "  [" << op_ << "] " << desc_ << "   <- this one\n";
    os << "model ring:";
    for (const auto& g : m_.visible_ring()) os << ' ' << gname(g);
    os << m_.hold_note() << "\n";
    return os.str();
  }

  const std::uint64_t seed_;
  std::mt19937_64 rng_;
  Queue& q_;
  test::RawSegment raw_;
  Model m_;
  const int enqueue_weight_;
  const bool trace_;
  std::vector<BrandedId> groups_;
  std::vector<std::uint64_t> known_;  // every id ever admitted
  std::set<std::uint64_t> tokens_;    // every token ever handed out
  std::uint64_t next_fresh_ = 0;
  const bool fsck_every_ = env_u64("FAIRLANE_MODEL_FSCK").value_or(0) != 0;
  Lease lease_;
  int op_ = 0;
  std::string desc_, failure_;
  std::vector<std::string> log_;
};

// The segment options and op count of one seed, drawn from its own stream so
// the op sequence does not depend on them.
struct SeedPlan {
  QueueOptions options;
  int ops = 0;
  int enqueue_weight = 0;
};
SeedPlan plan_for(std::uint64_t seed) {
  std::mt19937_64 r(seed);
  SeedPlan p;
  const std::uint32_t jobs[] = {6, 12, 24, 40};
  const std::uint32_t lanes[] = {4, 5, 5, 8};  // 4: the fifth group finds every lane taken
  const std::uint32_t payloads[] = {8, 64};
  const int enqueue_weights[] = {14, 22, 32};
  p.options.jobs = jobs[r() % 4];
  p.options.lanes = lanes[r() % 4];
  p.options.payload_bytes = payloads[r() % 2];
  p.options.recovery_ms = kMaxRecoveryMs;  // see "Time" at the top
  p.options.processes = 4;
  p.ops = 120 + int(r() % 181);
  p.enqueue_weight = enqueue_weights[r() % 3];
  return p;
}

TEST(ModelTest, RandomOpSequencesMatchTheModel) {
  std::uint64_t first = 1, count = kDefaultSeeds;
  if (auto one = env_u64("FAIRLANE_MODEL_SEED")) {
    first = *one;
    count = 1;
  } else if (auto n = env_u64("FAIRLANE_MODEL_SEEDS")) {
    count = *n;
  }
  const bool trace = count == 1 && env_u64("FAIRLANE_MODEL_TRACE").value_or(0) != 0;
  const SegmentGuard guard(test::unique_segment_name());
  std::uint64_t ops = 0;
  for (std::uint64_t seed = first; seed < first + count; ++seed) {
    const SeedPlan plan = plan_for(seed);
    std::string failure;
    {
      auto created = Queue::create(guard.name(), plan.options);
      ASSERT_TRUE(created.ok()) << "seed " << seed << ": " << test::describe(created.error());
      if (trace)
        std::printf("seed %llu: jobs=%u lanes=%u payload_bytes=%u ops=%d\n", static_cast<unsigned long long>(seed),
                    plan.options.jobs, plan.options.lanes, plan.options.payload_bytes, plan.ops);
      SeedRun run(seed, created.value(), plan.options, plan.enqueue_weight, trace);
      failure = run.run(plan.ops);
    }  // unmapped before it is removed
    ASSERT_TRUE(Queue::remove(guard.name()).ok()) << "seed " << seed;
    ops += std::uint64_t(plan.ops);
    ASSERT_TRUE(failure.empty()) << failure;
  }
  const Coverage& c = coverage;
  std::printf(
      "%llu seeds, %llu ops: %llu leases (%llu lane batches), %llu turns held at the head, %llu lazy token drops, "
      "%llu turns cut by a limit, %llu husks popped, %llu strays flags cleared, %llu expired, %llu promoted, "
      "%llu dead, %llu requeued, %llu drained, %llu moved, %llu released, %llu duplicates, %llu out-of-order or "
      "reused ids, %llu full, %llu lanes_full, %llu stale (%llu earlier tokens), %llu gone, lanes reclaimed %llu for a "
      "new group / %llu by a sweep\n",
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(c.leases), static_cast<unsigned long long>(c.lane_batches),
      static_cast<unsigned long long>(c.turns_held), static_cast<unsigned long long>(c.lazy_drops),
      static_cast<unsigned long long>(c.limit_stops), static_cast<unsigned long long>(c.husks_popped),
      static_cast<unsigned long long>(c.stray_flags_cleared), static_cast<unsigned long long>(c.expired),
      static_cast<unsigned long long>(c.promoted), static_cast<unsigned long long>(c.dead),
      static_cast<unsigned long long>(c.requeued), static_cast<unsigned long long>(c.drained),
      static_cast<unsigned long long>(c.moved), static_cast<unsigned long long>(c.released),
      static_cast<unsigned long long>(c.duplicates), static_cast<unsigned long long>(c.reused_ids),
      static_cast<unsigned long long>(c.full), static_cast<unsigned long long>(c.lanes_full),
      static_cast<unsigned long long>(c.stale), static_cast<unsigned long long>(c.old_tokens),
      static_cast<unsigned long long>(c.gone), static_cast<unsigned long long>(c.reclaimed_for_new),
      static_cast<unsigned long long>(c.reclaimed_by_sweep));
  RecordProperty("seeds", std::to_string(count));
  RecordProperty("ops", std::to_string(ops));
}

// ============================================================== the contract, case by case
//
// Documented behaviour the model above relies on, one case each, so that a
// regression names itself; and the documented view of the places where the
// model has to mirror the implementation (see the top of the file).

class ModelContract : public test::SegmentFixture {
 protected:
  void SetUp() override {
    QueueOptions o;
    o.jobs = 16;
    o.lanes = 4;
    o.payload_bytes = 16;
    create(o);
  }
  const BrandedId A = BrandedId::make("AAA", 1);
  const BrandedId B = BrandedId::make("BBB", 1);
};

TEST_F(ModelContract, AnEarlierLeasesTokenIsStale) {
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "x"), EnqueueStatus::enqueued);
  Lease first, second;
  ASSERT_TRUE(q().claim(first, 60000));
  ASSERT_EQ(q().fail(x, first.token, FailOptions{.delay_ms = 0, .max_attempts = 5}), FailStatus::retrying);
  ASSERT_TRUE(q().claim(second, 60000));
  ASSERT_EQ(second.id, x);
  EXPECT_NE(second.token, first.token);
  EXPECT_EQ(q().complete(x, first.token), AckStatus::stale);
  EXPECT_EQ(q().fail(x, first.token), FailStatus::stale);
  EXPECT_EQ(q().extend(x, first.token, 60000), AckStatus::stale);
  EXPECT_EQ(q().release(x, first.token), AckStatus::stale);
  EXPECT_EQ(q().job(x)->token, second.token);
  EXPECT_EQ(q().complete(x, second.token), AckStatus::ok);
  EXPECT_EQ(q().complete(x, second.token), AckStatus::gone);
  // Enqueued again (a new admission of the same id): no old token fits.
  ASSERT_EQ(q().enqueue(A, x, "x again"), EnqueueStatus::enqueued);
  Lease third;
  ASSERT_TRUE(q().claim(third, 60000));
  EXPECT_NE(third.token, first.token);
  EXPECT_NE(third.token, second.token);
  EXPECT_EQ(q().complete(x, second.token), AckStatus::stale);
  EXPECT_EQ(q().complete(x, third.token), AckStatus::ok);
}

TEST_F(ModelContract, ReleaseKeepsTheAttempt) {
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  ASSERT_EQ(l.attempt, 1U);
  ASSERT_EQ(q().release(x, l.token), AckStatus::ok);
  EXPECT_EQ(q().job(x)->attempt, 0U);
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.attempt, 1U) << "a release is not a failed delivery";
  ASSERT_EQ(q().fail(x, l.token, FailOptions{.delay_ms = 0, .max_attempts = 5}), FailStatus::retrying);
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.attempt, 2U);
}

TEST_F(ModelContract, SettingsThatAreDefaultsMakeNoLane) {
  EXPECT_EQ(q().set_weight(A, 1), LaneStatus::ok);
  EXPECT_EQ(q().clear_limit(A), LaneStatus::ok);
  EXPECT_EQ(q().resume(A), LaneStatus::ok);
  EXPECT_EQ(q().snapshot().lanes_live, 0U);
  EXPECT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  EXPECT_EQ(q().snapshot().lanes_live, 1U);
}

TEST_F(ModelContract, AnIdleLaneIsReclaimedAndALaneWithASettingIsNot) {
  ASSERT_EQ(q().enqueue(A, q().mint(), "a"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().set_limit(B, 2), LaneStatus::ok);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().snapshot().lanes_live, 2U);
  for (int i = 0; i < 2; ++i) {
    q().advance_clock(q().config().recovery_ms);
    q().tick();
  }
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.lanes_live, 1U) << "the idle lane of A was not reclaimed";
  EXPECT_EQ(s.lanes_reclaimed, 1U);
  bool b_kept = false;
  for (const LaneInfo& li : s.lanes) b_kept = b_kept || (li.group == B && li.limit == 2);
  EXPECT_TRUE(b_kept) << "a group with a setting lost its lane";
}

TEST_F(ModelContract, ScheduledAndDeadJobsHoldNoLane) {
  ASSERT_EQ(q().enqueue(A, q().mint(), "later", EnqueueOptions{.delay_ms = 60000}), EnqueueStatus::enqueued);
  EXPECT_EQ(q().snapshot().lanes_live, 0U);
  ASSERT_EQ(q().enqueue(B, q().mint(), "b"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  ASSERT_EQ(q().fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 1}), FailStatus::dead);
  for (int i = 0; i < 2; ++i) {
    q().advance_clock(1000);
    q().tick();
  }
  EXPECT_EQ(q().snapshot().lanes_live, 0U);
  // They find their lanes again when they need them.
  EXPECT_EQ(q().requeue_dead(l.id), AckStatus::ok);
  q().advance_clock(60000);
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().snapshot().lanes_live, 2U);
}

// The documented view: the ring holds lanes that can be served now
// (nonempty). A lane whose last job was taken from its strays is empty.
TEST_F(ModelContract, ALaneEmptiedFromItsStraysIsNotShownInTheRing) {
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  ASSERT_EQ(q().fail(x, l.token, FailOptions{.delay_ms = 0, .max_attempts = 5}), FailStatus::retrying);
  ASSERT_TRUE(q().claim(l, 60000));  // from the strays
  const Snapshot s = q().snapshot();
  EXPECT_TRUE(s.ring.empty()) << "an empty lane is in the ring";
  for (const LaneInfo& li : s.lanes) {
    EXPECT_EQ(li.depth, 0U) << li.group.str();
    EXPECT_FALSE(li.ringed) << li.group.str() << " has nothing to serve but shows ringed";
  }
}

}  // namespace
}  // namespace fairlane
