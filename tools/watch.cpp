// `fairlane watch SEG [--interval MS] [--once]`: a live view of a segment or
// a valkey:// queue, redrawn every interval on the alternate screen.
//
// One frame: jobs by state and the rates of the queue's counters, the ring
// in rota order, a row per lane (depth, active/limit, weight, state, claims
// served per second, wait p50/p99 from the segment's histograms, age of the
// oldest pending job by its id's mint time), the leases that expire first,
// and the attached processes with their command names and states. Lines fit
// 80 columns; from 79 down to 40 the frame is laid out again (fewer lane
// columns, header and lease lines wrapped at word boundaries), so no word is
// cut: only a segment name or URL wider than the frame, which has nowhere
// else to break, is read across lines (title_lines). Lanes that do not fit the terminal's height are counted, not shown.
// Attached as an observer: watch is not one of the processes it lists.
// Before each frame it looks whether the segment it mapped is still the one
// at the name (target.hpp, follow_name): destroyed, the frame says it is
// gone (and the mapping is let go of); made again, the new one is opened
// and drawn, its rates from its second frame.
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
#include "target.hpp"
#include "terminal.hpp"

namespace fairlane::cli {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr std::size_t kMaxLeaseRows = 5;
constexpr std::size_t kMaxProcessRows = 4;
// jobs() is a scan of the slot table; a frame looks at no more than this
// many pending jobs for the "oldest" column.
constexpr std::size_t kPendingScan = 200'000;

// Everything one frame shows, read from the queue at one moment.
struct Sample {
  QueueConfig config;
  BackendCapabilities caps;
  Snapshot snap;
  std::map<BrandedId, std::uint64_t> oldest_minted;  // lane -> smallest minted_unix_ms of its pending jobs
  bool have_jobs = false;                            // the backend lists jobs (oldest, leases)
  std::vector<JobInfo> leases;                       // the leases that expire first, soonest first
  std::vector<ProcessInfo> procs;
  CorruptionInfo corruption;
  std::uint64_t unix_ms = 0;
  SteadyClock::time_point taken;
};

Sample take(Target& t) {
  Sample s;
  s.config = t.config();
  s.caps = t.capabilities();
  s.snap = t->snapshot();
  try {
    JobFilter f;
    f.state = JobState::pending;
    f.limit = kPendingScan;
    for (const JobInfo& j : t->jobs(f)) {
      auto [it, fresh] = s.oldest_minted.try_emplace(j.group, j.minted_unix_ms);
      if (!fresh) it->second = std::min(it->second, j.minted_unix_ms);
    }
    f.state = JobState::leased;
    f.limit = std::max<std::size_t>(kMaxLeaseRows, std::min<std::uint64_t>(s.snap.leased, kPendingScan));
    s.leases = t->jobs(f);
    s.have_jobs = true;
  } catch (const BackendError&) {
    // A backend without job listings yet: the frame goes without them. A
    // server that is away fails the snapshot above instead.
    if (t.is_segment()) throw;
  }
  const std::size_t keep = std::min(s.leases.size(), kMaxLeaseRows);
  std::partial_sort(s.leases.begin(), s.leases.begin() + static_cast<std::ptrdiff_t>(keep), s.leases.end(),
                    [](const JobInfo& a, const JobInfo& b) { return a.when_ms < b.when_ms; });
  s.leases.resize(keep);
  if (s.caps.process_records) s.procs = t->processes();
  if (const Queue* q = t.queue()) s.corruption = q->corruption();
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

// Lays out units (words, or groups of words that belong together) on lines
// of at most `width` columns, two spaces between units; a unit that does not
// fit goes to the next line, indented by `indent`. Words are never cut,
// unless a single unit is wider than the whole line (then it is cut last,
// with the rest of the frame).
void flow(std::vector<std::string>& out, const std::vector<std::string>& units, std::size_t width,
          std::size_t indent = 4, std::string_view sep = "  ") {
  std::string line;
  for (const std::string& u : units) {
    if (u.empty()) continue;
    if (line.empty()) {
      line = u;
    } else if (line.size() + sep.size() + u.size() <= width) {
      line += sep;
      line += u;
    } else {
      out.push_back(std::move(line));
      line = std::string(indent, ' ') + u;
    }
  }
  if (!line.empty()) out.push_back(std::move(line));
}

// The lane table's columns at a width: the wide form at 80 and more, fewer
// columns below, never a cut word.
struct LaneColumns {
  bool weight = true, served = true, p50 = true, p99 = true, oldest = true;
  static LaneColumns at(std::size_t width) {
    LaneColumns c;
    if (width < 80) c.weight = c.p50 = false;  // 14 8 8 6 7 8 8 = 65 with spaces
    if (width < 65) c.oldest = false;          // 56
    if (width < 56) c.p99 = false;             // 47
    if (width < 47) c.served = false;          // 39
    return c;
  }
};

std::string lane_row(const LaneColumns& c, const std::string& group, const std::string& depth, const std::string& act,
                     const std::string& weight, const std::string& state, const std::string& served,
                     const std::string& p50, const std::string& p99, const std::string& oldest) {
  std::string row = fmt::format("{:<14} {:>8} {:>8}", group, depth, act);
  if (c.weight) row += fmt::format(" {:>4}", weight);
  row += fmt::format(" {:<6}", state);
  if (c.served) row += fmt::format(" {:>7}", served);
  if (c.p50) row += fmt::format(" {:>8}", p50);
  if (c.p99) row += fmt::format(" {:>8}", p99);
  if (c.oldest) row += fmt::format(" {:>8}", oldest);
  while (!row.empty() && row.back() == ' ') row.pop_back();
  return row;
}

// Live: the terminal's width, 80 at most (the layout is made for 80 and
// re-laid out below it). One plain frame: 80.
std::size_t frame_width(TermSize size, bool live) {
  return live ? std::clamp<std::size_t>(static_cast<std::size_t>(std::max(size.cols, 1)), 1, 80) : 80;
}

// The title line: the title on the left, the time (and live, the interval
// and how to quit) on the right; on lines of their own when both do not fit.
// A title wider than the width is flowed by its parts, and a part wider
// than the width (a long segment name or URL, which has no place to break
// but the width) is cut into pieces of the width, each on a line: a name
// read across two lines, rather than a line past the frame's width.
void title_lines(std::vector<std::string>& head, const std::vector<std::string>& title, std::uint64_t unix_ms,
                 std::uint64_t interval_ms, bool live, std::size_t width) {
  std::string whole;
  for (const std::string& part : title) whole += (whole.empty() || part.empty() ? "" : "  ") + part;
  std::string right =
      live ? fmt::format("{}  every {}  q quits", clock_hms(unix_ms), span_ms(interval_ms)) : clock_hms(unix_ms);
  if (whole.size() + 2 + right.size() <= width) {
    head.push_back(whole + std::string(width - whole.size() - right.size(), ' ') + right);
    return;
  }
  if (whole.size() <= width) {
    head.push_back(std::move(whole));
  } else {
    std::vector<std::string> units;
    for (const std::string& part : title)
      for (std::size_t at = 0; at < part.size(); at += width) units.push_back(part.substr(at, width));
    flow(head, units, width, 0);
  }
  flow(head, {clock_hms(unix_ms), live ? "every " + span_ms(interval_ms) : std::string(), live ? "q quits" : ""},
       width, 0);
}

std::vector<std::string> render(const std::string& seg, const Sample& cur, const Sample* prev, TermSize size,
                                std::uint64_t interval_ms, bool live) {
  const Snapshot& s = cur.snap;
  const double dt = prev ? std::chrono::duration<double>(cur.taken - prev->taken).count() : 0.0;
  const bool have = prev != nullptr;
  const std::size_t width = frame_width(size, live);
  std::vector<std::string> head, lanes, tail;

  // Header.
  title_lines(head, {"fairlane watch", seg, s.paused ? "[QUEUE PAUSED]" : ""}, cur.unix_ms, interval_ms, live, width);
  const std::string capacity = cur.caps.fixed_capacity ? "of " + grouped(s.jobs_capacity) : std::string();
  flow(head,
       {"jobs  ", grouped(s.pending) + " pending", grouped(s.leased) + " leased", grouped(s.scheduled) + " scheduled",
        grouped(s.dead) + " dead", capacity},
       width, 8);
  const Counters& k = s.counters;
  const Counters none{};
  const Counters& p = prev ? prev->snap.counters : none;
  flow(head,
       {"rate/s", "claimed " + rate(k.claimed, p.claimed, dt, have), "completed " + rate(k.completed, p.completed, dt, have),
        "retried " + rate(k.retried, p.retried, dt, have), "dead " + rate(k.dead, p.dead, dt, have),
        "expired " + rate(k.expired, p.expired, dt, have)},
       width, 8);
  std::vector<std::string> lanes_units{
      "lanes ", fmt::format("{} live of {}", grouped(lanes_live(s)),
                           cur.caps.fixed_capacity ? grouped(lanes_capacity(s, cur.config)) : std::string("any")),
      grouped(s.lanes_reclaimed) + " reclaimed"};
  if (cur.caps.process_records) {
    const std::uint64_t n = std::max(cur.corruption.count, s.corruptions);
    lanes_units.push_back(n == 0 ? std::string("corrupt 0") : fmt::format("CORRUPT {} (run fsck)", grouped(n)));
  }
  flow(head, lanes_units, width, 8);
  std::string ring = fmt::format("ring    {} lane{}:", s.ring.size(), s.ring.size() == 1 ? "" : "s");
  if (s.ring.empty()) ring += " nothing serviceable";
  for (std::size_t i = 0; i < s.ring.size(); ++i) {
    std::string id(1, ' ');  // not " " + name: GCC 12 warns falsely (-Wrestrict) on that
    id += group_name(s.ring[i]);
    const std::string more = fmt::format(" +{} more", s.ring.size() - i);
    if (ring.size() + id.size() + (i + 1 < s.ring.size() ? more.size() : 0) > width) {
      ring += more;
      break;
    }
    ring += id;
  }
  head.push_back(std::move(ring));
  head.emplace_back();
  const LaneColumns cols = LaneColumns::at(width);
  head.push_back(lane_row(cols, "GROUP", "DEPTH", "ACT/LIM", "W", "STATE", "SRV/S", "WAIT p50",
                          cols.p50 ? "p99" : "WAIT p99", "OLDEST"));

  // Lanes.
  std::map<BrandedId, std::uint64_t> served_before;
  if (prev)
    for (const auto& l : prev->snap.lanes) served_before.emplace(l.group, l.served);
  for (const LaneInfo* lp : lane_order(s)) {
    const LaneInfo& l = *lp;
    auto before = served_before.find(l.group);
    std::string oldest = cur.have_jobs ? "-" : "n/a";
    if (auto it = cur.oldest_minted.find(l.group); it != cur.oldest_minted.end() && l.depth != 0)
      oldest = span_ms(cur.unix_ms > it->second ? cur.unix_ms - it->second : 0);
    const bool waits = cur.caps.wait_histograms;
    lanes.push_back(lane_row(
        cols, group_name(l.group), compact(l.depth),
        fmt::format("{}/{}", compact(l.active), l.limit == 0 ? std::string("-") : std::to_string(l.limit)),
        std::to_string(l.weight), lane_state(l, s.paused),
        rate(l.served, before == served_before.end() ? 0 : before->second, dt, have && before != served_before.end()),
        waits ? wait_quantile(l.wait, 0.50) : "n/a", waits ? wait_quantile(l.wait, 0.99) : "n/a", oldest));
  }
  if (s.lanes.empty()) lanes.emplace_back("(no lanes yet)");

  // Leases about to expire.
  tail.emplace_back();
  tail.push_back(fmt::format("LEASES EXPIRING FIRST  ({} leased)", grouped(s.leased)));
  if (!cur.have_jobs) tail.emplace_back("  (this backend lists no jobs yet)");
  else if (cur.leases.empty()) tail.emplace_back("  none");
  for (const JobInfo& j : cur.leases)
    flow(tail, {fmt::format("  {}", id_text(j.id)), fmt::format("{:<14}", group_name(j.group)), fmt::format("attempt {:<3}", j.attempt),
                job_when(j, s.now_ms)},
         width, 4);

  // Processes.
  if (cur.caps.process_records) {
    tail.emplace_back();
    std::size_t alive = 0, stopped = 0;
    for (const auto& pr : cur.procs) {
      alive += pr.state == ProcessState::alive ? 1 : 0;
      stopped += pr.state == ProcessState::stopped ? 1 : 0;
    }
    tail.push_back(fmt::format("PROCESSES  ({} attached, {} alive{})", cur.procs.size(), alive,
                               stopped ? fmt::format(", {} stopped", stopped) : std::string()));
    std::vector<ProcessInfo> procs = cur.procs;
    std::sort(procs.begin(), procs.end(), [](const ProcessInfo& a, const ProcessInfo& b) {
      return a.leases != b.leases ? a.leases > b.leases : a.pid < b.pid;
    });
    const std::size_t proc_rows = live ? std::min(procs.size(), kMaxProcessRows) : procs.size();
    for (std::size_t i = 0; i < proc_rows; ++i) {
      const ProcessInfo& pr = procs[i];
      flow(tail,
           {fmt::format("  pid {:<7} {:<15}", pr.pid, pr.name.empty() ? std::string("?") : one_line(pr.name, 15)),
            fmt::format("{:<7}", to_string(pr.state)),
            "attached " + span_ms(cur.unix_ms > pr.attached_unix_ms ? cur.unix_ms - pr.attached_unix_ms : 0) + " ago",
            fmt::format("{} lease{}", grouped(pr.leases), pr.leases == 1 ? "" : "s")},
           width, 6, " ");
    }
    if (proc_rows < procs.size()) tail.push_back(fmt::format("  ... {} more", procs.size() - proc_rows));
  }

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
    // Below 40 columns even the narrow layout cannot help: cut what is left.
    const auto cols_now = static_cast<std::size_t>(std::max(size.cols, 1));
    for (auto& line : out)
      if (line.size() > cols_now) line.resize(cols_now);
    if (out.size() > static_cast<std::size_t>(std::max(size.rows, 1))) out.resize(static_cast<std::size_t>(size.rows));
  }
  return out;
}

// The frame while no segment is at the name (destroyed since watch opened
// it, or not yet made again): the title and `why`, wrapped at its words.
std::vector<std::string> render_gone(const std::string& seg, const std::string& why, TermSize size,
                                     std::uint64_t interval_ms) {
  const std::size_t width = frame_width(size, true);
  std::vector<std::string> out;
  title_lines(out, {"fairlane watch", seg}, unix_now_ms(), interval_ms, true, width);
  out.emplace_back();
  std::vector<std::string> words{"SEGMENT GONE "};
  for (std::size_t at = 0; at < why.size();) {
    const std::size_t sp = std::min(why.find(' ', at), why.size());
    words.push_back(why.substr(at, sp - at));
    at = sp + 1;
  }
  if (!words.back().empty() && words.back().back() != '.') words.back() += '.';
  words.insert(words.end(), {"watch", "shows", "the", "segment", "of", "that", "name", "again", "as", "soon", "as",
                             "one", "can", "be", "opened."});
  flow(out, words, width, 0, " ");
  const auto cols_now = static_cast<std::size_t>(std::max(size.cols, 1));
  for (auto& line : out)
    if (line.size() > cols_now) line.resize(cols_now);
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

// typed: the target as typed, to open it (again); seg: as it is shown.
static int watch(const WatchArgs& a, const std::string& typed, const std::string& seg, std::uint64_t interval_ms);

int run_watch(const WatchArgs& a) {
  const std::string typed = parse_target(a.segment), seg = shown_target(typed);
  const std::uint64_t interval_ms = parse_u64(a.interval_ms, "--interval", 50, 3'600'000);
  return guarded([&] { return watch(a, typed, seg, interval_ms); });
}

static int watch(const WatchArgs& a, const std::string& typed, const std::string& seg, std::uint64_t interval_ms) {
  std::optional<Target> q(open_target(typed, Access::look));

  if (a.once || !::isatty(STDOUT_FILENO)) {
    const Sample s = take(*q);
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
  std::string why;
  for (;;) {
    // The segment at the name now: rates compare two samples of one segment.
    if (follow_name(q, typed, why) != Followed::same) prev.reset();
    std::vector<std::string> frame;
    if (q) {
      Sample cur = take(*q);
      frame = render(seg, cur, prev ? &*prev : nullptr, terminal_size(STDOUT_FILENO), interval_ms, true);
      prev = std::move(cur);
    } else {
      frame = render_gone(seg, why, terminal_size(STDOUT_FILENO), interval_ms);
    }
    if (!write_all(STDOUT_FILENO, frame_text(frame))) return kExitOk;  // the terminal went away

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
