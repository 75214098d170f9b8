// What the transition files (admission, claiming, acknowledgement, sweeping,
// lane controls, inspection) share inside the library.
#pragma once

#include <cstdint>

#include "fairlane/queue.hpp"
#include "id_index.hpp"
#include "lane_order.hpp"
#include "lanes.hpp"
#include "mirror_log.hpp"
#include "segment.hpp"
#include "slots.hpp"

namespace fairlane::detail {

inline constexpr std::uint64_t kNever = ~0ULL;

// ---- ids --------------------------------------------------------------------------------

// A job id of this queue as its snowflake, or false (malformed, or another
// namespace: the status says which).
enum class IdCheck { ok, invalid, kind_mismatch };
IdCheck job_snowflake(const Segment& s, const BrandedId& id, std::uint64_t& sf) noexcept;

// The lane of a group for a call that names one (empty: the default lane).
// create: make it if absent. Returns kNoLane with `find` set otherwise.
std::uint32_t group_lane(Segment& s, const BrandedId& group, bool create, LaneFind& find) noexcept;

// ---- timing -----------------------------------------------------------------------------

// Lowers the earliest deadline/due time the sweep knows of (next_due).
void lower_next_due(Segment& s, std::uint64_t when_ms) noexcept;

// ---- sweeping (sweeping.cpp) ------------------------------------------------------------

// A claim or waiter calls this first: if a chunk of the sweep is due (a
// deadline or due time passed, or the recovery bound since the last pass),
// takes one chunk of the slot table and does what is due in it.
void maybe_sweep(Segment& s, std::uint64_t now_ms) noexcept;
// The whole table at once (tick). Returns how many jobs moved.
std::uint64_t sweep_all(Segment& s, std::uint64_t now_ms) noexcept;

// ---- moving a job back into its lane -----------------------------------------------------

enum class MoveFrom { lease, scheduled, dead };
enum class Moved { ok, changed, corrupt };

// Takes slot (whose word is `from`) back into its lane's strays: fence
// (CAS to returning, owned by us), link, then pending. `attempt` is what the
// pending job keeps (the next claim hands out attempt + 1). A lease coming
// back gives its lane's active count back in the linking CAS; a scheduled or
// dead job gives back its lane's ref. changed: the slot word was not `from`.
Moved move_to_lane(Segment& s, std::uint32_t slot, Word128 from, MoveFrom what, std::uint32_t attempt) noexcept;

// The pending-job side of a fail/park: fills the slot's fail_to.
inline std::uint64_t target_lo(SlotState st, std::uint32_t attempt, std::uint64_t when) noexcept {
  return SlotWord::make(st, attempt, when, 0, 0).lo;
}

// ---- claims (claiming.cpp) ---------------------------------------------------------------

ClaimStatus claim_some(Segment& s, Lease* out, std::size_t room, std::size_t& got, std::uint32_t lease_ms,
                       std::uint64_t now_us, bool one_lane) noexcept;

// Fills a lease from its slot (the caller holds the lease).
void fill_lease(const Segment& s, std::uint32_t slot, std::uint32_t lane, std::uint32_t attempt, Token token,
                std::uint64_t deadline, std::uint64_t now_us, Lease& out);

// ---- finishing what dead processes left half done ---------------------------------------

// Settles the intent of a thread (of a dead process): a job it popped from
// its lane but had not yet leased goes back. Returns whether it did anything.
bool settle_intent(Segment& s, std::atomic<std::uint64_t>& intent, std::atomic<std::uint64_t>& intent_lane) noexcept;

}  // namespace fairlane::detail
