#include "fairness.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace fairlane::bench {

namespace {

using Interval = std::pair<std::uint64_t, std::uint64_t>;  // [enqueued, claimed]

void merge_intervals(std::vector<Interval>& v) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  std::size_t out = 0;
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (v[i].first <= v[out].second) v[out].second = std::max(v[out].second, v[i].second);
    else v[++out] = v[i];
  }
  v.resize(out + 1);
}

// Was one of the lane's jobs waiting during all of [ts, te]?
bool covered(const std::vector<Interval>& v, std::uint64_t ts, std::uint64_t te) {
  auto it = std::upper_bound(v.begin(), v.end(), ts, [](std::uint64_t t, const Interval& iv) { return t < iv.first; });
  if (it == v.begin()) return false;
  --it;
  return it->second >= te;
}

}  // namespace

FairnessResult analyze_fairness(std::vector<TraceRec>& recs, std::uint32_t lanes, std::uint64_t window,
                                const AdmittedAt& admitted_at, ServedSeries* series) {
  FairnessResult r;
  recs.erase(std::remove_if(recs.begin(), recs.end(), [&](const TraceRec& t) { return t.lane >= lanes; }),
             recs.end());
  if (recs.size() < 2) return r;
  std::stable_sort(recs.begin(), recs.end(),
                   [](const TraceRec& a, const TraceRec& b) { return a.claim_ns < b.claim_ns; });
  const std::size_t n = recs.size();
  r.claims = n;
  r.period_s = double(recs.back().claim_ns - recs.front().claim_ns) / 1e9;

  std::vector<std::vector<Interval>> iv(lanes);
  std::vector<std::uint64_t> total(lanes, 0);
  for (const auto& t : recs) {
    ++total[t.lane];
    const std::uint64_t in = admitted_at(t.tag);
    if (in != 0 && in < t.claim_ns) iv[t.lane].emplace_back(in, t.claim_ns);
  }
  std::vector<std::uint32_t> seen;
  for (std::uint32_t l = 0; l < lanes; ++l) {
    if (total[l]) ++r.lanes_served;
    if (iv[l].empty()) continue;
    merge_intervals(iv[l]);
    seen.push_back(l);
  }

  const std::size_t w = std::size_t(std::min<std::uint64_t>(std::max<std::uint64_t>(window, 2), n));
  const std::size_t step = std::max<std::size_t>(1, w / 4);
  r.window = w;
  std::vector<std::uint64_t> count(lanes, 0);
  for (std::size_t i = 0; i < w; ++i) ++count[recs[i].lane];
  double jain_sum = 0, spread_sum = 0, k_sum = 0;
  std::vector<std::uint64_t> spreads;
  r.jain_min = 1.0;
  for (std::size_t lo = 0;;) {
    const std::uint64_t ts = recs[lo].claim_ns, te = recs[lo + w - 1].claim_ns;
    double sum = 0, sumsq = 0;
    std::uint64_t mn = std::numeric_limits<std::uint64_t>::max(), mx = 0, k = 0;
    for (std::uint32_t l : seen) {
      if (!covered(iv[l], ts, te)) continue;
      const double x = double(count[l]);
      sum += x;
      sumsq += x * x;
      mn = std::min(mn, count[l]);
      mx = std::max(mx, count[l]);
      ++k;
    }
    if (k >= 2) {
      const double jain = sumsq > 0 ? sum * sum / (double(k) * sumsq) : 0.0;
      ++r.windows;
      jain_sum += jain;
      r.jain_min = std::min(r.jain_min, jain);
      spread_sum += double(mx - mn);
      r.spread_max = std::max(r.spread_max, mx - mn);
      spreads.push_back(mx - mn);
      k_sum += double(k);
    }
    if (lo + w + step > n) break;
    for (std::size_t i = 0; i < step; ++i) {
      --count[recs[lo + i].lane];
      ++count[recs[lo + w + i].lane];
    }
    lo += step;
  }
  if (r.windows) {
    r.jain_mean = jain_sum / double(r.windows);
    r.spread_mean = spread_sum / double(r.windows);
    r.backlogged_mean = k_sum / double(r.windows);
    std::sort(spreads.begin(), spreads.end());
    r.spread_p99 = spreads[std::min(spreads.size() - 1, std::size_t(double(spreads.size()) * 0.99))];
  } else {
    r.jain_min = 0;
  }

  if (series) {
    std::vector<std::uint32_t> pick{0, 1, 2, 3, 4, lanes / 10, lanes / 4, lanes / 2, lanes - 1};
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
    pick.erase(std::remove_if(pick.begin(), pick.end(), [&](std::uint32_t l) { return l >= lanes; }), pick.end());
    constexpr std::size_t kBuckets = 100;
    const std::uint64_t t0 = recs.front().claim_ns;
    const std::uint64_t span = std::max<std::uint64_t>(recs.back().claim_ns - t0, 1);
    const double bucket_s = double(span) / 1e9 / double(kBuckets);
    series->lanes = pick;
    series->t_s.resize(kBuckets);
    for (std::size_t b = 0; b < kBuckets; ++b) series->t_s[b] = double(b + 1) * bucket_s;
    series->served.assign(pick.size(), std::vector<double>(kBuckets, 0.0));
    std::vector<int> slot(lanes, -1);
    for (std::size_t i = 0; i < pick.size(); ++i) slot[pick[i]] = int(i);
    for (const auto& t : recs) {
      if (slot[t.lane] < 0) continue;
      auto b = std::min<std::size_t>(std::size_t(double(t.claim_ns - t0) / double(span) * kBuckets), kBuckets - 1);
      series->served[std::size_t(slot[t.lane])][b] += 1.0;
    }
    for (auto& row : series->served)
      for (std::size_t b = 1; b < kBuckets; ++b) row[b] += row[b - 1];
    series->served_total.resize(pick.size());
    for (std::size_t i = 0; i < pick.size(); ++i) series->served_total[i] = total[pick[i]];
  }
  return r;
}

}  // namespace fairlane::bench
