// Fairness of a served sequence.
//
// The consumers' records (TraceRec: lane, job tag, claim time) are merged by
// claim time into one served sequence. A lane is *backlogged* at time t if
// one of its jobs was surely waiting then: admitted (its producer's enqueue
// call had returned) before t, claimed after t; each lane's waiting
// intervals are unioned. Jobs without an admitted time count as not waiting. The sequence is cut
// into sliding windows of W claims (step W/4); in each window the lanes
// backlogged throughout it are compared:
//   - Jain's index (sum x)^2 / (n * sum x^2) of their served counts
//     (1 = equal shares, 1/n = one lane got everything);
//   - the spread, max - min of their served counts.
// Invariant 5 of the design: with C consumers the spread stays within C in
// any window (plus the timestamp merge's own jitter, a claim or two).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "control.hpp"

namespace fairlane::bench {

struct FairnessResult {
  std::uint64_t claims = 0;          // served-sequence length analysed
  double period_s = 0;               // time it spans
  std::uint64_t window = 0;          // claims per window
  std::uint64_t windows = 0;         // windows with >= 2 backlogged lanes
  double backlogged_mean = 0;        // lanes backlogged throughout a window, on average
  double jain_mean = 0, jain_min = 0;
  std::uint64_t spread_max = 0;      // the largest spread of any window
  std::uint64_t spread_p99 = 0;      // 99 % of windows have a spread at most this
  double spread_mean = 0;
  std::uint32_t lanes_served = 0;    // distinct lanes in the sequence
};

// Served counts over time of a few tenants, for the chart.
struct ServedSeries {
  std::vector<std::uint32_t> lanes;          // tenant indexes shown
  std::vector<double> t_s;                   // bucket ends, seconds from the start
  std::vector<std::vector<double>> served;   // [lane][bucket] claims served so far (cumulative)
  std::vector<std::uint64_t> served_total;   // [lane] claims in the sequence
};

// When the job with this tag was surely in the queue (ns), 0 if unknown.
using AdmittedAt = std::function<std::uint64_t(std::uint32_t tag)>;

// `recs` is consumed (sorted in place).
FairnessResult analyze_fairness(std::vector<TraceRec>& recs, std::uint32_t lanes, std::uint64_t window,
                                const AdmittedAt& admitted_at, ServedSeries* series);

}  // namespace fairlane::bench
