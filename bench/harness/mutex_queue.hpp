// MutexQueue: fairlane's work behind one robust process-shared mutex, the
// peer that fairlane's lock-free design must beat by 1.5x (issue 12). It does
// what a fairlane cycle does, through the same kind of API:
//
//   mint()              a snowflake id, strictly increasing across processes,
//                       returned as text (BrandedId: base62 encode)
//   enqueue(g, id, p)   text ids in: checks both as fairlane does
//                       (BrandedId::well_formed, the job namespace), then
//                       under the lock: one probe of the id index (dedup), a
//                       group -> lane lookup (a lane is made for a new group,
//                       and given back when the group is idle: the set of
//                       tenants is open), a job slot, the payload, the lane's
//                       pending list in id order, the ring when the lane
//                       becomes serviceable
//   claim(lease, ms)    under the lock: leases whose deadline passed go back
//                       to their lane at their id position first; then one
//                       strict rotation step of the ring, the lane's oldest
//                       job leased with a fresh 64-bit fencing token and a
//                       deadline, the lane's served count and wait histogram,
//                       the payload copied out; the Lease carries text ids
//   complete(id, tok)   the id checked, then under the lock: the index probe,
//                       the token compared (stale/gone), the lease unlinked,
//                       the slot freed, the lane's active count released
//                       and the lane re-ringed or given back
//   set_limit(g, n)     a lane's concurrency ceiling (active <= limit)
//
// The mutex is PTHREAD_MUTEX_ROBUST and PTHREAD_PROCESS_SHARED. A lock that
// returns EOWNERDEAD (its holder died inside) rebuilds every derived
// structure (free list, id index, lanes' pending lists and counts, the lease
// list, the group map, the ring) from the job slots, whose state word is
// written last, then marks the mutex consistent: the same stop-the-world
// repair a lock-based design needs. ENOTRECOVERABLE makes every call fail.
//
// Not lock-free by construction: a holder preempted or stopped inside the
// lock stops everyone (which the 2x2 runs show).
#pragma once

#include <pthread.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "fairlane/ids.hpp"
#include "fairlane/queue.hpp"

namespace fairlane::bench {

class MutexQueue {
 public:
  MutexQueue() = default;
  MutexQueue(const MutexQueue&) = delete;
  MutexQueue& operator=(const MutexQueue&) = delete;
  ~MutexQueue();

  // Creates the segment (shm_open name) for `jobs` jobs, `lanes` live groups
  // and payloads up to `payload` bytes; bytes_out: its size.
  static bool create(const std::string& name, std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload,
                     std::uint64_t& bytes_out, std::string& error);
  bool open(const std::string& name, std::string& error);

  fairlane::BrandedId mint() noexcept;
  fairlane::EnqueueStatus enqueue(const fairlane::BrandedId& group, const fairlane::BrandedId& job,
                                  std::string_view payload) noexcept;
  bool claim(fairlane::Lease& out, std::uint32_t lease_ms) noexcept;
  bool claim_wait(fairlane::Lease& out, std::uint32_t lease_ms, int timeout_ms) noexcept;
  fairlane::AckStatus complete(const fairlane::BrandedId& job, fairlane::Token token) noexcept;
  fairlane::LaneStatus set_limit(const fairlane::BrandedId& group, std::uint32_t limit) noexcept;

  // Read under the lock, for tests.
  struct Stats {
    std::uint64_t enqueued, duplicates, claimed, completed, expired, repairs;
    std::uint32_t pending, leased, lanes_live, ringed;
  };
  Stats stats() noexcept;
  // For tests: moves the queue's lease clock forward (leases expire sooner).
  void advance_clock(std::uint64_t ms) noexcept;
  // For tests: takes the lock and returns without releasing it (the caller
  // then dies holding it).
  void lock_and_abandon() noexcept;

  struct Header;
  struct Lane;
  struct Slot;

 private:
  bool lock() noexcept;  // false: the mutex is not recoverable
  std::uint64_t now_us() const noexcept;
  void unlock() noexcept;
  void rebuild() noexcept;  // under the lock, after EOWNERDEAD
  Slot* slot(std::uint32_t i) const noexcept;
  char* payload_of(Slot* s) const noexcept;
  std::uint32_t lane_of_group(const fairlane::BrandedId& g, std::uint64_t hash, bool make) noexcept;
  void retire_if_idle(std::uint32_t lane) noexcept;
  void maybe_ring(std::uint32_t lane) noexcept;
  void pending_insert(std::uint32_t lane, std::uint32_t slot) noexcept;
  void lease_insert(std::uint32_t slot) noexcept;
  void lease_unlink(std::uint32_t slot) noexcept;
  void expire(std::uint64_t now_ms) noexcept;
  std::uint32_t index_find(const fairlane::BrandedId& id, std::uint64_t hash, std::uint64_t* empty_at) const noexcept;
  void index_erase(std::uint64_t pos) noexcept;
  bool claim_locked(fairlane::Lease& out, std::uint32_t lease_ms, std::uint64_t now_us) noexcept;

  char* base_ = nullptr;
  std::size_t size_ = 0;
  Header* h_ = nullptr;
};

}  // namespace fairlane::bench
