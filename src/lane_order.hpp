// The order of a lane's pending jobs: oldest (lowest id) first, in two
// lock-free structures that live in the job slots (docs/design.md, "A
// lane's order").
//
//   run     a singly linked list in ascending id order whose head and tail
//           are in the lane word. The tail is a hint: a node of the run at
//           or before its last one (at most a few links before it, while
//           appends and claims go on). Jobs enqueued in mint order (nearly
//           all) are appended after the last node, found by walking from
//           the tail: one CAS of its `next`, and the lane word is not
//           written. An appender that finds the tail kTailLag
//           links behind moves it up (a CAS anyone may make), and a claim
//           moves it up to two links in the CAS it makes anyway. A pop is one
//           CAS of the lane word (head to the head's `next`), the same CAS
//           that counts the lease and moves the ring. The pop of the last
//           node seals its link first, so that nothing is linked after a
//           node that is leaving.
//   strays  a skip list (kStrayLevels levels, p = 1/4) for the rest: jobs
//           that come back (retries, expired leases, promotions, releases,
//           requeues) and jobs whose id is older than the run's last. Only
//           a job returning to the lane is inserted (it holds an active count
//           of the lane meanwhile, so the lane cannot be reclaimed under it);
//           only the minimum is taken, by a `take` step of the lane word
//           (which decides who has it), then unlinked by its taker.
//
// A claim takes the smaller of the run's head and the strays' minimum.
//
// Run links carry their owner's tag (Link), strays links their owner's and
// their target's (UpLink): a CAS on the link of a node that has since been
// relinked or reused fails, and a search never follows a link into a node
// reused since. A node is never reused while linked at level 0.
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

// A run node's tag: the low 36 bits of its ctr when it was linked.
inline std::uint64_t node_tag(std::uint64_t ctr) noexcept { return ctr & Link::kTagMask; }

// Is `slot1` (slot+1) a slot index of this segment? 0 is "none", never valid here.
inline bool valid_slot1(const Segment& s, std::uint32_t slot1) noexcept { return slot1 != 0 && slot1 <= s.jobs; }

enum class OrderResult { ok, empty, lane_changed, out_of_order, sealed, corrupt };

// ---- run ---------------------------------------------------------------------------------

// How far the lane word's tail may lag behind the run's last node before an
// appender moves it up: the walk an append makes from it, in links.
inline constexpr unsigned kTailLag = 8;

// Appends `slot` (its sf and lane written; not linked anywhere) to group g's
// lane `lane`: as its first node if the run is empty (one CAS of the lane
// word), else after its last node (one link CAS; the lane word's tail is
// moved up only once it lags by kTailLag links).
// `w` is a reading of the lane word, refreshed here; w_checked: the caller
// read g's key in the record after w, with w live (lane_find_cached), so
// the first round need not read it again. Before each link
// attempt it stores what it links after in *pred_intent (0: as the first
// node), for recovery. Returns
//   out_of_order  its id is not above the last node's: it must go to the strays
//   sealed        the last node is being popped by a claimer
//                 that has not finished (perhaps stopped): go to the strays
//   lane_changed  the lane is not g's any more (reclaimed): look it up again
// and in all three the node is not linked.
OrderResult run_append(Segment& s, std::uint32_t lane, GroupKey g, std::uint32_t slot, std::uint64_t tag, Word128& w,
                       std::atomic<std::uint64_t>* pred_intent, bool w_checked = false) noexcept;

// ---- strays ------------------------------------------------------------------------------

// Links `slot` (its sf written; not linked anywhere; ctr its slot word's
// ctr) into lane `lane`'s strays at its key's place, the lane being group
// g's of incarnation `inc` (as lane_find found it). Once linked the lane
// cannot be given back until the node is taken (a reclaim needs empty
// strays); the caller then sets the lane word's strays flag (the `linked`
// step). lane_changed: the lane is not g's any more (nothing linked); ok or
// corrupt.
OrderResult strays_insert(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr, GroupKey g,
                          std::uint64_t inc) noexcept;

// The strays' minimum (slot+1, 0 if empty) as now linked and unmarked, and
// (`head`, if given) the head link that leads to it: its target tag is the
// tag the node was linked with (the low bits of the ctr of the move that
// linked it).
std::uint32_t strays_first(Segment& s, std::uint32_t lane, OrderResult& r, std::uint64_t* head = nullptr) noexcept;

// Marks `slot` taken at every level (idempotent): the `take` step, applied
// while lane `lane`'s word is still `*pending` (the taker itself, whose step
// it is, passes none).
void strays_mark(Segment& s, std::uint32_t slot, std::uint32_t lane = 0, const Word128* pending = nullptr) noexcept;
// Unlinks the marked `slot` (and every marked node before it) from level 0
// of lane `lane`'s strays: after it, the slot may be reused.
OrderResult strays_unlink(Segment& s, std::uint32_t lane, std::uint32_t slot) noexcept;

// Is `slot` linked in lane `lane`'s strays at level 0, unmarked, by the
// move of `ctr` (its node's tag)? One search; for recovery. A corrupt
// list answers false (the search has reported it).
bool strays_holds(Segment& s, std::uint32_t lane, std::uint32_t slot, std::uint64_t ctr) noexcept;

// Pending jobs of the lane, approximately (run: from the run sequence numbers
// of head and tail; strays: a bounded walk).
std::uint64_t lane_depth(const Segment& s, std::uint32_t lane) noexcept;

}  // namespace fairlane::detail
