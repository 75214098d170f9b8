// The Valkey backend on a Cluster while the Cluster changes under it: a
// live reshard of the queue's slot (keys moved in batches, as `redis-cli
// --cluster reshard` moves them) and a manual failover (CLUSTER FAILOVER on
// a replica), each while a producer and consumers run. Nothing may be lost,
// and nothing delivered twice beyond at-least-once (the leases here never
// expire, so every job must be completed exactly once).
//
// Each test starts a private cluster of its own on loopback and stops it.
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "backend_fixture.hpp"

namespace fairlane {
namespace {

using test::RedisCluster;

const BrandedId kGroups[] = {BrandedId::make("AAA", 1), BrandedId::make("BBB", 1), BrandedId::make("CCC", 1),
                             BrandedId::make("DDD", 1)};

ValkeyOptions patient() {
  ValkeyOptions o;
  o.cluster_retry_budget = std::chrono::milliseconds(60'000);
  return o;
}

// A producer of `total` jobs and `consumers` consumers on the queue at
// `url`; `during` runs on the test's thread once `start_after` jobs are in.
struct Workload {
  std::string url;
  int total = 1500;
  int consumers = 2;
  int start_after = 600;

  std::mutex mu;
  std::set<BrandedId> enqueued;
  std::map<BrandedId, int> completed;  // ok acknowledgements per id
  std::map<BrandedId, int> claims;
  std::atomic<int> produced{0};
  std::atomic<bool> producer_done{false};
  std::atomic<bool> go{false};  // consumers start with `during`, so a backlog is there to move
  std::atomic<int> errors{0};
  std::string first_error;

  void note_error(const std::string& what) {
    std::lock_guard lk(mu);
    if (errors++ == 0) first_error = what;
  }

  template <class F>
  void run(F&& during) {
    std::thread producer([&] {
      try {
        auto b = open_valkey(url, patient());
        if (!b) throw BackendError(b.error().message);
        for (int i = 0; i < total; ++i) {
          const BrandedId id = (*b)->mint();
          const EnqueueStatus st = (*b)->enqueue(kGroups[i % 4], id, "job " + std::to_string(i));
          // A resend after a dropped connection may report its own first run.
          if (st != EnqueueStatus::enqueued && st != EnqueueStatus::duplicate) note_error("enqueue: " + std::string(to_string(st)));
          {
            std::lock_guard lk(mu);
            enqueued.insert(id);
          }
          produced.fetch_add(1);
        }
      } catch (const std::exception& e) {
        note_error(std::string("producer: ") + e.what());
      }
      producer_done = true;
    });
    std::vector<std::thread> workers;
    for (int c = 0; c < consumers; ++c)
      workers.emplace_back([&] {
        try {
          auto b = open_valkey(url, patient());
          if (!b) throw BackendError(b.error().message);
          int idle = 0;
          go.wait(false);
          for (;;) {
            Lease l;
            if ((*b)->claim_wait(l, 600'000, std::chrono::milliseconds(200))) {
              idle = 0;
              {
                std::lock_guard lk(mu);
                claims[l.id]++;
              }
              const AckStatus st = (*b)->complete(l.id, l.token);
              std::lock_guard lk(mu);
              if (st == AckStatus::ok) completed[l.id]++;
              else if (st != AckStatus::gone) note_error("complete: " + std::string(to_string(st)));  // gone: a resend
              continue;
            }
            if (producer_done && ++idle >= 3) {
              const Snapshot s = (*b)->snapshot();
              if (s.pending == 0 && s.leased == 0 && s.scheduled == 0) break;
            }
          }
        } catch (const std::exception& e) {
          note_error(std::string("consumer: ") + e.what());
        }
      });
    // A liveness wait for the workload to be under way (bounded).
    RedisCluster::wait([&] { return produced.load() >= start_after || producer_done.load(); });
    go = true;
    go.notify_all();
    during();
    producer.join();
    for (auto& w : workers) w.join();
  }

  void check() {
    EXPECT_EQ(errors.load(), 0) << first_error;
    EXPECT_EQ(int(enqueued.size()), total);
    std::size_t missing = 0, twice = 0;
    for (const auto& id : enqueued) {
      auto it = completed.find(id);
      if (it == completed.end()) ++missing;
      else if (it->second > 1) ++twice;
    }
    EXPECT_EQ(missing, 0U) << "jobs never completed";
    EXPECT_EQ(twice, 0U) << "jobs completed twice";
    std::size_t redelivered = 0;
    for (const auto& [id, n] : claims) redelivered += n > 1;
    EXPECT_EQ(redelivered, 0U) << "leases never expire here: nothing may be delivered twice";
  }
};

class ClusterTest : public ::testing::Test {
 protected:
  void start(int replicas) {
    std::string error;
    cluster_ = RedisCluster::start(FAIRLANE_REDIS_SERVER, error, 3, replicas);
    if (!cluster_) FAIRLANE_SKIP_OR_FAIL("needs redis-server in cluster mode: " + error);
    queue_ = test::unique_segment_name();
    slot_ = std::atoi(RedisCluster::command(cluster_->port(0), {"CLUSTER", "KEYSLOT", "emq:{" + queue_ + "}:ring"}).c_str());
  }
  std::string url() const { return cluster_->url(queue_); }
  std::unique_ptr<RedisCluster> cluster_;
  std::string queue_;
  int slot_ = 0;
};

TEST_F(ClusterTest, AnyOneNodeOrASeedListFindsTheQueue) {
  start(0);
  if (!cluster_) return;
  const int owner = cluster_->owner_of(slot_);
  ASSERT_GE(owner, 0);
  for (int i = 0; i < 3; ++i) {
    auto b = ValkeyBackend::open("valkey://127.0.0.1:" + std::to_string(cluster_->port(i)) + "/" + queue_);
    ASSERT_TRUE(b.ok()) << b.error().message;
    EXPECT_TRUE((*b)->cluster());
    EXPECT_EQ((*b)->serving_node(), "127.0.0.1:" + std::to_string(cluster_->port(owner)));
    ASSERT_EQ((*b)->enqueue(kGroups[0], (*b)->mint(), "x"), EnqueueStatus::enqueued);
  }
  // A seed list whose first node is gone still finds it.
  auto dead_first = ValkeyBackend::open("valkey://127.0.0.1:1," + std::string("127.0.0.1:") +
                                        std::to_string(cluster_->port(2)) + "/" + queue_);
  ASSERT_TRUE(dead_first.ok()) << dead_first.error().message;
  EXPECT_EQ((*dead_first)->depth(kGroups[0]), 3U);
  // Every key of the queue is on the owner.
  const std::string n = RedisCluster::command(cluster_->port(owner), {"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot_)});
  EXPECT_GT(std::atoi(n.c_str()), 3);
}

TEST_F(ClusterTest, ALiveReshardOfTheQueuesSlotLosesNothing) {
  start(0);
  if (!cluster_) return;
  const int src = cluster_->owner_of(slot_);
  ASSERT_GE(src, 0);
  const int dst = (src + 1) % 3;
  auto& nodes = cluster_->nodes();
  const std::string slot = std::to_string(slot_);
  Workload w;
  w.url = url();
  std::size_t batches = 0;
  w.run([&] {
    // As redis-cli --cluster reshard does it: importing, migrating, keys in
    // batches of 3 with MIGRATE (redis-cli's --cluster-pipeline), then the slot's new owner everywhere.
    std::string err;
    ASSERT_EQ(cluster_->reply_str(nodes[dst], {"CLUSTER", "SETSLOT", slot, "IMPORTING", nodes[src].id}, &err), "OK") << err;
    ASSERT_EQ(cluster_->reply_str(nodes[src], {"CLUSTER", "SETSLOT", slot, "MIGRATING", nodes[dst].id}, &err), "OK") << err;
    for (;;) {
      const std::string keys = cluster_->reply_str(nodes[src], {"CLUSTER", "GETKEYSINSLOT", slot, "3"});
      if (keys.empty()) break;
      std::vector<std::string> cmd = {"MIGRATE", "127.0.0.1", std::to_string(cluster_->port(dst)), "", "0", "5000", "KEYS"};
      std::size_t from = 0;
      while (from < keys.size()) {
        const std::size_t nl = keys.find('\n', from);
        cmd.push_back(keys.substr(from, nl - from));
        from = nl + 1;
      }
      err.clear();
      const std::string r = cluster_->reply_str(nodes[src], cmd, &err);
      ASSERT_TRUE(r == "OK" || r == "NOKEY") << "MIGRATE: " << r << err;
      ++batches;
      std::this_thread::yield();  // let the workload's commands interleave with the batches
    }
    for (int i : {dst, src, (src + 2) % 3})
      ASSERT_EQ(cluster_->reply_str(nodes[i], {"CLUSTER", "SETSLOT", slot, "NODE", nodes[dst].id}, &err), "OK") << err;
  });
  w.check();
  EXPECT_GT(batches, 1U) << "the slot moved in one batch: the test did not interleave";
  EXPECT_EQ(cluster_->owner_of(slot_), dst);
  auto b = ValkeyBackend::open(url());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->serving_node(), "127.0.0.1:" + std::to_string(cluster_->port(dst)));
  EXPECT_EQ((*b)->snapshot().counters.completed, std::uint64_t(w.total));
  std::printf("reshard: %zu MIGRATE batches of 3 keys while %d jobs went through\n", batches, w.total);
}

TEST_F(ClusterTest, AManualFailoverIsFollowedWhileWorkRuns) {
  start(1);
  if (!cluster_) return;
  const int master = cluster_->owner_of(slot_);
  ASSERT_GE(master, 0);
  ASSERT_LT(master, 3);
  const int replica = 3 + master;  // RedisCluster makes node 3 + m the replica of master m
  auto& nodes = cluster_->nodes();
  Workload w;
  w.url = url();
  w.run([&] {
    std::string err;
    ASSERT_EQ(cluster_->reply_str(nodes[replica], {"CLUSTER", "FAILOVER"}, &err), "OK") << err;
    // The replica takes the slot over (a bounded liveness wait on the
    // servers' own view).
    ASSERT_TRUE(RedisCluster::wait([&] { return cluster_->owner_of(slot_) == replica; }))
        << "the replica never became the slot's master";
  });
  w.check();
  auto b = ValkeyBackend::open(url());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->serving_node(), "127.0.0.1:" + std::to_string(cluster_->port(replica)));
}

}  // namespace
}  // namespace fairlane
