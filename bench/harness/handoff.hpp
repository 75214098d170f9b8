// How long one cache line takes to move between two CPUs, measured the way
// the bare flow meets it: two processes, each pinned to one of the CPUs,
// hand a line back and forth (each waits for the other's write, then
// writes). On a shared host the figure changes from run to run (the two
// vCPUs land on cores that share a cache, or not), and the bare flow, whose
// every job moves lines between its producer and its consumer, changes
// with it: the harness measures it next to each bare round, so that a
// reader can tell the host's pace from the code's.
#pragma once

#include <cstdint>
#include <string>

namespace fairlane::bench {

// Does the probe apply to these CPUs: two different ones, both known (a
// worker that is not pinned has -1)? line_handoff_ns declines otherwise.
inline bool handoff_applies(int cpu_a, int cpu_b) noexcept { return cpu_a >= 0 && cpu_b >= 0 && cpu_a != cpu_b; }

// Nanoseconds per handoff (one move of the line, one way), the median of
// `trials` runs of `handoffs` each; 0 with `error` set when it cannot be
// measured (the same CPU twice, a CPU not allowed, fork failed, or the
// other side made no progress for a second).
double line_handoff_ns(int cpu_a, int cpu_b, std::uint32_t handoffs, std::uint32_t trials, std::string& error);

}  // namespace fairlane::bench
