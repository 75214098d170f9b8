// The ring: the rota of serviceable lanes, a FIFO of cells naming lanes
// (RingCell, layout.hpp).
//
// No token is ever taken out of the ring into a process's hands. Lane L is
// in the rota iff its lane word says ringed; the cell that is its token is
// the one whose position's low bits the lane word's tgen names. So:
//
//   ring a lane     push a cell naming it (at the tail), then CAS its lane
//                   word to ringed with tgen = that position, computed from
//                   a lane word read before the push
//   rotate a lane   the same with the lane already ringed (its old cell,
//                   at the head, becomes stale by that CAS), then move the
//                   head past the old cell
//   de-ring         CAS the lane word to not ringed; its cell is stale
//
// The head (Header::ring_head) is the only record of consumption: it moves
// forward by CAS, past a cell that is stale or whose lane was just rotated.
// A cell that names a lane which is not ringed may be the cell a ringer is
// about to validate: whoever reaches it first rings the lane itself with a
// cell it pushes (if the lane is serviceable) or bumps the lane word's
// version (if not), so that the ringer's CAS, computed from a reading before
// its push, fails and it pushes again if it must. A stopped process
// therefore holds no token: its pushed cell is either validated by its CAS
// or stale, and the head never waits for it. Only a cell pushed after the
// reading of the word a CAS starts from is ever made a token: a cell read
// at the head may be behind it by the time of the CAS, and the head never
// comes back.
//
// The tail is a hint: a pusher writes the first position at or after it
// whose cell is not yet written for that position (one CAS on the cell),
// then moves the hint forward lazily.
#pragma once

#include <cstdint>

#include "fairlane/detail/layout.hpp"
#include "segment.hpp"

namespace fairlane::detail {

inline constexpr std::uint64_t kPosMask = 0xFFFFFFFFULL;

inline bool cell_written_for(std::uint64_t c, std::uint64_t pos) noexcept {
  return RingCell::pos(c) == (pos & kPosMask);
}

// Pushes a cell naming lane `lane` at the tail; returns its position, or
// ~0 if the ring is full (impossible while every stale cell is passed within
// a lap, the ring having four cells per lane: then it is corrupt). Lock-free.
inline std::uint64_t ring_push(Segment& s, std::uint32_t lane) noexcept {
  const std::uint64_t cells = s.ring_mask + 1;
  std::uint64_t t = s.h->ring_tail.load(std::memory_order_acquire);
  bool from_head = false;  // walking from the head: the hint was past a lap
  for (std::uint64_t probes = 0; probes <= 2 * cells; ++probes, ++t) {
    std::atomic<std::uint64_t>& cell = s.ring[t & s.ring_mask];
    std::uint64_t c = cell.load(std::memory_order_acquire);
    if (cell_written_for(c, t)) continue;  // taken by another pusher: look further
    // Walking from the head, a cell written for a later lap says the head
    // is behind the cells (a scribble): no room that is safe to take.
    if (from_head && std::int32_t(RingCell::pos(c) - std::uint32_t(t)) > 0) return ~0ULL;
    // Free for position t only once the head has passed the cell's last
    // lap (t - cells); else the ring is full from here.
    const std::uint64_t head = s.h->ring_head.load(std::memory_order_acquire);
    if (t >= head + cells) {
      // Full from here; or the hint is a scribble more than a lap ahead,
      // which the pushers never write (each writes t + 1 for a t below
      // head + cells): walk once from the head before saying full, so that
      // the hint cannot keep the ring from ever taking a cell again.
      if (from_head) return ~0ULL;
      from_head = true;
      t = head - 1;
      continue;
    }
    if (t < head) {
      // Our tail hint lags behind the head: jump.
      t = head - 1;
      continue;
    }
    // [S1] seq_cst: the cell is visible before the lane word CAS that makes
    // it a token ([S3]), and to a waiter's re-check (no lost wake-up).
    if (cell.compare_exchange_strong(c, RingCell::make(t, lane + 1), std::memory_order_seq_cst)) {
      // The hint, a plain store: a racing pusher may move it back a little,
      // which only costs the next pusher a probe (it skips written cells).
      // A hint we walked back from is replaced whatever it says.
      if (from_head || s.h->ring_tail.load(std::memory_order_relaxed) < t + 1)
        s.h->ring_tail.store(t + 1, std::memory_order_relaxed);
      return t;
    }
    --t;  // lost the cell: look at it again
  }
  return ~0ULL;
}

// Moves the head from h to h + 1 (a no-op if someone already did).
inline void ring_pass(Segment& s, std::uint64_t h) noexcept {
  // [R2] release: a pusher that sees the head past h may reuse the cell's
  // next lap only after our reading of it.
  s.h->ring_head.compare_exchange_strong(h, h + 1, std::memory_order_acq_rel, std::memory_order_relaxed);
}

}  // namespace fairlane::detail
