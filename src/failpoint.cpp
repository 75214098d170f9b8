// Named failpoints (see failpoint.hpp). Compiled to nothing unless
// FAIRLANE_FAILPOINTS is defined (the test build of the library).
#include "failpoint.hpp"

#ifdef FAIRLANE_FAILPOINTS

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fairlane::detail {

const char* const kFailpoints[] = {
    // enqueue (queue.cpp: admit)
    "enqueue.slot_taken",     // popped a free slot, nothing written yet
    "enqueue.admitting",      // slot is admitting with its fields, not indexed
    "enqueue.indexed",        // id committed in the index, slot still admitting
    "enqueue.pending",        // slot pending, not yet in its lane's intake
    // a slot entering its lane (enqueue, retry, expiry, requeue)
    "lane.intake_pushed",     // on the intake, not yet counted in the lane word
    "lane.ringed",            // lane word says ringed, token not yet pushed
    "ring.cell_filled",       // token in its cell, ring tail not yet moved
    // claim (queue.cpp: claim_some)
    "ring.cell_taken",        // token taken from its cell, ring head not yet moved
    "claim.token_taken",      // holding a token, nothing reserved
    "claim.reserved",         // jobs reserved and the lane structure owned (busy)
    "claim.token_returned",   // token back in the ring, structure still owned
    "claim.popped",           // jobs out of the lane structure, structure still owned
    "claim.released",         // structure released, jobs not yet leased
    "claim.leased",           // a job leased (published), the claim not finished
    // complete / fail
    "complete.freeing",       // lease taken (freeing), index entry still there
    "free.unindexed",         // index entry gone, slot still freeing
    "free.freed",             // slot free, not yet on the free list
    "complete.freed",         // slot on the free list, lane's active not released
    "fail.taken",             // lease taken (freeing), no new state yet
    "fail.pending",           // back to pending, not yet in its lane
    "fail.scheduled",         // scheduled for a retry, lane's active not released
    "fail.dead",              // dead-lettered, lane's active not released
    // sweep
    "sweep.returned",         // an expired lease taken back (pending), not in its lane
    // drain
    "drain.owned",            // lane structure owned by the drain
    "drain.counted",          // one job uncounted, not yet popped
    // the gate's repair (gate.cpp)
    "repair.closed",          // gate closed, nothing repaired yet
    "repair.rebuilt",         // structures rebuilt, gate still closed
};
const std::size_t kFailpointCount = sizeof kFailpoints / sizeof kFailpoints[0];

namespace {

char armed[64];
std::atomic<unsigned> remaining{0};
std::atomic<bool> env_read{false};
std::atomic<int> action{int(FailpointAction::kill)};

bool known(const char* name) noexcept {
  for (std::size_t i = 0; i < kFailpointCount; ++i)
    if (std::strcmp(kFailpoints[i], name) == 0) return true;
  return false;
}

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

void failpoint_hit(const char* name) noexcept {
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
