// Double-width (128-bit) compare-and-swap on the segment's Word128s: the
// slot words, the lane words and the lane directory's entries.
//
// x86-64: `lock cmpxchg16b`, inline (GCC's __atomic builtins route 16-byte
// atomics through libatomic, a call per operation). It is a full barrier, so
// it is as strong as a seq_cst read-modify-write, which is what every edge
// labelled on a Word128 in docs/design.md assumes. Elsewhere (and under
// ThreadSanitizer, which cannot see inside inline assembly, and with the
// CMake option FAIRLANE_ATOMIC128_BUILTIN) the __atomic builtins on
// unsigned __int128, seq_cst: libatomic's, linked where they are used.
//
// Loads read the high half, the low half, and the high half again (acquire
// each), until the two readings of the high half agree: the pair is then a
// value the word held (at the moment the low half was read), unless the high
// half went away and came back within those few nanoseconds. Every CAS of a
// lane word moves its version (high half); a slot word's high half is its
// ctr and holder, which do not come back to a value without the ctr moving.
// Code that acts on a load alone (a corruption verdict, a step applied)
// checks again with a second load or a CAS.
#pragma once

#include <cstdint>

#include "fairlane/detail/layout.hpp"

#if defined(__SANITIZE_THREAD__)
#define FAIRLANE_ATOMIC128_BUILTIN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAIRLANE_ATOMIC128_BUILTIN 1
#endif
#endif
#if !defined(FAIRLANE_ATOMIC128_BUILTIN) && !defined(__x86_64__)
#define FAIRLANE_ATOMIC128_BUILTIN 1
#endif

namespace fairlane::detail {

#ifdef FAIRLANE_ATOMIC128_BUILTIN

__extension__ typedef unsigned __int128 u128;  // (__extension__: no -Wpedantic warning)

inline u128 to_u128(const Word128& w) noexcept { return (static_cast<u128>(w.hi) << 64) | w.lo; }
inline Word128 from_u128(u128 v) noexcept {
  return Word128{static_cast<std::uint64_t>(v), static_cast<std::uint64_t>(v >> 64)};
}

inline Word128 load128(const Word128& w) noexcept {
  return from_u128(__atomic_load_n(reinterpret_cast<const u128*>(&w), __ATOMIC_SEQ_CST));
}

// On failure `expected` holds the current value, read whole.
inline bool cas128(Word128& w, Word128& expected, const Word128& desired) noexcept {
  u128 e = to_u128(expected);
  const bool ok = __atomic_compare_exchange_n(reinterpret_cast<u128*>(&w), &e, to_u128(desired), false,
                                              __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  if (!ok) expected = from_u128(e);
  return ok;
}

inline void store128_init(Word128& w, const Word128& v) noexcept {
  __atomic_store_n(reinterpret_cast<u128*>(&w), to_u128(v), __ATOMIC_SEQ_CST);
}

#else

// Forced inline: GCC keeps it out of line in some callers, where the call
// costs as much as the three loads.
[[gnu::always_inline]] inline Word128 load128(const Word128& w) noexcept {
  std::uint64_t hi = __atomic_load_n(&w.hi, __ATOMIC_ACQUIRE);
  for (;;) {
    const std::uint64_t lo = __atomic_load_n(&w.lo, __ATOMIC_ACQUIRE);
    const std::uint64_t again = __atomic_load_n(&w.hi, __ATOMIC_ACQUIRE);
    if (again == hi) return Word128{lo, hi};
    hi = again;
  }
}

// On failure `expected` holds the current value, read whole (cmpxchg16b
// loads it atomically).
inline bool cas128(Word128& w, Word128& expected, const Word128& desired) noexcept {
  bool ok;
  asm volatile("lock cmpxchg16b %1"
               : "=@ccz"(ok), "+m"(w), "+a"(expected.lo), "+d"(expected.hi)
               : "b"(desired.lo), "c"(desired.hi)
               : "memory");
  return ok;
}

// Only for a word nobody else can see yet (a segment being created, or one
// that repair owns alone).
inline void store128_init(Word128& w, const Word128& v) noexcept {
  __atomic_store_n(&w.lo, v.lo, __ATOMIC_RELAXED);
  __atomic_store_n(&w.hi, v.hi, __ATOMIC_RELEASE);
}

#endif

}  // namespace fairlane::detail
