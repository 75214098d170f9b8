// The administration commands (see commands.hpp).
#include "commands.hpp"

#include <chrono>
#include <cstdio>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "fairlane/queue.hpp"
#include "format.hpp"

namespace fairlane::cli {

using nlohmann::json;

int nothing(std::string_view message) {
  fmt::print(stderr, "fairlane: {}\n", message);
  return kExitNothing;
}

namespace {

// Prints `text` for people or `j` for scripts.
void emit(bool as_json, const std::string& text, const json& j) {
  if (as_json) {
    print_json(j);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
  }
}

// The group as it goes into the library: the default lane is the empty id
// for enqueue (the documented spelling), kDefaultGroup everywhere else.
std::string group_label(const GroupArg& g) {
  return g.is_default ? std::string(kDefaultGroup) : g.id.string();
}

void check_lane_status(LaneStatus st, const GroupArg& g, const Queue& q) {
  switch (st) {
    case LaneStatus::ok: return;
    case LaneStatus::invalid_group: fail(fmt::format("invalid group '{}'", group_label(g)));
    case LaneStatus::invalid_argument:
      fail(fmt::format("the library refused the value for group {} (invalid_argument)", group_label(g)));
    case LaneStatus::lanes_full:
      fail(fmt::format("no lane free for group {}: all {} lanes of '{}' are taken", group_label(g),
                       q.config().lanes, q.name()));
  }
  fail(fmt::format("unexpected lane status {}", to_string(st)));
}

// Stale and gone are "nothing" (exit 1), not errors: the job moved on.
int ack_nothing(const Queue& q, const BrandedId& id, std::uint32_t attempt, bool gone, bool as_json,
                std::string_view op) {
  if (as_json)
    print_json({{"id", id.string()}, {"attempt", attempt}, {"status", gone ? "gone" : "stale"}});
  if (gone) return nothing(fmt::format("{}: no job {} in '{}' (gone)", op, id.str(), q.name()));
  return nothing(fmt::format("{}: job {} is not leased under attempt {} (stale token)", op, id.str(),
                             attempt));
}

}  // namespace

int run_create(const CreateArgs& a) {
  QueueOptions o;
  std::string seg = parse_segment(a.segment);
  o.jobs = parse_u32(a.jobs, "--jobs", 1);
  o.lanes = parse_u32(a.lanes, "--lanes", 1);
  o.payload_bytes = parse_u32(a.payload_bytes, "--payload-bytes", 0);
  o.job_kind = parse_kind(a.job_kind);
  o.mode = parse_mode(a.mode);
  o.node = static_cast<std::uint16_t>(parse_u32(a.node, "--node", 0, 1023));
  auto r = Queue::create(seg, o);
  if (!r) fail(r.error().message);
  QueueConfig c = r->config();
  json j = config_json(c);
  j["segment"] = seg;
  emit(a.json,
       fmt::format("created {}: {} jobs, {} lanes, {}-byte payloads, kind {}, node {}, {}", seg,
                   grouped(c.jobs), grouped(c.lanes), c.payload_bytes, c.job_kind, c.node,
                   bytes(c.segment_bytes)),
       j);
  return kExitOk;
}

int run_destroy(const SegmentArgs& a) {
  std::string seg = parse_segment(a.segment);
  Status st = Queue::remove(seg);
  if (!st) fail(st.error().message);
  emit(a.json, fmt::format("destroyed {}", seg), {{"segment", seg}, {"status", "destroyed"}});
  return kExitOk;
}

int run_mint(const MintArgs& a) {
  std::string seg = parse_segment(a.segment);
  std::string kind = a.kind.empty() ? std::string() : parse_kind(a.kind);
  Queue q = open_queue(seg);
  BrandedId id = kind.empty() ? q.mint() : q.mint(kind);
  if (!id.valid()) fail(fmt::format("mint returned no id (namespace '{}')", kind));
  emit(a.json, id.string(), {{"id", id.string()}});
  return kExitOk;
}

int run_enqueue(const EnqueueArgs& a) {
  std::string seg = parse_segment(a.segment);
  GroupArg g = parse_group(a.group);
  if (a.mint == !a.job.empty())
    fail(a.mint ? "enqueue: give either a JOBID or --mint, not both"
                : "enqueue: give a JOBID or --mint");
  BrandedId job;
  if (!a.mint) job = parse_id(a.job, "job id");
  EnqueueOptions eo;
  eo.delay_ms = parse_u64(a.delay_ms, "--delay");

  Queue q = open_queue(seg);
  QueueConfig c = q.config();
  if (!a.mint && job.kind() != c.job_kind)
    fail(fmt::format("job id '{}' is of namespace {}, but '{}' takes only {} job ids", job.str(),
                     job.kind(), seg, c.job_kind));
  if (a.mint) job = q.mint();

  EnqueueStatus st = q.enqueue(g.is_default ? BrandedId{} : g.id, job, a.payload, eo);
  switch (st) {
    case EnqueueStatus::enqueued:
    case EnqueueStatus::duplicate: {
      std::string status(to_string(st));
      emit(a.json, fmt::format("{} {}", status, job.str()),
           {{"status", status}, {"id", job.string()}, {"group", group_label(g)}});
      return kExitOk;
    }
    case EnqueueStatus::kind_mismatch:
      fail(fmt::format("job id '{}' is not of the queue's namespace {}", job.str(), c.job_kind));
    case EnqueueStatus::invalid_id: fail(fmt::format("invalid job id '{}'", job.str()));
    case EnqueueStatus::invalid_group: fail(fmt::format("invalid group '{}'", group_label(g)));
    case EnqueueStatus::payload_too_large:
      fail(fmt::format("payload of {} bytes is larger than the {} bytes '{}' allows", a.payload.size(),
                       c.payload_bytes, seg));
    case EnqueueStatus::full:
      fail(fmt::format("queue '{}' is full: all {} job slots are in use", seg, c.jobs));
    case EnqueueStatus::lanes_full:
      fail(fmt::format("no lane free for group {}: all {} lanes of '{}' are taken", group_label(g),
                       c.lanes, seg));
  }
  fail(fmt::format("unexpected enqueue status {}", to_string(st)));
}

int run_claim(const ClaimArgs& a) {
  std::string seg = parse_segment(a.segment);
  std::uint32_t lease_ms = parse_u32(a.lease_ms, "--lease", 1);
  std::uint64_t wait_ms = parse_u64(a.wait_ms, "--wait", 0, 24ULL * 3600 * 1000);
  Queue q = open_queue(seg);
  Lease l;
  bool got = wait_ms == 0
                 ? q.claim(l, lease_ms)
                 : q.claim_wait(l, lease_ms, std::chrono::milliseconds(static_cast<std::int64_t>(wait_ms)));
  if (!got) return nothing(fmt::format("nothing to claim in '{}'", seg));
  emit(a.json, fmt::format("{} {} {} {}", l.id.str(), l.group.str(), l.attempt, l.payload),
       lease_json(l));
  return kExitOk;
}

int run_complete(const AckArgs& a) {
  std::string seg = parse_segment(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  std::uint32_t attempt = parse_u32(a.attempt, "ATTEMPT");
  Queue q = open_queue(seg);
  AckStatus st = q.complete(id, attempt);
  if (st != AckStatus::ok) return ack_nothing(q, id, attempt, st == AckStatus::gone, a.json, "complete");
  emit(a.json, fmt::format("completed {}", id.str()),
       {{"id", id.string()}, {"attempt", attempt}, {"status", "completed"}});
  return kExitOk;
}

int run_fail(const AckArgs& a) {
  std::string seg = parse_segment(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  std::uint32_t attempt = parse_u32(a.attempt, "ATTEMPT");
  FailOptions fo;
  fo.delay_ms = parse_u64(a.delay_ms, "--delay");
  fo.max_attempts = parse_u32(a.max_attempts, "--max-attempts", 1);
  fo.error = a.error;
  Queue q = open_queue(seg);
  FailStatus st = q.fail(id, attempt, fo);
  switch (st) {
    case FailStatus::retrying:
    case FailStatus::dead: {
      std::string status(to_string(st));
      emit(a.json, fmt::format("{} {}", status, id.str()),
           {{"id", id.string()}, {"attempt", attempt}, {"status", status}});
      return kExitOk;
    }
    case FailStatus::stale: return ack_nothing(q, id, attempt, false, a.json, "fail");
    case FailStatus::gone: return ack_nothing(q, id, attempt, true, a.json, "fail");
  }
  fail(fmt::format("unexpected fail status {}", to_string(st)));
}

int run_extend(const AckArgs& a) {
  std::string seg = parse_segment(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  std::uint32_t attempt = parse_u32(a.attempt, "ATTEMPT");
  std::uint32_t ms = parse_u32(a.lease_ms, "MS", 1);
  Queue q = open_queue(seg);
  AckStatus st = q.extend(id, attempt, ms);
  if (st != AckStatus::ok) return ack_nothing(q, id, attempt, st == AckStatus::gone, a.json, "extend");
  emit(a.json, fmt::format("extended {} by {} ms", id.str(), ms),
       {{"id", id.string()}, {"attempt", attempt}, {"status", "extended"}, {"lease_ms", ms}});
  return kExitOk;
}

int run_pause(const LaneArgs& a, bool pause) {
  std::string seg = parse_segment(a.segment);
  const char* verb = pause ? "paused" : "resumed";
  if (a.group.empty()) {
    Queue q = open_queue(seg);
    pause ? q.pause_all() : q.resume_all();
    emit(a.json, fmt::format("{} queue {}", verb, seg), {{"segment", seg}, {"status", verb}});
    return kExitOk;
  }
  GroupArg g = parse_group(a.group);
  Queue q = open_queue(seg);
  check_lane_status(pause ? q.pause(g.id) : q.resume(g.id), g, q);
  emit(a.json, fmt::format("{} {}", verb, group_label(g)), {{"group", group_label(g)}, {"status", verb}});
  return kExitOk;
}

int run_limit(const LaneArgs& a) {
  std::string seg = parse_segment(a.segment);
  GroupArg g = parse_group(a.group);
  std::uint32_t limit = a.value == "none" ? 0 : parse_u32(a.value, "limit", 0, kMaxLimit);
  Queue q = open_queue(seg);
  check_lane_status(q.set_limit(g.id, limit), g, q);
  json jl = nullptr;
  if (limit != 0) jl = limit;
  emit(a.json, fmt::format("limit {} {}", group_label(g), limit == 0 ? std::string("none") : std::to_string(limit)),
       {{"group", group_label(g)}, {"limit", jl}});
  return kExitOk;
}

int run_weight(const LaneArgs& a) {
  std::string seg = parse_segment(a.segment);
  GroupArg g = parse_group(a.group);
  std::uint32_t w = parse_u32(a.value, "weight", 1, kMaxWeight);
  Queue q = open_queue(seg);
  check_lane_status(q.set_weight(g.id, w), g, q);
  emit(a.json, fmt::format("weight {} {}", group_label(g), w), {{"group", group_label(g)}, {"weight", w}});
  return kExitOk;
}

int run_depth(const LaneArgs& a) {
  std::string seg = parse_segment(a.segment);
  GroupArg g = parse_group(a.group);
  Queue q = open_queue(seg);
  std::uint64_t d = q.depth(g.id);
  emit(a.json, std::to_string(d), {{"group", group_label(g)}, {"depth", d}});
  return kExitOk;
}

int run_drain(const LaneArgs& a) {
  std::string seg = parse_segment(a.segment);
  GroupArg g = parse_group(a.group);
  Queue q = open_queue(seg);
  std::uint64_t n = q.drain(g.id);
  emit(a.json, std::to_string(n), {{"group", group_label(g)}, {"drained", n}});
  return kExitOk;
}

int run_tick(const SegmentArgs& a) {
  std::string seg = parse_segment(a.segment);
  Queue q = open_queue(seg);
  std::uint64_t n = q.tick();
  emit(a.json, std::to_string(n), {{"moved", n}});
  return kExitOk;
}

int run_inspect(const SegmentArgs& a) {
  std::string seg = parse_segment(a.segment);
  Queue q = open_queue(seg);
  QueueConfig c = q.config();
  Snapshot s = q.snapshot();
  if (a.json) {
    print_json(snapshot_json(seg, s, c));
  } else {
    std::string t = inspect_table(seg, s, c);
    std::fwrite(t.data(), 1, t.size(), stdout);
  }
  return kExitOk;
}

}  // namespace fairlane::cli
