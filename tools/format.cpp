// Rendering for people and scripts (see format.hpp).
#include "format.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "job_format.hpp"

namespace fairlane::cli {

std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string compact(std::uint64_t n) {
  if (n < 10'000) return std::to_string(n);
  if (n < 10'000'000) return fmt::format("{:.1f}k", static_cast<double>(n) / 1e3);
  return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
}

std::string duration_us(std::uint64_t us) {
  if (us < 1'000) return fmt::format("{} us", us);
  if (us < 10'000) return fmt::format("{:.2f} ms", static_cast<double>(us) / 1e3);
  if (us < 1'000'000) return fmt::format("{:.1f} ms", static_cast<double>(us) / 1e3);
  return fmt::format("{:.2f} s", static_cast<double>(us) / 1e6);
}

std::string bytes(std::uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(n) / 1024.0);
  if (n < 1024ULL * 1024 * 1024) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1024.0 * 1024.0));
  return fmt::format("{:.2f} GiB", static_cast<double>(n) / (1024.0 * 1024.0 * 1024.0));
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_json(const nlohmann::json& j) {
  std::string s = dump_json(j);
  s.push_back('\n');
  std::fwrite(s.data(), 1, s.size(), stdout);
}

nlohmann::json config_json(const QueueConfig& c) {
  return {{"jobs", c.jobs},
          {"lanes", c.lanes},
          {"payload_bytes", c.payload_bytes},
          {"job_kind", c.job_kind},
          {"node", c.node},
          {"layout_version", c.layout_version},
          {"segment_bytes", c.segment_bytes},
          {"processes", c.processes},
          {"recovery_ms", c.recovery_ms}};
}

nlohmann::json lease_json(const Lease& l) {
  return {{"id", l.id.string()},
          {"group", group_name(l.group)},
          {"attempt", l.attempt},
          {"token", l.token.value},
          {"payload", l.payload},
          {"deadline_ms", l.deadline_ms},
          {"waited_us", l.waited_us}};
}

namespace {

nlohmann::json counters_json(const Counters& c) {
  return {{"enqueued", c.enqueued}, {"duplicates", c.duplicates}, {"claimed", c.claimed},
          {"completed", c.completed}, {"retried", c.retried},     {"dead", c.dead},
          {"expired", c.expired},   {"promoted", c.promoted},     {"drained", c.drained}};
}

nlohmann::json lane_json(const LaneInfo& l) {
  nlohmann::json limit = nullptr;  // null: no limit
  if (l.limit != 0) limit = l.limit;
  return {{"group", group_name(l.group)}, {"depth", l.depth},   {"active", l.active},
          {"limit", limit},            {"weight", l.weight}, {"paused", l.paused},
          {"ringed", l.ringed},        {"served", l.served},
          // Enqueue-to-claim waits from the segment's histogram: upper
          // bounds of power-of-two buckets, in microseconds.
          {"wait", {{"count", l.wait.count()}, {"p50_us", l.wait.quantile_us(0.5)}, {"p99_us", l.wait.quantile_us(0.99)}}}};
}

// A bucket bound in us as a short human figure: 512us, 4.1ms, 1.0s.
std::string short_us(std::uint64_t us) {
  if (us < 1000) return fmt::format("{}us", us);
  if (us < 1000000) return fmt::format("{:.1f}ms", double(us) / 1e3);
  return fmt::format("{:.1f}s", double(us) / 1e6);
}

}  // namespace

std::uint64_t lanes_live(const Snapshot& s) {
  if (s.lanes_live != 0) return s.lanes_live;
  // A core that does not count them: every listed lane but the default
  // one, which has a lane of its own outside --lanes.
  std::uint64_t n = 0;
  for (const LaneInfo& l : s.lanes) n += l.group.valid() && l.group.str() != kDefaultGroup ? 1 : 0;
  return n;
}

std::uint64_t lanes_capacity(const Snapshot& s, const QueueConfig& c) {
  return s.lanes_capacity != 0 ? s.lanes_capacity : c.lanes;
}

std::uint64_t processes_used(const Snapshot& s, const SegmentView& v) {
  return s.processes_capacity != 0 ? s.processes_attached : v.processes.size();
}

std::uint64_t processes_capacity(const Snapshot& s, const QueueConfig& c) {
  if (s.processes_capacity != 0) return s.processes_capacity;
  // A core that does not report it yet has the fixed default table.
  return c.processes != 0 ? c.processes : QueueOptions{}.processes;
}

nlohmann::json process_json(const ProcessInfo& p) {
  return {{"pid", p.pid},
          {"name", p.name},
          {"state", std::string(to_string(p.state))},
          {"alive", p.state != ProcessState::dead},
          {"attached_unix_ms", p.attached_unix_ms},
          {"leases", p.leases}};
}

SegmentView segment_view(const Queue& q) {
  SegmentView v;
  v.processes = q.processes();
  std::sort(v.processes.begin(), v.processes.end(),
            [](const ProcessInfo& a, const ProcessInfo& b) { return a.pid < b.pid; });
  v.recovery = q.recovery();
  v.mirror = q.mirror_status();
  v.corruption = q.corruption();
  v.unix_ms = unix_now_ms();
  return v;
}

namespace {

nlohmann::json recovery_json(const RecoveryInfo& r) {
  return {{"runs", r.runs},
          {"jobs", r.jobs},
          {"last_unix_ms", r.last_unix_ms},
          {"last_jobs", r.last_jobs},
          {"last_pid", r.last_pid},
          {"last_us", r.last_us},
          {"finished", r.finished},
          {"finished_unix_ms", r.finished_unix_ms},
          {"finished_pid", r.finished_pid}};
}

nlohmann::json mirror_json(const MirrorStatus& m) {
  if (!m.configured) return nullptr;  // null: not mirrored
  return {{"url", m.url},
          {"durability", to_string(m.durability)},
          {"on_full", to_string(m.on_full)},
          {"running", m.running},
          {"pid", m.pid},
          {"state", m.state},
          {"logged", m.logged},
          {"acked", m.acked},
          {"lag", m.lag},
          {"lag_ms", m.lag_ms},
          {"acked_unix_ms", m.acked_unix_ms},
          {"lost", m.lost},
          {"resyncs", m.resyncs},
          {"dropped_unix_ms", m.dropped_unix_ms},
          {"log_cells", m.log_cells},
          {"waiters", m.waiters}};
}

}  // namespace

nlohmann::json snapshot_json(std::string_view label, const Snapshot& s, const QueueConfig& c, const SegmentView* view) {
  nlohmann::json ring = nlohmann::json::array();
  for (const auto& g : s.ring) ring.push_back(group_name(g));
  nlohmann::json lanes = nlohmann::json::array();
  for (const auto& l : s.lanes) lanes.push_back(lane_json(l));
  nlohmann::json j = {{"segment", label},
                      {"paused", s.paused},
                      {"ring", std::move(ring)},
                      {"lanes", std::move(lanes)},
                      {"lanes_live", lanes_live(s)},
                      {"lanes_capacity", lanes_capacity(s, c)},
                      {"lanes_reclaimed", s.lanes_reclaimed},
                      {"counters", counters_json(s.counters)},
                      {"jobs",
                       {{"capacity", s.jobs_capacity},
                        {"pending", s.pending},
                        {"leased", s.leased},
                        {"scheduled", s.scheduled},
                        {"dead", s.dead}}},
                      {"config", config_json(c)},
                      {"corruptions", s.corruptions},
                      {"now_ms", s.now_ms}};
  if (view == nullptr) {
    // What only a segment keeps: absent, not zero.
    j["processes"] = nullptr;
    j["process_records"] = nullptr;
    j["consumers_parked"] = nullptr;
    j["producers_parked"] = nullptr;
    j["recovery"] = nullptr;
    j["mirror"] = nullptr;
    j["corruption"] = nullptr;
    return j;
  }
  nlohmann::json procs = nlohmann::json::array();
  for (const ProcessInfo& p : view->processes) procs.push_back(process_json(p));
  j["processes"] = std::move(procs);
  j["process_records"] = {{"used", processes_used(s, *view)}, {"capacity", processes_capacity(s, c)}};
  j["consumers_parked"] = s.consumers_parked;
  j["producers_parked"] = s.producers_parked;
  j["recovery"] = recovery_json(view->recovery);
  j["mirror"] = mirror_json(view->mirror);
  const CorruptionInfo& k = view->corruption;
  j["corruption"] = {{"count", std::max(k.count, s.corruptions)},
                     {"last_unix_ms", k.last_unix_ms},
                     {"last_structure", k.last_structure}};
  return j;
}

std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", grouped(n), n == 1 ? one : many);
}

namespace {

std::string ago(std::uint64_t now_unix_ms, std::uint64_t then_unix_ms) {
  return span_ms(now_unix_ms > then_unix_ms ? now_unix_ms - then_unix_ms : 0) + " ago";
}

// Under the counters: what recovery last did, and the mirror.
void recovery_and_mirror_lines(const SegmentView& v, std::string& out) {
  auto line = [&out](std::string text) {
    out += text;
    out += '\n';
  };
  const RecoveryInfo& r = v.recovery;
  if (r.runs == 0) {
    line("recovery no lease has come back from a dead or late holder yet");
  } else {
    line(fmt::format("recovery {} returned {}", plural(r.runs, "sweep", "sweeps"), plural(r.jobs, "lease", "leases")));
    line(fmt::format("         last {}: {} {}, took {}", ago(v.unix_ms, r.last_unix_ms),
                     plural(r.last_jobs, "lease", "leases"),
                     r.last_pid != 0 ? fmt::format("of dead pid {}", r.last_pid) : std::string("(expired or several holders)"),
                     duration_us(r.last_us)));
  }
  if (r.finished != 0) {
    // Steps that processes which died inside an operation left half done.
    line(fmt::format("finished {} left half done by dead processes, last {}{}", grouped(r.finished),
                     ago(v.unix_ms, r.finished_unix_ms),
                     r.finished_pid != 0 ? fmt::format(" (dead pid {})", r.finished_pid) : std::string()));
  }
  const MirrorStatus& m = v.mirror;
  if (!m.configured) return;
  line("mirror   " + one_line(m.url, 71));
  std::string who = m.pid == 0 ? std::string("no mirror attached")
                               : fmt::format("mirror pid {} {}", m.pid, m.running ? "alive" : "dead");
  line(fmt::format("         {}, {} when full; {}; state {}", to_string(m.durability), to_string(m.on_full), who,
                   m.state));
  if (m.state == "dropped" && m.dropped_unix_ms != 0)
    line(fmt::format("         dropped {}: nothing is logged until a resync", ago(v.unix_ms, m.dropped_unix_ms)));
  line(fmt::format("         logged {}, acked {}{}", plural(m.logged, "transition", "transitions"), grouped(m.acked),
                   m.waiters ? "; " + plural(m.waiters, "thread parked for it", "threads parked for it") : std::string()));
  line(fmt::format("         lag {} ({}), lost {}, resyncs {}{}", grouped(m.lag), span_ms(m.lag_ms), grouped(m.lost),
                   grouped(m.resyncs), m.acked_unix_ms ? ", last ack " + ago(v.unix_ms, m.acked_unix_ms) : std::string()));
}

// Under the lanes: the processes attached to the segment, with their
// command name and state (alive, stopped: SIGSTOP or a debugger, dead).
void process_lines(const Snapshot& s, const QueueConfig& c, const SegmentView& v, std::string& out) {
  std::size_t alive = 0, stopped = 0;
  for (const ProcessInfo& p : v.processes) {
    alive += p.state == ProcessState::alive ? 1 : 0;
    stopped += p.state == ProcessState::stopped ? 1 : 0;
  }
  out += '\n';
  const std::string records =
      fmt::format("{} of {} records", grouped(processes_used(s, v)), grouped(processes_capacity(s, c)));
  if (v.processes.empty()) {
    out += fmt::format("processes (none attached; {})\n", records);
    return;
  }
  out += fmt::format("processes ({} attached, {} alive{}; {})\n", v.processes.size(), alive,
                     stopped ? fmt::format(", {} stopped", stopped) : std::string(), records);
  out += fmt::format("  {} in claim_wait, {} in enqueue_wait\n",
                     plural(s.consumers_parked, "consumer parked", "consumers parked"),
                     plural(s.producers_parked, "producer parked", "producers parked"));
  for (const ProcessInfo& p : v.processes)
    out += fmt::format("  pid {:<8} {:<15} {:<7}  attached {:>9}  {}\n", p.pid,
                       p.name.empty() ? std::string("?") : one_line(p.name, 15), to_string(p.state),
                       ago(v.unix_ms, p.attached_unix_ms), plural(p.leases, "lease", "leases"));
}

}  // namespace

std::string inspect_table(std::string_view label, const Snapshot& s, const QueueConfig& c, const SegmentView* view) {
  std::string out;
  auto line = [&out](std::string text) {
    out += text;
    out += '\n';
  };
  const char* paused = s.paused ? "  [QUEUE PAUSED]" : "";
  if (view) {
    line(fmt::format("segment {}  layout {}  {}  kind {}  node {}  recovery {} ms", label, c.layout_version,
                     bytes(c.segment_bytes), c.job_kind, c.node, c.recovery_ms));
    line(fmt::format("capacity {}, {}, {}-byte payloads, {}{}", plural(c.jobs, "job", "jobs"),
                     plural(c.lanes, "lane", "lanes"), c.payload_bytes,
                     plural(processes_capacity(s, c), "process", "processes"), paused));
    line(fmt::format("jobs     {} pending, {} leased, {} scheduled, {} dead, {} free", grouped(s.pending),
                     grouped(s.leased), grouped(s.scheduled), grouped(s.dead),
                     grouped(s.jobs_capacity - std::min(s.jobs_capacity, s.pending + s.leased + s.scheduled + s.dead))));
  } else {
    line(fmt::format("valkey {}  kind {}  node {}", label, c.job_kind, c.node));
    line(fmt::format("{}-byte payloads, no fixed capacity{}", c.payload_bytes, paused));
    line(fmt::format("jobs     {} pending, {} leased, {} scheduled, {} dead", grouped(s.pending), grouped(s.leased),
                     grouped(s.scheduled), grouped(s.dead)));
  }
  line(fmt::format("lanes    {} live {}, {} reclaimed", grouped(lanes_live(s)),
                   view ? "of " + grouped(lanes_capacity(s, c)) : std::string("(no fixed number)"),
                   grouped(s.lanes_reclaimed)));
  const Counters& k = s.counters;
  line(fmt::format("counters enqueued {} duplicates {} claimed {} completed {}", grouped(k.enqueued),
                   grouped(k.duplicates), grouped(k.claimed), grouped(k.completed)));
  line(fmt::format("         retried {} dead {} expired {} promoted {} drained {}", grouped(k.retried),
                   grouped(k.dead), grouped(k.expired), grouped(k.promoted), grouped(k.drained)));
  if (view) {
    const CorruptionInfo& x = view->corruption;
    const std::uint64_t n = std::max(x.count, s.corruptions);
    if (n == 0)
      line("corrupt  none met");
    else
      line(fmt::format("corrupt  {} impossible value{} met{}", grouped(n), n == 1 ? "" : "s",
                       x.last_unix_ms ? fmt::format(", last {} in {}", ago(view->unix_ms, x.last_unix_ms),
                                                    one_line(x.last_structure, 24))
                                      : std::string()) +
           " (run fairlane fsck)");
    recovery_and_mirror_lines(*view, out);
  } else {
    line("         (a Valkey queue keeps no process records, recovery log or corruption count)");
  }

  // The ring, in rota order, wrapped to 80 columns: four ids per line.
  const std::string head = fmt::format("ring ({}):", s.ring.size());
  std::string ring = head;
  if (s.ring.empty()) ring += " empty, nothing serviceable";
  for (std::size_t i = 0; i < s.ring.size(); ++i) {
    if (i != 0 && i % 4 == 0) {
      line(ring);
      ring = std::string(head.size(), ' ');
    }
    ring += fmt::format(" {}", group_name(s.ring[i]));
  }
  line(ring);

  line("");
  line(fmt::format("{:<16}{:>9}{:>8}{:>7}{:>7}{:>7}{:>12}{:>11}", "group", "depth", "active", "limit", "weight",
                   "paused", "served", "wait p99"));
  if (s.lanes.empty()) line("(no lanes yet)");
  // Table order is the segment's; people find a lane faster sorted by group.
  std::vector<const LaneInfo*> lanes;
  for (const auto& l : s.lanes) lanes.push_back(&l);
  std::sort(lanes.begin(), lanes.end(), [](const LaneInfo* a, const LaneInfo* b) { return a->group < b->group; });
  for (const LaneInfo* lp : lanes) {
    const LaneInfo& l = *lp;
    std::string wait = "-";
    if (view == nullptr) wait = "n/a";  // Valkey keeps no wait histograms
    else if (l.wait.count()) wait = "<" + short_us(l.wait.quantile_us(0.99));
    line(fmt::format("{:<16}{:>9}{:>8}{:>7}{:>7}{:>7}{:>12}{:>11}", group_name(l.group), grouped(l.depth),
                     grouped(l.active), l.limit == 0 ? std::string("-") : std::to_string(l.limit), l.weight,
                     l.paused ? "yes" : "no", grouped(l.served), wait));
  }
  if (view) process_lines(s, c, *view, out);
  return out;
}

}  // namespace fairlane::cli
