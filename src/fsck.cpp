// fsck: every invariant of the segment checked against the job slots.
//
// The slot words are the truth; lane words and orders, the ring, the lane
// directory and the id index are derived, and each is compared with what
// the slots say. Read-only, and safe on any bytes: every index is checked
// before use and every walk is bounded.
//
// Exact on a quiet segment. A process in the middle of an operation leaves
// a step that is not finished: a thread's intent (a job being taken out of
// its lane, or appended to it), an admitting slot, a job on its way back to
// its lane (returning), a lane word step not yet applied to its slot. Each
// is reported once as "in-flight", naming the process and the step, and the
// checks it would disturb (that job's place, its lane's counts) are left out
// for it: fsck names what a stopped process is in the middle of, and
// nothing else.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core.hpp"
#include "fairlane/queue.hpp"

namespace fairlane {
using namespace detail;

namespace {

constexpr std::size_t kMaxIssues = 1000;

const char* state_name(SlotState st) {
  static const char* names[] = {"free", "admitting", "pending", "leased", "scheduled", "dead", "returning", "aborted"};
  return std::size_t(st) < kSlotStates ? names[std::size_t(st)] : "invalid";
}

class Checker {
 public:
  explicit Checker(const Segment& s) : s_(const_cast<Segment&>(s)) {}

  FsckReport run() {
    report_.slots = s_.jobs;
    report_.lanes = s_.lane_count;
    in_lane_.assign(s_.jobs, 0);
    exempt_slot_.assign(s_.jobs, 0);
    exempt_lane_.assign(s_.lane_count, 0);
    find_in_flight();
    check_slots();
    check_lanes();
    check_placement();
    check_counts();
    check_ring();
    check_directory();
    check_index();
    return std::move(report_);
  }

 private:
  void issue(const char* invariant, std::string detail) {
    if (report_.issues.size() < kMaxIssues) report_.issues.push_back({invariant, std::move(detail)});
    else ++report_.unlisted;
  }
  std::string job(std::uint32_t slot) const {
    const std::uint64_t sf = s_.slot(slot).sf.load(std::memory_order_relaxed) & kMaxSnowflake;
    return "job " + BrandedId::make(std::string_view(s_.kind, 3), sf).string() + " (slot " + std::to_string(slot) + ")";
  }
  std::string lane_name(std::uint32_t i) const {
    if (i == kDefaultLane) return "the default lane (#0)";
    return "lane " + lane_group(s_, i).string() + " (#" + std::to_string(i) + ")";
  }
  std::string pid_of(std::uint32_t holder) {
    const std::uint32_t i1 = Holder::index1(holder);
    if (i1 == 0 || i1 > s_.proc_count) return "an unknown process";
    return "pid " + pid(i1);
  }
  // Is lane `lane` the lane of the group job `slot` names? (Its group is the
  // truth: its settings, pause and limit are what the job is served under.)
  bool group_lane(std::uint32_t slot, std::uint32_t lane) const {
    GroupKey g;
    const bool grouped = slot_group(s_, slot, g);
    if (lane == kDefaultLane || !grouped) return lane == kDefaultLane && !grouped;
    const LaneRecord& r = s_.lanes[lane];
    return (r.key_kind.load(std::memory_order_relaxed) & 0x7FFF) == g.kind && r.key_sf.load(std::memory_order_relaxed) == g.sf;
  }
  std::string group_of(std::uint32_t slot) const {
    GroupKey g;
    if (!slot_group(s_, slot, g)) return "the default group";
    if (g.kind >= kKindCodes || g.sf > kMaxSnowflake) return "an impossible group";
    char k[3];
    kind_letters(g.kind, k);
    return "group " + BrandedId::make(std::string_view(k, 3), g.sf).string();
  }
  bool lane_live(std::uint32_t lane) const {
    return lane < s_.lane_count && LaneWord::state(lane_load(s_, lane)) == LaneState::live;
  }

  // ---- steps in flight ----------------------------------------------------------------

  void in_flight(std::string what) { issue("in-flight", std::move(what)); }

  void find_in_flight() {
    auto intent = [&](std::uint64_t in, std::uint64_t lane_word, std::uint32_t proc1) {
      const std::uint64_t lane = IntentLane::lane(lane_word);
      const Intent kind = IntentWord::kind(in);
      if (kind == Intent::none) return;
      const std::uint32_t slot1 = IntentWord::slot1(in);
      if (slot1 == 0 || slot1 > s_.jobs || lane >= s_.lane_count) {
        issue("process-record", "a thread of pid " + pid(proc1) + " has an intent naming slot " + std::to_string(slot1) +
                                    " and lane " + std::to_string(lane) + ", out of range");
        return;
      }
      if (!IntentLane::is_husk(lane_word) && (lane_word >> 32) != 0) {  // only a husk's take has bits above the lane
        issue("process-record", "a thread of pid " + pid(proc1) + " has an intent whose lane word has bits set above lane " +
                                    std::to_string(lane));
        return;
      }
      exempt_slot_[slot1 - 1] = 1;
      exempt_lane_[lane] = 1;
      const char* what = kind == Intent::link ? "appending" : "taking";
      in_flight("pid " + pid(proc1) + " is " + what + " " + job(slot1 - 1) + (kind == Intent::link ? " to " : " from ") +
                lane_name(std::uint32_t(lane)));
    };
    const std::uint32_t used = s_.h->threads_used.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < s_.thread_count; ++i) {
      const ThreadRecord& t = s_.threads[i];
      const std::uint64_t owner = t.owner.load(std::memory_order_acquire);
      if (owner == 0) continue;
      // Re-read: a thread taking a record raises the mark before its owner CAS.
      if (i >= used && i >= s_.h->threads_used.load(std::memory_order_acquire))
        issue("process-record", "thread record " + std::to_string(i) + " is in use, at or above threads_used " +
                                    std::to_string(used) + " (the records scans read)");
      const std::uint32_t p1 = ThreadOwner::proc1(owner);
      if (p1 == 0 || p1 > s_.proc_count) {
        issue("process-record", "thread record " + std::to_string(i) + " names process record " + std::to_string(p1));
        continue;
      }
      intent(t.intent.load(std::memory_order_acquire), t.intent_lane.load(std::memory_order_relaxed), p1);
    }
    for (std::uint32_t i = 0; i < s_.proc_count; ++i)
      intent(s_.procs[i].intent.load(std::memory_order_acquire), s_.procs[i].intent_lane.load(std::memory_order_relaxed),
             i + 1);
    // Lane steps decided and not yet applied to their slot.
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      const Word128 w = lane_load(s_, l);
      if (LaneWord::state(w) != LaneState::live || LaneWord::rel(w) == 0) continue;
      const std::uint32_t r1 = LaneWord::rel(w);
      if (r1 > s_.jobs) {
        issue("lane-word", lane_name(l) + " names slot " + std::to_string(r1 - 1) + " in its step, past the table");
        continue;
      }
      if (step_pending(l, w, r1 - 1)) {
        exempt_slot_[r1 - 1] = 1;
        exempt_lane_[l] = 1;
        in_flight(lane_name(l) + " has a step (" + std::to_string(int(LaneWord::relop(w))) + ") for " + job(r1 - 1) +
                  " not yet applied (its next writer applies it)");
      }
    }
  }

  // "5691 (dead)": the process of record proc1 and what it is now, so that
  // a step in flight says whether its owner may still finish it (alive or
  // stopped) or a survivor must (dead: the next claim, or a repair). Looked
  // at once per record (a liveness-lock look and /proc, no write).
  std::string pid(std::uint32_t proc1) {
    const ProcRecord& r = s_.procs[proc1 - 1];
    const std::uint64_t owner = r.owner.load(std::memory_order_acquire);
    std::string out = std::to_string(owner & 0x7FFFFFFF);
    if (!(owner & kOwnerAttached)) return out + " (detached)";
    if (proc_state_.empty()) proc_state_.assign(s_.proc_count, -1);
    int& st = proc_state_[proc1 - 1];
    if (st < 0) st = int(owner_state(s_, proc1 - 1, owner, r.start_time.load(std::memory_order_relaxed)));
    return out + " (" + std::string(to_string(ProcessState(st))) + ")";
  }

  // Is the step the lane word names still to be applied to its slot?
  bool step_pending(std::uint32_t lane, const Word128& w, std::uint32_t slot) const {
    const Word128 sw = slot_load(s_, slot);
    const SlotState st = SlotWord::state(sw);
    switch (LaneWord::relop(w)) {
      case RelOp::complete:
      case RelOp::park:
      case RelOp::release: return st == SlotState::leased && s_.slot(slot).lane.load(std::memory_order_relaxed) == lane;
      case RelOp::back:
        return (st == SlotState::leased || st == SlotState::pending) &&
               s_.slot(slot).lane.load(std::memory_order_relaxed) == lane;
      case RelOp::linked: return st == SlotState::returning;
      case RelOp::drop: return st == SlotState::pending;
      case RelOp::take: return UpLink::mark(s_.slot(slot).next.load(std::memory_order_acquire)) != Link::kDeleted;
    }
    return false;
  }

  // ---- slots ------------------------------------------------------------------------------

  void check_slots() {
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const Word128 w = slot_load(s_, i);
      const SlotState st = SlotWord::state(w);
      if (std::size_t(st) >= kSlotStates) {
        issue("slot-state", job(i) + " has an invalid state " + std::to_string(int(st)));
        continue;
      }
      if (st == SlotState::free) continue;
      const SlotRecord& r = s_.slot(i);
      if (r.payload_len.load(std::memory_order_relaxed) > s_.payload_bytes)
        issue("slot-record", job(i) + " has a payload of " + std::to_string(r.payload_len.load()) + " bytes, over " +
                                 std::to_string(s_.payload_bytes));
      if (r.error_len.load(std::memory_order_relaxed) > kErrorBytes)
        issue("slot-record", job(i) + " has an error text of " + std::to_string(r.error_len.load()) + " bytes");
      const std::uint64_t gk = r.group_kind.load(std::memory_order_relaxed);
      if (gk != kNoGroup && gk >= kKindCodes) issue("slot-record", job(i) + " names an impossible group namespace");
      if (st == SlotState::leased || st == SlotState::pending) {
        if (r.lane.load(std::memory_order_relaxed) >= s_.lane_count)
          issue("slot-record", job(i) + " names lane #" + std::to_string(r.lane.load()) + ", past the table");
      }
      const std::uint32_t holder = SlotWord::holder(w);
      if (holder && (Holder::index1(holder) == 0 || Holder::index1(holder) > s_.proc_count))
        issue("slot-word", job(i) + " names holder " + std::to_string(holder) + ", past the process table");
      switch (st) {
        case SlotState::admitting:
          exempt_slot_[i] = 1;
          if (r.lane.load(std::memory_order_relaxed) < s_.lane_count) exempt_lane_[r.lane.load()] = 1;
          // Unpublished, the record is still its last job's (or empty).
          in_flight(pid_of(holder) + " is admitting " +
                    (admission_published(r, w) ? job(i) : "a job into slot " + std::to_string(i) + " (not yet written)"));
          break;
        case SlotState::returning:
          exempt_slot_[i] = 1;
          if (r.lane.load(std::memory_order_relaxed) < s_.lane_count) exempt_lane_[r.lane.load()] = 1;
          in_flight(job(i) + " is on its way back to its lane" +
                    (holder ? " (moved by " + pid_of(holder) + ")" : std::string(" (for anyone to link)")));
          break;
        case SlotState::pending:
          if (!holder) break;
          // A take revoked by a settler, its `back` step not yet made.
          exempt_slot_[i] = 1;
          if (r.lane.load(std::memory_order_relaxed) < s_.lane_count) exempt_lane_[r.lane.load()] = 1;
          in_flight(pid_of(holder) + " is putting " + job(i) + " back into its lane");
          break;
        default:
          break;
      }
    }
  }

  // ---- lane orders --------------------------------------------------------------------------

  void check_lanes() {
    std::uint64_t live = 0;
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      const Word128 w = lane_load(s_, l);
      const LaneState st = LaneWord::state(w);
      if (std::uint32_t(st) > 2) {
        issue("lane-word", lane_name(l) + " has an invalid state");
        continue;
      }
      if (st == LaneState::free) continue;
      ++live;
      if (st == LaneState::creating) continue;
      walk_run(l, w);
      walk_strays(l, w);
    }
    if (l0_missing()) issue("lane-word", "the default lane (#0) is not live");
    (void)live;
  }
  bool l0_missing() const { return LaneWord::state(lane_load(s_, kDefaultLane)) != LaneState::live; }

  void walk_run(std::uint32_t l, const Word128& w) {
    std::uint32_t x1 = LaneWord::head(w);
    const std::uint32_t t1 = LaneWord::tail(w);
    if ((x1 == 0) != (t1 == 0)) {
      issue("lane-order", lane_name(l) + " has a run with head " + std::to_string(x1) + " and tail " + std::to_string(t1));
      return;
    }
    std::uint64_t prev = 0;
    bool first = true, saw_tail = false;
    for (std::uint32_t steps = 0; x1 != 0; ++steps) {
      if (x1 > s_.jobs || steps > s_.jobs) {
        issue("lane-order", lane_name(l) + "'s run leaves the table or loops");
        return;
      }
      const std::uint32_t x = x1 - 1;
      const SlotRecord& r = s_.slot(x);
      const SlotState st = SlotWord::state(slot_load(s_, x));
      if (st != SlotState::pending && st != SlotState::admitting && st != SlotState::aborted) {
        issue("lane-order", lane_name(l) + "'s run holds " + job(x) + ", which is " + state_name(st));
        return;
      }
      if (in_lane_[x]++) {
        issue("lane-order", job(x) + " is linked twice");
        return;
      }
      if (st == SlotState::pending && r.lane.load(std::memory_order_relaxed) != l)
        issue("lane-order", job(x) + " is in " + lane_name(l) + "'s run but names lane #" + std::to_string(r.lane.load()));
      else if (st == SlotState::pending && !exempt_slot_[x] && !group_lane(x, l))
        issue("lane-order", job(x) + " is in " + lane_name(l) + "'s run but is of " + group_of(x));
      const std::uint64_t key = r.sf.load(std::memory_order_relaxed);
      if (!first && key < prev) issue("lane-order", lane_name(l) + "'s run is out of id order at " + job(x));
      prev = key;
      first = false;
      if (x1 == t1) saw_tail = true;
      const std::uint64_t link = r.next.load(std::memory_order_acquire);
      const std::uint32_t next1 = Link::succ(link);
      x1 = next1;
    }
    if (!saw_tail && t1 != 0) issue("lane-order", lane_name(l) + "'s tail is not on its run");
  }

  void walk_strays(std::uint32_t l, const Word128& w) {
    std::uint32_t x1 = UpLink::succ(s_.lanes[l].strays[0].load(std::memory_order_acquire));
    std::uint64_t prev = 0;
    bool first = true, any = false, marked_done = false;
    for (std::uint32_t steps = 0; x1 != 0; ++steps) {
      if (x1 > s_.jobs || steps > s_.jobs) {
        issue("lane-order", lane_name(l) + "'s strays leave the table or loop");
        return;
      }
      const std::uint32_t x = x1 - 1;
      const SlotRecord& r = s_.slot(x);
      const std::uint64_t link = r.next.load(std::memory_order_acquire);
      const bool marked = UpLink::mark(link) == Link::kDeleted;
      if (marked) {
        // Taken, not yet unlinked: only as a prefix, and only while its taker
        // is between its take and its unlink (an intent names it).
        if (marked_done || !exempt_slot_[x])
          issue("lane-order", lane_name(l) + "'s strays hold " + job(x) + " taken but not unlinked");
      } else {
        marked_done = true;
        any = true;
        const SlotState st = SlotWord::state(slot_load(s_, x));
        if (st != SlotState::pending && st != SlotState::returning && st != SlotState::aborted) {
          issue("lane-order", lane_name(l) + "'s strays hold " + job(x) + ", which is " + state_name(st));
          return;
        }
        if (in_lane_[x]++) {
          issue("lane-order", job(x) + " is linked twice");
          return;
        }
        if (st == SlotState::pending && !exempt_slot_[x] && !group_lane(x, l))
          issue("lane-order", job(x) + " is in " + lane_name(l) + "'s strays but is of " + group_of(x));
        const std::uint64_t key = r.sf.load(std::memory_order_relaxed);
        // Equal keys are one job's husk beside its copy (a move there and back).
        if (!first && key < prev) issue("lane-order", lane_name(l) + "'s strays are out of id order at " + job(x));
        prev = key;
        first = false;
      }
      x1 = UpLink::succ(link);
    }
    if (any && !LaneWord::strays(w) && !exempt_lane_[l])
      issue("lane-strays-flag", lane_name(l) + " holds jobs in its strays but its word says none");
  }

  // Every pending job is in its lane's order (exactly once: walk_run and
  // walk_strays count).
  void check_placement() {
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      if (exempt_slot_[i]) continue;
      const SlotState st = SlotWord::state(slot_load(s_, i));
      if (st == SlotState::pending && !in_lane_[i]) {
        const std::uint32_t l = s_.slot(i).lane.load(std::memory_order_relaxed);
        issue("job-unlinked", job(i) + " is pending but in no lane's order (it names " +
                                  (l < s_.lane_count ? lane_name(l) : "lane #" + std::to_string(l)) +
                                  (lane_live(l) ? ")" : ", which is not live)"));
      }
      if (st == SlotState::aborted && !in_lane_[i] && SlotWord::holder(slot_load(s_, i)) == 0)
        issue("slot-leaked", job(i) + " is a husk (aborted) linked nowhere: it is never freed");
    }
  }

  // A lane's active count: its leases, on a quiet lane.
  void check_counts() {
    std::vector<std::uint64_t> held(s_.lane_count, 0);
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const Word128 w = slot_load(s_, i);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::leased) {
        const std::uint32_t l = s_.slot(i).lane.load(std::memory_order_relaxed);
        if (l < s_.lane_count) {
          ++held[l];
          if (!lane_live(l))
            issue("lane-of-lease", job(i) + " is leased in " + lane_name(l) + ", which is not live");
          else if (!exempt_slot_[i] && !group_lane(i, l))
            issue("lane-of-lease", job(i) + " is leased in " + lane_name(l) + " but is of " + group_of(i));
        }
      }
    }
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      const Word128 w = lane_load(s_, l);
      if (LaneWord::state(w) != LaneState::live || exempt_lane_[l]) continue;
      if (LaneWord::active(w) != held[l])
        issue("lane-active-count", lane_name(l) + " counts " + std::to_string(LaneWord::active(w)) + " active, its jobs say " +
                                       std::to_string(held[l]));
    }
  }

  // ---- ring ---------------------------------------------------------------------------------

  void check_ring() {
    const std::uint64_t head = s_.h->ring_head.load(std::memory_order_acquire);
    std::vector<char> token(s_.lane_count, 0);
    for (std::uint64_t p = head; p < head + s_.ring_mask + 1; ++p) {
      const std::uint64_t c = s_.ring[p & s_.ring_mask].load(std::memory_order_acquire);
      if (!cell_written_for(c, p)) break;
      const std::uint32_t l1 = RingCell::lane1(c);
      if (l1 == RingCell::kSkip) continue;  // a gap filled (ring_step), not yet passed
      if (l1 == 0 || l1 > s_.lane_count) {
        issue("ring-cell", "ring position " + std::to_string(p) + " names lane #" + std::to_string(l1) + ", past the table");
        continue;
      }
      const Word128 w = lane_load(s_, l1 - 1);
      if (LaneWord::state(w) == LaneState::live && LaneWord::ringed(w) && LaneWord::tgen(w) == (p & LaneWord::kTgenMask))
        token[l1 - 1] = 1;
    }
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      const Word128 w = lane_load(s_, l);
      if (LaneWord::state(w) != LaneState::live) continue;
      if (LaneWord::ringed(w)) ++report_.tokens;
      const bool serviceable = lane_serviceable(w, lane_settings(s_, l));
      if (LaneWord::ringed(w) && !token[l])
        issue("ring-membership", lane_name(l) + " is ringed but no cell from the head on is its token");
      if (serviceable && !LaneWord::ringed(w) && !exempt_lane_[l])
        issue("ring-membership", lane_name(l) + " is serviceable but not in the ring");
    }
  }

  // ---- directory ----------------------------------------------------------------------------

  void check_directory() {
    std::vector<int> entries(s_.lane_count, 0);
    const std::uint64_t buckets = s_.dir_mask + 1;
    for (std::uint64_t b = 0; b < buckets; ++b) {
      for (unsigned k = 0; k < kDirWays; ++k) {
        const Word128 e = load128(s_.dir[b].e[k]);
        if (DirEntry::state(e) != DirState::live) continue;
        const std::uint32_t l1 = DirEntry::lane1(e);
        if (l1 == 0 || l1 > s_.lane_count || l1 - 1 == kDefaultLane) {
          issue("lane-directory", "directory bucket " + std::to_string(b) + " names lane #" + std::to_string(l1 - 1));
          continue;
        }
        const std::uint32_t l = l1 - 1;
        if (!lane_live(l)) continue;  // stale: cleared by the next lookup that meets it
        const LaneRecord& r = s_.lanes[l];
        if (r.key_sf.load() != DirEntry::sf(e) || (r.key_kind.load() & 0x7FFF) != DirEntry::kind(e) ||
            ((r.key_kind.load() >> 16) & ((1ULL << 25) - 1)) != DirEntry::inc(e))
          continue;  // an older incarnation's entry: stale
        ++entries[l];
      }
    }
    for (std::uint32_t l = 1; l < s_.lane_count; ++l) {
      if (!lane_live(l)) continue;
      if (entries[l] == 0) issue("lane-directory", lane_name(l) + " is live but its group cannot find it");
      if (entries[l] > 1) issue("lane-directory", lane_name(l) + " has " + std::to_string(entries[l]) + " directory entries");
    }
  }

  // ---- id index -------------------------------------------------------------------------------

  void check_index() {
    std::unordered_map<std::uint64_t, std::uint32_t> ids;
    ids.reserve(s_.jobs);
    std::unordered_set<std::uint64_t> duplicated;
    std::vector<std::pair<std::uint32_t, std::uint64_t>> missing;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const SlotState st = SlotWord::state(slot_load(s_, i));
      if (!committed_state(st)) continue;
      const std::uint64_t sf = s_.slot(i).sf.load(std::memory_order_relaxed);
      auto [it, fresh] = ids.try_emplace(sf, i);
      if (!fresh) {
        issue("index-duplicate", job(i) + " and slot " + std::to_string(it->second) + " hold the same id");
        duplicated.insert(sf);
      }
      // An entry of its own: a look-up also follows a reassign's husk to the
      // copy it names, and finds a copy that lost its entries for as long
      // as the husk is linked, not after.
      if (!index_has_entry(s_, index_probe(s_, sf), i)) missing.emplace_back(i, sf);
    }
    // A slot whose id was written over with another job's has no entry
    // under it: that is the duplicate, said once.
    for (const auto& [i, sf] : missing)
      if (!duplicated.count(sf)) issue("index-missing", job(i) + " is not found by its id");
  }

  Segment& s_;
  FsckReport report_;
  std::vector<std::uint8_t> in_lane_, exempt_slot_, exempt_lane_;
  std::vector<int> proc_state_;  // by process record: a ProcessState, -1 not looked at yet
};

}  // namespace

namespace detail {
FsckReport check_segment(const Segment& s) { return Checker(s).run(); }
}  // namespace detail

FsckReport Queue::fsck() const { return check_segment(*seg_); }

}  // namespace fairlane
