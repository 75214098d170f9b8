// `fairlane stats SEG [--prometheus | --json] [--output FILE]`: counters,
// gauges and per-lane wait histograms.
//
// --prometheus writes the text exposition format (version 0.0.4) for
// node_exporter's textfile collector: every series carries
// segment="<name>", per-lane series add group="<id or default>", counters end
// in _total, and each lane's enqueue-to-claim wait is a histogram in seconds
// (cumulative le buckets at the segment histogram's power-of-two bounds).
// --output writes to FILE through a temporary file and rename(), so the
// collector never reads a half-written file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "inspection.hpp"
#include "job_format.hpp"

namespace fairlane::cli {

namespace {

// A label value: backslash, double quote and newline escaped.
std::string label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

// Upper bound in seconds of wait bucket i: [2^i, 2^(i+1)) us.
double bucket_le_seconds(std::size_t i) { return static_cast<double>(2ULL << i) / 1e6; }

// The histogram's sum in seconds. The segment keeps bucket counts only; when
// it keeps a sum (a `sum_us` member), that is used, else the sum is estimated
// from each bucket's midpoint (1.5 * 2^i us; 1 us for bucket 0).
template <class H>
double wait_sum_seconds(const H& h, bool& exact) {
  if constexpr (requires { h.sum_us; }) {
    exact = true;
    return static_cast<double>(h.sum_us) / 1e6;
  } else {
    exact = false;
    double us = 0;
    for (std::size_t i = 0; i < H::kBuckets; ++i)
      us += static_cast<double>(h.buckets[i]) * (i == 0 ? 1.0 : 1.5 * static_cast<double>(1ULL << i));
    return us / 1e6;
  }
}

class Exposition {
 public:
  explicit Exposition(std::string segment) : seg_(label(segment)) {}

  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // name{segment="...",<extra>} value
  void sample(std::string_view name, std::string_view extra, double v) {
    out_ += fmt::format("{}{{segment=\"{}\"{}{}}} {}\n", name, seg_, extra.empty() ? "" : ",", extra, v);
  }
  void sample(std::string_view name, std::string_view extra, std::uint64_t v) {
    out_ += fmt::format("{}{{segment=\"{}\"{}{}}} {}\n", name, seg_, extra.empty() ? "" : ",", extra, v);
  }
  const std::string& text() const { return out_; }

 private:
  std::string seg_, out_;
};

std::string prometheus(const std::string& seg, const Snapshot& s, const QueueConfig& c,
                       const std::vector<ProcessInfo>& procs) {
  Exposition e(seg);
  const Counters& k = s.counters;
  struct CounterDef {
    const char* name;
    const char* help;
    std::uint64_t v;
  };
  const CounterDef counters[] = {
      {"fairlane_enqueued_total", "Jobs admitted by enqueue.", k.enqueued},
      {"fairlane_duplicates_total", "Enqueues refused because the job id was live.", k.duplicates},
      {"fairlane_claimed_total", "Leases handed out by claims.", k.claimed},
      {"fairlane_completed_total", "Jobs completed.", k.completed},
      {"fairlane_retried_total", "Failed attempts scheduled for another attempt.", k.retried},
      {"fairlane_dead_lettered_total", "Jobs dead-lettered after their last attempt.", k.dead},
      {"fairlane_expired_total", "Leases that expired and went back to their lane.", k.expired},
      {"fairlane_promoted_total", "Delayed jobs promoted to their lane when due.", k.promoted},
      {"fairlane_drained_total", "Pending jobs removed by drain.", k.drained},
  };
  for (const auto& d : counters) {
    e.family(d.name, "counter", d.help);
    e.sample(d.name, "", d.v);
  }

  e.family("fairlane_jobs", "gauge", "Jobs in the segment by state.");
  e.sample("fairlane_jobs", "state=\"pending\"", s.pending);
  e.sample("fairlane_jobs", "state=\"leased\"", s.leased);
  e.sample("fairlane_jobs", "state=\"scheduled\"", s.scheduled);
  e.sample("fairlane_jobs", "state=\"dead\"", s.dead);
  e.family("fairlane_jobs_capacity", "gauge", "Job slots of the segment.");
  e.sample("fairlane_jobs_capacity", "", s.jobs_capacity);
  e.family("fairlane_lanes", "gauge", "Lanes in use.");
  e.sample("fairlane_lanes", "", static_cast<std::uint64_t>(s.lanes.size()));
  e.family("fairlane_lanes_capacity", "gauge", "Lanes the segment can hold.");
  e.sample("fairlane_lanes_capacity", "", static_cast<std::uint64_t>(c.lanes));
  e.family("fairlane_ring_lanes", "gauge", "Lanes in the rota (serviceable now).");
  e.sample("fairlane_ring_lanes", "", static_cast<std::uint64_t>(s.ring.size()));
  e.family("fairlane_queue_paused", "gauge", "1 when the whole queue is paused.");
  e.sample("fairlane_queue_paused", "", std::uint64_t{s.paused ? 1u : 0u});
  std::uint64_t alive = 0;
  for (const auto& p : procs) alive += p.alive ? 1 : 0;
  e.family("fairlane_processes", "gauge", "Processes attached to the segment and alive.");
  e.sample("fairlane_processes", "", alive);

  struct LaneGauge {
    const char* name;
    const char* type;
    const char* help;
    std::uint64_t (*get)(const LaneInfo&);
  };
  const LaneGauge gauges[] = {
      {"fairlane_lane_depth", "gauge", "Pending jobs of the lane.", [](const LaneInfo& l) { return l.depth; }},
      {"fairlane_lane_active", "gauge", "Leased jobs of the lane.", [](const LaneInfo& l) { return l.active; }},
      {"fairlane_lane_limit", "gauge", "Concurrency limit of the lane (0: none).",
       [](const LaneInfo& l) { return std::uint64_t{l.limit}; }},
      {"fairlane_lane_weight", "gauge", "Claims the lane gets per turn.",
       [](const LaneInfo& l) { return std::uint64_t{l.weight}; }},
      {"fairlane_lane_paused", "gauge", "1 when the lane is paused.",
       [](const LaneInfo& l) { return std::uint64_t{l.paused ? 1u : 0u}; }},
      {"fairlane_lane_ringed", "gauge", "1 when the lane is in the rota.",
       [](const LaneInfo& l) { return std::uint64_t{l.ringed ? 1u : 0u}; }},
      {"fairlane_lane_served_total", "counter", "Claims served from the lane.",
       [](const LaneInfo& l) { return l.served; }},
  };
  std::vector<std::string> groups;
  groups.reserve(s.lanes.size());
  for (const auto& l : s.lanes) groups.push_back(fmt::format("group=\"{}\"", label(group_name(l.group))));
  for (const auto& g : gauges) {
    e.family(g.name, g.type, g.help);
    for (std::size_t i = 0; i < s.lanes.size(); ++i) e.sample(g.name, groups[i], g.get(s.lanes[i]));
  }

  bool exact = false;
  if (!s.lanes.empty()) (void)wait_sum_seconds(s.lanes.front().wait, exact);
  e.family("fairlane_lane_wait_seconds", "histogram",
           exact ? "Enqueue-to-claim wait of the lane's claims."
                 : "Enqueue-to-claim wait of the lane's claims (sum estimated from bucket midpoints).");
  for (std::size_t i = 0; i < s.lanes.size(); ++i) {
    const WaitHistogram& h = s.lanes[i].wait;
    std::uint64_t cumulative = 0;
    // The last bucket also holds everything beyond it: it is +Inf only.
    for (std::size_t b = 0; b + 1 < WaitHistogram::kBuckets; ++b) {
      cumulative += h.buckets[b];
      e.sample("fairlane_lane_wait_seconds_bucket", fmt::format("{},le=\"{}\"", groups[i], bucket_le_seconds(b)),
               cumulative);
    }
    const std::uint64_t n = h.count();
    e.sample("fairlane_lane_wait_seconds_bucket", groups[i] + ",le=\"+Inf\"", n);
    bool ignored = false;
    e.sample("fairlane_lane_wait_seconds_sum", groups[i], wait_sum_seconds(h, ignored));
    e.sample("fairlane_lane_wait_seconds_count", groups[i], n);
  }
  return e.text();
}

nlohmann::json stats_json(const std::string& seg, const Snapshot& s, const QueueConfig& c,
                          const std::vector<ProcessInfo>& procs) {
  const Counters& k = s.counters;
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& l : s.lanes) {
    nlohmann::json limit = nullptr;
    if (l.limit != 0) limit = l.limit;
    lanes.push_back({{"group", group_name(l.group)}, {"depth", l.depth},   {"active", l.active},
                     {"limit", limit},              {"weight", l.weight}, {"paused", l.paused},
                     {"ringed", l.ringed},          {"served", l.served}, {"wait", wait_json(l.wait)}});
  }
  nlohmann::json ring = nlohmann::json::array();
  for (const auto& g : s.ring) ring.push_back(group_name(g));
  nlohmann::json ps = nlohmann::json::array();
  for (const auto& p : procs)
    ps.push_back({{"pid", p.pid}, {"alive", p.alive}, {"attached_unix_ms", p.attached_unix_ms}, {"leases", p.leases}});
  return {{"segment", seg},
          {"now_ms", s.now_ms},
          {"unix_ms", unix_now_ms()},
          {"paused", s.paused},
          {"counters",
           {{"enqueued", k.enqueued},
            {"duplicates", k.duplicates},
            {"claimed", k.claimed},
            {"completed", k.completed},
            {"retried", k.retried},
            {"dead", k.dead},
            {"expired", k.expired},
            {"promoted", k.promoted},
            {"drained", k.drained}}},
          {"jobs",
           {{"capacity", s.jobs_capacity},
            {"pending", s.pending},
            {"leased", s.leased},
            {"scheduled", s.scheduled},
            {"dead", s.dead}}},
          {"lanes_capacity", c.lanes},
          {"ring", std::move(ring)},
          {"lanes", std::move(lanes)},
          {"processes", std::move(ps)}};
}

std::string stats_text(const std::string& seg, const Snapshot& s) {
  const Counters& k = s.counters;
  std::string out = fmt::format("segment {}  {} pending, {} leased, {} scheduled, {} dead\n", seg, grouped(s.pending),
                                grouped(s.leased), grouped(s.scheduled), grouped(s.dead));
  out += fmt::format("enqueued {}  claimed {}  completed {}  retried {}  dead {}  expired {}\n", grouped(k.enqueued),
                     grouped(k.claimed), grouped(k.completed), grouped(k.retried), grouped(k.dead),
                     grouped(k.expired));
  out += fmt::format("\n{:<14}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}\n", "GROUP", "SERVED", "WAITS", "WAIT p50",
                     "p90", "p99");
  for (const auto& l : s.lanes)
    out += fmt::format("{:<14}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}\n", group_name(l.group), compact(l.served),
                       compact(l.wait.count()), wait_quantile(l.wait, 0.5), wait_quantile(l.wait, 0.9),
                       wait_quantile(l.wait, 0.99));
  if (s.lanes.empty()) out += "(no lanes yet)\n";
  return out;
}

// Writes `text` to `path` atomically: a temporary file beside it, then rename().
void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(fmt::format("cannot write '{}': {}", tmp, std::strerror(errno)));
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(fmt::format("cannot write '{}': {}", tmp, std::strerror(err)));
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  }
}

}  // namespace

int run_stats(const StatsArgs& a) {
  const std::string seg = parse_segment_only(a.segment, "stats");
  if (a.prometheus && a.json) fail("stats: give --prometheus or --json, not both");
  Queue q = open_segment(seg);
  const QueueConfig c = q.config();
  const Snapshot s = q.snapshot();
  const std::vector<ProcessInfo> procs = q.processes();
  std::string text;
  if (a.prometheus) text = prometheus(seg, s, c, procs);
  else if (a.json) text = dump_json(stats_json(seg, s, c, procs)) + "\n";
  else text = stats_text(seg, s);
  if (!a.output.empty()) {
    write_file_atomically(a.output, text);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return kExitOk;
}

}  // namespace fairlane::cli
