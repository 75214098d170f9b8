// fairlane_valkey_bench: claim+complete cycles per second of the library's
// Valkey backend (ValkeyBackend, the EchoMQ scripts over hiredis) with 1 and
// with N consumer connections, on one server and on a 3-master Valkey
// Cluster, next to the segment's with as many threads; one job per call,
// and with the batch paths (enqueue_batch, claim_batch, complete_batch of
// --batch jobs: one script each).
//
// Each run: a producer enqueues --jobs jobs over --lanes lanes (timed on its
// own: enqueue/s), then C consumer threads, each with its own backend (its
// own connection; for the segment its own attachment), claim and complete
// until the queue is empty. Rate = jobs / (first start .. last finish).
// Starts its own redis-server (and its own cluster of three) on free
// loopback ports unless --server HOST:PORT is given (then no cluster runs).
//
//   fairlane_valkey_bench [--jobs N] [--lanes L] [--consumers 1,8] [--batch 32]
//                         [--no-cluster] [--redis-server PATH] [--server HOST:PORT]
//                         [--json] [--quick]
//
// Exit 77 when no server can be had (ctest's skip code).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fairlane/backend.hpp"
#include "fairlane/queue.hpp"
#include "fairlane/valkey.hpp"
#include "redis_server.hpp"  // tests/conformance: RedisCluster
#include "require_servers.hpp"  // tests/common

#ifndef FAIRLANE_BENCH_REDIS_SERVER
#define FAIRLANE_BENCH_REDIS_SERVER "/usr/bin/redis-server"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

struct Options {
  std::uint32_t jobs = 20000;
  std::uint32_t lanes = 16;
  std::vector<int> consumers = {1, 8};
  std::uint32_t batch = 32;
  bool cluster = true;
  std::string redis_server = FAIRLANE_BENCH_REDIS_SERVER;
  std::string server;  // host:port of a running server
  bool json = false;
};

// A private redis-server: free loopback port, no persistence, dies with us.
class Server {
 public:
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  bool start(const std::string& binary, std::string& error) {
    if (::access(binary.c_str(), X_OK) != 0) {
      error = binary + " not found";
      return false;
    }
    for (int attempt = 0; attempt < 5; ++attempt) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      port_ = ntohs(a.sin_port);
      ::close(fd);
      if (launch(binary, error)) return true;
    }
    return false;
  }
  int port() const { return port_; }

 private:
  bool launch(const std::string& binary, std::string& error) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    const std::string port = std::to_string(port_);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execl(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no", "--dir", "/tmp", "--loglevel",
              "notice", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[1]);
    std::string log;
    bool ready = false;
    for (;;) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) break;
      char buf[2048];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      log.append(buf, std::size_t(n));
      if (log.find("Ready to accept connections") != std::string::npos) {
        ready = true;
        break;
      }
    }
    ::close(fds[0]);
    if (!ready) {
      error = "redis-server did not start on port " + port;
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
    return ready;
  }
  pid_t pid_ = -1;
  int port_ = 0;
};

struct Result {
  std::string backend;
  int consumers = 0;
  std::uint32_t batch = 1;
  std::uint64_t cycles = 0;
  double seconds = 0, enqueue_per_s = 0;
  double rate() const { return seconds > 0 ? double(cycles) / seconds : 0; }
};

// Fills the queue, then lets `consumers` threads (each opening its own
// backend with `open`) claim+complete until it is empty.
template <class Open>
Result run(const std::string& name, int consumers, std::uint32_t batch, const Options& o, Open open) {
  Result r;
  r.backend = name;
  r.consumers = consumers;
  r.batch = batch;
  {
    std::unique_ptr<fairlane::Backend> p = open();
    // Ids minted first (a mint is a round trip on Valkey, the same for
    // every row), so enqueue/s is the admission alone.
    std::vector<fairlane::BrandedId> ids(o.jobs);
    for (auto& id : ids) id = p->mint();
    const auto t0 = clock_type::now();
    std::vector<fairlane::EnqueueItem> items;
    std::vector<fairlane::EnqueueStatus> st(batch);
    for (std::uint32_t i = 0; i < o.jobs; ++i) {
      const auto g = fairlane::BrandedId::make("TEN", 1 + i % o.lanes);
      if (batch <= 1) {
        if (p->enqueue(g, ids[i], "payload-of-a-job") != fairlane::EnqueueStatus::enqueued) {
          std::fprintf(stderr, "fairlane_valkey_bench: enqueue refused\n");
          std::exit(2);
        }
        continue;
      }
      items.push_back({g, ids[i], "payload-of-a-job"});
      if (items.size() == batch || i + 1 == o.jobs) {
        if (p->enqueue_batch(items, st) != items.size()) {
          std::fprintf(stderr, "fairlane_valkey_bench: enqueue_batch refused some\n");
          std::exit(2);
        }
        items.clear();
      }
    }
    r.enqueue_per_s = double(o.jobs) / std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  std::vector<std::unique_ptr<fairlane::Backend>> clients;
  for (int i = 0; i < consumers; ++i) clients.push_back(open());
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<std::uint64_t> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < consumers; ++i) {
    threads.emplace_back([&, i] {
      fairlane::Backend& b = *clients[std::size_t(i)];
      fairlane::Lease l;
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0;
      if (batch <= 1) {
        while (b.claim(l, 60'000)) {
          if (b.complete(l.id, l.token) == fairlane::AckStatus::ok) ++n;
        }
      } else {
        std::vector<fairlane::Lease> leases(batch);
        std::vector<fairlane::AckStatus> acks(batch);
        for (;;) {
          const std::size_t got = b.claim_batch(leases, 60'000);
          if (got == 0) break;
          n += b.complete_batch(std::span<const fairlane::Lease>(leases.data(), got), acks);
        }
      }
      done.fetch_add(n);
    });
  }
  while (ready.load() < consumers) std::this_thread::yield();
  const auto t0 = clock_type::now();
  go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.cycles = done.load();
  if (r.cycles != o.jobs) {
    std::fprintf(stderr, "fairlane_valkey_bench: %s with %d consumers completed %llu of %u jobs\n", name.c_str(),
                 consumers, static_cast<unsigned long long>(r.cycles), o.jobs);
    std::exit(2);
  }
  return r;
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "fairlane_valkey_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--jobs") o.jobs = std::uint32_t(std::atol(next()));
    else if (a == "--lanes") o.lanes = std::uint32_t(std::atol(next()));
    else if (a == "--consumers") o.consumers = parse_list(next());
    else if (a == "--redis-server") o.redis_server = next();
    else if (a == "--server") o.server = next();
    else if (a == "--batch") o.batch = std::uint32_t(std::atol(next()));
    else if (a == "--no-cluster") o.cluster = false;
    else if (a == "--json") o.json = true;
    else if (a == "--quick") {
      o.jobs = 500;
      o.consumers = {1, 2};
      o.cluster = false;
    } else {
      std::fprintf(stderr,
                   "usage: fairlane_valkey_bench [--jobs N] [--lanes L] [--consumers 1,8] [--batch 32] "
                   "[--no-cluster] [--redis-server PATH] [--server HOST:PORT] [--json] [--quick]\n");
      return 2;
    }
  }
  if (o.jobs == 0 || o.lanes == 0 || o.consumers.empty()) {
    std::fprintf(stderr, "fairlane_valkey_bench: --jobs, --lanes and --consumers must be positive\n");
    return 2;
  }

  Server server;
  std::string address = o.server;
  if (address.empty()) {
    std::string error;
    if (!server.start(o.redis_server, error)) {
      std::fprintf(stderr, "fairlane_valkey_bench: skipped: %s\n", error.c_str());
      return fairlane::test::skip_exit_code();
    }
    address = "127.0.0.1:" + std::to_string(server.port());
  }

  std::unique_ptr<fairlane::test::RedisCluster> cluster;
  if (o.cluster && o.server.empty()) {
    std::string error;
    cluster = fairlane::test::RedisCluster::start(o.redis_server, error, 3, 0);
    if (!cluster) {
      std::fprintf(stderr, "fairlane_valkey_bench: no cluster runs: %s\n", error.c_str());
      if (fairlane::test::servers_required()) return 1;
    }
  }

  std::vector<Result> results;
  int round = 0;
  auto valkey_run = [&](const std::string& label, const std::string& base, int c, std::uint32_t batch) {
    const std::string queue = "bench" + std::to_string(::getpid()) + "_" + std::to_string(round++);
    const std::string url = base + queue;
    results.push_back(run(label, c, batch, o, [&] {
      auto b = fairlane::open_valkey(url);
      if (!b) {
        std::fprintf(stderr, "fairlane_valkey_bench: %s\n", b.error().message.c_str());
        std::exit(fairlane::test::skip_exit_code());
      }
      return std::move(b).value();
    }));
    if (auto b = fairlane::ValkeyBackend::open(url)) (*b)->remove_queue();
  };
  std::vector<std::uint32_t> batches = {1};
  if (o.batch > 1) batches.push_back(o.batch);
  for (std::uint32_t batch : batches) {
    for (int c : o.consumers) {
      if (c < 1) continue;
      valkey_run("valkey", "valkey://" + address + "/", c, batch);
      if (cluster)
        valkey_run("cluster", "valkey://127.0.0.1:" + std::to_string(cluster->port(0)) + "/", c, batch);
      const std::string seg = "fl_vbench_" + std::to_string(::getpid()) + "_" + std::to_string(round++);
      fairlane::QueueOptions qo;
      qo.jobs = o.jobs;
      qo.lanes = o.lanes + 1;
      auto created = fairlane::Queue::create(seg, qo);
      if (!created) {
        std::fprintf(stderr, "fairlane_valkey_bench: %s\n", created.error().message.c_str());
        return 2;
      }
      results.push_back(run("segment", c, batch, o, [&] {
        auto q = fairlane::Queue::open(seg);
        if (!q) {
          std::fprintf(stderr, "fairlane_valkey_bench: %s\n", q.error().message.c_str());
          std::exit(2);
        }
        return fairlane::segment_backend(std::move(q).value());
      }));
      (void)fairlane::Queue::remove(seg);
    }
  }

  if (o.json) {
    std::printf("{\"jobs\":%u,\"lanes\":%u,\"server\":\"%s\",\"results\":[", o.jobs, o.lanes, address.c_str());
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::printf("%s{\"backend\":\"%s\",\"consumers\":%d,\"batch\":%u,\"cycles\":%llu,\"seconds\":%.6f,"
                  "\"cycles_per_s\":%.1f,\"enqueue_per_s\":%.1f}",
                  i ? "," : "", r.backend.c_str(), r.consumers, r.batch, static_cast<unsigned long long>(r.cycles),
                  r.seconds, r.rate(), r.enqueue_per_s);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("claim+complete cycles/s, %u jobs over %u lanes, Valkey at %s (loopback), %u cores\n", o.jobs, o.lanes,
              address.c_str(), std::thread::hardware_concurrency());
  std::printf("cluster: 3 masters on loopback, the queue's slot on one of them (one queue lives in one slot)\n");
  std::printf("%-9s %10s %6s %16s %16s\n", "backend", "consumers", "batch", "cycles/s", "enqueue/s (1)");
  for (const Result& r : results)
    std::printf("%-9s %10d %6u %16.0f %16.0f\n", r.backend.c_str(), r.consumers, r.batch, r.rate(), r.enqueue_per_s);
  return 0;
}
