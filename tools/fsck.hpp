// `fairlane fsck`: the segment's invariants, checked against its job slots.
#pragma once

#include <string>

namespace fairlane::cli {

int run_fsck(const std::string& segment, bool json);

}  // namespace fairlane::cli
