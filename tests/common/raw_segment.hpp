// A second, raw mapping of a segment: what a stray write, a bug in another
// process or a process killed mid-operation would leave behind. Tests damage
// a segment through it and check that fsck names the damage and repair
// undoes it.
#pragma once

#include <fairlane/detail/layout.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fairlane::test {

class RawSegment {
 public:
  explicit RawSegment(const std::string& name) {
    fd_ = ::shm_open(("/" + name).c_str(), O_RDWR, 0);
    EXPECT_GE(fd_, 0);
    size_ = std::size_t(::lseek(fd_, 0, SEEK_END));
    base_ = static_cast<unsigned char*>(::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  RawSegment(const RawSegment&) = delete;
  RawSegment& operator=(const RawSegment&) = delete;
  ~RawSegment() {
    ::munmap(base_, size_);
    ::close(fd_);
  }
  detail::Header& header() { return *reinterpret_cast<detail::Header*>(base_); }
  std::atomic<std::uint64_t>& slot_word(std::uint32_t i) {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + header().words_off)[i];
  }
  detail::SlotRecord& slot(std::uint32_t i) {
    return *reinterpret_cast<detail::SlotRecord*>(base_ + header().slots_off + std::uint64_t(i) * header().slot_bytes);
  }
  detail::LaneRecord& lane(std::uint32_t i) { return reinterpret_cast<detail::LaneRecord*>(base_ + header().lanes_off)[i]; }
  detail::IndexBucket& bucket(std::uint64_t i) { return reinterpret_cast<detail::IndexBucket*>(base_ + header().index_off)[i]; }
  std::atomic<std::uint64_t>& ring_cell(std::uint64_t pos) {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + header().ring_off)[pos & (header().ring_cells - 1)];
  }
  detail::ProcRecord& proc(std::uint32_t i) { return reinterpret_cast<detail::ProcRecord*>(base_ + header().procs_off)[i]; }

  // The first slot in state st, or ~0U.
  std::uint32_t find_slot(detail::SlotState st) {
    for (std::uint32_t i = 0; i < header().job_capacity; ++i)
      if (detail::SlotWord::state(slot_word(i).load()) == st) return i;
    return ~0U;
  }
  // The lane of a group's bucket whose word satisfies pred, or ~0U.
  template <class Pred>
  std::uint32_t find_lane(Pred pred) {
    for (std::uint32_t i = 0; i < header().lane_buckets; ++i)
      if (lane(i).key_a.load() != 0 && pred(lane(i).word.load())) return i;
    return ~0U;
  }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
  unsigned char* base_ = nullptr;
};

}  // namespace fairlane::test
