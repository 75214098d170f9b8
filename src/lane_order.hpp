// The order of jobs inside one lane: oldest (lowest id) first.
//
// Newly pending jobs are pushed on the lane's intake, a push-only stack that
// any process may push to with one CAS. Only the lane's server (the holder
// of the lane word's busy bit) takes from it, always all of it at once with
// an exchange, so the stack has no ABA problem. The server keeps the jobs in
// two structures that live in the job slots:
//
//   run   a linked list in ascending id order; a job newer than the run's
//         tail (the common case: ids are minted in order) is appended, O(1)
//   heap  a leftist heap for the rest (retries, recovered leases, ids that
//         arrive out of order), O(log depth) to insert and to pop
//
// pop takes the smaller of the run's head and the heap's root. If a server
// dies mid-operation the structures are rebuilt from the slot table, which
// stays the truth (the slots say pending and which lane).
#pragma once

#include <cstdint>

#include "segment.hpp"

namespace fairlane::detail {

// Pushes slot onto the lane's intake. Lock-free; any process.
inline void intake_push(Segment& s, LaneRecord& lane, std::uint32_t slot) noexcept {
  SlotRecord& r = s.slot(slot);
  std::uint32_t head = lane.intake.load(std::memory_order_relaxed);
  do {
    r.next.store(head, std::memory_order_relaxed);
    // [R2] release: the slot's fields are visible to the server that takes
    // the intake; pairs with [A2].
  } while (!lane.intake.compare_exchange_weak(head, slot + 1, std::memory_order_release, std::memory_order_relaxed));
}

class LaneOrder {
 public:
  LaneOrder(Segment& s, LaneRecord& lane) noexcept : s_(s), lane_(lane) {}

  // Removes and returns the oldest job, or kNoSlot... the caller reserved a
  // pending count, so a job is always there (possibly still in the intake).
  std::uint32_t pop() noexcept {
    for (;;) {
      absorb();
      std::uint32_t r = lane_.run_head, hp = lane_.heap_root;
      if (r && (!hp || key(r - 1) <= key(hp - 1))) {
        lane_.run_head = s_.slot(r - 1).next.load(std::memory_order_relaxed);
        if (!lane_.run_head) lane_.run_tail = 0;
        return r - 1;
      }
      if (hp) {
        SlotRecord& top = s_.slot(hp - 1);
        lane_.heap_root = merge(top.left, top.right);
        return hp - 1;
      }
      // Reserved but not yet visible: an enqueuer pushed it to the intake
      // just before counting it, so it is there; we raced the exchange.
    }
  }

 private:
  std::uint64_t key(std::uint32_t slot) const noexcept { return s_.slot(slot).snowflake.load(std::memory_order_relaxed); }

  // Moves the intake into the run and the heap.
  void absorb() noexcept {
    // [A2] acquire: pairs with [R2].
    std::uint32_t top = lane_.intake.exchange(0, std::memory_order_acquire);
    if (!top) return;
    // The stack is newest-first; reverse it to arrival order.
    std::uint32_t rev = 0;
    while (top) {
      SlotRecord& r = s_.slot(top - 1);
      std::uint32_t nx = r.next.load(std::memory_order_relaxed);
      r.next.store(rev, std::memory_order_relaxed);
      rev = top;
      top = nx;
    }
    while (rev) {
      std::uint32_t nx = s_.slot(rev - 1).next.load(std::memory_order_relaxed);
      place(rev - 1);
      rev = nx;
    }
  }

  void place(std::uint32_t slot) noexcept {
    SlotRecord& r = s_.slot(slot);
    if (!lane_.run_tail || key(lane_.run_tail - 1) < key(slot)) {
      r.next.store(0, std::memory_order_relaxed);
      if (lane_.run_tail) s_.slot(lane_.run_tail - 1).next.store(slot + 1, std::memory_order_relaxed);
      else lane_.run_head = slot + 1;
      lane_.run_tail = slot + 1;
      return;
    }
    r.left = r.right = 0;
    r.rank = 1;
    lane_.heap_root = merge(lane_.heap_root, slot + 1);
  }

  std::uint32_t rank(std::uint32_t n) const noexcept { return n ? s_.slot(n - 1).rank : 0; }

  // Leftist-heap merge of two roots (slot+1, 0 = empty). Recursion depth is
  // bounded by the sum of the right-spine lengths, at most 2 log2(depth).
  std::uint32_t merge(std::uint32_t a, std::uint32_t b) noexcept {
    if (!a) return b;
    if (!b) return a;
    if (key(b - 1) < key(a - 1)) std::swap(a, b);
    SlotRecord& ra = s_.slot(a - 1);
    ra.right = merge(ra.right, b);
    if (rank(ra.left) < rank(ra.right)) std::swap(ra.left, ra.right);
    ra.rank = rank(ra.right) + 1;
    return a;
  }

  Segment& s_;
  LaneRecord& lane_;
};

}  // namespace fairlane::detail
