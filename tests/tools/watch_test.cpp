// `fairlane watch` on a pseudo-terminal: it enters the alternate screen,
// renders, refreshes, quits on q, Ctrl-C and SIGTERM, and leaves the
// terminal as it found it. Without a terminal it prints one plain frame.
#include "tool_runner.hpp"

#include <functional>
#include <regex>

namespace fairlane {
namespace {

using test::group;
using test::occurrences;
using test::PtyTool;
using test::run_tool;
using test::SegmentGuard;
using test::show;
using test::unique_segment_name;

constexpr std::string_view kAltOn = "\x1b[?1049h";
constexpr std::string_view kAltOff = "\x1b[?1049l";
constexpr std::string_view kCursorShow = "\x1b[?25h";

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    QueueOptions o;
    o.jobs = 256;
    o.lanes = 16;
    o.payload_bytes = 32;
    auto r = Queue::create(guard_->name(), o);
    ASSERT_TRUE(r.ok()) << test::describe(r.error());
    q_.emplace(std::move(r.value()));
    for (int i = 0; i < 12; ++i) ASSERT_EQ(q_->enqueue(group("TEN", 1 + i % 3), q_->mint(), "x"), EnqueueStatus::enqueued);
    Lease l;
    ASSERT_TRUE(q_->claim(l, 60000));  // one lease to show
    ASSERT_EQ(q_->set_limit(group("TEN", 2), 4), LaneStatus::ok);
  }
  void TearDown() override {
    q_.reset();
    guard_.reset();
  }
  const std::string& seg() const { return guard_->name(); }
  std::string title() const { return "fairlane watch  " + seg(); }

  // Runs watch on a pty until it has drawn two frames, then `quit`s it and
  // checks the exit and the terminal.
  void run_and_quit(const std::function<void(PtyTool&)>& quit) {
    PtyTool t({"watch", seg(), "--interval", "50"});
    ASSERT_TRUE(t.read_until([&](const std::string& o) { return occurrences(o, title()) >= 2; }))
        << "fewer than two frames: " << t.output();
    const termios during = t.termios_now();
    EXPECT_EQ(during.c_lflag & (ICANON | ECHO), 0u) << "not in raw mode while running";
    quit(t);
    ASSERT_TRUE(t.read_until([](const std::string& o) { return o.find(kAltOff) != std::string::npos; }))
        << "never left the alternate screen: " << t.output();
    const int st = t.wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;

    const std::string& out = t.output();
    EXPECT_EQ(out.rfind(kAltOn, 0), 0u) << "the first thing written enters the alternate screen";
    const std::size_t off = out.rfind(kAltOff);
    EXPECT_EQ(off + kAltOff.size(), out.size()) << "leaving the alternate screen is the last thing written";
    EXPECT_NE(out.rfind(kCursorShow), std::string::npos);
    EXPECT_LT(out.rfind(kCursorShow), off) << "cursor shown again before leaving";
    const termios after = t.termios_now();
    EXPECT_EQ(after.c_lflag, t.termios_before().c_lflag) << "local modes not restored";
    EXPECT_EQ(after.c_iflag, t.termios_before().c_iflag) << "input modes not restored";

    // A frame: every lane, the lease, the process list; nothing wider than 80.
    for (const char* want : {"TEN00000000001", "TEN00000000002", "TEN00000000003", "LEASES EXPIRING FIRST",
                             "PROCESSES", "expires in", "0/4"})
      EXPECT_NE(out.find(want), std::string::npos) << "missing " << want;
    EXPECT_EQ(after.c_oflag, t.termios_before().c_oflag) << "output modes not restored";
    // Lines end in "\r\n" (output processing is off in raw mode, so no
    // "\r\r\n"); a frame starts at cursor home, right after the last line
    // of the one before.
    EXPECT_EQ(out.find("\r\r\n"), std::string::npos);
    std::string lines = out;
    for (std::size_t at = lines.find("\x1b[H"); at != std::string::npos; at = lines.find("\x1b[H", at + 2))
      lines.replace(at, 3, "\r\n");
    std::size_t start = 0;
    while (start < lines.size()) {
      std::size_t end = lines.find("\r\n", start);
      if (end == std::string::npos) end = lines.size();
      std::string line = lines.substr(start, end - start);
      // Strip escape sequences before measuring.
      std::string text;
      for (std::size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\x1b') {
          ++i;
          if (i < line.size() && line[i] == '[')
            while (i + 1 < line.size() && !(line[i + 1] >= '@' && line[i + 1] <= '~')) ++i;
          ++i;
          continue;
        }
        text.push_back(line[i]);
      }
      EXPECT_LE(text.size(), 80u) << "wider than 80 columns: " << text;
      start = end + 2;
    }
  }

  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
};

TEST_F(WatchTest, RendersRefreshesAndQuitsOnQ) {
  run_and_quit([](PtyTool& t) { t.type("q"); });
}

TEST_F(WatchTest, QuitsOnCtrlC) {
  run_and_quit([](PtyTool& t) { t.type("\x03"); });
}

TEST_F(WatchTest, QuitsOnSigtermAndStillRestoresTheTerminal) {
  run_and_quit([](PtyTool& t) { ::kill(t.pid(), SIGTERM); });
}

TEST_F(WatchTest, ShowsRatesFromTheSecondFrame) {
  PtyTool t({"watch", seg(), "--interval", "50"});
  ASSERT_TRUE(t.read_until([&](const std::string& o) { return occurrences(o, title()) >= 1; }));
  EXPECT_NE(t.output().find("rate/s  claimed -"), std::string::npos) << "the first frame has no rate yet";
  // Eight claims: whichever frame first compares a sample taken after them
  // with one taken before shows them as a rate (at least 1/s unless frames
  // were more than 8 s apart). Frames already buffered in the pty show 0.
  for (int i = 0; i < 8; ++i) {
    Lease l;
    ASSERT_TRUE(q_->claim(l, 60000));
    ASSERT_EQ(q_->complete(l.id, l.token), AckStatus::ok);
  }
  const std::regex rate("rate/s  claimed [1-9][0-9.]*k? ");
  EXPECT_TRUE(t.read_until([&](const std::string& o) { return std::regex_search(o, rate); }))
      << "no frame showed the claims as a rate";
  t.type("q");
  ASSERT_TRUE(t.read_until([](const std::string& o) { return o.find(kAltOff) != std::string::npos; }));
  t.wait();
}

// The last full frame on the screen, as lines of plain text.
std::vector<std::string> last_frame(const std::string& out) {
  const std::size_t home = out.rfind("\x1b[H", out.rfind("\x1b[H") - 1);  // the last complete one
  std::string text;
  for (std::size_t i = home + 3; i < out.size() && out.compare(i, 3, "\x1b[H") != 0; ++i) {
    if (out[i] == '\x1b') {
      ++i;
      if (i < out.size() && out[i] == '[')
        while (i + 1 < out.size() && !(out[i + 1] >= '@' && out[i + 1] <= '~')) ++i;
      ++i;
      continue;
    }
    text.push_back(out[i]);
  }
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl = text.find("\r\n"); ; nl = text.find("\r\n", start)) {
    lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 2;
  }
  return lines;
}

TEST_F(WatchTest, NarrowTerminalsGetANewLayoutNotCutWords) {
  for (unsigned short cols : {40, 47, 56, 65, 79}) {
    SCOPED_TRACE(cols);
    PtyTool t({"watch", seg(), "--interval", "50"}, 40, cols);
    ASSERT_TRUE(t.read_until([&](const std::string& o) { return occurrences(o, "LEASES EXPIRING FIRST") >= 3; }))
        << t.output();
    t.type("q");
    ASSERT_TRUE(t.read_until([](const std::string& o) { return o.find(kAltOff) != std::string::npos; }));
    t.wait();
    const std::vector<std::string> frame = last_frame(t.output());
    std::string all;
    for (std::size_t i = 0; i < frame.size(); ++i) {
      EXPECT_LE(frame[i].size(), cols) << "wider than the terminal: '" << frame[i] << "'";
      all += frame[i] + "\n";
    }
    // Every word whole: the lease's expiry with its unit, the header's
    // figures, the processes' states.
    EXPECT_TRUE(std::regex_search(all, std::regex("expires in [0-9.]+ (ms|s)\n"))) << all;
    EXPECT_TRUE(std::regex_search(all, std::regex("attempt 1 "))) << all;
    EXPECT_TRUE(std::regex_search(all, std::regex("[0-9,]+ scheduled"))) << all;
    EXPECT_TRUE(std::regex_search(all, std::regex("expired [-0-9.k]+\n"))) << all;
    EXPECT_TRUE(std::regex_search(all, std::regex("pid [0-9]+ +[^ ]+ +alive"))) << all;
    EXPECT_EQ(all.find("WAIT p5\n"), std::string::npos) << all;
    for (const char* g : {"TEN00000000001", "TEN00000000002", "TEN00000000003"})
      EXPECT_NE(all.find(std::string(g) + " "), std::string::npos) << g << " whole: " << all;
  }
}

TEST_F(WatchTest, ShowsProcessesWithTheirNameAndState) {
  const auto r = run_tool({"watch", seg(), "--once"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("PROCESSES  (1 attached, 1 alive)"), std::string::npos) << "watch itself is not counted\n" << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("pid " + std::to_string(::getpid()) + " +[^ ]+ +alive"))) << r.out;
  EXPECT_NE(r.out.find("lanes   3 live of 16  0 reclaimed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("corrupt 0"), std::string::npos) << r.out;
}

// watch keeps the segment it opened mapped. Destroyed, its frame says the
// segment is gone instead of drawing the old mapping; created again under
// the name, the frames show the new one.
TEST_F(WatchTest, FollowsTheSegmentDestroyedAndCreatedAgainUnderItsName) {
  PtyTool t({"watch", seg(), "--interval", "50"});
  ASSERT_TRUE(t.read_until([&](const std::string& o) { return o.find("of 256") != std::string::npos; }))
      << t.output();
  q_.reset();
  ASSERT_TRUE(Queue::remove(seg()).ok());
  std::size_t mark = t.output().size();
  EXPECT_TRUE(t.read_until([&](const std::string& o) { return o.find("SEGMENT GONE", mark) != std::string::npos; }))
      << "no frame said the segment is gone: " << t.output().substr(mark);

  QueueOptions o;
  o.jobs = 77;
  o.lanes = 16;
  o.payload_bytes = 32;
  {
    auto again = Queue::create(seg(), o);
    ASSERT_TRUE(again.ok()) << test::describe(again.error());
  }
  mark = t.output().size();
  EXPECT_TRUE(t.read_until([&](const std::string& o) { return o.find("of 77", mark) != std::string::npos; }))
      << "no frame showed the new segment: " << t.output().substr(mark);
  // Replaced between two frames: the next ones show the newest.
  ASSERT_TRUE(Queue::remove(seg()).ok());
  o.jobs = 99;
  ASSERT_TRUE(Queue::create(seg(), o).ok());
  mark = t.output().size();
  EXPECT_TRUE(t.read_until([&](const std::string& o) { return o.find("of 99", mark) != std::string::npos; }))
      << "no frame showed the newest segment: " << t.output().substr(mark);
  t.type("q");
  ASSERT_TRUE(t.read_until([](const std::string& o) { return o.find(kAltOff) != std::string::npos; }));
  const int st = t.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

TEST_F(WatchTest, WithoutATerminalPrintsOneFrame) {
  const auto r = run_tool({"watch", seg()});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(occurrences(r.out, title()), 1u) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "escape sequences on a non-terminal";
  EXPECT_NE(r.out.find("TEN00000000001"), std::string::npos);
  EXPECT_NE(r.out.find("ring    3 lanes"), std::string::npos) << r.out;
}

// A segment name wider than the frame (here 130 characters) is read
// across lines of the frame's width; no line is wider, without a terminal
// (80 columns) or on one of 40. Before, the title line held the whole name:
// 146 columns, cut to the terminal's width on one.
TEST_F(WatchTest, ANameWiderThanTheFrameIsReadAcrossLines) {
  SegmentGuard long_name(unique_segment_name() + std::string(130 - unique_segment_name().size(), 'n'));
  ASSERT_EQ(long_name.name().size(), 130u);
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  ASSERT_TRUE(Queue::create(long_name.name(), o).ok());
  const auto r = run_tool({"watch", long_name.name(), "--once"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  std::string joined;
  for (std::size_t at = 0; at < r.out.size();) {
    const std::size_t nl = std::min(r.out.find('\n', at), r.out.size());
    const std::string line = r.out.substr(at, nl - at);
    EXPECT_LE(line.size(), 80u) << "wider than 80 columns: " << line;
    joined += line;
    at = nl + 1;
  }
  EXPECT_NE(joined.find(long_name.name()), std::string::npos) << "the name, read across its lines: " << r.out;

  PtyTool t({"watch", long_name.name(), "--interval", "50"}, 40, 40);
  ASSERT_TRUE(t.read_until([](const std::string& out) { return occurrences(out, "PROCESSES") >= 2; })) << t.output();
  t.type("q");
  ASSERT_TRUE(t.read_until([](const std::string& out) { return out.find(kAltOff) != std::string::npos; }));
  t.wait();
  std::string all;
  for (const std::string& line : last_frame(t.output())) {
    EXPECT_LE(line.size(), 40u) << "wider than the terminal: '" << line << "'";
    all += line;
  }
  EXPECT_NE(all.find(long_name.name()), std::string::npos) << "the name, read across its lines";
}

TEST_F(WatchTest, RefusesABadInterval) {
  const auto r = run_tool({"watch", seg(), "--interval", "5"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("--interval"), std::string::npos);
}

}  // namespace
}  // namespace fairlane
