// Branded ids: base62 snowflakes behind a three-letter namespace.
#include "fairlane/ids.hpp"

#include <cstring>

#include "util.hpp"

namespace fairlane {
namespace detail {

// The alphabet is in ASCII order, which is what makes byte order equal
// numeric order.
constexpr std::array<std::int8_t, 256> make_digit_table() noexcept {
  std::array<std::int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int c = '0'; c <= '9'; ++c) t[std::size_t(c)] = std::int8_t(c - '0');
  for (int c = 'A'; c <= 'Z'; ++c) t[std::size_t(c)] = std::int8_t(c - 'A' + 10);
  for (int c = 'a'; c <= 'z'; ++c) t[std::size_t(c)] = std::int8_t(c - 'a' + 36);
  return t;
}
constexpr std::array<std::int8_t, 256> kDigitTable = make_digit_table();
const std::int8_t kDigitValue[256] = {
#define FAIRLANE_D(i) kDigitTable[i]
#define FAIRLANE_D8(i) FAIRLANE_D(i), FAIRLANE_D(i + 1), FAIRLANE_D(i + 2), FAIRLANE_D(i + 3), FAIRLANE_D(i + 4), \
                       FAIRLANE_D(i + 5), FAIRLANE_D(i + 6), FAIRLANE_D(i + 7)
#define FAIRLANE_D64(i) FAIRLANE_D8(i), FAIRLANE_D8(i + 8), FAIRLANE_D8(i + 16), FAIRLANE_D8(i + 24), \
                        FAIRLANE_D8(i + 32), FAIRLANE_D8(i + 40), FAIRLANE_D8(i + 48), FAIRLANE_D8(i + 56)
    FAIRLANE_D64(0), FAIRLANE_D64(64), FAIRLANE_D64(128), FAIRLANE_D64(192)
#undef FAIRLANE_D64
#undef FAIRLANE_D8
#undef FAIRLANE_D
};

}  // namespace detail

namespace {

constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
static_assert(sizeof(kAlphabet) == 63);

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

namespace {

// Two base62 digits at a time: 3,844 pairs.
struct PairTable {
  char pair[62 * 62][2];
  constexpr PairTable() : pair{} {
    for (int i = 0; i < 62 * 62; ++i) {
      pair[i][0] = kAlphabet[i / 62];
      pair[i][1] = kAlphabet[i % 62];
    }
  }
};
constexpr PairTable kPairs{};

}  // namespace

std::array<char, kDigits> encode_base62(std::uint64_t v) noexcept {
  std::array<char, kDigits> out;
  // Eleven digits: five pairs from the right, then the first digit.
  for (int i = int(kDigits) - 2; i >= 1; i -= 2) {
    const std::uint64_t q = v / 3844;
    const auto r = std::size_t(v - q * 3844);
    out[std::size_t(i)] = kPairs.pair[r][0];
    out[std::size_t(i) + 1] = kPairs.pair[r][1];
    v = q;
  }
  out[0] = kAlphabet[v % 62];
  return out;
}

namespace detail {

std::uint32_t base62_low4_word(std::uint32_t v) noexcept {
  const std::uint32_t q = v / 3844;
  const std::uint32_t r = v - q * 3844;
  std::uint16_t hi = 0, lo = 0;
  std::memcpy(&hi, kPairs.pair[q], 2);
  std::memcpy(&lo, kPairs.pair[r], 2);
  return std::uint32_t(hi) | (std::uint32_t(lo) << 16);
}

void base62_words(std::uint64_t v, std::uint64_t& a, std::uint32_t& b) noexcept {
  // Pairs from the right, as encode_base62, each the two bytes of its
  // digits in text order: assembled in registers, never through the stack.
  std::uint64_t p[5];
  for (int i = 4; i >= 0; --i) {
    const std::uint64_t q = v / 3844;
    std::uint16_t pair = 0;
    std::memcpy(&pair, kPairs.pair[v - q * 3844], 2);
    p[i] = pair;
    v = q;
  }
  const std::uint64_t d0 = std::uint8_t(kAlphabet[v % 62]);
  a = d0 | (p[0] << 8) | (p[1] << 24) | (p[2] << 40) | ((p[3] & 0xFF) << 56);
  b = std::uint32_t((p[3] >> 8) | (p[4] << 8));
}

// The value of 11 base62 digits, or false (a bad digit, or over 2^63 - 1).
bool decode_digits(const char* d, std::uint64_t& out, IdError& why) noexcept {
  const auto* u = reinterpret_cast<const unsigned char*>(d);
  // Unrolled: eleven table lookups, ten multiply-adds, one test of every
  // digit at once (a bad one is -1 in the table: its sign bit).
  int bad = 0;
  std::uint64_t v = 0;
  for (int i = 0; i < int(kDigits) - 1; ++i) {
    const int x = kDigitValue[u[i]];
    bad |= x;
    v = v * 62 + std::uint64_t(x & 63);
  }
  const int last = kDigitValue[u[kDigits - 1]];
  if ((bad | last) < 0) {
    why = IdError::bad_digit;
    return false;
  }
  // 10 * 62^10 <= 2^63: with a first digit 0-9 nothing can overflow.
  if (u[0] > '9' && v > (kMaxSnowflake - std::uint64_t(last)) / 62) {
    why = IdError::overflow;
    return false;
  }
  out = v * 62 + std::uint64_t(last);
  return true;
}

}  // namespace detail

using detail::decode_digits;

std::optional<BrandedId> BrandedId::parse(std::string_view text, IdError* why) noexcept {
  auto fail = [&](IdError e) -> std::optional<BrandedId> {
    if (why) *why = e;
    return std::nullopt;
  };
  if (text.size() != kIdLength) return fail(IdError::wrong_length);
  if (!valid_kind(text.substr(0, kKindLength))) return fail(IdError::bad_kind);
  std::uint64_t v = 0;
  IdError e = IdError::ok;
  if (!decode_digits(text.data() + kKindLength, v, e)) return fail(e);
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
  if (!valid() || !valid_kind(std::string_view(bytes_.data(), kKindLength))) return false;
  std::uint64_t v = 0;
  IdError e = IdError::ok;
  return decode_digits(bytes_.data() + kKindLength, v, e);
}

std::uint64_t BrandedId::snowflake() const noexcept {
  if (!valid()) return 0;
  std::uint64_t v = 0;
  IdError e = IdError::ok;
  return decode_digits(bytes_.data() + kKindLength, v, e) ? v : 0;
}

}  // namespace fairlane
