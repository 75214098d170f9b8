// `fairlane jobs SEG [--group G] [--state S] [--limit N] [--json]`: list
// jobs with their state, attempts, retry policy and age. A scan of the slot
// table on a segment (O(jobs)); at most N jobs, printed in id (mint) order.
//
// `fairlane job SEG ID [--json | --payload-only]`: one job whole, payload
// included. Exit 1 when there is no such job.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "inspection.hpp"
#include "job_format.hpp"
#include "retry_format.hpp"
#include "target.hpp"

namespace fairlane::cli {

namespace {

// "2" or "2/5": the delivery count, and of how many when the job says.
std::string attempts(const JobInfo& j) {
  if (j.retry.max_attempts == 0) return std::to_string(j.attempt);
  return fmt::format("{}/{}", j.attempt, j.retry.max_attempts);
}

// The state of the process holding a lease, where the segment keeps process
// records. A dead holder's lease comes back at the next sweep, long before
// the deadline the job shows, and a stopped one's waits for that deadline.
// Unknown when two records name the pid in different states (processes of
// two PID namespaces): the records are told apart only by pid here.
std::optional<ProcessState> holder_state(Target& t, const JobInfo& j) {
  if (j.state != JobState::leased || j.holder_pid == 0 || !t.capabilities().process_records) return std::nullopt;
  std::optional<ProcessState> found;
  for (const ProcessInfo& p : t->processes()) {
    if (p.pid != j.holder_pid) continue;
    if (found && *found != p.state) return std::nullopt;
    found = p.state;
  }
  return found;
}

}  // namespace

int run_jobs(const JobsArgs& a) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  JobFilter f;
  if (!a.group.empty()) f.group = parse_group(a.group).id;
  if (!a.state.empty()) f.state = parse_state(a.state);
  const std::size_t limit = parse_u64(a.limit, "--limit", 1, 100'000'000);
  f.limit = limit + 1;  // one more than shown: whether the list was cut
  return guarded([&] {
    Target t = open_target(typed, Access::look);
    std::vector<JobInfo> jobs = t->jobs(f);
    const std::uint64_t seg_now = t->now_ms();
    const std::uint64_t unix_now = unix_now_ms();
    std::sort(jobs.begin(), jobs.end(), [](const JobInfo& x, const JobInfo& y) { return x.id < y.id; });
    const bool truncated = jobs.size() > limit;
    if (truncated) jobs.resize(limit);

    if (a.json) {
      nlohmann::json list = nlohmann::json::array();
      for (const JobInfo& j : jobs) list.push_back(job_json(j, seg_now, unix_now));
      print_json({{"segment", target}, {"now_ms", seg_now}, {"jobs", std::move(list)}, {"truncated", truncated}});
      return kExitOk;
    }
    std::string out = fmt::format("{:<14}  {:<14}  {:<9} {:>5}  {:>7}  {}\n", "ID", "GROUP", "STATE", "ATT", "AGE",
                                  "WHEN / RETRY / LAST ERROR");
    for (const JobInfo& j : jobs) {
      std::string when = job_when(j, seg_now);
      auto add = [&when](const std::string& more) { when += (when.empty() ? "" : "  ") + more; };
      if (j.retry.backoff) add("retry " + policy_text(RetryPolicy{0, j.retry.backoff}));
      if (!j.last_error.empty()) add(one_line(j.last_error, 60));
      out += fmt::format("{:<14}  {:<14}  {:<9} {:>5}  {:>7}  {}\n", id_text(j.id), group_name(j.group),
                         to_string(j.state), attempts(j),
                         span_ms(unix_now >= j.minted_unix_ms ? unix_now - j.minted_unix_ms : 0), when);
    }
    if (jobs.empty()) out += "(no jobs)\n";
    else if (truncated) out += fmt::format("(first {} found; raise --limit for more)\n", limit);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  });
}

int run_job(const JobArgs& a) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  const BrandedId id = parse_id(a.id, "job id");
  if (a.json && a.payload_only) fail("job: give --json or --payload-only, not both");
  return guarded([&] {
    Target t = open_target(typed, Access::look);
    const std::optional<JobInfo> found = t->job(id, true);
    if (!found) {
      if (a.json) print_json({{"id", id.string()}, {"status", "gone"}});
      return nothing(fmt::format("job: no job {} in '{}'", id.str(), target));
    }
    const JobInfo& j = *found;
    if (a.payload_only) {
      std::fwrite(j.payload.data(), 1, j.payload.size(), stdout);
      return kExitOk;
    }
    const std::uint64_t seg_now = t->now_ms();
    const std::uint64_t unix_now = unix_now_ms();
    const std::optional<ProcessState> holder = holder_state(t, j);
    if (a.json) {
      nlohmann::json o = job_json(j, seg_now, unix_now);
      o["holder_state"] = holder ? nlohmann::json(std::string(to_string(*holder))) : nlohmann::json(nullptr);
      // A JSON string holds text: bytes that are not UTF-8 would come back
      // changed, so such a payload also goes out exactly, in base64.
      if (valid_utf8(j.payload)) {
        o["payload"] = j.payload;
      } else {
        o["payload"] = nullptr;
        o["payload_base64"] = base64(j.payload);
      }
      print_json(o);
      return kExitOk;
    }
    auto ago = [&](std::uint64_t then_unix) {
      return span_ms(unix_now > then_unix ? unix_now - then_unix : 0) + " ago";
    };
    std::string out;
    auto line = [&out](std::string_view key, const std::string& value) { out += fmt::format("{:<9}{}\n", key, value); };
    line("job", id_text(j.id));
    line("group", group_name(j.group));
    const std::string when = job_when(j, seg_now);
    line("state", std::string(to_string(j.state)) + (when.empty() ? "" : " (" + when + ")"));
    std::string att = fmt::format("{}", j.attempt);
    if (j.retry.max_attempts != 0) att += fmt::format(" of {}", j.retry.max_attempts);
    if (j.state == JobState::leased) {
      att += fmt::format(", token {}", j.token.value);
      if (j.holder_pid != 0) att += fmt::format(", held by pid {}", j.holder_pid);
      if (holder == ProcessState::dead) att += " (dead: the next sweep, inside a claim or tick, takes the lease back)";
      if (holder == ProcessState::stopped) att += " (stopped: it keeps the lease until its deadline)";
    }
    line("attempt", att);
    line("retry", j.retry.empty() ? std::string("the queue's default (none given at enqueue)") : policy_text(j.retry));
    line("error", j.last_error.empty() ? std::string("-") : one_line(j.last_error));
    line("minted", fmt::format("{} ({})", local_time(j.minted_unix_ms), ago(j.minted_unix_ms)));
    if (j.ready_ms != 0) line("ready", ago(segment_to_unix_ms(j.ready_ms, seg_now, unix_now)));
    line("payload", fmt::format("{} byte{}", grouped(j.payload.size()), j.payload.size() == 1 ? "" : "s"));
    out += escape_bytes(j.payload);
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  });
}

}  // namespace fairlane::cli
