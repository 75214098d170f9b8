// Named failpoints (see failpoint.hpp). Compiled to nothing unless
// FAIRLANE_FAILPOINTS is defined (the test build of the library).
#include "failpoint.hpp"

#ifdef FAIRLANE_FAILPOINTS

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fairlane::detail {

const char* const kFailpoints[] = {
    // a lane's creation and reclaim (lanes.cpp)
    "lane.creating",          // a free lane record taken by its CAS (creating), its key not yet written
    "lane.record_taken",      // a free lane record taken (creating), no directory entry yet
    "lane.entry_tentative",   // its directory entry written tentative, rivals not yet looked at
    "lane.entry_live",        // the entry committed live, the record still creating
    "lane.sealed",            // an idle lane's strays sealed for its reclaim, its word not yet freed
    "lane.reclaimed",         // an idle lane's word freed, its directory entry not yet cleared
    "lane.step_applied",      // a lane word step applied to its slot (the word still names it)
    "lane.settings_written",  // a setting written, the lane word not yet moved (lane_controls.cpp)
    // enqueue (admission.cpp)
    "enqueue.slot_taken",     // a slot taken (admitting), the job not yet written
    "enqueue.lane_found",     // the job written, its lane found or made, not linked
    "run.appended_first",     // linked as its run's first node (lane word CAS), not indexed
    "run.walked",             // walked to the run's last node and re-read the lane word, not linked
    "run.linked",             // linked after the run's last node (the lane word not written), not indexed
    "enqueue.indexed",        // its index entry written, the admission not decided
    "enqueue.committed",      // committed, the enqueue not finished
    // claim (claiming.cpp)
    "claim.intent_set",       // a take's intent written (the front's slot and ctr), its CAS not made
    "claim.sealed",           // the run's last node sealed for its pop, not popped
    "claim.chosen",           // the take's CAS computed (a cell pushed for the token), not made
    "claim.taken",            // the job out of its lane (popped or named by a take), not leased
    "strays.marked",          // a strays node marked taken, not unlinked
    "claim.token_moved",      // the token's old cell passed
    "claim.leased",           // the job leased, the claim not finished
    // acknowledgements (acks.cpp)
    "ack.stepped",            // the lease's lane step made, not applied to its slot
    "expire.checked",         // an expiry checked the lease (due by its clock), its mark not made
    "expire.marked",          // an expiry's mark made and the slot read again, its lane step not made
    "extend.checked",         // an extend checked the lease (its deadline ahead by its clock), its CAS not made
    "fail.plan_in",           // a fail's plan (delay or dead letter) in the slot's run_seq, its step not made
    "complete.done",          // completed, the call not finished
    "fail.planned",           // a fail's lease checked and its plan chosen, nothing written
    "fail.stepped",           // a fail's step made and applied, the retry not yet linked
    "release.stepped",        // a release's step made and applied, the job not yet linked
    // a job back into its lane (acks.cpp)
    "move.claimed",           // a scheduled or dead job taken (returning) to go back to its lane
    "move.taken",             // a returning job taken for linking, not linked
    "strays.found",           // its place in its lane's strays found, not linked
    "strays.linked",          // linked in its lane's strays, the linked step not yet made
    "move.linked",            // the linked step made, not applied
    "slot.freed",             // a husk freed (the call that popped it not finished)
    // the sweep (sweeping.cpp)
    "sweep.expired",          // an expired lease stepped back, not yet linked
    "sweep.promoted",         // a due job back in its lane
    "recover.popped",         // a dead claimer's job taken back (returning), not yet linked
    "settle.appended",        // a dead appender's link intent about to be judged (linked or not)
    // lane controls and dead letters (lane_controls.cpp, inspection.cpp)
    "drain.removed",          // one drained job completed, the drain not finished
    "reassign.copied",        // the copy written and indexed (undecided), the origin still pending
    "reassign.dropped",       // the origin dropped (a husk naming the copy), the copy not decided
    "reassign.committed",     // the copy committed, not yet in its new lane
    "dead.purged",            // one dead job freed, the purge not finished
};
const std::size_t kFailpointCount = sizeof kFailpoints / sizeof kFailpoints[0];

// Places where a test may only step in (failpoint_call), not kill: a death
// at one leaves what a death at the failpoint before it leaves.
const char* const kStepPoints[] = {
    "run.seal_seen",      // an append found its run's last node sealed under a new lane word (as enqueue.lane_found)
    "index.rival_read",   // a slot found by its id's index entry, its word read once, not yet read again (reads only)
    "admit.way_read",     // an admission's first scan read one way of its id's buckets, not the next (reads only)
    "index.killed",       // an admission killed (its CAS made), the call not returned (as the step before)
    "decide.way_read",    // decide's scan read one way of the id's buckets, not the next (reads only)
    "decide.rival_seen",  // a rival of decide's read (its word and id agree), not yet acted on (reads only)
    "decide.rival",       // an admission's rival scanned, about to be read (as enqueue.indexed, or a step of decide's before)
    "ring.head_read",     // a ring step's head read, its cell not yet (reads only)
    "ring.cell_read",     // a ring step's head and cell read, the lane's word not yet (reads only)
    "strays.node_read",   // a strays search led to a node, whose own link it has not read yet (reads only)
    "claim.front_read",   // the strays' minimum found, its slot word not yet read (reads only)
    "sweep.link_found",   // a dead mover's job found linked in its lane's strays, the linked step not made (reads only)
    "decide.moved",       // a move's target about to be decided, as its caller found it (reads only since)
    "reassign.found",     // a reassign's job found by its id, its slot word not yet read (reads only)
    "reassign.tagged",    // the copy's slot taken and its admission tag moved, not published (as enqueue.slot_taken)
    "alloc.block_looked", // an allocator found no free slot in a block it looked over (owning the look or not), its hint not yet written
    "alloc.group_looked", // an allocator owns a group's look and read every block of it none, the group's none not yet written
    "liveness.judged",    // a process record's owner judged, the verdict not yet stored (a cache only)
    "mirror.records_read",  // the mirror read a batch of log records (cells given back), the slots they name not yet read
    "mirror.resync_slot",   // a resync's scan about to read its next slot (reads only)
    "attach.lock_busy",     // an attacher found a free record's liveness lock busy, about to wait and look again (holds no word)
    "park.sleep",           // a parked consumer worked out when its sleep ends, its futex wait not yet made (counted in waiters)
    "room.sleep",           // a parked producer made its last look (full), its futex wait not yet made (counted in room_waiters)
    "extend.moved",         // an extend that found an expiry's mark moved the lane word on, the mark not yet voided
    "lane.sleep",           // a producer parked for a lane made its last look (lanes_full), its futex wait not yet made
    "repair.looked",        // a repair found no other live process attached, nothing yet rewritten (reads only)
};

namespace {

char armed[64];
std::atomic<unsigned> remaining{0};
std::atomic<bool> env_read{false};
std::atomic<int> action{int(FailpointAction::kill)};

template <std::size_t N>
bool listed(const char* const (&list)[N], const char* name) noexcept {
  return std::any_of(std::begin(list), std::end(list), [&](const char* p) { return std::strcmp(p, name) == 0; });
}

bool known(const char* name) noexcept { return listed(kFailpoints, name); }

void read_env() noexcept {
  bool expected = false;
  if (!env_read.compare_exchange_strong(expected, true)) return;
  const char* v = std::getenv("FAIRLANE_FAILPOINT");
  if (!v || !*v) return;
  char name[sizeof armed] = {};
  std::strncpy(name, v, sizeof name - 1);
  // name[:nth][:stop]: the nth time the point is reached (default 1), kill
  // the process there, or stop it (SIGSTOP) when ":stop" is given.
  unsigned nth = 1;
  FailpointAction act = FailpointAction::kill;
  if (char* colon = std::strchr(name, ':')) {
    *colon = 0;
    char* rest = colon + 1;
    if (std::strcmp(rest, "stop") == 0) {
      act = FailpointAction::stop;
    } else {
      char* end = nullptr;
      nth = unsigned(std::strtoul(rest, &end, 10));
      if (end && std::strcmp(end, ":stop") == 0) act = FailpointAction::stop;
    }
  }
  failpoint_arm(name, nth ? nth : 1, act);
}

}  // namespace

void failpoint_arm(const char* name, unsigned nth, FailpointAction act) noexcept {
  env_read.store(true);
  action.store(int(act));
  if (!name || !*name) {
    remaining.store(0);
    return;
  }
  if (!known(name)) {
    std::fprintf(stderr, "fairlane: unknown failpoint '%s'\n", name);
    std::abort();
  }
  std::strncpy(armed, name, sizeof armed - 1);
  remaining.store(nth);
}

namespace {

// Up to four points called at once (a test may step in at one place on one
// thread and at another on a second thread). A registration's name is
// written before its function is published, and read after it is seen.
struct Call {
  char name[64] = {};
  std::atomic<void (*)(void*)> fn{nullptr};
  std::atomic<void*> arg{nullptr};
};
Call calls[4];

}  // namespace

void failpoint_call(const char* name, void (*fn)(void*), void* arg) noexcept {
  if (!name || !(known(name) || listed(kStepPoints, name))) {
    std::fprintf(stderr, "fairlane: unknown failpoint '%s'\n", name ? name : "");
    std::abort();
  }
  Call* free = nullptr;
  for (Call& c : calls) {
    if (c.fn.load() && std::strcmp(c.name, name) == 0) {
      c.fn.store(nullptr);  // replaced or disarmed
      free = &c;
      break;
    }
    if (!free && !c.fn.load()) free = &c;
  }
  if (!fn) return;
  if (!free) {
    std::fprintf(stderr, "fairlane: more than 4 failpoints called at once ('%s')\n", name);
    std::abort();
  }
  std::memset(free->name, 0, sizeof free->name);
  std::strncpy(free->name, name, sizeof free->name - 1);
  free->arg.store(arg);
  free->fn.store(fn);
}

void failpoint_hit(const char* name) noexcept {
  for (Call& c : calls)
    if (void (*fn)(void*) = c.fn.load(); fn && std::strcmp(c.name, name) == 0) fn(c.arg.load());
  read_env();
  if (remaining.load(std::memory_order_relaxed) == 0) return;
  if (std::strcmp(armed, name) != 0) return;
  if (remaining.fetch_sub(1) != 1) return;
  // Stop: the process stays inside its operation, exactly here, until a
  // SIGCONT; then it goes on (the point fires once).
  ::raise(action.load() == int(FailpointAction::stop) ? SIGSTOP : SIGKILL);
}

}  // namespace fairlane::detail

#endif
