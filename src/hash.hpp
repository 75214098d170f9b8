// Hashing of group keys (lane table) and job ids (id index).
#pragma once

#include <cstdint>

#include "fairlane/ids.hpp"

namespace fairlane::detail {

// A finalizer with full avalanche (the splitmix64 constants).
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

// A group's two key words. Both are nonzero for every valid id: bit 63 set.
inline std::uint64_t lane_key_a(const BrandedId& g) noexcept {
  auto k = g.kind();
  std::uint64_t code = std::uint64_t(k[0] - 'A') * 676 + std::uint64_t(k[1] - 'A') * 26 + std::uint64_t(k[2] - 'A');
  return (1ULL << 63) | code;
}
inline std::uint64_t lane_key_b(const BrandedId& g) noexcept { return (1ULL << 63) | g.snowflake(); }
inline BrandedId group_of(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t code = a & ~(1ULL << 63);
  char kind[3] = {char('A' + code / 676), char('A' + code / 26 % 26), char('A' + code % 26)};
  return BrandedId::make(std::string_view(kind, 3), b & ~(1ULL << 63));
}
inline std::uint64_t lane_hash(std::uint64_t a, std::uint64_t b, std::uint64_t seed) noexcept {
  return mix64(b ^ mix64(a ^ seed));
}
inline std::uint64_t id_hash(std::uint64_t snowflake, std::uint64_t seed) noexcept { return mix64(snowflake ^ seed ^ 0x5851F42D4C957F2DULL); }

}  // namespace fairlane::detail
