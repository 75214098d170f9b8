// Branded ids: EchoMQ's 14-byte job and group identifiers.
//
//   "USR" + base62(snowflake), 11 digits, left-padded with '0'
//   snowflake = ts_ms_since_2024_01_01 << 22 | node (10 bits) << 12 | seq (12 bits)
//
// The alphabet 0-9A-Za-z is in ASCII order and the width is fixed, so the
// byte order of two ids of one namespace is their numeric order, which is
// their mint order. All functions here are pure, thread-safe and noexcept.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fairlane {

namespace detail { struct IdAccess; }

inline constexpr std::size_t kIdLength = 14;
inline constexpr std::size_t kKindLength = 3;
inline constexpr std::size_t kDigits = 11;
inline constexpr std::uint64_t kEpochMs = 1704067200000ULL;  // 2024-01-01T00:00:00Z
inline constexpr std::uint64_t kMaxSnowflake = (1ULL << 63) - 1;

// Why a text failed to parse as an id.
enum class IdError { ok, wrong_length, bad_kind, bad_digit, overflow };
std::string_view to_string(IdError e) noexcept;

class BrandedId {
 public:
  BrandedId() = default;  // the empty id; valid() is false

  // Parses and validates; on failure returns nullopt and, if asked, why.
  static std::optional<BrandedId> parse(std::string_view text, IdError* why = nullptr) noexcept;
  // kind must be three letters A-Z and snowflake <= 2^63 - 1, else the empty id.
  static BrandedId make(std::string_view kind, std::uint64_t snowflake) noexcept;

  bool valid() const noexcept { return bytes_[0] != 0; }
  // Full check of the bytes (namespace, alphabet, 63-bit bound). Ids made by
  // parse/make always pass; bytes copied in from elsewhere may not.
  bool well_formed() const noexcept;
  std::string_view str() const noexcept { return valid() ? std::string_view(bytes_.data(), kIdLength) : std::string_view(); }
  std::string_view kind() const noexcept { return str().substr(0, valid() ? kKindLength : 0); }
  std::uint64_t snowflake() const noexcept;
  std::string string() const { return std::string(str()); }

  friend bool operator==(const BrandedId&, const BrandedId&) = default;
  friend auto operator<=>(const BrandedId& a, const BrandedId& b) noexcept { return a.bytes_ <=> b.bytes_; }

 private:
  friend struct detail::IdAccess;  // the library fills ids from bytes it has checked
  // The 14 bytes of text, then two bytes that are zero in every id: 16
  // bytes, two whole words. GCC returns and passes such a value in two
  // registers and copies it with two moves. At 14 bytes it built every
  // returned id on the stack with overlapping moves and loaded the
  // registers back across them, loads the store buffer cannot forward
  // (about 60% of mint()'s time in a profile of a mint + enqueue + claim +
  // complete loop). The padding is no part of the text; being always zero,
  // it leaves comparisons (of all 16 bytes) meaning the text's.
  std::array<char, kIdLength + 2> bytes_{};
};

// Snowflake fields.
constexpr std::uint64_t snowflake_of(std::uint64_t ms_since_epoch, std::uint32_t node, std::uint32_t seq) noexcept {
  return (ms_since_epoch << 22) | (std::uint64_t(node & 0x3FF) << 12) | (seq & 0xFFF);
}
constexpr std::uint64_t snowflake_ms(std::uint64_t s) noexcept { return s >> 22; }

// Three letters A-Z?
bool valid_kind(std::string_view kind) noexcept;

// The 11 base62 digits of a snowflake (no namespace).
std::array<char, kDigits> encode_base62(std::uint64_t snowflake) noexcept;

}  // namespace fairlane
