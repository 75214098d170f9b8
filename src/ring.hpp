// The ring of lane tokens: a bounded MPMC queue in which every step is a
// single CAS, on a cell or on an index.
//
// A cell carries the position at which it is next usable. push at position
// t turns cell (t, empty) into (t, lane); pop at position h turns (h, lane)
// into (h + cells, empty). The head and tail indexes only say where to look:
// whoever finds one lagging behind a cell that was already filled or emptied
// advances it. So a process that dies between its cell CAS and its index
// CAS leaves nothing that anyone waits on (the failure of a head/tail ring
// whose owner dies between its two steps).
//
// At most one token per lane exists (the lane word's ringed bit), and the
// ring has more cells than lanes, so push never finds the ring full.
#pragma once

#include <cstdint>
#include <vector>

#include "failpoint.hpp"
#include "segment.hpp"

namespace fairlane::detail {

inline constexpr std::uint32_t kNoLane = ~0U;

// Pushes lane at the tail. Lock-free. Returns false only if the ring is full,
// which the one-token-per-lane rule makes impossible.
inline bool ring_push(Segment& s, std::uint32_t lane) noexcept {
  const std::uint64_t cells = s.ring_mask + 1;
  for (;;) {
    // Acquire loads: see the cell writes of the pushes/pops that moved the index.
    std::uint64_t t = s.h->ring_tail.load(std::memory_order_acquire);
    std::atomic<std::uint64_t>& cell = s.ring[t & s.ring_mask];
    std::uint64_t c = cell.load(std::memory_order_acquire);
    const std::uint64_t want = t & RingCell::kPosMask;
    if (RingCell::pos(c) == want) {
      if (RingCell::value(c) == 0) {
        // [S1] seq_cst: publishes the token; pairs with the pop CAS [S2] and
        // with the waiter count load that follows (no lost wake-up).
        if (cell.compare_exchange_strong(c, RingCell::pack(t, lane + 1), std::memory_order_seq_cst)) {
          FAIRLANE_FAILPOINT("ring.cell_filled");
          s.h->ring_tail.compare_exchange_strong(t, t + 1, std::memory_order_release);
          return true;
        }
      } else {
        // Filled by a pusher that has not advanced the tail yet: help it.
        s.h->ring_tail.compare_exchange_strong(t, t + 1, std::memory_order_release);
      }
    } else if (RingCell::pos(c) == ((t - cells) & RingCell::kPosMask) && RingCell::value(c) != 0) {
      // The previous lap's token is still there: the ring is full.
      if (s.h->ring_tail.load(std::memory_order_acquire) == t) return false;
    }
    // Otherwise our view of the tail was stale: reload.
  }
}

// Pops the token at the head, or kNoLane if the ring is empty. Lock-free.
inline std::uint32_t ring_pop(Segment& s) noexcept {
  const std::uint64_t cells = s.ring_mask + 1;
  for (;;) {
    std::uint64_t h = s.h->ring_head.load(std::memory_order_acquire);
    std::atomic<std::uint64_t>& cell = s.ring[h & s.ring_mask];
    std::uint64_t c = cell.load(std::memory_order_seq_cst);
    const std::uint64_t want = h & RingCell::kPosMask;
    if (RingCell::pos(c) == want) {
      if (RingCell::value(c) == 0) {
        // Nothing was pushed at h (a push fills the cell before the tail
        // moves past it): empty, unless the head moved meanwhile.
        if (s.h->ring_head.load(std::memory_order_acquire) == h) return kNoLane;
        continue;
      }
      // [S2] seq_cst: takes the token; pairs with [S1].
      if (cell.compare_exchange_strong(c, RingCell::pack(h + cells, 0), std::memory_order_seq_cst)) {
        FAIRLANE_FAILPOINT("ring.cell_taken");
        s.h->ring_head.compare_exchange_strong(h, h + 1, std::memory_order_release);
        return std::uint32_t(RingCell::value(c) - 1);
      }
    } else if (RingCell::pos(c) == ((h + cells) & RingCell::kPosMask)) {
      // Emptied by a popper that has not advanced the head yet: help it.
      s.h->ring_head.compare_exchange_strong(h, h + 1, std::memory_order_release);
    }
  }
}

// The tokens in rota order, read without stopping anyone (approximate).
inline std::vector<std::uint32_t> ring_contents(const Segment& s) {
  std::vector<std::uint32_t> out;
  std::uint64_t h = s.h->ring_head.load(std::memory_order_acquire);
  std::uint64_t t = s.h->ring_tail.load(std::memory_order_acquire);
  for (std::uint64_t p = h; p < t + 1 && p - h <= s.ring_mask; ++p) {
    std::uint64_t c = s.ring[p & s.ring_mask].load(std::memory_order_acquire);
    if (RingCell::pos(c) == (p & RingCell::kPosMask) && RingCell::value(c) != 0)
      out.push_back(std::uint32_t(RingCell::value(c) - 1));
  }
  return out;
}

}  // namespace fairlane::detail
