// The writer's side of a mirrored segment's transition log (layout.hpp has
// the cell protocol; docs/mirror.md the design). Every transition appends
// one record after its new state is visible, so the mirror, reading the
// state when it reads the record, sees that state or a later one.
//
// On an unmirrored segment every call here returns at its first branch.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "clock.hpp"
#include "futex.hpp"
#include "segment.hpp"

namespace fairlane::detail {

inline constexpr std::uint64_t kNotLogged = ~0ULL;

// Under the refuse policy new jobs are refused once less than an eighth of
// the log is free: the rest is kept for the transitions of jobs already
// admitted (their claims, completions and retries), which cannot be refused.
inline bool log_room_for_admission(const Segment& s) noexcept {
  const MirrorShared& m = s.h->mirror;
  const std::uint64_t used = m.head.load(std::memory_order_relaxed) - m.tail.load(std::memory_order_relaxed);
  const std::uint64_t cells = s.log_mask + 1;  // bound at open (the header's field may have been rewritten since)
  return used + cells / 8 < cells;
}

// A record could not be logged: count it and make the mirror resynchronise
// (or, under the drop policy, stop logging until it does).
inline void log_lost(Segment& s, bool full) noexcept {
  MirrorShared& m = s.h->mirror;
  m.lost.fetch_add(1, std::memory_order_relaxed);
  const auto to = (full && s.h->on_full == 1) ? MirrorState::dropped : MirrorState::resync;
  std::uint32_t cur = m.state.load(std::memory_order_relaxed);
  // ok -> resync or dropped; resync -> dropped; dropped stays.
  while (cur < std::uint32_t(to) &&
         !m.state.compare_exchange_weak(cur, std::uint32_t(to), std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
  if (to == MirrorState::dropped && cur != std::uint32_t(MirrorState::dropped)) {
    m.dropped_unix_ms.store(unix_ms(), std::memory_order_relaxed);  // shown to people
  }
}

// Appends "kind/index changed". Returns its sequence number, or kNotLogged.
inline std::uint64_t log_append(Segment& s, LogKind kind, std::uint32_t index) noexcept {
  if (!s.log) return kNotLogged;
  MirrorShared& m = s.h->mirror;
  if (m.state.load(std::memory_order_relaxed) == std::uint32_t(MirrorState::dropped)) return kNotLogged;
  std::uint64_t pos = m.head.load(std::memory_order_relaxed);
  LogCell* c;
  for (;;) {
    c = &s.log[pos & s.log_mask];
    const std::uint64_t st = c->stamp.load(std::memory_order_acquire);
    if (st == pos) {
      // The cell is free for pos: reserve it.
      if (m.head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed, std::memory_order_relaxed)) break;
    } else if (st < pos) {
      // It still holds the record of pos - log_cells: the log is full.
      log_lost(s, true);
      return kNotLogged;
    } else {
      pos = m.head.load(std::memory_order_relaxed);  // another writer took pos
    }
  }
  c->body.store(LogBody::pack(kind, index, pos), std::memory_order_relaxed);
  c->ms.store(segment_now_ms(s), std::memory_order_relaxed);
  std::uint64_t expect = pos;
  // [R9] release: publishes body and ms; pairs with the mirror's acquire of
  // the stamp. Fails only if the mirror gave this cell up as a hole.
  if (!c->stamp.compare_exchange_strong(expect, pos + 1, std::memory_order_release, std::memory_order_relaxed)) {
    log_lost(s, false);
    return kNotLogged;
  }
  // [S9] seq_cst: pairs with the mirror's seq_cst store of `parked` and its
  // re-check of the stamp before it sleeps (the wake-up protocol of [S5]).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (m.parked.load(std::memory_order_relaxed)) {
    m.bell.fetch_add(1, std::memory_order_relaxed);
    futex_wake(&m.bell, 1);
  }
  return pos;
}

inline void log_job(Segment& s, std::uint32_t slot) noexcept {
  if (s.log) log_append(s, LogKind::job, slot);
}
inline void log_lane(Segment& s, std::uint32_t lane) noexcept {
  if (s.log) log_append(s, LogKind::lane, lane);
}
inline void log_queue(Segment& s) noexcept {  // the whole queue's pause
  if (s.log) log_append(s, LogKind::queue, 0);
}

}  // namespace fairlane::detail
