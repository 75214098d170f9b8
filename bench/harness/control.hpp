// The harness's own control block: a POSIX shared-memory object the
// orchestrator creates for one run of one peer and every worker maps.
//
// It carries the run parameters, the start barrier, the phase word that
// paces every worker, one slot per worker (its live counter and, at exit,
// its histograms and errors) and each consumer's record of the served
// sequence (for the fairness analysis). It is the measuring instrument, not
// a queue under test: nothing here is on a peer's own code path except the
// relaxed phase load and the counter stores the loops make.
//
// Layout: [ControlHeader][WorkerSlot x workers][TraceRec x trace_cap x consumers]
//         [admitted ns x admit_cap x producers][TraceRec x trace_cap x consumers (drain)]
//
// "admitted" is when a producer's enqueue call had surely returned: the
// stamp of its next job (the loop does nothing else in between). A job was
// waiting in its lane at least from then until its claim, which is what the
// fairness analysis needs; the stamp itself precedes the enqueue call and a
// producer descheduled inside that call would make its lane look backlogged
// while it was not.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <type_traits>

#include "histogram.hpp"
#include "options.hpp"

namespace fairlane::bench {

// Phases, in order. Workers only ever see the word grow.
enum Phase : std::uint32_t {
  kInit = 0,     // workers attach and count themselves in `ready`
  kWarmup = 1,   // flow: producers and consumers run, nothing recorded
  kMeasure = 2,  // flow: everything recorded
  kRounds = 3,   // drain rounds, paced by ControlHeader::round_state
  kWake = 4,     // producer 0 and consumer 0 time wake-ups of a parked consumer
  kDone = 5,     // everyone leaves (set only when the wake test overruns)
};

// Drain round r: round_state 2r = fill (consumers idle, producers enqueue up
// to Params::drain_jobs), 2r + 1 = drain (producers idle, consumers
// claim+complete until the queue is empty). The first round runs on a fresh
// segment (its pages are faulted in as they are first touched); later
// rounds show the steady state. After the Params::drain_rounds timed rounds
// comes one more whose served sequence is recorded (a clock read per claim,
// so it is not timed): every lane with jobs left is backlogged, which makes
// it the clean fairness test.
inline constexpr std::uint32_t kMaxRounds = 5;

// Batch mode (Mode::batch) has its own rounds, paced by round_state as well:
// 2r + 1 = round r's fill (producers alone), 2r + 2 = its drain (consumers
// alone). Round 0 warms the segment with single calls (not reported), round
// 1 uses single calls, round 2 batch calls.
inline constexpr std::uint32_t kBatchRounds = 3;

enum class Role : std::uint32_t { producer, consumer };

// The CPU a worker runs on under `p.placement`, from the CPUs the harness may
// use (ascending); -1: not pinned (placement os, or no CPU list).
inline int placement_cpu(const Params& p, Role r, std::uint32_t index, const std::vector<int>& cpus) noexcept {
  if (p.placement == Placement::os || cpus.empty()) return -1;
  if (p.placement == Placement::shared) return cpus[0];
  const std::uint64_t at = r == Role::producer ? index : std::uint64_t(p.producers) + index;
  return cpus[at % cpus.size()];
}

// One claim of the served sequence.
struct TraceRec {
  std::uint32_t lane;
  std::uint32_t tag;       // the job's Stamp::tag
  std::uint64_t enq_ns;    // producer's CLOCK_MONOTONIC stamp (before its enqueue call)
  std::uint64_t claim_ns;  // consumer's CLOCK_MONOTONIC just before the claim call
};
static_assert(sizeof(TraceRec) == 24 && std::is_trivially_copyable_v<TraceRec>);

enum class SlotState : std::int32_t { running = 0, done = 1, failed = 2 };

struct alignas(64) WorkerSlot {
  // Hot: producers store how many they enqueued, consumers how many they
  // claimed (relaxed, every few operations). Producers read every slot's
  // counter to hold the backlog under Params::backlog; the orchestrator reads
  // them for progress. Approximate by design; nothing else depends on them.
  std::atomic<std::uint64_t> count;
  char pad0[56];

  // Cold: written once by the owner before it sets `state` (release); read by
  // the orchestrator after it observed `state` (acquire) or reaped the process.
  std::atomic<std::int32_t> state;
  std::int32_t pid;
  std::uint64_t measured;       // consumer: cycles claimed in kMeasure; producer: enqueues
  std::uint64_t full_retries;   // producer: enqueue refused (full), retried
  std::uint64_t empty_polls;    // consumer: claim found nothing
  std::uint64_t trace_len;      // records written to this consumer's flow trace
  std::uint64_t drain_trace_len;  // records written to its drain trace
  std::uint64_t vmhwm_kb;       // the process's VmHWM at exit, less the harness's own pages (below)
  std::uint64_t harness_kb;     // resident pages of this control block (traces, histograms) at exit
  std::uint64_t wake_timeouts;  // wake rounds abandoned
  std::uint64_t admit_first;    // producer: sequence number of admitted[0] (its first job in kMeasure)
  std::uint64_t admit_len;      // producer: entries written to admitted[]
  std::uint64_t drained[kMaxRounds];   // consumer: jobs claimed+completed in each drain
  std::uint64_t drain_t0[kMaxRounds];  // consumer: when it saw the drain start (ns)
  std::uint64_t drain_t1[kMaxRounds];  // consumer: when it first found the queue empty for good (ns)
  std::uint64_t drain_cpu[kMaxRounds]; // consumer: its thread's CPU time over the same stretch (ns)
  std::uint64_t drain_faults[kMaxRounds];  // consumer: its thread's minor page faults over it
  // Bare flow (Mode::bare): when this worker started and finished its part
  // (ns), the jobs it moved and its thread's CPU time over them.
  std::uint64_t bare_t0, bare_t1, bare_n, bare_cpu;
  // Batch mode, per round: a producer's fill (start, end, jobs); a
  // consumer's time inside its claim calls and its complete calls (batch
  // rounds only: single calls are not timed one by one).
  std::uint64_t fill_t0[kMaxRounds], fill_t1[kMaxRounds], fill_n[kMaxRounds];
  std::uint64_t claim_call_ns[kMaxRounds], complete_call_ns[kMaxRounds];
  char error[256];
  Histogram claim_ns;   // claim call, ns
  Histogram e2c_ns;     // enqueue stamp to claim return, ns
  Histogram wake_ns;    // enqueue stamp to wake-up of a parked consumer, ns
};
static_assert(std::is_standard_layout_v<WorkerSlot>);

struct ControlHeader {
  std::uint64_t magic;
  std::uint64_t bytes;
  Params params;
  char peer[64];
  char info[512];              // written by Peer::setup for the workers
  std::uint32_t workers;       // producers + consumers
  std::uint64_t slots_offset;
  std::uint64_t trace_offset;
  std::uint64_t admit_offset;
  std::uint64_t admit_cap;     // admitted[] entries per producer
  std::uint64_t drain_trace_offset;

  // The phase word: written by the orchestrator only (release), polled by
  // every worker (relaxed in the hot loops: a phase change a few operations
  // late shifts a boundary by nanoseconds; acquire where a worker then reads
  // something the orchestrator wrote, which is nothing after kInit).
  alignas(64) std::atomic<std::uint32_t> phase;
  // The start barrier: each worker adds 1 once attached.
  alignas(64) std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> producers_stopped;  // producers done with flow and fills
  std::atomic<std::uint32_t> round_state;        // see kRounds
  std::atomic<std::uint32_t> fill_done;          // fills finished, summed over producers and rounds
  std::atomic<std::uint32_t> drain_done;         // drains finished, summed over consumers and rounds
  // Wake test handshake: consumer 0 stores round k (release) just before it
  // parks; producer 0 waits to see k (acquire), then stamps and enqueues.
  std::atomic<std::uint32_t> wake_parked;
  std::atomic<std::uint32_t> abort;  // a worker failed: everyone stops
};
inline constexpr std::uint64_t kControlMagic = 0x4642454e43480002ULL;  // "FBENCH" v2

class Control {
 public:
  Control() = default;
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;
  Control(Control&& o) noexcept { *this = std::move(o); }
  Control& operator=(Control&& o) noexcept;
  ~Control();

  // Orchestrator: create, zero and fill the header. Unlinked by the destructor.
  static bool create(Control& out, const std::string& name, const Params& params,
                     const std::string& peer, std::string& error);
  // Worker: map an existing block.
  static bool open(Control& out, const std::string& name, std::string& error);

  ControlHeader& header() const noexcept { return *static_cast<ControlHeader*>(base_); }
  const Params& params() const noexcept { return header().params; }
  WorkerSlot& slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<WorkerSlot*>(static_cast<char*>(base_) + header().slots_offset)[i];
  }
  // Slot index of a role's i-th worker: producers first, then consumers.
  std::uint32_t slot_index(Role r, std::uint32_t i) const noexcept {
    return r == Role::producer ? i : params().producers + i;
  }
  TraceRec* trace(std::uint32_t consumer) const noexcept {
    return reinterpret_cast<TraceRec*>(static_cast<char*>(base_) + header().trace_offset) +
           std::size_t(consumer) * params().trace_cap;
  }
  TraceRec* drain_trace(std::uint32_t consumer) const noexcept {
    return reinterpret_cast<TraceRec*>(static_cast<char*>(base_) + header().drain_trace_offset) +
           std::size_t(consumer) * params().trace_cap;
  }
  std::uint64_t* admitted(std::uint32_t producer) const noexcept {
    return reinterpret_cast<std::uint64_t*>(static_cast<char*>(base_) + header().admit_offset) +
           std::size_t(producer) * header().admit_cap;
  }
  // Resident bytes of this mapping (mincore): the instrument's own memory,
  // which every worker's VmHWM includes and the report takes out again.
  std::uint64_t resident_bytes() const noexcept;
  const std::string& name() const noexcept { return name_; }

 private:
  void release() noexcept;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
};

}  // namespace fairlane::bench
