// Peer: Valkey/Redis running the EchoMQ rota as Lua scripts (valkey_scripts.hpp).
//
// setup() starts Debian's redis-server on a free loopback port (no
// persistence, no daemonising; it dies with the harness through
// PR_SET_PDEATHSIG), loads the scripts and hands the port and the script
// hashes to the workers. Each producer and consumer holds one hiredis
// connection:
//   producer: EVALSHA enqueue, pipelined 16 deep (as a real producer would);
//   consumer: EVALSHA claim, then EVALSHA complete (two round trips a cycle);
//   parked consumer: BLPOP on the wake list, then claim.
// The orchestrator tries several consumer counts (connections) and keeps the
// best, because one connection leaves the server idle between round trips.
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>

#include "peer.hpp"
#include "valkey_scripts.hpp"

namespace fairlane::bench {
namespace {

constexpr const char* kPrefix = "emq:{bench}:";
constexpr const char* kJobKind = "JOB";
constexpr std::uint64_t kEpochMs = 1704067200000ULL;

// A branded id (3 letters + 11 base62 digits): the same text the library
// mints, written here so this peer does not depend on the library.
std::array<char, 14> branded(const char* kind, std::uint64_t snowflake) {
  static constexpr char kAlpha[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::array<char, 14> out{};
  std::memcpy(out.data(), kind, 3);
  for (int i = 13; i >= 3; --i) {
    out[std::size_t(i)] = kAlpha[snowflake % 62];
    snowflake /= 62;
  }
  return out;
}

std::uint64_t wall_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1000 + std::uint64_t(ts.tv_nsec) / 1'000'000;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { if (r) freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct CtxDeleter {
  void operator()(redisContext* c) const noexcept { if (c) redisFree(c); }
};
using Conn = std::unique_ptr<redisContext, CtxDeleter>;

Conn connect(int port, std::string& error) {
  timeval tv{2, 0};
  Conn c(redisConnectWithTimeout("127.0.0.1", port, tv));
  if (!c || c->err) {
    error = std::string("connect 127.0.0.1:") + std::to_string(port) + ": " + (c ? c->errstr : "out of memory");
    return nullptr;
  }
  return c;
}

Reply command(redisContext* c, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  void* r = redisvCommand(c, fmt, ap);
  va_end(ap);
  return Reply(static_cast<redisReply*>(r));
}

bool port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(std::uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

class ValkeyPeer final : public Peer {
 public:
  explicit ValkeyPeer(PeerEnv env) : env_(std::move(env)) {}
  ~ValkeyPeer() override { teardown(); }

  std::string_view name() const noexcept override { return "valkey"; }
  std::string_view what() const noexcept override {
    return "redis-server on loopback, EchoMQ rota in Lua: EVALSHA claim + EVALSHA complete";
  }
  std::string unavailable() const override {
    if (access(env_.redis_server.c_str(), X_OK) != 0) return env_.redis_server + " not found";
    return {};
  }
  std::vector<std::uint32_t> consumer_sweep() const override { return env_.valkey_consumers; }

  bool setup(const Params&, std::string& info, std::string& error) override {
    for (int attempt = 0; attempt < 8; ++attempt) {
      const int port = 16379 + int((std::uint64_t(getpid()) * 7919 + std::uint64_t(attempt) * 104729 +
                                    now_ns() / 1000) % 20000);
      if (!port_free(port)) continue;
      if (start(port, error)) {
        port_ = port;
        break;
      }
    }
    if (port_ == 0) {
      if (error.empty()) error = "no free loopback port for redis-server";
      return false;
    }
    Conn c = connect(port_, error);
    if (!c) return false;
    std::string shas[3];
    const char* scripts[3] = {valkey::kEnqueue, valkey::kClaim, valkey::kComplete};
    for (int i = 0; i < 3; ++i) {
      Reply r = command(c.get(), "SCRIPT LOAD %s", scripts[i]);
      if (!r || r->type != REDIS_REPLY_STRING) {
        error = std::string("SCRIPT LOAD: ") + (r && r->str ? r->str : c->errstr);
        return false;
      }
      shas[i] = std::string(r->str, r->len);
    }
    info = "port=" + std::to_string(port_) + " enqueue=" + shas[0] + " claim=" + shas[1] + " complete=" + shas[2];
    return true;
  }

  bool attach(const Params&, std::string_view, std::string&) override { return true; }

  void producer_loop(WorkerCtx& ctx) override {
    std::string error;
    Conn c = connect(std::stoi(ctx.info_value("port")), error);
    if (!c) return ctx.fail(error);
    const std::string sha = ctx.info_value("enqueue");
    const std::uint64_t node = ctx.index() & 0x3FF;
    std::uint64_t last = 0;
    int pending = 0;
    bool ok = true;
    auto drain = [&] {
      for (; pending > 0; --pending) {
        void* r = nullptr;
        if (redisGetReply(c.get(), &r) != REDIS_OK) { ok = false; ctx.fail(std::string("enqueue: ") + c->errstr); return; }
        Reply rep(static_cast<redisReply*>(r));
        if (rep->type != REDIS_REPLY_INTEGER || rep->integer != 1) {
          ok = false;
          ctx.fail(std::string("enqueue refused: ") + (rep->type == REDIS_REPLY_ERROR ? rep->str : "duplicate/kind"));
          return;
        }
      }
    };
    ctx.produce([&](std::uint32_t lane, const char* data, std::uint32_t len) {
      if (!ok) return false;
      // A local mint: the library's snowflake layout, node = producer index.
      const std::uint64_t sf = std::max(((wall_ms() - kEpochMs) << 22) | (node << 12), last + 1);
      last = sf;
      auto id = branded(kJobKind, sf);
      auto group = branded("TEN", lane + 1);
      redisAppendCommand(c.get(), "EVALSHA %s 0 %s %b %b %b %s", sha.c_str(), kPrefix, group.data(),
                         group.size(), id.data(), id.size(), data, std::size_t(len), kJobKind);
      ++pending;
      // Pipelined 16 deep under load; one at a time for the wake-up rounds.
      if (pending >= 16 || ctx.phase() >= kWake) drain();
      return true;
    }, drain);
  }

  void consumer_loop(WorkerCtx& ctx) override {
    std::string error;
    Conn c = connect(std::stoi(ctx.info_value("port")), error);
    if (!c) return ctx.fail(error);
    const std::string claim_sha = ctx.info_value("claim");
    const std::string complete_sha = ctx.info_value("complete");
    const std::string lease = std::to_string(ctx.params().lease_ms);
    const std::string wake = std::string(kPrefix) + "wake";
    Reply held;

    auto claim = [&]() -> const char* {
      Reply r = command(c.get(), "EVALSHA %s 0 %s %s", claim_sha.c_str(), kPrefix, lease.c_str());
      if (!r) { ctx.fail(std::string("claim: ") + c->errstr); return nullptr; }
      if (r->type == REDIS_REPLY_NIL) return nullptr;
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 4) {
        ctx.fail(std::string("claim: unexpected reply ") + (r->type == REDIS_REPLY_ERROR ? r->str : ""));
        return nullptr;
      }
      held = std::move(r);
      return held->element[1]->str;
    };
    auto complete = [&] {
      redisReply* id = held->element[0];
      const std::string attempt = std::to_string(held->element[2]->integer);
      Reply r = command(c.get(), "EVALSHA %s 0 %s %b %s", complete_sha.c_str(), kPrefix, id->str,
                        std::size_t(id->len), attempt.c_str());
      if (!r || r->type != REDIS_REPLY_STRING || std::string_view(r->str, r->len) != "ok")
        ctx.fail("complete: " + (r ? std::string(r->str ? r->str : "?") : std::string(c->errstr)));
      held.reset();
    };
    auto wait = [&](int timeout_ms) -> const char* {
      // BLPOP on the wake list, then claim. Stale wake tokens (from the load
      // phases) just cost a loop turn.
      const std::uint64_t until = now_ns() + std::uint64_t(timeout_ms) * 1'000'000;
      for (;;) {
        if (const char* p = claim()) return p;
        const std::uint64_t now = now_ns();
        if (now >= until || ctx.failed()) return nullptr;
        const double secs = double(until - now) / 1e9;
        Reply r = command(c.get(), "BLPOP %s %.3f", wake.c_str(), secs < 0.001 ? 0.001 : secs);
        if (!r) { ctx.fail(std::string("BLPOP: ") + c->errstr); return nullptr; }
      }
    };
    ctx.consume(claim, complete, wait);
  }

  void teardown() override {
    if (pid_ > 0) stop_process(pid_, 3'000'000'000ULL);
    pid_ = -1;
    port_ = 0;
  }

  std::vector<pid_t> server_pids() const override {
    if (pid_ > 0) return {pid_};
    return {};
  }

 private:
  bool start(int port, std::string& error) {
    std::vector<std::string> argv{env_.redis_server, "--port", std::to_string(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--daemonize", "no",
                                  "--protected-mode", "no", "--loglevel", "warning", "--dir", "/tmp",
                                  "--databases", "1"};
    pid_ = spawn(argv, /*quiet=*/true, error);
    if (pid_ < 0) return false;
    const std::uint64_t deadline = now_ns() + 5'000'000'000ULL;
    while (now_ns() < deadline) {
      int st;
      if (wait_for(pid_, 20'000'000, st)) {  // it exited: the port was taken after all
        error = "redis-server on port " + std::to_string(port) + ": " + describe_status(st);
        pid_ = -1;
        return false;
      }
      std::string e;
      timeval tv{0, 200000};
      Conn c(redisConnectWithTimeout("127.0.0.1", port, tv));
      if (c && !c->err) {
        Reply r = command(c.get(), "PING");
        if (r && r->type == REDIS_REPLY_STATUS) return true;
      }
    }
    error = "redis-server did not answer PING on port " + std::to_string(port);
    stop_process(pid_, 1'000'000'000ULL);
    pid_ = -1;
    return false;
  }

  PeerEnv env_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace

std::unique_ptr<Peer> make_valkey_peer(const PeerEnv& env) { return std::make_unique<ValkeyPeer>(env); }

}  // namespace fairlane::bench
