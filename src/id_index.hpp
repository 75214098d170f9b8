// The id index: job id -> slot, so that enqueue can refuse a live id and
// complete/fail/extend can find a job. Two-choice hashing over buckets of 8
// entries (one cache line each), at most 2 entries per job slot in total, so
// a full bucket pair is vanishingly rare (and reported as `full`, never
// ignored).
//
// Admission is exactly-once without a lock: an enqueuer claims an entry as
// tentative, then looks for rivals with the same id. A committed rival means
// duplicate. Among tentative rivals the lower slot number wins: the winner
// clears (kills) the loser's entry by CAS, the loser withdraws. An entry
// becomes committed only by a CAS from its own tentative value, so of two
// rivals at most one commits: either the kill lands first and the commit
// fails, or the commit lands first and the rival sees it committed.
#pragma once

#include <cstdint>

#include "hash.hpp"
#include "segment.hpp"

namespace fairlane::detail {

inline constexpr std::uint32_t kNoSlot = ~0U;

struct IndexProbe {
  std::uint64_t b1, b2;
  std::uint32_t fp;
};

inline IndexProbe index_probe(const Segment& s, std::uint64_t snowflake) noexcept {
  std::uint64_t h = id_hash(snowflake, s.seed);
  IndexProbe p;
  p.b1 = h & s.index_mask;
  p.b2 = mix64(h) & s.index_mask;
  if (p.b2 == p.b1) p.b2 = p.b1 ^ 1;
  p.fp = std::uint32_t(h >> 33);
  return p;
}

inline std::atomic<std::uint64_t>& index_entry(const Segment& s, const IndexProbe& p, int k) noexcept {
  return s.index[k < int(kIndexWays) ? p.b1 : p.b2].e[k % kIndexWays];
}

inline bool index_matches(const Segment& s, std::uint64_t e, std::uint32_t fp, std::uint64_t snowflake) noexcept {
  return e != 0 && IndexEntry::fp(e) == (fp & 0x7FFFFFFF) && IndexEntry::slot(e) < s.jobs &&
         s.slot(IndexEntry::slot(e)).snowflake.load(std::memory_order_acquire) == snowflake;
}

// The slot of the live job with this id, or kNoSlot. Lock-free.
inline std::uint32_t index_find(const Segment& s, std::uint64_t snowflake) noexcept {
  const IndexProbe p = index_probe(s, snowflake);
  for (int k = 0; k < int(2 * kIndexWays); ++k) {
    std::uint64_t e = index_entry(s, p, k).load(std::memory_order_acquire);
    if (IndexEntry::committed(e) && index_matches(s, e, p.fp, snowflake)) return IndexEntry::slot(e);
  }
  return kNoSlot;
}

enum class IndexInsert { inserted, duplicate, full };

// Records that `slot` holds the job `snowflake` (the slot's snowflake field
// must already be written). Lock-free.
inline IndexInsert index_insert(Segment& s, std::uint64_t snowflake, std::uint32_t slot) noexcept {
  const IndexProbe p = index_probe(s, snowflake);
  // Fast refusal of a live id.
  if (index_find(s, snowflake) != kNoSlot) return IndexInsert::duplicate;

  // Claim an empty entry as tentative, in the emptier bucket first.
  auto count = [&](std::uint64_t b) {
    int n = 0;
    for (auto& e : s.index[b].e) n += e.load(std::memory_order_relaxed) != 0;
    return n;
  };
  const std::uint64_t order[2] = {count(p.b1) <= count(p.b2) ? p.b1 : p.b2, count(p.b1) <= count(p.b2) ? p.b2 : p.b1};
  const std::uint64_t mine_value = IndexEntry::pack(p.fp, slot, false);
  std::atomic<std::uint64_t>* mine = nullptr;
  for (std::uint64_t b : order) {
    for (auto& e : s.index[b].e) {
      std::uint64_t zero = 0;
      // [S3] seq_cst: our tentative entry must be visible to a rival's scan
      // before we scan for rivals (store-load order).
      if (e.compare_exchange_strong(zero, mine_value, std::memory_order_seq_cst)) {
        mine = &e;
        break;
      }
    }
    if (mine) break;
  }
  if (!mine) return IndexInsert::full;

  // Look for rivals with the same id.
  for (int k = 0; k < int(2 * kIndexWays); ++k) {
    std::atomic<std::uint64_t>& other = index_entry(s, p, k);
    if (&other == mine) continue;
    std::uint64_t e = other.load(std::memory_order_seq_cst);
    while (index_matches(s, e, p.fp, snowflake)) {
      if (IndexEntry::committed(e) || IndexEntry::slot(e) < slot) {
        // A live job, or a rival that outranks us: withdraw. If a rival
        // already killed our entry, the CAS fails and there is nothing to undo.
        std::uint64_t expect = mine_value;
        mine->compare_exchange_strong(expect, 0, std::memory_order_seq_cst);
        return IndexInsert::duplicate;
      }
      // We outrank a tentative rival: kill its entry. On failure `e` is
      // reloaded and decided again (it may have committed meanwhile).
      if (other.compare_exchange_strong(e, 0, std::memory_order_seq_cst)) break;
    }
  }
  // [S4] seq_cst: commit only from our own tentative value; fails if killed.
  std::uint64_t expect = mine_value;
  if (!mine->compare_exchange_strong(expect, IndexEntry::pack(p.fp, slot, true), std::memory_order_seq_cst))
    return IndexInsert::duplicate;
  return IndexInsert::inserted;
}

// Removes the committed entry of (snowflake, slot). Only the job's owner of
// the moment (the completer) calls this. Lock-free.
inline void index_remove(Segment& s, std::uint64_t snowflake, std::uint32_t slot) noexcept {
  const IndexProbe p = index_probe(s, snowflake);
  const std::uint64_t v = IndexEntry::pack(p.fp, slot, true);
  for (int k = 0; k < int(2 * kIndexWays); ++k) {
    std::uint64_t expect = v;
    // Release: the entry disappears before the slot can be reused.
    if (index_entry(s, p, k).compare_exchange_strong(expect, 0, std::memory_order_acq_rel)) return;
  }
}

}  // namespace fairlane::detail
