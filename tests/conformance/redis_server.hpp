// A private redis-server (or valkey-server) for the conformance tests.
//
// Started on a free loopback port with no persistence, no daemonising, and
// PR_SET_PDEATHSIG so it dies with the test process even if that is killed.
// Readiness is its own log line "Ready to accept connections", read from a
// pipe: no polling, no sleeps.
//
// valkey_target() is what the tests use: FAIRLANE_VALKEY_URL (host:port, or
// valkey://host:port) if set, else one private server per test process,
// stopped at exit; or a reason to skip when neither is possible.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifndef FAIRLANE_REDIS_SERVER
#define FAIRLANE_REDIS_SERVER ""
#endif

namespace fairlane::test {

class RedisServer {
 public:
  // Where every server keeps its files (--dir): a cluster node's config file.
  static constexpr const char* kDataDir = "/tmp";
  static bool cluster_node(const std::vector<std::string>& extra) {
    return std::find(extra.begin(), extra.end(), "--cluster-enabled") != extra.end();
  }

  // Starts a server on a free loopback port (or on `port` if nonzero).
  // Returns nullptr and says why in `error`.
  static std::unique_ptr<RedisServer> start(const std::string& binary, std::string& error, int port = 0,
                                            std::vector<std::string> extra = {}) {
    if (binary.empty() || ::access(binary.c_str(), X_OK) != 0) {
      error = "redis-server not installed" + (binary.empty() ? std::string() : " (" + binary + ")");
      return nullptr;
    }
    // A cluster node also listens on its port + 10000 (the cluster bus), so
    // its port must be at most 55535; above that redis-server writes its
    // config file, then exits. Free ports come from the ephemeral range
    // (32768-60999 by default): those above are passed over.
    const bool cluster = cluster_node(extra);
    for (int attempt = 0, tries = 0; attempt < 8 && tries < 256; ++tries) {
      const int p = port ? port : free_port();
      if (p <= 0) {
        error = "no free loopback port";
        return nullptr;
      }
      if (!port && cluster && p > 55535) continue;
      ++attempt;
      auto s = std::unique_ptr<RedisServer>(new RedisServer(binary, p, extra));
      if (s->launch(error)) return s;
      if (port) return nullptr;  // the caller wanted exactly this port
    }
    if (error.empty()) error = "no free loopback port at or below 55535 for a cluster node";
    return nullptr;
  }

  ~RedisServer() {
    stop();
    if (!conf_file_.empty()) std::remove(conf_file_.c_str());
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const noexcept { return port_; }

  // HGET key field on a connection of its own; empty if absent or refused.
  std::string hget(const std::string& key, const std::string& field) const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    std::string out;
    if (c && !c->err) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "HGET %s %s", key.c_str(), field.c_str()));
      if (r && r->type == REDIS_REPLY_STRING) out.assign(r->str, r->len);
      if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return out;
  }

  // SIGSTOP / SIGCONT: a server that holds every connection and answers
  // nothing until resumed (a stalled host, a paused container).
  void pause() const {
    if (pid_ > 0) ::kill(pid_, SIGSTOP);
  }
  void resume() const {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

  // SIGTERM and reap. Idempotent.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  // Starts it again on the same port (its data is gone: no persistence).
  bool restart(std::string& error) {
    stop();
    return launch(error);
  }

 private:
  RedisServer(std::string binary, int port, std::vector<std::string> extra)
      : binary_(std::move(binary)), port_(port), extra_(std::move(extra)) {
    for (auto& a : extra_) {
      // "{port}" in an argument: this server's port (a cluster config file
      // of its own).
      const auto at = a.find("{port}");
      if (at != std::string::npos) a.replace(at, 6, std::to_string(port_));
    }
    // A cluster node keeps its config file under --dir (/tmp): removed with
    // this server, however it ends (stopped for good, or a launch that wrote
    // the file and then failed, as on a port whose bus port is taken), not
    // by stop(), since restart() brings the same node back.
    const auto f = std::find(extra_.begin(), extra_.end(), "--cluster-config-file");
    if (f != extra_.end() && f + 1 != extra_.end()) conf_file_ = std::string(kDataDir) + "/" + *(f + 1);
    // One left by a killed run with the same pid and port would be a node
    // that knows its old cluster (and refuses SET-CONFIG-EPOCH).
    if (!conf_file_.empty()) std::remove(conf_file_.c_str());
  }

  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }

  bool launch(std::string& error) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      error = "pipe failed";
      return false;
    }
    const std::string port = std::to_string(port_);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      error = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      std::vector<std::string> args = {binary_, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                        "no", "--daemonize", "no", "--protected-mode", "no", "--dir", kDataDir,
                                        "--loglevel", "notice"};
      if (!cluster_node(extra_)) {
        args.push_back("--databases");
        args.push_back("1");
      }
      args.insert(args.end(), extra_.begin(), extra_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary_.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    // Read its log until it says it is ready, or it exits (port taken).
    std::string log;
    bool ready = false;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) <= 0) break;
      char buf[4096];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;  // it exited
      log.append(buf, std::size_t(n));
      ready = log.find("Ready to accept connections") != std::string::npos;
    }
    // Closing our end is safe: redis ignores SIGPIPE; later log lines are dropped.
    ::close(fds[0]);
    if (!ready) {
      error = "redis-server on port " + port + " did not start: " + log.substr(log.size() > 300 ? log.size() - 300 : 0);
      stop();
      return false;
    }
    return true;
  }

  std::string binary_;
  int port_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  std::string conf_file_;  // a cluster node's config file, or empty
};

// A private Valkey Cluster on loopback: `masters` masters splitting the 16384
// slots evenly, each with `replicas` replicas, every node a RedisServer in
// cluster mode with a config file of its own in /tmp (removed with the node).
// Formed with CLUSTER ADDSLOTSRANGE, MEET and REPLICATE; ready once every
// node reports cluster_state:ok, knows every other and the owner of every
// slot (a bounded liveness wait on the servers' own state, as the cluster
// forms by gossip).
class RedisCluster {
 public:
  struct Node {
    std::unique_ptr<RedisServer> server;
    std::string id;
    bool master = true;
  };

  static std::unique_ptr<RedisCluster> start(const std::string& binary, std::string& error, int masters = 3,
                                             int replicas = 0, const std::vector<std::string>& extra = {}) {
    auto c = std::unique_ptr<RedisCluster>(new RedisCluster());
    const int total = masters * (1 + replicas);
    for (int i = 0; i < total; ++i) {
      std::vector<std::string> args = {"--cluster-enabled", "yes", "--cluster-config-file",
                                       "flt-cluster-" + std::to_string(::getpid()) + "-{port}.conf",
                                       "--cluster-node-timeout", "3000", "--cluster-require-full-coverage", "no"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto s = RedisServer::start(binary, error, 0, args);
      if (!s) return nullptr;
      Node n;
      n.server = std::move(s);
      n.master = i < masters;
      c->nodes_.push_back(std::move(n));
    }
    for (auto& n : c->nodes_) {
      n.id = c->reply_str(n, {"CLUSTER", "MYID"});
      if (n.id.empty()) {
        error = "CLUSTER MYID failed on port " + std::to_string(n.server->port());
        return nullptr;
      }
    }
    // Distinct config epochs from the start, as redis-cli --cluster create
    // sets them. Left at 0, the nodes resolve the collision by gossip, one
    // epoch bump at a time, for a while after the cluster says ok; a bump
    // that lands during a manual reshard can make the slot's old owner's
    // stale claim outrank the new owner's, after which each of the two
    // answers MOVED to the other (seen once in 40 reshard runs).
    for (std::size_t i = 0; i < c->nodes_.size(); ++i) {
      std::string why;
      if (c->reply_str(c->nodes_[i], {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)}, &why) != "OK") {
        error = "CLUSTER SET-CONFIG-EPOCH failed: " + why;
        return nullptr;
      }
    }
    const int per = 16384 / masters;
    for (int m = 0; m < masters; ++m) {
      const int lo = m * per, hi = m == masters - 1 ? 16383 : (m + 1) * per - 1;
      if (c->reply_str(c->nodes_[m], {"CLUSTER", "ADDSLOTSRANGE", std::to_string(lo), std::to_string(hi)}) != "OK") {
        error = "CLUSTER ADDSLOTSRANGE failed";
        return nullptr;
      }
    }
    for (std::size_t i = 1; i < c->nodes_.size(); ++i)
      c->reply_str(c->nodes_[0], {"CLUSTER", "MEET", "127.0.0.1", std::to_string(c->nodes_[i].server->port())});
    if (!c->wait([&] { return c->all_know_all(); })) {
      error = "the cluster nodes never met";
      return nullptr;
    }
    for (int r = 0; r < masters * replicas; ++r) {
      Node& rep = c->nodes_[masters + r];
      const Node& of = c->nodes_[r % masters];
      if (c->reply_str(rep, {"CLUSTER", "REPLICATE", of.id}) != "OK") {
        error = "CLUSTER REPLICATE failed";
        return nullptr;
      }
    }
    if (!c->wait([&] { return c->converged(); })) {
      error = "the cluster never reached cluster_state:ok";
      return nullptr;
    }
    return c;
  }

  std::vector<Node>& nodes() { return nodes_; }
  int port(std::size_t i) const { return nodes_[i].server->port(); }

  // "valkey://127.0.0.1:p0,127.0.0.1:p1/queue": a seed list of two masters.
  std::string url(const std::string& queue) const {
    return "valkey://127.0.0.1:" + std::to_string(port(0)) + ",127.0.0.1:" + std::to_string(port(1)) + "/" + queue;
  }

  // One command to a node, its reply as text ("" for none or an error,
  // arrays joined by newlines).
  std::string reply_str(const Node& n, const std::vector<std::string>& words, std::string* error = nullptr) const {
    return command(n.server->port(), words, error);
  }
  static std::string command(int port, const std::vector<std::string>& words, std::string* error = nullptr) {
    redisContext* c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
      if (c) redisFree(c);
      return {};
    }
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& w : words) {
      argv.push_back(w.data());
      lens.push_back(w.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(argv.size()), argv.data(), lens.data()));
    std::string out;
    if (r) {
      if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.assign(r->str, r->len);
      else if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
      else if (r->type == REDIS_REPLY_ERROR && error) error->assign(r->str, r->len);
      else if (r->type == REDIS_REPLY_ARRAY)
        for (std::size_t i = 0; i < r->elements; ++i)
          if (r->element[i]->type == REDIS_REPLY_STRING) out += std::string(r->element[i]->str, r->element[i]->len) + "\n";
      freeReplyObject(r);
    }
    redisFree(c);
    return out;
  }

  // Index of the master serving `slot` now (CLUSTER SLOTS of node 0's view
  // is not needed: each master knows its own slots, CLUSTER COUNTKEYSINSLOT
  // aside). -1: none.
  int owner_of(int slot) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const std::string nodes = reply_str(nodes_[i], {"CLUSTER", "NODES"});
      // the line of "myself"
      std::size_t at = nodes.find("myself");
      if (at == std::string::npos) continue;
      const std::size_t bol = nodes.rfind('\n', at) == std::string::npos ? 0 : nodes.rfind('\n', at) + 1;
      const std::string line = nodes.substr(bol, nodes.find('\n', at) - bol);
      if (line.find("master") == std::string::npos) continue;
      // slot ranges are the fields after the 8th
      std::size_t field = 0, pos = 0;
      while (field < 8 && pos != std::string::npos) {
        pos = line.find(' ', pos);
        if (pos != std::string::npos) ++pos;
        ++field;
      }
      while (pos != std::string::npos && pos < line.size()) {
        const std::size_t end = line.find(' ', pos);
        const std::string r = line.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        pos = end == std::string::npos ? end : end + 1;
        if (r.empty() || r[0] == '[') continue;
        const auto dash = r.find('-');
        const int lo = std::atoi(r.c_str()), hi = dash == std::string::npos ? lo : std::atoi(r.c_str() + dash + 1);
        if (lo <= slot && slot <= hi) return int(i);
      }
    }
    return -1;
  }

  template <class F>
  static bool wait(F&& ok, std::chrono::seconds within = std::chrono::seconds(30)) {
    const auto give_up = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < give_up) {
      if (ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return ok();
  }

  bool converged() const {
    for (const auto& n : nodes_) {
      // With full coverage not required a node says ok before gossip has
      // told it every owner; it then answers CLUSTERDOWN for a slot it has
      // not heard of. Ready means every node knows the owner of every slot.
      const std::string info = reply_str(n, {"CLUSTER", "INFO"});
      if (info.find("cluster_state:ok") == std::string::npos) return false;
      if (info.find("cluster_slots_assigned:16384") == std::string::npos) return false;
      if (!n.master && reply_str(n, {"INFO", "replication"}).find("master_link_status:up") == std::string::npos)
        return false;
    }
    return all_know_all();
  }

 private:
  RedisCluster() = default;
  bool all_know_all() const {
    for (const auto& n : nodes_) {
      const std::string info = reply_str(n, {"CLUSTER", "INFO"});
      if (info.find("cluster_known_nodes:" + std::to_string(nodes_.size())) == std::string::npos) return false;
    }
    return true;
  }
  std::vector<Node> nodes_;
};

inline std::unique_ptr<RedisCluster>& shared_cluster_slot() {
  static std::unique_ptr<RedisCluster> c;
  return c;
}

// The 3-master cluster the conformance cases share (one per test process),
// or why there is none.
struct ClusterTarget {
  bool available = false;
  std::string skip_reason;
  RedisCluster* cluster = nullptr;
  std::string url(const std::string& queue) const { return cluster->url(queue); }
};

inline ClusterTarget& cluster_target() {
  static ClusterTarget t = [] {
    ClusterTarget v;
    std::string error;
    shared_cluster_slot() = RedisCluster::start(FAIRLANE_REDIS_SERVER, error, 3, 0);
    if (!shared_cluster_slot()) {
      v.skip_reason = error.empty() ? "the cluster did not start" : error;
      return v;
    }
    v.cluster = shared_cluster_slot().get();
    v.available = true;
    return v;
  }();
  return t;
}

// Where the Valkey cases run.
struct ValkeyTarget {
  bool available = false;
  std::string skip_reason;
  std::string host = "127.0.0.1";
  int port = 0;
  std::unique_ptr<RedisServer> own;

  std::string url(const std::string& queue) const {
    return "valkey://" + host + ":" + std::to_string(port) + "/" + queue;
  }
};

inline ValkeyTarget& valkey_target() {
  static ValkeyTarget t = [] {
    ValkeyTarget v;
    if (const char* env = std::getenv("FAIRLANE_VALKEY_URL"); env && *env) {
      std::string s = env;
      for (const char* scheme : {"valkey://", "redis://"})
        if (s.rfind(scheme, 0) == 0) s = s.substr(std::string(scheme).size());
      if (auto slash = s.find('/'); slash != std::string::npos) s = s.substr(0, slash);
      const auto colon = s.rfind(':');
      v.host = colon == std::string::npos ? s : s.substr(0, colon);
      v.port = colon == std::string::npos ? 6379 : std::atoi(s.c_str() + colon + 1);
      v.available = !v.host.empty() && v.port > 0;
      if (!v.available) v.skip_reason = "FAIRLANE_VALKEY_URL='" + std::string(env) + "' is not host:port";
      return v;
    }
    std::string error;
    v.own = RedisServer::start(FAIRLANE_REDIS_SERVER, error);
    if (!v.own) {
      v.skip_reason = error + "; set FAIRLANE_VALKEY_URL=host:port to use a running server";
      return v;
    }
    v.port = v.own->port();
    v.available = true;
    return v;
  }();
  return t;
}

// The hash of job `id` of queue `queue` in EchoMQ's keyspace.
inline std::string echomq_job_key(const std::string& queue, const std::string& id) {
  return "emq:{" + queue + "}:job:" + id;
}

}  // namespace fairlane::test
