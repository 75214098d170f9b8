// fairlane::Worker on the Valkey backend: one connection per worker thread
// (a factory, not a shared backend), the same outcomes as on the segment.
//
// Uses FAIRLANE_VALKEY_URL or a private redis-server started by the
// conformance suite's helper; skipped when neither is available.
#include "worker_support.hpp"

#include "redis_server.hpp"

#include <fairlane/valkey.hpp>
#include <hiredis/hiredis.h>

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using test::Gate;
using test::group;
using test::kHang;
using Kind = JobEvent::Kind;

class WorkerOnValkey : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& t = test::valkey_target();
    if (!t.available) FAIRLANE_SKIP_OR_FAIL(t.skip_reason);
    static int run = 0;  // --gtest_repeat reuses the server: a fresh queue each time
    queue_ = test::unique_segment_name(std::to_string(++run));
    url_ = t.url(queue_);
    q_ = connect();
  }
  std::unique_ptr<Backend> connect() {
    auto r = open_backend(url_);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(r).value() : nullptr;
  }
  BackendFactory factory() {
    return [url = url_]() -> std::unique_ptr<Backend> {
      auto r = open_backend(url);
      if (!r) throw BackendError(r.error().message);
      return std::move(r).value();
    };
  }
  // One command on the queue's meta hash, through a connection of its own.
  void meta(const char* verb, const char* field, const char* value = nullptr) {
    auto& t = test::valkey_target();
    redisContext* c = redisConnect(t.host.c_str(), t.port);
    ASSERT_TRUE(c && !c->err);
    const std::string key = "emq:{" + queue_ + "}:meta";
    redisReply* r = value ? static_cast<redisReply*>(redisCommand(c, "%s %s %s %s", verb, key.c_str(), field, value))
                          : static_cast<redisReply*>(redisCommand(c, "%s %s %s", verb, key.c_str(), field));
    EXPECT_TRUE(r && r->type == REDIS_REPLY_INTEGER) << verb;
    if (r) freeReplyObject(r);
    redisFree(c);
  }
  // Manual supervision on the fixture's clock, events into log_.
  WorkerOptions options(std::uint32_t threads) {
    WorkerOptions o;
    o.threads = threads;
    o.supervisor_thread = false;
    o.clock = clock_;
    o.idle_poll = 20ms;
    o.lease_ms = 60000;
    o.on_event = log_.sink();
    return o;
  }
  std::string queue_;
  std::string url_;
  std::unique_ptr<Backend> q_;
  test::EventLog log_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>(1'000'000);
};

TEST_F(WorkerOnValkey, CompletesRetriesDeadLettersAndHandsBackOnShutdown) {
  WorkerOptions o = options(3);
  o.max_attempts = 5;
  o.shutdown_grace = 5s;
  Gate gate;
  auto add = [&](std::uint64_t tenant, std::string_view payload) {
    const BrandedId id = q_->mint();
    EXPECT_EQ(q_->enqueue(group("TEN", tenant), id, payload), EnqueueStatus::enqueued);
    return id;
  };
  for (int i = 0; i < 6; ++i) add(1 + i % 2, "ok");
  const BrandedId flaky = add(3, "flaky");
  const BrandedId hopeless = add(4, "hopeless");
  const BrandedId slow = add(5, "slow");

  Worker w(factory(), o, [&](Job& job) {
    if (job.payload() == "flaky" && job.attempt() == 1) return Outcome::retry_after(0ms, "first try fails");
    if (job.payload() == "hopeless") return Outcome::dead("no such customer");
    if (job.payload() == "slow") gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(log_.wait_for(Kind::completed, 7));  // six ok + flaky on attempt 2
  ASSERT_TRUE(log_.wait_for(Kind::dead, 1));
  // The retry is reported after fail() returns, so another thread may claim
  // and complete attempt 2 before the first one logs it: wait for the event.
  ASSERT_TRUE(log_.wait_for(Kind::retrying, 1));
  ASSERT_TRUE(gate.wait_started(1));
  EXPECT_EQ(log_.of(Kind::dead)[0].id, hopeless);
  EXPECT_EQ(log_.of(Kind::retrying)[0].id, flaky);

  w.request_stop();
  clock_->advance(5s);
  w.tick();  // past the grace: the slow job's lease is handed back
  ASSERT_TRUE(log_.wait_for(Kind::handed_back, 1));
  Lease l;
  ASSERT_TRUE(q_->claim(l, 60000)) << "handed back: claimable at once";
  EXPECT_EQ(l.id, slow);
  EXPECT_EQ(l.attempt, 1u);  // a hand-back is a release: not a failed delivery
  EXPECT_EQ(q_->complete(l.id, l.token), AckStatus::ok);
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_TRUE(gate.saw_stop(slow));
  const Snapshot s = q_->snapshot();
  EXPECT_EQ(s.counters.completed, 8u);
  EXPECT_EQ(s.pending + s.leased + s.scheduled, 0u);
  EXPECT_EQ(s.dead, 1u);
  EXPECT_EQ(w.stats().backend_errors, 0u);
}

// A worker on a mirror's keyspace claimed nothing for good, each claim a
// backend error; start() now refuses it by name. Forced, it is writable.
TEST_F(WorkerOnValkey, StartRefusesAMirrorsKeyspace) {
  ASSERT_EQ(q_->enqueue(group("TEN", 1), q_->mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_TRUE(q_->writable());
  meta("HSET", "owner", "elsewhere:seg");
  EXPECT_FALSE(q_->writable());
  Worker w(factory(), options(1), [](Job&) { return Outcome::ok(); });
  try {
    w.start();
    ADD_FAILURE() << "start() accepted a mirror's keyspace";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("mirror"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(w.wait_for(kHang));
  ValkeyOptions forced;
  forced.force = true;
  auto f = open_valkey(url_, forced);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(f.value()->writable());
  meta("HDEL", "owner");
  EXPECT_TRUE(q_->writable());
}

// A lease held while its keyspace becomes a segment's mirror (the mirror
// writes meta `owner` with every batch): the complete answers read_only,
// and the worker counts it as the backend error it is, as it counted the
// ReadOnlyError thrown there before 2026-12-05; not as a lost job.
TEST_F(WorkerOnValkey, AnAckRefusedAsReadOnlyIsABackendErrorNotALostJob) {
  Gate gate;
  const BrandedId id = q_->mint();
  ASSERT_EQ(q_->enqueue(group("TEN", 1), id, "held"), EnqueueStatus::enqueued);
  Worker w(factory(), options(1), [&](Job& job) {
    gate.pass(job);
    return Outcome::ok();
  });
  w.start();
  ASSERT_TRUE(gate.wait_started(1));
  meta("HSET", "owner", "elsewhere:seg");
  gate.open(id);
  // One lease in flight at most: the claimer's next claim (refused, a
  // backend error too) waits for the slot the acknowledgement frees, so a
  // first error means the acknowledgement has been answered.
  ASSERT_TRUE(test::eventually([&] { return w.stats().backend_errors >= 1; }, kHang));
  const WorkerStats st = w.stats();
  EXPECT_EQ(st.completed, 0u);
  EXPECT_EQ(st.lost, 0u);
  EXPECT_TRUE(log_.of(Kind::lost).empty());
  meta("HDEL", "owner");
  const auto job = q_->job(id);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state, JobState::leased);  // the lease is as it was
  w.request_stop();
  ASSERT_TRUE(w.wait_for(kHang));
}

// ---------------------------------------------------------------- a server that stops answering

// A private server the test may stop (SIGSTOP: a stalled host, a paused
// container) and that is always resumed before it is shut down (a stopped
// one would not die of the SIGTERM it is sent).
struct StoppableServer {
  std::unique_ptr<test::RedisServer> server;
  bool paused = false;
  void pause() {
    server->pause();
    paused = true;
  }
  void resume() {
    server->resume();
    paused = false;
  }
  ~StoppableServer() {
    if (server && paused) server->resume();
  }
  std::string url(const std::string& queue) const {
    return "valkey://127.0.0.1:" + std::to_string(server->port()) + "/" + queue;
  }
};

// Shutdown past the grace while the server does not answer: the stop
// tokens of every handler given up are requested before the first
// hand-back waits on the server. They were requested one hand-back at a
// time, each after the last had waited out its timeouts (twice
// command_timeout, 10 s by default): the fourth of four handlers heard of
// its stop 20 s after the grace, and a worker of 64 threads would have
// told its last one 5 minutes late.
TEST(WorkerOnAStalledServer, EveryHandlerGivenUpIsToldBeforeTheServerAnswers) {
  StoppableServer srv;
  std::string error;
  srv.server = test::RedisServer::start(FAIRLANE_REDIS_SERVER, error);
  if (!srv.server) FAIRLANE_SKIP_OR_FAIL("needs a private server: " + error);
  const std::string url = srv.url("stalled");
  auto q = open_backend(url);
  ASSERT_TRUE(q.ok()) << q.error().message;
  for (std::uint64_t t = 1; t <= 3; ++t)
    ASSERT_EQ((*q)->enqueue(group("TEN", t), (*q)->mint(), "x"), EnqueueStatus::enqueued);

  ValkeyOptions patient;
  patient.command_timeout = 10min;  // every call waits for the server to come back
  auto clock = std::make_shared<ManualClock>(1'000'000);
  test::EventLog log;
  WorkerOptions o;
  o.threads = 3;
  o.supervisor_thread = false;
  o.clock = clock;
  o.idle_poll = 20ms;
  o.lease_ms = 60000;
  o.shutdown_grace = 1s;
  o.on_event = log.sink();
  Gate gate;
  Worker w(
      [&] {
        auto r = open_valkey(url, patient);
        if (!r) throw BackendError(r.error().message);
        return std::move(r).value();
      },
      o,
      [&](Job& job) {
        gate.pass(job);
        return Outcome::ok();
      });
  w.start();
  ASSERT_TRUE(gate.wait_started(3));  // every slot holds a running job: the claimer waits for none

  srv.pause();
  w.request_stop();
  clock->advance(1s);
  std::thread supervisor([&] { w.tick(); });  // hands back: its release waits for the server
  const bool told = gate.wait_stopped(3);
  srv.resume();
  supervisor.join();
  EXPECT_TRUE(told) << "a handler given up heard of it only once the server answered";
  ASSERT_TRUE(w.wait_for(kHang));
  EXPECT_EQ(w.stats().handed_back, 3u);
  EXPECT_EQ(w.stats().backend_errors, 0u);
  const Snapshot s = (*q)->snapshot();
  EXPECT_EQ(s.pending, 3u);
  EXPECT_EQ(s.leased, 0u);
}

}  // namespace
}  // namespace fairlane
