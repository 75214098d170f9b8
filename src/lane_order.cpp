// The lane order: run appends and the strays skip list (lane_order.hpp).
#include "lane_order.hpp"

#include "failpoint.hpp"

namespace fairlane::detail {

namespace {

std::uint64_t key_of(const Segment& s, std::uint32_t slot1) noexcept {
  return s.slot(slot1 - 1).sf.load(std::memory_order_acquire);
}

// Is the job in slot `slot` (0-based) a plausible member of lane `lane`?
bool member_of(const Segment& s, std::uint32_t slot, std::uint32_t lane) noexcept {
  return s.slot(slot).lane.load(std::memory_order_relaxed) == lane;
}

// A level for a new strays node: 1 + the number of times a coin with
// p = 1/4 comes up, at most kStrayLevels. Thread-local xorshift: no shared
// state, nothing to contend on.
unsigned random_level() noexcept {
  thread_local std::uint64_t x = 0x9E3779B97F4A7C15ULL ^ reinterpret_cast<std::uintptr_t>(&x);
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  unsigned lvl = 1;
  std::uint64_t r = x;
  while (lvl < kStrayLevels && (r & 3) == 0) {
    ++lvl;
    r >>= 2;
  }
  return lvl;
}

// Is `node` (slot+1) still reachable as the run of `lane`, for an append
// whose confirming CAS found the tail moved off its predecessor? (The rare
// race of an append with the pop of the last node: lane_order.hpp.)
bool appended_node_reachable(Segment& s, std::uint32_t lane, std::uint32_t node1, std::uint64_t tag) noexcept {
  SlotRecord& n = s.slot(node1 - 1);
  // Linked after since, or taken (its slot word moved on): reachable once.
  if (n.next.load(std::memory_order_acquire) != Link::make(0, 0, tag)) return true;
  const Word128 sw = slot_load(s, node1 - 1);
  if (node_tag(SlotWord::ctr(sw)) != tag) return true;
  const SlotState st = SlotWord::state(sw);
  if (st != SlotState::admitting && st != SlotState::pending) return true;
  const Word128 w = lane_load(s, lane);
  if (LaneWord::tail(w) == node1 || LaneWord::head(w) == node1) return true;
  // Popped, lease not yet written: some thread's intent names it.
  for (std::uint32_t i = 0; i < s.thread_count; ++i) {
    const std::uint64_t in = s.threads[i].intent.load(std::memory_order_acquire);
    if ((in & 15) == std::uint64_t(Intent::popping) && bits(in, 4, 26) == node1) return true;
  }
  for (std::uint32_t i = 0; i < s.proc_count; ++i) {
    const std::uint64_t in = s.procs[i].intent.load(std::memory_order_acquire);
    if ((in & 15) == std::uint64_t(Intent::popping) && bits(in, 4, 26) == node1) return true;
  }
  // Taken since we looked at its slot word?
  const Word128 again = slot_load(s, node1 - 1);
  return !(again == sw);
}

}  // namespace

OrderResult run_append(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t tag, Word128& w) noexcept {
  SlotRecord& n = s.slot(slot);
  const std::uint32_t node1 = slot + 1;
  const std::uint64_t key = n.sf.load(std::memory_order_relaxed);
  n.level.store(0, std::memory_order_relaxed);
  // Private until linked: the CAS that links it publishes it ([S3]/[R4]).
  n.next.store(Link::make(0, 0, tag), std::memory_order_relaxed);
  for (std::uint64_t round = 0; round <= s.jobs + 16; ++round) {
    const Word128 base = lane_base(s, lane, w);
    if (LaneWord::state(base) != LaneState::live) return OrderResult::lane_changed;
    const std::uint32_t t1 = LaneWord::tail(base);
    if (t1 == 0) {
      if (LaneWord::head(base) != 0) {
        report_corrupt(s, CorruptWhat::lane_word);
        return OrderResult::corrupt;
      }
      // An empty run: the node becomes head and tail in one CAS (which also
      // rings the lane if that makes it serviceable).
      n.run_seq.store(1, std::memory_order_relaxed);
      Word128 nw = LaneWord::with_tail(LaneWord::with_head(base, node1, tag & 0xFFF), node1);
      if (lane_cas(s, lane, w, nw)) {
        FAIRLANE_FAILPOINT("run.appended_first");
        return OrderResult::ok;
      }
      continue;
    }
    if (!valid_slot1(s, t1)) {
      report_corrupt(s, CorruptWhat::lane_word);
      return OrderResult::corrupt;
    }
    SlotRecord& t = s.slot(t1 - 1);
    std::uint64_t tl = t.next.load(std::memory_order_acquire);
    if (Link::succ(tl) != 0) {
      // The tail lags: a node is linked after it but not yet confirmed.
      // Confirm it for its appender (anyone may), then look again.
      const std::uint32_t m1 = Link::succ(tl);
      if (!valid_slot1(s, m1)) {
        report_corrupt(s, CorruptWhat::lane_order);
        return OrderResult::corrupt;
      }
      lane_cas(s, lane, w, LaneWord::with_tail(base, m1));
      continue;
    }
    if (key_of(s, t1) >= key) return OrderResult::out_of_order;
    n.run_seq.store(t.run_seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // [S3] seq_cst: links the node; fails if the tail moved on, was
    // relinked elsewhere (its tag), or was popped and reused.
    if (!t.next.compare_exchange_strong(tl, Link::make(node1, 0, Link::tag(tl)), std::memory_order_seq_cst)) {
      w = lane_load(s, lane);
      continue;
    }
    FAIRLANE_FAILPOINT("run.linked");
    // Confirm: move the lane word's tail from t to the node.
    for (;;) {
      const Word128 b2 = lane_base(s, lane, w);
      if (LaneWord::tail(b2) == t1 && LaneWord::state(b2) == LaneState::live) {
        if (lane_cas(s, lane, w, LaneWord::with_tail(b2, node1))) return OrderResult::ok;
        continue;
      }
      if (LaneWord::tail(b2) == node1) return OrderResult::ok;  // someone confirmed it for us
      break;  // the tail moved off t without us: was the node adopted?
    }
    if (appended_node_reachable(s, lane, node1, tag)) return OrderResult::ok;
    // Orphaned: t was popped as the last node before our link. Append again.
    FAIRLANE_FAILPOINT("run.orphaned");
    n.next.store(Link::make(0, 0, tag), std::memory_order_relaxed);
    w = lane_load(s, lane);
  }
  report_corrupt(s, CorruptWhat::lane_order);
  return OrderResult::corrupt;
}

// ---- strays ---------------------------------------------------------------------------------

namespace {

std::uint64_t own_tag(const SlotRecord& y) noexcept { return Link::tag(y.next.load(std::memory_order_acquire)); }

std::uint64_t head_tag(const LaneRecord& l) noexcept { return Link::tag(l.strays[0].load(std::memory_order_acquire)); }

struct Position {
  std::atomic<std::uint64_t>* pred[kStrayLevels];  // the link to CAS at each level
  std::uint64_t seen[kStrayLevels];                // what it held
};

// The node an upper-level link leads to, if that link is not stale (its
// target still the node it was written for, still in this lane's strays at
// that level); else 0: the level ends here for a search.
std::uint32_t up_target(const Segment& s, std::uint32_t lane, std::uint64_t link, unsigned level) noexcept {
  const std::uint32_t y1 = UpLink::succ(link);
  if (y1 == 0 || !valid_slot1(s, y1)) return 0;
  const SlotRecord& y = s.slot(y1 - 1);
  if ((own_tag(y) & UpLink::kTagMask) != UpLink::target_tag(link)) return 0;
  if (y.level.load(std::memory_order_relaxed) <= level || !member_of(s, y1 - 1, lane)) return 0;
  return y1;
}

// The predecessors of `key` at every level of lane `lane`'s strays, helping
// to unlink the marked nodes met on the way (level 0 exactly; upper levels as
// shortcuts). false: corrupt (out of bounds, or a walk too long for a list).
bool strays_find(Segment& s, std::uint32_t lane, std::uint64_t key, Position& pos) noexcept {
  LaneRecord& l = s.lanes[lane];
  const std::uint64_t budget = std::uint64_t(s.jobs) * kStrayLevels * 2 + 64;
  std::uint64_t steps = 0;
  std::uint32_t x1 = 0;  // the node we stand on (0: the lane's heads)
  for (int lv = int(kStrayLevels) - 1; lv >= 0; --lv) {
    const unsigned level = unsigned(lv);
    std::atomic<std::uint64_t>* at = x1 ? &node_link(s.slot(x1 - 1), level) : &l.strays[level];
    for (;;) {
      if (++steps > budget) return false;
      std::uint64_t link = at->load(std::memory_order_acquire);
      std::uint32_t y1;
      if (level == 0) {
        y1 = Link::succ(link);
        if (y1 != 0 && !valid_slot1(s, y1)) return false;
      } else {
        y1 = up_target(s, lane, link, level);
      }
      if (y1 == 0) break;
      SlotRecord& y = s.slot(y1 - 1);
      const std::uint64_t ylink = node_link(y, level).load(std::memory_order_acquire);
      if (Link::mark(ylink) == Link::kDeleted) {
        // y is out at this level: unlink it from where we stand.
        const std::uint64_t unlinked =
            level == 0 ? Link::make(Link::succ(ylink), Link::mark(link), Link::tag(link))
                       : UpLink::make(UpLink::succ(ylink), UpLink::mark(link), UpLink::owner_tag(link), UpLink::target_tag(ylink));
        at->compare_exchange_strong(link, unlinked, std::memory_order_seq_cst);
        continue;
      }
      const std::uint64_t ykey = y.sf.load(std::memory_order_acquire);
      // Still linked from where we stand? Then what we read of y is y's
      // (a linked node is never reused).
      if (at->load(std::memory_order_acquire) != link) continue;
      if (ykey >= key) break;
      x1 = y1;
      at = &node_link(y, level);
    }
    pos.pred[level] = at;
    pos.seen[level] = at->load(std::memory_order_acquire);
  }
  return true;
}

}  // namespace

OrderResult strays_insert(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t tag,
                          bool release_active) noexcept {
  SlotRecord& n = s.slot(slot);
  const std::uint32_t node1 = slot + 1;
  const std::uint64_t key = n.sf.load(std::memory_order_relaxed);
  const unsigned height = random_level();
  Word128 w = lane_load(s, lane);
  if (LaneWord::state(w) != LaneState::live) return OrderResult::lane_changed;
  n.level.store(std::uint8_t(height), std::memory_order_relaxed);
  Position pos;
  for (std::uint64_t round = 0;; ++round) {
    if (round > s.jobs + 16 || !strays_find(s, lane, key, pos)) {
      report_corrupt(s, CorruptWhat::lane_order);
      return OrderResult::corrupt;
    }
    if (Link::mark(pos.seen[0]) != 0) continue;  // its predecessor is being taken: find again
    // Private until linked at level 0 (that CAS publishes these).
    n.next.store(Link::make(Link::succ(pos.seen[0]), 0, tag), std::memory_order_relaxed);
    for (unsigned i = 1; i < height; ++i) {
      const std::uint32_t t1 = up_target(s, lane, pos.seen[i], i);
      n.up[i - 1].store(UpLink::make(t1, 0, tag, t1 ? UpLink::target_tag(pos.seen[i]) : 0), std::memory_order_relaxed);
    }
    std::uint64_t expect = pos.seen[0];
    // [S3] seq_cst: links the node at level 0: it is in the list from here.
    if (pos.pred[0]->compare_exchange_strong(expect, Link::make(node1, 0, Link::tag(expect)), std::memory_order_seq_cst))
      break;
  }
  FAIRLANE_FAILPOINT("strays.linked");
  // Upper levels: shortcuts only. A node taken meanwhile may still be linked
  // here; its link then reads stale once it is reused (UpLink).
  for (unsigned i = 1; i < height; ++i) {
    for (int tries = 0; tries < 8; ++tries) {
      const std::uint64_t mine = n.up[i - 1].load(std::memory_order_acquire);
      if (Link::mark(mine) == Link::kDeleted || Link::mark(n.next.load(std::memory_order_acquire)) == Link::kDeleted) {
        i = height;  // taken already: do not link it higher
        break;
      }
      std::uint64_t expect = pos.seen[i];
      if (Link::mark(expect) == 0 && up_target(s, lane, expect, i) == UpLink::succ(mine) &&
          pos.pred[i]->compare_exchange_strong(expect, UpLink::make(node1, 0, UpLink::owner_tag(expect), tag),
                                               std::memory_order_seq_cst))
        break;
      if (!strays_find(s, lane, key, pos)) break;
      const std::uint32_t t1 = up_target(s, lane, pos.seen[i], i);
      std::uint64_t cur = mine;
      n.up[i - 1].compare_exchange_strong(cur, UpLink::make(t1, 0, tag, t1 ? UpLink::target_tag(pos.seen[i]) : 0),
                                          std::memory_order_seq_cst);
    }
  }
  // Say so in the lane word (and give back the lease's active count). Always
  // a CAS, even when the flag is already set: a claimer that found the strays
  // empty and is about to clear the flag must fail ([S7]).
  for (int round = 0;; ++round) {
    const Word128 base = lane_base(s, lane, w);
    if (LaneWord::state(base) != LaneState::live || round > 1000000) {
      // A lane holding a linked node is never reclaimed: a scribbled word.
      report_corrupt(s, CorruptWhat::lane_word);
      return OrderResult::corrupt;
    }
    Word128 nw = LaneWord::with_strays(base, true);
    if (release_active) {
      const std::uint64_t a = LaneWord::active(base);
      nw = LaneWord::with_active(nw, a ? a - 1 : 0);
    }
    if (lane_cas(s, lane, w, nw)) return OrderResult::ok;
  }
}

std::uint32_t strays_first(Segment& s, std::uint32_t lane, OrderResult& r) noexcept {
  LaneRecord& l = s.lanes[lane];
  r = OrderResult::ok;
  for (std::uint32_t steps = 0; steps <= s.jobs + 1; ++steps) {
    std::uint64_t link = l.strays[0].load(std::memory_order_acquire);
    const std::uint32_t y1 = Link::succ(link);
    if (y1 == 0) {
      r = OrderResult::empty;
      return 0;
    }
    if (!valid_slot1(s, y1)) break;
    const std::uint64_t ylink = s.slot(y1 - 1).next.load(std::memory_order_acquire);
    if (Link::mark(ylink) != Link::kDeleted) return y1;
    // Taken, not yet unlinked by its owner: unlink it for it.
    l.strays[0].compare_exchange_strong(link, Link::make(Link::succ(ylink), 0, Link::tag(link)), std::memory_order_seq_cst);
  }
  report_corrupt(s, CorruptWhat::lane_order);
  r = OrderResult::corrupt;
  return 0;
}

OrderResult strays_take(Segment& s, std::uint32_t lane, std::uint32_t first1) noexcept {
  LaneRecord& l = s.lanes[lane];
  SlotRecord& y = s.slot(first1 - 1);
  if (Link::succ(l.strays[0].load(std::memory_order_acquire)) != first1) return OrderResult::lane_changed;
  const unsigned height = std::clamp<unsigned>(y.level.load(std::memory_order_relaxed), 1, kStrayLevels);
  // Mark the upper levels (top down), then level 0: the level-0 mark
  // decides who owns y.
  for (unsigned i = height; i-- > 1;) {
    std::atomic<std::uint64_t>& link = y.up[i - 1];
    std::uint64_t v = link.load(std::memory_order_acquire);
    while (Link::mark(v) != Link::kDeleted &&
           !link.compare_exchange_weak(v, v | (Link::kDeleted << 26), std::memory_order_seq_cst)) {
    }
  }
  std::uint64_t v0 = y.next.load(std::memory_order_acquire);
  for (;;) {
    if (Link::mark(v0) == Link::kDeleted) return OrderResult::lane_changed;  // someone else took it
    if (y.next.compare_exchange_weak(v0, Link::make(Link::succ(v0), Link::kDeleted, Link::tag(v0)), std::memory_order_seq_cst))
      break;
  }
  FAIRLANE_FAILPOINT("strays.taken");
  // Out of level 0 before it can be leased (and ever reused): the search
  // unlinks it where it is, and every marked node on the way.
  Position pos;
  if (!strays_find(s, lane, y.sf.load(std::memory_order_relaxed), pos)) {
    report_corrupt(s, CorruptWhat::lane_order);
    return OrderResult::corrupt;
  }
  (void)head_tag;
  return OrderResult::ok;
}

bool strays_contains(Segment& s, std::uint32_t lane, std::uint32_t slot) noexcept {
  LaneRecord& l = s.lanes[lane];
  std::uint32_t x1 = Link::succ(l.strays[0].load(std::memory_order_acquire));
  for (std::uint32_t steps = 0; x1 != 0 && steps <= s.jobs; ++steps) {
    if (!valid_slot1(s, x1)) return false;
    if (x1 == slot + 1) return true;
    x1 = Link::succ(s.slot(x1 - 1).next.load(std::memory_order_acquire));
  }
  return false;
}

std::uint64_t lane_depth(const Segment& s, std::uint32_t lane) noexcept {
  const Word128 w = lane_load(s, lane);
  std::uint64_t n = 0;
  const std::uint32_t h1 = LaneWord::head(w), t1 = LaneWord::tail(w);
  if (valid_slot1(s, h1) && valid_slot1(s, t1)) {
    const std::uint64_t a = s.slot(h1 - 1).run_seq.load(std::memory_order_relaxed);
    const std::uint64_t b = s.slot(t1 - 1).run_seq.load(std::memory_order_relaxed);
    n = b >= a ? b - a + 1 : 1;
    n = std::min<std::uint64_t>(n, s.jobs);
  }
  if (LaneWord::strays(w)) {
    std::uint32_t x1 = Link::succ(s.lanes[lane].strays[0].load(std::memory_order_acquire));
    for (std::uint32_t steps = 0; x1 != 0 && steps < s.jobs && valid_slot1(s, x1); ++steps) {
      const std::uint64_t xl = s.slot(x1 - 1).next.load(std::memory_order_acquire);
      if (Link::mark(xl) != Link::kDeleted) ++n;
      x1 = Link::succ(xl);
    }
  }
  return std::min<std::uint64_t>(n, s.jobs);
}

}  // namespace fairlane::detail
