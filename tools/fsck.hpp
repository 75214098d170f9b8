// `fairlane fsck`: the segment's invariants, checked against its job slots.
#pragma once

#include <string>

namespace fairlane::cli {

// repair: rebuild the derived structures (Queue::repair); force: even while
// other processes are attached.
int run_fsck(const std::string& segment, bool json, bool repair = false, bool force = false);

}  // namespace fairlane::cli
