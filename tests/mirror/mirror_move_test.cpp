// The mirror and a reassign stopped half done: linked with the failpoint
// build of the core (src/failpoint.hpp), and the mirror's own sources, to
// stop the mover at a named step while the mirror runs in this process.
#include <fairlane/mirror.hpp>
#include <fairlane/queue.hpp>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "raw_segment.hpp"
#include "redis_server.hpp"
#include "stopped_mover.hpp"
#include "test_support.hpp"

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using test::RawSegment;

class MirrorMove : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = test::RedisServer::start(FAIRLANE_REDIS_SERVER, error);
    if (!server_) FAIRLANE_SKIP_OR_FAIL(error);
    name_ = test::unique_segment_name();
    guard_ = std::make_unique<test::SegmentGuard>(name_);
    url_ = "valkey://127.0.0.1:" + std::to_string(server_->port()) + "/" + name_;
  }
  void TearDown() override {
    if (mirror_) mirror_->stop();
    mirror_.reset();
    guard_.reset();
  }

  std::string hget(const std::string& key, const std::string& field) { return server_->hget(key, field); }
  std::string job_key(const BrandedId& id) const { return test::echomq_job_key(name_, id.string()); }

  // Until Valkey says `field` of job `id` is `want` (a liveness wait with a
  // generous bound, not a speed assertion); what it said last.
  std::string wait_for(const BrandedId& id, const std::string& field, const std::string& want) {
    std::string got;
    test::eventually([&] { return (got = hget(job_key(id), field)) == want; }, 20s);
    return got;
  }

  // A mirrored segment of 256 jobs (the fixture's name and server).
  Queue make_queue() {
    QueueOptions o;
    o.jobs = 256;
    o.lanes = 8;
    o.mirror = url_;
    auto made = Queue::create(name_, o);
    EXPECT_TRUE(made) << made.error().message;
    return std::move(*made);
  }
  // The mirror, in this process (mirror_); false if it did not start.
  ::testing::AssertionResult start_mirror() {
    MirrorOptions mo;
    mo.valkey.reconnect_attempts = 1;
    auto m = Mirror::start(name_, mo);
    if (!m) return ::testing::AssertionFailure() << m.error().message;
    mirror_ = std::move(*m);
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<test::RedisServer> server_;
  std::string name_, url_;
  std::unique_ptr<test::SegmentGuard> guard_;
  std::unique_ptr<Mirror> mirror_;
};

// A job enqueued, then moved by a reassign that stopped between dropping its
// origin and committing its copy, before the mirror read the enqueue's
// record. The mirror found the origin a husk and wrote nothing; the mover
// logs the copy only once it goes on. So the enqueue's record was
// acknowledged (a sync enqueue returned durable) with the job in no Valkey
// key for as long as the mover stayed stopped. The mirror now follows the
// husk to the copy it names, commits it by the move's rule, and writes it.
TEST_F(MirrorMove, AJobMovedBeforeTheMirrorReadItsEnqueueReachesValkeyWhileItsMoverIsStopped) {
  Queue q = make_queue();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);  // logged; no mirror reads it yet
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  test::StoppedMover mover(q, j, g1, g2);

  ASSERT_TRUE(start_mirror());
  EXPECT_EQ(wait_for(j, "group", g2.string()), g2.string()) << "the moved job is in no Valkey key";
  EXPECT_EQ(hget(job_key(j), "payload"), "j");

  EXPECT_EQ(mover.go(), MoveStatus::moved);
  EXPECT_EQ(wait_for(j, "state", "pending"), "pending");
  EXPECT_EQ(hget(job_key(j), "group"), g2.string());
}

// Holds the mirror's reader at mirror.records_read while `hold` is set;
// `reached` says it got there.
struct ReaderHold {
  std::atomic<bool> hold{true}, reached{false};
  static void at(void* p) {
    auto& h = *static_cast<ReaderHold*>(p);
    h.reached.store(true);
    while (h.hold.load()) std::this_thread::yield();
  }
};

// The same, with the mirror running: it read the enqueue's record before the
// move and the slot it names after the drop, a husk. It wrote nothing
// (the job in no Valkey key while the mover stayed stopped), though the
// enqueue's record was acknowledged.
TEST_F(MirrorMove, AJobMovedBetweenTheMirrorsReadOfItsRecordAndOfItsSlotReachesValkeyWhileItsMoverIsStopped) {
  Queue q = make_queue();
  ASSERT_TRUE(start_mirror());
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 3);
  // The mirror's first resync and every record so far behind it: the next
  // batch it reads is the enqueue's.
  const BrandedId w = q.mint();
  ASSERT_EQ(q.enqueue(g3, w, "w"), EnqueueStatus::enqueued);
  ASSERT_EQ(wait_for(w, "state", "pending"), "pending");

  ReaderHold reader;
  detail::failpoint_call("mirror.records_read", &ReaderHold::at, &reader);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  ASSERT_TRUE(test::eventually([&] { return reader.reached.load(); }, 20s))
      << "the mirror never read the enqueue's record";
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  {
    test::StoppedMover mover(q, j, g1, g2);
    reader.hold.store(false);
    EXPECT_EQ(wait_for(j, "group", g2.string()), g2.string()) << "the moved job is in no Valkey key";
    EXPECT_EQ(hget(job_key(j), "payload"), "j");
    EXPECT_EQ(mover.go(), MoveStatus::moved);
  }
  EXPECT_EQ(wait_for(j, "state", "pending"), "pending");
  mirror_->stop();  // no thread reaches the point any more
  detail::failpoint_call("mirror.records_read", nullptr, nullptr);
}

// Holds a thread at a failpoint until `go`, the nth time it gets there
// (1 = the first); `reached` says it got there.
struct Gate {
  std::atomic<bool> reached{false}, go{false};
  std::atomic<std::uint32_t> calls{0};
  std::uint32_t nth = 1;
  static void at(void* p) {
    auto& g = *static_cast<Gate*>(p);
    if (g.calls.fetch_add(1) + 1 != g.nth) return;
    g.reached.store(true);
    while (!g.go.load()) std::this_thread::yield();
  }
  void wait_reached() const {
    while (!reached.load()) std::this_thread::yield();
  }
};

// A resync (a mirror's start) whose scan read the copy before the drop (an
// undecided copy no origin names yet: skipped, its admission has a record
// to come) and the origin after it (a husk). The scan passed husks by
// without a look, so the copy was never followed: the job was in no Valkey
// key though its enqueue's record was acknowledged (found in review of
// 142b94a).
TEST_F(MirrorMove, AResyncThatReadsTheCopyBeforeTheDropAndTheOriginAfterItWritesTheJob) {
  Queue q = make_queue();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  Gate copied, dropped;
  detail::failpoint_call("reassign.copied", &Gate::at, &copied);
  detail::failpoint_call("reassign.dropped", &Gate::at, &dropped);
  MoveStatus moved = MoveStatus::corrupt;
  std::thread mover([&] { moved = q.reassign(j, g2); });
  copied.wait_reached();  // the copy written and indexed, undecided; the origin pending
  RawSegment raw(name_);
  std::uint32_t origin = ~0U, copy = ~0U;
  for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i) {
    const auto st = detail::SlotWord::state(raw.slot_word_value(i));
    if (st == detail::SlotState::pending) origin = i;
    if (st == detail::SlotState::admitting) copy = i;
  }
  const bool below = origin != ~0U && copy != ~0U && copy < origin;
  Gate scan;  // the resync's scan, held once it has read the copy
  scan.nth = copy + 2;
  if (below) detail::failpoint_call("mirror.resync_slot", &Gate::at, &scan);
  MirrorOptions mo;
  mo.valkey.reconnect_attempts = 1;
  auto m = Mirror::start(name_, mo);
  if (below && m) {
    scan.wait_reached();
    copied.go.store(true);
    dropped.wait_reached();
    EXPECT_EQ(q.resume(g1), LaneStatus::ok);  // applies the drop: the origin is a husk naming the copy
    EXPECT_EQ(q.pause(g1), LaneStatus::ok);
    scan.go.store(true);
  }
  copied.go.store(true);
  if (m) {
    mirror_ = std::move(*m);
    if (below) {
      EXPECT_EQ(wait_for(j, "group", g2.string()), g2.string()) << "the moved job is in no Valkey key";
      EXPECT_EQ(hget(job_key(j), "payload"), "j");
    }
  }
  dropped.go.store(true);
  mover.join();
  if (mirror_) mirror_->stop();  // no thread reaches the points any more
  for (const char* point : {"reassign.copied", "reassign.dropped", "mirror.resync_slot"})
    detail::failpoint_call(point, nullptr, nullptr);
  ASSERT_TRUE(m) << m.error().message;
  if (!below) GTEST_SKIP() << "the copy (slot " << copy << ") is not below its origin (slot " << origin << ")";
  EXPECT_EQ(moved, MoveStatus::moved);
}

// A producer parked in enqueue_wait for room in a full log (refuse policy)
// is rung by the mirror's reader as it gives cells back, not only at the
// acknowledgement of the batch it read them into: here Valkey is stopped
// (SIGSTOP) once the reader is held, so no batch is acknowledged at all.
// The recovery bound of 60 s makes each sleep 30 s long: an answer within
// 10 s comes from the reader's ring (a liveness bound, not a speed
// assertion). With the ring only at acknowledgements (the first version,
// found in review) the producer slept on while a plain enqueue was
// admitted.
TEST_F(MirrorMove, AProducerParkedForLogRoomIsRungWhenTheReaderGivesCellsBack) {
  QueueOptions o;
  o.jobs = 256;
  o.lanes = 8;
  o.mirror = url_;
  o.mirror_log = 64;
  o.on_full = MirrorFull::refuse;
  o.recovery_ms = 60000;
  auto made = Queue::create(name_, o);
  ASSERT_TRUE(made) << made.error().message;
  Queue q = std::move(*made);
  ASSERT_TRUE(start_mirror());
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId first = q.mint();
  ASSERT_EQ(q.enqueue(g1, first, "first"), EnqueueStatus::enqueued);
  ASSERT_EQ(wait_for(first, "state", "pending"), "pending");  // the mirror's start behind it

  // The reader held after it read the next record: the log fills behind it.
  ReaderHold reader;
  detail::failpoint_call("mirror.records_read", &ReaderHold::at, &reader);
  ASSERT_EQ(q.enqueue(g1, q.mint(), "x"), EnqueueStatus::enqueued);
  ASSERT_TRUE(test::eventually([&] { return reader.reached.load(); }, 20s)) << "the mirror never read the record";
  EnqueueStatus st = EnqueueStatus::enqueued;
  for (int i = 0; i < 200 && st == EnqueueStatus::enqueued; ++i) st = q.enqueue(g1, q.mint(), "x");
  ASSERT_EQ(st, EnqueueStatus::mirror_behind);

  const BrandedId id = q.mint();
  std::atomic<int> answer{-1};
  std::thread producer([&] { answer = int(q.enqueue_wait(g2, id, "waited", 30000ms)); });
  ASSERT_TRUE(test::eventually([&] { return q.mirror_status().waiters == 1 || answer.load() != -1; }, 10s));
  ASSERT_EQ(answer.load(), -1) << "answered with the log full";

  server_->pause();  // nothing is acknowledged from here
  detail::failpoint_call("mirror.records_read", nullptr, nullptr);
  reader.hold.store(false);
  const bool answered = test::eventually([&] { return answer.load() != -1; }, 10s);
  if (!answered) {
    mirror_->stop();  // (nothing rang: the producer sleeps on; the join waits its sleep out)
    server_->resume();
  }
  producer.join();
  ASSERT_TRUE(answered) << "the reader gave cells back and the parked producer slept on";
  EXPECT_EQ(EnqueueStatus(answer.load()), EnqueueStatus::enqueued);
  EXPECT_EQ(q.depth(g2), 1u);
  server_->resume();
  EXPECT_EQ(wait_for(id, "state", "pending"), "pending");
}

}  // namespace
}  // namespace fairlane
