// `fairlane dead` and `fairlane jobs`: the dead-letter round trip (list,
// requeue one, requeue all, purge) and job listing with its filters.
#include "tool_runner.hpp"

#include <nlohmann/json.hpp>

namespace fairlane {
namespace {

using test::group;
using test::run_tool;
using test::SegmentGuard;
using test::show;
using test::unique_segment_name;

class DeadJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    QueueOptions o;
    o.jobs = 64;
    o.lanes = 8;
    o.payload_bytes = 16;
    auto r = Queue::create(guard_->name(), o);
    ASSERT_TRUE(r.ok()) << test::describe(r.error());
    q_.emplace(std::move(r.value()));
  }
  void TearDown() override {
    q_.reset();
    guard_.reset();
  }
  const std::string& seg() const { return guard_->name(); }
  Queue& q() { return *q_; }

  // Claims the next job and fails it on its last attempt.
  BrandedId kill_next(std::string_view error) {
    Lease l;
    EXPECT_TRUE(q().claim(l, 60000));
    EXPECT_EQ(q().fail(l.id, l.token, {.delay_ms = 0, .max_attempts = l.attempt, .error = error}), FailStatus::dead);
    return l.id;
  }

  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
};

TEST_F(DeadJobsTest, RequeueRoundTrip) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(group("TEN"), id, "x"), EnqueueStatus::enqueued);
  ASSERT_EQ(kill_next("boom: upstream said 503"), id);

  auto r = run_tool({"dead", seg(), "list", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["jobs"].size(), 1u) << r.out;
  EXPECT_EQ(j["jobs"][0]["id"], id.string());
  EXPECT_EQ(j["jobs"][0]["group"], "TEN00000000001");
  EXPECT_EQ(j["jobs"][0]["attempt"], 1);
  EXPECT_EQ(j["jobs"][0]["state"], "dead");
  EXPECT_EQ(j["jobs"][0]["last_error"], "boom: upstream said 503");
  EXPECT_TRUE(j["jobs"][0].contains("died_unix_ms"));

  r = run_tool({"dead", seg(), "list"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find(id.string()), std::string::npos);
  EXPECT_NE(r.out.find("boom: upstream said 503"), std::string::npos);
  EXPECT_NE(r.out.find("DIED AT"), std::string::npos);

  r = run_tool({"dead", seg(), "requeue", id.string()});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out, "requeued " + id.string() + "\n");
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000)) << "a requeued job is claimable at once";
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.attempt, 1u) << "a requeued dead letter starts its attempts again";

  r = run_tool({"dead", seg(), "requeue", id.string()});
  EXPECT_EQ(r.exit_code, 1) << "not dead: nothing to do\n" << show(r);
  EXPECT_NE(r.err.find("not dead"), std::string::npos) << show(r);

  ASSERT_EQ(q().fail(l.id, l.token, {.max_attempts = 1, .error = "again"}), FailStatus::dead);
  r = run_tool({"dead", seg(), "requeue", "--all", "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["requeued"], 1);
  ASSERT_EQ(q().job(id)->state, JobState::pending);

  ASSERT_EQ(kill_next("third time"), id);
  r = run_tool({"dead", seg(), "purge"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_EQ(r.out, "purged 1\n");
  EXPECT_FALSE(q().job(id).has_value());
  EXPECT_EQ(q().snapshot().dead, 0u);
  r = run_tool({"dead", seg(), "list"});
  EXPECT_NE(r.out.find("(no dead jobs)"), std::string::npos) << show(r);
  r = run_tool({"dead", seg(), "requeue", id.string()});
  EXPECT_EQ(r.exit_code, 1) << show(r);
}

TEST_F(DeadJobsTest, DeadRefusesBadInput) {
  const std::vector<std::vector<std::string>> bad = {
      {"dead", seg(), "bury"},
      {"dead", seg(), "requeue"},
      {"dead", seg(), "requeue", "JOB0000000000A", "--all"},
      {"dead", seg(), "requeue", "JOB00"},
      {"dead", seg(), "list", "JOB0000000000A"},
      {"dead", seg(), "purge", "--all"},
      {"dead", "valkey://127.0.0.1:1/q", "list"},  // segment only, and it says so
  };
  for (const auto& args : bad) {
    const auto r = run_tool(args);
    EXPECT_EQ(r.exit_code, 2) << args[2] << ": " << show(r);
    EXPECT_EQ(r.err.rfind("fairlane: ", 0), 0u) << show(r);
  }
}

TEST_F(DeadJobsTest, JobsListsStateAttemptsAndAge) {
  std::vector<BrandedId> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(q().mint());
    ASSERT_EQ(q().enqueue(group("TEN", 1 + i % 2), ids.back(), "x"), EnqueueStatus::enqueued);
  }
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  const BrandedId scheduled = q().mint();
  ASSERT_EQ(q().enqueue(group("TEN", 3), scheduled, "x", {.delay_ms = 600000}), EnqueueStatus::enqueued);

  auto r = run_tool({"jobs", seg(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["jobs"].size(), 6u);
  std::map<std::string, int> states;
  for (const auto& job : j["jobs"]) {
    ++states[job["state"].get<std::string>()];
    EXPECT_GE(job["age_ms"].get<std::int64_t>(), 0);
  }
  EXPECT_EQ(states["pending"], 4);
  EXPECT_EQ(states["leased"], 1);
  EXPECT_EQ(states["scheduled"], 1);

  r = run_tool({"jobs", seg(), "--state", "leased", "--json"});
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["jobs"].size(), 1u);
  EXPECT_EQ(j["jobs"][0]["id"], l.id.string());
  EXPECT_EQ(j["jobs"][0]["attempt"], 1);
  EXPECT_TRUE(j["jobs"][0].contains("deadline_unix_ms"));

  r = run_tool({"jobs", seg(), "--group", "TEN00000000002", "--json"});
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["jobs"].size(), 2u);
  for (const auto& job : j["jobs"]) EXPECT_EQ(job["group"], "TEN00000000002");

  r = run_tool({"jobs", seg(), "--limit", "2", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r.out)["jobs"].size(), 2u);

  r = run_tool({"jobs", seg()});
  ASSERT_EQ(r.exit_code, 0) << show(r);
  EXPECT_NE(r.out.find("expires in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("due in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(scheduled.string()), std::string::npos) << r.out;

  r = run_tool({"jobs", seg(), "--state", "sleeping"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
  EXPECT_NE(r.err.find("--state"), std::string::npos);
  r = run_tool({"jobs", seg(), "--group", "nope"});
  EXPECT_EQ(r.exit_code, 2) << show(r);
}

}  // namespace
}  // namespace fairlane
