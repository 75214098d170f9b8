// Model-based randomized test of the segment's single-threaded semantics.
//
// Each seed drives one fresh segment (one Queue handle, this thread only) and
// a small, obviously-correct in-memory model of the documented transitions
// (docs/design.md §3-§4, README "Guarantees") with the same random sequence
// of operations: enqueue (delayed, duplicate, out-of-order and reused ids,
// payloads, bad input), claim, claim_batch, complete, fail (retry now, retry
// later, dead-letter), extend, pause/resume (lane and queue), set_limit,
// set_weight, drain, requeue_dead, requeue_all_dead, purge_dead, depth, job,
// advance_clock and tick. After every operation it compares:
//   - the return value (statuses, counts, bools),
//   - every lease handed out, in order: id, group, attempt, payload, deadline,
//   - the snapshot: ring order, every lane's depth/active/limit/weight/paused/
//     ringed/served, the queue pause, totals pending/leased/scheduled/dead,
//     the counters,
//   - every job (jobs()): group, state, attempt, payload size, last error,
//     and its deadline / due time / time of death in model time units,
// and every few operations that fsck() finds the segment clean.
//
// Replay: a failure prints the seed and the op index. FAIRLANE_MODEL_SEED=<n>
// runs only that seed (add FAIRLANE_MODEL_TRACE=1 to print every op of it);
// FAIRLANE_MODEL_SEEDS=<count> runs seeds 1..count instead of the default.
//
// Time. The segment clock is CLOCK_MONOTONIC plus a test offset, so it also
// moves by itself while the test runs. Every duration in this test (lease,
// delay, extend, advance_clock) is a whole number of kUnitMs (1,000 s), and
// never zero, so the few milliseconds of real time a seed takes can never
// move a deadline across a unit boundary: "deadline <= now" in the segment is
// exactly "deadline <= now" in model units. For the same reason every due job
// is swept by the first claim (or tick) after the advance that made it due:
// the segment's next_due is at or below it and the last sweep was at least a
// unit earlier. The test asserts nothing about real time.
//
// Deliberate non-determinism, and how the comparison tolerates exactly it:
//   - A sweep (lease expiry, promotion; inside claim or tick) and
//     requeue_all_dead visit jobs in slot-table order, which is an accident
//     of the free list, not a documented order. Lanes that such a step rings
//     (those with no token that it makes serviceable) are appended to the
//     ring's tail in an unspecified order among themselves. The model keeps
//     them as one unordered "bag" at that place in the ring. A claim that
//     reaches the bag takes the member the segment actually served (each
//     member is serviceable until it is drawn, so every draw of a member
//     shows up as a lease), provided it is a member; at the end of the
//     operation the members left are ordered as the snapshot's ring shows
//     them, provided each is there exactly once. Everything else about the
//     ring (the members' place relative to other tokens, the rest's order)
//     is compared exactly.
//   - Lanes are listed by the snapshot in hash-table order (the segment's
//     hash seed is random): they are compared by group, as a set.
//   - jobs() lists in slot order: jobs are compared by id, as a set.
//
// Not reached from one thread, so not modelled: turns owed after a busy skip
// (the hold slot is always free when a single claimer puts a token back),
// claim_wait, 65,535 used-up attempts, steps of more than 256 jobs, an id
// index bucket pair that is full (the segments here are far too small).
//
// Cost: about 0.5 ms per seed (creating and unmapping the segment) and 7 us
// per op (mostly snapshot() and jobs()); the default 1,500 seeds of 120-300
// ops take about 3 s of CPU in Release (150 seeds under ASan or TSan).
#include "test_support.hpp"

#include <algorithm>
#include <cstdlib>
#include <deque>
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
// Sanitizer builds run every op 10-20x slower; this test is single-threaded,
// so there fewer seeds lose nothing that TSan could find.
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
constexpr std::size_t kErrorKept = 56;        // last_error is truncated to this (queue.hpp)
constexpr std::uint32_t kMaxAttemptToken = 65535;  // fail() clamps max_attempts to 1..this
// Job ids: fresh ones are kIdBase + 2k in mint order; odd offsets are ids that
// arrive out of mint order (older than jobs already queued).
constexpr std::uint64_t kIdBase = snowflake_of(100'000'000ULL, 0, 0);

const BrandedId kDefaultLaneGroup = *BrandedId::parse(kDefaultGroup);

BrandedId job_id(std::uint64_t sf) { return BrandedId::make("JOB", sf); }
std::string id_name(std::uint64_t sf) { return "#" + std::to_string(sf - kIdBase); }
std::string gname(const BrandedId& g) { return g.valid() ? std::string(g.kind()) : std::string("<default>"); }

// ceil(a / b) for b > 0 and any sign of a.
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// How often the runs reached the states worth reaching; printed at the end
// so a change of the op mix that stops exercising something shows.
struct Coverage {
  std::uint64_t leases = 0, hold_turns = 0, lazy_drops = 0, limit_stops = 0, bag_draws = 0, bag_settles = 0;
  std::uint64_t expired = 0, promoted = 0, dead = 0, requeued = 0, drained = 0, duplicates = 0, reused_ids = 0;
  std::uint64_t full = 0, lanes_full = 0, stale = 0, gone = 0;
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
  int lane = 0;
  MState st = MState::pending;
  std::uint32_t attempt = 0;  // attempts made so far; a lease carries attempt + 1
  std::int64_t when = 0;      // leased: deadline; scheduled: due; dead: died at (model units)
  std::string payload;
  std::string error;
};

struct MLane {
  BrandedId group;
  std::set<std::uint64_t> pending;  // job snowflakes; served lowest first (mint order)
  std::uint64_t active = 0;
  std::uint32_t limit = 0;          // 0: none
  std::uint32_t weight = 0;         // 0: never set, counts as 1
  bool paused = false;
  bool ringed = false;              // exactly one token exists (ring, bag or hold slot)
  std::uint64_t served = 0;

  std::uint32_t turn() const { return weight ? weight : 1; }
  std::uint64_t headroom() const {
    const std::uint64_t cap = limit ? limit : kMaxLimit;
    return active >= cap ? 0 : cap - active;
  }
  bool serviceable() const { return !pending.empty() && !paused && headroom() > 0; }
};

struct MLease {
  std::uint64_t sf;
  int lane;
  std::uint32_t attempt;
};

class Model {
 public:
  static constexpr int kBag = -1;      // ring entry standing for the unordered bag
  static constexpr int kAbsent = -1;   // lane lookups
  static constexpr int kLanesFull = -2;

  Model(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes)
      : jobs_cap(jobs), lane_cap(lanes + 1), payload_cap(payload_bytes) {
    lanes_.push_back(MLane{});  // the default lane exists from creation
    lanes_[0].group = kDefaultLaneGroup;
    lane_index_[kDefaultLaneGroup] = 0;
  }

  // ---- lanes
  int lane_for(const BrandedId& g, bool create) {
    const BrandedId key = g.valid() ? g : kDefaultLaneGroup;
    if (auto it = lane_index_.find(key); it != lane_index_.end()) return it->second;
    if (!create) return kAbsent;
    if (lanes_.size() >= lane_cap) return kLanesFull;
    lanes_.push_back(MLane{});
    lanes_.back().group = key;
    lane_index_[key] = int(lanes_.size() - 1);
    return int(lanes_.size() - 1);
  }
  int lane_of_group(const BrandedId& g) const {
    auto it = lane_index_.find(g);
    return it == lane_index_.end() ? kAbsent : it->second;
  }

  // Every lane-word change of the segment goes through this (update_lane):
  // a lane that is now serviceable and has no token gets one at the tail.
  void touch(int lane) {
    MLane& l = lanes_[std::size_t(lane)];
    if (!l.ringed && l.serviceable()) {
      l.ringed = true;
      ring_.push_back(lane);
    }
  }
  // Lanes rung by one slot-order scan: their order among themselves is not
  // specified (see the top of the file).
  void ring_unordered(std::vector<int> rung) {
    if (rung.empty()) return;
    if (rung.size() == 1 || !bag_.empty()) {
      // A second bag in one operation cannot happen (one scan per op); if it
      // did, keep the test honest rather than clever.
      for (int lane : rung) ring_.push_back(lane);
      return;
    }
    ring_.push_back(kBag);
    bag_ = std::move(rung);
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
    const int lane = lane_for(g, true);  // created even if the queue turns out full
    if (lane == kLanesFull) return EnqueueStatus::lanes_full;
    if (jobs_.size() >= jobs_cap) return EnqueueStatus::full;
    MJob j;
    j.lane = lane;
    j.payload = payload;
    if (delay > 0) {
      j.st = MState::scheduled;
      j.when = now + delay;
      jobs_[*sf] = j;
    } else {
      j.st = MState::pending;
      jobs_[*sf] = j;
      lanes_[std::size_t(lane)].pending.insert(*sf);
      touch(lane);
    }
    ++counters.enqueued;
    return EnqueueStatus::enqueued;
  }

  // Promote due jobs and return expired leases to their lanes (mint position).
  std::uint64_t sweep() {
    std::uint64_t moved = 0;
    std::set<int> affected;
    for (auto& [sf, j] : jobs_) {
      if ((j.st != MState::leased && j.st != MState::scheduled) || j.when > now) continue;
      MLane& l = lanes_[std::size_t(j.lane)];
      if (j.st == MState::leased) {
        --l.active;
        ++counters.expired;
      } else {
        ++counters.promoted;
      }
      j.st = MState::pending;
      j.when = 0;
      l.pending.insert(sf);
      affected.insert(j.lane);
      ++moved;
    }
    ring_now_serviceable(affected);
    return moved;
  }
  // The lanes of `affected` that became serviceable without a token get
  // one, at the ring's tail, in an order the segment does not fix.
  void ring_now_serviceable(const std::set<int>& affected) {
    std::vector<int> rung;
    for (int lane : affected) {
      MLane& l = lanes_[std::size_t(lane)];
      if (!l.ringed && l.serviceable()) {
        l.ringed = true;
        rung.push_back(lane);
      }
    }
    ring_unordered(std::move(rung));
  }
  bool anything_due() const {
    for (const auto& [sf, j] : jobs_)
      if ((j.st == MState::leased || j.st == MState::scheduled) && j.when <= now) return true;
    return false;
  }

  // claim / claim_batch. `real` is what the segment returned: it is read
  // only to learn which member of an unordered bag was drawn.
  std::vector<MLease> claim(std::size_t room, std::int64_t lease, const std::vector<Lease>& real, std::string& note) {
    std::vector<MLease> out;
    if (room == 0) return out;  // claim_batch of an empty span does nothing at all
    if (anything_due()) sweep();
    if (queue_paused) return out;
    while (out.size() < room) {
      int lane;
      std::uint32_t turn;
      if (hold_) {
        ++coverage.hold_turns;
        lane = hold_->first;
        turn = hold_->second;
        hold_.reset();
      } else if (ring_.empty()) {
        break;
      } else if (ring_.front() == kBag) {
        lane = draw_from_bag(out.size() < real.size() ? lane_of_group(real[out.size()].group) : kAbsent, note);
        turn = lanes_[std::size_t(lane)].turn();
      } else {
        lane = ring_.front();
        ring_.pop_front();
        turn = lanes_[std::size_t(lane)].turn();
      }
      MLane& l = lanes_[std::size_t(lane)];
      if (!l.serviceable()) {  // lazy removal: the token leaves the ring here
        ++coverage.lazy_drops;
        l.ringed = false;
        continue;
      }
      const std::uint64_t n =
          std::min<std::uint64_t>({turn, l.pending.size(), l.headroom(), room - out.size()});
      l.active += n;
      std::vector<std::uint64_t> taken;
      for (std::uint64_t k = 0; k < n; ++k) {
        taken.push_back(*l.pending.begin());
        l.pending.erase(l.pending.begin());
      }
      if (!l.serviceable()) {
        if (!l.pending.empty() && l.headroom() == 0) ++coverage.limit_stops;
        l.ringed = false;  // emptied or at its ceiling: leaves the ring in the same step
      } else if (turn - n > 0) {
        hold_ = std::make_pair(lane, std::uint32_t(turn - n));  // owed more claims this turn
      } else {
        ring_.push_back(lane);
      }
      for (std::uint64_t sf : taken) {
        MJob& j = jobs_.at(sf);
        j.st = MState::leased;
        ++j.attempt;
        j.when = now + lease;
        out.push_back(MLease{sf, lane, j.attempt});
      }
      l.served += n;
    }
    counters.claimed += out.size();
    coverage.leases += out.size();
    return out;
  }

  // Fenced lookup shared by complete, fail and extend.
  std::optional<AckStatus> fence(std::uint64_t sf, bool kind_ok, std::uint32_t attempt) const {
    if (!kind_ok) return AckStatus::gone;
    auto it = jobs_.find(sf);
    if (it == jobs_.end()) return AckStatus::gone;
    if (it->second.st != MState::leased || it->second.attempt != attempt) return AckStatus::stale;
    return std::nullopt;
  }

  AckStatus complete(std::uint64_t sf, bool kind_ok, std::uint32_t attempt) {
    if (auto st = fence(sf, kind_ok, attempt)) return *st;
    const int lane = jobs_.at(sf).lane;
    jobs_.erase(sf);
    --lanes_[std::size_t(lane)].active;
    touch(lane);
    ++counters.completed;
    return AckStatus::ok;
  }

  FailStatus fail(std::uint64_t sf, bool kind_ok, std::uint32_t attempt, std::int64_t delay, std::uint32_t max_attempts,
                  const std::string& error) {
    if (auto st = fence(sf, kind_ok, attempt)) return *st == AckStatus::gone ? FailStatus::gone : FailStatus::stale;
    MJob& j = jobs_.at(sf);
    MLane& l = lanes_[std::size_t(j.lane)];
    j.error = error.substr(0, kErrorKept);
    --l.active;
    if (attempt >= std::clamp<std::uint32_t>(max_attempts, 1, kMaxAttemptToken)) {
      j.st = MState::dead;
      j.when = now;
      touch(j.lane);
      ++counters.dead;
      return FailStatus::dead;
    }
    if (delay == 0) {
      j.st = MState::pending;
      j.when = 0;
      l.pending.insert(sf);
    } else {
      j.st = MState::scheduled;
      j.when = now + delay;
    }
    touch(j.lane);
    ++counters.retried;
    return FailStatus::retrying;
  }

  AckStatus extend(std::uint64_t sf, bool kind_ok, std::uint32_t attempt, std::int64_t lease) {
    if (auto st = fence(sf, kind_ok, attempt)) return *st;
    jobs_.at(sf).when = now + lease;
    return AckStatus::ok;
  }

  LaneStatus pause(const BrandedId& g) {
    const int lane = lane_for(g, true);
    if (lane == kLanesFull) return LaneStatus::lanes_full;
    lanes_[std::size_t(lane)].paused = true;  // no ring change: the token is dropped when drawn
    return LaneStatus::ok;
  }
  LaneStatus clear_limit(const BrandedId& g) {
    const int lane = lane_for(g, true);
    if (lane == kLanesFull) return LaneStatus::lanes_full;
    lanes_[std::size_t(lane)].limit = 0;
    touch(lane);
    return LaneStatus::ok;
  }
  LaneStatus resume(const BrandedId& g) {
    const int lane = lane_for(g, true);
    if (lane == kLanesFull) return LaneStatus::lanes_full;
    lanes_[std::size_t(lane)].paused = false;
    touch(lane);
    return LaneStatus::ok;
  }
  LaneStatus set_limit(const BrandedId& g, std::uint32_t limit) {
    if (limit == 0 || limit > kMaxLimit) return LaneStatus::invalid_argument;
    const int lane = lane_for(g, true);
    if (lane == kLanesFull) return LaneStatus::lanes_full;
    lanes_[std::size_t(lane)].limit = limit;
    touch(lane);
    return LaneStatus::ok;
  }
  LaneStatus set_weight(const BrandedId& g, std::uint32_t weight) {
    if (weight < 1 || weight > kMaxWeight) return LaneStatus::invalid_argument;
    const int lane = lane_for(g, true);
    if (lane == kLanesFull) return LaneStatus::lanes_full;
    lanes_[std::size_t(lane)].weight = weight;  // read at the lane's next draw from the ring
    return LaneStatus::ok;
  }
  std::uint64_t depth(const BrandedId& g) {
    const int lane = lane_for(g, false);
    return lane < 0 ? 0 : lanes_[std::size_t(lane)].pending.size();
  }
  std::uint64_t drain(const BrandedId& g) {
    const int lane = lane_for(g, false);
    if (lane < 0) return 0;
    MLane& l = lanes_[std::size_t(lane)];
    const std::uint64_t n = l.pending.size();
    for (std::uint64_t sf : l.pending) jobs_.erase(sf);  // freed: the ids may be enqueued again
    l.pending.clear();
    counters.drained += n;
    return n;
  }

  AckStatus requeue_dead(std::uint64_t sf, bool kind_ok) {
    if (!kind_ok) return AckStatus::gone;
    auto it = jobs_.find(sf);
    if (it == jobs_.end()) return AckStatus::gone;
    if (it->second.st != MState::dead) return AckStatus::stale;
    it->second.st = MState::pending;  // attempts and last error are kept
    it->second.when = 0;
    lanes_[std::size_t(it->second.lane)].pending.insert(sf);
    touch(it->second.lane);
    return AckStatus::ok;
  }
  std::uint64_t requeue_all_dead() {
    std::uint64_t n = 0;
    std::set<int> affected;
    for (auto& [sf, j] : jobs_) {
      if (j.st != MState::dead) continue;
      j.st = MState::pending;
      j.when = 0;
      lanes_[std::size_t(j.lane)].pending.insert(sf);
      affected.insert(j.lane);
      ++n;
    }
    ring_now_serviceable(affected);
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

  // ---- the unordered bag
  bool bag_pending() const { return !bag_.empty(); }
  const std::vector<int>& bag() const { return bag_; }
  // Orders the members left as `order` (a permutation of them, checked by the caller).
  void settle_bag(const std::vector<int>& order) {
    auto it = std::find(ring_.begin(), ring_.end(), kBag);
    if (it == ring_.end()) return;
    it = ring_.erase(it);
    ring_.insert(it, order.begin(), order.end());
    if (order.size() > 1) ++coverage.bag_settles;
    bag_.clear();
  }

  // The snapshot's ring: the hold slot, then the ring, serviceable lanes only.
  std::vector<BrandedId> visible_ring() const {
    std::vector<BrandedId> out;
    auto add = [&](int lane) {
      if (lanes_[std::size_t(lane)].serviceable()) out.push_back(lanes_[std::size_t(lane)].group);
    };
    if (hold_) add(hold_->first);
    for (int lane : ring_) {
      if (lane == kBag) {
        for (int b : bag_) add(b);
      } else {
        add(lane);
      }
    }
    return out;
  }

  // Self-check of the model: one token per ringed lane, none for the others.
  std::string self_check() const {
    std::map<int, int> tokens;
    if (hold_) ++tokens[hold_->first];
    for (int lane : ring_)
      if (lane != kBag) ++tokens[lane];
    for (int lane : bag_) ++tokens[lane];
    for (std::size_t i = 0; i < lanes_.size(); ++i) {
      const int t = tokens.count(int(i)) ? tokens.at(int(i)) : 0;
      if (t != (lanes_[i].ringed ? 1 : 0))
        return "model: lane " + gname(lanes_[i].group) + " has " + std::to_string(t) + " tokens";
    }
    return {};
  }

  const std::vector<MLane>& lanes() const { return lanes_; }
  const std::map<std::uint64_t, MJob>& jobs() const { return jobs_; }
  std::optional<std::pair<int, std::uint32_t>> hold() const { return hold_; }

  std::int64_t now = 0;  // model units
  bool queue_paused = false;
  Counters counters;
  const std::uint32_t jobs_cap, lane_cap, payload_cap;

 private:
  int draw_from_bag(int seen, std::string& note) {
    int pick = bag_.front();
    if (std::find(bag_.begin(), bag_.end(), seen) != bag_.end()) {
      if (bag_.size() > 1) ++coverage.bag_draws;
      pick = seen;
    } else {
      note += "the ring reached lanes {";
      for (int b : bag_) note += ' ' + gname(lanes_[std::size_t(b)].group);
      note += " } rung by one scan in unspecified order, so the segment should have served one of them; ";
    }
    bag_.erase(std::find(bag_.begin(), bag_.end(), pick));
    if (bag_.empty()) ring_.pop_front();
    return pick;
  }

  std::vector<MLane> lanes_;
  std::map<BrandedId, int> lane_index_;
  std::map<std::uint64_t, MJob> jobs_;
  std::deque<int> ring_;
  std::vector<int> bag_;
  std::optional<std::pair<int, std::uint32_t>> hold_;  // lane, claims left in its turn
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
      : seed_(seed), rng_(seed ^ 0x9E3779B97F4A7C15ULL), q_(q), m_(o.jobs, o.lanes, o.payload_bytes),
        enqueue_weight_(enqueue_weight), trace_(trace) {
    for (const char* k : {"AAA", "BBB", "CCC", "DDD", "EEE"}) groups_.push_back(BrandedId::make(k, 1));
  }

  // Runs `ops` operations; returns an empty string or the first divergence.
  std::string run(int ops) {
    for (op_ = 0; op_ < ops; ++op_) {
      desc_.clear();
      step();
      if (failure_.empty()) compare_state();
      if (failure_.empty() && (op_ % 16 == 15 || op_ + 1 == ops)) check_fsck();
      log_.push_back(desc_);
      if (trace_) std::printf("  [%d] %s\n", op_, desc_.c_str());
      if (!failure_.empty()) return report();
    }
    const Counters& c = m_.counters;
    coverage.expired += c.expired;
    coverage.promoted += c.promoted;
    coverage.dead += c.dead;
    coverage.drained += c.drained;
    coverage.duplicates += c.duplicates;
    return {};
  }

 private:
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

  // A job to acknowledge: usually a live lease under its token.
  struct Target {
    std::uint64_t sf = 0;
    bool kind_ok = true;
    std::uint32_t attempt = 1;
  };
  Target pick_target() {
    std::vector<std::uint64_t> leased, live;
    for (const auto& [sf, j] : m_.jobs()) {
      live.push_back(sf);
      if (j.st == MState::leased) leased.push_back(sf);
    }
    Target t;
    const int r = int(u(100));
    if (r < 62 && !leased.empty()) {
      t.sf = leased[u(leased.size())];
      t.attempt = m_.jobs().at(t.sf).attempt;
    } else if (r < 72 && !leased.empty()) {
      t.sf = leased[u(leased.size())];
      const std::uint32_t a = m_.jobs().at(t.sf).attempt;
      t.attempt = (a > 1 && chance(50)) ? a - 1 : a + 1;  // an older or a future token
    } else if (r < 84 && !live.empty()) {
      t.sf = live[u(live.size())];
      t.attempt = std::max<std::uint32_t>(1, m_.jobs().at(t.sf).attempt);
    } else if (r < 95 && !known_.empty()) {
      t.sf = known_[u(known_.size())];  // perhaps completed, drained or purged: gone
      t.attempt = std::uint32_t(1 + u(3));
    } else {
      t.sf = kIdBase + 2 * (next_fresh_ + 1000);  // never enqueued
      t.kind_ok = chance(50);
      t.attempt = 1;
    }
    return t;
  }
  BrandedId target_id(const Target& t) const { return t.kind_ok ? job_id(t.sf) : BrandedId::make("XYZ", t.sf); }
  std::string target_name(const Target& t) const {
    return (t.kind_ok ? id_name(t.sf) : "XYZ" + id_name(t.sf)) + "/a" + std::to_string(t.attempt);
  }

  // ---------------------------------------------------------- one op
  void step() {
    struct Choice {
      int weight;
      void (SeedRun::*op)();
    };
    const Choice mix[] = {
        {enqueue_weight_, &SeedRun::op_enqueue}, {16, &SeedRun::op_claim},
        {7, &SeedRun::op_claim_batch},           {11, &SeedRun::op_complete},
        {8, &SeedRun::op_fail},                  {3, &SeedRun::op_extend},
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
    if (failure_.empty() && m_.bag_pending()) settle_bag();
    if (failure_.empty()) {
      if (std::string e = m_.self_check(); !e.empty()) fail_with(e);
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

  void op_enqueue() {
    const BrandedId g = pick_group();
    std::optional<std::uint64_t> sf;
    bool kind_ok = true;
    std::string how;
    const int r = int(u(100));
    std::vector<std::uint64_t> live;
    for (const auto& [id, j] : m_.jobs()) live.push_back(id);
    if (r < 66) {
      sf = kIdBase + 2 * ++next_fresh_;
    } else if (r < 78) {
      sf = kIdBase + 2 * u(next_fresh_ + 1) + 1;  // older than what is queued: out of mint order
      how = " (out of order)";
    } else if (r < 88 && !live.empty()) {
      sf = live[u(live.size())];
      how = " (live id)";
    } else if (r < 95 && !known_.empty()) {
      sf = known_[u(known_.size())];
      how = " (seen before)";
    } else if (r < 98) {
      sf = kIdBase + 2 * ++next_fresh_;
      kind_ok = false;
      how = " (kind XYZ)";
    } else {
      how = " (empty id)";
    }
    const std::string payload = random_payload();
    const std::int64_t delay = chance(20) ? units(1, 3) : 0;
    desc_ = "enqueue " + gname(g) + " " + (sf ? id_name(*sf) : "-") + how + " payload=" + std::to_string(payload.size()) +
            "B delay=" + std::to_string(delay);
    const BrandedId id = !sf ? BrandedId{} : kind_ok ? job_id(*sf) : BrandedId::make("XYZ", *sf);
    const EnqueueStatus real = q_.enqueue(g, id, payload, EnqueueOptions{.delay_ms = std::uint64_t(delay) * kUnitMs});
    const EnqueueStatus model = m_.enqueue(g, sf, kind_ok, payload, delay);
    desc_ += " -> " + std::string(to_string(real));
    if (model == EnqueueStatus::enqueued) known_.push_back(*sf);
    if (model == EnqueueStatus::enqueued && !how.empty()) ++coverage.reused_ids;  // out of order or seen before
    if (model == EnqueueStatus::full) ++coverage.full;
    if (model == EnqueueStatus::lanes_full) ++coverage.lanes_full;
    expect_eq(real, model, "enqueue status");
  }

  void do_claim(std::size_t room, bool batch) {
    const std::int64_t lease = units(1, 4);
    std::vector<Lease> real;
    if (batch) {
      std::vector<Lease> out(room);
      const std::size_t n = q_.claim_batch(out, std::uint32_t(lease * std::int64_t(kUnitMs)));
      if (n > room) {
        fail_with("claim_batch returned " + std::to_string(n) + " for room " + std::to_string(room));
        return;
      }
      out.resize(n);
      real = std::move(out);
    } else {
      if (q_.claim(lease_, std::uint32_t(lease * std::int64_t(kUnitMs)))) real.push_back(lease_);
    }
    std::string note;
    const std::vector<MLease> model = m_.claim(room, lease, real, note);
    desc_ = (batch ? "claim_batch room=" + std::to_string(room) : std::string("claim")) +
            " lease=" + std::to_string(lease) + " ->";
    for (const Lease& l : real) desc_ += " " + gname(l.group) + ":" + id_name(l.id.snowflake()) + "/a" + std::to_string(l.attempt);
    if (real.empty()) desc_ += " nothing";
    std::ostringstream diff;
    if (real.size() != model.size()) diff << "segment handed out " << real.size() << " leases, model " << model.size() << "; ";
    for (std::size_t i = 0; i < std::max(real.size(), model.size()); ++i) {
      std::ostringstream r, mm;
      if (i < real.size()) r << gname(real[i].group) << ":" << id_name(real[i].id.snowflake()) << "/a" << real[i].attempt;
      else r << "-";
      if (i < model.size())
        mm << gname(m_.lanes()[std::size_t(model[i].lane)].group) << ":" << id_name(model[i].sf) << "/a" << model[i].attempt;
      else mm << "-";
      if (i < real.size() && i < model.size()) {
        const MLease& e = model[i];
        const bool same = real[i].id == job_id(e.sf) && real[i].group == m_.lanes()[std::size_t(e.lane)].group &&
                          real[i].attempt == e.attempt && real[i].payload == m_.jobs().at(e.sf).payload;
        if (same) continue;
      }
      diff << "lease " << i << ": segment " << r.str() << ", model " << mm.str() << "; ";
    }
    // One deadline for the whole call, and the job's slot says the same.
    for (const Lease& l : real) {
      if (l.deadline_ms != real.front().deadline_ms) diff << "leases of one call carry different deadlines; ";
      const auto j = q_.job(l.id);
      if (!j || j->when_ms != l.deadline_ms) diff << "job " << id_name(l.id.snowflake()) << " deadline differs from its lease; ";
    }
    if (!diff.str().empty() || !note.empty()) fail_with("claimed sequence: " + note + diff.str());
  }
  void op_claim() { do_claim(1, false); }
  void op_claim_batch() { do_claim(chance(5) ? 0 : 1 + u(6), true); }

  void op_complete() {
    const Target t = pick_target();
    desc_ = "complete " + target_name(t);
    const AckStatus real = q_.complete(target_id(t), Token(t.attempt));
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, tally(m_.complete(t.sf, t.kind_ok, t.attempt)), "complete status");
  }

  void op_fail() {
    const Target t = pick_target();
    const std::int64_t delay = chance(50) ? 0 : units(1, 3);
    const std::uint32_t max_attempts = std::uint32_t(u(5));  // 0 counts as 1
    std::string error = "err" + std::to_string(op_);
    if (chance(15)) error = std::string(70, char('A' + u(26)));  // longer than what is kept
    if (chance(10)) error.clear();
    desc_ = "fail " + target_name(t) + " delay=" + std::to_string(delay) + " max=" + std::to_string(max_attempts);
    const FailStatus real = q_.fail(target_id(t), Token(t.attempt),
                                    FailOptions{.delay_ms = std::uint64_t(delay) * kUnitMs, .max_attempts = max_attempts, .error = error});
    desc_ += " -> " + std::string(to_string(real));
    const FailStatus model = m_.fail(t.sf, t.kind_ok, t.attempt, delay, max_attempts, error);
    if (model == FailStatus::stale) ++coverage.stale;
    if (model == FailStatus::gone) ++coverage.gone;
    expect_eq(real, model, "fail status");
  }

  void op_extend() {
    const Target t = pick_target();
    const std::int64_t lease = units(1, 4);
    desc_ = "extend " + target_name(t) + " lease=" + std::to_string(lease);
    const AckStatus real = q_.extend(target_id(t), Token(t.attempt), std::uint32_t(lease * std::int64_t(kUnitMs)));
    desc_ += " -> " + std::string(to_string(real));
    expect_eq(real, tally(m_.extend(t.sf, t.kind_ok, t.attempt, lease)), "extend status");
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
    q_.pause_all();
    m_.queue_paused = true;
  }
  void op_resume_all() {
    desc_ = "resume_all";
    q_.resume_all();
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
    if (!dead.empty() && chance(75)) t.sf = dead[u(dead.size())];
    else t = pick_target();
    desc_ = "requeue_dead " + target_name(t);
    const AckStatus real = q_.requeue_dead(target_id(t));
    desc_ += " -> " + std::string(to_string(real));
    const AckStatus model = m_.requeue_dead(t.sf, t.kind_ok);
    if (model == AckStatus::ok) ++coverage.requeued;
    expect_eq(real, model, "requeue_dead status");
  }
  void op_requeue_all_dead() {
    desc_ = "requeue_all_dead";
    const std::uint64_t real = q_.requeue_all_dead();
    desc_ += " -> " + std::to_string(real);
    const std::uint64_t model = m_.requeue_all_dead();
    coverage.requeued += model;
    expect_eq(real, model, "requeue_all_dead count");
  }
  void op_purge_dead() {
    desc_ = "purge_dead";
    const std::uint64_t real = q_.purge_dead();
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.purge_dead(), "purge_dead count");
  }
  void op_advance() {
    const std::int64_t k = units(1, 3);
    q_.advance_clock(std::uint64_t(k) * kUnitMs);
    m_.now += k;
    desc_ = "advance_clock " + std::to_string(k);
    if (chance(40)) {
      desc_ += " + tick";
      const std::uint64_t real = q_.tick();
      desc_ += " -> " + std::to_string(real);
      expect_eq(real, m_.sweep(), "tick count");
    }
  }
  void op_tick() {
    desc_ = "tick";
    const std::uint64_t real = q_.tick();
    desc_ += " -> " + std::to_string(real);
    expect_eq(real, m_.sweep(), "tick count");
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
      expect_eq(real->group, m_.lanes()[std::size_t(it->second.lane)].group, "job() group");
    }
  }

  // The lanes a slot-order scan rang, still unordered: read their order off
  // the snapshot's ring (every member is serviceable, so it is listed).
  void settle_bag() {
    const Snapshot s = q_.snapshot();
    std::vector<std::pair<std::size_t, int>> at;
    for (int lane : m_.bag()) {
      const BrandedId& g = m_.lanes()[std::size_t(lane)].group;
      const auto n = std::count(s.ring.begin(), s.ring.end(), g);
      if (n != 1) {
        fail_with("lane " + gname(g) + ", rung by a scan, appears " + std::to_string(n) + " times in the ring");
        return;
      }
      at.emplace_back(std::size_t(std::find(s.ring.begin(), s.ring.end(), g) - s.ring.begin()), lane);
    }
    std::sort(at.begin(), at.end());
    std::vector<int> order;
    for (const auto& [pos, lane] : at) order.push_back(lane);
    m_.settle_bag(order);
  }

  // ---------------------------------------------------------- full comparison
  void compare_state() {
    const Snapshot s = q_.snapshot();
    std::ostringstream d;
    if (s.paused != m_.queue_paused) d << "queue paused: segment " << s.paused << ", model " << m_.queue_paused << "; ";
    const std::vector<BrandedId> ring = m_.visible_ring();
    if (s.ring != ring) {
      d << "ring: segment [";
      for (const auto& g : s.ring) d << ' ' << gname(g);
      d << " ], model [";
      for (const auto& g : ring) d << ' ' << gname(g);
      d << " ]; ";
    }
    if (s.lanes.size() != m_.lanes().size())
      d << "lanes: segment " << s.lanes.size() << ", model " << m_.lanes().size() << "; ";
    for (const LaneInfo& li : s.lanes) {
      const int lane = m_.lane_of_group(li.group);
      if (lane < 0) {
        d << "segment has a lane " << li.group.str() << " the model has not; ";
        continue;
      }
      const MLane& l = m_.lanes()[std::size_t(lane)];
      const std::string g = gname(li.group);
      auto cmp = [&](const char* what, std::uint64_t real, std::uint64_t model) {
        if (real != model) d << g << " " << what << ": segment " << real << ", model " << model << "; ";
      };
      cmp("depth", li.depth, l.pending.size());
      cmp("active", li.active, l.active);
      cmp("limit", li.limit, l.limit);
      cmp("weight", li.weight, l.turn());
      cmp("paused", li.paused, l.paused);
      cmp("ringed", li.ringed, l.ringed && l.serviceable());
      cmp("served", li.served, l.served);
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
      if (r.id.kind() != "JOB") d << n << " id " << r.id.str() << "; ";  // its snowflake is the key
      if (r.group != m_.lanes()[std::size_t(j.lane)].group) d << n << " group " << gname(r.group) << "; ";
      if (r.state != visible(j.st)) d << n << " state: segment " << to_string(r.state) << ", model " << to_string(visible(j.st)) << "; ";
      if (r.attempt != j.attempt) d << n << " attempt: segment " << r.attempt << ", model " << j.attempt << "; ";
      if (r.payload_bytes != j.payload.size()) d << n << " payload bytes: segment " << r.payload_bytes << ", model " << j.payload.size() << "; ";
      if (r.last_error != j.error) d << n << " last error: segment '" << r.last_error << "', model '" << j.error << "'; ";
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
    const std::size_t from = log_.size() > 40 ? log_.size() - 40 : 0;
    if (from) os << "  ... " << from << " earlier ops\n";
    for (std::size_t i = from; i < log_.size(); ++i) os << "  [" << i << "] " << log_[i] << "\n";
    os << "model ring:";
    if (auto h = m_.hold()) os << " hold=" << gname(m_.lanes()[std::size_t(h->first)].group) << "(" << h->second << ")";
    for (const auto& g : m_.visible_ring()) os << ' ' << gname(g);
    os << "\n";
    return os.str();
  }

  const std::uint64_t seed_;
  std::mt19937_64 rng_;
  Queue& q_;
  Model m_;
  const int enqueue_weight_;
  const bool trace_;
  std::vector<BrandedId> groups_;
  std::vector<std::uint64_t> known_;  // every id ever admitted
  std::uint64_t next_fresh_ = 0;
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
      "%llu seeds, %llu ops: %llu leases, %llu hold-slot turns, %llu lazy token drops, %llu turns cut by a limit, "
      "%llu unordered re-rings drawn by a claim / settled from the snapshot %llu / %llu, %llu expired, %llu promoted, "
      "%llu dead, %llu requeued, %llu drained, %llu duplicates, %llu out-of-order or reused ids, %llu full, "
      "%llu lanes_full, %llu stale, %llu gone\n",
      static_cast<unsigned long long>(count), static_cast<unsigned long long>(ops),
      static_cast<unsigned long long>(c.leases), static_cast<unsigned long long>(c.hold_turns),
      static_cast<unsigned long long>(c.lazy_drops), static_cast<unsigned long long>(c.limit_stops),
      static_cast<unsigned long long>(c.bag_draws + c.bag_settles), static_cast<unsigned long long>(c.bag_draws),
      static_cast<unsigned long long>(c.bag_settles), static_cast<unsigned long long>(c.expired),
      static_cast<unsigned long long>(c.promoted), static_cast<unsigned long long>(c.dead),
      static_cast<unsigned long long>(c.requeued), static_cast<unsigned long long>(c.drained),
      static_cast<unsigned long long>(c.duplicates), static_cast<unsigned long long>(c.reused_ids),
      static_cast<unsigned long long>(c.full), static_cast<unsigned long long>(c.lanes_full),
      static_cast<unsigned long long>(c.stale), static_cast<unsigned long long>(c.gone));
  RecordProperty("seeds", std::to_string(count));
  RecordProperty("ops", std::to_string(ops));
}

}  // namespace
}  // namespace fairlane
