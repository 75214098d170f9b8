// The lane order: run appends and the strays skip list (lane_order.hpp).
#include "lane_order.hpp"

#include <algorithm>

#include "failpoint.hpp"
#include "util.hpp"

namespace fairlane::detail {

namespace {

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

}  // namespace

OrderResult run_append(Segment& s, std::uint32_t lane, GroupKey g, std::uint32_t slot, std::uint64_t tag, Word128& w,
                       std::atomic<std::uint64_t>* pred_intent, bool w_checked) noexcept {
  SlotRecord& n = s.slot(slot);
  const std::uint32_t node1 = slot + 1;
  const std::uint64_t key = n.sf.load(std::memory_order_relaxed);
  n.level.store(0, std::memory_order_relaxed);
  // Private until linked: the CAS that links it publishes it ([S3]/[R4]).
  n.next.store(Link::make(0, 0, tag), std::memory_order_relaxed);
  Word128 sealed_at{};  // the lane word when we last found its last node sealed
  // The bound counts only the rounds that bytes nobody else writes could
  // repeat: a tail moved by our own CAS (a run that loops would have us
  // move it round and round). A round that ends because the lane word or a
  // link moved under us is another thread's step, not a loop: lock-free
  // progress, and never a sign of corruption. (Counting every round,
  // contention alone went past jobs + 16 rounds under ThreadSanitizer, and
  // appends were failed as corrupt.) Reaching the bound legitimately would
  // take kTailLag appends by others between each two of our tail moves,
  // jobs + 16 times in one call.
  std::uint64_t own = 0;
  for (;;) {
    if (own > s.jobs + 16) break;
    const Word128 base = lane_base(s, lane, w);
    // Read after w: if the CAS below (from w) succeeds, this is g's lane.
    // (The caller's w_checked reading is that check, made for this w.)
    if (!w_checked && !lane_is(s, lane, w, g)) return OrderResult::lane_changed;
    w_checked = false;
    const std::uint32_t t1 = LaneWord::tail(base);
    if (t1 == 0) {
      if (LaneWord::head(base) != 0) {
        report_corrupt(s, CorruptWhat::lane_word);
        return OrderResult::corrupt;
      }
      // An empty run: the node becomes head and tail in one CAS (which also
      // rings the lane if that makes it serviceable).
      if (pred_intent) pred_intent->store(0, std::memory_order_release);
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
    // The lane word's tail is a node of the run at or before its last one
    // (appends do not move it: see lane_order.hpp). Walk to the last node,
    // at most kTailLag links.
    std::uint32_t e1 = t1;
    std::uint64_t el = s.slot(t1 - 1).next.load(std::memory_order_acquire);
    unsigned hops = 0;
    bool bad = false;
    while (Link::succ(el) != 0 && hops < kTailLag) {
      const std::uint32_t m1 = Link::succ(el);
      if (!valid_slot1(s, m1)) {
        bad = true;
        break;
      }
      e1 = m1;
      el = s.slot(m1 - 1).next.load(std::memory_order_acquire);
      ++hops;
    }
    // Read again: only if the word has not moved are these links the run's
    // (no node has left the run since w: every pop is a CAS of this word;
    // a node left since may have been reused and be the last node of
    // another list now: a CAS on its link would put the node there).
    {
      const Word128 again = lane_load(s, lane);
      if (!(again == w)) {
        w = again;
        continue;
      }
    }
    if (bad) {
      report_corrupt(s, CorruptWhat::lane_order);
      return OrderResult::corrupt;
    }
    if (hops == kTailLag) {
      // The tail lags by kTailLag links or more: move it up to the farthest
      // node seen (anyone may: it is a node of this run), then walk on from
      // there. So an append leaves it at most kTailLag links behind.
      if (lane_cas(s, lane, w, LaneWord::with_tail(base, e1))) ++own;
      continue;
    }
    if (Link::mark(el) == Link::kSealed) {
      // Its claimer is popping it as the run's last node: the run is about
      // to be empty. Look once more; if the word has not moved, that claimer
      // is between its seal and its pop (perhaps stopped): go elsewhere.
      if (sealed_at == w) return OrderResult::sealed;
      sealed_at = w;
      // Not counted: seen again under the same word, it answers `sealed`
      // just above, so only another thread's step (the word moved without
      // popping the sealed node: a setting, an ack's step, a take from the
      // strays) brings us back here.
      FAIRLANE_FAILPOINT("run.seal_seen");
      w = lane_load(s, lane);
      continue;
    }
    SlotRecord& e = s.slot(e1 - 1);
    if (e.sf.load(std::memory_order_acquire) >= key) return OrderResult::out_of_order;
    n.run_seq.store(e.run_seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (pred_intent) pred_intent->store(std::uint64_t(e1) | (Link::tag(el) << 26), std::memory_order_release);
    FAIRLANE_FAILPOINT("run.walked");
    // [S3] seq_cst: links the node. It fails if anything was linked after
    // the last node, if it was sealed for its pop, or if it was relinked
    // (its tag): so on success that node was in this run, unpopped, and the
    // node is reachable from here on (a sealed node is never linked after,
    // and an unsealed one is popped only with a successor). The lane word
    // is not written: its tail now lags by one more link, until an
    // appender that finds it kTailLag behind, or a claim, moves it up.
    if (!e.next.compare_exchange_strong(el, Link::make(node1, 0, Link::tag(el)), std::memory_order_seq_cst)) {
      w = lane_load(s, lane);
      continue;
    }
    FAIRLANE_FAILPOINT("run.linked");
    return OrderResult::ok;
  }
  report_corrupt(s, CorruptWhat::lane_order);
  return OrderResult::corrupt;
}

// ---- strays ---------------------------------------------------------------------------------
//
// Every strays link (level 0 and up, and the lane's heads) is an UpLink:
// the successor, a mark, the tag of the node the link belongs to (its owner)
// and the tag of the node it leads to (its target), both the low 18 bits of
// the node's ctr when it was linked (a head's owner tag is the lane's
// incarnation). A search stands only on nodes whose link still carries the
// tag it was led there by: a node taken and reused since is noticed and the
// search starts again from the heads. Marked nodes are always a prefix of
// level 0 (only the minimum is ever taken), and nothing is inserted after a
// marked node, so a search never stands on one: it restarts instead.

namespace {

std::uint64_t stag(std::uint64_t ctr) noexcept { return ctr & UpLink::kTagMask; }

std::atomic<std::uint64_t>& slink(SlotRecord& r, unsigned level) noexcept {
  return level == 0 ? r.next : r.up[level - 1];
}

struct Position {
  std::atomic<std::uint64_t>* pred[kStrayLevels];  // the link to CAS at each level
  std::uint64_t seen[kStrayLevels];                // what it held
};

enum class Found { ok, corrupt };

// The predecessors of `key` at every level of lane `lane`'s strays, unlinking
// the marked nodes met on the way (level 0 exactly; upper levels are
// shortcuts, and a stale one ends its level early).
Found strays_find(Segment& s, std::uint32_t lane, std::uint64_t key, Position& pos) noexcept {
  LaneRecord& l = s.lanes[lane];
  // A budget for one pass from the heads (on bytes nobody writes, a pass
  // that loops is cut off by it). A restart is another thread's step (the
  // node we stood on was taken) unless it repeats the last one exactly (the
  // same node, tag and link): bytes nobody writes restart the same way each
  // time (once our own unlinks and cuts, finitely many, are made), so
  // repeats are counted and nothing else is. A bound on every restart
  // would count contention as corruption (see run_append).
  const std::uint64_t budget = std::uint64_t(s.jobs) * kStrayLevels * 4 + 256;
  std::uint64_t steps = 0;
  std::uint32_t repeats = 0;
  std::uint32_t last_x1 = 0;
  std::uint64_t last_xtag = 0, last_link = 0;
restart:
  steps = 0;
  std::uint32_t x1 = 0;     // the node we stand on (0: the lane's heads)
  std::uint64_t xtag = 0;   // its tag, as the link that led us to it says
  for (int lv = int(kStrayLevels) - 1; lv >= 0; --lv) {
    const unsigned level = unsigned(lv);
    std::atomic<std::uint64_t>* at = x1 ? &slink(s.slot(x1 - 1), level) : &l.strays[level];
    std::uint64_t link;
    for (;;) {
      if (++steps > budget) return Found::corrupt;
      link = at->load(std::memory_order_acquire);
      if (x1 && (UpLink::owner_tag(link) != xtag || UpLink::mark(link) == Link::kDeleted)) {
        // The node we stand on was taken (and maybe reused): from the heads again.
        const bool same = x1 == last_x1 && xtag == last_xtag && link == last_link;
        if (!same) repeats = 0;
        if (same && ++repeats > 8) return Found::corrupt;
        last_x1 = x1;
        last_xtag = xtag;
        last_link = link;
        cpu_pause();
        goto restart;
      }
      const std::uint32_t y1 = UpLink::succ(link);
      if (y1 == 0) break;
      if (!valid_slot1(s, y1)) return Found::corrupt;
      SlotRecord& y = s.slot(y1 - 1);
      FAIRLANE_FAILPOINT("strays.node_read");
      const std::uint64_t ylink = slink(y, level).load(std::memory_order_acquire);
      const bool current = UpLink::owner_tag(ylink) == UpLink::target_tag(link) &&
                           (level == 0 || y.level.load(std::memory_order_relaxed) > level);
      if (!current) {
        if (at->load(std::memory_order_acquire) != link) continue;  // moved under us: read again
        if (level == 0) return Found::corrupt;  // a level-0 successor is never reused while linked
        // A stale shortcut (its target taken, maybe reused): this level ends
        // here, and the shortcut is cut, so that it cannot pass for current
        // once its target's 18-bit tag comes round again.
        const std::uint64_t cut = UpLink::make(0, UpLink::mark(link), UpLink::owner_tag(link), 0);
        if (!at->compare_exchange_strong(link, cut, std::memory_order_seq_cst)) continue;
        link = cut;
        break;
      }
      if (UpLink::mark(ylink) == Link::kDeleted) {
        // y is out: unlink it from where we stand (its successor, with its tag).
        const std::uint64_t past = UpLink::make(UpLink::succ(ylink), 0, UpLink::owner_tag(link), UpLink::target_tag(ylink));
        at->compare_exchange_strong(link, past, std::memory_order_seq_cst);
        continue;
      }
      const std::uint64_t ykey = y.sf.load(std::memory_order_acquire);
      // Still linked from where we stand: then y was in the list while we
      // read its key (a node leaves level 0 only by being unlinked from its
      // predecessor, which changes this link).
      if (at->load(std::memory_order_acquire) != link) continue;
      if (ykey >= key) break;
      x1 = y1;
      xtag = UpLink::target_tag(link);
      at = &slink(y, level);
    }
    pos.pred[level] = at;
    pos.seen[level] = link;
  }
  return Found::ok;
}

}  // namespace

namespace {

// An insert that found its lane's strays sealed by a reclaim: the reclaim is
// made to fail (the lane word moved on by a CAS of ours, if the lane is
// still g's and live), then the seal, dead now, opened. lane_changed: the
// lane was given back (or is another group's): look the group up again.
OrderResult meet_seal(Segment& s, std::uint32_t lane, GroupKey g, std::uint64_t seal) noexcept {
  const auto moved = lane_update(s, lane, [&](Word128 b) -> std::optional<Word128> {
    if (LaneWord::state(b) != LaneState::live) return std::nullopt;
    return b;
  });
  if (!moved || !lane_is(s, lane, *moved, g)) return OrderResult::lane_changed;
  std::uint64_t cur = seal;
  s.lanes[lane].strays[0].compare_exchange_strong(cur, strays_head(UpLink::owner_tag(seal), false, 0),
                                                  std::memory_order_seq_cst);
  return OrderResult::ok;
}

}  // namespace

OrderResult strays_insert(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr, GroupKey g,
                          std::uint64_t inc) noexcept {
  SlotRecord& n = s.slot(slot);
  LaneRecord& l = s.lanes[lane];
  const std::uint32_t node1 = slot + 1;
  const std::uint64_t tag = stag(ctr);
  const std::uint64_t key = n.sf.load(std::memory_order_relaxed);
  const unsigned height = random_level();
  n.level.store(std::uint8_t(height), std::memory_order_relaxed);
  Position pos;
  // Only the rounds that meet a seal are counted (on bytes nobody writes,
  // meet_seal opens it and the next round finds none); a round whose level-0
  // CAS fails lost to another thread's step, which is progress, not a loop
  // (see run_append).
  std::uint64_t seals = 0;
  for (;;) {
    if (seals > s.jobs + 64 || strays_find(s, lane, key, pos) != Found::ok) {
      report_corrupt(s, CorruptWhat::lane_order);
      return OrderResult::corrupt;
    }
    const std::uint64_t s0 = pos.seen[0];
    if (pos.pred[0] == &l.strays[0]) {
      // Into empty strays, or before every node: the head's CAS. Its owner
      // tag is the lane's incarnation (a lane given back and made again for
      // another group has another), and a reclaim seals it.
      if ((UpLink::owner_tag(s0) & UpLink::kTagMask) != (inc & UpLink::kTagMask)) return OrderResult::lane_changed;
      if (UpLink::mark(s0) == Link::kSealed) {
        ++seals;
        if (meet_seal(s, lane, g, s0) == OrderResult::lane_changed) return OrderResult::lane_changed;
        continue;
      }
    }
    // The lane is still g's (after the search: a node found in its strays is
    // of the lane as it is now, and the CAS below fails if that node left).
    if (!lane_is(s, lane, lane_load(s, lane), g) ||
        (l.key_kind.load(std::memory_order_acquire) >> 16 & UpLink::kTagMask) != (inc & UpLink::kTagMask))
      return OrderResult::lane_changed;
    // Private until linked at level 0 (that CAS publishes these).
    n.next.store(UpLink::make(UpLink::succ(s0), 0, tag, UpLink::target_tag(s0)), std::memory_order_relaxed);
    for (unsigned i = 1; i < height; ++i)
      n.up[i - 1].store(UpLink::make(UpLink::succ(pos.seen[i]), 0, tag, UpLink::target_tag(pos.seen[i])),
                        std::memory_order_relaxed);
    std::uint64_t expect = s0;
    FAIRLANE_FAILPOINT("strays.found");
    // [S3] seq_cst: links the node at level 0: it is in the list from here.
    // Fails if the predecessor was marked or anything was linked after it.
    if (pos.pred[0]->compare_exchange_strong(expect, UpLink::make(node1, 0, UpLink::owner_tag(s0), tag),
                                             std::memory_order_seq_cst))
      break;
  }
  FAIRLANE_FAILPOINT("strays.linked");
  // Upper levels: shortcuts only, best effort. A node taken meanwhile may
  // still get linked here; that link reads stale once the node is reused.
  for (unsigned i = 1; i < height; ++i) {
    bool done = false;
    for (int tries = 0; tries < 8 && !done; ++tries) {
      const std::uint64_t mine = n.up[i - 1].load(std::memory_order_acquire);
      if (UpLink::mark(mine) == Link::kDeleted || UpLink::mark(n.next.load(std::memory_order_acquire)) == Link::kDeleted)
        return OrderResult::ok;  // taken already: do not link it higher
      std::uint64_t expect = pos.seen[i];
      if (UpLink::succ(expect) == UpLink::succ(mine) && UpLink::target_tag(expect) == UpLink::target_tag(mine) &&
          pos.pred[i]->compare_exchange_strong(expect, UpLink::make(node1, 0, UpLink::owner_tag(expect), tag),
                                               std::memory_order_seq_cst)) {
        done = true;
        break;
      }
      if (strays_find(s, lane, key, pos) != Found::ok) return OrderResult::ok;
      std::uint64_t cur = mine;
      n.up[i - 1].compare_exchange_strong(
          cur, UpLink::make(UpLink::succ(pos.seen[i]), 0, tag, UpLink::target_tag(pos.seen[i])), std::memory_order_seq_cst);
    }
    if (!done) break;
  }
  return OrderResult::ok;
}

std::uint32_t strays_first(Segment& s, std::uint32_t lane, OrderResult& r, std::uint64_t* head) noexcept {
  LaneRecord& l = s.lanes[lane];
  r = OrderResult::ok;
  // Counts our own unlinks since the lane word last moved (a level 0 that
  // loops would have us unlink round and round, and nobody moves the word);
  // each node we unlink for its taker was taken by a step that moved the
  // word, and a head that moved under us is another thread's step.
  Word128 at = lane_load(s, lane);
  for (std::uint32_t unlinked = 0; unlinked <= s.jobs + 1;) {
    std::uint64_t link = l.strays[0].load(std::memory_order_acquire);
    const std::uint32_t y1 = UpLink::succ(link);
    if (y1 == 0) {
      r = OrderResult::empty;
      return 0;
    }
    if (!valid_slot1(s, y1)) break;
    const std::uint64_t ylink = s.slot(y1 - 1).next.load(std::memory_order_acquire);
    if (UpLink::owner_tag(ylink) != UpLink::target_tag(link)) {
      if (l.strays[0].load(std::memory_order_acquire) != link) continue;
      break;  // a first node that is not what the head says: scribbled
    }
    if (UpLink::mark(ylink) != Link::kDeleted) {
      if (head) *head = link;
      return y1;
    }
    // Taken, not yet unlinked by its taker: unlink it for it.
    if (l.strays[0].compare_exchange_strong(
            link, UpLink::make(UpLink::succ(ylink), 0, UpLink::owner_tag(link), UpLink::target_tag(ylink)),
            std::memory_order_seq_cst)) {
      const Word128 now = lane_load(s, lane);
      if (!(now == at)) {
        at = now;
        unlinked = 0;
      }
      ++unlinked;
    }
  }
  report_corrupt(s, CorruptWhat::lane_order);
  r = OrderResult::corrupt;
  return 0;
}

void strays_mark(Segment& s, std::uint32_t slot, std::uint32_t lane, const Word128* pending) noexcept {
  SlotRecord& y = s.slot(slot);
  const unsigned height = std::clamp<unsigned>(y.level.load(std::memory_order_relaxed), 1, kStrayLevels);
  auto still = [&] { return !pending || lane_load(s, lane) == *pending; };
  // The upper levels first (top down), level 0 last: whoever sees level 0
  // marked sees every level above it marked too. Each link is read, then the
  // lane word checked to still name the step (`pending`, when given), then
  // the CAS made from that reading: a node that left the list (and was
  // reused) since has other links, and the CAS fails.
  for (unsigned i = height; i-- > 1;) {
    std::atomic<std::uint64_t>& link = y.up[i - 1];
    std::uint64_t v = link.load(std::memory_order_acquire);
    while (UpLink::mark(v) != Link::kDeleted) {
      if (!still()) return;
      if (link.compare_exchange_weak(v, with_bits(v, 26, 2, Link::kDeleted), std::memory_order_seq_cst)) break;
    }
  }
  std::uint64_t v0 = y.next.load(std::memory_order_acquire);
  while (UpLink::mark(v0) != Link::kDeleted) {
    if (!still()) return;
    if (y.next.compare_exchange_weak(v0, with_bits(v0, 26, 2, Link::kDeleted), std::memory_order_seq_cst)) break;
  }
  FAIRLANE_FAILPOINT("strays.marked");
}

OrderResult strays_unlink(Segment& s, std::uint32_t lane, std::uint32_t slot) noexcept {
  // A search for its key unlinks every marked node at level 0 on the way
  // from the heads, itself included; after it, no node of the list leads to
  // it at level 0 (an insert after its predecessor fails once it is unlinked
  // there, and one that got in first is passed by the search).
  Position pos;
  if (strays_find(s, lane, s.slot(slot).sf.load(std::memory_order_relaxed), pos) != Found::ok) {
    report_corrupt(s, CorruptWhat::lane_order);
    return OrderResult::corrupt;
  }
  return OrderResult::ok;
}

// Walks level 0 from the head (bounded), calling f(slot1, link) per node
// until it returns false.
template <class F>
static bool walk_level0(const Segment& s, std::uint32_t lane, F f) noexcept {
  const LaneRecord& l = s.lanes[lane];
  std::uint32_t x1 = UpLink::succ(l.strays[0].load(std::memory_order_acquire));
  for (std::uint32_t steps = 0; x1 != 0 && steps <= s.jobs; ++steps) {
    if (!valid_slot1(s, x1)) return false;
    const std::uint64_t xl = s.slot(x1 - 1).next.load(std::memory_order_acquire);
    if (!f(x1, xl)) return true;
    x1 = UpLink::succ(xl);
  }
  return x1 == 0;
}

bool strays_holds(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr) noexcept {
  // A search by the job's key, not a walk: a walk that stands on a node
  // taken and reused meanwhile follows that slot's next link wherever it
  // leads now (another lane, a run) and misses the node; the sweep then
  // linked the job a second time. The search checks each link's tag
  // against the node it reaches and starts again when one is stale.
  Position pos;
  if (strays_find(s, lane, s.slot(slot).sf.load(std::memory_order_acquire), pos) != Found::ok) {
    report_corrupt(s, CorruptWhat::lane_order);
    return false;
  }
  // pos.seen[0] leads to the first unmarked node at or past the key: ours
  // if it is this slot, linked by the move of this ctr (its tag).
  const std::uint64_t link = pos.seen[0];
  return UpLink::succ(link) == slot + 1 && UpLink::target_tag(link) == stag(ctr);
}

std::uint64_t lane_depth(const Segment& s, std::uint32_t lane) noexcept {
  Word128 w = lane_load(s, lane);
  std::uint64_t n = 0;
  // The run from its sequence numbers (O(1): the tail's lag is bounded), less its husks. The numbers
  // are the run's only while the word still names that head and tail (a
  // head popped meanwhile may be a lease whose field holds its exit mark):
  // read again a few times, and without a steady reading count the head.
  std::uint64_t a = 0, b = 0;
  bool steady = false;
  for (int tries = 0; tries < 4 && !steady; ++tries) {
    const std::uint32_t h1 = LaneWord::head(w), t1 = LaneWord::tail(w);
    if (LaneWord::state(w) != LaneState::live || !valid_slot1(s, h1) || !valid_slot1(s, t1)) break;
    a = s.slot(h1 - 1).run_seq.load(std::memory_order_acquire);
    // The tail may lag behind the last node (lane_order.hpp): walk to it.
    std::uint32_t e1 = t1;
    for (unsigned k = 0; k < 4 * kTailLag; ++k) {
      const std::uint32_t m1 = Link::succ(s.slot(e1 - 1).next.load(std::memory_order_acquire));
      if (!valid_slot1(s, m1)) break;
      e1 = m1;
    }
    b = s.slot(e1 - 1).run_seq.load(std::memory_order_acquire);
    const Word128 again = lane_load(s, lane);
    steady = again == w;
    w = again;
  }
  if (LaneWord::state(w) == LaneState::live && LaneWord::head(w) != 0) {
    n = steady && b >= a ? b - a + 1 : 1;
    const std::uint64_t husks = HuskCount::count(s.lanes[lane].husks.load(std::memory_order_relaxed));
    n = n > husks ? n - husks : 0;
    n = std::min<std::uint64_t>(n, s.jobs);
  }
  if (LaneWord::strays(w)) {
    walk_level0(s, lane, [&](std::uint32_t x1, std::uint64_t xl) {
      if (UpLink::mark(xl) == Link::kDeleted) return true;
      const SlotState st = SlotWord::state(slot_load(s, x1 - 1));
      if (st == SlotState::pending || st == SlotState::returning) ++n;
      return true;
    });
  }
  return std::min<std::uint64_t>(n, s.jobs);
}

}  // namespace fairlane::detail
