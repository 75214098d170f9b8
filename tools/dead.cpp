// `fairlane dead SEG list [--json] | requeue ID | requeue --all | purge`:
// look at and act on dead-lettered jobs.
//
// list is in id (mint) order, as EchoMQ browses its dead set. requeue puts a
// job back in its lane at its mint position, starting again at attempt 1
// with a fresh token (Queue::requeue_dead). purge removes every dead job for
// good. On a segment or a valkey:// queue alike.
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
#include "target.hpp"

namespace fairlane::cli {

namespace {

int dead_list(Target& t, const std::string& seg, std::size_t limit, bool as_json) {
  JobFilter f;
  f.state = JobState::dead;
  f.limit = limit + 1;  // one more than shown: whether the list was cut
  std::vector<JobInfo> dead = t->jobs(f);
  const std::uint64_t seg_now = t->now_ms();
  const std::uint64_t unix_now = unix_now_ms();
  std::sort(dead.begin(), dead.end(), [](const JobInfo& x, const JobInfo& y) { return x.id < y.id; });
  const bool truncated = dead.size() > limit;
  if (truncated) dead.resize(limit);
  if (as_json) {
    nlohmann::json list = nlohmann::json::array();
    for (const JobInfo& j : dead) list.push_back(job_json(j, seg_now, unix_now));
    print_json({{"segment", seg}, {"now_ms", seg_now}, {"jobs", std::move(list)}, {"truncated", truncated}});
    return kExitOk;
  }
  std::string out = fmt::format("{:<14}  {:<14}  {:>4}  {:<14}  {}\n", "ID", "GROUP", "ATT", "DIED AT", "LAST ERROR");
  for (const JobInfo& j : dead) {
    out += fmt::format("{:<14}  {:<14}  {:>4}  {:<14}  {}\n", id_text(j.id), group_name(j.group), j.attempt,
                       local_time(segment_to_unix_ms(j.when_ms, seg_now, unix_now)),
                       j.last_error.empty() ? std::string("-") : one_line(j.last_error, 80));
  }
  if (dead.empty()) out += "(no dead jobs)\n";
  else if (truncated) out += fmt::format("(first {} found; raise --limit for more)\n", limit);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

void emit(bool as_json, const std::string& text, const nlohmann::json& j) {
  if (as_json) {
    print_json(j);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
}

}  // namespace

int run_dead(const DeadArgs& a) {
  const std::string typed = parse_target(a.segment), seg = shown_target(typed);
  const std::string& act = a.action;
  if (act == "list" || act == "purge") {
    if (!a.id.empty()) fail(fmt::format("dead {}: takes no job id", act));
    if (a.all) fail(fmt::format("dead {}: --all is for requeue", act));
  } else if (act == "requeue") {
    if (a.all == !a.id.empty())
      fail(a.all ? "dead requeue: give either an ID or --all, not both" : "dead requeue: give a job ID or --all");
  } else {
    fail(fmt::format("invalid action '{}': expected list, requeue or purge", act));
  }
  const std::size_t limit = parse_u64(a.limit, "--limit", 1, 100'000'000);
  BrandedId id;
  if (!a.id.empty()) id = parse_id(a.id, "job id");

  return guarded([&] {
    Target t = open_target(typed, act == "list" ? Access::look : Access::write);
    if (act == "list") return dead_list(t, seg, limit, a.json);
    if (act == "purge") {
      const std::uint64_t n = t->purge_dead();
      emit(a.json, fmt::format("purged {}", n), {{"segment", seg}, {"purged", n}});
      return kExitOk;
    }
    if (a.all) {
      const std::uint64_t n = t->requeue_all_dead();
      emit(a.json, fmt::format("requeued {}", n), {{"segment", seg}, {"requeued", n}});
      return kExitOk;
    }
    switch (t->requeue_dead(id)) {
      case AckStatus::ok:
        emit(a.json, fmt::format("requeued {}", id.str()), {{"id", id.string()}, {"status", "requeued"}});
        return kExitOk;
      case AckStatus::stale: {
        auto j = t->job(id);
        if (a.json) print_json({{"id", id.string()}, {"status", "not_dead"}});
        return nothing(fmt::format("dead requeue: job {} is not dead (it is {})", id.str(),
                                   j ? to_string(j->state) : std::string_view("changing state")));
      }
      case AckStatus::gone:
        if (a.json) print_json({{"id", id.string()}, {"status", "gone"}});
        return nothing(fmt::format("dead requeue: no job {} in '{}'", id.str(), seg));
      case AckStatus::read_only: fail_read_only(t);
      case AckStatus::corrupt: break;
    }
    fail(fmt::format("dead requeue: '{}' is corrupt where job {} was looked up (run fairlane fsck)", seg, id.str()));
  });
}

}  // namespace fairlane::cli
