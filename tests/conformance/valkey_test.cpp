// What only the Valkey backend has: URLs, the EchoMQ keyspace on the wire,
// interop with data written by EchoMQ's own scripts, script reloading, the
// recorded job kind, and errors and reconnects when the server goes away.
#include <hiredis/hiredis.h>

#include <memory>

#include "backend_fixture.hpp"
#include "valkey/connection.hpp"

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
    if (!t.available) FAIRLANE_SKIP_OR_FAIL("no Valkey server for these cases: " + t.skip_reason);
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

// ---------------------------------------------------------------- routing

// The Cluster hash slot, as the Cluster specification defines it: CRC16
// (XMODEM) of the key, or of the bytes between its first '{' and the next
// '}' when there are any, modulo 16384. 0x31C3 is the specification's check
// value of CRC16/XMODEM over "123456789"; the other figures are Python's
// binascii.crc_hqx(key, 0) & 16383.
TEST(ValkeyRoute, KeySlotIsTheClusterHashSlot) {
  using valkey::key_slot;
  EXPECT_EQ(key_slot("123456789"), 0x31C3);
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot(""), 0);
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{user1000}.followers"), key_slot("user1000"));
  EXPECT_EQ(key_slot("emq:{orders}:jobs"), key_slot("orders"));
  EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));  // an empty tag: the whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));  // up to the first '}' after the first '{'
  EXPECT_EQ(key_slot("user1000"), 3443);
  EXPECT_EQ(key_slot("\xff\x80\x7f"), 7043);  // bytes above 0x7F
}

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

// Something that accepts connections and never answers: a listening socket
// nobody accepts on (the kernel completes the handshake), as a port of
// another kind of service, or a server that is SIGSTOPped, looks to a
// client. Open fails within its timeouts and says the server did not
// answer; it said "unreachable: Resource temporarily unavailable" (the
// EAGAIN of the timed-out read), which sent people looking at the network.
TEST(ValkeyOpen, AServerThatNeverAnswersIsNamedAsSuch) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  ValkeyOptions o;
  o.command_timeout = std::chrono::milliseconds(100);
  o.reconnect_attempts = 1;
  auto b = open_valkey("valkey://127.0.0.1:" + port + "/q", o);
  ::close(fd);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message, "valkey 127.0.0.1:" + port + " unreachable: no reply within 100 ms");
}

// A call on a server that stops answering (SIGSTOP) throws, naming the wait.
TEST(ValkeyReconnect, AStoppedServerIsACallThatTimesOut) {
  std::string error;
  auto server = RedisServer::start(FAIRLANE_REDIS_SERVER, error);
  if (!server) FAIRLANE_SKIP_OR_FAIL("needs a private server: " + error);
  ValkeyOptions o;
  o.command_timeout = std::chrono::milliseconds(100);
  o.reconnect_attempts = 1;
  auto b = ValkeyBackend::open("valkey://127.0.0.1:" + std::to_string(server->port()) + "/stopped", o);
  ASSERT_TRUE(b.ok()) << b.error().message;
  server->pause();
  std::string what;
  try {
    (void)(*b)->depth(A);
  } catch (const BackendError& e) {
    what = e.what();
  }
  Lease l;
  std::string waited;
  try {
    (void)(*b)->claim_wait(l, 1000, std::chrono::milliseconds(50));
  } catch (const BackendError& e) {
    waited = e.what();
  }
  server->resume();
  EXPECT_EQ(what, "valkey 127.0.0.1:" + std::to_string(server->port()) + " unreachable: no reply within 100 ms");
  EXPECT_NE(waited.find("unreachable: no reply within"), std::string::npos) << waited;
  EXPECT_EQ((*b)->depth(A), 0U) << "answers again once resumed";
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


TEST_F(ValkeyTest, OpeningWithoutCreateFindsOnlyAQueueThatExistsAndWritesNothing) {
  wipe();
  ValkeyOptions look;
  look.create = false;
  look.max_stalled = 3;  // a setting asked for must not make the queue either
  auto none = ValkeyBackend::open(url_, look);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::not_found);
  EXPECT_NE(none.error().message.find("does not exist"), std::string::npos) << none.error().message;
  Raw keys = raw_->cmd("KEYS %s", ("emq:{" + queue_ + "}:*").c_str());
  ASSERT_TRUE(keys);
  EXPECT_EQ(keys->elements, 0U) << "an open without create wrote a key";

  // A queue an EchoMQ client made (a lane and its ring, no meta): it exists,
  // and is opened with the defaults, which are not recorded.
  ASSERT_TRUE(raw_->cmd("ZADD %s 0 %s", key("g:" + std::string(A.str()) + ":pending").c_str(), "JOB00000000001"));
  ASSERT_TRUE(raw_->cmd("RPUSH %s %s", key("ring").c_str(), std::string(A.str()).c_str()));
  look.max_stalled.reset();
  auto echo = ValkeyBackend::open(url_, look);
  ASSERT_TRUE(echo.ok()) << echo.error().message;
  EXPECT_EQ((*echo)->job_kind(), "JOB");
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", key("meta").c_str())), 0) << "the defaults were recorded";

  // Made by an open that may create: found, with what it recorded.
  wipe();
  ValkeyOptions ord;
  ord.job_kind = "ORD";
  ASSERT_TRUE(ValkeyBackend::open(url_, ord).ok());
  auto found = ValkeyBackend::open(url_, look);
  ASSERT_TRUE(found.ok()) << found.error().message;
  EXPECT_EQ((*found)->job_kind(), "ORD");
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
  if (!server) FAIRLANE_SKIP_OR_FAIL("needs a private server: " + error);
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

namespace fairlane {
namespace {

// ---------------------------------------------------------------- EchoMQ on the same keyspace
//
// EchoMQ's transitions restated in our own words (ECHOMQ.md), as small Lua
// scripts a test runs beside the backend: what EchoMQ itself would write.

// Flat enqueue: a row without a group, the id in `pending` at score 0.
constexpr const char* kEmqEnqueue =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end "
    "redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2]) "
    "redis.call('ZADD', KEYS[2], 0, ARGV[1]) return 1";
// Flat claim: lowest id of `pending`, attempts + 1, into `active` by deadline.
constexpr const char* kEmqClaim =
    "local p = redis.call('ZPOPMIN', KEYS[1]) if #p == 0 then return {} end "
    "local jk = ARGV[1] .. p[1] local att = redis.call('HINCRBY', jk, 'attempts', 1) "
    "redis.call('HSET', jk, 'state', 'active') local t = redis.call('TIME') "
    "redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), p[1]) "
    "return {p[1], att}";
// Complete fenced by attempts (EchoMQ does not look at the state).
constexpr const char* kEmqComplete =
    "local att = redis.call('HGET', KEYS[2], 'attempts') if not att then return 0 end "
    "if att ~= ARGV[2] then return -1 end redis.call('ZREM', KEYS[1], ARGV[1]) "
    "local g = redis.call('HGET', KEYS[2], 'group') "
    "if g then local act = redis.call('HINCRBY', ARGV[3] .. 'gactive', g, -1) "
    "if act <= 0 then redis.call('HDEL', ARGV[3] .. 'gactive', g) end end "
    "redis.call('DEL', KEYS[2]) redis.call('HINCRBY', ARGV[3] .. 'metrics:completed', 'count', 1) return 1";
// Grouped claim: rotate the ring, pop the lane, attempts + 1, gactive + 1.
constexpr const char* kEmqGroupClaim =
    "local g = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT') if not g then return {} end "
    "local lane = ARGV[1] .. 'g:' .. g .. ':pending' local p = redis.call('ZPOPMIN', lane) "
    "if #p == 0 then redis.call('LREM', KEYS[1], 0, g) return {} end "
    "local jk = ARGV[1] .. 'job:' .. p[1] local att = redis.call('HINCRBY', jk, 'attempts', 1) "
    "redis.call('HSET', jk, 'state', 'active') local t = redis.call('TIME') "
    "redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), p[1]) "
    "redis.call('HINCRBY', ARGV[1] .. 'gactive', g, 1) "
    "if redis.call('ZCARD', lane) == 0 then redis.call('LREM', KEYS[1], 0, g) end return {p[1], att, g}";
// Flat schedule: state scheduled, into `schedule` at now + delay.
constexpr const char* kEmqSchedule =
    "redis.call('HSET', KEYS[1], 'state', 'scheduled', 'attempts', '0', 'payload', ARGV[2]) "
    "local t = redis.call('TIME') "
    "redis.call('ZADD', KEYS[2], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[3]), ARGV[1]) return 1";

class EchoMQInterop : public ValkeyTest {
 protected:
  std::string jk(const BrandedId& id) const { return key("job:" + std::string(id.str())); }
  long long emq_enqueue(const BrandedId& id, const std::string& payload) {
    return raw_->num(raw_->cmd("EVAL %s 2 %s %s %b %s", kEmqEnqueue, jk(id).c_str(), key("pending").c_str(),
                               id.str().data(), id.str().size(), payload.c_str()));
  }
  // {id, attempts} of an EchoMQ flat claim.
  std::pair<std::string, long long> emq_claim(long long lease_ms) {
    Raw r = raw_->cmd("EVAL %s 2 %s %s %s %lld", kEmqClaim, key("pending").c_str(), key("active").c_str(),
                      key("job:").c_str(), lease_ms);
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return {"", -1};
    return {std::string(r->element[0]->str, r->element[0]->len), r->element[1]->integer};
  }
  long long emq_complete(const BrandedId& id, long long attempts) {
    return raw_->num(raw_->cmd("EVAL %s 2 %s %s %b %lld %s", kEmqComplete, key("active").c_str(), jk(id).c_str(),
                               id.str().data(), id.str().size(), attempts, key("").c_str()));
  }
  std::vector<std::string> zrange(const std::string& k) {
    std::vector<std::string> out;
    Raw r = raw_->cmd("ZRANGE %s 0 -1", key(k).c_str());
    for (std::size_t i = 0; r && i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }
};

TEST_F(EchoMQInterop, AFlatLeaseThatExpiresGoesBackToPendingNotNowhere) {
  const BrandedId id = b_->mint();
  ASSERT_EQ(emq_enqueue(id, "flat"), 1);
  auto [got, att] = emq_claim(100);
  ASSERT_EQ(got, std::string(id.str()));
  ASSERT_EQ(att, 1);
  b_->advance_clock(1000);
  Lease l;
  EXPECT_FALSE(b_->claim(l, 1000));  // fairlane's claim never serves a flat job, but its reap returns it
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", jk(id).c_str())), "pending");
  EXPECT_EQ(zrange("pending"), std::vector<std::string>{std::string(id.str())});
  EXPECT_TRUE(zrange("active").empty());
  // EchoMQ claims it again (attempts 2) and fairlane completes that lease
  // with EchoMQ's token, its attempts.
  auto again = emq_claim(60'000);
  ASSERT_EQ(again.first, std::string(id.str()));
  ASSERT_EQ(again.second, 2);
  EXPECT_EQ(b_->complete(id, Token(1)), AckStatus::stale);
  EXPECT_EQ(b_->complete(id, Token(2)), AckStatus::ok);
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", jk(id).c_str())), 0);
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s count", key("metrics:completed").c_str())), "1");
}

TEST_F(EchoMQInterop, ADueFlatScheduledJobIsPromotedToPending) {
  const BrandedId id = b_->mint();
  raw_->cmd("EVAL %s 2 %s %s %b %s %d", kEmqSchedule, jk(id).c_str(), key("schedule").c_str(), id.str().data(),
            id.str().size(), "later", 500);
  b_->advance_clock(1000);
  EXPECT_EQ(b_->tick(), 1U);
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", jk(id).c_str())), "pending");
  EXPECT_EQ(zrange("pending"), std::vector<std::string>{std::string(id.str())});
  EXPECT_TRUE(zrange("schedule").empty());
  auto info = b_->job(id, true);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_FALSE(info->group.valid());  // a flat job rides no lane
  EXPECT_EQ(info->payload, "later");
}

TEST_F(EchoMQInterop, DeadIsScoredZeroAndBrowsedInIdOrderByBoth) {
  std::vector<BrandedId> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(b_->mint());
    ASSERT_EQ(b_->enqueue(A, ids.back(), "x"), EnqueueStatus::enqueued);
  }
  std::vector<Lease> held(3);
  ASSERT_EQ(b_->claim_batch(held, 60'000), 3U);
  for (int i = 2; i >= 0; --i) ASSERT_EQ(b_->fail(held[i].id, held[i].token, FailOptions{0, 1, "boom"}), FailStatus::dead);
  for (const auto& id : ids)
    EXPECT_EQ(raw_->str(raw_->cmd("ZSCORE %s %b", key("dead").c_str(), id.str().data(), id.str().size())), "0");
  // EchoMQ's newest-first browse: REV by lex.
  Raw rev = raw_->cmd("ZRANGE %s + - BYLEX REV", key("dead").c_str());
  ASSERT_TRUE(rev && rev->elements == 3);
  EXPECT_EQ(std::string(rev->element[0]->str, rev->element[0]->len), std::string(ids[2].str()));
  EXPECT_EQ(std::string(rev->element[2]->str, rev->element[2]->len), std::string(ids[0].str()));
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s count", key("metrics:failed").c_str())), "3");
  // A dead letter EchoMQ wrote is listed by fairlane in the same order.
  const BrandedId theirs = BrandedId::make("JOB", ids[2].snowflake() + 1);  // the newest
  raw_->cmd("HSET %s state dead attempts 1 payload y group %b last_error theirs", jk(theirs).c_str(), A.str().data(),
            A.str().size());
  raw_->cmd("ZADD %s 0 %b", key("dead").c_str(), theirs.str().data(), theirs.str().size());
  JobFilter dead;
  dead.state = JobState::dead;
  auto d = b_->jobs(dead);
  ASSERT_EQ(d.size(), 4U);
  EXPECT_EQ(d[0].id, ids[0]);
  EXPECT_EQ(d[3].id, theirs);
  EXPECT_EQ(d[3].last_error, "theirs");
}

TEST_F(EchoMQInterop, DrainDeletesTheJobsLogsToo) {
  const BrandedId id = b_->mint();
  ASSERT_EQ(b_->enqueue(A, id, "x"), EnqueueStatus::enqueued);
  raw_->cmd("RPUSH %s line1 line2", (jk(id) + ":logs").c_str());
  EXPECT_EQ(b_->drain(A), 1U);
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", jk(id).c_str())), 0);
  EXPECT_EQ(raw_->num(raw_->cmd("EXISTS %s", (jk(id) + ":logs").c_str())), 0);
}

TEST_F(EchoMQInterop, TheStalledSweepCountsAndDeadLettersAtMaxStalled) {
  ValkeyOptions o;
  o.max_stalled = 2;
  auto sw = ValkeyBackend::open(url_, o);
  ASSERT_TRUE(sw.ok()) << sw.error().message;
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s max_stalled", key("meta").c_str())), "2");
  const BrandedId id = b_->mint();
  ASSERT_EQ(b_->enqueue(A, id, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(b_->claim(l, 100));
  b_->advance_clock(200);
  EXPECT_EQ(b_->tick(), 1U);  // stalled once: back in its lane
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s stalled", jk(id).c_str())), "1");
  EXPECT_EQ(b_->depth(A), 1U);
  ASSERT_TRUE(b_->claim(l, 100));
  b_->advance_clock(200);
  b_->tick();
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", jk(id).c_str())), "dead");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s last_error", jk(id).c_str())), "stalled");
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s count", key("metrics:failed").c_str())), "1");
  EXPECT_EQ(raw_->num(raw_->cmd("HEXISTS %s %b", key("gactive").c_str(), A.str().data(), A.str().size())), 0);
  // Off again: an expired lease goes back without counting.
  ValkeyOptions off;
  off.max_stalled = 0;
  ASSERT_TRUE(ValkeyBackend::open(url_, off).ok());
  EXPECT_EQ(raw_->num(raw_->cmd("HEXISTS %s max_stalled", key("meta").c_str())), 0);
}

TEST_F(EchoMQInterop, EachSidesLeaseIsAcknowledgedThroughTheOther) {
  // A fairlane lease completed by EchoMQ's script with the row's attempts.
  const BrandedId x = b_->mint();
  ASSERT_EQ(b_->enqueue(A, x, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(b_->claim(l, 60'000));
  const long long att = std::stoll(raw_->str(raw_->cmd("HGET %s attempts", jk(x).c_str())));
  EXPECT_EQ(emq_complete(x, att), 1);
  EXPECT_EQ(b_->complete(x, l.token), AckStatus::gone);
  EXPECT_EQ(raw_->num(raw_->cmd("HEXISTS %s %b", key("gactive").c_str(), A.str().data(), A.str().size())), 0);

  // An EchoMQ grouped lease completed through fairlane with its attempts.
  const BrandedId y = b_->mint();
  ASSERT_EQ(b_->enqueue(A, y, "y"), EnqueueStatus::enqueued);
  Raw r = raw_->cmd("EVAL %s 2 %s %s %s %d", kEmqGroupClaim, key("ring").c_str(), key("active").c_str(),
                    key("").c_str(), 60'000);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  const long long y_att = r->element[1]->integer;
  EXPECT_EQ(b_->extend(y, Token(std::uint64_t(y_att)), 5000), AckStatus::ok);
  EXPECT_EQ(b_->complete(y, Token(std::uint64_t(y_att + 1))), AckStatus::stale);
  EXPECT_EQ(b_->complete(y, Token(std::uint64_t(y_att))), AckStatus::ok);

  // A fairlane token is dead once EchoMQ claimed the job since (its reap,
  // then its claim): attempts moved on under it.
  const BrandedId z = b_->mint();
  ASSERT_EQ(b_->enqueue(A, z, "z"), EnqueueStatus::enqueued);
  ASSERT_TRUE(b_->claim(l, 100));
  b_->advance_clock(200);
  EXPECT_EQ(b_->tick(), 1U);
  r = raw_->cmd("EVAL %s 2 %s %s %s %d", kEmqGroupClaim, key("ring").c_str(), key("active").c_str(), key("").c_str(),
                60'000);
  ASSERT_TRUE(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  EXPECT_EQ(b_->complete(z, l.token), AckStatus::stale);  // the row still holds fl_token, minted at older attempts
  EXPECT_EQ(b_->complete(z, Token(std::uint64_t(r->element[1]->integer))), AckStatus::ok);
}

TEST_F(EchoMQInterop, AReleaseLetsNoEarlierAttemptsMatchAgain) {
  // EchoMQ claims (attempts 1) and its lease expires; fairlane claims
  // (attempts 2) and releases. EchoMQ's complete does not look at the state:
  // with attempts back at 1 the first holder would complete a pending job.
  const BrandedId x = b_->mint();
  ASSERT_EQ(b_->enqueue(A, x, "x"), EnqueueStatus::enqueued);
  Raw r = raw_->cmd("EVAL %s 2 %s %s %s %d", kEmqGroupClaim, key("ring").c_str(), key("active").c_str(),
                    key("").c_str(), 100);
  ASSERT_TRUE(r && r->elements == 3);
  b_->advance_clock(200);
  Lease l;
  ASSERT_TRUE(b_->claim(l, 60'000));
  ASSERT_EQ(l.id, x);
  ASSERT_EQ(l.attempt, 2U);
  const long long at_claim = std::stoll(raw_->str(raw_->cmd("HGET %s attempts", jk(x).c_str())));
  ASSERT_EQ(b_->release(x, l.token), AckStatus::ok);
  for (long long a = 0; a <= at_claim; ++a) EXPECT_EQ(emq_complete(x, a), -1) << "attempts " << a << " matched again";
  EXPECT_EQ(raw_->str(raw_->cmd("HGET %s state", jk(x).c_str())), "pending");
  ASSERT_TRUE(b_->claim(l, 60'000));
  EXPECT_EQ(l.attempt, 2U);  // the release did not count
}

// ---------------------------------------------------------------- idle groups

TEST_F(ValkeyTest, IdleGroupsAreForgottenAndSettingsStay) {
  ASSERT_EQ(b_->set_limit(B, 1), LaneStatus::ok);  // a setting on an idle group
  for (int i = 0; i < 200; ++i) {
    const BrandedId g = BrandedId::make("TEN", std::uint64_t(1000 + i));
    ASSERT_EQ(b_->enqueue(g, b_->mint(), "x"), EnqueueStatus::enqueued);
    Lease l;
    ASSERT_TRUE(b_->claim(l, 60'000));
    ASSERT_EQ(b_->complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_EQ(raw_->num(raw_->cmd("ZCARD %s", key("groups").c_str())), 1);  // B: it holds a setting
  EXPECT_EQ(raw_->num(raw_->cmd("HLEN %s", key("served").c_str())), 0);
  EXPECT_EQ(raw_->num(raw_->cmd("HLEN %s", key("gjobs").c_str())), 0);
  const Snapshot s = b_->snapshot();
  ASSERT_EQ(s.lanes.size(), 1U);
  EXPECT_EQ(s.lanes[0].group, B);
  EXPECT_EQ(s.lanes[0].limit, 1U);
  // A scheduled or dead job keeps its group known; clearing the last setting forgets it.
  ASSERT_EQ(b_->enqueue(A, b_->mint(), "later", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  EXPECT_EQ(raw_->num(raw_->cmd("ZSCORE %s %b", key("groups").c_str(), A.str().data(), A.str().size())), -1);
  EXPECT_NE(raw_->str(raw_->cmd("ZSCORE %s %b", key("groups").c_str(), A.str().data(), A.str().size())), "<nil>");
  ASSERT_EQ(b_->clear_limit(B), LaneStatus::ok);
  EXPECT_EQ(raw_->str(raw_->cmd("ZSCORE %s %b", key("groups").c_str(), B.str().data(), B.str().size())), "<nil>");
}

TEST_F(ValkeyTest, DestroyRemovesEveryKeyOfTheQueueAndOnlyThose) {
  // A queue whose name starts with this one's, and one whose name this one's starts with.
  const std::string longer = queue_ + "x", shorter = queue_.substr(0, queue_.size() - 1);
  auto& t = valkey_target();
  auto other = ValkeyBackend::open(t.url(longer));
  auto other2 = ValkeyBackend::open(t.url(shorter));
  ASSERT_TRUE(other.ok() && other2.ok());
  ASSERT_EQ((*other)->enqueue(A, (*other)->mint(), "keep"), EnqueueStatus::enqueued);
  ASSERT_EQ((*other2)->enqueue(A, (*other2)->mint(), "keep"), EnqueueStatus::enqueued);
  ASSERT_EQ(b_->enqueue(A, b_->mint(), "go"), EnqueueStatus::enqueued);
  EXPECT_GT(b_->remove_queue(), 0U);
  Raw mine = raw_->cmd("KEYS %s", ("emq:{" + queue_ + "}:*").c_str());
  EXPECT_EQ(mine->elements, 0U);
  EXPECT_EQ((*other)->depth(A), 1U);
  EXPECT_EQ((*other2)->depth(A), 1U);
  (*other)->remove_queue();
  (*other2)->remove_queue();
}

// ---------------------------------------------------------------- AUTH

class ValkeyAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = RedisServer::start(FAIRLANE_REDIS_SERVER, error, 0, {"--requirepass", "s3cret"});
    if (!server_) FAIRLANE_SKIP_OR_FAIL(error);
    const std::string port = std::to_string(server_->port());
    redisContext* c = redisConnect("127.0.0.1", server_->port());
    ASSERT_TRUE(c && !c->err);
    freeReplyObject(redisCommand(c, "AUTH s3cret"));
    freeReplyObject(redisCommand(c, "ACL SETUSER alice on >wonder ~* &* +@all"));
    redisFree(c);
    hostport_ = "127.0.0.1:" + port;
    ::unsetenv("FAIRLANE_VALKEY_PASSWORD");
  }
  void TearDown() override { ::unsetenv("FAIRLANE_VALKEY_PASSWORD"); }
  static ValkeyOptions quick() {
    ValkeyOptions o;
    o.reconnect_attempts = 1;
    return o;
  }
  std::unique_ptr<RedisServer> server_;
  std::string hostport_;
};

TEST_F(ValkeyAuth, DefaultUserAclUserAndTheEnvironment) {
  auto a = ValkeyBackend::open("valkey://:s3cret@" + hostport_ + "/q", quick());
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ((*a)->enqueue(A, (*a)->mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_EQ((*a)->describe().find("s3cret"), std::string::npos) << (*a)->describe();
  auto alice = ValkeyBackend::open("valkey://alice:wonder@" + hostport_ + "/q", quick());
  ASSERT_TRUE(alice.ok()) << alice.error().message;
  EXPECT_EQ((*alice)->depth(A), 1U);
  EXPECT_EQ((*alice)->describe(), "valkey://alice@" + hostport_ + "/q");
  ::setenv("FAIRLANE_VALKEY_PASSWORD", "s3cret", 1);
  auto env = ValkeyBackend::open("valkey://" + hostport_ + "/q", quick());
  ASSERT_TRUE(env.ok()) << env.error().message;
  EXPECT_EQ((*env)->depth(A), 1U);
  auto url_wins = ValkeyBackend::open("valkey://alice:wonder@" + hostport_ + "/q", quick());
  EXPECT_TRUE(url_wins.ok());  // alice with the env's password would be refused
  ::setenv("FAIRLANE_VALKEY_PASSWORD", "wrong", 1);
  EXPECT_TRUE(ValkeyBackend::open("valkey://:s3cret@" + hostport_ + "/q", quick()).ok());
}

TEST_F(ValkeyAuth, AWrongOrMissingPasswordIsAClearErrorWithoutThePassword) {
  auto bad = ValkeyBackend::open("valkey://:guessed-pw@" + hostport_ + "/q", quick());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::permission_denied);
  EXPECT_NE(bad.error().message.find("authentication failed"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find("guessed-pw"), std::string::npos) << bad.error().message;
  auto none = ValkeyBackend::open("valkey://" + hostport_ + "/q", quick());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, Errc::permission_denied);
  EXPECT_NE(none.error().message.find("FAIRLANE_VALKEY_PASSWORD"), std::string::npos) << none.error().message;
  auto malformed = ValkeyUrl::parse("valkey://bob:hunter2@host:0/q");
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.error().message.find("hunter2"), std::string::npos) << malformed.error().message;
  EXPECT_NE(malformed.error().message.find("bob:***@"), std::string::npos) << malformed.error().message;
  // A '/' left unescaped in the password ends the host early: the URL reads
  // as host "bob", port "s3" or "1234", and a queue name holding the rest.
  // Neither the URL shown nor the reason may quote a piece of it.
  for (const char* slashed : {"valkey://bob:s3/cret@host:1/q", "valkey://bob:1234/x@host:1/q"}) {
    auto r = ValkeyUrl::parse(slashed);
    ASSERT_FALSE(r.ok()) << slashed;
    const std::string& m = r.error().message;
    EXPECT_EQ(m.find("s3"), std::string::npos) << m;
    EXPECT_EQ(m.find("cret"), std::string::npos) << m;
    EXPECT_EQ(m.find("1234"), std::string::npos) << m;
    EXPECT_NE(m.find("%2F"), std::string::npos) << m;
  }
}

TEST(ValkeyUrl, UserPasswordAndSeedLists) {
  auto u = ValkeyUrl::parse("valkey://al%40ce:p%3Aw@10.0.0.1:7000,[::1]:7001,host/orders");
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->user, "al@ce");
  EXPECT_EQ(u->password, "p:w");
  ASSERT_EQ(u->nodes.size(), 3U);
  EXPECT_EQ(u->nodes[1].address(), "[::1]:7001");
  EXPECT_EQ(u->nodes[2].port, 6379);
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->str(), "valkey://al@ce@10.0.0.1:7000,[::1]:7001,host:6379/orders");
  EXPECT_EQ(redact_url("valkey://u:secret@h:1/q"), "valkey://u:***@h:1/q");
  EXPECT_EQ(redact_url("valkey://h:1/q"), "valkey://h:1/q");
  for (const char* bad : {"valkey://:@h/q", "valkey://@h/q", "valkey://h:1,/q", "valkey://u:%zz@h/q"})
    EXPECT_FALSE(ValkeyUrl::parse(bad).ok()) << bad;
}

}  // namespace
}  // namespace fairlane
