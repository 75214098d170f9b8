// `fairlane mirror SEG` ships a mirrored segment's transitions to Valkey
// until SIGINT or SIGTERM; `fairlane restore SEG --from URL` rebuilds a
// segment from Valkey.
#include "mirror_cmd.hpp"
#include "target.hpp"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "fairlane/mirror.hpp"
#include "fairlane/valkey.hpp"

namespace fairlane::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::string stamp() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&t));
  return buf;
}

}  // namespace

int run_mirror(const MirrorArgs& a) {
  const std::string seg = parse_segment_target(a.segment, "mirror");
  // 0 (or none): until a signal; else up to a day, in ms steps ("0.5").
  const std::chrono::milliseconds run_for =
      a.seconds.empty() ? std::chrono::milliseconds(0) : parse_seconds(a.seconds, "--seconds", 0, 86400);
  MirrorOptions o;
  o.url = a.url;
  const bool quiet = a.quiet;
  o.on_event = [quiet](std::string_view what) {
    if (!quiet) fmt::print(stderr, "{} fairlane mirror: {}\n", stamp(), what);
  };
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto m = Mirror::start(seg, o);
  if (!m) fail(m.error().message);
  const auto until = std::chrono::steady_clock::now() + run_for;
  while (!g_stop && (run_for.count() == 0 || std::chrono::steady_clock::now() < until)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  (*m)->stop();
  const MirrorCounters c = (*m)->counters();
  if (!quiet)
    fmt::print(stderr,
               "{} fairlane mirror: stopped: {} records, {} batches, {} jobs written, {} deleted, {} lane updates, "
               "{} resyncs, {} reconnects\n",
               stamp(), c.records, c.batches, c.jobs_written, c.jobs_deleted, c.lanes_written, c.resyncs, c.reconnects);
  return kExitOk;
}

int run_restore(const RestoreArgs& a) {
  const std::string seg = parse_segment_target(a.segment, "restore");
  if (!is_valkey_url(a.from))
    fail(fmt::format("--from must be a valkey://HOST:PORT/QUEUE URL, got '{}'", shown_target(a.from)));
  QueueOptions o;
  if (!a.jobs.empty()) o.jobs = parse_u32(a.jobs, "--jobs", 1);
  if (!a.lanes.empty()) o.lanes = parse_u32(a.lanes, "--lanes", 1);
  if (!a.payload_bytes.empty()) o.payload_bytes = parse_u32(a.payload_bytes, "--payload-bytes", 0);
  if (!a.job_kind.empty()) o.job_kind = parse_kind(a.job_kind);
  if (!a.mode.empty()) o.mode = parse_mode(a.mode);
  // Checked with or without --mirror. Without it the new segment takes the
  // mirror Valkey kept, with that mirror's settings, so a setting of ours
  // would be ignored: an error.
  const Durability durability = a.durability.empty() ? Durability::async : parse_durability(a.durability);
  const MirrorFull on_full = a.on_full.empty() ? MirrorFull::refuse : parse_on_full(a.on_full);
  if (a.mirror.empty() && !a.mirror_option.empty())
    fail(fmt::format("{} needs --mirror URL (without it, restore takes the mirror and its settings Valkey kept); "
                     "nothing restored", a.mirror_option));
  if (!a.mirror.empty()) {
    o.mirror = a.mirror;
    o.durability = durability;
    o.on_full = on_full;
  }
  auto r = restore_from_valkey(seg, a.from, o);
  const std::string from = shown_target(a.from);  // what is printed never holds a password
  if (!r) fail(r.error().message);
  const RestoreReport& rep = *r;
  nlohmann::json j = {{"segment", seg},       {"from", from},           {"pending", rep.pending},
                      {"leased", rep.leased}, {"scheduled", rep.scheduled}, {"dead", rep.dead},
                      {"flat", rep.flat},     {"lanes", rep.lanes},       {"skipped", rep.skipped},
                      {"skipped_names", rep.skipped_names}, {"paused", rep.paused}, {"owner", rep.owner}};
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("restored {} from {}: {} pending ({} were leased), {} scheduled, {} dead; {} lane settings{}\n", seg,
               from, rep.pending, rep.leased, rep.scheduled, rep.dead, rep.lanes,
               rep.paused ? "; the queue is paused" : "");
    if (!rep.owner.empty()) fmt::print("{} now owns {} (its mirror's keyspace is read-only through valkey://)\n", seg, from);
    if (rep.flat) fmt::print("{} of those were EchoMQ's ungrouped jobs, now in the default lane\n", rep.flat);
    if (rep.skipped) {
      fmt::print(stderr, "fairlane: skipped {} (not restored):\n", rep.skipped);
      for (const std::string& s : rep.skipped_names) fmt::print(stderr, "  {}\n", s);
      if (rep.skipped > rep.skipped_names.size())
        fmt::print(stderr, "  ... and {} more\n", rep.skipped - rep.skipped_names.size());
    }
  }
  return kExitOk;
}

}  // namespace fairlane::cli
