// `fairlane demo`, the parent: segment, children, progress, summary.
#include "demo.hpp"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"
#include "demo_report.hpp"
#include "fairlane/queue.hpp"
#include "format.hpp"
#include "process.hpp"

namespace fairlane::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Consumers start first and run this much longer than the producers, so
// the quiet tenants' last jobs are served, while the flood's backlog (far
// deeper than the consumers clear in this time) is still there at the end.
constexpr std::chrono::milliseconds kConsumerGrace{150};

struct Child {
  pid_t pid = 0;
  std::string role;     // "consumer 1", "producer flood"
  std::string results;  // its report file
  std::optional<ChildExit> exit;
};

// Owns what the demo made: on every way out it stops and reaps the
// children, then removes the segment and the results directory.
class DemoResources {
 public:
  DemoResources() = default;
  DemoResources(const DemoResources&) = delete;
  DemoResources& operator=(const DemoResources&) = delete;
  ~DemoResources() {
    stop_children(std::chrono::seconds(2));
    queue.reset();
    if (!segment.empty()) (void)Queue::remove(segment);
    if (!dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }

  void stop_children(std::chrono::milliseconds grace) {
    std::vector<pid_t> running;
    for (auto& c : children)
      if (!c.exit) {
        kill(c.pid, SIGTERM);
        running.push_back(c.pid);
      }
    if (!running.empty()) record(reap_all(running, Clock::now() + grace));
  }

  void record(const std::vector<ChildExit>& exits) {
    for (const auto& e : exits)
      for (auto& c : children)
        if (c.pid == e.pid) c.exit = e;
  }

  // Detaches and removes the segment now; the children must be gone.
  Status remove_segment() {
    queue.reset();
    std::string name = std::exchange(segment, std::string());
    return Queue::remove(name);
  }

  std::optional<Queue> queue;  // the parent's attachment
  std::string segment;         // removed at the end once set
  std::string dir;      // results directory
  std::vector<Child> children;
};

const LaneInfo* find_lane(const Snapshot& s, std::string_view group) {
  for (const auto& l : s.lanes)
    if (l.group.str() == group) return &l;
  return nullptr;
}

std::string secs_arg(std::chrono::milliseconds d) {
  return fmt::format("{:.3f}", static_cast<double>(d.count()) / 1000.0);
}

}  // namespace

int run_demo(const DemoArgs& a) {
  const auto duration = parse_seconds(a.seconds, "--seconds", 1, 3600);
  const unsigned consumers = parse_u32(a.consumers, "--consumers", 1, 16);
  const std::uint32_t work_us = parse_u32(a.work_us, "--work-us", 0, 100'000);
  const std::string seg =
      a.segment.empty() ? fmt::format("fairlane-demo-{}", getpid()) : parse_segment(a.segment);
  const bool human = !a.json;
  install_stop_handlers();
  // Output piped into `head` must not kill us before the cleanup below.
  signal(SIGPIPE, SIG_IGN);

  DemoResources res;
  char dir_template[] = "/tmp/fairlane-demo-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) fail("cannot create a results directory in /tmp");
  res.dir = dir_template;

  QueueOptions options;
  options.jobs = 32768;
  options.lanes = 64;
  options.payload_bytes = 64;
  auto created = Queue::create(seg, options);
  if (!created) fail(created.error().message);
  res.segment = seg;
  res.queue.emplace(std::move(created).value());
  Queue& q = *res.queue;

  if (human) {
    fmt::print("fairlane demo: {} tenants, {} consumer processes, {} s, segment {} ({} job slots)\n",
               std::size(kTenants), consumers, secs_arg(duration), seg, grouped(options.jobs));
    for (const auto& t : kTenants) {
      std::string load = t.rate == 0 ? fmt::format("as fast as it can (keeps up to {} waiting)", grouped(t.backlog))
                                     : fmt::format("{} jobs/s", grouped(t.rate));
      fmt::print("  {:<8} {}  {}\n", t.name, t.group, load);
    }
    fmt::print("each consumer: claim_wait, {} us of CPU, complete.  Ctrl-C stops early.\n\n", work_us);
  }

  // Consumers first, so the first jobs find someone waiting.
  for (unsigned i = 0; i < consumers; ++i) {
    std::string file = fmt::format("{}/consumer-{}.json", res.dir, i + 1);
    pid_t pid = spawn_self({"demo-consumer", seg, secs_arg(duration + kConsumerGrace), "--work-us",
                            std::to_string(work_us), "--results", file});
    res.children.push_back(Child{pid, fmt::format("consumer {}", i + 1), file, std::nullopt});
  }
  for (const auto& t : kTenants) {
    std::string file = fmt::format("{}/producer-{}.json", res.dir, t.name);
    pid_t pid = spawn_self({"demo-producer", seg, std::string(t.group), t.rate == 0 ? "max" : std::to_string(t.rate),
                            secs_arg(duration), "--backlog", std::to_string(t.backlog), "--results", file});
    res.children.push_back(Child{pid, fmt::format("producer {}", t.name), file, std::nullopt});
  }

  // Progress: every 100 ms sample the backlogs, every second print a line.
  constexpr std::size_t kN = std::size(kTenants);
  std::uint64_t prev_served[kN] = {};
  double backlog_sum[kN] = {};
  std::uint64_t backlog_peak[kN] = {};
  std::uint64_t samples = 0;
  if (human) {
    fmt::print("{:>5}", "t");
    for (const auto& t : kTenants) fmt::print("{:>11}{:>9}", fmt::format("{}/s", t.name), "waiting");
    fmt::print("\n");
  }
  std::string early_exit;
  const auto start = Clock::now();
  const auto end = start + duration;
  auto next_print = start + std::chrono::seconds(1);
  int second = 0;
  while (!stop_requested() && early_exit.empty()) {
    auto now = Clock::now();
    if (now >= end) break;
    sleep_unless_stopped(std::min<Clock::duration>(std::chrono::milliseconds(100), end - now));
    while (auto e = reap_any()) {
      res.record({*e});
      for (const auto& c : res.children)
        if (c.pid == e->pid && !e->ok()) early_exit = fmt::format("{} {}", c.role, e->describe());
    }
    Snapshot s = q.snapshot();
    ++samples;
    for (std::size_t i = 0; i < kN; ++i) {
      const LaneInfo* l = find_lane(s, kTenants[i].group);
      std::uint64_t depth = l ? l->depth : 0;
      backlog_sum[i] += static_cast<double>(depth);
      backlog_peak[i] = std::max(backlog_peak[i], depth);
    }
    if (Clock::now() >= next_print) {
      next_print += std::chrono::seconds(1);
      ++second;
      if (human) {
        fmt::print("{:>4}s", second);
        for (std::size_t i = 0; i < kN; ++i) {
          const LaneInfo* l = find_lane(s, kTenants[i].group);
          std::uint64_t served = l ? l->served : 0;
          fmt::print("{:>11}{:>9}", grouped(served - prev_served[i]), grouped(l ? l->depth : 0));
          prev_served[i] = served;
        }
        fmt::print("\n");
        std::fflush(stdout);
      }
    }
  }
  const double ran_s = std::chrono::duration<double>(std::min(Clock::now(), end) - start).count();
  const bool interrupted = stop_requested();
  if (interrupted || !early_exit.empty()) {
    res.stop_children(std::chrono::seconds(3));
  } else {
    std::vector<pid_t> running;
    for (const auto& c : res.children)
      if (!c.exit) running.push_back(c.pid);
    res.record(reap_all(running, Clock::now() + kConsumerGrace + std::chrono::seconds(5)));
  }
  if (!early_exit.empty()) fail(fmt::format("demo aborted: {}", early_exit));

  // Gather: producers' counts, consumers' waits, the lanes' final state.
  Snapshot final_state = q.snapshot();
  ConsumerReport served;
  std::vector<std::string> missing;
  std::vector<ProducerReport> produced;
  for (const auto& c : res.children) {
    auto j = read_json_file(c.results);
    if (!j) {
      missing.push_back(fmt::format("{} ({})", c.role, c.exit ? c.exit->describe() : "not reaped"));
      continue;
    }
    if (c.role.starts_with("consumer"))
      served.merge(ConsumerReport::from_json(*j));
    else
      produced.push_back(ProducerReport::from_json(*j));
  }
  if (!missing.empty() && !interrupted)
    fail(fmt::format("demo children reported nothing: {}", fmt::join(missing, ", ")));

  Summary sum;
  sum.segment = seg;
  sum.seconds = ran_s;
  sum.consumers = consumers;
  sum.refused = served.refused;
  sum.bad_payload = served.bad_payload;
  sum.interrupted = interrupted;
  for (std::size_t i = 0; i < kN; ++i) {
    const Tenant& t = kTenants[i];
    TenantRow r;
    r.name = t.name;
    r.group = t.group;
    r.rate = t.rate;
    for (const auto& p : produced)
      if (p.group == t.group) {
        r.enqueued = p.enqueued;
        r.full = p.full;
      }
    const TenantWaits& w = served.of(t.group);
    r.served = w.served;
    r.wait_us = w.wait_us;
    r.lib_wait_us = w.lib_wait_us;
    if (const LaneInfo* l = find_lane(final_state, t.group)) {
      r.backlog = l->depth;
      r.lane_served = l->served;
    }
    r.mean_backlog = samples == 0 ? 0.0 : backlog_sum[i] / static_cast<double>(samples);
    r.peak_backlog = backlog_peak[i];
    sum.rows.push_back(std::move(r));
  }
  Verdict verdict = judge(sum);
  Status removed = res.remove_segment();

  if (a.json) {
    print_json(summary_json(sum, verdict));
  } else {
    fmt::print("\n{}", summary_table(sum));
    for (const auto& line : verdict.lines) fmt::print("{}\n", line);
    if (interrupted) fmt::print("(interrupted after {:.1f} s; partial results)\n", ran_s);
    if (removed) fmt::print("segment {} removed\n", seg);
  }
  std::fflush(stdout);
  if (!removed) fail(fmt::format("could not remove segment {}: {}", seg, removed.error().message));
  if (interrupted) fail(fmt::format("demo interrupted by {}; segment {} removed",
                                    stop_signal() == SIGINT ? "SIGINT" : "SIGTERM", seg));
  return kExitOk;
}

}  // namespace fairlane::cli
