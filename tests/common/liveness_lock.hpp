// A handle's liveness lock (segment.cpp: owner_alive), given up or taken
// back by a test: a judge that finds a record's lock free and its word
// stamped by pid judges it by pid and start time, as it would a process
// whose lock the kernel dropped at its death.
#pragma once

#include "segment.hpp"

#include <fairlane/queue.hpp>

#include <fcntl.h>

namespace fairlane::test {

// F_UNLCK to give the lock up, F_WRLCK to take it back. True if it worked.
inline bool set_liveness_lock(Queue& q, short type) {
  const detail::Segment& s = detail::QueueAccess::segment(q);
  struct flock f {};
  f.l_type = type;
  f.l_whence = SEEK_SET;
  f.l_start = off_t(detail::kLivenessLockBase + s.me_index);
  f.l_len = 1;
  return ::fcntl(s.file.fd, F_OFD_SETLK, &f) == 0;
}

}  // namespace fairlane::test
