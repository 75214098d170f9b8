// Helpers for the worker tests: an event log the test can wait on, a gate
// that holds handlers until the test opens it, and a fixture with a fresh
// segment per test.
//
// Nothing here sleeps. Every wait is on a condition variable signalled by
// the event it waits for; the real-time bound on each wait (kHang) only
// turns a hang into a failure.
#pragma once

#include "test_support.hpp"

#include <fairlane/backend.hpp>
#include <fairlane/worker.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

namespace fairlane::test {

inline constexpr std::chrono::seconds kHang{30};

inline void PrintTo(JobEvent::Kind k, std::ostream* os) { *os << to_string(k); }

struct Seen {
  JobEvent::Kind kind;
  BrandedId id;
  std::uint32_t attempt;
  std::uint64_t delay_ms;
  bool timed_out;
  std::string error;
};

class EventLog {
 public:
  std::function<void(const JobEvent&)> sink() {
    return [this](const JobEvent& e) {
      {
        std::lock_guard l(mu_);
        seen_.push_back(Seen{e.kind, e.id, e.attempt, e.delay_ms, e.timed_out, std::string(e.error)});
      }
      cv_.notify_all();
    };
  }
  std::size_t count(JobEvent::Kind k) const {
    std::lock_guard l(mu_);
    std::size_t n = 0;
    for (const auto& s : seen_) n += s.kind == k;
    return n;
  }
  // Waits until at least n events of kind k were seen; false after kHang.
  bool wait_for(JobEvent::Kind k, std::size_t n) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, kHang, [&] {
      std::size_t c = 0;
      for (const auto& s : seen_) c += s.kind == k;
      return c >= n;
    });
  }
  std::vector<Seen> of(JobEvent::Kind k) const {
    std::lock_guard l(mu_);
    std::vector<Seen> out;
    for (const auto& s : seen_)
      if (s.kind == k) out.push_back(s);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Seen> seen_;
};

// Handlers call pass(job): it records that the job started and blocks until
// the test opens the gate for that job (or for all), or the worker requests
// the job's stop. Returns whether the stop was requested.
class Gate {
 public:
  bool pass(Job& job) {
    std::unique_lock l(mu_);
    started_.push_back(job.id());
    cv_.notify_all();
    std::condition_variable_any& cv = cv_any_;
    std::stop_token tok = job.stop_token();
    cv.wait(l, tok, [&] { return all_ || open_.count(job.id()) != 0; });
    if (tok.stop_requested()) {
      stopped_.insert(job.id());
      cv_.notify_all();
    }
    return tok.stop_requested();
  }
  // Waits until n handlers have entered pass(); false after kHang.
  bool wait_started(std::size_t n) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, kHang, [&] { return started_.size() >= n; });
  }
  // Waits until n handlers have left pass() because their stop was
  // requested; false after kHang.
  bool wait_stopped(std::size_t n) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, kHang, [&] { return stopped_.size() >= n; });
  }
  std::vector<BrandedId> started() const {
    std::lock_guard l(mu_);
    return started_;
  }
  bool saw_stop(const BrandedId& id) const {
    std::lock_guard l(mu_);
    return stopped_.count(id) != 0;
  }
  void open(const BrandedId& id) {
    {
      std::lock_guard l(mu_);
      open_.insert(id);
    }
    cv_any_.notify_all();
  }
  void open_all() {
    {
      std::lock_guard l(mu_);
      all_ = true;
    }
    cv_any_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable_any cv_any_;
  std::vector<BrandedId> started_;
  std::set<BrandedId> open_, stopped_;
  bool all_ = false;
};

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    QueueOptions o;
    o.jobs = 512;
    o.lanes = 32;
    o.payload_bytes = 64;
    auto r = Queue::create(guard_->name(), o);
    ASSERT_TRUE(r.ok()) << describe(r.error());
    q_.emplace(std::move(r.value()));
  }
  void TearDown() override {
    q_.reset();
    guard_.reset();
  }
  Queue& q() { return *q_; }

  // The worker gets its own handle on the segment, like another component.
  BackendFactory backends() {
    auto r = Queue::open(guard_->name());
    EXPECT_TRUE(r.ok());
    return shared_backend(segment_backend(std::move(r.value())));
  }

  // One handler thread, no supervisor thread (the test calls tick()), the
  // manual clock, events into log_.
  WorkerOptions manual(std::uint32_t threads = 1) {
    WorkerOptions o;
    o.threads = threads;
    o.supervisor_thread = false;
    o.clock = clock_;
    o.idle_poll = std::chrono::milliseconds(20);
    o.seed = 42;
    o.on_event = log_.sink();
    return o;
  }

  BrandedId enqueue(const BrandedId& group, std::string_view payload = "p") {
    const BrandedId id = q().mint();
    EXPECT_EQ(q().enqueue(group, id, payload), EnqueueStatus::enqueued);
    return id;
  }

  JobState state_of(const BrandedId& id) {
    auto j = q().job(id);
    EXPECT_TRUE(j.has_value()) << "no job " << id.str();
    return j ? j->state : JobState::pending;
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(1'000'000);
  EventLog log_;
  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
};

}  // namespace fairlane::test
