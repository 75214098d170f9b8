// Restore: a new segment from a Valkey queue in EchoMQ's keyspace, written
// by a mirror or by the Valkey backend (include/fairlane/mirror.hpp).
#include <hiredis/hiredis.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "fairlane/mirror.hpp"
#include "retry_codec.hpp"
#include "segment.hpp"
#include "valkey/connection.hpp"
#include "valkey/retry_text.hpp"
#include "valkey/scripts.hpp"

namespace fairlane {
using valkey::Args;
using valkey::Reply;

namespace {

std::string_view text(const redisReply* r) noexcept {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) ? std::string_view(r->str, r->len)
                                                                               : std::string_view();
}

std::int64_t number(const redisReply* r, std::int64_t fallback = 0) noexcept {
  if (!r) return fallback;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  std::string_view t = text(r);
  if (t.empty()) return fallback;
  double d = 0;  // scores come back as "1.7e12" or "1700000000000"
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
  return ec == std::errc() ? std::int64_t(d) : fallback;
}

// A field map from HGETALL.
std::map<std::string, std::string> field_map(const redisReply* r) {
  std::map<std::string, std::string> out;
  if (!r || r->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2)
    out.emplace(std::string(text(r->element[i])), std::string(text(r->element[i + 1])));
  return out;
}

Error restore_error(Errc code, std::string message) { return Error{code, 0, std::move(message)}; }

struct RestoredJob {
  JobInfo info;
  std::string payload;
  std::int64_t score = -1;  // due time or death, Valkey ms
  bool flat = false;        // EchoMQ's ungrouped job: into the default lane
};

// Skipped keys named in the report; the count has them all.
constexpr std::size_t kSkippedNamed = 100;

}  // namespace

Result<RestoreReport> restore_from_valkey(std::string_view segment, std::string_view url_text, QueueOptions options) {
  auto url = ValkeyUrl::parse(url_text);
  if (!url) return url.error();
  // A segment of that name (whole or broken) is never overwritten; say so
  // before asking Valkey anything.
  if (auto existing = Queue::open(segment, Queue::Attach::observer); existing || existing.error().code != Errc::not_found)
    return restore_error(Errc::already_exists, "segment '" + std::string(segment) + "' already exists");
  const std::string prefix = url->prefix(), where = url->str();
  valkey::Client conn(*url, ValkeyOptions{});
  RestoreReport rep;
  // What is left out is counted, and the first of it named with the reason.
  auto skip = [&](std::string what, std::string_view why) {
    ++rep.skipped;
    if (rep.skipped_names.size() < kSkippedNamed) rep.skipped_names.push_back(std::move(what) + ": " + std::string(why));
  };
  std::vector<RestoredJob> jobs;
  std::map<std::string, std::pair<std::uint32_t, std::uint32_t>> lane_settings;  // group -> (limit, weight)
  std::vector<std::string> paused_groups;
  std::string kind;
  std::uint32_t max_payload = 0;
  std::int64_t valkey_now = 0;
  std::map<std::string, std::string> meta;

  try {
    if (std::string why = conn.connect(); !why.empty()) return restore_error(Errc::unavailable, why);
    auto cmd = [&](std::initializer_list<std::string_view> words) {
      Args a;
      for (auto w : words) a.add(w);
      return conn.command(a);
    };
    meta = field_map(cmd({"HGETALL", prefix + "meta"}).get());
    // A queue exists while any of its fixed keys does, as the Valkey backend
    // judges it (meta is written by what opened or mirrored it; a queue only
    // EchoMQ clients used may have none). A typo must not "restore" an
    // empty segment.
    if (meta.empty()) {
      Args a;
      a.add("EXISTS");
      for (std::string_view k : valkey::kFixedKeys) a.add(prefix + std::string(k));  // Args keeps a temporary
      if (number(conn.command(a).get()) == 0)
        return restore_error(Errc::not_found, where + " holds no queue '" + url->queue + "' (no key of it, such as " +
                                                  prefix + "meta): nothing restored");
    }
    if (auto it = meta.find("job_kind"); it != meta.end()) kind = it->second;
    if (auto it = meta.find("max_payload"); it != meta.end()) max_payload = std::uint32_t(std::stoul(it->second));
    // The field's presence, whatever its value, as EchoMQ's claims and the
    // backend's scripts read it (EchoMQ writes '1', deletes it to resume).
    rep.paused = meta.count("paused") != 0;
    {
      Reply t = cmd({"TIME"});
      if (!t || t->type != REDIS_REPLY_ARRAY || t->elements != 2)
        return restore_error(Errc::unavailable, where + ": unexpected TIME reply");
      valkey_now = number(t->element[0]) * 1000 + number(t->element[1]) / 1000;
    }

    // Every job key, then its fields and scores in pipelines of 512.
    std::vector<std::string> ids;
    std::string cursor = "0";
    const std::string pattern = prefix + "job:*";
    do {
      Reply r = cmd({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return restore_error(Errc::unavailable, where + ": unexpected SCAN reply");
      cursor = std::string(text(r->element[0]));
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        // The pattern matches a job's own keys too (EchoMQ's job:<id>:logs
        // list): those are no job, and not a job to count as skipped.
        const std::string_view id = text(r->element[1]->element[i]).substr(prefix.size() + 4);
        if (id.find(':') == std::string_view::npos) ids.emplace_back(id);
      }
    } while (cursor != "0");
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());

    // Args keeps views: every key it names must outlive the pipeline.
    const std::string schedule_key = prefix + "schedule", dead_key = prefix + "dead";
    for (std::size_t from = 0; from < ids.size(); from += 512) {
      const std::size_t to = std::min(ids.size(), from + 512);
      std::vector<std::string> keys;
      std::vector<Args> cmds;
      keys.reserve(to - from);
      for (std::size_t i = from; i < to; ++i) {
        keys.push_back(prefix + "job:" + ids[i]);
        Args a;
        a.add("HMGET").add(keys.back()).add("state").add("attempts").add("payload").add("group").add("last_error")
            .add("fl_skip").add("dead_ms").add("fl_retry");
        cmds.push_back(std::move(a));
        Args sc;
        sc.add("ZSCORE").add(schedule_key).add(ids[i]);
        cmds.push_back(std::move(sc));
        Args dd;
        dd.add("ZSCORE").add(dead_key).add(ids[i]);
        cmds.push_back(std::move(dd));
      }
      std::vector<Reply> replies = conn.pipeline(cmds);
      for (std::size_t i = from; i < to; ++i) {
        const redisReply* h = replies[(i - from) * 3].get();
        const redisReply* sched = replies[(i - from) * 3 + 1].get();
        const redisReply* dead = replies[(i - from) * 3 + 2].get();
        if (!h || h->type != REDIS_REPLY_ARRAY || h->elements != 8) {
          skip(keys[i - from], "not a hash (a key someone else wrote)");
          continue;
        }
        if (h->element[0]->type != REDIS_REPLY_STRING) {
          skip(keys[i - from], "no state (not a whole job: someone else's key, or a job half-deleted)");
          continue;
        }
        RestoredJob j;
        auto id = BrandedId::parse(ids[i]);
        if (!id) {
          skip(keys[i - from], "its id is not a branded id");
          continue;
        }
        j.info.id = *id;
        // A row without a group is EchoMQ's flat job (its plain enqueue; the
        // id in `pending`). A segment's jobs without a group are its default
        // lane, so that is where it goes, in id order with the default lane's
        // other jobs, its state, attempts and times kept as a grouped job's
        // are. Left out, it was lost: a mirror of the new segment deletes
        // the rows its segment does not hold.
        if (h->element[3]->type == REDIS_REPLY_STRING) {
          auto group = BrandedId::parse(text(h->element[3]));
          if (!group) {
            skip(keys[i - from], "its group '" + std::string(text(h->element[3])) + "' is not a branded id");
            continue;
          }
          j.info.group = *group;
        } else {
          j.flat = true;
        }
        const std::string_view st = text(h->element[0]);
        // The delivery count: EchoMQ's attempts less the steps that were no
        // delivery (fairlane's releases and requeues, fl_skip).
        j.info.attempt = std::uint32_t(std::max<std::int64_t>(0, number(h->element[1]) - number(h->element[5])));
        j.payload = std::string(text(h->element[2]));
        j.info.last_error = std::string(text(h->element[4]));
        // The job's own retry policy (fl_retry, written by the backend's
        // enqueue and by the mirror): a fail() without options follows it.
        // One out of the segment's ranges (a row someone else wrote) is
        // left out rather than failing the restore.
        if (RetryPolicy p = valkey::decode_policy(text(h->element[7])); detail::retry_valid(p)) j.info.retry = p;
        if (st == "pending") {
          j.info.state = JobState::pending;
        } else if (st == "active") {
          j.info.state = JobState::leased;
        } else if (st == "scheduled") {
          j.info.state = JobState::scheduled;
          j.score = number(sched, valkey_now);
        } else if (st == "dead") {
          j.info.state = JobState::dead;
          // dead is scored 0 (EchoMQ's id order); the time of death is the
          // row's dead_ms where fairlane wrote one, else the score of an
          // older keyspace, else now.
          const std::int64_t when = number(h->element[6], -1);
          const std::int64_t score = number(dead, 0);
          j.score = when >= 0 ? when : score > 0 ? score : valkey_now;
        } else {
          // EchoMQ's flows keep a parent as awaiting_children: a segment has
          // no such state.
          skip(keys[i - from], "state '" + std::string(st) + "' is none a segment holds");
          continue;
        }
        jobs.push_back(std::move(j));
      }
    }

    for (auto& [g, v] : field_map(cmd({"HGETALL", prefix + "glimit"}).get()))
      lane_settings[g].first = std::uint32_t(std::stoul(v));
    for (auto& [g, v] : field_map(cmd({"HGETALL", prefix + "gweight"}).get()))
      lane_settings[g].second = std::uint32_t(std::stoul(v));
    Reply p = cmd({"SMEMBERS", prefix + "paused"});
    if (p && p->type == REDIS_REPLY_ARRAY)
      for (std::size_t i = 0; i < p->elements; ++i) paused_groups.emplace_back(text(p->element[i]));
  } catch (const BackendError& e) {
    return restore_error(Errc::unavailable, e.what());
  } catch (const std::exception& e) {
    return restore_error(Errc::corrupt, where + ": a setting that is not a number (" + e.what() + ")");
  }

  // The segment: what the mirror kept in meta (its geometry and mirror
  // settings) and the queue's kind and payload size, unless the options set
  // them (an option left at its default is not set); room for every job.
  const QueueOptions defaults;
  if (options.job_kind == defaults.job_kind && !kind.empty()) options.job_kind = kind;
  if (options.payload_bytes == defaults.payload_bytes && max_payload) options.payload_bytes = max_payload;
  auto setting = [&](const char* field) -> std::optional<std::uint64_t> {
    auto it = meta.find(field);
    if (it == meta.end() || it->second.empty()) return std::nullopt;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || p != it->second.data() + it->second.size()) return std::nullopt;
    return v;
  };
  auto text_setting = [&](const char* field) -> std::string {
    auto it = meta.find(field);
    return it == meta.end() ? std::string() : it->second;
  };
  if (options.jobs == defaults.jobs)
    if (auto v = setting("seg_jobs")) options.jobs = std::uint32_t(std::max<std::uint64_t>(*v, jobs.size()));
  if (options.lanes == defaults.lanes)
    if (auto v = setting("seg_lanes")) options.lanes = std::uint32_t(*v);
  if (options.payload_bytes == defaults.payload_bytes)
    if (auto v = setting("seg_payload_bytes")) options.payload_bytes = std::uint32_t(*v);
  if (options.processes == defaults.processes)
    if (auto v = setting("seg_processes")) options.processes = std::uint32_t(*v);
  if (options.node == defaults.node)
    if (auto v = setting("seg_node")) options.node = std::uint16_t(*v);
  if (options.recovery_ms == defaults.recovery_ms)
    if (auto v = setting("seg_recovery_ms")) options.recovery_ms = std::uint32_t(*v);
  if (options.default_retry.empty()) {
    if (auto v = setting("seg_retry_max")) options.default_retry.max_attempts = std::uint32_t(*v);
    const std::string b = text_setting("seg_retry_backoff");
    if (!b.empty()) {
      char k = 0;
      long long base = 0, cap = 0;
      double factor = 1, jitter = 0;
      if (std::sscanf(b.c_str(), "%c;%lld;%lld;%lf;%lf", &k, &base, &cap, &factor, &jitter) == 5) {
        Backoff bo = k == 'f' ? Backoff::fixed(std::chrono::milliseconds(base), jitter)
                              : Backoff::exponential(std::chrono::milliseconds(base), std::chrono::milliseconds(cap),
                                                     factor, jitter);
        if (bo.valid()) options.default_retry.backoff = bo;
      }
    }
  }
  if (options.mirror.empty()) {
    // The mirror it had (kept without a password), with its settings.
    options.mirror = text_setting("seg_mirror");
    if (!options.mirror.empty()) {
      if (text_setting("seg_durability") == "sync") options.durability = Durability::sync;
      if (text_setting("seg_on_full") == "drop") options.on_full = MirrorFull::drop;
      if (auto v = setting("seg_mirror_log")) options.mirror_log = std::uint32_t(*v);
      if (auto v = setting("seg_sync_timeout_ms")) options.sync_timeout_ms = std::uint32_t(*v);
    }
  }
  // A password never lands in the segment header.
  if (!options.mirror.empty())
    if (auto mu = ValkeyUrl::parse(options.mirror)) options.mirror = mu->str();
  for (const RestoredJob& j : jobs) {
    if (j.payload.size() > options.payload_bytes)
      return restore_error(Errc::invalid_argument, "job " + j.info.id.string() + " has a payload of " +
                                                       std::to_string(j.payload.size()) + " bytes; the segment would take " +
                                                       std::to_string(options.payload_bytes));
    if (j.info.id.kind() != options.job_kind)
      return restore_error(Errc::invalid_argument, "job " + j.info.id.string() + " is not of the job kind " + options.job_kind);
  }
  if (jobs.size() > options.jobs)
    return restore_error(Errc::invalid_argument, where + " holds " + std::to_string(jobs.size()) +
                                                     " jobs, more than the segment's " + std::to_string(options.jobs) +
                                                     " job slots (--jobs)");
  auto q = Queue::create(segment, options);
  if (!q) return q.error();
  auto undo = [&](std::string why) -> Result<RestoreReport> {
    (void)Queue::remove(segment);
    return restore_error(Errc::invalid_argument, std::move(why));
  };

  for (const auto& [g, lw] : lane_settings) {
    auto group = BrandedId::parse(g);
    if (!group) {
      skip("group '" + g + "' of " + prefix + "glimit or gweight", "not a branded id (its limit and weight not restored)");
      continue;
    }
    if (lw.first && q->set_limit(*group, std::min(lw.first, kMaxLimit)) != LaneStatus::ok)
      return undo("cannot restore the limit of group " + g);
    if (lw.second > 1 && q->set_weight(*group, std::min(lw.second, kMaxWeight)) != LaneStatus::ok)
      return undo("cannot restore the weight of group " + g);
    ++rep.lanes;
  }
  for (const std::string& g : paused_groups) {
    auto group = BrandedId::parse(g);
    if (!group) {
      skip("group '" + g + "' of " + prefix + "paused", "not a branded id (its pause not restored)");
      continue;
    }
    if (q->pause(*group) != LaneStatus::ok) return undo("cannot pause group " + g);
    if (!lane_settings.count(g)) ++rep.lanes;
  }
  const std::int64_t seg_now = std::int64_t(q->now_ms());
  for (RestoredJob& j : jobs) {
    if (j.score >= 0) {
      // Valkey ms -> segment clock; a due time that has passed is due now.
      j.info.when_ms = std::uint64_t(std::max<std::int64_t>(
          j.info.state == JobState::scheduled ? seg_now : 0, j.score - valkey_now + seg_now));
    }
    const EnqueueStatus st = q->import_job(j.info, j.payload);
    if (st == EnqueueStatus::duplicate) continue;  // listed twice: restored once
    if (st != EnqueueStatus::enqueued)
      return undo("cannot restore job " + j.info.id.string() + ": " + std::string(to_string(st)));
    if (j.flat) ++rep.flat;
    switch (j.info.state) {
      case JobState::leased: ++rep.leased; [[fallthrough]];
      case JobState::pending: ++rep.pending; break;
      case JobState::scheduled: ++rep.scheduled; break;
      case JobState::dead: ++rep.dead; break;
    }
  }
  if (rep.paused && q->pause_all() != LaneStatus::ok) return undo("cannot pause the restored queue");
  // The restored segment takes the keyspace over: if it mirrors into this
  // queue, meta names it as the owner from now on (its mirror will too).
  if (auto mu = ValkeyUrl::parse(options.mirror); mu && mu->queue == url->queue) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "localhost");
    try {
      Args a;
      a.add("HSET").add(prefix + "meta").add("owner").add(std::string(host) + ":" + std::string(segment));
      (void)conn.command(a);
      rep.owner = std::string(host) + ":" + std::string(segment);
    } catch (const BackendError&) {
      // The segment is restored; its mirror writes the owner when it starts.
    }
  }
  return rep;
}

}  // namespace fairlane
