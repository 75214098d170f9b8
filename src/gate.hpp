// The gate: how the segment recovers from a process that died inside an
// operation (docs/design.md section 7).
//
// Every operation that changes the segment runs inside an OpGuard, which
// counts it in the process record's `in_op`. A process SIGKILLed mid-way
// leaves its `in_op` above zero, and whatever it was changing (a slot
// between two states, a count not yet adjusted, a ring token in its
// registers, a lane structure marked busy) is in a state that shared memory
// alone cannot disambiguate. The slot words are still the truth, though,
// and repair (repair.cpp) rebuilds every derived structure from them,
// provided nobody else is changing anything meanwhile.
//
// So a survivor that finds such a dead process (claims and waiters look,
// at most every half of the segment's recovery bound) closes the gate: new operations wait at the
// OpGuard, operations in flight finish (a few microseconds), and once every
// live process's `in_op` is zero it checks and repairs the segment, zeroes
// the dead process's `in_op` and opens the gate. The gate stays closed for
// the repair's length (about a millisecond for a default segment); a live
// process that does not leave its operation in kGateWaitMs (stopped in a
// debugger, say) makes the repair give up and try again later, so that one
// stopped process cannot stop everyone.
//
// A repairer that dies with the gate closed is replaced: waiters judge the
// gate's owner and take the repair over (repair is idempotent: it starts
// from the slots each time).
//
//   [S11] OpGuard: in_op += 1 (seq_cst), then load the gate (seq_cst)
//         repairer: close the gate (seq_cst CAS), then load each in_op (seq_cst)
//         Either the operation sees the gate closed and backs out, or the
//         repairer sees it counted and waits for it: never both miss.
//   [R11] OpGuard's release decrement of in_op / the repairer's load: the
//         operation's writes are visible to the repair.
//   [R12] the repairer's release store opening the gate / the operations'
//         load: the repair's writes are visible to every later operation.
#pragma once

#include <atomic>
#include <cstdint>

#include "segment.hpp"

namespace fairlane::detail {

// How long a repair waits for live processes to leave their operations.
inline constexpr std::uint64_t kGateWaitMs = 100;

// Header::gate: generation (bits 9..31) | holder (bits 0..8, 0 = open).
inline constexpr std::uint32_t kGateHolderBits = 9;
inline constexpr std::uint32_t kGateHolderMask = (1U << kGateHolderBits) - 1;
static_assert(kMaxProcs < kGateHolderMask);
inline constexpr bool gate_open(std::uint32_t g) noexcept { return (g & kGateHolderMask) == 0; }
inline constexpr std::uint32_t gate_holder(std::uint32_t g) noexcept { return g & kGateHolderMask; }

// Waits while the gate is closed; takes over the repair if its owner died.
void gate_wait(Segment& s) noexcept;

class OpGuard {
 public:
  explicit OpGuard(Segment& s) noexcept : s_(s) {
    for (;;) {
      // [S11] seq_cst: announce, then look at the gate.
      s_.me->in_op.fetch_add(1, std::memory_order_seq_cst);
      if (gate_open(s_.h->gate.load(std::memory_order_seq_cst))) return;
      s_.me->in_op.fetch_sub(1, std::memory_order_release);
      gate_wait(s_);
    }
  }
  // [R11] release: this operation's writes happen-before the repair.
  ~OpGuard() { s_.me->in_op.fetch_sub(1, std::memory_order_release); }
  OpGuard(const OpGuard&) = delete;
  OpGuard& operator=(const OpGuard&) = delete;

 private:
  Segment& s_;
};

// If recovery_ms / 2 have passed since anyone last looked (one caller wins),
// looks for a dead process whose in_op is not zero and, if there is one,
// repairs the segment behind the gate. Call outside any OpGuard.
void look_for_dead_operations(Segment& s, std::uint64_t now_ms) noexcept;
inline void recover_dead_operations(Segment& s, std::uint64_t now_ms) noexcept {
  // The common case, inline: someone looked less than recovery_ms / 2 ago.
  const std::uint64_t last = s.h->recovery.ops_checked_ms.load(std::memory_order_relaxed);
  if (last <= now_ms && now_ms < last + s.recovery_ms / 2) return;
  look_for_dead_operations(s, now_ms);
}

// How a gated repair went.
enum class GateRepair { repaired, abandoned, other };

// Closes the gate, waits until no live process is inside an operation (up
// to wait_ms), checks the segment, rebuilds it if it is not clean, zeroes
// the in_op of dead processes, opens the gate. `other`: someone else held
// the gate (we waited for it instead). Call outside any OpGuard.
GateRepair gated_repair(Segment& s, std::uint64_t wait_ms, FsckReport* report) noexcept;

}  // namespace fairlane::detail
