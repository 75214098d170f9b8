// `fairlane fsck SEG [--json]`: check every invariant of a segment.
// Exit 0 clean, 1 violations found, 2 error (as the tool's convention).
#include "fsck.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli_error.hpp"
#include "fairlane/queue.hpp"

namespace fairlane::cli {

int run_fsck(const std::string& segment, bool json) {
  auto q = Queue::open(segment);
  if (!q) fail(q.error().message);
  const FsckReport r = q->fsck();
  if (json) {
    nlohmann::json out = {{"segment", segment}, {"clean", r.clean()}, {"slots", r.slots}, {"lanes", r.lanes},
                          {"tokens", r.tokens}, {"violations", nlohmann::json::array()}};
    for (const auto& i : r.issues) out["violations"].push_back({{"invariant", i.invariant}, {"detail", i.detail}});
    fmt::print("{}\n", out.dump());
  } else {
    for (const auto& i : r.issues) fmt::print("{}: {}\n", i.invariant, i.detail);
    fmt::print("{}: {} slots, {} lanes, {} ring tokens checked: {}\n", segment, r.slots, r.lanes, r.tokens,
               r.clean() ? "clean" : fmt::format("{} violation{}", r.issues.size(), r.issues.size() == 1 ? "" : "s"));
  }
  return r.clean() ? kExitOk : kExitNothing;
}

}  // namespace fairlane::cli
