// Small helpers of the library: the CPU's pause, this thread's id, and
// building a BrandedId from bytes the library has checked.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string_view>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "fairlane/ids.hpp"

namespace fairlane::detail {

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The calling thread's id, read once (0: not read yet). A child forked
// without exec starts with its forking thread's value: the fork handler
// (segment.cpp) sets it back to 0.
inline thread_local std::uint32_t t_tid = 0;
inline std::uint32_t gettid_cached() noexcept {
  if (t_tid == 0) [[unlikely]]
    t_tid = std::uint32_t(syscall(SYS_gettid));
  return t_tid;
}

// The value of a base62 digit, or -1 (a table: no branches per character).
extern const std::int8_t kDigitValue[256];

// The last four base62 digits of a value below 62^4, as the four bytes of
// a word in text order (x86: little-endian, the first digit lowest).
std::uint32_t base62_low4_word(std::uint32_t v) noexcept;

// The 11 base62 digits of a value as two words (exact for any 64-bit
// value; ids hold 63 bits), the way store_digits lays them out: digits 0-7 in `a` (the first digit lowest),
// 8-10 in the low three bytes of `b` (id_words_of makes an id of them).
void base62_words(std::uint64_t v, std::uint64_t& a, std::uint32_t& b) noexcept;

// The value of the 11 base62 digits at d, or false (a bad digit, or over
// 2^63 - 1; `why` says which).
bool decode_digits(const char* d, std::uint64_t& out, IdError& why) noexcept;

struct IdAccess {
  static const char* bytes(const BrandedId& id) noexcept { return id.bytes_.data(); }
  // The id whose two words (bytes 0-7 and 8-15, the last two bytes zero:
  // id_words) are these, which the caller has made from checked bytes. Two
  // stores that do not overlap, each a word a reader loads whole
  // (same_id_words, store_digits), so a load soon after is forwarded from
  // the store buffer.
  static void assign_words(BrandedId& id, std::uint64_t w0, std::uint64_t w1) noexcept {
    static_assert(sizeof(BrandedId) == 16);
    std::memcpy(id.bytes_.data(), &w0, 8);
    std::memcpy(id.bytes_.data() + 8, &w1, 8);
  }
  // The same, as a value to return (in two registers).
  static BrandedId from_words(std::uint64_t w0, std::uint64_t w1) noexcept {
    BrandedId id;
    assign_words(id, w0, w1);
    return id;
  }
  // An id of a kind the caller has checked and a snowflake within 63 bits.
  static BrandedId make_checked(const char* kind, std::uint64_t snowflake) noexcept {
    BrandedId id;
    std::memcpy(id.bytes_.data(), kind, kKindLength);
    const auto digits = encode_base62(snowflake);
    std::memcpy(id.bytes_.data() + kKindLength, digits.data(), kDigits);
    return id;
  }
};

// The two words of the id at `b` (16 bytes as a BrandedId holds them: the
// text, then two zero bytes), bytes 0-7 and 8-15, each loaded whole as
// IdAccess::assign_words stores it: a load across the two would wait for
// both stores to reach the cache.
inline void id_words_at(const char* b, std::uint64_t& w0, std::uint64_t& w1) noexcept {
  static_assert(kIdLength == 14 && sizeof(BrandedId) == 16);
  std::memcpy(&w0, b, 8);
  std::memcpy(&w1, b + 8, 8);
}

// Are the bytes of `b` the id whose words (id_words) are w0, w1?
inline bool same_id_words(std::uint64_t w0, std::uint64_t w1, const char* b) noexcept {
  std::uint64_t b0, b1;
  id_words_at(b, b0, b1);
  return ((w0 ^ b0) | (w1 ^ b1)) == 0;
}

// Are these two ids (16 bytes each) equal? Two loads a side (libc's memcmp
// is a call of about 20 instructions; this is six).
inline bool same_id_bytes(const char* a, const char* b) noexcept {
  std::uint64_t a0, a1;
  id_words_at(a, a0, a1);
  return same_id_words(a0, a1, b);
}

// The last id this thread minted and its snowflake: a memo of the decode
// (the text and the number are one function of each other, whatever the
// segment), for the id a producer nearly always enqueues next. And the ids
// it minted lately and has not enqueued since (`fresh`, direct-mapped on the
// snowflake's low bits): their first enqueue skips the look-up before the
// work (admission.cpp, admit). A thread minting alone gets consecutive
// numbers, so a batch of up to kFreshIds fits; threads minting on one queue
// share its counter, and a millisecond's numbers start again at 0, so ids
// collide and the older one loses its place (it gets the look-up: slower,
// never wrong).
struct MintMemo {
  static constexpr std::size_t kFreshIds = 64;
  std::uint64_t w0 = 0, w1 = 0;  // the id's two words (id_words); 0 never matches a valid id
  std::uint64_t sf = 0;
  std::uint64_t fresh[kFreshIds] = {};  // 0: none (no minted snowflake is 0)
  bool take_fresh(std::uint64_t id_sf) noexcept {
    std::uint64_t& f = fresh[id_sf % kFreshIds];
    if (id_sf == 0 || f != id_sf) return false;
    f = 0;
    return true;
  }
};
inline thread_local MintMemo t_mint_memo;

// Do the 11 digits a slot record keeps (bytes 0..7 in `a`, 8..10 in the low
// bytes of `b`, as store_digits lays them out) read as base62 digits of a
// value within 63 bits? With SSE2 the alphabet test is six byte compares of
// all eleven at once; elsewhere it is a table look-up per digit.
inline bool digit_words_valid(std::uint64_t a, std::uint32_t b) noexcept {
  char d[kDigits];
  std::memcpy(d, &a, 8);
  std::memcpy(d + 8, &b, 3);
#if defined(__SSE2__)  // x86: little-endian, so byte i of the register is d[i]
  const __m128i x = _mm_set_epi64x(std::int64_t(b), std::int64_t(a));
  // Signed byte compares: a byte of 0x80 and up is negative, below every range.
  const auto in = [&x](char lo, char hi) {
    return _mm_and_si128(_mm_cmpgt_epi8(x, _mm_set1_epi8(char(lo - 1))), _mm_cmpgt_epi8(_mm_set1_epi8(char(hi + 1)), x));
  };
  const __m128i ok = _mm_or_si128(_mm_or_si128(in('0', '9'), in('A', 'Z')), in('a', 'z'));
  if ((_mm_movemask_epi8(ok) & 0x7FF) != 0x7FF) return false;
#else
  unsigned bad = 0;
  for (int i = 0; i < int(kDigits); ++i) bad |= unsigned(kDigitValue[static_cast<unsigned char>(d[i])]) & 0x80U;
  if (bad) return false;
#endif
  // 10 * 62^10 < 2^63: a first digit 0-9 cannot overflow; past that, decode.
  if (d[0] <= '9') return true;
  std::uint64_t v = 0;
  IdError why = IdError::ok;
  return decode_digits(d, v, why);
}

}  // namespace fairlane::detail
