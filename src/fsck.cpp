// fsck: every invariant of the segment checked against the job slots.
//
// The slot words are the truth; the lane words, lane structures, ring, hold
// slot, id index and free list are derived, and each is compared with what
// the slots say. Read-only. Exact on a quiet segment: a process that is
// mid-operation shows up as a transitional slot or a count off by one.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "fairlane/queue.hpp"
#include "hash.hpp"
#include "id_index.hpp"
#include "lane_table.hpp"
#include "ring.hpp"
#include "segment.hpp"

namespace fairlane {
using namespace detail;

namespace {

constexpr std::size_t kMaxIssues = 1000;

class Checker {
 public:
  explicit Checker(const Segment& s) : s_(s), lanes_(s.lane_mask + 1) {}

  FsckReport run() {
    report_.slots = s_.jobs;
    check_slots();
    check_index();
    check_lanes();
    check_ring();
    check_free_list();
    check_next_due();
    return std::move(report_);
  }

 private:
  struct LaneTruth {
    std::uint64_t pending = 0, active = 0;
    int tokens = 0;
  };

  void issue(const char* invariant, std::string detail) {
    if (report_.issues.size() < kMaxIssues) report_.issues.push_back({invariant, std::move(detail)});
  }
  std::string job(std::uint32_t slot) const {
    return "job " + BrandedId::make(std::string_view(s_.h->job_kind, 3), s_.slot(slot).snowflake.load()).string() +
           " (slot " + std::to_string(slot) + ")";
  }
  std::string lane(std::uint32_t i) const { return "lane " + lane_group(s_, i).string() + " (#" + std::to_string(i) + ")"; }
  static const char* state_name(SlotState st) {
    static const char* names[] = {"free", "admitting", "pending", "leased", "scheduled", "dead", "freeing", "invalid"};
    return names[std::size_t(st) & 7];
  }

  // Invariant 1: each job in exactly one place; its fields sane.
  void check_slots() {
    std::unordered_map<std::uint64_t, std::uint32_t> ids;
    ids.reserve(s_.jobs);
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const std::uint64_t w = s_.words[i].load(std::memory_order_acquire);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::free) continue;
      if (std::uint8_t(st) > std::uint8_t(SlotState::freeing)) {
        issue("slot-state", job(i) + " has an invalid state " + std::to_string(int(st)));
        continue;
      }
      if (st == SlotState::admitting || st == SlotState::freeing) {
        issue("slot-transitional", job(i) + " is " + state_name(st) + ": an operation is in progress or its process died");
        continue;
      }
      const SlotRecord& r = s_.slot(i);
      if (r.lane > s_.lane_mask || !lane_in_use(s_, r.lane)) {
        issue("slot-lane", job(i) + " names lane #" + std::to_string(r.lane) + ", which does not exist");
        continue;
      }
      if (r.payload_len > s_.payload_bytes) issue("slot-payload", job(i) + " has a payload length over the segment's limit");
      if (st == SlotState::pending) ++lanes_[r.lane].pending;
      if (st == SlotState::leased) ++lanes_[r.lane].active;
      if ((st == SlotState::leased || st == SlotState::scheduled) && SlotWord::when(w) == 0)
        issue("slot-when", job(i) + " is " + state_name(st) + " without a deadline");
      // Invariant 2: an id is admitted at most once.
      auto [it, fresh] = ids.emplace(r.snowflake.load(std::memory_order_relaxed), i);
      if (!fresh) issue("duplicate-id", job(i) + " has the same id as slot " + std::to_string(it->second));
    }
  }

  // Every live job has exactly one committed index entry, in one of its two
  // buckets, and no entry points anywhere else.
  void check_index() {
    std::vector<std::uint8_t> seen(s_.jobs, 0);
    for (std::uint64_t b = 0; b <= s_.index_mask; ++b) {
      for (std::uint32_t k = 0; k < kIndexWays; ++k) {
        const std::uint64_t e = s_.index[b].e[k].load(std::memory_order_acquire);
        if (e == 0) continue;
        const std::uint32_t slot = IndexEntry::slot(e);
        // Built only for a report: this loop runs under the gate's repair.
        auto where = [&] { return "index bucket " + std::to_string(b) + " way " + std::to_string(k); };
        if (!IndexEntry::committed(e)) {
          issue("index-tentative", where() + " holds a tentative entry for slot " + std::to_string(slot));
          continue;
        }
        if (slot >= s_.jobs) {
          issue("index-slot-range", where() + " points past the slot table");
          continue;
        }
        const SlotState st = SlotWord::state(s_.words[slot].load(std::memory_order_acquire));
        if (st == SlotState::free) {
          issue("index-stale", where() + " points to free slot " + std::to_string(slot));
          continue;
        }
        const IndexProbe p = index_probe(s_, s_.slot(slot).snowflake.load(std::memory_order_relaxed));
        if ((b != p.b1 && b != p.b2) || IndexEntry::fp(e) != (p.fp & 0x7FFFFFFF))
          issue("index-misplaced", where() + " holds " + job(slot) + " outside its buckets");
        ++seen[slot];
      }
    }
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const SlotState st = SlotWord::state(s_.words[i].load(std::memory_order_relaxed));
      if (st == SlotState::free || st == SlotState::admitting || st == SlotState::freeing) continue;
      if (seen[i] == 0) issue("index-missing", job(i) + " is " + state_name(st) + " but not in the id index");
      if (seen[i] > 1) issue("index-duplicate", job(i) + " has " + std::to_string(seen[i]) + " index entries");
    }
  }

  // Lane words agree with the slots; each lane structure holds exactly its
  // pending slots, in order (invariant 6).
  void check_lanes() {
    std::uint32_t used = 0;
    for (std::uint32_t i = 0; i <= s_.lane_mask; ++i) {
      if (s_.lanes[i].key_a.load(std::memory_order_acquire) != 0) ++used;
      if (!lane_in_use(s_, i)) continue;
      ++report_.lanes;
      const LaneRecord& l = s_.lanes[i];
      const std::uint64_t w = l.word.load(std::memory_order_acquire);
      if (w & LaneWord::kBusy) issue("lane-busy", lane(i) + " is held by a server");
      if (LaneWord::pending(w) != lanes_[i].pending)
        issue("lane-pending-count", lane(i) + " counts " + std::to_string(LaneWord::pending(w)) + " pending, the slots say " +
                                        std::to_string(lanes_[i].pending));
      if (LaneWord::active(w) != lanes_[i].active)
        issue("lane-active-count", lane(i) + " counts " + std::to_string(LaneWord::active(w)) + " active, the slots say " +
                                       std::to_string(lanes_[i].active));
      check_structure(i);
    }
    if (used != s_.h->lanes_used.load(std::memory_order_relaxed))
      issue("lanes-used", "the header counts " + std::to_string(s_.h->lanes_used.load()) + " lanes taken, the table holds " +
                              std::to_string(used));
  }

  void check_structure(std::uint32_t li) {
    const LaneRecord& l = s_.lanes[li];
    std::vector<std::uint32_t> members;
    // One mark table for every lane, stamped with the lane's visit number:
    // a table per lane made the check O(lanes x jobs), and the gate's repair
    // (which runs this check) keeps every operation waiting meanwhile.
    if (mark_.empty()) mark_.assign(s_.jobs, 0);
    const std::uint32_t visit_no = ++visits_;
    auto& mark = mark_;
    bool broken = false;
    auto visit = [&](std::uint32_t link, const char* part) {
      if (link == 0) return false;
      const std::uint32_t slot = link - 1;
      if (slot >= s_.jobs || mark[slot] == visit_no) {
        issue("lane-structure", lane(li) + ": its " + part + " links slot " + std::to_string(slot) + " twice or out of range");
        broken = true;
        return false;
      }
      mark[slot] = visit_no;
      members.push_back(slot);
      return true;
    };
    for (std::uint32_t n = l.intake.load(std::memory_order_acquire); visit(n, "intake") && !broken;)
      n = s_.slot(n - 1).next.load(std::memory_order_relaxed);
    std::uint64_t last = 0;
    bool first = true;
    for (std::uint32_t n = l.run_head; visit(n, "run") && !broken;) {
      const std::uint64_t key = s_.slot(n - 1).snowflake.load(std::memory_order_relaxed);
      if (!first && key <= last) issue("lane-order", lane(li) + ": its ascending run is out of order at " + job(n - 1));
      first = false;
      last = key;
      n = s_.slot(n - 1).next.load(std::memory_order_relaxed);
    }
    std::vector<std::uint32_t> stack;
    if (visit(l.heap_root, "heap")) stack.push_back(l.heap_root - 1);
    while (!stack.empty() && !broken) {
      const std::uint32_t n = stack.back();
      stack.pop_back();
      const std::uint64_t key = s_.slot(n).snowflake.load(std::memory_order_relaxed);
      for (std::uint32_t c : {s_.slot(n).left, s_.slot(n).right}) {
        if (!visit(c, "heap")) continue;
        if (s_.slot(c - 1).snowflake.load(std::memory_order_relaxed) < key)
          issue("lane-order", lane(li) + ": its heap has a child older than its parent at " + job(c - 1));
        stack.push_back(c - 1);
      }
    }
    if (broken) return;
    for (std::uint32_t slot : members) {
      const SlotState st = SlotWord::state(s_.words[slot].load(std::memory_order_relaxed));
      if (st != SlotState::pending || s_.slot(slot).lane != li)
        issue("lane-structure", lane(li) + " holds " + job(slot) + ", which is " + state_name(st) +
                                    (s_.slot(slot).lane != li ? " in another lane" : ""));
    }
    if (members.size() != lanes_[li].pending)
      issue("lane-structure", lane(li) + " links " + std::to_string(members.size()) + " jobs, the slots say " +
                                  std::to_string(lanes_[li].pending) + " are pending there");
  }

  // Invariant 3: a lane has a token iff it says ringed; a serviceable lane
  // always has one (no lost wake-up); no lane has two.
  void check_ring() {
    const std::uint64_t cells = s_.ring_mask + 1;
    const std::uint64_t head = s_.h->ring_head.load(std::memory_order_acquire);
    const std::uint64_t tail = s_.h->ring_tail.load(std::memory_order_acquire);
    if (tail < head || tail - head > cells) issue("ring-indexes", "ring head " + std::to_string(head) + ", tail " + std::to_string(tail));
    auto token = [&](std::uint32_t lane_index, std::uint64_t position) {  // position ~0: the hold slot
      if (lane_index > s_.lane_mask || !lane_in_use(s_, lane_index)) {
        const std::string where = position == ~0ULL ? std::string("the hold slot") : "ring position " + std::to_string(position);
        issue("ring-token", where + " holds a token for lane #" + std::to_string(lane_index) + ", which does not exist");
        return;
      }
      ++report_.tokens;
      if (++lanes_[lane_index].tokens == 2) issue("ring-duplicate-token", lane(lane_index) + " has two tokens");
    };
    const std::uint64_t hw = s_.h->hold.load(std::memory_order_acquire);
    if (hw) token(std::uint32_t(hw) - 1, ~0ULL);
    for (std::uint64_t p = head; p < tail && p - head <= cells; ++p) {
      const std::uint64_t c = s_.ring[p & s_.ring_mask].load(std::memory_order_acquire);
      if (RingCell::pos(c) != (p & RingCell::kPosMask) || RingCell::value(c) == 0) {
        issue("ring-cell", "ring position " + std::to_string(p) + " is inside [head, tail) but holds no token");
        continue;
      }
      token(std::uint32_t(RingCell::value(c) - 1), p);
    }
    for (std::uint32_t i = 0; i <= s_.lane_mask; ++i) {
      if (!lane_in_use(s_, i)) continue;
      const std::uint64_t w = s_.lanes[i].word.load(std::memory_order_acquire);
      const bool ringed = (w & LaneWord::kRinged) != 0;
      if (ringed && lanes_[i].tokens == 0) issue("ring-membership", lane(i) + " says ringed but has no token");
      if (!ringed && lanes_[i].tokens > 0) issue("ring-membership", lane(i) + " has a token but does not say ringed");
      if (LaneWord::serviceable(w) && !ringed) issue("ring-lost-wakeup", lane(i) + " is serviceable but off the ring");
    }
  }

  // The free list holds exactly the free slots, each once.
  void check_free_list() {
    std::vector<std::uint8_t> on(s_.jobs, 0);
    std::uint64_t n = 0;
    for (std::uint32_t link = std::uint32_t(s_.h->free_head.load(std::memory_order_acquire)); link;) {
      const std::uint32_t slot = link - 1;
      if (slot >= s_.jobs || on[slot]) {
        issue("free-list", "the free list loops or leaves the table at slot " + std::to_string(slot));
        return;
      }
      on[slot] = 1;
      ++n;
      const SlotState st = SlotWord::state(s_.words[slot].load(std::memory_order_relaxed));
      if (st != SlotState::free) issue("free-list", job(slot) + " is on the free list but " + state_name(st));
      link = s_.slot(slot).next.load(std::memory_order_relaxed);
    }
    for (std::uint32_t i = 0; i < s_.jobs; ++i)
      if (SlotWord::state(s_.words[i].load(std::memory_order_relaxed)) == SlotState::free && !on[i])
        issue("free-list-leak", "slot " + std::to_string(i) + " is free but not on the free list");
  }

  // Expiry and promotion are driven by next_due: it must not be later than
  // the earliest deadline (the backstop sweep would still catch it).
  void check_next_due() {
    std::uint64_t earliest = ~0ULL;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const std::uint64_t w = s_.words[i].load(std::memory_order_relaxed);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::leased || st == SlotState::scheduled) earliest = std::min(earliest, SlotWord::when(w));
    }
    const std::uint64_t due = s_.h->next_due.load(std::memory_order_acquire);
    if (earliest != ~0ULL && due > earliest)
      issue("next-due", "next due time " + std::to_string(due) + " is later than the earliest deadline " + std::to_string(earliest));
  }

  std::vector<std::uint32_t> mark_;  // check_structure's visited slots
  std::uint32_t visits_ = 0;
  const Segment& s_;
  std::vector<LaneTruth> lanes_;
  FsckReport report_;
};

}  // namespace

namespace detail {
FsckReport check_segment(const Segment& s) { return Checker(s).run(); }
}  // namespace detail

FsckReport Queue::fsck() const { return check_segment(*seg_); }

}  // namespace fairlane
