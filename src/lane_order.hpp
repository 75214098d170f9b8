// The order of a lane's pending jobs: oldest (lowest id) first, in two
// lock-free structures that live in the job slots (docs/design.md section 5).
//
//   run     a singly linked list in ascending id order whose head and tail
//           are in the lane word. Jobs enqueued in mint order (nearly all)
//           are appended at the tail: link the tail's `next` (one CAS),
//           then move the lane word's tail (one CAS, which anyone may do
//           for a link it sees). A pop is one CAS of the lane word (head
//           to the head's `next`), the same CAS that counts the lease and
//           moves the ring.
//   strays  a skip list (kStrayLevels levels, p = 1/4) for the rest: jobs
//           that come back (retries, expired leases, promotions, releases)
//           and jobs whose id is older than the run's tail. Insert anywhere
//           (CAS on the predecessor's link, level 0 first); delete only
//           the minimum (mark its links top-down, level 0 last, which
//           decides who owns it; then unlink it from the heads).
//
// A claim takes the smaller of the run's head and the strays' minimum.
//
// Every link carries its owner's insertion tag (Link, layout.hpp): a CAS on
// the link of a node that has since been relinked or reused fails. A node
// is never freed while linked: a pop unlinks it (run: by the pop itself;
// strays: its popper unlinks it, and every marked node before it, from
// every level before it leases it).
//
// Bounds: every slot index read from a link is checked against the table;
// every walk is bounded by the table size (a cycle cannot hang a caller);
// what fails a check is reported as corruption and the call gives up.
#pragma once

#include <cstdint>

#include "lanes.hpp"
#include "segment.hpp"
#include "slots.hpp"

namespace fairlane::detail {

inline std::uint64_t node_tag(std::uint64_t ctr) noexcept { return ctr & Link::kTagMask; }

inline std::atomic<std::uint64_t>& node_link(SlotRecord& r, unsigned level) noexcept {
  return level == 0 ? r.next : r.up[level - 1];
}

// Is `slot1` (slot+1) a slot index of this segment? 0 is "none", never valid here.
inline bool valid_slot1(const Segment& s, std::uint32_t slot1) noexcept { return slot1 != 0 && slot1 <= s.jobs; }

enum class OrderResult { ok, empty, lane_changed, out_of_order, corrupt };

// ---- run ---------------------------------------------------------------------------------

// Appends `slot` (its sf, lane and tag already written; not linked anywhere)
// to lane `lane`'s run. `w` is a reading of the lane word, refreshed here.
// out_of_order: its id is not above the tail's (insert it into strays).
// lane_changed: the lane is no longer live (reclaimed): look the group up again.
OrderResult run_append(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t tag, Word128& w) noexcept;

// ---- strays ------------------------------------------------------------------------------

// Inserts `slot` (not linked anywhere; its sf, lane and tag written) into
// lane `lane`'s strays, then sets the lane word's strays flag (ringing the
// lane if that makes it serviceable), releasing one active count in the same
// CAS when `release_active` (a lease coming back). lane_changed: the lane is
// not live (the caller looks again); nothing was linked then.
OrderResult strays_insert(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t tag,
                          bool release_active) noexcept;

// The strays' minimum (slot+1, 0 if empty) as now linked and unmarked.
std::uint32_t strays_first(Segment& s, std::uint32_t lane, OrderResult& r) noexcept;

// Takes the strays' minimum if it is still `first1`: marks it (the owner is
// whoever marks level 0), unlinks it (and every marked node before it) from
// every level. Returns ok when taken, lane_changed when another took it or
// it is no longer first.
OrderResult strays_take(Segment& s, std::uint32_t lane, std::uint32_t first1) noexcept;

// Is `slot` linked in lane `lane`'s strays (marked or not)? For recovery.
bool strays_contains(Segment& s, std::uint32_t lane, std::uint32_t slot) noexcept;

// Pending jobs of the lane, approximately (run: from the run sequence numbers
// of head and tail; strays: a bounded walk).
std::uint64_t lane_depth(const Segment& s, std::uint32_t lane) noexcept;

}  // namespace fairlane::detail
