// `fairlane fsck SEG [--repair [--force]] [--json]`: check every invariant
// of a segment, and with --repair rebuild what is derived from its job slots.
// The first 1,000 violations are listed (JSON: "violations"), and how many
// more were found ("unlisted"); the summary line counts them all.
// Exit 0 clean (nothing to repair), 1 violations found (and, with --repair,
// repaired), 2 error (including a repair refused because other processes are
// attached, or one that left violations behind).
#include "fsck.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "cli_error.hpp"
#include "fairlane/queue.hpp"
#include "format.hpp"
#include "target.hpp"

namespace fairlane::cli {

namespace {

nlohmann::json issues_json(const std::vector<FsckIssue>& issues) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : issues) out.push_back({{"invariant", i.invariant}, {"detail", i.detail}});
  return out;
}

std::string count_violations(std::uint64_t n) { return plural(n, "violation", "violations"); }

// Each violation listed, one line each ("still " before each, after a
// repair), and how many more were found than listed.
void print_issues(const FsckReport& r, std::string_view prefix = {}) {
  for (const auto& i : r.issues) fmt::print("{}{}: {}\n", prefix, i.invariant, i.detail);
  if (r.unlisted) fmt::print("{}... and {} not listed\n", prefix, count_violations(r.unlisted));
}

// "64 slots, 9 lanes, 3 ring tokens"
std::string what_was_checked(const FsckReport& r) {
  return fmt::format("{}, {}, {}", plural(r.slots, "slot", "slots"), plural(r.lanes, "lane", "lanes"),
                     plural(r.tokens, "ring token", "ring tokens"));
}

int repair(Queue& q, const std::string& segment, bool json, bool force) {
  auto done = q.repair(force);
  if (!done) fail(done.error().message);
  const FsckReport& r = done.value();
  if (r.clean()) {
    if (json)
      fmt::print("{}\n", nlohmann::json{{"segment", segment}, {"clean", true}, {"repaired", false}, {"slots", r.slots},
                                         {"lanes", r.lanes}, {"tokens", r.tokens},
                                         {"violations", nlohmann::json::array()}, {"unlisted", 0},
                                         {"repairs", nlohmann::json::array()}}
                             .dump());
    else
      fmt::print("{}: {} checked: clean, nothing to repair\n", segment, what_was_checked(r));
    return kExitOk;
  }
  const FsckReport after = q.fsck();
  if (json) {
    nlohmann::json out = {{"segment", segment},
                          {"clean", false},
                          {"repaired", after.clean()},
                          {"slots", r.slots},
                          {"lanes", r.lanes},
                          {"tokens", r.tokens},
                          {"violations", issues_json(r.issues)},
                          {"unlisted", r.unlisted},
                          {"repairs", r.repairs},
                          {"remaining", issues_json(after.issues)},
                          {"remaining_unlisted", after.unlisted}};
    fmt::print("{}\n", out.dump());
  } else {
    print_issues(r);
    for (const auto& line : r.repairs) fmt::print("repair: {}\n", line);
    print_issues(after, "still ");
    if (after.clean())
      fmt::print("{}: {} checked: {} found: repaired\n", segment, what_was_checked(r), count_violations(r.violations()));
  }
  if (!after.clean())
    fail(fmt::format("repair of '{}' left {} (another process may be using it)", segment,
                     count_violations(after.violations())));
  return kExitNothing;
}

}  // namespace

int run_fsck(const std::string& text, bool json, bool repair_it, bool force) {
  const std::string segment = parse_segment_target(text, "fsck");
  // A check only looks: as an observer it is not a process of the queue. A
  // repair writes, and refuses while others are attached.
  auto q = Queue::open(segment, repair_it ? Queue::Attach::member : Queue::Attach::observer);
  if (!q) fail(q.error().message);
  if (repair_it) return repair(q.value(), segment, json, force);
  const FsckReport r = q->fsck();
  // fsck is exact on a quiet segment only: while processes work on it, a
  // step of theirs between two words can read as a violation. Said beside
  // the violations, so that a busy segment's are not taken for damage.
  std::vector<int> working;
  if (!r.clean())
    for (const ProcessInfo& p : q->processes())
      if (p.state == ProcessState::alive) working.push_back(p.pid);
  if (json) {
    nlohmann::json out = {{"segment", segment},
                          {"clean", r.clean()},
                          {"slots", r.slots},
                          {"lanes", r.lanes},
                          {"tokens", r.tokens},
                          {"violations", issues_json(r.issues)},
                          {"unlisted", r.unlisted},
                          {"working", working}};
    fmt::print("{}\n", out.dump());
  } else {
    print_issues(r);
    if (!working.empty())
      fmt::print("note: {} attached and running (pid {}{}): a violation may be one of their steps in flight; "
                 "check again once they are idle\n",
                 plural(working.size(), "process", "processes"), working.front(), working.size() > 1 ? ", ..." : "");
    fmt::print("{}: {} checked: {}\n", segment, what_was_checked(r), r.clean() ? "clean" : count_violations(r.violations()));
  }
  return r.clean() ? kExitOk : kExitNothing;
}

}  // namespace fairlane::cli
