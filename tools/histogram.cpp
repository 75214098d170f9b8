// Log-linear histogram (see histogram.hpp).
#include "histogram.hpp"

#include <bit>
#include <cmath>

namespace fairlane::cli {

Histogram::Histogram() : counts_(kBuckets, 0) {}

// v < 32: bucket v. Otherwise v = 1.sss * 2^e with e >= 5: the bucket is
// picked by e and the 5 bits below the leading one.
std::size_t Histogram::index_of(std::uint64_t v) noexcept {
  if (v < kSub) return static_cast<std::size_t>(v);
  unsigned e = static_cast<unsigned>(std::bit_width(v)) - 1;  // 5..63
  unsigned shift = e - kSubBits;
  std::uint64_t sub = (v >> shift) - kSub;  // 0..31
  return static_cast<std::size_t>(kSub + shift * kSub + sub);
}

std::uint64_t Histogram::upper_of(std::size_t index) noexcept {
  if (index < kSub) return index;
  std::size_t shift = (index - kSub) / kSub;
  std::uint64_t sub = (index - kSub) % kSub;
  std::uint64_t lower = (kSub + sub) << shift;
  return lower + ((std::uint64_t{1} << shift) - 1);
}

void Histogram::record(std::uint64_t v) noexcept {
  ++counts_[index_of(v)];
  ++count_;
  sum_ += v;
  if (v > max_) max_ = v;
}

void Histogram::merge(const Histogram& other) {
  for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  if (other.max_ > max_) max_ = other.max_;
}

double Histogram::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

std::uint64_t Histogram::percentile(double p) const noexcept {
  if (count_ == 0) return 0;
  double want = std::ceil(p / 100.0 * static_cast<double>(count_));
  std::uint64_t rank = want < 1.0 ? 1 : static_cast<std::uint64_t>(want);
  if (rank > count_) rank = count_;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(upper_of(i), max_);
  }
  return max_;
}

nlohmann::json Histogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i < kBuckets; ++i)
    if (counts_[i] != 0) buckets.push_back({i, counts_[i]});
  return {{"count", count_}, {"sum", sum_}, {"max", max_}, {"buckets", std::move(buckets)}};
}

Histogram Histogram::from_json(const nlohmann::json& j) {
  Histogram h;
  h.count_ = j.at("count").get<std::uint64_t>();
  h.sum_ = j.at("sum").get<std::uint64_t>();
  h.max_ = j.at("max").get<std::uint64_t>();
  for (const auto& b : j.at("buckets")) {
    std::size_t i = b.at(0).get<std::size_t>();
    if (i < kBuckets) h.counts_[i] += b.at(1).get<std::uint64_t>();
  }
  return h;
}

}  // namespace fairlane::cli
