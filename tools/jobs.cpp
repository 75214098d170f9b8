// `fairlane jobs SEG [--group G] [--state S] [--limit N] [--json]`: list
// jobs with their state, attempts and age. A scan of the slot table (O(jobs));
// at most N jobs, the first found in slot order, printed in id (mint) order.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "inspection.hpp"
#include "job_format.hpp"

namespace fairlane::cli {

int run_jobs(const JobsArgs& a) {
  const std::string seg = parse_segment_only(a.segment, "jobs");
  JobFilter f;
  if (!a.group.empty()) f.group = parse_group(a.group).id;
  if (!a.state.empty()) f.state = parse_state(a.state);
  f.limit = parse_u64(a.limit, "--limit", 1, 100'000'000);
  Queue q = open_segment(seg);
  std::vector<JobInfo> jobs = q.jobs(f);
  const std::uint64_t seg_now = q.now_ms();
  const std::uint64_t unix_now = unix_now_ms();
  std::sort(jobs.begin(), jobs.end(), [](const JobInfo& x, const JobInfo& y) { return x.id < y.id; });

  if (a.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const JobInfo& j : jobs) list.push_back(job_json(j, seg_now, unix_now));
    print_json({{"segment", seg}, {"now_ms", seg_now}, {"jobs", std::move(list)}});
    return kExitOk;
  }
  std::string out = fmt::format("{:<14}  {:<14}  {:<9} {:>4}  {:>7}  {}\n", "ID", "GROUP", "STATE", "ATT", "AGE",
                                "WHEN / LAST ERROR");
  for (const JobInfo& j : jobs) {
    std::string when = job_when(j, seg_now);
    if (!j.last_error.empty()) when += (when.empty() ? "" : "  ") + one_line(j.last_error);
    out += fmt::format("{:<14}  {:<14}  {:<9} {:>4}  {:>7}  {}\n", j.id.str(), group_name(j.group),
                       to_string(j.state), j.attempt,
                       span_ms(unix_now >= j.minted_unix_ms ? unix_now - j.minted_unix_ms : 0), when);
  }
  if (jobs.empty()) out += "(no jobs)\n";
  else if (jobs.size() == f.limit) out += fmt::format("(first {} found; raise --limit for more)\n", f.limit);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

}  // namespace fairlane::cli
