// Peer: fairlane itself, one named segment.
//
// setup() creates the segment sized for the run (jobs >= twice the backlog,
// a lane per tenant plus the default lane); workers open it. Each producer
// mints a job id per job (the shared lock-free mint) and enqueues it under
// the tenant's group; each consumer claims (ring rotation + lease) and
// completes with the attempt token; a parked consumer is claim_wait on the
// segment's futex. Threads of one worker process share one Queue handle.
#include <unistd.h>

#include <memory>
#include <optional>

#include "fairlane/queue.hpp"
#include "peer.hpp"

namespace fairlane::bench {
namespace {

std::uint32_t pow2_at_least(std::uint64_t v) {
  std::uint64_t p = 1024;
  while (p < v) p <<= 1;
  return std::uint32_t(p);
}

class FairlanePeer final : public Peer {
 public:
  std::string_view name() const noexcept override { return "fairlane"; }
  std::string_view what() const noexcept override {
    return "named shm segment: mint + enqueue; claim (ring rotation, lease) + complete (fenced)";
  }

  bool setup(const Params& p, std::string& info, std::string& error) override {
    name_ = "fairlane-bench-" + std::to_string(getpid());
    (void)fairlane::Queue::remove(name_);
    fairlane::QueueOptions o;
    o.jobs = pow2_at_least(std::max(p.backlog * 2, p.drain_jobs + p.backlog) + 1024);
    o.lanes = std::max<std::uint32_t>(p.lanes + 1, 64);
    o.payload_bytes = p.payload;
    auto q = fairlane::Queue::create(name_, o);
    if (!q) {
      error = "Queue::create " + name_ + ": " + q.error().message;
      name_.clear();
      return false;
    }
    bytes_ = q->config().segment_bytes;
    info = "segment=" + name_;
    return true;
  }

  bool attach(const Params& p, std::string_view info, std::string& error) override {
    auto name = std::string(info.substr(info.find('=') + 1));
    auto q = fairlane::Queue::open(name);
    if (!q) {
      error = "Queue::open " + name + ": " + q.error().message;
      return false;
    }
    q_.emplace(std::move(q).value());
    groups_.resize(p.lanes);
    for (std::uint32_t i = 0; i < p.lanes; ++i) groups_[i] = fairlane::BrandedId::make("TEN", i + 1);
    return true;
  }

  void producer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    fairlane::BrandedId id;
    ctx.produce([&](std::uint32_t lane, const char* data, std::uint32_t len) {
      if (!id.valid()) id = q.mint();  // a refused job is offered again under the same id
      const auto st = q.enqueue(groups_[lane], id, std::string_view(data, len));
      if (st == fairlane::EnqueueStatus::enqueued) {
        id = {};
        return true;
      }
      if (st != fairlane::EnqueueStatus::full) {
        ctx.fail("fairlane enqueue: " + std::string(fairlane::to_string(st)));
        id = {};
      }
      return false;
    }, [] {});
  }

  void consumer_loop(WorkerCtx& ctx) override {
    auto& q = *q_;
    const std::uint32_t lease_ms = ctx.params().lease_ms;
    fairlane::Lease lease;
    lease.payload.reserve(ctx.params().payload);
    ctx.consume(
        [&]() -> const char* { return q.claim(lease, lease_ms) ? lease.payload.data() : nullptr; },
        [&] {
          const auto st = q.complete(lease.id, lease.token);
          if (st != fairlane::AckStatus::ok) ctx.fail("fairlane complete: " + std::string(fairlane::to_string(st)));
        },
        [&](int timeout_ms) -> const char* {
          return q.claim_wait(lease, lease_ms, std::chrono::milliseconds(timeout_ms)) ? lease.payload.data()
                                                                                     : nullptr;
        });
  }

  void detach() override { q_.reset(); }

  void teardown() override {
    if (!name_.empty()) (void)fairlane::Queue::remove(name_);
    name_.clear();
  }

  std::uint64_t shared_bytes() const override { return bytes_; }

 private:
  std::string name_;
  std::uint64_t bytes_ = 0;
  std::optional<fairlane::Queue> q_;
  std::vector<fairlane::BrandedId> groups_;
};

}  // namespace

std::unique_ptr<Peer> make_fairlane_peer() { return std::make_unique<FairlanePeer>(); }

}  // namespace fairlane::bench
