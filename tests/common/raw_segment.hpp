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
  // The 128-bit words (layout.hpp: Word128): the test writes them with plain
  // stores, as a stray pointer would.
  detail::Word128& slot_word(std::uint32_t i) { return reinterpret_cast<detail::Word128*>(base_ + header().words_off)[i]; }
  detail::Word128 slot_word_value(std::uint32_t i) {
    detail::Word128& w = slot_word(i);
    return detail::Word128{__atomic_load_n(&w.lo, __ATOMIC_ACQUIRE), __atomic_load_n(&w.hi, __ATOMIC_ACQUIRE)};
  }
  void set_word(detail::Word128& w, const detail::Word128& v) {
    __atomic_store_n(&w.lo, v.lo, __ATOMIC_RELEASE);
    __atomic_store_n(&w.hi, v.hi, __ATOMIC_RELEASE);
  }
  detail::Word128 word_value(detail::Word128& w) {
    return detail::Word128{__atomic_load_n(&w.lo, __ATOMIC_ACQUIRE), __atomic_load_n(&w.hi, __ATOMIC_ACQUIRE)};
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

  detail::ThreadRecord& thread(std::uint32_t i) {
    return reinterpret_cast<detail::ThreadRecord*>(base_ + header().threads_off)[i];
  }
  std::atomic<std::uint8_t>& tag(std::uint32_t i) {
    return reinterpret_cast<std::atomic<std::uint8_t>*>(base_ + header().tags_off)[i];
  }
  // The free hint of block b (slots b * kHintBlock on).
  std::atomic<std::uint32_t>& hint(std::uint32_t b) {
    return reinterpret_cast<std::atomic<std::uint32_t>*>(base_ + header().hints_off)[b];
  }
  // The group hint of group g (blocks g * kHintGroup on), after the blocks'.
  std::atomic<std::uint32_t>& group_hint(std::uint32_t g) {
    return hint(detail::hint_blocks(header().job_capacity) + g);
  }
  unsigned char* base() { return base_; }
  std::size_t size() const { return size_; }

  // The first slot in state st, or ~0U.
  std::uint32_t find_slot(detail::SlotState st) {
    for (std::uint32_t i = 0; i < header().job_capacity; ++i)
      if (detail::SlotWord::state(slot_word_value(i)) == st) return i;
    return ~0U;
  }
  // The first live lane (other than the default lane) whose word satisfies pred, or ~0U.
  template <class Pred>
  std::uint32_t find_lane(Pred pred) {
    for (std::uint32_t i = 1; i < header().lane_capacity; ++i) {
      const detail::Word128 w = word_value(lane(i).word);
      if (detail::LaneWord::state(w) == detail::LaneState::live && pred(w)) return i;
    }
    return ~0U;
  }

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
  unsigned char* base_ = nullptr;
};

}  // namespace fairlane::test
