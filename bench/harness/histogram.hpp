// A log-linear latency histogram: fixed size, no allocation, trivially
// copyable, so a worker can copy it into the shared control block and the
// orchestrator can merge the copies of every worker by adding counts.
//
//   value < 16                : bucket = value (exact)
//   value in [2^e, 2^(e+1))   : bucket = (e - 3) * 16 + ((value >> (e - 4)) & 15)
//
// Sixteen linear sub-buckets per power of two: a reported percentile is
// within 1/32 (3 %) of the true value. Values are nanoseconds; values of
// 2^45 ns (about 9.8 hours) and more land in the top bucket.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <type_traits>

namespace fairlane::bench {

class Histogram {
 public:
  static constexpr int kSubBits = 4;
  static constexpr int kSub = 1 << kSubBits;   // 16 sub-buckets per power of two
  static constexpr int kMaxExp = 44;           // values >= 2^45 land in the top bucket
  static constexpr int kBuckets = (kMaxExp - kSubBits + 2) * kSub;  // row 0 exact, rows 1.. per power

  void record(std::uint64_t v) noexcept {
    ++counts_[index(v)];
    ++count_;
    sum_ += v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }

  void merge(const Histogram& o) noexcept {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
  }

  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return count_ ? double(sum_) / double(count_) : 0.0; }

  // The value at quantile q in [0, 1]: the midpoint of the bucket holding
  // the ceil(q * count)-th smallest sample, clamped to [min, max].
  std::uint64_t percentile(double q) const noexcept {
    if (count_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * double(count_) + 0.999999);
    rank = std::clamp<std::uint64_t>(rank, 1, count_);
    std::uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::clamp(midpoint(i), min(), max_);
    }
    return max_;
  }

  static constexpr int index(std::uint64_t v) noexcept {
    if (v < std::uint64_t(kSub)) return int(v);
    int e = 63 - std::countl_zero(v);
    if (e > kMaxExp) return kBuckets - 1;
    int sub = int((v >> (e - kSubBits)) & (kSub - 1));
    return (e - kSubBits + 1) * kSub + sub;
  }
  static constexpr std::uint64_t lower_bound(int i) noexcept {
    if (i < kSub) return std::uint64_t(i);
    int e = i / kSub + kSubBits - 1;
    return (std::uint64_t(kSub) + std::uint64_t(i % kSub)) << (e - kSubBits);
  }
  static constexpr std::uint64_t midpoint(int i) noexcept {
    if (i < kSub) return std::uint64_t(i);
    int e = i / kSub + kSubBits - 1;
    return lower_bound(i) + ((std::uint64_t(1) << (e - kSubBits)) >> 1);
  }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t min_ = ~std::uint64_t(0);
  std::uint64_t max_ = 0;
};

static_assert(std::is_trivially_copyable_v<Histogram>);
static_assert(Histogram::kBuckets == 672);
static_assert(Histogram::index(~std::uint64_t(0)) == Histogram::kBuckets - 1);

}  // namespace fairlane::bench
