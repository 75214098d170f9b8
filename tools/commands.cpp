// The administration commands (see commands.hpp).
#include "commands.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "fairlane/backend.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/valkey.hpp"
#include "format.hpp"
#include "job_format.hpp"
#include "retry_format.hpp"
#include "target.hpp"

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

// The group as every output names it: "default" for the default lane.
std::string group_label(const GroupArg& g) { return g.is_default ? std::string("default") : g.id.string(); }

// The lane table is full: say how many groups are live and how to size it.
[[noreturn]] void fail_lanes_full(Target& t, const GroupArg& g) {
  const Snapshot s = t->snapshot();
  const QueueConfig c = t.config();
  const std::uint64_t cap = lanes_capacity(s, c);
  fail(fmt::format("no lane free for group {}: {} groups are live at once in '{}', its --lanes {} (a group is live "
                   "while it has a pending or leased job, or a limit, weight or pause); create the "
                   "segment with --lanes at least the most groups live at once",
                   group_label(g), grouped(lanes_live(s)), t.label(), grouped(cap)));
}

void check_lane_status(LaneStatus st, const GroupArg& g, Target& t) {
  switch (st) {
    case LaneStatus::ok: return;
    case LaneStatus::invalid_group: fail(fmt::format("invalid group '{}'", group_label(g)));
    case LaneStatus::invalid_argument:
      fail(fmt::format("the library refused the value for group {} (invalid_argument)", group_label(g)));
    case LaneStatus::lanes_full: fail_lanes_full(t, g);
    case LaneStatus::read_only: fail_read_only(t);
    case LaneStatus::corrupt:
      fail(fmt::format("'{}' is corrupt where group {} was looked up (run fairlane fsck)", t.label(), group_label(g)));
  }
  fail(fmt::format("unexpected lane status {}", to_string(st)));
}

// Stale and gone are "nothing" (exit 1), not errors: the job moved on.
int ack_nothing(const Target& t, const BrandedId& id, Token token, bool gone, bool as_json, std::string_view op) {
  if (as_json) print_json({{"id", id.string()}, {"token", token.value}, {"status", gone ? "gone" : "stale"}});
  if (gone) return nothing(fmt::format("{}: no job {} in '{}' (gone)", op, id.str(), t.label()));
  return nothing(fmt::format("{}: job {} is not leased under token {} (stale token)", op, id.str(), token.value));
}

// The acknowledgement statuses that are neither success nor "nothing".
int ack_result(Target& t, AckStatus st, const BrandedId& id, Token token, bool as_json, std::string_view op) {
  switch (st) {
    case AckStatus::ok: return kExitOk;
    case AckStatus::stale: return ack_nothing(t, id, token, false, as_json, op);
    case AckStatus::gone: return ack_nothing(t, id, token, true, as_json, op);
    case AckStatus::read_only: fail_read_only(t);
    case AckStatus::corrupt: break;
  }
  fail(fmt::format("{}: '{}' is corrupt where job {} was looked up (run fairlane fsck)", op, t.label(), id.str()));
}

Token parse_token_arg(std::string_view text) {
  if (auto t = parse_token(text)) return *t;
  fail(fmt::format("invalid TOKEN '{}': expected the decimal token printed by claim", text));
}

// The largest payload file read: above any queue's payload limit, so a
// larger file is refused as too large without reading all of it.
constexpr std::size_t kMaxPayloadFile = 64u << 20;

// The bytes of FILE, or of stdin for "-", unchanged (binary-safe).
std::string read_payload_file(const std::string& path) {
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) fail(fmt::format("cannot read --payload-file '{}': {}", path, std::strerror(errno)));
  std::string out;
  char buf[65536];
  for (;;) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f);
    out.append(buf, n);
    if (out.size() > kMaxPayloadFile) {
      if (f != stdin) std::fclose(f);
      fail(fmt::format("--payload-file '{}' is larger than {}, more than any queue takes", path, bytes(kMaxPayloadFile)));
    }
    if (n < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  if (f != stdin) std::fclose(f);
  if (failed) fail(fmt::format("cannot read --payload-file '{}': {}", path, std::strerror(err)));
  return out;
}

}  // namespace

int run_create(const CreateArgs& a) {
  QueueOptions o;
  std::string seg = parse_segment_target(a.segment, "create");
  o.jobs = parse_u32(a.jobs, "--jobs", 1);
  o.lanes = parse_u32(a.lanes, "--lanes", 1);
  o.payload_bytes = parse_u32(a.payload_bytes, "--payload-bytes", 0);
  o.processes = parse_u32(a.processes, "--processes", 1, kMaxProcesses);
  o.job_kind = parse_kind(a.job_kind);
  o.mode = parse_mode(a.mode);
  o.node = static_cast<std::uint16_t>(parse_u32(a.node, "--node", 0, 1023));
  o.recovery_ms = parse_u32(a.recovery_ms, "--recovery-ms", kMinRecoveryMs, kMaxRecoveryMs);
  // The mirror's settings are checked with or without --mirror; without it
  // they would set nothing, so giving one is an error (asking for sync
  // durability must not silently get no mirror at all).
  const Durability durability = parse_durability(a.durability);
  const MirrorFull on_full = parse_on_full(a.on_full);
  const std::uint32_t mirror_log = parse_u32(a.mirror_log, "--mirror-log", 64, 1U << 26);
  const std::uint32_t sync_timeout_ms = parse_u32(a.sync_timeout_ms, "--sync-timeout", 1);
  if (a.mirror.empty() && !a.mirror_option.empty())
    fail(fmt::format("{} needs --mirror URL: without a mirror it sets nothing; nothing created", a.mirror_option));
  if (!a.mirror.empty()) {
    if (!is_valkey_url(a.mirror)) fail(fmt::format("--mirror must be a valkey://HOST:PORT/QUEUE URL, got '{}'", shown_target(a.mirror)));
    if (auto u = ValkeyUrl::parse(a.mirror); !u) fail(u.error().message);
    o.mirror = a.mirror;
    o.durability = durability;
    o.on_full = on_full;
    o.mirror_log = mirror_log;
    o.sync_timeout_ms = sync_timeout_ms;
  }
  auto r = Queue::create(seg, o);
  if (!r) {
    // The interim core takes only the default process table; say which flag.
    if (r.error().code == Errc::invalid_argument && o.processes != QueueOptions{}.processes)
      fail(fmt::format("--processes {} refused: {}", o.processes, r.error().message));
    fail(r.error().message);
  }
  QueueConfig c = r->config();
  json j = config_json(c);
  j["segment"] = seg;
  emit(a.json,
       fmt::format("created {}: {}, {}, {}-byte payloads, {}, kind {}, node {}, {}{}", seg,
                   plural(c.jobs, "job", "jobs"), plural(c.lanes, "lane", "lanes"), c.payload_bytes,
                   plural(c.processes != 0 ? c.processes : o.processes, "process", "processes"), c.job_kind, c.node,
                   bytes(c.segment_bytes),
                   c.mirror.empty() ? std::string()
                                    : fmt::format("; mirrored to {} ({}, on a full log: {}); start 'fairlane mirror {}'",
                                                  c.mirror, to_string(c.durability), to_string(c.on_full), seg)),
       j);
  return kExitOk;
}

int run_mint(const MintArgs& a) {
  const std::string typed = parse_target(a.segment);
  std::string kind = a.kind.empty() ? std::string() : parse_kind(a.kind);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    // Another namespace takes the next snowflake of the queue's own counter.
    BrandedId id = t->mint();
    if (!kind.empty()) id = BrandedId::make(kind, id.snowflake());
    if (!id.valid()) fail(fmt::format("mint returned no id (namespace '{}')", kind));
    emit(a.json, id.string(), {{"id", id.string()}});
    return kExitOk;
  });
}

int run_enqueue(const EnqueueArgs& a) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  GroupArg g = parse_group(a.group);
  if (a.mint == !a.job.empty())
    fail(a.mint ? "enqueue: give either a JOBID or --mint, not both" : "enqueue: give a JOBID or --mint");
  BrandedId job;
  if (!a.mint) job = parse_id(a.job, "job id");
  EnqueueOptions eo;
  eo.delay_ms = parse_u64(a.delay_ms, "--delay", 0, kMaxDelayMs);
  const std::uint64_t wait_ms = parse_u64(a.wait_ms, "--wait", 0, 24ULL * 3600 * 1000);
  if (!a.max_attempts.empty()) eo.retry.max_attempts = parse_u32(a.max_attempts, "--max-attempts", 1, 65535);
  if (!a.backoff.empty()) eo.retry.backoff = parse_backoff(a.backoff);
  if (a.payload_set && !a.payload_file.empty()) fail("enqueue: give either --payload or --payload-file, not both");
  const std::string payload = a.payload_file.empty() ? a.payload : read_payload_file(a.payload_file);

  return guarded([&] {
    Target t = open_target(typed, Access::create);
    const std::string kind = t->job_kind();
    if (!a.mint && job.kind() != kind)
      fail(fmt::format("job id '{}' is of namespace {}, but '{}' takes only {} job ids", job.str(), job.kind(), target,
                       kind));
    if (a.mint) job = t->mint();

    const BrandedId group = g.is_default ? BrandedId{} : g.id;
    EnqueueStatus st = wait_ms == 0 ? t->enqueue(group, job, payload, eo)
                                    : t->enqueue_wait(group, job, payload, eo,
                                                      std::chrono::milliseconds(static_cast<std::int64_t>(wait_ms)));
    switch (st) {
      case EnqueueStatus::enqueued:
      case EnqueueStatus::duplicate: {
        std::string status(to_string(st));
        emit(a.json, fmt::format("{} {}", status, job.str()),
             {{"status", status}, {"id", job.string()}, {"group", group_label(g)}});
        return kExitOk;
      }
      case EnqueueStatus::kind_mismatch:
        fail(fmt::format("job id '{}' is not of the queue's namespace {}", job.str(), kind));
      case EnqueueStatus::invalid_id: fail(fmt::format("invalid job id '{}'", job.str()));
      case EnqueueStatus::invalid_group: fail(fmt::format("invalid group '{}'", group_label(g)));
      case EnqueueStatus::payload_too_large:
        fail(fmt::format("payload of {} bytes is larger than the {} bytes '{}' allows", payload.size(),
                         t.config().payload_bytes, target));
      case EnqueueStatus::full:
        fail(fmt::format("queue '{}' is full: all {} job slots are in use{}", target, grouped(t.config().jobs),
                         wait_ms ? fmt::format(" (waited {} ms)", wait_ms) : std::string()));
      case EnqueueStatus::lanes_full: fail_lanes_full(t, g);
      case EnqueueStatus::mirror_behind:
        fail(fmt::format("'{}' refuses new jobs: its mirror's transition log is full (Valkey is away or behind; "
                         "see 'fairlane inspect {}'){}",
                         target, target, wait_ms ? fmt::format(" (waited {} ms)", wait_ms) : std::string()));
      case EnqueueStatus::mirror_unavailable:
        fail(fmt::format("'{}' is mirrored with sync durability and no mirror is running: start 'fairlane mirror {}'",
                         target, target));
      case EnqueueStatus::not_durable:
        fail(fmt::format("job {} is enqueued in '{}' but Valkey did not acknowledge it in time (not yet durable; "
                         "enqueueing it again is safe)", job.str(), target));
      case EnqueueStatus::invalid_argument:
        fail(fmt::format("'{}' refused the retry policy of job {} as out of range", target, job.str()));
      case EnqueueStatus::read_only: fail_read_only(t);
      case EnqueueStatus::corrupt:
        fail(fmt::format("'{}' is corrupt where job {} was to be admitted (run fairlane fsck)", target, job.str()));
    }
    fail(fmt::format("unexpected enqueue status {}", to_string(st)));
  });
}

int run_claim(const ClaimArgs& a) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  std::uint32_t lease_ms = parse_u32(a.lease_ms, "--lease", 1);
  std::uint64_t wait_ms = parse_u64(a.wait_ms, "--wait", 0, 24ULL * 3600 * 1000);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    Lease l;
    bool got = wait_ms == 0
                   ? t->claim(l, lease_ms)
                   : t->claim_wait(l, lease_ms, std::chrono::milliseconds(static_cast<std::int64_t>(wait_ms)));
    if (!got) return nothing(fmt::format("nothing to claim in '{}'", target));
    if (a.json) {
      print_json(lease_json(l));
    } else {
      // The payload goes out as its bytes, after the three fields a script splits on.
      const std::string head = fmt::format("{} {} {} ", l.id.str(), group_name(l.group), l.token.value);
      std::fwrite(head.data(), 1, head.size(), stdout);
      std::fwrite(l.payload.data(), 1, l.payload.size(), stdout);
      std::fputc('\n', stdout);
    }
    return kExitOk;
  });
}

int run_complete(const AckArgs& a) {
  const std::string typed = parse_target(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  Token token = parse_token_arg(a.token);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    AckStatus st = t->complete(id, token);
    if (st != AckStatus::ok) return ack_result(t, st, id, token, a.json, "complete");
    emit(a.json, fmt::format("completed {}", id.str()), {{"id", id.string()}, {"token", token.value}, {"status", "completed"}});
    return kExitOk;
  });
}

int run_release(const AckArgs& a) {
  const std::string typed = parse_target(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  Token token = parse_token_arg(a.token);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    AckStatus st = t->release(id, token);
    if (st != AckStatus::ok) return ack_result(t, st, id, token, a.json, "release");
    emit(a.json, fmt::format("released {}", id.str()), {{"id", id.string()}, {"token", token.value}, {"status", "released"}});
    return kExitOk;
  });
}

int run_fail(const AckArgs& a) {
  const std::string typed = parse_target(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  Token token = parse_token_arg(a.token);
  FailOptions fo;
  // Unset options: the job's own retry policy, then the queue's default.
  if (!a.delay_ms.empty()) fo.delay_ms = parse_u64(a.delay_ms, "--delay", 0, kMaxDelayMs);
  if (!a.max_attempts.empty()) fo.max_attempts = parse_u32(a.max_attempts, "--max-attempts", 1, 65535);
  fo.error = a.error;
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    FailStatus st = t->fail(id, token, fo);
    switch (st) {
      case FailStatus::retrying:
      case FailStatus::dead: {
        std::string status(to_string(st));
        emit(a.json, fmt::format("{} {}", status, id.str()), {{"id", id.string()}, {"token", token.value}, {"status", status}});
        return kExitOk;
      }
      case FailStatus::stale: return ack_nothing(t, id, token, false, a.json, "fail");
      case FailStatus::gone: return ack_nothing(t, id, token, true, a.json, "fail");
      case FailStatus::read_only: fail_read_only(t);
      case FailStatus::corrupt: break;
    }
    fail(fmt::format("fail: '{}' is corrupt where job {} was looked up (run fairlane fsck)", t.label(), id.str()));
  });
}

int run_extend(const AckArgs& a) {
  const std::string typed = parse_target(a.segment);
  BrandedId id = parse_id(a.job, "job id");
  Token token = parse_token_arg(a.token);
  std::uint32_t ms = parse_u32(a.lease_ms, "MS", 1);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    AckStatus st = t->extend(id, token, ms);
    if (st == AckStatus::stale) {
      // Stale also answers the lease's own token once its deadline has
      // passed, while complete, fail and release with it still work until a
      // sweep takes it back: "not leased under token T" would be untrue.
      const std::optional<JobInfo> j = t->job(id);
      const std::uint64_t now = t->now_ms();
      if (j && j->state == JobState::leased && j->token == token && j->when_ms <= now) {
        if (a.json) print_json({{"id", id.string()}, {"token", token.value}, {"status", "stale"}});
        return nothing(fmt::format("extend: the lease of job {} under token {} passed its deadline {} ago and cannot "
                                   "be extended; until a sweep takes it back, complete, fail or release it with that "
                                   "token",
                                   id.str(), token.value, span_ms(now - j->when_ms)));
      }
    }
    if (st != AckStatus::ok) return ack_result(t, st, id, token, a.json, "extend");
    emit(a.json, fmt::format("extended {} by {} ms", id.str(), ms),
         {{"id", id.string()}, {"token", token.value}, {"status", "extended"}, {"lease_ms", ms}});
    return kExitOk;
  });
}

int run_pause(const LaneArgs& a, bool pause) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  const char* verb = pause ? "paused" : "resumed";
  if (a.group.empty()) {
    return guarded([&] {
      Target t = open_target(typed, Access::write);
      if ((pause ? t->pause_all() : t->resume_all()) == LaneStatus::read_only) fail_read_only(t);
      emit(a.json, fmt::format("{} queue {}", verb, target), {{"segment", target}, {"status", verb}});
      return kExitOk;
    });
  }
  GroupArg g = parse_group(a.group);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    check_lane_status(pause ? t->pause(g.id) : t->resume(g.id), g, t);
    emit(a.json, fmt::format("{} {}", verb, group_label(g)), {{"group", group_label(g)}, {"status", verb}});
    return kExitOk;
  });
}

int run_limit(const LaneArgs& a) {
  const std::string typed = parse_target(a.segment);
  GroupArg g = parse_group(a.group);
  std::uint32_t limit =
      a.value == "none" ? 0 : parse_u32(a.value, "limit (1.." + std::to_string(kMaxLimit) + ", or 'none')", 1, kMaxLimit);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    check_lane_status(limit == 0 ? t->clear_limit(g.id) : t->set_limit(g.id, limit), g, t);
    json jl = nullptr;
    if (limit != 0) jl = limit;
    emit(a.json, fmt::format("limit {} {}", group_label(g), limit == 0 ? std::string("none") : std::to_string(limit)),
         {{"group", group_label(g)}, {"limit", jl}});
    return kExitOk;
  });
}

int run_weight(const LaneArgs& a) {
  const std::string typed = parse_target(a.segment);
  GroupArg g = parse_group(a.group);
  std::uint32_t w = parse_u32(a.value, "weight", 1, kMaxWeight);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    check_lane_status(t->set_weight(g.id, w), g, t);
    emit(a.json, fmt::format("weight {} {}", group_label(g), w), {{"group", group_label(g)}, {"weight", w}});
    return kExitOk;
  });
}

int run_depth(const LaneArgs& a) {
  const std::string typed = parse_target(a.segment);
  GroupArg g = parse_group(a.group);
  return guarded([&] {
    Target t = open_target(typed, Access::look);
    std::uint64_t d = t->depth(g.id);
    emit(a.json, std::to_string(d), {{"group", group_label(g)}, {"depth", d}});
    return kExitOk;
  });
}

int run_drain(const LaneArgs& a) {
  const std::string typed = parse_target(a.segment);
  GroupArg g = parse_group(a.group);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    std::uint64_t n = t->drain(g.id);
    emit(a.json, std::to_string(n), {{"group", group_label(g)}, {"drained", n}});
    return kExitOk;
  });
}

int run_tick(const SegmentArgs& a) {
  const std::string typed = parse_target(a.segment);
  return guarded([&] {
    Target t = open_target(typed, Access::write);
    std::uint64_t n = t->tick();
    emit(a.json, std::to_string(n), {{"moved", n}});
    return kExitOk;
  });
}

int run_inspect(const SegmentArgs& a) {
  const std::string typed = parse_target(a.segment), target = shown_target(typed);
  return guarded([&] {
    Target t = open_target(typed, Access::look);
    const Snapshot s = t->snapshot();
    const QueueConfig c = t.config();
    std::optional<SegmentView> view;
    if (const Queue* q = t.queue()) view = segment_view(*q);
    if (a.json) {
      json j = snapshot_json(target, s, c, view ? &*view : nullptr);
      if (ValkeyBackend* v = t.valkey()) {
        j["backend"] = "valkey";
        j["config"] = {{"job_kind", c.job_kind},
                       {"payload_bytes", c.payload_bytes},
                       {"node", c.node},
                       {"server", v->url().address()},
                       {"queue", v->url().queue}};
      }
      print_json(j);
    } else {
      std::string text = inspect_table(target, s, c, view ? &*view : nullptr);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return kExitOk;
  });
}

}  // namespace fairlane::cli
