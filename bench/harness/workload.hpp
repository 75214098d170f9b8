// What producers send: which lane (a Zipf draw over the tenants) and a
// payload whose first 16 bytes are the stamp consumers time against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fairlane::bench {

// The first 16 bytes of every payload. The rest is filler (a letter per
// producer), so a torn payload would not go unnoticed by a debugger either.
//   tag = producer (8 bits) << 24 | job sequence number of that producer (24 bits)
struct Stamp {
  std::uint64_t enq_ns;    // CLOCK_MONOTONIC just before the enqueue call
  std::uint32_t lane;      // tenant index, 0 = the most popular
  std::uint32_t tag;       // which job: see above
};
static_assert(sizeof(Stamp) == 16);
inline constexpr std::uint32_t kSeqBits = 24;
inline constexpr std::uint32_t kSeqMask = (1u << kSeqBits) - 1;
inline constexpr std::uint32_t make_tag(std::uint32_t producer, std::uint64_t seq) noexcept {
  return (producer << kSeqBits) | std::uint32_t(seq & kSeqMask);
}

inline void write_stamp(char* payload, const Stamp& s) noexcept { std::memcpy(payload, &s, sizeof s); }
inline Stamp read_stamp(const char* payload) noexcept {
  Stamp s;
  std::memcpy(&s, payload, sizeof s);
  return s;
}

// splitmix64: small, fast, good enough to pick lanes.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() noexcept { return double(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t s_;
};

// Lane i is drawn with probability proportional to 1 / (i + 1)^skew.
// skew 0 is uniform; skew 1 over 100 lanes gives lane 0 about 19 %.
class LanePicker {
 public:
  LanePicker(std::uint32_t lanes, double skew, std::uint64_t seed) : rng_(seed), lanes_(lanes) {
    if (skew > 0 && lanes > 1) {
      cdf_.resize(lanes);
      double sum = 0;
      for (std::uint32_t i = 0; i < lanes; ++i) cdf_[i] = (sum += std::pow(double(i + 1), -skew));
      for (auto& c : cdf_) c /= sum;
      cdf_.back() = 1.0;
    }
  }
  std::uint32_t next() noexcept {
    if (cdf_.empty()) return std::uint32_t(rng_.next() % lanes_);
    double u = rng_.uniform();
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return std::uint32_t(std::min<std::size_t>(std::size_t(it - cdf_.begin()), lanes_ - 1));
  }
  // The share lane i gets.
  double share(std::uint32_t i) const noexcept {
    if (cdf_.empty()) return 1.0 / lanes_;
    return i == 0 ? cdf_[0] : cdf_[i] - cdf_[i - 1];
  }

 private:
  Rng rng_;
  std::uint32_t lanes_;
  std::vector<double> cdf_;
};

}  // namespace fairlane::bench
