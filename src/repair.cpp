// repair: every derived structure rebuilt from the job slots (the truth).
//
// fsck (src/fsck.cpp) compares the lane words, lane structures, ring, hold
// slot, id index, free list and next due time with what the slot words say.
// repair makes them say it: it first settles the slots themselves (a slot
// stuck mid-operation, an impossible state, a lane that does not exist, two
// slots with one id), then rewrites each derived structure from scratch.
//
// It runs alone: it refuses while another live process is attached (one
// that is mid-operation would race every write below), unless forced by
// someone who knows those processes are idle. No atomic protocol is needed
// inside it; the release fence and the wake-up at the end publish it.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <string>
#include <unordered_map>
#include <vector>

#include "clock.hpp"
#include "fairlane/queue.hpp"
#include "futex.hpp"
#include "gate.hpp"
#include "hash.hpp"
#include "id_index.hpp"
#include "lane_table.hpp"
#include "ring.hpp"
#include "segment.hpp"

namespace fairlane {
using namespace detail;

namespace {

constexpr std::uint64_t kNever = ~0ULL;
constexpr std::uint64_t kOwnerStamped = 1ULL << 33;  // ProcRecord::owner, see segment.cpp
constexpr std::size_t kMaxNotes = 1000;

const char* state_name(SlotState st) {
  static const char* names[] = {"free", "admitting", "pending", "leased", "scheduled", "dead", "freeing", "invalid"};
  return names[std::size_t(st) & 7];
}

bool live_state(SlotState st) {
  return st == SlotState::pending || st == SlotState::leased || st == SlotState::scheduled || st == SlotState::dead;
}

// Pids of the live processes attached to the segment other than this one.
// A record still being attached (not stamped) counts if its pid exists.
std::vector<int> other_live_processes(const Segment& s) {
  std::vector<int> out;
  const int me = int(::getpid());
  for (std::uint32_t i = 0; i < kMaxProcs; ++i) {
    if (&s.procs[i] == s.me) continue;
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    const int pid = int(owner & 0xFFFFFFFF);
    if (pid == me) continue;  // another handle of this process: its threads are the caller's business
    const std::uint64_t start = (owner & kOwnerStamped) ? s.procs[i].start_time : 0;
    if (process_alive(pid, start)) out.push_back(pid);
  }
  return out;
}

class Repairer {
 public:
  Repairer(Segment& s, FsckReport& report) : s_(s), report_(report) {}

  void run() {
    settle_slots();
    rebuild_index();
    rebuild_free_list();
    rebuild_lanes();
    rebuild_ring();
    rebuild_next_due();
    mark_mirror();
    // Publish, then wake every parked consumer: what it waited for may be
    // serviceable now.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    s_.h->wake_seq.fetch_add(1, std::memory_order_release);
    futex_wake(&s_.h->wake_seq, INT_MAX);
  }

 private:
  void note(std::string line) {
    if (report_.repairs.size() < kMaxNotes) report_.repairs.push_back(std::move(line));
  }
  std::string job(std::uint32_t slot) const {
    return "job " + BrandedId::make(std::string_view(s_.h->job_kind, 3), s_.slot(slot).snowflake.load()).string() +
           " (slot " + std::to_string(slot) + ")";
  }
  std::string lane(std::uint32_t i) const { return "lane " + lane_group(s_, i).string() + " (#" + std::to_string(i) + ")"; }

  void free_slot(std::uint32_t i, std::uint64_t w) {
    s_.words[i].store(SlotWord::pack(SlotState::free, SlotWord::gen(w), 0, 0), std::memory_order_relaxed);
    s_.slot(i).holder = 0;
  }

  // The slot words themselves: each ends free or in a live state, in a
  // lane that exists, with sane fields, and no id is held twice.
  void settle_slots() {
    const std::uint64_t now = segment_now_ms(s_);
    std::unordered_map<std::uint64_t, std::uint32_t> ids;
    ids.reserve(s_.jobs);
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      std::uint64_t w = s_.words[i].load(std::memory_order_acquire);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::free) continue;
      if (std::uint8_t(st) > std::uint8_t(SlotState::freeing)) {
        note("slot " + std::to_string(i) + " had the invalid state " + std::to_string(int(st)) +
             ": freed (nothing in it can be trusted)");
        free_slot(i, w);
        continue;
      }
      if (st == SlotState::admitting &&
          index_find(s_, s_.slot(i).snowflake.load(std::memory_order_relaxed)) == i) {
        // Its id is committed: a retry of the same enqueue has been told
        // `duplicate` since, so the job must not vanish. Every field was
        // written before the commit. It is admitted as pending (a delayed
        // enqueue loses its delay).
        note(job(i) + " was admitting with its id committed (its enqueue never returned): admitted as pending");
        s_.words[i].store(SlotWord::pack(SlotState::pending, SlotWord::gen(w), 0, 0), std::memory_order_relaxed);
        s_.slot(i).ready_us = segment_now_us(s_);
        w = s_.words[i].load(std::memory_order_relaxed);
      } else if (st == SlotState::admitting) {
        note(job(i) + " was stuck admitting (its enqueue never returned): freed");
        free_slot(i, w);
        continue;
      }
      if (st == SlotState::freeing && SlotWord::when(w) == SlotWord::kFailing) {
        // Its fail() took the lease and did not finish: the job goes on.
        note(job(i) + " was stuck in a fail that did not finish: back to pending (attempt " +
             std::to_string(SlotWord::attempt(w)) + " counted)");
        s_.words[i].store(SlotWord::pack(SlotState::pending, SlotWord::gen(w), SlotWord::attempt(w), 0),
                          std::memory_order_relaxed);
        s_.slot(i).ready_us = segment_now_us(s_);
        w = s_.words[i].load(std::memory_order_relaxed);
      } else if (st == SlotState::freeing) {
        note(job(i) + " was stuck freeing (its complete or drain did not finish): freed");
        free_slot(i, w);
        continue;
      }
      SlotRecord& r = s_.slot(i);
      if (r.lane > s_.lane_mask || !lane_in_use(s_, r.lane)) {
        note(job(i) + " named lane #" + std::to_string(r.lane) + ", which does not exist: moved to the default lane");
        r.lane = s_.h->default_lane;
      }
      if (r.payload_len > s_.payload_bytes) {
        note(job(i) + " had a payload length of " + std::to_string(r.payload_len) + ": cut to " +
             std::to_string(s_.payload_bytes));
        r.payload_len = s_.payload_bytes;
      }
      if ((st == SlotState::leased || st == SlotState::scheduled) && SlotWord::when(w) == 0) {
        note(job(i) + std::string(" was ") + state_name(st) + " without a deadline: due now");
        w = SlotWord::pack(st, SlotWord::gen(w), SlotWord::attempt(w), now);
        s_.words[i].store(w, std::memory_order_relaxed);
      }
      // One slot per id: keep the one the id index leads to, else the lower slot.
      const std::uint64_t sf = r.snowflake.load(std::memory_order_relaxed);
      auto [it, fresh] = ids.emplace(sf, i);
      if (fresh) continue;
      const std::uint32_t other = it->second;
      const bool keep_this = index_find(s_, sf) == i;
      const std::uint32_t freed = keep_this ? other : i, kept = keep_this ? i : other;
      note(job(freed) + " had the same id as slot " + std::to_string(kept) + ": freed slot " + std::to_string(freed) +
           " (a " + state_name(SlotWord::state(s_.words[freed].load(std::memory_order_relaxed))) + " copy), kept slot " +
           std::to_string(kept));
      free_slot(freed, s_.words[freed].load(std::memory_order_relaxed));
      it->second = kept;
    }
  }

  // Every live slot gets one committed entry in one of its two buckets;
  // nothing else stays (stale, tentative or misplaced entries).
  void rebuild_index() {
    std::uint64_t before = 0, after = 0;
    for (std::uint64_t b = 0; b <= s_.index_mask; ++b)
      for (auto& e : s_.index[b].e) {
        before += e.load(std::memory_order_relaxed) != 0;
        e.store(0, std::memory_order_relaxed);
      }
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      if (!live_state(SlotWord::state(s_.words[i].load(std::memory_order_relaxed)))) continue;
      const IndexProbe p = index_probe(s_, s_.slot(i).snowflake.load(std::memory_order_relaxed));
      auto count = [&](std::uint64_t b) {
        int n = 0;
        for (auto& e : s_.index[b].e) n += e.load(std::memory_order_relaxed) != 0;
        return n;
      };
      const std::uint64_t first = count(p.b1) <= count(p.b2) ? p.b1 : p.b2;
      bool placed = false;
      for (std::uint64_t b : {first, first == p.b1 ? p.b2 : p.b1}) {
        for (auto& e : s_.index[b].e) {
          if (e.load(std::memory_order_relaxed) != 0) continue;
          e.store(IndexEntry::pack(p.fp, i, true), std::memory_order_relaxed);
          placed = true;
          break;
        }
        if (placed) break;
      }
      if (placed) ++after;
      else note(job(i) + " could not be indexed: both of its index buckets are full");
    }
    note("id index rebuilt from the live slots: " + std::to_string(after) + " entries (were " + std::to_string(before) + ")");
  }

  // Every free slot, once, lowest first.
  void rebuild_free_list() {
    std::uint32_t head = 0, prev = kNoSlot;
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      if (SlotWord::state(s_.words[i].load(std::memory_order_relaxed)) != SlotState::free) continue;
      if (prev == kNoSlot) head = i + 1;
      else s_.slot(prev).next.store(i + 1, std::memory_order_relaxed);
      prev = i;
      ++n;
    }
    if (prev != kNoSlot) s_.slot(prev).next.store(0, std::memory_order_relaxed);
    // A new tag: a pop that read the old head cannot succeed against this one.
    const std::uint64_t tag = (s_.h->free_head.load(std::memory_order_relaxed) >> 32) + 1;
    s_.h->free_head.store((tag << 32) | head, std::memory_order_relaxed);
    note("free list rebuilt: " + std::to_string(n) + " free slots");
  }

  // Lane words (pending, active; busy and ringed cleared, limit and pause
  // kept) and lane structures: each lane's pending slots re-linked as one
  // ascending run, in id order.
  void rebuild_lanes() {
    std::vector<std::vector<std::uint32_t>> pending(s_.lane_mask + 1);
    std::vector<std::uint64_t> active(s_.lane_mask + 1, 0);
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const SlotState st = SlotWord::state(s_.words[i].load(std::memory_order_relaxed));
      if (st == SlotState::pending) pending[s_.slot(i).lane].push_back(i);
      if (st == SlotState::leased) ++active[s_.slot(i).lane];
    }
    std::uint32_t used = 0, lanes = 0;
    std::uint64_t jobs = 0;
    for (std::uint32_t li = 0; li <= s_.lane_mask; ++li) {
      LaneRecord& l = s_.lanes[li];
      if (l.key_a.load(std::memory_order_relaxed) != 0) ++used;
      if (!lane_in_use(s_, li)) continue;
      ++lanes;
      auto& mine = pending[li];
      std::sort(mine.begin(), mine.end(), [this](std::uint32_t a, std::uint32_t b) {
        return s_.slot(a).snowflake.load(std::memory_order_relaxed) < s_.slot(b).snowflake.load(std::memory_order_relaxed);
      });
      for (std::size_t k = 0; k < mine.size(); ++k)
        s_.slot(mine[k]).next.store(k + 1 < mine.size() ? mine[k + 1] + 1 : 0, std::memory_order_relaxed);
      l.intake.store(0, std::memory_order_relaxed);
      l.run_head = mine.empty() ? 0 : mine.front() + 1;
      l.run_tail = mine.empty() ? 0 : mine.back() + 1;
      l.heap_root = 0;
      jobs += mine.size();

      const std::uint64_t old = l.word.load(std::memory_order_relaxed);
      std::uint64_t w = old & (LaneWord::kPaused | (LaneWord::kLimitMask << LaneWord::kLimitShift));
      w = LaneWord::with_active(LaneWord::with_pending(w, mine.size()), active[li]);
      if (LaneWord::pending(old) != mine.size() || LaneWord::active(old) != active[li] || (old & LaneWord::kBusy))
        note(lane(li) + ": pending " + std::to_string(LaneWord::pending(old)) + " -> " + std::to_string(mine.size()) +
             ", active " + std::to_string(LaneWord::active(old)) + " -> " + std::to_string(active[li]) +
             ((old & LaneWord::kBusy) ? ", busy bit cleared" : ""));
      l.word.store(w, std::memory_order_relaxed);  // ringed: set by rebuild_ring
    }
    const std::uint32_t counted = s_.h->lanes_used.load(std::memory_order_relaxed);
    if (counted != used) {
      note("lanes taken: the header counted " + std::to_string(counted) + ", the table holds " + std::to_string(used));
      s_.h->lanes_used.store(used, std::memory_order_relaxed);
    }
    note("lane words and structures rebuilt: " + std::to_string(lanes) + " lanes, " + std::to_string(jobs) +
         " pending jobs linked in id order");
  }

  // An empty ring and hold slot, then one token per serviceable lane.
  void rebuild_ring() {
    const std::uint64_t cells = s_.ring_mask + 1;
    const std::uint64_t head = s_.h->ring_head.load(std::memory_order_relaxed);
    // Cell c is next usable at the first position >= head that maps to it.
    for (std::uint64_t c = 0; c < cells; ++c)
      s_.ring[c].store(RingCell::pack(head + ((c - head) & s_.ring_mask), 0), std::memory_order_relaxed);
    s_.h->ring_tail.store(head, std::memory_order_relaxed);
    s_.h->hold.store(0, std::memory_order_relaxed);
    std::uint64_t tokens = 0;
    for (std::uint32_t li = 0; li <= s_.lane_mask; ++li) {
      if (!lane_in_use(s_, li)) continue;
      LaneRecord& l = s_.lanes[li];
      const std::uint64_t w = l.word.load(std::memory_order_relaxed);
      if (!LaneWord::serviceable(w)) continue;
      l.word.store(w | LaneWord::kRinged, std::memory_order_relaxed);
      ring_push(s_, li);
      ++tokens;
    }
    note("ring rebuilt: " + std::to_string(tokens) + (tokens == 1 ? " token" : " tokens") +
         " (one per serviceable lane), hold slot emptied");
  }

  void rebuild_next_due() {
    std::uint64_t earliest = kNever;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const std::uint64_t w = s_.words[i].load(std::memory_order_relaxed);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::leased || st == SlotState::scheduled) earliest = std::min(earliest, SlotWord::when(w));
    }
    s_.h->next_due.store(earliest, std::memory_order_relaxed);
  }

  // Nothing of this went through the transition log: a mirror must
  // resynchronise everything.
  void mark_mirror() {
    if (!s_.log) return;
    std::uint32_t ok = std::uint32_t(MirrorState::ok);
    if (s_.h->mirror.state.compare_exchange_strong(ok, std::uint32_t(MirrorState::resync), std::memory_order_acq_rel))
      note("mirror: asked to resynchronise (repair changes are not in its log)");
  }

  Segment& s_;
  FsckReport& report_;
};

}  // namespace

namespace detail {
void rebuild_segment(Segment& s, FsckReport& report) { Repairer(s, report).run(); }
}  // namespace detail

Result<FsckReport> Queue::repair(bool force) {
  Segment& s = *seg_;
  const std::vector<int> others = other_live_processes(s);
  if (!others.empty() && !force) {
    std::string pids;
    for (std::size_t i = 0; i < others.size() && i < 8; ++i) pids += (i ? ", " : "") + std::to_string(others[i]);
    if (others.size() > 8) pids += ", ...";
    const bool one = others.size() == 1;
    return Error{Errc::busy, 0,
                 "refusing to repair segment '" + s.name + "': " + std::to_string(others.size()) + " other live " +
                     (one ? "process is" : "processes are") + " attached (pid " + pids + "); stop " +
                     (one ? "it" : "them") + " first, or force it if " + (one ? "it is" : "they are") + " idle"};
  }
  // Behind the gate (gate.hpp): operations of processes still attached wait
  // for it, and it waits for the ones in flight, so a forced repair does not
  // race them. A live process that stays inside an operation (stopped)
  // makes it give up rather than wait for ever.
  FsckReport report;
  for (int tries = 0;; ++tries) {
    const GateRepair r = gated_repair(s, 2000, &report);
    if (r == GateRepair::repaired) return report;
    if (r == GateRepair::abandoned || tries >= 100)
      return Error{Errc::busy, 0,
                   "could not repair segment '" + s.name +
                       "': a live process stayed inside an operation for 2 s (is one stopped?)"};
  }
}

}  // namespace fairlane
