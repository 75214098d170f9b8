// Damage done to a segment behind the library's back, one kind at a time:
// what a stray write or a bug in another process would leave. fsck_test.cpp
// checks that fsck names each kind; repair_test.cpp that repair undoes it.
//
// Every kind is done to the same populated segment (populate()): lanes with
// runs, strays, leases, a husk, settings on three groups, a scheduled and a
// dead job, so that each damage has something real to hit.
#pragma once

#include "queue_fixture.hpp"
#include "raw_segment.hpp"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace fairlane::test {

using detail::DirBucket;
using detail::Holder;
using detail::LaneWord;
using detail::Link;
using detail::RingCell;
using detail::SlotState;
using detail::SlotWord;
using detail::UpLink;
using detail::Word128;

inline const BrandedId kGroupA = BrandedId::make("AAA", 1);  // limit 3
inline const BrandedId kGroupB = BrandedId::make("BBB", 1);  // weight 2
inline const BrandedId kGroupC = BrandedId::make("CCC", 1);  // paused
inline const BrandedId kGroupD = BrandedId::make("DDD", 1);  // only a dead job (no lane needed)
inline const BrandedId kDefaultId = *BrandedId::parse(kDefaultGroup);

// What populate() made, by name.
struct Population {
  BrandedId old;                // lane A, an id older than A's run: in A's strays
  BrandedId a0, a1;             // a0 failed once (A's strays, attempt 1); a1 leased
  std::vector<BrandedId> arun;  // a2..a5: A's run, in order
  BrandedId b0;                 // leased
  std::vector<BrandedId> brun;  // b1..b3: B's run
  BrandedId c0, c1;             // C's run (C is paused)
  BrandedId d0, d1;             // the default lane's run; d1 was moved to B (a husk stays in the default run)
  BrandedId later;              // B, scheduled (5 s)
  BrandedId dead;               // D, dead-lettered
  std::map<BrandedId, Token> leases;   // held by the populating handle (600 s)
  std::map<BrandedId, BrandedId> group_of;  // every job that is pending, leased or scheduled -> its group

  // Jobs the queue must still deliver (pending, scheduled), with the leased ones apart.
  std::set<BrandedId> deliverable() const {
    std::set<BrandedId> out;
    for (const auto& [id, g] : group_of)
      if (!leases.count(id)) out.insert(id);
    return out;
  }
};

inline constexpr std::uint32_t kPopulateLeaseMs = 600'000;
inline constexpr std::uint64_t kLaterMs = 5'000;

// Fills the segment as described above. Only calls that must succeed; any
// failure is a test failure (ADD_FAILURE), and the population is still returned.
inline Population populate(Queue& q) {
  Population p;
  auto enq = [&](const BrandedId& g, const BrandedId& id, EnqueueOptions o = {}) {
    EXPECT_EQ(q.enqueue(g, id, "payload of " + id.string(), o), EnqueueStatus::enqueued) << id.str();
    p.group_of[id] = g;
  };
  auto claim = [&](const BrandedId& want) {
    Lease l;
    EXPECT_TRUE(q.claim(l, kPopulateLeaseMs));
    EXPECT_EQ(l.id, want) << "populate: the ring served another job than planned";
    return l;
  };
  p.old = q.mint();
  // D: a job that dies (dead jobs hold no lane).
  p.dead = q.mint();
  enq(kGroupD, p.dead);
  {
    Lease l = claim(p.dead);
    EXPECT_EQ(q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "hopeless"}), FailStatus::dead);
    p.group_of.erase(p.dead);
  }
  // B first, with one lease.
  p.b0 = q.mint();
  enq(kGroupB, p.b0);
  for (int i = 0; i < 3; ++i) {
    p.brun.push_back(q.mint());
    enq(kGroupB, p.brun.back());
  }
  p.leases[p.b0] = claim(p.b0).token;
  // A: six jobs; B is paused a moment so that the claims go to A.
  p.a0 = q.mint();
  p.a1 = q.mint();
  enq(kGroupA, p.a0);
  enq(kGroupA, p.a1);
  for (int i = 0; i < 4; ++i) {
    p.arun.push_back(q.mint());
    enq(kGroupA, p.arun.back());
  }
  EXPECT_EQ(q.pause(kGroupB), LaneStatus::ok);
  Lease l0 = claim(p.a0);
  p.leases[p.a1] = claim(p.a1).token;
  EXPECT_EQ(q.fail(l0.id, l0.token, FailOptions{.delay_ms = 0, .max_attempts = 5, .error = "once"}), FailStatus::retrying);
  EXPECT_EQ(q.resume(kGroupB), LaneStatus::ok);
  enq(kGroupA, p.old);  // older than A's run tail: the strays
  EXPECT_EQ(q.set_limit(kGroupA, 3), LaneStatus::ok);
  EXPECT_EQ(q.set_weight(kGroupB, 2), LaneStatus::ok);
  // C, paused with two jobs.
  p.c0 = q.mint();
  p.c1 = q.mint();
  enq(kGroupC, p.c0);
  enq(kGroupC, p.c1);
  EXPECT_EQ(q.pause(kGroupC), LaneStatus::ok);
  // The default lane, and a move out of it (a husk stays in its run).
  p.d0 = q.mint();
  p.d1 = q.mint();
  enq(BrandedId{}, p.d0);
  enq(BrandedId{}, p.d1);
  EXPECT_EQ(q.reassign(p.d1, kGroupB), MoveStatus::moved);
  p.group_of[p.d1] = kGroupB;
  p.group_of[p.d0] = kDefaultId;
  // A delayed job.
  p.later = q.mint();
  enq(kGroupB, p.later, EnqueueOptions{.delay_ms = kLaterMs});
  return p;
}

// ---- reading the raw segment ----------------------------------------------------------

inline Word128 lane_word(RawSegment& raw, std::uint32_t l) { return raw.word_value(raw.lane(l).word); }
inline void set_lane_word(RawSegment& raw, std::uint32_t l, const Word128& w) { raw.set_word(raw.lane(l).word, w); }
inline void set_slot_word(RawSegment& raw, std::uint32_t i, const Word128& w) { raw.set_word(raw.slot_word(i), w); }
inline DirBucket& dir_bucket(RawSegment& raw, std::uint64_t b) {
  return reinterpret_cast<DirBucket*>(raw.base() + raw.header().dir_off)[b];
}

inline bool committed(SlotState st) {
  return st == SlotState::pending || st == SlotState::leased || st == SlotState::scheduled || st == SlotState::dead ||
         st == SlotState::returning;
}

// The slot holding job `id` (committed), or ~0U.
inline std::uint32_t slot_of(RawSegment& raw, const BrandedId& id) {
  for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i)
    if (committed(SlotWord::state(raw.slot_word_value(i))) && raw.slot(i).sf.load() == id.snowflake()) return i;
  ADD_FAILURE() << "no slot holds " << id.str();
  return ~0U;
}
// The lane record of a pending or leased job.
inline std::uint32_t lane_of(RawSegment& raw, const BrandedId& id) { return raw.slot(slot_of(raw, id)).lane.load(); }

// A free slot, or ~0U.
inline std::uint32_t free_slot(RawSegment& raw) { return raw.find_slot(SlotState::free); }

// The ring positions from the head on whose cells are written, with the lane each names.
inline std::vector<std::pair<std::uint64_t, std::uint32_t>> ring_cells(RawSegment& raw) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> out;
  const std::uint64_t head = raw.header().ring_head.load();
  for (std::uint64_t p = head; p < head + raw.header().ring_cells; ++p) {
    const std::uint64_t c = raw.ring_cell(p).load();
    if (RingCell::pos(c) != std::uint32_t(p)) break;
    out.emplace_back(p, RingCell::lane1(c));
  }
  return out;
}

// ---- the kinds of damage --------------------------------------------------------------

enum class Damage {
  invalid_state_free,   // a free slot's word gets a state no transition writes
  invalid_state_job,    // the same on a pending job's word (that job is lost)
  unlinked,             // a pending job skipped by its run's links
  active_off,           // a lane's active count one too high
  ringed_no_token,      // a ringed lane whose token no ring cell is
  unringed,             // a serviceable lane whose ringed bit is cleared
  out_of_order,         // a run whose links break the id order
  run_loop,             // a run whose tail links back to its head
  strays_loop,          // a strays node linked to itself
  dir_removed,          // a live lane's directory entry cleared
  index_removed,        // a pending job's id index entries cleared
  duplicate_id,         // two slots holding one id (one of the jobs is lost)
  husk_leaked,          // an aborted slot linked nowhere, with no owner
  strays_flag,          // a lane with strays whose word says none
  lease_lane,           // a lease naming a lane record that is not live
  lane_state,           // a lane word with an invalid state
  slot_record,          // a payload length past the segment's payload size
  slot_holder,          // a lease whose holder is past the process table
  ring_cell,            // a ring cell naming a lane past the table
  thread_owner,         // a thread record naming a process record past the table
  intent,               // a thread intent naming a job (as a stopped claimer leaves it)
  wrong_group,          // a pending job whose group is another lane's (it is served under the wrong settings)
  lease_group,          // the same for a leased job
};

struct DamageKind {
  Damage damage;
  const char* name;
  const char* invariant;              // what fsck must report
  std::vector<const char*> also;      // what else it may report (consequences of the same damage)
};

inline void PrintTo(const DamageKind& k, std::ostream* os) { *os << k.name << " (" << k.invariant << ")"; }

inline const std::vector<DamageKind>& damage_kinds() {
  static const std::vector<DamageKind> kinds = {
      {Damage::invalid_state_free, "invalid_state_free", "slot-state", {}},
      {Damage::invalid_state_job, "invalid_state_job", "slot-state", {"lane-order"}},
      {Damage::unlinked, "unlinked", "job-unlinked", {}},
      {Damage::active_off, "active_off", "lane-active-count", {}},
      {Damage::ringed_no_token, "ringed_no_token", "ring-membership", {}},
      {Damage::unringed, "unringed", "ring-membership", {}},
      {Damage::out_of_order, "out_of_order", "lane-order", {}},
      {Damage::run_loop, "run_loop", "lane-order", {}},
      {Damage::strays_loop, "strays_loop", "lane-order", {"job-unlinked"}},
      {Damage::dir_removed, "dir_removed", "lane-directory", {}},
      {Damage::index_removed, "index_removed", "index-missing", {}},
      {Damage::duplicate_id, "duplicate_id", "index-duplicate", {}},
      {Damage::husk_leaked, "husk_leaked", "slot-leaked", {}},
      {Damage::strays_flag, "strays_flag", "lane-strays-flag", {}},
      {Damage::lease_lane, "lease_lane", "lane-of-lease", {"lane-active-count"}},
      {Damage::lane_state, "lane_state", "lane-word", {"job-unlinked"}},
      {Damage::slot_record, "slot_record", "slot-record", {}},
      {Damage::slot_holder, "slot_holder", "slot-word", {}},
      {Damage::ring_cell, "ring_cell", "ring-cell", {}},
      {Damage::thread_owner, "thread_owner", "process-record", {}},
      {Damage::intent, "intent", "in-flight", {}},
      {Damage::wrong_group, "wrong_group", "lane-order", {}},
      {Damage::lease_group, "lease_group", "lane-of-lease", {}},
  };
  return kinds;
}

// Does the damage. Returns the jobs it destroys (the queue cannot deliver
// them after a repair: their slot could not be trusted, or another job's id
// took theirs). Test failures (a target not found) are reported through gtest.
inline std::set<BrandedId> do_damage(RawSegment& raw, const Population& p, Damage d) {
  auto& h = raw.header();
  switch (d) {
    case Damage::invalid_state_free: {
      const std::uint32_t i = free_slot(raw);
      Word128 w = raw.slot_word_value(i);
      w.lo = (w.lo & ~15ULL) | 9;  // states are 0..7
      set_slot_word(raw, i, w);
      return {};
    }
    case Damage::invalid_state_job: {
      const std::uint32_t i = slot_of(raw, p.c1);
      Word128 w = raw.slot_word_value(i);
      w.lo = (w.lo & ~15ULL) | 12;
      set_slot_word(raw, i, w);
      return {p.c1};
    }
    case Damage::unlinked: {
      // A's run a2 -> a3 -> a4 -> a5: a2 now links to a4.
      const std::uint32_t a2 = slot_of(raw, p.arun[0]), a4 = slot_of(raw, p.arun[2]);
      const std::uint64_t l = raw.slot(a2).next.load();
      EXPECT_EQ(Link::succ(l), slot_of(raw, p.arun[1]) + 1) << "A's run is not as populated";
      raw.slot(a2).next.store(Link::make(a4 + 1, 0, Link::tag(l)));
      return {};
    }
    case Damage::active_off: {
      const std::uint32_t b = lane_of(raw, p.b0);
      const Word128 w = lane_word(raw, b);
      EXPECT_EQ(LaneWord::active(w), 1U);
      set_lane_word(raw, b, LaneWord::with_active(w, LaneWord::active(w) + 1));
      return {};
    }
    case Damage::ringed_no_token: {
      // The default lane is ringed (d0 and the husk); its tgen moves to a
      // position no cell naming it has.
      const Word128 w = lane_word(raw, detail::kDefaultLane);
      EXPECT_TRUE(LaneWord::ringed(w));
      std::set<std::uint32_t> used;
      for (const auto& [pos, lane1] : ring_cells(raw))
        if (lane1 == detail::kDefaultLane + 1) used.insert(std::uint32_t(pos & LaneWord::kTgenMask));
      std::uint32_t t = (LaneWord::tgen(w) + 1) & LaneWord::kTgenMask;
      while (used.count(t)) t = (t + 1) & LaneWord::kTgenMask;
      set_lane_word(raw, detail::kDefaultLane, LaneWord::with_tgen(w, t));
      return {};
    }
    case Damage::unringed: {
      const std::uint32_t b = lane_of(raw, p.b0);
      const Word128 w = lane_word(raw, b);
      EXPECT_TRUE(LaneWord::ringed(w));
      set_lane_word(raw, b, LaneWord::with_ringed(w, false));
      return {};
    }
    case Damage::out_of_order: {
      // a2 -> a3 -> a5 -> a4, tail a4.
      std::uint32_t s[4];
      for (int i = 0; i < 4; ++i) s[i] = slot_of(raw, p.arun[std::size_t(i)]);
      auto relink = [&](std::uint32_t from, std::uint32_t to1) {
        const std::uint64_t l = raw.slot(from).next.load();
        raw.slot(from).next.store(Link::make(to1, 0, Link::tag(l)));
      };
      relink(s[1], s[3] + 1);
      relink(s[3], s[2] + 1);
      relink(s[2], 0);
      const std::uint32_t a = lane_of(raw, p.arun[0]);
      set_lane_word(raw, a, LaneWord::with_tail(lane_word(raw, a), s[2] + 1));
      return {};
    }
    case Damage::run_loop: {
      const std::uint32_t head = slot_of(raw, p.arun[0]), tail = slot_of(raw, p.arun[3]);
      const std::uint64_t l = raw.slot(tail).next.load();
      raw.slot(tail).next.store(Link::make(head + 1, 0, Link::tag(l)));
      return {};
    }
    case Damage::strays_loop: {
      // A's strays: old -> a0. old now links to itself.
      const std::uint32_t o = slot_of(raw, p.old);
      const std::uint64_t l = raw.slot(o).next.load();
      EXPECT_EQ(UpLink::succ(l), slot_of(raw, p.a0) + 1) << "A's strays are not as populated";
      raw.slot(o).next.store(UpLink::make(o + 1, 0, UpLink::owner_tag(l), UpLink::owner_tag(l)));
      return {};
    }
    case Damage::dir_removed: {
      const std::uint32_t b = lane_of(raw, p.b0);
      int cleared = 0;
      for (std::uint64_t k = 0; k < h.dir_buckets; ++k)
        for (auto& e : dir_bucket(raw, k).e)
          if (detail::DirEntry::state(raw.word_value(e)) == detail::DirState::live &&
              detail::DirEntry::lane1(raw.word_value(e)) == b + 1) {
            raw.set_word(e, Word128{});
            ++cleared;
          }
      EXPECT_EQ(cleared, 1);
      return {};
    }
    case Damage::index_removed: {
      const std::uint32_t i = slot_of(raw, p.brun[1]);
      int cleared = 0;
      for (std::uint64_t b = 0; b < h.index_buckets; ++b)
        for (auto& e : raw.bucket(b).e)
          if (e.load() != 0 && detail::IndexEntry::slot1(e.load()) == i + 1) {
            e.store(0);
            ++cleared;
          }
      EXPECT_GE(cleared, 1);
      return {};
    }
    case Damage::duplicate_id: {
      // d0's slot now says it is c0 (another lane): d0's id is gone for good.
      const std::uint32_t c = slot_of(raw, p.c0), d = slot_of(raw, p.d0);
      raw.slot(d).sf.store(raw.slot(c).sf.load());
      raw.slot(d).digits.store(raw.slot(c).digits.load());
      raw.slot(d).digits_tail.store(raw.slot(c).digits_tail.load());
      return {p.d0};
    }
    case Damage::husk_leaked: {
      const std::uint32_t i = free_slot(raw);
      const Word128 w = raw.slot_word_value(i);
      set_slot_word(raw, i, SlotWord::make(SlotState::aborted, 0, 0, SlotWord::ctr(w), 0));
      return {};
    }
    case Damage::strays_flag: {
      const std::uint32_t a = lane_of(raw, p.a0);
      const Word128 w = lane_word(raw, a);
      EXPECT_TRUE(LaneWord::strays(w));
      set_lane_word(raw, a, LaneWord::with_strays(w, false));
      return {};
    }
    case Damage::lease_lane: {
      // b0's lease names the last lane record, which is free.
      const std::uint32_t last = h.lane_capacity - 1;
      EXPECT_EQ(LaneWord::state(lane_word(raw, last)), detail::LaneState::free);
      raw.slot(slot_of(raw, p.b0)).lane.store(last);
      return {};
    }
    case Damage::lane_state: {
      const std::uint32_t c = lane_of(raw, p.c0);
      Word128 w = lane_word(raw, c);
      w.lo |= 3ULL << 57;  // states are 0..2
      set_lane_word(raw, c, w);
      return {};
    }
    case Damage::slot_record:
      raw.slot(slot_of(raw, p.c0)).payload_len.store(h.payload_bytes + 1);
      return {};
    case Damage::slot_holder: {
      const std::uint32_t i = slot_of(raw, p.a1);
      const Word128 w = raw.slot_word_value(i);
      set_slot_word(raw, i, SlotWord::make(SlotState::leased, SlotWord::attempt(w), SlotWord::when(w), SlotWord::ctr(w),
                                           Holder::make(4000, 0)));
      return {};
    }
    case Damage::ring_cell: {
      const auto cells = ring_cells(raw);
      const std::uint64_t end = cells.empty() ? h.ring_head.load() : cells.back().first + 1;
      raw.ring_cell(end).store(RingCell::make(end, h.lane_capacity + 5));
      return {};
    }
    case Damage::wrong_group:
    case Damage::lease_group: {
      // C's c0 (pending, C paused) or A's a1 (leased) now says group B.
      const std::uint32_t i = slot_of(raw, d == Damage::wrong_group ? p.c0 : p.a1);
      const std::string_view k = kGroupB.kind();  // its namespace code: AAA = 0 .. ZZZ = 17575
      raw.slot(i).group_kind.store(std::uint64_t(k[0] - 'A') * 676 + std::uint64_t(k[1] - 'A') * 26 + std::uint64_t(k[2] - 'A'));
      raw.slot(i).group_sf.store(kGroupB.snowflake());
      return {};
    }
    case Damage::thread_owner:
    case Damage::intent: {
      // A thread record nobody uses.
      std::uint32_t t = 0;
      while (t < h.thread_capacity && raw.thread(t).owner.load() != 0) ++t;
      EXPECT_LT(t, h.thread_capacity);
      if (d == Damage::thread_owner) {
        raw.thread(t).owner.store((1ULL << 16) | (h.proc_capacity + 5));
        return {};
      }
      // Owned by the populating process (record 0), taking a2 from A's run.
      const std::uint32_t a2 = slot_of(raw, p.arun[0]);
      raw.thread(t).intent_lane.store(lane_of(raw, p.arun[0]));
      raw.thread(t).intent.store(detail::IntentWord::make(detail::Intent::pop_run, a2, SlotWord::ctr(raw.slot_word_value(a2))));
      raw.thread(t).owner.store((1ULL << 16) | 1);
      // As a thread taking the record would have: the mark covers it (a
      // record in use above the mark is a damage of its own).
      if (h.threads_used.load() <= t) h.threads_used.store(t + 1);
      return {};
    }
  }
  return {};
}

// ---- reporting -------------------------------------------------------------------------

inline bool has_issue(const FsckReport& r, std::string_view invariant) {
  for (const auto& i : r.issues)
    if (i.invariant == invariant) return true;
  return false;
}

inline std::string show(const FsckReport& r) {
  std::string s;
  for (const auto& i : r.issues) s += "  " + i.invariant + ": " + i.detail + "\n";
  for (const auto& line : r.repairs) s += "  repair: " + line + "\n";
  return s.empty() ? "  (nothing)\n" : s;
}

}  // namespace fairlane::test
