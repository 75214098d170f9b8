// A handle's liveness lock (segment.cpp: owner_alive), given up or taken
// back by a test: a judge that finds a record's lock free and its word
// stamped by pid judges it by pid and start time, as it would a process
// whose lock the kernel dropped at its death.
#pragma once

#include "segment.hpp"

#include <fairlane/queue.hpp>

#include <fcntl.h>

namespace fairlane::test {

// Takes (F_WRLCK) or gives up (F_UNLCK) the liveness lock byte of process
// record i through the open file description of fd, without waiting. True
// if it worked (false: another description holds it).
inline bool set_record_lock(int fd, std::uint32_t i, short type) {
  struct flock f {};
  f.l_type = type;
  f.l_whence = SEEK_SET;
  f.l_start = off_t(detail::kLivenessLockBase + i);
  f.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &f) == 0;
}

// A handle's own lock: F_UNLCK to give it up, F_WRLCK to take it back.
inline bool set_liveness_lock(Queue& q, short type) {
  const detail::Segment& s = detail::QueueAccess::segment(q);
  return set_record_lock(s.file.fd, s.me_index, type);
}

}  // namespace fairlane::test
