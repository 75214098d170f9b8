// `fairlane mirror` and `fairlane restore` (docs/mirror.md).
#pragma once

#include <string>

namespace fairlane::cli {

struct MirrorArgs {
  std::string segment, url;
  std::string seconds;  // run this long, then stop (0: until SIGINT/SIGTERM)
  bool quiet = false;
};
struct RestoreArgs {
  std::string segment, from;
  std::string jobs, lanes, payload_bytes, job_kind, mode;  // empty: defaults / the queue's
  std::string mirror, durability, on_full;                 // the new segment's own mirror
  std::string mirror_option;  // --durability or --on-full, when given (empty: neither)
  bool json = false;
};

int run_mirror(const MirrorArgs& a);
int run_restore(const RestoreArgs& a);

}  // namespace fairlane::cli
