// `fairlane stats`: the Prometheus text format is parsed back (strictly:
// names, labels, TYPE before samples, families contiguous, histogram rules)
// and its values checked against what the test did; --json likewise.
#include "tool_runner.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

namespace fairlane {
namespace {

using test::group;
using test::run_tool;
using test::SegmentGuard;
using test::show;
using test::unique_segment_name;

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family -> counter|gauge|histogram
  std::vector<PromSample> samples;
  std::vector<std::string> errors;

  // The samples of `name` whose labels include all of `want`.
  std::vector<PromSample> find(const std::string& name, const std::map<std::string, std::string>& want = {}) const {
    std::vector<PromSample> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, v] : want) {
        auto it = s.labels.find(k);
        ok = ok && it != s.labels.end() && it->second == v;
      }
      if (ok) out.push_back(s);
    }
    return out;
  }
  double value(const std::string& name, const std::map<std::string, std::string>& want = {}) const {
    auto v = find(name, want);
    if (v.size() != 1) {
      ADD_FAILURE() << name << " matched " << v.size() << " samples";
      return NAN;
    }
    return v[0].value;
  }
};

// The family a sample belongs to, given the declared types.
std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && it->second == "histogram") return base;
    }
  }
  return name;
}

Exposition parse(const std::string& text) {
  Exposition e;
  const std::regex name_re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  const std::regex label_name_re("[a-zA-Z_][a-zA-Z0-9_]*");
  std::set<std::string> closed;  // families already finished
  std::string current;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    auto err = [&](const std::string& why) { e.errors.push_back("line " + std::to_string(n) + ": " + why + ": " + line); };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream h(line);
      std::string hash, kind, name, rest;
      h >> hash >> kind >> name;
      if (kind == "TYPE") {
        h >> rest;
        if (!std::regex_match(name, name_re)) err("bad family name");
        if (rest != "counter" && rest != "gauge" && rest != "histogram") err("bad type");
        if (e.types.count(name)) err("TYPE declared twice");
        e.types[name] = rest;
      } else if (kind != "HELP") {
        err("unknown comment");
      }
      continue;
    }
    PromSample s;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!std::regex_match(s.name, name_re)) err("bad metric name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          err("bad label");
          break;
        }
        const std::string key = line.substr(i, eq - i);
        if (!std::regex_match(key, label_name_re)) err("bad label name");
        std::string val;
        std::size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            val.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            val.push_back(line[j]);
          }
        }
        if (j >= line.size()) {
          err("unterminated label value");
          break;
        }
        if (s.labels.count(key)) err("label repeated");
        s.labels[key] = val;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') {
      err("no value");
      continue;
    }
    const std::string v = line.substr(i + 1);
    char* end = nullptr;
    s.value = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') err("bad value");
    const std::string fam = family_of(s.name, e.types);
    if (!e.types.count(fam)) err("sample before its TYPE");
    if (fam != current) {
      if (closed.count(fam)) err("family not contiguous");
      if (!current.empty()) closed.insert(current);
      current = fam;
    }
    if (e.types[fam] == "counter" && s.name.size() > 6 && s.name.compare(s.name.size() - 6, 6, "_total") != 0)
      err("counter without _total");
    e.samples.push_back(std::move(s));
  }
  return e;
}

// Every histogram: per label set, le ascending and cumulative, +Inf == _count.
void check_histograms(const Exposition& e) {
  for (const auto& [fam, type] : e.types) {
    if (type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<std::pair<double, double>>> series;
    for (const auto& s : e.samples) {
      if (s.name != fam + "_bucket") continue;
      auto labels = s.labels;
      ASSERT_TRUE(labels.count("le")) << fam << " bucket without le";
      const std::string le = labels["le"];
      labels.erase("le");
      series[labels].emplace_back(le == "+Inf" ? INFINITY : std::stod(le), s.value);
    }
    ASSERT_FALSE(series.empty()) << fam;
    for (const auto& [labels, buckets] : series) {
      for (std::size_t i = 1; i < buckets.size(); ++i) {
        EXPECT_LT(buckets[i - 1].first, buckets[i].first) << fam << ": le not ascending";
        EXPECT_LE(buckets[i - 1].second, buckets[i].second) << fam << ": buckets not cumulative";
      }
      ASSERT_TRUE(std::isinf(buckets.back().first)) << fam << ": no +Inf bucket";
      EXPECT_EQ(buckets.back().second, e.value(fam + "_count", labels)) << fam << ": +Inf != _count";
      EXPECT_EQ(e.find(fam + "_sum", labels).size(), 1u) << fam << ": no _sum";
    }
  }
}

class StatsTest : public ::testing::Test {
 protected:
  // 10 jobs in lanes TEN1 (6) and TEN2 (4); 6 claims: 4 completed, 1
  // dead-lettered, 1 retried later. Left: 4 pending, 1 scheduled, 1 dead.
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    QueueOptions o;
    o.jobs = 64;
    o.lanes = 8;
    o.payload_bytes = 16;
    auto r = Queue::create(guard_->name(), o);
    ASSERT_TRUE(r.ok()) << test::describe(r.error());
    q_.emplace(std::move(r.value()));
    for (int i = 0; i < 10; ++i)
      ASSERT_EQ(q_->enqueue(group("TEN", i < 6 ? 1 : 2), q_->mint(), "x"), EnqueueStatus::enqueued);
    std::vector<Lease> ls(6);
    for (auto& l : ls) ASSERT_TRUE(q_->claim(l, 60000));
    for (int i = 0; i < 4; ++i) ASSERT_EQ(q_->complete(ls[i].id, ls[i].token), AckStatus::ok);
    ASSERT_EQ(q_->fail(ls[4].id, ls[4].token, {.delay_ms = 0, .max_attempts = 1, .error = "bad"}), FailStatus::dead);
    ASSERT_EQ(q_->fail(ls[5].id, ls[5].token, {.delay_ms = 600000, .max_attempts = 3}), FailStatus::retrying);
    ASSERT_EQ(q_->set_limit(group("TEN", 2), 7), LaneStatus::ok);
    ASSERT_EQ(q_->set_weight(group("TEN", 1), 3), LaneStatus::ok);
  }
  void TearDown() override {
    q_.reset();
    guard_.reset();
  }
  const std::string& seg() const { return guard_->name(); }
  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
};

TEST_F(StatsTest, PrometheusParsesBackAndMatchesWhatWasDone) {
  const auto r = run_tool({"stats", seg(), "--prometheus"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const Exposition e = parse(r.out);
  ASSERT_TRUE(e.errors.empty()) << e.errors.front();
  for (const auto& s : e.samples) EXPECT_EQ(s.labels.at("segment"), seg()) << s.name;

  EXPECT_EQ(e.types.at("fairlane_enqueued_total"), "counter");
  EXPECT_EQ(e.value("fairlane_enqueued_total"), 10);
  EXPECT_EQ(e.value("fairlane_claimed_total"), 6);
  EXPECT_EQ(e.value("fairlane_completed_total"), 4);
  EXPECT_EQ(e.value("fairlane_dead_lettered_total"), 1);
  EXPECT_EQ(e.value("fairlane_retried_total"), 1);
  EXPECT_EQ(e.value("fairlane_expired_total"), 0);
  EXPECT_EQ(e.value("fairlane_jobs", {{"state", "pending"}}), 4);
  EXPECT_EQ(e.value("fairlane_jobs", {{"state", "leased"}}), 0);
  EXPECT_EQ(e.value("fairlane_jobs", {{"state", "scheduled"}}), 1);
  EXPECT_EQ(e.value("fairlane_jobs", {{"state", "dead"}}), 1);
  EXPECT_EQ(e.value("fairlane_jobs_capacity"), 64);
  EXPECT_EQ(e.value("fairlane_lanes"), 2) << "TEN1 and TEN2 are live; the default lane holds nothing";
  EXPECT_EQ(e.value("fairlane_lanes_capacity"), 8);
  EXPECT_EQ(e.value("fairlane_lanes_reclaimed_total"), 0);
  EXPECT_EQ(e.value("fairlane_corruptions_total"), 0);
  EXPECT_EQ(e.value("fairlane_processes"), 1) << "this test process is attached; stats, an observer, is not";

  const std::map<std::string, std::string> g1{{"group", "TEN00000000001"}}, g2{{"group", "TEN00000000002"}};
  EXPECT_EQ(e.value("fairlane_lane_weight", g1), 3);
  EXPECT_EQ(e.value("fairlane_lane_limit", g2), 7);
  EXPECT_EQ(e.value("fairlane_lane_depth", g1) + e.value("fairlane_lane_depth", g2), 4);
  const double served1 = e.value("fairlane_lane_served_total", g1);
  const double served2 = e.value("fairlane_lane_served_total", g2);
  EXPECT_EQ(served1 + served2, 6);
  // Every claim recorded its wait in its lane's histogram.
  EXPECT_EQ(e.value("fairlane_lane_wait_seconds_count", g1), served1);
  EXPECT_EQ(e.value("fairlane_lane_wait_seconds_count", g2), served2);
  EXPECT_EQ(e.types.at("fairlane_lane_wait_seconds"), "histogram");
  check_histograms(e);
  EXPECT_GT(e.value("fairlane_lane_wait_seconds_sum", g1), 0.0);
}

TEST_F(StatsTest, HistogramsAreBoundedAndTheQueueWideOneIsAlwaysThere) {
  // TEN1 served more claims than TEN2 (6 claims over 2 lanes, TEN1 first).
  const auto count_groups = [](const Exposition& e) {
    std::set<std::string> groups;
    for (const auto& s : e.find("fairlane_lane_wait_seconds_count")) groups.insert(s.labels.at("group"));
    return groups;
  };
  for (const char* which : {"none", "top:1", "top:16", "all"}) {
    SCOPED_TRACE(which);
    const auto r = run_tool({"stats", seg(), "--prometheus", "--histograms", which});
    ASSERT_EQ(r.exit_code, 0) << show(r);
    const Exposition e = parse(r.out);
    ASSERT_TRUE(e.errors.empty()) << e.errors.front();
    // The queue-wide wait: one series, no group label, every claim in it.
    const auto all = e.find("fairlane_wait_seconds_count");
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].labels.count("group"), 0u);
    EXPECT_EQ(all[0].value, 6);
    const auto groups = count_groups(e);
    if (std::string(which) == "none") {
      EXPECT_TRUE(groups.empty());
      EXPECT_EQ(e.types.count("fairlane_lane_wait_seconds"), 0u) << "no empty family either";
    } else if (std::string(which) == "top:1") {
      const double s1 = e.value("fairlane_lane_served_total", {{"group", "TEN00000000001"}});
      const double s2 = e.value("fairlane_lane_served_total", {{"group", "TEN00000000002"}});
      ASSERT_EQ(groups.size(), 1u);
      EXPECT_EQ(*groups.begin(), s1 >= s2 ? "TEN00000000001" : "TEN00000000002") << "the group with the most claims";
    } else {
      std::set<std::string> lanes;  // every lane the snapshot lists (16 > their number)
      for (const auto& d : e.find("fairlane_lane_depth")) lanes.insert(d.labels.at("group"));
      EXPECT_TRUE(lanes.count("TEN00000000001") && lanes.count("TEN00000000002"));
      EXPECT_EQ(groups, lanes);
    }
    if (!groups.empty()) check_histograms(e);
  }
  for (const char* bad : {"top", "top:0", "top:x", "some", ""}) {
    SCOPED_TRACE(bad);
    const auto r = run_tool({"stats", seg(), "--prometheus", "--histograms", bad});
    EXPECT_EQ(r.exit_code, 2) << show(r);
  }
}

// A consumer parked in claim_wait (the queue paused: nothing to claim) is
// the gauge's 1, in the exposition and in the JSON; resumed, it claims and
// the gauge is 0 again.
TEST_F(StatsTest, AConsumerParkedInClaimWaitIsCounted) {
  ASSERT_EQ(q_->pause_all(), LaneStatus::ok);
  Lease got;
  std::atomic<bool> claimed{false};
  std::thread consumer([&] { claimed = q_->claim_wait(got, 60000, std::chrono::seconds(20)); });
  const bool parked = test::eventually([&] { return q_->snapshot().consumers_parked == 1; });
  const auto prom = run_tool({"stats", seg(), "--prometheus"});
  const auto json = run_tool({"stats", seg(), "--json"});
  ASSERT_EQ(q_->resume_all(), LaneStatus::ok);
  consumer.join();
  ASSERT_TRUE(parked) << "the consumer never parked";
  ASSERT_EQ(prom.exit_code, 0) << show(prom);
  const Exposition e = parse(prom.out);
  EXPECT_TRUE(e.errors.empty());
  EXPECT_EQ(e.value("fairlane_consumers_parked"), 1);
  ASSERT_EQ(json.exit_code, 0) << show(json);
  EXPECT_EQ(nlohmann::json::parse(json.out)["consumers_parked"], 1);
  EXPECT_TRUE(claimed.load()) << "resume_all did not wake it";
  EXPECT_EQ(q_->snapshot().consumers_parked, 0u);
}

// A producer parked in enqueue_wait (every slot in use) is the producers'
// gauge's 1, in the exposition, the JSON and the text; a complete frees a
// slot, it is admitted, and the gauge is 0 again.
TEST_F(StatsTest, AProducerParkedInEnqueueWaitIsCounted) {
  int filled = 0;
  while (filled < 64 && q_->enqueue(group("TEN", 3), q_->mint(), "f") == EnqueueStatus::enqueued) ++filled;
  ASSERT_EQ(q_->enqueue(group("TEN", 3), q_->mint(), "f"), EnqueueStatus::full);
  std::atomic<int> st{-1};
  std::thread producer([&] { st = int(q_->enqueue_wait(group("TEN", 3), q_->mint(), "w", std::chrono::seconds(20))); });
  const bool parked = test::eventually([&] { return q_->snapshot().producers_parked == 1; });
  const auto prom = run_tool({"stats", seg(), "--prometheus"});
  const auto json = run_tool({"stats", seg(), "--json"});
  const auto text = run_tool({"stats", seg()});
  Lease l;
  const bool freed = q_->claim(l, 60000) && q_->complete(l.id, l.token) == AckStatus::ok;
  producer.join();
  ASSERT_TRUE(parked) << "the producer never parked";
  ASSERT_TRUE(freed);
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
  ASSERT_EQ(prom.exit_code, 0) << show(prom);
  const Exposition e = parse(prom.out);
  EXPECT_TRUE(e.errors.empty());
  EXPECT_EQ(e.value("fairlane_producers_parked"), 1);
  EXPECT_EQ(e.value("fairlane_consumers_parked"), 0);
  ASSERT_EQ(json.exit_code, 0) << show(json);
  EXPECT_EQ(nlohmann::json::parse(json.out)["producers_parked"], 1);
  ASSERT_EQ(text.exit_code, 0) << show(text);
  EXPECT_NE(text.out.find("0 consumers parked, 1 producers parked"), std::string::npos) << text.out;
  EXPECT_EQ(q_->snapshot().producers_parked, 0u);
}

TEST_F(StatsTest, JsonMatchesTheSnapshot) {
  const auto r = run_tool({"stats", seg(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["segment"], seg());
  EXPECT_EQ(j["counters"]["enqueued"], 10);
  EXPECT_EQ(j["counters"]["completed"], 4);
  EXPECT_EQ(j["jobs"]["dead"], 1);
  ASSERT_EQ(j["lanes"].size(), 3u) << "TEN1, TEN2 and the default lane";
  std::uint64_t waits = 0;
  for (const auto& l : j["lanes"]) {
    EXPECT_EQ(l["wait"]["count"], l["served"]);
    EXPECT_EQ(l["wait"]["buckets"].size(), WaitHistogram::kBuckets);
    waits += l["wait"]["count"].get<std::uint64_t>();
  }
  EXPECT_EQ(waits, 6u);
  EXPECT_FALSE(j["processes"].empty());
}

TEST_F(StatsTest, OutputFileIsWrittenWhole) {
  test::TempDir dir;
  const auto path = dir.path() / "fairlane.prom";
  const auto r = run_tool({"stats", seg(), "--prometheus", "--output", path.string()});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_TRUE(r.out.empty());
  const Exposition e = parse(test::slurp_file(path));
  EXPECT_TRUE(e.errors.empty());
  EXPECT_EQ(e.value("fairlane_enqueued_total"), 10);
  std::size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) files += f.is_regular_file();
  EXPECT_EQ(files, 1u) << "a temporary file was left behind";
}

TEST_F(StatsTest, RefusesBothFormatsAndAMissingSegment) {
  auto r = run_tool({"stats", seg(), "--prometheus", "--json"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  r = run_tool({"stats", seg() + "_missing", "--prometheus"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_EQ(r.err.rfind("fairlane: ", 0), 0u) << show(r);
}

}  // namespace
}  // namespace fairlane
