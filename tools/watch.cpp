// `fairlane watch SEG [--interval MS] [--once]`: a live view of a segment,
// redrawn every interval on the alternate screen of the terminal.
//
// One frame: jobs by state and the rates of the queue's counters, the ring
// in rota order, a row per lane (depth, active/limit, weight, state, claims
// served per second, wait p50/p99 from the segment's histograms, age of the
// oldest pending job by its id's mint time), the leases that expire first,
// and the attached processes. Lines fit 80 columns; lanes that do not fit
// the terminal's height are counted, not shown.
//
// Keys: q, Q, Ctrl-C or Ctrl-D quit; SIGINT, SIGTERM and SIGHUP too. The
// terminal is restored on every way out but SIGKILL. When stdout is not a
// terminal (or with --once) it prints one plain frame and exits.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "args.hpp"
#include "cli_error.hpp"
#include "format.hpp"
#include "inspection.hpp"
#include "job_format.hpp"
#include "terminal.hpp"

namespace fairlane::cli {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kMaxLeaseRows = 5;
constexpr std::size_t kMaxProcessRows = 4;
// jobs() is a scan of the slot table; a frame looks at no more than this
// many pending jobs for the "oldest" column.
constexpr std::size_t kPendingScan = 200'000;

// Everything one frame shows, read from the segment at one moment.
struct Sample {
  QueueConfig config;
  Snapshot snap;
  std::map<BrandedId, std::uint64_t> oldest_minted;  // lane -> smallest minted_unix_ms of its pending jobs
  std::vector<JobInfo> leases;                       // the leases that expire first, soonest first
  std::size_t leased_seen = 0;
  std::vector<ProcessInfo> procs;
  std::uint64_t unix_ms = 0;
  SteadyClock::time_point taken;
};

Sample take(const Queue& q) {
  Sample s;
  s.config = q.config();
  s.snap = q.snapshot();
  JobFilter f;
  f.state = JobState::pending;
  f.limit = kPendingScan;
  for (const JobInfo& j : q.jobs(f)) {
    auto [it, fresh] = s.oldest_minted.try_emplace(j.group, j.minted_unix_ms);
    if (!fresh) it->second = std::min(it->second, j.minted_unix_ms);
  }
  f.state = JobState::leased;
  f.limit = s.config.jobs;
  s.leases = q.jobs(f);
  s.leased_seen = s.leases.size();
  const std::size_t keep = std::min(s.leases.size(), kMaxLeaseRows);
  std::partial_sort(s.leases.begin(), s.leases.begin() + static_cast<std::ptrdiff_t>(keep), s.leases.end(),
                    [](const JobInfo& a, const JobInfo& b) { return a.when_ms < b.when_ms; });
  s.leases.resize(keep);
  s.procs = q.processes();
  s.unix_ms = unix_now_ms();
  s.taken = SteadyClock::now();
  return s;
}

// A rate for people, "-" without a previous sample.
std::string rate(std::uint64_t now, std::uint64_t before, double dt, bool have) {
  if (!have || dt <= 0 || now < before) return "-";
  const double r = static_cast<double>(now - before) / dt;
  if (r < 10) return fmt::format("{:.1f}", r);
  return compact(static_cast<std::uint64_t>(r + 0.5));
}

const char* lane_state(const LaneInfo& l, bool queue_paused) {
  if (l.paused || queue_paused) return "paused";
  if (l.ringed) return "ring";
  if (l.depth == 0) return "idle";
  if (l.limit != 0 && l.active >= l.limit) return "full";
  return "wait";
}

// Lanes in rota order first, then the rest by depth (deepest first).
std::vector<const LaneInfo*> lane_order(const Snapshot& s) {
  std::map<BrandedId, std::size_t> ring_pos;
  for (std::size_t i = 0; i < s.ring.size(); ++i) ring_pos.emplace(s.ring[i], i);
  std::vector<const LaneInfo*> lanes;
  for (const auto& l : s.lanes) lanes.push_back(&l);
  std::sort(lanes.begin(), lanes.end(), [&](const LaneInfo* a, const LaneInfo* b) {
    auto ia = ring_pos.find(a->group), ib = ring_pos.find(b->group);
    const bool ra = ia != ring_pos.end(), rb = ib != ring_pos.end();
    if (ra != rb) return ra;
    if (ra) return ia->second < ib->second;
    if (a->depth != b->depth) return a->depth > b->depth;
    return a->group < b->group;
  });
  return lanes;
}

std::string clock_hms(std::uint64_t unix_ms) {
  std::string t = local_time(unix_ms);  // "mm-dd HH:MM:SS"
  return t.size() > 6 ? t.substr(6) : t;
}

std::vector<std::string> render(const std::string& seg, const Sample& cur, const Sample* prev, TermSize size,
                                std::uint64_t interval_ms, bool live) {
  const Snapshot& s = cur.snap;
  const double dt = prev ? std::chrono::duration<double>(cur.taken - prev->taken).count() : 0.0;
  const bool have = prev != nullptr;
  std::vector<std::string> head, lanes, tail;

  // Header.
  std::string title = fmt::format("fairlane watch  {}{}", seg, s.paused ? "  [QUEUE PAUSED]" : "");
  std::string right = live ? fmt::format("{}  every {}  q quits", clock_hms(cur.unix_ms), span_ms(interval_ms))
                           : clock_hms(cur.unix_ms);
  const std::size_t width = 80;
  if (title.size() + 2 + right.size() <= width) title += std::string(width - title.size() - right.size(), ' ') + right;
  else title += "  " + right;
  head.push_back(std::move(title));
  head.push_back(fmt::format("jobs    {} pending  {} leased  {} scheduled  {} dead  of {}", grouped(s.pending),
                             grouped(s.leased), grouped(s.scheduled), grouped(s.dead), grouped(s.jobs_capacity)));
  const Counters& k = s.counters;
  const Counters none{};
  const Counters& p = prev ? prev->snap.counters : none;
  head.push_back(fmt::format("rate/s  claimed {}  completed {}  retried {}  dead {}  expired {}",
                             rate(k.claimed, p.claimed, dt, have), rate(k.completed, p.completed, dt, have),
                             rate(k.retried, p.retried, dt, have), rate(k.dead, p.dead, dt, have),
                             rate(k.expired, p.expired, dt, have)));
  std::string ring = fmt::format("ring    {} lane{}:", s.ring.size(), s.ring.size() == 1 ? "" : "s");
  if (s.ring.empty()) ring += " nothing serviceable";
  for (std::size_t i = 0; i < s.ring.size(); ++i) {
    const std::string id = " " + group_name(s.ring[i]);
    const std::string more = fmt::format(" +{} more", s.ring.size() - i);
    if (ring.size() + id.size() + (i + 1 < s.ring.size() ? more.size() : 0) > width) {
      ring += more;
      break;
    }
    ring += id;
  }
  head.push_back(std::move(ring));
  head.emplace_back();
  head.push_back(fmt::format("{:<14} {:>8} {:>8} {:>4} {:<6} {:>7} {:>8} {:>8} {:>8}", "GROUP", "DEPTH", "ACT/LIM",
                             "W", "STATE", "SRV/S", "WAIT p50", "p99", "OLDEST"));

  // Lanes.
  std::map<BrandedId, std::uint64_t> served_before;
  if (prev)
    for (const auto& l : prev->snap.lanes) served_before.emplace(l.group, l.served);
  for (const LaneInfo* lp : lane_order(s)) {
    const LaneInfo& l = *lp;
    auto before = served_before.find(l.group);
    std::string oldest = "-";
    if (auto it = cur.oldest_minted.find(l.group); it != cur.oldest_minted.end() && l.depth != 0)
      oldest = span_ms(cur.unix_ms > it->second ? cur.unix_ms - it->second : 0);
    lanes.push_back(fmt::format(
        "{:<14} {:>8} {:>8} {:>4} {:<6} {:>7} {:>8} {:>8} {:>8}", group_name(l.group), compact(l.depth),
        fmt::format("{}/{}", compact(l.active), l.limit == 0 ? std::string("-") : std::to_string(l.limit)), l.weight,
        lane_state(l, s.paused),
        rate(l.served, before == served_before.end() ? 0 : before->second, dt, have && before != served_before.end()),
        wait_quantile(l.wait, 0.50), wait_quantile(l.wait, 0.99), oldest));
  }
  if (s.lanes.empty()) lanes.emplace_back("(no lanes yet)");

  // Leases about to expire.
  tail.emplace_back();
  tail.push_back(fmt::format("LEASES EXPIRING FIRST  ({} leased)", grouped(s.leased)));
  if (cur.leases.empty()) tail.emplace_back("  none");
  for (const JobInfo& j : cur.leases)
    tail.push_back(fmt::format("  {}  {:<14}  attempt {:<3}  {}", j.id.str(), group_name(j.group), j.attempt,
                               job_when(j, s.now_ms)));

  // Processes.
  tail.emplace_back();
  std::size_t alive = 0;
  for (const auto& pr : cur.procs) alive += pr.alive ? 1 : 0;
  tail.push_back(fmt::format("PROCESSES  ({} attached, {} alive)", cur.procs.size(), alive));
  std::vector<ProcessInfo> procs = cur.procs;
  std::sort(procs.begin(), procs.end(), [](const ProcessInfo& a, const ProcessInfo& b) {
    return a.leases != b.leases ? a.leases > b.leases : a.pid < b.pid;
  });
  const std::size_t proc_rows = live ? std::min(procs.size(), kMaxProcessRows) : procs.size();
  for (std::size_t i = 0; i < proc_rows; ++i) {
    const ProcessInfo& pr = procs[i];
    tail.push_back(fmt::format("  pid {:<8} {:<5}  attached {:>7} ago  {} lease{}", pr.pid, pr.alive ? "alive" : "dead",
                               span_ms(cur.unix_ms > pr.attached_unix_ms ? cur.unix_ms - pr.attached_unix_ms : 0),
                               grouped(pr.leases), pr.leases == 1 ? "" : "s"));
  }
  if (proc_rows < procs.size()) tail.push_back(fmt::format("  ... {} more", procs.size() - proc_rows));

  // Fit the height: lanes give way first (at least three rows of them).
  if (live) {
    const auto rows = static_cast<std::size_t>(std::max(size.rows, 1));
    const std::size_t fixed = head.size() + tail.size();
    const std::size_t room = rows > fixed + 3 ? rows - fixed : 3;
    if (lanes.size() > room) {
      const std::size_t hidden = lanes.size() - (room - 1);
      lanes.resize(room - 1);
      lanes.push_back(fmt::format("... {} more lane{}", hidden, hidden == 1 ? "" : "s"));
    }
  }
  std::vector<std::string> out = std::move(head);
  out.insert(out.end(), lanes.begin(), lanes.end());
  out.insert(out.end(), tail.begin(), tail.end());
  if (live) {
    const auto cols = static_cast<std::size_t>(std::max(size.cols, 1));
    for (auto& line : out)
      if (line.size() > cols) line.resize(cols);
    if (out.size() > static_cast<std::size_t>(std::max(size.rows, 1))) out.resize(static_cast<std::size_t>(size.rows));
  }
  return out;
}

// Home, every line cleared to its end, then everything below cleared.
std::string frame_text(const std::vector<std::string>& lines) {
  std::string f(kCursorHome);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    f += lines[i];
    f += kClearLineRight;
    if (i + 1 < lines.size()) f += "\r\n";  // no newline after the last: the screen must not scroll
  }
  f += kClearBelow;
  return f;
}

}  // namespace

int run_watch(const WatchArgs& a) {
  const std::string seg = parse_segment_only(a.segment, "watch");
  const std::uint64_t interval_ms = parse_u64(a.interval_ms, "--interval", 50, 3'600'000);
  Queue q = open_segment(seg);

  if (a.once || !::isatty(STDOUT_FILENO)) {
    const Sample s = take(q);
    std::string out;
    for (const auto& line : render(seg, s, nullptr, TermSize{}, interval_ms, false)) out += line + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return kExitOk;
  }

  std::fflush(stdout);
  SignalPipe signals;
  const bool keys = ::isatty(STDIN_FILENO) != 0;
  TerminalSession term(STDIN_FILENO, STDOUT_FILENO);
  std::optional<Sample> prev;
  for (;;) {
    Sample cur = take(q);
    if (!write_all(STDOUT_FILENO,
                   frame_text(render(seg, cur, prev ? &*prev : nullptr, terminal_size(STDOUT_FILENO), interval_ms, true))))
      return kExitOk;  // the terminal went away
    prev = std::move(cur);

    const auto next = SteadyClock::now() + std::chrono::milliseconds(interval_ms);
    for (bool redraw = false; !redraw;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - SteadyClock::now()).count();
      if (left <= 0) break;
      pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      const int n = ::poll(fds, keys ? 2 : 1, static_cast<int>(left));
      if (n <= 0) continue;  // timeout (the loop ends) or EINTR
      if (fds[0].revents != 0) {
        bool resized = false;
        if (signals.drain(resized) != 0) return kExitOk;
        redraw = resized;
      }
      if (keys && fds[1].revents != 0) {
        char buf[64];
        const ssize_t got = ::read(STDIN_FILENO, buf, sizeof buf);
        if (got <= 0 && (fds[1].revents & (POLLHUP | POLLERR)) != 0) return kExitOk;  // terminal hung up
        for (ssize_t i = 0; i < got; ++i)
          if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 3 || buf[i] == 4) return kExitOk;
      }
    }
  }
}

}  // namespace fairlane::cli
