// Small helpers of the library: the CPU's pause, this thread's id, and
// building a BrandedId from bytes the library has checked.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "fairlane/ids.hpp"

namespace fairlane::detail {

inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline std::uint32_t gettid_cached() noexcept {
  thread_local std::uint32_t tid = std::uint32_t(syscall(SYS_gettid));
  return tid;
}

// The value of a base62 digit, or -1 (a table: no branches per character).
extern const std::int8_t kDigitValue[256];

// The value of the 11 base62 digits at d, or false (a bad digit, or over
// 2^63 - 1; `why` says which).
bool decode_digits(const char* d, std::uint64_t& out, IdError& why) noexcept;

struct IdAccess {
  // An id from 14 bytes the caller has checked (kind letters, digits of the
  // alphabet, value within 63 bits): no parse.
  static BrandedId from_checked(std::string_view text) noexcept {
    BrandedId id;
    std::memcpy(id.bytes_.data(), text.data(), kIdLength);
    return id;
  }
  static const char* bytes(const BrandedId& id) noexcept { return id.bytes_.data(); }
  // An id of a kind the caller has checked and a snowflake within 63 bits.
  static BrandedId make_checked(const char* kind, std::uint64_t snowflake) noexcept {
    BrandedId id;
    std::memcpy(id.bytes_.data(), kind, kKindLength);
    const auto digits = encode_base62(snowflake);
    std::memcpy(id.bytes_.data() + kKindLength, digits.data(), kDigits);
    return id;
  }
};

// The last id this thread minted and its snowflake: a memo of the decode
// (the text and the number are one function of each other, whatever the
// segment), for the id a producer nearly always enqueues next.
struct MintMemo {
  char text[kIdLength] = {};  // never matches a valid id until written
  std::uint64_t sf = 0;
  bool fresh = false;  // not enqueued by this thread since it was minted
};
inline thread_local MintMemo t_mint_memo;

// Do these 11 bytes read as base62 digits of a value within 63 bits?
inline bool digits_valid(const char* d) noexcept {
  unsigned bad = 0;
  for (int i = 0; i < int(kDigits); ++i) bad |= unsigned(kDigitValue[static_cast<unsigned char>(d[i])]) & 0x80U;
  if (bad) return false;
  // 10 * 62^10 < 2^63: a first digit 0-9 cannot overflow; past that, decode.
  if (d[0] <= '9') return true;
  std::uint64_t v = 0;
  IdError why = IdError::ok;
  return decode_digits(d, v, why);
}

}  // namespace fairlane::detail
