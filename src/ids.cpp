// Branded ids: base62 snowflakes behind a three-letter namespace.
#include "fairlane/ids.hpp"

#include <cstring>

namespace fairlane {
namespace {

constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static_assert(sizeof(kAlphabet) == 63);

// Value of one base62 digit, or -1. The alphabet is in ASCII order, which is
// what makes byte order equal numeric order.
constexpr int digit_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  if (c >= 'a' && c <= 'z') return c - 'a' + 36;
  return -1;
}

}  // namespace

std::string_view to_string(IdError e) noexcept {
  switch (e) {
    case IdError::ok: return "ok";
    case IdError::wrong_length: return "wrong length (expected 14 characters)";
    case IdError::bad_kind: return "bad namespace (expected three letters A-Z)";
    case IdError::bad_digit: return "bad character (expected base62: 0-9A-Za-z)";
    case IdError::overflow: return "value over 2^63-1";
  }
  return "unknown";
}

bool valid_kind(std::string_view kind) noexcept {
  if (kind.size() != kKindLength) return false;
  for (char c : kind)
    if (c < 'A' || c > 'Z') return false;
  return true;
}

std::array<char, kDigits> encode_base62(std::uint64_t v) noexcept {
  std::array<char, kDigits> out;
  for (std::size_t i = kDigits; i-- > 0;) {
    out[i] = kAlphabet[v % 62];
    v /= 62;
  }
  return out;
}

std::optional<BrandedId> BrandedId::parse(std::string_view text, IdError* why) noexcept {
  auto fail = [&](IdError e) -> std::optional<BrandedId> {
    if (why) *why = e;
    return std::nullopt;
  };
  if (text.size() != kIdLength) return fail(IdError::wrong_length);
  if (!valid_kind(text.substr(0, kKindLength))) return fail(IdError::bad_kind);
  // 62^11 > 2^64: check each step against the 63-bit bound before it is taken.
  std::uint64_t v = 0;
  bool over = false;
  for (char c : text.substr(kKindLength)) {
    int d = digit_value(c);
    if (d < 0) return fail(IdError::bad_digit);
    if (v > (kMaxSnowflake - std::uint64_t(d)) / 62) over = true;
    if (!over) v = v * 62 + std::uint64_t(d);
  }
  if (over) return fail(IdError::overflow);
  BrandedId id;
  std::memcpy(id.bytes_.data(), text.data(), kIdLength);
  if (why) *why = IdError::ok;
  return id;
}

BrandedId BrandedId::make(std::string_view kind, std::uint64_t snowflake) noexcept {
  BrandedId id;
  if (!valid_kind(kind) || snowflake > kMaxSnowflake) return id;
  std::memcpy(id.bytes_.data(), kind.data(), kKindLength);
  auto digits = encode_base62(snowflake);
  std::memcpy(id.bytes_.data() + kKindLength, digits.data(), kDigits);
  return id;
}

bool BrandedId::well_formed() const noexcept {
  return valid() && parse(std::string_view(bytes_.data(), kIdLength)).has_value();
}

std::uint64_t BrandedId::snowflake() const noexcept {
  if (!valid()) return 0;
  std::uint64_t v = 0;
  for (std::size_t i = kKindLength; i < kIdLength; ++i) v = v * 62 + std::uint64_t(digit_value(bytes_[i]));
  return v;
}

}  // namespace fairlane
