// `fairlane stats SEG [--prometheus | --json] [--output FILE]
//                      [--listen HOST:PORT] [--histograms none|top:N|all]`:
// counters, gauges and wait histograms, of a segment or a valkey:// queue.
//
// --prometheus writes the text exposition format (version 0.0.4) for
// node_exporter's textfile collector: every series carries
// segment="<name or URL>", per-lane series add group="<id or default>",
// counters end in _total. The queue-wide enqueue-to-claim wait is one
// histogram in seconds without a group label (cumulative le buckets at the
// segment histogram's power-of-two bounds); per-group wait histograms are
// bounded by --histograms (default top:16, the 16 groups with the most
// claims), so 4,096 lanes do not make 131,000 series. A reclaimed group is
// not in the snapshot, so its series go away.
// --output writes to FILE through a temporary file and rename(), so the
// collector never reads a half-written file.
// --listen serves the same text at http://HOST:PORT/metrics until SIGINT or
// SIGTERM, rendered afresh for each scrape (http_server.hpp), from the
// segment at the name at that moment: one destroyed since the last scrape
// is answered 503 with one line, and one made again under the name is
// opened again (serve below).
//
// What only a segment keeps (wait histograms, process records, a fixed job
// capacity) is left out for a Valkey queue, never written as 0.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "inspection.hpp"
#include "http_server.hpp"
#include "job_format.hpp"
#include "target.hpp"
#include "terminal.hpp"

namespace fairlane::cli {

namespace {

// Which groups get a wait histogram of their own.
struct HistogramChoice {
  enum class Mode { none, top, all } mode = Mode::top;
  std::size_t top = 16;
};

HistogramChoice parse_histograms(std::string_view text) {
  HistogramChoice h;
  if (text == "none") {
    h.mode = HistogramChoice::Mode::none;
  } else if (text == "all") {
    h.mode = HistogramChoice::Mode::all;
  } else if (text.substr(0, 4) == "top:") {
    h.top = parse_u64(text.substr(4), "--histograms top:N", 1, 1'000'000);
  } else {
    fail(fmt::format("invalid --histograms '{}': expected none, top:N or all", text));
  }
  return h;
}

using Out = std::back_insert_iterator<std::string>;

// A label value: backslash, double quote and newline escaped; bytes that
// are not printable ASCII (a scribbled group id) become '?', so the
// exposition stays valid UTF-8 whatever the segment holds.
void put_label(std::string& out, std::string_view v) {
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(u >= 0x20 && u < 0x7f ? c : '?');
  }
}

std::string_view group_view(const BrandedId& g) {
  if (!g.valid() || g.str() == kDefaultGroup) return "default";
  return g.str();
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

// Appends the exposition to one reused buffer: no string per sample.
class Exposition {
 public:
  Exposition(std::string& out, std::string_view segment) : out_(out) {
    seg_.clear();
    put_label(seg_, segment);
  }

  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(Out(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // name{segment="..."[,group="..."][,extra]} value
  template <class V>
  void sample(std::string_view name, V v, const BrandedId* group = nullptr, std::string_view extra = {}) {
    out_ += name;
    out_ += "{segment=\"";
    out_ += seg_;
    out_ += '"';
    if (group != nullptr) {
      out_ += ",group=\"";
      put_label(out_, group_view(*group));
      out_ += '"';
    }
    if (!extra.empty()) {
      out_ += ',';
      out_ += extra;
    }
    fmt::format_to(Out(out_), "}} {}\n", v);
  }

  // The cumulative buckets, +Inf, _sum and _count of one wait histogram.
  // The names come from histogram_names().
  void histogram(const WaitHistogram& h, const BrandedId* group) {
    std::uint64_t cumulative = 0;
    char le[48];
    // The last bucket also holds everything beyond it: it is +Inf only.
    for (std::size_t b = 0; b + 1 < WaitHistogram::kBuckets; ++b) {
      cumulative += h.buckets[b];
      const auto r = fmt::format_to_n(le, sizeof le, "le=\"{}\"", bucket_le_seconds(b));
      sample(bucket_, cumulative, group, std::string_view(le, r.size));
    }
    std::uint64_t n = 0;
    for (std::uint64_t c : h.buckets) n += c;
    sample(bucket_, n, group, "le=\"+Inf\"");
    bool ignored = false;
    sample(sum_, wait_sum_seconds(h, ignored), group);
    sample(count_, n, group);
  }
  void histogram_names(std::string_view base) {
    bucket_.assign(base).append("_bucket");
    sum_.assign(base).append("_sum");
    count_.assign(base).append("_count");
  }

 private:
  std::string& out_;
  // Kept across scrapes (static): the buffers' capacity is reused.
  static inline thread_local std::string seg_, bucket_, sum_, count_;
};

// The groups that get a histogram of their own: indexes into s.lanes.
void pick_histogram_lanes(const Snapshot& s, const HistogramChoice& h, std::vector<std::size_t>& out) {
  out.clear();
  if (h.mode == HistogramChoice::Mode::none) return;
  for (std::size_t i = 0; i < s.lanes.size(); ++i) out.push_back(i);
  if (h.mode == HistogramChoice::Mode::all || out.size() <= h.top) return;
  const auto most_claims = [&](std::size_t a, std::size_t b) {
    const LaneInfo &x = s.lanes[a], &y = s.lanes[b];
    return x.served != y.served ? x.served > y.served : x.group < y.group;
  };
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(h.top), out.end(), most_claims);
  out.resize(h.top);
  std::sort(out.begin(), out.end());  // table order, stable from scrape to scrape
}

void prometheus(std::string& out, const std::string& seg, const Snapshot& s, const QueueConfig& c,
                const BackendCapabilities& caps, const std::vector<ProcessInfo>& procs, const HistogramChoice& hc) {
  out.clear();
  Exposition e(out, seg);
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
      {"fairlane_lanes_reclaimed_total", "Lanes given back by groups that went idle.", s.lanes_reclaimed},
  };
  for (const auto& d : counters) {
    e.family(d.name, "counter", d.help);
    e.sample(d.name, d.v);
  }
  if (caps.process_records) {  // the segment counts what it met; Valkey has no such record
    e.family("fairlane_corruptions_total", "counter", "Impossible values met in the segment (run fairlane fsck).");
    e.sample("fairlane_corruptions_total", s.corruptions);
  }

  e.family("fairlane_jobs", "gauge", "Jobs in the queue by state.");
  e.sample("fairlane_jobs", s.pending, nullptr, "state=\"pending\"");
  e.sample("fairlane_jobs", s.leased, nullptr, "state=\"leased\"");
  e.sample("fairlane_jobs", s.scheduled, nullptr, "state=\"scheduled\"");
  e.sample("fairlane_jobs", s.dead, nullptr, "state=\"dead\"");
  if (caps.fixed_capacity) {
    e.family("fairlane_jobs_capacity", "gauge", "Job slots of the segment.");
    e.sample("fairlane_jobs_capacity", s.jobs_capacity);
  }
  e.family("fairlane_lanes", "gauge", "Groups live at once (with a job or a setting).");
  e.sample("fairlane_lanes", lanes_live(s));
  if (caps.fixed_capacity) {
    e.family("fairlane_lanes_capacity", "gauge", "Groups the segment can hold live at once (--lanes).");
    e.sample("fairlane_lanes_capacity", lanes_capacity(s, c));
  }
  e.family("fairlane_ring_lanes", "gauge", "Lanes in the rota (serviceable now).");
  e.sample("fairlane_ring_lanes", static_cast<std::uint64_t>(s.ring.size()));
  e.family("fairlane_queue_paused", "gauge", "1 when the whole queue is paused.");
  e.sample("fairlane_queue_paused", std::uint64_t{s.paused ? 1u : 0u});
  if (caps.process_records) {
    std::uint64_t alive = 0, stopped = 0;
    for (const auto& p : procs) {
      alive += p.state == ProcessState::alive ? 1 : 0;
      stopped += p.state == ProcessState::stopped ? 1 : 0;
    }
    e.family("fairlane_processes", "gauge", "Processes attached to the segment and alive (tools that only look are not).");
    e.sample("fairlane_processes", alive);
    e.family("fairlane_processes_stopped", "gauge", "Processes attached to the segment and stopped (SIGSTOP).");
    e.sample("fairlane_processes_stopped", stopped);
    e.family("fairlane_process_records_capacity", "gauge", "Processes the segment can hold attached (--processes).");
    e.sample("fairlane_process_records_capacity", processes_capacity(s, c));
    e.family("fairlane_consumers_parked", "gauge", "Consumer threads parked in claim_wait, waiting for work.");
    e.sample("fairlane_consumers_parked", s.consumers_parked);
    e.family("fairlane_producers_parked", "gauge", "Producer threads parked in enqueue_wait, waiting for a free slot or lane.");
    e.sample("fairlane_producers_parked", s.producers_parked);
  }

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
      {"fairlane_lane_served_total", "counter", "Claims served from the lane since its group went live.",
       [](const LaneInfo& l) { return l.served; }},
  };
  for (const auto& g : gauges) {
    e.family(g.name, g.type, g.help);
    for (const LaneInfo& l : s.lanes) e.sample(g.name, g.get(l), &l.group);
  }

  if (!caps.wait_histograms) return;
  bool exact = false;
  if (!s.lanes.empty()) (void)wait_sum_seconds(s.lanes.front().wait, exact);
  const char* estimated = exact ? "" : " (sum estimated from bucket midpoints)";
  // The queue-wide wait: one series whatever the number of groups, and it
  // keeps counting the claims of groups whose lanes were given back.
  e.family("fairlane_wait_seconds", "histogram",
           fmt::format("Enqueue-to-claim wait of every claim in the queue{}.", estimated));
  e.histogram_names("fairlane_wait_seconds");
  e.histogram(s.wait, nullptr);

  static thread_local std::vector<std::size_t> picked;
  pick_histogram_lanes(s, hc, picked);
  if (picked.empty()) return;
  e.family("fairlane_lane_wait_seconds", "histogram",
           fmt::format("Enqueue-to-claim wait of the lane's claims{}; only the groups --histograms picks.", estimated));
  e.histogram_names("fairlane_lane_wait_seconds");
  for (std::size_t i : picked) e.histogram(s.lanes[i].wait, &s.lanes[i].group);
}

nlohmann::json stats_json(const std::string& seg, const Snapshot& s, const QueueConfig& c,
                          const BackendCapabilities& caps, const std::vector<ProcessInfo>& procs) {
  const Counters& k = s.counters;
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& l : s.lanes) {
    nlohmann::json limit = nullptr;
    if (l.limit != 0) limit = l.limit;
    nlohmann::json wait = nullptr;  // null: the backend keeps no histograms
    if (caps.wait_histograms) wait = wait_json(l.wait);
    lanes.push_back({{"group", group_name(l.group)}, {"depth", l.depth},   {"active", l.active},
                     {"limit", limit},              {"weight", l.weight}, {"paused", l.paused},
                     {"ringed", l.ringed},          {"served", l.served}, {"wait", std::move(wait)}});
  }
  nlohmann::json ring = nlohmann::json::array();
  for (const auto& g : s.ring) ring.push_back(group_name(g));
  nlohmann::json ps = nullptr;
  if (caps.process_records) {
    ps = nlohmann::json::array();
    for (const auto& p : procs) ps.push_back(process_json(p));
  }
  nlohmann::json capacity = nullptr;
  if (caps.fixed_capacity) capacity = s.jobs_capacity;
  nlohmann::json lane_cap = nullptr;
  if (caps.fixed_capacity) lane_cap = lanes_capacity(s, c);
  nlohmann::json corruptions = nullptr, parked = nullptr, producers_parked = nullptr;
  if (caps.process_records) {
    corruptions = s.corruptions;
    parked = s.consumers_parked;
    producers_parked = s.producers_parked;
  }
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
           {{"capacity", std::move(capacity)},
            {"pending", s.pending},
            {"leased", s.leased},
            {"scheduled", s.scheduled},
            {"dead", s.dead}}},
          {"lanes_live", lanes_live(s)},
          {"lanes_capacity", std::move(lane_cap)},
          {"lanes_reclaimed", s.lanes_reclaimed},
          {"corruptions", std::move(corruptions)},
          {"consumers_parked", std::move(parked)},
          {"producers_parked", std::move(producers_parked)},
          {"ring", std::move(ring)},
          {"lanes", std::move(lanes)},
          {"processes", std::move(ps)}};
}

std::string stats_text(const std::string& seg, const Snapshot& s, const QueueConfig& c, const BackendCapabilities& caps,
                       const std::vector<ProcessInfo>& procs) {
  const Counters& k = s.counters;
  std::string out = fmt::format("{} {}  {} pending, {} leased, {} scheduled, {} dead\n",
                                caps.fixed_capacity ? "segment" : "queue", seg, grouped(s.pending), grouped(s.leased),
                                grouped(s.scheduled), grouped(s.dead));
  out += fmt::format("enqueued {}  claimed {}  completed {}  retried {}  dead {}  expired {}\n", grouped(k.enqueued),
                     grouped(k.claimed), grouped(k.completed), grouped(k.retried), grouped(k.dead),
                     grouped(k.expired));
  out += fmt::format("lanes {} live {}, {} reclaimed", grouped(lanes_live(s)),
                     caps.fixed_capacity ? "of " + grouped(lanes_capacity(s, c)) : std::string("(no fixed number)"),
                     grouped(s.lanes_reclaimed));
  if (caps.process_records) {
    std::size_t alive = 0;
    for (const auto& p : procs) alive += p.state == ProcessState::alive ? 1 : 0;
    out += fmt::format("  processes {} attached, {} alive, {} consumers parked, {} producers parked  corruptions {}",
                       procs.size(), alive, grouped(s.consumers_parked), grouped(s.producers_parked),
                       grouped(s.corruptions));
  }
  out += '\n';
  out += fmt::format("\n{:<14}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}\n", "GROUP", "SERVED", "WAITS", "WAIT p50",
                     "p90", "p99");
  for (const auto& l : s.lanes) {
    if (caps.wait_histograms)
      out += fmt::format("{:<14}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}\n", group_name(l.group), compact(l.served),
                         compact(l.wait.count()), wait_quantile(l.wait, 0.5), wait_quantile(l.wait, 0.9),
                         wait_quantile(l.wait, 0.99));
    else
      out += fmt::format("{:<14}  {:>10}  {:>10}  {:>9}  {:>9}  {:>9}\n", group_name(l.group), compact(l.served), "n/a",
                         "n/a", "n/a", "n/a");
  }
  if (s.lanes.empty()) out += "(no lanes yet)\n";
  if (!caps.wait_histograms) out += "(a Valkey queue keeps no wait histograms)\n";
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

// typed: the target as typed, to open it again; seg: as it is shown.
int serve(Target opened, const std::string& typed, const std::string& seg, const ListenAddress& at,
          const HistogramChoice& hc, bool log_requests) {
  std::optional<Target> t(std::move(opened));
  BackendCapabilities caps = t->capabilities();
  QueueConfig c = t->config();
  std::vector<ProcessInfo> procs;
  std::string why;
  MetricsServer server(at, [&](std::string& body) {
    try {
      // Each scrape reads the segment at the name now, not the one mapped
      // at start: destroyed since, it is let go of; made again, the new one
      // is opened (target.hpp, follow_name).
      switch (follow_name(t, typed, why)) {
        case Followed::same: break;
        case Followed::reopened:
          caps = t->capabilities();
          c = t->config();
          break;
        case Followed::gone:
          // 503 and one line, not an exposition without the segment's
          // series: a failed scrape sets the target's `up` to 0 and
          // Prometheus ends every series it had from it at once (staleness
          // markers), which is what a queue that no longer exists is; a 200
          // with no series would look like a healthy exporter to an alert
          // on `up`. A Valkey server that is away is answered the same.
          body = fmt::format("segment '{}' is gone: {}\n", seg, why);
          return 503;
      }
      const Snapshot s = (*t)->snapshot();
      if (caps.process_records) procs = (*t)->processes();
      prometheus(body, seg, s, c, caps, procs, hc);
      return 200;
    } catch (const std::exception& e) {  // a Valkey server away: say so, keep serving
      body = fmt::format("cannot read '{}': {}\n", seg, e.what());
      return 503;
    }
  });
  SignalPipe signals;  // before the line below: a test may signal as soon as it reads it
  fmt::print("serving http://{}/metrics for {}\n", server.bound(), seg);
  std::fflush(stdout);
  server.run(signals, log_requests);
  return kExitOk;
}

}  // namespace

int run_stats(const StatsArgs& a) {
  const std::string typed = parse_target(a.segment), seg = shown_target(typed);
  const int formats = (a.prometheus ? 1 : 0) + (a.json ? 1 : 0) + (a.listen.empty() ? 0 : 1);
  if (formats > 1) fail("stats: give one of --prometheus, --json or --listen");
  if (!a.listen.empty() && !a.output.empty()) fail("stats: --output writes a file once; --listen serves, give one");
  if (a.log_requests && a.listen.empty()) fail("stats: --log-requests goes with --listen");
  const HistogramChoice hc = parse_histograms(a.histograms);
  std::optional<ListenAddress> at;
  if (!a.listen.empty()) at = parse_listen(a.listen);
  return guarded([&] {
    Target t = open_target(typed, Access::look);
    if (at) return serve(std::move(t), typed, seg, *at, hc, a.log_requests);
    const BackendCapabilities caps = t.capabilities();
    const QueueConfig c = t.config();
    const Snapshot s = t->snapshot();
    std::vector<ProcessInfo> procs;
    if (caps.process_records) procs = t->processes();
    std::string text;
    if (a.prometheus) prometheus(text, seg, s, c, caps, procs, hc);
    else if (a.json) text = dump_json(stats_json(seg, s, c, caps, procs)) + "\n";
    else text = stats_text(seg, s, c, caps, procs);
    if (!a.output.empty()) {
      write_file_atomically(a.output, text);
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    return kExitOk;
  });
}

}  // namespace fairlane::cli
