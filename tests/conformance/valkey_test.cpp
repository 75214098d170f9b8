// What only the Valkey backend has: URLs, the EchoMQ keyspace on the wire,
// interop with data written by EchoMQ's own scripts, script reloading, the
// recorded job kind, and errors and reconnects when the server goes away.
#include <hiredis/hiredis.h>

#include <memory>

#include "backend_fixture.hpp"

namespace fairlane {
namespace {

using test::RedisServer;
using test::valkey_target;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Raw = std::unique_ptr<redisReply, ReplyFree>;

// A plain hiredis connection, to look at the keyspace behind the backend.
class RawClient {
 public:
  RawClient(const std::string& host, int port) : c_(redisConnect(host.c_str(), port)) {}
  bool ok() const { return c_ && !c_->err; }
  template <class... T>
  Raw cmd(const char* fmt, T... args) {
    return Raw(static_cast<redisReply*>(redisCommand(c_.get(), fmt, args...)));
  }
  std::string str(Raw r) { return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : "<nil>"; }
  long long num(Raw r) { return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1; }

 private:
  std::unique_ptr<redisContext, CtxFree> c_;
};

// A fixture for a fresh Valkey queue only.
class ValkeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& t = valkey_target();
    if (!t.available) GTEST_SKIP() << "Valkey cases skipped: " << t.skip_reason;
    queue_ = test::unique_segment_name();
    url_ = t.url(queue_);
    raw_ = std::make_unique<RawClient>(t.host, t.port);
    ASSERT_TRUE(raw_->ok());
    wipe();
    auto b = ValkeyBackend::open(url_);
    ASSERT_TRUE(b.ok()) << b.error().message;
    b_ = std::move(b).value();
  }
  void TearDown() override {
    if (raw_) wipe();
  }
  void wipe() {
    Raw keys = raw_->cmd("KEYS %s", ("emq:{" + queue_ + "}:*").c_str());
    if (!keys) return;
    for (std::size_t i = 0; i < keys->elements; ++i) raw_->cmd("DEL %b", keys->element[i]->str, keys->element[i]->len);
  }
  std::string key(const std::string& name) const { return "emq:{" + queue_ + "}:" + name; }

  std::string queue_, url_;
  std::unique_ptr<RawClient> raw_;
  std::unique_ptr<ValkeyBackend> b_;
};

// ---------------------------------------------------------------- URLs

TEST(ValkeyUrl, ParsesHostPortQueue) {
  auto u = ValkeyUrl::parse("valkey://127.0.0.1:6390/orders");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 6390);
  EXPECT_EQ(u->queue, "orders");
  EXPECT_EQ(u->str(), "valkey://127.0.0.1:6390/orders");
  EXPECT_EQ(u->prefix(), "emq:{orders}:");
  auto d = ValkeyUrl::parse("redis://cache.local/q-1.v2");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 6379);
  EXPECT_EQ(d->host, "cache.local");
  auto v6 = ValkeyUrl::parse("valkey://[::1]:7000/q");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->address(), "[::1]:7000");
  EXPECT_TRUE(is_valkey_url("valkey://x/y"));
  EXPECT_FALSE(is_valkey_url("orders"));
}

TEST(ValkeyUrl, RefusesWhatWouldBreakTheKeyspace) {
  for (const char* bad : {"valkey://", "valkey://host", "valkey://host:6379/", "valkey://host:0/q",
                          "valkey://host:70000/q", "valkey://host:12x/q", "valkey://:6379/q",
                          "valkey://host/q{x}", "valkey://host/a/b", "valkey://host/a b", "valkey://host/a*",
                          "valkey://[::1/q", "orders"}) {
    auto u = ValkeyUrl::parse(bad);
    EXPECT_FALSE(u.ok()) << bad;
    if (!u.ok()) {
      EXPECT_EQ(u.error().code, Errc::invalid_argument) << bad;
      EXPECT_NE(u.error().message.find("invalid Valkey URL"), std::string::npos) << u.error().message;
    }
  }
}

TEST(ValkeyOpen, UnreachableServerIsAClearError) {
  // A port nobody listens on: bind one, note it, close it.
  std::string error;
  auto s = RedisServer::start(FAIRLANE_REDIS_SERVER, error);
  int port = 1;  // privileged and unused on a test box: refused at once
  if (s) {
    port = s->port();
    s->stop();
  }
  ValkeyOptions o;
  o.reconnect_attempts = 2;
  o.reconnect_backoff = std::chrono::milliseconds(1);
  auto b = open_valkey("valkey://127.0.0.1:" + std::to_string(port) + "/q", o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message, "valkey 127.0.0.1:" + std::to_string(port) + " unreachable: Connection refused");
  // And open_backend routes by the target's form.
  auto seg = open_backend("flt_no_such_segment_ever");
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.error().code, Errc::not_found);
}

// ---------------------------------------------------------------- keyspace

TEST_F(ValkeyTest, KeyspaceIsEchoMQs) {
  const BrandedId id = b_->mint();
  ASSERT_EQ(b_->enqueue(A, id, "hello"), EnqueueStatus::enqueued);
  const std::string job = key("job:" + std::string(id.str()));
  const std::string lane = key("g:" + std::string(A.str()) + ":pending");
  Raw t = raw_->cmd("TYPE %s", job.c_str());
  ASSERT_TRUE(t && t->type == REDIS_REPLY_STATUS);
  EXPECT_EQ(std::string(t->str), "hash");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", job.c_str())), "pending");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s attempts", job.c_str())), "0");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s payload", job.c_str())), "hello");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s group", job.c_str())), std::string(A.str()));
  EXPECT_EQ(raw_->str(raw_->cmd("ZSCORE %s %b", lane.c_str(), id.str().data(), id.str().size())), "0");
  EXPECT_EQ(raw_->str(raw_->cmd("LINDEX %s 0", key("ring").c_str())), std::string(A.str()));
  EXPECT_EQ(raw_->num(raw_->cmd("LLEN %s", key("wake").c_str())), 1);

  Lease l;
  ASSERT_TRUE(b_->claim(l, 30'000));
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", job.c_str())), "active");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s attempts", job.c_str())), "1");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s %b", key("gactive").c_str(), A.str().data(), A.str().size())), "1");
  EXPECT_EQ(raw_->str(raw_->cmd("ZSCORE %s %b", key("active").c_str(), id.str().data(), id.str().size())),
            std::to_string(l.deadline_ms));
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", lane.c_str())), 0);  // empty lane: gone, as in EchoMQ
  EXPECT_EQ(raw_->num(raw_->cmd("LLEN %s", key("ring").c_str())), 0);

  ASSERT_EQ(b_->fail(l.id, l.token, FailOptions{0, 1, "bad input"}), FailStatus::dead);
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", job.c_str())), "dead");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s last_error", job.c_str())), "bad input");
  EXPECT_EQ(raw_->num(raw_->cmd("ZCARD %s", key("dead").c_str())), 1);
  EXPECT_EQ(raw_->num(raw_->cmd("HEXISTS %s %b", key("gactive").c_str(), A.str().data(), A.str().size())), 0);

  ASSERT_EQ(b_->set_limit(B, 3), LaneStatus::ok);
  ASSERT_EQ(b_->set_weight(B, 2), LaneStatus::ok);
  ASSERT_EQ(b_->pause(B), LaneStatus::ok);
  b_->pause_all();
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s %b", key("glimit").c_str(), B.str().data(), B.str().size())), "3");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s %b", key("gweight").c_str(), B.str().data(), B.str().size())), "2");
  EXPECT_EQ(raw_->num(raw_->cmd("SISMEMBER %s %b", key("paused").c_str(), B.str().data(), B.str().size())), 1);
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s paused", key("meta").c_str())), "1");

  // Every key of the queue carries its hash tag.
  Raw all = raw_->cmd("KEYS %s", "*");
  for (std::size_t i = 0; i < all->elements; ++i) {
    std::string k(all->element[i]->str, all->element[i]->len);
    if (k.find(queue_) != std::string::npos) {
      EXPECT_EQ(k.rfind("emq:{" + queue_ + "}:", 0), 0U) << k;
    }
  }
}

TEST_F(ValkeyTest, ServesJobsWrittenByEchoMQ) {
  // What EchoMQ's enqueue script writes, by hand: a row, a lane entry at
  // score 0, the group on the ring.
  const BrandedId id = b_->mint();
  const std::string job = key("job:" + std::string(id.str()));
  raw_->cmd("HSET %s state pending attempts 0 payload %s group %b", job.c_str(), "from-echomq", A.str().data(),
            A.str().size());
  raw_->cmd("ZADD %s 0 %b", key("g:" + std::string(A.str()) + ":pending").c_str(), id.str().data(), id.str().size());
  raw_->cmd("RPUSH %s %b", key("ring").c_str(), A.str().data(), A.str().size());
  Lease l;
  ASSERT_TRUE(b_->claim(l, 30'000));
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.group, A);
  EXPECT_EQ(l.attempt, 1U);
  EXPECT_EQ(l.payload, "from-echomq");
  EXPECT_EQ(l.waited_us, 0U);  // EchoMQ keeps no ready time
  const Snapshot s = b_->snapshot();
  ASSERT_EQ(s.lanes.size(), 1U);  // found through gactive, though EchoMQ never registered it
  EXPECT_EQ(s.lanes[0].group, A);
  EXPECT_EQ(s.lanes[0].served, 1U);
  EXPECT_EQ(b_->complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", job.c_str())), 0);
  EXPECT_TRUE(b_->snapshot().lanes.empty());  // idle and without settings: forgotten
}

TEST_F(ValkeyTest, ScriptsAreReloadedAfterAFlush) {
  ASSERT_EQ(b_->enqueue(A, b_->mint(), "x"), EnqueueStatus::enqueued);
  Raw r = raw_->cmd("SCRIPT FLUSH");
  ASSERT_TRUE(r);
  ASSERT_EQ(b_->enqueue(A, b_->mint(), "y"), EnqueueStatus::enqueued);  // NOSCRIPT, load, retry
  EXPECT_EQ(b_->depth(A), 2U);
}

TEST_F(ValkeyTest, JobKindAndPayloadLimitAreRecordedPerQueue) {
  wipe();
  ValkeyOptions ord;
  ord.job_kind = "ORD";
  ord.max_payload = 64;
  auto first = ValkeyBackend::open(url_, ord);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ((*first)->job_kind(), "ORD");
  auto later = ValkeyBackend::open(url_);  // defaults: take what the queue recorded
  ASSERT_TRUE(later.ok()) << later.error().message;
  EXPECT_EQ((*later)->job_kind(), "ORD");
  EXPECT_EQ((*later)->max_payload(), 64U);
  EXPECT_EQ((*later)->mint().kind(), "ORD");
  EXPECT_EQ((*later)->enqueue(A, BrandedId::make("JOB", 5), "x"), EnqueueStatus::kind_mismatch);
  EXPECT_EQ((*later)->enqueue(A, (*later)->mint(), std::string(65, 'x')), EnqueueStatus::payload_too_large);
  ValkeyOptions job;
  job.job_kind = "JOB";
  auto clash = ValkeyBackend::open(url_, job);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.error().code, Errc::invalid_argument);
  EXPECT_NE(clash.error().message.find("namespace ORD, not JOB"), std::string::npos) << clash.error().message;
}

TEST_F(ValkeyTest, LeaseDeadlineIsOnTheQueueClock) {
  ASSERT_EQ(b_->enqueue(A, b_->mint(), "x"), EnqueueStatus::enqueued);
  b_->advance_clock(10'000);
  const std::uint64_t before = b_->now_ms();
  Lease l;
  ASSERT_TRUE(b_->claim(l, 5000));
  const std::uint64_t after = b_->now_ms();
  EXPECT_GE(l.deadline_ms, before + 5000);
  EXPECT_LE(l.deadline_ms, after + 5000);
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s clock_offset_ms", key("meta").c_str())), "10000");
}

// ---------------------------------------------------------------- the server goes away

TEST(ValkeyReconnect, ServerGoneThenBack) {
  std::string error;
  auto server = RedisServer::start(FAIRLANE_REDIS_SERVER, error);
  if (!server) GTEST_SKIP() << "needs a private server: " << error;
  const std::string url = "valkey://127.0.0.1:" + std::to_string(server->port()) + "/reconnect";
  ValkeyOptions o;
  o.reconnect_attempts = 2;
  o.reconnect_backoff = std::chrono::milliseconds(1);
  auto b = ValkeyBackend::open(url, o);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ((*b)->enqueue(A, (*b)->mint(), "x"), EnqueueStatus::enqueued);

  server->stop();
  try {
    (void)(*b)->depth(A);
    FAIL() << "no BackendError with the server gone";
  } catch (const BackendError& e) {
    EXPECT_EQ(std::string(e.what()),
              "valkey 127.0.0.1:" + std::to_string(server->port()) + " unreachable: Connection refused");
  }
  Lease l;
  EXPECT_THROW((*b)->claim(l, 1000), BackendError);

  ASSERT_TRUE(server->restart(error)) << error;  // same port, empty (no persistence), no scripts loaded
  EXPECT_EQ((*b)->depth(A), 0U);                 // reconnected
  ASSERT_EQ((*b)->enqueue(A, (*b)->mint(), "y"), EnqueueStatus::enqueued);  // scripts reloaded
  ASSERT_TRUE((*b)->claim(l, 1000));
  EXPECT_EQ(l.payload, "y");
}

}  // namespace
}  // namespace fairlane
