// Hashing of group keys (lane directory) and job ids (id index), and the
// numeric code of a three-letter namespace.
#pragma once

#include <cstdint>
#include <string_view>

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

// AAA = 0 .. ZZZ = 17575 (15 bits). The caller passes three letters A-Z.
constexpr std::uint32_t kind_code(std::string_view k) noexcept {
  return std::uint32_t(k[0] - 'A') * 676 + std::uint32_t(k[1] - 'A') * 26 + std::uint32_t(k[2] - 'A');
}
inline constexpr std::uint32_t kKindCodes = 26 * 26 * 26;

// The three letters of a code below kKindCodes.
inline void kind_letters(std::uint32_t code, char out[3]) noexcept {
  out[0] = char('A' + code / 676 % 26);
  out[1] = char('A' + code / 26 % 26);
  out[2] = char('A' + code % 26);
}
// The same three letters as the low bytes of a word, in text order (as
// id_words_of takes a kind): made in registers, not through memory.
inline std::uint64_t kind_word_of(std::uint32_t code) noexcept {
  return std::uint64_t('A' + code / 676 % 26) | std::uint64_t('A' + code / 26 % 26) << 8 |
         std::uint64_t('A' + code % 26) << 16;
}

inline std::uint64_t group_hash(std::uint32_t kind, std::uint64_t sf, std::uint64_t seed) noexcept {
  return mix64(sf ^ mix64(std::uint64_t(kind) ^ seed));
}
inline std::uint64_t id_hash(std::uint64_t snowflake, std::uint64_t seed) noexcept {
  return mix64(snowflake ^ seed ^ 0x5851F42D4C957F2DULL);
}

}  // namespace fairlane::detail
