// repair: every derived structure rebuilt from the job slots (the truth).
//
// fsck (src/fsck.cpp) compares lane words and orders, the ring, the lane
// directory and the id index with what the slot words say. repair makes them
// say it: it first settles the slots themselves (a step a dead or stopped
// process left half done, an impossible state, a group that cannot be named,
// two slots with one id), then rewrites each derived structure from
// scratch.
//
// It is the offline tool, and the queue never needs it to keep working:
// every half-done step is finished or undone online by survivors (the
// sweep). It runs alone: it refuses while another live process is attached,
// unless forced by someone who knows those processes are idle (their next
// operation then sees the rebuilt tables). Plain stores inside it are
// published by the fence and the wake-up at the end.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "atomic128.hpp"
#include "clock.hpp"
#include "core.hpp"
#include "failpoint.hpp"
#include "futex.hpp"
#include "retry_codec.hpp"

namespace fairlane {
using namespace detail;

namespace {

constexpr std::size_t kMaxNotes = 1000;

// Pids of the live processes attached to the segment other than this one.
std::vector<int> other_live_processes(const Segment& s) {
  std::vector<int> out;
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    if (&s.procs[i] == s.me) continue;
    const std::uint64_t owner = s.procs[i].owner.load(std::memory_order_acquire);
    if (!(owner & kOwnerAttached)) continue;
    const int pid = int(owner & 0x7FFFFFFF);
    // Another handle of this process: its threads are the caller's business.
    // Not by pid: pid 1 of another container is pid 1 of ours.
    if (held_by_this_process(s, i)) continue;
    const std::uint64_t start = (owner & kOwnerStamped) ? s.procs[i].start_time.load(std::memory_order_relaxed) : 0;
    if (owner_alive(s, i, owner, start)) out.push_back(pid);
  }
  return out;
}

struct GroupLess {
  bool operator()(const GroupKey& a, const GroupKey& b) const noexcept {
    return a.kind != b.kind ? a.kind < b.kind : a.sf < b.sf;
  }
};

class Repairer {
 public:
  Repairer(Segment& s, FsckReport& report) : s_(s), report_(report) {}

  void run() {
    keep_groups();
    settle_slots();
    clear_derived();
    rebuild_lanes();
    retire_stats();
    rebuild_index();
    rebuild_sweep();
    mark_mirror();
    if (unnoted_) report_.repairs.push_back(std::to_string(unnoted_) + " more changes not listed");
    // Publish, then wake every parked consumer: what it waited for may be
    // serviceable now; and every parked producer: slots may be free now
    // (husks and unreadable slots freed, every hint reset). Producers were
    // left asleep until 2026-12-06 (found in review).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    s_.h->wake_seq.fetch_add(1, std::memory_order_release);
    futex_wake(&s_.h->wake_seq, INT_MAX);
    s_.h->room_seq.fetch_add(1, std::memory_order_release);
    futex_wake(&s_.h->room_seq, INT_MAX);
    // And those parked for a lane: lanes may be free now too (the lane
    // wait came later and was left out at first: found reading the change).
    s_.h->lane_seq.fetch_add(1, std::memory_order_release);
    futex_wake(&s_.h->lane_seq, INT_MAX);
  }

 private:
  void note(std::string line) {
    if (report_.repairs.size() < kMaxNotes) report_.repairs.push_back(std::move(line));
    else ++unnoted_;
  }
  std::string job(std::uint32_t slot) const {
    const std::uint64_t sf = s_.slot(slot).sf.load(std::memory_order_relaxed) & kMaxSnowflake;
    return "job " + BrandedId::make(std::string_view(s_.kind, 3), sf).string() + " (slot " + std::to_string(slot) + ")";
  }
  void set_slot(std::uint32_t i, const Word128& w) { store128_init(s_.words[i], w); }
  void free_slot(std::uint32_t i) { set_slot(i, SlotWord::make(SlotState::free, 0, 0, SlotWord::ctr(slot_load(s_, i)) + 1, 0)); }

  // Settings and statistics of live groups, by group: they outlive the
  // rebuild, which may give a group another lane record. The statistics
  // (served, the wait histogram) leave their record here and go to the
  // group's new lane (make_lane), or to the queue-wide waits if the group
  // gets none (retire_stats).
  void keep_groups() {
    for (std::uint32_t l = 1; l < s_.lane_count; ++l) {
      const Word128 w = lane_load(s_, l);
      // A live lane's, or one whose state a scribble made impossible (its
      // settings word may be intact).
      if (LaneWord::state(w) == LaneState::free || LaneWord::state(w) == LaneState::creating) continue;
      LaneRecord& r = s_.lanes[l];
      const std::uint64_t st = r.settings.load(std::memory_order_relaxed);
      const std::uint32_t kind = std::uint32_t(r.key_kind.load(std::memory_order_relaxed) & 0x7FFF);
      if (kind >= kKindCodes || r.key_sf.load(std::memory_order_relaxed) > kMaxSnowflake) continue;
      const GroupKey g{kind, r.key_sf.load(std::memory_order_relaxed)};
      if (!Settings::defaults(st)) settings_[g] = st;
      GroupStats& kept = stats_[g];
      kept.served += r.served.load(std::memory_order_relaxed);
      for (std::uint32_t b = 0; b < kWaitBuckets; ++b) {
        kept.waits[b] += s_.waits[l].b[b].load(std::memory_order_relaxed);
        s_.waits[l].b[b].store(0, std::memory_order_relaxed);
      }
    }
    default_settings_ = s_.lanes[kDefaultLane].settings.load(std::memory_order_relaxed);
  }

  // The waits of groups that got no lane (no job and no setting left) go to
  // the queue-wide count, as a lane given back leaves them.
  void retire_stats() {
    for (const auto& [g, kept] : stats_)
      if (!kept.placed)
        for (std::uint32_t b = 0; b < kWaitBuckets; ++b)
          if (kept.waits[b]) s_.h->retired_waits.b[b].fetch_add(kept.waits[b], std::memory_order_relaxed);
  }

  // The slot words themselves: each ends free, pending, leased, scheduled or
  // dead, with sane fields, and no id is held twice.
  void settle_slots() {
    const std::uint64_t now = segment_now_ms(s_);
    // Each id's slot so far, and whether its admission was decided (it was
    // not admitting).
    std::unordered_map<std::uint64_t, std::pair<std::uint32_t, bool>> ids;
    ids.reserve(s_.jobs);
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const Word128 w = slot_load(s_, i);
      const SlotState st = SlotWord::state(w);
      SlotRecord& r = s_.slot(i);
      if (st == SlotState::free) continue;
      if (std::size_t(st) >= kSlotStates) {
        note("slot " + std::to_string(i) + " had the invalid state " + std::to_string(int(st)) +
             ": freed (nothing in it can be trusted)");
        free_slot(i);
        continue;
      }
      if (st == SlotState::aborted) {
        note(job(i) + " was a husk (aborted): freed");
        free_slot(i);
        continue;
      }
      if (st == SlotState::admitting && !admission_published(r, w)) {
        // Taken by an enqueue that died (or stopped) before writing its job:
        // what the record holds is the slot's last job's (or nothing), which
        // must not come back. Nothing links or indexes it (its fields are
        // published before either), as the sweep finds (settle_orphan).
        note("slot " + std::to_string(i) + " was taken by an enqueue that never wrote its job: freed");
        free_slot(i);
        continue;
      }
      // Fields a scribble may have pushed out of range.
      if (r.payload_len.load() > s_.payload_bytes) {
        note(job(i) + ": payload length " + std::to_string(r.payload_len.load()) + " clamped to " +
             std::to_string(s_.payload_bytes));
        r.payload_len.store(s_.payload_bytes);
      }
      if (r.error_len.load() > kErrorBytes) r.error_len.store(kErrorBytes);
      if (r.sf.load() > kMaxSnowflake) {
        note("slot " + std::to_string(i) + " holds an id past 63 bits: freed (its id cannot be named)");
        free_slot(i);
        continue;
      }
      const std::uint64_t gk = r.group_kind.load();
      if (gk != kNoGroup && (gk >= kKindCodes || r.group_sf.load() > kMaxSnowflake)) {
        note(job(i) + ": its group cannot be named; it goes to the default lane");
        r.group_kind.store(kNoGroup);
      }
      Word128 to = w;
      switch (st) {
        case SlotState::admitting: {
          // Linked or indexed, a rival may have been told `duplicate`
          // because of it: the job must not vanish. It is admitted as its
          // target says (pending ones come back pending).
          const SlotState target = SlotWord::state(Word128{r.fail_to.load(), 0});
          const SlotState as = target == SlotState::scheduled || target == SlotState::dead ? target : SlotState::pending;
          const std::uint64_t when = as == SlotState::pending ? 0 : SlotWord::when(Word128{r.fail_to.load(), 0});
          to = SlotWord::make(as, SlotWord::attempt(Word128{r.fail_to.load(), 0}), (r.flags.load() & kSlotMoved) ? 0 : when,
                              SlotWord::ctr(w), 0);
          r.flags.store(std::uint16_t(r.flags.load() & ~kSlotMoved));
          note(job(i) + " was being admitted: admitted " + std::string(as == SlotState::pending ? "pending" : "as its target"));
          break;
        }
        case SlotState::returning:
          to = SlotWord::make(SlotState::pending, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0);
          note(job(i) + " was on its way back to its lane: pending");
          break;
        case SlotState::leased: {
          const std::uint32_t h1 = Holder::index1(SlotWord::holder(w));
          if (h1 == 0 || h1 > s_.proc_count) {
            // Its holder may still hold the token, which stays good: the
            // lease keeps its deadline and now names no process (a holder
            // that cannot be judged dead is waited for until the deadline).
            const std::uint64_t until = std::min<std::uint64_t>(SlotWord::when(w), now + (1ULL << 40));
            to = SlotWord::make(SlotState::leased, SlotWord::attempt(w), until, SlotWord::ctr(w), 0);
            note(job(i) + " was leased by a holder that cannot exist: leased by no one until its deadline");
          } else if (SlotWord::when(w) > now + (1ULL << 40)) {
            to = SlotWord::make(SlotState::leased, SlotWord::attempt(w), now, SlotWord::ctr(w), SlotWord::holder(w));
          }
          break;
        }
        default:
          // Pending, scheduled and dead jobs have no holder; pending ones no time.
          if (SlotWord::holder(w) != 0 || (st == SlotState::pending && SlotWord::when(w) != 0))
            to = SlotWord::make(st, SlotWord::attempt(w), st == SlotState::pending ? 0 : SlotWord::when(w), SlotWord::ctr(w), 0);
          break;
      }
      // One id, one job: a decided admission's keeps it over an undecided
      // one's (whose enqueue never returned: an enqueue of the decided one
      // was told `enqueued`, and a lease on it holds), else the lowest slot.
      const std::uint64_t sf = r.sf.load();
      const bool decided = st != SlotState::admitting;
      auto [it, fresh] = ids.try_emplace(sf, i, decided);
      if (!fresh) {
        const std::uint32_t kept = it->second.first;
        if (it->second.second || !decided) {
          note(job(i) + " held the same id as slot " + std::to_string(kept) + ": freed");
          free_slot(i);
          continue;
        }
        note(job(kept) + " was an undecided admission of the id of slot " + std::to_string(i) + ": freed");
        free_slot(kept);
        it->second = {i, decided};
      }
      if (!(to == w)) set_slot(i, to);
    }
  }

  void clear_derived() {
    // Every free hint, block and group, "look" (the slots were settled above; a hint is only
    // ever a way to pass a block by).
    for (std::uint32_t b = 0; b < hint_blocks(s_.jobs) + hint_groups(s_.jobs); ++b) s_.hints[b].store(0);
    // Lane records: all free, the default lane live; the directory, the
    // ring and the id index empty; no intents (every half-done step was
    // settled above).
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      LaneRecord& r = s_.lanes[l];
      // A new incarnation for every group lane (stale views of the old ones
      // fail on it); the default lane keeps its own.
      const std::uint64_t inc =
          l == kDefaultLane ? (r.key_kind.load() >> 16) : ((r.key_kind.load() >> 16) + 1) & ((1ULL << 48) - 1);
      store128_init(r.word, Word128{});
      r.settings.store(Settings::make(0, false, 1, r.settings.load()));
      if (l != kDefaultLane) {
        r.key_sf.store(0);
        r.key_kind.store(inc << 16);
      }
      r.turn.store(0);
      r.husks.store(HuskCount::make(inc));
      r.idle_seen.store(0);
      r.creator.store(0);
      for (auto& head : r.strays) head.store(strays_head(inc, false, 0));
    }
    {
      LaneRecord& d = s_.lanes[kDefaultLane];
      store128_init(d.word, LaneWord::with_state(Word128{}, LaneState::live));
      d.settings.store(Settings::make(Settings::limit(default_settings_), Settings::paused(default_settings_),
                                      Settings::weight(default_settings_), d.settings.load()));
    }
    for (std::uint64_t b = 0; b <= s_.dir_mask; ++b)
      for (auto& e : s_.dir[b].e) store128_init(e, Word128{});
    for (std::uint64_t i = 0; i <= s_.ring_mask; ++i) s_.ring[i].store(RingCell::make(i - (s_.ring_mask + 1), 0));
    s_.h->ring_head.store(0);
    s_.h->ring_tail.store(0);
    for (std::uint64_t b = 0; b < s_.index_buckets; ++b) {
      for (auto& e : s_.index[b].e) e.store(0);
      s_.index[b].overflow.store(0);
    }
    for (std::uint32_t i = 0; i < s_.thread_count; ++i) {
      ThreadRecord& t = s_.threads[i];
      note_dropped(t.intent.load(), ThreadOwner::proc1(t.owner.load()));
      t.intent.store(0);
      t.intent_pred.store(0);
      const std::uint64_t owner = t.owner.load();
      const std::uint32_t p1 = ThreadOwner::proc1(owner);
      if (owner != 0 && (p1 == 0 || p1 > s_.proc_count || (owner & ~ThreadOwner::kBits) != 0)) {
        note("thread record " + std::to_string(i) + " named process record " + std::to_string(p1) + ": freed");
        t.owner.store(0);
      }
      if (t.owner.load() != 0 && s_.h->threads_used.load() <= i) {
        note("thread record " + std::to_string(i) + " in use above threads_used: the mark raised");
        raise_threads_used(*s_.h, i + 1);
      }
    }
    for (std::uint32_t i = 0; i < s_.proc_count; ++i) {
      note_dropped(s_.procs[i].intent.load(), i + 1);
      s_.procs[i].intent.store(0);
      s_.procs[i].intent_tid.store(0);
    }
  }

  // A step in flight (an intent) dropped: its job is what its slot says,
  // settled above (and placed by the rebuild).
  void note_dropped(std::uint64_t intent, std::uint32_t proc1) {
    if (IntentWord::kind(intent) == Intent::none) return;
    const std::uint32_t slot1 = IntentWord::slot1(intent);
    std::string who = "a process";
    if (proc1 >= 1 && proc1 <= s_.proc_count)
      who = "pid " + std::to_string(s_.procs[proc1 - 1].owner.load() & 0x7FFFFFFF);
    if (slot1 == 0 || slot1 > s_.jobs) {
      note("a step in flight of " + who + " naming no slot: dropped");
      return;
    }
    static const char* const kNames[] = {"gone (free)", "admitting", "pending", "leased",
                                         "scheduled",   "dead",      "returning", "a husk"};
    const SlotState st = SlotWord::state(slot_load(s_, slot1 - 1));
    note("the step in flight of " + who + " on " + (st == SlotState::free ? "slot " + std::to_string(slot1 - 1) : job(slot1 - 1)) +
         " dropped: its job is " + (std::size_t(st) < kSlotStates ? kNames[std::size_t(st)] : "invalid"));
  }

  std::uint32_t make_lane(const GroupKey& g, std::uint32_t& next_lane) {
    if (next_lane >= s_.lane_count) return kNoLane;
    const std::uint32_t l = next_lane++;
    LaneRecord& r = s_.lanes[l];
    const std::uint64_t inc = r.key_kind.load() >> 16;
    r.key_sf.store(g.sf);
    r.key_kind.store(g.kind | (inc << 16));
    store128_init(r.word, LaneWord::with_state(Word128{}, LaneState::live));
    // The record's past life's waits go to the queue-wide count; the
    // group's own statistics come with it.
    retire_waits(s_, l);
    auto kept = stats_.find(g);
    r.served.store(kept == stats_.end() ? 0 : kept->second.served);
    for (std::uint32_t b = 0; b < kWaitBuckets; ++b)
      s_.waits[l].b[b].store(kept == stats_.end() ? 0 : kept->second.waits[b], std::memory_order_relaxed);
    if (kept != stats_.end()) kept->second.placed = true;
    // Its directory entry, in the first free way of its two buckets.
    const std::uint64_t h = group_hash(g.kind, g.sf, s_.seed);
    std::uint64_t b1 = h & s_.dir_mask, b2 = mix64(h) & s_.dir_mask;
    if (b2 == b1) b2 = b1 ^ 1;
    const Word128 e = DirEntry::make(g.sf, g.kind, DirState::live, l + 1, inc & ((1ULL << 25) - 1));
    bool placed = false;
    for (std::uint64_t b : {b1, b2})
      for (auto& way : s_.dir[b].e)
        if (!placed && DirEntry::state(load128(way)) == DirState::free) {
          store128_init(way, e);
          placed = true;
        }
    if (!placed) note("no directory room for lane #" + std::to_string(l) + " (its group will get a new lane)");
    return l;
  }

  void rebuild_lanes() {
    // Which lane each job goes to: its group's (made on first use).
    std::map<GroupKey, std::uint32_t, GroupLess> lane_of;
    std::uint32_t next_lane = 1;
    std::vector<std::vector<std::pair<std::uint64_t, std::uint32_t>>> runs(s_.lane_count);
    std::vector<std::uint64_t> active(s_.lane_count, 0);
    auto lane_for = [&](std::uint32_t slot) -> std::uint32_t {
      GroupKey g;
      if (!slot_group(s_, slot, g)) return kDefaultLane;
      auto it = lane_of.find(g);
      if (it != lane_of.end()) return it->second;
      const std::uint32_t l = make_lane(g, next_lane);
      if (l != kNoLane) lane_of.emplace(g, l);
      return l;
    };
    for (const auto& [g, st] : settings_) {
      const std::uint32_t l = make_lane(g, next_lane);
      if (l == kNoLane) break;
      lane_of.emplace(g, l);
      s_.lanes[l].settings.store(Settings::make(Settings::limit(st), Settings::paused(st), Settings::weight(st),
                                                s_.lanes[l].settings.load()));
    }
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const Word128 w = slot_load(s_, i);
      const SlotState st = SlotWord::state(w);
      if (st != SlotState::pending && st != SlotState::leased) continue;
      const std::uint32_t l = lane_for(i);
      if (l == kNoLane) {
        // More groups than lane records: it waits, due, for a lane to free.
        set_slot(i, SlotWord::make(SlotState::scheduled, SlotWord::attempt(w), 0, SlotWord::ctr(w), 0));
        note(job(i) + ": no lane record left for its group; scheduled, due now (adopted when one frees)");
        continue;
      }
      s_.slot(i).lane.store(l);
      if (st == SlotState::leased) {
        ++active[l];
      } else {
        runs[l].emplace_back(s_.slot(i).sf.load(), i);
      }
    }
    std::uint64_t pos = 0;
    std::uint64_t live = 0;  // groups live (the default lane is not one), as inspect counts them
    for (std::uint32_t l = 0; l < s_.lane_count; ++l) {
      if (LaneWord::state(lane_load(s_, l)) != LaneState::live) continue;
      if (l != kDefaultLane) ++live;
      auto& run = runs[l];
      std::sort(run.begin(), run.end());
      Word128 w = LaneWord::with_state(Word128{}, LaneState::live);
      for (std::size_t k = 0; k < run.size(); ++k) {
        SlotRecord& r = s_.slot(run[k].second);
        const std::uint64_t tag = node_tag(SlotWord::ctr(slot_load(s_, run[k].second)));
        const std::uint32_t next1 = k + 1 < run.size() ? run[k + 1].second + 1 : 0;
        r.next.store(Link::make(next1, 0, tag));
        r.level.store(0);
        r.run_seq.store(k + 1);
      }
      if (!run.empty()) {
        const std::uint32_t h1 = run.front().second + 1;
        w = LaneWord::with_head(w, h1, node_tag(SlotWord::ctr(slot_load(s_, h1 - 1))) & 0xFFF);
        w = LaneWord::with_tail(w, run.back().second + 1);
      }
      w = LaneWord::with_active(w, std::min<std::uint64_t>(active[l], LaneWord::kActiveMax));
      if (lane_serviceable(w, s_.lanes[l].settings.load())) {
        s_.ring[pos & s_.ring_mask].store(RingCell::make(pos, l + 1));
        w = LaneWord::with_tgen(LaneWord::with_ringed(w, true), std::uint32_t(pos & LaneWord::kTgenMask));
        ++pos;
      }
      store128_init(s_.lanes[l].word, w);
    }
    s_.h->ring_tail.store(pos);
    note("lanes, ring and directory rebuilt: " + std::to_string(live) + (live == 1 ? " group lane live, " : " group lanes live, ") +
         std::to_string(pos) + " in the ring");
  }

  void rebuild_index() {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      if (!committed_state(SlotWord::state(slot_load(s_, i)))) continue;
      const std::uint64_t sf = s_.slot(i).sf.load();
      const IndexProbe p = index_probe(s_, sf);
      const std::uint64_t e = IndexEntry::make(p.fp, i + 1, admit_tag(s_, i));
      bool placed = false;
      for (unsigned k = 0; k < 2 * kIndexWays && !placed; ++k) {
        if (k == kIndexWays) s_.index[p.b1].overflow.store(1);
        std::atomic<std::uint64_t>& way = index_way(s_, p, k);
        if (way.load() == 0) {
          way.store(e);
          placed = true;
        }
      }
      if (!placed) note(job(i) + ": no room in its id index buckets (found by claims, not by id)");
      ++n;
    }
    note("id index rebuilt: " + std::to_string(n) + " jobs");
  }

  void rebuild_sweep() {
    std::uint64_t earliest = kNever;
    for (std::uint32_t i = 0; i < s_.jobs; ++i) {
      const Word128 w = slot_load(s_, i);
      const SlotState st = SlotWord::state(w);
      if (st == SlotState::leased || st == SlotState::scheduled) earliest = std::min(earliest, SlotWord::when(w));
    }
    s_.h->sweep.next_due.store(earliest);
    s_.h->sweep.cursor.store(0);
  }

  // Nothing of this went through the transition log: a mirror must
  // resynchronise everything.
  void mark_mirror() {
    if (!s_.log) return;
    std::uint32_t ok = std::uint32_t(MirrorState::ok);
    if (s_.h->mirror.state.compare_exchange_strong(ok, std::uint32_t(MirrorState::resync), std::memory_order_acq_rel))
      note("mirror: asked to resynchronise (repair changes are not in its log)");
  }

  struct GroupStats {
    std::uint64_t served = 0;
    std::uint64_t waits[kWaitBuckets] = {};
    bool placed = false;  // given to the group's new lane
  };

  Segment& s_;
  FsckReport& report_;
  std::uint64_t unnoted_ = 0;  // notes past kMaxNotes
  std::map<GroupKey, std::uint64_t, GroupLess> settings_;
  std::map<GroupKey, GroupStats, GroupLess> stats_;
  std::uint64_t default_settings_ = 0;
};

}  // namespace

namespace detail {
void rebuild_segment(Segment& s, FsckReport& report) { Repairer(s, report).run(); }
}  // namespace detail

Result<FsckReport> Queue::repair(bool force) {
  Segment& s = *seg_;
  if (!writer_cold(s)) {
    if (!s.me_now()) return Error{Errc::invalid_argument, 0, "segment '" + s.name + "' is open as an observer: repair needs a member"};
    return Error{Errc::invalid_argument, 0,
                 "segment '" + s.name + "': this handle is a copy in a child forked without exec that found no "
                 "process record free: repair needs a member (open the segment in the child, or try again once a "
                 "process record is free)"};
  }
  const std::vector<int> others = other_live_processes(s);
  if (!others.empty() && !force) {
    std::string pids;
    for (std::size_t i = 0; i < others.size() && i < 8; ++i) {
      if (i) pids += ", ";
      pids += std::to_string(others[i]);
    }
    if (others.size() > 8) pids += ", ...";
    const bool one = others.size() == 1;
    return Error{Errc::busy, 0,
                 "refusing to repair segment '" + s.name + "': " + std::to_string(others.size()) + " other live " +
                     (one ? "process is" : "processes are") + " attached (pid " + pids + "); stop " +
                     (one ? "it" : "them") + " first, or force it if " + (one ? "it is" : "they are") + " idle"};
  }
  FAIRLANE_FAILPOINT("repair.looked");
  FsckReport report = check_segment(s);
  // Nothing found, nothing to rebuild: a clean segment is left as it is
  // (the rebuild would give its groups new lane records and make a mirror
  // resynchronise for nothing), so a second repair changes nothing.
  if (report.clean()) return report;
  rebuild_segment(s, report);
  // Nothing keeps a process from attaching once the look above is made: one
  // that did while the tables were rewritten may have worked on them half
  // done. Said, not undone (what it did is in the slots; fsck tells).
  if (!force) {
    const std::vector<int> late = other_live_processes(s);
    for (std::size_t i = 0; i < late.size() && i < 8; ++i)
      report.repairs.push_back("pid " + std::to_string(late[i]) +
                               " attached while the repair ran: run fsck again once it is idle");
  }
  return report;
}

}  // namespace fairlane
