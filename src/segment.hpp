// A mapped segment: where each table lives, plus this process's attachment.
// Creating, opening, sizing and removing use Boost.Interprocess; nothing of
// Boost is used after the mapping exists.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <cstdint>
#include <string>

#include "fairlane/detail/layout.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/result.hpp"

namespace fairlane::detail {

struct Geometry {
  std::uint32_t jobs, lanes, lane_buckets, payload_bytes, slot_bytes, ring_cells, index_buckets, log_cells;
  std::uint64_t words_off, slots_off, lanes_off, ring_off, index_off, procs_off, waits_off, log_off, total;
};
Geometry geometry_for(std::uint32_t jobs, std::uint32_t lanes, std::uint32_t payload_bytes,
                      std::uint32_t log_cells = 0) noexcept;

struct Segment {
  std::string name;
  boost::interprocess::mapped_region region;
  Header* h = nullptr;
  std::atomic<std::uint64_t>* words = nullptr;   // slot words
  unsigned char* slots = nullptr;
  LaneRecord* lanes = nullptr;
  std::atomic<std::uint64_t>* ring = nullptr;
  IndexBucket* index = nullptr;
  ProcRecord* procs = nullptr;
  WaitBuckets* waits = nullptr;                   // per lane
  LogCell* log = nullptr;                         // transition log (mirrored segments only)
  std::uint64_t log_mask = 0;
  ProcRecord* me = nullptr;                       // this handle's attachment
  std::uint32_t me_index = 0;                     // its index in procs

  // Cached from the header.
  std::uint32_t jobs = 0, slot_bytes = 0, payload_bytes = 0;
  std::uint64_t lane_mask = 0, ring_mask = 0, index_mask = 0, seed = 0;
  std::uint32_t recovery_ms = 500;

  SlotRecord& slot(std::uint32_t i) const noexcept {
    return *reinterpret_cast<SlotRecord*>(slots + std::uint64_t(i) * slot_bytes);
  }
  unsigned char* payload(std::uint32_t i) const noexcept { return slots + std::uint64_t(i) * slot_bytes + sizeof(SlotRecord); }
  CounterBlock& counters() const noexcept { return me->counters; }

  ~Segment();
};

// The mapped segment behind a Queue, for library code that reads its tables
// (the mirror).
struct QueueAccess {
  static Segment& segment(Queue& q) noexcept { return *q.seg_; }
};

Result<std::unique_ptr<Segment>> create_segment(std::string_view name, const QueueOptions& o);
Result<std::unique_ptr<Segment>> open_segment(std::string_view name, bool observer = false);
Status remove_segment(std::string_view name);

// Liveness of an attached process: pid and its start time, never a bare pid.
std::uint64_t process_start_time(int pid) noexcept;
bool process_alive(int pid, std::uint64_t start_time) noexcept;
// alive, stopped (SIGSTOP, traced: it holds what it holds) or dead; every
// doubt counts as alive, as in process_alive.
ProcessState process_state(int pid, std::uint64_t start_time) noexcept;
// /proc/PID/comm, empty when it cannot be read.
std::string process_name(int pid);

// The pid of the owner of process record p if that owner is dead, else 0.
// Only a record whose owner has stamped its start time is judged (never
// one being attached), and only if it did not change hands while read; a
// free record is not judged.
int dead_owner_pid(const ProcRecord& p) noexcept;

// fsck's checks (fsck.cpp) and repair's rebuild (repair.cpp) of a segment
// nobody else is changing.
FsckReport check_segment(const Segment& s);
void rebuild_segment(Segment& s, FsckReport& report);

}  // namespace fairlane::detail
