// The lane table: an open-addressed hash of groups where a lane's index is
// its bucket. A bucket's key is two words, each set once by CAS from 0 and
// never cleared, so no probe ever waits on a half-written key:
//
//   key_a == 0              free bucket: a creator may CAS key_a
//   key_a == A, key_b == 0  claimed by some creator with key_a A; whoever
//                           comes next with the same A completes key_b
//   both set                the lane of (A, B)
//
// Two creators of different groups that share A race on key_b; the loser
// moves on to the next bucket. Lanes are never removed.
#pragma once

#include <cstdint>

#include "fairlane/ids.hpp"
#include "hash.hpp"
#include "segment.hpp"

namespace fairlane::detail {

inline constexpr std::uint32_t kLanesFull = ~0U - 1;
inline constexpr std::uint32_t kLaneAbsent = ~0U;

// The lane of group, creating it if `create`. Returns kLaneAbsent when it
// does not exist (and !create), kLanesFull when it would need a new lane and
// lane_capacity lanes exist. Lock-free.
inline std::uint32_t lane_lookup(Segment& s, const BrandedId& group, bool create) noexcept {
  const std::uint64_t a = lane_key_a(group), b = lane_key_b(group);
  std::uint64_t i = lane_hash(a, b, s.seed) & s.lane_mask;
  for (std::uint64_t probes = 0; probes <= s.lane_mask; ++probes, i = (i + 1) & s.lane_mask) {
    LaneRecord& l = s.lanes[i];
    // Acquire: a key published by another creator, and the lane word it
    // initialised, are visible once we see the key.
    std::uint64_t ka = l.key_a.load(std::memory_order_acquire);
    if (ka == 0) {
      if (!create) return kLaneAbsent;
      // The table is twice the capacity; lanes_used bounds buckets taken.
      std::uint32_t used = s.h->lanes_used.fetch_add(1, std::memory_order_relaxed);
      if (used >= s.h->lane_capacity) {
        s.h->lanes_used.fetch_sub(1, std::memory_order_relaxed);
        return kLanesFull;
      }
      if (!l.key_a.compare_exchange_strong(ka, a, std::memory_order_acq_rel)) {
        s.h->lanes_used.fetch_sub(1, std::memory_order_relaxed);
        if (ka != a) continue;  // taken by another key
      } else {
        ka = a;
      }
    }
    if (ka != a) continue;
    std::uint64_t kb = l.key_b.load(std::memory_order_acquire);
    if (kb == 0) {
      if (!create) continue;  // someone is creating a lane here; it may or may not be ours
      if (l.key_b.compare_exchange_strong(kb, b, std::memory_order_acq_rel)) return std::uint32_t(i);
    }
    if (kb == b) return std::uint32_t(i);
  }
  return create ? kLanesFull : kLaneAbsent;
}

inline bool lane_in_use(const Segment& s, std::uint32_t i) noexcept {
  return s.lanes[i].key_a.load(std::memory_order_acquire) != 0 && s.lanes[i].key_b.load(std::memory_order_acquire) != 0;
}

inline BrandedId lane_group(const Segment& s, std::uint32_t i) noexcept {
  return group_of(s.lanes[i].key_a.load(std::memory_order_acquire), s.lanes[i].key_b.load(std::memory_order_acquire));
}

}  // namespace fairlane::detail
