// fairlane::Worker in one process: success, failure, retries under each
// backoff policy, per-job overrides, handler timeouts, heartbeats, bounded
// in-flight, graceful shutdown and the signal hook.
//
// Time is driven, never waited for: the worker runs on a ManualClock with
// supervisor_thread = false (the test calls tick()), and the segment's clock
// is moved with advance_clock. Delays are long (seconds of segment time) so
// that the real time a test takes cannot make a job fall due early.
#include "worker_support.hpp"

#include <signal.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using test::Gate;
using test::group;
using test::kHang;
using test::WorkerTest;
using Kind = JobEvent::Kind;

// ---------------------------------------------------------------- backoff, pure

TEST(Backoff, FixedIgnoresTheAttempt) {
  const Backoff b = Backoff::fixed(1500ms);
  for (std::uint32_t a : {0u, 1u, 2u, 10u, 65535u}) EXPECT_EQ(b.delay(a), 1500ms) << "attempt " << a;
}

TEST(Backoff, ExponentialDoublesUpToTheCap) {
  const Backoff b = Backoff::exponential(100ms, 1000ms);
  EXPECT_EQ(b.delay(1), 100ms);
  EXPECT_EQ(b.delay(2), 200ms);
  EXPECT_EQ(b.delay(3), 400ms);
  EXPECT_EQ(b.delay(4), 800ms);
  EXPECT_EQ(b.delay(5), 1000ms);
  EXPECT_EQ(b.delay(60000), 1000ms);  // pow overflows to inf; the cap holds
  EXPECT_EQ(Backoff::exponential(100ms, 10s, 3.0).delay(3), 900ms);
}

TEST(Backoff, JitterTakesAUniformShareOff) {
  const Backoff b = Backoff::fixed(1000ms, 0.5);
  EXPECT_EQ(b.delay(1, 0.0), 1000ms);
  EXPECT_EQ(b.delay(1, 0.5), 750ms);
  EXPECT_EQ(b.delay(1, 0.999999), 500ms);
  const Backoff full = Backoff::exponential(1000ms, 4000ms, 2.0, 1.0);
  EXPECT_EQ(full.delay(3, 0.25), 3000ms);  // 4000 * (1 - 0.25)
  EXPECT_EQ(Backoff::fixed(1000ms).delay(1, 0.9), 1000ms) << "no jitter: u ignored";
}

// Builds a Worker (no backend: it is never started) with the default
// options as `edit` changes them.
template <class Edit>
void make_worker(Edit&& edit) {
  WorkerOptions o;
  edit(o);
  Worker w([]() -> std::unique_ptr<Backend> { return nullptr; }, o, [](Job&) { return Outcome::ok(); });
}

TEST(WorkerOptionsCheck, RefusesNonsense) {
  const auto make = [](auto edit) { make_worker(edit); };
  auto handler = [](Job&) { return Outcome::ok(); };
  EXPECT_THROW(make([](WorkerOptions& o) { o.threads = 0; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.lease_ms = 0; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.heartbeat_ms = o.lease_ms; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.backoff.jitter = 1.5; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.backoff.factor = 0.5; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.max_attempts = 0; }), std::invalid_argument);
  EXPECT_THROW(Worker(nullptr, WorkerOptions{}, handler), std::invalid_argument);
  EXPECT_NO_THROW(make([](WorkerOptions&) {}));
}

// The ranges of a stored policy (retry.hpp) hold for the worker's too: an
// exponential backoff with base > cap (valid() false) and max_attempts over
// 65,535 were taken, though the constructor is documented to throw for
// options out of range.
TEST(WorkerOptionsCheck, RefusesWhatAStoredPolicyCouldNotBe) {
  const auto make = [](auto edit) { make_worker(edit); };
  EXPECT_THROW(make([](WorkerOptions& o) { o.backoff = Backoff::exponential(10000ms, 5000ms); }),
               std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.max_attempts = 70000; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.backoff.factor = 1001; }), std::invalid_argument);
  EXPECT_THROW(make([](WorkerOptions& o) { o.backoff.cap = std::chrono::milliseconds(1LL << 32); }),
               std::invalid_argument);
  EXPECT_NO_THROW(make([](WorkerOptions& o) { o.max_attempts = 65535; }));
  EXPECT_NO_THROW(make([](WorkerOptions& o) { o.backoff = Backoff::exponential(5000ms, 5000ms); }));
  // A fixed backoff is its base: its cap is not used, nor checked.
  EXPECT_NO_THROW(make([](WorkerOptions& o) {
    o.backoff = Backoff{.kind = Backoff::Kind::fixed, .base = 10000ms, .cap = 5000ms};
  }));
}

// A fixed backoff waits its base whatever its cap (retry.hpp): valid(), and
// stored with cap = base. Only an exponential one is capped.
TEST(WorkerBackoff, AFixedDelayIsItsBaseAndOnlyExponentialIsCapped) {
  const Backoff hand{.kind = Backoff::Kind::fixed, .base = 10000ms, .cap = 5000ms};
  EXPECT_TRUE(hand.valid());
  EXPECT_EQ(hand.delay(1), 10000ms);
  EXPECT_EQ(hand.delay(7), 10000ms);
  EXPECT_EQ(Backoff::fixed(10000ms).cap, 10000ms);
  const Backoff exp{.kind = Backoff::Kind::exponential, .base = 10000ms, .cap = 5000ms};
  EXPECT_FALSE(exp.valid());
  EXPECT_EQ(Backoff::exponential(1000ms, 5000ms).delay(10), 5000ms);
}

// Every thread's backend forwards segment() to the one it shares (it said
// nullptr, as Valkey does, until review).
TEST_F(WorkerTest, EachThreadsBackendReachesTheSharedSegment) {
  auto r = Queue::open(q().name());
  ASSERT_TRUE(r.ok());
  std::shared_ptr<Backend> one = segment_backend(std::move(r.value()));
  Queue* seg = one->segment();
  ASSERT_NE(seg, nullptr);
  const BackendFactory make = shared_backend(one);
  const std::unique_ptr<Backend> a = make(), b = make();
  ASSERT_EQ(a->segment(), seg);
  EXPECT_EQ(b->segment(), seg);
  const BrandedId g = group("SEG", 1);
  enqueue(g);
  EXPECT_EQ(a->segment()->depth(g), 1U);
}

// Every thread's backend forwards enqueue_wait and enqueue_batch_wait to
// the one it shares: it forwarded neither at first, and through
// shared_backend() a full queue answered `full` at once (Backend's
// default, for a backend that is never full).
TEST_F(WorkerTest, EachThreadsBackendWaitsOutAFullQueue) {
  const BrandedId g = group("FUL", 1);
  while (q().enqueue(g, q().mint(), "x") == EnqueueStatus::enqueued) {
  }
  ASSERT_EQ(q().enqueue(g, q().mint(), "x"), EnqueueStatus::full);
  auto r = Queue::open(q().name());
  ASSERT_TRUE(r.ok());
  const std::unique_ptr<Backend> b = shared_backend(segment_backend(std::move(r.value())))();
  // A consumer frees a slot each time the producer below is parked (the
  // snapshot counts it), and waits for the queue to be full again: each
  // call waits for its slot rather than answering at once.
  const std::uint64_t full = q().depth(g);
  std::thread consumer([&] {
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(test::eventually([&] { return q().snapshot().producers_parked != 0; })) << "nobody parked";
      Lease l;
      ASSERT_TRUE(q().claim(l, 60000));
      ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
      EXPECT_TRUE(test::eventually([&] { return q().depth(g) == full; })) << "the slot freed was not taken";
    }
  });
  EXPECT_EQ(b->enqueue_wait(g, q().mint(), "w", EnqueueOptions{}, std::chrono::seconds(30)), EnqueueStatus::enqueued);
  const EnqueueItem items[] = {{g, q().mint(), "b", {}}};
  EnqueueStatus st[1] = {EnqueueStatus::corrupt};
  EXPECT_EQ(b->enqueue_batch_wait(items, st, std::chrono::seconds(30)), 1U);
  EXPECT_EQ(st[0], EnqueueStatus::enqueued);
  consumer.join();
}

// A worker over an observer's handle claimed nothing, for good, and said
// nothing (its claims were empty); start() now refuses it by name, and
// nothing runs.
TEST_F(WorkerTest, StartRefusesAHandleThatMakesNoClaims) {
  enqueue(group("OBS", 1));
  BackendFactory observers = [&]() -> std::unique_ptr<Backend> {
    auto r = Queue::open(q().name(), Queue::Attach::observer);
    if (!r.ok()) return nullptr;
    return segment_backend(std::move(r.value()));
  };
  Worker w(observers, manual(1), [](Job&) { return Outcome::ok(); });
  try {
    w.start();
    ADD_FAILURE() << "start() accepted an observer's handle";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("makes no claims"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().claimed, 0u);
  EXPECT_EQ(q().snapshot().pending, 1u);
}

// ---------------------------------------------------------------- success

TEST_F(WorkerTest, CompletesEveryJobAcrossThreads) {
  std::mutex mu;
  std::map<BrandedId, std::string> ran;
  std::set<BrandedId> want;
  for (int i = 0; i < 60; ++i) {
    const BrandedId g = group("TEN", 1 + i % 3);
    want.insert(enqueue(g, "payload-" + std::to_string(i)));
  }
  WorkerOptions o = manual(4);
  o.supervisor_thread = true;  // and the real supervisor, for once
  o.clock = nullptr;
  Worker w(backends(), o, [&](Job& job) {
    std::lock_guard l(mu);
    EXPECT_TRUE(ran.emplace(job.id(), std::string(job.payload())).second) << "ran twice: " << job.id().str();
    EXPECT_EQ(job.attempt(), 1u);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(log_.wait_for(Kind::completed, want.size()));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(ran.size(), want.size());
  for (const auto& id : want) EXPECT_EQ(ran.count(id), 1u) << id.str();
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending + s.leased + s.scheduled + s.dead, 0u);
  EXPECT_EQ(s.counters.completed, want.size());
  const WorkerStats st = w.stats();
  EXPECT_EQ(st.claimed, want.size());
  EXPECT_EQ(st.completed, want.size());
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(st.retried + st.dead + st.lost + st.handed_back, 0u);
}

// ---------------------------------------------------------------- failure and backoff

class WorkerRetryTest : public WorkerTest {
 protected:
  // Drives a job that always fails through every attempt. `delays` are the
  // backoffs the worker must pick; each is checked against the segment: not
  // due at half of it, claimed again once it has passed.
  // With `job_policy`, the job is enqueued carrying that retry policy, and
  // the last attempt is the job's max_attempts when it sets one.
  void run_always_failing(const WorkerOptions& o, const std::vector<std::uint64_t>& delays,
                          const RetryPolicy& job_policy = {});
};

void WorkerRetryTest::run_always_failing(const WorkerOptions& o, const std::vector<std::uint64_t>& delays,
                                         const RetryPolicy& job_policy) {
  Queue& q = this->q();
  test::EventLog& log = log_;
  const BrandedId id = q.mint();
  ASSERT_EQ(q.enqueue(group("TEN"), id, "x", EnqueueOptions{.retry = job_policy}), EnqueueStatus::enqueued);
  const std::uint32_t last = job_policy.max_attempts != 0 ? job_policy.max_attempts : o.max_attempts;
  Worker w(backends(), o, [](Job& job) { return Outcome::retry("boom " + std::to_string(job.attempt())); });
  w.start();
  for (std::size_t i = 0; i < delays.size(); ++i) {
    ASSERT_TRUE(log.wait_for(Kind::retrying, i + 1)) << "retry " << i + 1;
    const test::Seen e = log.of(Kind::retrying).back();
    EXPECT_EQ(e.id, id);
    EXPECT_EQ(e.attempt, i + 1);
    EXPECT_EQ(e.delay_ms, delays[i]) << "attempt " << i + 1;
    EXPECT_EQ(e.error, "boom " + std::to_string(i + 1));
    auto j = q.job(id);
    ASSERT_TRUE(j.has_value());
    EXPECT_EQ(j->state, JobState::scheduled);
    EXPECT_EQ(j->last_error, "boom " + std::to_string(i + 1));
    q.advance_clock(delays[i] / 2);
    q.tick();
    ASSERT_TRUE(q.job(id).has_value());
    EXPECT_EQ(q.job(id)->state, JobState::scheduled) << "due before its backoff passed";
    q.advance_clock(delays[i] - delays[i] / 2);
    q.tick();  // promotes it (or the worker's own claim did); the worker claims it again
  }
  ASSERT_TRUE(log.wait_for(Kind::dead, 1));
  const test::Seen d = log.of(Kind::dead).back();
  EXPECT_EQ(d.attempt, last);
  auto j = q.job(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state, JobState::dead);
  EXPECT_EQ(j->attempt, last);
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().retried, delays.size());
  EXPECT_EQ(w.stats().dead, 1u);
  EXPECT_EQ(w.stats().completed, 0u);
}

TEST_F(WorkerRetryTest, FixedBackoffRetriesThenDeadLetters) {
  WorkerOptions o = manual();
  o.backoff = Backoff::fixed(10s);
  o.max_attempts = 3;
  run_always_failing(o, {10000, 10000});
}

TEST_F(WorkerRetryTest, ExponentialBackoffGrowsToItsCap) {
  WorkerOptions o = manual();
  o.backoff = Backoff::exponential(2s, 10s);
  o.max_attempts = 5;
  run_always_failing(o, {2000, 4000, 8000, 10000});
}

// The job's policy wins over WorkerOptions, each field on its own.
TEST_F(WorkerRetryTest, TheJobsPolicyWinsOverTheWorkers) {
  WorkerOptions o = manual();
  o.backoff = Backoff::exponential(2s, 10s);
  o.max_attempts = 5;
  run_always_failing(o, {3000, 3000}, RetryPolicy{3, Backoff::fixed(3s)});
}

TEST_F(WorkerRetryTest, AJobWithOnlyMaxAttemptsKeepsTheWorkersBackoff) {
  WorkerOptions o = manual();
  o.backoff = Backoff::exponential(2s, 10s);
  o.max_attempts = 5;
  run_always_failing(o, {2000}, RetryPolicy{2, std::nullopt});
}

TEST_F(WorkerRetryTest, AJobWithOnlyABackoffKeepsTheWorkersMaxAttempts) {
  WorkerOptions o = manual();
  o.backoff = Backoff::exponential(2s, 10s);
  o.max_attempts = 3;
  run_always_failing(o, {500, 500}, RetryPolicy{0, Backoff::fixed(500ms)});
}

TEST_F(WorkerTest, JitteredBackoffStaysWithinItsBounds) {
  WorkerOptions o = manual();
  o.backoff = Backoff::fixed(20s, 0.5);
  o.max_attempts = 4;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [](Job&) { return Outcome::retry("again"); });
  w.start();
  std::set<std::uint64_t> distinct;
  for (std::size_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(log_.wait_for(Kind::retrying, i));
    const std::uint64_t d = log_.of(Kind::retrying).back().delay_ms;
    EXPECT_GE(d, 10000u);
    EXPECT_LE(d, 20000u);
    distinct.insert(d);
    q().advance_clock(d);
    q().tick();
  }
  ASSERT_TRUE(log_.wait_for(Kind::dead, 1));
  EXPECT_EQ(state_of(id), JobState::dead);
  EXPECT_GT(distinct.size(), 1u) << "three draws of a uniform jitter were all equal";
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
}

TEST_F(WorkerTest, HandlerOverridesTheDelayAndCanRefuseRetries) {
  WorkerOptions o = manual();
  o.backoff = Backoff::fixed(1s);
  o.max_attempts = 10;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [](Job& job) {
    if (job.attempt() == 1) return Outcome::retry_after(7s, "later");
    return Outcome::dead("hopeless");
  });
  w.start();
  ASSERT_TRUE(log_.wait_for(Kind::retrying, 1));
  EXPECT_EQ(log_.of(Kind::retrying)[0].delay_ms, 7000u);
  q().advance_clock(7000);
  q().tick();
  ASSERT_TRUE(log_.wait_for(Kind::dead, 1));
  const test::Seen d = log_.of(Kind::dead)[0];
  EXPECT_EQ(d.attempt, 2u) << "dead on attempt 2 of 10: the handler said no retry";
  EXPECT_EQ(d.error, "hopeless");
  auto j = q().job(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state, JobState::dead);
  EXPECT_EQ(j->last_error, "hopeless");
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
}

TEST_F(WorkerTest, AHandlerThatThrowsIsAFailedAttempt) {
  WorkerOptions o = manual();
  o.max_attempts = 1;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [](Job&) -> Outcome { throw std::runtime_error("kaput"); });
  w.start();
  ASSERT_TRUE(log_.wait_for(Kind::dead, 1));
  EXPECT_EQ(log_.of(Kind::dead)[0].error, "kaput");
  auto j = q().job(id);
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->state, JobState::dead);
  EXPECT_EQ(j->last_error, "kaput");
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().handler_exceptions, 1u);
}

// ---------------------------------------------------------------- timeouts

TEST_F(WorkerTest, AHandlerPastItsTimeoutIsGivenUpAndItsResultIgnored) {
  WorkerOptions o = manual();
  o.lease_ms = 60000;
  o.handler_timeout = 5s;
  o.max_attempts = 3;
  o.backoff = Backoff::fixed(30s);
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);  // returns when the worker requests the job's stop
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  clock_->advance(4999ms);
  w.tick();
  EXPECT_EQ(log_.count(Kind::retrying), 0u) << "given up before its timeout";
  EXPECT_EQ(state_of(id), JobState::leased);
  clock_->advance(1ms);
  w.tick();
  ASSERT_TRUE(log_.wait_for(Kind::retrying, 1));
  const test::Seen e = log_.of(Kind::retrying)[0];
  EXPECT_TRUE(e.timed_out);
  EXPECT_EQ(e.delay_ms, 30000u);
  EXPECT_EQ(e.error, "timed out after 5000 ms");
  EXPECT_EQ(state_of(id), JobState::scheduled) << "the lease was given back at the timeout";
  // The handler saw its stop token, returned ok, and that ok was discarded.
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_TRUE(gate.saw_stop(id));
  EXPECT_EQ(w.stats().completed, 0u);
  EXPECT_EQ(w.stats().timed_out, 1u);
  EXPECT_EQ(q().snapshot().counters.completed, 0u);
  EXPECT_EQ(state_of(id), JobState::scheduled);
}

TEST_F(WorkerTest, ATimeoutOnTheLastAttemptDeadLetters) {
  WorkerOptions o = manual();
  o.lease_ms = 60000;
  o.handler_timeout = 1s;
  o.max_attempts = 1;
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  clock_->advance(1s);
  w.tick();
  ASSERT_TRUE(log_.wait_for(Kind::dead, 1));
  EXPECT_TRUE(log_.of(Kind::dead)[0].timed_out);
  EXPECT_EQ(state_of(id), JobState::dead);
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
}

// ---------------------------------------------------------------- heartbeats

TEST_F(WorkerTest, HeartbeatsKeepASlowJobFromBeingReclaimed) {
  WorkerOptions o = manual();
  o.lease_ms = 3000;  // heartbeat every 1000
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  // Ten seconds of segment time: more than three leases' worth.
  for (int i = 0; i < 10; ++i) {
    q().advance_clock(1000);
    clock_->advance(1000ms);
    w.tick();
    q().tick();
    auto j = q().job(id);
    ASSERT_TRUE(j.has_value());
    ASSERT_EQ(j->state, JobState::leased) << "reclaimed after " << (i + 1) << " s";
    ASSERT_EQ(j->attempt, 1u);
  }
  EXPECT_GE(w.stats().extended, 10u);
  gate.open(id);
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(q().snapshot().counters.expired, 0u);
  EXPECT_EQ(q().snapshot().counters.completed, 1u);
  EXPECT_FALSE(q().job(id).has_value());
}

TEST_F(WorkerTest, WithoutHeartbeatsTheLeaseIsLostAndTheLateResultIgnored) {
  WorkerOptions o = manual();
  o.lease_ms = 3000;
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  q().advance_clock(4000);  // no tick() of the worker: no heartbeat
  q().tick();
  EXPECT_EQ(state_of(id), JobState::pending) << "expired back to its lane";
  gate.open_all();  // attempt 1 returns ok: stale, lost; the worker then runs attempt 2
  ASSERT_TRUE(log_.wait_for(Kind::lost, 1));
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  EXPECT_EQ(log_.of(Kind::lost)[0].attempt, 1u);
  EXPECT_EQ(log_.of(Kind::completed)[0].attempt, 2u);
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(q().snapshot().counters.expired, 1u);
}

TEST_F(WorkerTest, AHeartbeatThatFindsTheLeaseGoneStopsTheHandler) {
  WorkerOptions o = manual();
  o.lease_ms = 3000;
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  q().advance_clock(4000);
  q().tick();                 // expired
  Lease other;
  ASSERT_TRUE(q().claim(other, 60000));  // someone else has it now
  EXPECT_EQ(other.attempt, 2u);
  clock_->advance(1000ms);
  w.tick();  // the heartbeat is refused: stale
  ASSERT_TRUE(log_.wait_for(Kind::lost, 1));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_TRUE(gate.saw_stop(id));
  EXPECT_EQ(q().complete(other.id, other.token), AckStatus::ok) << "the other consumer's lease is intact";
}

// A handler that throws after its lease was lost is counted as a throw,
// and nothing else: its result is discarded, so it is neither retried nor
// dead (WorkerStats said handler_exceptions were "included in retried/dead").
TEST_F(WorkerTest, AThrowAfterTheLeaseWasLostIsCountedButNotRetried) {
  WorkerOptions o = manual();
  o.lease_ms = 3000;
  Gate gate;
  const BrandedId id = enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job& job) -> Outcome {
    gate.pass(job);
    throw std::runtime_error("late");
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  q().advance_clock(4000);
  q().tick();
  Lease other;
  ASSERT_TRUE(q().claim(other, 60000));
  clock_->advance(1000ms);
  w.tick();  // stale: lost, and the handler's stop is requested, so it throws
  ASSERT_TRUE(log_.wait_for(Kind::lost, 1));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_TRUE(gate.saw_stop(id));
  const WorkerStats st = w.stats();
  EXPECT_EQ(st.handler_exceptions, 1u);
  EXPECT_EQ(st.lost, 1u);
  EXPECT_EQ(st.retried + st.dead, 0u);
  EXPECT_EQ(q().complete(other.id, other.token), AckStatus::ok);
}

// ---------------------------------------------------------------- in-flight bound

TEST_F(WorkerTest, InFlightLeasesAreBounded) {
  WorkerOptions o = manual(2);
  o.max_in_flight = 3;  // two running, one waiting for a thread
  Gate gate;
  for (int i = 0; i < 10; ++i) enqueue(group("TEN", 1 + i % 5));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(2));
  ASSERT_TRUE(log_.wait_for(Kind::claimed, 3));
  // The claimer holds no free slot now: it cannot claim a fourth.
  EXPECT_EQ(q().snapshot().leased, 3u);
  EXPECT_EQ(w.stats().in_flight, 3u);
  EXPECT_EQ(w.stats().busy_threads, 2u);
  gate.open_all();
  ASSERT_TRUE(log_.wait_for(Kind::completed, 10));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().completed, 10u);
}

// WorkerStats::in_flight is the leases held: the slot the claimer reserves
// for its claim_wait holds none until the claim succeeds. It counted the
// reservation, so an idle worker said 1 (threads of them: one) forever.
TEST_F(WorkerTest, AnIdleWorkerHoldsNoLeaseInFlight) {
  WorkerOptions o = manual(2);
  Gate gate;
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(test::eventually([&] { return q().snapshot().consumers_parked != 0; })) << "the claimer never parked";
  EXPECT_EQ(w.stats().in_flight, 0u);
  // One job running, the claimer parked again for the next: one lease.
  enqueue(group("TEN", 1));
  ASSERT_TRUE(gate.wait_started(1));
  ASSERT_TRUE(test::eventually([&] { return q().snapshot().consumers_parked != 0; })) << "the claimer never parked";
  EXPECT_EQ(w.stats().in_flight, 1u);
  EXPECT_EQ(q().snapshot().leased, 1u);
  gate.open_all();
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().in_flight, 0u);
}

// ---------------------------------------------------------------- shutdown

TEST_F(WorkerTest, ShutdownLetsRunningJobsFinishThenHandsBackTheRest) {
  WorkerOptions o = manual(2);
  o.lease_ms = 60000;
  o.shutdown_grace = 10s;
  Gate gate;
  const BrandedId a = enqueue(group("TEN", 1));
  const BrandedId b = enqueue(group("TEN", 2));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(2));
  w.request_stop();
  w.tick();
  EXPECT_EQ(log_.count(Kind::handed_back), 0u) << "handed back within the grace";
  gate.open(a);  // finishes in time
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  clock_->advance(10s);
  w.tick();
  ASSERT_TRUE(log_.wait_for(Kind::handed_back, 1));
  EXPECT_EQ(log_.of(Kind::handed_back)[0].id, b);
  // Claimable at once by another consumer, not after the 60 s lease.
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.id, b);
  EXPECT_EQ(l.attempt, 1u) << "a hand-back is a release: the delivery does not count";
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  ASSERT_TRUE(w.wait_for(kHang));  // b's handler saw its stop token and returned
  EXPECT_TRUE(gate.saw_stop(b));
  const WorkerStats st = w.stats();
  EXPECT_EQ(st.completed, 1u);
  EXPECT_EQ(st.handed_back, 1u);
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(q().snapshot().counters.completed, 2u);
}

// Every call forwarded to one shared backend, except release() while the
// backend is `down`: then it throws, as a Valkey backend does once its
// reconnects and resend have failed. Counts the releases sent.
struct Outage {
  std::atomic<bool> down{false};
  std::atomic<int> releases{0};
};

class OutageBackend final : public Backend {
 public:
  OutageBackend(std::shared_ptr<Backend> b, std::shared_ptr<Outage> o) : b_(std::move(b)), o_(std::move(o)) {}
  Queue* segment() noexcept override { return b_->segment(); }
  std::string describe() const override { return b_->describe(); }
  std::string job_kind() const override { return b_->job_kind(); }
  BackendCapabilities capabilities() const override { return b_->capabilities(); }
  std::uint64_t now_ms() override { return b_->now_ms(); }
  BrandedId mint() override { return b_->mint(); }
  using Backend::enqueue;
  EnqueueStatus enqueue(const BrandedId& g, const BrandedId& j, std::string_view p, const EnqueueOptions& o) override {
    return b_->enqueue(g, j, p, o);
  }
  std::size_t enqueue_batch(std::span<const EnqueueItem> i, std::span<EnqueueStatus> st) override {
    return b_->enqueue_batch(i, st);
  }
  bool claim(Lease& out, std::uint32_t ms) override { return b_->claim(out, ms); }
  bool claim_wait(Lease& out, std::uint32_t ms, std::chrono::milliseconds t) override { return b_->claim_wait(out, ms, t); }
  std::size_t claim_batch(std::span<Lease> out, std::uint32_t ms) override { return b_->claim_batch(out, ms); }
  std::size_t claim_lane_batch(std::span<Lease> out, std::uint32_t ms) override { return b_->claim_lane_batch(out, ms); }
  AckStatus complete(const BrandedId& j, Token t) override { return b_->complete(j, t); }
  std::size_t complete_batch(std::span<const Lease> l, std::span<AckStatus> st) override { return b_->complete_batch(l, st); }
  FailStatus fail(const BrandedId& j, Token t, const FailOptions& o) override { return b_->fail(j, t, o); }
  AckStatus extend(const BrandedId& j, Token t, std::uint32_t ms) override { return b_->extend(j, t, ms); }
  AckStatus release(const BrandedId& j, Token t) override {
    o_->releases.fetch_add(1);
    if (o_->down.load()) throw BackendError("valkey 127.0.0.1:6390 unreachable: Connection refused");
    return b_->release(j, t);
  }
  LaneStatus pause(const BrandedId& g) override { return b_->pause(g); }
  LaneStatus resume(const BrandedId& g) override { return b_->resume(g); }
  LaneStatus pause_all() override { return b_->pause_all(); }
  LaneStatus resume_all() override { return b_->resume_all(); }
  LaneStatus set_limit(const BrandedId& g, std::uint32_t n) override { return b_->set_limit(g, n); }
  LaneStatus clear_limit(const BrandedId& g) override { return b_->clear_limit(g); }
  LaneStatus set_weight(const BrandedId& g, std::uint32_t w) override { return b_->set_weight(g, w); }
  std::uint64_t depth(const BrandedId& g) override { return b_->depth(g); }
  std::uint64_t drain(const BrandedId& g) override { return b_->drain(g); }
  MoveStatus reassign(const BrandedId& j, const BrandedId& g) override { return b_->reassign(j, g); }
  std::uint64_t tick() override { return b_->tick(); }
  Snapshot snapshot() override { return b_->snapshot(); }
  std::optional<JobInfo> job(const BrandedId& id, bool p) override { return b_->job(id, p); }
  std::vector<JobInfo> jobs(const JobFilter& f) override { return b_->jobs(f); }
  AckStatus requeue_dead(const BrandedId& id) override { return b_->requeue_dead(id); }
  std::uint64_t requeue_all_dead() override { return b_->requeue_all_dead(); }
  std::uint64_t purge_dead() override { return b_->purge_dead(); }
  std::vector<ProcessInfo> processes() override { return b_->processes(); }
  void advance_clock(std::uint64_t ms) override { b_->advance_clock(ms); }

 private:
  std::shared_ptr<Backend> b_;
  std::shared_ptr<Outage> o_;
};

// Hand-backs past the grace while the queue stays away: the first release
// that throws ends the pass, and the others are counted as the backend
// errors they would have been, not sent. Each was sent, and on Valkey each
// waited out its own timeouts (5 s or more apiece for a stopped server),
// so a stop took one such wait per lease held after the grace.
TEST_F(WorkerTest, AfterAHandBackFailsThePassSendsNoMore) {
  WorkerOptions o = manual(3);
  o.lease_ms = 60000;
  o.shutdown_grace = 1s;
  Gate gate;
  for (std::uint64_t t = 1; t <= 3; ++t) enqueue(group("TEN", t));
  auto outage = std::make_shared<Outage>();
  auto r = Queue::open(guard_->name());
  ASSERT_TRUE(r.ok());
  std::shared_ptr<Backend> shared = segment_backend(std::move(r.value()));
  Worker w([&]() -> std::unique_ptr<Backend> { return std::make_unique<OutageBackend>(shared, outage); }, o,
           [&](Job& job) {
             gate.pass(job);
             return Outcome::ok();
           });
  w.start();
  ASSERT_TRUE(gate.wait_started(3));
  outage->down = true;
  w.request_stop();
  clock_->advance(1s);
  EXPECT_EQ(w.tick(), 3u);  // all three given up, their handlers told
  EXPECT_EQ(outage->releases.load(), 1) << "a hand-back was sent after one had failed";
  ASSERT_TRUE(w.wait_for(kHang));
  const WorkerStats st = w.stats();
  EXPECT_EQ(st.backend_errors, 3u);
  EXPECT_EQ(st.handed_back, 0u);
  EXPECT_EQ(q().snapshot().leased, 3u) << "the leases not handed back expire";
}

TEST_F(WorkerTest, ShutdownHandsBackLeasesNotYetStartedAtOnce) {
  WorkerOptions o = manual(1);
  o.max_in_flight = 3;
  o.lease_ms = 60000;
  Gate gate;
  const BrandedId a = enqueue(group("TEN", 1));
  enqueue(group("TEN", 2));
  enqueue(group("TEN", 3));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  ASSERT_TRUE(log_.wait_for(Kind::claimed, 3));
  EXPECT_EQ(gate.started()[0], a);
  w.request_stop();
  w.tick();  // the two waiting for the busy thread go back now
  ASSERT_TRUE(log_.wait_for(Kind::handed_back, 2));
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_FALSE(q().claim(l, 1000));
  gate.open(a);
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().handed_back, 2u);
  EXPECT_EQ(w.stats().completed, 1u);
}

TEST_F(WorkerTest, AHandedBackJobIsNotClaimedAgainByTheSameWorker) {
  WorkerOptions o = manual(2);  // one thread busy, one slot free: the claimer is parked in claim_wait
  o.lease_ms = 60000;
  o.shutdown_grace = 0ms;
  o.idle_poll = 200ms;
  Gate gate;
  const BrandedId a = enqueue(group("TEN", 1));
  Worker w(backends(), o, [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  w.request_stop();
  w.tick();  // waits for the claimer to leave claim_wait, then hands back
  ASSERT_EQ(log_.count(Kind::handed_back), 1u);
  EXPECT_EQ(log_.count(Kind::claimed), 1u) << "the stopping worker claimed again";
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.id, a);
  EXPECT_EQ(l.attempt, 1u) << "a hand-back is a release: it costs no attempt";
  ASSERT_TRUE(w.wait_for(kHang));
}

TEST_F(WorkerTest, AStopFromInsideAHandlerDrainsCleanly) {
  WorkerOptions o = manual(1);
  Worker* self = nullptr;
  enqueue(group("TEN"));
  Worker w(backends(), o, [&](Job&) {
    self->request_stop();
    return Outcome::ok();
  });
  self = &w;
  w.start();
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().completed, 1u);
  EXPECT_TRUE(w.stop_requested());
}

TEST_F(WorkerTest, SigtermRequestsAGracefulStop) {
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &before), 0);
  WorkerOptions o = manual(1);
  o.stop_on_signals = true;
  enqueue(group("TEN"));
  Worker w(backends(), o, [](Job&) { return Outcome::ok(); });
  w.start();
  ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  {
    Worker second(backends(), o, [](Job&) { return Outcome::ok(); });
    EXPECT_THROW(second.start(), std::logic_error) << "two workers cannot both own the signal hook";
  }
  ASSERT_EQ(::raise(SIGTERM), 0);  // handled by the hook: the process lives on
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_TRUE(w.stop_requested());
  struct sigaction after {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &after), 0);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "the previous SIGTERM disposition is back";
}

TEST_F(WorkerTest, TheDestructorStopsAndJoins) {
  WorkerOptions o = manual(3);
  enqueue(group("TEN"));
  {
    Worker w(backends(), o, [](Job&) { return Outcome::ok(); });
    w.start();
    ASSERT_TRUE(log_.wait_for(Kind::completed, 1));
  }
  EXPECT_EQ(q().snapshot().leased, 0u);
}

}  // namespace
}  // namespace fairlane
